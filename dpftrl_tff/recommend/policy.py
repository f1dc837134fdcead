"""The decisions of the paper's Sec. 2.5 practices, on results already had.

Each function takes simulation or accounting results (plain numbers, so
that a test can give canned ones) and returns what the practice decides,
with the reason in words for `recommendation.md`:

  utility_target        what "good enough" means when the user does not say
                        (a fraction of the tuned no-DP accuracy, never below
                        the unigram baseline plus a margin);
  best_learning_rates   practice 6: the best (client_lr, server_lr) of the
                        small report-goal runs;
  learning_rates_at_every_seed
                        which of them run again at every seed (the best
                        few of one run each), and `best_learning_rates_
                        over_seeds` the pair chosen on those means;
  learning_rate_edge    whether the grid tried brackets that pair: its
                        untried neighbours in the grid, and the pairs past
                        the grid's edge;
  mean_over_seeds       one setting's runs with different seeds as one
                        result: the mean accuracy the practices judge it on;
  seeds_to_settle       how many seeds a margin to the target within two
                        standard errors would take to leave them;
  largest_noise         practice 2: the largest noise multiplier meeting the
                        utility target in the small report-goal runs;
  noise_above_no_noise  the noise setting clearly more accurate than the
                        no-noise one, if any (early in training noise can
                        help, and the target is taken from no noise);
  report_goal           practice 3: the smallest report goal meeting the
                        privacy target at the same noise per client (z / m),
                        or the largest allowed with more noise (a warning);
  timer                 practice 4: the shortest timer whose MinS comes near
                        the largest the population allows;
  clipped_count_stddev  practice 6's count noise: the paper's m / 20, or
                        more when the model's noise would grow by more than
                        `VALUE_NOISE_INFLATION` (Theorem 1).
"""

import dataclasses
import math
import statistics
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from dpftrl_tff.accounting import adaptive as adaptive_accounting

# Practice 4: a timer "approaches" the population's MinS cap when its
# observed MinS reaches this share of it.
TIMER_MIN_SEP_SHARE = 0.9

# Practice 6: adaptive clipping's count release may raise the model's noise
# multiplier z_Delta above the budget's z by at most this factor.
VALUE_NOISE_INFLATION = 1.05


# Where a utility target comes from: the user, a share of the no-DP run's
# accuracy, or the unigram baseline plus a margin (no run).
TARGET_SOURCES = ('given', 'no_dp_share', 'unigram_floor')


@dataclasses.dataclass(frozen=True)
class UtilityTarget:
  value: float
  rule: str
  source: str   # One of TARGET_SOURCES.

  def __post_init__(self):
    if self.source not in TARGET_SOURCES:
      raise ValueError(f'utility target source {self.source!r} is unknown; '
                       f'allowed: {", ".join(TARGET_SOURCES)}.')

  @property
  def given(self) -> bool:
    return self.source == 'given'


def utility_target(*, no_dp_accuracy: float, unigram_accuracy: float,
                   fraction: float, margin: float,
                   given: Optional[float] = None) -> UtilityTarget:
  """The accuracy a recommended simulation must reach.

  Given by the user: that. Otherwise max(fraction * no-DP accuracy,
  unigram + margin): DP may cost a share of the accuracy the same recipe
  reaches without noise, never the model's point (a model below the unigram
  baseline is worse than always suggesting the most frequent word).
  """
  if given is not None:
    return UtilityTarget(given, f'given: in-vocab accuracy >= {given:.2%}',
                         'given')
  share = fraction * no_dp_accuracy
  floor = unigram_accuracy + margin
  value = max(share, floor)
  which = ('the share' if share >= floor else
           'the unigram floor (the share would be below it)')
  return UtilityTarget(
      value, f'max({fraction:g} x the no-DP accuracy at the same learning '
      f'rates and rounds ({no_dp_accuracy:.2%}), the unigram baseline '
      f'({unigram_accuracy:.2%}) + {100 * margin:g} points) = {value:.2%}: '
      f'{which}', 'no_dp_share' if share >= floor else 'unigram_floor')


def best_learning_rates(results: Sequence[Dict]) -> Dict:
  """The result with the highest `accuracy` (None: diverged or failed).

  Runs whose training loss exploded (`exploded`: some clients' local
  training blew up, hidden by the clipping; the run flags it) are passed
  over while any other learned: a recipe should be stable, not lucky. Ties
  go to the smaller client then server learning rate (the safer one).
  Raises ValueError if no run learned anything.
  """
  ranked = learning_rate_ranking(results)
  if not ranked:
    raise ValueError('every learning-rate run diverged or failed: no '
                     'learning rate to recommend.')
  return ranked[0]


