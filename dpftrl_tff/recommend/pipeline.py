"""From a proxy corpus to a launch plan: the practices, in order.

`recommend(request)` runs `search.Search`'s simulations stage by stage,
takes each decision with `policy`, plans the launch with `launch.plan` and
writes the outputs with `report.write`. See `experiments.recommend`.
"""

import os
from typing import Dict

from dpftrl_tff import accounting
from dpftrl_tff.data import public_corpus
from dpftrl_tff.recommend import launch as launch_lib
from dpftrl_tff.recommend import policy
from dpftrl_tff.recommend import report as report_lib
from dpftrl_tff.recommend import search as search_lib

# The launch's timer-model simulations, reused when the command runs again.
TIMER_SIMULATIONS_FILE = 'timer_simulations.json'


def least_noise_per_client(request: search_lib.Request, target_zcdp: float,
                           report_goal: int) -> float:
  """z / m the privacy target needs at `report_goal`, the largest the
  population allows (`launch.report_goal_ceiling`), with its MinS cap: no
  launch can have less noise per client."""
  z = launch_lib.noise_for_target(
      rounds=request.launch_rounds, report_goal=report_goal,
      target_zcdp=target_zcdp, delta=request.delta,
      **launch_lib.ideal_participation(request.population,
                                       request.launch_rounds, report_goal))
  return z / report_goal


