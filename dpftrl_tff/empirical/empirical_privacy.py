"""One-shot empirical privacy estimation from canary cosines.

Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar, "One-shot Empirical
Privacy Estimation for Federated Learning" (ICLR 2024, arXiv 2302.03098).
K canary clients, each with a fixed random unit direction u_k, take part in
training; as many directions are drawn and never inserted. The statistic of
a canary is the cosine of the released model delta Delta with its
direction, cos(Delta, u_k). In high dimension the cosines of unseen
canaries are close to N(0, 1/d) and those of seen canaries are shifted by
the canary's contribution relative to the noise. The estimate fits one
Gaussian to each set, N(mu_0, sigma_0^2) (unseen) and N(mu_1, sigma_1^2)
(seen), and reports the epsilon at delta of that pair of Gaussians: the
privacy of a mechanism whose output on neighbouring datasets is distributed
like the two fits. For the Gaussian mechanism with sensitivity s and noise
std sigma the estimate converges to that mechanism's epsilon (their
Theorem 3.2), so a statistical test against the closed form checks it.

The epsilon of two Gaussians P = N(m1, s1^2), Q = N(m0, s0^2) is exact: the
hockey-stick divergence
    delta_{P||Q}(eps) = P(L > eps) - e^eps Q(L > eps),
    L(x) = log p(x) / q(x) = A x^2 + B x + C0,
with A = 1 / (2 s0^2) - 1 / (2 s1^2), B = m1 / s1^2 - m0 / s0^2 and
C0 = m0^2 / (2 s0^2) - m1^2 / (2 s1^2) + log(s0 / s1), is a difference of
normal masses over the set where the quadratic exceeds eps (a half-line, an
interval or its complement), and eps(delta) is the smallest eps with both
delta_{P||Q} and delta_{Q||P} at most delta (bisection; delta is monotone).

The interval is a basic (reverse percentile) bootstrap over canaries (seen
and unseen resampled independently, the fit and epsilon recomputed): it
reflects the finite number of canaries, not the model's randomness beyond
them.

With few canaries the plain two-fit estimate is biased upwards: any chance
difference between the two fitted variances makes the privacy loss
unbounded in the tails, most at small delta (+25% at 1,000 canaries, true
epsilon 5, delta 1e-10). The default estimator (`known_null`) removes most
of it: the null is N(0, 1/d), known exactly (Andrew et al.'s choice), the
seen canaries' fitted std is shrunk toward it by its sampling noise, and
the point is corrected by the bootstrap's estimate of the remaining bias.
Measured against the closed form in `benchmarks/estimator_bias.py` (table in
docs/empirical_privacy.md).
"""

import dataclasses
import math
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
from scipy import special

DEFAULT_CONFIDENCE = 0.95


def _mass(lo: float, hi: float, mean: float, std: float) -> float:
  """P(lo < X < hi) for X ~ N(mean, std^2), accurate in both tails."""
  if lo >= hi:
    return 0.0
  a, b = (lo - mean) / std, (hi - mean) / std
  if a > 0:   # Both in the upper tail: difference of survival functions.
    return float(max(0.0, special.ndtr(-a) - special.ndtr(-b)))
  return float(max(0.0, special.ndtr(b) - special.ndtr(a)))


def _region(a: float, b: float, c: float) -> Sequence[Tuple[float, float]]:
  """The set {x : a x^2 + b x + c > 0} as disjoint open intervals."""
  inf = math.inf
  if a == 0:
    if b == 0:
      return [(-inf, inf)] if c > 0 else []
    root = -c / b
    return [(root, inf)] if b > 0 else [(-inf, root)]
  disc = b * b - 4 * a * c
  if disc <= 0:
    return [(-inf, inf)] if a > 0 else []
  sq = math.sqrt(disc)
  r1, r2 = sorted(((-b - sq) / (2 * a), (-b + sq) / (2 * a)))
  return [(-inf, r1), (r2, inf)] if a > 0 else [(r1, r2)]