def learning_rate_ranking(results: Sequence[Dict]) -> List[Dict]:
  """The candidates of `best_learning_rates`, best first: the runs with a
  finite accuracy (only those whose loss did not explode, if any), by
  accuracy, ties to the smaller client then server learning rate."""
  finished = [r for r in results if finite(r.get('accuracy'))]
  stable = [r for r in finished if not r.get('exploded')]
  return sorted(stable or finished, key=lambda r: (
      -r['accuracy'], r['client_lr'], r['server_lr']))


def learning_rates_at_every_seed(results: Sequence[Dict],
                                 count: int) -> List[Dict]:
  """The learning-rate runs whose pairs run again at every seed: the first
  `count` of `learning_rate_ranking` (one run each), when it has at least
  two candidates (with one there is no choice to settle), else none.

  The best of several one-seed runs is the likeliest to have been lucky
  (its accuracy is the largest of several noisy draws), so the choice is
  taken again on the means of the best few, which share that selection.
  """
  ranked = learning_rate_ranking(results)
  return ranked[:count] if len(ranked) > 1 else []


def best_learning_rates_over_seeds(results: Sequence[Dict],
                                   at_every_seed: Sequence[Dict]) -> Dict:
  """Practice 6's pair when some pairs also ran at every seed.

  Args:
    results: every learning-rate run, one seed each.
    at_every_seed: `mean_over_seeds` of the pairs `learning_rates_at_every_
      seed` chose, in any order (empty: one seed, or one candidate).

  Returns:
    `best_learning_rates(at_every_seed)`: the highest mean (a pair with a
    seed that diverged or failed has no mean and is passed over, as is one
    whose loss exploded at a seed while another pair's did not), compared
    only among themselves: a pair of one run is not set against a mean.
    When none of them has a mean, the best of the other pairs' one-seed
    runs; when there are no means to compare, `best_learning_rates(
    results)`. Raises ValueError if nothing learned.
  """
  if not at_every_seed:
    return best_learning_rates(results)
  ranked = learning_rate_ranking(at_every_seed)
  if ranked:
    return ranked[0]
  again = {(r['client_lr'], r['server_lr']) for r in at_every_seed}
  return best_learning_rates(
      [r for r in results if (r['client_lr'], r['server_lr']) not in again])


def learning_rate_edge(chosen: Tuple[float, float],
                       grid: Sequence[Tuple[float, float]],
                       tried: Sequence[Tuple[float, float]]) -> Dict:
  """Whether the (client_lr, server_lr) pairs tried bracket the chosen one.

  Along each axis (the client lr at the chosen server lr, and the server
  lr at the chosen client lr) and in each direction, the chosen pair's
  neighbour is the nearest pair of `grid` on that line. An optimum of a
  grid search is bracketed in a direction only when that neighbour was
  tried (and did worse); otherwise a pair there may do better:

    untried_neighbours  the neighbours in `grid` not in `tried` (a larger
                        budget plans them: the grid is tried in order);
    beyond_grid         where the chosen value is the grid's least or
                        largest on that axis (no pair of the grid lies
                        past it), the pair one grid step further: the value
                        times the ratio to the axis's next value inward.

  A direction without a neighbour whose value is not the axis's extreme
  (a gap in the grid, not its edge) is neither.

  Args:
    chosen: the chosen (client_lr, server_lr).
    grid: every pair the search can plan (`search.LEARNING_RATE_GRID`).
    tried: the pairs run.

  Returns:
    {'untried_neighbours': [pair, ...], 'beyond_grid': [pair, ...]}, each
    in the order client lr down, up, server lr down, up.
  """
  tried = {tuple(p) for p in tried}
  untried, beyond = [], []
  for axis in (0, 1):
    line = sorted(p[axis] for p in grid
                  if p[1 - axis] == chosen[1 - axis] and p != tuple(chosen))
    values = sorted({p[axis] for p in grid})
    value = chosen[axis]
    for side in (-1, 1):
      past = [v for v in line if (v - value) * side > 0]
      if past:
        near = min(past, key=lambda v: abs(v - value))
        pair = (near, chosen[1]) if axis == 0 else (chosen[0], near)
        if pair not in tried:
          untried.append(pair)
      elif len(values) > 1 and value == (values[0] if side < 0 else
                                         values[-1]):
        inward = values[1] if side < 0 else values[-2]
        further = float(f'{value * value / inward:.3g}')
        beyond.append((further, chosen[1]) if axis == 0 else
                      (chosen[0], further))
  return dict(untried_neighbours=untried, beyond_grid=beyond)


