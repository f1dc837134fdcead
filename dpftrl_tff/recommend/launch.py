"""The launch half of a recommendation: report goal, noise, timer, privacy.

Practices 3 and 4 of the paper's Sec. 2.5 on a planned population: the noise
per client z / m found in simulation is kept, the report goal raised until
DP-FTRL's privacy over the launch's rounds meets the target (`policy.
report_goal`), and the timer set so that MinS approaches the largest the
population allows (`policy.timer`, on the timer model's simulation of the
population). Every privacy figure is `planned_privacy.build_report`'s, the
function `privacy_accountant` prints, so the launch flag file given to that
binary prints the same epsilon.
"""

import dataclasses
import functools
import hashlib
import inspect
import math
import os
from typing import Callable, Dict, List, Optional, Sequence

from dpftrl_tff import accounting
from dpftrl_tff import participation
from dpftrl_tff import strict_json
from dpftrl_tff.aggregators import registry
from dpftrl_tff.privacy import planned_privacy
from dpftrl_tff.recommend import policy

AGGREGATOR = 'dp_ftrl'
# A mechanism and its settings, as `planned_privacy.build_report` takes them
# (the accountant's flags `planned_privacy.MECHANISM_FLAGS`); None: DP-FTRL
# with the tree, the paper's launches and the recommendation's.
Mechanism = Optional[Dict]
# Report goals whose timer-model participation is simulated, at most: the
# smallest meeting the target under ideal participation, the largest, and
# bisection steps between them.
MAX_SIMULATED_REPORT_GOALS = 5


def privacy(*, rounds: int, report_goal: int, noise_multiplier: float,
            min_separation: int, max_participation: int,
            delta: float, mechanism: Mechanism = None,
            with_epsilon: bool = True) -> Dict:
  """The accountant's report (`privacy_accountant`, by default with
  --aggregator=dp_ftrl); a mechanism's settings are validated there, as
  training validates them. A mechanism accounted for Poisson sampling
  (dp_fedavg) is refused: the planner accounts the MinS and MaxP a
  participation simulation realizes, which that accounting ignores."""
  aggregator = (mechanism or {}).get('aggregator', AGGREGATOR)
  if (aggregator in registry.names() and
      registry.get(aggregator).participation == 'poisson'):
    raise ValueError(
        f'--aggregator={aggregator} is accounted for Poisson sampling, not '
        f'for the participation the planner simulates (which the production '
        f'system can enforce); its epsilon: privacy_accountant '
        f'--aggregator={aggregator} --sampling_probability=Q.')
  return planned_privacy.build_report(
      rounds=rounds, noise_multiplier=noise_multiplier,
      min_separation=min_separation, max_participation=max_participation,
      report_goal=report_goal, delta=delta, with_epsilon=with_epsilon,
      **(mechanism or dict(aggregator=AGGREGATOR)))


def participation_of_simulation(sim: Dict) -> Dict:
  """MinS and MaxP a participation simulation realized (MinS T - 1 when no
  client took part twice)."""
  min_sep = sim['observed_min_separation']
  if min_sep < 0:
    min_sep = sim['rounds'] - 1
  return dict(min_separation=min_sep,
              max_participation=max(1, sim['observed_max_participation']))


def privacy_of_simulation(sim: Dict, noise_multiplier: float,
                          delta: float, mechanism: Mechanism = None) -> Dict:
  """The accountant's report for the MinS and MaxP `sim` realized."""
  return privacy(rounds=sim['rounds'], report_goal=sim['report_goal'],
                 noise_multiplier=noise_multiplier, delta=delta,
                 mechanism=mechanism, **participation_of_simulation(sim))


def noise_for_simulation(sim: Dict, target_zcdp: float, delta: float,
                         mechanism: Mechanism = None,
                         reference_noise: float = 1.0) -> float:
  """The z giving exactly `target_zcdp` with the MinS and MaxP of `sim`."""
  return noise_for_target(rounds=sim['rounds'],
                          report_goal=sim['report_goal'],
                          target_zcdp=target_zcdp, delta=delta,
                          mechanism=mechanism,
                          reference_noise=reference_noise,
                          **participation_of_simulation(sim))


