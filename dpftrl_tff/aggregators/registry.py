"""The model-update mechanisms a run can use, by name.

Each `Mechanism` bundles what the rest of the project needs to know about one
aggregation: how to validate its settings, how to build its TFF aggregation
factory, how to account its privacy, and the clip norm in force at round 1.
Training, the binaries and the accountant look mechanisms up here; nothing
else branches on the aggregator's name. A new mechanism is one module plus
one `_register` call.

SecAgg (Algorithm 2) is not a mechanism of its own: it replaces the plain sum
inside `none`, `dp_ftrl` and `dp_ftrl_blt` (`secagg_factory`), and the mechanism then
calibrates its noise to SecAgg's inflated sensitivity.
"""

import dataclasses
import functools
import os
from typing import Any, Callable, Dict, Optional, Tuple

from absl import logging
import numpy as np

from dpftrl_tff import accounting
from dpftrl_tff import checks

# The mechanisms' modules (TensorFlow, TFF) are imported inside the functions
# that build or check a factory: the accountant, the launch planner and the
# flag definitions use this registry without loading TensorFlow.


@dataclasses.dataclass(frozen=True)
class Mechanism:
  """One model-update aggregation.

  Attributes:
    name: the value of --aggregator.
    description: one line for --help and the README.
    validate: config -> None, raises ValueError naming the flag.
    build_factory: (config, record_specs) -> an unweighted TFF aggregation
      factory (the mean of the clients' updates, noised). Its noise is
      unpredictable unless config.noise_seed fixes it
      (`dp_ftrl.resolve_noise_seed`).
    privacy: (config, rounds, max_participation, min_separation) ->
      `accounting.PrivacyReport`, or None when the mechanism gives none.
    initial_clip: config -> the clip norm in force at round 1 (None: no
      clipping).
    supports_secagg: whether --secagg can replace its sum.
    run_parameters: what the mechanism resolves when a run starts and keeps
      in the run directory (`RunParameters`), or None.
  """
  name: str
  description: str
  validate: Callable[[Any], None]
  build_factory: Callable[..., Any]
  privacy: Callable[..., Optional[accounting.PrivacyReport]]
  initial_clip: Callable[[Any], Optional[float]]
  supports_secagg: bool
  run_parameters: Optional['RunParameters'] = None

  def planned(self, config, num_clients: int):
    """`config` with what the mechanism plans for `num_clients` clients
    (`RunParameters.plan`); unchanged when it plans nothing."""
    if self.run_parameters is None:
      return config
    return self.run_parameters.plan(config, num_clients)


class RunParameters:
  """A mechanism's parameters resolved when a run starts, kept in the run
  directory so that a resumed run uses the same ones.

  Training calls `plan` before it checks the run's identity (what `plan`
  fills in is recorded in hparams.json), `restore` with the contents of
  `file_name` when the run directory has it, and `contents` to write it when
  not. Each returns a new config (configs are frozen); nothing is kept
  between runs.
  """
  file_name: str

  def plan(self, config, num_clients: int):
    raise NotImplementedError

  def restore(self, config, saved: Dict[str, Any], path: str):
    raise NotImplementedError

  def contents(self, config) -> Dict[str, Any]:
    raise NotImplementedError

  def describe(self, config, path: str) -> str:
    raise NotImplementedError


_MECHANISMS: Dict[str, Mechanism] = {}


def _register(mechanism: Mechanism):
  _MECHANISMS[mechanism.name] = mechanism


def names() -> Tuple[str, ...]:
  return tuple(_MECHANISMS)


def get(name: str) -> Mechanism:
  """The mechanism called `name`, or a ValueError listing the allowed ones."""
  if name not in _MECHANISMS:
    raise ValueError(f'--aggregator={name!r} is unknown; allowed: '
                     f'{", ".join(_MECHANISMS)}.')
  return _MECHANISMS[name]


def _check_noise(config, *, allow_noise: bool):
  z = checks.check_float(config.noise_multiplier, '--noise_multiplier',
                         minimum=0.0)
  if not allow_noise and z != 0:
    raise ValueError(
        f'--noise_multiplier={config.noise_multiplier} has no effect with '
        f'--aggregator={config.aggregator} (no DP noise); set it to 0 or '
        f'choose a DP aggregator ({", ".join(n for n in _MECHANISMS if n != "none")}).')
  return z


