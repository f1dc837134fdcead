"""BLT accounting and optimizer against brute force, dense algebra and jax_privacy.

Reference values: benchmarks/data/jax_privacy_blt_reference.json, made by
benchmarks/jax_privacy_reference.py with jax-privacy 2.0.0 in its own venv.
"""

import itertools
import json
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dpftrl_tff import accounting
from dpftrl_tff.accounting import bandmf
from dpftrl_tff.accounting import blt_optimizer
from dpftrl_tff.accounting import toeplitz

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_REFERENCE = os.path.join(_ROOT, 'benchmarks', 'data',
                          'jax_privacy_blt_reference.json')


def _reference():
  with open(_REFERENCE) as f:
    return json.load(f)


def _toeplitz_matrix(coefs):
  n = len(coefs)
  i, j = np.indices((n, n))
  return np.where(i >= j, np.asarray(coefs)[np.abs(i - j)], 0.0)


def _brute_force_table(coefs):
  """{(MinS, MaxP): max ||C u||^2 over every allowed 0/1 pattern u}.

  MinS here is the definition itself: the rounds strictly between two
  participations, j - i - 1, at least MinS.
  """
  n = len(coefs)
  c = _toeplitz_matrix(coefs)
  masks = np.array(list(itertools.product([0, 1], repeat=n)), dtype=float)
  masks = masks[masks.sum(axis=1) > 0]
  norms = np.sum((masks @ c.T)**2, axis=1)
  counts = masks.sum(axis=1).astype(int)
  # Rounds strictly between consecutive participations: for every round,
  # the distance back to the previous participation, minus one.
  min_between = np.full(len(masks), n)
  last = np.full(len(masks), -1)
  for t in range(n):
    here = masks[:, t] > 0
    seen = here & (last >= 0)
    min_between[seen] = np.minimum(min_between[seen], t - last[seen] - 1)
    last[here] = t
  table = {}
  for min_sep in range(n):
    for max_p in range(1, n + 1):
      ok = (min_between >= min_sep) & (counts <= max_p)
      table[(min_sep, max_p)] = norms[ok].max()
  return table


def _decreasing(seed, n):
  rng = np.random.default_rng(seed)
  return np.concatenate([[1.0], np.sort(rng.uniform(0, 1, n - 1))[::-1]])


class ConventionTest(absltest.TestCase):

  def test_band_is_min_separation_plus_one(self):
    self.assertEqual(toeplitz.band_from_min_separation(0), 1)
    self.assertEqual(toeplitz.band_from_min_separation(212), 213)
    with self.assertRaisesRegex(ValueError, 'min_separation must be an '
                                'integer >= 0'):
      toeplitz.band_from_min_separation(-1)


class SensitivityTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('random_T5', 'random', 5), ('random_T9', 'random', 9),
      ('random_T12', 'random', 12), ('blt_T16', 'blt', 16),
      ('one_over_sqrt_T14', 'sqrt', 14), ('constant_T10', 'ones', 10))
  def test_equals_brute_force_for_every_min_sep_and_max_p(self, kind, n):
    coefs = {
        'random': lambda: _decreasing(n, n),
        'blt': lambda: toeplitz.BLT([0.9, 0.4], [0.3, 0.2]).toeplitz_coefs(n),
        'sqrt': lambda: 1 / np.sqrt(1.0 + np.arange(n)),
        'ones': lambda: np.ones(n),
    }[kind]()
    table = _brute_force_table(coefs)
    for (min_sep, max_p), expected in table.items():
      got = accounting.minsep_sensitivity_squared(
          coefs, min_separation=min_sep, max_participation=max_p)
      self.assertAlmostEqual(got, expected, places=9,
                             msg=f'T={n} MinS={min_sep} MaxP={max_p}')

  def test_every_small_t_on_a_blt(self):
    """Every T up to 16, every (MinS, MaxP), for a 3-buffer BLT."""
    blt = toeplitz.BLT([0.95, 0.7, 0.2], [0.1, 0.25, 0.15])
    for n in range(1, 17):
      table = _brute_force_table(blt.toeplitz_coefs(n))
      for (min_sep, max_p), expected in table.items():
        self.assertAlmostEqual(
            accounting.blt_sensitivity_squared(
                blt, rounds=n, min_separation=min_sep,
                max_participation=max_p), expected, places=9)

  def test_equals_jax_privacy(self):
    ref = _reference()
    self.assertGreater(len(ref['sensitivity']), 400)
    for case in ref['sensitivity']:
      coefs = np.array(ref['coefficients'][case['coefficients']])
      got = accounting.minsep_sensitivity_squared(
          coefs[:case['n']],
          min_separation=case['b'] - 1,   # jax_privacy's min_sep is b.
          max_participation=case['k'])
      np.testing.assert_allclose(got, case['sensitivity_squared'],
                                 rtol=1e-10, err_msg=str(case))

  def test_increasing_or_negative_coefficients_are_refused(self):
    with self.assertRaisesRegex(ValueError, r'non-increasing .*c_2 = 0\.9 > '
                                r'c_1 = 0\.5'):
      accounting.minsep_sensitivity_squared([1.0, 0.5, 0.9],
                                            min_separation=0)
    with self.assertRaisesRegex(ValueError, 'non-negative .*c_1 = -0.1'):
      accounting.minsep_sensitivity_squared([1.0, -0.1], min_separation=0)
    # c_1 = sum(omega) = 1.2 > c_0 = 1.
    with self.assertRaisesRegex(ValueError, 'c_1 = 1.2 > c_0 = 1'):
      accounting.blt_sensitivity_squared(
          toeplitz.BLT([0.5, 0.2], [0.7, 0.5]), rounds=10, min_separation=0)
    with self.assertRaisesRegex(ValueError, 'non-negative'):
      accounting.compute_privacy(
          rounds=10, noise_multiplier=1.0, min_separation=2,
          blt=toeplitz.BLT([0.9], [-0.5]))


class BLTTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('one', [0.8], [0.3]), ('three', [0.99, 0.7, 0.3], [0.05, 0.2, 0.1]))
  def test_inverse_is_the_matrix_inverse(self, decay, scale):
    blt = toeplitz.BLT(decay, scale)
    n = 40
    dense_inverse = np.linalg.inv(_toeplitz_matrix(blt.toeplitz_coefs(n)))
    np.testing.assert_allclose(
        _toeplitz_matrix(blt.inverse().toeplitz_coefs(n)), dense_inverse,
        atol=1e-10)
    # The decay pair gives both back.
    pair = toeplitz.BLT.from_decay_pair(blt.buf_decay,
                                        blt.inverse().buf_decay)
    np.testing.assert_allclose(pair.output_scale, blt.output_scale,
                               rtol=1e-9)

  def test_inverse_outside_the_blt_family_is_refused(self):
    # sum(omega / theta) > 1: C^-1 has a negative decay.
    with self.assertRaisesRegex(ValueError, r'inverse of BLT.* decays .* '
                                r'outside \(0, 1\)'):
      toeplitz.BLT([0.99, 0.7, 0.1], [0.05, 0.2, 0.3]).inverse()

  def test_prefix_variance_is_the_row_norms_of_a_c_inverse(self):
    blt = toeplitz.BLT([0.9, 0.3], [0.2, 0.1])
    n = 30
    a = np.tril(np.ones((n, n)))
    b = a @ np.linalg.inv(_toeplitz_matrix(blt.toeplitz_coefs(n)))
    np.testing.assert_allclose(accounting.blt_prefix_variance(blt, n),
                               np.sum(b**2, axis=1), rtol=1e-10)

  def test_tree_prefix_variance_closed_form(self):
    # Rounds 1, 2, 3, 4: leaf; level-1 node; level-1 + leaf; level-2 node.
    np.testing.assert_allclose(accounting.tree_prefix_variance(4),
                               [1, 2 / 3, 5 / 3, 4 / 7])

  @parameterized.named_parameters(
      ('decay_one', [1.0], [0.1], r'strictly inside \(0, 1\)'),
      ('decay_zero', [0.0], [0.1], r'strictly inside \(0, 1\)'),
      ('equal', [0.5, 0.5], [0.1, 0.1], 'distinct'),
      ('lengths', [0.5, 0.4], [0.1], 'as many output scales'),
      ('nan', [0.5], [float('nan')], 'finite'))
  def test_bad_parameters_are_refused(self, decay, scale, message):
    with self.assertRaisesRegex(ValueError, message):
      toeplitz.BLT(decay, scale)

  def test_load_refuses_bad_files(self):
    folder = tempfile.mkdtemp()
    for name, content in (('partial', '{"buf_decay": [0.5]}'), ('bad', '{')):
      with open(os.path.join(folder, name), 'w') as f:
        f.write(content)
    with self.assertRaisesRegex(ValueError, 'lists "buf_decay" and '
                                '"output_scale"'):
      toeplitz.BLT.load(os.path.join(folder, 'partial'))
    with self.assertRaisesRegex(ValueError, 'not JSON'):
      toeplitz.BLT.load(os.path.join(folder, 'bad'))
    with self.assertRaisesRegex(ValueError, 'Cannot read'):
      toeplitz.BLT.load('/nonexistent/blt.json')

  def test_compute_privacy_is_sens_squared_over_two_z_squared(self):
    blt = toeplitz.BLT([0.95, 0.6], [0.1, 0.3])
    report = accounting.compute_privacy(
        rounds=50, noise_multiplier=3.0, min_separation=9,
        max_participation=3, blt=blt)
    coefs = blt.toeplitz_coefs(50)
    u = np.zeros(50)
    u[[0, 10, 20]] = 1
    expected = np.sum((_toeplitz_matrix(coefs) @ u)**2)
    self.assertAlmostEqual(report.sensitivity_squared, expected, places=10)
    self.assertAlmostEqual(report.zcdp, expected / 18.0, places=12)
    self.assertEqual(report.mechanism, 'blt')
    with self.assertRaisesRegex(ValueError, 'no tree restarts'):
      accounting.compute_privacy(rounds=50, noise_multiplier=3.0,
                                 restart_rounds=[10], blt=blt)