def grid_recommendation(candidates: Sequence[Dict], target_zcdp: float,
                        delta: float, mechanism: Mechanism = None) -> Dict:
  """`plan_launch`'s choice over simulated (report goal, timer) candidates.

  Each candidate has its `zcdp` at the noise it was given (the same noise
  per client for all). The cheapest meeting the target: smallest report
  goal, then shortest timer. If none does, the largest report goal (the
  most private at equal noise per client) with the noise that meets the
  target, and that noise's privacy.
  """
  meeting = [c for c in candidates if c['zcdp'] <= target_zcdp]
  if meeting:
    best = min(meeting, key=lambda c: (c['report_goal'],
                                       c.get('timer_hours', 0)))
    return dict(best, reason='smallest report goal, then shortest timer, '
                'that meets the target with the same noise per client')
  largest = max(candidates, key=lambda c: (c['report_goal'], -c['zcdp']))
  try:
    z = noise_for_simulation(largest, target_zcdp, delta, mechanism,
                             reference_noise=largest['noise_multiplier'])
  except ValueError as e:   # Adaptive clipping: sigma_b too small for it.
    return dict(largest, meets_target=False, reason=(
        f'no configuration meets the target, and no noise multiplier can '
        f'with these settings: {e}'))
  report = privacy_of_simulation(largest, z, delta, mechanism)
  recommended = dict(largest, noise_multiplier=z, zcdp=report['zcdp'],
                     epsilon=report['epsilon'],
                     sensitivity_squared=report['sensitivity_squared'])
  recommended['meets_target'] = recommended['zcdp'] <= target_zcdp * (
      1 + 1e-9)
  return dict(recommended, reason='no configuration meets the target with '
              'the same noise per client: the largest report goal with the '
              'noise multiplier that does (utility will suffer)')


