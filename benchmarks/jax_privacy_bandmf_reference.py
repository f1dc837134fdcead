"""Reference values from jax_privacy for the BandMF tests.

Not part of the project's environment: jax_privacy needs a newer jax than
TensorFlow Federated 0.87 allows, so this script runs in a separate venv:

  python3 -m venv /tmp/jaxp && /tmp/jaxp/bin/pip install jax-privacy==2.0.0
  /tmp/jaxp/bin/python benchmarks/jax_privacy_bandmf_reference.py \
      --output=benchmarks/data/jax_privacy_bandmf_reference.json

It writes random banded lower-triangular matrices (entries stored, so the
tests need no generator to agree across libraries) with, for each:
  * `sensitivity`: `sensitivity.get_sensitivity_banded(C, min_sep,
    max_participations)` for several (min_sep, max_participations), with
    jax_privacy's convention min_sep = b = j - i (this project's MinS is
    b - 1); columns are scaled unevenly so that a pattern of exactly MaxP
    participations can be worse than one of fewer;
  * `upper_bound`: `sensitivity.get_min_sep_sensitivity_upper_bound(C,
    min_sep, max_participations)` (Algorithm 4 of arXiv 2306.08153), also
    for min_sep below the bands, where the banded value does not hold;
  * `per_query_error`: `banded.per_query_error` of the column-normalized
    strategy with the same bands (`ColumnNormalizedBanded(params)`, its
    matrix `materialize()`), the squared error of each prefix sum. The
    params that fall below the matrix are set to zero: with them nonzero,
    `materialize` and `per_query_error` disagree on the last b - 1 columns'
    normalization (seen with jax_privacy 2.0.0);
  * `optimize`: `banded.optimize(n, bands=b, reduction_fn=jnp.mean)` with
    its defaults for the issue's (T, b): the mean and max squared error of
    the strategy it returns and its seconds on this machine;
  * `optimize_max`: the same with `reduction_fn=jnp.max` (the max error).
"""

import json
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

jax.config.update('jax_enable_x64', True)

# pylint: disable=g-import-not-at-top
from jax_privacy.matrix_factorization import banded
from jax_privacy.matrix_factorization import sensitivity

_OUTPUT = flags.DEFINE_string('output', None, 'JSON file to write.',
                              required=True)

# (T, bands) of the random matrices.
SHAPES = ((1, 1), (5, 1), (8, 3), (12, 4), (20, 2), (25, 5), (30, 8),
          (30, 1), (17, 6), (24, 24))


OPTIMIZE_CASES = ((128, 8), (256, 16), (512, 32), (1000, 100))
# (T, b) optimized for the max error (`reduction_fn=jnp.max`).
OPTIMIZE_MAX_CASES = ((128, 8), (256, 16), (512, 32))


def optimize_cases(cases=OPTIMIZE_CASES, reduction_fn=jnp.mean):
  """`banded.optimize(n, bands=b)` (mean squared error, or with
  `reduction_fn` another; its defaults otherwise): the mean and max error
  of the strategy it returns and the seconds it took here."""
  rows = []
  for n, bands in cases:
    start = time.time()
    strategy = banded.optimize(n, bands=bands, reduction_fn=reduction_fn)
    errors = np.asarray(banded.per_query_error(strategy))
    seconds = time.time() - start
    rows.append(dict(n=n, bands=bands, mean_error=float(errors.mean()),
                     max_error=float(errors.max()), seconds=seconds))
    print(rows[-1], flush=True)
  return rows


def main(argv):
  del argv
  rng = np.random.default_rng(20261127)
  cases = []
  for n, bands in SHAPES:
    for trial in range(2):
      params = rng.normal(size=(n, bands))
      params[:, 0] = np.abs(params[:, 0]) + 0.1   # A nonzero diagonal.
      # Entries that fall below the matrix (the last b - 1 columns' tails)
      # are zero: jax_privacy's `materialize` drops them but its streaming
      # inverse (per_query_error) still normalizes the columns with them.
      for i in range(1, bands):
        params[n - i, i:] = 0.0
      normalized = np.asarray(banded.ColumnNormalizedBanded(
          params=params).materialize())
      # Uneven columns: log-normal scales, one column much larger.
      scales = np.exp(rng.normal(scale=1.0, size=n))
      scales[rng.integers(n)] *= 4.0 if trial else 1.0
      c = normalized * scales[np.newaxis, :]
      rows = []
      for min_sep in sorted({bands, bands + 1, bands + 3, 2 * bands + 1}):
        if min_sep > n:
          continue
        for k in (1, 2, 3, 5, None):
          value = sensitivity.get_sensitivity_banded(c, min_sep, k)
          rows.append(dict(min_sep=min_sep, max_participations=k,
                           sensitivity=float(value)))
      # Algorithm 4's upper bound where participations can share rows
      # (min_sep < bands) and, as a check of equality, where they cannot.
      bounds = []
      for min_sep in sorted({1, max(1, bands // 2), bands}):
        if min_sep > n:
          continue
        for k in (1, 2, 3, None):
          value = sensitivity.get_min_sep_sensitivity_upper_bound(
              c, min_sep, k)
          bounds.append(dict(min_sep=min_sep, max_participations=k,
                             sensitivity=float(value)))
      errors = banded.per_query_error(
          banded.ColumnNormalizedBanded(params=params))
      cases.append(dict(n=n, bands=bands, c=c.tolist(),
                        normalized=normalized.tolist(),
                        sensitivity=rows, upper_bound=bounds,
                        per_query_error=[float(e) for e in errors]))
  optimized = optimize_cases()
  optimized_max = optimize_cases(OPTIMIZE_MAX_CASES, jnp.max)
  with open(_OUTPUT.value, 'w') as f:
    json.dump(dict(jax_privacy='2.0.0', cases=cases, optimize=optimized,
                   optimize_max=optimized_max), f, allow_nan=False)
  print(f'{len(cases)} matrices, '
        f'{sum(len(c["sensitivity"]) for c in cases)} sensitivities.')


if __name__ == '__main__':
  app.run(main)
