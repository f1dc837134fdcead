"""A mechanism's combination of settings: one verdict, one line, everywhere.

Each row of the table is run through every entry point that takes it:
training's settings (`TrainConfig`, what run_stackoverflow, the sweeps and
audit_mechanism make from their flags), the accountant's
(`planned_privacy.build_report`, what privacy_accountant calls), the
planner's (`recommend.launch.privacy`, what plan_launch calls for each
simulated participation) and the binaries themselves for the refused rows. Each accepts the row, or refuses it with
the same message.
"""

from absl.testing import absltest
from absl.testing import parameterized

from dpftrl_tff.privacy import planned_privacy
from dpftrl_tff.recommend import launch
from dpftrl_tff.run import config as config_lib
from tests import fixtures

_SECAGG = dict(secagg_scale=1000.0, clip_norm=5.0)

# (name, aggregator, mechanism settings, the refusal's message or None).
TABLE = (
    ('tree', 'dp_ftrl', {}, None),
    ('tree_secagg', 'dp_ftrl', _SECAGG, None),
    ('adaptive', 'dp_ftrl_adaptive', dict(clipped_count_stddev=5.0), None),
    ('adaptive_restarts', 'dp_ftrl_adaptive',
     dict(restart_warmup=40, restart_frequency=100), None),
    ('blt', 'dp_ftrl_blt', {}, None),
    ('blt_secagg', 'dp_ftrl_blt', _SECAGG, None),
    ('bandmf', 'dp_ftrl_bandmf', {}, None),
    ('bandmf_bands', 'dp_ftrl_bandmf', dict(bandmf_bands=8), None),
    ('bandmf_secagg', 'dp_ftrl_bandmf', _SECAGG, None),
    ('tree_sigma_b', 'dp_ftrl', dict(clipped_count_stddev=1.0),
     '--clipped_count_stddev=1.0 applies only with '
     '--aggregator=dp_ftrl_adaptive, not dp_ftrl.'),
    ('tree_warmup', 'dp_ftrl', dict(restart_warmup=5),
     '--restart_warmup=5 applies only with --aggregator=dp_ftrl_adaptive, '
     'not dp_ftrl.'),
    ('blt_sigma_b', 'dp_ftrl_blt', dict(clipped_count_stddev=1.0),
     '--clipped_count_stddev=1.0 applies only with '
     '--aggregator=dp_ftrl_adaptive, not dp_ftrl_blt.'),
    ('blt_two_adaptive_flags', 'dp_ftrl_blt',
     dict(restart_warmup=5, restart_frequency=50),
     '--restart_warmup=5, --restart_frequency=50 apply only with '
     '--aggregator=dp_ftrl_adaptive, not dp_ftrl_blt.'),
    ('adaptive_secagg', 'dp_ftrl_adaptive',
     dict(_SECAGG, clipped_count_stddev=5.0),
     "SecAgg (--secagg; the accountant's --secagg_scale) works with "
     '--aggregator none or dp_ftrl or dp_ftrl_blt or dp_ftrl_bandmf, not '
     'dp_ftrl_adaptive.'),
    ('adaptive_warmup_not_below_frequency', 'dp_ftrl_adaptive',
     dict(restart_warmup=5, restart_frequency=5, clipped_count_stddev=5.0),
     '--restart_warmup'),
    ('tree_bandmf_bands', 'dp_ftrl', dict(bandmf_bands=8),
     '--bandmf_bands=8 applies only with --aggregator=dp_ftrl_bandmf, not '
     'dp_ftrl.'),
    ('bandmf_blt_buffers', 'dp_ftrl_bandmf', dict(blt_num_buffers=2),
     '--blt_num_buffers=2 applies only with --aggregator=dp_ftrl_blt, not '
     'dp_ftrl_bandmf.'),
    ('bandmf_too_many_bands', 'dp_ftrl_bandmf', dict(bandmf_bands=301),
     '--bandmf_bands must be an integer <= 300'),
    ('adaptive_no_z_delta', 'dp_ftrl_adaptive',
     dict(clipped_count_stddev=1.0), '--clipped_count_stddev'),
)

_ROUNDS, _REPORT_GOAL, _Z = 300, 100, 3.0


def _verdict(call):
  try:
    call()
  except ValueError as e:
    return str(e)
  return None


