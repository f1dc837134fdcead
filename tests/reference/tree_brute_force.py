"""The tree's squared sensitivity by enumerating every participation pattern.

An oracle for tests on small trees: independent of `accounting.tree` (it
computes the trees' nodes from the restart rounds itself).
"""

import itertools
from typing import List, Sequence


def _segments(total_rounds: int, restart_rounds: Sequence[int]) -> List[int]:
  """Tree lengths: a new tree starts at each restart round."""
  starts = sorted(r for r in set(restart_rounds) if 0 < r < total_rounds)
  bounds = [0] + starts + [total_rounds]
  return [b - a for a, b in zip(bounds[:-1], bounds[1:])]


def brute_force_sensitivity_squared(total_rounds: int, max_participation: int,
                                    min_separation: int,
                                    restart_rounds: Sequence[int] = ()) -> int:
  """Enumerates every participation pattern. For tests on small trees only."""
  segments = _segments(total_rounds, restart_rounds)
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
