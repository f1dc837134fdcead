"""Algorithm 1 (adaptive clipping through restarts) against NumPy."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff import accounting
from dpftrl_tff.aggregators import adaptive
from dpftrl_tff.run import config as config_lib


def numpy_algorithm_1(norms_per_round, *, initial_clip, eta, gamma, warmup,
                      frequency):
  """Noise-free Algorithm 1 on scalar updates of the given norms.

  Returns per round: (mean of clipped updates, estimate C^{t+1}, clip in
  force after the round).
  """
  clip_in_force = estimate = tree_start_clip = initial_clip
  cumulative_b, steps, out = 0.0, 0, []
  for t, norms in enumerate(norms_per_round):
    b = np.mean(norms <= estimate)                  # b_i = 1[|D_i| <= C^t]
    mean_clipped = np.mean(np.minimum(norms, clip_in_force))
    cumulative_b += b
    steps += 1
    estimate = tree_start_clip * math.exp(-eta * (cumulative_b - steps * gamma))
    if t + 1 >= warmup and (t + 1 - warmup) % frequency == 0:   # restart
      clip_in_force = tree_start_clip = estimate
      cumulative_b, steps = 0.0, 0
    out.append((mean_clipped, estimate, clip_in_force))
  return out


def _factory(dim, noise_multiplier, m, sigma_b, **kwargs):
  return adaptive.build_dp_ftrl_adaptive_factory(
      noise_multiplier=noise_multiplier, clients_per_round=m,
      record_specs=tf.TensorSpec([dim], tf.float32),
      clipped_count_stddev=sigma_b, **kwargs).create(
          tff.TensorType(np.float32, [dim]))


class AdaptiveClippingTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('short_period', 1.0, 0.2, 0.5, 2, 3),
      ('paper_like_rates', 0.1, 0.2, 0.5, 3, 5),
      ('low_quantile', 2.0, 0.5, 0.2, 1, 4),
  )
  def test_noise_free_run_equals_numpy_algorithm_1(self, c0, eta, gamma,
                                                   warmup, frequency):
    m, rounds = 5, 14
    process = _factory(2, 0.0, m, 0.0, initial_clip_norm=c0,
                       clip_learning_rate=eta,
                       target_unclipped_quantile=gamma,
                       restart_warmup=warmup, restart_frequency=frequency)
    rng = np.random.default_rng(1)
    norms = [rng.uniform(0.05, 3.0, size=m) for _ in range(rounds)]
    expected = numpy_algorithm_1(norms, initial_clip=c0, eta=eta, gamma=gamma,
                                 warmup=warmup, frequency=frequency)
    state = process.initialize()
    for t in range(rounds):
      out = process.next(state, [np.array([n, 0.0], np.float32)
                                 for n in norms[t]])
      state = out.state
      metrics = out.measurements['dp_query_metrics']
      mean_clipped, estimate, clip = expected[t]
      self.assertAlmostEqual(float(out.result[0]), mean_clipped, places=5)
      self.assertAlmostEqual(float(metrics['estimate_clip']), estimate,
                             places=5)
      self.assertAlmostEqual(float(metrics['current_clip']), clip, places=5)

  def test_clip_in_force_changes_only_at_restarts(self):
    process = _factory(2, 0.0, 4, 0.0, initial_clip_norm=1.0,
                       restart_warmup=3, restart_frequency=4)
    state = process.initialize()
    clips = []
    for _ in range(12):
      out = process.next(state, [np.array([5.0, 0.0], np.float32)] * 4)
      state = out.state
      clips.append(float(out.measurements['dp_query_metrics']['current_clip']))
    changes = [t for t in range(1, 12) if clips[t] != clips[t - 1]]
    # Clip of round index t is the one in force after round t; new trees (and
    # new clips) start at rounds warmup + frequency i = 3, 7, 11.
    self.assertEqual([t + 1 for t in changes],
                     accounting.paper_restart_rounds(12, warmup=3,
                                                     frequency=4)[:len(changes)])

  def test_value_noise_is_theorem_1_z_delta(self):
    dim, m, z, sigma_b, c0 = 20000, 10, 1.0, 2.0, 0.7
    process = _factory(dim, z, m, sigma_b, initial_clip_norm=c0)
    out = process.next(process.initialize(), [np.zeros(dim, np.float32)] * m)
    z_delta = accounting.value_noise_multiplier(z, sigma_b)
    self.assertAlmostEqual(np.std(out.result) / (z_delta * c0 / m), 1.0,
                           delta=0.03)

  def test_count_noise_std_is_sigma_b(self):
    # With restarts after rounds 0, 2, 4, ... (warmup 1, frequency 2) each
    # new tree's first round r has log(C^{r+1} / C^r) = -eta (b~ - gamma),
    # b~ = (sum_i (b_i - 1/2) + N(0, sigma_b^2)) / m + 1/2, the noise a fresh
    # leaf of the count tree. Half the clients are unclipped (norms far on
    # either side of the estimate: b~ = 1/2 + noise, std sigma_b / m = 1/16,
    # far from TFP's clamp of b~ to [0, 1], a post-processing), so over those
    # rounds log(C^{r+1} / C^r) has std eta sigma_b / m and mean 0.
    m, sigma_b, eta, segments = 8, 0.5, 0.2, 200
    process = _factory(2, 0.5, m, sigma_b, initial_clip_norm=1.0,
                       clip_learning_rate=eta, restart_warmup=1,
                       restart_frequency=2)
    records = [np.array([n, 0.0], np.float32)
               for n in [0.05] * (m // 2) + [30.0] * (m // 2)]
    state, estimates = process.initialize(), [1.0]
    for _ in range(2 * segments - 1):
      out = process.next(state, records)
      state = out.state
      estimates.append(float(
          out.measurements['dp_query_metrics']['estimate_clip']))
    # estimates[t + 1] is C^{t+1}, made in round t; trees start at rounds 0,
    # 1, 3, 5, ...
    logs = [math.log(estimates[r + 1] / estimates[r])
            for r in [0] + list(range(1, 2 * segments - 1, 2))]
    trials = len(logs)
    expected = eta * sigma_b / m
    # Sample std of 200 Gaussians: relative error below 17% w.p. > 0.99.
    self.assertAlmostEqual(np.std(logs) / expected, 1.0, delta=0.17)
    self.assertAlmostEqual(np.mean(logs), 0.0,
                           delta=4 * expected / math.sqrt(trials))

  @parameterized.named_parameters(
      ('no_z_delta', dict(noise_multiplier=7.0, clipped_count_stddev=3.0),
       '--clipped_count_stddev'),
      ('bad_quantile', dict(target_unclipped_quantile=1.0),
       '--target_unclipped_quantile'),
      ('bad_clip', dict(initial_clip_norm=0.0), '--initial_clip_norm'),
      ('warmup_not_below_frequency', dict(restart_warmup=5,
                                          restart_frequency=5),
       '--restart_warmup'),
  )
  def test_bad_arguments(self, override, flag):
    # Checked once, where the settings enter (the config).
    args = dict(noise_multiplier=1.0, clients_per_round=10,
                clipped_count_stddev=1.0, restart_warmup=2,
                restart_frequency=5)
    args.update(override)
    with self.assertRaisesRegex(ValueError, flag):
      config_lib.TrainConfig(aggregator='dp_ftrl_adaptive', **args)


if __name__ == '__main__':
  absltest.main()
