"""Privacy of a planned DP-FTRL launch: the report of
`experiments.privacy_accountant`.

From the launch's settings (T, z, MinS and MaxP or a population and report
goal, tree restarts or adaptive clipping, SecAgg, BLT noise) `build_report`
computes rho-zCDP and (epsilon, delta) with `accounting.compute_privacy`
(the tree accountant, or the BLT's sensitivity) and returns a JSON-ready
dict; `format_report` prints it and `launch_report` renders it as the
paper's privacy report (`privacy_report`).
"""

import dataclasses

from dpftrl_tff import accounting
from dpftrl_tff import checks
from dpftrl_tff.aggregators import registry
from dpftrl_tff.privacy import privacy_report
from dpftrl_tff.run import config as config_lib


def parse_restart_rounds(text, rounds):
  """Parses --restart_rounds into a list of tree start rounds."""
  if text is None or not text.strip():
    return []
  text = text.strip()
  if text == 'paper':
    return accounting.paper_restart_rounds(rounds)
  if text.startswith('periodic:'):
    parts = text.split(':')
    if len(parts) != 3:
      raise ValueError(
          f'--restart_rounds={text!r}: expected "periodic:WARMUP:FREQUENCY".')
    try:
      warmup, frequency = int(parts[1]), int(parts[2])
    except ValueError:
      raise ValueError(f'--restart_rounds={text!r}: WARMUP and FREQUENCY '
                       'must be integers.') from None
    if warmup < 1 or frequency < 1:
      raise ValueError(f'--restart_rounds={text!r}: WARMUP and FREQUENCY '
                       f'must be >= 1.')
    if warmup >= rounds:
      raise ValueError(f'--restart_rounds={text!r}: the first restart '
                       f'(round {warmup}) is not before --rounds={rounds}, '
                       f'so there would be none.')
    return accounting.paper_restart_rounds(rounds, warmup=warmup,
                                           frequency=frequency)
  try:
    values = [int(v) for v in text.split(',') if v.strip()]
  except ValueError:
    raise ValueError(
        f'--restart_rounds={text!r}: expected comma-separated integers, '
        '"paper" or "periodic:WARMUP:FREQUENCY".') from None
  bad = [v for v in values if v < 1 or v >= rounds]
  if bad:
    raise ValueError(f'--restart_rounds: a restart starts a new tree at a '
                     f'round r with 1 <= r < --rounds={rounds}; got {bad}.')
  return values


# The mechanism settings' defaults are training's (declared once there).
_DEFAULTS = config_lib.TrainConfig

# The training flags that choose a mechanism and its settings, as the
# accountant and the planner take them (`config.define_flags(only=...)`);
# `build_report` takes them by the same names.
MECHANISM_FLAGS = ('aggregator', 'clip_norm', 'secagg_scale',
                   'restart_warmup', 'restart_frequency',
                   'clipped_count_stddev', 'blt_params', 'blt_num_buffers',
                   'blt_error', 'bandmf_bands', 'bandmf_error',
                   'bandmf_matrix_dir',
                   'sampling_probability')
# Unset means "not given" for these (no SecAgg; C only with SecAgg).
MECHANISM_FLAG_DEFAULTS = dict(clip_norm=None, secagg_scale=None)


def _mechanism(aggregator: str):
  """The registry's mechanism called `aggregator`, if it has DP noise to
  account; else one line why not. Which flags go with it is the registry's
  to say, as in training."""
  allowed = ', '.join(registry.accounted())
  if aggregator not in registry.names():
    raise ValueError(f'--aggregator={aggregator!r} is unknown; allowed: '
                     f'{allowed}.')
  mechanism = registry.get(aggregator)
  if mechanism.accounted_noise is None:
    raise ValueError(f'--aggregator={aggregator!r} has no DP noise to '
                     f'account; allowed: {allowed}.')
  return mechanism