def _check_secagg(config, mechanism_name: str, supported: bool):
  if not config.secagg:
    return
  if not supported:
    allowed = [n for n, m in _MECHANISMS.items() if m.supports_secagg]
    raise ValueError(f'SecAgg (--secagg; the accountant\'s --secagg_scale) '
                     f'works with --aggregator {" or ".join(allowed)}, not '
                     f'{mechanism_name}.')
  checks.check_positive(config.secagg_scale, '--secagg_scale')
  checks.check_positive(config.clip_norm, '--clip_norm')


def secagg_factory(config, record_specs):
  """SecAgg's discretized modular sum for the model, and its parameters."""
  from dpftrl_tff.aggregators import secagg  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  factory = secagg.SecAggDiscretizationFactory(
      clip_norm=config.clip_norm, scale=config.secagg_scale,
      report_goal=config.clients_per_round, debug=config.secagg_debug,
      seed=config.noise_seed)
  params = factory.params_for(
      sum(int(np.prod(s.shape)) for s in tf.nest.flatten(record_specs)))
  logging.info('SecAgg: d=%d padded to %d, C_inf=%d, modulus %d (%d bits), '
               'C_inflated=%.6g.', params.dim, params.padded_dim,
               params.linf_bound, params.modulus, params.bits_per_parameter,
               params.inflated_clip_norm)
  return factory, params


def _secagg_inner_and_noise(config, record_specs):
  """(record aggregation, noise multiplier) of a fixed-clip DP mechanism.

  With SecAgg the record aggregation is its discretized sum and the noise
  multiplier is raised so that the noise calibrated to C_inflated keeps the
  accounted z; without, None (plain sum) and z.
  """
  if not config.secagg:
    return None, config.noise_multiplier
  from dpftrl_tff.aggregators import secagg  # pylint: disable=g-import-not-at-top
  inner, params = secagg_factory(config, record_specs)
  return inner, secagg.noise_multiplier_for_secagg(config.noise_multiplier,
                                                   params)


def _check_fixed_clip_dp(config):
  checks.check_dp_arguments(noise_multiplier=config.noise_multiplier,
                            clip_norm=config.clip_norm,
                            clients_per_round=config.clients_per_round)


def _check_no_adaptive_flags(config):
  """Algorithm 1's flags do nothing outside adaptive clipping: refuse any
  changed from its default (`TrainConfig.adaptive_arguments`)."""
  defaults = {f.name: f.default for f in dataclasses.fields(config)}
  given = [f'--{name}={value}'
           for name, value in config.adaptive_arguments().items()
           if value != defaults[name]]
  if given:
    raise ValueError(f'{", ".join(given)} '
                     f'{"applies" if len(given) == 1 else "apply"} only with '
                     f'--aggregator=dp_ftrl_adaptive, not {config.aggregator}.')


def _check_not_adaptive(config):
  """The flags of the other mechanisms, refused by a fixed-clip one."""
  _check_no_blt_flags(config)
  _check_no_adaptive_flags(config)


# ---- none: plain FedAvg mean.


def _none_validate(config):
  _check_noise(config, allow_noise=False)
  _check_secagg(config, 'none', True)
  _check_not_adaptive(config)


def _none_factory(config, record_specs):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  if config.secagg:
    inner, _ = secagg_factory(config, record_specs)
    return tff.aggregators.UnweightedMeanFactory(value_sum_factory=inner)
  return tff.aggregators.UnweightedMeanFactory()


_register(Mechanism(
    name='none', description='plain FedAvg mean (no DP)',
    validate=_none_validate, build_factory=_none_factory,
    privacy=lambda config, rounds, max_participation, min_separation: None,
    initial_clip=lambda config: None, supports_secagg=True))


# ---- dp_ftrl: fixed clip, tree aggregation.


def _dp_ftrl_validate(config):
  _check_fixed_clip_dp(config)
  _check_secagg(config, 'dp_ftrl', True)
  _check_not_adaptive(config)


