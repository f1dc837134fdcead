"""Tests of the mechanism registry, the config declaration and noise seeds."""

import dataclasses
import os
import re

from absl import flags
from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff import accounting
from dpftrl_tff import models
from dpftrl_tff import settings as settings_lib
from dpftrl_tff.aggregators import dp_ftrl
from dpftrl_tff.aggregators import registry
from dpftrl_tff.aggregators.mechanisms import adaptive as adaptive_mechanism
from dpftrl_tff.aggregators.mechanisms import bandmf as bandmf_mechanism
from dpftrl_tff.aggregators.mechanisms import base as mechanism_base
from dpftrl_tff.aggregators.mechanisms import blt as blt_mechanism
from dpftrl_tff.aggregators.mechanisms import dp_fedavg as dp_fedavg_mechanism
from dpftrl_tff.privacy import planned_privacy
from dpftrl_tff.privacy import run_privacy
from dpftrl_tff.run import config as config_lib
from tests import fixtures


def _config(**overrides):
  values = dict(clients_per_round=10, noise_multiplier=1.0, clip_norm=0.5)
  if overrides.get('aggregator') == 'dp_ftrl_adaptive':
    values['clipped_count_stddev'] = 1.0   # Algorithm 1's flags: its own.
  return config_lib.TrainConfig(**dict(values, **overrides))


class RegistryTest(parameterized.TestCase):

  def test_names_and_unknown(self):
    self.assertEqual(registry.names(),
                     ('none', 'dp_ftrl', 'dp_ftrl_adaptive', 'dp_ftrl_blt',
                      'dp_ftrl_bandmf', 'dp_fedavg'))
    with self.assertRaisesRegex(ValueError, "--aggregator='dp_sgd' is "
                                'unknown; allowed: none, dp_ftrl'):
      registry.get('dp_sgd')

  @parameterized.named_parameters(
      ('none_with_noise', dict(aggregator='none'), '--noise_multiplier=1.0 '
       'has no effect'),
      ('none_negative_noise', dict(aggregator='none', noise_multiplier=-5.0),
       '--noise_multiplier must be >= 0'),
      ('dp_negative_noise', dict(noise_multiplier=-1.0),
       '--noise_multiplier'),
      ('zero_clip', dict(clip_norm=0.0), '--clip_norm'),
      ('adaptive_secagg', dict(aggregator='dp_ftrl_adaptive', secagg=True),
       r'SecAgg \(--secagg; .*\) works with --aggregator none or dp_ftrl'),
      ('bad_quantile', dict(aggregator='dp_ftrl_adaptive',
                            target_unclipped_quantile=1.5),
       '--target_unclipped_quantile'),
      ('negative_shuffle', dict(shuffle_buffer_size=-1),
       '--shuffle_buffer_size'),
  )
  def test_validation_names_the_flag(self, overrides, message):
    with self.assertRaisesRegex(ValueError, message):
      _config(**overrides).validate()

  def test_privacy_is_the_accountants(self):
    config = _config()
    report = registry.get('dp_ftrl').privacy(config, 100, 3, 20)
    self.assertEqual(report.zcdp, accounting.compute_zcdp_single_tree(
        1.0, 100, 3, 20))
    adaptive = registry.get('dp_ftrl_adaptive').privacy(
        _config(aggregator='dp_ftrl_adaptive', restart_warmup=10,
                restart_frequency=30), 100, 3, 20)
    self.assertEqual(list(adaptive.restart_rounds), [10, 40, 70])
    self.assertEqual(adaptive.zcdp, accounting.compute_zcdp_with_restarts(
        1.0, 100, 3, 20, [10, 40, 70]))
    self.assertIsNone(registry.get('none').privacy(
        _config(aggregator='none', noise_multiplier=0.0), 100, 3, 20))
    self.assertIsNone(registry.get('dp_ftrl').privacy(
        _config(noise_multiplier=0.0), 100, 3, 20))

  def test_initial_clip(self):
    self.assertEqual(registry.get('dp_ftrl').initial_clip(_config()), 0.5)
    self.assertEqual(registry.get('dp_ftrl_adaptive').initial_clip(
        _config(aggregator='dp_ftrl_adaptive', initial_clip_norm=0.2)), 0.2)
    self.assertIsNone(registry.get('none').initial_clip(_config()))


