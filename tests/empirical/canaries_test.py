"""Tests of canary clients inside training (--canaries)."""

import math
import os
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from dpftrl_tff import console
from dpftrl_tff import strict_json
from dpftrl_tff.aggregators import dp_ftrl
from dpftrl_tff.data import stackoverflow
from dpftrl_tff.empirical import canaries as canaries_lib
from dpftrl_tff.empirical import exposure
from dpftrl_tff.privacy import privacy_report
from dpftrl_tff.privacy import run_privacy
from dpftrl_tff.run import learning_process
from tests import fixtures
from tests.run import training_test


def _directions(canaries, ks, dimension):
  return np.stack([canaries_lib._flat_direction(  # pylint: disable=protected-access
      tf.constant(canaries.seed, tf.int64), tf.constant(k, tf.int64),
      dimension).numpy().astype(np.float64) for k in ks])


class MarkingTest(absltest.TestCase):

  def test_marked_key_yields_one_marker_batch(self):
    real = tf.data.Dataset.from_tensors(
        (tf.ones([2, 3], tf.int64), tf.ones([2, 3], tf.int64)))
    key = stackoverflow.mark_round_keys([stackoverflow.client_round_key(7, 'client:a')],
                               ['client:a'], {'client:a': 12}, 'canary')[0]
    batches = list(canaries_lib.mark_dataset(real, tf.constant(key), 3))
    self.assertLen(batches, 1)
    np.testing.assert_array_equal(batches[0][0], [[-13, -13, -13]])
    plain = stackoverflow.client_round_key(7, 'canary5|x')   # A client named so.
    batches = list(canaries_lib.mark_dataset(real, tf.constant(plain), 3))
    np.testing.assert_array_equal(batches[0][0], np.ones([2, 3]))

  def test_canary_index_reads_the_marker_without_dataset_functions(self):
    real = tf.data.Dataset.from_tensors(
        (tf.ones([2, 3], tf.int64), tf.ones([2, 3], tf.int64))).repeat(2)
    key = stackoverflow.mark_round_keys([stackoverflow.client_round_key(7, 'client:a')],
                               ['client:a'], {'client:a': 12}, 'canary')[0]
    marked = canaries_lib.mark_dataset(real, tf.constant(key), 3)
    index = canaries_lib._canary_index   # pylint: disable=protected-access
    self.assertEqual(int(index(marked)), 12)
    self.assertEqual(int(index(real)), -1)
    self.assertEqual(int(index(real.take(0))), -1)   # An empty client.
    # The marking and the index are count-based: no filter, map or reduce
    # function (a graph function per client is what the hang involved).
    graph = tf.function(
        lambda key: index(canaries_lib.mark_dataset(real, key, 3))
    ).get_concrete_function(tf.TensorSpec([], tf.string)).graph
    ops = {op.type for op in graph.get_operations()}
    self.assertFalse(ops & {'FilterDataset', 'ReduceDataset', 'MapDataset'},
                     ops)

  def test_keys_mark_only_the_canaries_in_cohort_order(self):
    canaries = canaries_lib.Canaries(count=2, seed=3, norm=1.0,
                                     client_indices=(4, 1))
    run = canaries_lib.CanaryRun.__new__(canaries_lib.CanaryRun)
    run._k_of = {'c4': 0, 'c1': 1}   # pylint: disable=protected-access
    run.canaries = canaries
    self.assertEqual(run.keys(['0:c1', '0:c2', '0:c4'], ['c1', 'c2', 'c4']),
                     ['canary1|0:c1', '0:c2', 'canary0|0:c4'])

  def test_choice_is_a_function_of_the_seed(self):
    a = canaries_lib.choose(5, seed=9, num_clients=50, norm=2.0)
    self.assertEqual(a, canaries_lib.choose(5, seed=9, num_clients=50,
                                            norm=2.0))
    self.assertLen(set(a.client_indices), 5)
    self.assertNotEqual(a.client_indices, canaries_lib.choose(
        5, seed=10, num_clients=50, norm=2.0).client_indices)


