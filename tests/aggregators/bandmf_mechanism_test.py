"""dp_ftrl_bandmf as a mechanism: its settings, matrices, accounting and
memory, against the accounting library, closed forms and Gboard's figures."""

import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from dpftrl_tff import accounting
from dpftrl_tff.accounting import bandmf as bandmf_accounting
from dpftrl_tff.aggregators import registry
from dpftrl_tff.aggregators.mechanisms import bandmf as bandmf_mechanism
from dpftrl_tff.privacy import planned_privacy
from dpftrl_tff.run import config as config_lib

_MECHANISM = registry.get('dp_ftrl_bandmf')


def _config(**overrides):
  values = dict(aggregator='dp_ftrl_bandmf', total_rounds=20,
                clients_per_round=5, noise_multiplier=1.5, clip_norm=0.5,
                bandmf_bands=4)
  values.update(overrides)
  return config_lib.TrainConfig(**values)


def _published(rounds, bands, learning_rates=None, seed=0):
  """A directory in Gboard's format holding a random banded C."""
  rng = np.random.default_rng(seed)
  i, j = np.indices((rounds, rounds))
  c = np.where((i >= j) & (i - j < bands),
               rng.uniform(0.1, 1.0, (rounds, rounds)), 0.0)
  directory = tempfile.mkdtemp()
  tf.io.write_file(os.path.join(directory, bandmf_accounting.C_MATRIX_FILE),
                   tf.io.serialize_tensor(tf.constant(c)))
  if learning_rates is not None:
    tf.io.write_file(
        os.path.join(directory, bandmf_accounting.LR_VECTOR_FILE),
        tf.io.serialize_tensor(tf.constant(learning_rates)))
  return directory, c


