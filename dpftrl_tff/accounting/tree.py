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
the offsets at which some value rises) and `_merge_dense` visits only the
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
(`_drop_hopeless_counts`).
"""

import bisect
import collections
import fractions
import functools
import itertools
from typing import Dict, Iterable, List, NamedTuple, Sequence, Tuple

import numpy as np

from dpftrl_tff import checks

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


_INFEASIBLE = np.int64(-(2**61))
_NO_RISE_ABOVE = np.int64(2**62)   # stands for an undefined rise in minima
_NO_RISE_BELOW = np.int64(-(2**62))  # and in maxima
_DENSE_MIN_CAP = 64
_CHUNKS = (64, 16, 4, 1)  # chunk widths of `_useful_pairs`, coarse to fine
_FEW_PAIRS = 4096  # fewer pairs are tested one by one
_BATCH = 1 << 14  # chunks of the widest width tested at once
_COMPACT_MIN_COLUMNS = 64
# A column of the left table whose every pair with its right table costs at
# most this many element updates is merged pair by pair (small tables); a
# NumPy call costs about as much as _CALL_WORK element updates.
_EVERY_PAIR_WORK = 1 << 15
_CALL_WORK = 1 << 10
# Pairs of a left column whose update costs more than _GROUP_TEST_WORK
# element updates are first tested against the floors of _FLOOR_GROUPS
# groups of exits (`_merge_descents`).
_FLOOR_GROUPS = 8
_GROUP_TEST_WORK = _CALL_WORK
# NumPy reduces along short rows slowly: `_reduce_rows` goes column by
# column up to _FEW_COLUMNS columns, `_running_max_along_exits` from
# _TALL_ROWS rows and up to _COMPACT_MIN_COLUMNS columns.
_FEW_COLUMNS = 8
_TALL_ROWS = 512


def _reduce_rows(ufunc, values: np.ndarray) -> np.ndarray:
  """ufunc.reduce(values, axis=1), column by column when there are few."""
  if values.shape[1] > _FEW_COLUMNS:
    return ufunc.reduce(values, axis=1)
  result = values[:, 0].copy()
  for column in range(1, values.shape[1]):
    ufunc(result, values[:, column], out=result)
  return result


def _running_max_along_exits(values: np.ndarray) -> np.ndarray:
  """np.maximum.accumulate(values, axis=1) in place; column by column for
  tall tables of few columns, where that is several times faster."""
  rows, columns = values.shape
  if rows < _TALL_ROWS or columns > _COMPACT_MIN_COLUMNS:
    return np.maximum.accumulate(values, axis=1, out=values)
  for column in range(1, columns):
    np.maximum(values[:, column], values[:, column - 1],
               out=values[:, column])
  return values


def _table_to_dense(table: _Table, gap: int) -> np.ndarray:
  """Pareto fronts as a dense array V[n, s] (_INFEASIBLE where absent)."""
  rows = max(table) + 1
  dense = np.full((rows, gap), _INFEASIBLE, np.int64)
  for n, front in table.items():
    for s, value in front:
      dense[n, s] = max(dense[n, s], value)
  return dense


class _DenseTable:
  """A cumulative dense table W[n, j] and its increments in n.

  Column j holds the exit offset exits[j]: W[n, j] is the best value with n
  participations and an exit offset of at most exits[j] (offsets between two
  columns have the value of the column before). Only the offsets at which
  some count's value rises are kept. Row n holds the count first + n: the
  states across restarts drop the counts that cannot matter
  (`_drop_hopeless_counts`); every other table starts at count 0.
  """

  def __init__(self, values: np.ndarray, exits=None, first: int = 0):
    self.values = values
    self.first = first
    self.exits = (np.arange(values.shape[1]) if exits is None
                  else np.asarray(exits, np.int64))
    finite = values >= 0
    self.finite = finite
    self.lasts = finite.sum(axis=0) - 1
    # Exact tables are finite on a prefix of counts in every column (removing
    # the last participation keeps a pattern feasible and its exit no later).
    self.prefix_closed = bool(np.all(finite[1:] <= finite[:-1]))

  # What the bounds of `_merge_dense` use, computed on first use (tables
  # merged pair by pair never need them).

  @functools.cached_property
  def rises(self) -> np.ndarray:
    """rises[k] = W[k + 1] - W[k]."""
    return np.diff(self.values, axis=0)

  @functools.cached_property
  def descents(self) -> np.ndarray:
    """Where rises[k] < rises[k - 1], both defined."""
    rises = self.rises
    descents = np.zeros_like(self.finite)
    descents[1:-1] = (rises[1:] < rises[:-1]) & self.finite[2:]
    return descents

  @functools.cached_property
  def count_descents(self) -> np.ndarray:
    return np.flatnonzero(_reduce_rows(np.logical_or, self.descents))

  @functools.cached_property
  def _bounded_rises(self) -> Tuple[np.ndarray, np.ndarray]:
    """The rises, undefined ones as +inf (for minima) and as -inf (maxima)."""
    defined = self.finite[1:]
    return (np.where(defined, self.rises, _NO_RISE_ABOVE),
            np.where(defined, self.rises, _NO_RISE_BELOW))

  @functools.cached_property
  def rise_prefix_max(self) -> np.ndarray:
    """Per column, the running maximum of the defined rises."""
    return np.maximum.accumulate(self._bounded_rises[1], axis=0)

  @functools.cached_property
  def rise_suffix_min(self) -> np.ndarray:
    """Per column, the suffix minimum of the defined rises."""
    return np.minimum.accumulate(self._bounded_rises[0][::-1], axis=0)[::-1]

  @functools.cached_property
  def least_rise(self) -> np.ndarray:
    """Over all columns, the least defined rise at each count."""
    return _reduce_rows(np.minimum, self._bounded_rises[0])

  @functools.cached_property
  def largest_rise(self) -> np.ndarray:
    """Over all columns, the largest defined rise at each count."""
    return _reduce_rows(np.maximum, self._bounded_rises[1])

  @functools.cached_property
  def least_rise_suffix_min(self) -> np.ndarray:
    return np.minimum.accumulate(self.least_rise[::-1])[::-1]

  @functools.cached_property
  def largest_rise_prefix_max(self) -> np.ndarray:
    return np.maximum.accumulate(self.largest_rise)

  @functools.cached_property
  def descent_rows(self) -> np.ndarray:
    """Rows m, least_rise[m], largest_rise[m - 1] and W[m, last column]
    of the counts m at which some column descends."""
    m = self.count_descents
    return np.stack([m, self.least_rise[m], self.largest_rise[m - 1],
                     self.values[m, -1]])

  @functools.cached_property
  def end_group_bounds(self) -> Tuple[List[int], np.ndarray, np.ndarray]:
    """`_end_groups` of this table's columns."""
    return _end_groups(self.lasts)

  @functools.cached_property
  def end_groups(self) -> List[Tuple[int, int, int, int]]:
    """(B, t0, t1, b): columns t0 <= t < t1 whose last finite count is
    B >= 1, and the largest rise b at B - 1 over all columns."""
    lasts, starts, stops = self.end_group_bounds
    rises = self.largest_rise[np.array(lasts, np.int64) - 1].tolist()
    return list(zip(lasts, starts.tolist(), stops.tolist(), rises))

  @functools.cached_property
  def empty_is_zero(self) -> bool:
    """Whether W[0, j] = 0 in every column (an empty subtree)."""
    return not self.values[0].any()

  # Halves of condition (1) of `_merge_dense` as ranges of partners, this
  # table on the right (counts m, over all columns) or on the left (rows i
  # of one column). `_merge_descents` searches the same arrays for every
  # plan at once: the least m with b'(m - 1) >= rise possible is
  # 1 + searchsorted(largest_rise_prefix_max, rise), the least i with
  # a'(i - 1) > rise possible 1 + searchsorted(rise_prefix_max[:, column],
  # rise, side='right').

  def counts_rising_below(self, rises: np.ndarray) -> np.ndarray:
    """The m with b'(m) < rise possible lie below this, for each rise."""
    return self.least_rise_suffix_min.searchsorted(rises)

  def rows_rising_at_most(self, column: int, rises: np.ndarray) -> np.ndarray:
    """The i with a'(i) <= rise possible lie below this, for each rise."""
    return self.rise_suffix_min[:, column].searchsorted(rises, side='right')