def _dp_ftrl_factory(config, record_specs):
  from dpftrl_tff.aggregators import dp_ftrl  # pylint: disable=g-import-not-at-top
  inner, noise_multiplier = _secagg_inner_and_noise(config, record_specs)
  return dp_ftrl.build_dp_ftrl_factory(
      noise_multiplier=noise_multiplier,
      clients_per_round=config.clients_per_round, clip_norm=config.clip_norm,
      record_specs=record_specs, noise_seed=config.noise_seed,
      record_aggregation_factory=inner)


def _dp_ftrl_privacy(config, rounds, max_participation, min_separation):
  if config.noise_multiplier <= 0:
    return None
  return accounting.compute_privacy(
      rounds=rounds, noise_multiplier=config.noise_multiplier,
      max_participation=max_participation, min_separation=min_separation)


_register(Mechanism(
    name='dp_ftrl', description='fixed clip C, tree-aggregation noise',
    validate=_dp_ftrl_validate, build_factory=_dp_ftrl_factory,
    privacy=_dp_ftrl_privacy, initial_clip=lambda config: config.clip_norm,
    supports_secagg=True))


# ---- dp_ftrl_adaptive: Algorithm 1.


def check_adaptive_arguments(*, noise_multiplier, clients_per_round,
                             initial_clip_norm, target_unclipped_quantile,
                             clip_learning_rate, clipped_count_stddev,
                             restart_warmup, restart_frequency):
  """Checks Algorithm 1's arguments; errors name the flags. Returns sigma_b.

  Pure Python (the accountant validates without TensorFlow).
  """
  z = checks.check_float(noise_multiplier, '--noise_multiplier', minimum=0.0)
  m = checks.check_int(clients_per_round, '--clients_per_round', minimum=1)
  checks.check_positive(initial_clip_norm, '--initial_clip_norm')
  checks.check_probability(target_unclipped_quantile,
                           '--target_unclipped_quantile')
  checks.check_float(clip_learning_rate, '--clip_learning_rate', minimum=0.0)
  if clipped_count_stddev is None:
    clipped_count_stddev = accounting.default_clipped_count_stddev(m)
  sigma_b = checks.check_float(clipped_count_stddev, '--clipped_count_stddev',
                               minimum=0.0)
  frequency = checks.check_int(restart_frequency, '--restart_frequency',
                               minimum=2)
  checks.check_int(restart_warmup, '--restart_warmup', minimum=1,
                   maximum=frequency - 1)
  if z > 0:
    try:
      accounting.value_noise_multiplier(z, sigma_b)
    except ValueError as e:
      raise ValueError(f'--clipped_count_stddev: {e}') from None
  return sigma_b


def _adaptive_validate(config):
  check_adaptive_arguments(
      noise_multiplier=config.noise_multiplier,
      clients_per_round=config.clients_per_round,
      **config.adaptive_arguments())
  _check_secagg(config, 'dp_ftrl_adaptive', False)
  _check_no_blt_flags(config)


def _adaptive_factory(config, record_specs):
  from dpftrl_tff.aggregators import adaptive  # pylint: disable=g-import-not-at-top
  return adaptive.build_dp_ftrl_adaptive_factory(
      noise_multiplier=config.noise_multiplier,
      clients_per_round=config.clients_per_round, record_specs=record_specs,
      noise_seed=config.noise_seed, **config.adaptive_arguments())


def _adaptive_privacy(config, rounds, max_participation, min_separation):
  if config.noise_multiplier <= 0:
    return None
  sigma_b = config.clipped_count_stddev
  if sigma_b is None:
    sigma_b = accounting.default_clipped_count_stddev(
        config.clients_per_round)
  return accounting.compute_privacy(
      rounds=rounds, noise_multiplier=config.noise_multiplier,
      max_participation=max_participation, min_separation=min_separation,
      restart_rounds=accounting.paper_restart_rounds(
          rounds, warmup=config.restart_warmup,
          frequency=config.restart_frequency),
      clipped_count_stddev=sigma_b)


_register(Mechanism(
    name='dp_ftrl_adaptive',
    description='Algorithm 1: adaptive clip through tree restarts',
    validate=_adaptive_validate, build_factory=_adaptive_factory,
    privacy=_adaptive_privacy,
    initial_clip=lambda config: config.initial_clip_norm,
    supports_secagg=False))