def _check_numbers(*, rounds, noise_multiplier, max_participation,
                   min_separation, delta):
  for name, value in (('rounds', rounds),
                      ('noise_multiplier', noise_multiplier)):
    if value is None:
      raise ValueError(f'--{name} is required.')
  # The training config's bound, under this binary's name for the flag.
  checks.check_int(rounds, '--rounds', minimum=1,
                   maximum=config_lib.MAX_ROUNDS)
  checks.check_noise_multiplier(noise_multiplier, positive=True)
  if max_participation is not None and max_participation < 1:
    raise ValueError(f'--max_participation must be an integer >= 1, got '
                     f'{max_participation}.')
  if min_separation is not None and min_separation < 0:
    raise ValueError(f'--min_separation must be an integer >= 0, got '
                     f'{min_separation}.')
  if not 0 < delta < 1:
    raise ValueError(f'--delta must be in (0, 1), got {delta}.')


def _min_separation(min_separation, *, population, report_goal):
  """(MinS to account, the most a population allows or None): MinS is the
  population's most when only the population is given, else 0."""
  max_min_sep = None
  if report_goal is None and population is not None:
    raise ValueError('--population needs --report_goal.')
  if report_goal is not None and report_goal < 1:
    raise ValueError(f'--report_goal must be >= 1, got {report_goal}.')
  if population is not None:
    max_min_sep = accounting.max_min_separation(population, report_goal)
    if min_separation is None:
      min_separation = max_min_sep
    elif min_separation > max_min_sep:
      raise ValueError(
          f'--min_separation={min_separation} is impossible for '
          f'--population={population} at --report_goal={report_goal}: at '
          f'most {max_min_sep}.')
  return (0 if min_separation is None else min_separation), max_min_sep


def _default_count_stddev(report_goal) -> float:
  if report_goal is None:
    raise ValueError('--aggregator=dp_ftrl_adaptive needs '
                     '--clipped_count_stddev or --report_goal (default '
                     'report_goal / 20).')
  return accounting.default_clipped_count_stddev(report_goal)