def hockey_stick_delta(eps: float, p: Tuple[float, float],
                       q: Tuple[float, float]) -> float:
  """delta_{P||Q}(eps) for P = N(p[0], p[1]^2), Q = N(q[0], q[1]^2)."""
  (m1, s1), (m0, s0) = p, q
  a = 0.5 / s0**2 - 0.5 / s1**2
  b = m1 / s1**2 - m0 / s0**2
  c = (0.5 * m0**2 / s0**2 - 0.5 * m1**2 / s1**2 + math.log(s0 / s1)
       - eps)
  region = _region(a, b, c)
  p_mass = sum(_mass(lo, hi, m1, s1) for lo, hi in region)
  q_mass = sum(_mass(lo, hi, m0, s0) for lo, hi in region)
  if q_mass <= 0:
    return max(0.0, p_mass)
  log_term = eps + math.log(q_mass)   # e^eps alone overflows past 709.
  if log_term > 700:
    return 0.0   # e^eps Q > 1 >= P.
  return max(0.0, p_mass - math.exp(log_term))


def epsilon_two_gaussians(unseen: Tuple[float, float],
                          seen: Tuple[float, float], delta: float) -> float:
  """The smallest eps >= 0 with the pair (eps, delta)-indistinguishable.

  Args:
    unseen: (mean, std) of the first Gaussian.
    seen: (mean, std) of the second.
    delta: in (0, 1).

  Returns:
    eps, to a relative tolerance of 1e-9 (inf if none exists below 1e4).
  """
  if not 0 < delta < 1:
    raise ValueError(f'delta must be in (0, 1), got {delta}.')
  for _, std in (unseen, seen):
    if not std > 0 or not math.isfinite(std):
      raise ValueError(f'a standard deviation must be finite and > 0, got '
                       f'{std}.')

  def worst(eps):
    return max(hockey_stick_delta(eps, seen, unseen),
               hockey_stick_delta(eps, unseen, seen))

  if worst(0.0) <= delta:
    return 0.0
  lo, hi = 0.0, 1.0
  while worst(hi) > delta:
    lo, hi = hi, 2 * hi
    if hi > 1e4:
      return math.inf
  for _ in range(200):
    mid = 0.5 * (lo + hi)
    if worst(mid) > delta:
      lo = mid
    else:
      hi = mid
    if hi - lo <= 1e-9 * hi:
      break
  return hi


def gaussian_mechanism_epsilon(sensitivity: float, noise_std: float,
                               delta: float) -> float:
  """epsilon of the Gaussian mechanism (the estimator's ground truth)."""
  return epsilon_two_gaussians((0.0, noise_std), (sensitivity, noise_std),
                               delta)


def cosines(vector: np.ndarray, directions: np.ndarray) -> np.ndarray:
  """cos(vector, u_k) for every row u_k of `directions`."""
  vector = np.asarray(vector, np.float64).ravel()
  directions = np.asarray(directions, np.float64)
  norms = np.linalg.norm(directions, axis=1) * np.linalg.norm(vector)
  return directions @ vector / norms


def _fit(values) -> Tuple[float, float]:
  values = np.asarray(values, np.float64)
  return float(np.mean(values)), float(np.std(values, ddof=1))


def _shrunk_std(seen_std: float, null_std: float, variance: float) -> float:
  """The seen fit's std moved toward the null's by its sampling noise.

  The estimate's epsilon grows with |r|, r = log(seen_std / null_std), in
  either direction (unequal variances make the privacy loss unbounded in the
  tails), so the sampling noise of the fitted stds alone biases it upwards:
  E r_hat^2 = r^2 + v with v = 1 / (2 (n - 1)) per fitted std. The shrunk r
  keeps the sign of r_hat and has r^2 = max(0, r_hat^2 - v).
  """
  r = math.log(seen_std / null_std)
  return null_std * math.exp(math.copysign(
      math.sqrt(max(0.0, r * r - variance)), r))


# Fewer seen canaries than this give no estimate ("not estimated"): with 3 a
# run reported 62.9 against an accounted 34.4.
MIN_SEEN_CANARIES = 10

ESTIMATORS = ('known_null', 'fitted_null', 'fitted_uncorrected')


@dataclasses.dataclass(frozen=True)
class _Estimator:
  """How `estimate` turns two sets of statistics into an epsilon."""
  null_std: Optional[float]   # Known null N(0, null_std^2), or None: fitted.
  corrected: bool             # Shrunk seen std and bootstrap bias correction.

  def fits(self, seen, unseen):
    seen_fit = _fit(seen)
    if self.null_std is None:
      null_fit, variance = _fit(unseen), 0.5 / (len(unseen) - 1)
    else:
      null_fit, variance = (0.0, self.null_std), 0.0
    if self.corrected and seen_fit[1] > 0 and null_fit[1] > 0:
      variance += 0.5 / (len(seen) - 1)
      seen_fit = (seen_fit[0], _shrunk_std(seen_fit[1], null_fit[1],
                                           variance))
    return null_fit, seen_fit


