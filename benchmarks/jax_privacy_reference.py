"""Reference values from jax_privacy for the BLT tests and benchmark.

Not part of the project's environment: jax_privacy needs a newer jax than
TensorFlow Federated 0.87 allows, so this script runs in a separate venv:

  python3 -m venv /tmp/jaxp && /tmp/jaxp/bin/pip install jax-privacy==2.0.0
  /tmp/jaxp/bin/python benchmarks/jax_privacy_reference.py \
      --output=benchmarks/data/jax_privacy_blt_reference.json

It writes, with jax_privacy's convention b = j - i for the separation
(this project's MinS is b - 1):
  * `sensitivity`: `toeplitz.minsep_sensitivity_squared` of fixed
    non-increasing coefficient vectors for many (n, b, k);
  * `optimize`: `buffered_toeplitz.optimize(n=T, min_sep=b,
    max_participations=k, error='max')` for the issue's three settings: the
    BLT it returns, its loss (max squared error of the prefix sums times the
    min-sep sensitivity squared) and the seconds it took on this machine.
"""

import json
import time

from absl import app
from absl import flags
import jax
import numpy as np

jax.config.update('jax_enable_x64', True)

# pylint: disable=g-import-not-at-top
from jax_privacy.matrix_factorization import buffered_toeplitz
from jax_privacy.matrix_factorization import toeplitz

_OUTPUT = flags.DEFINE_string('output', None, 'JSON file to write.',
                              required=True)

OPTIMIZE_CASES = ((930, 213, 4), (2000, 400, 5), (1000, 100, 10))


def _coefficient_vectors():
  """Fixed non-negative, non-increasing Toeplitz coefficients."""
  n = 600
  i = np.arange(n, dtype=np.float64)
  blt = buffered_toeplitz.BufferedToeplitz.build(
      buf_decay=[0.99, 0.9, 0.5], output_scale=[0.05, 0.2, 0.2])
  return {
      'one_over_sqrt': list(1.0 / np.sqrt(1.0 + i)),
      'geometric_0.97': list(0.97**i),
      'blt_3': [float(c) for c in blt.toeplitz_coefs(n)],
  }


def main(argv):
  del argv
  vectors = _coefficient_vectors()
  sensitivity = []
  for name, coefs in vectors.items():
    for n in (1, 7, 50, 333, 600):
      for b in (1, 2, 5, 17, 100, 599):
        for k in (1, 2, 3, 10, None):
          value = toeplitz.minsep_sensitivity_squared(
              np.array(coefs[:n]), min_sep=b, max_participations=k)
          sensitivity.append({'coefficients': name, 'n': n, 'b': b, 'k': k,
                              'sensitivity_squared': float(value)})
  optimized = []
  for n, b, k in OPTIMIZE_CASES:
    start = time.perf_counter()
    blt = buffered_toeplitz.optimize(n=n, min_sep=b, max_participations=k,
                                     error='max')
    seconds = time.perf_counter() - start
    loss_fn = buffered_toeplitz.LossFn.build_min_sep(
        n=n, error='max', min_sep=b, max_participations=k)
    optimized.append({
        'n': n, 'b': b, 'k': k,
        'buf_decay': [float(x) for x in blt.buf_decay],
        'output_scale': [float(x) for x in blt.output_scale],
        'max_loss': float(loss_fn.loss(blt)),
        'seconds': seconds,
    })
    print(optimized[-1], flush=True)
  with open(_OUTPUT.value, 'w') as f:
    json.dump({'jax_privacy': '2.0.0', 'jax': jax.__version__,
               'coefficients': vectors, 'sensitivity': sensitivity,
               'optimize': optimized}, f, indent=1)
    f.write('\n')


if __name__ == '__main__':
  app.run(main)
