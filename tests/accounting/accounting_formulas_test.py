"""Tests of the privacy formulas against independent computations."""

import math
import time

from absl.testing import absltest
from absl.testing import parameterized
import dp_accounting
import numpy as np
from scipy import optimize
from scipy import stats

from dpftrl_tff import accounting
from dpftrl_tff.accounting import conversions
from dpftrl_tff.accounting import secagg


def _analytic_gaussian_epsilon(rho, delta):
  """Exact epsilon of the Gaussian mechanism (Balle & Wang 2018, Thm. 8).

  mu = sqrt(2 rho) is the sensitivity over the noise std;
  delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2).
  """
  mu = math.sqrt(2 * rho)

  def gap(eps):
    return (stats.norm.cdf(-eps / mu + mu / 2) -
            math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - delta)

  return optimize.brentq(gap, 0.0, 200.0, xtol=1e-12)


class ConversionTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('paper_smallest', 0.25, 1e-10),
      ('paper_largest', 1.86, 1e-10),
      ('otf', 0.89, 1e-10),
      ('small', 0.01, 1e-6),
      ('large', 5.0, 1e-5),
  )
  def test_pld_equals_analytic_gaussian(self, rho, delta):
    self.assertAlmostEqual(accounting.epsilon_pld(rho, delta),
                           _analytic_gaussian_epsilon(rho, delta), delta=2e-3)

  @parameterized.named_parameters(('a', 0.25, 1e-10), ('b', 1.86, 1e-10),
                                  ('c', 0.05, 1e-5))
  def test_closed_form_equals_optimal_rdp_conversion(self, rho, delta):
    # rho-zCDP means RDP eps(a) = rho a for all a > 1; the classic conversion
    # eps = min_a rho a + log(1/delta)/(a - 1) is the closed form.
    res = optimize.minimize_scalar(
        lambda a: rho * a + math.log(1 / delta) / (a - 1),
        bounds=(1 + 1e-9, 1e6), method='bounded', options={'xatol': 1e-12})
    self.assertAlmostEqual(accounting.epsilon_closed_form(rho, delta),
                           res.fun, places=5)

  @parameterized.named_parameters(('a', 0.25), ('b', 1.86), ('c', 19.0))
  def test_analytic_gaussian_in_log_space(self, rho):
    self.assertAlmostEqual(accounting.epsilon_analytic_gaussian(rho, 1e-10),
                           _analytic_gaussian_epsilon(rho, 1e-10), places=6)

  def test_large_zcdp_is_fast_and_consistent(self):
    start = time.perf_counter()
    eps = [accounting.epsilon_pld(rho) for rho in (25.0, 1e3, 1e5)]
    self.assertLess(time.perf_counter() - start, 5.0)
    self.assertEqual(eps, sorted(eps))
    for rho, e in zip((25.0, 1e3, 1e5), eps):
      self.assertLess(e, accounting.epsilon_closed_form(rho))
      self.assertGreater(e, rho)   # eps >= rho for the Gaussian at small delta
    # At the switch from PLD to the analytic formula both agree.
    rho = conversions.PLD_MAX_ZCDP
    self.assertAlmostEqual(accounting.epsilon_pld(rho),
                           accounting.epsilon_analytic_gaussian(rho),
                           delta=5e-3)

  def test_pld_is_the_unmodified_accountants_bit_for_bit(self):
    # epsilon_pld runs dp_accounting with the vectorized Gaussian loss; the
    # unmodified PLDAccountant must give the same float, not a close one.
    rng = np.random.default_rng(0)
    cases = [(rho, delta) for rho in (1e-3, 0.05, 0.37, 1.86, 6.1)
             for delta in (1e-10, 1e-5)]
    cases += [(float(rho), 1e-10) for rho in 10 ** rng.uniform(-2, 1, 3)]
    for rho, delta in cases:
      self.assertEqual(
          conversions._epsilon_pld(rho, delta, 1e-4),  # pylint: disable=protected-access
          conversions.library_epsilon_pld(rho, delta), (rho, delta))
    # The library's own class is back after every computation.
    self.assertIs(
        dp_accounting.pld.privacy_loss_mechanism.GaussianPrivacyLoss,
        conversions._VectorizedGaussianPrivacyLoss.__bases__[0])  # pylint: disable=protected-access

  def test_vectorized_delta_curve_is_the_librarys_elementwise(self):
    # Random sigmas, sensitivities and epsilon grids, both adjacencies:
    # the array method equals the library's element by element, exactly.
    plm = dp_accounting.pld.privacy_loss_mechanism
    rng = np.random.default_rng(1)
    for _ in range(20):
      sigma, sensitivity = 10 ** rng.uniform(-1, 1), rng.uniform(0.1, 3)
      epsilons = np.sort(rng.uniform(-5, 40, 200))
      for adjacency in plm.AdjacencyType:
        args = dict(sensitivity=sensitivity, adjacency_type=adjacency)
        fast = conversions._VectorizedGaussianPrivacyLoss(sigma, **args)  # pylint: disable=protected-access
        library = plm.GaussianPrivacyLoss(sigma, **args)
        np.testing.assert_array_equal(
            fast.get_delta_for_epsilon(epsilons),
            library.get_delta_for_epsilon(epsilons))
        self.assertEqual(fast.get_delta_for_epsilon(1.5),
                         library.get_delta_for_epsilon(1.5))

  def test_pld_is_tighter_than_closed_form(self):
    for rho in [0.1, 0.5, 1.0, 2.0]:
      self.assertLess(accounting.epsilon_pld(rho),
                      accounting.epsilon_closed_form(rho))

  def test_bad_delta(self):
    with self.assertRaisesRegex(ValueError, 'delta'):
      accounting.epsilon_pld(0.5, 0.0)
    with self.assertRaisesRegex(ValueError, 'delta'):
      accounting.epsilon_closed_form(0.5, 1.5)


