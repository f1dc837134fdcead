"""This machine's matmul peak, GFLOP per CPU-second (fp32 and bf16).

The yardstick of `benchmarks.round_time`'s GFLOP per CPU-second: a large
square matmul (2 n^3 FLOPs) in TensorFlow, repeated for about --seconds of
wall time, with TensorFlow's threads limited to --threads; it prints the
best of --repeats runs in GFLOP per CPU-second (process CPU time, so the
figure does not depend on how many cores were free) and per wall second.

By default (--onednn=both) each dtype is measured twice, in a process of
its own with oneDNN on and one with it off (TF_ENABLE_ONEDNN_OPTS, read
when TensorFlow is imported), and the last line per dtype is the better
of the two: the machine's peak, whichever library reaches it. TensorFlow
2.14 turns oneDNN on by itself only on AVX-512 VNNI/BF16/AMX CPUs; on an
AVX2 EPYC (2026-11-28) Eigen's matmul gave 74.9 to 76.6 GFLOP per
CPU-second and oneDNN's 79.3 to 84.3, and TFF's workers run with oneDNN
on (`tff_compat.worker`): a peak read with Eigen alone made the share of
the peak in `round_time` 4 to 5% too high.

  python -m benchmarks.matmul_peak [--n=2048] [--threads=1] [--repeats=3]
      [--dtypes=fp32,bf16] [--onednn=both|on|off|default]
"""

import os
import re
import subprocess
import sys
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
_ONEDNN = flags.DEFINE_enum(
    'onednn', 'both', ['both', 'on', 'off', 'default'],
    "TensorFlow's oneDNN: 'both' measures with it on and off, each in a "
    "process of its own, and prints the better as the peak; 'on' / 'off' "
    "set TF_ENABLE_ONEDNN_OPTS for this process (before TensorFlow loads); "
    "'default' leaves TensorFlow's own choice.")

_ONEDNN_ENV = {'on': '1', 'off': '0'}
# A dtype's line as this binary prints it for one setting.
_LINE = re.compile(r'^\s*(\w+):\s*([0-9.]+) GFLOP per CPU-second,\s*'
                   r'([0-9.]+) per wall second')


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


def best_of(outputs):
  """{dtype: (GFLOP per CPU-second, per wall second, setting)}: per dtype
  the setting with the most GFLOP per CPU-second, from {setting: stdout of
  this binary run with --onednn=setting}."""
  best = {}
  for setting, stdout in outputs.items():
    for line in stdout.splitlines():
      found = _LINE.match(line)
      if found:
        name, cpu, wall = (found.group(1), float(found.group(2)),
                           float(found.group(3)))
        if cpu > best.get(name, (-1.0,))[0]:
          best[name] = (cpu, wall, setting)
  return best


def _measure_each_setting() -> int:
  """--onednn=both: this binary with --onednn=on and =off, each in its own
  process; prints their figures, then per dtype the better as the peak."""
  outputs = {}
  for setting in ('on', 'off'):
    proc = subprocess.run(
        [sys.executable, '-m', 'benchmarks.matmul_peak', f'--n={_N.value}',
         f'--threads={_THREADS.value}', f'--repeats={_REPEATS.value}',
         f'--seconds={_SECONDS.value}',
         *[f'--dtypes={d}' for d in _DTYPES.value], f'--onednn={setting}'],
        capture_output=True, text=True, check=False,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
    if proc.returncode:
      print(f'benchmarks.matmul_peak --onednn={setting} failed:\n'
            f'{proc.stderr[-2000:]}', file=sys.stderr)
      return 1
    outputs[setting] = proc.stdout
    for name, (cpu, wall, _) in best_of({setting: proc.stdout}).items():
      print(f'  {name} (oneDNN {setting}): {cpu:7.1f} GFLOP per CPU-second, '
            f'{wall:7.1f} per wall second', flush=True)
  print('Peak (the better setting of oneDNN):')
  for name, (cpu, wall, setting) in best_of(outputs).items():
    print(f'  {name}: {cpu:7.1f} GFLOP per CPU-second, {wall:7.1f} per wall '
          f'second (oneDNN {setting})')
  return 0


def main(argv):
  del argv
  if _ONEDNN.value == 'both':
    return _measure_each_setting()
  if _ONEDNN.value in _ONEDNN_ENV:
    os.environ['TF_ENABLE_ONEDNN_OPTS'] = _ONEDNN_ENV[_ONEDNN.value]
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(_THREADS.value)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  print(f'{_N.value} x {_N.value} matmuls, {_THREADS.value} thread(s), best '
        f'of {_REPEATS.value}, oneDNN {_ONEDNN.value}:')
  for name, dtype in (('fp32', tf.float32), ('bf16', tf.bfloat16)):
    if name not in _DTYPES.value:
      continue
    cpu, wall = measure(dtype, _N.value, _REPEATS.value, _SECONDS.value)
    print(f'  {name}: {cpu:7.1f} GFLOP per CPU-second, {wall:7.1f} per wall '
          f'second')
  return 0


if __name__ == '__main__':
  app.run(main)
