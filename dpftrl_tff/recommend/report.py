"""A recommendation's files: JSON, flag files, privacy report, Markdown, figures.

  recommendation.json   strict JSON: the simulation, the utility target, the
                        launch (`build`'s dict);
  simulation.flags      the recommended simulation, for run_stackoverflow;
  launch.flags          the launch, for privacy_accountant;
  privacy_report.md     the launch's (planned_privacy.launch_report);
  recommendation.md     what was tried, in order, a figure each, and why;
  *.png                 the figures.
"""

import math
import os
from typing import Dict, List, Optional

from dpftrl_tff import plotting
from dpftrl_tff import participation
from dpftrl_tff import strict_json
from dpftrl_tff.privacy import planned_privacy
from dpftrl_tff.recommend import launch as launch_lib
from dpftrl_tff.recommend import policy
from dpftrl_tff.recommend import search as search_lib
from dpftrl_tff.run import run_directory

SIMULATION_FLAGFILE = 'simulation.flags'
LAUNCH_FLAGFILE = 'launch.flags'


def _strip(row: Dict) -> Dict:
  return {k: v for k, v in row.items() if k not in ('curve', 'flags')}


def build(*, request, budget, search, lr_rows, best, clip_norm, no_dp,
          unigram, target, noise_rows, chosen, meets_utility, plan,
          least_noise_per_client, clipped_count_stddev, restart_rounds,
          stopped_by_budget=False, launch_noise_row=None,
          minutes_keeping_rounds=None, minutes_for_more_noise=None,
          minutes_for_learning_rates=None, lr_seed_rows=(),
          minutes_for_learning_rates_at_every_seed=None,
          minutes_for_learning_rates_past_grid_edge=None) -> Dict:
  """recommendation.json's content.

  `lr_seed_rows`: with several seeds, `policy.mean_over_seeds` of the
  learning-rate pairs that ran again at every seed
  (--learning_rates_at_every_seed, `policy.learning_rates_at_every_seed`),
  `best` the chosen one's.
  `minutes_for_learning_rates_at_every_seed(n)`: the --budget_minutes that
  keeps these rounds and grids with --learning_rates_at_every_seed=n, or
  None; asked when, at several seeds, the pair was chosen on one run each
  and its lead is within twice the seeds' spread (`_one_run_lead`).

  `launch_noise_row`: the run at the launch's noise per client when the
  report goal is capped (`pipeline._simulate_launch_noise`); when it meets
  the target it is the recommended simulation, the launch's utility shown.
  `minutes_keeping_rounds(K)`: the --budget_minutes that keeps these rounds
  at --seeds=K (`search.minutes_keeping_rounds`), or None; the caveat's
  advice names it for the seeds it advises (`advised_seeds`): 3 after one
  seed, else the projected `seeds_to_settle` when at most
  `MAX_ADVISED_SEEDS`.
  `minutes_for_more_noise()`: the --budget_minutes that keeps these rounds
  and plans more noise factors (`search.minutes_keeping_rounds` with
  `more_noise_factors`), or None; asked only when every noise multiplier
  tried met the target.
  `minutes_for_learning_rates(n, more_noise_factors=False)`: the
  --budget_minutes that keeps these rounds and plans the first n pairs of
  `search.LEARNING_RATE_GRID` (and more noise factors if asked), or None
  (`search.minutes_keeping_rounds` with `least_learning_rates`); asked
  when the chosen pair has neighbours in the grid not tried
  (`policy.learning_rate_edge`).
  `minutes_for_learning_rates_past_grid_edge()`: the --budget_minutes
  that keeps these rounds and grids with --learning_rates_past_grid_edge,
  or None; asked when the chosen pair is at the grid's edge and the
  request did not run the pairs past it.

  `lr_rows` holds the grid's runs and, after them, those past its edge
  (`past_grid_edge` set; --learning_rates_past_grid_edge).
  """
  out = os.path.abspath(request.output_dir)
  launch_met = (launch_noise_row is not None and
                policy.meets_target(launch_noise_row, target.value))
  noise_above = policy.noise_above_no_noise(noise_rows, no_dp)
  if launch_met:
    chosen = launch_noise_row
  privacy = plan.privacy
  sim_noise_per_client = chosen['noise_multiplier'] / request.clients_per_round
  launch_noise_per_client = plan.noise_multiplier / plan.report_goal
  # The target is the user's epsilon, judged on the epsilon the report
  # prints (the plan aimed at `zcdp_within_epsilon`, so one meets the other).
  meets_privacy = privacy['epsilon'] <= request.target_epsilon
  result = dict(
      simulation=dict(
          flagfile=os.path.join(out, SIMULATION_FLAGFILE),
          run_dir=os.path.join(search.runs_dir, chosen['name']),
          aggregator='dp_ftrl',
          clients_per_round=request.clients_per_round,
          noise_multiplier=chosen['noise_multiplier'],
          noise_per_client=sim_noise_per_client,
          clip_norm=clip_norm, server_lr=best['server_lr'],
          client_lr=best['client_lr'], rounds=budget.rounds,
          initial_weights=search.pretrained_dir,
          eval_accuracy=chosen.get('accuracy'),
          eval_top3_accuracy=chosen.get('top3_accuracy'),
          noise_seed=chosen.get('noise_seed'),
          seeds=chosen.get('seeds') or [request.seed],
          seed_accuracies=chosen.get('seed_accuracies') or [
              chosen.get('accuracy')],
          eval_accuracy_stderr=chosen.get('accuracy_stderr'),
          unigram_accuracy=unigram,
          no_dp_accuracy=no_dp.get('accuracy'),
          beats_unigram_by=(None if chosen.get('accuracy') is None else
                            chosen['accuracy'] - unigram)),
      utility_target=target.value, utility_target_rule=target.rule,
      utility_target_source=target.source,
      # The target's standard error over the no-noise setting's seeds (a
      # share of their mean); 0 for a given target or the unigram floor;
      # None with one seed, or a no-noise seed that diverged.
      utility_target_stderr=_target_stderr(
          target, no_dp, fraction=request.utility_fraction,
          seeds=request.seeds),
      # Met in simulation at the launch's noise per client: the simulated
      # one, or for a capped report goal (more noise per client than
      # practice 2 chose) a run at the launch's.
      meets_utility_target=bool(meets_utility and
                                (not plan.capped or launch_met)),
      meets_utility_target_in_simulation=bool(meets_utility),
      launch=dict(
          flagfile=os.path.join(out, LAUNCH_FLAGFILE),
          aggregator=launch_lib.AGGREGATOR,
          report_goal=plan.report_goal,
          noise_multiplier=plan.noise_multiplier,
          noise_per_client=launch_noise_per_client,
          rounds=request.launch_rounds, population=request.population,
          min_separation=plan.min_separation,
          max_participation=plan.max_participation,
          timer_hours=plan.timer_hours, simulated_days=plan.simulated_days,
          short_rounds=plan.short_rounds, epsilon=privacy['epsilon'],
          zcdp=privacy['zcdp'], delta=request.delta,
          target_epsilon=request.target_epsilon,
          meets_privacy_target=bool(meets_privacy),
          report_goal_capped=plan.capped, reason=plan.reason,
          participation='timer model (simulated, planned; account the real '
          'launch from its observed MinS and MaxP)'),
      budget=dict(minutes=request.budget_minutes,
                  seeds=request.seeds,
                  stopped_noise_search=stopped_by_budget,
                  rounds_per_simulation=budget.rounds,
                  estimated_seconds=budget.estimated_seconds,
                  pretrain_steps=budget.pretrain_steps,
                  learning_rates_past_grid_edge=bool(
                      request.learning_rates_past_grid_edge),
                  quick=request.quick),
      least_noise_per_client=least_noise_per_client,
      learning_rate_clipped_count_stddev=clipped_count_stddev,
      # Their trees restart, a new clip estimate in force, at these rounds
      # (`pipeline.adaptive_tuning_flags`).
      learning_rate_restart_rounds=list(restart_rounds),
      learning_rate_runs=[_strip(r) for r in lr_rows],
      # The best pairs of one run each, again at every seed: their means.
      learning_rate_runs_at_every_seed=[_strip(r) for r in lr_seed_rows],
      no_dp_run=_strip(no_dp),
      noise_runs=[_strip(r) for r in noise_rows],
      launch_noise_run=(None if launch_noise_row is None else
                        _strip(launch_noise_row)),
      timer_simulations=[
          {k: s[k] for k in ('report_goal', 'timer_hours',
                             'observed_min_separation',
                             'observed_max_participation',
                             'population_min_separation', 'short_rounds',
                             'simulated_days')
           if k in s} for s in plan.timer_simulations],
      report_goal_curve=plan.report_goal_curve,
      simulation_flags=list(chosen['flags']),
      suggestions=_suggestions(chosen, unigram, target, meets_utility, plan,
                               budget, stopped_by_budget,
                               launch_noise_row=launch_noise_row,
                               launch_met=launch_met,
                               noise_above=noise_above, no_dp=no_dp),
      # The noise setting clearly more accurate than no noise, paired by
      # seed (`policy.noise_above_no_noise`), or None.
      noise_above_no_noise=(None if noise_above is None else dict(
          noise_multiplier=noise_above['row']['noise_multiplier'],
          lead=noise_above['lead'], lead_stderr=noise_above['stderr'],
          seeds=noise_above['seeds'])))
  # How many seeds would settle the margin, were they to spread as these
  # did (None: one seed, settled, or failed; a zero margin: none would).
  settle = policy.seeds_to_settle(*_recommended_margin(result),
                                  request.seeds)
  result['seeds_to_settle'] = (None if settle is None or math.isinf(settle)
                               else int(settle))
  result['seeds_to_settle_is_unbounded'] = settle == math.inf
  advised = advised_seeds(result)
  minutes = (None if advised is None or minutes_keeping_rounds is None else
             minutes_keeping_rounds(advised))
  # {K: the --budget_minutes keeping these rounds at --seeds=K}.
  result['budget']['minutes_for_seeds'] = (
      {} if minutes is None else {str(advised): minutes})
  # Practice 6's grid around the chosen pair: its untried neighbours (a
  # larger budget plans them) and the pairs past the grid's edge.
  # A chosen pair of the grid is judged on the grid (a pair past its edge
  # that was tried, and lost, brackets it); a chosen pair past the edge on
  # the grid and the pairs past it that were tried (its own next step
  # further is then the untried one).
  grid = search_lib.LEARNING_RATE_GRID
  chosen_pair = (best['client_lr'], best['server_lr'])
  tried = [(r['client_lr'], r['server_lr']) for r in lr_rows]
  past = [p for p, r in zip(tried, lr_rows) if r.get('past_grid_edge')]
  edge = policy.learning_rate_edge(
      chosen_pair, grid if chosen_pair in grid else tuple(grid) + tuple(past),
      tried)
  edge['beyond_grid'] = [p for p in edge['beyond_grid'] if p not in tried]
  result['learning_rate_grid'] = dict(
      pairs_in_grid=len(grid), pairs_tried=len(lr_rows) - len(past),
      pairs_past_grid_edge=[dict(client_lr=c, server_lr=s) for c, s in past],
      **{key: [dict(client_lr=c, server_lr=s) for c, s in pairs]
         for key, pairs in edge.items()})
  lr_minutes = None
  least_lrs = 1 + max([grid.index(p) for p in edge['untried_neighbours']],
                      default=-1)
  if edge['untried_neighbours'] and minutes_for_learning_rates:
    lr_minutes = minutes_for_learning_rates(least_lrs)
  result['budget']['minutes_for_learning_rates'] = lr_minutes
  # --learning_rates_past_grid_edge would run these pairs past the edge
  # only from the best pair of one run each, the pair it steps from (with
  # --learning_rates_at_every_seed the chosen one may be another).
  ranked = policy.learning_rate_ranking(lr_rows)
  advise_past = bool(
      edge['beyond_grid'] and not request.learning_rates_past_grid_edge and
      ranked and (ranked[0]['client_lr'], ranked[0]['server_lr']) ==
      chosen_pair)
  result['budget']['learning_rates_past_grid_edge_advised'] = advise_past
  result['budget']['minutes_for_learning_rates_past_grid_edge'] = (
      minutes_for_learning_rates_past_grid_edge()
      if advise_past and minutes_for_learning_rates_past_grid_edge else None)
  lead = _one_run_lead(result)
  result['budget']['minutes_for_learning_rates_at_every_seed'] = (
      minutes_for_learning_rates_at_every_seed(
          search_lib.ADVISED_LEARNING_RATES_AT_EVERY_SEED)
      if lead and not lead['settled'] and
      minutes_for_learning_rates_at_every_seed else None)
  if edge['untried_neighbours'] or edge['beyond_grid']:
    result['suggestions'].append(_learning_rate_edge(result, lr_minutes))
  # Practice 2 met the target at every noise multiplier it planned: no run
  # missed. More noise is advised except for a capped report goal, whose
  # launch has the cap's noise per client whatever z met.
  ran_out = bool(meets_utility and not stopped_by_budget and
                 policy.meets_target(noise_rows[-1], target.value))
  advise = ran_out and not plan.capped
  more = (minutes_for_more_noise() if advise and minutes_for_more_noise
          else None)
  result['budget']['noise_grid_ran_out'] = ran_out
  result['budget']['minutes_for_more_noise'] = more
  if advise:
    result['suggestions'].append(_more_noise(result, more))
  # Both re-runs advised: the one budget that does both.
  both = (minutes_for_learning_rates(least_lrs, more_noise_factors=True)
          if more is not None and lr_minutes is not None else None)
  result['budget']['minutes_for_learning_rates_and_more_noise'] = both
  if both is not None:
    result['suggestions'][-1] += (
        f' `--budget_minutes={both:g} --max_rounds={budget.rounds}` tries '
        'both these noise multipliers and the learning rates above.')
  return result


