"""The BandMF optimizer against jax_privacy's, and Gboard's shape.

For the (T, b) of `benchmarks/data/jax_privacy_bandmf_reference.json`'s
`optimize` section, `accounting.bandmf.optimize(T, b)`'s mean squared error
of the prefix sums (at sensitivity 1 per participation) against
jax_privacy 2.0.0's `banded.optimize` (the goal: within 2%, in at most a
minute each), the same for the max error against `banded.optimize` with
`reduction_fn=jnp.max` (`optimize_max`), then Gboard's shape T = 2000,
b = 400 (goal: at most 10 minutes; no jax_privacy value).

  python -m benchmarks.bandmf_optimizer_speed [--gboard_shape=true]
"""

import json
import os
import time

from absl import app
from absl import flags

from dpftrl_tff.accounting import bandmf

_GBOARD = flags.DEFINE_bool('gboard_shape', True,
                            'Also optimize T = 2000, b = 400.')
_REFERENCE = os.path.join(os.path.dirname(__file__), 'data',
                          'jax_privacy_bandmf_reference.json')


def _timed(rounds, bands, error='mean'):
  wall, cpu = time.perf_counter(), time.process_time()
  c = bandmf.optimize(rounds, bands, error=error)
  return (bandmf.error_summary(c), time.perf_counter() - wall,
          time.process_time() - cpu)


def main(argv):
  del argv
  with open(_REFERENCE) as f:
    reference = json.load(f)
  for error, key in (('mean', 'optimize'), ('max', 'optimize_max')):
    print(f'T, b | {error} error (ours / jax_privacy) | ratio | s (ours, '
          'CPU-s) | s (jax_privacy)')
    for row in reference[key]:
      errors, wall, cpu = _timed(row['n'], row['bands'], error)
      ours, theirs = errors[f'{error}_error'], row[f'{error}_error']
      print(f'{row["n"]}, {row["bands"]} | {ours:.6f} / {theirs:.6f} | '
            f'{ours / theirs:.6f} | {wall:.1f} ({cpu:.1f}) | '
            f'{row["seconds"]:.1f}', flush=True)
  if _GBOARD.value:
    errors, wall, cpu = _timed(2000, 400)
    print(f'2000, 400 | {errors["mean_error"]:.6f} (max '
          f'{errors["max_error"]:.6f}) | | {wall:.1f} ({cpu:.1f}) |')
  return 0


if __name__ == '__main__':
  app.run(main)