class OptimizerTest(parameterized.TestCase):

  def test_loss_of_jax_privacy_blts_equals_theirs(self):
    for case in _reference()['optimize']:
      blt = toeplitz.BLT(case['buf_decay'], case['output_scale'])
      value, _, _ = blt_optimizer.loss(
          blt, rounds=case['n'], min_separation=case['b'] - 1,
          max_participation=case['k'])
      np.testing.assert_allclose(value, case['max_loss'], rtol=1e-8)

  def test_within_two_percent_of_jax_privacy_at_de_de(self):
    case = _reference()['optimize'][0]
    self.assertEqual((case['n'], case['b'], case['k']), (930, 213, 4))
    result = blt_optimizer.optimize(rounds=930, min_separation=212,
                                    max_participation=4)
    self.assertLessEqual(result.loss, 1.02 * case['max_loss'])
    # Theorem 2's assumptions hold for what it returns.
    toeplitz.check_nonincreasing(result.blt.toeplitz_coefs(930))

  def test_beats_the_identity_and_the_mean_objective(self):
    for error in ('max', 'mean'):
      result = blt_optimizer.optimize(rounds=64, min_separation=7,
                                      max_participation=None,
                                      num_buffers=2, error=error)
      self.assertEqual(result.blt.num_buffers, 2)
      identity_loss = 8 * (64 if error == 'max' else 32.5)
      self.assertLess(result.loss, identity_loss)

  @parameterized.named_parameters(
      ('buffers', dict(num_buffers=8), 'num_buffers must be an integer '
       '<= 7'),
      ('error', dict(error='median'), "error must be one of max, mean"),
      ('rounds', dict(rounds=0), 'rounds must be an integer >= 1'),
      ('min_sep', dict(min_separation=-1), 'min_separation must be'),
      ('max_p', dict(max_participation=0), 'max_participation must be'))
  def test_bad_arguments(self, overrides, message):
    kwargs = dict(rounds=10, min_separation=1, max_participation=None)
    kwargs.update(overrides)
    with self.assertRaisesRegex(ValueError, message):
      blt_optimizer.optimize(**kwargs)


class CompareMechanismsTest(absltest.TestCase):

  def test_blt_at_its_noise_multiplier_has_the_trees_zcdp(self):
    from dpftrl_tff.accounting import comparison  # pylint: disable=g-import-not-at-top
    row = comparison.compare_row(200, 30, 5)
    blt = toeplitz.BLT([float(x) for x in row['blt_buf_decay'].split()],
                       [float(x) for x in row['blt_output_scale'].split()])
    at_z_blt = accounting.compute_privacy(
        rounds=200, noise_multiplier=row['blt_noise_multiplier_at_tree_zcdp'],
        min_separation=30, max_participation=5, blt=blt, with_epsilon=False)
    self.assertAlmostEqual(at_z_blt.zcdp, row['tree_zcdp'], places=9)
    self.assertLess(row['blt_zcdp'], row['tree_zcdp'])
    self.assertLess(row['std_ratio'], 1.0)
    self.assertAlmostEqual(
        row['blt_max_noise_std'],
        row['blt_noise_multiplier_at_tree_zcdp'] *
        np.sqrt(accounting.blt_prefix_variance(blt, 200)[-1]), places=6)
    # BandMF: column-normalized with min(MinS + 1, 64) bands, so MaxP unit
    # columns: rho = MaxP / (2 z^2) in closed form, and at its z the tree's.
    self.assertEqual(row['bandmf_bands'], 31)
    self.assertAlmostEqual(row['bandmf_zcdp'], 5 / (2 * 7.0**2), places=12)
    self.assertAlmostEqual(
        5 / (2 * row['bandmf_noise_multiplier_at_tree_zcdp']**2),
        row['tree_zcdp'], places=12)
    self.assertAlmostEqual(
        row['bandmf_max_noise_std'],
        row['bandmf_noise_multiplier_at_tree_zcdp'] * np.sqrt(np.max(
            bandmf.prefix_sum_errors(bandmf.initial_strategy(200, 31)))),
        places=9)


if __name__ == '__main__':
  absltest.main()
