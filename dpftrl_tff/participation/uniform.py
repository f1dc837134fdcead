"""Uniform sampling: report_goal clients per round, rounds independent."""

import numpy as np

from dpftrl_tff.participation import base


class UniformSampler(base.Sampler):
  """Uniform sampling without replacement within a round, seeded by (seed, t).

  Any client may come back the next round: the planned MinS is 0 and MaxP
  is T (nothing is guaranteed; the run is accounted from its log).
  """

  def sample(self, round_num: int) -> np.ndarray:
    rng = np.random.default_rng([self.seed, int(round_num)])
    chosen = rng.choice(self.num_clients, size=self.report_goal,
                        replace=False)
    self.last_info = base.RoundInfo(eligible=self.num_clients,
                                    cohort=self.report_goal, shortfall=0)
    return chosen

  def describe(self):
    return dict(model='uniform')