def _listed(words: List[str]) -> str:
  """'a', 'a and b', 'a, b and c'."""
  return ' and '.join(words) if len(words) < 3 else (
      ', '.join(words[:-1]) + ' and ' + words[-1])


def _pairs(pairs: List[Dict]) -> str:
  return _listed([f'client lr {p["client_lr"]:g} / server lr '
                  f'{p["server_lr"]:g}' for p in pairs])


def _rounds_words(rounds: List[int]) -> str:
  """Restart rounds in words ('no round' when a run is too short)."""
  if not rounds:
    return 'no round (too few rounds)'
  return ('round ' if len(rounds) == 1 else 'rounds ') + _listed(
      [str(r) for r in rounds])


def _learning_rate_edge(result: Dict, minutes: Optional[float]) -> str:
  """What to do when practice 6's grid does not bracket the chosen pair
  (`policy.learning_rate_edge`): the budget that tries its untried
  neighbours, and a run at each pair past the grid's edge."""
  sim, grid = result['simulation'], result['learning_rate_grid']
  untried, tried = grid['untried_neighbours'], grid['pairs_tried']
  past = grid.get('pairs_past_grid_edge') or []
  chosen_past = dict(client_lr=sim['client_lr'],
                     server_lr=sim['server_lr']) in past
  text = (f'The chosen learning rates, client lr {sim["client_lr"]:g} / '
          f'server lr {sim["server_lr"]:g}, are '
          + ('one grid step past the grid\'s edge '
             '(`--learning_rates_past_grid_edge`), more accurate than the '
             f'{tried} pair{"" if tried == 1 else "s"} of the grid tried '
             f'({_learning_rate_runs_words(result)}):' if chosen_past else
             'at the edge of the ')
          + ('' if chosen_past else
             f'{tried} pair{"" if tried == 1 else "s"} tried (of the '
             f'grid\'s {grid["pairs_in_grid"]}; '
             f'{_learning_rate_runs_words(result)}):' if untried
             else 'grid (' + (f'all its {tried}' if tried ==
                              grid['pairs_in_grid'] else
                              f'{tried} of its {grid["pairs_in_grid"]}')
             + f' pairs tried, {_learning_rate_runs_words(result)}):'))
  if untried:
    them = 'it' if len(untried) == 1 else 'them'
    text += (f' next to them in the grid, {_pairs(untried)} '
             f'{"was" if len(untried) == 1 else "were"} not tried and may '
             'do better.')
    if minutes is not None:
      text += (f' Re-run this command with `--budget_minutes={minutes:g} '
               f'--max_rounds={sim["rounds"]}`, which keeps these rounds '
               f'and tries {them}; in the same `--output_dir` it reuses the '
               'finished simulations (a better pair makes new no-noise and '
               'noise runs).')
    else:
      text += f' A larger --budget_minutes (without --quick) tries {them}.'
  accuracy = sim['seed_accuracies'][0]
  compare = ('' if not policy.finite(accuracy) else
             f', to compare with its {percent(accuracy)}')
  for pair in grid['beyond_grid']:
    name, value = (('client', pair['client_lr'])
                   if pair['client_lr'] != sim['client_lr'] else
                   ('server', pair['server_lr']))
    now = sim[f'{name}_lr']
    notes = ([f'seed {sim["seeds"][0]}\'s run'] if len(sim['seeds']) > 1
             and compare else []) + ['the same clip, noise and seed']
    if name == 'client':
      notes.append(f'the clip was estimated at client lr {now:g}, so this '
                   'is a rough check')
    text += (f' {name.capitalize()} lr {now:g} is the '
             f'{"largest" if value > now else "least"} '
             f'{"tried" if chosen_past else "the grid has"}: '
             f'`run_stackoverflow --flagfile={SIMULATION_FLAGFILE} '
             f'--{name}_lr={value:g}` with another `--experiment_name` runs '
             f'the recommended simulation at {name} lr {value:g}{compare} '
             f'({"; ".join(notes)}).')
  if result['budget'].get('learning_rates_past_grid_edge_advised'):
    minutes = result['budget'].get(
        'minutes_for_learning_rates_past_grid_edge')
    budget = ('' if minutes is None else
              f' --budget_minutes={minutes:g} --max_rounds={sim["rounds"]}')
    one = len(grid['beyond_grid']) == 1
    text += (f' Or this command with `--learning_rates_past_grid_edge'
             f'{budget}`, which keeps these rounds and grids, runs '
             f'{"that pair" if one else "those pairs"} with adaptive '
             'clipping beside the grid\'s (a clip of '
             f'{"its" if one else "their"} own) and carries a better one '
             'through the noise search and the launch plan; in the same '
             '`--output_dir` it reuses the finished simulations.')
  return text


