"""dp_ftrl_adaptive: Algorithm 1, the clip estimated through tree restarts."""

import dataclasses
from typing import Optional

from dpftrl_tff import accounting
from dpftrl_tff import checks
from dpftrl_tff import settings
from dpftrl_tff.aggregators.mechanisms import base
from dpftrl_tff.aggregators.mechanisms import dp_ftrl


@dataclasses.dataclass(frozen=True)
class AdaptiveSettings:
  """Algorithm 1's settings (the paper's adaptive clipping through tree
  restarts), carried by `TrainConfig` and the accountant's flags.

  The clip starts at C^0 = `initial_clip_norm`; every round the clients
  report whether their update norm was at most the clip, the count is
  noised with std `clipped_count_stddev` (sigma_b) and the estimate moves
  as C <- C exp(-eta_gamma (b_noisy / m - gamma)). The estimate comes into
  force only when a tree restarts: at round `restart_warmup`, then every
  `restart_frequency` rounds.
  """
  initial_clip_norm: float = settings.setting(
      0.1, 'dp_ftrl_adaptive: initial clip C^0.')
  target_unclipped_quantile: float = settings.setting(
      0.5, 'dp_ftrl_adaptive: target quantile gamma of unclipped updates.')
  clip_learning_rate: float = settings.setting(
      0.2, 'dp_ftrl_adaptive: clip learning rate eta_gamma.')
  clipped_count_stddev: Optional[float] = settings.setting(
      None, 'dp_ftrl_adaptive: noise std sigma_b of the clipped counts; '
      'unset: clients_per_round / 20.')
  restart_warmup: int = settings.setting(
      128, 'dp_ftrl_adaptive: first tree restart (new clip in force) at '
      'this round.')
  restart_frequency: int = settings.setting(
      1024, 'dp_ftrl_adaptive: then a restart every this many rounds.')

  def count_stddev(self, clients_per_round: int) -> float:
    """sigma_b: as set, or the paper's default report goal / 20."""
    if self.clipped_count_stddev is None:
      return accounting.default_clipped_count_stddev(clients_per_round)
    return self.clipped_count_stddev

  def scaled_count_stddev(self, scale: float) -> Optional[float]:
    """sigma_b at a report goal `scale` times the run's, for the same noise
    per client (unset stays unset: the default scales with m itself)."""
    if self.clipped_count_stddev is None:
      return None
    return self.clipped_count_stddev * scale

  def validate(self, noise_multiplier, clients_per_round) -> float:
    """Checks the settings with the run's z and m; errors name the flags.
    Returns sigma_b. Pure Python (the accountant validates without
    TensorFlow)."""
    z = checks.check_noise_multiplier(noise_multiplier)
    m = checks.check_int(clients_per_round, '--clients_per_round', minimum=1)
    checks.check_positive(self.initial_clip_norm, '--initial_clip_norm')
    checks.check_probability(self.target_unclipped_quantile,
                             '--target_unclipped_quantile')
    checks.check_float(self.clip_learning_rate, '--clip_learning_rate',
                       minimum=0.0)
    sigma_b = checks.check_float(self.count_stddev(m),
                                 '--clipped_count_stddev', minimum=0.0)
    frequency = checks.check_int(self.restart_frequency,
                                 '--restart_frequency', minimum=2)
    checks.check_int(self.restart_warmup, '--restart_warmup', minimum=1,
                     maximum=frequency - 1)
    if z > 0:
      try:
        accounting.value_noise_multiplier(z, sigma_b)
      except ValueError as e:
        raise ValueError(f'--clipped_count_stddev: {e}') from None
    return sigma_b


def _validate(config):
  config.adaptive_settings().validate(config.noise_multiplier,
                                      config.clients_per_round)
  base.check_secagg(config, 'dp_ftrl_adaptive', False)
  base.check_no_other_settings(config, 'dp_ftrl_adaptive')


def _factory(config, record_specs):
  from dpftrl_tff.aggregators import adaptive  # pylint: disable=g-import-not-at-top
  return adaptive.build_dp_ftrl_adaptive_factory(
      noise_multiplier=config.noise_multiplier,
      clients_per_round=config.clients_per_round, record_specs=record_specs,
      noise_seed=config.noise_seed,
      **dataclasses.asdict(config.adaptive_settings()))


def _privacy(config, rounds, max_participation, min_separation):
  if config.noise_multiplier <= 0:
    return None
  adaptive = config.adaptive_settings()
  return accounting.compute_privacy(
      rounds=rounds, noise_multiplier=config.noise_multiplier,
      max_participation=max_participation, min_separation=min_separation,
      restart_rounds=accounting.paper_restart_rounds(
          rounds, warmup=adaptive.restart_warmup,
          frequency=adaptive.restart_frequency),
      clipped_count_stddev=adaptive.count_stddev(config.clients_per_round))


def _clipping(config) -> str:
  adaptive = config.adaptive_settings()
  return (f'adaptive l2 clip norm (the paper\'s Algorithm 1) from C_0 = '
          f'{adaptive.initial_clip_norm:g}, target unclipped quantile '
          f'{adaptive.target_unclipped_quantile:g}; the clip in force '
          'changes only when a tree restarts, so each tree sees one C.')


MECHANISM = base.Mechanism(
    name='dp_ftrl_adaptive',
    description='Algorithm 1: adaptive clip through tree restarts',
    validate=_validate, build_factory=_factory, privacy=_privacy,
    initial_clip=lambda config: config.adaptive_settings().initial_clip_norm,
    supports_secagg=False, describe_clipping=_clipping,
    noise=dp_ftrl.TREE_NOISE, estimates_clip=True)
