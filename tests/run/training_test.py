"""Tests of the training loop and the training binary."""

import csv
import errno
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dpftrl_tff import accounting
from dpftrl_tff import console
from dpftrl_tff import runtime
from dpftrl_tff import strict_json
from dpftrl_tff.data import stackoverflow
from dpftrl_tff.data import synthetic
from dpftrl_tff.privacy import run_privacy
from dpftrl_tff.run import learning_process
from dpftrl_tff.run import round_record
from dpftrl_tff.run import run_directory
from dpftrl_tff.run import training
from dpftrl_tff.tff_compat import worker
from tests import fixtures
from tests.privacy import privacy_report_test

ROOT = fixtures.ROOT


def cache_dir():
  return fixtures.generated_cache(210, 400, 1)


def tiny_config(**overrides):
  values = dict(
      total_rounds=4, clients_per_round=4, client_lr=0.5, server_lr=1.0,
      vocab_size=100, latent_size=8, embedding_size=4,
      max_elements_per_client=8, rounds_per_eval=2, num_eval_examples=100,
      rounds_per_checkpoint=1, aggregator='dp_ftrl', noise_multiplier=0.5,
      clip_norm=0.5, noise_seed=11, seed=5)
  values.update(overrides)
  return training.TrainConfig(**values)


def train(config, output_dir, print_fn=lambda s: None, **kwargs):
  train_data, heldout, _ = stackoverflow.load_stackoverflow(cache_dir())
  vocab = stackoverflow.load_vocab(cache_dir(), config.vocab_size)
  return training.train(config, train_data=train_data, eval_data=heldout,
                        vocab=vocab, output_dir=output_dir,
                        print_fn=print_fn, **kwargs)


