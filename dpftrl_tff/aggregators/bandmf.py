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

from typing import Optional

import dp_accounting
import numpy as np
import tensorflow as tf

from dpftrl_tff.accounting import bandmf as bandmf_accounting
from dpftrl_tff.aggregators import blt
from dpftrl_tff.aggregators import dp_ftrl


# C's band by row, [T, b] (`accounting.bandmf.band_coefficients`).
band_coefficients = bandmf_accounting.band_coefficients


class BandMFResidualSumQuery(blt.StreamedNoiseSumQuery):
  """Clipped sum plus BandMF-correlated Gaussian noise (module docstring)."""

  def __init__(self, *, clip_norm: float, noise_multiplier: float,
               record_specs, noise_seed: int, c_matrix=None, band=None):
    """Builds the query.

    Args:
      clip_norm: C_clip > 0.
      noise_multiplier: z >= 0; round t's noise is z C_clip (C^-1 Z)_t.
      record_specs: tf.TensorSpec structure of one update.
      noise_seed: an int, e.g. from `dp_ftrl.resolve_noise_seed`.
      c_matrix: the T x T lower-triangular banded strategy C; the query
        serves T rounds.
      band: instead of `c_matrix`, its [T, b] band by row
        (`band_coefficients`), which a long run with few bands can hold
        where the dense T x T C would not (DP-FedAvg's C = I).
    """
    if (c_matrix is None) == (band is None):
      raise ValueError('give one of c_matrix and band.')
    super().__init__(clip_norm=clip_norm, noise_multiplier=noise_multiplier,
                     record_specs=record_specs, noise_seed=noise_seed)
    self._band = (band_coefficients(c_matrix) if band is None else
                  np.asarray(band, dtype=np.float64))

  @property
  def rounds(self) -> int:
    return self._band.shape[0]

  @property
  def bands(self) -> int:
    return self._band.shape[1]

  def initial_global_state(self):
    """State (`blt.StreamedNoiseState`): the buffers w_{t-1}, ...,
    w_{t-b+1} (b - 1 of them), the seed and the round."""
    return self._initial_state(self.bands - 1)

  def get_noised_result(self, sample_state, global_state):
    # Past the matrix's T rounds there is no C row: training refuses to run
    # longer (--total_rounds); the assertion guards direct use, and runs in
    # TFF's graphs too through the control dependency.
    check = tf.debugging.assert_less(
        global_state.round, tf.constant(self.rounds, tf.int64),
        message='BandMF: round beyond the matrix\'s T')
    with tf.control_dependencies([check]):
      t = tf.identity(global_state.round)
    row = tf.gather(tf.constant(self._band, tf.float64), t)
    w = self.standard_normal(global_state.seed, t)
    for k, buffer in enumerate(global_state.buffers, start=1):
      w = tf.nest.map_structure(
          lambda a, b, k=k: a - tf.cast(row[k], a.dtype) * b, w, buffer)
    w = tf.nest.map_structure(lambda a: a / tf.cast(row[0], a.dtype), w)
    result = self._add_noise(sample_state, w)
    new_state = global_state._replace(
        round=t + 1, buffers=((w,) + tuple(global_state.buffers))[:-1])
    return result, new_state, dp_accounting.UnsupportedDpEvent()


def build_dp_ftrl_bandmf_factory(*, noise_multiplier: float,
                                 clients_per_round: int, clip_norm: float,
                                 record_specs, c_matrix=None, band=None,
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
    band: instead of `c_matrix`, its [T, b] band by row.
    noise_seed: None (default) draws an unpredictable seed; an int fixes the
      noise (tests and debugging only; a warning is logged where it entered).
    record_aggregation_factory: inner sum for the clipped records (SecAgg);
      default: the clip fused into a plain sum (`FusedClipDPFactory`).
  """
  dp_ftrl.assert_dp_arguments(noise_multiplier=noise_multiplier,
                              clip_norm=clip_norm,
                              clients_per_round=clients_per_round)
  return blt.normalized_factory(
      BandMFResidualSumQuery(
          clip_norm=clip_norm, noise_multiplier=noise_multiplier,
          record_specs=record_specs, c_matrix=c_matrix, band=band,
          noise_seed=dp_ftrl.resolve_noise_seed(noise_seed)),
      clients_per_round, record_aggregation_factory)
