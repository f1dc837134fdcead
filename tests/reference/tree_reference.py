"""A short, exact reference for the tree accountant (tests only).

`tree.max_sensitivity_squared` is fast and long. This module computes the
same number by a memoized recursion short enough to check by reading, in
the spirit of TensorFlow Privacy's `compute_zcdp_single_tree` (Kairouz et
al. 2021, Appendix D), extended to tree restarts with MinS and MaxP holding
across tree boundaries. It is polynomial but slow (about T^2 g log T
states times k g steps, g = MinS + 1); use it for T up to a few hundred.

The quantity. The run [0, T) is cut by the restart rounds into segments;
each segment of L rounds has its own tree whose nodes are the complete
dyadic blocks [j 2^h, (j+1) 2^h) inside [0, L). A pattern is a set of at
most MaxP rounds, any two at least g = MinS + 1 apart (across segments
too). Its value is sum over all nodes of all trees of c_v^2, c_v the
pattern's rounds inside node v. We want the maximum over patterns.

Proof of the recursion. Within a segment of length L, let P >= L be a
power of two and consider the dyadic node [lo, lo + S) of the padded tree
(positions >= L do not exist; a node that is not inside [0, L) is not
released and counts 0). Let N(lo, S, k, a, b) be the maximum, over
placements of exactly k rounds in [lo + a, e - 1 - b] (e = min(lo + S, L))
pairwise >= g apart, of the sum of c_v^2 over the nodes inside
[lo, lo + S); -inf if there is none. A leaf holds at most one round. For
S > 1 with halves of size H, a placement splits into k1 rounds in the left
half and k2 = k - k1 in the right; the node itself adds k^2 if it is
inside [0, L). If one half is empty, the other inherits both bounds
(shifted). If both are not, the only constraint linking them is the gap
between the last round of the left half and the first of the right: with
b1 free leaves at the end of the left half and a2 at the start of the
right, it is a2 + b1 + 1 >= g. Taking the least a2 for each b1 (a larger
a2 only removes placements) and b1 in [0, g - 1] (b1 >= g - 1 allows
a2 = 0, and a larger b1 only removes placements) covers every placement,
so N is the maximum over k1 and b1 of the halves' values: exact. Bounds a
and b never exceed g - 1 where they matter, and complete nodes of equal
size are the same problem, so the memo is small.

Across segments, a pattern is a sequence of per-segment placements; what
one segment passes to the next is the number of rounds still blocked at
its start: a' = max(0, g - 1 - b) after a segment whose last round leaves
b free rounds at its end, or max(0, a - L) after an empty segment. A
segment value with "at least b free at the end" counts patterns with more
free rounds too, which leave the next segment less blocked, never more, so
maximizing over b is exact. The run's value is the maximum over the
budget split, a dynamic program over (segment, budget left, blocked).
"""

import functools
from typing import Sequence

NEG = float('-inf')


def _pow2_at_least(n: int) -> int:
  p = 1
  while p < n:
    p *= 2
  return p


def _segment_solver(length: int, g: int):
  """value(k, a, b) = N(0, P, k, a, b) for one segment of `length` rounds."""

  def node(lo: int, size: int, k: int, a: int, b: int) -> float:
    if lo + size <= length:   # Inside [0, L): the same for every lo.
      return complete(size, k, a, b)
    return partial(lo, size, k, a, b)

  @functools.lru_cache(maxsize=None)
  def complete(size: int, k: int, a: int, b: int) -> float:
    return split(0, size, k, a, b, size, inside=True)

  @functools.lru_cache(maxsize=None)
  def partial(lo: int, size: int, k: int, a: int, b: int) -> float:
    return split(lo, size, k, a, b, min(lo + size, length) - lo,
                 inside=False)

  def split(lo, size, k, a, b, width, *, inside) -> float:
    """N for a node whose existing leaves are [lo, lo + width)."""
    if k == 0:
      return 0.0
    if width - a - b <= 0:   # No room for a round.
      return NEG
    if size == 1:
      return 1.0 if k == 1 else NEG
    half = size // 2
    right_width = max(0, width - half)   # Existing leaves of the right half.
    best = NEG
    for k1 in range(k + 1):
      k2 = k - k1
      if k2 == 0:
        value = node(lo, half, k1, a, max(0, b - right_width))
      elif k1 == 0:
        value = node(lo + half, half, k2, max(0, a - half), b)
      else:
        value = NEG
        for b1 in range(g):
          left = node(lo, half, k1, a, b1)
          if left != NEG:
            value = max(value, left + node(lo + half, half, k2,
                                           max(0, g - 1 - b1), b))
      best = max(best, value)
    if best == NEG:
      return NEG
    return best + (k * k if inside else 0)

  top = _pow2_at_least(length)
  return lambda k, a, b: node(0, top, k, a, b)


def sensitivity_squared(total_rounds: int, max_participation: int,
                        min_separation: int,
                        restart_rounds: Sequence[int] = ()) -> int:
  """max over patterns of sum_v c_v^2 (see the module docstring).

  Args:
    total_rounds: T >= 1.
    max_participation: MaxP >= 1.
    min_separation: MinS >= 0 (rounds strictly between two participations).
    restart_rounds: rounds (0-based) at which a new tree starts; rounds
      outside (0, T) are ignored.
  """
  g = min_separation + 1
  cuts = sorted({r for r in restart_rounds if 0 < r < total_rounds})
  bounds = [0] + cuts + [total_rounds]
  lengths = [hi - lo for lo, hi in zip(bounds, bounds[1:])]
  solvers = [_segment_solver(length, g) for length in lengths]

  @functools.lru_cache(maxsize=None)
  def run(i: int, budget: int, blocked: int) -> float:
    if i == len(lengths):
      return 0.0
    # No round in segment i: the block carries on.
    best = run(i + 1, budget, max(0, blocked - lengths[i]))
    for k in range(1, budget + 1):
      for b in range(g):
        here = solvers[i](k, blocked, b)
        if here != NEG:
          best = max(best, here + run(i + 1, budget - k,
                                      max(0, g - 1 - b)))
    return best

  return int(run(0, max_participation, 0))