def _more_noise(result: Dict, minutes: Optional[float]) -> str:
  """What to do when every noise multiplier tried met the target."""
  z = result['noise_runs'][-1]['noise_multiplier']
  text = (f'Every noise multiplier tried met the utility target, up to '
          f'z = {z:g}, the noise search\'s last: a larger one may meet it '
          'too, and could let the launch reach the target epsilon with a '
          'smaller report goal.')
  if minutes is not None:
    return text + (
        f' Re-run this command with `--budget_minutes={minutes:g} '
        f'--max_rounds={result["simulation"]["rounds"]}`, which keeps '
        'these rounds and tries more noise multipliers (doubling on from '
        f'z = {z:g}); in the same `--output_dir` it reuses the finished '
        'simulations.')
  if len(result['noise_runs']) >= len(search_lib.NOISE_FACTORS):
    return text + (
        f' The search tries at most {len(search_lib.NOISE_FACTORS)} '
        f'(up to {search_lib.NOISE_FACTORS[-1]} times the least noise): '
        f'`run_stackoverflow --flagfile={SIMULATION_FLAGFILE} '
        f'--noise_multiplier={2 * z:g}` with another `--experiment_name` '
        'runs the next.')
  return text + (' A larger --budget_minutes (without --quick) plans more '
                 'of them.')


# More seeds than this are not advised for settling one margin: their
# runs would cost more than a verdict this close to the target is worth.
MAX_ADVISED_SEEDS = 10


def advised_seeds(result: Dict) -> Optional[int]:
  """The --seeds the caveat advises a re-run at: 3 after one seed (no
  spread to project from), the projected `seeds_to_settle` when it is at
  most `MAX_ADVISED_SEEDS`, else None."""
  if result['budget']['seeds'] == 1:
    return 3
  settle = result.get('seeds_to_settle')
  return settle if settle is not None and settle <= MAX_ADVISED_SEEDS else None


def _target_stderr(target, no_dp: Dict, *, fraction: float,
                   seeds: int) -> Optional[float]:
  """The utility target's standard error: `fraction` x the no-noise
  setting's for a share of its mean, 0 for a given target or the unigram
  floor (no run's accuracy in it), None with one seed or no mean."""
  if seeds < 2:
    return None
  if target.source != 'no_dp_share':
    return 0.0
  stderr = no_dp.get('accuracy_stderr')
  return None if stderr is None else fraction * stderr


# A launch the timer model takes longer than this for gets a suggestion
# (this project's threshold: the paper gives no launch durations).
LONG_LAUNCH_DAYS = 30


