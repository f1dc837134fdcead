"""Exact worst-case sensitivity of DP-FTRL tree aggregation, fast.

DP-FTRL (Kairouz et al. 2021, "Practical and Private (Deep) Learning without
Sampling or Shuffling") releases noisy prefix sums of the per-round aggregates
through a binary tree: every complete dyadic block of rounds
`[k 2^h, (k+1) 2^h)` inside `[0, T)` is a tree node that receives independent
Gaussian noise of standard deviation `z C`. A client that takes part in rounds
`t_1 < ... < t_n` changes node `v` by at most `c_v C`, where `c_v` is the number
of its participations inside `v`, so the mechanism is a Gaussian mechanism of
squared l2 sensitivity `C^2 sum_v c_v^2` and

    rho = max_{t_1..t_n} sum_v c_v^2 / (2 z^2)                          (1)

zCDP, the maximum taken over all participation patterns with at most MaxP
participations that are at least MinS + 1 rounds apart (MinS counts the rounds
*between* two participations, the convention of TensorFlow Privacy and of the
paper's tables). This is Appendix D of Kairouz et al. 2021, implemented in
TensorFlow Privacy's `compute_zcdp_single_tree` by a dynamic program over
(participations, start offset, end offset, subtree size) whose cost grows like
MinS^3: 20 s for T=930, MinS=212 and minutes to hours for larger MinS.

Algorithm used here (exact, same value):

Let g = MinS + 1 be the minimum distance of two participations and B the
smallest power of two with B > g (so g < B <= 2g).

* A dyadic node of size 2^h <= g contains at most one participation (two need
  a span of g + 1 leaves). So every level below B contributes exactly 1 per
  participation whose node there is complete, whatever the pattern.
* A node of size B holds at most two participations (three need 2g + 1 <= B
  leaves, impossible since B <= 2g). Nodes of size >= B are unions of
  B-blocks, so the contribution of these levels depends only on the counts
  n_k in {0, 1, 2} of the B-blocks: it is the sum of squared counts over the
  dyadic nodes of a tree whose leaves are the complete B-blocks.
* Feasibility of a count sequence is decided by the greedy that places every
  participation at the earliest allowed leaf, and the greedy placement is also
  best for the partial region at the end of T (a leaf's number of complete
  low-level nodes only falls as the leaf moves right). The greedy needs one
  number between blocks: s, the offset of the earliest allowed leaf in the
  next block. With D = B - g, a block with n participations maps
  s -> 0 (n = 0), s -> max(0, s - D) (n = 1), s -> s + 2g - B (n = 2,
  allowed only if s < D).

So (1) is a tree dynamic program over about T / B blocks, log2(T / B) levels
deep, whose states are (subtree, s, participations) with a Pareto front over
(s at exit, value). Subtrees of equal size share their tables, which are kept
between calls with the same MinS and MaxP (a sweep over rounds reuses them).

When MaxP binds, a table keeps every count up to MaxP, and merging two
subtrees is a max-plus convolution over the counts. Above 64 counts the
tables are dense NumPy arrays (counts x exit offsets; wide ones only over
the offsets at which some value rises; `tree_dense.py`, the engine) and
`merge_dense` visits only the
pairs of counts that can hold a maximum: the ends of the range and the
places where the increments of a table fall (its docstring has the proof),
and of those only the pairs that can beat the values already found. The
sums of squares are neither convex nor concave in the count, but their
increments fall rarely, so most pairs are never visited (small tables are
merged over every pair, which is cheaper there). The dense program
runs left to right over each tree's largest complete nodes (the binary
digits of its block count), so it needs tables at every entry offset only
for complete nodes.

Restarts (a new tree starting at given rounds) fit the same program: the run
is a sequence of trees, the offset s and the participation budget carry across
tree boundaries, and the value is the sum over trees. The result is the exact
worst case under MaxP and MinS holding across the whole run, hence a valid
(and the tightest) upper bound on the sensitivity; it never exceeds the
composition of independent per-tree bounds. Between trees, the states drop
the counts from which no pattern can reach the value of a feasible one
(`tree_restarts.drop_hopeless_counts`).
"""

