"""Population-scale participation without training (the launch planner's core)."""

import time

from dpftrl_tff import accounting
from dpftrl_tff.participation import log as log_lib
from dpftrl_tff.participation import timer as timer_lib


def simulate(*, population, rounds, report_goal, model, seed,
             timer: timer_lib.TimerSettings = timer_lib.TimerSettings(),
             progress=None):
  """Participation of `rounds` rounds: observed MinS, MaxP and more.

  `timer` holds the timer model's settings (used when model is 'timer');
  `progress(done, rounds)`, if given, is called every 1000 rounds.
  """
  # A cycle: the package (build_sampler) imports this module.
  from dpftrl_tff import participation  # pylint: disable=g-import-not-at-top
  sampler = participation.build_sampler(
      model, num_clients=population, report_goal=report_goal, seed=seed,
      timer=timer)
  log = log_lib.ParticipationLog(population)
  short = 0
  started = time.monotonic()
  for t in range(rounds):
    log.record(t, sampler.sample(t))
    short += sampler.last_info.shortfall > 0
    if progress is not None and (t + 1) % 1000 == 0:
      progress(t + 1, rounds)
  result = dict(
      population=population, rounds=rounds, report_goal=report_goal,
      participation=model, observed_min_separation=log.min_separation,
      observed_max_participation=log.max_participation,
      population_min_separation=accounting.max_min_separation(population,
                                                              report_goal),
      short_rounds=short, participations_histogram=log.histogram().tolist(),
      simulation_seconds=time.monotonic() - started)
  if model == 'timer':
    days = sampler.clock_hours / 24
    result.update(timer_hours=timer.timer_hours, simulated_days=days,
                  rounds_per_day=rounds / days if days else float('nan'))
  return result
