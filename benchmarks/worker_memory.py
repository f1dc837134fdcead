r"""Memory of TFF's worker over a training run, with and without probes.

Runs the training binary on the demo's settings (configs/demo.flags, the
generated data) for --rounds rounds, once per case, and samples the
resident memory (VmRSS) of its TFF worker_binary every half second with the
number of rounds done (rows of metrics.csv). It prints, per case, the
worker's memory after the first quarter of the rounds and at the end, and
the growth per round between the two: a leak shows as megabytes a round
(the canary client work's 28 MB a round of 2026-11-25, docs/performance.md),
a healthy run as well under 1 MB a round.

Cases: `none` (no probes), `canaries` (--canaries), `phrases`
(--canary_phrases in 10 clients each), `both`.

  python -m benchmarks.worker_memory [--rounds=80] [--canaries=200]
      [--cases=none,canaries,phrases,both]
"""

import os
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from benchmarks import proc_memory

_ROUNDS = flags.DEFINE_integer('rounds', 80, 'Training rounds per case.')
_CANARIES = flags.DEFINE_integer('canaries', 200, '--canaries of the cases '
                                 'with canaries.')
_PHRASES = flags.DEFINE_integer('phrases', 10, '--canary_phrases of the '
                                'cases with phrases (each in 10 clients).')
_CASE_NAMES = ('none', 'canaries', 'phrases', 'both')
_CASES = flags.DEFINE_list('cases', list(_CASE_NAMES), 'Cases to run.')
flags.register_validator(
    'cases', lambda cases: set(cases) <= set(_CASE_NAMES),
    f'--cases: each case must be one of {", ".join(_CASE_NAMES)}')

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _case_flags(case: str):
  canaries = [f'--canaries={_CANARIES.value}']
  phrases = [f'--canary_phrases={_PHRASES.value}',
             '--canary_phrase_repeats=10']
  return {'none': [], 'canaries': canaries, 'phrases': phrases,
          'both': canaries + phrases}[case]


def _rounds_done(metrics_csv: str) -> int:
  try:
    with open(metrics_csv) as f:
      return max(sum(1 for _ in f) - 1, 0)
  except OSError:
    return 0


def run_case(case: str, root: str):
  """[(rounds done, worker MB)] sampled over one run of the binary."""
  command = [sys.executable, '-m', 'experiments.run_stackoverflow',
             '--flagfile=configs/demo.flags', f'--root_output_dir={root}',
             f'--total_rounds={_ROUNDS.value}', '--rounds_per_eval=100000',
             '--rounds_per_checkpoint=100000'] + _case_flags(case)
  metrics_csv = os.path.join(root, 'demo_dpftrl', 'metrics.csv')
  samples = []
  with open(os.path.join(root, f'{case}.log'), 'w') as log:
    process = subprocess.Popen(command, cwd=_REPO, stdout=log,
                               stderr=subprocess.STDOUT)
    while process.poll() is None:
      workers = proc_memory.child_pids(process.pid)
      if workers:
        samples.append((_rounds_done(metrics_csv),
                        max(proc_memory.memory_mb(w) for w in workers)))
      time.sleep(0.5)
  if process.returncode:
    raise RuntimeError(f'case {case} failed (rc {process.returncode}); see '
                       f'{log.name}')
  return samples


def growth(samples, rounds: int):
  """(MB after rounds // 4, MB at the last round, MB a round between)."""
  quarter = max(rounds // 4, 1)
  start = [mb for done, mb in samples if done >= quarter]
  end = [mb for done, mb in samples if done >= rounds - 1] or [samples[-1][1]]
  if not start:
    return None
  return start[0], end[0], (end[0] - start[0]) / max(rounds - 1 - quarter, 1)


def main(argv):
  del argv
  rounds = _ROUNDS.value
  print(f'TFF worker memory over {rounds} demo rounds (20 clients a round)')
  with tempfile.TemporaryDirectory() as root:
    for case in _CASES.value:
      case_root = os.path.join(root, case)
      os.makedirs(case_root)
      numbers = growth(run_case(case, case_root), rounds)
      if numbers is None:
        print(f'{case:9s} too few samples (the run was too short)')
        continue
      start, end, per_round = numbers
      print(f'{case:9s} {flags_text(case):64s} worker {start:6.0f} MB after '
            f'{max(rounds // 4, 1)} rounds, {end:6.0f} MB at the end: '
            f'{per_round:+.2f} MB a round', flush=True)


def flags_text(case: str) -> str:
  return ' '.join(_case_flags(case)) or '(no probes)'


if __name__ == '__main__':
  app.run(main)
