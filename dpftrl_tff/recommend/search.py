"""The simulations of a recommendation, in order, within a time budget.

The paper's Sec. 2.5 practices on a proxy corpus (`recommend.policy` holds
each decision, `recommend.launch` the launch's privacy):

  1. pretrain on the corpus's public text, when it has some;
  6. tune the client and server learning rates in small report-goal runs
     with adaptive clipping (Algorithm 1) at the launch's least noise per
     client, and take the clip norm from its estimate;
     the same learning rates without DP give the no-DP accuracy, and with
     the unigram baseline the default utility target;
  2. the largest noise multiplier meeting the utility target, DP-FTRL with
     the fixed clip, the noise per client doubled from the least the
     privacy target needs at the largest report goal until a run misses;
  3, 4. the launch (`recommend.launch.plan`).

Every simulation is a run directory under <output_dir>/runs made by
`experiments.run_stackoverflow` (`training_runs.run_training`): a finished
run with the same flags is reused and an interrupted one resumed, so a
killed recommendation continues where it stopped. The number of rounds and
the size of the grids are fixed up front from the budget (`plan_budget`),
so that a re-run makes the same runs.
"""

import dataclasses
import os
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

from dpftrl_tff.data import public_corpus
from dpftrl_tff.privacy import privacy_report
from dpftrl_tff.recommend import launch as launch_lib
from dpftrl_tff.recommend import policy
from dpftrl_tff.run import progress as progress_lib
from dpftrl_tff.run import run_directory
from dpftrl_tff.studies import training_runs

# Client and server learning rates of practice 6, in the order tried when
# the budget allows fewer: the CPU-scale recipe's, then around it.
LEARNING_RATE_GRID = ((0.5, 1.0), (1.0, 1.0), (0.5, 3.0), (2.0, 1.0),
                      (1.0, 3.0), (0.25, 1.0), (2.0, 0.3), (0.5, 0.3))
# The --learning_rates_at_every_seed that recommendation.md advises when
# the chosen pair's lead over the next is within the seeds' spread.
ADVISED_LEARNING_RATES_AT_EVERY_SEED = 2
# --learning_rates_past_grid_edge: the most pairs past the grid's edge run
# (`policy.learning_rate_edge`'s beyond_grid: one per learning rate, when
# the chosen pair has that rate's least or largest value in the grid).
PAST_GRID_EDGE_RUNS = 2
# Practice 2: noise per client tried, as multiples of the least the privacy
# target allows at the largest report goal (ascending; stops at a miss).
NOISE_FACTORS = (1, 2, 4, 8, 16, 32)
# The simulations' model and data, overridable by flags after `--`.
BASE_FLAGS = ('--vocab_size=4000', '--latent_size=128', '--embedding_size=64',
              '--max_elements_per_client=32', '--client_batch_size=8',
              '--server_momentum=0.9', '--num_eval_examples=4000',
              '--eval_sentences_per_author=20',
              '--participation=min_sep_groups')
QUICK_FLAGS = ('--vocab_size=200', '--latent_size=16', '--embedding_size=8',
               '--max_elements_per_client=4', '--client_batch_size=4',
               '--num_eval_examples=100')
MODEL_FLAG_NAMES = ('vocab_size', 'latent_size', 'embedding_size')
# Flags of the simulations (after `--`) that pretraining takes as given: its
# vocabulary must be theirs (a pretrained checkpoint is checked against it).
PRETRAIN_DATA_FLAG_NAMES = ('word_counts_path',)
# Seconds a round of 20 clients of 32 sentences takes at the default model
# on this project's 2-core reference machine (docs/performance.md), and a
# run's start-up (TensorFlow, the TFF worker, the first round's tracing).
REFERENCE_ROUND_SECONDS = 0.7
RUN_START_SECONDS = 20.0
PRETRAIN_STEP_SECONDS = 0.05
# Timer-model simulation: seconds per million devices and 1000 rounds
# (measured 3.2 to 4.2: 27 to 35 s for 4.21M devices, 2000 rounds, timers
# of 24 to 81 h, on the shared 2-core machine, 2026-11-27; about a third
# less since stop 56's faster timer model). Kept: the budget fixes the
# simulations' rounds, and a re-run recommendation must make the same runs.
TIMER_SECONDS_PER_MILLION_KROUNDS = 4.5