class PrivacyTest(parameterized.TestCase):

  @parameterized.parameters((4, 1), (4, 3), (5, 2), (19, 1))
  def test_column_normalized_c_gives_maxp_over_two_z_squared(
      self, min_separation, max_participation):
    # The optimized C has unit columns and 4 <= MinS + 1 bands: sens^2 is
    # the participations that fit, rho = k / (2 z^2) in closed form.
    report = _MECHANISM.privacy(_config(), 20, max_participation,
                                min_separation)
    fit = -(-20 // (min_separation + 1))
    self.assertAlmostEqual(report.zcdp,
                           min(max_participation, fit) / (2 * 1.5**2),
                           places=9)
    self.assertEqual(report.mechanism, 'bandmf')
    self.assertEqual(report.bandmf['sensitivity'], accounting.BANDMF_EXACT)
    self.assertEqual(report.bandmf['bands'], 4)

  def test_more_bands_than_the_separation_is_bounded_above(self):
    report = _MECHANISM.privacy(_config(), 20, 3, 1)
    c = bandmf_mechanism.strategy(_config())
    self.assertEqual(report.bandmf['sensitivity'],
                     accounting.BANDMF_UPPER_BOUND)
    self.assertAlmostEqual(
        report.sensitivity_squared,
        bandmf_accounting.sensitivity_upper_bound_squared(c, 1, 3))
    self.assertGreaterEqual(report.sensitivity_squared, 3.0)

  def test_fewer_rounds_use_the_leading_block(self):
    c = bandmf_mechanism.strategy(_config())
    report = _MECHANISM.privacy(_config(), 7, 2, 3)
    self.assertAlmostEqual(
        report.sensitivity_squared,
        bandmf_accounting.banded_sensitivity_squared(c[:7, :7], 3, 2))

  @parameterized.named_parameters(
      # google-research/federated mf_dpftrl_matrices, as the issue gives
      # them: pt-BR (z 8.35, MinS 1428, MaxP 2) has unit columns; es-ES
      # (z 1.411, MinS 484, MaxP 3) columns of squared norm 0.2.
      ('pt_br', 8.35, 1428, 2, 1.0, 0.01434, 0.9936),
      ('es_es', 1.411, 484, 3, 0.2, 0.1507, 3.424))
  def test_gboard_published_figures(self, z, min_separation, max_p,
                                    column_norm_squared, rho, epsilon):
    rounds = (min_separation + 1) * (max_p - 1) + 1
    c = bandmf_accounting.initial_strategy(rounds, 50) * np.sqrt(
        column_norm_squared)
    report = accounting.compute_privacy(
        rounds=rounds, noise_multiplier=z, max_participation=max_p,
        min_separation=min_separation, bandmf=c)
    self.assertAlmostEqual(report.zcdp, rho, delta=5e-5)
    self.assertAlmostEqual(report.epsilon, epsilon, delta=5e-4)

  def test_accountant_report_is_the_mechanisms(self):
    report = planned_privacy.build_report(
        rounds=20, noise_multiplier=1.5, min_separation=4,
        max_participation=3, aggregator='dp_ftrl_bandmf', bandmf_bands=4)
    expected = _MECHANISM.privacy(_config(), 20, 3, 4)
    self.assertEqual(report['zcdp'], expected.zcdp)
    self.assertEqual(report['sensitivity_squared'],
                     expected.sensitivity_squared)
    summary = bandmf_accounting.error_summary(
        bandmf_accounting.optimize(20, 4))
    self.assertAlmostEqual(report['bandmf']['mean_error'],
                           summary['mean_error'])
    self.assertAlmostEqual(report['bandmf']['max_error'],
                           summary['max_error'])
    self.assertIn('BandMF prefix-sum error', planned_privacy.format_report(
        report))
    # Unset bands: MinS + 1.
    report = planned_privacy.build_report(
        rounds=20, noise_multiplier=1.5, min_separation=6,
        aggregator='dp_ftrl_bandmf')
    self.assertEqual(report['bandmf']['bands'], 7)


class SettingsTest(parameterized.TestCase):

  def test_plan_from_the_participation(self):
    config = config_lib.TrainConfig(
        aggregator='dp_ftrl_bandmf', participation='min_sep_groups',
        clients_per_round=10, total_rounds=30, noise_multiplier=1.0,
        seed=None)
    planned = _MECHANISM.run_parameters.plan(config, 100)
    self.assertEqual(planned.bandmf_bands, 10)   # MinS 9.
    self.assertIsNone(planned.seed)
    # Capped at 64 bands.
    planned = _MECHANISM.run_parameters.plan(
        config.__class__(**dict(config_lib.hparams(config),
                                total_rounds=100)), 10000)
    self.assertEqual(planned.bandmf_bands, bandmf_mechanism.DEFAULT_MAX_BANDS)

  def test_published_matrix_leading_block_and_learning_rates(self):
    directory, c = _published(30, 3, learning_rates=np.linspace(1, 0.5, 30))
    config = _config(bandmf_bands=None, bandmf_matrix_dir=directory)
    np.testing.assert_array_equal(bandmf_mechanism.strategy(config),
                                  c[:20, :20])
    report = _MECHANISM.privacy(config, 20, 2, 5)
    self.assertAlmostEqual(
        report.sensitivity_squared,
        bandmf_accounting.banded_sensitivity_squared(c[:20, :20], 5, 2))
    contents = _MECHANISM.run_parameters.contents(config)
    self.assertEqual((contents['rounds'], contents['bands']), (20, 3))
    self.assertEqual(contents['published_learning_rates_not_applied'],
                     list(np.linspace(1, 0.5, 30)[:20]))
    # bandmf.json's band gives back the same C.
    np.testing.assert_array_equal(
        bandmf_mechanism.band_to_matrix(contents['band']), c[:20, :20])
    restored = _MECHANISM.run_parameters.restore(config, contents, 'x.json')
    np.testing.assert_array_equal(bandmf_mechanism.strategy(restored),
                                  c[:20, :20])
    other, _ = _published(30, 3, seed=1)
    with self.assertRaisesRegex(ValueError, 'holds another'):
      _MECHANISM.run_parameters.restore(
          _config(bandmf_bands=None, bandmf_matrix_dir=other), contents,
          'x.json')

  def test_bad_settings_name_the_flag(self):
    short, _ = _published(10, 2)
    for overrides, message in (
        (dict(bandmf_bands=21), '--bandmf_bands must be an integer <= 20'),
        (dict(bandmf_bands=0), '--bandmf_bands must be an integer >= 1'),
        (dict(bandmf_bands=None, bandmf_matrix_dir=short),
         f'--bandmf_matrix_dir={short}: its C is for 10 rounds, fewer than '
         '--total_rounds=20'),
        (dict(bandmf_matrix_dir=short),
         '--bandmf_bands=4 chooses how C is optimized'),
        (dict(bandmf_matrix_dir=short, bandmf_bands=None,
              bandmf_error='max'),
         '--bandmf_error=max chooses how C is optimized'),
        (dict(bandmf_error='median'), "--bandmf_error='median' is unknown"),
        (dict(bandmf_bands=None, bandmf_matrix_dir='/nonexistent'),
         '--bandmf_matrix_dir=/nonexistent: .*no c_matrix_tensor_pb'),
        (dict(blt_num_buffers=2), '--blt_num_buffers=2 applies only with '
         '--aggregator=dp_ftrl_blt'),
        (dict(launch_population=1000, launch_report_goal=100,
              launch_rounds=50, bandmf_bands=11),
         '--bandmf_bands=11 is more than the launch population\'s MinS '
         r'\+ 1 = 10')):
      with self.subTest(message):
        with self.assertRaisesRegex(ValueError, message):
          _config(**overrides)
    with self.assertRaisesRegex(
        ValueError, '--bandmf_bands=4 applies only with '
        '--aggregator=dp_ftrl_bandmf, not dp_ftrl.'):
      _config(aggregator='dp_ftrl')

  def test_max_error_setting_reaches_the_matrix(self):
    c = bandmf_mechanism.strategy(_config(bandmf_error='max'))
    np.testing.assert_array_equal(
        c, bandmf_accounting.optimize(20, 4, error='max'))
    report = planned_privacy.build_report(
        rounds=20, noise_multiplier=1.5, min_separation=4,
        aggregator='dp_ftrl_bandmf', bandmf_bands=4, bandmf_error='max')
    self.assertEqual(report['bandmf']['source'], 'optimized for the max error')
    self.assertAlmostEqual(report['bandmf']['max_error'],
                           bandmf_accounting.error_summary(c)['max_error'])

  def test_band_round_trip(self):
    c = bandmf_accounting.optimize(9, 3)
    band = bandmf_mechanism.matrix_to_band(c)
    self.assertLen(band, 9)
    self.assertLen(band[0], 3)
    np.testing.assert_array_equal(bandmf_mechanism.band_to_matrix(band), c)

  def test_memory_estimate_counts_the_noise_buffers(self):
    tree = config_lib.estimate_memory_bytes(_config(aggregator='dp_ftrl',
                                                    bandmf_bands=None))
    bandmf = config_lib.estimate_memory_bytes(_config(bandmf_bands=8))
    from dpftrl_tff import models  # pylint: disable=g-import-not-at-top
    config = _config()
    params = models.count_parameters(
        config.vocab_size, latent_size=config.latent_size,
        embedding_size=config.embedding_size,
        shared_embedding=config.shared_embedding)
    self.assertEqual(bandmf - tree,
                     4 * params * config_lib.STATE_BUFFER_COPIES * 7)


if __name__ == '__main__':
  absltest.main()
