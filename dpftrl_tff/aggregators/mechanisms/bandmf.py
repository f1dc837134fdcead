"""dp_ftrl_bandmf: fixed clip C, banded-matrix-factorization noise (BandMF,
Choquette-Choo et al., arXiv 2306.08153), the mechanism Gboard trained
launches with after the paper."""

import dataclasses
import functools
import os
from typing import Optional

from absl import logging
import numpy as np

from dpftrl_tff import accounting
from dpftrl_tff import checks
from dpftrl_tff import settings
from dpftrl_tff.accounting import bandmf as bandmf_accounting
from dpftrl_tff.aggregators.mechanisms import base

# Bands of an optimized C when --bandmf_bands is unset: the most the
# participation allows (MinS + 1), at most this many (the noise state holds
# b - 1 model-size buffers: 63 at the paper's 2.4M parameters are 0.6 GB,
# and raised a round's peak memory by 4.8 GB, `config.STATE_BUFFER_COPIES`).
DEFAULT_MAX_BANDS = 64


@dataclasses.dataclass(frozen=True)
class BandMFSettings:
  """How a dp_ftrl_bandmf run gets its strategy matrix C: optimized for
  T = --total_rounds with `bandmf_bands` bands (column-normalized,
  minimizing the `bandmf_error` (mean or max) squared error of the noisy
  prefix sums, `accounting.bandmf.optimize`), or read from
  `bandmf_matrix_dir` in
  Gboard's published format. Carried by `TrainConfig` and the accountant's
  flags."""
  bandmf_bands: Optional[int] = settings.setting(
      None, 'dp_ftrl_bandmf: bands b of the optimized C; its noise state '
      'holds b - 1 model-size buffers. Unset: the planned MinS + 1, at most '
      f'{DEFAULT_MAX_BANDS} (the banded sensitivity needs b <= MinS + 1).')
  bandmf_error: str = settings.setting(
      'mean', 'dp_ftrl_bandmf: optimize C for the mean or the max over rounds '
      'of the squared error of the noisy prefix sums.', flag_type='enum')
  bandmf_matrix_dir: Optional[str] = settings.setting(
      None, 'dp_ftrl_bandmf: directory with a C in Gboard\'s published '
      'format (c_matrix_tensor_pb: float64, tf.io.serialize_tensor, '
      'google-research/federated mf_dpftrl_matrices) of at least '
      '--total_rounds rounds; its leading T x T block is used. '
      'lr_vector_tensor_pb, when present, is checked and reported, not '
      'applied. Unset: C is optimized.')

  def validate(self, total_rounds: int):
    """Checks the settings for a run of `total_rounds`; errors name the
    flags. A given matrix must load, be banded and cover the rounds."""
    rounds = checks.check_int(total_rounds, '--total_rounds', minimum=1)
    if self.bandmf_error not in bandmf_accounting.ERRORS:
      raise ValueError(f'--bandmf_error={self.bandmf_error!r} is unknown; '
                       f'allowed: {", ".join(bandmf_accounting.ERRORS)}.')
    if self.bandmf_matrix_dir is not None:
      base.refuse_beside_given(self, 'bandmf_matrix_dir', 'C', 'C')
      published_matrix(self.bandmf_matrix_dir, rounds)
    if self.bandmf_bands is not None:
      checks.check_int(self.bandmf_bands, '--bandmf_bands', minimum=1,
                       maximum=rounds)


def published_matrix(directory: str, rounds: int) -> np.ndarray:
  """The leading T x T block of the C in `directory` (published format);
  errors name --bandmf_matrix_dir."""
  try:
    c, _ = _load_published(os.path.abspath(directory))
  except ValueError as e:
    raise ValueError(f'--bandmf_matrix_dir={directory}: {e}') from None
  if c.shape[0] < rounds:
    raise ValueError(
        f'--bandmf_matrix_dir={directory}: its C is for {c.shape[0]} '
        f'rounds, fewer than --total_rounds={rounds}.')
  return c[:rounds, :rounds]


@functools.lru_cache(maxsize=4)
def _load_published(directory):
  return bandmf_accounting.load_published(directory)