class StartWarningsTest(absltest.TestCase):

  def test_no_noise_or_a_fixed_seed_is_said_before_the_run(self):
    self.assertEqual(run_privacy.start_warnings(_config()), [])
    no_noise = run_privacy.start_warnings(_config(noise_multiplier=0.0))
    self.assertLen(no_noise, 1)
    self.assertIn('--aggregator=dp_ftrl with --noise_multiplier=0 clips the '
                  'updates but adds no DP noise', no_noise[0])
    self.assertIn('--noise_multiplier=0', run_privacy.start_warnings(
        _config(aggregator='dp_ftrl_blt', noise_multiplier=0.0))[0])
    # FedAvg without DP says nothing: it claims nothing.
    self.assertEqual(run_privacy.start_warnings(
        _config(aggregator='none', noise_multiplier=0.0)), [])
    seeded = run_privacy.start_warnings(_config(noise_seed=3))
    self.assertEqual(len(seeded), 1)
    self.assertIn('--noise_seed=3 fixes the DP noise', seeded[0])


class NoiseSeedTest(absltest.TestCase):

  def test_default_seed_comes_from_the_os_and_differs(self):
    specs = tf.TensorSpec([3], tf.float32)
    seeds = []
    for _ in range(2):
      factory = dp_ftrl.build_dp_ftrl_factory(
          noise_multiplier=1.0, clients_per_round=2, clip_norm=1.0,
          record_specs=specs)
      process = factory.create(tff.TensorType(np.float32, [3]))
      state = process.initialize()
      # The noise generator's seeds: the int64 pair in the query state.
      pairs = [np.asarray(x).tolist() for x in tf.nest.flatten(state)
               if np.asarray(x).dtype == np.int64 and np.shape(x) == (2,)]
      self.assertLen(pairs, 1)
      seeds.append(pairs[0])
    self.assertNotEqual(seeds[0], seeds[1])
    # Not TF Privacy's time-derived seed (microseconds since the epoch).
    now_us = tf.timestamp().numpy() * 1e6
    self.assertGreater(abs(seeds[0][0] - now_us), 1e12)

  def test_fixed_seed_is_reproducible(self):
    self.assertEqual(dp_ftrl.resolve_noise_seed(7), 7)
    self.assertNotEqual(dp_ftrl.resolve_noise_seed(None),
                        dp_ftrl.resolve_noise_seed(None))


class ConfigTest(absltest.TestCase):

  def test_flags_come_from_the_config(self):
    values = flags.FlagValues()
    holders = config_lib.define_flags(values)
    self.assertEqual(set(holders),
                     {f.name for f in dataclasses.fields(
                         config_lib.TrainConfig)} -
                     {'resolved_blt', 'resolved_bandmf',
                      'resolved_sampling_seed'})
    values(['prog', '--total_rounds=7', '--nosecagg', '--noise_seed=3',
            '--aggregator=none'])
    config = config_lib.from_flags(holders)
    self.assertEqual((config.total_rounds, config.secagg, config.noise_seed,
                      config.aggregator), (7, False, 3, 'none'))
    self.assertEqual(config.client_lr, config_lib.TrainConfig().client_lr)

  def test_parameter_count_without_building(self):
    for kwargs in (dict(vocab_size=10000), dict(vocab_size=50, latent_size=7,
                                                embedding_size=3),
                   dict(vocab_size=50, shared_embedding=True)):
      with self.subTest(**kwargs):
        vocab = kwargs.pop('vocab_size')
        self.assertEqual(
            models.count_parameters(vocab, **kwargs),
            models.create_cifg_lm(vocab, **kwargs).count_params())



