"""dp_ftrl_blt: fixed clip C, BLT noise (BLT-DP-FTRL, arXiv 2408.08868)."""

import dataclasses
import functools
import os
from typing import Optional

from absl import logging

from dpftrl_tff import accounting
from dpftrl_tff import checks
from dpftrl_tff import settings
from dpftrl_tff.aggregators.mechanisms import base


@dataclasses.dataclass(frozen=True)
class BLTSettings:
  """How a dp_ftrl_blt run gets its BLT (buffered linear Toeplitz noise,
  arXiv 2408.08868): given (`blt_params`), or optimized for T = the run's
  rounds, MinS `blt_min_separation` and MaxP `blt_max_participation` with
  `blt_num_buffers` buffers, minimizing the `blt_error` error of the noisy
  prefix sums. Carried by `TrainConfig` and the accountant's flags."""
  blt_params: Optional[str] = settings.setting(
      None, 'dp_ftrl_blt: JSON file with the BLT (lists buf_decay and '
      'output_scale, e.g. a run\'s blt.json). Unset: optimized for '
      '--total_rounds and the planned participation.')
  blt_num_buffers: Optional[int] = settings.setting(
      None, 'dp_ftrl_blt: buffers of the optimized BLT, 1 to 7. Unset: '
      'added while the loss improves by 1%.')
  blt_error: str = settings.setting(
      'max', 'dp_ftrl_blt: optimize the max or the mean squared error of '
      'the noisy prefix sums.', flag_type='enum')
  blt_min_separation: Optional[int] = settings.setting(
      None, 'dp_ftrl_blt: MinS the BLT is optimized for. Unset: the '
      'participation model\'s guarantee (min_sep_groups) or floor(N / m) - 1 '
      'for N training clients.')
  blt_max_participation: Optional[int] = settings.setting(
      None, 'dp_ftrl_blt: MaxP the BLT is optimized for. Unset: as many as '
      'fit in --total_rounds.')

  def validate(self, total_rounds: int):
    """Checks the settings for a run of `total_rounds`; errors name the
    flags. Optimizing flags beside a given BLT are refused (they would do
    nothing); a given BLT must load and invert."""
    from dpftrl_tff.accounting import blt_optimizer  # pylint: disable=g-import-not-at-top
    if self.blt_error not in blt_optimizer.ERRORS:
      raise ValueError(f'--blt_error={self.blt_error!r} is unknown; allowed: '
                       f'{", ".join(blt_optimizer.ERRORS)}.')
    rounds = checks.check_int(total_rounds, '--total_rounds', minimum=1)
    if self.blt_params is not None:
      base.refuse_beside_given(self, 'blt_params', 'the BLT', 'BLT')
      try:
        blt = accounting.BLT.load(self.blt_params)
        accounting.blt_sensitivity_squared(blt, rounds=rounds,
                                           min_separation=0)
        blt.inverse()   # The noise streams from C^-1's buffers.
      except ValueError as e:
        raise ValueError(f'--blt_params={self.blt_params}: {e}') from None
    if self.blt_num_buffers is not None:
      checks.check_int(self.blt_num_buffers, '--blt_num_buffers', minimum=1,
                       maximum=blt_optimizer.MAX_BUFFERS)
    min_sep = self.blt_min_separation or 0
    if self.blt_min_separation is not None:
      checks.check_int(min_sep, '--blt_min_separation', minimum=0,
                       maximum=rounds - 1)
    if self.blt_max_participation is not None:
      max_p = checks.check_int(self.blt_max_participation,
                               '--blt_max_participation', minimum=1)
      fit = accounting.max_possible_participation(rounds, min_sep)
      if max_p > fit:
        raise ValueError(
            f'--blt_max_participation={max_p} cannot happen: at most {fit} '
            f'participations fit in --total_rounds={rounds} rounds with '
            f'{min_sep} rounds between two (--blt_min_separation); use at '
            f'most {fit}.')


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
  blt = config.blt_settings()
  if blt.blt_params is not None:
    return None, accounting.BLT.load(blt.blt_params)
  optimized = _optimize_blt(config.total_rounds, blt.blt_min_separation or 0,
                            blt.blt_max_participation, blt.blt_num_buffers,
                            blt.blt_error)
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