def default_bands(min_separation: int, rounds: int) -> int:
  """Bands of an optimized C for a participation with MinS: MinS + 1 (the
  most the banded sensitivity allows), at most `DEFAULT_MAX_BANDS` and T."""
  return int(max(1, min(min_separation + 1, DEFAULT_MAX_BANDS, rounds)))


@functools.lru_cache(maxsize=8)
def _optimized(rounds: int, bands: int, error: str) -> np.ndarray:
  """accounting.bandmf.optimize, memoized (deterministic in its arguments;
  accounting asks for the same C several times a run)."""
  c = bandmf_accounting.optimize(rounds, bands, error=error)
  logging.info('BandMF C optimized for T=%d, b=%d, the %s error: %s', rounds,
               bands, error, bandmf_accounting.error_summary(c))
  return c


def strategy(config) -> np.ndarray:
  """The T x T strategy C of a dp_ftrl_bandmf run.

  A resumed run's (`config.resolved_bandmf`, from its bandmf.json), else
  the published one (--bandmf_matrix_dir), else optimized for T =
  --total_rounds with --bandmf_bands bands (unset here: one band, C = I;
  training plans it from the participation, `BandMFRunParameters.plan`).
  """
  if config.resolved_bandmf is not None:
    return band_to_matrix(config.resolved_bandmf)
  settings_ = config.bandmf_settings()
  if settings_.bandmf_matrix_dir is not None:
    return published_matrix(settings_.bandmf_matrix_dir, config.total_rounds)
  return _optimized(config.total_rounds, settings_.bandmf_bands or 1,
                    settings_.bandmf_error)


def matrix_to_band(c) -> tuple:
  """C's band by row, ((C[t, t], C[t, t-1], ...) for every t), as nested
  tuples: exact in JSON (floats round-trip) and comparable in a config."""
  return tuple(tuple(float(x) for x in row)
               for row in bandmf_accounting.band_coefficients(c))


# The inverse of `matrix_to_band`.
band_to_matrix = bandmf_accounting.band_to_matrix


def noise_buffers(config) -> int:
  """The model-size buffers of the noise state: b - 1."""
  settings_ = config.bandmf_settings()
  if (config.resolved_bandmf is None and
      settings_.bandmf_matrix_dir is None):
    return max(0, (settings_.bandmf_bands or 1) - 1)
  return bandmf_accounting.check_banded(strategy(config))[1] - 1


class BandMFRunParameters(base.RunParameters):
  """A dp_ftrl_bandmf run's C: bands planned for the run's participation,
  the matrix written to bandmf.json and read back when the run resumes."""
  file_name = 'bandmf.json'

  def plan(self, config, num_clients: int):
    """Unset --bandmf_bands (and no matrix given) becomes `default_bands` of
    the participation model's guaranteed MinS (min_sep_groups), or of the
    best separation N clients allow at report goal m, floor(N / m) - 1.
    Deterministic, so a resumed run plans the same."""
    settings_ = config.bandmf_settings()
    if (settings_.bandmf_matrix_dir is not None or
        settings_.bandmf_bands is not None):
      return config
    planned = dataclasses.replace(
        config, seed=0 if config.seed is None else config.seed
    ).build_sampler(num_clients).planned(config.total_rounds)
    if planned is not None:
      min_sep = planned['min_separation']
    else:
      min_sep = accounting.max_min_separation(num_clients,
                                              config.clients_per_round)
    return dataclasses.replace(
        config, bandmf_bands=default_bands(min_sep, config.total_rounds))

  def restore(self, config, saved, path):
    """The run's config with the C it started with (`path`). The run cannot
    go past the rounds C was made for; a given matrix must equal it."""
    band = tuple(tuple(float(x) for x in row) for row in saved['band'])
    if config.total_rounds > len(band):
      raise ValueError(
          f'--total_rounds={config.total_rounds}: this run\'s BandMF C '
          f'({path}) is for {len(band)} rounds; a BandMF run cannot be '
          f'extended past them.')
    directory = config.bandmf_settings().bandmf_matrix_dir
    if directory is not None:
      given = matrix_to_band(published_matrix(directory, len(band)))
      if given != band:
        raise ValueError(
            f'{path} holds the C this run started with, but '
            f'--bandmf_matrix_dir={directory} holds another; resume with '
            f'the same C.')
    return dataclasses.replace(config, resolved_bandmf=band)

  def contents(self, config):
    """The band of C by row, its shape, where it came from and its error
    (unit noise, sensitivity 1 per participation)."""
    c = strategy(config)
    _, bands = bandmf_accounting.check_banded(c)
    directory = config.bandmf_settings().bandmf_matrix_dir
    out = dict(rounds=c.shape[0], bands=bands,
               source=(f'optimized for the '
                       f'{config.bandmf_settings().bandmf_error} error'
                       if directory is None else os.path.abspath(directory)),
               **bandmf_accounting.error_summary(c))
    if directory is not None:
      learning_rates = _load_published(os.path.abspath(directory))[1]
      if learning_rates is not None:
        # Reported, not applied: the server's learning rate is --server_lr.
        out['published_learning_rates_not_applied'] = [
            float(x) for x in learning_rates[:c.shape[0]]]
    out['band'] = [list(row) for row in matrix_to_band(c)]
    return out

  def describe(self, config, path):
    c = strategy(config)
    _, bands = bandmf_accounting.check_banded(c)
    summary = bandmf_accounting.error_summary(c)
    return (f'BandMF noise: C of {c.shape[0]} rounds, {bands} bands, '
            f'prefix-sum error mean {summary["mean_error"]:.4g}, max '
            f'{summary["max_error"]:.4g} (unit noise and sensitivity; in '
            f'{path}).')


