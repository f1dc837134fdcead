r"""Bias and coverage of the one-shot empirical estimators (issue 38).

Against the closed form: canary cosines drawn as the Gaussian mechanism
gives them in dimension d (unseen N(0, 1/d), seen N(mu, 1/d) with mu sqrt(d)
the sensitivity over the noise whose epsilon is the truth), for 100, 1,000
and 10,000 canaries of each kind, true epsilon 2 and 5, delta 1e-10 and
1e-5. Prints, per setting and estimator (`empirical_privacy.ESTIMATORS`),
the mean estimate's relative bias and how often the 95% interval covered
the truth. The table is in docs/empirical_privacy.md.

  python -m benchmarks.estimator_bias [--trials=100] [--bootstrap=200]
"""

import math
import time

from absl import app
from absl import flags
import numpy as np
from scipy import optimize

from dpftrl_tff.empirical import empirical_privacy as ep

_TRIALS = flags.DEFINE_integer('trials', 100, 'Trials per setting.')
_BOOTSTRAP = flags.DEFINE_integer('bootstrap', 200,
                                  'Bootstrap resamples per estimate.')
_DIMENSION = 20000


def _shift(truth: float, delta: float) -> float:
  """Sensitivity over noise of the Gaussian mechanism with epsilon truth."""
  return optimize.brentq(
      lambda s: ep.gaussian_mechanism_epsilon(s, 1.0, delta) - truth,
      1e-3, 50.0)


def main(argv):
  del argv
  std = 1 / math.sqrt(_DIMENSION)
  rng = np.random.default_rng(0)
  print('canaries | true eps | delta | ' + ' | '.join(
      f'{e}: bias, coverage' for e in ep.ESTIMATORS))
  started = time.time()
  for n in (100, 1000, 10000):
    for truth in (2.0, 5.0):
      for delta in (1e-10, 1e-5):
        mu = std * _shift(truth, delta)
        results = {e: ([], 0) for e in ep.ESTIMATORS}
        for _ in range(_TRIALS.value):
          seen, unseen = rng.normal(mu, std, n), rng.normal(0.0, std, n)
          for estimator in ep.ESTIMATORS:
            r = ep.estimate(seen, unseen, delta, dimension=_DIMENSION,
                            estimator=estimator,
                            bootstrap=_BOOTSTRAP.value, rng=rng)
            values, covered = results[estimator]
            values.append(r.empirical_epsilon)
            low, high = r.epsilon_interval
            results[estimator] = (values, covered + (low <= truth <= high))
        cells = []
        for estimator in ep.ESTIMATORS:
          values, covered = results[estimator]
          finite = [v for v in values if math.isfinite(v)]
          bias = (np.mean(finite) / truth - 1 if finite else math.nan)
          cells.append(f'{100 * bias:+.1f}%, {covered / _TRIALS.value:.2f}'
                       + (f' ({len(values) - len(finite)} unbounded)'
                          if len(finite) < len(values) else ''))
        print(f'{n} | {truth:g} | {delta:g} | ' + ' | '.join(cells),
              flush=True)
  print(f'({_TRIALS.value} trials a setting, {_BOOTSTRAP.value} bootstrap '
        f'resamples, d = {_DIMENSION}; {time.time() - started:.0f} s)')


if __name__ == '__main__':
  app.run(main)
