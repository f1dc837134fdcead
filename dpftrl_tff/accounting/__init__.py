"""Privacy accounting for DP-FTRL, its adaptive-clipping and SecAgg variants.

Public API:
  compute_zcdp_single_tree, compute_zcdp_with_restarts,
  max_sensitivity_squared, paper_restart_rounds  (tree.py)
  epsilon_pld, epsilon_closed_form, zcdp_for_epsilon, zcdp_within_epsilon
  (conversions.py)
  value_noise_multiplier, equivalent_noise_multiplier (adaptive.py, Thm. 1)
  inflated_clip_norm, linf_bound, modulus, bits_per_parameter (secagg.py)
  max_min_separation, worst_case_max_participation (population.py)
  max_possible_participation                      (tree.py)
  BLT, band_from_min_separation, blt_sensitivity_squared,
  minsep_sensitivity_squared, blt_prefix_variance,
  tree_prefix_variance                            (toeplitz.py)
  banded_sensitivity_squared, sensitivity_upper_bound_squared, optimize,
  error_summary, load_published                  (bandmf.py, as bandmf.*)
  compute_privacy (this file: everything for one configuration: tree, BLT
  or BandMF)
"""

import dataclasses
import math
from typing import Optional, Sequence

from dpftrl_tff import checks
from dpftrl_tff.accounting.adaptive import default_clipped_count_stddev
from dpftrl_tff.accounting.adaptive import equivalent_noise_multiplier
from dpftrl_tff.accounting.adaptive import value_noise_multiplier
from dpftrl_tff.accounting.conversions import DEFAULT_DELTA
from dpftrl_tff.accounting.conversions import epsilon_analytic_gaussian
from dpftrl_tff.accounting.conversions import epsilon_closed_form
from dpftrl_tff.accounting.conversions import epsilon_pld
from dpftrl_tff.accounting.conversions import zcdp_for_epsilon
from dpftrl_tff.accounting.conversions import zcdp_within_epsilon
from dpftrl_tff.accounting.population import max_min_separation
from dpftrl_tff.accounting.population import worst_case_max_participation
from dpftrl_tff.accounting.secagg import bits_per_parameter
from dpftrl_tff.accounting.secagg import DEFAULT_ALPHA
from dpftrl_tff.accounting.secagg import inflated_clip_norm
from dpftrl_tff.accounting.secagg import linf_bound
from dpftrl_tff.accounting.secagg import modulus
from dpftrl_tff.accounting.secagg import padded_dimension
from dpftrl_tff.accounting.toeplitz import band_from_min_separation
from dpftrl_tff.accounting.toeplitz import BLT
from dpftrl_tff.accounting.toeplitz import blt_prefix_variance
from dpftrl_tff.accounting.toeplitz import blt_sensitivity_squared
from dpftrl_tff.accounting.toeplitz import minsep_sensitivity_squared
from dpftrl_tff.accounting.toeplitz import tree_prefix_variance
from dpftrl_tff.accounting.tree import compute_zcdp_single_tree
from dpftrl_tff.accounting.tree import compute_zcdp_with_restarts
from dpftrl_tff.accounting.tree import max_possible_participation
from dpftrl_tff.accounting.tree import max_sensitivity_squared
from dpftrl_tff.accounting.tree import paper_restart_rounds


@dataclasses.dataclass(frozen=True)
class PrivacyReport:
  """Everything the accountant knows about one configuration."""
  rounds: int
  noise_multiplier: float
  max_participation: int
  min_separation: int
  restart_rounds: tuple
  sensitivity_squared: int
  effective_noise_multiplier: float
  zcdp: float
  delta: float
  epsilon: float
  epsilon_closed_form: float
  value_noise_multiplier: Optional[float] = None
  clipped_count_stddev: Optional[float] = None
  secagg: Optional[dict] = None
  mechanism: str = 'tree'
  blt: Optional[dict] = None
  bandmf: Optional[dict] = None
  # DP-FedAvg with Poisson sampling (mechanism 'poisson_gaussian'): the
  # rate q, the RDP epsilon and the assumption. Its zcdp and
  # epsilon_closed_form are None: the Poisson-subsampled Gaussian has no
  # useful zCDP figure (amplification by sampling does not show in rho).
  poisson: Optional[dict] = None

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)