class CanaryTrainingTest(absltest.TestCase):

  def test_canary_update_takes_the_clipped_mean_path(self):
    # z = 0, no momentum, server lr 1, one round: theta_0 - theta_1 is the
    # mean over the cohort of the clipped updates, here all canaries:
    # (C / m) sum_k u_k exactly. Bypassing the clip (norm 100 C), the mean
    # or the substitution changes it.
    cache = training_test.cache_dir()
    num_clients = len(stackoverflow.load_stackoverflow(cache)[0].client_ids)
    config = training_test.tiny_config(
        total_rounds=1, clients_per_round=4, noise_multiplier=0.0,
        server_momentum=0.0, rounds_per_eval=1,
        canaries=num_clients - 1)
    with tempfile.TemporaryDirectory() as d:
      summary = training_test.train(config, d)
      final = training_test._weights(d)   # pylint: disable=protected-access
    model = learning_process.build_keras_model(config)
    initial = [w.numpy() for w in model.trainable_weights]
    delta = np.concatenate([np.ravel(a.astype(np.float64) - b)
                            for a, b in zip(initial, final)])
    canaries = canaries_lib.choose(
        config.canaries, seed=config.seed, num_clients=num_clients,
        norm=canaries_lib.default_norm(config.clip_norm))
    empirical = summary['empirical_privacy']
    seen = empirical['canary_participations']
    self.assertEqual(seen['max'], 1)
    self.assertEqual(config.canaries - seen['never'], 4)   # All canaries.
    k_of = canaries.index_of()
    cohort = config.build_sampler(num_clients).sample(0)
    chosen = [k_of[int(c)] for c in cohort]   # KeyError: a real client.
    expected = config.clip_norm / 4 * _directions(
        canaries, chosen, delta.size).sum(axis=0)
    np.testing.assert_allclose(delta, expected, atol=1e-6)

  def test_estimate_is_in_summary_report_and_console_and_resumes(self):
    config = training_test.tiny_config(
        total_rounds=4, clients_per_round=10, canaries=100,
        canary_phrases=3, canary_phrase_repeats=20, exposure_candidates=500,
        rounds_per_checkpoint=2, rounds_per_eval=4)
    # Three runs of one config: one build.
    self.enter_context(fixtures.reused_builds())
    with tempfile.TemporaryDirectory() as whole, \
        tempfile.TemporaryDirectory() as resumed:
      summary = training_test.train(config, whole)
      fixtures.assert_metrics_documented(
          self, os.path.join(whole, 'metrics.csv'))
      self.assertIn('empirical_epsilon', summary['empirical_privacy'])
      self.assertNotIn('not_estimated', summary['empirical_privacy'],
                       summary['empirical_privacy'])
      training_test.train(config, resumed, stop_after_round=2)
      again = training_test.train(config, resumed)
      for d in (whole, resumed):
        self.assertTrue(os.path.exists(os.path.join(d,
                                                    'empirical_privacy.png')))
      path = canaries_lib.ROUND_COSINES_FILE
      np.testing.assert_array_equal(
          np.fromfile(os.path.join(whole, path), np.float32),
          np.fromfile(os.path.join(resumed, path), np.float32))
      self.assertEqual(os.path.getsize(os.path.join(whole, path)),
                       4 * 200 * 4)   # 4 rounds x 2K float32.
      report = open(os.path.join(whole, privacy_report.FILE_NAME)).read()
      saved = strict_json.load(os.path.join(whole, 'summary.json'))
    empirical = summary['empirical_privacy']
    self.assertEqual(strict_json.sanitize(empirical),
                     strict_json.sanitize(again['empirical_privacy']))
    self.assertEqual(saved['empirical_privacy'],
                     strict_json.sanitize(empirical))
    self.assertEqual(empirical['accounted_epsilon'],
                     run_privacy.accounted(summary)['epsilon'])
    self.assertEqual(empirical['unseen_canaries'], 100)
    self.assertIn('all_iterates', empirical)
    self.assertIn('One-shot empirical estimate', report)
    self.assertIn('all iterates (max over rounds', report)
    text = console.summary_text(summary)
    self.assertIn('Empirical privacy, final model (canary estimate, not a '
                  'bound)', text)
    self.assertIn('accounted epsilon (the bound had the noise been '
                  'unpredictable; this run has none): '
                  f'{run_privacy.accounted(summary)["epsilon"]:.3f}', text)
    # The phrases (on other clients than the canaries) and their exposure.
    block = summary['exposure']
    self.assertEqual(strict_json.sanitize(block),
                     strict_json.sanitize(again['exposure']))
    self.assertEqual((block['phrases'], block['repeats'],
                      block['candidates']), (3, 20, 500))
    self.assertAlmostEqual(block['max_rank_exposure'], math.log2(501))
    for row in block['per_phrase']:
      self.assertBetween(row['exposure'], 0.0, math.log2(501))
      self.assertBetween(row['rank'], 1, 501)
    cache = training_test.cache_dir()
    num_clients = len(stackoverflow.load_stackoverflow(cache)[0].client_ids)
    canaries = canaries_lib.choose(100, seed=config.seed,
                                   num_clients=num_clients, norm=1.0)
    phrases = exposure.choose(
        3, repeats=20, length=5, seed=config.seed, num_clients=num_clients,
        num_words=len(stackoverflow.load_vocab(cache, config.vocab_size)),
        exclude=canaries.client_indices)
    sampler = config.build_sampler(num_clients)
    cohorts = [set(int(c) for c in sampler.sample(r)) for r in range(4)]
    self.assertEqual(
        [r['participations'] for r in block['per_phrase']],
        [sum(len(cohort & set(group)) for cohort in cohorts)
         for group in phrases.clients])
    self.assertIn('Exposure of 3 canary phrases (20 client(s) each', text)

  def test_a_broken_noise_path_is_caught_in_training(self):
    # The same run twice: as configured, and with the factory's noise
    # divided by 10 while the accountant still counts the configured z (an
    # implementation mistake). The lower end of the all-iterates interval
    # stays below the accounted epsilon in the first and rises above it in
    # the second (measured: 25.5 and 111.8 against 59.5). The point
    # estimate of the configured run, 101, is itself above the bound: at 4
    # rounds and 100 canaries the one-shot estimate is biased up (see
    # docs/empirical_privacy.md), so only the interval is compared.
    config = training_test.tiny_config(
        total_rounds=4, clients_per_round=10, canaries=100,
        rounds_per_eval=4)
    build = dp_ftrl.build_dp_ftrl_factory

    def broken(*, noise_multiplier, **kwargs):
      return build(noise_multiplier=noise_multiplier / 10, **kwargs)

    estimates = {}
    for name in ('configured', 'broken'):
      with tempfile.TemporaryDirectory() as d:
        if name == 'broken':
          with mock.patch.object(dp_ftrl, 'build_dp_ftrl_factory', broken):
            summary = training_test.train(config, d)
        else:
          summary = training_test.train(config, d)
      estimates[name] = summary['empirical_privacy']['all_iterates']
      accounted = run_privacy.accounted(summary)['epsilon']
    self.assertLess(estimates['configured']['epsilon_interval'][0], accounted)
    self.assertGreater(estimates['broken']['epsilon_interval'][0], accounted,
                       (estimates, accounted))

  def test_bad_canary_flags_name_the_flag(self):
    for overrides, text in (
        (dict(canaries=1), '--canaries'),
        (dict(canaries=10**6), '--canaries=1000000 .* need 1000000 of the '
         '200 training clients'),
        (dict(canary_phrases=50, canary_phrase_repeats=4),
         '--canary_phrase_repeats=4 need 200 of the 200'),
        (dict(canary_phrase_length=20), '--canary_phrase_length'),
        (dict(canary_phrases=2, workers='localhost:1'),
         'leave out --workers'),
        (dict(canaries=4, canary_norm=-1.0), '--canary_norm'),
        (dict(canaries=4, workers='localhost:1'), 'leave out --workers')):
      with self.subTest(overrides=overrides):
        with self.assertRaisesRegex(ValueError, text):
          training_test.tiny_config(**overrides).check_data(200)