def mean_over_seeds(runs: Sequence[Dict]) -> Dict:
  """One setting's runs, which differ only in `--seed`, as one result.

  The first run's keys (its name, flags and noise seed: the run
  `simulation.flags` names), with `accuracy`, `top3_accuracy` and
  `unigram_accuracy` the means over the runs, and

    seeds, seed_accuracies   each run's seed and accuracy;
    accuracy_min, accuracy_max;
    accuracy_stderr          the standard error of the mean accuracy,
                             s / sqrt(K) with s the sample standard
                             deviation of the K accuracies (None for K = 1);
    diverged, exploded       true if any run's was: a setting is only as
                             stable as its least stable seed;
    curve                    the mean curve when every run evaluated at the
                             same rounds, else the first run's.

  A setting with a run that diverged or failed (accuracy None or not
  finite) has accuracy and top-3 accuracy None: a mean over the other
  seeds would hide it. The unigram baseline, the evaluation data's, is the
  mean of the runs that report it.
  """
  if not runs:
    raise ValueError('a setting needs at least one run.')
  first = runs[0]
  out = dict(first)
  accuracies = [r.get('accuracy') for r in runs]
  all_finite = all(finite(a) for a in accuracies)
  for key in ('accuracy', 'top3_accuracy'):
    values = [r.get(key) for r in runs]
    out[key] = (statistics.fmean(values) if all_finite and
                all(finite(v) for v in values) else None)
  # The baseline is the evaluation data's, whatever the model did.
  unigram = [r['unigram_accuracy'] for r in runs
             if finite(r.get('unigram_accuracy'))]
  out['unigram_accuracy'] = statistics.fmean(unigram) if unigram else None
  out.update(
      seeds=[r.get('seed') for r in runs],
      seed_accuracies=[a if finite(a) else None for a in accuracies],
      accuracy_min=min(accuracies) if all_finite else None,
      accuracy_max=max(accuracies) if all_finite else None,
      accuracy_stderr=(statistics.stdev(accuracies) / math.sqrt(len(runs))
                       if all_finite and len(runs) > 1 else None),
      diverged=any(bool(r.get('diverged')) for r in runs),
      exploded=any(bool(r.get('exploded')) for r in runs))
  curves = [r.get('curve') or [] for r in runs]
  rounds = [[p[0] for p in c] for c in curves]
  if len(runs) > 1 and curves[0] and all(x == rounds[0] for x in rounds) and \
      all(finite(p[1]) for c in curves for p in c):
    out['curve'] = [[x, statistics.fmean(c[i][1] for c in curves)]
                    for i, x in enumerate(rounds[0])]
  return out


def seeds_to_settle(margin: Optional[float], stderr: Optional[float],
                    seeds: int) -> Optional[float]:
  """The seeds at which a margin to the target would be two standard errors.

  With K seeds the margin (a setting's mean accuracy minus the target) has
  standard error SE. Were the runs to keep spreading as these did, at K'
  seeds it would be SE sqrt(K / K'), and |margin| >= 2 SE sqrt(K / K')
  first at

    K' = ceil(K (2 SE / |margin|)^2).

  A projection, not a promise: the mean moves as seeds are added, and a
  true margin of zero is never settled. Returns None when there is nothing
  to project (one seed or a failed one: SE None; a margin not finite) or
  the margin is already at least two standard errors; math.inf for a zero
  margin.
  """
  if stderr is None or not finite(margin) or abs(margin) >= 2 * stderr:
    return None
  if margin == 0:
    return math.inf
  return float(math.ceil(seeds * (2 * stderr / margin)**2))


def largest_noise(results: Sequence[Dict], target: float) -> Optional[Dict]:
  """Practice 2: the largest noise multiplier that meets the target.

  `results` are runs at one report goal with `noise_multiplier` and
  `accuracy`; the largest z such that it and every smaller z tried reach
  `target` (one noisy evaluation above the target past a failure does not
  count). None if the smallest z tried misses it.
  """
  chosen = None
  for r in sorted(results, key=lambda r: r['noise_multiplier']):
    if not meets_target(r, target):
      break
    chosen = r
  return chosen


