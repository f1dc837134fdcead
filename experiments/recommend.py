r"""From a proxy federated corpus to a launch plan, in one command.

Carries out the paper's Sec. 2.5 practices on a proxy corpus (a
`build_git_corpus` output or TFF's StackOverflow in --cache_dir) for a
planned launch (--population, --launch_rounds, --target_epsilon):

  1. pretrain on the corpus's public text when it has some;
  6. tune client and server learning rates in small report-goal simulations
     with adaptive clipping, fix the clip at its estimate;
  2. the largest noise multiplier meeting the utility target (default:
     --utility_fraction of the accuracy without noise, never below the
     unigram baseline plus --utility_margin);
  3. raise report goal and noise together to the privacy target, capped at
     --max_report_goal (then more noise, with a warning);
  4. the timer that brings MinS near the population's cap;
  2. again at the launch's noise per client if 3 capped the report goal;
  7. the launch's privacy report, to be redone from what the launch observes.

  python -m experiments.recommend --cache_dir=corpora/git \
      --output_dir=runs/recommend --population=4210000 --launch_rounds=2000 \
      --target_epsilon=10

Writes recommendation.json, simulation.flags (for run_stackoverflow),
launch.flags (for privacy_accountant), privacy_report.md, recommendation.md
and its figures into --output_dir. Every simulation is a run directory under
<output_dir>/runs: run the same command again after a kill and it continues.
Flags after `--` go to every simulation (model size, data): `-- --vocab_size=
8000`; the model sizes and --word_counts_path go to the pretraining too
(`-- --word_counts_path=corpora/git/public.word_count`: a vocabulary without
the clients' data). --seeds=3 runs each no-noise and noise setting at three
seeds and decides on their means (small corpora, where one run's accuracy
moves by points). --quick runs a few rounds of a tiny model (tests).
"""


from dpftrl_tff import runtime

runtime.install()   # Before TensorFlow is imported: quiet C++ logs.

# pylint: disable=g-import-not-at-top
from absl import flags

from dpftrl_tff import accounting
from dpftrl_tff import checks
from dpftrl_tff import console
from dpftrl_tff import participation
from dpftrl_tff.data import stackoverflow
from dpftrl_tff.recommend import launch
from dpftrl_tff.recommend import pipeline
from dpftrl_tff.recommend import report
from dpftrl_tff.recommend import search
# pylint: enable=g-import-not-at-top

_CACHE = flags.DEFINE_string(
    'cache_dir', None, 'The proxy corpus: a build_git_corpus --output_dir or '
    'a directory holding TFF\'s StackOverflow (with public text in '
    'tfds/dpftrl_public_text when present).')
_OUTPUT = flags.DEFINE_string('output_dir', 'runs/recommend',
                              'Where the recommendation and its runs go.')
_POPULATION = flags.DEFINE_integer('population', None,
                                   'Estimated population of the launch.')
_ROUNDS = flags.DEFINE_integer('launch_rounds', 2000,
                               'Rounds T of the launch.')
_EPSILON = flags.DEFINE_float('target_epsilon', 10.0,
                              'Privacy target: epsilon at --delta.')
_DELTA = flags.DEFINE_float('delta', accounting.DEFAULT_DELTA,
                            'delta of (epsilon, delta).')
_MAX_GOAL = flags.DEFINE_integer(
    'max_report_goal', 6500,
    'The largest report goal the system supports (practice 3 caps there).')
_CLIENTS = flags.DEFINE_integer(
    'clients_per_round', 20, 'Report goal of the simulations (small, as the '
    'paper\'s practice 2).')
_TARGET = flags.DEFINE_float(
    'utility_target', None, 'Eval in-vocab accuracy the simulation must '
    'reach (a fraction, 0.12 = 12%). Unset: --utility_fraction of the '
    'accuracy without noise, at least the unigram baseline + '
    '--utility_margin.')
_FRACTION = flags.DEFINE_float(
    'utility_fraction', 0.9, 'Default target: this share of the accuracy '
    'without noise at the same learning rates and rounds.')
_MARGIN = flags.DEFINE_float(
    'utility_margin', 0.01, 'Default target: at least the unigram baseline '
    'plus this (0.01 = one point).')
_BUDGET = flags.DEFINE_float('budget_minutes', 45.0,
                             'Time for the whole search on this machine.')
