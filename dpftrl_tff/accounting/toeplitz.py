"""BLT (buffered linear Toeplitz) noise: its matrices, sensitivity and error.

BLT-DP-FTRL (Dvijotham, McMahan, Pillutla, Steinke, Thakurta, arXiv
2404.16706; used in Gboard after the paper: McMahan, Xu, Zhang, arXiv
2408.08868) is the matrix mechanism A = B C for the prefix-sum workload A
(all-ones lower triangle) with C a lower-triangular Toeplitz matrix given as
a BLT: buffer decays theta_j in (0, 1) and output scales omega_j,

    c_0 = 1,   c_i = sum_j omega_j theta_j^(i-1)   (i >= 1).          (1)

Round t adds to the sum of clipped updates the noise z C_clip (C^-1 Z)_t
with Z i.i.d. standard normal; this is post-processing of C x + z C_clip Z,
so the mechanism is Gaussian with the l2 sensitivity of x -> C x.

Equivalently C has the generating function C(x) = prod_j (1 - thetahat_j x) /
prod_j (1 - theta_j x), and C^-1 is the BLT with the decays thetahat_j (the
roots swap), which is how the noise is generated from a few model-size
buffers (`aggregators/blt.py`). The output scales of the pair are (Lemma 5.2
of arXiv 2404.16706)

    omega_i = prod_j (theta_i - thetahat_j) / prod_{j != i} (theta_i - theta_j).

Sensitivity under min separation (Theorem 2 of arXiv 2405.13763): when the
coefficients c are non-negative and non-increasing, the worst pattern of at
most k participations at least b rounds apart (b = j - i) is k participations
exactly b apart from round 0, with k = min(MaxP, ceil(T / b)):

    sens^2 = || sum_{p < k} shift_{p b}(c) ||^2   over the first T entries,
    rho = sens^2 / (2 z^2).                                               (2)

This project's MinS counts the rounds strictly between two participations
(TensorFlow Privacy's and the paper's convention), so b = MinS + 1:
`band_from_min_separation` is the one place that converts. Coefficients that
are negative or increase anywhere are refused (the theorem does not apply).

Error: the prefix sum released at round t carries the noise (A C^-1 Z)_t, of
variance (z C_clip)^2 sum_{i <= t} d_i^2 with d = cumsum(C^-1 coefficients)
(`prefix_sum_variance`); its maximum over t is at t = T - 1. The
efficient-tree counterpart is `tree_prefix_variance`.
"""

import dataclasses
import json
import math
from typing import Optional, Sequence, Tuple

import numpy as np
from scipy import signal

from dpftrl_tff import checks

# Decays closer than this make the pair formula and the inverse unstable.
MIN_DECAY_GAP = 1e-9


def band_from_min_separation(min_separation: int) -> int:
  """b = j - i of the matrix-factorization papers from this project's MinS.

  MinS (TensorFlow Privacy, the paper) counts the rounds strictly between two
  participations; jax_privacy, pfl and arXiv 2405.13763 use the distance
  b = MinS + 1 (b = 1: every round). The only conversion in the project.
  """
  return checks.check_int(min_separation, 'min_separation', minimum=0) + 1


