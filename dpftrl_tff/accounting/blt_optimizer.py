"""Choosing a BLT: minimize the noise of the prefix sums at fixed privacy.

For T rounds, min separation MinS (b = MinS + 1) and k participations, the
loss of a BLT C is (arXiv 2408.08868, Sec. 3)

    L(C) = sens^2(C; T, b, k) * E(C^-1),                                  (1)

with sens^2 from `toeplitz.minsep_sensitivity_squared` and E the max (or
mean) over rounds of the prefix-sum variance `toeplitz.prefix_sum_variance`:
at equal rho = sens^2 / (2 z^2), the released prefix sums' variance is
2 rho-proportional to L, so minimizing L minimizes the noise at fixed
privacy.

Parameterization (as jax_privacy's `buf_decay_pair`): the decays theta of C
and thetahat of C^-1, each as a logit so both stay strictly inside (0, 1);
the output scales follow from the pair (`toeplitz.output_scales_for_pair`)
and the coefficients of C and C^-1 come from the rational generating
functions prod(1 - thetahat x) / prod(1 - theta x) and its reciprocal
(scipy's `lfilter`, O(T) per evaluation). Log-barrier penalties (strength
1e-8 of the normalized loss) keep the optimizer where (1) is valid and the
noise generation is stable: decays inside (0, 1), omega > 0, omegahat < 0 (so C's coefficients are
positive and non-increasing and Theorem 2 of arXiv 2405.13763 gives the
sensitivity), sum(omega) < 1 (c_1 <= c_0), sum(omega / theta) < 1 (arXiv
2504.21413, Thm. 1) and decays at least 1e-12 apart. Gradients are exact
complex-step derivatives (every operation above is analytic), and scipy's
L-BFGS-B minimizes. The start is the rational approximation of
1 / sqrt(1 - x) of arXiv 2404.16706, Prop. 4.5, scaled into the feasible
set. With `num_buffers` unset, buffers are added one at a time (1 to 7)
while the loss improves by more than 1%.

No JAX: jax_privacy's optimizer needs a newer jax than TFF 0.87 allows; its
results are the reference in `benchmarks/data/jax_privacy_blt_reference.json`.
"""

import dataclasses
import math
from typing import Optional

from absl import logging
import numpy as np
from scipy import optimize as scipy_optimize

from dpftrl_tff import checks
from dpftrl_tff.accounting import toeplitz

MAX_BUFFERS = 7
ERRORS = ('max', 'mean')
_PENALTY_STRENGTH = 1e-8
_MIN_GAP = 1e-12
_STEP = 1e-30          # complex-step size
_IMPROVEMENT = 1.01    # add a buffer while the loss improves by > 1%


@dataclasses.dataclass(frozen=True)
class OptimizedBLT:
  """An optimized BLT and what it was optimized for."""
  blt: toeplitz.BLT
  rounds: int
  min_separation: int
  max_participation: int
  error: str
  loss: float
  sensitivity_squared: float
  prefix_error: float

  def as_dict(self) -> dict:
    return dict(self.blt.as_dict(), loss=self.loss, optimized_for=dict(
        rounds=self.rounds, min_separation=self.min_separation,
        max_participation=self.max_participation, error=self.error,
        sensitivity_squared=self.sensitivity_squared,
        prefix_error=self.prefix_error))


def _error(noise_coefs, error: str):
  d = np.cumsum(noise_coefs)
  sq = d * d
  if error == 'max':
    return np.sum(sq)
  n = sq.shape[0]
  return np.dot(sq, np.arange(n, 0, -1)) / n


def loss(blt: toeplitz.BLT, *, rounds: int, min_separation: int,
         max_participation: Optional[int], error: str = 'max'):
  """(1) for a BLT: sens^2 (checked) times the max or mean prefix variance."""
  if error not in ERRORS:
    raise ValueError(f'error must be one of {ERRORS}, got {error!r}.')
  sens2 = toeplitz.blt_sensitivity_squared(
      blt, rounds=rounds, min_separation=min_separation,
      max_participation=max_participation)
  err = float(_error(blt.inverse().toeplitz_coefs(rounds), error))
  return sens2 * err, sens2, err


