"""Algorithm 2's constants, a client's encoding (steps 1-5) and the
server's decoding of the modular sum (unshift n C_inf, unscale, unrotate)."""

import tensorflow as tf

from dpftrl_tff import checks
from dpftrl_tff.accounting import secagg as secagg_accounting
from dpftrl_tff.aggregators.secagg.rotation import rotate
from dpftrl_tff.aggregators.secagg.rotation import unrotate
from dpftrl_tff.aggregators.secagg.rounding import conditional_stochastic_round

DEFAULT_MAX_ROUNDING_RETRIES = 1000


class SecAggParams:
  """Derived constants of Algorithm 2 for one model dimension."""

  def __init__(self, *, clip_norm, scale, report_goal, dim, alpha):
    self.clip_norm = checks.check_positive(clip_norm, '--clip_norm')
    self.scale = checks.check_positive(scale, '--secagg_scale')
    self.report_goal = checks.check_int(report_goal, '--clients_per_round',
                                        minimum=1)
    self.alpha = checks.check_probability(alpha, 'alpha')
    self.dim = checks.check_int(dim, 'model dimension', minimum=1)
    self.padded_dim = max(2, secagg_accounting.padded_dimension(dim))
    self.linf_bound = secagg_accounting.linf_bound(
        self.clip_norm, self.padded_dim, self.scale)
    self.modulus = 2 * self.linf_bound * self.report_goal + 1
    if self.modulus >= 2**31:
      raise ValueError(
          f'--secagg_scale={scale} gives a SecAgg modulus M = {self.modulus} '
          f'>= 2^31 (C_inf = {self.linf_bound}, report goal '
          f'{self.report_goal}); use a smaller scale.')
    self.norm_bound_squared = secagg_accounting.rounding_norm_bound_squared(
        self.clip_norm, self.padded_dim, self.scale, self.alpha)
    self.bits_per_parameter = secagg_accounting.bits_per_parameter(
        self.modulus)
    self.inflated_clip_norm = secagg_accounting.inflated_clip_norm(
        self.clip_norm, self.padded_dim, self.scale, self.alpha)


def encode(x: tf.Tensor, signs: tf.Tensor, seed: tf.Tensor,
           params: SecAggParams, max_retries: int):
  """Client steps 1-5 on a flat float32 vector of length params.dim.

  Returns (u, retries, ok, top): u the shifted integer vector in
  [0, 2 C_inf], and top >= max_j u_j (see `_shifted_top`).
  """
  x = tf.cast(x, tf.float32)
  # Step 1: clip and scale in one multiplication.
  norm = tf.norm(x)
  x = x * (params.scale *
           tf.minimum(1.0, params.clip_norm / tf.maximum(norm, 1e-30)))
  x = tf.pad(x, [[0, params.padded_dim - params.dim]])
  x = rotate(x, signs)                                     # Step 2.
  bound = float(params.linf_bound)
  top_abs = tf.reduce_max(tf.abs(x))
  x = tf.cond(top_abs > bound,                             # Step 3.
              lambda: x * (bound / top_abs), lambda: x)
  rounded, retries, ok = conditional_stochastic_round(     # Step 4.
      x, params.norm_bound_squared, seed, max_retries)
  # Step 5. |rounded| <= C_inf (C_inf is an integer and |x| <= C_inf), so
  # the shifted coordinates lie in [0, 2 C_inf] and reduction mod
  # M = 2 C_inf m + 1 > 2 C_inf is the identity: no pass is spent on it.
  shifted = tf.cast(rounded, tf.int32) + params.linf_bound
  return shifted, retries, ok, _shifted_top(top_abs, ok, params)


def _shifted_top(top_abs, ok, params: SecAggParams):
  """An upper bound on a client's largest shifted coordinate, at no cost.

  Every rounded coordinate is at most ceil(min(max_j |x_j|, C_inf)), so
  every shifted one at most that plus C_inf (C_inf for the all-zero vector
  sent after a rounding failure). Summed over n <= m clients it stays
  below M, and it bounds every coordinate's integer sum.
  """
  bound = float(params.linf_bound)
  top = tf.math.ceil(tf.minimum(top_abs, bound)) + bound
  top = tf.where(ok, top, bound)
  return tf.cast(top, tf.int64)


def client_rounding_seed(flat: tf.Tensor, signs: tf.Tensor, seed: tf.Tensor,
                         fresh_entropy: bool) -> tf.Tensor:
  """A client's own seed for its stochastic rounding in this round.

  Every client must round with independent randomness: with shared
  uniforms the rounding errors of clients with similar updates add up like
  n instead of sqrt(n). The client knows nothing that identifies it, so the
  seed folds into the round's seed (a) a fingerprint of the client's own
  update (the bits of its norm and of its dot product with the round's
  signs: distinct for distinct updates, also when their norms are equal, as
  they are for every clipped client) and (b) with `fresh_entropy`, a draw
  from TensorFlow's unseeded generator (seeded from the operating system),
  so equal updates round independently too. Without fresh entropy (a fixed
  --noise_seed) the rounding is reproducible.
  """
  norm_bits = tf.bitcast(tf.norm(flat), tf.int32)
  padded = tf.pad(flat, [[0, tf.shape(signs)[0] - tf.shape(flat)[0]]])
  dot_bits = tf.bitcast(tf.tensordot(padded, signs, 1), tf.int32)
  client_seed = tf.random.experimental.stateless_fold_in(
      tf.random.experimental.stateless_fold_in(
          tf.random.experimental.stateless_fold_in(seed, 7919), norm_bits),
      dot_bits)
  if fresh_entropy:
    entropy = tf.random.uniform([], minval=0, maxval=2**31 - 1,
                                dtype=tf.int32)
    client_seed = tf.random.experimental.stateless_fold_in(client_seed,
                                                           entropy)
  return client_seed


def decode(modular_sum: tf.Tensor, num_clients: tf.Tensor, signs: tf.Tensor,
           params: SecAggParams) -> tf.Tensor:
  """Server: unshift (n C_inf), unscale, unrotate, unpad."""
  total = (tf.cast(modular_sum, tf.float64) -
           tf.cast(num_clients, tf.float64) * params.linf_bound)
  y = tf.cast(total / params.scale, tf.float32)
  return unrotate(y, signs)[:params.dim]
