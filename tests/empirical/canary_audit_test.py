"""Tests of the canary audit of a mechanism (experiments.audit_mechanism)."""

import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dpftrl_tff import strict_json
from dpftrl_tff import tff_compat
from dpftrl_tff.empirical import canary_audit
from dpftrl_tff.empirical import empirical_privacy
from dpftrl_tff.privacy import privacy_report
from dpftrl_tff.run import config as config_lib
from tests import fixtures

DELTA = 1e-5


def _config(**overrides):
  values = dict(aggregator='dp_ftrl', noise_multiplier=1.0, clip_norm=1.0,
                clients_per_round=250, total_rounds=1,
                participation='uniform', seed=3,
                # Fixed noise: the statistical checks below are then
                # deterministic (they passed on every unseeded run tried).
                noise_seed=5)
  values.update(overrides)
  config = config_lib.TrainConfig(**values)
  config.validate()
  return config


def _audit(config, **kwargs):
  tff_compat.install()
  return canary_audit.run(config, dimension=5000, canaries=200,
                          population=300, delta=DELTA, bootstrap=200,
                          rng=np.random.default_rng(7), **kwargs).result


class CanaryAuditTest(parameterized.TestCase):

  def test_one_round_estimate_is_the_gaussian_mechanism(self):
    # One round, every canary at most once: the final model is one
    # Gaussian mechanism of sensitivity C and noise z C, so the estimate
    # must agree with the accounted epsilon (the accountant's bound is
    # tight here).
    result = _audit(_config())
    truth = empirical_privacy.gaussian_mechanism_epsilon(1.0, 1.0, DELTA)
    self.assertAlmostEqual(result['accounted_epsilon'] / truth, 1.0,
                           delta=2e-3)
    lo, hi = result['epsilon_interval']
    self.assertLessEqual(lo, result['accounted_epsilon'])
    self.assertGreater(hi, 0.7 * result['accounted_epsilon'])
    self.assertGreater(result['seen_canaries'], 100)
    self.assertEqual(result['canary_participations']['max'], 1)
    strict_json.loads(strict_json.dumps(result))

  @parameterized.named_parameters(
      ('tree', {}),
      ('tree_secagg', dict(secagg=True, secagg_scale=1000.0)),
      ('adaptive', dict(aggregator='dp_ftrl_adaptive',
                        clipped_count_stddev=25.0)),
      ('blt', dict(aggregator='dp_ftrl_blt')))
  def test_a_broken_noise_path_is_caught(self, overrides):
    # The factory adds a quarter of the noise the accountant assumes: the
    # estimate's lower end exceeds the accounted bound, and it does not
    # when the noise is as accounted.
    config = _config(**overrides)
    with fixtures.broken_noise(config.aggregator, 4):
      result = _audit(config)
    self.assertGreater(result['epsilon_interval'][0],
                       result['accounted_epsilon'])
    honest = _audit(config)
    self.assertLess(honest['epsilon_interval'][0], honest['accounted_epsilon'])
    print(f'{self._testMethodName}: accounted '
          f'{result["accounted_epsilon"]:.2f}, as configured '
          f'{honest["empirical_epsilon"]:.2f} {honest["epsilon_interval"]}, '
          f'noise / 4 {result["empirical_epsilon"]:.2f} '
          f'{result["epsilon_interval"]}')

  def test_secagg_and_adaptive_paths_run(self):
    for overrides in (dict(secagg=True, secagg_scale=1000.0),
                      dict(aggregator='dp_ftrl_adaptive', restart_warmup=1,
                           restart_frequency=2, clipped_count_stddev=1.0)):
      tff_compat.install()
      result = canary_audit.run(
          _config(clients_per_round=10, total_rounds=4, **overrides),
          dimension=300, canaries=20, population=40, delta=DELTA,
          bootstrap=10, rng=np.random.default_rng(1)).result
      self.assertGreaterEqual(result['empirical_epsilon'], 0.0)
      self.assertGreater(result['accounted_epsilon'], 0.0)

  def test_bad_input_is_one_clear_error(self):
    with self.assertRaisesRegex(ValueError, '--population'):
      canary_audit.run(_config(), dimension=100, canaries=10, population=200,
                       delta=DELTA)
    with self.assertRaisesRegex(ValueError, '--canaries'):
      canary_audit.run(_config(), dimension=100, canaries=1, population=900,
                       delta=DELTA)

  def test_binary_json_for_blt_with_min_sep_groups(self):
    out = os.path.join(tempfile.mkdtemp(), 'audit')
    proc = fixtures.run_module(
        'experiments.audit_mechanism', '--aggregator=dp_ftrl_blt',
        '--noise_multiplier=2', '--clip_norm=1', '--clients_per_round=10',
        '--total_rounds=12', '--participation=min_sep_groups',
        '--population=60', '--canaries=30', '--dimension=500',
        '--bootstrap=20', '--json', f'--output_dir={out}')
    self.assertEqual(proc.returncode, 0, proc.stderr)
    result = strict_json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ('empirical_epsilon', 'epsilon_interval',
                'accounted_epsilon', 'delta'):
      self.assertIn(key, result)
    self.assertEqual(result['mechanism'], 'dp_ftrl_blt')
    # 6 groups of 10: MinS 5, every canary twice.
    self.assertEqual(result['observed_min_separation'], 5)
    self.assertEqual(result['canary_participations']['max'], 2)
    self.assertEqual(strict_json.load(os.path.join(out, 'audit.json')),
                     result)
    self.assertTrue(os.path.getsize(os.path.join(out,
                                                 'empirical_privacy.png')))
    with open(os.path.join(out, 'privacy_report.md')) as f:
      report = f.read()
    self.assertEqual(
        privacy_report.parse_figures(report)['epsilon (PLD)'],
        privacy_report.number(result['accounted_epsilon'], '.6g'))
    self.assertIn('One-shot empirical estimate', report)
    self.assertIn('BLT-DP-FTRL', report)


if __name__ == '__main__':
  absltest.main()
