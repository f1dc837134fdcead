r"""Time and memory of a population-scale participation simulation.

The launch planner's goals: 4.21M devices, report goal 6500, 2000 rounds in
under 60 s and 2 GB with the timer model, under 5 s with min_sep_groups.
Each model runs in its own process (peak memory is the process's own),
with glibc's allocator set as `plan_launch` sets it
(`runtime.configure_allocator`), or with glibc's defaults
(`--glibc_defaults`, to compare): CPU seconds are given beside wall time,
the kernel's (page faults) apart.

  python -m benchmarks.participation_speed [--glibc_defaults]
"""

import json
import resource
import subprocess
import sys
import time

from absl import app
from absl import flags

_POPULATION = flags.DEFINE_integer('population', 4_210_000, 'Devices.')
_REPORT_GOAL = flags.DEFINE_integer('report_goal', 6500, 'Report goal.')
_ROUNDS = flags.DEFINE_integer('rounds', 2000, 'Rounds.')
_MODELS = flags.DEFINE_list('models', ['timer', 'min_sep_groups'],
                            'Participation models to time.')
_GLIBC_DEFAULTS = flags.DEFINE_bool(
    'glibc_defaults', False, "glibc's allocator defaults instead of "
    "plan_launch's settings (runtime.configure_allocator).")
_CHILD = flags.DEFINE_string('child', None, 'Internal: run one model.')


def _run_one(model):
  from dpftrl_tff import participation  # pylint: disable=g-import-not-at-top
  from dpftrl_tff import runtime  # pylint: disable=g-import-not-at-top
  if not _GLIBC_DEFAULTS.value:
    runtime.configure_allocator()
  started = time.monotonic()
  before = resource.getrusage(resource.RUSAGE_SELF)
  sim = participation.simulate(
      population=_POPULATION.value, rounds=_ROUNDS.value,
      report_goal=_REPORT_GOAL.value, model=model, seed=0,
      timer=participation.TimerSettings(timer_hours=48.0))
  seconds = time.monotonic() - started
  after = resource.getrusage(resource.RUSAGE_SELF)
  peak_mb = after.ru_maxrss / 1024
  return dict(model=model, seconds=seconds, peak_memory_mb=peak_mb,
              user_seconds=after.ru_utime - before.ru_utime,
              system_seconds=after.ru_stime - before.ru_stime,
              min_separation=sim['observed_min_separation'],
              max_participation=sim['observed_max_participation'],
              rounds_per_day=sim.get('rounds_per_day'))


def main(argv):
  del argv
  if _CHILD.value:
    print('RESULT ' + json.dumps(_run_one(_CHILD.value)), flush=True)
    return 0
  allocator = ("glibc's defaults" if _GLIBC_DEFAULTS.value else
               "plan_launch's allocator settings")
  print(f'{_POPULATION.value:,} devices, report goal {_REPORT_GOAL.value}, '
        f'{_ROUNDS.value} rounds (timer 48 h, 5-minute rounds), '
        f'{allocator}')
  for model in _MODELS.value:
    proc = subprocess.run(
        [sys.executable, '-m', 'benchmarks.participation_speed',
         f'--child={model}', f'--population={_POPULATION.value}',
         f'--report_goal={_REPORT_GOAL.value}', f'--rounds={_ROUNDS.value}',
         f'--glibc_defaults={_GLIBC_DEFAULTS.value}'],
        capture_output=True, text=True, check=True)
    line = [l for l in proc.stdout.splitlines() if l.startswith('RESULT ')]
    r = json.loads(line[-1][len('RESULT '):])
    per_day = (f'{r["rounds_per_day"]:.1f}' if r['rounds_per_day']
               else '-')
    # ParticipationLog's -1: no device took part twice, MinS undefined.
    min_sep = (r['min_separation'] if r['min_separation'] >= 0 else
               'none (no device took part twice)')
    print(f'{r["model"]:>15}: {r["seconds"]:6.1f} s, CPU '
          f'{r["user_seconds"]:.1f} s user + {r["system_seconds"]:.1f} s '
          f'system, peak '
          f'{r["peak_memory_mb"]:7.0f} MB, MinS {min_sep}, '
          f'MaxP {r["max_participation"]}, rounds/day {per_day}')
  return 0


if __name__ == '__main__':
  app.run(main)