class _Objective:
  """Penalized, normalized (1) of the decay logits, with its gradient."""

  def __init__(self, rounds, band, participations, error):
    self.rounds, self.band, self.k, self.error = (rounds, band,
                                                  participations, error)
    # Normalizer: about the optimal loss (k + (1 + ln T / pi)^2), so the
    # penalty's relative strength is alike across settings.
    self.scale = participations + (1 + math.log(rounds) / math.pi)**2

  def value(self, x):
    d = x.shape[0] // 2
    theta = 1 / (1 + np.exp(-x[:d]))
    theta_hat = 1 / (1 + np.exp(-x[d:]))
    omega = toeplitz.output_scales_for_pair(theta, theta_hat)
    omega_hat = toeplitz.output_scales_for_pair(theta_hat, theta)
    barrier_args = [theta, 1 - theta, theta_hat, 1 - theta_hat, omega,
                    -omega_hat, [1 - np.sum(omega)],
                    [1 - np.sum(omega / theta)]]
    if d > 1:
      for decays in (theta, theta_hat):
        diffs = decays[:, None] - decays[None, :]
        barrier_args.append(diffs[np.triu_indices(d, 1)]**2 - _MIN_GAP**2)
    barrier = np.concatenate([np.asarray(a).reshape(-1) for a in barrier_args])
    if np.any(barrier.real <= 0):
      return None
    coefs = toeplitz.rational_coefficients(theta_hat, theta, self.rounds)
    noise = toeplitz.rational_coefficients(theta, theta_hat, self.rounds)
    v = toeplitz._worst_pattern_vector(coefs, self.band, self.k)  # pylint: disable=protected-access
    main = np.dot(v, v) * _error(noise, self.error) / self.scale
    return main - _PENALTY_STRENGTH * np.sum(np.log(barrier))

  def __call__(self, x):
    # Line searches probe extreme logits; those points are infeasible.
    with np.errstate(over='ignore', divide='ignore', invalid='ignore'):
      return self._value_and_gradient(x)

  def _value_and_gradient(self, x):
    f = self.value(x.astype(np.float64))
    if f is None or not np.isfinite(f):
      return np.inf, np.zeros_like(x)
    grad = np.empty_like(x)
    for i in range(x.shape[0]):
      xc = x.astype(np.complex128)
      xc[i] += 1j * _STEP
      fc = self.value(xc)
      grad[i] = fc.imag / _STEP if fc is not None else 0.0
    return float(f), grad


def initial_blt(num_buffers: int) -> toeplitz.BLT:
  """A feasible start: the rational approximation of 1/sqrt(1-x).

  Prop. 4.5 of arXiv 2404.16706 approximates sqrt(1 - x), the generating
  function of the max-error-optimal C^-1, by sinc quadrature: with
  h = 1.6 pi / sqrt(2 (d1 + 1)), d1 = ceil(d / 2) and nodes k, the decays
  1 / (1 + e^(2 h k)) and scales -decay^2 e^(3 h k), normalized. C is its
  inverse, then scaled so its largest decay is below 1 - 1e-6 and
  sum(omega / theta) below 1 - 1e-6.
  """
  d = checks.check_int(num_buffers, 'num_buffers', minimum=1,
                       maximum=MAX_BUFFERS)
  d1 = (d + 1) // 2
  h = 1.6 * np.pi / np.sqrt(2 * (d1 + 1))
  ks = np.arange(-d1 + 1, d - d1 + 1) - 1
  inv_decay = 1 / (1 + np.exp(2 * h * ks))
  inv_scale = -(inv_decay**2) * np.exp(3 * h * ks)
  inv_scale /= np.sum(np.exp(h * ks) * inv_decay)
  # C = (C^-1)^-1: decays are the eigenvalues of the inverse filter's state
  # matrix (see `toeplitz.BLT.inverse`); they can reach 1 before scaling.
  decay = np.sort(np.linalg.eigvals(
      np.diag(inv_decay) - np.outer(inv_scale, np.ones(d))).real)[::-1]
  scale = toeplitz.output_scales_for_pair(decay, inv_decay)
  decay = decay * min(1.0, (1 - 1e-6) / decay.max())
  score = np.sum(scale / decay)
  scale = scale * min(1.0, (1 - 1e-6) / score)
  return toeplitz.BLT(decay, scale)