_TIMERS = flags.DEFINE_list(
    'timer_hours', ['auto'],
    'Timer periods the launch plan tries (hours); auto: 0.5, 1, 1.5 and 2 '
    'times the period holding as many rounds as the population\'s MinS cap '
    'at the chosen report goal, in whole days from a day up (the paper\'s '
    '24-hour units), shortest first until one approaches the cap.')
_PRETRAIN = flags.DEFINE_integer(
    'pretrain_steps', 2000, 'Pretraining steps on the corpus\'s public text '
    '(practice 1); 0: none.')
_MAX_ROUNDS = flags.DEFINE_integer(
    'max_rounds', 1000, 'Most rounds a simulation gets, whatever the budget.')
_SEED = flags.DEFINE_integer(
    'seed', 0, 'Seed of the simulations\' model init and client sampling '
    '(their DP noise stays unpredictable).')
_SEEDS = flags.DEFINE_integer(
    'seeds', 1, 'Seeds each no-noise and noise simulation runs with '
    '(--seed, --seed + 1, ...): the utility target and verdict are taken on '
    'their mean accuracy, and recommendation.md gives each seed\'s and the '
    'margin\'s standard error, and for a margin within two of them the '
    'seeds that would settle it at the same spread. 1: one run each (the '
    'most rounds for the budget); 3 or more where runs of one setting spread by points (small '
    'corpora). The learning-rate runs are one seed each (but see '
    '--learning_rates_at_every_seed).')
_LR_SEEDS = flags.DEFINE_integer(
    'learning_rates_at_every_seed', 0, 'With --seeds=K > 1: the best this '
    'many learning-rate pairs of one run each run again at the other K - 1 '
    'seeds, and the pair is chosen on their means (K - 1 more simulations '
    'each, so a smaller grid or fewer rounds for the budget). 0: the pair is '
    'chosen on one run each; recommendation.md advises 2 when the chosen '
    'pair\'s lead is within the seeds\' spread.')
_PAST_EDGE = flags.DEFINE_bool(
    'learning_rates_past_grid_edge', False, 'After the learning-rate grid: '
    'where the best pair of one run each has the grid\'s least or largest '
    'client or server lr, the pair one grid step further on that axis (the '
    'value times its ratio to the next one inward, e.g. server lr 3 -> 9) '
    'runs too, once, with adaptive clipping, and the choice is taken over '
    'all (up to 2 more simulations, so fewer rounds or a smaller grid for '
    'the budget). recommendation.md advises it when the chosen pair is at '
    'the grid\'s edge.')
_QUICK = flags.DEFINE_bool('quick', False,
                           'A few rounds of a tiny model (tests).')


