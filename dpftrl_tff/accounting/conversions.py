"""Conversions from rho-zCDP to (epsilon, delta)-DP.

Two conversions are offered:

* PLD accounting (what the paper reports, App. A): rho-zCDP is the privacy
  curve of a Gaussian mechanism with sensitivity 1 and noise multiplier
  sigma = 1 / sqrt(2 rho) (since rho = 1 / (2 sigma^2)); its exact
  (epsilon, delta) curve is computed with `dp_accounting.pld.PLDAccountant`.
  This is tight for Gaussian-noise mechanisms such as DP-FTRL.
* The closed form of Bun & Steinke 2016 (Prop. 1.3), valid for any
  rho-zCDP mechanism:  epsilon = rho + 2 sqrt(rho log(1/delta)).

PLD discretizes the privacy loss, and its cost grows like 1 / sigma^2: for
rho above `PLD_MAX_ZCDP` (sigma < 0.16, epsilon in the tens and more) the
same Gaussian curve is computed exactly from Balle & Wang 2018 (Thm. 8),
with mu = sqrt(2 rho):

    delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2),

solved for eps in log space. The tests check PLD against this formula.

The PLD is dp_accounting's own computation, with one method made to work on
arrays (`_VectorizedGaussianPrivacyLoss`): 2.1 to 2.2x faster
(`benchmarks.pld_speed`), the same epsilon bit for bit.
"""

import contextlib
import functools
import math
import numbers
import threading

import dp_accounting
from dp_accounting.pld import privacy_loss_mechanism
import numpy as np
from scipy import optimize
from scipy import special

from dpftrl_tff import checks

DEFAULT_DELTA = 1e-10
PLD_MAX_ZCDP = 20.0


def _check(rho, delta):
  rho = checks.check_nonnegative(rho, 'zcdp')
  delta = checks.check_probability(delta, 'delta')
  return rho, delta


def epsilon_closed_form(rho: float, delta: float = DEFAULT_DELTA) -> float:
  """epsilon = rho + 2 sqrt(rho log(1/delta)) (Bun & Steinke 2016)."""
  rho, delta = _check(rho, delta)
  return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def epsilon_analytic_gaussian(rho: float,
                              delta: float = DEFAULT_DELTA) -> float:
  """Exact epsilon of the Gaussian mechanism with rho = mu^2 / 2."""
  rho, delta = _check(rho, delta)
  if rho == 0:
    return 0.0
  mu = math.sqrt(2.0 * rho)

  def log_gap(eps):
    # log of Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2), minus log delta.
    a = special.log_ndtr(-eps / mu + mu / 2)
    b = eps + special.log_ndtr(-eps / mu - mu / 2)
    if b >= a:
      return -math.inf
    return a + math.log1p(-math.exp(b - a)) - math.log(delta)

  if log_gap(0.0) <= 0:
    return 0.0
  # Bracketed by powers of 2 on both sides, so that the tolerance is
  # relative at every scale (an absolute one is as large as the root itself
  # for the epsilon of a tiny rho).
  hi = 1.0
  while log_gap(hi) > 0:
    hi *= 2.0
  lo = hi
  while log_gap(lo) <= 0:   # log_gap(0) > 0: stops.
    lo /= 2.0
  return optimize.brentq(log_gap, lo, hi, xtol=1e-13 * lo, rtol=1e-12)


def epsilon_pld(rho: float, delta: float = DEFAULT_DELTA, *,
                value_discretization_interval: float = 1e-4) -> float:
  """epsilon of a Gaussian mechanism with rho = 1 / (2 sigma^2), by PLD.

  For rho > PLD_MAX_ZCDP the exact analytic Gaussian value is returned
  instead (PLD would take minutes to hours there).
  """
  rho, delta = _check(rho, delta)
  if rho == 0:
    return 0.0
  if rho > PLD_MAX_ZCDP:
    return epsilon_analytic_gaussian(rho, delta)
  return _epsilon_pld(float(rho), float(delta),
                      float(value_discretization_interval))


class _VectorizedGaussianPrivacyLoss(
    privacy_loss_mechanism.GaussianPrivacyLoss):
  """dp_accounting's Gaussian privacy loss, its delta curve computed for a
  whole array of epsilons at once.

  Connect-the-dots asks `get_delta_for_epsilon` for every point of its grid
  (about 10^6 at rho 20, with the interval 1e-4), and dp-accounting 0.4.3
  inverts the privacy loss there one epsilon at a time in Python: 60% of
  the PLD's time. Without subsampling the inverse is affine,
  x = +-s/2 - epsilon sigma^2 / s (ADD: +, REMOVE: -), evaluated here on the
  array with the library's operations in the library's order (IEEE float64
  operations, each rounded once, element by element): the same x, hence the
  same deltas and epsilon, bit for bit (tests/accounting/
  accounting_formulas_test.py compares with the unmodified accountant).
  Subsampled losses and scalar epsilons keep the library's method.
  """

  def get_delta_for_epsilon(self, epsilon):
    if self.sampling_prob != 1.0 or isinstance(epsilon, numbers.Number):
      return super().get_delta_for_epsilon(epsilon)
    epsilons = np.asarray(epsilon)
    s = self.sensitivity
    if self.adjacency_type == privacy_loss_mechanism.AdjacencyType.ADD:
      x_cutoffs = 0.5 * s - epsilons * (self._standard_deviation**2) / s
    else:
      x_cutoffs = -0.5 * s - epsilons * (self._standard_deviation**2) / s
    deltas = (self.mu_upper_cdf(x_cutoffs) -
              np.exp(epsilons + self.mu_lower_log_cdf(x_cutoffs)))
    return np.clip(deltas, 0, 1)


