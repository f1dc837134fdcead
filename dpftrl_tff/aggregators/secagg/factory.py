"""The TFF aggregation factory of Algorithm 2: client encoding, the modular
sum through `inner_agg_factory`, server decoding, and its measurements."""

import secrets
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff import checks
from dpftrl_tff.accounting import secagg as secagg_accounting
from dpftrl_tff.aggregators.secagg.codec import client_rounding_seed
from dpftrl_tff.aggregators.secagg.codec import decode
from dpftrl_tff.aggregators.secagg.codec import DEFAULT_MAX_ROUNDING_RETRIES
from dpftrl_tff.aggregators.secagg.codec import encode
from dpftrl_tff.aggregators.secagg.codec import SecAggParams
from dpftrl_tff.aggregators.secagg.rotation import random_signs
from dpftrl_tff.aggregators.secagg.rounding import clip_l2


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
