"""BandMF sensitivity and error against jax_privacy, brute force and closed
forms; Gboard's published matrix format read back."""

import itertools
import json
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from dpftrl_tff.accounting import bandmf
from tests.reference import bandmf_reference

_REFERENCE = os.path.join(os.path.dirname(__file__), '..', '..', 'benchmarks',
                          'data', 'jax_privacy_bandmf_reference.json')


def _reference():
  with open(_REFERENCE) as f:
    return json.load(f)['cases']


def brute_force_sensitivity_squared(c, min_separation, max_participation):
  """max over every pattern of at most MaxP columns, pairwise more than
  MinS apart, of ||C 1_S||^2 (the full norm, cross terms included)."""
  rounds = c.shape[0]
  best = 0.0
  for k in range(1, (max_participation or rounds) + 1):
    for pattern in itertools.combinations(range(rounds), k):
      if all(b - a > min_separation for a, b in zip(pattern, pattern[1:])):
        best = max(best, float(np.sum(c[:, list(pattern)].sum(1)**2)))
  return best


def random_banded(rng, rounds, bands):
  c = np.tril(rng.normal(size=(rounds, rounds)))
  c[np.tril_indices(rounds, -bands)] = 0.0
  np.fill_diagonal(c, np.abs(np.diag(c)) + 0.1)
  return c * np.exp(rng.normal(size=rounds))[np.newaxis, :]


class SensitivityTest(parameterized.TestCase):

  def test_equals_jax_privacy(self):
    checked = 0
    for case in _reference():
      c = np.array(case['c'])
      for row in case['sensitivity']:
        ours = bandmf.banded_sensitivity_squared(
            c, min_separation=row['min_sep'] - 1,   # b = MinS + 1.
            max_participation=row['max_participations'])
        self.assertAlmostEqual(ours / row['sensitivity']**2, 1.0, delta=1e-7)
        checked += 1
    self.assertGreater(checked, 300)

  @parameterized.parameters(range(40))
  def test_equals_brute_force(self, seed):
    rng = np.random.default_rng(seed)
    rounds = int(rng.integers(1, 11))
    bands = int(rng.integers(1, rounds + 1))
    min_separation = int(rng.integers(bands - 1, rounds + 1))
    max_participation = [None, 1, 2, 3][seed % 4]
    c = random_banded(rng, rounds, bands)
    self.assertAlmostEqual(
        bandmf.banded_sensitivity_squared(c, min_separation,
                                          max_participation),
        brute_force_sensitivity_squared(c, min_separation,
                                        max_participation),
        delta=1e-9 * brute_force_sensitivity_squared(c, min_separation,
                                                     max_participation))

  def test_at_most_maxp_not_exactly(self):
    # Columns of squared norm 1, 100, 1; two participations 2 apart fit
    # only as {0, 2} (2), but one participation at round 1 gives 100.
    c = np.diag(np.sqrt([1.0, 100.0, 1.0]))
    self.assertEqual(bandmf.banded_sensitivity_squared(c, 1, 2), 100.0)

  def test_column_normalized_gives_the_participations_that_fit(self):
    c = bandmf.scaled_to_unit_sensitivity(
        random_banded(np.random.default_rng(3), 20, 4))
    norms = np.sum(c**2, axis=0)
    c = c / np.sqrt(norms)[np.newaxis, :]
    # MinS 4 (b' = 5): ceil(20 / 5) = 4 participations fit.
    self.assertAlmostEqual(bandmf.banded_sensitivity_squared(c, 4, None), 4.0)
    self.assertAlmostEqual(bandmf.banded_sensitivity_squared(c, 4, 2), 2.0)

  def test_refuses_more_bands_than_the_separation_allows(self):
    c = random_banded(np.random.default_rng(0), 10, 4)
    with self.assertRaisesRegex(ValueError, '4 bands \\(--bandmf_bands\\), '
                                'more than MinS \\+ 1 = 3'):
      bandmf.banded_sensitivity_squared(c, 2, 2)

  @parameterized.named_parameters(
      ('upper', np.triu(np.ones((3, 3))), 'lower triangular'),
      ('singular', np.diag([1.0, 0.0]), 'zero on its diagonal'),
      ('not_square', np.ones((2, 3)), 'square'),
      ('nan', np.diag([1.0, np.nan]), 'non-finite'))
  def test_bad_matrices(self, c, message):
    with self.assertRaisesRegex(ValueError, message):
      bandmf.banded_sensitivity_squared(c, 5, 1)