class BrokenMechanismInTrainingTest(parameterized.TestCase):
  """Every other mechanism's noise path, broken, is caught in training.

  The tree is checked both ways in `CanaryTrainingTest`; each mechanism
  alone, both ways, in `canary_audit_test`. Here the mechanism's factory,
  inside a training run with canaries, gets a tenth of the noise the
  accountant counts: the lower end of the all-iterates interval must rise
  above the accounted epsilon.
  """

  @parameterized.named_parameters(
      ('tree_secagg', dict(secagg=True, secagg_scale=1000.0)),
      # Starting from the fixed runs' clip: from a small one every real
      # update is clipped, and their sum drowns the canaries' cosines.
      ('adaptive', dict(aggregator='dp_ftrl_adaptive', initial_clip_norm=0.5,
                        clipped_count_stddev=10.0)),
      ('blt', dict(aggregator='dp_ftrl_blt')))
  def test_broken_noise_is_caught(self, overrides):
    config = training_test.tiny_config(
        total_rounds=4, clients_per_round=10, canaries=100,
        rounds_per_eval=4, **overrides)
    with fixtures.broken_noise(config.aggregator, 10):
      with tempfile.TemporaryDirectory() as d:
        summary = training_test.train(config, d)
    estimate = summary['empirical_privacy']['all_iterates']
    accounted = run_privacy.accounted(summary)['epsilon']
    print(f'{self._testMethodName}: accounted {accounted:.2f}, noise / 10 '
          f'{estimate["empirical_epsilon"]:.2f} '
          f'{estimate["epsilon_interval"]}')
    self.assertGreater(estimate['epsilon_interval'][0], accounted,
                       (estimate, accounted))


if __name__ == '__main__':
  absltest.main()
