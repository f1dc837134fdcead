"""Client sampling per round and the participation it implies.

The foundation model of participation: every round, `clients_per_round`
clients are drawn uniformly without replacement from the population,
independently across rounds, from a generator seeded by (seed, round), so any
round's cohort can be recomputed (resuming a run needs no sampler state).
`ParticipationLog` records who took part when and reports the observed
max participation (MaxP) and min separation (MinS) used for accounting.
"""

from typing import Dict, List, Sequence

import numpy as np

from dpftrl_tff import checks


class UniformSampler:
  """Uniform sampling without replacement within a round."""

  def __init__(self, client_ids: Sequence[str], clients_per_round: int,
               seed: int):
    self.client_ids = list(client_ids)
    if not self.client_ids:
      raise ValueError('The training split has no clients.')
    self.clients_per_round = checks.check_int(
        clients_per_round, '--clients_per_round', minimum=1,
        maximum=len(self.client_ids))
    self.seed = int(seed)

  def sample(self, round_num: int) -> List[str]:
    rng = np.random.default_rng([self.seed, int(round_num)])
    chosen = rng.choice(len(self.client_ids), size=self.clients_per_round,
                        replace=False)
    return [self.client_ids[i] for i in chosen]


class ParticipationLog:
  """Rounds in which every client took part."""

  def __init__(self):
    self.rounds: Dict[str, List[int]] = {}

  def record(self, round_num: int, client_ids: Sequence[str]):
    for cid in client_ids:
      self.rounds.setdefault(cid, []).append(int(round_num))

  @property
  def max_participation(self) -> int:
    return max((len(r) for r in self.rounds.values()), default=0)

  @property
  def min_separation(self) -> int:
    """Fewest rounds between two participations (-1 if none repeated)."""
    gaps = [b - a - 1 for r in self.rounds.values()
            for a, b in zip(r[:-1], r[1:])]
    return min(gaps, default=-1)
