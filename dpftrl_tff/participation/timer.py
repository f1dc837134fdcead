"""A device-level simulation of participation with a timer (paper Sec. 2.4).

Production federated learning does not sample clients: devices check in
when they can train (idle, charging, on an unmetered network), the server
fills each round with the first check-ins up to the report goal, and a timer
on the device keeps it out for a fixed period after it took part. MinS is
then an outcome of the timer period, of how many rounds the system runs in
that period, and of the population. This model simulates that, in NumPy for
populations of millions:

* the simulated clock starts at local midnight; a round takes
  `round_minutes`, so rounds per day are an outcome (waits lower them);
* every day each device is active with probability `daily_active_fraction`;
* an active device is available during a daily window of
  `availability_hours` that starts at a local hour drawn once per device
  from a normal distribution around `window_start_hour` with standard
  deviation `window_spread_hours` (most windows open in the evening and
  cover the night, when phones charge on Wi-Fi: the diurnal pattern of
  Yang et al. 2018 and Zhu et al. 2022);
* a device is eligible when available and its timer has run out; the
  server takes the round's cohort uniformly from the eligible devices (the
  first check-ins arrive in random order);
* after taking part a device is ineligible for `timer_hours`;
* a round that finds fewer than report_goal eligible devices waits (the
  clock advances by a round's time until enough check in, at most
  `max_wait_hours`, then runs short) or runs short at once, per `shortfall`.

Defaults and why: a 24 h timer and daily windows are the paper's first
configuration (es-ES, 24 h, observed MinS 313); 5-minute rounds give about
290 rounds a day when the population keeps up, about what that MinS implies
(313 rounds in the 24 h after a participation); half the devices active on a
day and 8-hour windows are plausible for phones that train only while idle
and charging; none of these is measured by the paper, so the planner reports
how its answers move with them.
"""

import dataclasses

import numpy as np

from dpftrl_tff import checks
from dpftrl_tff import settings
from dpftrl_tff.participation import base

_DAY_MINUTES = 1440
SHORTFALL_POLICIES = ('wait', 'run_short')


def format_hours(hours: float) -> str:
  """A timer period for people: '24 h', '83.5 h'; under an hour in
  minutes ('5 min', not '0.0833333 h')."""
  if hours < 1:
    return f'{round(hours * 60, 2):g} min'
  return f'{round(hours, 4):g} h'


@dataclasses.dataclass(frozen=True)
class TimerSettings:
  """The timer model's parameters (see the module docstring), declared once:
  the training config and the launch planner take them from here."""
  timer_hours: float = settings.setting(
      24.0, 'timer: a client is ineligible this long after taking part.')
  round_minutes: float = settings.setting(
      5.0, 'timer: simulated wall time of one round (rounds per day are an '
      'outcome).')
  daily_active_fraction: float = settings.setting(
      0.5, 'timer: share of the devices that check in on a given day.')
  availability_hours: float = settings.setting(
      8.0, 'timer: length of a device\'s daily availability window.')
  window_start_hour: float = settings.setting(
      22.0, 'timer: mean local hour at which availability windows open '
      '(phones charging on Wi-Fi at night).')
  window_spread_hours: float = settings.setting(
      2.0, 'timer: standard deviation of the windows\' opening hour.')
  shortfall: str = settings.setting(
      'wait', 'timer: a round with fewer eligible devices than the report '
      'goal waits (simulated time passes, at most --max_wait_hours) or '
      'runs short (run_short).', flag_type='enum')
  max_wait_hours: float = settings.setting(
      24.0, 'timer: longest wait for a full round before running short.')

  def validate(self, num_clients: int, report_goal: int, *,
               report_goal_flag: str = '--clients_per_round'):
    """Errors name the flags; `report_goal_flag` the one that set the
    report goal (training's, or `plan_launch`'s `--report_goals`)."""
    checks.check_positive(self.timer_hours, '--timer_hours')
    checks.check_positive(self.round_minutes, '--round_minutes')
    if self.timer_hours * 60 < self.round_minutes:
      raise ValueError(
          f'--timer_hours={self.timer_hours} is shorter than one round '
          f'(--round_minutes={self.round_minutes}): the timer would never '
          f'keep a client out of a round.')
    checks.check_float(self.daily_active_fraction, '--daily_active_fraction',
                       minimum=0.0, maximum=1.0, strict_minimum=True)
    checks.check_float(self.availability_hours, '--availability_hours',
                       minimum=0.0, maximum=24.0, strict_minimum=True)
    checks.check_float(self.window_start_hour, '--window_start_hour',
                       minimum=0.0, maximum=24.0, strict_maximum=True)
    checks.check_float(self.window_spread_hours, '--window_spread_hours',
                       minimum=0.0)
    checks.check_float(self.max_wait_hours, '--max_wait_hours', minimum=0.0)
    if self.shortfall not in SHORTFALL_POLICIES:
      raise ValueError(f'--shortfall={self.shortfall!r} is unknown; '
                       f'allowed: {", ".join(SHORTFALL_POLICIES)}.')
    if num_clients is None:   # Population not known yet.
      return
    active = num_clients * self.daily_active_fraction
    if report_goal > active:
      raise ValueError(
          f'{report_goal_flag}={report_goal} is above the {active:.0f} '
          f'devices active on a day ({num_clients} clients x '
          f'--daily_active_fraction={self.daily_active_fraction}): no round '
          f'could fill its report goal.')


