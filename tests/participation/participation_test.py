"""Tests of the participation models, the participation log and the privacy
accounted from it."""

import dataclasses
import itertools

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
from tensorflow_privacy.privacy.analysis import tree_aggregation_accountant as tfp_tree

from dpftrl_tff import participation
from dpftrl_tff.privacy import run_privacy
from dpftrl_tff.run import config as config_lib
from tests.reference import timer_reference


def _brute_force(cohorts):
  """(MaxP, MinS) by scanning every pair of a client's participations."""
  rounds = {}
  for t, cohort in enumerate(cohorts):
    for c in cohort:
      rounds.setdefault(int(c), []).append(t)
  max_p = max(len(r) for r in rounds.values())
  gaps = [b - a - 1 for r in rounds.values()
          for a, b in itertools.combinations(r, 2)]
  return max_p, min(gaps, default=-1)


def _run(sampler, rounds):
  log = participation.ParticipationLog(sampler.num_clients)
  cohorts = []
  for t in range(rounds):
    cohort = sampler.sample(t)
    log.record(t, cohort)
    cohorts.append(cohort)
  return log, cohorts


class SamplerTest(parameterized.TestCase):

  @parameterized.named_parameters(('largest_b', None, 100, 7, 14),
                                  ('b_5', 5, 100, 7, 5),
                                  ('uneven_groups', None, 103, 10, 10))
  def test_min_sep_groups_meets_its_guarantee(self, groups, clients, m, b):
    sampler = participation.MinSepGroupsSampler(clients, m, 3,
                                                num_groups=groups)
    self.assertEqual(sampler.num_groups, b)
    rounds = 5 * b + 2
    log, cohorts = _run(sampler, rounds)
    planned = sampler.planned(rounds)
    self.assertEqual(planned, dict(min_separation=b - 1,
                                   max_participation=-(-rounds // b)))
    self.assertGreaterEqual(log.min_separation, b - 1)
    self.assertLessEqual(log.max_participation, planned['max_participation'])
    self.assertEqual((log.max_participation, log.min_separation),
                     _brute_force(cohorts))
    for cohort in cohorts:
      self.assertLen(set(cohort.tolist()), m)

  def test_log_equals_a_brute_force_scan(self):
    sampler = participation.UniformSampler(30, 4, 1)
    log, cohorts = _run(sampler, 60)
    self.assertEqual((log.max_participation, log.min_separation),
                     _brute_force(cohorts))
    self.assertEqual(log.histogram().sum(), 30)
    self.assertEqual(int((log.histogram() * np.arange(
        len(log.histogram()))).sum()), 60 * 4)

  @parameterized.named_parameters(('wait', 'wait'), ('run_short', 'run_short'))
  def test_timer_never_lets_a_client_back_early(self, shortfall):
    settings = participation.TimerSettings(
        timer_hours=6, round_minutes=20, daily_active_fraction=0.7,
        availability_hours=10, shortfall=shortfall)
    sampler = participation.TimerSampler(400, 12, 2, settings)
    last_time = {}
    log = participation.ParticipationLog(400)
    for t in range(600):
      cohort = sampler.sample(t)
      log.record(t, cohort)
      info = sampler.last_info
      self.assertEqual(info.cohort, len(cohort))
      self.assertEqual(info.shortfall, 12 - len(cohort))
      if shortfall == 'wait':
        self.assertGreaterEqual(info.waited_hours, 0)
      for c in cohort.tolist():
        if c in last_time:
          self.assertGreaterEqual(info.simulated_hours - last_time[c],
                                  6 - 1e-9)
        last_time[c] = info.simulated_hours
    # Waiting rounds pass simulated time without rounds, so the timer alone
    # guarantees no MinS; the observed one comes from the log.
    self.assertGreaterEqual(log.min_separation, 0)
    self.assertGreater(log.max_participation, 1)

  @parameterized.named_parameters(
      # Windows that wrap past midnight, waits that cross days, short rounds.
      ('wait', dict(timer_hours=6, round_minutes=20,
                    daily_active_fraction=0.7, availability_hours=10)),
      ('run_short', dict(timer_hours=6, round_minutes=20,
                         daily_active_fraction=0.7, availability_hours=10,
                         shortfall='run_short')),
      ('scarce_devices', dict(timer_hours=30, round_minutes=7,
                              daily_active_fraction=0.3,
                              availability_hours=2, window_spread_hours=5,
                              max_wait_hours=30)),
      ('always_available', dict(timer_hours=2, round_minutes=10,
                                availability_hours=24)),
      ('morning_windows', dict(timer_hours=24, round_minutes=5,
                               window_start_hour=1, window_spread_hours=0.5,
                               availability_hours=3)))
  def test_timer_equals_the_plain_reference(self, overrides):
    # The sampler's table of ranges and count-only waiting steps give the
    # cohorts and clock of the model stepped plainly from its definition.
    settings = participation.TimerSettings(**overrides)
    sampler = participation.TimerSampler(500, 15, 3, settings)
    expected, hours = timer_reference.timer_cohorts(500, 15, 3, settings, 400)
    for t, (cohort, hour) in enumerate(zip(expected, hours)):
      np.testing.assert_array_equal(sampler.sample(t), cohort, err_msg=t)
      self.assertEqual(sampler.last_info.simulated_hours, hour)

  def test_timer_resumes_with_the_same_cohorts(self):
    settings = participation.TimerSettings(timer_hours=3, round_minutes=30)
    a = participation.TimerSampler(200, 5, 9, settings)
    first = [a.sample(t).tolist() for t in range(50)]
    b = participation.TimerSampler(200, 5, 9, settings)   # A resumed run
    again = [b.sample(t).tolist() for t in range(50)]     # replays.
    self.assertEqual(first, again)
    with self.assertRaisesRegex(ValueError, 'in order'):
      b.sample(70)

  def test_timer_separation_grows_with_the_timer(self):
    seps = []
    for hours in (2, 4, 8):
      settings = participation.TimerSettings(
          timer_hours=hours, round_minutes=10, daily_active_fraction=1.0,
          availability_hours=24)
      log, _ = _run(participation.TimerSampler(2000, 10, 0, settings), 300)
      seps.append(log.min_separation)
    # Always available: every round takes 10 minutes, so a client waits at
    # least hours * 6 rounds: MinS >= 6 hours - 1, and grows with the timer.
    self.assertEqual(seps, sorted(seps))
    for hours, sep in zip((2, 4, 8), seps):
      self.assertGreaterEqual(sep, hours * 6 - 1)

  @parameterized.named_parameters(
      ('timer_shorter_than_round', dict(timer_hours=0.01, round_minutes=5),
       '--timer_hours=0.01 is shorter than one round'),
      ('zero_round', dict(round_minutes=0), '--round_minutes'),
      ('negative_timer', dict(timer_hours=-1), '--timer_hours'),
      ('fraction_zero', dict(daily_active_fraction=0),
       '--daily_active_fraction'),
      ('window_too_long', dict(availability_hours=30),
       '--availability_hours'),
      ('unknown_shortfall', dict(shortfall='skip'), '--shortfall'),
  )
  def test_bad_timer_settings_name_the_flag(self, overrides, message):
    with self.assertRaisesRegex(ValueError, message):
      participation.TimerSampler(100, 5, 0,
                                 participation.TimerSettings(**overrides))

  def test_report_goal_above_the_eligible_population(self):
    with self.assertRaisesRegex(ValueError, '--clients_per_round=60 is '
                                'above the 50 devices active'):
      participation.TimerSampler(100, 60, 0, participation.TimerSettings())
    with self.assertRaisesRegex(ValueError, '--min_sep_groups=30'):
      participation.MinSepGroupsSampler(100, 5, 0, num_groups=30)
    with self.assertRaisesRegex(ValueError, '--clients_per_round'):
      participation.UniformSampler(10, 11, 0)
    with self.assertRaisesRegex(ValueError, '--participation'):
      dataclasses.replace(config_lib.TrainConfig(),
                          participation='bernoulli').validate()


class FormatHoursTest(absltest.TestCase):

  def test_hours_and_minutes(self):
    self.assertEqual(participation.format_hours(24.0), '24 h')
    self.assertEqual(participation.format_hours(83.5), '83.5 h')
    self.assertEqual(participation.format_hours(1.0), '1 h')
    self.assertEqual(participation.format_hours(5 / 60), '5 min')
    self.assertEqual(participation.format_hours(0.5), '30 min')


class PrivacyFromLogTest(absltest.TestCase):

  def test_observed_and_planned_equal_tf_privacy(self):
    config = config_lib.TrainConfig(clients_per_round=4, noise_multiplier=1.3,
                                    participation='min_sep_groups', seed=1)
    sampler = config.build_sampler(40)   # 10 groups: MinS 9.
    log, _ = _run(sampler, 37)
    privacy = run_privacy.privacy_spent(config, 37, log, sampler)
    self.assertEqual(log.min_separation, 9)
    self.assertAlmostEqual(privacy['zcdp'], tfp_tree.compute_zcdp_single_tree(
        1.3, 37, log.max_participation, log.min_separation), places=12)
    planned = privacy['planned']
    self.assertEqual(planned['guaranteed_min_separation'], 9)
    self.assertAlmostEqual(planned['zcdp'], tfp_tree.compute_zcdp_single_tree(
        1.3, 37, 4, 9), places=12)
    self.assertIsNone(privacy['launch_equivalent'])

  def test_launch_equivalent_keeps_noise_per_client(self):
    config = config_lib.TrainConfig(
        clients_per_round=20, noise_multiplier=0.5, launch_report_goal=6500,
        launch_population=1_000_000, launch_rounds=300)
    log = participation.ParticipationLog(100)
    log.record(0, [1, 2])
    launch = run_privacy.privacy_spent(config, 10, log)['launch_equivalent']
    z = 0.5 * 6500 / 20
    self.assertAlmostEqual(launch['noise_multiplier'], z)
    self.assertEqual(launch['population_min_separation'],
                     1_000_000 // 6500 - 1)
    self.assertEqual(launch['rounds'], 300)
    # TF Privacy's compute_zcdp_single_tree(z, 300, 2, 152) (27 s to
    # compute): sensitivity^2 20, so rho = 20 / (2 z^2).
    self.assertAlmostEqual(launch['zcdp'], 20 / (2 * z**2), places=12)


if __name__ == '__main__':
  absltest.main()