def _check_launch(config):
  """The launch-equivalent privacy (--launch_population, --launch_rounds)
  must be computable: a given C must cover the launch's rounds, and given
  bands must fit the launch population's MinS (`_matrix_for`)."""
  if config.launch_population is None or config.launch_rounds is None:
    return
  settings_ = config.bandmf_settings()
  if settings_.bandmf_matrix_dir is not None:
    try:
      published_matrix(settings_.bandmf_matrix_dir, config.launch_rounds)
    except ValueError as e:
      raise ValueError(f'--launch_rounds={config.launch_rounds}: {e}'
                       ) from None
  elif settings_.bandmf_bands is not None:
    min_sep = accounting.max_min_separation(config.launch_population,
                                            config.launch_report_goal)
    if settings_.bandmf_bands > min_sep + 1:
      raise ValueError(
          f'--bandmf_bands={settings_.bandmf_bands} is more than the launch '
          f'population\'s MinS + 1 = {min_sep + 1} (--launch_population='
          f'{config.launch_population}, --launch_report_goal='
          f'{config.launch_report_goal}); use at most {min_sep + 1}.')


def _matrix_for(config, rounds: int, min_separation: int) -> np.ndarray:
  """The C that accounts `rounds` rounds: the run's (its leading block),
  or for a longer horizon (the launch equivalent's --launch_rounds) a
  column-normalized C with the run's bands. Where those bands are at most
  MinS + 1 every column-normalized C with them has the same sensitivity
  (the MaxP largest unit columns), so the banded square root
  (`initial_strategy`) stands for the C a launch would optimize; elsewhere
  the sensitivity depends on C and this refuses."""
  c = strategy(config)
  if rounds <= c.shape[0]:
    return c
  settings_ = config.bandmf_settings()
  if settings_.bandmf_matrix_dir is not None:
    return published_matrix(settings_.bandmf_matrix_dir, rounds)
  bands = bandmf_accounting.check_banded(c)[1]
  if bands > min_separation + 1:
    raise ValueError(
        f'BandMF over {rounds} rounds (--launch_rounds) with {bands} bands '
        f'and MinS {min_separation}: the sensitivity depends on a C this '
        f'run did not optimize; use at most {min_separation + 1} bands.')
  return bandmf_accounting.initial_strategy(rounds, bands)


def _validate(config):
  base.check_fixed_clip_dp(config)
  config.bandmf_settings().validate(config.total_rounds)
  _check_launch(config)
  base.check_secagg(config, 'dp_ftrl_bandmf', True)
  base.check_no_other_settings(config, 'dp_ftrl_bandmf')


