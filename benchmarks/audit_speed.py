r"""Time and memory of a canary audit of a mechanism alone (issue 27's goal).

The goal: `experiments.audit_mechanism` at the model's dimension (2.4M
parameters), T = 1000 rounds, 1000 canaries inserted and 1000 never
inserted, in under 10 minutes and 4 GB on a 2-core machine. This runs
`canary_audit.run` (DP-FTRL tree noise, uniform participation over 1000
real clients and the canaries) for --rounds rounds and prints the time, the
time a round, the extrapolation to --goal_rounds, and the peak memory of
this process and of TFF's worker_binary (which holds the values).

  python -m benchmarks.audit_speed --rounds=20   # extrapolated to 1000
"""

import os
import resource
import time

from dpftrl_tff import runtime

runtime.install(malloc_arenas=2)   # Before TensorFlow: quiet C++ logs; two
                                   # malloc arenas keep the worker small.

from absl import flags
import numpy as np

from benchmarks import proc_memory
from dpftrl_tff.run import config as config_lib

_DIMENSION = flags.DEFINE_integer('dimension', 2_383_022,
                                  'Model dimension d (the paper\'s LM).')
_ROUNDS = flags.DEFINE_integer('rounds', 20, 'Rounds run.')
_GOAL_ROUNDS = flags.DEFINE_integer('goal_rounds', 1000,
                                    'Rounds the time is extrapolated to.')
_CANARIES = flags.DEFINE_integer('canaries', 1000,
                                 'Canaries K (and K never inserted).')
_REAL = flags.DEFINE_integer('real_clients', 1000, 'Real clients.')
_CLIENTS = flags.DEFINE_integer('clients_per_round', 20, 'Report goal m.')


def _worker_peak_mb():
  """Peak resident memory (VmHWM) of this process's TFF worker_binary."""
  return max([proc_memory.memory_mb(pid, 'VmHWM')
              for pid in proc_memory.child_pids(os.getpid())], default=0.0)


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top
  from dpftrl_tff.empirical import canary_audit
  from dpftrl_tff import tff_compat
  # pylint: enable=g-import-not-at-top
  tff_compat.install()
  config = config_lib.TrainConfig(
      aggregator='dp_ftrl', noise_multiplier=1.0, clip_norm=1.0,
      clients_per_round=_CLIENTS.value, total_rounds=_ROUNDS.value, seed=0,
      canaries=_CANARIES.value)
  started = time.monotonic()
  round_times = []
  audit = canary_audit.run(
      config, dimension=_DIMENSION.value, canaries=_CANARIES.value,
      population=_CANARIES.value + _REAL.value, delta=1e-6,
      rng=np.random.default_rng(0), bootstrap=100,
      progress=lambda r, total: round_times.append(time.monotonic()))
  seconds = time.monotonic() - started
  # The first round includes building the process; the cosines come last.
  per_round = ((round_times[-1] - round_times[0]) /
               max(1, len(round_times) - 1))
  fixed = seconds - per_round * _ROUNDS.value
  worker_mb = _worker_peak_mb()
  runtime.shutdown_workers()
  own_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  r = audit.result
  print(f'd = {_DIMENSION.value}, m = {_CLIENTS.value}, T = {_ROUNDS.value}, '
        f'K = {_CANARIES.value} (+{_CANARIES.value} never inserted): '
        f'{seconds:.1f} s in all, {per_round:.2f} s a round after the first, '
        f'{fixed:.1f} s for building the process and the '
        f'{2 * _CANARIES.value} cosines; canaries seen {r["seen_canaries"]}.')
  print(f'Extrapolated to T = {_GOAL_ROUNDS.value}: about '
        f'{(fixed + per_round * _GOAL_ROUNDS.value) / 60:.1f} min (goal: 10 '
        f'min).')
  print(f'Peak memory: this process {own_mb:.0f} MB, TFF worker '
        f'{worker_mb:.0f} MB (goal: 4 GB in all).')


if __name__ == '__main__':
  runtime.run_app(main)