# ---- dp_ftrl_blt: fixed clip, BLT noise (arXiv 2408.08868).

_BLT_FLAGS = ('blt_params', 'blt_num_buffers', 'blt_min_separation',
              'blt_max_participation')


def _check_no_blt_flags(config):
  """The BLT flags do nothing with another aggregator: refuse them."""
  given = [f'--{name}={getattr(config, name)}' for name in _BLT_FLAGS
           if getattr(config, name) is not None]
  if config.blt_error != 'max':
    given.append(f'--blt_error={config.blt_error}')
  if given:
    raise ValueError(f'{", ".join(given)} only apply with '
                     f'--aggregator=dp_ftrl_blt, not {config.aggregator}.')


def optimized_blt(config):
  """The BLT of a dp_ftrl_blt run (an `accounting.blt_optimizer.OptimizedBLT`
  when optimized, None when given), and the BLT itself.

  Given: a resumed run's BLT (`config.resolved_blt`, from its blt.json) or
  --blt_params. Otherwise optimized for T = --total_rounds, MinS =
  --blt_min_separation (training plans it from the participation model when
  unset, `BLTRunParameters.plan`; 0 here otherwise) and MaxP =
  --blt_max_participation.
  """
  if config.resolved_blt is not None:
    return None, config.resolved_blt
  if config.blt_params is not None:
    return None, accounting.BLT.load(config.blt_params)
  optimized = _optimize_blt(config.total_rounds,
                            config.blt_min_separation or 0,
                            config.blt_max_participation,
                            config.blt_num_buffers, config.blt_error)
  return optimized, optimized.blt


@functools.lru_cache(maxsize=16)
def _optimize_blt(rounds, min_separation, max_participation, num_buffers,
                  error):
  """blt_optimizer.optimize, memoized (a pure function of its arguments;
  accounting asks for the same BLT several times a run)."""
  from dpftrl_tff.accounting import blt_optimizer  # pylint: disable=g-import-not-at-top
  optimized = blt_optimizer.optimize(
      rounds=rounds, min_separation=min_separation,
      max_participation=max_participation, num_buffers=num_buffers,
      error=error)
  logging.info('BLT optimized for T=%d, MinS=%d, MaxP=%s: %s', rounds,
               min_separation, max_participation, optimized.blt)
  return optimized


class BLTRunParameters(RunParameters):
  """A dp_ftrl_blt run's BLT: planned for the run's participation, written
  to blt.json, and read back from it when the run is resumed."""
  file_name = 'blt.json'

  def plan(self, config, num_clients: int):
    """Fills in the participation the BLT is optimized for.

    Unset --blt_min_separation becomes the participation model's guaranteed
    MinS (min_sep_groups; its MaxP too when --blt_max_participation is
    unset), otherwise the best separation N clients allow at report goal m,
    floor(N / m) - 1, at most T - 1. Deterministic, so a resumed run plans
    the same BLT.
    """
    if config.blt_params is not None or config.blt_min_separation is not None:
      return config
    # The plan does not depend on the seed, which may still be unset here
    # (it is drawn once the run directory is known).
    planned = dataclasses.replace(
        config, seed=0 if config.seed is None else config.seed
    ).build_sampler(num_clients).planned(config.total_rounds)
    max_participation = config.blt_max_participation
    if planned is not None:
      min_sep = planned['min_separation']
      if max_participation is None:
        max_participation = planned['max_participation']
    else:
      min_sep = accounting.max_min_separation(num_clients,
                                              config.clients_per_round)
    return dataclasses.replace(
        config, blt_min_separation=int(min(min_sep, config.total_rounds - 1)),
        blt_max_participation=max_participation)

  def restore(self, config, saved, path):
    """The run's config with the BLT it started with (`path`, its blt.json).

    An optimized BLT is taken from the file rather than optimized again (the
    same up to floating point); a given --blt_params must equal it.
    """
    saved_blt = accounting.BLT.from_dict(
        {k: saved[k] for k in ('buf_decay', 'output_scale')}, source=path)
    if config.blt_params is None:
      return dataclasses.replace(config, resolved_blt=saved_blt)
    blt = accounting.BLT.load(config.blt_params)
    if blt != saved_blt:
      raise ValueError(
          f'{path} holds the BLT {saved_blt} this run started with, but '
          f'--blt_params={config.blt_params} is {blt}; resume with the same '
          f'BLT.')
    return config

  def contents(self, config):
    """The BLT and what it was optimized for (or the file it came from)."""
    optimized, blt = optimized_blt(config)
    if optimized is not None:
      return optimized.as_dict()
    return dict(blt.as_dict(), source=os.path.abspath(config.blt_params))

  def describe(self, config, path):
    return f'BLT noise: {optimized_blt(config)[1]} (in {path}).'