def _suggestions(chosen, unigram, target, meets_utility, plan, budget,
                 stopped_by_budget, launch_noise_row=None,
                 launch_met=False, noise_above=None,
                 no_dp=None) -> List[str]:
  out = []
  if stopped_by_budget:
    out.append('The budget ran out during the noise search: a larger noise '
               'multiplier (and so a cheaper launch) may also meet the '
               'target; re-run with a larger --budget_minutes (finished '
               'simulations are reused).')
  accuracy = chosen.get('accuracy')
  if accuracy is None or accuracy < unigram + 0.01:
    out.append('The recommended simulation does not beat the unigram '
               'baseline by a point: more rounds (a larger '
               '--budget_minutes), pretraining on public text, or a '
               'smaller vocabulary would help before any launch.')
  if not meets_utility:
    out.append('No noise multiplier tried meets the utility target even '
               'at the least noise the privacy target allows: a larger '
               'report goal (--max_report_goal), a larger privacy target, '
               'pretraining or more rounds.')
  if plan.capped and meets_utility and not launch_met:
    out.append(
        'The report goal is capped: the launch needs more noise per client '
        'than was simulated; simulate at its z / m before launching (a '
        'larger --budget_minutes does it here), or allow a larger report '
        'goal.' if launch_noise_row is None else
        'The report goal is capped, and the run at the launch\'s noise per '
        'client misses the utility target: a larger report goal '
        '(--max_report_goal, at most the devices active a day), a larger '
        'target epsilon or fewer launch rounds.')
  if plan.simulated_days > LONG_LAUNCH_DAYS or plan.short_rounds:
    out.append(
        f'In the timer model the launch takes {plan.simulated_days:.0f} days'
        + (f' and {plan.short_rounds} rounds run short of the report goal'
           if plan.short_rounds else '')
        + ': the population checks in too slowly for this report goal; a '
        'smaller report goal (--max_report_goal), fewer rounds or a larger '
        'population would launch faster, at less privacy per round or less '
        'training.')
  curve = chosen.get('curve') or []
  if len(curve) >= 3 and curve[-1][1] > max(a for _, a in curve[:-1]) + 0.002:
    out.append(f'Accuracy was still rising at round {budget.rounds}: the '
               f'launch\'s rounds will likely give more than simulated.')
  if noise_above is not None:
    out.append(_noise_above_no_noise_sentence(noise_above, no_dp,
                                              budget.rounds))
  return out


def _noise_above_no_noise_sentence(above, no_dp, rounds) -> str:
  """What `policy.noise_above_no_noise` found, and what it does not mean."""
  row = above['row']
  if above['stderr'] is None:
    evidence = (f'one run each, at the same seed, more than '
                f'{100 * policy.ONE_SEED_NOISE_LEAD:g} points apart')
  else:
    evidence = (f'paired by seed, {100 * above["lead"]:+.2f} points on '
                f'average, more than twice its standard error '
                f'{100 * above["stderr"]:.2f}: a yardstick with '
                f'{above["seeds"]} seeds, not a test')
  return (f'z = {row["noise_multiplier"]:g} was more accurate than no noise '
          f'at {rounds} rounds ({percent(row.get("accuracy"))} against '
          f'{percent(no_dp.get("accuracy"))}; {evidence}). Early in '
          f'training noise can help, and the lead need not last: in '
          f'docs/recommend.md (a small corpus, 3 seeds) z = 0.16 led no '
          f'noise by 4.3 points at 65 rounds, and at 195 trailed it by 2.8, '
          f'below 90% of it. The no-noise accuracy, the utility target '
          f'taken from it, and whether the noise chosen meets it, may then '
          f'not hold at the launch\'s rounds. Whether the lead lasts: '
          f'`run_stackoverflow --flagfile=simulation.flags '
          f'--total_rounds={3 * rounds} '
          f'--noise_multiplier={row["noise_multiplier"]:g}`, and the same '
          f'with `--noise_multiplier=0`, each with another '
          f'`--experiment_name`, compare them at three times the rounds '
          f'(the same clip, learning rates and seed {row["seeds"][0]}).')


def write(output_dir: str, result: Dict, *, plan) -> None:
  """Writes every file of the recommendation into `output_dir`."""
  os.makedirs(output_dir, exist_ok=True)
  run_directory.write_text_atomic(
      os.path.join(output_dir, SIMULATION_FLAGFILE),
      simulation_flagfile(result))
  run_directory.write_text_atomic(
      os.path.join(output_dir, LAUNCH_FLAGFILE), launch_flagfile(result))
  run_directory.write_text_atomic(
      os.path.join(output_dir, 'privacy_report.md'),
      planned_privacy.launch_report(plan.privacy))
  figures = _figures(output_dir, result)
  run_directory.write_text_atomic(os.path.join(output_dir,
                                               'recommendation.md'),
                                  markdown(result, figures))
  strict_json.write(os.path.join(output_dir, 'recommendation.json'), result)


def simulation_flagfile(result: Dict) -> str:
  """The chosen simulation's flags: run_stackoverflow --flagfile=this
  reuses (or redoes) the run the recommendation measured."""
  sim, launch = result['simulation'], result['launch']
  lines = ['# The recommended simulation (experiments.recommend): '
           'python -m experiments.run_stackoverflow --flagfile=THIS']
  if len(sim['seeds']) > 1:
    lines.append(f'# The run of seed {sim["seeds"][0]}; recommendation.json'
                 f'\'s accuracy is the mean of seeds {sim["seeds"][0]} to '
                 f'{sim["seeds"][-1]} (the others: --seed=<s> '
                 f'--experiment_name=<this name>_seed<s>).')
  lines += result['simulation_flags']
  run_dir = sim['run_dir']
  lines += [f'--root_output_dir={os.path.dirname(run_dir)}',
            f'--experiment_name={os.path.basename(run_dir)}',
            '# Its launch-equivalent line: the planned launch\'s report goal, '
            'rounds and population with this simulation\'s noise per client, '
            'at the best participation the population allows (the plan\'s '
            'own privacy, from the timer model, is launch.flags\').',
            f'--launch_report_goal={launch["report_goal"]}',
            f'--launch_rounds={launch["rounds"]}',
            f'--launch_population={launch["population"]}']
  return '\n'.join(lines) + '\n'


def launch_flagfile(result: Dict) -> str:
  launch = result['launch']
  return '\n'.join([
      '# The recommended launch (experiments.recommend): python -m '
      'experiments.privacy_accountant --flagfile=THIS',
      f'# Population {launch["population"]:,}, timer '
      f'{participation.format_hours(launch["timer_hours"])}: MinS and MaxP '
      f'as the timer model simulated them (planned, not observed).',
      f'--aggregator={launch["aggregator"]}',
      f'--rounds={launch["rounds"]}',
      f'--report_goal={launch["report_goal"]}',
      f'--noise_multiplier={launch["noise_multiplier"]!r}',
      f'--min_separation={launch["min_separation"]}',
      f'--max_participation={launch["max_participation"]}',
      f'--delta={launch["delta"]!r}']) + '\n'


def percent(value) -> str:
  """An accuracy in percent; never a number for a missing or NaN one."""
  if not policy.finite(value):
    return 'none (diverged or failed)'
  return f'{100 * value:.2f}%'


