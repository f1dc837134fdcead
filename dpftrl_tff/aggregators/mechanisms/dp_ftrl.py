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


class TreeNoise(base.NoiseDescription):
  """Tree-aggregation noise (Kairouz et al. 2021), restarted or not: the
  noise of dp_ftrl and dp_ftrl_adaptive."""
  name = 'tree'
  accountant_title = ', tree aggregation'
  sensitivity_label = 'sum of squared counts'
  tree_restarts = True

  def report(self, privacy):
    restarts = privacy.get('restart_rounds') or []
    return ('DP-FTRL with tree aggregation (Kairouz et al. 2021): Gaussian '
            f'noise of std z C per tree node, z = '
            f'{privacy["noise_multiplier"]:g}; '
            + (f'tree restarts at rounds {base.ints_text(restarts)}.'
               if restarts else 'one tree, no restarts.'))

  def console(self, privacy):
    return f'{len(privacy["restart_rounds"])} tree restarts'


TREE_NOISE = TreeNoise()


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
    describe_clipping=base.fixed_clip_text, noise=TREE_NOISE)