def build_report(*, rounds, noise_multiplier, max_participation=None,
                 min_separation=None, population=None, report_goal=None,
                 delta=accounting.DEFAULT_DELTA, restart_rounds=None,
                 aggregator=_DEFAULTS.aggregator,
                 restart_warmup=_DEFAULTS.restart_warmup,
                 restart_frequency=_DEFAULTS.restart_frequency,
                 clipped_count_stddev=None, secagg_scale=None,
                 model_dim=None, clip_norm=None, blt_params=None,
                 blt_num_buffers=None, blt_error=_DEFAULTS.blt_error,
                 bandmf_bands=None, bandmf_error=_DEFAULTS.bandmf_error,
                 bandmf_matrix_dir=None, sampling_probability=None,
                 with_epsilon=True):
  """Validates flag values and returns the report as a dict.

  `aggregator` names the mechanism as training does (--aggregator):
  dp_ftrl (tree noise; tree restarts only with `restart_rounds`),
  dp_ftrl_adaptive (Algorithm 1: tree restarts at `restart_warmup` +
  `restart_frequency` i, as training accounts them, unless `restart_rounds`
  gives others; sigma_b `clipped_count_stddev`, default report_goal / 20)
  dp_ftrl_blt (BLT noise) or dp_ftrl_bandmf (BandMF noise: C optimized
  with `bandmf_bands` bands, default MinS + 1 up to 64, or read from
  `bandmf_matrix_dir`; the report adds C's `mean_error` and `max_error`).
  dp_fedavg (DP-FedAvg with Poisson sampling at `sampling_probability`:
  epsilon by PLD, no zCDP; it assumes the sampling).
  `with_epsilon=False` leaves out the epsilon (PLD, the slow part) where
  only rho is needed.
  """
  mechanism = _mechanism(aggregator)
  adaptive_clipping = mechanism.estimates_clip
  _check_numbers(rounds=rounds, noise_multiplier=noise_multiplier,
                 max_participation=max_participation,
                 min_separation=min_separation, delta=delta)
  min_separation, max_min_sep = _min_separation(
      min_separation, population=population, report_goal=report_goal)
  if adaptive_clipping and clipped_count_stddev is None:
    clipped_count_stddev = _default_count_stddev(report_goal)
  restarts = parse_restart_rounds(restart_rounds, rounds)
  noise = mechanism.noise
  if restarts and not noise.tree_restarts:
    raise ValueError(f'--restart_rounds are tree aggregation\'s; '
                     f'--aggregator={aggregator} has no tree to restart.')
  # The mechanism's settings, validated as training validates them (the
  # registry), its strategy planned, optimized or read as training does;
  # the report goal matters here only through sigma_b, resolved above.
  secagg = {} if secagg_scale is None else dict(
      secagg=True, secagg_scale=secagg_scale,
      clip_norm=_DEFAULTS.clip_norm if clip_norm is None else clip_norm)
  config = config_lib.TrainConfig(
      aggregator=aggregator, noise_multiplier=noise_multiplier,
      total_rounds=rounds, clients_per_round=report_goal or 1,
      clipped_count_stddev=clipped_count_stddev, **secagg,
      restart_warmup=restart_warmup, restart_frequency=restart_frequency,
      blt_params=blt_params, blt_num_buffers=blt_num_buffers,
      blt_error=blt_error, bandmf_bands=bandmf_bands,
      bandmf_error=bandmf_error, bandmf_matrix_dir=bandmf_matrix_dir,
      sampling_probability=sampling_probability,
      participation=mechanism.participation or _DEFAULTS.participation)
  config = dataclasses.replace(config, **noise.accounting_plan(
      config, rounds=rounds, min_separation=min_separation,
      max_participation=max_participation))
  if adaptive_clipping and restart_rounds is None:   # As training's.
    restarts = accounting.paper_restart_rounds(
        rounds, warmup=restart_warmup, frequency=restart_frequency)
  strategy, described = noise.strategy(config, rounds)
  report = accounting.compute_privacy(
      rounds=rounds, noise_multiplier=noise_multiplier,
      max_participation=max_participation, min_separation=min_separation,
      restart_rounds=restarts, delta=delta,
      clipped_count_stddev=clipped_count_stddev, secagg_scale=secagg_scale,
      model_dim=model_dim, clip_norm=clip_norm,
      sampling_probability=_sampling_probability(mechanism, config,
                                                 population),
      with_epsilon=with_epsilon, **strategy).as_dict()
  for key, value in described.items():   # Merged into the accountant's.
    report[key] = {**(report.get(key) or {}), **value}
  report.update(
      restart_rounds=list(report['restart_rounds']), aggregator=aggregator,
      requested_max_participation=max_participation,
      max_possible_participation=accounting.max_possible_participation(
          rounds, min_separation),
      max_reachable_min_separation=max_min_sep, population=population,
      report_goal=report_goal)
  if secagg_scale is not None and report_goal is not None:
    _add_secagg_modulus(report['secagg'], clip_norm=clip_norm,
                        secagg_scale=secagg_scale, report_goal=report_goal)
  return report


def _sampling_probability(mechanism, config, population=None):
  """q of a mechanism accounted for Poisson sampling (dp_fedavg): given,
  or report goal / population; None for the other mechanisms."""
  if mechanism.participation != 'poisson':
    return None
  q = config.dp_fedavg_settings().sampling_probability
  if q is None and population is not None:
    q = config.clients_per_round / population
  if q is None:
    raise ValueError(f'--aggregator={mechanism.name} needs '
                     '--sampling_probability, or --population and '
                     '--report_goal (q = report goal / population, the '
                     'Poisson sampling it assumes).')
  return q


def _add_secagg_modulus(secagg, *, clip_norm, secagg_scale, report_goal):
  """SecAgg's modulus M and bits a parameter for a launch's report goal."""
  secagg['modulus'] = accounting.modulus(clip_norm, secagg['padded_dim'],
                                         secagg_scale, report_goal)
  secagg['bits_per_parameter'] = accounting.bits_per_parameter(
      secagg['modulus'])