def _factory(config, record_specs):
  from dpftrl_tff.aggregators import bandmf  # pylint: disable=g-import-not-at-top
  return base.fixed_clip_factory(bandmf.build_dp_ftrl_bandmf_factory, config,
                                 record_specs, c_matrix=strategy(config))


class BandMFNoise(base.NoiseDescription):
  """Banded matrix factorization noise (Choquette-Choo et al. 2023): the
  noise of dp_ftrl_bandmf."""
  name = 'bandmf'
  accountant_title = ', BandMF noise'
  sensitivity_label = 'sensitivity^2 (BandMF)'

  def report(self, privacy):
    bandmf = privacy.get('bandmf') or {}
    return ('BandMF-DP-FTRL (banded matrix factorization, Choquette-Choo '
            'et al. 2023; arXiv 2306.08153): correlated Gaussian noise '
            f'z C (C_b^-1 Z)_t with z = {privacy["noise_multiplier"]:g}, C_b '
            f'lower triangular with {bandmf.get("bands")} bands; sensitivity '
            f'{bandmf.get("sensitivity")}.')

  def console(self, privacy):
    bandmf = privacy.get('bandmf') or {}
    bound = ('' if str(bandmf.get('sensitivity')).startswith('exact') else
             ', sensitivity bounded above')
    return f'BandMF noise, {bandmf.get("bands")} bands{bound}'

  def sensitivity_source(self, privacy):
    bandmf = privacy.get('bandmf') or {}
    if not bandmf or str(bandmf.get('sensitivity')).startswith('exact'):
      return super().sensitivity_source(privacy)
    return ('upper bound on the sensitivity of the noise (BandMF with more '
            'bands than MinS + 1: Algorithm 4 of arXiv 2306.08153, over every '
            'participation pattern with MaxP participations at least MinS '
            'rounds apart): rho = sensitivity^2 / (2 z_eff^2) is then an '
            'upper bound too, so the guarantee holds and may be loose.')

  def accountant_lines(self, privacy):
    b = privacy['bandmf']
    return [f'  BandMF C                : {b["bands"]} bands, '
            f'{b["source"]}; sensitivity {b["sensitivity"]}',
            f'  BandMF prefix-sum error : mean {b["mean_error"]:.6g}, '
            f'max {b["max_error"]:.6g} (unit noise, sensitivity 1)']

  def accounting_plan(self, config, *, rounds, min_separation,
                      max_participation):
    """A C neither given nor sized is optimized with MinS + 1 bands (at
    most `DEFAULT_MAX_BANDS`)."""
    del max_participation
    settings_ = config.bandmf_settings()
    if (settings_.bandmf_bands is not None
        or settings_.bandmf_matrix_dir is not None):
      return {}
    return dict(bandmf_bands=default_bands(min_separation, rounds))

  def strategy(self, config, rounds):
    c = strategy(config)
    settings_ = config.bandmf_settings()
    return {'bandmf': c}, {'bandmf': dict(
        source=(f'optimized for the {settings_.bandmf_error} error'
                if settings_.bandmf_matrix_dir is None
                else settings_.bandmf_matrix_dir),
        **bandmf_accounting.error_summary(c[:rounds, :rounds]))}


def _privacy(config, rounds, max_participation, min_separation):
  if config.noise_multiplier <= 0:
    return None
  return accounting.compute_privacy(
      rounds=rounds, noise_multiplier=config.noise_multiplier,
      max_participation=max_participation, min_separation=min_separation,
      bandmf=_matrix_for(config, rounds, min_separation))


MECHANISM = base.Mechanism(
    name='dp_ftrl_bandmf',
    description='fixed clip C, banded matrix factorization noise (BandMF, '
    'arXiv 2306.08153)',
    validate=_validate, build_factory=_factory, privacy=_privacy,
    initial_clip=lambda config: config.clip_norm, supports_secagg=True,
    describe_clipping=base.fixed_clip_text, noise=BandMFNoise(),
    run_parameters=BandMFRunParameters(), noise_buffers=noise_buffers)
