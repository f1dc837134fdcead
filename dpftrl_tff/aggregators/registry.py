"""The model-update mechanisms a run can use, by name.

Each `Mechanism` bundles what the rest of the project needs to know about one
aggregation: how to validate its settings, how to build its TFF aggregation
factory, how to account its privacy, and the clip norm in force at round 1.
Training, the binaries and the accountant look mechanisms up here; nothing
else branches on the aggregator's name. A new mechanism is one module plus
one `_register` call.

SecAgg (Algorithm 2) is not a mechanism of its own: it replaces the plain sum
inside `none` and `dp_ftrl` (`secagg_factory`), and the mechanism then
calibrates its noise to SecAgg's inflated sensitivity.
"""

import dataclasses
from typing import Any, Callable, Dict, Optional, Tuple

from absl import logging
import numpy as np

from dpftrl_tff import accounting
from dpftrl_tff import checks


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
  """
  name: str
  description: str
  validate: Callable[[Any], None]
  build_factory: Callable[..., Any]
  privacy: Callable[..., Optional[accounting.PrivacyReport]]
  initial_clip: Callable[[Any], Optional[float]]
  supports_secagg: bool


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
    raise ValueError(f'--secagg works with --aggregator '
                     f'{" or ".join(allowed)}, not {mechanism_name}.')
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


# ---- none: plain FedAvg mean.


def _none_validate(config):
  _check_noise(config, allow_noise=False)
  _check_secagg(config, 'none', True)


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
  from dpftrl_tff.aggregators import dp_ftrl  # pylint: disable=g-import-not-at-top
  _check_noise(config, allow_noise=True)
  dp_ftrl.validate_dp_arguments(noise_multiplier=config.noise_multiplier,
                                clip_norm=config.clip_norm,
                                clients_per_round=config.clients_per_round)
  _check_secagg(config, 'dp_ftrl', True)


def _dp_ftrl_factory(config, record_specs):
  from dpftrl_tff.aggregators import dp_ftrl  # pylint: disable=g-import-not-at-top
  from dpftrl_tff.aggregators import secagg  # pylint: disable=g-import-not-at-top
  inner, noise_multiplier = None, config.noise_multiplier
  if config.secagg:
    inner, params = secagg_factory(config, record_specs)
    noise_multiplier = secagg.noise_multiplier_for_secagg(
        config.noise_multiplier, params)
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


def _adaptive_validate(config):
  from dpftrl_tff.aggregators import adaptive  # pylint: disable=g-import-not-at-top
  from dpftrl_tff.aggregators import dp_ftrl  # pylint: disable=g-import-not-at-top
  _check_noise(config, allow_noise=True)
  dp_ftrl.validate_dp_arguments(noise_multiplier=config.noise_multiplier,
                                clip_norm=config.initial_clip_norm,
                                clients_per_round=config.clients_per_round)
  adaptive.validate_adaptive_arguments(
      noise_multiplier=config.noise_multiplier,
      clients_per_round=config.clients_per_round,
      **config.adaptive_arguments())
  _check_secagg(config, 'dp_ftrl_adaptive', False)


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