def _tensorboard_events(output_dir):
  """(tag, step) of every scalar event in the run's TensorBoard files."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  folder = os.path.join(output_dir, 'tensorboard')
  events = []
  for name in os.listdir(folder):
    for event in tf.compat.v1.train.summary_iterator(
        os.path.join(folder, name)):
      for value in event.summary.value:
        events.append((value.tag, event.step))
  return events


def _privacy_report(output_dir):
  with open(os.path.join(output_dir, 'privacy_report.md')) as f:
    return f.read()


def _weights(output_dir):
  with np.load(os.path.join(output_dir, training.FINAL_WEIGHTS_FILE)) as f:
    return [f[k] for k in sorted(f.files, key=lambda k: int(k.split('_')[1]))]


class TrainingLoopTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # Most tests train tiny_config()s with its fixed noise seed: one build
    # for the class (nothing here patches what a build runs).
    cls.enter_context(fixtures.reused_builds())

  def test_equal_configs_share_one_build(self):
    config = tiny_config()
    built = learning_process.build_learning_process(config)
    self.assertIs(learning_process.build_learning_process(tiny_config()),
                  built)

  def test_initial_state_holds_the_seeded_model(self):
    config = tiny_config(aggregator='none', noise_multiplier=0.0)
    process = learning_process.build_learning_process(config)
    zeros = process.get_model_weights(process.initialize()).trainable
    # TFF's own initialize() has the zero-initialized model of model_fn.
    self.assertTrue(all(not np.any(w) for w in zeros))
    state = learning_process.initial_state(process, config)
    expected = learning_process.build_keras_model(config).get_weights()
    got = process.get_model_weights(state).trainable
    self.assertLen(got, len(expected))
    for g, e in zip(got, expected):
      np.testing.assert_array_equal(g, e)
    self.assertTrue(any(np.any(w) for w in got))

  def test_worker_built_datasets_equal_python_built_ones(self):
    # A round given client ids (TFF's worker builds the datasets) equals a
    # round given the same clients' datasets built in Python.
    # Client shuffling included: the key carries the round's seed.
    config = tiny_config(aggregator='none', noise_multiplier=0.0)
    train_data, _, _ = stackoverflow.load_stackoverflow(cache_dir())
    vocab = stackoverflow.load_vocab(cache_dir(), config.vocab_size)
    preprocess = stackoverflow.build_preprocess_fn(
        vocab, sequence_length=config.sequence_length,
        max_elements_per_client=config.max_elements_per_client,
        batch_size=config.client_batch_size, shuffle_buffer_size=100)
    process = learning_process.build_learning_process(config)
    by_id = learning_process.taking_client_ids(process, train_data, preprocess)
    state = learning_process.initial_state(process, config)
    keys = [stackoverflow.client_round_key(12345, c)
            for c in train_data.client_ids[3:7]]
    a = by_id.next(state, keys)
    b = process.next(state, [
        stackoverflow.build_client_dataset(train_data, preprocess, k) for k in keys])
    self.assertEqual(str(a.metrics), str(b.metrics))
    for x, y in zip(process.get_model_weights(a.state).trainable,
                    process.get_model_weights(b.state).trainable):
      np.testing.assert_array_equal(x, y)
    self.assertGreater(
        float(a.metrics['client_work']['train']['num_examples']), 0)

  def test_client_data_without_dataset_fn_has_no_computation(self):
    self.assertIsNone(stackoverflow.build_client_dataset_computation(
        object(), lambda ds: ds))

  def test_resumed_timer_run_equals_uninterrupted_run(self):
    # The timer model is stateful: a resumed run replays its rounds.
    config = dict(participation='timer', timer_hours=1.0, round_minutes=20.0,
                  daily_active_fraction=0.9, availability_hours=24.0)
    root = tempfile.mkdtemp()
    full = os.path.join(root, 'full')
    first = train(tiny_config(**config), full)
    killed = os.path.join(root, 'killed')
    train(tiny_config(**config), killed, stop_after_round=2)
    resumed = train(tiny_config(**config), killed)
    for a, b in zip(_weights(full), _weights(killed)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    self.assertEqual(first['participation'], resumed['participation'])
    self.assertEqual(run_privacy.accounted(first)['zcdp'],
                     run_privacy.accounted(resumed)['zcdp'])
    fixtures.assert_metrics_documented(
        self, os.path.join(killed, training.METRICS_FILE))
    with open(os.path.join(killed, training.METRICS_FILE)) as f:
      rows = list(csv.DictReader(f))
    self.assertEqual([float(r['participation_simulated_hours'])
                      for r in rows], [0.0, 20 / 60, 40 / 60, 1.0])

  @parameterized.named_parameters(
      ('tree', 'dp_ftrl'),
      ('blt', 'dp_ftrl_blt'),   # The BLT buffers continue after resuming.
      ('bandmf', 'dp_ftrl_bandmf'))   # And BandMF's.
  def test_resumed_run_equals_uninterrupted_run(self, aggregator):
    root = tempfile.mkdtemp()
    full = os.path.join(root, 'full')
    # metrics.png (a checkpoint every round): at the end, and in between
    # only once PLOT_EVERY_SECONDS have passed, not at the first round.
    plotted = []   # The rounds each metrics.png showed.
    plot = run_directory.MetricsWriter.plot

    def counting_plot(writer):
      plotted.append(len(writer.rows))
      plot(writer)
    with mock.patch.object(run_directory.MetricsWriter, 'plot',
                           counting_plot):
      with mock.patch.object(round_record, 'PLOT_EVERY_SECONDS', 1e9):
        train(tiny_config(aggregator=aggregator), full)
      self.assertEqual(plotted, [4])
      del plotted[:]
      killed = os.path.join(root, 'killed')
      with mock.patch.object(round_record, 'PLOT_EVERY_SECONDS', 0.0):
        summary = train(tiny_config(aggregator=aggregator), killed,
                        stop_after_round=2)
      self.assertEqual(plotted, [1, 2])
    self.assertTrue(os.path.isfile(os.path.join(killed, 'metrics.png')))
    self.assertEqual(summary['rounds'], 2)
    final = train(tiny_config(aggregator=aggregator), killed)  # from round 2
    for a, b in zip(_weights(full), _weights(killed)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    if aggregator == 'dp_ftrl_blt':
      self.assertEqual(run_privacy.accounted(final)['mechanism'], 'blt')
      with open(os.path.join(killed, 'blt.json')) as f:
        saved = strict_json.load_file(f)
      # Optimized for T = 4 and the population's MinS (capped at T - 1).
      self.assertEqual(saved['optimized_for']['rounds'], 4)
      self.assertEqual(saved['optimized_for']['min_separation'], 3)
      return
    if aggregator == 'dp_ftrl_bandmf':
      accounted = run_privacy.accounted(final)
      self.assertEqual(accounted['mechanism'], 'bandmf')
      with open(os.path.join(killed, 'bandmf.json')) as f:
        saved = strict_json.load_file(f)
      # Planned: the population's MinS + 1 bands, at most T = 4.
      self.assertEqual(
          (saved['rounds'], saved['bands'], saved['source']),
          (4, 4, 'optimized for the mean error'))
      self.assertEqual(accounted['bandmf']['bands'], 4)
      # Uniform participation: the observed MinS may be below 3, where
      # the bound, not the exact value, applies; either way it is stated.
      self.assertIn(accounted['bandmf']['sensitivity'],
                    (accounting.BANDMF_EXACT, accounting.BANDMF_UPPER_BOUND))
      with self.assertRaisesRegex(ValueError, '--total_rounds=5: this '
                                  'run\'s BandMF C .* is for 4 rounds'):
        train(tiny_config(aggregator=aggregator, total_rounds=5), killed)
      return
    with open(os.path.join(killed, training.METRICS_FILE)) as f:
      resumed_rows = list(csv.DictReader(f))
    self.assertEqual([int(r['round']) for r in resumed_rows], [1, 2, 3, 4])
    with open(os.path.join(full, training.METRICS_FILE)) as f:
      full_rows = list(csv.DictReader(f))
    # Written as the uninterrupted run writes them, character for character
    # (but the rounds' wall times).
    for row in full_rows + resumed_rows:
      del row['round_seconds']
    self.assertEqual(resumed_rows, full_rows)
    with open(os.path.join(full, training.METRICS_FILE)) as f:
      rows = list(csv.DictReader(f))
    self.assertIn('eval_in_vocab_accuracy', rows[1])
    self.assertIn('server_update_norm', rows[0])
    self.assertIn('aggregator_average_client_norm', rows[0])
    self.assertTrue(os.listdir(os.path.join(full, 'tensorboard')))
    with open(os.path.join(full, training.HPARAMS_FILE)) as f:
      self.assertEqual(strict_json.load_file(f)['noise_multiplier'], 0.5)
    with open(os.path.join(full, training.SUMMARY_FILE)) as f:
      summary = strict_json.load_file(f)
    self.assertGreater(run_privacy.accounted(summary)['zcdp'], 0)
    # Top-1 and top-3 in every evaluation, with their unigram baselines.
    final = summary['final_eval']
    self.assertBetween(final['in_vocab_top3_accuracy'],
                       final['in_vocab_accuracy'], 1.0)
    self.assertBetween(summary['unigram_top3_baseline_accuracy'],
                       summary['unigram_baseline_accuracy'], 1.0)
    self.assertEqual(float(full_rows[-1]['eval_in_vocab_top3_accuracy']),
                     final['in_vocab_top3_accuracy'])
    self.assertIn(', top-3 ', console.summary_text(summary))
    # A fixed --noise_seed: no guarantee is stated, the figures are labelled.
    self.assertIsNone(summary['privacy'])
    self.assertEqual(
        summary[run_privacy.UNPREDICTABLE_NOISE_KEY]['noise_seed'], 11)
    report = _privacy_report(full)
    self.assertIn('No differential privacy guarantee', report)
    self.assertNotIn('satisfies', report)
    # train() without a data description: the vocabulary's source unknown.
    self.assertIn('- Vocabulary: its source was not recorded', report)
    self.assertIn('Privacy: NONE. --noise_seed=11',
                  console.summary_text(summary))

  def test_dp_fedavg_with_poisson_sampling(self):
    from dpftrl_tff.accounting import sampled_gaussian  # pylint: disable=g-import-not-at-top
    out = os.path.join(tempfile.mkdtemp(), 'fedavg')
    summary = train(tiny_config(aggregator='dp_fedavg',
                                participation='poisson',
                                clients_per_round=8), out)
    train_data, _, _ = stackoverflow.load_stackoverflow(cache_dir())
    q = 8 / len(train_data.client_ids)
    accounted = run_privacy.accounted(summary)
    self.assertEqual(accounted['mechanism'], 'poisson_gaussian')
    self.assertIsNone(accounted['zcdp'])
    self.assertAlmostEqual(accounted['poisson']['sampling_probability'], q)
    self.assertEqual(accounted['epsilon'],
                     sampled_gaussian.poisson_gaussian_privacy(
                         noise_multiplier=0.5, sampling_probability=q,
                         rounds=4).epsilon)
    with open(os.path.join(out, training.METRICS_FILE)) as f:
      cohorts = [int(r['participation_cohort']) for r in csv.DictReader(f)]
    self.assertLen(cohorts, 4)
    self.assertTrue(all(c > 0 for c in cohorts))
    report = _privacy_report(out)
    self.assertIn('Poisson-subsampled Gaussian', report)
    self.assertIn('rho-zCDP | - |', report)
    self.assertIn('epsilon', console.summary_text(summary))
    # train() without a data description: whether the vocabulary came from
    # the clients is unknown, and the console does not guess.
    self.assertEqual(summary['vocabulary'],
                     dict(words=None, word_counts_path=None,
                          counted_from_clients=None))
    self.assertNotIn('not covered', console.summary_text(summary))

  def test_finished_run_is_a_noop_and_total_rounds_cannot_drop(self):
    out = os.path.join(tempfile.mkdtemp(), 'run')
    first = train(tiny_config(), out)
    summary_path = os.path.join(out, training.SUMMARY_FILE)
    with open(summary_path) as f:
      written = f.read()
    again = train(tiny_config(), out)
    self.assertTrue(again['already_finished'])
    self.assertEqual(again['final_eval'], first['final_eval'])
    self.assertEqual(run_privacy.accounted(again),
                     run_privacy.accounted(first))
    with open(summary_path) as f:
      self.assertEqual(f.read(), written)   # Not rewritten.
    # The launch flags are not the run's identity: a finished run reports
    # the launch-equivalent privacy of the ones given now.
    launch = tiny_config(launch_population=100_000, launch_report_goal=50,
                         launch_rounds=1000)
    third = train(launch, out)
    self.assertTrue(third['already_finished'])
    self.assertIsNone(run_privacy.accounted(first)['launch_equivalent'])
    self.assertEqual(run_privacy.accounted(third)['launch_equivalent'],
                     run_privacy.launch_equivalent_privacy(launch, 4))
    self.assertEqual(
        run_privacy.accounted(third)['launch_equivalent']['rounds'], 1000)
    with open(summary_path) as f:
      self.assertEqual(f.read(), written)
    with self.assertRaisesRegex(
        ValueError, '--total_rounds=2 is below the 4 rounds'):
      train(tiny_config(total_rounds=2), out)

  def test_extended_blt_run_keeps_the_blt_it_planned(self):
    # The BLT's planned MinS is min(population's, T - 1): raising T would
    # plan another one; the run keeps its own (blt.json) and extends.
    out = os.path.join(tempfile.mkdtemp(), 'run')
    train(tiny_config(aggregator='dp_ftrl_blt', total_rounds=2), out)
    with open(os.path.join(out, 'blt.json')) as f:
      blt = f.read()
    messages = []
    summary = train(tiny_config(aggregator='dp_ftrl_blt', total_rounds=4),
                    out, print_fn=messages.append)
    self.assertEqual(summary['rounds'], 4)
    self.assertIn('Resuming with what the run planned at its start: '
                  'blt_min_separation=1.', messages)
    with open(os.path.join(out, 'blt.json')) as f:
      self.assertEqual(f.read(), blt)
    with open(os.path.join(out, training.HPARAMS_FILE)) as f:
      hparams = strict_json.load_file(f)
    self.assertEqual((hparams['total_rounds'], hparams['blt_min_separation']),
                     (4, 1))

  def test_finished_run_on_read_only_storage_is_reported(self):
    out = os.path.join(tempfile.mkdtemp(), 'run')
    first = train(tiny_config(total_rounds=2), out)
    real_open = open

    def read_only(path, mode='r', *args, **kwargs):
      if any(m in mode for m in 'wax+'):
        raise OSError(errno.EROFS, 'Read-only file system', path)
      return real_open(path, mode, *args, **kwargs)

    messages = []
    with mock.patch('builtins.open', read_only):
      again = train(tiny_config(total_rounds=2), out,
                    print_fn=messages.append)
      self.assertTrue(again['already_finished'])
      self.assertEqual(again['final_eval'], first['final_eval'])
      self.assertIn('on storage that cannot be written', messages[-1])
      # Extending it cannot happen there: one clear line.
      with self.assertRaisesRegex(ValueError, 'cannot be written .*Read-only'
                                  ' file system.*copy it to writable'):
        train(tiny_config(total_rounds=3), out)

  def test_other_data_is_another_run(self):
    out = os.path.join(tempfile.mkdtemp(), 'run')
    train(tiny_config(total_rounds=1), out,
          data_description=dict(vocab_sha256='aaa', database='/x'))
    with self.assertRaisesRegex(ValueError,
                                "data.vocab_sha256: 'aaa' -> 'bbb'"):
      train(tiny_config(total_rounds=2), out,
            data_description=dict(vocab_sha256='bbb', database='/x'))

  @parameterized.named_parameters(
      ('model', dict(vocab_size=10**8), 'Choose a smaller model'),
      # Checks on the population: nothing is written before they pass.
      ('groups', dict(participation='min_sep_groups', min_sep_groups=1000),
       '--min_sep_groups=1000'),
      ('canaries', dict(canaries=300), '--canaries=300'))
  def test_refused_run_leaves_nothing(self, overrides, message):
    out = os.path.join(tempfile.mkdtemp(), 'run')
    with self.assertRaisesRegex(ValueError, message):
      train(tiny_config(**overrides), out)
    self.assertFalse(os.path.exists(out))
    if overrides.get('vocab_size'):   # The corrected command runs.
      self.assertEqual(train(tiny_config(total_rounds=1), out)['rounds'], 1)

  def test_torn_checkpoint_falls_back_and_tensorboard_has_no_duplicates(self):
    out = os.path.join(tempfile.mkdtemp(), 'run')
    train(tiny_config(total_rounds=3), out)
    newest = os.path.join(out, 'checkpoints', 'round_3.npz')
    with open(newest, 'r+b') as f:
      f.truncate(100)
    messages = []
    summary = train(tiny_config(total_rounds=4), out,
                    print_fn=messages.append)
    self.assertEqual(summary['rounds'], 4)
    self.assertTrue(any('round_3.npz is unreadable' in m for m in messages))
    self.assertTrue(any('from round 2' in m for m in messages), messages)
    with open(os.path.join(out, training.METRICS_FILE)) as f:
      self.assertEqual([int(r['round']) for r in csv.DictReader(f)],
                       [1, 2, 3, 4])
    events = _tensorboard_events(out)
    self.assertEqual(len(events), len(set(events)))
    self.assertEqual(sorted(s for t, s in events if t == 'train_loss'),
                     [1, 2, 3, 4])
    with open(os.path.join(out, training.HPARAMS_FILE)) as f:
      provenance = strict_json.load_file(f)['provenance']
    self.assertEqual([p['resumed_from_round'] for p in provenance], [0, 2])
    self.assertIn('tensorflow-federated', provenance[0]['packages'])
    self.assertIn('commit', provenance[0])
    self.assertTrue(provenance[0]['command'])
    self.assertTrue(os.path.isfile(os.path.join(out, 'metrics.png')))

  def test_refuses_other_runs_directory(self):
    root = tempfile.mkdtemp()
    out = os.path.join(root, 'run')
    train(tiny_config(total_rounds=1), out)
    with self.assertRaisesRegex(ValueError, 'noise_multiplier'):
      train(tiny_config(total_rounds=1, noise_multiplier=0.9), out)
    other = os.path.join(root, 'other')
    os.makedirs(other)
    with open(os.path.join(other, 'notes.txt'), 'w') as f:
      f.write('x')
    with self.assertRaisesRegex(ValueError, 'not a dpftrl_tff run'):
      train(tiny_config(total_rounds=1), other)

  def test_adaptive_clipping_records_clip_norms_and_restarts(self):
    out = os.path.join(tempfile.mkdtemp(), 'adaptive')
    summary = train(tiny_config(aggregator='dp_ftrl_adaptive', total_rounds=5,
                                initial_clip_norm=0.05, restart_warmup=2,
                                restart_frequency=3,
                                clipped_count_stddev=1.0), out)
    fixtures.assert_metrics_documented(
        self, os.path.join(out, training.METRICS_FILE))
    with open(os.path.join(out, training.METRICS_FILE)) as f:
      rows = list(csv.DictReader(f))
    in_force = [float(r['clip_norm_in_force']) for r in rows]
    estimate = [float(r['clip_norm_estimate']) for r in rows]
    # Trees restart at rounds 2 and 5 (0-based): rounds 0-1 use C^0, rounds
    # 2-4 the estimate C^2 made after round 1.
    self.assertAlmostEqual(in_force[0], 0.05, places=6)
    self.assertAlmostEqual(in_force[0], in_force[1], places=6)
    self.assertAlmostEqual(in_force[2], estimate[1], places=6)
    self.assertEqual(in_force[2], in_force[3])
    self.assertEqual(in_force[3], in_force[4])
    self.assertNotEqual(in_force[1], in_force[2])
    self.assertEqual(run_privacy.accounted(summary)['restart_rounds'], [2])
    report = _privacy_report(out)
    privacy_report_test.assert_report_matches(
        self, report, run_privacy.accounted(summary))
    self.assertIn('adaptive l2 clip norm', report)
    self.assertIn('z_Delta', report)

  @parameterized.named_parameters(('tree', 'dp_ftrl'),
                                  ('blt', 'dp_ftrl_blt'))
  def test_secagg_inside(self, aggregator):
    out = os.path.join(tempfile.mkdtemp(), 'secagg')
    summary = train(tiny_config(total_rounds=2, secagg=True,
                                secagg_scale=4096.0, secagg_debug=True,
                                aggregator=aggregator), out)
    report = _privacy_report(out)
    privacy_report_test.assert_report_matches(
        self, report, run_privacy.accounted(summary))
    self.assertIn('C_inflated', report)
    fixtures.assert_metrics_documented(
        self, os.path.join(out, training.METRICS_FILE))
    with open(os.path.join(out, training.METRICS_FILE)) as f:
      rows = list(csv.DictReader(f))
    for row in rows:
      self.assertEqual(float(row['secagg_wraparounds']), 0)
      self.assertGreater(float(row['secagg_bits_per_parameter']), 1)
      self.assertLess(float(row['secagg_decode_error_l2']), 0.1)

  def test_secagg_with_adaptive_is_refused(self):
    with self.assertRaisesRegex(ValueError, '--secagg'):
      tiny_config(aggregator='dp_ftrl_adaptive', secagg=True,
                  clipped_count_stddev=1.0).validate()

  def test_clients_per_round_larger_than_population(self):
    with self.assertRaisesRegex(ValueError, '--clients_per_round=500'):
      train(tiny_config(clients_per_round=500), tempfile.mkdtemp())


def _run_binary(*args, timeout=300):
  return fixtures.run_module('experiments.run_stackoverflow', *args,
                             timeout=timeout)


def _tiny_flags(out_root, name='run'):
  return [f'--cache_dir={cache_dir()}', f'--root_output_dir={out_root}',
          f'--experiment_name={name}', '--total_rounds=2',
          '--clients_per_round=3', '--vocab_size=100', '--latent_size=8',
          '--embedding_size=4', '--max_elements_per_client=8',
          '--num_eval_examples=50', '--rounds_per_eval=1',
          '--noise_multiplier=0.5', '--seed=1']


_BAD_INPUT = (
    ('negative_noise', ['--noise_multiplier=-1'], '--noise_multiplier'),
    ('nan_noise', ['--noise_multiplier=nan'], '--noise_multiplier'),
    ('zero_clip', ['--clip_norm=0'], '--clip_norm'),
    ('absurd_rounds', ['--total_rounds=20000000'],
     '--total_rounds must be an integer <= 100000, got 20000000.'),
    ('too_many_clients', ['--clients_per_round=100000'],
     '--clients_per_round'),
    ('unknown_aggregator', ['--aggregator=dp_sgd'], '--aggregator'),
    ('empty_cache_dir', ['--cache_dir=/nonexistent_dpftrl'], '--cache_dir'),
    ('escaping_name', ['--experiment_name=../../x'], '--experiment_name'),
)


class BadInputTest(fixtures.BadInputTest):
  MODULE = 'experiments.run_stackoverflow'
  CASES = _BAD_INPUT

  @classmethod
  def case_args(cls, args):
    return [*_tiny_flags(tempfile.mkdtemp()), *args]

  @parameterized.named_parameters(fixtures.case_parameters(_BAD_INPUT))
  def test_bad_input_is_refused_clearly(self, case, expected):
    self.check_refused(case, expected)


# Bad data and bad output places: one line each (exit 2), run in one
# process like _BAD_INPUT. '@name' in an argument is the directory `name` of
# `_bad_places`, made when the class starts.
_BAD_PLACES = (
    ('garbage_examples', ['--cache_dir=@garbage'],
     'not tf.train.Example protos'),
    ('database_without_tables', ['--cache_dir=@no_tables'],
     'no table "examples"'),
    # An output root that cannot be a directory (root writes anywhere, so
    # permissions cannot be tested here).
    ('output_under_a_file', ['--root_output_dir=@not_a_dir/out'], 'error:'),
    ('stray_argument', ['stray'], 'unexpected arguments'),
)


def _bad_places():
  """{name: path} of a database with garbage examples, one without the
  examples table, and a file where a directory should be."""
  import shutil  # pylint: disable=g-import-not-at-top
  import sqlite3  # pylint: disable=g-import-not-at-top
  garbage, no_tables = tempfile.mkdtemp(), tempfile.mkdtemp()
  shutil.copy(stackoverflow.database_path(cache_dir()), stackoverflow.database_path(garbage))
  con = sqlite3.connect(stackoverflow.database_path(garbage))
  con.execute("UPDATE examples SET serialized_example_proto = x'0a0b0c'")
  con.commit()
  con.close()
  sqlite3.connect(stackoverflow.database_path(no_tables)).execute(
      'CREATE TABLE foo (x INT)').connection.commit()
  not_a_dir = os.path.join(tempfile.mkdtemp(), 'file')
  with open(not_a_dir, 'w') as f:
    f.write('x')
  return dict(garbage=garbage, no_tables=no_tables, not_a_dir=not_a_dir)


class BadPlacesTest(fixtures.BadInputTest):
  MODULE = 'experiments.run_stackoverflow'
  CASES = _BAD_PLACES
  RETURNCODE = 2

  @classmethod
  def setUpClass(cls):
    cls.places = _bad_places()
    super().setUpClass()

  @classmethod
  def case_args(cls, args):
    args = [re.sub(r'@(\w+)', lambda m: cls.places[m.group(1)], a)
            for a in args]
    return [*_tiny_flags(tempfile.mkdtemp()), *args]

  @parameterized.named_parameters(fixtures.case_parameters(_BAD_PLACES))
  def test_bad_place_is_one_line(self, case, expected):
    self.check_refused(case, expected)
    self.assertLess(len(fixtures.own_lines(self.results[case].stderr)), 5)


class BinaryTest(parameterized.TestCase):

  def test_runs_on_generated_data_and_prints_accuracy_and_privacy(self):
    # The one run of the binary as a subprocess that goes to its end; the
    # generated data gets a directory of its own per setting.
    root = tempfile.mkdtemp()
    flags = [f for f in _tiny_flags(root) if not f.startswith('--cache_dir')]
    proc = _run_binary(*flags, '--noise_seed=5',
                       '--synthetic_train_clients=30',
                       '--synthetic_min_sentences_per_client=5')
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    # A fixed noise seed is warned about, once.
    self.assertEqual(proc.stderr.count('fixes the DP noise'), 1, proc.stderr)
    self.assertIn('Final eval in-vocab accuracy', proc.stdout)
    self.assertIn('rho-zCDP', proc.stdout)
    self.assertIn('ETA', proc.stdout)
    self.assertIn('not the real StackOverflow data', proc.stdout)
    # The binary records its data: the vocabulary, counted from the
    # training clients' text, is named as outside the guarantee.
    (run,) = [d for d in os.listdir(root) if d != 'synthetic_stackoverflow'
              '_min5_clients30']
    self.assertIn('so this guarantee does not cover it',
                  _privacy_report(os.path.join(root, run)))
    with open(os.path.join(root, run, training.SUMMARY_FILE)) as f:
      vocabulary = strict_json.load_file(f)['vocabulary']
    self.assertIs(vocabulary['counted_from_clients'], True)
    # A fixed noise seed: no guarantee at all, so no "not covered" line.
    self.assertNotIn('not covered: the vocabulary', proc.stdout)
    made = os.path.join(root, 'synthetic_stackoverflow_min5_clients30')
    with open(os.path.join(made, synthetic.PARAMS_NAME)) as f:
      record = strict_json.load_file(f)
    self.assertEqual((record['min_sentences_per_client'],
                      record['num_train_clients']), (5, 30))
    self.assertEqual(os.listdir(root).count('synthetic_stackoverflow'), 0)

  @parameterized.named_parameters(
      ('ctrl_c', signal.SIGINT),
      ('sigterm', signal.SIGTERM),
      # Python cannot handle SIGKILL: the kernel's parent-death signal must.
      ('sigkill', signal.SIGKILL))
  def test_killed_binary_leaves_no_worker(self, signum):
    before = set(runtime.worker_pids())
    env = fixtures.binary_environment()
    for name in worker.WORKER_ENVIRONMENT:   # Set for the worker alone.
      env.pop(name, None)
    for name in runtime.GRPC_ENVIRONMENT:   # The binary must set it.
      env.pop(name, None)
    flags = _tiny_flags(tempfile.mkdtemp())
    flags[flags.index('--total_rounds=2')] = '--total_rounds=500'
    proc = subprocess.Popen(
        [sys.executable, '-m', 'experiments.run_stackoverflow', *flags],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    deadline = time.monotonic() + 240
    for line in proc.stdout:
      if 'round 1/500' in line:
        break
      self.assertLess(time.monotonic(), deadline)
    workers = [p for p in runtime._children(proc.pid)  # pylint: disable=protected-access
               if runtime._name(p) == 'worker_binary']  # pylint: disable=protected-access
    self.assertNotEmpty(workers)
    with open(f'/proc/{workers[0]}/environ', 'rb') as f:
      worker_env = f.read().split(b'\0')
    for name in runtime.ALLOCATOR_SETTINGS:
      self.assertTrue(any(e.startswith(name.encode() + b'=')
                          for e in worker_env), name)
    # The worker's TensorFlow settings, which the binary's own process
    # did not have.
    for name, value in worker.WORKER_ENVIRONMENT.items():
      self.assertIn(f'{name}={value}'.encode(), worker_env)
    # gRPC's fork handlers off, set by the binary's runtime.install (the
    # test removed it from the binary's environment).
    for name, value in runtime.GRPC_ENVIRONMENT.items():
      self.assertIn(f'{name}={value}'.encode(), worker_env)
    proc.send_signal(signum)
    rest = proc.communicate(timeout=60)[0]   # EOF: nobody holds the pipe
    if signum == signal.SIGINT:
      self.assertIn('interrupted', rest)
      self.assertNotIn('Traceback', rest)
    time.sleep(0.5)
    alive = [p for p in workers if runtime._alive(p)]  # pylint: disable=protected-access
    self.assertEmpty(alive)
    self.assertEqual(set(runtime.worker_pids()), before)


class WorkerStopTest(absltest.TestCase):

  def test_worker_environment_keeps_what_the_environment_sets(self):
    with mock.patch.dict(os.environ, {'TF_NUM_INTRAOP_THREADS': '2'}):
      self.assertEqual(worker.worker_environment()['TF_NUM_INTRAOP_THREADS'],
                       '2')
    with mock.patch.dict(os.environ):
      os.environ.pop('TF_NUM_INTRAOP_THREADS', None)
      env = worker.worker_environment()
      self.assertEqual(env['TF_NUM_INTRAOP_THREADS'], '1')
      self.assertNotIn('TF_NUM_INTRAOP_THREADS', os.environ)
      self.assertEqual(env['PATH'], os.environ['PATH'])

  def test_unbounded_wait_kills_a_worker_that_ignores_sigint(self):
    # TFF stops a replaced context's worker with SIGINT and wait(); one that
    # ignores SIGINT must not hang the caller.
    previous = worker.WORKER_STOP_TIMEOUT_SECONDS
    worker.WORKER_STOP_TIMEOUT_SECONDS = 1.0
    try:
      proc = worker._WorkerPopen([  # pylint: disable=protected-access
          sys.executable, '-c',
          'import signal, sys, time; '
          'signal.signal(signal.SIGINT, signal.SIG_IGN); '
          'print("ready", flush=True); time.sleep(120)'],
                                  stdout=subprocess.PIPE, text=True)
      self.assertEqual(proc.stdout.readline().strip(), 'ready')
      proc.send_signal(signal.SIGINT)
      start = time.monotonic()
      code = proc.wait()
      self.assertLess(time.monotonic() - start, 30)
      self.assertEqual(code, -signal.SIGKILL)
      proc.stdout.close()
    finally:
      worker.WORKER_STOP_TIMEOUT_SECONDS = previous


class LostWorkerTest(absltest.TestCase):

  def test_crashed_local_worker_is_one_line_and_the_run_resumes(self):
    # TFF's worker_binary once segfaulted in a demo run (2026-11-26): the
    # run ended in a gRPC traceback. Now: one line naming the round, how the
    # worker ended and the checkpoint kept, and re-running resumes.
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    from dpftrl_tff.tff_compat import resident  # pylint: disable=g-import-not-at-top
    config = tiny_config(total_rounds=3, rounds_per_eval=3)
    original, calls = resident.ResidentProcess.next, []

    def next_with_a_crash(runner, *args, **kwargs):
      calls.append(1)
      if len(calls) == 2:   # Round 2: the worker dies under the call.
        for pid in runtime.worker_pids():
          os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while runtime.worker_pids() and time.monotonic() < deadline:
          time.sleep(0.05)
      return original(runner, *args, **kwargs)

    self.addCleanup(tff.backends.native.set_sync_local_cpp_execution_context)
    out = tempfile.mkdtemp()
    with mock.patch.object(resident.ResidentProcess, 'next',
                           next_with_a_crash):
      with self.assertRaisesRegex(
          runtime.WorkerLost,
          r"worker_binary on this machine stopped during round 2 \(killed by "
          r"SIGKILL\).*stopped after round 1; it keeps its last checkpoint "
          r"\(round 1\): re-run the same command to resume"):
        train(config, out)
    tff.backends.native.set_sync_local_cpp_execution_context()
    summary = train(config, out)
    self.assertEqual(summary['rounds'], 3)
    # Any other failure is not mistaken for a lost worker.
    self.assertIsNone(runtime.lost_worker(ValueError('x')))


if __name__ == '__main__':
  absltest.main()
