"""Tree aggregation against BLT and BandMF noise (and DP-FedAvg) on one
setting.

`compare_row` is the row of `experiments.compare_mechanisms` for one
(T, MinS, MaxP): privacy of each at the same noise multiplier, the BLT's
and BandMF's noise multipliers at the tree's rho-zCDP, and the noise of the
released prefix sums at equal privacy; `compare_paper_rows` does the
paper's NWP rows.

BandMF there has b = min(MinS + 1, 64) bands and is column-normalized, so
its sensitivity (and privacy) is that of every such C: sens^2 = MaxP
participations of unit columns. Its noise is that of the banded square
root of the prefix-sum matrix (`bandmf.initial_strategy`), the optimizer's
start: optimizing C for T up to 3,600 rounds takes minutes a row, and only
lowers the mean error further (`accounting.bandmf.optimize` never returns
a C worse than its start).
"""

import math

import numpy as np

from dpftrl_tff import accounting
from dpftrl_tff.accounting import bandmf
from dpftrl_tff.accounting import blt_optimizer
from dpftrl_tff.accounting import paper_tables
from dpftrl_tff.accounting import sampled_gaussian


# Bands of the comparison's BandMF: the training default's cap
# (`mechanisms.bandmf.DEFAULT_MAX_BANDS`).
BANDMF_MAX_BANDS = 64


def compare_row(rounds, min_separation, max_participation,
                noise_multiplier=paper_tables.NOISE_MULTIPLIER):
  """Tree vs optimized BLT for one (T, MinS, MaxP); a dict."""
  tree = accounting.compute_privacy(
      rounds=rounds, noise_multiplier=noise_multiplier,
      max_participation=max_participation, min_separation=min_separation,
      with_epsilon=False)
  optimized = blt_optimizer.optimize(rounds=rounds,
                                     min_separation=min_separation,
                                     max_participation=max_participation)
  blt = optimized.blt
  blt_report = accounting.compute_privacy(
      rounds=rounds, noise_multiplier=noise_multiplier,
      max_participation=max_participation, min_separation=min_separation,
      blt=blt, with_epsilon=False)
  z_blt = math.sqrt(blt_report.sensitivity_squared / (2 * tree.zcdp))
  # DP-FedAvg with Poisson sampling at the rate of the population that
  # allows this MinS at the report goal, N = (MinS + 1) m: q = 1 / (MinS + 1).
  # It ASSUMES sampling the production system cannot guarantee.
  sampling_probability = 1.0 / (min_separation + 1)
  fedavg = sampled_gaussian.poisson_gaussian_privacy(
      noise_multiplier=noise_multiplier,
      sampling_probability=sampling_probability, rounds=rounds,
      delta=accounting.DEFAULT_DELTA)
  tree_std = noise_multiplier * np.sqrt(
      accounting.tree_prefix_variance(rounds))
  blt_std = z_blt * np.sqrt(accounting.blt_prefix_variance(blt, rounds))
  bands = min(min_separation + 1, BANDMF_MAX_BANDS, rounds)
  banded = bandmf.initial_strategy(rounds, bands)
  bandmf_report = accounting.compute_privacy(
      rounds=rounds, noise_multiplier=noise_multiplier,
      max_participation=max_participation, min_separation=min_separation,
      bandmf=banded, with_epsilon=False)
  z_bandmf = math.sqrt(bandmf_report.sensitivity_squared / (2 * tree.zcdp))
  bandmf_std = z_bandmf * np.sqrt(bandmf.prefix_sum_errors(banded))
  return dict(
      rounds=rounds, min_separation=min_separation,
      max_participation=max_participation,
      noise_multiplier=noise_multiplier, tree_zcdp=tree.zcdp,
      blt_zcdp=blt_report.zcdp, blt_noise_multiplier_at_tree_zcdp=z_blt,
      tree_epsilon=accounting.epsilon_pld(tree.zcdp),
      blt_epsilon=accounting.epsilon_pld(blt_report.zcdp),
      dp_fedavg_sampling_probability=sampling_probability,
      dp_fedavg_epsilon=fedavg.epsilon,
      tree_max_noise_std=float(tree_std.max()),
      blt_max_noise_std=float(blt_std.max()),
      std_ratio=float(blt_std.max() / tree_std.max()),
      bandmf_bands=bands, bandmf_zcdp=bandmf_report.zcdp,
      bandmf_epsilon=accounting.epsilon_pld(bandmf_report.zcdp),
      bandmf_noise_multiplier_at_tree_zcdp=z_bandmf,
      bandmf_max_noise_std=float(bandmf_std.max()),
      bandmf_std_ratio=float(bandmf_std.max() / tree_std.max()),
      bandmf_std_per_round=bandmf_std,
      blt_num_buffers=blt.num_buffers,
      blt_buf_decay=' '.join(f'{x:.12g}' for x in blt.buf_decay),
      blt_output_scale=' '.join(f'{x:.12g}' for x in blt.output_scale),
      tree_std_per_round=tree_std, blt_std_per_round=blt_std)


def compare_paper_rows():
  rows = []
  for table, task, rounds, min_sep, max_p, _, _, secagg in (
      paper_tables.PAPER_ROWS):
    if table != 'NWP':
      continue
    row = compare_row(rounds, min_sep, max_p)
    row.update(task=task, secagg=secagg)
    rows.append(row)
  return rows
