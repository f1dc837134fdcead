"""DP-FedAvg with Poisson sampling: the sampler, the mechanism's settings,
its noise and its accounting against dp_accounting."""

import json

from absl.testing import absltest
from absl.testing import parameterized
import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff import participation
from dpftrl_tff.aggregators import registry
from dpftrl_tff.participation import poisson
from dpftrl_tff.privacy import planned_privacy
from dpftrl_tff.run import config as config_lib
from tests import fixtures

_MECHANISM = registry.get('dp_fedavg')


def _config(**overrides):
  values = dict(aggregator='dp_fedavg', participation='poisson',
                total_rounds=50, clients_per_round=20, noise_multiplier=1.2,
                clip_norm=0.5)
  values.update(overrides)
  return config_lib.TrainConfig(**values)


class PoissonSamplerTest(absltest.TestCase):

  def test_each_client_independently_at_rate_q(self):
    sampler = participation.build_sampler('poisson', num_clients=400,
                                          report_goal=20, seed=3)
    rounds = 2000
    counts = np.zeros(400)
    sizes = []
    for t in range(rounds):
      chosen = sampler.sample(t)
      counts[chosen] += 1
      sizes.append(len(chosen))
      self.assertEqual(sampler.last_info.cohort, len(chosen))
      self.assertEqual(sampler.last_info.shortfall, 20 - len(chosen))
    q = 20 / 400
    # Cohort size ~ Binomial(400, q): mean 20, variance 19.
    self.assertAlmostEqual(np.mean(sizes), 20, delta=4 * np.sqrt(19 / rounds))
    self.assertAlmostEqual(np.var(sizes), 400 * q * (1 - q), delta=2.5)
    # Each client's count ~ Binomial(2000, q): mean 100, sd 9.7.
    self.assertAlmostEqual(np.mean(counts), 100, delta=1)
    self.assertLess(np.max(np.abs(counts - 100)), 6 * 9.75)
    # Rounds independent: a client's participations in consecutive rounds
    # occur at rate q^2.
    again = sum(len(np.intersect1d(sampler.sample(t), sampler.sample(t + 1)))
                for t in range(500))
    self.assertAlmostEqual(again / (500 * 400), q * q, delta=0.0012)

  def test_seeded_and_stateless(self):
    a = participation.build_sampler('poisson', num_clients=100,
                                    report_goal=10, seed=1)
    b = participation.build_sampler('poisson', num_clients=100,
                                    report_goal=10, seed=1)
    np.testing.assert_array_equal(a.sample(7), b.sample(7))
    self.assertFalse(np.array_equal(a.sample(7), a.sample(8)))
    self.assertIsNone(a.planned(10))

  def test_empty_round_is_an_error_and_its_probability(self):
    self.assertAlmostEqual(poisson.empty_round_probability(1000, 5),
                           (1 - 0.005)**1000)
    sampler = participation.build_sampler('poisson', num_clients=50,
                                          report_goal=1, seed=0)
    with self.assertRaisesRegex(ValueError, '--participation=poisson drew '
                                'no client in round'):
      for t in range(200):   # (1 - 1/50)^50 = 0.36 a round.
        sampler.sample(t)


class SettingsTest(parameterized.TestCase):

  def test_plan_gives_q(self):
    planned = _MECHANISM.run_parameters.plan(_config(), 1000)
    self.assertEqual(planned.sampling_probability, 0.02)
    self.assertEqual(_MECHANISM.run_parameters.plan(
        _config(sampling_probability=0.02), 1000).sampling_probability, 0.02)

  def test_sampling_is_seeded_by_a_secret_not_by_seed(self):
    # The amplification needs who was sampled to be unpredictable; --seed
    # sits in flag files.
    config = _config(seed=0)
    a = _MECHANISM.run_parameters.plan(config, 1000)
    b = _MECHANISM.run_parameters.plan(config, 1000)
    self.assertNotEqual(a.resolved_sampling_seed, b.resolved_sampling_seed)
    self.assertEqual(a.build_sampler(1000).seed, a.resolved_sampling_seed)
    self.assertFalse(np.array_equal(a.build_sampler(1000).sample(0),
                                    config.build_sampler(1000).sample(0)))
    # A resumed run keeps its own; a fixed --noise_seed repeats.
    saved = _MECHANISM.run_parameters.contents(a)
    restored = _MECHANISM.run_parameters.restore(b, saved, 'dp_fedavg.json')
    self.assertEqual(restored.resolved_sampling_seed,
                     a.resolved_sampling_seed)
    fixed = [_MECHANISM.run_parameters.plan(_config(seed=0, noise_seed=5),
                                            1000).resolved_sampling_seed
             for _ in range(2)]
    self.assertEqual(fixed[0], fixed[1])
    self.assertNotEqual(fixed[0], 0)
    self.assertNotIn('resolved_sampling_seed', config_lib.hparams(a))

  @parameterized.named_parameters(
      ('uniform', dict(participation='uniform'),
       '--aggregator=dp_fedavg is accounted for Poisson sampling: use '
       '--participation=poisson, not uniform'),
      ('q', dict(sampling_probability=1.5),
       r'--sampling_probability must be in \(0, 1\]'),
      ('secagg', dict(secagg=True), 'works with --aggregator'),
      ('bands', dict(bandmf_bands=3), '--bandmf_bands=3 applies only with'),
      ('other', dict(aggregator='dp_ftrl', sampling_probability=0.1,
                     participation='uniform'),
       '--sampling_probability=0.1 applies only with '
       '--aggregator=dp_fedavg, not dp_ftrl.'))
  def test_refused(self, overrides, message):
    with self.assertRaisesRegex(ValueError, message):
      _config(**overrides)

  def test_plan_refuses_another_q_and_likely_empty_rounds(self):
    with self.assertRaisesRegex(ValueError, r'--sampling_probability=0.5: '
                                r'training samples at .* = 0.02'):
      _MECHANISM.run_parameters.plan(_config(sampling_probability=0.5), 1000)
    with self.assertRaisesRegex(ValueError, '--clients_per_round=3: Poisson '
                                'sampling of 1000 clients'):
      _MECHANISM.run_parameters.plan(_config(clients_per_round=3), 1000)