def effective_participations(rounds: int, band: int,
                             max_participation: Optional[int]) -> int:
  """k = min(MaxP, ceil(T / b)): the participations that fit in T rounds."""
  fit = -(-rounds // band)
  return fit if max_participation is None else min(max_participation, fit)


def _polynomial(roots_inverse: np.ndarray) -> np.ndarray:
  """Coefficients of prod_j (1 - r_j x), ascending powers (for lfilter)."""
  poly = np.ones(1, dtype=np.result_type(roots_inverse, np.float64))
  for r in roots_inverse:
    poly = np.convolve(poly, np.array([1.0, -r], dtype=poly.dtype))
  return poly


def rational_coefficients(numerator_decays, denominator_decays,
                          n: int) -> np.ndarray:
  """First n coefficients of prod(1 - num_j x) / prod(1 - den_j x).

  Works on complex input too (no conjugation), which the optimizer uses for
  complex-step derivatives.
  """
  num = _polynomial(np.asarray(numerator_decays))
  den = _polynomial(np.asarray(denominator_decays))
  impulse = np.zeros(n, dtype=np.result_type(num, den))
  impulse[0] = 1
  return signal.lfilter(num, den, impulse)


def output_scales_for_pair(decays: np.ndarray,
                           other_decays: np.ndarray) -> np.ndarray:
  """omega of the BLT with `decays` whose inverse has `other_decays`."""
  decays = np.asarray(decays)
  other_decays = np.asarray(other_decays)
  numerators = np.prod(decays[:, None] - other_decays[None, :], axis=1)
  diffs = decays[:, None] - decays[None, :]
  np.fill_diagonal(diffs, 1.0)
  return numerators / np.prod(diffs, axis=1)


@dataclasses.dataclass(frozen=True)
class BLT:
  """A lower-triangular Toeplitz C with c_0 = 1 given as a BLT, see (1).

  Attributes:
    buf_decay: theta_j, each strictly inside (0, 1), pairwise distinct.
    output_scale: omega_j, same length.
  """
  buf_decay: Tuple[float, ...]
  output_scale: Tuple[float, ...]

  def __post_init__(self):
    decay = tuple(float(x) for x in np.ravel(self.buf_decay))
    scale = tuple(float(x) for x in np.ravel(self.output_scale))
    object.__setattr__(self, 'buf_decay', decay)
    object.__setattr__(self, 'output_scale', scale)
    if len(decay) != len(scale):
      raise ValueError(f'A BLT needs as many output scales as buffer decays; '
                       f'got buf_decay={list(decay)} and '
                       f'output_scale={list(scale)}.')
    if not all(math.isfinite(x) for x in decay + scale):
      raise ValueError(f'BLT parameters must be finite; got '
                       f'buf_decay={list(decay)}, output_scale={list(scale)}.')
    if any(not 0.0 < x < 1.0 for x in decay):
      raise ValueError(f'BLT buffer decays must lie strictly inside (0, 1); '
                       f'got buf_decay={list(decay)}.')
    if len(decay) > 1:
      gap = min(abs(a - b) for i, a in enumerate(decay)
                for b in decay[i + 1:])
      if gap < MIN_DECAY_GAP:
        raise ValueError(f'BLT buffer decays must be distinct (gap >= '
                         f'{MIN_DECAY_GAP}); got buf_decay={list(decay)}.')

  @property
  def num_buffers(self) -> int:
    return len(self.buf_decay)

  def toeplitz_coefs(self, n: int) -> np.ndarray:
    """c_0 .. c_{n-1} of (1)."""
    n = checks.check_int(n, 'n', minimum=1)
    coefs = np.ones(n)
    if self.num_buffers and n > 1:
      powers = np.asarray(self.buf_decay)[None, :] ** np.arange(n - 1)[:, None]
      coefs[1:] = powers @ np.asarray(self.output_scale)
    return coefs

  def inverse(self) -> 'BLT':
    """The BLT of C^-1 (same number of buffers).

    Its decays are the eigenvalues of diag(theta) - omega 1^T (the state
    matrix of the inverse filter); they must be real and inside (0, 1) for
    C^-1 to be a BLT, otherwise ValueError.
    """
    if not self.num_buffers:
      return self
    theta = np.asarray(self.buf_decay)
    omega = np.asarray(self.output_scale)
    evals = np.linalg.eigvals(np.diag(theta) - np.outer(omega, np.ones_like(
        theta)))
    if np.max(np.abs(evals.imag)) > 1e-9:
      raise ValueError(f'The inverse of the BLT {self} has complex decays '
                       f'{evals}; it is not a BLT.')
    decays = np.sort(evals.real)[::-1]
    if np.any(decays <= 0) or np.any(decays >= 1):
      raise ValueError(
          f'The inverse of {self} has decays {list(decays)} outside (0, 1), '
          f'so its noise cannot be streamed from decaying buffers; BLTs with '
          f'sum(omega / theta) < 1 (arXiv 2504.21413, Thm. 1) have a BLT '
          f'inverse, and the optimizer returns only such.')
    return BLT(decays, output_scales_for_pair(decays, theta))

  @classmethod
  def from_decay_pair(cls, decays: Sequence[float],
                      inverse_decays: Sequence[float]) -> 'BLT':
    """The BLT C with decays theta whose inverse has decays thetahat."""
    decays = np.asarray(decays, dtype=np.float64)
    inverse_decays = np.asarray(inverse_decays, dtype=np.float64)
    if decays.shape != inverse_decays.shape:
      raise ValueError(f'A BLT and its inverse have as many decays; got '
                       f'{decays} and {inverse_decays}.')
    return cls(decays, output_scales_for_pair(decays, inverse_decays))

  def as_dict(self) -> dict:
    return {'buf_decay': list(self.buf_decay),
            'output_scale': list(self.output_scale)}

  @classmethod
  def from_dict(cls, value: dict, source: str = 'BLT parameters') -> 'BLT':
    if not isinstance(value, dict) or set(value) - {
        'buf_decay', 'output_scale', 'inverse', 'optimized_for', 'loss'
    } or not {'buf_decay', 'output_scale'} <= set(value):
      raise ValueError(f'{source} must be a JSON object with the lists '
                       f'"buf_decay" and "output_scale"; got {value!r}.')
    return cls(value['buf_decay'], value['output_scale'])

  @classmethod
  def load(cls, path: str) -> 'BLT':
    """Reads a JSON file written by `save` (or by hand: the two lists)."""
    try:
      with open(path) as f:
        value = json.load(f)
    except OSError as e:
      raise ValueError(f'Cannot read the BLT parameters file {path!r}: '
                       f'{e}.') from e
    except json.JSONDecodeError as e:
      raise ValueError(f'The BLT parameters file {path!r} is not JSON: '
                       f'{e}.') from e
    return cls.from_dict(value, source=f'The BLT parameters file {path!r}')

  def __str__(self):
    return (f'BLT(buf_decay={[round(x, 6) for x in self.buf_decay]}, '
            f'output_scale={[round(x, 6) for x in self.output_scale]})')


def check_nonincreasing(coefs: np.ndarray, what: str = 'Toeplitz coefficients'):
  """Refuses coefficients outside Theorem 2's assumptions (with where)."""
  coefs = np.asarray(coefs, dtype=np.float64)
  if coefs.size and np.min(coefs) < 0:
    i = int(np.argmin(coefs))
    raise ValueError(f'The min-separation sensitivity needs non-negative '
                     f'{what}; c_{i} = {coefs[i]:.6g} < 0.')
  if coefs.size > 1:
    increase = np.diff(coefs)
    i = int(np.argmax(increase))
    # A relative slack for rounding in long geometric sums.
    if increase[i] > 1e-12 * max(1.0, abs(coefs[i])):
      raise ValueError(f'The min-separation sensitivity needs non-increasing '
                       f'{what}; c_{i + 1} = {coefs[i + 1]:.9g} > c_{i} = '
                       f'{coefs[i]:.9g}.')


def _worst_pattern_vector(coefs: np.ndarray, band: int,
                          participations: int) -> np.ndarray:
  """sum_{p < k} shift_{p b}(c), first T entries; complex input allowed."""
  n = coefs.shape[0]
  padded = np.concatenate([coefs, np.zeros((-n) % band, dtype=coefs.dtype)])
  # w[q b + r] = sum_{p <= q} c[(q - p) b + r]: all earlier participations.
  w = np.cumsum(padded.reshape(-1, band), axis=0).reshape(-1)[:n]
  drop = band * participations
  if drop < n:
    w[drop:] = w[drop:] - w[:n - drop]
  return w


def minsep_sensitivity_squared(coefs, *, min_separation: int,
                               max_participation: Optional[int] = None,
                               rounds: Optional[int] = None,
                               check: bool = True):
  """sens^2 of (2) for Toeplitz coefficients c of C (T x T).

  Args:
    coefs: c_0, c_1, ...; entries past `rounds` are ignored, missing ones
      are 0.
    min_separation: MinS, rounds strictly between two participations.
    max_participation: MaxP; None: as many as fit.
    rounds: T; default len(coefs).
    check: refuse coefficients that are negative or increase (the worst
      pattern of Theorem 2 is not the worst otherwise). Only the optimizer,
      whose parameterization guarantees the assumptions, turns it off.
  """
  coefs = np.asarray(coefs)
  rounds = coefs.shape[0] if rounds is None else checks.check_int(
      rounds, 'rounds', minimum=1)
  band = band_from_min_separation(min_separation)
  if max_participation is not None:
    max_participation = checks.check_int(max_participation,
                                         'max_participation', minimum=1)
  if coefs.shape[0] < rounds:
    coefs = np.concatenate([coefs, np.zeros(rounds - coefs.shape[0],
                                            dtype=coefs.dtype)])
  coefs = coefs[:rounds]
  if check:
    check_nonincreasing(coefs)
  k = effective_participations(rounds, band, max_participation)
  v = _worst_pattern_vector(coefs, band, k)
  return np.dot(v, v)


def blt_sensitivity_squared(blt: BLT, *, rounds: int, min_separation: int,
                            max_participation: Optional[int] = None) -> float:
  """sens^2 of (2) for a BLT; refuses one whose coefficients increase."""
  rounds = checks.check_int(rounds, 'rounds', minimum=1)
  coefs = blt.toeplitz_coefs(rounds)
  check_nonincreasing(coefs, what=f'Toeplitz coefficients of {blt}')
  return float(minsep_sensitivity_squared(
      coefs, min_separation=min_separation,
      max_participation=max_participation))


def prefix_sum_variance(noise_coefs) -> np.ndarray:
  """Per-round variance of the released prefix sum, in units of (z C)^2.

  Row t of A C^-1 is cumsum(C^-1 coefficients)[:t + 1] reversed; its squared
  norm is the variance at round t (0-based).
  """
  d = np.cumsum(np.asarray(noise_coefs))
  return np.cumsum(d * d)


def blt_prefix_variance(blt: BLT, rounds: int) -> np.ndarray:
  """`prefix_sum_variance` of the BLT mechanism for `rounds` rounds."""
  inverse = blt.inverse()
  return prefix_sum_variance(inverse.toeplitz_coefs(rounds))


def tree_prefix_variance(rounds: int) -> np.ndarray:
  """Per-round prefix-sum variance of TF Privacy's efficient tree, / (z C)^2.

  The efficient tree (Honaker) gives a node covering 2^l rounds the
  variance 1 / (2 - 2^-l); the prefix sum of rounds 1..t adds the nodes of
  t's binary decomposition.
  """
  rounds = checks.check_int(rounds, 'rounds', minimum=1)
  t = np.arange(1, rounds + 1)
  out = np.zeros(rounds)
  level = 0
  while (1 << level) <= rounds:
    out += ((t >> level) & 1) / (2.0 - 2.0**-level)
    level += 1
  return out
