"""none: the plain FedAvg mean, without DP (SecAgg's sum optional)."""

from dpftrl_tff import checks
from dpftrl_tff.aggregators.mechanisms import base


def _validate(config):
  z = checks.check_noise_multiplier(config.noise_multiplier)
  if z != 0:
    from dpftrl_tff.aggregators import registry  # pylint: disable=g-import-not-at-top
    dp = [n for n in registry.names() if registry.get(n).accounted_noise]
    raise ValueError(
        f'--noise_multiplier={config.noise_multiplier} has no effect with '
        f'--aggregator={config.aggregator} (no DP noise); set it to 0 or '
        f'choose a DP aggregator ({", ".join(dp)}).')
  base.check_secagg(config, 'none', True)
  base.check_no_other_settings(config, None)


def _factory(config, record_specs):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  if config.secagg_settings().secagg:
    inner, _ = base.secagg_factory(config, record_specs)
    return tff.aggregators.UnweightedMeanFactory(value_sum_factory=inner)
  return tff.aggregators.UnweightedMeanFactory()


def _clipping(config) -> str:
  del config
  return 'no clipping (no DP).'


MECHANISM = base.Mechanism(
    name='none', description='plain FedAvg mean (no DP)',
    validate=_validate, build_factory=_factory,
    privacy=lambda config, rounds, max_participation, min_separation: None,
    initial_clip=lambda config: None, supports_secagg=True,
    describe_clipping=_clipping)