def _optimize_buffers(objective: _Objective, num_buffers: int,
                      max_iterations: int):
  start = initial_blt(num_buffers)
  theta = np.asarray(start.buf_decay)
  theta_hat = np.asarray(start.inverse().buf_decay)
  x0 = np.log(np.concatenate([theta, theta_hat]) /
              (1 - np.concatenate([theta, theta_hat])))
  result = scipy_optimize.minimize(
      objective, x0, jac=True, method='L-BFGS-B',
      options=dict(maxiter=max_iterations, maxcor=15, ftol=1e-13,
                   gtol=1e-10))
  logging.info('L-BFGS-B, %d buffers: %d iterations, %s', num_buffers,
               result.nit, result.message)
  x = result.x
  theta = 1 / (1 + np.exp(-x[:num_buffers]))
  theta_hat = 1 / (1 + np.exp(-x[num_buffers:]))
  return toeplitz.BLT.from_decay_pair(theta, theta_hat)


def optimize(*, rounds: int, min_separation: int,
             max_participation: Optional[int] = None,
             num_buffers: Optional[int] = None, error: str = 'max',
             max_iterations: int = 1000) -> OptimizedBLT:
  """The BLT minimizing (1) for T rounds, MinS and MaxP.

  Args:
    rounds: T >= 1.
    min_separation: MinS >= 0 (rounds strictly between participations; b =
      MinS + 1 is derived in `toeplitz.band_from_min_separation`).
    max_participation: MaxP >= 1; None: as many as fit in T.
    num_buffers: 1 to 7; None adds buffers while the loss improves by 1%.
    error: 'max' or 'mean' squared error of the prefix sums.
    max_iterations: L-BFGS-B iterations per buffer count.
  """
  rounds = checks.check_int(rounds, 'rounds', minimum=1)
  band = toeplitz.band_from_min_separation(min_separation)
  if max_participation is not None:
    max_participation = checks.check_int(max_participation,
                                         'max_participation', minimum=1)
  if error not in ERRORS:
    raise ValueError(f'error must be one of {", ".join(ERRORS)}, got '
                     f'{error!r}.')
  if num_buffers is not None:
    num_buffers = checks.check_int(num_buffers, 'num_buffers', minimum=1,
                                   maximum=MAX_BUFFERS)
  k = toeplitz.effective_participations(rounds, band, max_participation)
  objective = _Objective(rounds, band, k, error)
  counts = [num_buffers] if num_buffers else range(1, MAX_BUFFERS + 1)
  best = None
  for count in counts:
    try:
      blt = _optimize_buffers(objective, count, max_iterations)
      value, sens2, err = loss(blt, rounds=rounds,
                               min_separation=min_separation,
                               max_participation=k, error=error)
    except ValueError as e:
      # A numerically degenerate result for this buffer count.
      logging.warning('BLT with %d buffers failed: %s', count, e)
      if num_buffers:
        raise
      if best is None:
        continue
      break
    logging.info('BLT with %d buffers: loss %.6g', count, value)
    if best is not None and value * _IMPROVEMENT >= best.loss:
      break
    best = OptimizedBLT(blt=blt, rounds=rounds,
                        min_separation=min_separation, max_participation=k,
                        error=error, loss=value, sensitivity_squared=sens2,
                        prefix_error=err)
  if best is None:
    raise ValueError(f'No valid BLT found for rounds={rounds}, '
                     f'min_separation={min_separation}, '
                     f'max_participation={max_participation}.')
  return best