@dataclasses.dataclass(frozen=True)
class Estimate:
  """The one-shot estimate with its bootstrap interval."""
  empirical_epsilon: float
  epsilon_interval: Tuple[float, float]
  confidence: float
  delta: float
  seen_canaries: int
  unseen_canaries: int
  seen_fit: Tuple[float, float]
  unseen_fit: Tuple[float, float]
  interval_method: str = 'basic bootstrap over canaries'
  threat_model: str = 'final model'
  estimator: str = 'known_null'

  def as_dict(self) -> Dict:
    """JSON-ready; an infinite estimate (no finite eps below 1e4) is null
    there, with `epsilon_unbounded` true."""
    out = dataclasses.asdict(self)
    out['epsilon_unbounded'] = math.isinf(self.empirical_epsilon)
    out['epsilon_interval'] = list(self.epsilon_interval)
    out['seen_fit'] = dict(mean=self.seen_fit[0], std=self.seen_fit[1])
    out['unseen_fit'] = dict(mean=self.unseen_fit[0], std=self.unseen_fit[1])
    return out


def _checked(seen, unseen, confidence):
  seen = np.asarray(seen, np.float64)
  unseen = np.asarray(unseen, np.float64)
  if len(seen) < MIN_SEEN_CANARIES:
    raise ValueError(
        f'not estimated: {len(seen)} canaries were seen, fewer than '
        f'{MIN_SEEN_CANARIES} (a point estimate from so few says nothing; '
        'use more --canaries or more rounds).')
  if len(unseen) < 2:
    raise ValueError(f'the estimate needs at least 2 unseen canaries, got '
                     f'{len(unseen)}.')
  if not (np.all(np.isfinite(seen)) and np.all(np.isfinite(unseen))):
    raise ValueError('a canary statistic is not finite (the model '
                     'diverged?).')
  if not 0 < confidence < 1:
    raise ValueError(f'confidence must be in (0, 1), got {confidence}.')
  return seen, unseen


def estimate(seen: Sequence[float], unseen: Sequence[float], delta: float,
             *, dimension: Optional[int] = None,
             estimator: str = 'known_null',
             confidence: float = DEFAULT_CONFIDENCE,
             bootstrap: int = 500,
             rng: Optional[np.random.Generator] = None) -> Estimate:
  """The estimate from the statistics of seen and unseen canaries.

  Estimators (docs/empirical_privacy.md has their measured bias):
    known_null (default; needs `dimension` d): the statistic of a canary
      never inserted is the cosine of the output with a direction
      independent of it, N(0, 1/d) exactly in mean and variance (Andrew et
      al. 2024 take this null), so only the seen canaries are fitted; their
      fitted std is shrunk toward the null's by its sampling noise
      (`_shrunk_std`), and the point is bias-corrected by the bootstrap,
      2 eps_hat - mean(eps*). The unseen canaries' own fit is reported
      (`unseen_fit`) as a check of the null.
    fitted_null: both fitted, with the same shrinkage and correction (for
      statistics whose null is not known, such as the maximum over rounds
      of the all-iterates audit).
    fitted_uncorrected: both fitted, no correction (this project's estimator
      until 2026-11-26; biased upwards: +25% at 1,000 canaries, epsilon 5,
      delta 1e-10).
  The interval is the basic bootstrap of the uncorrected-by-bootstrap
  estimate (it corrects the bias to first order by itself).

  Args:
    seen: statistics (cosines) of the canaries that took part (at least
      MIN_SEEN_CANARIES, else a ValueError saying "not estimated").
    unseen: statistics of canaries never inserted.
    delta: the run's delta.
    dimension: d, the length of the canary directions (known_null).
    estimator: one of ESTIMATORS.
    confidence: of the bootstrap interval.
    bootstrap: resamples for the interval and the correction (0: neither;
      fewer than half of them with a fit: no interval, [nan, nan]).
    rng: for the resampling (a fresh unpredictable one by default).
  """
  if estimator not in ESTIMATORS:
    raise ValueError(f'estimator={estimator!r} is unknown; allowed: '
                     f'{", ".join(ESTIMATORS)}.')
  if estimator == 'known_null' and not (dimension and dimension >= 1):
    raise ValueError('the known_null estimator needs the dimension d of the '
                     'canary directions.')
  seen, unseen = _checked(seen, unseen, confidence)
  method = _Estimator(
      null_std=1.0 / math.sqrt(dimension) if estimator == 'known_null'
      else None, corrected=estimator != 'fitted_uncorrected')
  rng = rng or np.random.default_rng()
  null_fit, seen_fit = method.fits(seen, unseen)
  eps = epsilon_two_gaussians(null_fit, seen_fit, delta)
  result = dict(confidence=confidence, delta=delta, seen_canaries=len(seen),
                unseen_canaries=len(unseen), seen_fit=_fit(seen),
                unseen_fit=_fit(unseen), estimator=estimator)
  samples = []
  for _ in range(bootstrap):
    unseen_b = rng.choice(unseen, len(unseen))
    seen_b = rng.choice(seen, len(seen))
    null_b, seen_fit_b = method.fits(seen_b, unseen_b)
    if null_b[1] > 0 and seen_fit_b[1] > 0:   # Few canaries: a resample
      # can repeat one value; it has no fit and is left out.
      samples.append(epsilon_two_gaussians(null_b, seen_fit_b, delta))
  if not samples or len(samples) < bootstrap / 2:
    return Estimate(empirical_epsilon=eps,
                    epsilon_interval=(math.nan, math.nan), **result)
  tail = 100 * (1 - confidence) / 2
  low_q, high_q = np.percentile(samples, [tail, 100 - tail])
  # The basic (reverse percentile) bootstrap: eps is convex in the
  # fitted gap, so the estimate is biased upwards with few canaries and
  # percentile intervals miss the truth from above; reflecting the
  # bootstrap quantiles around the estimate corrects that to first order.
  interval = (max(0.0, float(2 * eps - high_q)),
              max(0.0, float(2 * eps - low_q)))
  point = eps
  if method.corrected and math.isfinite(eps) and all(
      math.isfinite(x) for x in samples):
    point = max(0.0, float(2 * eps - np.mean(samples)))
  return Estimate(empirical_epsilon=point, epsilon_interval=interval,
                  **result)


