"""The BLT optimizer against jax_privacy's: loss and time per setting.

For the settings (T, b, k) = (930, 213, 4), (2000, 400, 5), (1000, 100, 10)
(b = MinS + 1, jax_privacy's convention) it runs
`accounting.blt_optimizer.optimize` (max error, buffers chosen
automatically, as jax_privacy's `buffered_toeplitz.optimize` does) and prints
its loss (sens^2 times the max prefix-sum variance), jax_privacy 2.0.0's
loss and time on this machine (from benchmarks/data/, made by
benchmarks/jax_privacy_reference.py), their ratio and its own time. Goal:
loss within 2% of jax_privacy's, at most 10 s each.

  python -m benchmarks.blt_optimizer_speed
"""

import json
import os
import time

from absl import app

from dpftrl_tff.accounting import blt_optimizer

_REFERENCE = os.path.join(os.path.dirname(__file__), 'data',
                          'jax_privacy_blt_reference.json')


def main(argv):
  del argv
  with open(_REFERENCE) as f:
    reference = json.load(f)
  print(f'{"T":>5} {"b":>4} {"k":>3} {"loss":>10} {"jax loss":>10} '
        f'{"ratio":>7} {"buf":>3} {"jax buf":>7} {"s":>6} {"jax s":>6}')
  for case in reference['optimize']:
    start = time.perf_counter()
    result = blt_optimizer.optimize(
        rounds=case['n'], min_separation=case['b'] - 1,
        max_participation=case['k'])
    seconds = time.perf_counter() - start
    print(f'{case["n"]:5d} {case["b"]:4d} {case["k"]:3d} {result.loss:10.4f} '
          f'{case["max_loss"]:10.4f} {result.loss / case["max_loss"]:7.4f} '
          f'{result.blt.num_buffers:3d} {len(case["buf_decay"]):7d} '
          f'{seconds:6.2f} {case["seconds"]:6.1f}', flush=True)


if __name__ == '__main__':
  app.run(main)