class OnePlaceTest(parameterized.TestCase):
  """What the issue "Every privacy claim from one place" asks, as source
  scans that fail when a second place appears."""

  def _sources(self):
    for top in ('dpftrl_tff', 'experiments', 'benchmarks'):
      for folder, _, files in os.walk(os.path.join(fixtures.ROOT, top)):
        for name in files:
          if name.endswith('.py'):
            path = os.path.join(folder, name)
            with open(path, encoding='utf-8') as f:
              yield os.path.relpath(path, fixtures.ROOT), f.read()

  def test_nothing_outside_the_mechanisms_branches_on_their_names(self):
    """Neither on an aggregator's name nor on the noise it accounts (the
    privacy dict's 'mechanism': 'tree', 'blt', ...)."""
    noises = sorted({registry.get(n).accounted_noise
                     for n in registry.accounted()})
    names = '|'.join(registry.names() + tuple(noises))
    # 'none' is a common word.
    dp_names = '|'.join(registry.accounted() + tuple(noises))
    branch = re.compile(rf"[=!]=\s*'({names})'|\{{'({dp_names})':|"
                        rf"in \(('({names})',\s*)+")
    # Nor reads a noise's own block of a privacy dict (its parameters and
    # its accounting: DP-FedAvg's 'poisson' has no zCDP figure); the
    # reports ask the noise's description (`NoiseDescription`).
    blocks = ('blt', 'bandmf', 'poisson')
    fields = {f.name for f in dataclasses.fields(accounting.PrivacyReport)}
    self.assertLessEqual(set(blocks), fields)
    block = re.compile(rf"(\.get\(|\[)'({'|'.join(blocks)})'")
    found = [path for path, text in self._sources()
             if (branch.search(text) or block.search(text)) and
             not path.startswith(os.path.join('dpftrl_tff', 'aggregators',
                                              'mechanisms'))]
    self.assertEqual(found, [])

  def test_every_accounted_noise_is_described(self):
    """The report, console and accountant words of each accounted noise
    come from its mechanism, and mention its own parameters."""
    privacy = dict(noise_multiplier=1.5, restart_rounds=[3, 7],
                   blt=dict(buf_decay=[0.25], output_scale=[0.5]),
                   bandmf=dict(bands=4, sensitivity='exact (banded)',
                               source='s', mean_error=1.0, max_error=2.0),
                   poisson=dict(sampling_probability=0.125))
    expected = {'tree': ['3, 7', '2 tree restarts'],
                'blt': ['0.25', 'BLT noise'],
                'bandmf': ['4 bands', 'BandMF noise, 4 bands'],
                'poisson_gaussian': ['q = 0.125', 'DP-FedAvg']}
    noises = {registry.get(n).accounted_noise for n in registry.accounted()}
    self.assertEqual(noises, set(expected))
    for noise, (in_report, in_console) in expected.items():
      description = registry.noise_description(dict(privacy, mechanism=noise))
      self.assertIn(in_report, description.report(privacy), noise)
      self.assertIn('z = 1.5', description.report(privacy), noise)
      self.assertIn(in_console, description.console(privacy), noise)
    # Their accounting in words: zCDP by default (the reports' own text),
    # DP-FedAvg's PLD of Poisson sampling from its description; BandMF says
    # when its sensitivity is an upper bound.
    poisson = dict(privacy, rounds=10, epsilon=1.25, delta=1e-10,
                   report_goal=50, population=400, mechanism='poisson_gaussian',
                   poisson=dict(sampling_probability=0.125, epsilon_rdp=1.5,
                                assumption='assumes Poisson sampling'))
    fedavg = registry.noise_description(poisson)
    lines, statement = fedavg.accounting_section(
        poisson, participation='P.', kind='run')
    self.assertIn('rate q = 0.125', '\n'.join(lines))
    self.assertIn('(1.25, 1e-10)-DP', statement)
    self.assertIn('q = 0.125', fedavg.launch_equivalent_text(poisson))
    self.assertEqual(fedavg.figures_phrase(poisson),
                     'epsilon 1.250 (Poisson sampling at q = 0.125, assumed)')
    self.assertIn('  sampling probability q  : 0.125',
                  fedavg.accountant_printout(poisson))
    for noise in expected.keys() - {'poisson_gaussian'}:
      description = registry.noise_description(dict(mechanism=noise))
      self.assertIsNone(description.accounting_section(
          privacy, participation='P.', kind='run'), noise)
      self.assertIsNone(description.accountant_printout(privacy), noise)
      self.assertIsNone(description.launch_report_texts(privacy), noise)
      self.assertEqual(description.figures_phrase(
          dict(zcdp=0.5, epsilon=2.0)), 'rho-zCDP 0.5, epsilon 2.000')
    bandmf = registry.noise_description(dict(mechanism='bandmf'))
    self.assertIn('exact sensitivity', bandmf.sensitivity_source(privacy))
    self.assertIn('upper bound', bandmf.sensitivity_source(
        dict(bandmf=dict(sensitivity='upper bound (Algorithm 4)'))))
    self.assertIs(registry.noise_description({}),
                  registry.get('dp_ftrl').noise)
    self.assertIs(registry.get('dp_ftrl_adaptive').noise,
                  registry.get('dp_ftrl').noise)
    with self.assertRaisesRegex(ValueError, "noise 'laplace'"):
      registry.noise_description(dict(mechanism='laplace'))

  def test_noise_multiplier_is_checked_in_one_place(self):
    found = [path for path, text in self._sources()
             if "'--noise_multiplier must" in text
             or "f'--noise_multiplier must" in text]
    self.assertEqual(found, [os.path.join('dpftrl_tff', 'checks.py')])

  def test_mechanism_settings_are_read_as_their_dataclasses(self):
    """Adaptive, BLT and SecAgg settings are declared by their mechanism
    module and read through `config.<group>_settings()`: no module reads
    one of them as a flat TrainConfig attribute."""
    grouped = [field.name for owner in (adaptive_mechanism.AdaptiveSettings,
                                        blt_mechanism.BLTSettings,
                                        bandmf_mechanism.BandMFSettings,
                                        dp_fedavg_mechanism.DPFedAvgSettings,
                                        mechanism_base.SecAggSettings)
               for field in dataclasses.fields(owner)]
    flat = re.compile(r'\bconfig\.(%s)\b' % '|'.join(grouped))
    found = [f'{path}: {match.group(0)}' for path, text in self._sources()
             for match in flat.finditer(text)]
    self.assertEqual(found, [])

  def test_training_config_carries_each_group_as_declared(self):
    fields = {field.name: field for field in
              dataclasses.fields(config_lib.TrainConfig)}
    config = config_lib.TrainConfig(
        aggregator='dp_ftrl_blt', noise_multiplier=1.0, total_rounds=20,
        blt_num_buffers=2, blt_error='mean', secagg=True, secagg_scale=64.0)
    for owner, view in (
        (adaptive_mechanism.AdaptiveSettings, config.adaptive_settings()),
        (blt_mechanism.BLTSettings, config.blt_settings()),
        (bandmf_mechanism.BandMFSettings, config.bandmf_settings()),
        (dp_fedavg_mechanism.DPFedAvgSettings, config.dp_fedavg_settings()),
        (mechanism_base.SecAggSettings, config.secagg_settings())):
      self.assertIsInstance(view, owner)
      for field in dataclasses.fields(owner):
        self.assertEqual(fields[field.name].default, field.default)
        self.assertEqual(fields[field.name].metadata, field.metadata)
        self.assertEqual(getattr(view, field.name),
                         getattr(config, field.name))
      with self.assertRaises(dataclasses.FrozenInstanceError):
        view.__setattr__(dataclasses.fields(owner)[0].name, None)
    self.assertEqual(settings_lib.changed(config.blt_settings()),
                     ['--blt_num_buffers=2', '--blt_error=mean'])
    self.assertEqual(settings_lib.changed(config.adaptive_settings()), [])
    self.assertEqual(settings_lib.changed(config.bandmf_settings()), [])

  def test_a_given_blt_refuses_every_optimizing_setting(self):
    with self.assertRaisesRegex(ValueError, r'^--blt_error=mean chooses how'):
      config_lib.TrainConfig(aggregator='dp_ftrl_blt', noise_multiplier=1.0,
                             blt_params='/x.json', blt_error='mean')

  # 1e-300: z squared underflows to 0 (the accountant divided by it).
  @parameterized.parameters(-1.0, float('nan'), float('inf'), True, 1e-300)
  def test_one_message_for_a_bad_noise_multiplier(self, z):
    messages = set()
    for call in (
        lambda: config_lib.TrainConfig(aggregator='dp_ftrl',
                                       noise_multiplier=z),
        lambda: config_lib.TrainConfig(aggregator='dp_ftrl_adaptive',
                                       noise_multiplier=z),
        lambda: config_lib.TrainConfig(aggregator='dp_ftrl_blt',
                                       noise_multiplier=z),
        lambda: planned_privacy.build_report(rounds=10, noise_multiplier=z)):
      with self.assertRaises(ValueError) as e:
        call()
      messages.add(str(e.exception).split(';')[0])
    self.assertLen(messages, 2, messages)   # >= 0 in training, > 0 here.
    for message in messages:
      self.assertRegex(message, r'^--noise_multiplier must be >?=? ?0')


if __name__ == '__main__':
  absltest.main()