_LIBRARY_CLASS_LOCK = threading.Lock()


@contextlib.contextmanager
def _vectorized_gaussian_loss():
  """dp_accounting builds `_VectorizedGaussianPrivacyLoss` instead of its
  Gaussian loss while this lasts (the module attribute its
  `from_gaussian_mechanism` looks up at every call); restored after."""
  with _LIBRARY_CLASS_LOCK:
    original = privacy_loss_mechanism.GaussianPrivacyLoss
    privacy_loss_mechanism.GaussianPrivacyLoss = _VectorizedGaussianPrivacyLoss
    try:
      yield
    finally:
      privacy_loss_mechanism.GaussianPrivacyLoss = original


def library_epsilon_pld(rho: float, delta: float,
                        value_discretization_interval: float = 1e-4) -> float:
  """dp_accounting's PLD accountant, unmodified, on the Gaussian mechanism
  with rho = 1 / (2 sigma^2): the reference `epsilon_pld` is tested
  against (and what it computed before it was vectorized)."""
  accountant = dp_accounting.pld.PLDAccountant(
      value_discretization_interval=value_discretization_interval)
  accountant.compose(
      dp_accounting.GaussianDpEvent(noise_multiplier=1.0 /
                                    math.sqrt(2.0 * rho)))
  return float(accountant.get_epsilon(delta))


@functools.lru_cache(maxsize=1024)
def _epsilon_pld(rho: float, delta: float,
                 value_discretization_interval: float) -> float:
  """`epsilon_pld`'s PLD computation, memoized: a run's summary asks for
  the observed and the planned rho (often equal), and a process that trains
  several runs of one setting asks again; one call takes 0.02 to 0.45
  CPU-s (rho 0.05 to 20; 0.04 to 1.03 before the vectorized loss)."""
  with _vectorized_gaussian_loss():
    return library_epsilon_pld(rho, delta, value_discretization_interval)


def zcdp_for_epsilon(epsilon: float, delta: float = DEFAULT_DELTA) -> float:
  """The rho whose Gaussian mechanism has exactly `epsilon` at `delta`.

  The inverse of `epsilon_analytic_gaussian` (the exact conversion that PLD
  approximates), for planning from an (epsilon, delta) target.
  """
  epsilon = checks.check_positive(epsilon, 'epsilon')
  _check(1.0, delta)
  # Bracketed by powers of 2 on both sides: a relative tolerance at every
  # scale (rho is about 3e-10 for epsilon 1e-4 at delta 1e-10).
  hi = 1.0
  while epsilon_analytic_gaussian(hi, delta) < epsilon:
    hi *= 2.0
  lo = hi
  while epsilon_analytic_gaussian(lo, delta) > epsilon:
    lo /= 2.0
  try:
    return optimize.brentq(lambda r: epsilon_analytic_gaussian(r, delta) -
                           epsilon, lo, hi, xtol=1e-13 * lo, rtol=1e-12)
  except RuntimeError:   # Near 1e-15 the conversion is flat in float64.
    raise ValueError(f'--target_epsilon={epsilon:g}: too small to convert '
                     f'to rho-zCDP at delta {delta:g} in floating point.'
                     ) from None


# A target's rho is lowered by this much more, so that a rho computed back
# from a noise multiplier chosen for it (equal up to floating point) still
# reports an epsilon within the target.
_TARGET_MARGIN = 1e-8


def zcdp_within_epsilon(epsilon: float,
                        delta: float = DEFAULT_DELTA) -> float:
  """A planning target: the largest rho (to about 1e-8 relative) whose
  reported epsilon, `epsilon_pld` (the figure every report prints), is at
  most `epsilon` at `delta`, with room for floating point.

  PLD is pessimistic, so at the exact inverse (`zcdp_for_epsilon`) it may
  print a hair above the target (10.00000006 for 10): a plan that meets
  the rho it returns never claims a target its own report contradicts.

  Below an epsilon of about 1e-4 PLD's loss discretization (1e-4) is
  coarser than the target, and no rho near the exact one reports within
  it: such a target raises ValueError instead of planning for a rho
  thousands of times smaller (or 0).
  """
  exact = rho = zcdp_for_epsilon(epsilon, delta)
  step = _TARGET_MARGIN
  while epsilon_pld(rho * (1 + _TARGET_MARGIN), delta) > epsilon:
    rho *= 1 - step
    step = min(2 * step, 0.5)
    if rho < exact / 2:
      raise ValueError(
          f'--target_epsilon={epsilon:g}: the reported epsilon (PLD, whose '
          f'privacy-loss discretization is 1e-4) cannot certify a target '
          f'this small; plan for 1e-4 or more.')
  return rho
