"""BLT-DP-FTRL: buffered-linear-Toeplitz noise as a TF Privacy DPQuery.

The mechanism Gboard moved to after the paper (McMahan, Xu, Zhang, arXiv
2408.08868; Dvijotham et al., arXiv 2404.16706). Each round the clients'
updates are clipped to l2 norm C and summed, and the query adds

    n_t = z C (C_blt^-1 Z)_t,     Z_t ~ N(0, I) i.i.d. per round,

where C_blt is a lower-triangular Toeplitz matrix given as a BLT
(`accounting.toeplitz.BLT`). C_blt^-1 is itself a BLT with decays thetahat_j
and scales omegahat_j, so the noise streams from one model-size buffer
per decay:

    n_t / (z C) = Z_t + sum_j omegahat_j s_j,    s_j <- thetahat_j s_j + Z_t

(s_j = 0 at round 0). The server then receives (sum_i clip(Delta_i) + n_t)
/ m, as with the tree (`NormalizedQuery`), and server momentum and learning
rates are unchanged. The privacy is that of releasing C_blt x + z C Z:
`accounting.toeplitz.blt_sensitivity_squared` and rho = sens^2 / (2 z^2).

Z_t is drawn statelessly from (seed, t), so the state is the buffers, the
seed and the round: a checkpoint resumes the same noise sequence. The seed
is unpredictable unless one is given (`dp_ftrl.resolve_noise_seed`).
"""

from typing import NamedTuple, Optional

import dp_accounting
import tensorflow as tf
import tensorflow_privacy as tfp

from dpftrl_tff.accounting import toeplitz
from dpftrl_tff.aggregators import dp_ftrl
from dpftrl_tff.aggregators import fused_clip


def seed_tensor(noise_seed: int):
  """The int64 [2] stateless seed of a 62-bit noise seed."""
  return tf.constant([noise_seed >> 31, noise_seed & (2**31 - 1)], tf.int64)


def standard_normal(record_specs, seed, round_index):
  """Z_t: i.i.d. N(0, 1) of the records' structure, drawn statelessly from
  (seed, t), so a resumed run draws the same Z_t (the streamed noises of
  BLT and BandMF)."""
  round_seed = tf.random.experimental.stateless_fold_in(
      seed, tf.cast(round_index, tf.int64))
  flat_specs = tf.nest.flatten(record_specs)
  flat = [tf.random.stateless_normal(
      s.shape, seed=tf.random.experimental.stateless_fold_in(round_seed, i),
      dtype=s.dtype) for i, s in enumerate(flat_specs)]
  return tf.nest.pack_sequence_as(record_specs, flat)


class BLTGlobalState(NamedTuple):
  """State of the streamed-noise queries (`BLTResidualSumQuery` and
  `bandmf.BandMFResidualSumQuery`).

  Attributes:
    clip_value: C.
    seed: int64 [2], the noise seed.
    round: int64, the index t of the next round.
    buffers: record-shaped structures the noise streams from (a tuple): one
      per decay of C^-1 (BLT), the last b - 1 noise vectors (BandMF).
  """
  clip_value: tf.Tensor
  seed: tf.Tensor
  round: tf.Tensor
  buffers: tuple


StreamedNoiseState = BLTGlobalState


class StreamedNoiseSumQuery(tfp.SumAggregationDPQuery):
  """A clipped sum whose noise streams from buffers in the state and Z_t
  drawn statelessly from (seed, t): what the BLT and BandMF queries share.
  Subclasses give `get_noised_result` and the number of buffers."""

  def __init__(self, *, clip_norm: float, noise_multiplier: float,
               record_specs, noise_seed: int):
    self._clip_norm = float(clip_norm)
    self._stddev = float(noise_multiplier) * float(clip_norm)
    self._record_specs = record_specs
    self._seed = int(noise_seed)

  def _zeros(self):
    return tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype),
                                 self._record_specs)

  def _initial_state(self, num_buffers: int) -> StreamedNoiseState:
    return StreamedNoiseState(
        clip_value=tf.constant(self._clip_norm, tf.float32),
        seed=seed_tensor(self._seed), round=tf.constant(0, tf.int64),
        buffers=tuple(self._zeros() for _ in range(num_buffers)))

  def derive_sample_params(self, global_state):
    return global_state.clip_value

  def preprocess_record(self, params, record):
    flat = tf.nest.flatten(record)
    clipped, _ = tf.clip_by_global_norm(flat, params)
    return tf.nest.pack_sequence_as(record, clipped)

  def standard_normal(self, seed, round_index):
    """Z_t: i.i.d. N(0, 1) of the records' structure, from (seed, t)."""
    return standard_normal(self._record_specs, seed, round_index)

  def _add_noise(self, sample_state, unit_noise):
    """The clipped sum plus z C times `unit_noise`."""
    return tf.nest.map_structure(
        lambda x, n: x + tf.cast(self._stddev, x.dtype) * n, sample_state,
        unit_noise)


