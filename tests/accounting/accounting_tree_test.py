"""Tests of the fast exact tree accountant against TFP and brute force."""

import dataclasses
import fractions
import itertools
import random
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
from tensorflow_privacy.privacy.analysis import tree_aggregation_accountant as tfp_tree
from tensorflow_privacy.privacy.dp_query import restart_query

from dpftrl_tff.accounting import tree
from dpftrl_tff.accounting import tree_dense
from dpftrl_tff.accounting import tree_restarts
from tests.reference import tree_brute_force


def _tuned(**changes):
  """The dense engine with other speed settings (same values, other paths)."""
  return mock.patch.object(tree_dense, 'TUNING',
                           dataclasses.replace(tree_dense.TUNING, **changes))


class BruteForceTest(parameterized.TestCase):

  def test_all_small_single_trees(self):
    for rounds, min_sep, max_p in itertools.product(
        range(1, 17), range(0, 7), range(1, 6)):
      with self.subTest(rounds=rounds, min_sep=min_sep, max_p=max_p):
        self.assertEqual(
            tree.max_sensitivity_squared(rounds, max_p, min_sep),
            tree_brute_force.brute_force_sensitivity_squared(rounds, max_p, min_sep))

  def test_random_restart_schedules(self):
    rng = random.Random(7)
    for _ in range(200):
      rounds = rng.randint(2, 17)
      min_sep = rng.randint(0, 5)
      max_p = rng.randint(1, 5)
      restarts = sorted(rng.sample(range(1, rounds),
                                   rng.randint(1, min(3, rounds - 1))))
      with self.subTest(rounds=rounds, min_sep=min_sep, max_p=max_p,
                        restarts=restarts):
        self.assertEqual(
            tree.max_sensitivity_squared(rounds, max_p, min_sep, restarts),
            tree_brute_force.brute_force_sensitivity_squared(rounds, max_p, min_sep,
                                                 restarts))

  def test_budget_that_cannot_bind(self):
    # MaxP at least the participations that fit: the program drops the
    # participation count where it cannot matter (the fast path).
    for rounds, min_sep in itertools.product(range(1, 17), range(0, 5)):
      possible = tree.max_possible_participation(rounds, min_sep)
      with self.subTest(rounds=rounds, min_sep=min_sep):
        self.assertEqual(
            tree.max_sensitivity_squared(rounds, possible + 3, min_sep),
            tree_brute_force.brute_force_sensitivity_squared(rounds, possible, min_sep))

  def test_fast_path_equals_the_full_program(self):
    rng = random.Random(11)
    for _ in range(60):
      rounds = rng.randint(2, 400)
      min_sep = rng.randint(0, 12)
      possible = tree.max_possible_participation(rounds, min_sep)
      restarts = sorted(rng.sample(range(1, rounds),
                                   rng.randint(0, min(3, rounds - 1))))
      with self.subTest(rounds=rounds, min_sep=min_sep, restarts=restarts):
        self.assertEqual(
            tree.max_sensitivity_squared(rounds, possible, min_sep,
                                         restarts),
            tree.max_sensitivity_squared(rounds, possible, min_sep,
                                         restarts, _fast_path=False))

  def test_dense_program_equals_the_sparse_one(self):
    # A binding MaxP above 64 with MinS < 32 takes the dense NumPy program.
    rng = random.Random(3)
    checked = 0
    while checked < 12:
      rounds, min_sep = rng.randint(150, 500), rng.randint(0, 12)
      possible = tree.max_possible_participation(rounds, min_sep)
      if possible <= 66:
        continue
      max_p = rng.randint(65, possible - 1)
      restarts = sorted(rng.sample(range(1, rounds), rng.randint(0, 2)))
      self.assertTrue(tree._block_tree(min_sep, max_p, False).dense)  # pylint: disable=protected-access
      self._check_dense_against_sparse(rounds, max_p, min_sep, restarts)
      checked += 1

  def _check_dense_against_sparse(self, rounds, max_p, min_sep, restarts):
    with self.subTest(rounds=rounds, min_sep=min_sep, max_p=max_p,
                      restarts=restarts):
      self.assertEqual(
          tree.max_sensitivity_squared(rounds, max_p, min_sep, restarts),
          tree.max_sensitivity_squared(rounds, max_p, min_sep, restarts,
                                       _fast_path=False))

  def test_dense_program_equals_brute_force(self):
    # The dense program (normally for MaxP > 64), its tables compacted
    # (normally above 64 offsets) and its pairs pruned in chunks and batches
    # (normally above 4096 pairs), never pair by pair (normally for small
    # tables), on trees small enough to enumerate, with and without
    # restarts.
    rng = random.Random(13)
    with _tuned(dense_min_cap=0, compact_min_columns=0, few_pairs=0,
                batch=2, every_pair_work=0):
      tree._block_tree.cache_clear()  # pylint: disable=protected-access
      try:
        for rounds, min_sep, max_p in itertools.product(
            range(1, 15), range(0, 5), range(2, 6)):
          restarts = sorted(rng.sample(range(1, rounds),
                                       rng.randint(0, min(2, rounds - 1))))
          self.assertTrue(tree._block_tree(min_sep, max_p, False).dense)  # pylint: disable=protected-access
          with self.subTest(rounds=rounds, min_sep=min_sep, max_p=max_p,
                            restarts=restarts):
            self.assertEqual(
                tree.max_sensitivity_squared(rounds, max_p, min_sep,
                                             restarts),
                tree_brute_force.brute_force_sensitivity_squared(rounds, max_p, min_sep,
                                                     restarts))
      finally:
        tree._block_tree.cache_clear()  # pylint: disable=protected-access

  def test_dense_program_equals_the_sparse_one_at_wide_gaps(self):
    # Wide separations (compact tables above MinS 63), restarts, MaxP
    # binding.
    rng = random.Random(29)
    for _ in range(24):
      min_sep = rng.choice([rng.randint(13, 40), rng.randint(41, 127),
                            rng.randint(128, 300)])
      rounds = rng.randint(70 * (min_sep + 1), 120 * (min_sep + 1))
      possible = tree.max_possible_participation(rounds, min_sep)
      max_p = rng.randint(65, possible - 1)
      restarts = sorted(rng.sample(range(1, rounds), rng.randint(0, 3)))
      self._check_dense_against_sparse(rounds, max_p, min_sep, restarts)

  def test_restarts_never_exceed_independent_trees(self):
    # Composition of per-tree worst cases is a looser valid bound.
    for rounds, min_sep, max_p in [(300, 20, 6), (1000, 37, 9)]:
      restarts = tree.paper_restart_rounds(rounds, warmup=50, frequency=100)
      joint = tree.max_sensitivity_squared(rounds, max_p, min_sep, restarts)
      bounds = [0] + restarts + [rounds]
      separate = sum(
          tree.max_sensitivity_squared(b - a, max_p, min_sep)
          for a, b in zip(bounds[:-1], bounds[1:]))
      self.assertLessEqual(joint, separate)
      self.assertGreaterEqual(
          joint, tree.max_sensitivity_squared(bounds[1], max_p, min_sep))


