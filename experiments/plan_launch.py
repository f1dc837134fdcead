r"""Plans a launch: participation of a population, and its privacy.

Simulates who takes part in every round for a population of millions (NumPy,
no TFF, no training) with a participation model of
`dpftrl_tff.participation` (default: the timer model of production), and
prints the realized MinS and MaxP, rounds per day, how many clients took
part how often, and rho-zCDP and epsilon with those MinS and MaxP of the
mechanism --aggregator (default DP-FTRL with the tree) and its settings,
taken, validated and accounted as `privacy_accountant` takes them.

  # es-ES: 4.21M devices, report goal 6500, 2000 rounds, 48 h timer.
  python -m experiments.plan_launch --population=4210000 --rounds=2000 \
      --timer_hours=48

`--timer_hours=auto` simulates, for each report goal, the timers
`experiments.recommend` tries: whole days around the period that holds as
many rounds as the population's MinS cap (the paper raises its timers in
24-hour units, Sec. 2.2).

Each (report goal, timer) simulation of the timer model takes about 6 to
12 s per million devices and 2000 rounds on 2 cores (4.21M devices: 27 to
51 s measured, `benchmarks/participation_speed.py`, docs/performance.md);
a simulation that runs past 5 s prints its progress and ETA on stderr.

With --target_zcdp (or --target_epsilon) it answers the planner's question
for a grid of report goals and timer periods: the noise multiplier grows
with the report goal (z = --noise_multiplier * m / --reference_report_goal,
the paper's fixed noise per client, Sec. 2.2), every (m, timer) is simulated,
and the cheapest configuration meeting the target is recommended (smallest
report goal, then shortest timer); if none does, the largest report goal
with the noise multiplier that meets the target.

MinS counts the rounds strictly between two participations (TF Privacy's
convention); the population caps it at floor(population / m) - 1.
"""

import dataclasses
import sys
import time

from absl import app
from absl import flags

from dpftrl_tff import accounting
from dpftrl_tff import checks
from dpftrl_tff import console
from dpftrl_tff import participation
from dpftrl_tff import runtime
from dpftrl_tff import strict_json
from dpftrl_tff.privacy import planned_privacy
from dpftrl_tff.recommend import launch
from dpftrl_tff.run import config as config_lib
from dpftrl_tff.run import progress as progress_lib

_POPULATION = flags.DEFINE_integer('population', None,
                                   'Estimated population (devices).')
_ROUNDS = flags.DEFINE_integer('rounds', 2000, 'Training rounds T.')
_REPORT_GOALS = flags.DEFINE_list(
    'report_goals', ['6500'],
    'Report goal(s) m; several values form the planner\'s grid.')
_NOISE = flags.DEFINE_float(
    'noise_multiplier', 7.0,
    'Noise multiplier z at --reference_report_goal; other report goals use '
    'z m / reference (same noise per client).')
_REFERENCE = flags.DEFINE_integer(
    'reference_report_goal', 6500,
    'Report goal at which --noise_multiplier is given.')
_MODEL = flags.DEFINE_enum('participation', 'timer', participation.MODELS,
                           'Participation model.')
_TIMERS = flags.DEFINE_list(
    'timer_hours', ['24'],
    'Timer period(s) in hours (timer model); several form the grid. auto: '
    'for each report goal, the timers experiments.recommend tries (0.5 to 2 '
    'times the period holding as many rounds as the MinS cap, in whole '
    'days from a day up, the paper\'s 24-hour units).')
# The timer model's other settings, declared once (TimerSettings).
_TIMER = config_lib.define_flags(
    config_class=participation.TimerSettings,
    only=[field.name for field in dataclasses.fields(
        participation.TimerSettings) if field.name != 'timer_hours'])
# The mechanism and its settings, as the training binary and the accountant
# declare them.
_MECHANISM = config_lib.define_flags(
    only=planned_privacy.MECHANISM_FLAGS,
    defaults=planned_privacy.MECHANISM_FLAG_DEFAULTS)
flags.adopt_module_key_flags(config_lib)   # Listed by --helpshort too.
_MODEL_DIM = flags.DEFINE_integer('model_dim', None,
                                  'Number of model parameters d (SecAgg).')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the simulation.')
_DELTA = flags.DEFINE_float('delta', accounting.DEFAULT_DELTA,
                            'delta of (epsilon, delta).')
