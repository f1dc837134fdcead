"""The sampler interface and per-round seeds."""

import abc
import dataclasses
from typing import Dict, Optional

import numpy as np

from dpftrl_tff import checks


def round_seed(seed: int, round_num: int) -> int:
  """A 63-bit seed for round `round_num` of a run seeded with `seed`."""
  state = np.random.SeedSequence([int(seed), int(round_num), 0x5EED])
  return int(state.generate_state(1, np.uint64)[0] >> np.uint64(1))


@dataclasses.dataclass
class RoundInfo:
  """What the participation model saw in one round (metrics.csv columns)."""
  eligible: int            # clients that could have been chosen
  cohort: int              # clients chosen
  shortfall: int           # report_goal - cohort (> 0: the round ran short)
  simulated_hours: Optional[float] = None   # timer: clock at round start
  waited_hours: Optional[float] = None      # timer: waiting for a full round

  def as_row(self) -> Dict[str, float]:
    row = dict(participation_eligible=self.eligible,
               participation_cohort=self.cohort,
               participation_shortfall=self.shortfall)
    if self.simulated_hours is not None:
      row['participation_simulated_hours'] = self.simulated_hours
      row['participation_waited_hours'] = self.waited_hours
    return row


class Sampler(abc.ABC):
  """The cohort of every round, as client indices in [0, num_clients).

  Stateless samplers (uniform, min_sep_groups) give round t's cohort as a
  function of (seed, t). Stateful ones (timer) must be asked for the rounds
  in order 0, 1, 2, ...; a resumed run replays the rounds already run (cheap:
  no training), so it draws the same cohorts as an uninterrupted run.
  """

  def __init__(self, num_clients: int, report_goal: int, seed: int):
    self.num_clients = checks.check_int(num_clients, 'number of clients',
                                        minimum=1)
    self.report_goal = checks.check_int(
        report_goal, '--clients_per_round', minimum=1,
        maximum=self.num_clients)
    self.seed = checks.check_int(seed, '--seed', minimum=0)
    self.last_info: Optional[RoundInfo] = None

  @abc.abstractmethod
  def sample(self, round_num: int) -> np.ndarray:
    """Client indices taking part in round `round_num` (0-based)."""

  def planned(self, rounds: int) -> Optional[Dict[str, int]]:
    """MinS and MaxP the model guarantees for `rounds` rounds, or None."""
    del rounds
    return None

  def describe(self) -> Dict[str, object]:
    return dict(model=type(self).__name__)