def utility_verdict(result: Dict) -> str:
  """Whether the recommendation meets its utility target, in words.

  Three cases, so that a simulation that met the target is never said to
  have missed it: met (and the launch keeps the simulated noise per client
  z / m); met in simulation only, the launch's report goal being capped with
  more noise per client than was simulated (`meets_utility_target` is then
  false: the simulation does not show the launch's utility); not met.
  """
  target = percent(result['utility_target'])
  if result['meets_utility_target']:
    return f'meets the utility target {target}'
  if result['meets_utility_target_in_simulation']:
    sim, launch = result['simulation'], result['launch']
    run = result.get('launch_noise_run')
    return (f'meets the utility target {target} in simulation, but NOT at '
            f'the launch\'s noise: its report goal is capped at '
            f'{launch["report_goal"]} with z / m = '
            f'{launch["noise_per_client"]:.4g}, more than the simulated '
            f'{sim["noise_per_client"]:.4g}' +
            ('; not simulated (the budget was spent)' if run is None else
             f'; simulated at it: {percent(run.get("accuracy"))}'))
  return f'does NOT meet the utility target {target}'


# Seen spread of runs that differ only in their seed (docs/recommend.md:
# 2026-11-29, SymPy's commits since 2024, 149 training authors).
SEEN_SEED_SPREAD = 'up to 5.7 points on a corpus of 149 training authors'


def _points(accuracy, target) -> str:
  return f'{100 * (accuracy - target):+.2f} points'


def seeds_caveat(result: Dict) -> str:
  """What the utility verdict rests on: how many seeds each setting ran,
  and how far from the target the settings nearest it are, in accuracy
  points (with the margin's standard error when there are several
  seeds)."""
  target = result['utility_target']
  sim = result['simulation']
  seeds = sim['seeds']
  accuracy = sim['eval_accuracy']
  margin = (f'is {_points(accuracy, target)} from the target'
            if policy.finite(accuracy) else
            f'has accuracy {percent(accuracy)}')
  stderr = _margin_stderr(result)
  if len(seeds) > 1:
    margin += (f' (its seeds: '
               f'{", ".join(percent(a) for a in sim["seed_accuracies"])}'
               + ('' if stderr is None else
                  f'; standard error of the margin {100 * stderr:.2f} '
                  f'points') + ')')
  runs = result['noise_runs'] + [r for r in [result.get('launch_noise_run')]
                                 if r]
  misses = [r for r in runs   # Other runs than the recommended one.
            if r['noise_multiplier'] != sim['noise_multiplier'] and
            policy.finite(r.get('accuracy')) and
            not policy.meets_target(r, target)]
  kind = 'run' if len(seeds) == 1 else 'setting'
  if misses:
    miss = max(misses, key=lambda r: r['accuracy'])
    margin += (f', and the nearest {kind} below it, at z = '
               f'{miss["noise_multiplier"]:g}, is '
               f'{_points(miss["accuracy"], target)}')
  source = {
      'given': 'the target was given (`--utility_target`)',
      'no_dp_share': ('the target is a share of one run without noise'
                      if len(seeds) == 1 else
                      'the target is a share of the no-noise setting\'s '
                      'mean'),
      'unigram_floor': 'the target is the unigram baseline plus a margin',
  }[result['utility_target_source']]
  noise = ('the DP noise is drawn from the operating system'
           if sim.get('noise_seed') is None else
           f'the DP noise is fixed by --noise_seed={sim["noise_seed"]}, '
           'given after `--`: predictable, as in tests')
  seed_words = ('`--seed`: client sampling, shuffling and any weights not '
                'pretrained')
  if len(seeds) == 1:
    again = result['budget'].get('minutes_for_seeds', {}).get('3')
    budget = ('' if again is None else
              f' --budget_minutes={again:g} --max_rounds={sim["rounds"]}')
    return (
        f'Every accuracy here is one simulation with one seed ({seed_words}'
        f'; {noise}), and {source}. The recommended simulation {margin}. '
        'Runs that differ only in their seed have spread by several points '
        f'on small corpora ({SEEN_SEED_SPREAD}, docs/recommend.md), so a '
        'margin of that size is not settled by one run: repeat the runs '
        'nearest the target with other seeds before relying on the verdict '
        f'(this command with `--seeds=3{budget}`, which keeps these rounds '
        'and, in the same `--output_dir`, reuses the finished simulations '
        'with the same settings; or '
        f'`run_stackoverflow --flagfile={SIMULATION_FLAGFILE}` with another '
        '`--seed` and `--experiment_name`, and another run\'s '
        '`--noise_multiplier`).')
  if stderr is None:
    settled = ('A seed that diverged or failed leaves no mean: the setting '
               'counts as failed.')
  elif abs(accuracy - target) < 2 * stderr:
    settled = (f'The margin is within two standard errors: {len(seeds)} '
               f'seeds do not settle the verdict. {_more_seeds(result)}')
  else:
    settled = (f'The margin is more than two standard errors (a rough '
               f'yardstick with {len(seeds)} seeds, not a test).')
  return (
      f'Each no-noise and noise accuracy here is the mean of {len(seeds)} '
      f'simulations with seeds {seeds[0]} to {seeds[-1]} ({seed_words}; the '
      f'learning-rate runs are {_learning_rate_runs_words(result)}; '
      f'{noise}), and {source}. The '
      f'recommended simulation {margin}. {settled}'
      + _learning_rate_gap(result))


def _past_grid_edge_words(result: Dict) -> str:
  """The pairs past the grid's edge that ran, for section 2's heading."""
  past = result['learning_rate_grid'].get('pairs_past_grid_edge') or []
  if not past:
    return ''
  return (f' and, one grid step past its edge from the best of those '
          f'(`--learning_rates_past_grid_edge`), {_pairs(past)}')


def _learning_rate_runs_words(result: Dict) -> str:
  """How practice 6's pairs ran: one run each, and the best again at every
  seed."""
  again = result.get('learning_rate_runs_at_every_seed') or []
  if not again:
    return 'one run each'
  return (f'one run each, the best {len(again)} then at all '
          f'{len(result["simulation"]["seeds"])} seeds')


def _one_run_lead(result: Dict) -> Optional[Dict]:
  """At several seeds, with the pair chosen on one run each: how far the
  chosen learning-rate pair's run is above the next candidate's
  (`policy.learning_rate_ranking`), against how far two runs of one
  setting differ here, sqrt(2) s, s the no-noise setting's sample standard
  deviation over its seeds (the learning-rate runs have the least noise,
  close to none); settled when the lead is at least twice that.

  Returns dict(best, next, gap, differ, settled), or None with one seed
  (no spread), a failed no-noise seed, a single candidate, or pairs that
  ran at every seed (`_learning_rate_gap` compares their means).
  """
  no_dp = result['no_dp_run']
  if no_dp.get('accuracy_stderr') is None or \
      result.get('learning_rate_runs_at_every_seed'):
    return None
  rows = policy.learning_rate_ranking(result['learning_rate_runs'])
  if len(rows) < 2:
    return None
  differ = (math.sqrt(2) * no_dp['accuracy_stderr'] *
            math.sqrt(len(no_dp['seeds'])))
  gap = rows[0]['accuracy'] - rows[1]['accuracy']
  return dict(best=rows[0], next=rows[1], gap=gap, differ=differ,
              settled=gap >= 2 * differ)


