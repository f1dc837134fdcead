r"""Power of the mechanism-alone canary audit over rounds (issue 38, item 3).

The audit of `experiments.audit_mechanism` (final-model statistic) on
DP-FTRL with the tree (z = 1, C = 1, 250 of 300 clients a round drawn
uniformly, 200 canaries, d = 5000, delta 1e-5), for T rounds, each setting
twice: with the noise as accounted, and with a factory that adds a quarter
of it while the accountant counts the whole (`tests.fixtures.broken_noise`,
the planted mistake an audit must catch). Prints one line per audit and a
table: at which T the quartered noise is still caught (the interval's
lower end above the accounted epsilon). The table is in
docs/empirical_privacy.md, and the audit's report quotes its conclusion.

  python -m benchmarks.audit_power [--rounds=1,2,4,8] [--repeats=2]
"""

import time

from absl import flags
import numpy as np

from dpftrl_tff import runtime
from dpftrl_tff import tff_compat
from dpftrl_tff.empirical import canary_audit
from dpftrl_tff.run import config as config_lib
from tests import fixtures

_ROUNDS = flags.DEFINE_list('rounds', ['1', '2', '4', '8'], 'Values of T.')
_REPEATS = flags.DEFINE_integer('repeats', 2, 'Audits per (T, noise).')
_DELTA = 1e-5


def _audit(rounds: int, repeat: int, broken: bool):
  config = config_lib.TrainConfig(
      aggregator='dp_ftrl', noise_multiplier=1.0, clip_norm=1.0,
      clients_per_round=250, total_rounds=rounds, participation='uniform',
      seed=repeat)

  def run():
    return canary_audit.run(
        config, dimension=5000, canaries=200, population=300, delta=_DELTA,
        bootstrap=200, rng=np.random.default_rng(1000 * rounds + repeat)
    ).result

  if not broken:
    return run()
  with fixtures.broken_noise('dp_ftrl', 4):
    return run()


def main(argv):
  del argv
  tff_compat.install()
  table = {}
  for rounds in (int(t) for t in _ROUNDS.value):
    for repeat in range(_REPEATS.value):
      for broken in (False, True):
        started = time.time()
        r = _audit(rounds, repeat, broken)
        low, high = r['epsilon_interval']
        caught = low > r['accounted_epsilon']
        table.setdefault((rounds, broken), []).append(caught)
        print(f'T={rounds} repeat={repeat} noise={"z/4" if broken else "z"}: '
              f'accounted {r["accounted_epsilon"]:.2f}, estimate '
              f'{r["empirical_epsilon"]:.2f} [{low:.2f}, {high:.2f}], '
              f'{r["seen_canaries"]} canaries seen, MaxP '
              f'{r["observed_max_participation"]}: '
              f'{"CAUGHT" if caught else "not caught"} '
              f'({time.time() - started:.0f} s)', flush=True)
  print('\n| T | noise as accounted: caught | a quarter of it: caught |')
  print('| --- | --- | --- |')
  for rounds in sorted({t for t, _ in table}):
    honest, broken = table[(rounds, False)], table[(rounds, True)]
    print(f'| {rounds} | {sum(honest)} of {len(honest)} | '
          f'{sum(broken)} of {len(broken)} |')


if __name__ == '__main__':
  runtime.run_app(main)
