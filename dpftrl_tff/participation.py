"""Who takes part in round t, and the participation it implies.

A `Sampler` gives the cohort of any round as a function of its construction
arguments and the round number, so a resumed run draws the same cohorts as
an uninterrupted one without sampler state. The training loop takes any
sampler.

`UniformSampler`: every round, `clients_per_round` clients drawn uniformly
without replacement from the population, independently across rounds, from
a generator seeded by (seed, round).

`ParticipationLog` records who took part when and reports the observed max
participation (MaxP) and min separation (MinS: rounds strictly between two
participations, TF Privacy's convention) used for accounting.
"""

import abc
from typing import Dict, List, Sequence

import numpy as np

from dpftrl_tff import checks


def round_seed(seed: int, round_num: int) -> int:
  """A 63-bit seed for round `round_num` of a run seeded with `seed`."""
  state = np.random.SeedSequence([int(seed), int(round_num), 0x5EED])
  return int(state.generate_state(1, np.uint64)[0] >> np.uint64(1))


class Sampler(abc.ABC):
  """The cohort of every round (a pure function of the round number)."""

  @abc.abstractmethod
  def sample(self, round_num: int) -> List[str]:
    """Client ids taking part in round `round_num` (0-based)."""


class UniformSampler(Sampler):
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
