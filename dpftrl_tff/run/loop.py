"""The round loop: cohorts from a sampler, rounds through a process runner.

`run_rounds` knows nothing of models, files or flags: it is handed the
runner (`resident.ResidentProcess` or anything with its `next`), the
participation sampler, the state to start from and the rounds to run, and
calls `on_round` after every round with what happened. Everything the run
keeps (metrics, checkpoints, evaluation) is done by the caller in
`on_round`.
"""

import dataclasses
import time
from typing import Any, Callable, List, Sequence

from dpftrl_tff import participation


@dataclasses.dataclass
class RoundResult:
  """What one round did."""
  round_num: int          # 0-based; the round is `round_num + 1` of T.
  cohort: List[str]
  participation: Any      # participation.RoundInfo of the round.
  metrics: Any            # TFF's round metrics.
  update_norm: float      # ||theta^{t+1} - theta^t||_2 on the server.
  seconds: float


def run_rounds(*, runner, sampler: participation.Sampler,
               client_ids: Sequence[str],
               log: participation.ParticipationLog,
               client_data_fn: Callable[[int, List[str]], List[Any]],
               state, start_round: int, end_round: int,
               on_round: Callable[[Any, RoundResult], None]):
  """Runs rounds [start_round, end_round); returns the final state.

  Args:
    runner: has `next(state, client_data) -> (state, metrics, update_norm)`.
    sampler: the cohort of every round (client indices).
    client_ids: the clients' ids, by index.
    log: records every cohort (for the privacy accounting).
    client_data_fn: (round, cohort) -> what `runner.next` takes for the
      clients (their round keys, or their datasets).
    state: the server state after `start_round` rounds.
    start_round, end_round: 0-based half-open range of rounds to run.
    on_round: called with (new state, RoundResult) after every round.
  """
  for round_num in range(start_round, end_round):
    started = time.monotonic()
    indices = sampler.sample(round_num)
    log.record(round_num, indices)
    cohort = [client_ids[i] for i in indices]
    state, metrics, update_norm = runner.next(
        state, client_data_fn(round_num, cohort))
    on_round(state, RoundResult(round_num, cohort, sampler.last_info,
                                metrics, update_norm,
                                time.monotonic() - started))
  return state
