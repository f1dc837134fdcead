"""Tests of BLT-DP-FTRL's noise: streaming vs dense, covariance, seeds, state."""

import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff import accounting
from dpftrl_tff.accounting import toeplitz
from dpftrl_tff.aggregators import blt
from dpftrl_tff.aggregators import dp_ftrl
from dpftrl_tff.aggregators import registry
from dpftrl_tff.run import config as config_lib

_BLT = toeplitz.BLT([0.98, 0.8, 0.3], [0.05, 0.2, 0.15])
_SPECS = (tf.TensorSpec([3], tf.float32), tf.TensorSpec([2, 2], tf.float32))


def _dense(coefs):
  n = len(coefs)
  i, j = np.indices((n, n))
  return np.where(i >= j, np.asarray(coefs)[np.abs(i - j)], 0.0)


def _flat(structure):
  return np.concatenate([np.asarray(x, np.float64).ravel()
                         for x in tf.nest.flatten(structure)])


def _query(noise_multiplier=1.5, clip=2.0, specs=_SPECS, seed=7):
  return blt.BLTResidualSumQuery(clip_norm=clip,
                                 noise_multiplier=noise_multiplier,
                                 record_specs=specs, blt=_BLT,
                                 noise_seed=seed)


def _noise(query, state, rounds, specs=_SPECS):
  out = []
  for _ in range(rounds):
    result, state, _ = query.get_noised_result(
        query.initial_sample_state(specs), state)
    out.append(_flat(result))
  return np.array(out), state


class BLTQueryTest(parameterized.TestCase):

  def test_streaming_noise_equals_dense_c_inverse_z(self):
    rounds = 12
    query = _query()
    state = query.initial_global_state()
    streamed, _ = _noise(query, state, rounds)
    z = np.array([_flat(query.standard_normal(state.seed, t))
                  for t in range(rounds)])
    dense = 1.5 * 2.0 * np.linalg.solve(_dense(_BLT.toeplitz_coefs(rounds)),
                                        z)
    np.testing.assert_allclose(streamed, dense, atol=2e-5)

  def test_noise_covariance_matches_theory(self):
    rounds, dim = 6, 40000
    specs = tf.TensorSpec([dim], tf.float32)
    query = _query(noise_multiplier=1.0, clip=1.0, specs=specs, seed=11)
    noise, _ = _noise(query, query.initial_global_state(), rounds, specs)
    empirical = noise @ noise.T / dim
    c_inv = np.linalg.inv(_dense(_BLT.toeplitz_coefs(rounds)))
    # Each entry's standard error is below sqrt(2 / 40000) = 0.007.
    np.testing.assert_allclose(empirical, c_inv @ c_inv.T, atol=0.035)
    # The released prefix sums have the accountant's variance.
    prefix = np.cumsum(noise, axis=0)
    np.testing.assert_allclose(np.var(prefix, axis=1),
                               accounting.blt_prefix_variance(_BLT, rounds),
                               rtol=0.05)

  def test_state_round_trip_continues_the_same_noise(self):
    query = _query()
    state = query.initial_global_state()
    straight, _ = _noise(query, state, 8)
    first, mid = _noise(query, state, 3)
    # A checkpoint holds the state as NumPy arrays; a new query (the same
    # BLT, another seed argument) restores it.
    saved = tf.nest.map_structure(np.asarray, mid)
    restored = tf.nest.map_structure(tf.constant, saved)
    rest, _ = _noise(_query(seed=999), restored, 5)
    np.testing.assert_array_equal(np.concatenate([first, rest]), straight)

  def test_clips_each_record(self):
    query = _query(noise_multiplier=0.0, clip=1.0)
    record = (tf.constant([3.0, 0.0, 0.0]), tf.constant([[4.0, 0.0],
                                                         [0.0, 0.0]]))
    clipped = query.preprocess_record(query.derive_sample_params(
        query.initial_global_state()), record)
    np.testing.assert_allclose(_flat(clipped), [0.6, 0, 0, 0.8, 0, 0, 0],
                               rtol=1e-6)

  def test_tree_prefix_variance_matches_tf_privacy_tree(self):
    """The comparison's tree side: TF Privacy's efficient tree, sampled."""
    dim, rounds = 20000, 7
    factory = dp_ftrl.build_dp_ftrl_factory(
        noise_multiplier=1.0, clients_per_round=1, clip_norm=1.0,
        record_specs=tf.TensorSpec([dim], tf.float32), noise_seed=5)
    process = factory.create(tff.TensorType(np.float32, [dim]))
    state = process.initialize()
    total, variances = np.zeros(dim), []
    for _ in range(rounds):
      out = process.next(state, [np.zeros(dim, np.float32)])
      state = out.state
      total += np.asarray(out.result)
      variances.append(np.var(total))
    np.testing.assert_allclose(variances,
                               accounting.tree_prefix_variance(rounds),
                               rtol=0.06)


