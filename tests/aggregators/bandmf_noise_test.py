"""Tests of BandMF-DP-FTRL's noise: streaming vs dense, covariance, state."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff.accounting import bandmf as bandmf_accounting
from dpftrl_tff.aggregators import bandmf
from tests.aggregators import blt_test

# The BLT tests' record structure, noise loop and flattening.
_SPECS = blt_test._SPECS  # pylint: disable=protected-access
_noise = blt_test._noise  # pylint: disable=protected-access
_flat = blt_test._flat  # pylint: disable=protected-access


def _random_banded(rounds, bands, seed=0):
  """A banded C that is not Toeplitz, with a dominant diagonal."""
  rng = np.random.default_rng(seed)
  i, j = np.indices((rounds, rounds))
  c = np.where((i >= j) & (i - j < bands),
               rng.uniform(-0.4, 0.4, (rounds, rounds)), 0.0)
  c[np.diag_indices(rounds)] = rng.uniform(0.8, 1.5, rounds)
  return c


def _query(c, noise_multiplier=1.5, clip=2.0, specs=_SPECS, seed=7):
  return bandmf.BandMFResidualSumQuery(
      clip_norm=clip, noise_multiplier=noise_multiplier, record_specs=specs,
      c_matrix=c, noise_seed=seed)


class BandMFQueryTest(parameterized.TestCase):

  @parameterized.parameters((12, 1), (12, 3), (10, 10))
  def test_streaming_noise_equals_dense_c_inverse_z(self, rounds, bands):
    c = _random_banded(rounds, bands)
    query = _query(c)
    state = query.initial_global_state()
    self.assertLen(state.buffers, bands - 1)
    streamed, _ = _noise(query, state, rounds)
    z = np.array([_flat(query.standard_normal(state.seed, t))
                  for t in range(rounds)])
    dense = 1.5 * 2.0 * np.linalg.solve(c, z)
    np.testing.assert_allclose(streamed, dense, atol=5e-5)

  def test_band_coefficients(self):
    c = _random_banded(5, 2)
    band = bandmf.band_coefficients(c)
    np.testing.assert_array_equal(band[:, 0], np.diag(c))
    np.testing.assert_array_equal(band[1:, 1], np.diag(c, -1))
    self.assertEqual(band[0, 1], 0.0)

  def test_noise_covariance_matches_theory(self):
    rounds, dim = 6, 40000
    c = bandmf_accounting.optimize(rounds, 3)
    specs = tf.TensorSpec([dim], tf.float32)
    query = _query(c, noise_multiplier=1.0, clip=1.0, specs=specs, seed=11)
    noise, _ = _noise(query, query.initial_global_state(), rounds, specs)
    c_inv = np.linalg.inv(c)
    # Each entry's standard error is below sqrt(2 / 40000) * max variance.
    np.testing.assert_allclose(noise @ noise.T / dim, c_inv @ c_inv.T,
                               atol=0.05)
    # The released prefix sums have the accountant's error per round.
    np.testing.assert_allclose(
        np.var(np.cumsum(noise, axis=0), axis=1),
        bandmf_accounting.prefix_sum_errors(c), rtol=0.05)

  def test_state_round_trip_continues_the_same_noise(self):
    c = _random_banded(8, 3)
    query = _query(c)
    state = query.initial_global_state()
    straight, _ = _noise(query, state, 8)
    first, mid = _noise(query, state, 3)
    saved = tf.nest.map_structure(np.asarray, mid)
    restored = tf.nest.map_structure(tf.constant, saved)
    rest, _ = _noise(_query(c, seed=999), restored, 5)
    np.testing.assert_array_equal(np.concatenate([first, rest]), straight)

  def test_refuses_a_round_beyond_the_matrix(self):
    c = _random_banded(2, 2)
    query = _query(c)
    _, state = _noise(query, query.initial_global_state(), 2)
    with self.assertRaises(tf.errors.InvalidArgumentError):
      _noise(query, state, 1)


class BandMFFactoryTest(blt_test.FactoryChecks, absltest.TestCase):

  def test_refuses_a_round_beyond_the_matrix_in_tff(self):
    # The assertion must run inside TFF's graphs, not only eagerly.
    factory = bandmf.build_dp_ftrl_bandmf_factory(
        noise_multiplier=1.0, clients_per_round=1, clip_norm=1.0,
        record_specs=tf.TensorSpec([3], tf.float32),
        c_matrix=_random_banded(2, 2), noise_seed=1)
    process = factory.create(tff.TensorType(np.float32, [3]))
    state = process.initialize()
    for _ in range(2):
      state = process.next(state, [np.zeros(3, np.float32)]).state
    with self.assertRaisesRegex(Exception, 'beyond the matrix'):
      process.next(state, [np.zeros(3, np.float32)])

  def _process(self, noise_multiplier, noise_seed=None, dim=2000):
    factory = bandmf.build_dp_ftrl_bandmf_factory(
        noise_multiplier=noise_multiplier, clients_per_round=4,
        clip_norm=1.0, record_specs=tf.TensorSpec([dim], tf.float32),
        c_matrix=_random_banded(6, 3), noise_seed=noise_seed)
    return factory.create(tff.TensorType(np.float32, [dim]))


if __name__ == '__main__':
  absltest.main()
