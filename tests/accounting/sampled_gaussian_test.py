"""DP-FedAvg's Poisson-subsampled Gaussian against independent computations."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
from scipy import integrate
from scipy import optimize

from dpftrl_tff import accounting
from dpftrl_tff.accounting import sampled_gaussian


def _normal_pdf(x, mean, std):
  # Written out: scipy.stats.norm.pdf warns (NumPy deprecation) per call.
  return math.exp(-0.5 * ((x - mean) / std)**2) / (std * math.sqrt(2 * math.pi))


def _hockey_stick(eps, p, q, lo=-40.0, hi=40.0):
  """int max(0, p(x) - e^eps q(x)) dx by quadrature."""
  value, _ = integrate.quad(lambda x: max(0.0, p(x) - math.exp(eps) * q(x)),
                            lo, hi, limit=400, points=[0.0, 1.0])
  return value


def brute_force_one_round(z, q, delta):
  """epsilon of one round by quadrature of the hockey-stick divergence
  between the mixture (1 - q) N(0, z^2) + q N(1, z^2) and N(0, z^2), both
  directions (sensitivity 1, add/remove adjacency)."""
  def mixture(x):
    return (1 - q) * _normal_pdf(x, 0, z) + q * _normal_pdf(x, 1, z)

  def null(x):
    return _normal_pdf(x, 0, z)

  def worst(eps):
    return max(_hockey_stick(eps, mixture, null),
               _hockey_stick(eps, null, mixture)) - delta

  if worst(0.0) <= 0:
    return 0.0
  return optimize.brentq(worst, 0.0, 50.0, xtol=1e-9)


class SampledGaussianTest(parameterized.TestCase):

  @parameterized.parameters((1.0, 1, 1e-5), (3.0, 10, 1e-10),
                            (7.0, 2000, 1e-10), (0.8, 50, 1e-6))
  def test_without_sampling_it_is_the_composed_gaussian(self, z, rounds,
                                                        delta):
    # q = 1: T Gaussian mechanisms of noise z compose to one of noise
    # z / sqrt(T), rho = T / (2 z^2), whose epsilon is exact.
    got = sampled_gaussian.poisson_gaussian_privacy(
        noise_multiplier=z, sampling_probability=1.0, rounds=rounds,
        delta=delta).epsilon
    want = accounting.epsilon_analytic_gaussian(rounds / (2 * z * z), delta)
    self.assertAlmostEqual(got / want, 1.0, delta=0.01)

  @parameterized.parameters((1.0, 0.1, 1e-5), (0.7, 0.3, 1e-5),
                            (2.0, 0.5, 1e-6))
  def test_one_round_equals_brute_force(self, z, q, delta):
    got = sampled_gaussian.poisson_gaussian_privacy(
        noise_multiplier=z, sampling_probability=q, rounds=1,
        delta=delta).epsilon
    self.assertAlmostEqual(got / brute_force_one_round(z, q, delta), 1.0,
                           delta=0.01)

  @parameterized.parameters((7.0, 6500 / 4.21e6, 2000), (1.0, 0.01, 1000),
                            (0.7, 0.05, 200))
  def test_below_the_rdp_bound_and_amplified(self, z, q, rounds):
    report = sampled_gaussian.poisson_gaussian_privacy(
        noise_multiplier=z, sampling_probability=q, rounds=rounds,
        delta=1e-10)
    self.assertLessEqual(report.epsilon, report.epsilon_rdp * (1 + 1e-3))
    self.assertGreater(report.epsilon, report.epsilon_rdp / 1.5)
    unsampled = sampled_gaussian.poisson_gaussian_privacy(
        noise_multiplier=z, sampling_probability=1.0, rounds=rounds,
        delta=1e-10)
    self.assertLess(report.epsilon, unsampled.epsilon)
    self.assertIn('cannot guarantee', report.assumption)

  def test_monotone(self):
    def eps(**kw):
      args = dict(noise_multiplier=1.0, sampling_probability=0.05,
                  rounds=100, delta=1e-8)
      args.update(kw)
      return sampled_gaussian.poisson_gaussian_privacy(**args).epsilon
    self.assertLess(eps(sampling_probability=0.02), eps())
    self.assertLess(eps(rounds=50), eps())
    self.assertLess(eps(noise_multiplier=2.0), eps())
    self.assertTrue(np.isfinite(eps()))

  @parameterized.parameters(
      (dict(sampling_probability=0.0), '--sampling_probability'),
      (dict(sampling_probability=1.5), '--sampling_probability'),
      (dict(noise_multiplier=0.0), '--noise_multiplier'),
      (dict(rounds=0), '--rounds'))
  def test_bad_values_name_the_flag(self, override, flag):
    args = dict(noise_multiplier=1.0, sampling_probability=0.1, rounds=10)
    args.update(override)
    with self.assertRaisesRegex(ValueError, flag):
      sampled_gaussian.poisson_gaussian_privacy(**args)


class NoiseForEpsilonTest(absltest.TestCase):

  def test_meets_the_target_and_is_the_smallest(self):
    for q, rounds, target in ((0.2, 10, 3.0),):
      z = sampled_gaussian.noise_for_epsilon(
          target, sampling_probability=q, rounds=rounds)
      at = sampled_gaussian.poisson_gaussian_privacy(
          noise_multiplier=z, sampling_probability=q, rounds=rounds).epsilon
      below = sampled_gaussian.poisson_gaussian_privacy(
          noise_multiplier=z / (1 + 2e-4), sampling_probability=q,
          rounds=rounds).epsilon
      self.assertLessEqual(at, target)
      self.assertGreater(below, target)

  def test_unreachable_target(self):
    with self.assertRaisesRegex(ValueError, 'needs z > 100'):
      sampled_gaussian.noise_for_epsilon(1e-6, sampling_probability=1.0,
                                         rounds=100)


if __name__ == '__main__':
  absltest.main()