@dataclasses.dataclass(frozen=True)
class Request:
  """What the user asked for (`experiments.recommend`'s flags)."""
  cache_dir: str
  output_dir: str
  population: int
  launch_rounds: int
  target_epsilon: float
  delta: float
  max_report_goal: int
  clients_per_round: int
  budget_minutes: float
  utility_target: Optional[float] = None
  utility_fraction: float = 0.9
  utility_margin: float = 0.01
  timer_hours: Optional[Sequence[float]] = None   # None: auto.
  pretrain_steps: int = 2000
  max_rounds: int = 1000
  seed: int = 0
  # Seeds seed, seed + 1, ... of each no-noise and noise setting: the
  # practices judge a setting on its runs' mean accuracy.
  seeds: int = 1
  # With seeds > 1, the best this many learning-rate pairs of one run each
  # run again at the other seeds, the pair chosen on their means (0: none).
  learning_rates_at_every_seed: int = 0
  # After the grid, the pairs one grid step past its edge from the best of
  # one run each (`policy.learning_rate_edge`), run once and compared too.
  learning_rates_past_grid_edge: bool = False
  quick: bool = False
  extra_flags: Sequence[str] = ()


@dataclasses.dataclass(frozen=True)
class Budget:
  """How the budget is spent: rounds per simulation and grid sizes."""
  rounds: int
  learning_rates: Sequence[tuple]
  noise_factors: Sequence[int]
  pretrain_steps: int
  estimated_seconds: float
  round_seconds: float
  lines: Sequence[str]


def planned_simulations(num_learning_rates: int, num_noise_factors: int,
                        seeds: int, learning_rates_at_every_seed: int = 0,
                        past_grid_edge: int = 0) -> int:
  """The most simulations a plan makes: each learning-rate pair once, and
  up to `past_grid_edge` pairs past the grid's edge, the best
  `learning_rates_at_every_seed` of them at the other seeds, the no-DP
  setting and each noise factor at every seed."""
  pairs = num_learning_rates + past_grid_edge
  again = min(learning_rates_at_every_seed, pairs)
  return pairs + (seeds - 1) * again + seeds * (1 + num_noise_factors)


def past_grid_edge_runs(request: Request) -> int:
  """The most pairs past the grid's edge `request` runs."""
  return PAST_GRID_EDGE_RUNS if request.learning_rates_past_grid_edge else 0


def plan_budget(request: Request, *, round_seconds: float,
                public_text: bool) -> Budget:
  """Rounds and grids that fit `budget_minutes`, fixed before any run.

  Simulations: the learning-rate grid (one seed each, with
  --learning_rates_past_grid_edge up to `PAST_GRID_EDGE_RUNS` pairs past
  its edge, the best `request.learning_rates_at_every_seed` pairs then at
  the other seeds),
  the no-DP run and the noise grid at `request.seeds` seeds each (all at
  the same rounds);
  around them pretraining, the timer model's simulations and each run's
  start-up. The grids shrink (noise factors to 4, learning rates to 3)
  before the rounds drop below 100.
  """
  if request.quick:
    lrs, factors, rounds = LEARNING_RATE_GRID[:2], NOISE_FACTORS[:2], 4
    steps = min(request.pretrain_steps, 20) if public_text else 0
    return Budget(rounds, lrs, factors, steps, 0.0, round_seconds,
                  ['--quick: 4 rounds, 2 learning-rate pairs, 2 noise '
                   'multipliers (a test of the pipeline, not a '
                   'recommendation to launch with)'])
  steps = request.pretrain_steps if public_text else 0
  num_timers = len(request.timer_hours or launch_lib.AUTO_TIMER_FACTORS)
  timer_seconds = (TIMER_SECONDS_PER_MILLION_KROUNDS * request.population /
                   1e6 * request.launch_rounds / 1e3 * num_timers * 2)
  fixed = steps * PRETRAIN_STEP_SECONDS + timer_seconds
  budget = request.budget_minutes * 60
  options = [(len(LEARNING_RATE_GRID), len(NOISE_FACTORS)),
             (6, len(NOISE_FACTORS)), (6, 4), (4, 4), (3, 3)]
  for num_lrs, num_factors in options:
    runs = planned_simulations(num_lrs, num_factors, request.seeds,
                               request.learning_rates_at_every_seed,
                               past_grid_edge_runs(request))
    rounds = (budget - fixed - runs * RUN_START_SECONDS) / (
        runs * round_seconds * 1.1)   # 10% for evaluations.
    if rounds >= 100:
      break
  rounds = int(max(20, min(request.max_rounds, rounds)))
  rounds -= rounds % 10 if rounds >= 100 else 0
  lrs = LEARNING_RATE_GRID[:num_lrs]
  factors = NOISE_FACTORS[:num_factors]
  runs = planned_simulations(num_lrs, num_factors, request.seeds,
                             request.learning_rates_at_every_seed,
                             past_grid_edge_runs(request))
  estimate = fixed + runs * (RUN_START_SECONDS + 1.1 * rounds * round_seconds)
  each = (f' at {request.seeds} seeds each' if request.seeds > 1 else '')
  reseeded = min(request.learning_rates_at_every_seed, len(lrs))
  reseeded = (f' (the best {reseeded} then at every seed)'
              if request.seeds > 1 and reseeded and len(lrs) > 1 else '')
  past = (f' and up to {PAST_GRID_EDGE_RUNS} past the grid\'s edge'
          if request.learning_rates_past_grid_edge else '')
  lines = [
      f'{len(lrs)} learning-rate pairs (client, server){past} with adaptive '
      f'clipping{reseeded}, no DP and up to {len(factors)} noise multipliers with '
      f'DP-FTRL{each}: up to {runs} simulations of {rounds} rounds at '
      f'{request.clients_per_round} clients a round (about '
      f'{round_seconds:.2f} s a round)',
      (f'pretraining: {steps} steps on the public text' if steps else
       'pretraining: none (no public text in --cache_dir, or '
       '--pretrain_steps=0)'),
      f'launch: the timer model at {num_timers} timers for '
      f'{request.population:,} devices and {request.launch_rounds} rounds',
      f'estimated time {progress_lib.format_seconds(estimate)} of the '
      f'budget {request.budget_minutes:g} min (every run after the first '
      f'refines the ETA)']
  if estimate > budget * 1.05:
    lines.append('the budget is too small for 100 rounds a simulation: '
                 'results will be rough (a larger --budget_minutes helps)')
  return Budget(rounds, lrs, factors, steps, estimate, round_seconds, lines)


