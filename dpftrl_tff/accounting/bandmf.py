"""Banded matrix factorization (BandMF): sensitivity, error, published C.

BandMF (Choquette-Choo, McMahan, Rush, Thakurta, "(Amplified) Banded Matrix
Factorization: A unified approach to private training", NeurIPS 2023,
arXiv 2306.08153), which Gboard trained launches with after the paper
(google-research/federated `mf_dpftrl_matrices`), is the matrix mechanism
A = B C for the prefix-sum workload A (all-ones lower triangle) with C
lower triangular and b-banded: C[i, j] = 0 unless 0 <= i - j < b. Round t
releases (A C^-1 (C x + z Z))_t, post-processing of the Gaussian mechanism
x -> C x + z Z, so rho = sens^2 / (2 z^2) with sens the l2 sensitivity of
x -> C x over the allowed participation patterns.

Sensitivity. Column j of a b-banded C is supported on rows j .. j + b - 1.
Two participations at least b' = MinS + 1 rounds apart (this project's MinS
counts the rounds strictly between them; `toeplitz.band_from_min_separation`
converts) touch disjoint rows when b <= b', so for a pattern S the cross
terms vanish and

    ||C 1_S||^2 = sum_{j in S} ||C[:, j]||^2,
    sens^2 = max over S with |S| <= MaxP, pairwise >= b' apart, of that sum,

computed exactly by dynamic programming over the columns
(`banded_sensitivity_squared`; against brute force and jax_privacy's
`sensitivity.get_sensitivity_banded` in tests). The maximum is over at most
MaxP participations: a pattern of exactly MaxP can be smaller when a large
column leaves no room for the others. For b > MinS + 1 participations can
share rows: `sensitivity_upper_bound_squared` bounds sens^2 from |C^T C|
(the paper's Algorithm 4), and `sensitivity_squared` picks.

Error. With unit noise, the prefix sum of round t carries the noise
(A C^-1 Z)_t, of variance ||(A C^-1)[t, :]||^2 (`prefix_sum_errors`); for
C scaled so that one participation has sensitivity 1 (the largest column
norm 1), its mean and max over t are jax_privacy's
`banded.per_query_error` summaries used to compare strategies.

Optimizer (`optimize`): L-BFGS over the band's entries of a
column-normalized C for the mean squared error, from the banded square
root of A, with the exact gradient (O(T^3) per step, computed only in C's
band).

The mechanism in training is `aggregators.bandmf` (the noise) and
`aggregators.mechanisms.bandmf` (its settings and accounting).
"""

import os
from typing import Optional, Tuple

import numpy as np
import scipy.linalg
import scipy.optimize

from dpftrl_tff import checks
from dpftrl_tff.accounting import toeplitz

C_MATRIX_FILE = 'c_matrix_tensor_pb'
LR_VECTOR_FILE = 'lr_vector_tensor_pb'


def check_banded(c) -> Tuple[np.ndarray, int]:
  """(C as float64, its bands b): C square, lower triangular, finite."""
  c = np.asarray(c, dtype=np.float64)
  if c.ndim != 2 or c.shape[0] != c.shape[1] or c.shape[0] == 0:
    raise ValueError(f'C must be a non-empty square matrix; got shape '
                     f'{c.shape}.')
  if not np.all(np.isfinite(c)):
    raise ValueError('C has non-finite entries.')
  if np.any(np.triu(c, 1)):
    raise ValueError('C must be lower triangular.')
  if np.any(np.diag(c) == 0):
    raise ValueError('C has a zero on its diagonal: it is not invertible.')
  rows, cols = np.nonzero(c)
  return c, int(np.max(rows - cols)) + 1


def band_coefficients(c) -> np.ndarray:
  """[T, b] array of C's band by row: out[t, k] = C[t, t - k] (0 for
  t - k < 0), so out[t, 0] is the diagonal."""
  c, bands = check_banded(c)
  rounds = c.shape[0]
  out = np.zeros((rounds, bands))
  for k in range(bands):
    out[k:, k] = np.diagonal(c, -k)
  return out


def band_to_matrix(band) -> np.ndarray:
  """The T x T lower-triangular C of a [T, b] band (`band_coefficients`'
  inverse)."""
  band = np.asarray(band, dtype=np.float64)
  rounds, bands = band.shape
  c = np.zeros((rounds, rounds))
  for k in range(bands):
    idx = np.arange(k, rounds)
    c[idx, idx - k] = band[k:, k]
  return c