import bisect
import functools
from typing import Dict, Iterable, List, Sequence, Tuple

import numpy as np

from dpftrl_tff import checks
from dpftrl_tff.accounting import tree_dense
from dpftrl_tff.accounting import tree_restarts
from dpftrl_tff.accounting.tree_dense import compact
from dpftrl_tff.accounting.tree_dense import DenseTable
from dpftrl_tff.accounting.tree_dense import INFEASIBLE
from dpftrl_tff.accounting.tree_dense import merge_dense
from dpftrl_tff.accounting.tree_dense import running_max_along_exits
from dpftrl_tff.accounting.tree_dense import table_to_dense

# A Pareto front: (exit offset s, value) pairs, sorted by s ascending with
# values strictly increasing, so no pair is dominated (smaller s is better,
# larger value is better).
_Front = List[Tuple[int, int]]
_Table = Dict[int, _Front]   # participations -> front


def _pareto(pairs: Iterable[Tuple[int, int]]) -> _Front:
  front: _Front = []
  best = -1
  for s, value in sorted(pairs, key=lambda p: (p[0], -p[1])):
    if value > best:
      front.append((s, value))
      best = value
  return front


def _merge(table: Dict[int, Dict[int, int]], n: int, s: int, value: int):
  row = table.setdefault(n, {})
  if row.get(s, -1) < value:
    row[s] = value


def _finish(table: Dict[int, Dict[int, int]],
            counts_are_free: bool = False) -> _Table:
  fronts = {n: _pareto(row.items()) for n, row in table.items()}
  return _drop_dominated_counts(fronts) if counts_are_free else fronts


def _drop_dominated_counts(table: _Table) -> _Table:
  """Drops entries another entry beats with more participations.

  Valid only when the participation budget cannot bind (MaxP at least the
  most participations the whole run can hold): then a subtree entry
  (n, s, v) is as good as any (n', s', v') with n >= n', s <= s', v >= v' in
  every completion, since ancestors add n^2-type bonuses increasing in n and
  a smaller exit offset s leaves every later placement open. What remains is
  a staircase of at most min(n range, s range) entries.
  """
  kept: _Table = {}
  best: _Front = []   # Pareto front over (s, v) of entries with larger n.
  for n in sorted(table, reverse=True):
    survivors = []
    for s, value in table[n]:
      i = bisect.bisect_right(best, (s, float('inf'))) - 1
      if i < 0 or best[i][1] < value:
        survivors.append((s, value))
    if survivors:
      kept[n] = survivors
      best = _pareto(best + survivors)
  return kept