class UpperBoundTest(parameterized.TestCase):
  """Algorithm 4's bound, for C with more bands than MinS + 1."""

  def test_equals_jax_privacy(self):
    checked = below = 0
    for case in _reference():
      c = np.array(case['c'])
      for row in case['upper_bound']:
        ours = bandmf.sensitivity_upper_bound_squared(
            c, row['min_sep'] - 1, row['max_participations'])
        self.assertAlmostEqual(ours / row['sensitivity']**2, 1.0, delta=1e-7)
        checked += 1
        below += row['min_sep'] < case['bands']
    self.assertGreater(checked, 150)
    self.assertGreater(below, 50)   # Where the banded value does not hold.

  @parameterized.parameters(range(30))
  def test_bounds_brute_force(self, seed):
    rng = np.random.default_rng(100 + seed)
    rounds = int(rng.integers(2, 10))
    bands = int(rng.integers(2, rounds + 1))
    min_separation = int(rng.integers(0, bands - 1))
    max_participation = [None, 1, 2, 3][seed % 4]
    c = random_banded(rng, rounds, bands)
    exact = brute_force_sensitivity_squared(c, min_separation,
                                            max_participation)
    bound, is_exact = bandmf.sensitivity_squared(c, min_separation,
                                                 max_participation)
    self.assertFalse(is_exact)
    self.assertGreaterEqual(bound, exact * (1 - 1e-12))

  @parameterized.parameters(range(10))
  def test_the_banded_value_where_that_holds(self, seed):
    # There the exact value is used; the bound is above it (a row of
    # C^T C may pick columns on both sides of it) and equal for diagonal C.
    rng = np.random.default_rng(200 + seed)
    c = random_banded(rng, 12, 3)
    for min_separation in (2, 3, 5):
      banded = bandmf.banded_sensitivity_squared(c, min_separation, 3)
      self.assertGreaterEqual(
          bandmf.sensitivity_upper_bound_squared(c, min_separation, 3),
          banded * (1 - 1e-12))
      self.assertEqual(bandmf.sensitivity_squared(c, min_separation, 3),
                       (banded, True))
    diagonal = np.diag(np.diag(c))
    self.assertAlmostEqual(
        bandmf.sensitivity_upper_bound_squared(diagonal, 0, 3),
        bandmf.banded_sensitivity_squared(diagonal, 0, 3), delta=1e-9)

  def test_a_nonnegative_c_is_bounded_tightly_at_zero_separation(self):
    # With C >= 0 every pair adds, and all-participation is the worst case:
    # sens^2 = ||C 1||^2, which the bound reaches.
    c = np.tril(np.ones((5, 5)))
    self.assertAlmostEqual(bandmf.sensitivity_upper_bound_squared(c, 0, None),
                           float(np.sum(c.sum(1)**2)))


class ErrorTest(absltest.TestCase):

  def test_equals_jax_privacy_per_query_error(self):
    for case in _reference():
      normalized = np.array(case['normalized'])
      np.testing.assert_allclose(
          bandmf.prefix_sum_errors(
              bandmf.scaled_to_unit_sensitivity(normalized)),
          case['per_query_error'], rtol=1e-9)

  def test_closed_forms(self):
    # C = I: the prefix sum of t + 1 noise draws.
    np.testing.assert_allclose(bandmf.prefix_sum_errors(np.eye(6)),
                               np.arange(1, 7))
    # C = A (all-ones lower triangle), scaled to sensitivity 1 (its first
    # column has norm sqrt(T)): A C^-1 = sqrt(T) I, error T every round.
    a = np.tril(np.ones((6, 6)))
    summary = bandmf.error_summary(a)
    self.assertAlmostEqual(summary['mean_error'], 6.0, delta=1e-12)
    self.assertAlmostEqual(summary['max_error'], 6.0, delta=1e-12)