def _max_separated_sum(values: np.ndarray, separation: int,
                       picks: int) -> np.ndarray:
  """For each row of `values` (..., T), the largest sum of at most `picks`
  of its entries whose indices are pairwise at least `separation` apart
  (entries >= 0), by dynamic programming over the columns."""
  rounds = values.shape[-1]
  pad = np.zeros(values.shape[:-1] + (separation,))
  # best[..., i]: the largest such sum among columns >= i (zero beyond).
  best = np.zeros(values.shape[:-1] + (rounds + separation,))
  for _ in range(picks):
    take = values + best[..., separation:separation + rounds]
    new = np.maximum.accumulate(take[..., ::-1], axis=-1)[..., ::-1]
    best = np.concatenate([np.maximum(new, best[..., :rounds]), pad],
                          axis=-1)
  return best[..., 0]


def _participation(c, min_separation, max_participation):
  c, bands = check_banded(c)
  separation = toeplitz.band_from_min_separation(min_separation)
  if max_participation is not None:
    max_participation = checks.check_int(max_participation,
                                         'max_participation', minimum=1)
  picks = toeplitz.effective_participations(c.shape[0], separation,
                                            max_participation)
  return c, bands, separation, picks


def banded_sensitivity_squared(c, min_separation: int,
                               max_participation: Optional[int]) -> float:
  """sens^2 of x -> C x: at most MaxP participations, MinS apart.

  Args:
    c: the T x T lower-triangular banded C.
    min_separation: MinS, rounds strictly between two participations
      (b' = MinS + 1 in jax_privacy's convention).
    max_participation: MaxP, participations per client (None: as many as
      fit).

  Raises:
    ValueError: C's bands exceed MinS + 1 (participations could share rows;
      the banded bound does not apply: `sensitivity_squared` bounds it), or
      a bad argument.
  """
  c, bands, separation, picks = _participation(c, min_separation,
                                               max_participation)
  if bands > separation:
    raise ValueError(
        f'C has {bands} bands (--bandmf_bands), more than MinS + 1 = '
        f'{separation}: two participations could touch the same rows and '
        f'the banded sensitivity does not hold; use at most {separation} '
        f'bands.')
  return float(_max_separated_sum(np.sum(c * c, axis=0), separation, picks))


def sensitivity_upper_bound_squared(c, min_separation: int,
                                    max_participation: Optional[int]
                                    ) -> float:
  """An upper bound on sens^2 of x -> C x for any C (Algorithm 4 of arXiv
  2306.08153, jax_privacy's `get_min_sep_sensitivity_upper_bound`).

  sens^2 = max_S sum_{i, j in S} X[i, j] with X = C^T C over the allowed
  patterns S; bounding X by |X| and letting every row pick its own columns,

      sens^2 <= max_S sum_{i in S} v_i,   v_i = max_S' sum_{j in S'} |X[i, j]|,

  both maxima over the patterns (at most MaxP, MinS apart). It can exceed
  the exact value even when b <= MinS + 1 (a row may pick columns on both
  sides of it), so `sensitivity_squared` uses it only where the banded
  value does not hold; for a diagonal C the two are equal.
  """
  c, _, separation, picks = _participation(c, min_separation,
                                           max_participation)
  row_best = _max_separated_sum(np.abs(c.T @ c), separation, picks)
  return float(_max_separated_sum(row_best, separation, picks))


def sensitivity_squared(c, min_separation: int,
                        max_participation: Optional[int]) -> Tuple[float,
                                                                   bool]:
  """(sens^2, exact): the exact banded value when C has at most MinS + 1
  bands, else Algorithm 4's upper bound (exact False)."""
  _, bands = check_banded(c)
  if bands <= toeplitz.band_from_min_separation(min_separation):
    return banded_sensitivity_squared(c, min_separation,
                                      max_participation), True
  return sensitivity_upper_bound_squared(c, min_separation,
                                         max_participation), False


def scaled_to_unit_sensitivity(c) -> np.ndarray:
  """C divided by its largest column norm (one participation: sens 1)."""
  c, _ = check_banded(c)
  return c / np.sqrt(np.max(np.sum(c * c, axis=0)))


def prefix_sum_errors(c) -> np.ndarray:
  """Variance of each round's released prefix sum for unit noise:
  ||(A C^-1)[t, :]||^2, t = 0 .. T-1 (scale C first for sensitivity 1)."""
  c, _ = check_banded(c)
  rounds = c.shape[0]
  inverse = np.linalg.solve(c, np.eye(rounds))   # Lower triangular.
  return np.sum(np.cumsum(inverse, axis=0)**2, axis=1)


def error_summary(c) -> dict:
  """mean_error and max_error of `prefix_sum_errors` at sensitivity 1."""
  errors = prefix_sum_errors(scaled_to_unit_sensitivity(c))
  return dict(mean_error=float(np.mean(errors)),
              max_error=float(np.max(errors)))