def ideal_participation(population: int, rounds: int,
                        report_goal: int) -> Dict:
  """MinS at the population's cap, floor(N / m) - 1 (at most T - 1), and the
  worst-case MaxP it allows: the best any timer can do."""
  min_sep = min(accounting.max_min_separation(population, report_goal),
                rounds - 1)
  return dict(min_separation=min_sep,
              max_participation=(rounds - 1) // (min_sep + 1) + 1)


def noise_for_target(*, rounds, report_goal, min_separation,
                     max_participation, target_zcdp, delta,
                     mechanism: Mechanism = None,
                     reference_noise: float = 1.0) -> float:
  """The z giving exactly `target_zcdp`.

  Every accounted mechanism's rho-zCDP is sensitivity^2 / (2 z^2) in its
  noise multiplier z (adaptive clipping: Theorem 1's equivalent z; SecAgg:
  the sensitivity inflated, the same for every z), so from rho at any
  valid `reference_noise` z_0: z = z_0 sqrt(rho(z_0) / target)
  (tests/privacy/plan_launch_test.py checks the scaling for each).
  """
  args = dict(rounds=rounds, report_goal=report_goal,
              min_separation=min_separation,
              max_participation=max_participation, delta=delta,
              mechanism=mechanism, with_epsilon=False)
  rho = privacy(noise_multiplier=reference_noise, **args)['zcdp']
  z = reference_noise * math.sqrt(rho / target_zcdp)
  # Validated at z as the accountant validates it (adaptive clipping: no z
  # at or above 2 sigma_b), so an infeasible target raises here, naming
  # the flag, rather than where the z is used.
  privacy(noise_multiplier=z, **args)
  return z


def report_goal_ceiling(population: int, largest: int,
                        timer_settings: participation.TimerSettings =
                        participation.TimerSettings()) -> int:
  """The largest report goal a launch of `population` devices can have:
  `largest`, at most the devices the timer model has active on a day
  (population x daily_active_fraction; above it no round fills)."""
  active = math.floor(population * timer_settings.daily_active_fraction)
  return max(1, min(largest, population, active))


def report_goal_candidates(smallest: int, largest: int,
                           steps_per_doubling: int = 4) -> List[int]:
  """Report goals from `smallest` to `largest`, 2^(1/steps) apart."""
  if largest <= smallest:
    return [largest]
  out, m = [], float(smallest)
  while m < largest:
    out.append(int(round(m)))
    m *= 2 ** (1 / steps_per_doubling)
  return sorted(set(out + [largest]))


def smallest_report_goal(*, noise_per_client, population, rounds,
                         smallest, largest, target_zcdp,
                         delta) -> policy.ReportGoalChoice:
  """Practice 3 under ideal participation (the population's MinS cap)."""

  def participation_of(m):
    return ideal_participation(population, rounds, m)

  def zcdp_of(m, z):
    return privacy(rounds=rounds, report_goal=m, noise_multiplier=z,
                   delta=delta, with_epsilon=False,
                   **participation_of(m))['zcdp']

  def noise_for(m, rho):
    return noise_for_target(rounds=rounds, report_goal=m,
                            target_zcdp=rho, delta=delta,
                            **participation_of(m))

  return policy.report_goal(
      noise_per_client=noise_per_client,
      candidates=report_goal_candidates(smallest, min(largest, population)),
      zcdp_of=zcdp_of, noise_for=noise_for, target_zcdp=target_zcdp)


# Practice 4 without given timers: timers around the one whose period holds
# as many rounds as the population's MinS cap, at full speed; 2 because
# the timer model's rounds per day fall below full speed (devices check in
# at night only), so the period that reaches the cap is longer.
AUTO_TIMER_FACTORS = (0.5, 1.0, 1.5, 2.0)
_DAY_HOURS = 24


def auto_timer_hours(population: int, rounds: int, report_goal: int,
                     timer_settings: participation.TimerSettings) -> List[float]:
  """Timers (hours) to simulate for report goal m, shortest first.

  The period in which the system runs cap + 1 rounds (cap = floor(N / m) -
  1, at most T - 1) at its `round_minutes`, times `AUTO_TIMER_FACTORS`. A
  timer of a day or more is rounded to whole days, as the paper raises its
  timers "in the unit of 24 hours due to the uneven diurnal participation
  pattern" (Sec. 2.2, System configuration): a device that took part in its
  nightly window becomes eligible again at the same hour of a later night,
  where a timer of 3.5 days leaves it out until the night after (in the
  timer model, 83.5 h gives a smaller MinS than 72 h, over more days). A
  shorter timer is rounded to the half hour, at least one round.
  """
  cap = min(accounting.max_min_separation(population, report_goal),
            rounds - 1)
  hours = (cap + 1) * timer_settings.round_minutes / 60
  least = timer_settings.round_minutes / 60

  def rounded(value):
    if value >= _DAY_HOURS:
      return float(round(value / _DAY_HOURS) * _DAY_HOURS)
    return max(least, round(2 * value) / 2)

  return sorted({rounded(f * hours) for f in AUTO_TIMER_FACTORS})


class SimulationCache:
  """Timer-model simulations kept in a strict-JSON file, so that a
  resumed `recommend` re-plans its launch without simulating again.

  A result is reused only for the same population, rounds, report goal,
  seed and timer settings, and the same participation code (a digest of
  its modules' source: a changed model simulates again). The simulation is
  NumPy with the given seed, so a reused result equals a new one.
  """

  def __init__(self, path: str):
    self.path = path
    self._entries = {}
    if os.path.isfile(path):
      with open(path, encoding='utf-8') as f:
        self._entries = strict_json.loads(f.read()).get('simulations', {})

  @staticmethod
  @functools.lru_cache(maxsize=None)
  def code_digest() -> str:
    from dpftrl_tff.participation import log, simulation, timer  # pylint: disable=g-import-not-at-top
    text = ''.join(inspect.getsource(m) for m in (log, simulation, timer))
    return hashlib.sha256(text.encode('utf-8')).hexdigest()

  def _key(self, **kwargs) -> str:
    kwargs['timer'] = dataclasses.asdict(kwargs['timer'])
    return strict_json.dumps(dict(kwargs, code=self.code_digest()),
                             sort_keys=True)

  def contains(self, **kwargs) -> bool:
    return self._key(**kwargs) in self._entries

  def simulate(self, **kwargs) -> Dict:
    """`participation.simulate(**kwargs)`, from the file when it has it."""
    key = self._key(**kwargs)
    if key in self._entries:
      return dict(self._entries[key])
    result = participation.simulate(**kwargs)
    # Kept only if strict JSON gives it back unchanged (no NaN to lose).
    if strict_json.loads(strict_json.dumps(result)) == result:
      self._entries[key] = result
      strict_json.write(self.path, dict(simulations=self._entries))
    return result


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
  report_goal: int
  noise_multiplier: float
  timer_hours: float
  min_separation: int
  max_participation: int
  # The timer model's time for the rounds, and its rounds short of the
  # report goal (devices did not check in fast enough).
  simulated_days: float
  short_rounds: int
  privacy: Dict
  capped: bool
  reason: str
  timer_simulations: List[Dict]
  report_goal_curve: List[Dict]


def plan(*, noise_per_client: float, population: int, rounds: int,
         smallest_report_goal_: int, largest_report_goal: int,
         target_zcdp: float, delta: float,
         timer_hours: Optional[Sequence[float]],
         timer_settings: participation.TimerSettings =
         participation.TimerSettings(), seed: int = 0,
         progress: Optional[Callable[[str], None]] = None,
         cache: Optional[SimulationCache] = None) -> LaunchPlan:
  """Practices 3 and 4: the launch for a simulated noise per client.

  The smallest report goal meeting the target under ideal participation
  (the population's MinS cap) is the first candidate; at each report goal
  tried, the timer model is simulated at each of `timer_hours` (None:
  `auto_timer_hours`, shortest first, until one's MinS approaches the cap)
  and `policy.timer` picks the timer, whose realized
  MinS and MaxP give the privacy. If the first misses, the largest is
  tried, then the smallest meeting the target is bisected for between them
  (larger report goals at the same z / m are more private), at most
  `MAX_SIMULATED_REPORT_GOALS` report goals in all. If even the largest
  misses, its noise is raised to meet the target (capped). With `cache`,
  simulations it holds are reused and new ones added to it.
  """
  say = progress or (lambda text: None)
  largest = report_goal_ceiling(population, largest_report_goal,
                                timer_settings)
  first = smallest_report_goal(
      noise_per_client=noise_per_client, population=population,
      rounds=rounds, smallest=smallest_report_goal_, largest=largest,
      target_zcdp=target_zcdp, delta=delta)
  curve = report_goal_curve(noise_per_client=noise_per_client,
                            population=population, rounds=rounds,
                            smallest=smallest_report_goal_, largest=largest,
                            delta=delta)
  goals = [m for m in report_goal_candidates(smallest_report_goal_, largest)
           if m >= first.report_goal]
  all_sims, tried = [], {}

  def attempt(m):
    """(meets, timer simulation chosen, privacy at z = z/m * m) for m."""
    if m not in tried:
      sims = []
      for hours in (timer_hours or auto_timer_hours(population, rounds, m,
                                                    timer_settings)):
        args = dict(population=population, rounds=rounds, report_goal=m,
                    model='timer', seed=seed, timer=dataclasses.replace(
                        timer_settings, timer_hours=hours))
        reused = cache is not None and cache.contains(**args)
        say(f'{"reusing" if reused else "simulating"} the timer model: '
            f'{population:,} devices, report goal {m}, timer '
            f'{participation.format_hours(hours)}, {rounds} rounds')
        sims.append(cache.simulate(**args) if cache is not None
                    else participation.simulate(**args))
        if not timer_hours and policy.timer_reaches_cap(sims[-1]):
          break   # policy.timer picks the shortest that does.
      all_sims.extend(sims)
      chosen = policy.timer(sims)
      report = privacy_of_simulation(chosen, noise_per_client * m, delta)
      tried[m] = (report['zcdp'] <= target_zcdp, chosen, report)
    return tried[m]

  low, high = 0, len(goals) - 1   # Indices: low untried or missing.
  if attempt(goals[low])[0]:
    high = low
  elif high > low and attempt(goals[high])[0]:
    while high - low > 1 and len(tried) < MAX_SIMULATED_REPORT_GOALS:
      mid = (low + high) // 2
      if attempt(goals[mid])[0]:
        high = mid
      else:
        low = mid
  m = goals[high]
  meets, chosen, report = attempt(m)
  realized = participation_of_simulation(chosen)
  z = noise_per_client * m
  if meets and m == first.report_goal and not first.capped:
    capped, reason = False, first.reason
  elif meets:
    capped, reason = False, (
        f'the smallest report goal found (of {len(tried)} simulated) '
        f'meeting the target at the simulated noise per client with the '
        f'timer model\'s participation' + (
            '' if first.capped else f'; under ideal participation '
            f'{first.report_goal} would have'))
  else:
    z = noise_for_simulation(chosen, target_zcdp, delta)
    report = privacy_of_simulation(chosen, z, delta)
    capped, reason = True, policy.capped_reason(
        m, z, noise_per_client, ' with the timer model\'s participation')
  return LaunchPlan(
      report_goal=m, noise_multiplier=z, timer_hours=chosen['timer_hours'],
      simulated_days=chosen['simulated_days'],
      short_rounds=chosen['short_rounds'],
      min_separation=realized['min_separation'],
      max_participation=realized['max_participation'], privacy=report,
      capped=capped, reason=reason, timer_simulations=all_sims,
      report_goal_curve=curve)


def report_goal_curve(*, noise_per_client, population, rounds, smallest,
                      largest, delta) -> List[Dict]:
  """Epsilon against report goal at the simulated noise per client, ideal
  participation (the figure of practice 3)."""
  out = []
  for m in report_goal_candidates(smallest, largest, steps_per_doubling=2):
    part = ideal_participation(population, rounds, m)
    report = privacy(rounds=rounds, report_goal=m,
                     noise_multiplier=noise_per_client * m, delta=delta,
                     **part)
    out.append(dict(report_goal=m, noise_multiplier=noise_per_client * m,
                    epsilon=report['epsilon'], zcdp=report['zcdp'], **part))
  return out