def _random_cumulative(rng, rows, gap, lasts, values):
  """A table cumulative along offsets, column t finite on [0, lasts[t]]."""
  table = np.full((rows, gap), tree_dense.INFEASIBLE, np.int64)  # pylint: disable=protected-access
  for t in range(gap):
    table[:lasts[t] + 1, t] = values(lasts[t] + 1)
  table = np.maximum.accumulate(table, axis=1)
  table[table < 0] = tree_dense.INFEASIBLE  # pylint: disable=protected-access
  return table


def _naive_merge(left, rights, cap, is_node):
  rows = min(cap, left.shape[0] - 1 + max(r.shape[0] for r in rights) - 1) + 1
  out = np.full((rows, left.shape[1]), -1, np.int64)
  for s, right in enumerate(rights):
    for i in range(left.shape[0]):
      for m in range(min(right.shape[0], rows - i)):
        for t in range(left.shape[1]):
          if left[i, s] >= 0 and right[m, t] >= 0:
            total = left[i, s] + right[m, t]
            if is_node:
              total += (i + m)**2
            out[i + m, t] = max(out[i + m, t], total)
  return out


class MergeDenseTest(parameterized.TestCase):
  """`_merge_dense` against every pair, on random tables of the right shape.

  The pruning must hold for any tables that are cumulative along offsets,
  finite on a prefix of counts, with R_{s-1} >= R_s: random values exercise
  far more falls of the increments than real tables have.
  """

  @parameterized.named_parameters(
      ('random_values', 'random'),
      ('nearly_convex', 'convex'),
      ('holes_in_counts', 'holes'),
      ('compact_offsets', 'compact'),
  )
  def test_equals_every_pair(self, kind):
    rng = random.Random(kind)
    np_rng = np.random.default_rng(len(kind))

    def values(count):
      if kind == 'convex':
        rises = np.sort(np_rng.integers(0, 40, count))
        drops = np_rng.random(count) < 0.15
        rises[drops] -= np_rng.integers(0, 60, int(drops.sum()))
        return np.cumsum(np.maximum(rises, 0))
      return np_rng.integers(0, 30, count)

    dropped = 0   # columns left out by compact tables
    for _ in range(150):
      gap = rng.randint(1, 8 if kind == 'compact' else 5)
      left_rows, right_rows = rng.randint(1, 9), rng.randint(1, 9)
      cap = rng.randint(1, left_rows + right_rows)
      left_lasts = sorted(rng.randint(0, left_rows - 1) for _ in range(gap))
      left = _random_cumulative(rng, left_rows, gap, left_lasts, values)
      bases = []
      for _ in range(gap):
        lasts = sorted(rng.randint(0, right_rows - 1) for _ in range(gap))
        base = _random_cumulative(rng, right_rows, gap, lasts, values)
        if rng.random() < 0.5:
          base[0] = 0   # an empty right subtree exits at offset 0
        bases.append(base)
      if kind == 'holes':
        # Counts missing inside a column (tables stay cumulative along
        # offsets): the merge then falls back to every pair.
        if left_rows > 1:   # (no participation, row 0, stays possible)
          left[rng.randrange(1, left_rows), :rng.randint(1, gap)] = (
              tree_dense.INFEASIBLE)  # pylint: disable=protected-access
        hole = rng.randrange(right_rows), rng.randint(1, gap)
        for base in bases:
          base[hole[0], :hole[1]] = tree_dense.INFEASIBLE  # pylint: disable=protected-access
      if kind == 'compact':
        # Runs of equal columns, which compact tables leave out.
        for table in [left] + bases:
          for t in range(1, gap):
            if rng.random() < 0.5:
              table[:, t] = table[:, t - 1]
      # Entering later allows less: R_s = max of the bases s' >= s.
      rights = [np.maximum.reduce(bases[s:]) for s in range(gap)]
      is_node = rng.random() < 0.5
      with _tuned(compact_min_columns=0 if kind == 'compact' else 10**9,
                  few_pairs=rng.choice([0, 10**9]),
                  every_pair_work=rng.choice([0, 0, 0, 10**9]),
                  group_test_work=rng.choice([0, 10**9]),
                  floor_groups=rng.choice([1, 2, 8])):
        tables = [tree_dense.compact(t, np.arange(gap))  # pylint: disable=protected-access
                  for t in [left] + rights]
        dropped += gap * len(tables) - sum(t.exits.size for t in tables)
        merged = tree_dense.merge_dense(  # pylint: disable=protected-access
            tables[0], lambda s: tables[1 + s], cap, is_node)
        merged = tree_dense._Expanded(merged, np.arange(gap))[:]  # pylint: disable=protected-access
      expected = _naive_merge(left, rights, cap, is_node)
      # The merge drops the counts above the last feasible one.
      feasible = np.flatnonzero(expected.max(axis=1) >= 0)
      with self.subTest(gap=gap, cap=cap, is_node=is_node):
        if not feasible.size:   # (random tables only: row 0 is feasible)
          self.assertTrue(np.all(merged < 0))
          continue
        np.testing.assert_array_equal(np.maximum(merged, -1),
                                      expected[:feasible[-1] + 1])
    self.assertEqual(dropped > 0, kind == 'compact')


  def test_expanded_rows(self):
    inf = tree_dense.INFEASIBLE  # pylint: disable=protected-access
    table = tree_dense.DenseTable(  # pylint: disable=protected-access
        np.array([[0, 0], [3, 5], [inf, 9]]), exits=[2, 5])
    seen = tree_dense._Expanded(table, np.array([0, 2, 3, 5, 7]))  # pylint: disable=protected-access
    np.testing.assert_array_equal(
        seen[:], [[inf, 0, 0, 0, 0], [inf, 3, 3, 5, 5], [inf, inf, inf, 9, 9]])
    np.testing.assert_array_equal(seen[np.array([2, 1])],
                                  [[inf, inf, inf, 9, 9], [inf, 3, 3, 5, 5]])
    np.testing.assert_array_equal(seen.last_column(2), [0, 5])
    # Columns whose last finite count is B: 1 at offsets 2 and 3, 2 after;
    # the largest rise at B - 1 over all columns: 5 (0 -> 1), 4 (1 -> 2).
    self.assertEqual(seen.end_groups, [(1, 1, 3, 5), (2, 3, 5, 4)])
    np.testing.assert_array_equal(seen.row_span(2, 1, 4), [inf, inf, 9])
    np.testing.assert_array_equal(seen.row_span(1, 0, 3), [inf, 3, 3])


