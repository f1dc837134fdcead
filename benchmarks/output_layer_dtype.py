"""The paper-size output layer's training step in fp32 and in bf16.

Issue 39 asked whether bf16 (this machine: 430 against 251 GFLOP per
CPU-second at the matmul peak, `benchmarks.matmul_peak`) could speed up
client training. Most of a paper-size step is the output layer and its
softmax over V' = 10,004 ids, so this times that alone: logits = h W for a
client batch of 16 sequences of 20 tokens (h: 320 x 96, W: 96 x 10,004),
the softmax cross-entropy in fp32 and the gradient in W, with the matmul in
fp32 or bf16 (casts included, as a mixed-precision model would do them).
It prints CPU milliseconds per step (best of --repeats, each the mean of
--steps steps, dtypes interleaved) and the matmul share at the fp32 peak.

  python -m benchmarks.output_layer_dtype [--steps=50] [--repeats=3]
"""

import time

from absl import app
from absl import flags

_STEPS = flags.DEFINE_integer('steps', 50, 'Steps per timed run.',
                              lower_bound=1)
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed runs per dtype.',
                                lower_bound=1)

TOKENS, EMBEDDING, IDS = 16 * 20, 96, 10_004
# Forward and the weight gradient: 2 matmuls of 2 * tokens * E * V' FLOPs
# (the input gradient, needed by the layers below in a real step, is a
# third).
FLOP_PER_STEP = 2 * 2 * TOKENS * EMBEDDING * IDS


def _step(dtype):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  h = tf.random.normal([TOKENS, EMBEDDING])
  w = tf.Variable(tf.random.normal([EMBEDDING, IDS]) * 0.1)
  labels = tf.random.uniform([TOKENS], 0, IDS, dtype=tf.int32)

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      logits = tf.matmul(tf.cast(h, dtype), tf.cast(w, dtype))
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels, tf.cast(logits, tf.float32)))
    return tape.gradient(loss, w)

  step()   # Warm-up: tracing, oneDNN's kernel choice.
  return step


def main(argv):
  del argv
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  steps = {name: _step(dtype) for name, dtype in
           (('fp32', tf.float32), ('bf16', tf.bfloat16))}
  best = {name: float('inf') for name in steps}
  for _ in range(_REPEATS.value):
    for name, step in steps.items():   # Interleaved: a slow spell hits both.
      cpu = time.process_time()
      for _ in range(_STEPS.value):
        step()
      best[name] = min(best[name],
                       (time.process_time() - cpu) / _STEPS.value * 1e3)
  for name, ms in best.items():
    print(f'{name}: {ms:.2f} CPU-ms per step, '
          f'{FLOP_PER_STEP / ms / 1e6:.1f} GFLOP per CPU-second')
  print(f'bf16 / fp32 CPU time: {best["bf16"] / best["fp32"]:.3f}; the '
        f'matmuls alone at 251 GFLOP/CPU-s would take '
        f'{FLOP_PER_STEP / 251e6:.2f} ms.')
  return 0


if __name__ == '__main__':
  app.run(main)