def minutes_keeping_rounds(request: Request, budget: Budget, *, seeds: int,
                           public_text: bool,
                           more_noise_factors: bool = False,
                           least_learning_rates: int = 0,
                           learning_rates_at_every_seed: Optional[int] = None,
                           learning_rates_past_grid_edge: Optional[bool] = None
                           ) -> Optional[float]:
  """The --budget_minutes (a multiple of 5) at which `plan_budget`, with
  --seeds=`seeds` and --max_rounds at `budget`'s rounds, plans those
  rounds again with grids holding `budget`'s (the grids are prefixes of
  `LEARNING_RATE_GRID` and `NOISE_FACTORS`): every setting tried before is
  tried again, so a re-run at more seeds reuses every finished run (and
  may try more settings). With `more_noise_factors`, the least that also
  plans more noise factors than `budget` (for a noise search that met the
  target at every factor), None when `budget` has all of
  `NOISE_FACTORS`. With `least_learning_rates`, the least that also
  plans at least that many learning-rate pairs (None when it is more than
  `LEARNING_RATE_GRID` has). With `learning_rates_at_every_seed`, the plan
  has that --learning_rates_at_every_seed, with
  `learning_rates_past_grid_edge` that --learning_rates_past_grid_edge
  (default: the request's). None for --quick (its plan ignores the
  budget)."""
  if request.quick or (more_noise_factors and
                       len(budget.noise_factors) >= len(NOISE_FACTORS)) or \
      least_learning_rates > len(LEARNING_RATE_GRID):
    return None
  least_factors = len(budget.noise_factors) + int(more_noise_factors)
  least_lrs = max(len(budget.learning_rates), least_learning_rates)
  options = dict(learning_rates_at_every_seed=learning_rates_at_every_seed,
                 learning_rates_past_grid_edge=learning_rates_past_grid_edge)
  request = dataclasses.replace(
      request, seeds=seeds, max_rounds=budget.rounds,
      **{name: value for name, value in options.items() if value is not None})
  for minutes in range(5, 10**7, 5):   # Rounds and grids grow with minutes.
    again = plan_budget(
        dataclasses.replace(request, budget_minutes=minutes),
        round_seconds=budget.round_seconds, public_text=public_text)
    if again.rounds >= budget.rounds and \
        len(again.learning_rates) >= least_lrs and \
        len(again.noise_factors) >= least_factors:
      return float(minutes)
  return None