class FactoryChecks:
  """What every streamed-noise factory must do (BLT here, BandMF and
  DP-FedAvg in bandmf_noise_test): a mixin, `_process(noise_multiplier,
  noise_seed=None, dim=2000)` given by the test case."""

  def test_noise_free_is_the_clipped_mean(self):
    process = self._process(0.0)
    state = process.initialize()
    rng = np.random.default_rng(0)
    for _ in range(3):
      updates = [rng.normal(size=2000).astype(np.float32) * s
                 for s in (1e-3, 0.1, 5.0)]
      out = process.next(state, updates)
      state = out.state
      expected = sum(u * min(1.0, 1.0 / np.linalg.norm(u))
                     for u in updates) / 4
      np.testing.assert_allclose(out.result, expected, rtol=1e-4, atol=1e-6)

  def test_noise_is_unpredictable_by_default(self):
    zeros = [np.zeros(2000, np.float32)]
    a, b = self._process(1.0), self._process(1.0)
    self.assertFalse(np.allclose(a.next(a.initialize(), zeros).result,
                                 b.next(b.initialize(), zeros).result))

  def test_seeded_noise_repeats(self):
    # (The binaries warn, once, where --noise_seed enters: training_test.)
    zeros = [np.zeros(2000, np.float32)]
    a = self._process(1.0, noise_seed=3)
    b = self._process(1.0, noise_seed=3)
    np.testing.assert_array_equal(a.next(a.initialize(), zeros).result,
                                  b.next(b.initialize(), zeros).result)


class BLTFactoryTest(FactoryChecks, parameterized.TestCase):

  def _process(self, noise_multiplier, noise_seed=None, dim=2000):
    factory = blt.build_dp_ftrl_blt_factory(
        noise_multiplier=noise_multiplier, clients_per_round=4,
        clip_norm=1.0, record_specs=tf.TensorSpec([dim], tf.float32),
        blt=_BLT, noise_seed=noise_seed)
    return factory.create(tff.TensorType(np.float32, [dim]))


def _config(**overrides):
  values = dict(aggregator='dp_ftrl_blt', total_rounds=20,
                clients_per_round=5, noise_multiplier=1.0, clip_norm=0.5,
                blt_min_separation=4, blt_num_buffers=2)
  values.update(overrides)
  return config_lib.TrainConfig(**values)


class BLTMechanismTest(parameterized.TestCase):

  def test_plan_without_a_seed(self):
    # Found on real text: --aggregator=dp_ftrl_blt with min_sep_groups and
    # no --seed failed with "--seed must be an integer, got None".
    config = config_lib.TrainConfig(
        aggregator='dp_ftrl_blt', participation='min_sep_groups',
        clients_per_round=10, total_rounds=30, noise_multiplier=1.0,
        clip_norm=0.5, seed=None)
    planned = registry.get('dp_ftrl_blt').run_parameters.plan(config, 100)
    self.assertEqual(planned.blt_min_separation, 9)
    self.assertEqual(planned.blt_max_participation, 3)
    self.assertIsNone(planned.seed)
    self.assertIsNone(config.blt_min_separation)   # A new config.

  def test_privacy_uses_the_optimized_blt(self):
    config = _config()
    report = registry.get('dp_ftrl_blt').privacy(config, 20, 4, 4)
    optimized, chosen = registry.optimized_blt(config)
    self.assertEqual(optimized.blt, chosen)
    self.assertEqual((optimized.rounds, optimized.min_separation,
                      optimized.max_participation), (20, 4, 4))
    expected = accounting.blt_sensitivity_squared(
        chosen, rounds=20, min_separation=4, max_participation=4)
    self.assertAlmostEqual(report.zcdp, expected / 2.0)
    self.assertEqual(report.mechanism, 'blt')

  @parameterized.named_parameters(
      ('buffers', dict(blt_num_buffers=9), '--blt_num_buffers must be an '
       'integer <= 7'),
      ('min_sep', dict(blt_min_separation=20), '--blt_min_separation must '
       'be an integer <= 19'),
      ('max_p', dict(blt_max_participation=5), r'--blt_max_participation=5 '
       r'cannot happen: at most 4 participations fit in --total_rounds=20 '
       r'rounds with 4 rounds between two'),
      ('error', dict(blt_error='median'), "--blt_error='median'"),
      ('other_aggregator', dict(aggregator='dp_ftrl'),
       '--blt_num_buffers=2, --blt_min_separation=4 apply only with '
       '--aggregator=dp_ftrl_blt'),
      ('params_and_buffers', dict(blt_params='/nonexistent.json'),
       '--blt_num_buffers=2, --blt_min_separation=4 choose how the BLT is '
       'optimized'),
      ('missing_params', dict(blt_params='/nonexistent.json',
                              blt_num_buffers=None, blt_min_separation=None),
       '--blt_params=/nonexistent.json: Cannot read'),
  )
  def test_bad_settings_are_refused(self, overrides, message):
    with self.assertRaisesRegex(ValueError, message):
      _config(**overrides).validate()

  def test_bad_blt_file_is_refused(self):
    path = os.path.join(tempfile.mkdtemp(), 'blt.json')
    with open(path, 'w') as f:
      f.write('{"buf_decay": [0.99, 0.7, 0.1], '
              '"output_scale": [0.05, 0.2, 0.3]}')
    with self.assertRaisesRegex(ValueError, '--blt_params=.*inverse'):
      _config(blt_params=path, blt_num_buffers=None,
              blt_min_separation=None).validate()


if __name__ == '__main__':
  absltest.main()