def training_verdict(aggregator, settings):
  secagg = {'secagg': True} if 'secagg_scale' in settings else {}
  return _verdict(lambda: config_lib.TrainConfig(
      aggregator=aggregator, noise_multiplier=_Z, total_rounds=_ROUNDS,
      clients_per_round=_REPORT_GOAL, **secagg, **settings))


def accountant_verdict(aggregator, settings):
  settings = dict(settings)
  if 'secagg_scale' in settings:
    settings['model_dim'] = 10000
  return _verdict(lambda: planned_privacy.build_report(
      rounds=_ROUNDS, noise_multiplier=_Z, report_goal=_REPORT_GOAL,
      population=10 * _REPORT_GOAL, aggregator=aggregator, **settings))


def planner_verdict(aggregator, settings):
  mechanism = dict(settings, aggregator=aggregator)
  if 'secagg_scale' in settings:
    mechanism['model_dim'] = 10000
  return _verdict(lambda: launch.privacy(
      rounds=_ROUNDS, report_goal=_REPORT_GOAL, noise_multiplier=_Z,
      delta=1e-10, mechanism=mechanism,
      **launch.ideal_participation(10 * _REPORT_GOAL, _ROUNDS,
                                   _REPORT_GOAL)))


def _flags(settings):
  return [f'--{k}={v}' for k, v in settings.items()]


class CombinationsTest(parameterized.TestCase):

  @parameterized.named_parameters(*TABLE)
  def test_every_entry_point_agrees(self, aggregator, settings, refusal):
    verdicts = {'training': training_verdict(aggregator, settings),
                'accountant': accountant_verdict(aggregator, settings),
                'planner': planner_verdict(aggregator, settings)}
    for entry, verdict in verdicts.items():
      if refusal is None:
        self.assertIsNone(verdict, entry)
      else:
        self.assertIsNotNone(verdict, f'{entry} accepted it')
        self.assertIn(refusal, verdict, entry)
    self.assertEqual(verdicts['training'], verdicts['accountant'])
    self.assertEqual(verdicts['training'], verdicts['planner'])


# Rows the binaries refuse, each binary in one process.
_REFUSED = [row for row in TABLE if row[3] is not None][:5]


def _refused_cases(base_flags, secagg_flag=()):
  """The refused rows as one binary's bad-input cases: its own flags for
  the row's numbers, then the row's mechanism and settings."""
  return tuple(
      (name, base_flags + [f'--aggregator={aggregator}']
       + (list(secagg_flag) if 'secagg_scale' in settings else [])
       + _flags(settings), refusal)
      for name, aggregator, settings, refusal in _REFUSED)


class _RefusedEverywhere(fixtures.BadInputTest):
  RETURNCODE = 2
  CASES = ()

  def check_cases(self):
    for name, _, expected in self.CASES:
      with self.subTest(name):
        self.check_refused(name, expected)


class AccountantBinaryTest(_RefusedEverywhere):
  MODULE = 'experiments.privacy_accountant'
  CASES = _refused_cases([f'--rounds={_ROUNDS}', f'--noise_multiplier={_Z}',
                          f'--report_goal={_REPORT_GOAL}',
                          '--model_dim=10000'])

  def test_refused_as_everywhere(self):
    self.check_cases()


class PlanLaunchBinaryTest(_RefusedEverywhere):
  MODULE = 'experiments.plan_launch'
  CASES = _refused_cases([
      f'--population={10 * _REPORT_GOAL}', f'--rounds={_ROUNDS}',
      f'--report_goals={_REPORT_GOAL}', f'--noise_multiplier={_Z}',
      f'--reference_report_goal={_REPORT_GOAL}',
      '--participation=min_sep_groups', '--model_dim=10000'])

  def test_refused_as_everywhere(self):
    self.check_cases()


class AuditBinaryTest(_RefusedEverywhere):
  MODULE = 'experiments.audit_mechanism'
  CASES = _refused_cases([f'--total_rounds={_ROUNDS}',
                          f'--noise_multiplier={_Z}',
                          f'--clients_per_round={_REPORT_GOAL}'],
                         secagg_flag=['--secagg'])

  def test_refused_as_everywhere(self):
    self.check_cases()


if __name__ == '__main__':
  absltest.main()