def _learning_rate_gap(result: Dict) -> str:
  """How settled practice 6's choice is. On one run each
  (`_one_run_lead`): the lead against twice sqrt(2) s, and when within it
  the --learning_rates_at_every_seed re-run that settles it. With pairs
  that ran at every seed: the chosen mean's lead over the other's, against
  the standard error of the difference of two independent means,
  hypot(SE_1, SE_2) (a rough yardstick with a few seeds, as for the
  target's margin). Empty with one seed or a single candidate."""
  lead = _one_run_lead(result)
  if lead is not None:
    best, next_, gap = lead['best'], lead['next'], lead['gap']
    text = (f' The learning rates were chosen on one run each: client lr '
            f'{best["client_lr"]:g} / server lr {best["server_lr"]:g} gave '
            f'{percent(best["accuracy"])}, {100 * gap:.2f} points above the '
            f'next, {next_["client_lr"]:g} / {next_["server_lr"]:g} '
            f'({percent(next_["accuracy"])}); two runs of the no-noise '
            f'setting differ here by about {100 * lead["differ"]:.2f} points '
            '(the root of 2 times its seeds\' standard deviation), so the '
            'choice ')
    if lead['settled']:
      return text + (
          'is more than twice that apart (a yardstick, not a test: '
          'learning-rate runs with adaptive clipping have spread more than '
          'no-noise runs, docs/recommend.md; '
          f'`--learning_rates_at_every_seed='
          f'{search_lib.ADVISED_LEARNING_RATES_AT_EVERY_SEED}` compares '
          'the pairs on their own seeds).')
    count = search_lib.ADVISED_LEARNING_RATES_AT_EVERY_SEED
    minutes = result['budget'].get('minutes_for_learning_rates_at_every_seed')
    command = (f'This command with `--learning_rates_at_every_seed={count}'
               + ('` (and a larger --budget_minutes, without --quick)'
                  if minutes is None else
                  f' --budget_minutes={minutes:g} '
                  f'--max_rounds={result["simulation"]["rounds"]}`, which '
                  'keeps these rounds and grids,'))
    return text + (
        'is within twice that: one seed each does not settle it, and the '
        f'next pair may do as well. {command} runs the best {count} pairs at '
        'every seed and chooses on their means; in the same `--output_dir` '
        'it reuses the finished simulations.')
  again = result.get('learning_rate_runs_at_every_seed') or []
  if not again:
    return ''
  seeds = len(result['simulation']['seeds'])
  ranked = policy.learning_rate_ranking(again)
  failed = [r for r in again if not policy.finite(r.get('accuracy'))]
  text = (f' The best {len(again)} learning-rate pairs of one run each ran '
          f'at all {seeds} seeds (`--learning_rates_at_every_seed`), and the '
          'pair is chosen on their means')
  if failed:
    text += (f' ({_pairs(failed)} failed or diverged at a seed: no mean, '
             'passed over)')
  if not ranked:
    return text + ('; none of them has a mean, so the pair was chosen among '
                   'the others on one run each.')
  if len(ranked) < 2:
    return text + '.'
  best, next_ = ranked[0], ranked[1]
  gap = best['accuracy'] - next_['accuracy']
  stderr = (None if best.get('accuracy_stderr') is None or
            next_.get('accuracy_stderr') is None else
            math.hypot(best['accuracy_stderr'], next_['accuracy_stderr']))
  text += (f': client lr {best["client_lr"]:g} / server lr '
           f'{best["server_lr"]:g}, {percent(best["accuracy"])}, is '
           f'{100 * gap:.2f} points above {next_["client_lr"]:g} / '
           f'{next_["server_lr"]:g} ({percent(next_["accuracy"])})')
  if stderr is None:
    return text + '.'
  return text + (
      f', against a standard error of the difference of {100 * stderr:.2f} '
      'points: ' + ('more than two standard errors (a rough yardstick, not a '
                    'test).' if gap >= 2 * stderr else
                    'within two standard errors, so the other pair may do '
                    'as well.'))


def _more_seeds(result: Dict) -> str:
  """What more seeds would do for a margin within two standard errors:
  the projected seeds and the command that runs them keeping these
  rounds, or, when that is more than `MAX_ADVISED_SEEDS`, the settings
  with less noise that are settled."""
  settle = result.get('seeds_to_settle')
  advised = advised_seeds(result)
  if advised is not None:
    minutes = result['budget']['minutes_for_seeds'].get(str(advised))
    budget = ('' if minutes is None else
              f' --budget_minutes={minutes:g} '
              f'--max_rounds={result["simulation"]["rounds"]}')
    return (f'Were the seeds to spread as these did, about {advised} would '
            'put a margin of this size beyond two standard errors (the '
            'standard error falls as one over the root of the seeds; the '
            f'mean moves too): this command with `--seeds={advised}{budget}`'
            ', which keeps these rounds and, in the same `--output_dir`, '
            'reuses the finished simulations.')
  text = ('It is so small against the seeds\' spread that '
          + ('no number of seeds would settle it' if settle is None else
             f'settling it would take about {settle} seeds (more than '
             f'{MAX_ADVISED_SEEDS})') +
          ': this setting is at the target as far as such runs can tell.')
  sim = result['simulation']
  settled = []
  for row in result['noise_runs']:
    if row['noise_multiplier'] >= sim['noise_multiplier']:
      continue
    margin, stderr = _row_margin(result, row)
    if margin is not None and stderr is not None and margin >= 2 * stderr:
      settled.append((row['noise_multiplier'], margin, stderr))
  if settled:
    z, margin, stderr = max(settled)
    text += (f' The most noise tried whose margin is at least two standard '
             f'errors above the target is z = {z:g}: '
             f'{100 * margin:+.2f} points, standard error '
             f'{100 * stderr:.2f}. It has less noise per client, so its '
             'launch needs a larger report goal for the same epsilon: '
             f'`plan_launch --noise_multiplier={z:g} '
             f'--reference_report_goal={sim["clients_per_round"]}` with the '
             'report goals to try plans it.')
  else:
    text += (' No setting with less noise tried here is two standard errors '
             'above the target either.')
  return text


def _margin_to_target(result: Dict, accuracy: float,
                      accuracy_stderr: Optional[float]):
  """A mean accuracy's margin to the target, and the margin's standard
  error.

  The setting's runs and the target's are independent, so
  SE(accuracy - target) = hypot(SE_accuracy, SE_target).

  Args:
    result: the recommendation, for `utility_target` and
      `utility_target_stderr`.
    accuracy: the setting's mean accuracy (NaN or None when it diverged
      or failed).
    accuracy_stderr: its standard error over the seeds (None with one
      seed).

  Returns:
    (margin, stderr), each None when it cannot be had.
  """
  margin = (accuracy - result['utility_target'] if policy.finite(accuracy)
            else None)
  target_stderr = result.get('utility_target_stderr')
  stderr = (None if accuracy_stderr is None or target_stderr is None else
            math.hypot(accuracy_stderr, target_stderr))
  return margin, stderr


def _margin_stderr(result: Dict) -> Optional[float]:
  """The standard error of (recommended accuracy - target); None with
  one seed."""
  return _recommended_margin(result)[1]


def _recommended_margin(result: Dict):
  """The recommended simulation's (margin, stderr) to the target."""
  sim = result['simulation']
  return _margin_to_target(result, sim['eval_accuracy'],
                           sim.get('eval_accuracy_stderr'))