def _blt_validate(config):
  from dpftrl_tff.accounting import blt_optimizer  # pylint: disable=g-import-not-at-top
  _check_fixed_clip_dp(config)
  if config.blt_error not in blt_optimizer.ERRORS:
    raise ValueError(f'--blt_error={config.blt_error!r} is unknown; allowed: '
                     f'{", ".join(blt_optimizer.ERRORS)}.')
  if config.blt_params is not None:
    chosen = [f'--{name}' for name in _BLT_FLAGS[1:]
              if getattr(config, name) is not None]
    if chosen:
      raise ValueError(f'{", ".join(chosen)} choose how the BLT is '
                       f'optimized; they have no effect with --blt_params='
                       f'{config.blt_params} (a given BLT).')
    try:
      blt = accounting.BLT.load(config.blt_params)
      accounting.blt_sensitivity_squared(
          blt, rounds=checks.check_int(config.total_rounds, '--total_rounds',
                                       minimum=1), min_separation=0)
      blt.inverse()   # The noise streams from C^-1's buffers.
    except ValueError as e:
      raise ValueError(f'--blt_params={config.blt_params}: {e}') from None
  if config.blt_num_buffers is not None:
    checks.check_int(config.blt_num_buffers, '--blt_num_buffers', minimum=1,
                     maximum=blt_optimizer.MAX_BUFFERS)
  rounds = checks.check_int(config.total_rounds, '--total_rounds', minimum=1)
  min_sep = config.blt_min_separation or 0
  if config.blt_min_separation is not None:
    checks.check_int(min_sep, '--blt_min_separation', minimum=0,
                     maximum=rounds - 1)
  if config.blt_max_participation is not None:
    max_p = checks.check_int(config.blt_max_participation,
                             '--blt_max_participation', minimum=1)
    fit = accounting.max_possible_participation(rounds, min_sep)
    if max_p > fit:
      raise ValueError(
          f'--blt_max_participation={max_p} cannot happen: at most {fit} '
          f'participations fit in --total_rounds={rounds} rounds with '
          f'{min_sep} rounds between two (--blt_min_separation); use at most '
          f'{fit}.')
  _check_secagg(config, 'dp_ftrl_blt', True)
  _check_no_adaptive_flags(config)


def _blt_factory(config, record_specs):
  from dpftrl_tff.aggregators import blt  # pylint: disable=g-import-not-at-top
  inner, noise_multiplier = _secagg_inner_and_noise(config, record_specs)
  return blt.build_dp_ftrl_blt_factory(
      noise_multiplier=noise_multiplier,
      clients_per_round=config.clients_per_round, clip_norm=config.clip_norm,
      record_specs=record_specs, blt=optimized_blt(config)[1],
      noise_seed=config.noise_seed, record_aggregation_factory=inner)


def _blt_privacy(config, rounds, max_participation, min_separation):
  if config.noise_multiplier <= 0:
    return None
  return accounting.compute_privacy(
      rounds=rounds, noise_multiplier=config.noise_multiplier,
      max_participation=max_participation, min_separation=min_separation,
      blt=optimized_blt(config)[1])


_register(Mechanism(
    name='dp_ftrl_blt',
    description='fixed clip C, BLT noise (BLT-DP-FTRL, arXiv 2408.08868)',
    validate=_blt_validate, build_factory=_blt_factory,
    privacy=_blt_privacy, initial_clip=lambda config: config.clip_norm,
    supports_secagg=True, run_parameters=BLTRunParameters()))
