"""BandMF-DP-FTRL: banded-matrix-factorization noise as a TF Privacy DPQuery.

Banded matrix factorization (Choquette-Choo, McMahan, Rush, Thakurta,
arXiv 2306.08153), which Gboard trained launches with after the paper. The
strategy C is T x T, lower triangular with b bands (C[t, j] = 0 unless
0 <= t - j < b); the mechanism releases C x + z C_clip Z for the clipped
per-round sums x, and the server's prefix sums are A C^-1 (C x + z C_clip Z)
= A x + z C_clip A C^-1 Z. The server therefore receives round t's clipped
sum plus

    n_t = z C_clip w_t,   w = C^-1 Z,   Z_t ~ N(0, I) i.i.d. per round,

divided by the report goal m, as with the tree (`NormalizedQuery`); server
momentum and learning rates are unchanged. Since C is b-banded, w streams
by forward substitution from the last b - 1 of its vectors:

    w_t = (Z_t - sum_{k=1}^{b-1} C[t, t-k] w_{t-k}) / C[t, t],

so the state holds b - 1 model-size buffers (w_{t-1} first), the seed and
the round. C need not be Toeplitz: row t's b coefficients are looked up by
the round. The privacy is that of x -> C x under the participation
(`accounting.bandmf.banded_sensitivity_squared`), rho = sens^2 / (2 z^2).

Z_t is drawn statelessly from (seed, t) (`blt.standard_normal`), so a
checkpoint resumes the same noise sequence; the seed is unpredictable unless
one is given (`dp_ftrl.resolve_noise_seed`).
"""

from typing import NamedTuple, Optional

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_privacy as tfp

from dpftrl_tff.accounting import bandmf as bandmf_accounting
from dpftrl_tff.aggregators import blt
from dpftrl_tff.aggregators import dp_ftrl
from dpftrl_tff.aggregators import fused_clip


def band_coefficients(c) -> np.ndarray:
  """[T, b] array of C's band by row: out[t, k] = C[t, t - k] (0 for
  t - k < 0), so out[t, 0] is the diagonal."""
  c, bands = bandmf_accounting.check_banded(c)
  rounds = c.shape[0]
  out = np.zeros((rounds, bands))
  for k in range(bands):
    out[k:, k] = np.diagonal(c, -k)
  return out


class BandMFGlobalState(NamedTuple):
  """State of `BandMFResidualSumQuery`.

  Attributes:
    clip_value: C_clip.
    seed: int64 [2], the noise seed.
    round: int64, the index t of the next round.
    buffers: w_{t-1}, ..., w_{t-b+1}, record-shaped (a tuple of b - 1).
  """
  clip_value: tf.Tensor
  seed: tf.Tensor
  round: tf.Tensor
  buffers: tuple


class BandMFResidualSumQuery(tfp.SumAggregationDPQuery):
  """Clipped sum plus BandMF-correlated Gaussian noise (module docstring)."""

  def __init__(self, *, clip_norm: float, noise_multiplier: float,
               record_specs, c_matrix, noise_seed: int):
    """Builds the query.

    Args:
      clip_norm: C_clip > 0.
      noise_multiplier: z >= 0; round t's noise is z C_clip (C^-1 Z)_t.
      record_specs: tf.TensorSpec structure of one update.
      c_matrix: the T x T lower-triangular banded strategy C; the query
        serves T rounds.
      noise_seed: an int, e.g. from `dp_ftrl.resolve_noise_seed`.
    """
    self._band = band_coefficients(c_matrix)
    self._clip_norm = float(clip_norm)
    self._stddev = float(noise_multiplier) * float(clip_norm)
    self._record_specs = record_specs
    self._seed = int(noise_seed)

  @property
  def rounds(self) -> int:
    return self._band.shape[0]

  @property
  def bands(self) -> int:
    return self._band.shape[1]

  def _zeros(self):
    return tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype),
                                 self._record_specs)

  def initial_global_state(self):
    return BandMFGlobalState(
        clip_value=tf.constant(self._clip_norm, tf.float32),
        seed=blt.seed_tensor(self._seed), round=tf.constant(0, tf.int64),
        buffers=tuple(self._zeros() for _ in range(self.bands - 1)))

  def derive_sample_params(self, global_state):
    return global_state.clip_value

  def preprocess_record(self, params, record):
    flat = tf.nest.flatten(record)
    clipped, _ = tf.clip_by_global_norm(flat, params)
    return tf.nest.pack_sequence_as(record, clipped)

  def standard_normal(self, seed, round_index):
    return blt.standard_normal(self._record_specs, seed, round_index)

  def get_noised_result(self, sample_state, global_state):
    t = global_state.round
    # Past the matrix's T rounds there is no C row: training refuses to run
    # longer (--total_rounds); the assertion guards direct use.
    tf.debugging.assert_less(t, tf.constant(self.rounds, tf.int64),
                             message='BandMF: round beyond the matrix\'s T')
    row = tf.gather(tf.constant(self._band, tf.float64), t)
    w = self.standard_normal(global_state.seed, t)
    for k, buffer in enumerate(global_state.buffers, start=1):
      w = tf.nest.map_structure(
          lambda a, b, k=k: a - tf.cast(row[k], a.dtype) * b, w, buffer)
    w = tf.nest.map_structure(lambda a: a / tf.cast(row[0], a.dtype), w)
    result = tf.nest.map_structure(
        lambda x, n: x + tf.cast(self._stddev, x.dtype) * n, sample_state, w)
    new_state = global_state._replace(
        round=t + 1, buffers=((w,) + tuple(global_state.buffers))[:-1])
    return result, new_state, dp_accounting.UnsupportedDpEvent()


def build_dp_ftrl_bandmf_factory(*, noise_multiplier: float,
                                 clients_per_round: int, clip_norm: float,
                                 record_specs, c_matrix,
                                 noise_seed: Optional[int] = None,
                                 record_aggregation_factory=None):
  """BandMF-DP-FTRL factory normalized by the report goal m.

  Args:
    noise_multiplier: z >= 0.
    clients_per_round: m; the noisy sum is divided by m.
    clip_norm: C_clip > 0.
    record_specs: tf.TensorSpec structure of one update.
    c_matrix: the banded strategy C (`accounting.bandmf.optimize` or
      `load_published`).
    noise_seed: None (default) draws an unpredictable seed; an int fixes the
      noise (tests and debugging only; a warning is logged where it entered).
    record_aggregation_factory: inner sum for the clipped records (SecAgg);
      default: the clip fused into a plain sum (`FusedClipDPFactory`).
  """
  dp_ftrl.assert_dp_arguments(noise_multiplier=noise_multiplier,
                              clip_norm=clip_norm,
                              clients_per_round=clients_per_round)
  query = tfp.NormalizedQuery(
      BandMFResidualSumQuery(
          clip_norm=clip_norm, noise_multiplier=noise_multiplier,
          record_specs=record_specs, c_matrix=c_matrix,
          noise_seed=dp_ftrl.resolve_noise_seed(noise_seed)),
      denominator=float(clients_per_round))
  if record_aggregation_factory is not None:
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    return tff.aggregators.DifferentiallyPrivateFactory(
        query, record_aggregation_factory)
  return fused_clip.FusedClipDPFactory(query)
