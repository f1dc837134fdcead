r"""Time and memory of a population-scale participation simulation.

The launch planner's goals: 4.21M devices, report goal 6500, 2000 rounds in
under 60 s and 2 GB with the timer model, under 5 s with min_sep_groups.
Each model runs in its own process (peak memory is the process's own).

  python -m benchmarks.participation_speed
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
_CHILD = flags.DEFINE_string('child', None, 'Internal: run one model.')


def _run_one(model):
  from dpftrl_tff import participation  # pylint: disable=g-import-not-at-top
  started = time.monotonic()
  sim = participation.simulate(
      population=_POPULATION.value, rounds=_ROUNDS.value,
      report_goal=_REPORT_GOAL.value, model=model, seed=0,
      timer=participation.TimerSettings(timer_hours=48.0))
  seconds = time.monotonic() - started
  peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  return dict(model=model, seconds=seconds, peak_memory_mb=peak_mb,
              min_separation=sim['observed_min_separation'],
              max_participation=sim['observed_max_participation'],
              rounds_per_day=sim.get('rounds_per_day'))


def main(argv):
  del argv
  if _CHILD.value:
    print('RESULT ' + json.dumps(_run_one(_CHILD.value)), flush=True)
    return 0
  print(f'{_POPULATION.value:,} devices, report goal {_REPORT_GOAL.value}, '
        f'{_ROUNDS.value} rounds (timer 48 h, 5-minute rounds)')
  for model in _MODELS.value:
    proc = subprocess.run(
        [sys.executable, '-m', 'benchmarks.participation_speed',
         f'--child={model}', f'--population={_POPULATION.value}',
         f'--report_goal={_REPORT_GOAL.value}', f'--rounds={_ROUNDS.value}'],
        capture_output=True, text=True, check=True)
    line = [l for l in proc.stdout.splitlines() if l.startswith('RESULT ')]
    r = json.loads(line[-1][len('RESULT '):])
    per_day = (f'{r["rounds_per_day"]:.1f}' if r['rounds_per_day']
               else '-')
    print(f'{r["model"]:>15}: {r["seconds"]:6.1f} s, peak '
          f'{r["peak_memory_mb"]:7.0f} MB, MinS {r["min_separation"]}, '
          f'MaxP {r["max_participation"]}, rounds/day {per_day}')
  return 0


if __name__ == '__main__':
  app.run(main)
