"""Privacy of DP-FedAvg with Poisson sampling: the field's usual baseline.

Every round each of the N clients takes part independently with probability
q (Poisson sampling, q = m / N for an expected report goal m); the server
adds Gaussian noise of std z C to the sum of the clipped updates and divides
by m (McMahan et al. 2018). Its privacy is that of the Poisson-subsampled
Gaussian mechanism composed T times, which privacy amplification by sampling
makes far smaller than DP-FTRL's at the same noise: but only if the sampling
really happens. The paper's point (Sec. 1 and 2.1) is that a production
system cannot guarantee it (devices check in when they are idle, charging
and on a free network), which is why Gboard trains with DP-FTRL; this module
gives the comparison a user deciding between them needs, and every place
that prints it says that it assumes the sampling.

epsilon comes from dp_accounting's PLD accountant (`PoissonSampledDpEvent`
of a `GaussianDpEvent`, self-composed T times), the tightest accounting it
offers; its RDP accountant's epsilon (an upper bound by a different method)
is given beside it. Tests check the PLD figure against the exact Gaussian
mechanism at q = 1 (Balle and Wang 2018) and against the RDP bound.
"""

import dataclasses
import functools
from typing import Dict

import dp_accounting

from dpftrl_tff import checks
from dpftrl_tff.accounting import conversions

MECHANISM = 'poisson_gaussian'
ASSUMPTION = ('assumes Poisson sampling: every client takes part in each round '
              'independently with probability q, which the production system '
              'cannot guarantee (the paper, Sec. 2.1)')


@dataclasses.dataclass(frozen=True)
class SampledGaussianReport:
  """(epsilon, delta) of T rounds of the Poisson-subsampled Gaussian."""
  rounds: int
  noise_multiplier: float
  sampling_probability: float
  delta: float
  epsilon: float          # PLD (dp_accounting), the figure reported.
  epsilon_rdp: float      # RDP (dp_accounting), a looser upper bound.
  mechanism: str = MECHANISM
  assumption: str = ASSUMPTION

  def as_dict(self) -> Dict:
    return dataclasses.asdict(self)


def check_sampling_probability(value, flag: str = '--sampling_probability'
                               ) -> float:
  q = checks.check_float(value, flag, minimum=0.0)
  if not 0 < q <= 1:
    raise ValueError(f'{flag} must be in (0, 1], got {value}.')
  return q


def poisson_gaussian_privacy(*, noise_multiplier: float,
                             sampling_probability: float, rounds: int,
                             delta: float = conversions.DEFAULT_DELTA
                             ) -> SampledGaussianReport:
  """epsilon at `delta` of T rounds, each the Gaussian mechanism with noise
  multiplier z on a Poisson sample of rate q (sensitivity C, noise z C).

  Raises:
    ValueError naming the flag for a bad value.
  """
  z = checks.check_noise_multiplier(noise_multiplier, positive=True)
  q = check_sampling_probability(sampling_probability)
  rounds = checks.check_int(rounds, '--rounds', minimum=1)
  delta = checks.check_probability(delta, '--delta')
  points = pld_points(z)
  if points > MAX_PLD_POINTS:
    raise ValueError(
        f'--noise_multiplier={z:g} with DP-FedAvg: dp_accounting\'s privacy '
        f'loss distribution of one round would hold about {points:.1e} '
        f'points (8 bytes each, before its composition over the rounds), '
        f'more than this accounting can hold; it takes z >= '
        f'{MIN_PLD_NOISE:.4f} (slow below about 0.05; there epsilon is far '
        f'beyond any useful guarantee anyway).')
  return _privacy(float(z), float(q), int(rounds), float(delta))


# dp_accounting's PLD of the Gaussian mechanism at noise multiplier z spans
# about 1 / z^2 of privacy loss: at the discretization interval used here
# it holds about PLD_POINTS_AT_UNIT_Z / z^2 points (measured: 5.10e9 at z =
# 0.001 and 5.01e11 at z = 1e-4, where NumPy could not allocate them).
# Beyond MAX_PLD_POINTS (800 MB of int64 alone) the accountant is refused
# with one line instead of failing inside NumPy.
_DISCRETIZATION_INTERVAL = 1e-4
PLD_POINTS_AT_UNIT_Z = 5.1e3
MAX_PLD_POINTS = 1e8
MIN_PLD_NOISE = (PLD_POINTS_AT_UNIT_Z / MAX_PLD_POINTS)**0.5


def pld_points(noise_multiplier: float) -> float:
  """About how many points dp_accounting's PLD of one round holds at z."""
  return PLD_POINTS_AT_UNIT_Z / noise_multiplier**2


@functools.lru_cache(maxsize=256)
def _privacy(z: float, q: float, rounds: int,
             delta: float) -> SampledGaussianReport:
  event = dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)),
      rounds)
  pld = dp_accounting.pld.PLDAccountant(
      value_discretization_interval=_DISCRETIZATION_INTERVAL)
  pld.compose(event)
  rdp = dp_accounting.rdp.RdpAccountant()
  rdp.compose(event)
  return SampledGaussianReport(
      rounds=rounds, noise_multiplier=z, sampling_probability=q, delta=delta,
      epsilon=float(pld.get_epsilon(delta)),
      epsilon_rdp=float(rdp.get_epsilon(delta)))


def noise_for_epsilon(epsilon: float, *, sampling_probability: float,
                      rounds: int, delta: float = conversions.DEFAULT_DELTA,
                      high: float = 100.0) -> float:
  """The smallest z (to 1e-4 relative) at which T rounds at rate q have at
  most `epsilon` by PLD: halving z from `high` until epsilon exceeds the
  target, then bisection on log z (epsilon falls as z grows; PLD is slow at
  small z, so the search comes from above). Returns the upper end of the
  final bracket, so the epsilon at the returned z is at most `epsilon`."""
  checks.check_positive(epsilon, 'epsilon')

  def eps(z):
    return poisson_gaussian_privacy(
        noise_multiplier=z, sampling_probability=sampling_probability,
        rounds=rounds, delta=delta).epsilon

  if eps(high) > epsilon:
    raise ValueError(f'DP-FedAvg needs z > {high:g} for epsilon {epsilon:g} '
                     f'(q = {sampling_probability:g}, T = {rounds}).')
  low = high / 2
  while eps(low) <= epsilon:
    high, low = low, low / 2
    if low < max(1e-3, MIN_PLD_NOISE):
      return high
  while high / low > 1 + 1e-4:
    mid = (low * high)**0.5
    low, high = (mid, high) if eps(mid) > epsilon else (low, mid)
  return high