class SearchSortedEachTest(parameterized.TestCase):
  """`_searchsorted_each` against one searchsorted per array."""

  @parameterized.named_parameters(
      ('list_left', 'list', 'left', 1),
      ('list_right', 'list', 'right', 1),
      ('rows_left', 'rows', 'left', 1),
      ('rows_right', 'rows', 'right', 1),
      # Queries so far apart that the shifted keys would overflow.
      ('one_by_one', 'list', 'right', 2**57),
  )
  def test_equals_each_search(self, kind, side, scale):
    rng = np.random.default_rng([len(kind), len(side), scale % 7])
    above = tree_dense._NO_RISE_ABOVE  # pylint: disable=protected-access
    below = tree_dense._NO_RISE_BELOW  # pylint: disable=protected-access
    for _ in range(30):
      count = int(rng.integers(1, 8))
      sizes = ([int(rng.integers(0, 12))] * count if kind == 'rows' else
               rng.integers(0, 12, count).tolist())
      arrays = []
      for size in sizes:
        x = np.sort(rng.integers(-20, 20, size))
        # Undefined rises at the ends, as in the tables.
        x[:int(rng.integers(0, 2 + size // 4))] = below
        x[size - int(rng.integers(0, 2 + size // 4)):] = above
        arrays.append(x)
      owners = rng.integers(0, count, 25)
      queries = rng.integers(-22, 22, 25) * scale
      expected = [np.searchsorted(arrays[o], q, side=side)
                  for o, q in zip(owners, queries)]
      given = (np.array(arrays, np.int64).reshape(count, sizes[0])
               if kind == 'rows' else arrays)
      got = tree_dense._searchsorted_each(  # pylint: disable=protected-access
          given, owners, queries, side=side)
      np.testing.assert_array_equal(got, expected)


class UsefulPairsTest(parameterized.TestCase):
  """`_useful_pairs` (chunked pruning) against testing every pair."""

  @parameterized.named_parameters(
      ('pair_by_pair', 10**9, 1 << 14, 'walks', 0),
      ('chunks', 0, 1 << 14, 'walks', 0),
      ('chunks_in_batches', 0, 3, 'walks', 0),
      # Straight lines: values and bounds close to the floor.
      ('chunks_on_lines', 0, 1 << 14, 'lines', 0),
      # Tested with a line taken off: the rate of the lines, others.
      ('chunks_on_lines_less_their_rate', 0, 1 << 14, 'lines', 3),
      ('chunks_on_lines_less_a_steeper_line', 0, 1 << 14, 'lines', 7),
      ('chunks_on_walks_less_a_line', 0, 1 << 14, 'walks', 3),
  )
  def test_equals_every_pair(self, few_pairs, batch, shape, slope):
    rng = np.random.default_rng([few_pairs % 97, batch, len(shape), slope])
    chunk = tree_dense.TUNING.chunks[0]  # pylint: disable=protected-access
    infeasible = tree_dense.INFEASIBLE  # pylint: disable=protected-access
    found = 0
    for _ in range(40):
      segments = int(rng.integers(1, 30))
      sizes = rng.integers(1, 400, segments)
      offsets = np.cumsum(-(-sizes // chunk) * chunk) - (-(-sizes // chunk) *
                                                         chunk)
      partner = np.full(int(offsets[-1] + sizes[-1]) + chunk, infeasible)
      floor_size = 800
      bases = rng.integers(0, 400, segments)
      if shape == 'walks':
        for offset, size in zip(offsets, sizes):
          # Rising values with falls and infeasible holes, like real rows.
          values = np.cumsum(rng.integers(-3, 9, size)) + 50
          values[rng.random(size) < 0.05] = infeasible
          partner[offset:offset + size] = values
        floor = np.cumsum(rng.integers(-2, 9, floor_size)) + 60
        anchor_values = rng.integers(-20, 400, segments)
      else:
        # anchor + partner - floor = anchor - 3 base + 2 k - 10 crosses 0
        # inside the ranges.
        for offset, size in zip(offsets, sizes):
          partner[offset:offset + size] = 50 + 5 * np.arange(size)
        floor = 60 + 3 * np.arange(floor_size)
        anchor_values = 3 * bases + rng.integers(-600, 20, segments)
      firsts = rng.integers(0, sizes)
      stops = np.minimum(firsts + rng.integers(-5, 400, segments),
                         np.minimum(sizes, floor_size - bases))
      expected = {(q, k) for q in range(segments)
                  for k in range(firsts[q], stops[q])
                  if anchor_values[q] + partner[offsets[q] + k] >
                  floor[bases[q] + k]}
      with _tuned(few_pairs=few_pairs, batch=batch):
        got = tree_dense._useful_pairs(  # pylint: disable=protected-access
            bases, firsts, stops, anchor_values, offsets, partner, floor,
            {}, slope)
      self.assertEqual(set(zip(got[0].tolist(), got[1].tolist())), expected)
      self.assertLen(got[0], len(expected))   # each pair once
      found += len(expected)
    self.assertGreater(found, 1000)

  def test_chunk_summaries(self):
    # The maxima and minima the chunks are tested with, by loops.
    rng = np.random.default_rng(5)
    infeasible = tree_dense.INFEASIBLE  # pylint: disable=protected-access
    values = np.cumsum(rng.integers(-4, 9, 300))
    values[rng.random(300) < 0.1] = infeasible
    minima = tree_dense._window_minima(values)  # pylint: disable=protected-access
    maxima = tree_dense._block_maxima(values)  # pylint: disable=protected-access
    for width in tree_dense.TUNING.chunks:  # pylint: disable=protected-access
      for n in range(values.size):
        window = values[n:n + width]
        self.assertEqual(minima[width][n], window.min())
        if n % width == 0:
          self.assertEqual(maxima[width][n // width], window.max())


class HopelessCountsTest(parameterized.TestCase):
  """The bounds that let restarts drop counts that cannot reach the top."""

  def test_packed_value_counts_every_complete_node(self):
    rng = random.Random(3)
    for _ in range(100):
      segments = [rng.randint(1, 40) for _ in range(rng.randint(1, 4))]
      gap = rng.randint(1, 6)
      fits = tree.max_possible_participation(sum(segments), gap - 1)
      count = rng.randint(0, fits)
      positions = [j * gap for j in range(count)]
      expected, start = 0, 0
      for length in segments:
        for size in (1 << h for h in range(length.bit_length())):
          for first in range(0, length - size + 1, size):
            inside = sum(start + first <= p < start + first + size
                         for p in positions)
            expected += inside**2
        start += length
      with self.subTest(segments=segments, gap=gap, count=count):
        self.assertEqual(
            tree_restarts.packed_value(segments, gap, count),  # pylint: disable=protected-access
            expected)

  def test_concave_slopes_give_the_least_concave_majorant(self):
    rng = np.random.default_rng(4)
    for _ in range(200):
      values = np.concatenate(
          ([0], np.cumsum(rng.integers(0, 30, rng.integers(1, 25)))))
      rises, runs = tree_restarts._concave_slopes(values)  # pylint: disable=protected-access
      self.assertEqual(rises.dtype, np.int64)
      slopes = [fractions.Fraction(int(a), int(b))
                for a, b in zip(rises, runs)]
      self.assertTrue(all(x > y for x, y in zip(slopes, slopes[1:])))
      hull = [fractions.Fraction(0)]
      for slope, run in zip(slopes, runs):
        base = hull[-1]
        hull.extend(base + slope * (k + 1) for k in range(run))
      # Above every value it covers, equal at the corners, and the
      # slopes stop where the values stop rising.
      self.assertTrue(all(h >= v for h, v in zip(hull, values)))
      corners = np.concatenate(([0], np.cumsum(runs)))
      self.assertEqual([hull[c] for c in corners], list(values[corners]))
      self.assertEqual(hull[-1], values.max())

  def test_decreasing_slopes_exact_beyond_float(self):
    # Slopes 1 apart in 1e-17 relative: floats cannot tell them apart, so
    # the order comes from fractions.
    big = 10**12
    rises = np.array([big, big + 1, 3, big - 1], np.int64)
    runs = np.array([10**5 + 1, 10**5 + 1, 1, 10**5 + 1], np.int64)
    order = tree_restarts._decreasing_slopes(rises, runs)  # pylint: disable=protected-access
    self.assertEqual(list(order), [1, 0, 3, 2])
    order = tree_restarts._decreasing_slopes(np.array([3, 5, 4]), np.array([2, 3, 2]))  # pylint: disable=protected-access
    self.assertEqual(list(order), [2, 1, 0])   # 2 > 5/3 > 3/2

  def test_tightest_floor_keeps_the_worst_case(self):
    # The floor at the worst case itself (the most any feasible pattern
    # gives): counts are dropped only when they cannot reach it.
    rng = random.Random(9)
    dropped = 0
    original = tree_restarts.drop_hopeless_counts  # pylint: disable=protected-access

    def counting(table, ceiling, floor):
      nonlocal dropped
      result = original(table, ceiling, floor)
      dropped += result.first - table.first
      return result

    for _ in range(150):
      rounds = rng.randint(4, 16)
      min_sep = rng.randint(0, 3)
      max_p = rng.randint(2, max(2, tree.max_possible_participation(
          rounds, min_sep) - 1))
      restarts = sorted(rng.sample(range(1, rounds),
                                   rng.randint(1, min(3, rounds - 1))))
      worst = tree_brute_force.brute_force_sensitivity_squared(rounds, max_p, min_sep,
                                                   restarts)
      tree._block_tree.cache_clear()  # pylint: disable=protected-access
      with _tuned(dense_min_cap=0), \
           mock.patch.object(tree_restarts, 'packed_value', lambda *_: worst), \
           mock.patch.object(tree_restarts, 'drop_hopeless_counts', counting):
        got = tree.max_sensitivity_squared(rounds, max_p, min_sep, restarts)
      tree._block_tree.cache_clear()  # pylint: disable=protected-access
      with self.subTest(rounds=rounds, min_sep=min_sep, max_p=max_p,
                        restarts=restarts):
        self.assertEqual(got, worst)
    self.assertGreater(dropped, 100)

  def test_drops_only_the_hopeless_lowest_counts(self):
    inf = tree_dense.INFEASIBLE  # pylint: disable=protected-access
    values = np.array([[0, 0], [3, 4], [inf, 9], [10, 12], [inf, 20]])
    table = tree_dense.DenseTable(values, [0, 1], first=2)  # pylint: disable=protected-access
    # Budgets 0..6 (cap 6): counts 2..6 have cap - n = 4..0 left.
    ceiling = np.array([0, 5, 9, 12, 14, 15, 16])
    # best + ceiling: 14, 16, 18, 17, 20; hopeless below floor (exact
    # integers, no margin), and only the lowest counts up to the first
    # that is not go.
    for floor, first in ((14, 2), (15, 3), (16, 3), (17, 4), (18, 4),
                         (19, 6), (20, 6)):
      with self.subTest(floor=floor):
        room = ceiling[6 - tree_restarts.table_counts(table)]  # pylint: disable=protected-access
        kept = tree_restarts.drop_hopeless_counts(table, room, floor)  # pylint: disable=protected-access
        self.assertEqual(kept.first, first)
        np.testing.assert_array_equal(kept.values, values[first - 2:])

  @parameterized.named_parameters(
      ('one_length', 0), ('several_lengths', 1))
  def test_ceilings_bound_every_completion(self, mixed):
    rng = random.Random(mixed)
    for _ in range(25):
      min_sep = rng.randint(0, 3)
      segments = ([rng.randint(2, 7) for _ in range(rng.randint(2, 3))]
                  if mixed else [rng.randint(2, 7)] * rng.randint(2, 3))
      program = tree._BlockTree(min_sep, 64)  # pylint: disable=protected-access
      ceilings = tree_restarts.RemainingCeilings(program, segments)  # pylint: disable=protected-access
      for done in range(1, len(segments)):
        rest = segments[done:]
        restarts = list(itertools.accumulate(rest[:-1]))
        fits = tree.max_possible_participation(sum(rest), min_sep)
        ceiling = ceilings.after(done, np.arange(fits + 3))
        for budget in range(1, fits + 3):
          # The later trees alone, entered afresh: at least any completion.
          best = tree_brute_force.brute_force_sensitivity_squared(
              sum(rest), min(budget, fits), min_sep, restarts)
          with self.subTest(segments=segments, done=done, budget=budget):
            self.assertGreaterEqual(ceiling[budget], best)
        self.assertEqual(ceiling[0], 0)
        self.assertEqual(list(ceiling), _fraction_ceilings(
            [ceilings.hulls[length] for length in rest], fits + 2))


def _fraction_ceilings(hulls, cap):
  """floor of the sum of the b largest hull slopes, b = 0..cap, each
  slope taken one unit of n at a time, in fractions (the short reference
  of `_RemainingCeilings.after`)."""
  units = sorted((fractions.Fraction(int(rise), int(run))
                  for rises, runs in hulls for rise, run in zip(rises, runs)
                  for _ in range(run)), reverse=True)
  sums = [fractions.Fraction(0)] + list(itertools.accumulate(units))
  return [int(sums[min(b, len(units))]) for b in range(cap + 1)]


class TensorFlowPrivacyTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('one_round', 1, 1, 0),
      ('min_sep_zero', 100, 3, 0),
      ('min_sep_zero_all_rounds', 64, 64, 0),
      ('maxp_larger_than_possible', 33, 100, 3),
      ('not_power_of_two', 257, 9, 13),
      ('power_of_two', 256, 4, 20),
      ('many_participations', 500, 20, 30),
      ('two_participations', 200, 2, 50),
      ('odd_sizes', 999, 7, 61),
      ('single_participation', 777, 1, 5),
      ('large_separation', 300, 3, 120),
  )
  def test_matches_compute_zcdp_single_tree(self, rounds, max_p, min_sep):
    noise = 1.37
    expected = tfp_tree.compute_zcdp_single_tree(noise, rounds, max_p,
                                                 min_sep)
    actual = tree.compute_zcdp_single_tree(noise, rounds, max_p, min_sep)
    self.assertAlmostEqual(actual / expected, 1.0, delta=1e-9)

  def test_paper_restart_schedule_matches_restart_query(self):
    # Simulate TFP's restart indicator over 3000 rounds: the tree restarts
    # after round t when the indicator fires while processing round t.
    indicator = restart_query.PeriodicRoundRestartIndicator(
        period=1024, warmup=128)
    state = indicator.initialize()
    new_tree_starts = []
    for t in range(3000):
      flag, state = indicator.next(state)
      if bool(flag):
        new_tree_starts.append(t + 1)
    self.assertEqual(tree.paper_restart_rounds(3000, warmup=128,
                                               frequency=1024),
                     [s for s in new_tree_starts if s < 3000])


class ValidationTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('zero_rounds', dict(total_rounds=0), 'rounds'),
      ('negative_min_sep', dict(min_separation=-1), 'min_separation'),
      ('zero_maxp', dict(max_participation=0), 'max_participation'),
      ('float_rounds', dict(total_rounds=10.5), 'rounds'),
      ('zero_noise', dict(noise_multiplier=0.0), 'noise_multiplier'),
      ('nan_noise', dict(noise_multiplier=float('nan')), 'noise_multiplier'),
  )
  def test_bad_input(self, override, name):
    args = dict(noise_multiplier=1.0, total_rounds=10, max_participation=2,
                min_separation=1)
    args.update(override)
    with self.assertRaisesRegex(ValueError, name):
      tree.compute_zcdp_single_tree(**args)

  def test_bad_restart_round(self):
    with self.assertRaisesRegex(ValueError, 'restart_rounds'):
      tree.compute_zcdp_with_restarts(1.0, 10, 2, 1, [0, 5])


if __name__ == '__main__':
  absltest.main()
