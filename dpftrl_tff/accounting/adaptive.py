"""Noise transformation for DP-FTRL with adaptive clipping (paper's Thm. 1).

Algorithm 1 releases two tree-aggregated sums every round: the clipped model
updates (l2 sensitivity C, noise std z_Delta C) and the clipped counts
b_i = 1[||Delta_i|| <= C^t] (noise std sigma_b). As in Andrew et al. 2021 the
counts are centred (b_i - 1/2), so one client changes the count sum by at most
1/2 and the count release is a Gaussian mechanism of noise multiplier
2 sigma_b. Two Gaussian mechanisms on the same participation pattern compose
like one with

    z^-2 = z_Delta^-2 + (2 sigma_b)^-2,                                  (Thm. 1)

so DP-FTRL with adaptive clipping run with
z_Delta = (z^-2 - (2 sigma_b)^-2)^-1/2 has the privacy of plain DP-FTRL with
noise multiplier z, and all the tree accounting of `tree.py` applies with z.
"""


from dpftrl_tff import checks


def default_clipped_count_stddev(report_goal: int) -> float:
  """sigma_b = m / 20, the paper's default."""
  report_goal = checks.check_int(report_goal, 'report_goal', minimum=1)
  return report_goal / 20.0


def value_noise_multiplier(noise_multiplier: float,
                           clipped_count_stddev: float) -> float:
  """z_Delta for the model updates given the target z and sigma_b.

  Raises:
    ValueError: if 2 sigma_b <= z, when the count release alone already costs
      at least the whole budget and no z_Delta exists.
  """
  z = checks.check_positive(noise_multiplier, 'noise_multiplier')
  sigma_b = checks.check_positive(clipped_count_stddev,
                                  'clipped_count_stddev')
  if 2.0 * sigma_b <= z:
    raise ValueError(
        f'No value noise multiplier z_Delta exists for noise_multiplier={z} '
        f'with clipped_count_stddev={sigma_b}: Theorem 1 needs '
        f'2 * clipped_count_stddev > noise_multiplier, i.e. '
        f'clipped_count_stddev > {z / 2}.')
  return (z**-2 - (2.0 * sigma_b)**-2)**-0.5


def equivalent_noise_multiplier(value_noise: float,
                                clipped_count_stddev: float) -> float:
  """z of plain DP-FTRL equivalent to z_Delta and sigma_b (inverse map)."""
  z_delta = checks.check_positive(value_noise, 'value_noise_multiplier')
  sigma_b = checks.check_positive(clipped_count_stddev,
                                  'clipped_count_stddev')
  return (z_delta**-2 + (2.0 * sigma_b)**-2)**-0.5
