"""What every mechanism module shares: `Mechanism`, `RunParameters`, checks
and SecAgg's sum.

SecAgg (Algorithm 2) is not a mechanism of its own: it replaces the plain sum
inside `none`, `dp_ftrl`, `dp_ftrl_blt` and `dp_ftrl_bandmf`
(`secagg_factory`), and the
mechanism then calibrates its noise to SecAgg's inflated sensitivity.
"""

import dataclasses
import math
from typing import Any, Callable, Dict, List, Optional, Tuple

from absl import logging
import numpy as np

from dpftrl_tff import accounting
from dpftrl_tff import checks
from dpftrl_tff import settings


@dataclasses.dataclass(frozen=True)
class SecAggSettings:
  """SecAgg-style discretization (the paper's Algorithm 2), carried by
  `TrainConfig`: each client's clipped update is rotated, scaled by `s`,
  rounded to integers and summed modulo M; the mechanism's noise is
  calibrated to the inflated sensitivity C_inflated."""
  secagg: bool = settings.setting(
      False, 'SecAgg-style discretization of client updates (Algorithm 2), '
      'with aggregator none, dp_ftrl, dp_ftrl_blt or dp_ftrl_bandmf; DP '
      'noise is calibrated to C_inflated.')
  secagg_scale: float = settings.setting(1024.0, 'SecAgg scale s.')
  secagg_debug: bool = settings.setting(
      False, 'Also record the l2 distance between the decoded and the true '
      'clipped sum (simulation only).')