def adaptive_tuning_flags(noise_multiplier: float, clients_per_round: int, *,
                          rounds: int, print_fn=print):
  """Practice 6's adaptive-clipping flags beyond the simulation's own, the
  count noise sigma_b they give (`policy.clipped_count_stddev`; the flag
  only when it is above the paper's m / 20, which is the default) and the
  rounds at which the trees restart.

  The trees restart, and the clip estimate comes into force, about every
  fifth of the `rounds`: first at w = max(1, rounds // 5), then every
  w + 1 (TF Privacy's restart indicator needs its warm-up below its
  period), so at w, 2w + 1, 3w + 2 and 4w + 3. Algorithm 1's estimate moves
  by a factor of about exp(eta_gamma max(gamma, 1 - gamma)) = exp(0.1) a
  round at most (more only by the count noise), so a single restart at a
  fifth of a short run puts in force an estimate still on its way from C^0
  (76 rounds on git 2022-23: 0.22 in force from round 15, the estimate
  settling near 0.69 from round 30). Restarting every fifth puts in force
  over the last fifth, which the clip is fixed from (`search._final_clip`),
  the estimate after about four fifths of the rounds, and tunes the
  learning rates under clips near it.
  """
  warmup = max(1, rounds // 5)
  flags = [f'--restart_warmup={warmup}', f'--restart_frequency={warmup + 1}']
  restart_rounds = accounting.paper_restart_rounds(
      rounds, warmup=warmup, frequency=warmup + 1)
  count_stddev = policy.clipped_count_stddev(noise_multiplier,
                                             clients_per_round)
  default = accounting.default_clipped_count_stddev(clients_per_round)
  if count_stddev > default:
    count_stddev = policy.round_up(count_stddev)
    flags.append(f'--clipped_count_stddev={count_stddev:g}')
    print_fn(f'  clipped counts noised with std {count_stddev:g}: the '
             f'paper\'s m / 20 = {default:g} would raise the model\'s noise '
             f'by more than {policy.VALUE_NOISE_INFLATION - 1:.0%} at this z, '
             'or leave it no budget')
  return flags, count_stddev, restart_rounds


def recommend(request: search_lib.Request, *, print_fn=print) -> Dict:
  """Runs every stage; returns the recommendation (recommendation.json)."""
  target_zcdp = accounting.zcdp_within_epsilon(request.target_epsilon,
                                            request.delta)
  public_text = public_corpus.has_public_text(request.cache_dir)
  budget = search_lib.plan_budget(
      request, round_seconds=search_lib.estimate_round_seconds(request),
      public_text=public_text)
  print_fn('Plan:')
  for line in budget.lines:
    print_fn(f'  {line}')
  search = search_lib.Search(request, budget, print_fn=print_fn)
  search.pretrain()

  # Practice 6: learning rates with adaptive clipping at the least noise.
  ceiling = launch_lib.report_goal_ceiling(request.population,
                                           request.max_report_goal)
  noise_per_client = least_noise_per_client(request, target_zcdp, ceiling)
  m_sim = request.clients_per_round
  least_z = float(f'{noise_per_client * m_sim:.4g}')
  print_fn(f'Practice 6: learning rates with adaptive clipping at z = '
           f'{least_z:g} ({m_sim} clients a round: the least noise per '
           f'client, z / m = {noise_per_client:.4g}, the privacy target '
           f'allows at report goal {ceiling})')
  lr_rows = []
  adaptive_flags, count_stddev, restart_rounds = adaptive_tuning_flags(
      least_z, m_sim, rounds=budget.rounds, print_fn=print_fn)

  def lr_flags(client_lr, server_lr, seed=None):
    return search.simulation_flags(
        aggregator='dp_ftrl_adaptive', client_lr=client_lr,
        server_lr=server_lr, noise_multiplier=least_z,
        seed=seed) + adaptive_flags

  def lr_run(client_lr, server_lr, **described):
    return search.simulate(
        f'lr_c{client_lr:g}_s{server_lr:g}', lr_flags(client_lr, server_lr),
        stage='learning_rate', client_lr=client_lr, server_lr=server_lr,
        noise_multiplier=least_z, **described)

  for client_lr, server_lr in budget.learning_rates:
    lr_rows.append(lr_run(client_lr, server_lr))
  # --learning_rates_past_grid_edge: one grid step past the edge from the
  # best of one run each, once (a pair there that wins is at the edge of
  # the pairs tried, and recommendation.md names the next step).
  if request.learning_rates_past_grid_edge:
    first = policy.best_learning_rates(lr_rows)
    for client_lr, server_lr in policy.learning_rate_edge(
        (first['client_lr'], first['server_lr']),
        search_lib.LEARNING_RATE_GRID,
        [(r['client_lr'], r['server_lr']) for r in lr_rows])['beyond_grid']:
      print_fn(f'  client lr {first["client_lr"]:g} / server lr '
               f'{first["server_lr"]:g} is at the grid\'s edge: client lr '
               f'{client_lr:g} / server lr {server_lr:g} too')
      lr_rows.append(lr_run(client_lr, server_lr, past_grid_edge=True))
  # --learning_rates_at_every_seed: the best pairs again at the other
  # seeds, the choice taken on their means.
  lr_seed_rows = []
  if request.seeds > 1 and request.learning_rates_at_every_seed:
    for row in policy.learning_rates_at_every_seed(
        lr_rows, request.learning_rates_at_every_seed):
      lr_seed_rows.append(search.simulate_seeds(
          row['name'], lambda seed, row=row: lr_flags(
              row['client_lr'], row['server_lr'], seed),
          first_run=row, stage='learning_rate', client_lr=row['client_lr'],
          server_lr=row['server_lr'], noise_multiplier=least_z))
  best = policy.best_learning_rates_over_seeds(lr_rows, lr_seed_rows)
  # The clip from the chosen pair's first seed, whose run names it: a
  # re-run at more seeds that chooses the same pair reuses its runs.
  clip = best.get('final_clip_norm') or 1.0
  print_fn(f'  best: client lr {best["client_lr"]:g}, server lr '
           f'{best["server_lr"]:g} ({report_lib.percent(best["accuracy"])}'
           + (f', the mean of {request.seeds} seeds' if lr_seed_rows else '')
           + f'); clip norm from its estimate: {clip:.4g}')

  # The reference without noise: the same learning rates, rounds and clip
  # (clipping alone keeps these learning rates stable).
  # Named by what they depend on: a re-run that chooses other learning
  # rates or clip makes new runs instead of meeting the old ones.
  tuned = f'c{best["client_lr"]:g}_s{best["server_lr"]:g}_C{clip:.4g}'
  no_dp = _dp_ftrl_run(search, f'no_noise_{tuned}', stage='no_dp',
                       best=best, clip_norm=clip, noise_multiplier=0.0)
  unigram = best.get('unigram_accuracy') or no_dp.get('unigram_accuracy')
  target = policy.utility_target(
      no_dp_accuracy=no_dp.get('accuracy') or 0.0, unigram_accuracy=unigram,
      fraction=request.utility_fraction, margin=request.utility_margin,
      given=request.utility_target)
  print_fn(f'Utility target: {target.rule}')

  # Practice 2: the largest noise meeting the target, DP-FTRL, fixed clip.
  noise_rows = []
  stopped_by_budget = False
  for z in policy.noise_grid(least_z, budget.noise_factors):
    if noise_rows and search.over_budget():
      stopped_by_budget = True
      print_fn(f'  the budget ({request.budget_minutes:g} min) is spent: no '
               f'larger noise multiplier is tried')
      break
    row = _dp_ftrl_run(search, f'z{z:g}_{tuned}', stage='noise', best=best,
                       clip_norm=clip, noise_multiplier=z)
    noise_rows.append(row)
    if not policy.meets_target(row, target.value):
      break
  chosen = policy.largest_noise(noise_rows, target.value)
  meets_utility = chosen is not None
  if chosen is None:   # Privacy first: the least noise, target missed.
    chosen = noise_rows[0]
  print_fn(f'Practice 2: z = {chosen["noise_multiplier"]:g} at {m_sim} '
           f'clients a round ({report_lib.percent(chosen.get("accuracy"))}; target '
           f'{report_lib.percent(target.value)}: '
           f'{"met" if meets_utility else "NOT met"})')

  # Practices 3 and 4: the launch.
  sim_noise_per_client = chosen['noise_multiplier'] / m_sim
  plan = launch_lib.plan(
      noise_per_client=sim_noise_per_client, population=request.population,
      rounds=request.launch_rounds, smallest_report_goal_=m_sim,
      largest_report_goal=request.max_report_goal, target_zcdp=target_zcdp,
      delta=request.delta, timer_hours=request.timer_hours,
      seed=request.seed, progress=lambda text: print_fn(f'  {text}'),
      cache=launch_lib.SimulationCache(os.path.join(
          request.output_dir, TIMER_SIMULATIONS_FILE)))
  launch_row = None
  if meets_utility and plan.capped:
    launch_row = _simulate_launch_noise(
        search, plan, name=tuned, best=best, clip_norm=clip,
        target=target.value, print_fn=print_fn)
  result = report_lib.build(
      request=request, budget=budget, search=search, lr_rows=lr_rows,
      lr_seed_rows=lr_seed_rows, best=best, clip_norm=clip, no_dp=no_dp,
      unigram=unigram,
      target=target, noise_rows=noise_rows, chosen=chosen,
      meets_utility=meets_utility, plan=plan, launch_noise_row=launch_row,
      least_noise_per_client=noise_per_client,
      clipped_count_stddev=count_stddev, restart_rounds=restart_rounds,
      stopped_by_budget=stopped_by_budget,
      minutes_keeping_rounds=lambda seeds: search_lib.minutes_keeping_rounds(
          request, budget, seeds=seeds, public_text=public_text),
      minutes_for_more_noise=lambda: search_lib.minutes_keeping_rounds(
          request, budget, seeds=request.seeds, public_text=public_text,
          more_noise_factors=True),
      minutes_for_learning_rates=lambda n, more_noise_factors=False: (
          search_lib.minutes_keeping_rounds(
              request, budget, seeds=request.seeds, public_text=public_text,
              least_learning_rates=n,
              more_noise_factors=more_noise_factors)),
      minutes_for_learning_rates_at_every_seed=lambda n: (
          search_lib.minutes_keeping_rounds(
              request, budget, seeds=request.seeds, public_text=public_text,
              learning_rates_at_every_seed=n)),
      minutes_for_learning_rates_past_grid_edge=lambda: (
          search_lib.minutes_keeping_rounds(
              request, budget, seeds=request.seeds, public_text=public_text,
              learning_rates_past_grid_edge=True)))
  report_lib.write(request.output_dir, result, plan=plan)
  return result


def _dp_ftrl_run(search, name, *, stage, best, clip_norm, noise_multiplier):
  """Practice 2's setting: DP-FTRL at the tuned learning rates and fixed
  clip, at each of the request's seeds (`Search.simulate_seeds`: the row
  holds their mean accuracy)."""
  return search.simulate_seeds(
      name, lambda seed: search.simulation_flags(
          aggregator='dp_ftrl', client_lr=best['client_lr'],
          server_lr=best['server_lr'], noise_multiplier=noise_multiplier,
          clip_norm=clip_norm, seed=seed),
      stage=stage, client_lr=best['client_lr'], server_lr=best['server_lr'],
      noise_multiplier=noise_multiplier, clip_norm=clip_norm)


def _simulate_launch_noise(search, plan, *, name, best, clip_norm, target,
                           print_fn=print):
  """Practice 2 at the launch's own noise per client, when practice 3
  capped the report goal and raised the noise above the simulated.

  The run takes z = (launch z / launch report goal) x m, rounded up at 6
  significant digits (so it has at least the launch's noise per client),
  with practice 2's learning rates and clip. Returns its row, or None when
  the budget is spent (the launch's utility is then not shown).
  """
  m_sim = search.request.clients_per_round
  z = policy.round_up(plan.noise_multiplier / plan.report_goal * m_sim, 6)
  if search.over_budget():
    print_fn(f'  the budget ({search.request.budget_minutes:g} min) is '
             f'spent: the launch\'s noise per client is not simulated')
    return None
  print_fn(f'Practice 2 at the launch\'s noise: its report goal is capped at '
           f'{plan.report_goal} with z / m = '
           f'{plan.noise_multiplier / plan.report_goal:.4g}, more than the '
           f'chosen simulation\'s; z = {z:g} at {m_sim} clients a round')
  search.simulations_total = max(search.simulations_total,
                                 search.simulations_done +
                                 search.request.seeds)
  row = _dp_ftrl_run(search, f'launch_z{z:g}_{name}', stage='launch_noise',
                     best=best, clip_norm=clip_norm, noise_multiplier=z)
  print_fn(f'  {report_lib.percent(row.get("accuracy"))} against the target '
           f'{report_lib.percent(target)}: '
           f'{"met" if policy.meets_target(row, target) else "NOT met"}')
  return row
