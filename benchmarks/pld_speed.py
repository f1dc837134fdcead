"""Speed of the PLD epsilon every report prints, against dp_accounting's.

`accounting.epsilon_pld` (rho-zCDP to (epsilon, delta) through the PLD of
the Gaussian mechanism with rho = 1 / (2 sigma^2)) runs dp_accounting's
accountant with its Gaussian loss's delta curve computed on whole arrays
(`conversions._VectorizedGaussianPrivacyLoss`). For each rho, prints the
CPU-seconds of the unmodified accountant and of this project's computation
(cold cache, the least of --repeats), their ratio, and whether the two
epsilons are the same float.

  python -m benchmarks.pld_speed
"""

import time

from absl import app
from absl import flags

from dpftrl_tff.accounting import conversions

_ZCDP = flags.DEFINE_list('zcdp', ['0.05', '0.5', '2', '8', '19.9'],
                          'rho-zCDP values (at most PLD_MAX_ZCDP).')
_DELTA = flags.DEFINE_float('delta', conversions.DEFAULT_DELTA, 'delta.')
_REPEATS = flags.DEFINE_integer('repeats', 3,
                                'The least CPU time of this many runs.')


def _cpu_seconds(fn):
  best, value = float('inf'), None
  for _ in range(_REPEATS.value):
    conversions._epsilon_pld.cache_clear()  # pylint: disable=protected-access
    start = time.process_time()
    value = fn()
    best = min(best, time.process_time() - start)
  return value, best


def main(argv):
  del argv
  delta = _DELTA.value
  print(f'delta {delta:g}; CPU-seconds, the least of {_REPEATS.value}')
  print('| rho | dp_accounting | this project | speed-up | same float |')
  print('| --- | --- | --- | --- | --- |')
  for text in _ZCDP.value:
    rho = float(text)
    library, library_seconds = _cpu_seconds(
        lambda: conversions.library_epsilon_pld(rho, delta))
    ours, our_seconds = _cpu_seconds(
        lambda: conversions.epsilon_pld(rho, delta))
    print(f'| {rho:g} | {library_seconds:.3f} | {our_seconds:.3f} | '
          f'{library_seconds / our_seconds:.2f}x | {library == ours} |',
          flush=True)


if __name__ == '__main__':
  app.run(main)
