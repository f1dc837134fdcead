"""Steps 1, 3 and 4 of Algorithm 2: l2 and l_inf clipping and conditional
stochastic rounding to integers within the norm bound."""

import math

import tensorflow as tf


def clip_l2(x: tf.Tensor, clip_norm: float) -> tf.Tensor:
  norm = tf.norm(x)
  return x * tf.minimum(1.0, clip_norm / tf.maximum(norm, 1e-30))


def clip_linf(x: tf.Tensor, bound: float) -> tf.Tensor:
  top = tf.reduce_max(tf.abs(x))
  return x * tf.minimum(1.0, bound / tf.maximum(top, 1e-30))


def squared_norm_at_most(rounded: tf.Tensor, bound: float) -> tf.Tensor:
  """Whether ||rounded||^2 <= bound, exactly, for integer-valued float32.

  Below 2^24 float32 holds every integer exactly, and a sum of non-negative
  integers computed in any order (rounding is monotone) is exact while the
  true sum is at most 2^24, and at least 2^24 otherwise. So for bound < 2^24
  a float32 dot product (one pass, no temporary) decides exactly; larger
  bounds use float64.
  """
  if bound < 2.0**24:
    flat = tf.reshape(rounded, [1, -1])
    norm2 = tf.matmul(flat, flat, transpose_b=True)[0, 0]
    # norm2 is an integer: norm2 <= bound iff norm2 <= floor(bound) < 2^24.
    return norm2 <= tf.constant(math.floor(bound), tf.float32)
  norm2 = tf.reduce_sum(tf.square(tf.cast(rounded, tf.float64)))
  return norm2 <= bound


def conditional_stochastic_round(x: tf.Tensor, norm_bound_squared: float,
                                 seed: tf.Tensor, max_retries: int):
  """Rounds x stochastically until ||x~||^2 <= bound; returns (x~, tries, ok).

  Every coordinate goes up with probability equal to its fractional part.
  x~ is float-valued with integer coordinates; zeros if no try met the bound
  within `max_retries` retries (ok is then False).
  """
  floor = tf.floor(x)
  frac = x - floor

  def attempt(i):
    u = tf.random.stateless_uniform(
        tf.shape(x), seed=tf.random.experimental.stateless_fold_in(seed, i))
    rounded = floor + tf.cast(u < frac, x.dtype)
    return rounded, squared_norm_at_most(rounded, norm_bound_squared)

  first, ok = attempt(tf.constant(0, tf.int32))

  def cond(i, rounded, ok):
    del rounded
    return tf.logical_and(tf.logical_not(ok), i <= max_retries)

  def body(i, rounded, ok):
    del rounded, ok
    rounded, ok = attempt(i)
    return i + 1, rounded, ok

  tries, rounded, ok = tf.while_loop(cond, body,
                                     (tf.constant(1, tf.int32), first, ok))
  rounded = tf.cond(ok, lambda: rounded, lambda: tf.zeros_like(rounded))
  return rounded, tries - 1, ok
