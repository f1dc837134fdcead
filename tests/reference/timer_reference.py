"""The timer model stepped plainly: a test oracle for `participation.timer`.

Every step of the simulated clock computes the eligible devices from the
whole population with `np.searchsorted` and masks, as the model's
definition reads (dpftrl_tff/participation/timer.py's module docstring),
with no table and no count-only waiting steps; the random draws are the
model's, in the same order, so equal settings and seed give equal cohorts.
"""

import numpy as np

_DAY_MINUTES = 1440


def timer_cohorts(num_clients, report_goal, seed, settings, rounds):
  """The cohorts (client indices) of `rounds` rounds, and the clock (hours)
  each ran at."""
  rng = np.random.default_rng([seed, 0x7133])
  starts = rng.normal(settings.window_start_hour * 60,
                      settings.window_spread_hours * 60, size=num_clients)
  starts = np.mod(np.round(starts), _DAY_MINUTES).astype(np.int32)
  order = np.argsort(starts, kind='stable')
  window_start = starts[order]
  window = int(round(settings.availability_hours * 60))
  eligible_at = np.zeros(num_clients, np.float64)
  state = dict(active=np.zeros(num_clients, bool), day=-1)

  def eligible(clock):
    day = int(clock // _DAY_MINUTES)
    if day != state['day']:
      state['active'] = rng.random(num_clients) < (
          settings.daily_active_fraction)
      state['day'] = day
    phase = int(clock % _DAY_MINUTES)
    lo, hi = phase - window + 1, phase + 1
    if window >= _DAY_MINUTES:
      ranges = [(0, num_clients)]
    elif lo >= 0:
      ranges = [tuple(np.searchsorted(window_start, [lo, hi]))]
    else:
      ranges = [(np.searchsorted(window_start, lo + _DAY_MINUTES),
                 num_clients), (0, np.searchsorted(window_start, hi))]
    parts = [a + np.flatnonzero(state['active'][a:b] &
                                (eligible_at[a:b] <= clock))
             for a, b in ranges if b > a]
    return np.concatenate(parts) if parts else np.zeros([0], np.int64)

  clock = 0.0
  cohorts, hours = [], []
  for _ in range(rounds):
    started = clock
    now = eligible(clock)
    if settings.shortfall == 'wait':
      limit = started + settings.max_wait_hours * 60
      while len(now) < report_goal and clock < limit:
        clock += settings.round_minutes
        now = eligible(clock)
    while not len(now):
      clock += settings.round_minutes
      now = eligible(clock)
    size = min(report_goal, len(now))
    chosen = now[rng.choice(len(now), size=size, replace=False)]
    eligible_at[chosen] = clock + settings.timer_hours * 60
    cohorts.append(order[chosen])
    hours.append(clock / 60)
    clock += settings.round_minutes
  return cohorts, hours
