"""Sensitivity of DP-FTRL with SecAgg-style discretization (paper's Sec. 3.4).

Each client l2-clips its update to C, scales by s, rotates it (random signs and
the normalized Hadamard matrix on the update padded to d = 2^k coordinates),
clips to l_inf <= C_inf, and rounds stochastically, retrying until

    ||x~||_2^2 <= s^2 C^2 + d/4 + sqrt(2 log(1/alpha)) (s C + sqrt(d)/2).

Undoing the scale, the l2 norm of a client's contribution to the decoded sum is
at most C_inflated with

    C_inflated^2 = C^2 + d/(4 s^2) + sqrt(2 log(1/alpha)) (C/s + sqrt(d)/(2 s^2))

and the tree accounting applies with C_inflated in place of C: the noise std
is z C, so the effective noise multiplier is z C / C_inflated.

d is the number of coordinates that are rounded, i.e. the padded dimension.
The integer range per coordinate is {-C_inf..C_inf} with
C_inf = ceil(2 s C log(d) / sqrt(d)) (natural log), shifted to
{0..2 C_inf}; the modulus M = 2 C_inf m + 1 leaves no wrap-around for a sum of
at most m clients, and costs ceil(log2 M) bits per parameter.
"""

import math

from dpftrl_tff import checks

DEFAULT_ALPHA = math.exp(-0.5)


def padded_dimension(dim: int) -> int:
  """Smallest power of two >= dim (the Hadamard transform's size)."""
  dim = checks.check_int(dim, 'model_dim', minimum=1)
  return 1 << (dim - 1).bit_length()


def _check(clip_norm, dim, scale, alpha):
  clip_norm = checks.check_positive(clip_norm, 'clip_norm')
  dim = checks.check_int(dim, 'model_dim', minimum=2)
  scale = checks.check_positive(scale, 'secagg_scale')
  alpha = checks.check_probability(alpha, 'alpha')
  return clip_norm, dim, scale, alpha


def rounding_norm_bound_squared(clip_norm: float, dim: int, scale: float,
                                alpha: float = DEFAULT_ALPHA) -> float:
  """Bound on ||x~||^2 enforced by conditional stochastic rounding."""
  c, d, s, alpha = _check(clip_norm, dim, scale, alpha)
  return (s * c)**2 + d / 4.0 + math.sqrt(2.0 * math.log(1.0 / alpha)) * (
      s * c + math.sqrt(d) / 2.0)


def inflated_clip_norm(clip_norm: float, dim: int, scale: float,
                       alpha: float = DEFAULT_ALPHA) -> float:
  """C_inflated = sqrt(rounding bound) / s (paper's Sec. 3.4).

  Args:
    clip_norm: C, the l2 clip norm before scaling.
    dim: d, the number of rounded coordinates (the padded dimension).
    scale: s, the scaling factor.
    alpha: the rounding failure probability bound, default exp(-0.5).
  """
  s = checks.check_positive(scale, 'secagg_scale')
  return math.sqrt(rounding_norm_bound_squared(clip_norm, dim, scale,
                                               alpha)) / s


def linf_bound(clip_norm: float, dim: int, scale: float) -> int:
  """C_inf = ceil(2 s C log(d) / sqrt(d))."""
  c, d, s, _ = _check(clip_norm, dim, scale, DEFAULT_ALPHA)
  return int(math.ceil(2.0 * s * c * math.log(d) / math.sqrt(d)))


def modulus(clip_norm: float, dim: int, scale: float, report_goal: int) -> int:
  """M = 2 C_inf m + 1."""
  m = checks.check_int(report_goal, 'report_goal', minimum=1)
  return 2 * linf_bound(clip_norm, dim, scale) * m + 1


def bits_per_parameter(secagg_modulus: int) -> int:
  """ceil(log2 M): bits needed to represent one coordinate mod M."""
  secagg_modulus = checks.check_int(secagg_modulus, 'modulus', minimum=2)
  return (secagg_modulus - 1).bit_length()