def random_signs(rng: np.random.Generator, num: int, dimension: int,
                 norm: float = 1.0) -> np.ndarray:
  """`num` vectors with independent uniformly random signs, norm `norm`:
  each coordinate +-norm / sqrt(dimension) (float32, [num, dimension]).

  One random bit a coordinate, about 50 times cheaper than a Gaussian
  draw: at the model's dimension Gaussian directions were half of an
  audit's round time. For a fixed vector v, cos(v, u) has mean 0 and
  variance exactly 1 / dimension, as for a uniformly random direction, and
  is close to normal unless v sits on a few coordinates.
  """
  words = (dimension + 7) // 8
  bits = np.unpackbits(rng.integers(0, 256, (num, words), dtype=np.uint8),
                       axis=1, count=dimension)
  scale = np.float32(norm / np.sqrt(dimension))
  signs = np.empty(bits.shape, np.float32)   # scale - 2 scale bit.
  np.multiply(bits, -2 * scale, out=signs, dtype=np.float32)
  signs += scale
  return signs


class SeededDirections:
  """`count` independent random unit vectors u_k in R^dimension (random
  signs, `random_signs`), each drawn from (seed, k) when asked: memory for
  one vector at a time, not count x dimension (2000 directions of the
  2.4M-parameter model would be 19 GB in float32)."""

  def __init__(self, count: int, dimension: int, seed: int):
    self.count, self.dimension, self.seed = count, dimension, seed

  def unit(self, k: int) -> np.ndarray:
    """u_k, float32, norm 1 (up to float32 rounding)."""
    assert 0 <= k < self.count, k
    return random_signs(np.random.default_rng([self.seed, k]), 1,
                        self.dimension)[0]

  def cosines(self, vector: np.ndarray, indices) -> np.ndarray:
    """cos(vector, u_k) for every k in `indices` (in float64)."""
    vector = np.asarray(vector, np.float64).ravel()
    norm = np.linalg.norm(vector)
    return np.array([self.unit(int(k)).astype(np.float64) @ vector / norm
                     for k in indices])


def random_directions(num: int, dimension: int,
                      rng: np.random.Generator) -> np.ndarray:
  """`num` independent uniformly random unit vectors in R^dimension."""
  directions = rng.standard_normal((num, dimension))
  return directions / np.linalg.norm(directions, axis=1, keepdims=True)