class _BlockTree:
  """Tables of the block-level tree program for one (MinS, MaxP)."""

  def __init__(self, min_separation: int, max_participation: int,
               counts_are_free: bool = False):
    self.counts_are_free = counts_are_free
    # Dense tables when the count can bind and be large.
    self.dense = (not counts_are_free and
                  max_participation > tree_dense.TUNING.dense_min_cap)
    self._dense_memo: Dict[Tuple[int, int], DenseTable] = {}
    self.gap = min_separation + 1
    self.block = 1 << self.gap.bit_length()          # smallest 2^h > gap
    self.levels_below = self.block.bit_length() - 1  # h1, levels of size < B
    self.slack = self.block - self.gap               # D
    self.cap = max_participation
    self._memo: Dict[Tuple[int, int], _Table] = {}

  def leaf(self, s: int) -> _Table:
    """One complete B-block entered at offset s."""
    h1 = self.levels_below
    table = {0: [(0, 0)], 1: [(max(0, s - self.slack), 1 + h1)]}
    if self.cap >= 2 and s < self.slack:
      table[2] = [(s + 2 * self.gap - self.block, 4 + 2 * h1)]
    if self.cap < 1:
      del table[1]
    return table

  def run(self, size: int, s: int) -> _Table:
    """Tables for `size` consecutive complete blocks (TFP's tree split)."""
    key = (size, s)
    if key in self._memo:
      return self._memo[key]
    if size == 1:
      result = self.leaf(s)
    else:
      power = 1 << (size.bit_length() - 1)
      is_node = power == size
      left_size = size // 2 if is_node else power
      left = self.run(left_size, s)
      acc: Dict[int, Dict[int, int]] = {}
      for n1, front1 in left.items():
        for s_mid, v1 in front1:
          right = self.run(size - left_size, s_mid)
          for n2, front2 in right.items():
            n = n1 + n2
            if n > self.cap:
              continue
            bonus = n * n if is_node else 0
            for s_out, v2 in front2:
              _merge(acc, n, s_out, v1 + v2 + bonus)
      result = _finish(acc, self.counts_are_free)
    self._memo[key] = result
    return result

  def _dense_node(self, size: int, s: int) -> DenseTable:
    """`run` of a complete node of `size` (a power of two) blocks, dense."""
    key = (size, s)
    if key in self._dense_memo:
      return self._dense_memo[key]
    if size == 1:
      result = compact(running_max_along_exits(
          table_to_dense(self.leaf(s), self.gap)), np.arange(self.gap))
    else:
      result = merge_dense(
          self._dense_node(size // 2, s),
          functools.partial(self._dense_node, size // 2), self.cap,
          is_node=True)
    self._dense_memo[key] = result
    return result

  def segment(self, length: int, s: int) -> _Table:
    """Tables for one whole tree of `length` leaves entered at offset s.

    Exit offsets are relative to the end of the tree; values count every
    complete dyadic node of the tree.
    """
    num_blocks, rest = divmod(length, self.block)
    if num_blocks:
      body = self.run(num_blocks, s)
    else:
      body = {0: [(s, 0)]}
    if rest == 0:
      return body
    base = num_blocks * self.block
    acc: Dict[int, Dict[int, int]] = {}
    for n1, front in body.items():
      for s_mid, v1 in front:
        # Greedy earliest positions in the partial region [base, length).
        greedy = list(range(s_mid, rest, self.gap))[:self.cap - n1]
        for k in range(len(greedy) + 1):
          placed = greedy[:k]
          s_out = (max(0, placed[-1] + self.gap - rest) if placed
                   else max(0, s_mid - rest))
          value = v1 + sum(self._low_count(base + p, length) for p in placed)
          _merge(acc, n1 + k, s_out, value)
    return _finish(acc, self.counts_are_free)

  def append_tree(self, table: DenseTable, length: int) -> DenseTable:
    """The dense states after one more whole tree of `length` leaves.

    `table` holds, by participations so far and by the offset at which the
    tree is entered, the best value so far. The tree's largest complete
    nodes of B-blocks (the binary digits of its block count, TFP's split)
    are merged one after the other as right subtrees, then its partial region
    at the end: the states need only their own entry offsets, where merging
    the tree as one right subtree would need its table at every offset.
    Exit offsets of the result are relative to the end of the tree.
    """
    num_blocks, rest = divmod(length, self.block)
    done = 0
    while done < num_blocks:
      size = 1 << ((num_blocks - done).bit_length() - 1)
      table = merge_dense(table, functools.partial(self._dense_node, size),
                           self.cap, is_node=False)
      done += size
    if not rest:
      return table
    body = table.values
    base = num_blocks * self.block
    rows = min(self.cap - table.first,
               body.shape[0] - 1 + (rest - 1) // self.gap + 1) + 1
    out = np.full((rows, self.gap), INFEASIBLE, np.int64)
    for j, s_mid in enumerate(table.exits.tolist()):
      column = body[:, j]
      # Greedy earliest positions in the partial region [base, length).
      greedy = list(range(s_mid, rest, self.gap))
      gain = 0
      for k in range(len(greedy) + 1):
        if k:
          gain += self._low_count(base + greedy[k - 1], length)
          s_out = max(0, greedy[k - 1] + self.gap - rest)
        else:
          s_out = max(0, s_mid - rest)
        span = min(column.shape[0], rows - k)
        if span <= 0:
          break
        candidate = np.where(column[:span] >= 0, column[:span] + gain,
                             INFEASIBLE)
        np.maximum(out[k:k + span, s_out], candidate,
                   out=out[k:k + span, s_out])
    return compact(running_max_along_exits(out), np.arange(self.gap),
                    table.first)

  def _low_count(self, leaf: int, length: int) -> int:
    """Complete nodes of size < B that contain `leaf` in a tree of `length`."""
    return sum(1 for h in range(self.levels_below)
               if (leaf >> h) < (length >> h))


@functools.lru_cache(maxsize=64)
def _block_tree(min_separation: int, max_participation: int,
                counts_are_free: bool, dense: bool = True) -> _BlockTree:
  program = _BlockTree(min_separation, max_participation, counts_are_free)
  program.dense = program.dense and dense
  return program


def _validate(total_rounds, max_participation, min_separation):
  total_rounds = checks.check_int(total_rounds, 'rounds', minimum=1)
  max_participation = checks.check_int(
      max_participation, 'max_participation', minimum=1)
  min_separation = checks.check_int(min_separation, 'min_separation',
                                    minimum=0)
  return total_rounds, max_participation, min_separation


def max_possible_participation(total_rounds: int, min_separation: int) -> int:
  """Largest number of participations that fit in `total_rounds` rounds.

  Participations at least `min_separation + 1` rounds apart:
  floor((T - 1) / (MinS + 1)) + 1.
  """
  total_rounds = checks.check_int(total_rounds, 'rounds', minimum=1)
  min_separation = checks.check_int(min_separation, 'min_separation',
                                    minimum=0)
  return (total_rounds - 1) // (min_separation + 1) + 1


def _restart_segments(total_rounds: int,
                      restart_rounds: Sequence[int]) -> List[int]:
  """Tree lengths for a run of `total_rounds` with trees starting anew."""
  starts = sorted(set(int(r) for r in restart_rounds))
  for r in starts:
    if r <= 0:
      raise ValueError(
          f'restart_rounds must be rounds >= 1 at which a new tree starts, '
          f'got {r}.')
  starts = [r for r in starts if r < total_rounds]
  bounds = [0] + starts + [total_rounds]
  return [b - a for a, b in zip(bounds[:-1], bounds[1:])]


def max_sensitivity_squared(total_rounds: int, max_participation: int,
                            min_separation: int,
                            restart_rounds: Sequence[int] = (),
                            _fast_path: bool = True) -> int:
  """Worst-case sum over tree nodes of squared participation counts.

  Args:
    total_rounds: T, the number of rounds (leaves).
    max_participation: MaxP, at most this many participations per client.
    min_separation: MinS, at least this many rounds between two
      participations of the same client (positions differ by >= MinS + 1).
    restart_rounds: rounds (0-based, >= 1) at which a new tree starts. Rounds
      at or after `total_rounds` are ignored. Empty: one tree.

  Returns:
    max over admissible patterns of sum_v c_v^2, an integer. The squared l2
    sensitivity of all the tree nodes is this times C^2.

  When MaxP is at least the participations that fit (the default worst
  case), the count cannot bind and the program keeps only entries no other
  beats with more participations (`_drop_dominated_counts`): any T up to
  10^5 in milliseconds. A binding MaxP keeps every count (dense tables and
  `merge_dense` above 64 counts; across restarts only the counts that can
  still reach the worst case); docs/performance.md has timings.
  """
  total_rounds, max_participation, min_separation = _validate(
      total_rounds, max_participation, min_separation)
  segments = _restart_segments(total_rounds, restart_rounds)
  possible = max_possible_participation(total_rounds, min_separation)
  cap = min(max_participation, possible)
  program = _block_tree(min_separation, cap,
                        _fast_path and cap == possible, _fast_path)
  if program.dense:
    # Cumulative dense states over (participations so far, entry offset of
    # the next tree); a tree is merged like a right subtree.
    table = DenseTable(np.zeros((1, 1), np.int64), [0])
    if len(segments) > 1:
      floor = tree_restarts.packed_value(segments, program.gap, cap)
      ceilings = tree_restarts.RemainingCeilings(program, segments)
    for k, length in enumerate(segments):
      table = program.append_tree(table, length)
      if k + 1 < len(segments):
        room = ceilings.after(k + 1, cap - tree_restarts.table_counts(table))
        table = tree_restarts.drop_hopeless_counts(table, room, floor)
    # The counts from 1 on (dropped counts are at least 1).
    return int(table.values[1 - min(table.first, 1):, -1].max())
  # states: (participations so far, entry offset of the next tree) -> value.
  states = {(0, 0): 0}
  for length in segments:
    next_states: Dict[Tuple[int, int], int] = {}
    for (n0, s), v0 in states.items():
      for n1, front in program.segment(length, s).items():
        n = n0 + n1
        if n > cap:
          continue
        for s_out, v1 in front:
          key = (n, s_out)
          if next_states.get(key, -1) < v0 + v1:
            next_states[key] = v0 + v1
    # Keep only the Pareto front over s for every n.
    table: Dict[int, Dict[int, int]] = {}
    for (n, s_out), v in next_states.items():
      _merge(table, n, s_out, v)
    states = {(n, s_out): v
              for n, front in _finish(table, program.counts_are_free).items()
              for s_out, v in front}
  return max(v for (n, _), v in states.items() if n >= 1)


def zcdp_from_sensitivity_squared(noise_multiplier: float,
                                  sensitivity_squared: float) -> float:
  """rho = Delta^2 / (2 z^2) for a Gaussian mechanism with std z * C."""
  return sensitivity_squared / (2.0 * noise_multiplier**2)


def compute_zcdp_single_tree(noise_multiplier: float, total_rounds: int,
                             max_participation: int,
                             min_separation: int) -> float:
  """rho-zCDP of DP-FTRL without restarts (Kairouz et al. 2021, App. D).

  Equal to TensorFlow Privacy's
  `tree_aggregation_accountant.compute_zcdp_single_tree` (same arguments, same
  conventions) but computed by the block program of this module, thousands of
  times faster at production sizes.

  Args:
    noise_multiplier: z > 0; the tree noise std is z times the clip norm.
    total_rounds: T >= 1.
    max_participation: MaxP >= 1 (larger than possible is allowed).
    min_separation: MinS >= 0 rounds between two participations.

  Returns:
    rho = max sum_v c_v^2 / (2 z^2).
  """
  noise_multiplier = checks.check_positive(noise_multiplier,
                                           'noise_multiplier')
  return zcdp_from_sensitivity_squared(
      noise_multiplier,
      max_sensitivity_squared(total_rounds, max_participation,
                              min_separation))


def compute_zcdp_with_restarts(noise_multiplier: float, total_rounds: int,
                               max_participation: int, min_separation: int,
                               restart_rounds: Sequence[int]) -> float:
  """rho-zCDP of DP-FTRL whose tree restarts at `restart_rounds`.

  Each restart starts a fresh tree with fresh noise, so the released nodes are
  the complete dyadic nodes of every tree, all with noise std z C. The squared
  sensitivity is the worst case, over participation patterns with MaxP and
  MinS holding across the whole run (across restarts), of the sum over all
  trees of sum_v c_v^2; it is computed exactly (see module docstring), so it
  is a valid upper bound on the privacy loss.
  """
  noise_multiplier = checks.check_positive(noise_multiplier,
                                           'noise_multiplier')
  return zcdp_from_sensitivity_squared(
      noise_multiplier,
      max_sensitivity_squared(total_rounds, max_participation, min_separation,
                              restart_rounds))


def paper_restart_rounds(total_rounds: int, *, warmup: int = 128,
                         frequency: int = 1024) -> List[int]:
  """First rounds of the new trees for the paper's schedule 128 + 1024 i.

  This follows the implementation the paper deployed, TensorFlow Privacy's
  `RestartQuery` with `PeriodicRoundRestartIndicator(period=frequency,
  warmup=warmup)`: the indicator fires while round warmup - 1 (0-based) is
  aggregated, so the trees start at rounds warmup + frequency i (the first
  tree has `warmup` leaves). Algorithm 1's box, read literally ("restart after
  round t in R"), would start them one round later; the tests pin this
  schedule to TFP's indicator.
  """
  total_rounds = checks.check_int(total_rounds, 'rounds', minimum=1)
  warmup = checks.check_int(warmup, 'restart_warmup', minimum=1)
  frequency = checks.check_int(frequency, 'restart_frequency', minimum=1)
  return list(range(warmup, total_rounds, frequency))