class BLTRunParameters(base.RunParameters):
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
    blt = config.blt_settings()
    if blt.blt_params is not None or blt.blt_min_separation is not None:
      return config
    # The plan does not depend on the seed, which may still be unset here
    # (it is drawn once the run directory is known).
    planned = dataclasses.replace(
        config, seed=0 if config.seed is None else config.seed
    ).build_sampler(num_clients).planned(config.total_rounds)
    max_participation = blt.blt_max_participation
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
    given = config.blt_settings().blt_params
    if given is None:
      return dataclasses.replace(config, resolved_blt=saved_blt)
    blt = accounting.BLT.load(given)
    if blt != saved_blt:
      raise ValueError(
          f'{path} holds the BLT {saved_blt} this run started with, but '
          f'--blt_params={given} is {blt}; resume with the same BLT.')
    return config

  def contents(self, config):
    """The BLT and what it was optimized for (or the file it came from)."""
    optimized, blt = optimized_blt(config)
    if optimized is not None:
      return optimized.as_dict()
    return dict(blt.as_dict(),
                source=os.path.abspath(config.blt_settings().blt_params))

  def describe(self, config, path):
    return f'BLT noise: {optimized_blt(config)[1]} (in {path}).'


def _validate(config):
  base.check_fixed_clip_dp(config)
  config.blt_settings().validate(config.total_rounds)
  base.check_secagg(config, 'dp_ftrl_blt', True)
  base.check_no_other_settings(config, 'dp_ftrl_blt')


def _factory(config, record_specs):
  from dpftrl_tff.aggregators import blt  # pylint: disable=g-import-not-at-top
  return base.fixed_clip_factory(blt.build_dp_ftrl_blt_factory, config,
                                 record_specs, blt=optimized_blt(config)[1])


class BLTNoise(base.NoiseDescription):
  """BLT noise (Dvijotham et al. 2024): the noise of dp_ftrl_blt."""
  name = 'blt'
  accountant_title = ', BLT noise'
  sensitivity_label = 'sensitivity^2 (BLT)'

  def report(self, privacy):
    blt = privacy.get('blt') or {}
    return ('BLT-DP-FTRL (buffered linear Toeplitz noise, Dvijotham et '
            'al. 2024; arXiv 2405.13763): correlated Gaussian noise of std '
            f'z C per coordinate, z = {privacy["noise_multiplier"]:g}; buffer '
            f'decays {base.floats_text(blt.get("buf_decay"))}, output scales '
            f'{base.floats_text(blt.get("output_scale"))}.')

  def console(self, privacy):
    del privacy
    return 'BLT noise'

  def accountant_lines(self, privacy):
    blt = privacy['blt']
    return [f'  BLT buffer decays       : '
            f'{[float(f"{x:.10g}") for x in blt["buf_decay"]]}',
            f'  BLT output scales       : '
            f'{[float(f"{x:.10g}") for x in blt["output_scale"]]}']

  def accounting_plan(self, config, *, rounds, min_separation,
                      max_participation):
    """A BLT not given is optimized for the launch's MinS and MaxP."""
    if config.blt_settings().blt_params is not None:
      return {}
    return dict(blt_min_separation=min(min_separation, rounds - 1),
                blt_max_participation=max_participation)

  def strategy(self, config, rounds):
    del rounds   # The BLT is Toeplitz: the same for any horizon.
    optimized, blt = optimized_blt(config)
    return {'blt': blt}, ({} if optimized is None
                          else {'blt': optimized.as_dict()})


def _privacy(config, rounds, max_participation, min_separation):
  if config.noise_multiplier <= 0:
    return None
  return accounting.compute_privacy(
      rounds=rounds, noise_multiplier=config.noise_multiplier,
      max_participation=max_participation, min_separation=min_separation,
      blt=optimized_blt(config)[1])


MECHANISM = base.Mechanism(
    name='dp_ftrl_blt',
    description='fixed clip C, BLT noise (BLT-DP-FTRL, arXiv 2408.08868)',
    validate=_validate, build_factory=_factory, privacy=_privacy,
    initial_clip=lambda config: config.clip_norm, supports_secagg=True,
    describe_clipping=base.fixed_clip_text, noise=BLTNoise(),
    run_parameters=BLTRunParameters())