def _row_margin(result: Dict, row: Dict):
  """A noise setting's margin to the target and its standard error."""
  return _margin_to_target(result, row.get('accuracy'),
                           row.get('accuracy_stderr'))


def launch_duration(launch: Dict) -> str:
  """How long the timer model took for the launch's rounds, and the rounds
  it ran short of the report goal."""
  days = launch['simulated_days']
  text = (f'In the timer model its {launch["rounds"]} rounds take '
          f'{days:.1f} days')
  if days > 0:   # A round takes round_minutes > 0: always, in the model.
    text += f' ({launch["rounds"] / days:.0f} rounds a day)'
  if launch['short_rounds']:
    text += (f'; {launch["short_rounds"]} of them run short of the report '
             f'goal (too few devices check in)')
  return text


def _figures(output_dir: str, result: Dict) -> Dict[str, str]:
  """The four figures; {name: file name}."""
  figures = {}
  lr_runs = result['learning_rate_runs']
  labels = [f'c {r["client_lr"]:g} / s {r["server_lr"]:g}' for r in lr_runs]
  accs = [100 * (r['accuracy'] if r.get('accuracy') is not None else 0.0)
          for r in lr_runs]
  figures['learning_rates'] = 'learning_rates.png'
  plotting.bar_plot(
      os.path.join(output_dir, figures['learning_rates']), labels, accs,
      reference=[('unigram baseline', 100 * result['simulation'][
          'unigram_accuracy'])],
      title='Practice 6: learning rates (adaptive clipping)',
      ylabel='eval in-vocab accuracy %')
  noise = [r for r in result['noise_runs'] + [result.get('launch_noise_run')]
           if r and r.get('accuracy') is not None]
  m = result['simulation']['clients_per_round']
  figures['noise'] = 'noise.png'
  plotting.choice_plot(
      os.path.join(output_dir, figures['noise']),
      [r['noise_multiplier'] / m for r in noise],
      [100 * r['accuracy'] for r in noise],
      chosen=(result['simulation']['noise_per_client'],
              100 * (result['simulation']['eval_accuracy'] or 0.0)),
      hlines=[('utility target', 100 * result['utility_target']),
              ('unigram baseline',
               100 * result['simulation']['unigram_accuracy'])],
      title='Practice 2: accuracy against noise per client', xlabel='z / m',
      ylabel='eval in-vocab accuracy %', logx=True)
  curve = result['report_goal_curve']
  launch = result['launch']
  figures['launch'] = 'launch_epsilon.png'
  plotting.choice_plot(
      os.path.join(output_dir, figures['launch']),
      [c['report_goal'] for c in curve], [c['epsilon'] for c in curve],
      chosen=(launch['report_goal'], launch['epsilon']),
      hlines=[('target epsilon', launch['target_epsilon'])],
      title='Practice 3: launch epsilon at the simulated z / m '
      '(MinS at the population cap)', xlabel='report goal m',
      ylabel='epsilon', logx=True, logy=True)
  sims = result['timer_simulations']
  figures['timer'] = 'timer.png'
  goals = sorted({s['report_goal'] for s in sims})
  plotting.line_plot(
      os.path.join(output_dir, figures['timer']),
      [(f'm = {g}: MinS', [s['timer_hours'] for s in sims
                           if s['report_goal'] == g],
        [max(0, s['observed_min_separation']) for s in sims
         if s['report_goal'] == g]) for g in goals] +
      [(f'm = {g}: cap floor(N / m) - 1',
        [s['timer_hours'] for s in sims if s['report_goal'] == g],
        [s['population_min_separation'] for s in sims
         if s['report_goal'] == g]) for g in goals],
      title='Practice 4: the timer against MinS', xlabel='timer (hours)',
      ylabel='MinS (rounds)')
  return figures


def _seed_list(row: Dict) -> str:
  return ', '.join(percent(a) for a in row.get('seed_accuracies') or
                   [row.get('accuracy')])


def _seeds_title(seeds) -> str:
  return 'One run each.' if len(seeds) == 1 else f'Means of {len(seeds)} seeds.'


