"""Pruning between trees for the tree accountant with restarts (`tree.py`).

With restarts the run is a sequence of trees; between two trees the dense
states drop the lowest participation counts from which no pattern can reach
the value of a feasible one (`drop_hopeless_counts`): best value so far
plus an exact integer ceiling of what the later trees can still add
(`RemainingCeilings`) below the value of the densest feasible pattern
(`packed_value`). Nothing a worst case needs is dropped, so the value is
unchanged (`tests/accounting/accounting_tree_test.py` checks it against brute force
with the worst case itself as the floor).
"""

import collections
import fractions
from typing import Sequence, Tuple

import numpy as np

from dpftrl_tff.accounting.tree_dense import DenseTable


def packed_value(segments: Sequence[int], gap: int, count: int) -> int:
  """sum_v c_v^2 of the pattern 0, g, 2g, ... with `count` participations.

  A feasible pattern (count at most the participations that fit), so a
  lower bound of the worst case; the trees are `segments` long, one after
  the other, and v runs over their complete dyadic nodes.
  """
  positions = np.arange(count, dtype=np.int64) * gap
  lengths = np.asarray(segments, np.int64)
  starts = np.cumsum(lengths) - lengths
  trees = np.searchsorted(starts, positions, side='right') - 1
  inside = positions - starts[trees]
  value, level = 0, 0
  while (1 << level) <= lengths.max():
    nodes = inside >> level
    complete = nodes < (lengths[trees] >> level)
    # Node ids distinct across trees: the tree, then the node in it.
    ids = trees[complete] * (int(lengths.max()) + 1) + nodes[complete]
    counts = np.unique(ids, return_counts=True)[1]
    value += int(np.dot(counts, counts))
    level += 1
  return value


class RemainingCeilings:
  """Upper bounds, exact integers, of the value the trees after the k-th
  can still add.

  The trees of one length L have, entered at offset 0 (the best entry),
  a best value f_L(n) with n participations. Its least concave majorant
  f^_L has decreasing slopes; for trees of lengths L_1, ..., L_r,
  max sum_j f_{L_j}(n_j) with sum_j n_j <= b is at most the sum of the b
  largest slopes of all the f^_{L_j} together (every slope used once per
  tree and per unit of n), since that sum is the max-plus convolution of
  concave functions, and dropping the separation across tree boundaries
  and entering every tree at offset 0 only allow more.

  The slopes are rationals rise / run of integers; they are ordered
  exactly (`_decreasing_slopes`) and the bound at budget b is summed as
  whole rises plus floor(rise * part / run) for the last, partly used
  segment. Every completion is an integer at most the rational bound, so
  at most its floor: the ceilings are exact, with no rounding margin.
  """

  def __init__(self, program, segments: Sequence[int]):
    """program: the `tree._BlockTree` of the run's MinS and MaxP."""
    self.segments = list(segments)
    empty = DenseTable(np.zeros((1, 1), np.int64), [0])
    self.hulls = {}
    for length in set(self.segments[1:]):
      best = program.append_tree(empty, length).values[:, -1]
      self.hulls[length] = _concave_slopes(best[best >= 0])

  def after(self, done: int, budgets: np.ndarray) -> np.ndarray:
    """The ceilings (int64) at the given budgets (participations left), the
    trees from index `done` on."""
    rises, runs, trees = [], [], []
    for length, count in collections.Counter(self.segments[done:]).items():
      hull_rises, hull_runs = self.hulls[length]
      rises.append(hull_rises)
      runs.append(hull_runs)
      trees.append(np.full(hull_rises.size, count, np.int64))
    rises, runs = np.concatenate(rises), np.concatenate(runs)
    budgets = np.asarray(budgets, np.int64)
    if not rises.size:
      return np.zeros(budgets.shape, np.int64)
    # A hull segment of `count` trees is `count` segments of its slope.
    order = _decreasing_slopes(rises, runs)
    trees = np.concatenate(trees)[order]
    rises, runs = rises[order] * trees, runs[order] * trees
    ends = np.concatenate(([0], np.cumsum(runs)))
    values = np.concatenate(([0], np.cumsum(rises)))
    budgets = np.minimum(budgets, ends[-1])
    segment = np.clip(np.searchsorted(ends, budgets, side='right') - 1, 0,
                      rises.size - 1)
    part = budgets - ends[segment]
    # floor(rise * part / run) without overflow: rise = whole run + rest.
    whole, rest = np.divmod(rises[segment], runs[segment])
    return values[segment] + whole * part + (rest * part) // runs[segment]


def _decreasing_slopes(rises: np.ndarray, runs: np.ndarray) -> np.ndarray:
  """The order of the slopes rises / runs (positive integers), largest
  first, exactly.

  Two different slopes a / b and c / d differ by at least 1 / (b d), more
  than the rounding of both floats (2^-53 relative each) when
  max(a) max(b) < 2^51, so a float sort orders them exactly there; equal
  slopes may come in any order (the sums do not change). Above that bound
  the slopes are sorted as fractions.
  """
  if int(rises.max()) * int(runs.max()) < 2**51:
    return np.argsort(-(rises / runs), kind='stable')
  slopes = [fractions.Fraction(int(a), int(b)) for a, b in zip(rises, runs)]
  return np.array(sorted(range(len(slopes)), key=lambda i: -slopes[i]),
                  np.int64)


def _concave_slopes(values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """Rises and runs (integers) of the least concave majorant of values[n]
  over n = 0..N (the upper hull): the slopes rise / run decrease and only
  the positive ones are kept."""
  hull = [0]
  for n in range(1, values.size):
    while len(hull) >= 2:
      a, b = hull[-2], hull[-1]
      # b lies on or below the chord from a to n: drop it.
      if (values[b] - values[a]) * (n - a) <= (values[n] - values[a]) * (b - a):
        hull.pop()
      else:
        break
    hull.append(n)
  hull = np.array(hull)
  runs = np.diff(hull)
  rises = np.diff(values[hull]).astype(np.int64)
  keep = rises > 0
  return rises[keep], runs[keep]


def table_counts(table: DenseTable) -> np.ndarray:
  """The participation count of each row of `table`."""
  return table.first + np.arange(table.values.shape[0])


def drop_hopeless_counts(table: DenseTable, ceiling: np.ndarray,
                          floor: int) -> DenseTable:
  """The states without the lowest counts from which no pattern reaches
  `floor`.

  A count i (row of `table`) whose best value so far plus the most the
  later trees can add with the budget left, ceiling[row] (for budget
  cap - i, `RemainingCeilings.after`), stays below `floor` (the value
  of a feasible pattern, at most the worst case) is on no worst-case
  pattern: the maximum over the patterns through the other counts is the
  same. The lowest counts up to the first that is not hopeless are
  dropped (the table then starts at a later count), and the worst case,
  which needs at least one participation, is then among the counts left.
  All three terms are exact integers (`RemainingCeilings`), so the test
  is exact.
  """
  best = table.values[:, -1]   # cumulative: the best over the exits
  hopeless = best + ceiling < floor
  prefix = int(np.argmin(hopeless))   # the first count not hopeless
  if not hopeless[prefix]:
    if not prefix:
      return table
    return DenseTable(table.values[prefix:], table.exits,
                       table.first + prefix)
  return table   # (every count hopeless: impossible, floor is feasible)