def _maxp_note(r):
  requested = r['requested_max_participation']
  if requested is None:
    return ' (the worst case for T and MinS)'
  if requested > r['max_participation']:
    return (f' (--max_participation={requested} cannot happen: at most '
            f'{r["max_participation"]} participations fit in {r["rounds"]} '
            f'rounds with {r["min_separation"]} rounds between two)')
  return ''


def format_report(r):
  noise = registry.noise_description(r)
  own = noise.accountant_printout(r)
  if own is not None:
    return '\n'.join(own)
  lines = [
      'DP-FTRL privacy' + noise.accountant_title,
      f'  rounds T                : {r["rounds"]}',
      f'  noise multiplier z      : {r["noise_multiplier"]:g}',
      f'  min separation MinS     : {r["min_separation"]}',
      f'  max participation MaxP  : {r["max_participation"]}'
      + _maxp_note(r),
  ]
  if r['population'] is not None:
    lines.append(f'  population / report goal: {r["population"]} / '
                 f'{r["report_goal"]} (largest MinS '
                 f'{r["max_reachable_min_separation"]})')
  if r['restart_rounds']:
    shown = r['restart_rounds'][:8]
    more = ' ...' if len(r['restart_rounds']) > 8 else ''
    lines.append(f'  tree restarts at rounds : {shown}{more}')
  if r['value_noise_multiplier'] is not None:
    lines.append(f'  adaptive clipping       : sigma_b = '
                 f'{r["clipped_count_stddev"]:g}, value noise z_Delta = '
                 f'{r["value_noise_multiplier"]:.6g}')
  if r['secagg'] is not None:
    s = r['secagg']
    lines.append(f'  SecAgg                  : s = {s["scale"]:g}, d = '
                 f'{s["model_dim"]} (padded {s["padded_dim"]}), C = '
                 f'{s["clip_norm"]:g} -> C_inflated = '
                 f'{s["inflated_clip_norm"]:.6g}, C_inf = {s["linf_bound"]}')
    if 'modulus' in s:
      lines.append(f'                            modulus M = {s["modulus"]}, '
                   f'{s["bits_per_parameter"]} bits per parameter')
  lines += noise.accountant_lines(r)
  sens_label = noise.sensitivity_label
  lines += [
      f'  {sens_label:<24}: {r["sensitivity_squared"]:.10g}',
      f'  rho-zCDP                : {r["zcdp"]:.6g}',
      f'  epsilon (PLD)           : {r["epsilon"]:.4f} at delta = '
      f'{r["delta"]:g}',
      f'  epsilon (closed form)   : {r["epsilon_closed_form"]:.4f}',
  ]
  return '\n'.join(lines)


def launch_report(r) -> str:
  """privacy_report.md of a planned launch, from build_report's dict."""
  own = registry.noise_description(r).launch_report_texts(r)
  if own is not None:
    return privacy_report.render(r, subject='planned launch', kind='launch',
                                 **own)
  if r['population'] is not None:
    where = (f'a population of {r["population"]} devices at report goal '
             f'{r["report_goal"]} allows MinS at most '
             f'{r["max_reachable_min_separation"]}; ')
  else:
    where = ''
  participation = (
      f'{where}the launch must enforce MinS >= {r["min_separation"]} and '
      f'MaxP <= {r["max_participation"]}{_maxp_note(r)}, for example by the '
      'client-side participation timer (paper Sec. 2.1); these are planned '
      'values, to be checked against the launch\'s participation log.')
  if r['value_noise_multiplier'] is not None:
    clipping = ('adaptive l2 clip norm (the paper\'s Algorithm 1); the clip '
                'in force changes only when a tree restarts.')
  elif r['secagg'] is not None:
    clipping = f'fixed l2 clip norm C = {r["secagg"]["clip_norm"]:g}.'
  else:
    clipping = ('a fixed l2 clip norm C per client update (the accounting '
                'does not depend on its value).')
  return privacy_report.render(
      r, subject='planned launch', participation=participation,
      clipping=clipping, kind='launch',
      released=f'the model weights after each of the {r["rounds"]} rounds.')