def markdown(result: Dict, figures: Dict[str, str]) -> str:
  """recommendation.md: the steps in order, a figure each, and why."""
  sim, launch = result['simulation'], result['launch']
  budget = result['budget']
  lines = ['# Recommendation', '']
  verdict_p = ('meets' if launch['meets_privacy_target'] else
               'does NOT meet')
  lines += [
      f'- **Simulation** ({sim["clients_per_round"]} clients a round, '
      f'{sim["rounds"]} rounds, DP-FTRL): z = {sim["noise_multiplier"]:g}, '
      f'clip {sim["clip_norm"]:.4g}, client lr {sim["client_lr"]:g}, '
      f'server lr {sim["server_lr"]:g}: eval in-vocab accuracy '
      f'{percent(sim["eval_accuracy"])} (top-3 '
      f'{percent(sim["eval_top3_accuracy"])}); no DP {percent(sim["no_dp_accuracy"])}'
      f'; unigram baseline {percent(sim["unigram_accuracy"])}. It '
      f'{utility_verdict(result)}.',
      f'- **{_seeds_title(sim["seeds"])}** {seeds_caveat(result)}',
      f'- **Launch**: report goal {launch["report_goal"]}, z = '
      f'{launch["noise_multiplier"]:.4g} (z / m = '
      f'{launch["noise_per_client"]:.4g}; simulated '
      f'{sim["noise_per_client"]:.4g}), {launch["rounds"]} rounds, '
      f'timer {participation.format_hours(launch["timer_hours"])} for '
      f'{launch["population"]:,} '
      f'devices: MinS {launch["min_separation"]}, MaxP '
      f'{launch["max_participation"]}, rho-zCDP {launch["zcdp"]:.4g}, '
      f'epsilon {launch["epsilon"]:.4g} at delta {launch["delta"]:g}. It '
      f'{verdict_p} the target epsilon {launch["target_epsilon"]:g}. '
      f'{launch_duration(launch)}.',
      f'- Files: `{SIMULATION_FLAGFILE}` (run_stackoverflow), '
      f'`{LAUNCH_FLAGFILE}` (privacy_accountant), `privacy_report.md` (the '
      'launch\'s), `recommendation.json`.', '']
  if budget['quick']:
    lines += ['**--quick: a test of the pipeline at a few rounds of a tiny '
              'model, not a recommendation to launch with.**', '']
  for text in result['suggestions']:
    lines.append(f'- {text}')
  lines += [
      '', '## Privacy of the tuning runs',
      'The simulations ran on the proxy corpus, not on the launch\'s '
      'population (the paper\'s practice): their privacy cost, if any, is on '
      'the proxy\'s data. The launch\'s guarantee below is planned from the '
      'timer model of its population; the real launch is accounted from the '
      'MinS and MaxP it observes (practice 7).', '',
      '## 1. Pretraining on public text',
      (f'{budget["pretrain_steps"]} steps on the corpus\'s public text; every '
       f'simulation starts from it (`{sim["initial_weights"]}`).'
       if budget['pretrain_steps'] else
       'None: the corpus has no public text (or --pretrain_steps=0).'), '',
      '## 2. Learning rates and clip (practice 6)',
      f'Adaptive clipping (Algorithm 1, target quantile 0.5, the trees '
      f'restarted and the clip estimate put in force at '
      f'{_rounds_words(result["learning_rate_restart_rounds"])}, clipped counts '
      f'noised with std {result["learning_rate_clipped_count_stddev"]:.4g}) '
      f'at z = '
      f'{result["learning_rate_runs"][0]["noise_multiplier"]:g}, the least '
      f'noise the privacy target allows at the largest report goal '
      f'(z / m = {result["least_noise_per_client"]:.4g}), '
      f'{sim["rounds"]} rounds each, the first '
      f'{result["learning_rate_grid"]["pairs_tried"]} of the grid\'s '
      f'{result["learning_rate_grid"]["pairs_in_grid"]} pairs'
      + _past_grid_edge_words(result) + ':', '',
      '| client lr | server lr | accuracy | clip in force at the end | training loss |',
      '| --- | --- | --- | --- | --- |']
  for r in result['learning_rate_runs']:
    clip = r.get('final_clip_norm')
    lines.append(f'| {r["client_lr"]:g} | {r["server_lr"]:g} | '
                 f'{percent(r.get("accuracy"))} | '
                 f'{"-" if clip is None else f"{clip:.4g}"} | '
                 f'{"exploded (passed over)" if r.get("exploded") else "ok"}'
                 ' |')
  again = result.get('learning_rate_runs_at_every_seed') or []
  if again:
    lines += [
        '', f'The best {len(again)} of them again at seeds '
        f'{sim["seeds"][0]} to {sim["seeds"][-1]} (the first seed\'s run is '
        'the one above):', '',
        f'| client lr | server lr | mean accuracy | seeds {sim["seeds"][0]} '
        f'to {sim["seeds"][-1]} | training loss |',
        '| --- | --- | --- | --- | --- |']
    for r in again:
      lines.append(f'| {r["client_lr"]:g} | {r["server_lr"]:g} | '
                   f'{percent(r.get("accuracy"))} | {_seed_list(r)} | '
                   f'{"exploded at a seed" if r.get("exploded") else "ok"}'
                   ' |')
  lines += [
      '', 'Chosen: the most accurate'
      + (f' mean of those {len(again)}' if again else '')
      + ('' if all(r.get('exploded') for r in result['learning_rate_runs'])
         else ' whose training loss did not explode') +
      f', client lr {sim["client_lr"]:g}, server '
      f'lr {sim["server_lr"]:g}; the clip is fixed at the one its adaptive '
      f'clipping had in force at the end (the estimate put in force at a '
      f'late tree restart{", first seed" if again else ""}), '
      f'{sim["clip_norm"]:.4g}. Without noise at these '
      f'learning rates and clip: '
      f'{percent(sim["no_dp_accuracy"])}.', '',
      f'![learning rates]({figures["learning_rates"]})', '',
      '## 3. The utility target', result['utility_target_rule'] + '.', '',
      '## 4. Noise (practice 2)']
  one = len(sim['seeds']) == 1
  setting = 'run' if one else 'setting\'s mean accuracy'
  # How the search ended: a miss, the plan's last multiplier, the budget.
  if result['budget'].get('noise_grid_ran_out'):
    until = (f' up to the plan\'s {len(result["noise_runs"])} multipliers; '
             f'every {"run" if one else "setting"} met the target, so the '
             'largest is chosen')
  else:
    until = (' until the budget ran out'
             if result['budget'].get('stopped_noise_search') else
             f' until a {setting} missed the target')
    until += ('; the largest z whose run, and every smaller one, met it' if one
              else '; the largest z whose mean, and every smaller one\'s, met '
              'it')
  if one:
    lines += [
        f'DP-FTRL with the fixed clip at {sim["clients_per_round"]} clients '
        f'a round, the noise doubled from the least{until}:',
        '', '| z | z / m | accuracy |', '| --- | --- | --- |']
    rows = result['noise_runs']
  else:   # The no-noise setting's seeds too: the target's spread.
    lines += [
        f'DP-FTRL with the fixed clip at {sim["clients_per_round"]} clients '
        f'a round, each setting at {len(sim["seeds"])} seeds, the noise '
        f'doubled from the least{until} (z = 0: the no-noise setting):', '',
        f'| z | z / m | mean accuracy | seeds {sim["seeds"][0]} to '
        f'{sim["seeds"][-1]} |', '| --- | --- | --- | --- |']
    rows = [result['no_dp_run']] + result['noise_runs']
  for r in rows:
    lines.append(f'| {r["noise_multiplier"]:g} | '
                 f'{r["noise_multiplier"] / sim["clients_per_round"]:.4g} | '
                 f'{percent(r.get("accuracy"))} |' +
                 (f' {_seed_list(r)} |' if len(sim['seeds']) > 1 else ''))
  run = result.get('launch_noise_run')
  if run:
    lines += ['', f'The launch\'s report goal is capped (section 5), which '
              f'gives it more noise per client than the largest z that met '
              f'the target; a run at its noise per client, z = '
              f'{run["noise_multiplier"]:g} (z / m = '
              f'{run["noise_multiplier"] / sim["clients_per_round"]:.4g}), '
              f'gave {percent(run.get("accuracy"))}: '
              + ('it meets the target and is the recommended simulation.'
                 if result['meets_utility_target'] else
                 'it does NOT meet the target.')]
  lines += ['', f'![noise]({figures["noise"]})', '',
            '## 5. Report goal and noise (practice 3)',
            f'{launch["reason"]}.', '',
            f'![launch epsilon]({figures["launch"]})', '',
            '## 6. Timer (practice 4)',
            'The timer model of the population at each timer (automatic '
            'timers of a day or more are whole days, as the paper raises '
            'its timers in 24-hour units, tried shortest first until one '
            'reaches the cap); the shortest timer whose MinS reaches 90% of '
            'the cap '
            'min(floor(N / m) - 1, T - 1), no device taking part twice (MinS '
            '-1 below) counting as MinS T - 1 (else the largest MinS):', '',
            '| report goal | timer | MinS | cap | MaxP | days for the '
            'rounds | rounds short |',
            '| --- | --- | --- | --- | --- | --- | --- |']
  for s in result['timer_simulations']:
    lines.append(f'| {s["report_goal"]} | '
                 f'{participation.format_hours(s["timer_hours"])} | '
                 f'{s["observed_min_separation"]} | '
                 f'{s["population_min_separation"]} | '
                 f'{s["observed_max_participation"]} | '
                 f'{s["simulated_days"]:.1f} | {s["short_rounds"]} |')
  lines += ['', f'![timer]({figures["timer"]})', '',
            '## 7. SecAgg and what happened',
            'Train the launch with SecAgg (`--secagg`) and account it from '
            'its observed participation: `privacy_accountant --flagfile='
            f'{LAUNCH_FLAGFILE}` with the observed --min_separation and '
            '--max_participation, and --secagg_scale, --model_dim and '
            '--clip_norm for the rounding\'s inflated norm. The epsilon '
            'above is without SecAgg\'s inflation.', '']
  return '\n'.join(lines)
