"""dp_ftrl_adaptive: Algorithm 1, the clip estimated through tree restarts."""

from dpftrl_tff import accounting
from dpftrl_tff import checks
from dpftrl_tff.aggregators.mechanisms import base


def check_adaptive_arguments(*, noise_multiplier, clients_per_round,
                             initial_clip_norm, target_unclipped_quantile,
                             clip_learning_rate, clipped_count_stddev,
                             restart_warmup, restart_frequency):
  """Checks Algorithm 1's arguments; errors name the flags. Returns sigma_b.

  Pure Python (the accountant validates without TensorFlow).
  """
  z = checks.check_noise_multiplier(noise_multiplier)
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


def _validate(config):
  check_adaptive_arguments(
      noise_multiplier=config.noise_multiplier,
      clients_per_round=config.clients_per_round,
      **config.adaptive_arguments())
  base.check_secagg(config, 'dp_ftrl_adaptive', False)
  base.check_no_blt_flags(config)


def _factory(config, record_specs):
  from dpftrl_tff.aggregators import adaptive  # pylint: disable=g-import-not-at-top
  return adaptive.build_dp_ftrl_adaptive_factory(
      noise_multiplier=config.noise_multiplier,
      clients_per_round=config.clients_per_round, record_specs=record_specs,
      noise_seed=config.noise_seed, **config.adaptive_arguments())


def _privacy(config, rounds, max_participation, min_separation):
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


def _clipping(config) -> str:
  return (f'adaptive l2 clip norm (the paper\'s Algorithm 1) from C_0 = '
          f'{config.initial_clip_norm:g}, target unclipped quantile '
          f'{config.target_unclipped_quantile:g}; the clip in force '
          'changes only when a tree restarts, so each tree sees one C.')


MECHANISM = base.Mechanism(
    name='dp_ftrl_adaptive',
    description='Algorithm 1: adaptive clip through tree restarts',
    validate=_validate, build_factory=_factory, privacy=_privacy,
    initial_clip=lambda config: config.initial_clip_norm,
    supports_secagg=False, describe_clipping=_clipping,
    accounted_noise='tree', estimates_clip=True)
