"""Who took part when: observed MaxP, MinS and participations per client."""

from typing import Sequence

import numpy as np


class ParticipationLog:
  """Vectorized record of participation (populations of millions).

  Keeps, per client, the count and the last round; the observed min
  separation is the fewest rounds strictly between two participations of
  one client (TF Privacy's convention), -1 while no client took part twice.
  """

  def __init__(self, num_clients: int):
    self.num_clients = int(num_clients)
    self.counts = np.zeros(self.num_clients, np.int32)
    self._last = np.full(self.num_clients, -1, np.int64)
    self.min_separation = -1
    self.rounds = 0

  def record(self, round_num: int, indices: Sequence[int]):
    indices = np.asarray(indices, np.int64)
    if indices.size != np.unique(indices).size:
      raise ValueError(f'round {round_num}: a client appears twice in one '
                       f'cohort.')
    last = self._last[indices]
    seen = last >= 0
    if np.any(seen):
      gap = int(np.min(round_num - last[seen] - 1))
      if gap < 0:
        raise ValueError(f'round {round_num} recorded out of order.')
      if self.min_separation < 0 or gap < self.min_separation:
        self.min_separation = gap
    self._last[indices] = round_num
    self.counts[indices] += 1
    self.rounds = max(self.rounds, int(round_num) + 1)

  @property
  def max_participation(self) -> int:
    return int(self.counts.max(initial=0))

  def histogram(self) -> np.ndarray:
    """h[k] = number of clients that took part exactly k times."""
    return np.bincount(self.counts, minlength=self.max_participation + 1)