_TARGET_ZCDP = flags.DEFINE_float('target_zcdp', None,
                                  'Privacy target as rho-zCDP.')
_TARGET_EPS = flags.DEFINE_float('target_epsilon', None,
                                 'Privacy target as epsilon at --delta.')
_JSON = flags.DEFINE_bool('json', False, 'Print one JSON object.')



def _hours(candidate: dict) -> str:
  hours = candidate.get('timer_hours')
  return '-' if hours is None else participation.format_hours(hours)

def _mechanism():
  """The mechanism's settings, as `planned_privacy.build_report` takes
  them."""
  mechanism = {name: holder.value for name, holder in _MECHANISM.items()}
  mechanism['model_dim'] = _MODEL_DIM.value
  return mechanism


def privacy(sim, noise_multiplier, delta, mechanism):
  """zCDP and epsilon of the mechanism with the simulation's MinS and MaxP:
  the accountant's (`privacy_accountant`)."""
  report = launch.privacy_of_simulation(sim, noise_multiplier, delta,
                                        mechanism)
  return dict(noise_multiplier=noise_multiplier, zcdp=report['zcdp'],
              epsilon=report['epsilon'],
              sensitivity_squared=report['sensitivity_squared'])


def _target_zcdp():
  if _TARGET_ZCDP.value is not None and _TARGET_EPS.value is not None:
    raise ValueError('give --target_zcdp or --target_epsilon, not both.')
  if _TARGET_ZCDP.value is not None:
    if not _TARGET_ZCDP.value > 0:
      raise ValueError(f'--target_zcdp must be > 0, got '
                       f'{_TARGET_ZCDP.value}.')
    return _TARGET_ZCDP.value
  if _TARGET_EPS.value is not None:
    if not _TARGET_EPS.value > 0:
      raise ValueError(f'--target_epsilon must be > 0, got '
                       f'{_TARGET_EPS.value}.')
    return accounting.zcdp_within_epsilon(_TARGET_EPS.value, _DELTA.value)
  return None


class _SimulationProgress:
  """Progress with an ETA on stderr for simulations that take a while.

  Silent for the first 5 s of a simulation, then a line at most every 10 s.
  """

  def __init__(self, label: str):
    self.label = label
    self.started = time.monotonic()
    self.last = self.started

  def __call__(self, done: int, total: int):
    now = time.monotonic()
    if now - self.started < 5 or now - self.last < 10:
      return
    self.last = now
    eta = (now - self.started) / done * (total - done)
    print(f'{self.label}: round {done:,}/{total:,}, ETA '
          f'{progress_lib.format_seconds(eta)}', file=sys.stderr, flush=True)