class PrivacyTest(parameterized.TestCase):

  @parameterized.parameters((1.2, 0.02, 50), (0.8, 0.1, 200), (7.0, 0.0047,
                                                               930))
  def test_equals_dp_accounting_pld(self, z, q, rounds):
    report = _MECHANISM.privacy(
        _config(noise_multiplier=z, sampling_probability=q,
                total_rounds=rounds), rounds, 3, 0)
    # dp_accounting's PLD, composed here with a 5 times finer
    # discretization than the mechanism's 1e-4 (1e-5 gave the same epsilons
    # to 1e-6 relative, in 57 s against 25 s).
    pld = dp_accounting.pld.PLDAccountant(
        value_discretization_interval=2e-5)
    pld.compose(dp_accounting.PoissonSampledDpEvent(
        q, dp_accounting.GaussianDpEvent(z)), rounds)
    self.assertAlmostEqual(report.epsilon / pld.get_epsilon(1e-10), 1.0,
                           delta=0.01)
    self.assertIsNone(report.zcdp)
    self.assertEqual(report.mechanism, 'poisson_gaussian')
    self.assertEqual(report.poisson['sampling_probability'], q)

  def test_launch_config_uses_the_launch_population(self):
    launch = _MECHANISM.launch_config(_config(clients_per_round=500),
                                      1_000_000)
    self.assertEqual(launch.sampling_probability, 0.0005)
    # Other mechanisms keep their config.
    config = config_lib.TrainConfig(aggregator='dp_ftrl',
                                    noise_multiplier=1.0)
    self.assertIs(registry.get('dp_ftrl').launch_config(config, 10), config)

  def test_accountant_report(self):
    report = planned_privacy.build_report(
        rounds=100, noise_multiplier=1.0, aggregator='dp_fedavg',
        sampling_probability=0.01)
    self.assertIsNone(report['zcdp'])
    self.assertIn('assumes Poisson sampling',
                  planned_privacy.format_report(report))
    from_population = planned_privacy.build_report(
        rounds=100, noise_multiplier=1.0, aggregator='dp_fedavg',
        population=5000, report_goal=50)
    self.assertEqual(from_population['epsilon'], report['epsilon'])
    self.assertIn('(', planned_privacy.launch_report(report))
    with self.assertRaisesRegex(ValueError, 'needs --sampling_probability'):
      planned_privacy.build_report(rounds=100, noise_multiplier=1.0,
                                   aggregator='dp_fedavg')


class NoiseTest(absltest.TestCase):

  def test_independent_noise_of_std_z_c_over_m(self):
    dim, rounds = 20000, 4
    config = _config(noise_multiplier=2.0, clip_norm=0.5,
                     clients_per_round=4, total_rounds=rounds, noise_seed=5)
    factory = _MECHANISM.build_factory(config,
                                       tf.TensorSpec([dim], tf.float32))
    process = factory.create(tff.TensorType(np.float32, [dim]))
    state = process.initialize()
    noise = []
    for _ in range(rounds):
      out = process.next(state, [np.zeros(dim, np.float32)])
      state = out.state
      noise.append(np.asarray(out.result, np.float64) / (2.0 * 0.5 / 4))
    noise = np.array(noise)
    np.testing.assert_allclose(noise @ noise.T / dim, np.eye(rounds),
                               atol=0.05)


class AccountantBinaryTest(absltest.TestCase):

  def test_json_epsilon_is_dp_accountings(self):
    proc = fixtures.run_module(
        'experiments.privacy_accountant', '--rounds=930',
        '--noise_multiplier=7', '--aggregator=dp_fedavg',
        '--sampling_probability=0.0047', '--json', timeout=120)
    self.assertEqual(proc.returncode, 0, proc.stderr)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    self.assertEqual(report['mechanism'], 'poisson_gaussian')
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-5)
    pld.compose(dp_accounting.PoissonSampledDpEvent(
        0.0047, dp_accounting.GaussianDpEvent(7.0)), 930)
    self.assertAlmostEqual(report['epsilon'] / pld.get_epsilon(1e-10), 1.0,
                           delta=0.01)


if __name__ == '__main__':
  absltest.main()