def _request(extra_flags) -> search.Request:
  if not _CACHE.value:
    raise ValueError('--cache_dir is required (a build_git_corpus '
                     '--output_dir or TFF\'s StackOverflow).')
  stackoverflow.check_database(_CACHE.value)
  if _POPULATION.value is None:
    raise ValueError('--population is required (the launch\'s estimated '
                     'devices).')
  checks.check_int(_POPULATION.value, '--population', minimum=1)
  # The launch's timer model simulates every device: refused now, not
  # after the simulations.
  participation.check_memory('timer', _POPULATION.value)
  checks.check_int(_ROUNDS.value, '--launch_rounds', minimum=1)
  checks.check_positive(_EPSILON.value, '--target_epsilon')
  checks.check_float(_DELTA.value, '--delta', minimum=0, maximum=1,
                     strict_minimum=True, strict_maximum=True)
  checks.check_int(_CLIENTS.value, '--clients_per_round', minimum=1)
  checks.check_int(_MAX_GOAL.value, '--max_report_goal',
                   minimum=_CLIENTS.value)
  stackoverflow.check_clients_per_round(
      _CLIENTS.value, stackoverflow.num_clients(_CACHE.value),
      flag='--clients_per_round',
      data=f'the corpus in --cache_dir={_CACHE.value}')
  ceiling = launch.report_goal_ceiling(_POPULATION.value, _MAX_GOAL.value)
  if ceiling < _CLIENTS.value:
    raise ValueError(
        f'--population={_POPULATION.value}: its launch can have a report goal '
        f'of at most {ceiling} (the devices the timer model has active on a '
        f'day), below the simulated --clients_per_round={_CLIENTS.value}.')
  if _TARGET.value is not None:
    checks.check_float(_TARGET.value, '--utility_target', minimum=0,
                       maximum=1, strict_minimum=True)
  checks.check_float(_FRACTION.value, '--utility_fraction', minimum=0,
                     maximum=1, strict_minimum=True)
  checks.check_float(_MARGIN.value, '--utility_margin', minimum=0,
                     maximum=1)
  checks.check_positive(_BUDGET.value, '--budget_minutes')
  checks.check_int(_PRETRAIN.value, '--pretrain_steps', minimum=0)
  checks.check_int(_MAX_ROUNDS.value, '--max_rounds', minimum=1)
  checks.check_int(_SEED.value, '--seed', minimum=0)
  checks.check_int(_SEEDS.value, '--seeds', minimum=1)
  checks.check_int(_LR_SEEDS.value, '--learning_rates_at_every_seed',
                   minimum=0, maximum=len(search.LEARNING_RATE_GRID))
  if _LR_SEEDS.value and _SEEDS.value < 2:
    raise ValueError(
        f'--learning_rates_at_every_seed={_LR_SEEDS.value} needs --seeds of '
        f'2 or more (got --seeds={_SEEDS.value}): with one seed every pair '
        'runs once.')
  timers = [] if _TIMERS.value == ['auto'] else checks.check_positive_list(
      _TIMERS.value, '--timer_hours')
  return search.Request(
      cache_dir=_CACHE.value, output_dir=_OUTPUT.value,
      population=_POPULATION.value, launch_rounds=_ROUNDS.value,
      target_epsilon=_EPSILON.value, delta=_DELTA.value,
      max_report_goal=_MAX_GOAL.value, clients_per_round=_CLIENTS.value,
      budget_minutes=_BUDGET.value, utility_target=_TARGET.value,
      utility_fraction=_FRACTION.value, utility_margin=_MARGIN.value,
      timer_hours=tuple(sorted(set(timers))) or None,
      pretrain_steps=_PRETRAIN.value, max_rounds=_MAX_ROUNDS.value,
      seed=_SEED.value, seeds=_SEEDS.value,
      learning_rates_at_every_seed=_LR_SEEDS.value,
      learning_rates_past_grid_edge=_PAST_EDGE.value, quick=_QUICK.value,
      extra_flags=tuple(extra_flags))


def _summary(result) -> str:
  sim, launch = result['simulation'], result['launch']
  pct = report.percent
  return '\n'.join([
      f'Simulation: z {sim["noise_multiplier"]:g}, clip '
      f'{sim["clip_norm"]:.4g}, client lr {sim["client_lr"]:g}, server lr '
      f'{sim["server_lr"]:g}, {sim["clients_per_round"]} clients a round, '
      f'{sim["rounds"]} rounds: eval in-vocab accuracy '
      f'{pct(sim["eval_accuracy"])} (no noise {pct(sim["no_dp_accuracy"])}, '
      f'unigram {pct(sim["unigram_accuracy"])}'
      + (f'; means of {len(sim["seeds"])} seeds'
         if len(sim['seeds']) > 1 else '') +
      f'): it {report.utility_verdict(result)}',
      f'Launch: report goal {launch["report_goal"]}, z '
      f'{launch["noise_multiplier"]:.4g}, {launch["rounds"]} rounds, timer '
      f'{participation.format_hours(launch["timer_hours"])}, MinS '
      f'{launch["min_separation"]}, MaxP '
      f'{launch["max_participation"]}: epsilon {launch["epsilon"]:.4g} at '
      f'delta {launch["delta"]:g} (target {launch["target_epsilon"]:g} '
      f'{"met" if launch["meets_privacy_target"] else "NOT met"})',
      f'  {report.launch_duration(launch)}.',
      *[f'Note: {s}' for s in result['suggestions']],
      f'Wrote {_OUTPUT.value}/recommendation.md, recommendation.json, '
      'simulation.flags, launch.flags, privacy_report.md and figures'])


def run(argv) -> dict:
  request = _request(argv[1:])
  result = pipeline.recommend(request)
  print(_summary(result))
  return result


def main(argv):
  console.quiet_libraries()
  return console.run_main(lambda: run(argv), [argv[0]])


if __name__ == '__main__':
  runtime.run_app(main)
