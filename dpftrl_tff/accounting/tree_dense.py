"""The dense max-plus engine of the tree accountant (`tree.py`).

When MaxP binds, a table keeps every participation count up to MaxP, and
merging two subtrees is a max-plus convolution over the counts. Above
`Tuning.dense_min_cap` counts the tables are dense NumPy arrays (counts x
exit offsets; wide ones only over the offsets at which some value rises) and
`merge_dense` visits only the pairs of counts that can hold a maximum: the
ends of the range and the places where the increments of a table fall (its
docstring has the proof), and of those only the pairs that can beat the
values already found. Small tables are merged over every pair, which is
cheaper there. Every path gives the same exact integers; `Tuning` holds the
settings that choose between them.
"""

import dataclasses
import functools
from typing import Dict, List, NamedTuple, Sequence, Tuple

import numpy as np


INFEASIBLE = np.int64(-(2**61))
_NO_RISE_ABOVE = np.int64(2**62)   # stands for an undefined rise in minima
_NO_RISE_BELOW = np.int64(-(2**62))  # and in maxima


@dataclasses.dataclass(frozen=True)
class Tuning:
  """The engine's speed settings, in one place: they choose how the same
  exact value is computed (which path, chunk sizes, when to test pairs),
  never the value; the tests force every path by changing them
  (`dataclasses.replace(TUNING, ...)`).

  Attributes:
    dense_min_cap: a binding MaxP above this many counts uses dense tables.
    chunks: chunk widths of `_useful_pairs`, coarse to fine.
    few_pairs: fewer pairs are tested one by one.
    batch: chunks of the widest width tested at once.
    compact_min_columns: tables this wide keep only the exit offsets at
      which some value rises (`compact`).
    every_pair_work: a left column whose every pair with its right table
      costs at most this many element updates is merged pair by pair
      (small tables).
    call_work: a NumPy call costs about as much as this many element
      updates.
    floor_groups: pairs of a left column whose update costs more than
      `group_test_work` element updates are first tested against the
      floors of this many groups of exits (`_merge_descents`).
    group_test_work: see `floor_groups`.
    few_columns: `_reduce_rows` goes column by column up to this many
      columns (NumPy reduces along short rows slowly).
    tall_rows: `running_max_along_exits` goes column by column from this
      many rows (and up to `compact_min_columns` columns).
  """
  dense_min_cap: int = 64
  chunks: Tuple[int, ...] = (64, 16, 4, 1)
  few_pairs: int = 4096
  batch: int = 1 << 14
  compact_min_columns: int = 64
  every_pair_work: int = 1 << 15
  call_work: int = 1 << 10
  floor_groups: int = 8
  group_test_work: int = 1 << 10
  few_columns: int = 8
  tall_rows: int = 512


TUNING = Tuning()


def _reduce_rows(ufunc, values: np.ndarray) -> np.ndarray:
  """ufunc.reduce(values, axis=1), column by column when there are few."""
  if values.shape[1] > TUNING.few_columns:
    return ufunc.reduce(values, axis=1)
  result = values[:, 0].copy()
  for column in range(1, values.shape[1]):
    ufunc(result, values[:, column], out=result)
  return result


def running_max_along_exits(values: np.ndarray) -> np.ndarray:
  """np.maximum.accumulate(values, axis=1) in place; column by column for
  tall tables of few columns, where that is several times faster."""
  rows, columns = values.shape
  if rows < TUNING.tall_rows or columns > TUNING.compact_min_columns:
    return np.maximum.accumulate(values, axis=1, out=values)
  for column in range(1, columns):
    np.maximum(values[:, column], values[:, column - 1],
               out=values[:, column])
  return values


def table_to_dense(table: Dict[int, List[Tuple[int, int]]],
                   gap: int) -> np.ndarray:
  """Pareto fronts as a dense array V[n, s] (INFEASIBLE where absent)."""
  rows = max(table) + 1
  dense = np.full((rows, gap), INFEASIBLE, np.int64)
  for n, front in table.items():
    for s, value in front:
      dense[n, s] = max(dense[n, s], value)
  return dense


class DenseTable:
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

  # What the bounds of `merge_dense` use, computed on first use (tables
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

  # Halves of condition (1) of `merge_dense` as ranges of partners, this
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


def compact(values: np.ndarray, exits: np.ndarray,
             first: int = 0) -> DenseTable:
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
  if values.shape[1] <= TUNING.compact_min_columns:
    return DenseTable(values, exits, first)
  keep = np.ones(values.shape[1], bool)
  keep[1:] = np.any(values[:, 1:] != values[:, :-1], axis=0)
  if keep.all():
    return DenseTable(values, exits, first)
  return DenseTable(values[:, keep], exits[keep], first)