def _band_indices(rounds: int, bands: int):
  """(rows, cols) of the entries of a T x T lower-triangular b-banded C."""
  rows, cols = np.indices((rounds, rounds))
  return np.nonzero((rows >= cols) & (rows - cols < bands))


def initial_strategy(rounds: int, bands: int) -> np.ndarray:
  """The column-normalized banded Toeplitz start of `optimize`: the first b
  coefficients of the square root of the prefix-sum matrix (Fichtenberger,
  Henzinger, Upadhyay, ICML 2023: c_k = prod_{i<=k} (2i - 1) / (2i)),
  as jax_privacy's `ColumnNormalizedBanded.default`."""
  k = np.arange(1, bands)
  coefficients = np.concatenate([[1.0], np.cumprod((2 * k - 1) / (2 * k))])
  rows, cols = _band_indices(rounds, bands)
  c = np.zeros((rounds, rounds))
  c[rows, cols] = coefficients[rows - cols]
  return c / np.linalg.norm(c, axis=0)


# What `optimize` minimizes: the mean or the max over rounds of the squared
# error of the released prefix sums.
ERRORS = ('mean', 'max')
# L-BFGS steps of each power-mean stage of the max error's optimization.
MAX_ERROR_STEPS = 150


def _mean_reduction(errors):
  """(mean of the errors, its gradient in them)."""
  return float(np.mean(errors)), np.full(len(errors), 1.0 / len(errors))


def _power_mean_reduction(power: float):
  """(mean_t e_t^p)^(1/p), a smooth stand-in for max_t e_t (p -> inf), and
  its gradient (1/T) (e_t / L)^(p - 1), computed relative to the max so
  that e^p cannot overflow."""
  def reduction(errors):
    top = float(np.max(errors))
    ratios = errors / top
    loss = top * float(np.mean(ratios**power))**(1.0 / power)
    return loss, (errors / loss)**(power - 1) / len(errors)
  return reduction


def _error_and_gradient(c: np.ndarray, bands: int,
                        reduction=_mean_reduction):
  """(reduction of the errors e_t = ||(A C^-1)[t, :]||^2, its gradient in
  C's band): the gradient's entries (i, j) with 0 <= i - j < `bands`, the
  only ones `optimize` uses (C's variables, and C's own nonzeros for the
  normalization); zeros elsewhere.

  With M = C^-1, B = A M (row cumulative sums of M) and the reduction's
  gradient w_t in e_t, the gradient in C is G = -2 M^T (A^T W B) M^T, A^T W
  B being the reverse cumulative sums of B's rows weighted by w. M comes
  from LAPACK's triangular inverse, Y = (A^T W B) M^T from a triangular
  product, and G = -2 M^T Y only in column blocks of s = max(b, 64)
  columns and s + b - 1 rows: about T^3 / 6 + T^3 / 2 + T^2 (s + b) / 2
  multiply-adds against 5 T^3 / 2 for the dense product
  (`tests/reference/bandmf_reference.py`, which this equals on the band to
  rounding).
  """
  rounds = c.shape[0]
  inverse, info = scipy.linalg.lapack.dtrtri(c, lower=1)
  if info > 0:   # A zero on the diagonal: C is singular, its error infinite.
    return np.inf, np.zeros((rounds, rounds))
  b = np.cumsum(inverse, axis=0)
  loss, weights = reduction(np.sum(b * b, axis=1))
  at_wb = np.cumsum((weights[:, np.newaxis] * b)[::-1], axis=0)[::-1]
  y = scipy.linalg.blas.dtrmm(1.0, inverse, np.asfortranarray(at_wb),
                              side=1, lower=1, trans_a=1)
  gradient = np.zeros((rounds, rounds))
  block = max(bands, 64)
  for start in range(0, rounds, block):
    stop = min(rounds, start + block)
    end = min(rounds, stop + bands - 1)
    # Rows start..end of columns start..stop (M[k, i] = 0 for k < i), kept
    # where 0 <= i - j < bands (the block starts on the diagonal).
    block_gradient = -2.0 * (inverse[start:, start:end].T @
                             y[start:, start:stop])
    gradient[start:end, start:stop] = np.triu(np.tril(block_gradient),
                                              -(bands - 1))
  return loss, gradient