def normalized_factory(query, clients_per_round: int,
                       record_aggregation_factory=None):
  """`query` normalized by the report goal m as an aggregation factory: the
  clip fused into a plain sum (`FusedClipDPFactory`), or TFF's DP factory
  over `record_aggregation_factory` (SecAgg)."""
  normalized = tfp.NormalizedQuery(query, denominator=float(clients_per_round))
  if record_aggregation_factory is not None:
    # TFF only for an inner record aggregation (SecAgg).
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    return tff.aggregators.DifferentiallyPrivateFactory(
        normalized, record_aggregation_factory)
  return fused_clip.FusedClipDPFactory(normalized)


class BLTResidualSumQuery(StreamedNoiseSumQuery):
  """Clipped sum plus BLT-correlated Gaussian noise (see module docstring)."""

  def __init__(self, *, clip_norm: float, noise_multiplier: float,
               record_specs, blt: toeplitz.BLT, noise_seed: int):
    """Builds the query.

    Args:
      clip_norm: C > 0.
      noise_multiplier: z >= 0; the per-round noise is z C (C^-1 Z)_t.
      record_specs: tf.TensorSpec structure of one update.
      blt: the strategy C as a BLT (its inverse generates the noise).
      noise_seed: an int, e.g. from `dp_ftrl.resolve_noise_seed`.
    """
    if not isinstance(blt, toeplitz.BLT):
      raise TypeError(f'blt must be an accounting.toeplitz.BLT, got '
                      f'{type(blt).__name__}.')
    super().__init__(clip_norm=clip_norm, noise_multiplier=noise_multiplier,
                     record_specs=record_specs, noise_seed=noise_seed)
    self._blt = blt
    inverse = blt.inverse()
    self._inv_decay = tuple(inverse.buf_decay)
    self._inv_scale = tuple(inverse.output_scale)

  @property
  def blt(self) -> toeplitz.BLT:
    return self._blt

  def initial_global_state(self):
    return self._initial_state(len(self._inv_decay))

  def get_noised_result(self, sample_state, global_state):
    z = self.standard_normal(global_state.seed, global_state.round)
    correlated = z
    for scale, buffer in zip(self._inv_scale, global_state.buffers):
      correlated = tf.nest.map_structure(
          lambda c, b, w=scale: c + tf.cast(w, c.dtype) * b, correlated,
          buffer)
    new_buffers = tuple(
        tf.nest.map_structure(
            lambda b, e, d=decay: tf.cast(d, b.dtype) * b + e, buffer, z)
        for decay, buffer in zip(self._inv_decay, global_state.buffers))
    result = self._add_noise(sample_state, correlated)
    new_state = global_state._replace(round=global_state.round + 1,
                                      buffers=new_buffers)
    return result, new_state, dp_accounting.UnsupportedDpEvent()


def build_dp_ftrl_blt_factory(*, noise_multiplier: float,
                              clients_per_round: int, clip_norm: float,
                              record_specs, blt: toeplitz.BLT,
                              noise_seed: Optional[int] = None,
                              record_aggregation_factory=None):
  """BLT-DP-FTRL factory normalized by the report goal m.

  Args:
    noise_multiplier: z >= 0.
    clients_per_round: m; the noisy sum is divided by m.
    clip_norm: C > 0.
    record_specs: tf.TensorSpec structure of one update.
    blt: the strategy matrix as a BLT (e.g. `blt_optimizer.optimize`).
    noise_seed: None (default) draws an unpredictable seed; an int fixes the
      noise (tests and debugging only; a warning is logged).
    record_aggregation_factory: inner sum for the clipped records (SecAgg);
      default: the clip fused into a plain sum (`FusedClipDPFactory`).
  """
  dp_ftrl.assert_dp_arguments(noise_multiplier=noise_multiplier,
                              clip_norm=clip_norm,
                              clients_per_round=clients_per_round)
  return normalized_factory(
      BLTResidualSumQuery(clip_norm=clip_norm,
                          noise_multiplier=noise_multiplier,
                          record_specs=record_specs, blt=blt,
                          noise_seed=dp_ftrl.resolve_noise_seed(noise_seed)),
      clients_per_round, record_aggregation_factory)