class NoiseDescription:
  """A mechanism's DP noise in words, and what the accountant plans for it.

  One per accounted noise (its `name`), defined in the
  module of the mechanism that owns the noise; the privacy report, the
  console and the accountant's printout ask it (through
  `registry.noise_description`) rather than branching on the noise's name.
  Its text comes from an accounted privacy dict: the fields of
  `accounting.PrivacyReport`, as summary.json and the accountant hold them.

  Attributes:
    name: the noise the accountant computes ('tree', 'blt', 'bandmf' or
      'poisson_gaussian': an accounted privacy dict's 'mechanism').
    accountant_title: the accountant printout's title after 'DP-FTRL
      privacy'.
    sensitivity_label: the accountant printout's label of sensitivity^2.
    tree_restarts: whether the noise is a tree that --restart_rounds can
      restart.
  """
  name = ''
  accountant_title = ''
  sensitivity_label = 'sensitivity^2'
  tree_restarts = False

  def report(self, privacy: Dict[str, Any]) -> str:
    """The noise in privacy_report.md's section 3: one sentence with its
    source paper and parameters."""
    raise NotImplementedError

  def console(self, privacy: Dict[str, Any]) -> str:
    """The noise in a few words, for the console's privacy line."""
    raise NotImplementedError

  def accountant_lines(self, privacy: Dict[str, Any]) -> List[str]:
    """The accountant printout's lines for the noise's own parameters."""
    del privacy
    return []

  def accounting_plan(self, config, *, rounds: int, min_separation: int,
                      max_participation: Optional[int]) -> Dict[str, Any]:
    """The config fields the accountant plans for a launch of `rounds`
    rounds with this MinS and MaxP, as training plans them for its run
    (`RunParameters.plan`); none by default."""
    del config, rounds, min_separation, max_participation
    return {}

  def strategy(self, config, rounds: int
               ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(`accounting.compute_privacy`'s keyword arguments for the noise's
    strategy matrix, the report's fields that describe that matrix) for
    `config` accounted over `rounds` rounds; ({}, {}) by default."""
    del config, rounds
    return {}, {}

  # How the noise is accounted, in the reports' words. By default rho-zCDP
  # from the noise's exact sensitivity over every participation pattern with
  # MaxP participations at least MinS rounds apart (tree, BLT, BandMF within
  # its bands): the phrases below give it, and the methods that return None
  # leave the report's own zCDP paragraphs. A noise accounted otherwise
  # (DP-FedAvg: PLD of Poisson sampling) overrides them all.

  def sensitivity_source(self, privacy: Dict[str, Any]) -> str:
    """privacy_report.md section 4: where rho comes from (its 'Type'
    sentence after 'rho-zCDP (Bun and Steinke 2016) from the ')."""
    del privacy
    return ('exact sensitivity of the noise: rho = sensitivity^2 / '
            '(2 z_eff^2), the sensitivity maximised over every participation '
            'pattern with MaxP participations at least MinS rounds apart '
            '(the paper\'s accountant and TF Privacy\'s, exact; for BLT the '
            'min-separation sensitivity of its Toeplitz matrix; for BandMF '
            'the sum of the MaxP largest squared column norms of C, MinS '
            'apart).')

  def accounting_section(self, privacy: Dict[str, Any], *,
                         participation: str, kind: str
                         ) -> Optional[Tuple[List[str], str]]:
    """privacy_report.md section 4 of a noise not accounted in zCDP:
    (its type and assumption lines, its formal statement), or None."""
    del privacy, participation, kind
    return None

  def launch_equivalent_text(self, launch: Dict[str, Any]) -> Optional[str]:
    """privacy_report.md's launch-equivalent paragraph, or None."""
    del launch
    return None

  def participation_sentence(self, privacy: Dict[str, Any],
                             observed: str) -> Optional[str]:
    """How a run's participation enters its accounting (`observed`: MaxP
    and MinS observed in the run, in words), or None."""
    del privacy, observed
    return None

  def figures_phrase(self, privacy: Dict[str, Any]) -> str:
    """The accounted figures in a phrase, for the console."""
    return (f'rho-zCDP {number(privacy["zcdp"], ".4g")}, epsilon '
            f'{number(privacy["epsilon"], ".3f")}')

  def launch_participation_phrase(self, launch: Dict[str, Any]) -> str:
    """A launch's participation and rounds in a phrase, for the console
    (after its population)."""
    return (f'(MinS <= {launch["population_min_separation"]}), '
            f'T={launch["rounds"]}, MinS {launch["min_separation"]}, '
            f'worst-case MaxP {launch["max_participation"]}')

  def accountant_printout(self, report: Dict[str, Any]
                          ) -> Optional[List[str]]:
    """The accountant's whole printout of a noise not accounted in zCDP,
    or None (the DP-FTRL printout)."""
    del report
    return None

  def launch_report_texts(self, report: Dict[str, Any]
                          ) -> Optional[Dict[str, str]]:
    """privacy_report.md of a planned launch not accounted in zCDP: its
    participation, clipping and released texts, or None."""
    del report
    return None


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
    describe_clipping: config -> the clipping in words (privacy reports).
    noise: its DP noise (`NoiseDescription`: its name, as the accountant
      computes it, and its words); None for a mechanism without DP noise.
    estimates_clip: Algorithm 1: the clip is estimated from a noised count
      (sigma_b, default report goal / 20) and the trees restart at
      --restart_warmup + --restart_frequency i; both enter the accounting.
    run_parameters: what the mechanism resolves when a run starts and keeps
      in the run directory (`RunParameters`), or None.
    noise_buffers: config -> the model-size buffers its noise state holds
      beyond the tree's (BandMF: b - 1), for the memory check.
    participation: the participation model its accounting requires
      (dp_fedavg: 'poisson'), or None for any.
    launch_config: (config of the launch, its population) -> that config
      with what the mechanism derives from the population (dp_fedavg: q).
  """
  name: str
  description: str
  validate: Callable[[Any], None]
  build_factory: Callable[..., Any]
  privacy: Callable[..., Optional[accounting.PrivacyReport]]
  initial_clip: Callable[[Any], Optional[float]]
  supports_secagg: bool
  describe_clipping: Callable[[Any], str]
  noise: Optional[NoiseDescription] = None
  estimates_clip: bool = False
  run_parameters: Optional['RunParameters'] = None
  noise_buffers: Callable[[Any], int] = lambda config: 0
  participation: Optional[str] = None
  launch_config: Callable[[Any, int], Any] = lambda config, population: config

  @property
  def accounted_noise(self) -> Optional[str]:
    """The noise the accountant computes (`NoiseDescription.name`), None
    for a mechanism without DP noise."""
    return None if self.noise is None else self.noise.name

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


def check_secagg(config, mechanism_name: str, supported: bool):
  """--secagg with a mechanism: refused where its sum cannot be SecAgg's."""
  secagg = config.secagg_settings()
  if not secagg.secagg:
    return
  if not supported:
    # The registry lists the mechanisms that take it (imported late: the
    # registry imports the mechanism modules).
    from dpftrl_tff.aggregators import registry  # pylint: disable=g-import-not-at-top
    allowed = [n for n in registry.names() if registry.get(n).supports_secagg]
    raise ValueError(f'SecAgg (--secagg; the accountant\'s --secagg_scale) '
                     f'works with --aggregator {" or ".join(allowed)}, not '
                     f'{mechanism_name}.')
  checks.check_positive(secagg.secagg_scale, '--secagg_scale')
  checks.check_positive(config.clip_norm, '--clip_norm')


def secagg_factory(config, record_specs):
  """SecAgg's discretized modular sum for the model, and its parameters."""
  from dpftrl_tff.aggregators import secagg  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  secagg_settings = config.secagg_settings()
  factory = secagg.SecAggDiscretizationFactory(
      clip_norm=config.clip_norm, scale=secagg_settings.secagg_scale,
      report_goal=config.clients_per_round, debug=secagg_settings.secagg_debug,
      seed=config.noise_seed)
  params = factory.params_for(
      sum(int(np.prod(s.shape)) for s in tf.nest.flatten(record_specs)))
  logging.info('SecAgg: d=%d padded to %d, C_inf=%d, modulus %d (%d bits), '
               'C_inflated=%.6g.', params.dim, params.padded_dim,
               params.linf_bound, params.modulus, params.bits_per_parameter,
               params.inflated_clip_norm)
  return factory, params


def secagg_inner_and_noise(config, record_specs):
  """(record aggregation, noise multiplier) of a fixed-clip DP mechanism.

  With SecAgg the record aggregation is its discretized sum and the noise
  multiplier is raised so that the noise calibrated to C_inflated keeps the
  accounted z; without, None (plain sum) and z.
  """
  if not config.secagg_settings().secagg:
    return None, config.noise_multiplier
  from dpftrl_tff.aggregators import secagg  # pylint: disable=g-import-not-at-top
  inner, params = secagg_factory(config, record_specs)
  return inner, secagg.noise_multiplier_for_secagg(config.noise_multiplier,
                                                   params)


def fixed_clip_factory(build, config, record_specs, **kwargs):
  """`build` (a fixed-clip DP factory builder: the tree's, the BLT's) with
  the config's noise, report goal, clip and noise seed, and SecAgg's sum
  and raised noise when --secagg is on."""
  inner, noise_multiplier = secagg_inner_and_noise(config, record_specs)
  return build(
      noise_multiplier=noise_multiplier,
      clients_per_round=config.clients_per_round, clip_norm=config.clip_norm,
      record_specs=record_specs, noise_seed=config.noise_seed,
      record_aggregation_factory=inner, **kwargs)


def check_fixed_clip_dp(config):
  checks.check_dp_arguments(noise_multiplier=config.noise_multiplier,
                            clip_norm=config.clip_norm,
                            clients_per_round=config.clients_per_round)


def fixed_clip_text(config) -> str:
  """A fixed clip (and SecAgg's rounding, when on) in words."""
  text = f'fixed l2 clip norm C = {config.clip_norm:g} per client update.'
  secagg = config.secagg_settings()
  if secagg.secagg:
    text += (f' SecAgg-style discretization (scale s = '
             f'{secagg.secagg_scale:g}): randomized rounding inflates the '
             'sensitivity from C to C_inflated, and the noise is raised to '
             'std z C_inflated, so the accounted z below holds unchanged; '
             'the simulation does not run the cryptographic protocol.')
  return text


def _refuse_changed(changed, owner: str, config):
  if changed:
    raise ValueError(f'{", ".join(changed)} '
                     f'{"applies" if len(changed) == 1 else "apply"} only '
                     f'with --aggregator={owner}, not {config.aggregator}.')


def check_no_other_settings(config, own: Optional[str]):
  """Every other mechanism's settings do nothing with `config.aggregator`:
  refuse any changed from its default (each group declared by its module:
  `adaptive.AdaptiveSettings`, `blt.BLTSettings`, `bandmf.BandMFSettings`,
  `dp_fedavg.DPFedAvgSettings`). `own`: the mechanism whose group is
  allowed, or None."""
  groups = (('dp_ftrl_adaptive', config.adaptive_settings()),
            ('dp_ftrl_blt', config.blt_settings()),
            ('dp_ftrl_bandmf', config.bandmf_settings()),
            ('dp_fedavg', config.dp_fedavg_settings()))
  for owner, values in groups:
    if owner != own:
      _refuse_changed(settings.changed(values), owner, config)


def refuse_beside_given(group, given_field: str, what: str, noun: str):
  """A mechanism's settings that choose how `what` is optimized do nothing
  beside a given one (a `noun`, `given_field` of the settings `group`,
  set): refuse any changed from its default, naming the flags."""
  chosen = settings.changed(dataclasses.replace(group, **{given_field: None}))
  if chosen:
    raise ValueError(
        f'{", ".join(chosen)} '
        f'{"chooses" if len(chosen) == 1 else "choose"} how {what} is '
        f'optimized, to no effect with --{given_field}='
        f'{getattr(group, given_field)} (a given {noun}); leave it out.')


def number(value: Any, spec: str = '.4f') -> str:
  """`value` formatted with `spec`; 'nan' when it is absent or not finite
  (never a made-up number)."""
  try:
    value = float(value)
  except (TypeError, ValueError):
    return 'nan'
  return format(value, spec) if math.isfinite(value) else 'nan'


def floats_text(values) -> str:
  """A list of floats for a report, 6 significant digits each."""
  return '[' + ', '.join(f'{float(v):.6g}' for v in (values or [])) + ']'


def ints_text(values, shown: int = 12) -> str:
  """The first `shown` of a list of integers, '...' after when longer."""
  text = ', '.join(str(int(v)) for v in values[:shown])
  return text + (', ...' if len(values) > shown else '')