def optimize(rounds: int, bands: int, *, error: str = 'mean',
             max_iterations: int = 1000,
             tolerance: float = 1e-10) -> np.ndarray:
  """A column-normalized b-banded C minimizing the mean (default) or the
  max over rounds of the squared error of the prefix sums (`error_summary`),
  by L-BFGS from `initial_strategy`.

  The variables are the entries below the diagonal in the band of an
  unnormalized P with unit diagonal; C = P with every column divided by its
  norm, so one participation has sensitivity 1 and k participations at
  least b apart have sens^2 = k. A column's scale is free under the
  normalization, so fixing P's diagonal at 1 loses nothing (for positive
  diagonals, as the start's) and keeps C invertible wherever the line search
  steps: with the diagonal free, a step through a zero diagonal made
  C^-1 overflow at (T, b) = (1900, 64). The gradient goes through the
  normalization: for a column v = r u (r = ||v||), the gradient in v is
  (g - u (u . g)) / r for the gradient g in u.

  The max is not smooth: `error='max'` first minimizes the mean, then the
  power means (mean_t e_t^p)^(1/p) for p = 8, 64, 512, each from the last
  for at most `MAX_ERROR_STEPS` steps (more barely lower the max: at
  (512, 32), 1,000 steps a stage took 35 times as long for the same max to
  5 digits), and returns the C with the smallest max met on the way.
  Returns C, never one worse (in the chosen error) than the start.
  """
  rounds = checks.check_int(rounds, 'total_rounds', minimum=1)
  bands = checks.check_int(bands, 'bandmf_bands', minimum=1)
  if error not in ERRORS:
    raise ValueError(f'--bandmf_error={error!r} is unknown; allowed: '
                     f'{", ".join(ERRORS)}.')
  bands = min(bands, rounds)
  rows, cols = _band_indices(rounds, bands)
  below = rows > cols
  rows, cols = rows[below], cols[below]
  start = initial_strategy(rounds, bands)
  if not len(rows):   # One band: C = I.
    return start
  start_p = start / np.diag(start)   # Unit diagonal, the same C.

  def unpack(values):
    p = np.eye(rounds)
    p[rows, cols] = values
    norms = np.linalg.norm(p, axis=0)
    return p / norms, norms

  def minimize(values, reduction, steps=max_iterations):
    def objective(x):
      c, norms = unpack(x)
      with np.errstate(over='ignore', invalid='ignore'):
        loss, grad_c = _error_and_gradient(c, bands, reduction)
      if not (np.isfinite(loss) and np.all(np.isfinite(grad_c))):
        return np.inf, np.zeros(len(x))   # The line search backs off.
      grad_p = (grad_c - c * np.sum(c * grad_c, axis=0)) / norms
      return loss, grad_p[rows, cols]
    result = scipy.optimize.minimize(
        objective, values, jac=True, method='L-BFGS-B',
        options=dict(maxiter=steps, ftol=tolerance, gtol=1e-12,
                     maxcor=20))
    return result.x if np.all(np.isfinite(result.x)) else values

  def score(values):
    return error_summary(unpack(values)[0])[f'{error}_error']

  candidates = [start_p[rows, cols]]
  candidates.append(minimize(candidates[-1], _mean_reduction))
  if error == 'max':
    for power in (8.0, 64.0, 512.0):
      candidates.append(minimize(candidates[-1],
                                 _power_mean_reduction(power),
                                 MAX_ERROR_STEPS))
  scores = [score(v) for v in candidates]
  best = candidates[int(np.nanargmin(np.where(np.isfinite(scores), scores,
                                              np.nan)))]
  return unpack(best)[0]


def load_published(directory: str) -> Tuple[np.ndarray, Optional[np.ndarray]]:
  """(C, learning rates or None) from Gboard's published format.

  google-research/federated `mf_dpftrl_matrices`: `c_matrix_tensor_pb`, a
  float64 tensor serialized with `tf.io.serialize_tensor`, and, when
  present, `lr_vector_tensor_pb` (the learning rate of every round).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = os.path.join(directory, C_MATRIX_FILE)
  if not os.path.isfile(path):
    raise ValueError(f'{directory}: no {C_MATRIX_FILE} there (the published '
                     f'BandMF format).')

  def read(file_path, name):
    try:
      return tf.io.parse_tensor(tf.io.read_file(file_path),
                                tf.float64).numpy()
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as e:
      raise ValueError(f'{file_path}: not a float64 tensor serialized with '
                       f'tf.io.serialize_tensor ({name}: '
                       f'{e.message.splitlines()[0]}).') from None

  c, _ = check_banded(read(path, 'C'))
  lr_path = os.path.join(directory, LR_VECTOR_FILE)
  learning_rates = None
  if os.path.isfile(lr_path):
    learning_rates = np.asarray(read(lr_path, 'learning rates'))
    if learning_rates.shape != (c.shape[0],):
      raise ValueError(f'{lr_path}: learning rates of shape '
                       f'{learning_rates.shape} for a {c.shape[0]}-round C '
                       f'(one per round expected).')
  return c, learning_rates
