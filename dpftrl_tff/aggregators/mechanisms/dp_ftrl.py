"""dp_ftrl: fixed clip C, tree-aggregation noise (the paper's DP-FTRL)."""

from dpftrl_tff import accounting
from dpftrl_tff.aggregators.mechanisms import base


def _validate(config):
  base.check_fixed_clip_dp(config)
  base.check_secagg(config, 'dp_ftrl', True)
  base.check_no_other_settings(config, None)


def _factory(config, record_specs):
  from dpftrl_tff.aggregators import dp_ftrl  # pylint: disable=g-import-not-at-top
  return base.fixed_clip_factory(dp_ftrl.build_dp_ftrl_factory, config,
                                 record_specs)


def _privacy(config, rounds, max_participation, min_separation):
  if config.noise_multiplier <= 0:
    return None
  return accounting.compute_privacy(
      rounds=rounds, noise_multiplier=config.noise_multiplier,
      max_participation=max_participation, min_separation=min_separation)


MECHANISM = base.Mechanism(
    name='dp_ftrl', description='fixed clip C, tree-aggregation noise',
    validate=_validate, build_factory=_factory, privacy=_privacy,
    initial_clip=lambda config: config.clip_norm, supports_secagg=True,
    describe_clipping=base.fixed_clip_text, accounted_noise='tree')