def estimate_round_seconds(request: Request) -> float:
  """A round's seconds from the model size and cohort, before any run.

  Proportional to clients x sentences x the LSTM's per-token cost
  (4 L (L + E) + L E + E V' multiply-adds), scaled from the reference.
  """
  values = _flag_values(BASE_FLAGS + tuple(QUICK_FLAGS if request.quick
                                           else ()) +
                        tuple(request.extra_flags))

  def cost(v):
    latent, emb, vocab = (v['latent_size'], v['embedding_size'],
                          v['vocab_size'] + 4)
    return 4 * latent * (latent + emb) + latent * emb + emb * vocab

  reference = cost(dict(latent_size=128, embedding_size=64,
                        vocab_size=4000))
  return (REFERENCE_ROUND_SECONDS * request.clients_per_round / 20 *
          values['max_elements_per_client'] / 32 * cost(values) / reference)


def _flag_values(flag_list: Sequence[str]) -> Dict[str, float]:
  values = {}
  for text in flag_list:
    if text.startswith('--') and '=' in text:
      name, value = text[2:].split('=', 1)
      try:
        values[name] = float(value)
      except ValueError:
        values[name] = value
  return values


class SimulationFailed(ValueError):
  """A simulation failed; re-running resumes it (exit code 1)."""
  infrastructure = True


class SimulationRefused(ValueError):
  """The training binary refused a simulation's flags (exit code 2)."""