def plan():
  """Runs the simulations the flags ask for; returns the report dict."""
  if _POPULATION.value is None:
    raise ValueError('--population is required.')
  if _POPULATION.value < 1:
    raise ValueError(f'--population must be >= 1, got {_POPULATION.value}.')
  report_goals = sorted(set(checks.check_int_list(
      _REPORT_GOALS.value, '--report_goals', minimum=1)))
  auto = [h.strip().lower() for h in _TIMERS.value] == ['auto']
  timers = [] if auto else sorted(set(checks.check_positive_list(
      _TIMERS.value, '--timer_hours')))
  checks.check_int(_ROUNDS.value, '--rounds', minimum=1,
                   maximum=config_lib.MAX_ROUNDS)
  checks.check_noise_multiplier(_NOISE.value, positive=True)
  target = _target_zcdp()
  mechanism = _mechanism()
  # The same noise per client at every report goal (paper Sec. 2.2).
  noise_of = {m: _NOISE.value * m / _REFERENCE.value for m in report_goals}
  timer = config_lib.from_flags(_TIMER, participation.TimerSettings)
  for m in report_goals:
    if m > _POPULATION.value:
      raise ValueError(f'--report_goals: {m} is above --population='
                       f'{_POPULATION.value}.')
  if _MODEL.value != 'timer':   # One simulation a report goal.
    timers_of = {m: [timer.timer_hours] for m in report_goals}
  else:
    timers_of = {m: (launch.auto_timer_hours(
        _POPULATION.value, _ROUNDS.value, m, timer) if auto else timers)
                 for m in report_goals}
  for m, z in noise_of.items():
    if _MODEL.value == 'timer':
      for hours in timers_of[m]:
        dataclasses.replace(timer, timer_hours=hours).validate(
            _POPULATION.value, m, report_goal_flag='--report_goals')
    # The mechanism's settings, refused before any simulation as the
    # accountant refuses them (at the participation the population allows).
    launch.privacy(rounds=_ROUNDS.value, report_goal=m, noise_multiplier=z,
                   delta=_DELTA.value, mechanism=mechanism,
                   with_epsilon=False,
                   **launch.ideal_participation(_POPULATION.value,
                                                _ROUNDS.value, m))
  candidates = []
  for m, z in noise_of.items():
    for hours in timers_of[m]:
      sim = participation.simulate(
          population=_POPULATION.value, rounds=_ROUNDS.value, report_goal=m,
          model=_MODEL.value, seed=_SEED.value,
          timer=dataclasses.replace(timer, timer_hours=hours),
          progress=_SimulationProgress(
              f'Simulating report goal {m}' + (
                  f', timer {participation.format_hours(hours)}'
                  if _MODEL.value == 'timer' else '')))
      sim.update(privacy(sim, z, _DELTA.value, mechanism))
      if target is not None:
        sim['meets_target'] = sim['zcdp'] <= target
        try:
          sim['noise_multiplier_for_target'] = launch.noise_for_simulation(
              sim, target, _DELTA.value, mechanism, reference_noise=z)
        except ValueError as e:   # Adaptive: sigma_b too small for that z.
          sim['noise_multiplier_for_target'] = None
          sim['noise_for_target_unreachable'] = str(e)
      candidates.append(sim)
  report = dict(candidates=candidates, target_zcdp=target, delta=_DELTA.value)
  if target is not None:
    report['recommendation'] = launch.grid_recommendation(
        candidates, target, _DELTA.value, mechanism)
  report['mechanism'] = {k: v for k, v in mechanism.items() if v is not None}
  return report


def _min_sep(value: int) -> str:
  """MinS as the table prints it: '-' where no device took part twice (the
  participation log's -1)."""
  return '-' if value < 0 else str(value)


def _format(report):
  lines = ['report goal  z       timer h  rounds/day  MinS (cap)    MaxP  '
           'short  rho-zCDP    epsilon']
  for c in report['candidates']:
    lines.append(
        f'{c["report_goal"]:>11}  {c["noise_multiplier"]:<6.3g}  '
        f'{c.get("timer_hours", float("nan")):>7g}  '
        f'{c.get("rounds_per_day", float("nan")):>10.1f}  '
        f'{_min_sep(c["observed_min_separation"]):>4} '
        f'({c["population_min_separation"]:>4})'
        f'  {c["observed_max_participation"]:>6}  {c["short_rounds"]:>5}  '
        f'{c["zcdp"]:<10.4g}  {c["epsilon"]:.3f}')
  for c in report['candidates']:
    hist = c['participations_histogram']
    total = sum(hist)
    shares = ', '.join(f'{k}: {100 * n / total:.1f}%'
                       for k, n in enumerate(hist) if n)
    lines.append(f'clients by participations (m={c["report_goal"]}, timer '
                 f'{_hours(c)}): {shares}')
  rec = report.get('recommendation')
  if rec:
    lines.append(
        f'Recommendation for rho-zCDP <= {report["target_zcdp"]:.4g}: report '
        f'goal {rec["report_goal"]}, noise multiplier '
        f'{rec["noise_multiplier"]:.4g}, timer {_hours(rec)} '
        f'({rec["reason"]}).')
  lines.append('MinS: rounds strictly between two participations (-: no '
               'device took part twice); (cap) = floor(population / report '
               'goal) - 1.')
  return '\n'.join(lines)


def main(argv):
  if len(argv) > 1:
    print(f'error: unexpected arguments {argv[1:]}.', file=sys.stderr)
    return 2
  console.quiet_libraries()
  # The timer model's population arrays (34 MB at 4.21M devices) are
  # allocated and freed every round: kept by glibc instead of mapped and
  # zeroed again, `benchmarks.participation_speed`'s system time drops from
  # 25.4 to 0.7 s (docs/performance.md).
  runtime.configure_allocator()
  try:
    report = plan()
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  print(strict_json.dumps(report, sort_keys=True) if _JSON.value
        else _format(report))
  return 0


if __name__ == '__main__':
  app.run(main)