class TimerSampler(base.Sampler):
  """The timer model (module docstring). Rounds must be asked in order."""

  def __init__(self, num_clients, report_goal, seed,
               settings: TimerSettings = TimerSettings()):
    super().__init__(num_clients, report_goal, seed)
    settings.validate(self.num_clients, self.report_goal)
    self.settings = settings
    self._rng = np.random.default_rng([self.seed, 0x7133])
    starts = self._rng.normal(settings.window_start_hour * 60,
                              settings.window_spread_hours * 60,
                              size=self.num_clients)
    starts = np.mod(np.round(starts), _DAY_MINUTES).astype(np.int32)
    # Devices are kept in the order of their window's start, so the devices
    # available at a time of day are one or two contiguous ranges.
    self._order = np.argsort(starts, kind='stable')
    self._window_start = starts[self._order]
    # _opened_before[m]: the devices whose window starts before minute m of
    # the day (np.searchsorted of the sorted starts, as a table: a round's
    # ranges are then Python lookups, not array calls).
    self._opened_before = np.searchsorted(
        self._window_start, np.arange(_DAY_MINUTES + 1)).tolist()
    self._window = int(round(settings.availability_hours * 60))
    self._eligible_at = np.zeros(self.num_clients, np.float64)
    self._active = np.zeros(self.num_clients, bool)
    self._day = -1
    self._clock = 0.0
    self._next_round = 0
    self.rounds_per_day = []

  @property
  def clock_hours(self) -> float:
    return self._clock / 60

  def _eligible_masks(self):
    """[(a, mask)]: for the one or two ranges of devices (in window order)
    whose window is open at the clock (two when it wraps past midnight),
    the first device a and the mask of those active with their timer run
    out. Draws the day's active devices when the clock enters a new day."""
    day = int(self._clock // _DAY_MINUTES)
    if day != self._day:
      self._active = (self._rng.random(self.num_clients) <
                      self.settings.daily_active_fraction)
      self._day = day
    # Available now: window start in (phase - window, phase] (mod a day).
    phase = int(self._clock % _DAY_MINUTES)
    lo, hi = phase - self._window + 1, phase + 1
    before = self._opened_before
    if self._window >= _DAY_MINUTES:
      ranges = ((0, self.num_clients),)
    elif lo >= 0:
      ranges = ((before[lo], before[hi]),)
    else:
      ranges = ((before[lo + _DAY_MINUTES], self.num_clients),
                (0, before[hi]))
    return [(a, self._active[a:b] & (self._eligible_at[a:b] <= self._clock))
            for a, b in ranges if b > a]

  def sample(self, round_num: int) -> np.ndarray:
    if round_num != self._next_round:
      raise ValueError(
          f'the timer model simulates rounds in order: asked for round '
          f'{round_num}, next is {self._next_round}.')
    settings = self.settings
    started = self._clock

    def count(masks):
      return sum(int(np.count_nonzero(m)) for _, m in masks)
    # Waiting steps only count the eligible devices; the round lists those
    # eligible at the clock it runs at.
    masks = self._eligible_masks()
    if settings.shortfall == 'wait':
      limit = started + settings.max_wait_hours * 60
      while count(masks) < self.report_goal and self._clock < limit:
        self._clock += settings.round_minutes
        masks = self._eligible_masks()
    while not count(masks):   # Even a short round needs one client.
      if self._clock - started > 7 * _DAY_MINUTES:
        raise ValueError('no client became eligible in a simulated week: '
                         'check the timer model\'s settings.')
      self._clock += settings.round_minutes
      masks = self._eligible_masks()
    eligible = np.concatenate([a + np.flatnonzero(m) for a, m in masks])
    size = min(self.report_goal, len(eligible))
    chosen = eligible[self._rng.choice(len(eligible), size=size,
                                       replace=False)]
    self._eligible_at[chosen] = self._clock + settings.timer_hours * 60
    chosen = self._order[chosen]   # Back to client indices.
    self.last_info = base.RoundInfo(
        eligible=len(eligible), cohort=size,
        shortfall=self.report_goal - size,
        simulated_hours=self._clock / 60,
        waited_hours=(self._clock - started) / 60)
    day = int(self._clock // _DAY_MINUTES)
    while len(self.rounds_per_day) <= day:
      self.rounds_per_day.append(0)
    self.rounds_per_day[day] += 1
    self._clock += settings.round_minutes
    self._next_round += 1
    return chosen

  def planned(self, rounds: int):
    # Nothing is guaranteed: rounds that wait for check-ins are fewer per
    # timer period, so MinS can fall below the timer's full-speed
    # ceil(timer / round) - 1 rounds. The run is accounted from its log.
    del rounds
    return None

  def describe(self):
    return dict(model='timer', **dataclasses.asdict(self.settings))