class Search:
  """Runs the simulations of a recommendation; keeps what they gave."""

  def __init__(self, request: Request, budget: Budget, *, print_fn=print):
    self.request = request
    self.budget = budget
    self.print = print_fn
    self.runs_dir = os.path.abspath(os.path.join(request.output_dir, 'runs'))
    self.pretrained_dir = None
    self.started = time.monotonic()
    self.simulations_done = 0
    self.simulations_total = planned_simulations(
        len(budget.learning_rates), len(budget.noise_factors), request.seeds,
        request.learning_rates_at_every_seed, past_grid_edge_runs(request))
    self.seconds_per_simulation = []

  # --- the flags of a simulation -------------------------------------------
  def seeds(self) -> List[int]:
    """The seeds of each no-noise and noise setting, the first
    `request.seed` (the learning-rate runs' and the pretraining's)."""
    return [self.request.seed + i for i in range(self.request.seeds)]

  def base_flags(self, seed: Optional[int] = None) -> List[str]:
    """Every simulation's flags, at `seed` (default `request.seed`)."""
    seed = self.request.seed if seed is None else seed
    flags = [f'--cache_dir={os.path.abspath(self.request.cache_dir)}',
             *BASE_FLAGS, *(QUICK_FLAGS if self.request.quick else ()),
             *self.request.extra_flags,
             f'--clients_per_round={self.request.clients_per_round}',
             f'--total_rounds={self.budget.rounds}',
             f'--rounds_per_eval={max(1, self.budget.rounds // 10)}',
             f'--rounds_per_checkpoint={max(1, self.budget.rounds // 10)}',
             f'--seed={seed}']
    if self.pretrained_dir:
      flags.append(f'--initial_weights={os.path.abspath(self.pretrained_dir)}')
    return flags

  def simulation_flags(self, *, aggregator, client_lr, server_lr,
                       noise_multiplier, clip_norm=None,
                       seed=None) -> List[str]:
    flags = self.base_flags(seed) + [
        f'--aggregator={aggregator}', f'--client_lr={client_lr:g}',
        f'--server_lr={server_lr:g}',
        f'--noise_multiplier={noise_multiplier:.6g}']
    if clip_norm is not None:
      flags.append(f'--clip_norm={clip_norm:.4g}')
    return flags

  # --- running ---------------------------------------------------------------
  def over_budget(self) -> bool:
    """Whether --budget_minutes has passed since the search started."""
    return (not self.request.quick and
            time.monotonic() - self.started > 60 * self.request.budget_minutes)

  def _eta(self) -> str:
    left = self.simulations_total - self.simulations_done
    if self.seconds_per_simulation:
      per = sorted(self.seconds_per_simulation)[
          len(self.seconds_per_simulation) // 2]
    else:
      per = RUN_START_SECONDS + 1.1 * self.budget.rounds * (
          self.budget.round_seconds)
    return progress_lib.format_seconds(left * per)

  def simulate(self, name: str, flags: List[str], **described) -> Dict:
    """Runs (or reuses) one simulation; returns its result row."""
    self.print(f'[{self.simulations_done + 1}/{self.simulations_total} '
               f'simulations, elapsed '
               f'{progress_lib.format_seconds(time.monotonic() - self.started)}'
               f', ETA {self._eta()}] {name}')
    started = time.monotonic()
    row = dict(name=name, flags=list(flags), **described)
    try:
      summary = training_runs.run_training(self.runs_dir, name, flags)
    except training_runs.DivergedRun:
      row.update(accuracy=None, diverged=True)
      summary = None
    except training_runs.RefusedRun as e:
      raise SimulationRefused(str(e)) from e
    except RuntimeError as e:
      raise SimulationFailed(str(e)) from e
    self.simulations_done += 1
    self.seconds_per_simulation.append(time.monotonic() - started)
    if summary is not None:
      final = summary.get('final_eval') or {}
      run_path = os.path.join(self.runs_dir, name)
      row.update(
          accuracy=final.get('in_vocab_accuracy'),
          top3_accuracy=final.get('in_vocab_top3_accuracy'),
          unigram_accuracy=summary.get('unigram_baseline_accuracy'),
          diverged=False, rounds=summary.get('rounds'),
          exploded=bool(summary.get('training_loss_explosion')),
          # A --noise_seed after recommend's -- fixes the noise (the run
          # says so in its summary): None, the noise came from the OS.
          noise_seed=(summary.get(privacy_report.UNPREDICTABLE_NOISE_KEY)
                      or {}).get('noise_seed'),
          curve=[list(p) for p in zip(*run_directory.read_metric(run_path))],
          final_clip_norm=_final_clip(run_path))
    return row

  def simulate_seeds(self, name: str, flags_of: Callable[[int], List[str]],
                     *, first_run: Optional[Dict] = None,
                     **described) -> Dict:
    """Runs (or reuses) one setting at each of `seeds()`; returns their
    `policy.mean_over_seeds`. The first seed's run is named `name` (as a
    one-seed recommendation names it, so that it is reused), the others
    `name`_seed<s>. `first_run`: the first seed's row, already had (a
    learning-rate run), which is then not simulated again."""
    runs = []
    for i, seed in enumerate(self.seeds()):
      if i == 0 and first_run is not None:
        runs.append(dict(first_run, seed=seed))
        continue
      runs.append(self.simulate(name if i == 0 else f'{name}_seed{seed}',
                                flags_of(seed), seed=seed, **described))
    return policy.mean_over_seeds(runs)

  def pretrain(self) -> Optional[str]:
    """Practice 1: pretraining on the corpus's public text, if any."""
    if not self.budget.pretrain_steps:
      return None
    out = os.path.join(self.runs_dir, 'pretrained')
    values = _flag_values(self.base_flags())
    model = [f'--{name}={int(values[name])}' for name in MODEL_FLAG_NAMES]
    data = [f for f in self.base_flags()
            if f.split('=', 1)[0][2:] in PRETRAIN_DATA_FLAG_NAMES]
    command = [sys.executable, '-m', 'experiments.pretrain',
               f'--cache_dir={os.path.abspath(self.request.cache_dir)}',
               f'--tfds_name={public_corpus.PUBLIC_TEXT_NAME}', *model, *data,
               f'--output_dir={out}', f'--steps={self.budget.pretrain_steps}',
               f'--seed={self.request.seed}']
    self.print(f'Practice 1: pretraining {self.budget.pretrain_steps} steps '
               f'on the public text ({out})')
    proc = training_runs.run_child(command)
    if proc.returncode:
      raise SimulationFailed(f'pretraining failed (exit code '
                             f'{proc.returncode}); see its output above.')
    self.pretrained_dir = out
    return out


def _final_clip(run_path: str) -> Optional[float]:
  """The median clip norm in force over the last fifth of a run's rounds.

  For adaptive clipping (Algorithm 1) the clip in force changes only when a
  tree restarts: this is the estimate put in force at the run's last
  restart or the one before (the learning-rate runs restart about every
  fifth of their rounds, `pipeline.adaptive_tuning_flags`: from 16 rounds
  on, a restart at 0.68 of the rounds or later); for a fixed clip, the
  clip.
  """
  _, values = run_directory.read_metric(run_path, 'clip_norm_in_force')
  if not values:
    return None
  tail = sorted(values[-max(1, len(values) // 5):])
  return tail[len(tail) // 2]