# With one seed a setting, a noise run more accurate than the no-noise run
# at the same seed by more than this is said: about twice the standard
# deviation of such same-seed differences measured in docs/recommend.md
# (0.8 to 1.1 points, SymPy 2025, 65 rounds, z 0.02 to 0.16, 3 seeds).
ONE_SEED_NOISE_LEAD = 0.02


def noise_above_no_noise(noise_rows: Sequence[Dict],
                         no_dp: Dict) -> Optional[Dict]:
  """The noise setting most above the no-noise one, when clearly above.

  The no-noise setting and every noise setting ran at the same seeds
  (`mean_over_seeds` rows), so a setting's lead is paired: the mean over
  the K seeds of d_s = accuracy(z, s) - accuracy(0, s), with standard error
  s_d / sqrt(K), s_d the sample standard deviation of the d_s. "Clearly":
  the lead is more than twice its standard error (a yardstick with a few
  seeds, not a test), or with one seed more than `ONE_SEED_NOISE_LEAD`.

  Returns dict(row=the setting, lead=its mean difference, stderr=its
  standard error (None with one seed), seeds=K) for the largest clear lead,
  or None: none is clearly above, or a run failed or did not share the
  no-noise setting's seeds.
  """
  base = dict(zip(no_dp.get('seeds') or (), no_dp.get('seed_accuracies')
                  or ()))
  if not base or not all(finite(a) for a in base.values()):
    return None
  best = None
  for row in noise_rows:
    runs = dict(zip(row.get('seeds') or (), row.get('seed_accuracies') or ()))
    if set(runs) != set(base) or not all(finite(a) for a in runs.values()):
      continue
    diffs = [runs[s] - base[s] for s in sorted(base)]
    lead = statistics.fmean(diffs)
    if len(diffs) > 1:
      stderr = statistics.stdev(diffs) / math.sqrt(len(diffs))
      clear = lead > 2 * stderr
    else:
      stderr = None
      clear = lead > ONE_SEED_NOISE_LEAD
    if clear and (best is None or lead > best['lead']):
      best = dict(row=row, lead=lead, stderr=stderr, seeds=len(diffs))
  return best


def meets_target(result: Dict, target: float) -> bool:
  """Whether a run's accuracy is finite and at least `target`."""
  return finite(result.get('accuracy')) and result['accuracy'] >= target


@dataclasses.dataclass(frozen=True)
class ReportGoalChoice:
  report_goal: int
  noise_multiplier: float
  zcdp: float
  capped: bool
  reason: str


def report_goal(*, noise_per_client: float, candidates: Sequence[int],
                zcdp_of: Callable[[int, float], float],
                noise_for: Callable[[int, float], float],
                target_zcdp: float) -> ReportGoalChoice:
  """Practice 3: raise report goal and noise together to meet the target.

  Args:
    noise_per_client: z / m of the simulation (kept at launch).
    candidates: the report goals allowed, ascending; the last is the
      largest the system supports.
    zcdp_of: (m, z) -> the launch's rho-zCDP.
    noise_for: (m, target rho) -> the noise multiplier giving exactly it.
    target_zcdp: the privacy target.

  Returns the smallest m whose z = noise_per_client * m meets the target;
  if none does, the largest m with the noise that meets it (capped: the
  launch then has more noise per client than was simulated).
  """
  candidates = sorted(set(int(m) for m in candidates))
  for m in candidates:
    z = noise_per_client * m
    rho = zcdp_of(m, z)
    if rho <= target_zcdp:
      return ReportGoalChoice(
          m, z, rho, False, f'the smallest report goal whose noise at the '
          f'simulated noise per client (z / m = {noise_per_client:.4g}) '
          f'meets the target')
  m = candidates[-1]
  z = noise_for(m, target_zcdp)
  return ReportGoalChoice(m, z, zcdp_of(m, z), True,
                          capped_reason(m, z, noise_per_client))