class AdaptiveNoiseTest(parameterized.TestCase):

  @parameterized.named_parameters(('paper', 7.0, 6500 / 20),
                                  ('small_report_goal', 0.54, 500 / 20),
                                  ('tight', 1.0, 0.6))
  def test_composition_equals_plain_gaussian(self, z, sigma_b):
    z_delta = accounting.value_noise_multiplier(z, sigma_b)
    self.assertGreater(z_delta, z)
    # Independent check with dp_accounting's RDP accountant: the value release
    # (noise multiplier z_delta) composed with the count release (sensitivity
    # 1/2, std sigma_b, i.e. noise multiplier 2 sigma_b) equals one Gaussian
    # with noise multiplier z, at every order.
    orders = [1.5, 2.0, 8.0, 32.0, 256.0]
    joint = dp_accounting.rdp.RdpAccountant(orders)
    joint.compose(dp_accounting.GaussianDpEvent(z_delta))
    joint.compose(dp_accounting.GaussianDpEvent(2 * sigma_b))
    plain = dp_accounting.rdp.RdpAccountant(orders)
    plain.compose(dp_accounting.GaussianDpEvent(z))
    np.testing.assert_allclose(joint._rdp, plain._rdp, rtol=1e-9)  # pylint: disable=protected-access
    self.assertAlmostEqual(
        accounting.equivalent_noise_multiplier(z_delta, sigma_b), z,
        places=9)

  def test_no_solution_is_a_clear_error(self):
    with self.assertRaisesRegex(ValueError, 'clipped_count_stddev > 3.5'):
      accounting.value_noise_multiplier(7.0, 3.5)

  def test_default_sigma_b(self):
    self.assertEqual(accounting.default_clipped_count_stddev(6500), 325.0)


