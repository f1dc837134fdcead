"""SecAgg-style discretization of client updates (paper's Algorithm 2).

A TFF `UnweightedAggregationFactory` that sums client updates through a
modular integer sum (SecAgg), usable as the record aggregation inside DP-FTRL.
Each client, in this order (d = number of parameters, padded to d' = 2^k):

  1. l2-clip to C and scale by s:       x <- s x min(1, C / ||x||)
  2. rotate with the round's shared signs xi and the normalized Hadamard
     matrix:                             x <- (1/sqrt(d')) H_{d'} D_xi x
  3. clip to l_inf C_inf = ceil(2 s C log(d') / sqrt(d')):
                                         x <- x min(1, C_inf / ||x||_inf)
  4. conditional stochastic rounding: round every coordinate up with
     probability equal to its fractional part, retrying until
     ||x~||^2 <= s^2 C^2 + d'/4 + sqrt(2 log(1/alpha)) (s C + sqrt(d')/2)
     (after `max_rounding_retries` failures the client sends zeros, which
     meets the bound; counted in `rounding_failures`);
  5. shift into {0..2 C_inf} and reduce mod M = 2 C_inf m + 1 (the identity
     on {0..2 C_inf}, so no operation is spent on it).

The modular sum is taken by `inner_agg_factory` (default
`tff.aggregators.SecureModularSumFactory(M)`, run as a plain sum mod M by
TFF's test execution context in simulation). The server then decodes.

Unshift, derived (the paper's box abbreviates it as Delta_t - C_inf): client
i sends u_i = x~_i + C_inf 1 with every coordinate in [0, 2 C_inf]. With
n <= m clients, sum_i u_i has coordinates in [0, 2 C_inf n] within
[0, M - 1], so the modular sum S equals the integer sum and

    sum_i x~_i = S - n C_inf 1      (n C_inf, not C_inf),

then unscale by 1/s and unrotate, D_xi H_{d'}^T / sqrt(d') (H is symmetric),
and drop the padding. More than m clients could wrap around; the server
checks n <= m and fails the round with an error naming report_goal. It also
checks sum_i top_i < M, where each client reports top_i >= max_j u_ij
(ceil(min(||x_i||_inf, C_inf)) + C_inf, known from step 3 at no cost); the
sum bounds every coordinate's integer sum, so a completed round provably has
no wrap-around without a second full-size aggregation to count them.

The signs xi are drawn once per round from the round's seed (on the server)
and broadcast with it.

The l2 norm of every client's contribution to the decoded sum is at most
C_inflated (accounting/secagg.py); DP-FTRL must calibrate its noise to it
(`noise_multiplier_for_secagg`).
"""

import math
import secrets
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff import checks
from dpftrl_tff.accounting import secagg as secagg_accounting

DEFAULT_MAX_ROUNDING_RETRIES = 1000


# ---- Pure TensorFlow steps (tested one by one against the NumPy reference).


_MAX_RADIX = 64


def hadamard_matrix(n: int) -> np.ndarray:
  """The n x n Sylvester Hadamard matrix (n a power of two), float32."""
  h = np.ones((1, 1), np.float32)
  while h.shape[0] < n:
    h = np.block([[h, h], [h, -h]])
  return h


