"""Poisson sampling: every client takes part in each round independently
with probability q = report_goal / N (DP-FedAvg's sampling)."""

import math

import numpy as np

from dpftrl_tff.participation import base


def empty_round_probability(num_clients: int, report_goal: int) -> float:
  """(1 - q)^N, the chance that a round draws no client."""
  q = report_goal / num_clients
  return 0.0 if q >= 1 else math.exp(num_clients * math.log1p(-q))


class PoissonSampler(base.Sampler):
  """Each of the N clients independently with probability q = m / N, seeded
  by (seed, t): the cohort's size varies around the report goal m (its
  `RoundInfo.shortfall`, m minus the cohort, is negative above m).

  The privacy amplification DP-FedAvg is accounted with holds only for this
  sampling (`accounting.sampled_gaussian`); nothing bounds MinS or MaxP, so
  `planned` is None. TFF cannot run a round without clients: a round that
  draws none stops the run with an error (probability (1 - q)^N a round,
  about e^-m; configurations where it is likely are refused before the
  run, `mechanisms.dp_fedavg`).
  """

  @property
  def sampling_probability(self) -> float:
    return self.report_goal / self.num_clients

  def sample(self, round_num: int) -> np.ndarray:
    rng = np.random.default_rng([self.seed, int(round_num), 0x9015])
    chosen = np.flatnonzero(
        rng.random(self.num_clients) < self.sampling_probability)
    if not len(chosen):
      raise ValueError(
          f'--participation=poisson drew no client in round {round_num + 1} '
          f'(probability {empty_round_probability(self.num_clients, self.report_goal):.3g} '
          f'a round at q = {self.sampling_probability:.4g}); TFF cannot run a '
          f'round without clients: raise --clients_per_round.')
    self.last_info = base.RoundInfo(eligible=self.num_clients,
                                    cohort=len(chosen),
                                    shortfall=self.report_goal - len(chosen))
    return chosen

  def describe(self):
    return dict(model='poisson', sampling_probability=self.sampling_probability)