def _compact(values: np.ndarray, exits: np.ndarray,
             first: int = 0) -> _DenseTable:
  """A cumulative table without its infeasible last counts, and without the
  columns equal to the one before.

  Counts above the last feasible one (the bound on the counts of a merge
  is often far above it: a block holds two participations only when
  entered early enough) are dropped. Columns only for wide tables: with few
  exit offsets nearly every column differs, and tables over different
  offsets would cost a gather at every merge.
  """
  # Cumulative: a count feasible at some offset is feasible at the last.
  feasible = np.flatnonzero(values[:, -1] >= 0)
  if feasible.size:
    values = values[:feasible[-1] + 1]
  if values.shape[1] <= _COMPACT_MIN_COLUMNS:
    return _DenseTable(values, exits, first)
  keep = np.ones(values.shape[1], bool)
  keep[1:] = np.any(values[:, 1:] != values[:, :-1], axis=0)
  if keep.all():
    return _DenseTable(values, exits, first)
  return _DenseTable(values[:, keep], exits[keep], first)


class _Expanded:
  """A table seen at the exit offsets `exits` of a merge, rows on demand.

  `exits` is sorted and holds every exit offset of the table (and more);
  the value at an offset is that of the table's last column at or before
  it. Only the rows a merge uses are gathered.
  """

  def __init__(self, table: _DenseTable, exits: np.ndarray):
    self.table = table
    self.count = table.values.shape[0]
    self.column = None
    self.missing = 0
    if table.exits.size != exits.size:
      column = table.exits.searchsorted(exits, side='right') - 1
      self.column = column
      # The offsets before the table's first exit come first: infeasible.
      self.missing = int(column.searchsorted(0))

  @property
  def empty_is_zero(self) -> bool:
    return self.table.empty_is_zero and not self.missing

  @functools.cached_property
  def end_groups(self) -> List[Tuple[int, int, int, int]]:
    """`_DenseTable.end_groups` at the merge's exit offsets."""
    if self.column is None:
      return self.table.end_groups
    # A group of table columns [c0, c1) covers the offsets whose column is
    # in it, a range since `column` is nondecreasing.
    _, starts, stops = self.table.end_group_bounds
    return [(last, t0, t1, rise) for (last, _, _, rise), t0, t1 in zip(
        self.table.end_groups, self.column.searchsorted(starts).tolist(),
        self.column.searchsorted(stops).tolist()) if t0 < t1]

  def __getitem__(self, rows) -> np.ndarray:
    """Rows `rows` (an index, a slice or an index array) at `exits`."""
    values = self.table.values[rows]
    if self.column is None:
      return values
    values = values.take(self.column, axis=-1)
    values[..., :self.missing] = _INFEASIBLE
    return values

  def row_span(self, row: int, start: int, stop: int) -> np.ndarray:
    """Row `row` at the exits `start <= t < stop`."""
    if self.column is None:
      return self.table.values[row, start:stop]
    values = self.table.values[row].take(self.column[start:stop])
    values[:max(0, self.missing - start)] = _INFEASIBLE
    return values

  def rows_at(self, rows: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Rows `rows` at the exits `indices` (sorted), one row per row."""
    if self.column is None:
      return self.table.values[rows[:, None], indices]
    values = self.table.values[rows[:, None], self.column[indices]]
    values[:, :int(indices.searchsorted(self.missing))] = _INFEASIBLE
    return values

  def last_column(self, span: int) -> np.ndarray:
    """The first `span` rows at the largest of `exits`."""
    return self.table.values[:span, -1]


def _end_groups(lasts: np.ndarray) -> Tuple[List[int], np.ndarray,
                                             np.ndarray]:
  """B, t0, t1: columns t0 <= t < t1 whose last finite count is B >= 1."""
  changes = np.flatnonzero(lasts[1:] != lasts[:-1]) + 1
  starts = np.concatenate(([0], changes))
  stops = np.concatenate((changes, [lasts.size]))
  group_lasts = lasts[starts]
  keep = group_lasts >= 1
  return group_lasts[keep].tolist(), starts[keep], stops[keep]


def _segments(anchors: np.ndarray, firsts: np.ndarray,
              stops: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """Pairs (j, k) for k in [firsts[j], stops[j]), flattened."""
  lengths = np.maximum(stops - firsts, 0)
  total = int(lengths.sum())
  repeated = np.repeat(anchors, lengths)
  offsets = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths,
                                         lengths)
  return repeated, np.repeat(firsts, lengths) + offsets


def _useful_span(bound: np.ndarray, current: np.ndarray) -> Tuple[int, int]:
  """The shortest [lo, hi) outside which `bound` <= `current`."""
  useful = (bound > current).nonzero()[0]
  if not useful.size:
    return 0, 0
  return int(useful[0]), int(useful[-1]) + 1


def _window_minima(floor: np.ndarray) -> Dict[int, np.ndarray]:
  """width K -> min(floor[n:n + K]) for every n, padded past the end.

  For the chunk widths of `_useful_pairs`; positions past the end of `floor`
  count as +infinity (no target there).
  """
  padded = np.concatenate(
      [floor, np.full(_CHUNKS[0], _NO_RISE_ABOVE, np.int64)])
  minima = {1: padded}
  width = 1
  while width < _CHUNKS[0]:
    current = minima[width]
    shifted = np.concatenate(
        [current[width:], np.full(width, _NO_RISE_ABOVE, np.int64)])
    width *= 2
    minima[width] = np.minimum(current, shifted)
  return minima


def _chunked_size(size: int) -> int:
  """`size` rounded up to a multiple of the widest chunk."""
  return -(-size // _CHUNKS[0]) * _CHUNKS[0]


def _block_maxima(values: np.ndarray) -> Dict[int, np.ndarray]:
  """width K -> max(values[c K:(c + 1) K]) for every chunk c (padded),
  each width from the next narrower one."""
  size = _chunked_size(values.size)
  padded = np.full(size, _INFEASIBLE, np.int64)
  padded[:values.size] = values
  maxima = {1: padded}
  for narrower, width in zip(_CHUNKS[::-1], _CHUNKS[-2::-1]):
    maxima[width] = _reduce_rows(
        np.maximum, maxima[narrower].reshape(-1, width // narrower))
  return maxima


def _concatenate_padded(arrays: Sequence[np.ndarray]
                        ) -> Tuple[np.ndarray, np.ndarray]:
  """arrays one after the other, each starting at a multiple of _CHUNKS[0].

  Returns the concatenation (gaps _INFEASIBLE) and the start of each array.
  """
  sizes = np.array([_chunked_size(x.size) for x in arrays])
  starts = np.cumsum(sizes) - sizes
  flat = np.full(int(sizes.sum()), _INFEASIBLE, np.int64)
  for start, x in zip(starts.tolist(), arrays):
    flat[start:start + x.size] = x
  return flat, starts


def _useful_pairs(bases: np.ndarray, firsts: np.ndarray, stops: np.ndarray,
                  anchor_values: np.ndarray, offsets: np.ndarray,
                  partner: np.ndarray, floor: np.ndarray,
                  floor_minima: Dict[int, np.ndarray], slope: int = 0
                  ) -> Tuple[np.ndarray, np.ndarray]:
  """Pairs of segments q and k in [firsts[q], stops[q]) that beat a floor.

  Returns exactly the (q, k) with
  anchor_values[q] + partner[offsets[q] + k] > floor[bases[q] + k]
  (offsets are multiples of _CHUNKS[0]; `floor_minima` caches
  `_window_minima(floor - slope * n)`, filled on first need), found
  without listing every pair when there are many: the ranges of k are cut
  into aligned chunks of width K (64, 16, 4, then 1) and a chunk is dropped,
  with every pair in it, when the anchor value plus the largest partner value
  in the chunk does not exceed the smallest floor over its targets (so no
  pair in it passes); a kept chunk is split in four. The ranges go through
  in batches of about _BATCH widest chunks, whose arrays stay in cache.

  The chunks are tested with a line of `slope` taken off: with
  p(j) = partner[j] - slope j and f(n) = floor[n] - slope n, a pair passes
  if and only if anchor_values[q] + slope (offsets[q] - bases[q]) +
  p(offsets[q] + k) > f(bases[q] + k). Any slope gives the same pairs; one
  close to the rate at which partner and floor grow makes the maxima and
  minima over a chunk much closer to its single values, so that many more
  chunks are dropped whole.
  """

  def beating(seg, k):
    passed = (anchor_values[seg] + partner[offsets[seg] + k] >
              floor[bases[seg] + k])
    return seg[passed], k[passed]

  if np.maximum(stops - firsts, 0).sum() <= _FEW_PAIRS:
    return beating(*_segments(np.arange(bases.size), firsts, stops))
  if not floor_minima:
    floor_minima.update(_window_minima(
        floor - slope * np.arange(floor.size, dtype=np.int64)))
  partner_maxima = _block_maxima(np.where(
      partner > _INFEASIBLE,
      partner - slope * np.arange(partner.size, dtype=np.int64),
      _INFEASIBLE))
  shifted = anchor_values + slope * (offsets - bases)
  partner_chunks = {width: offsets // width for width in _CHUNKS}
  nonempty = np.flatnonzero(stops > firsts)
  width = _CHUNKS[0]
  chunk_firsts = firsts[nonempty] // width
  chunk_stops = (stops[nonempty] - 1) // width + 1
  ends = np.cumsum(chunk_stops - chunk_firsts)
  cuts = np.searchsorted(ends, np.arange(1, ends[-1] // _BATCH + 1) * _BATCH)
  found_seg, found_k = [], []
  for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, nonempty.size]):
    if lo == hi:
      continue
    seg, chunk = _segments(nonempty[lo:hi], chunk_firsts[lo:hi],
                           chunk_stops[lo:hi])
    width = _CHUNKS[0]
    for narrower in _CHUNKS[1:]:
      passed = (shifted[seg] +
                partner_maxima[width][partner_chunks[width][seg] + chunk] >
                floor_minima[width][bases[seg] + chunk * width])
      seg, chunk = seg[passed], chunk[passed]
      split = width // narrower
      seg = np.repeat(seg, split)
      chunk = (np.repeat(chunk * split, split) +
               np.tile(np.arange(split), chunk.size))
      inside = ((chunk + 1) * narrower > firsts[seg]) & (
          chunk * narrower < stops[seg])
      seg, chunk = seg[inside], chunk[inside]
      width = narrower
    seg, chunk = beating(seg, chunk)
    found_seg.append(seg)
    found_k.append(chunk)
  return np.concatenate(found_seg), np.concatenate(found_k)


class _Plan(NamedTuple):
  """A column of the left table at which some row steps up, and its partner."""
  column: int              # the column of the left table
  values: np.ndarray       # a = L[:, column]
  steps: np.ndarray        # the rows i with a[i] above the column before
  stepped: np.ndarray      # a where it steps, _INFEASIBLE elsewhere
  right: _DenseTable       # R entered at the column's exit offset
  r_values: _Expanded      # the right table at the merge's exit offsets


def _merge_dense(left: _DenseTable, right_for, cap: int,
                 is_node: bool) -> _DenseTable:
  """Max-plus merge of a left subtree with the right one entered where it ends.

  out[n, t] = max over s, i of L[i, s] + R_s[n - i, t] (+ n^2 for a complete
  node), every table in the cumulative form (exit offset at most s), R_s the
  right subtree entered at offset s. Exact, but only pairs that can hold the
  maximum are visited:

  * Offsets: when L[i, s] == L[i, s - 1], the pair (i, s) is bounded by
    (i, s - 1), since R_{s-1} >= R_s (entering earlier allows every pattern
    entering later allows). So row i of L is used only at the offsets s
    where its value steps up.
  * Counts: for fixed s and t let a = L[:, s], finite on [0, A], and
    b = R_s[:, t], finite on [0, B]; f(i) = a(i) + b(n - i) on
    [lo, hi] = [max(0, n - B), min(A, n)]. Let i* be its leftmost maximiser.
    If lo < i* < hi, f rises into i* and does not rise after it:
    a'(i*-1) > b'(m) and a'(i*) <= b'(m-1), where m = n - i* and
    x'(k) = x(k+1) - x(k). (1)
    If neither a'(i*) < a'(i*-1) (a descent of a at i*) nor
    b'(m) < b'(m-1) (a descent of b at m), then
    a'(i*-1) <= a'(i*) <= b'(m-1) <= b'(m) < a'(i*-1), a contradiction. So
    the maximum is at an end (i in {0, A} or m in {0, B}) or at a descent of
    a or of b. The ends are merged first (`_merge_ends`), then the descents,
    each only with the partners (1) allows (`_merge_descents`). At an end
    the half of (1) that still applies bounds the partners too: i* = A > lo
    needs a'(A-1) > b'(m), and i* = n - B = lo with 0 < i* < A needs
    a'(i*) <= b'(B-1); the corner i* = A, m = B (lo = hi) needs nothing.
  * Floors: a pair (i, m) can raise out[i + m, t] for some t only if
    a(i) + R_s[m, t_max] > out[i + m, 0] once out is nondecreasing along t
    (cumulative): both passes skip the pairs that cannot.

  A left column whose pairs are few (`_EVERY_PAIR_WORK`: the small tables
  of the lower levels, where the bounds cost more than they save) is merged
  over every pair, as is a table whose columns are not finite on a prefix of
  counts (never the case for exact tables).
  """
  by_column = left.values.T
  steps_at = np.empty(by_column.shape, bool)   # steps_at[column, i]
  steps_at[0] = by_column[0] > _INFEASIBLE
  np.greater(by_column[1:], by_column[:-1], out=steps_at[1:])
  stepped_at = np.where(steps_at, by_column, _INFEASIBLE)
  exits_at = left.exits.tolist()
  columns = [(column, right_for(exits_at[column]))
             for column in steps_at.any(axis=1).nonzero()[0].tolist()]
  rows = min(cap - left.first, left.values.shape[0] - 1 +
             max(right.values.shape[0] for _, right in columns) - 1) + 1
  widest = max((right.exits for _, right in columns), key=len)
  if widest.size == 1 + max(right.exits[-1] for _, right in columns):
    exits = widest   # every offset up to the largest
  else:
    exits = np.unique(np.concatenate([right.exits for _, right in columns]))
  out = np.full((rows, exits.size), _INFEASIBLE, np.int64)
  plans = []
  step_counts = steps_at.sum(axis=1).tolist()
  for column, right in columns:
    r_values = _Expanded(right, exits)
    a, steps = left.values[:, column], steps_at[column]
    if (left.prefix_closed and right.prefix_closed and
        step_counts[column] * (r_values.count * exits.size + _CALL_WORK) >
        _EVERY_PAIR_WORK):
      plans.append(_Plan(column, a, steps, stepped_at[column], right,
                         r_values))
      continue
    right_rows = r_values[:rows]
    for i in np.flatnonzero(steps[:rows]).tolist():   # every pair
      span = min(right_rows.shape[0], rows - i)
      np.maximum(out[i:i + span], a[i] + right_rows[:span],
                 out=out[i:i + span])
  if plans:
    _merge_ends(left, plans, out)
    _merge_descents(left, plans, out)
  infeasible = out < 0
  if is_node:
    counts = left.first + np.arange(out.shape[0], dtype=np.int64)[:, None]
    out += counts * counts
  out[infeasible] = _INFEASIBLE
  return _compact(out, exits, left.first)


def _merge_ends(left: _DenseTable, plans: Sequence[_Plan], out: np.ndarray):
  """The ends of `_merge_dense` (i in {0, A}, m in {0, B_t}), into `out`.

  First i = 0 and m = 0 over their whole range (when R_s[0, t] = 0, an empty
  right subtree, for every s, the end m = 0 of every s is one maximum). Then
  i = A with the m below the first count from which every rise of R is at
  least a'(A-1), and of those only the span that beats that floor; and
  m = B_t with the rows i that step and lie below the first row from which
  every rise of a exceeds b'(B_t - 1) (the largest rise over R's columns
  stands for it), plus the corner i = A. Leaves out nondecreasing along t.
  """
  rows = out.shape[0]
  for plan in plans:
    if plan.steps[0]:
      span = min(plan.r_values.count, rows)
      np.maximum(out[:span], plan.values[0] + plan.r_values[:span],
                 out=out[:span])
  if all(plan.r_values.empty_is_zero for plan in plans):
    best = np.maximum.reduce([plan.stepped for plan in plans])
    span = min(rows, best.shape[0])
    np.maximum(out[:span], best[:span, None], out=out[:span])
  else:
    for plan in plans:
      span = min(plan.stepped.shape[0], rows)
      np.maximum(out[:span], plan.stepped[:span, None] + plan.r_values[0],
                 out=out[:span])
  # A pattern ending at offset t also ends at or before t' > t.
  _running_max_along_exits(out)
  floor = out[:, 0].copy()
  for plan in plans:
    a, r_values, right = plan.values, plan.r_values, plan.right
    last = int(left.lasts[plan.column])
    at_last = 0 < last < rows and plan.steps[last]
    if at_last:
      # i* = A > lo: f rises into A, a'(A - 1) > b'(m).
      span = min(r_values.count, rows - last,
                 int(right.counts_rising_below(
                     left.rises[last - 1, plan.column])))
      lo, hi = _useful_span(a[last] + r_values.last_column(span),
                            floor[last:last + span])
      np.maximum(out[last + lo:last + hi], a[last] + r_values[lo:hi],
                 out=out[last + lo:last + hi])
    # The end m = B_t > 0 serves the columns t whose last count is B_t,
    # with the rows i that step; i* = lo < A: f does not rise after i*,
    # a'(i*) <= b'(B_t - 1); and the corner i* = A = lo = hi.
    steps = plan.steps.nonzero()[0]
    # Rows that step in one run (every finite row of the first column) are
    # updated as a slice.
    run = steps.size and steps[-1] - steps[0] + 1 == steps.size
    for m, t0, t1, rise in r_values.end_groups:
      stop = min(rows - m, int(left.rows_rising_at_most(plan.column, rise)))
      below = int(steps.searchsorted(stop))
      r_span = r_values.row_span(m, t0, t1)
      if at_last and last < rows - m and below < steps.size:
        # The corner, which steps[:below] leaves out.
        np.maximum(out[m + last, t0:t1], a[last] + r_span,
                   out=out[m + last, t0:t1])
      if not below:
        continue
      if run:
        lo, hi = int(steps[0]), int(steps[0]) + below
        np.maximum(out[m + lo:m + hi, t0:t1], a[lo:hi, None] + r_span,
                   out=out[m + lo:m + hi, t0:t1])
      else:
        i = steps[:below]
        out[m + i, t0:t1] = np.maximum(out[m + i, t0:t1],
                                       a[i, None] + r_span)
  _running_max_along_exits(out)


def _merge_descents(left: _DenseTable, plans: Sequence[_Plan],
                    out: np.ndarray):
  """The descents of `_merge_dense`, every column at once, into `out`.

  Descents i of the left table (where it steps) with the partners m in the
  right tables that (1) allows, and descents m of the right tables with the
  partners i in the left table; of those, only the pairs `_useful_pairs`
  finds above the floor out[:, 0] with R at its last exit (out and R are
  nondecreasing along t). Many pairs, of a left column, are then tested
  against _FLOOR_GROUPS floors: a pair can raise out[n, t] for some t in
  [t0, t1) only if a(i) + R_s[m, t1 - 1] > out[n, t0], where the single
  floor compares with R_s[m, last] (R and out grow along t).
  """
  rows = out.shape[0]
  count = len(plans)
  columns = np.array([plan.column for plan in plans])
  rights = [plan.right for plan in plans]
  # Partners: the rights' values at their last column (the best over t),
  # then the stepping values of the left's columns.
  partner, starts = _concatenate_padded(
      [right.values[:, -1] for right in rights] +
      [plan.stepped for plan in plans])
  # Descents i of the left table, partners m in R with
  # b'(m - 1) >= a'(i) possible and b'(m) < a'(i - 1) possible.
  left_of, left_i = np.nonzero(left.descents.T[columns] &
                               np.stack([plan.steps for plan in plans]))
  left_columns = columns[left_of]
  left_firsts = 1 + _searchsorted_each(
      [right.largest_rise_prefix_max for right in rights], left_of,
      left.rises[left_i, left_columns])
  left_stops = _searchsorted_each(   # `counts_rising_below`
      [right.least_rise_suffix_min for right in rights], left_of,
      left.rises[left_i - 1, left_columns])
  # Descents m of the right tables, partners i in the left with
  # a'(i - 1) > b'(m) and a'(i) <= b'(m - 1) possible. (An end of one
  # column may be a descent of another: none is skipped.)
  right_m, least, largest, best = np.concatenate(
      [right.descent_rows for right in rights], axis=1)
  right_of = np.repeat(np.arange(count),
                       [right.descent_rows.shape[1] for right in rights])
  right_firsts = 1 + _searchsorted_each(
      left.rise_prefix_max.T[columns], right_of, least, side='right')
  right_stops = _searchsorted_each(   # `rows_rising_at_most`
      left.rise_suffix_min.T[columns], right_of, largest, side='right')
  # The pairs above the floor, each kind with its own partners (the
  # rights' last columns, then the left's stepping values).
  floor, floor_minima = out[:, 0].copy(), {}
  # The floor's mean rise, for the chunk tests of `_useful_pairs`.
  finite = np.flatnonzero(floor >= 0)
  slope = 0
  if finite.size > 1:
    slope = max(0, int(floor[finite[-1]] - floor[finite[0]]) //
                int(finite[-1] - finite[0]))
  split = starts[count]
  left_pair, left_m = _useful_pairs(
      left_i, left_firsts, np.minimum(left_stops, rows - left_i),
      left.values[left_i, left_columns], starts[left_of], partner[:split],
      floor, floor_minima, slope)
  right_pair, right_i = _useful_pairs(
      right_m, right_firsts, np.minimum(right_stops, rows - right_m), best,
      starts[count + right_of] - split, partner[split:], floor,
      floor_minima, slope)
  plan_of = np.concatenate([left_of[left_pair], right_of[right_pair]])
  rows_i = np.concatenate([left_i[left_pair], right_i])
  counts_m = np.concatenate([left_m, right_m[right_pair]])
  order = np.argsort(plan_of, kind='stable')
  plan_of, rows_i, counts_m = plan_of[order], rows_i[order], counts_m[order]
  bounds = np.searchsorted(plan_of, np.arange(count + 1)).tolist()
  size = out.shape[1]
  cuts = np.unique(np.linspace(0, size, min(size, _FLOOR_GROUPS) + 1
                               ).astype(np.int64))
  for plan, lo, hi in zip(plans, bounds[:-1], bounds[1:]):
    if lo < hi:
      i, m = rows_i[lo:hi], counts_m[lo:hi]
      if i.size * size > _GROUP_TEST_WORK:
        keep = _reduce_rows(np.logical_or, plan.values[i][:, None] +
                            plan.r_values.rows_at(m, cuts[1:] - 1) >
                            out[(i + m)[:, None], cuts[:-1]])
        i, m = i[keep], m[keep]
      np.maximum.at(out, i + m, plan.values[i][:, None] + plan.r_values[m])


def _searchsorted_each(arrays, owners: np.ndarray, queries: np.ndarray,
                       side: str = 'left') -> np.ndarray:
  """searchsorted(arrays[owners[k]], queries[k], side) for every k at once.

  `arrays` are nondecreasing int64 arrays: a list, or the rows of a 2-D
  array. They are clipped to [lo, hi] = [min(queries) - 1, max(queries) + 1]
  (which changes no comparison with a query) and array o shifted by
  o * (hi - lo + 1), so that their concatenation is sorted and one search
  answers every query.
  """
  if not queries.size:
    return np.zeros(0, np.int64)
  if len(arrays) == 1:
    return np.searchsorted(arrays[0], queries, side=side)
  lo = int(queries.min()) - 1
  stride = int(queries.max()) + 2 - lo
  if isinstance(arrays, np.ndarray):
    sizes = np.full(arrays.shape[0], arrays.shape[1])
  else:
    sizes = np.array([x.size for x in arrays])
  starts = np.cumsum(sizes) - sizes
  if stride * sizes.size >= 2**62:   # keys would overflow: one by one
    flat = np.concatenate(list(arrays))
    return np.array([np.searchsorted(flat[b:b + n], q, side=side)
                     for b, n, q in zip(starts[owners], sizes[owners],
                                        queries.tolist())], np.int64)
  shifts = np.arange(sizes.size) * stride - lo
  if isinstance(arrays, np.ndarray):
    keys = np.clip(arrays, lo, lo + stride - 1)
    keys += shifts[:, None]
  else:
    keys = np.clip(np.concatenate(arrays), lo, lo + stride - 1)
    keys += np.repeat(shifts, sizes)
  return (keys.ravel().searchsorted(queries + shifts[owners], side=side) -
          starts[owners])


class _BlockTree:
  """Tables of the block-level tree program for one (MinS, MaxP)."""

  def __init__(self, min_separation: int, max_participation: int,
               counts_are_free: bool = False):
    self.counts_are_free = counts_are_free
    # Dense tables when the count can bind and be large.
    self.dense = not counts_are_free and max_participation > _DENSE_MIN_CAP
    self._dense_memo: Dict[Tuple[int, int], '_DenseTable'] = {}
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

  def _dense_node(self, size: int, s: int) -> '_DenseTable':
    """`run` of a complete node of `size` (a power of two) blocks, dense."""
    key = (size, s)
    if key in self._dense_memo:
      return self._dense_memo[key]
    if size == 1:
      result = _compact(_running_max_along_exits(
          _table_to_dense(self.leaf(s), self.gap)), np.arange(self.gap))
    else:
      result = _merge_dense(
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

  def append_tree(self, table: _DenseTable, length: int) -> _DenseTable:
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
      table = _merge_dense(table, functools.partial(self._dense_node, size),
                           self.cap, is_node=False)
      done += size
    if not rest:
      return table
    body = table.values
    base = num_blocks * self.block
    rows = min(self.cap - table.first,
               body.shape[0] - 1 + (rest - 1) // self.gap + 1) + 1
    out = np.full((rows, self.gap), _INFEASIBLE, np.int64)
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
                             _INFEASIBLE)
        np.maximum(out[k:k + span, s_out], candidate,
                   out=out[k:k + span, s_out])
    return _compact(_running_max_along_exits(out), np.arange(self.gap),
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
  `_merge_dense` above 64 counts; across restarts only the counts that can
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
    table = _DenseTable(np.zeros((1, 1), np.int64), [0])
    if len(segments) > 1:
      floor = _packed_value(segments, program.gap, cap)
      ceilings = _RemainingCeilings(program, segments)
    for k, length in enumerate(segments):
      table = program.append_tree(table, length)
      if k + 1 < len(segments):
        room = ceilings.after(k + 1, cap - _table_counts(table))
        table = _drop_hopeless_counts(table, room, floor)
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


def _packed_value(segments: Sequence[int], gap: int, count: int) -> int:
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


class _RemainingCeilings:
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

  def __init__(self, program: '_BlockTree', segments: Sequence[int]):
    self.segments = list(segments)
    empty = _DenseTable(np.zeros((1, 1), np.int64), [0])
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


def _table_counts(table: _DenseTable) -> np.ndarray:
  """The participation count of each row of `table`."""
  return table.first + np.arange(table.values.shape[0])


def _drop_hopeless_counts(table: _DenseTable, ceiling: np.ndarray,
                          floor: int) -> _DenseTable:
  """The states without the lowest counts from which no pattern reaches
  `floor`.

  A count i (row of `table`) whose best value so far plus the most the
  later trees can add with the budget left, ceiling[row] (for budget
  cap - i, `_RemainingCeilings.after`), stays below `floor` (the value
  of a feasible pattern, at most the worst case) is on no worst-case
  pattern: the maximum over the patterns through the other counts is the
  same. The lowest counts up to the first that is not hopeless are
  dropped (the table then starts at a later count), and the worst case,
  which needs at least one participation, is then among the counts left.
  All three terms are exact integers (`_RemainingCeilings`), so the test
  is exact.
  """
  best = table.values[:, -1]   # cumulative: the best over the exits
  hopeless = best + ceiling < floor
  prefix = int(np.argmin(hopeless))   # the first count not hopeless
  if not hopeless[prefix]:
    if not prefix:
      return table
    return _DenseTable(table.values[prefix:], table.exits,
                       table.first + prefix)
  return table   # (every count hopeless: impossible, floor is feasible)


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


def brute_force_sensitivity_squared(total_rounds: int, max_participation: int,
                                    min_separation: int,
                                    restart_rounds: Sequence[int] = ()) -> int:
  """Enumerates every participation pattern. For tests on small trees only."""
  segments = _restart_segments(total_rounds, restart_rounds)
  starts = list(itertools.accumulate([0] + segments[:-1]))
  nodes = []
  for start, length in zip(starts, segments):
    for h in range(length.bit_length()):
      size = 1 << h
      for k in range(length // size):
        nodes.append((start + k * size, start + (k + 1) * size))
  gap = min_separation + 1
  best = 0

  def extend(pattern, last):
    nonlocal best
    if pattern:
      value = sum(
          sum(1 for t in pattern if lo <= t < hi)**2 for lo, hi in nodes)
      best = max(best, value)
    if len(pattern) == max_participation:
      return
    first = 0 if last is None else last + gap
    for t in range(first, total_rounds):
      extend(pattern + [t], t)

  extend([], None)
  return best