class _Expanded:
  """A table seen at the exit offsets `exits` of a merge, rows on demand.

  `exits` is sorted and holds every exit offset of the table (and more);
  the value at an offset is that of the table's last column at or before
  it. Only the rows a merge uses are gathered.
  """

  def __init__(self, table: DenseTable, exits: np.ndarray):
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
    """`DenseTable.end_groups` at the merge's exit offsets."""
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
    values[..., :self.missing] = INFEASIBLE
    return values

  def row_span(self, row: int, start: int, stop: int) -> np.ndarray:
    """Row `row` at the exits `start <= t < stop`."""
    if self.column is None:
      return self.table.values[row, start:stop]
    values = self.table.values[row].take(self.column[start:stop])
    values[:max(0, self.missing - start)] = INFEASIBLE
    return values

  def rows_at(self, rows: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Rows `rows` at the exits `indices` (sorted), one row per row."""
    if self.column is None:
      return self.table.values[rows[:, None], indices]
    values = self.table.values[rows[:, None], self.column[indices]]
    values[:, :int(indices.searchsorted(self.missing))] = INFEASIBLE
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
      [floor, np.full(TUNING.chunks[0], _NO_RISE_ABOVE, np.int64)])
  minima = {1: padded}
  width = 1
  while width < TUNING.chunks[0]:
    current = minima[width]
    shifted = np.concatenate(
        [current[width:], np.full(width, _NO_RISE_ABOVE, np.int64)])
    width *= 2
    minima[width] = np.minimum(current, shifted)
  return minima


def _chunked_size(size: int) -> int:
  """`size` rounded up to a multiple of the widest chunk."""
  return -(-size // TUNING.chunks[0]) * TUNING.chunks[0]


def _block_maxima(values: np.ndarray) -> Dict[int, np.ndarray]:
  """width K -> max(values[c K:(c + 1) K]) for every chunk c (padded),
  each width from the next narrower one."""
  size = _chunked_size(values.size)
  padded = np.full(size, INFEASIBLE, np.int64)
  padded[:values.size] = values
  maxima = {1: padded}
  for narrower, width in zip(TUNING.chunks[::-1], TUNING.chunks[-2::-1]):
    maxima[width] = _reduce_rows(
        np.maximum, maxima[narrower].reshape(-1, width // narrower))
  return maxima


def _concatenate_padded(arrays: Sequence[np.ndarray]
                        ) -> Tuple[np.ndarray, np.ndarray]:
  """arrays one after the other, each starting at a multiple of
  TUNING.chunks[0].

  Returns the concatenation (gaps INFEASIBLE) and the start of each array.
  """
  sizes = np.array([_chunked_size(x.size) for x in arrays])
  starts = np.cumsum(sizes) - sizes
  flat = np.full(int(sizes.sum()), INFEASIBLE, np.int64)
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
  (offsets are multiples of TUNING.chunks[0]; `floor_minima` caches
  `_window_minima(floor - slope * n)`, filled on first need), found
  without listing every pair when there are many: the ranges of k are cut
  into aligned chunks of width K (64, 16, 4, then 1) and a chunk is dropped,
  with every pair in it, when the anchor value plus the largest partner value
  in the chunk does not exceed the smallest floor over its targets (so no
  pair in it passes); a kept chunk is split in four. The ranges go through
  in batches of about TUNING.batch widest chunks, whose arrays stay in cache.

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

  if np.maximum(stops - firsts, 0).sum() <= TUNING.few_pairs:
    return beating(*_segments(np.arange(bases.size), firsts, stops))
  if not floor_minima:
    floor_minima.update(_window_minima(
        floor - slope * np.arange(floor.size, dtype=np.int64)))
  partner_maxima = _block_maxima(np.where(
      partner > INFEASIBLE,
      partner - slope * np.arange(partner.size, dtype=np.int64),
      INFEASIBLE))
  shifted = anchor_values + slope * (offsets - bases)
  partner_chunks = {width: offsets // width for width in TUNING.chunks}
  nonempty = np.flatnonzero(stops > firsts)
  width = TUNING.chunks[0]
  chunk_firsts = firsts[nonempty] // width
  chunk_stops = (stops[nonempty] - 1) // width + 1
  ends = np.cumsum(chunk_stops - chunk_firsts)
  batch = TUNING.batch
  cuts = np.searchsorted(ends, np.arange(1, ends[-1] // batch + 1) * batch)
  found_seg, found_k = [], []
  for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, nonempty.size]):
    if lo == hi:
      continue
    seg, chunk = _segments(nonempty[lo:hi], chunk_firsts[lo:hi],
                           chunk_stops[lo:hi])
    width = TUNING.chunks[0]
    for narrower in TUNING.chunks[1:]:
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
  stepped: np.ndarray      # a where it steps, INFEASIBLE elsewhere
  right: DenseTable       # R entered at the column's exit offset
  r_values: _Expanded      # the right table at the merge's exit offsets


def merge_dense(left: DenseTable, right_for, cap: int,
                 is_node: bool) -> DenseTable:
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

  A left column whose pairs are few (`TUNING.every_pair_work`: the small tables
  of the lower levels, where the bounds cost more than they save) is merged
  over every pair, as is a table whose columns are not finite on a prefix of
  counts (never the case for exact tables).
  """
  by_column = left.values.T
  steps_at = np.empty(by_column.shape, bool)   # steps_at[column, i]
  steps_at[0] = by_column[0] > INFEASIBLE
  np.greater(by_column[1:], by_column[:-1], out=steps_at[1:])
  stepped_at = np.where(steps_at, by_column, INFEASIBLE)
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
  out = np.full((rows, exits.size), INFEASIBLE, np.int64)
  plans = []
  step_counts = steps_at.sum(axis=1).tolist()
  for column, right in columns:
    r_values = _Expanded(right, exits)
    a, steps = left.values[:, column], steps_at[column]
    if (left.prefix_closed and right.prefix_closed and
        step_counts[column] * (r_values.count * exits.size + TUNING.call_work) >
        TUNING.every_pair_work):
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
  out[infeasible] = INFEASIBLE
  return compact(out, exits, left.first)


def _merge_ends(left: DenseTable, plans: Sequence[_Plan], out: np.ndarray):
  """The ends of `merge_dense` (i in {0, A}, m in {0, B_t}), into `out`.

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
  running_max_along_exits(out)
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
  running_max_along_exits(out)


def _merge_descents(left: DenseTable, plans: Sequence[_Plan],
                    out: np.ndarray):
  """The descents of `merge_dense`, every column at once, into `out`.

  Descents i of the left table (where it steps) with the partners m in the
  right tables that (1) allows, and descents m of the right tables with the
  partners i in the left table; of those, only the pairs `_useful_pairs`
  finds above the floor out[:, 0] with R at its last exit (out and R are
  nondecreasing along t). Many pairs, of a left column, are then tested
  against TUNING.floor_groups floors: a pair can raise out[n, t] for some t in
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
  slope = _mean_rise(floor)
  split = starts[count]
  left_pair, left_m = _useful_pairs(
      left_i, left_firsts, np.minimum(left_stops, rows - left_i),
      left.values[left_i, left_columns], starts[left_of], partner[:split],
      floor, floor_minima, slope)
  right_pair, right_i = _useful_pairs(
      right_m, right_firsts, np.minimum(right_stops, rows - right_m), best,
      starts[count + right_of] - split, partner[split:], floor,
      floor_minima, slope)
  _raise_by_pairs(plans, out,
                  np.concatenate([left_of[left_pair], right_of[right_pair]]),
                  np.concatenate([left_i[left_pair], right_i]),
                  np.concatenate([left_m, right_m[right_pair]]))


def _mean_rise(floor: np.ndarray) -> int:
  """The floor's mean rise a row (0 if flat), for `_useful_pairs`' chunk
  tests; rows below 0 (unreachable) are left out."""
  finite = np.flatnonzero(floor >= 0)
  if finite.size < 2:
    return 0
  return max(0, int(floor[finite[-1]] - floor[finite[0]]) //
             int(finite[-1] - finite[0]))


def _raise_by_pairs(plans: Sequence[_Plan], out: np.ndarray,
                    plan_of: np.ndarray, rows_i: np.ndarray,
                    counts_m: np.ndarray):
  """out[i + m, :] = max(out[i + m, :], a_plan(i) + R_plan[m, :]) for every
  useful pair (plan_of[k], rows_i[k], counts_m[k]).

  Where a plan has many pairs, each pair is first tested against
  TUNING.floor_groups floors of out (see `_merge_descents`).
  """
  count = len(plans)
  order = np.argsort(plan_of, kind='stable')
  plan_of, rows_i, counts_m = plan_of[order], rows_i[order], counts_m[order]
  bounds = np.searchsorted(plan_of, np.arange(count + 1)).tolist()
  size = out.shape[1]
  cuts = np.unique(np.linspace(0, size, min(size, TUNING.floor_groups) + 1
                               ).astype(np.int64))
  for plan, lo, hi in zip(plans, bounds[:-1], bounds[1:]):
    if lo < hi:
      i, m = rows_i[lo:hi], counts_m[lo:hi]
      if i.size * size > TUNING.group_test_work:
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