def _optimized_reference():
  with open(_REFERENCE) as f:
    return {(r['n'], r['bands']): r for r in json.load(f)['optimize']}


class OptimizerTest(parameterized.TestCase):

  @parameterized.parameters(range(5))
  def test_gradient_against_finite_differences(self, seed):
    # The dense reference, in every entry of the lower triangle.
    rng = np.random.default_rng(seed)
    c = random_banded(rng, 7, 3)
    mean = bandmf._mean_reduction  # pylint: disable=protected-access
    loss, gradient = bandmf_reference.error_and_gradient(c, mean)
    self.assertAlmostEqual(
        loss, float(np.mean(bandmf.prefix_sum_errors(c))), delta=1e-9 * loss)
    direction = np.tril(rng.normal(size=c.shape))
    step = 1e-6
    numeric = (bandmf_reference.error_and_gradient(c + step * direction,
                                                   mean)[0] -
               bandmf_reference.error_and_gradient(c - step * direction,
                                                   mean)[0]) / (2 * step)
    self.assertAlmostEqual(float(np.sum(gradient * direction)), numeric,
                           delta=1e-5 * max(1.0, abs(numeric)))

  @parameterized.parameters(
      (1, 1, 'mean'), (7, 3, 'mean'), (7, 3, 'power'), (60, 1, 'mean'),
      (64, 64, 'mean'), (130, 5, 'power'), (150, 70, 'mean'),
      (200, 130, 'power'))
  def test_band_gradient_equals_the_dense_reference(self, rounds, bands,
                                                    reduction):
    # Blocks of max(b, 64) columns: T below, at and past a block, b past it.
    rng = np.random.default_rng(rounds + bands)
    c = random_banded(rng, rounds, bands)
    reduction = (bandmf._mean_reduction if reduction == 'mean' else  # pylint: disable=protected-access
                 bandmf._power_mean_reduction(16.0))  # pylint: disable=protected-access
    loss, gradient = bandmf._error_and_gradient(c, bands, reduction)  # pylint: disable=protected-access
    want_loss, want = bandmf_reference.error_and_gradient(c, reduction)
    self.assertAlmostEqual(loss, want_loss, delta=1e-12 * want_loss)
    band = np.tri(rounds, dtype=bool) & ~np.tri(rounds, k=-bands, dtype=bool)
    np.testing.assert_allclose(gradient[band], want[band], rtol=1e-9,
                               atol=1e-12 * np.max(np.abs(want[band])))
    self.assertTrue(np.all(gradient[~band] == 0.0))

  def test_initial_strategy_is_jax_privacys_default(self):
    c = bandmf.initial_strategy(6, 3)
    column = np.array([1.0, 0.5, 0.375]) / np.linalg.norm([1.0, 0.5, 0.375])
    np.testing.assert_allclose(c[:3, 0], column)
    np.testing.assert_allclose(c[4:, 4], [1.0, 0.5] / np.linalg.norm(
        [1.0, 0.5]))
    self.assertEqual(bandmf.check_banded(c)[1], 3)

  @parameterized.parameters((128, 8), (256, 16))
  def test_mean_error_as_low_as_jax_privacys_optimum(self, rounds, bands):
    reference = _optimized_reference()[(rounds, bands)]
    c = bandmf.optimize(rounds, bands)
    _, found_bands = bandmf.check_banded(c)
    self.assertEqual(found_bands, bands)
    np.testing.assert_allclose(np.linalg.norm(c, axis=0), 1.0, rtol=1e-12)
    # Sensitivity 1 per participation: MaxP participations give MaxP.
    self.assertAlmostEqual(bandmf.banded_sensitivity_squared(
        c, bands - 1, 3), 3.0, delta=1e-9)
    mean = bandmf.error_summary(c)['mean_error']
    self.assertLessEqual(mean, reference['mean_error'] * (1 + 1e-6))
    self.assertGreater(mean, reference['mean_error'] * 0.99)

  @parameterized.parameters((128, 8), (256, 16))
  def test_max_error_below_jax_privacys_max_optimum(self, rounds, bands):
    with open(_REFERENCE) as f:
      reference = {(r['n'], r['bands']): r
                   for r in json.load(f)['optimize_max']}[(rounds, bands)]
    c = bandmf.optimize(rounds, bands, error='max')
    summary = bandmf.error_summary(c)
    self.assertLessEqual(summary['max_error'],
                         reference['max_error'] * (1 + 1e-6))
    # Below the mean optimum's max, above its mean.
    mean_optimum = bandmf.error_summary(bandmf.optimize(rounds, bands))
    self.assertLess(summary['max_error'], mean_optimum['max_error'])
    self.assertGreater(summary['mean_error'], mean_optimum['mean_error'])
    np.testing.assert_allclose(np.linalg.norm(c, axis=0), 1.0, rtol=1e-12)

  def test_power_mean_gradient_against_finite_differences(self):
    # The fast gradient, along directions in the band (C's variables).
    rng = np.random.default_rng(7)
    c = random_banded(rng, 7, 3)
    reduction = bandmf._power_mean_reduction(16.0)  # pylint: disable=protected-access
    loss, gradient = bandmf._error_and_gradient(c, 3, reduction)  # pylint: disable=protected-access
    errors = bandmf.prefix_sum_errors(c)
    self.assertAlmostEqual(loss, np.mean(errors**16)**(1 / 16),
                           delta=1e-9 * loss)
    direction = np.tril(rng.normal(size=c.shape))
    direction[np.tril_indices(7, -3)] = 0.0
    step = 1e-6
    numeric = (bandmf._error_and_gradient(c + step * direction, 3,  # pylint: disable=protected-access
                                          reduction)[0]
               - bandmf._error_and_gradient(c - step * direction, 3,  # pylint: disable=protected-access
                                            reduction)[0]) / (2 * step)
    self.assertAlmostEqual(float(np.sum(gradient * direction)), numeric,
                           delta=1e-5 * max(1.0, abs(numeric)))

  def test_never_worse_than_the_start(self):
    for rounds, bands in ((1, 1), (5, 1), (40, 40), (60, 7)):
      for error in bandmf.ERRORS:
        c = bandmf.optimize(rounds, bands, error=error)
        self.assertEqual(bandmf.check_banded(c)[1], min(bands, rounds))
        self.assertLessEqual(
            bandmf.error_summary(c)[f'{error}_error'],
            bandmf.error_summary(bandmf.initial_strategy(rounds, bands))[
                f'{error}_error'] * (1 + 1e-12))
        self.assertTrue(np.all(np.diag(c) > 0))
    with self.assertRaisesRegex(ValueError, "--bandmf_error='median'"):
      bandmf.optimize(10, 2, error='median')