def capped_reason(report_goal: int, noise_multiplier: float,
                  noise_per_client: float, participation: str = '') -> str:
  """Why a launch is capped at `report_goal` with more noise, in words."""
  m, z = report_goal, noise_multiplier
  return (f'no report goal up to the largest allowed ({m}) meets the target '
          f'at the simulated noise per client{participation}: report goal '
          f'capped at {m}, noise raised to z = {z:.4g} (z / m = '
          f'{z / m:.4g} against the simulated {noise_per_client:.4g}); '
          f'utility will be below the simulation\'s')


def _separation(simulation: Dict):
  """(MinS as the accountant takes it, the most MinS can be) of a timer
  simulation of T rounds: no device taking part twice (the log's -1) is
  MinS T - 1 (`launch.participation_of_simulation`), and the cap
  floor(N / m) - 1 is at most T - 1."""
  min_sep = simulation['observed_min_separation']
  cap = simulation['population_min_separation']
  rounds = simulation.get('rounds')
  if rounds is not None:
    cap = min(cap, rounds - 1)
    if min_sep < 0:
      min_sep = rounds - 1
  return min_sep, cap


def timer_reaches_cap(simulation: Dict,
                      share: float = TIMER_MIN_SEP_SHARE) -> bool:
  """Whether a timer simulation's MinS reaches `share` of what MinS can be,
  min(floor(N / m) - 1, T - 1) (practice 4's aim)."""
  min_sep, cap = _separation(simulation)
  return min_sep >= share * cap


def timer(simulations: Sequence[Dict],
          share: float = TIMER_MIN_SEP_SHARE) -> Dict:
  """Practice 4: the shortest timer whose MinS approaches the cap.

  `simulations` have `timer_hours`, `observed_min_separation`,
  `observed_max_participation`, `population_min_separation` (floor(N / m)
  - 1) and `rounds` T. The cap MinS can reach is min(floor(N / m) - 1,
  T - 1), and a timer under which no device took part twice has MinS
  T - 1 (MaxP 1: the least a launch can spend). The shortest timer reaching
  `share` of the cap; if none does, the one with the largest MinS (then
  the smaller MaxP, then the shorter).
  """
  if not simulations:
    raise ValueError('no timer simulation to choose from.')
  ordered = sorted(simulations, key=lambda s: s['timer_hours'])
  for s in ordered:
    if timer_reaches_cap(s, share):
      return s
  return max(ordered, key=lambda s: (
      _separation(s)[0], -s.get('observed_max_participation', 0),
      -s['timer_hours']))


def clipped_count_stddev(noise_multiplier: float,
                         clients_per_round: int) -> float:
  """sigma_b for practice 6's adaptive-clipping runs at z and m.

  Theorem 1 splits the budget of z between the clipped counts (std sigma_b)
  and the model (z_Delta):

    z_Delta = z / sqrt(1 - (z / (2 sigma_b))^2).

  The paper's sigma_b = m / 20 keeps z_Delta near z only while z is well
  below m / 10: at 20 clients and z = 1.99 (a population of 100,000 at
  epsilon 1) it gives z_Delta = 18.6, and above z = 2 no z_Delta exists.
  Practice 6 must tune at the noise the target allows, so sigma_b is the
  larger of m / 20 and the least value with z_Delta <= VALUE_NOISE_INFLATION
  z: sigma_b = z / (2 sqrt(1 - VALUE_NOISE_INFLATION^-2)), 1.64 z.
  A larger sigma_b makes the clip's estimate noisier (the counts' relative
  noise is sigma_b / m), not the model.
  """
  least = noise_multiplier / (
      2.0 * math.sqrt(1.0 - VALUE_NOISE_INFLATION**-2))
  return max(adaptive_accounting.default_clipped_count_stddev(
      clients_per_round), least)


def round_up(value: float, digits: int = 4) -> float:
  """`value` rounded up to `digits` significant digits (a flag value that
  keeps a lower bound)."""
  scale = 10.0**(digits - 1 - math.floor(math.log10(value)))
  rounded = math.ceil(value * scale - 1e-9) / scale
  return float(f'{rounded:.{digits}g}')


def noise_grid(base: float, factors: Sequence[float]) -> List[float]:
  """The simulation's noise multipliers: `base` times each factor, ascending,
  rounded to 4 significant digits (the flag values runs are named by)."""
  return sorted({float(f'{base * f:.4g}') for f in factors})


def finite(value) -> bool:
  """Whether `value` is a finite number (an accuracy that is not None, NaN
  or infinite)."""
  return isinstance(value, (int, float)) and math.isfinite(value)