def compute_privacy(*, rounds: int, noise_multiplier: float,
                    max_participation: Optional[int] = None,
                    min_separation: int = 0,
                    restart_rounds: Sequence[int] = (),
                    delta: float = DEFAULT_DELTA,
                    clipped_count_stddev: Optional[float] = None,
                    secagg_scale: Optional[float] = None,
                    model_dim: Optional[int] = None,
                    clip_norm: Optional[float] = None,
                    alpha: float = DEFAULT_ALPHA,
                    with_epsilon: bool = True,
                    blt: Optional[BLT] = None,
                    bandmf=None,
                    sampling_probability: Optional[float] = None
                    ) -> PrivacyReport:
  """rho-zCDP and (epsilon, delta) of one DP-FTRL configuration.

  The noise is the tree's (Kairouz et al. 2021), or with `blt` the BLT's
  (toeplitz.py): then sens^2 is the min-separation sensitivity of the BLT's
  Toeplitz matrix (Theorem 2 of arXiv 2405.13763, a float) and there are no
  restarts or adaptive clipping. With `bandmf` (a banded strategy C of at
  least T rounds; its leading T x T block releases the first T rounds)
  sens^2 is that of x -> C x: exact when C has at most MinS + 1 bands, else
  the upper bound of Algorithm 4 of arXiv 2306.08153 (`bandmf.
  sensitivity_squared`; the report's bandmf['sensitivity'] says which).

  Args:
    rounds: T.
    noise_multiplier: z, the noise multiplier the run is accounted with. With
      adaptive clipping this is the equivalent z of Theorem 1 (the value
      noise z_Delta is reported beside it).
    max_participation: MaxP; None means the worst case for T and MinS. The
      report holds the effective MaxP, at most the participations that fit
      in T rounds with MinS rounds between two.
    min_separation: MinS.
    restart_rounds: first rounds of new trees; empty for one tree.
    delta: for (epsilon, delta).
    clipped_count_stddev: sigma_b, when adaptive clipping is used.
    secagg_scale, model_dim, clip_norm: all three for SecAgg, which inflates
      the sensitivity from C to C_inflated (noise std stays z C).
    alpha: SecAgg rounding parameter.
    with_epsilon: compute epsilon (PLD takes ~0.1 s); NaN when False.
    blt: the strategy matrix of BLT-DP-FTRL; None for tree aggregation.
    bandmf: the strategy matrix C of BandMF-DP-FTRL (T' x T', T' >= T).
    sampling_probability: q of DP-FedAvg with Poisson sampling (Gaussian
      noise z C on every round's clipped sum, each client taking part
      independently with probability q): epsilon by dp_accounting's PLD
      accountant (`sampled_gaussian`), no zCDP; MaxP and MinS do not enter.
  """
  if sampling_probability is not None:
    return _poisson_privacy(rounds, noise_multiplier, sampling_probability,
                            delta, max_participation, min_separation,
                            (restart_rounds, clipped_count_stddev,
                             secagg_scale, blt, bandmf))
  rounds = checks.check_int(rounds, 'rounds', minimum=1)
  z = checks.check_positive(noise_multiplier, 'noise_multiplier')
  min_separation = checks.check_int(min_separation, 'min_separation',
                                    minimum=0)
  if max_participation is None:
    max_participation = max_possible_participation(rounds, min_separation)
  max_participation = checks.check_int(max_participation,
                                       'max_participation', minimum=1)
  # The effective MaxP: no pattern has more participations than fit.
  max_participation = min(max_participation,
                          max_possible_participation(rounds, min_separation))
  value_noise = None
  if clipped_count_stddev is not None:
    value_noise = value_noise_multiplier(z, clipped_count_stddev)
  effective_z, secagg_info = _secagg_terms(z, secagg_scale, model_dim,
                                           clip_norm, alpha)
  bandmf_info = None
  if bandmf is not None:
    if blt is not None:
      raise ValueError('blt and bandmf are two mechanisms; give one.')
    sens2, bandmf_info = _bandmf_sensitivity_squared(
        bandmf, rounds, max_participation, min_separation, restart_rounds,
        clipped_count_stddev)
  else:
    sens2 = _sensitivity_squared(rounds, max_participation, min_separation,
                                 restart_rounds, blt, clipped_count_stddev)
  rho = sens2 / (2.0 * effective_z**2)
  return PrivacyReport(
      rounds=rounds,
      noise_multiplier=z,
      max_participation=max_participation,
      min_separation=min_separation,
      restart_rounds=tuple(int(r) for r in restart_rounds),
      sensitivity_squared=sens2,
      effective_noise_multiplier=effective_z,
      zcdp=rho,
      delta=delta,
      epsilon=epsilon_pld(rho, delta) if with_epsilon else math.nan,
      epsilon_closed_form=epsilon_closed_form(rho, delta),
      value_noise_multiplier=value_noise,
      clipped_count_stddev=clipped_count_stddev,
      secagg=secagg_info,
      mechanism=('bandmf' if bandmf is not None else
                 'tree' if blt is None else 'blt'),
      blt=None if blt is None else blt.as_dict(),
      bandmf=bandmf_info,
  )


