"""Tests of the DP-FTRL factory: clipping, normalization and noise std."""


from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff.aggregators import dp_ftrl
from dpftrl_tff.run import config as config_lib

DIM = 20000


def _process(noise_multiplier, clients, clip, noise_seed=None):
  factory = dp_ftrl.build_dp_ftrl_factory(
      noise_multiplier=noise_multiplier, clients_per_round=clients,
      clip_norm=clip, record_specs=tf.TensorSpec([DIM], tf.float32),
      noise_seed=noise_seed)
  return factory.create(tff.TensorType(np.float32, [DIM]))


class DpFtrlFactoryTest(parameterized.TestCase):

  def test_clip_and_normalize_without_noise(self):
    process = _process(0.0, clients=4, clip=1.0)
    state = process.initialize()
    rng = np.random.default_rng(0)
    updates = [rng.normal(size=DIM).astype(np.float32) * s
               for s in (1e-3, 1.0, 5.0)]
    out = process.next(state, updates)
    expected = sum(u * min(1.0, 1.0 / np.linalg.norm(u)) for u in updates) / 4
    np.testing.assert_allclose(out.result, expected, rtol=1e-4, atol=1e-6)

  @parameterized.named_parameters(('z1', 1.0, 10, 0.5), ('z7', 7.0, 50, 2.0))
  def test_first_round_noise_std_is_z_c_over_m(self, z, clients, clip):
    process = _process(z, clients=clients, clip=clip)
    out = process.next(process.initialize(),
                       [np.zeros(DIM, np.float32)] * 3)
    noise = np.asarray(out.result)
    expected = z * clip / clients
    # The sample std of 20000 Gaussians is within 3% with overwhelming
    # probability (its relative std is 1/sqrt(2 * 20000) = 0.5%).
    self.assertAlmostEqual(np.std(noise) / expected, 1.0, delta=0.03)
    self.assertAlmostEqual(np.mean(noise) / expected, 0.0, delta=0.03)

  def test_cumulative_noise_of_tree(self):
    # The noisy prefix sum after 4 rounds is the root node of a 4-leaf tree:
    # its noise has std z C / m (not 2 z C / m as for independent noise).
    # The efficient tree estimator is no worse.
    z, clients, clip = 2.0, 10, 1.0
    process = _process(z, clients=clients, clip=clip)
    state = process.initialize()
    total = np.zeros(DIM)
    for _ in range(4):
      out = process.next(state, [np.zeros(DIM, np.float32)])
      state = out.state
      total += np.asarray(out.result)
    self.assertLess(np.std(total), 1.03 * z * clip / clients)
    self.assertGreater(np.std(total), 0.5 * z * clip / clients)

  def test_noise_is_unpredictable_by_default(self):
    a = _process(1.0, 5, 1.0).next(_process(1.0, 5, 1.0).initialize(),
                                   [np.zeros(DIM, np.float32)])
    p = _process(1.0, 5, 1.0)
    b = p.next(p.initialize(), [np.zeros(DIM, np.float32)])
    self.assertFalse(np.allclose(a.result, b.result))

  def test_seeded_noise_repeats(self):
    # (The binaries warn, once, where --noise_seed enters: training_test.)
    p1 = _process(1.0, 5, 1.0, noise_seed=3)
    p2 = _process(1.0, 5, 1.0, noise_seed=3)
    a = p1.next(p1.initialize(), [np.zeros(DIM, np.float32)])
    b = p2.next(p2.initialize(), [np.zeros(DIM, np.float32)])
    np.testing.assert_array_equal(a.result, b.result)

  @parameterized.named_parameters(
      ('negative_noise', dict(noise_multiplier=-1.0), '--noise_multiplier'),
      ('nan_noise', dict(noise_multiplier=float('nan')), '--noise_multiplier'),
      ('inf_noise', dict(noise_multiplier=float('inf')), '--noise_multiplier'),
      ('zero_clip', dict(clip_norm=0.0), '--clip_norm'),
      ('negative_clip', dict(clip_norm=-1.0), '--clip_norm'),
      ('zero_clients', dict(clients_per_round=0), '--clients_per_round'),
  )
  def test_bad_arguments(self, override, flag):
    # Checked once, where the settings enter (the config); the factory only
    # asserts.
    args = dict(noise_multiplier=1.0, clip_norm=1.0, clients_per_round=5)
    args.update(override)
    with self.assertRaisesRegex(ValueError, flag):
      config_lib.TrainConfig(aggregator='dp_ftrl', **args)
    with self.assertRaises(AssertionError):
      dp_ftrl.build_dp_ftrl_factory(
          record_specs=tf.TensorSpec([3], tf.float32), **args)


if __name__ == '__main__':
  absltest.main()
