"""Conversions from rho-zCDP to (epsilon, delta)-DP.

Two conversions are offered:

* PLD accounting (what the paper reports, App. A): rho-zCDP is the privacy
  curve of a Gaussian mechanism with sensitivity 1 and noise multiplier
  sigma = 1 / sqrt(2 rho) (since rho = 1 / (2 sigma^2)); its exact
  (epsilon, delta) curve is computed with `dp_accounting.pld.PLDAccountant`.
  This is tight for Gaussian-noise mechanisms such as DP-FTRL.
* The closed form of Bun & Steinke 2016 (Prop. 1.3), valid for any
  rho-zCDP mechanism:  epsilon = rho + 2 sqrt(rho log(1/delta)).
"""

import math

import dp_accounting

from dpftrl_tff import checks

DEFAULT_DELTA = 1e-10


def _check(rho, delta):
  rho = checks.check_nonnegative(rho, 'zcdp')
  delta = checks.check_probability(delta, 'delta')
  return rho, delta


def epsilon_closed_form(rho: float, delta: float = DEFAULT_DELTA) -> float:
  """epsilon = rho + 2 sqrt(rho log(1/delta)) (Bun & Steinke 2016)."""
  rho, delta = _check(rho, delta)
  return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def epsilon_pld(rho: float, delta: float = DEFAULT_DELTA, *,
                value_discretization_interval: float = 1e-4) -> float:
  """epsilon of a Gaussian mechanism with rho = 1 / (2 sigma^2), by PLD."""
  rho, delta = _check(rho, delta)
  if rho == 0:
    return 0.0
  accountant = dp_accounting.pld.PLDAccountant(
      value_discretization_interval=value_discretization_interval)
  accountant.compose(
      dp_accounting.GaussianDpEvent(noise_multiplier=1.0 /
                                    math.sqrt(2.0 * rho)))
  return float(accountant.get_epsilon(delta))