def _poisson_privacy(rounds, noise_multiplier, sampling_probability, delta,
                     max_participation, min_separation, others):
  """DP-FedAvg with Poisson sampling (`compute_privacy`'s
  sampling_probability)."""
  from dpftrl_tff.accounting import sampled_gaussian  # pylint: disable=g-import-not-at-top
  if any(o for o in others if o is not None and o != ()):
    raise ValueError('DP-FedAvg with Poisson sampling has no tree restarts, '
                     'adaptive clipping, SecAgg, BLT or BandMF here.')
  report = sampled_gaussian.poisson_gaussian_privacy(
      noise_multiplier=noise_multiplier,
      sampling_probability=sampling_probability, rounds=rounds, delta=delta)
  del max_participation, min_separation   # They do not enter.
  return PrivacyReport(
      rounds=report.rounds, noise_multiplier=report.noise_multiplier,
      max_participation=None, min_separation=None, restart_rounds=(),
      sensitivity_squared=1, effective_noise_multiplier=report.noise_multiplier,
      zcdp=None, delta=report.delta, epsilon=report.epsilon,
      epsilon_closed_form=None, mechanism=sampled_gaussian.MECHANISM,
      poisson=dict(sampling_probability=report.sampling_probability,
                   epsilon_rdp=report.epsilon_rdp,
                   assumption=sampled_gaussian.ASSUMPTION))


# The words of a BandMF report's bandmf['sensitivity'].
BANDMF_EXACT = 'exact (banded: C has at most MinS + 1 bands)'
BANDMF_UPPER_BOUND = ('upper bound (C has more than MinS + 1 bands; '
                      'Algorithm 4 of arXiv 2306.08153)')


def _bandmf_sensitivity_squared(c, rounds, max_participation,
                                min_separation, restart_rounds,
                                clipped_count_stddev):
  """(sens^2 of the first T rounds of C, the report's bandmf dict)."""
  from dpftrl_tff.accounting import bandmf  # pylint: disable=g-import-not-at-top
  if restart_rounds or clipped_count_stddev is not None:
    raise ValueError('BandMF noise has no tree restarts and no adaptive '
                     'clipping; restart_rounds and clipped_count_stddev '
                     'must be unset with bandmf.')
  c, _ = bandmf.check_banded(c)
  if c.shape[0] < rounds:
    raise ValueError(f'the BandMF C is for {c.shape[0]} rounds, fewer than '
                     f'the {rounds} rounds to account.')
  block = c[:rounds, :rounds]
  sens2, exact = bandmf.sensitivity_squared(block, min_separation,
                                            max_participation)
  return sens2, dict(bands=bandmf.check_banded(block)[1],
                     matrix_rounds=int(c.shape[0]),
                     sensitivity=BANDMF_EXACT if exact else
                     BANDMF_UPPER_BOUND)


def _secagg_terms(z: float, secagg_scale, model_dim, clip_norm, alpha):
  """(z C / C_inflated, the SecAgg facts) with SecAgg; (z, None) without."""
  given = [v is not None for v in (secagg_scale, model_dim, clip_norm)]
  if any(given) and not all(given):
    raise ValueError(
        'SecAgg accounting needs secagg_scale, model_dim and clip_norm '
        'together; got '
        f'secagg_scale={secagg_scale}, model_dim={model_dim}, '
        f'clip_norm={clip_norm}.')
  if not all(given):
    return z, None
  d = padded_dimension(model_dim)
  c_inflated = inflated_clip_norm(clip_norm, d, secagg_scale, alpha)
  return z * clip_norm / c_inflated, {
      'scale': float(secagg_scale),
      'model_dim': int(model_dim),
      'padded_dim': d,
      'clip_norm': float(clip_norm),
      'inflated_clip_norm': c_inflated,
      'linf_bound': linf_bound(clip_norm, d, secagg_scale),
      'alpha': alpha,
  }


def _sensitivity_squared(rounds: int, max_participation: int,
                         min_separation: int, restart_rounds, blt,
                         clipped_count_stddev):
  """sens^2: the tree's (an int, exact) or the BLT's (a float)."""
  if blt is None:
    return max_sensitivity_squared(rounds, max_participation,
                                   min_separation, restart_rounds)
  if restart_rounds or clipped_count_stddev is not None:
    raise ValueError('BLT noise has no tree restarts and no adaptive '
                     'clipping; restart_rounds and clipped_count_stddev '
                     'must be unset with blt.')
  return blt_sensitivity_squared(blt, rounds=rounds,
                                 min_separation=min_separation,
                                 max_participation=max_participation)
