"""Min-separation groups: the tightest participation schedule a population allows.

The clients are shuffled once (seeded) into b groups of near-equal size;
round r draws its report_goal clients uniformly from group r mod b. A client
belongs to one group, so it can take part only in rounds r, r + b, r + 2b,
...: at least b - 1 rounds strictly between two participations (MinS >= b - 1)
and at most ceil(T / b) participations in T rounds (MaxP). The largest b with
groups of at least report_goal clients is floor(N / m), which reaches the
population bound MinS <= floor(N / m) - 1 of the paper's Section 2.4.
"""

import math

import numpy as np

from dpftrl_tff import checks
from dpftrl_tff.participation import base


class MinSepGroupsSampler(base.Sampler):
  """Round r draws from group r mod b (see the module docstring)."""

  def __init__(self, num_clients, report_goal, seed, num_groups=None):
    super().__init__(num_clients, report_goal, seed)
    largest = self.num_clients // self.report_goal
    if num_groups is None:
      num_groups = largest
    self.num_groups = checks.check_int(num_groups, '--min_sep_groups',
                                       minimum=1)
    if self.num_groups > largest:
      raise ValueError(
          f'--min_sep_groups={num_groups}: groups of {self.num_clients} '
          f'clients must hold --clients_per_round={self.report_goal} each, '
          f'so at most {largest} groups.')
    order = np.random.default_rng([self.seed, 0x6709]).permutation(
        self.num_clients)
    self.groups = np.array_split(order, self.num_groups)

  def sample(self, round_num: int) -> np.ndarray:
    group = self.groups[int(round_num) % self.num_groups]
    rng = np.random.default_rng([self.seed, int(round_num)])
    chosen = group[rng.choice(len(group), size=self.report_goal,
                              replace=False)]
    self.last_info = base.RoundInfo(eligible=len(group),
                                    cohort=self.report_goal, shortfall=0)
    return chosen

  def planned(self, rounds: int):
    return dict(min_separation=self.num_groups - 1,
                max_participation=math.ceil(rounds / self.num_groups))

  def describe(self):
    return dict(model='min_sep_groups', num_groups=self.num_groups)