class SecAggTest(parameterized.TestCase):

  def test_inflated_clip_norm_formula(self):
    c, d, s, alpha = 0.3, 2**22, 2.0**10, math.exp(-0.5)
    expected = math.sqrt(c**2 + d / (4 * s**2) + math.sqrt(
        2 * math.log(1 / alpha)) * (c / s + math.sqrt(d) / (2 * s**2)))
    self.assertAlmostEqual(accounting.inflated_clip_norm(c, d, s, alpha),
                           expected, places=12)

  def test_inflation_vanishes_with_scale(self):
    values = [accounting.inflated_clip_norm(1.0, 2**20, s)
              for s in (10.0, 100.0, 1e3, 1e4, 1e6)]
    self.assertEqual(values, sorted(values, reverse=True))
    self.assertAlmostEqual(values[-1], 1.0, places=5)

  @parameterized.named_parameters(('d256', 256, 50.0), ('d1024', 1024, 20.0))
  def test_rounding_bound_holds_with_probability_one_minus_alpha(self, d,
                                                                  scale):
    # Statistical check of the conditional-rounding bound: unconditional
    # stochastic rounding of a vector with ||x|| = s C must meet it with
    # probability at least 1 - alpha.
    rng = np.random.default_rng(0)
    c = 1.0
    alpha = math.exp(-0.5)
    bound = secagg.rounding_norm_bound_squared(c, d, scale, alpha)
    x = rng.normal(size=d)
    x *= scale * c / np.linalg.norm(x)
    trials = 2000
    floor = np.floor(x)
    frac = x - floor
    rounded = floor + (rng.random((trials, d)) < frac)
    rate = np.mean(np.sum(rounded**2, axis=1) <= bound)
    self.assertGreaterEqual(rate, 1 - alpha)

  def test_modulus_and_bits(self):
    c_inf = accounting.linf_bound(1.0, 1024, 100.0)
    self.assertEqual(c_inf, math.ceil(2 * 100.0 * math.log(1024) / 32))
    m = accounting.modulus(1.0, 1024, 100.0, 10)
    self.assertEqual(m, 2 * c_inf * 10 + 1)
    self.assertEqual(accounting.bits_per_parameter(m),
                     math.ceil(math.log2(m)))
    self.assertEqual(accounting.bits_per_parameter(1024), 10)
    self.assertEqual(accounting.bits_per_parameter(1025), 11)

  def test_padded_dimension(self):
    self.assertEqual(accounting.padded_dimension(2_383_022), 2**22)
    self.assertEqual(accounting.padded_dimension(1024), 1024)

  def test_secagg_raises_zcdp(self):
    plain = accounting.compute_privacy(rounds=930, noise_multiplier=7.0,
                                       max_participation=4,
                                       min_separation=212)
    with_secagg = accounting.compute_privacy(
        rounds=930, noise_multiplier=7.0, max_participation=4,
        min_separation=212, secagg_scale=100.0, model_dim=2_383_022,
        clip_norm=5.0)
    ratio = (with_secagg.secagg['inflated_clip_norm'] / 5.0)**2
    self.assertAlmostEqual(with_secagg.zcdp, plain.zcdp * ratio, places=12)

  def test_partial_secagg_arguments(self):
    with self.assertRaisesRegex(ValueError, 'secagg_scale, model_dim and'):
      accounting.compute_privacy(rounds=10, noise_multiplier=1.0,
                                 secagg_scale=10.0)


class PopulationTest(parameterized.TestCase):

  @parameterized.named_parameters(('paper_1m', 1_000_000, 6500),
                                  ('es_es', 4_210_000, 6500),
                                  ('small', 100, 7), ('exact', 120, 6))
  def test_max_min_separation_is_achieved_and_tight(self, population,
                                                   report_goal):
    min_sep = accounting.max_min_separation(population, report_goal)
    # Achievable: a cyclic schedule over the population, report_goal clients
    # a round, brings a client back after exactly floor(P/m) rounds.
    period = population // report_goal
    last_seen = {}
    observed = math.inf
    for t in range(3 * period):
      for client in range((t % period) * report_goal,
                          (t % period + 1) * report_goal):
        if client in last_seen:
          observed = min(observed, t - last_seen[client] - 1)
        last_seen[client] = t
    self.assertEqual(observed, min_sep)
    # Tight: one more round of separation needs more distinct clients.
    self.assertGreater((min_sep + 2) * report_goal, population)

  def test_population_smaller_than_report_goal(self):
    with self.assertRaisesRegex(ValueError, 'population'):
      accounting.max_min_separation(100, 500)

  def test_worst_case_max_participation(self):
    self.assertEqual(accounting.worst_case_max_participation(930, 212), 5)
    self.assertEqual(accounting.worst_case_max_participation(213, 212), 1)
    self.assertEqual(accounting.worst_case_max_participation(214, 212), 2)


if __name__ == '__main__':
  absltest.main()