class PublishedFormatTest(absltest.TestCase):

  def _write(self, directory, name, value):
    tf.io.write_file(os.path.join(directory, name),
                     tf.io.serialize_tensor(tf.constant(value)))

  def test_round_trip_with_and_without_learning_rates(self):
    directory = tempfile.mkdtemp()
    c = random_banded(np.random.default_rng(1), 8, 3)
    self._write(directory, bandmf.C_MATRIX_FILE, c)
    read, learning_rates = bandmf.load_published(directory)
    np.testing.assert_array_equal(read, c)
    self.assertIsNone(learning_rates)
    self._write(directory, bandmf.LR_VECTOR_FILE, np.linspace(1, 2, 8))
    _, learning_rates = bandmf.load_published(directory)
    np.testing.assert_array_equal(learning_rates, np.linspace(1, 2, 8))

  def test_bad_directories(self):
    directory = tempfile.mkdtemp()
    with self.assertRaisesRegex(ValueError, 'no c_matrix_tensor_pb'):
      bandmf.load_published(directory)
    with open(os.path.join(directory, bandmf.C_MATRIX_FILE), 'wb') as f:
      f.write(b'not a tensor')
    with self.assertRaisesRegex(ValueError, 'not a float64 tensor'):
      bandmf.load_published(directory)
    self._write(directory, bandmf.C_MATRIX_FILE, np.eye(4))
    self._write(directory, bandmf.LR_VECTOR_FILE, np.ones(3))
    with self.assertRaisesRegex(ValueError, 'one per round'):
      bandmf.load_published(directory)


if __name__ == '__main__':
  absltest.main()
