"""This machine's matmul peak, GFLOP per CPU-second (fp32 and bf16).

The yardstick of `benchmarks.round_time`'s GFLOP per CPU-second: a large
square matmul (2 n^3 FLOPs) in TensorFlow, repeated for about --seconds of
wall time, with TensorFlow's threads limited to --threads; it prints the
best of --repeats runs in GFLOP per CPU-second (process CPU time, so the
figure does not depend on how many cores were free) and per wall second.

  python -m benchmarks.matmul_peak [--n=2048] [--threads=1] [--repeats=3]
      [--dtypes=fp32,bf16]
"""

import time

from absl import app
from absl import flags

_N = flags.DEFINE_integer('n', 2048, 'Matrix size.', lower_bound=64)
_THREADS = flags.DEFINE_integer('threads', 1, 'TensorFlow intra-op threads.',
                                lower_bound=1)
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed runs per dtype.',
                                lower_bound=1)
_SECONDS = flags.DEFINE_float('seconds', 2.0, 'Wall seconds per run.',
                              lower_bound=0.1)
_DTYPES = flags.DEFINE_multi_enum('dtypes', ['fp32', 'bf16'],
                                  ['fp32', 'bf16'], 'Types to measure.')


def measure(dtype, n: int, repeats: int, seconds: float):
  """(best GFLOP per CPU-second, best GFLOP per wall second) of n x n
  matmuls in `dtype`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  a = tf.random.normal([n, n], dtype=tf.float32)
  a, b = tf.cast(a, dtype), tf.cast(tf.transpose(a), dtype)

  @tf.function
  def product(x, y):
    return tf.reduce_sum(tf.cast(tf.matmul(x, y)[0, :1], tf.float32))

  product(a, b).numpy()   # Warm-up (tracing, oneDNN's kernel choice).
  best_cpu = best_wall = 0.0
  for _ in range(repeats):
    count, cpu, wall = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - wall < seconds:
      product(a, b).numpy()
      count += 1
    flop = 2.0 * n**3 * count
    best_cpu = max(best_cpu, flop / (time.process_time() - cpu) / 1e9)
    best_wall = max(best_wall, flop / (time.perf_counter() - wall) / 1e9)
  return best_cpu, best_wall


def main(argv):
  del argv
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(_THREADS.value)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  print(f'{_N.value} x {_N.value} matmuls, {_THREADS.value} thread(s), best '
        f'of {_REPEATS.value}:')
  for name, dtype in (('fp32', tf.float32), ('bf16', tf.bfloat16)):
    if name not in _DTYPES.value:
      continue
    cpu, wall = measure(dtype, _N.value, _REPEATS.value, _SECONDS.value)
    print(f'  {name}: {cpu:7.1f} GFLOP per CPU-second, {wall:7.1f} per wall '
          f'second')
  return 0


if __name__ == '__main__':
  app.run(main)