def fast_walsh_hadamard(x: tf.Tensor, scale: float = 1.0) -> tf.Tensor:
  """scale * H_d x for a vector of length d = 2^k (Sylvester order).

  Sylvester's H_{ab} = H_a (x) H_b (Kronecker), and (A (x) B) vec(X) =
  vec(A X B^T) for X the row-major [a, b] reshape of x. So H_d x is H_{n_i}
  applied along every axis of x reshaped to [n_1, ..., n_r] with
  prod n_i = d: r small matrix products (radix n_i <= 64) instead of k
  butterfly passes over memory, about 4x faster for d = 2^22 on CPU.
  `scale` is folded into the first small matrix (no extra pass).
  """
  d = int(x.shape[0])
  k = int(round(math.log2(d)))
  if 2**k != d:
    raise ValueError(f'Hadamard transform needs a power-of-two length, got '
                     f'{d}.')
  r = int(math.log2(_MAX_RADIX))
  factors = [_MAX_RADIX] * (k // r)
  if k % r:
    # The smaller factor goes second to last: the first and last axes are
    # plain 2-D matrix products, the fastest (d = 2^22: [64, 64, 16, 64]
    # measured 38 ms against 47 ms for [64, 64, 64, 16]).
    factors.insert(max(0, len(factors) - 1), 2**(k % r))
  for i, n in enumerate(factors):
    before = int(np.prod(factors[:i], dtype=np.int64))
    after = int(np.prod(factors[i + 1:], dtype=np.int64))
    h = hadamard_matrix(n)
    if i == 0 and scale != 1.0:
      h = (h.astype(np.float64) * scale).astype(np.float32)
    h = tf.constant(h, x.dtype)
    if after == 1:   # Last axis: rows times H (H is symmetric).
      x = tf.matmul(tf.reshape(x, [before, n]), h)
    elif before == 1:
      x = tf.matmul(h, tf.reshape(x, [n, after]))
    else:
      x = tf.matmul(h, tf.reshape(x, [before, n, after]))
    x = tf.reshape(x, [d])
  return x


def random_signs(seed: tf.Tensor, dim: int) -> tf.Tensor:
  """The round's shared random signs xi in {-1, +1}^dim.

  The 32 bits of each stateless uniform int32 give 32 independent fair
  signs (Philox output bits are uniform), 32x fewer random draws than one
  draw per sign.
  """
  words = -(-dim // 32)
  r = tf.random.stateless_uniform([words], seed=seed, minval=None,
                                  maxval=None, dtype=tf.int32)
  bits = tf.bitwise.bitwise_and(
      tf.bitwise.right_shift(r[:, None], tf.range(32, dtype=tf.int32)), 1)
  return tf.cast(2 * tf.reshape(bits, [-1])[:dim] - 1, tf.float32)


def rotate(x: tf.Tensor, signs: tf.Tensor) -> tf.Tensor:
  """(1/sqrt(d)) H_d D_xi x."""
  d = int(x.shape[0])
  return fast_walsh_hadamard(signs * x, 1.0 / math.sqrt(d))


def unrotate(y: tf.Tensor, signs: tf.Tensor) -> tf.Tensor:
  """D_xi H_d^T y / sqrt(d), the inverse of `rotate`."""
  d = int(y.shape[0])
  return signs * fast_walsh_hadamard(y, 1.0 / math.sqrt(d))


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


# ---- The TFF factory.


def _tensor_specs(value_type):
  """tf.TensorSpec structure (lists / dicts) of a TFF tensor or struct type."""
  if isinstance(value_type, tff.TensorType):
    return tf.TensorSpec(value_type.shape, tf.as_dtype(value_type.dtype))
  if isinstance(value_type, tff.StructType):
    items = tff.structure.to_elements(value_type)
    if all(name is None for name, _ in items):
      return [_tensor_specs(t) for _, t in items]
    return {name: _tensor_specs(t) for name, t in items}
  raise TypeError(f'SecAgg discretization cannot aggregate {value_type}.')


class SecAggDiscretizationFactory(tff.aggregators.UnweightedAggregationFactory):
  """Algorithm 2's client encoding, modular sum and server decoding.

  The result is the decoded sum of the clients' l2-clipped updates (an
  approximation within the rounding error, which shrinks as s grows).
  Measurements per round: `bits_per_parameter` (ceil log2 M), `modulus`,
  `num_clients`, `rounding_retries` (summed over clients),
  `rounding_failures`, `integer_sum_bound` (sum over clients of an upper
  bound on each one's largest shifted coordinate: no coordinate's integer
  sum exceeds it, and a round with bound >= M is refused), `wraparounds` (coordinates whose
  integer sum reached M: with `debug=True` counted exactly from a second,
  plain integer sum; otherwise the bound's upper bound on it, 0 whenever
  the round completes), and, with `debug=True`, `decode_error_l2` (l2
  distance between the decoded sum and the true sum of the clipped
  updates).

  `seed` fixes the rotation signs and makes the rounding reproducible
  (tests); None (default) draws the key from the operating system's
  entropy and gives every client fresh rounding randomness
  (`client_rounding_seed`).
  """

  def __init__(self, *, clip_norm: float, scale: float, report_goal: int,
               alpha: float = secagg_accounting.DEFAULT_ALPHA,
               max_rounding_retries: int = DEFAULT_MAX_ROUNDING_RETRIES,
               inner_agg_factory: Optional[
                   tff.aggregators.UnweightedAggregationFactory] = None,
               debug: bool = False, seed: Optional[int] = None):
    self._clip_norm = checks.check_positive(clip_norm, '--clip_norm')
    self._scale = checks.check_positive(scale, '--secagg_scale')
    self._report_goal = checks.check_int(report_goal, '--clients_per_round',
                                         minimum=1)
    self._alpha = checks.check_probability(alpha, 'alpha')
    self._max_retries = checks.check_int(max_rounding_retries,
                                         'max_rounding_retries', minimum=0)
    self._inner_agg_factory = inner_agg_factory
    self._debug = bool(debug)
    self._seed = seed

  def params_for(self, dim: int) -> SecAggParams:
    return SecAggParams(clip_norm=self._clip_norm, scale=self._scale,
                        report_goal=self._report_goal, dim=dim,
                        alpha=self._alpha)

  def create(self, value_type):
    layout = _Layout(value_type)
    params = self.params_for(layout.dim)
    inner_factory = self._inner_agg_factory or (
        tff.aggregators.SecureModularSumFactory(params.modulus))
    int_type = tff.TensorType(np.int32, [params.padded_dim])
    inner_process = inner_factory.create(int_type)
    debug = self._debug
    key_seed = self._seed if self._seed is not None else secrets.randbits(62)
    seeds = _RoundSeeds(key_seed, params)
    client_encode = _client_encoder(
        layout, params, seeds, fresh_entropy=self._seed is None,
        max_retries=self._max_retries, debug=debug)
    server_decode = _server_decoder(layout, params, seeds)
    measure = _Measurements(layout, params)

    @tff.federated_computation
    def init_fn():
      return tff.federated_zip((tff.federated_eval(seeds.init_key,
                                                   tff.SERVER),
                                tff.federated_value(np.int64(0), tff.SERVER),
                                inner_process.initialize()))

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      key, round_num, inner_state = state
      seed = tff.federated_map(seeds.round_seed, (key, round_num))
      # The shared rotation signs are drawn once (on the server) and
      # broadcast, not regenerated by every client.
      signs = tff.federated_map(seeds.make_signs, seed)
      client_out = tff.federated_map(client_encode, (
          value, tff.federated_broadcast(signs),
          tff.federated_broadcast(seed)))
      encoded, retries, failures, tops = client_out[:4]
      inner_output = inner_process.next(inner_state, encoded)
      num_clients = tff.federated_sum(tff.federated_eval(measure.one,
                                                         tff.CLIENTS))
      sum_bound = tff.federated_sum(tops)
      result = tff.federated_map(
          server_decode, (inner_output.result, num_clients, sum_bound, signs))
      measurements = measure.round(
          result=result, encoded=encoded, num_clients=num_clients,
          sum_bound=sum_bound, retries=retries, failures=failures,
          clipped=client_out[4] if debug else None)
      new_state = tff.federated_zip(
          (key, tff.federated_map(seeds.next_round, round_num),
           inner_output.state))
      return tff.templates.MeasuredProcessOutput(
          state=new_state, result=result,
          measurements=tff.federated_zip(measurements))

    return tff.templates.AggregationProcess(init_fn, next_fn)


class _Layout:
  """The update's tensors as one flat float32 vector, and back."""

  def __init__(self, value_type):
    self.value_type = value_type
    self.specs = _tensor_specs(value_type)
    self.flat_specs = tf.nest.flatten(self.specs)
    for spec in self.flat_specs:
      if not spec.dtype.is_floating:
        raise TypeError(f'SecAgg discretization needs float values, got '
                        f'{spec}.')
    self.sizes = [int(np.prod(s.shape.as_list())) for s in self.flat_specs]
    self.dim = int(sum(self.sizes))

  def flatten(self, value):
    if isinstance(value, tff.structure.Struct):
      parts = tff.structure.flatten(value)
    else:
      parts = tf.nest.flatten(value)
    return tf.concat([tf.reshape(tf.cast(p, tf.float32), [-1])
                      for p in parts], axis=0)

  def unflatten(self, flat):
    parts = tf.split(flat, self.sizes)
    parts = [tf.cast(tf.reshape(p, s.shape), s.dtype)
             for p, s in zip(parts, self.flat_specs)]
    return tf.nest.pack_sequence_as(self.specs, parts)


class _RoundSeeds:
  """The state's key, each round's seed and the round's shared signs."""

  def __init__(self, key_seed: int, params: SecAggParams):
    key_type = tff.TensorType(np.int64, [2])
    round_type = tff.TensorType(np.int64)

    @tff.tensorflow.computation
    def init_key():
      return tf.constant([key_seed, 0], tf.int64)

    @tff.tensorflow.computation(key_type, round_type)
    def round_seed(key, round_num):
      return tf.random.experimental.stateless_fold_in(
          key, tf.cast(round_num, tf.int32))

    @tff.tensorflow.computation(round_seed.type_signature.result)
    def make_signs(seed):
      return random_signs(seed, params.padded_dim)

    @tff.tensorflow.computation(round_type)
    def next_round(round_num):
      return round_num + 1

    self.init_key = init_key
    self.round_seed = round_seed
    self.make_signs = make_signs
    self.next_round = next_round
    self.seed_type = round_seed.type_signature.result
    self.signs_type = make_signs.type_signature.result


def _client_encoder(layout: _Layout, params: SecAggParams,
                    seeds: _RoundSeeds, *, fresh_entropy: bool,
                    max_retries: int, debug: bool):
  """Client steps 1-5: (update, signs, seed) -> (u, retries, failures, top).

  With `debug` the clipped update comes last (simulation only: for the
  decode error).
  """

  @tff.tensorflow.computation(layout.value_type, seeds.signs_type,
                              seeds.seed_type)
  def client_encode(value, signs, seed):
    flat = layout.flatten(value)
    client_seed = client_rounding_seed(flat, signs, seed,
                                       fresh_entropy=fresh_entropy)
    encoded, retries, ok, top = encode(flat, signs, client_seed, params,
                                       max_retries)
    # top >= max_j u_ij: sum_i top_i bounds every coordinate's integer
    # sum, so a sum below M proves no wrap-around.
    out = (encoded, retries, tf.cast(tf.logical_not(ok), tf.int32), top)
    if debug:
      out += (clip_l2(flat, params.clip_norm),)
    return out

  return client_encode


def _server_decoder(layout: _Layout, params: SecAggParams,
                    seeds: _RoundSeeds):
  """Server: checks n <= m and no wrap-around, then decodes the sum."""
  int_type = tff.TensorType(np.int32, [params.padded_dim])

  @tff.tensorflow.computation(int_type, np.int32, np.int64, seeds.signs_type)
  def server_decode(modular_sum, num_clients, sum_bound, signs):
    too_many = tf.debugging.assert_less_equal(
        num_clients, params.report_goal,
        message=(f'SecAgg: more clients than report_goal '
                 f'({params.report_goal}) in one round would wrap '
                 f'around modulus {params.modulus}; refused.'))
    with tf.control_dependencies([too_many]):  # Reported first.
      could_wrap = tf.debugging.assert_less(
          sum_bound, tf.constant(params.modulus, tf.int64),
          message=(f'SecAgg: the clients\' coordinates could sum past '
                   f'the modulus {params.modulus} (wrap-around); '
                   f'refused.'))
    with tf.control_dependencies([could_wrap]):
      return layout.unflatten(decode(tf.identity(modular_sum), num_clients,
                                     signs, params))

  return server_decode


class _Measurements:
  """The round's measurements (see SecAggDiscretizationFactory)."""

  def __init__(self, layout: _Layout, params: SecAggParams):
    self._params = params
    padded = tff.TensorType(np.int32, [params.padded_dim])
    padded64 = tff.TensorType(np.int64, [params.padded_dim])

    @tff.tensorflow.computation(padded)
    def as_int64(x):
      return tf.cast(x, tf.int64)

    @tff.tensorflow.computation(padded64)
    def count_wraps(total):
      return tf.reduce_sum(tf.cast(total >= params.modulus, tf.int32))

    @tff.tensorflow.computation(np.int64)
    def no_wraps(sum_bound):
      return tf.cast(sum_bound >= params.modulus, tf.int32) * params.padded_dim

    @tff.tensorflow.computation(np.int64)
    def as_float(x):
      return tf.cast(x, tf.float32)

    @tff.tensorflow.computation
    def one():
      return np.int32(1)

    @tff.tensorflow.computation(layout.value_type, layout.value_type)
    def l2_distance(a, b):
      return tf.norm(layout.flatten(a) - layout.flatten(b))

    @tff.tensorflow.computation(tff.TensorType(np.float32, [params.dim]))
    def unflatten(flat):
      return layout.unflatten(flat)

    self.one = one
    self._as_int64, self._count_wraps, self._no_wraps = (
        as_int64, count_wraps, no_wraps)
    self._as_float, self._l2_distance, self._unflatten = (
        as_float, l2_distance, unflatten)

  def round(self, *, result, encoded, num_clients, sum_bound, retries,
            failures, clipped=None):
    """Federated measurements of one round (inside `next_fn`)."""
    params = self._params
    if clipped is not None:
      # Exact count from the integer sum (one more full-size aggregation).
      wraps = tff.federated_map(self._count_wraps, tff.federated_sum(
          tff.federated_map(self._as_int64, encoded)))
    else:
      # No coordinate's integer sum exceeds sum_bound, and server_decode
      # fails the round unless sum_bound < M: no wrap-around, proven.
      wraps = tff.federated_map(self._no_wraps, sum_bound)
    measurements = dict(
        bits_per_parameter=tff.federated_value(
            np.float32(params.bits_per_parameter), tff.SERVER),
        modulus=tff.federated_value(np.float32(params.modulus), tff.SERVER),
        num_clients=num_clients,
        integer_sum_bound=tff.federated_map(self._as_float, sum_bound),
        rounding_retries=tff.federated_sum(retries),
        rounding_failures=tff.federated_sum(failures),
        wraparounds=wraps)
    if clipped is not None:
      true_sum = tff.federated_sum(clipped)
      measurements['decode_error_l2'] = tff.federated_map(
          self._l2_distance,
          (result, tff.federated_map(self._unflatten, true_sum)))
    return measurements


def noise_multiplier_for_secagg(noise_multiplier: float,
                                params: SecAggParams) -> float:
  """z' with z' C = z C_inflated: the tree noise calibrated to C_inflated.

  DP-FTRL clips to C and adds noise of std z' C per tree node; with SecAgg the
  sensitivity is C_inflated, so z' = z C_inflated / C keeps the privacy of
  noise multiplier z.
  """
  return noise_multiplier * params.inflated_clip_norm / params.clip_norm
