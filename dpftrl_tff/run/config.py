"""The hyperparameters of a training run, each declared once.

`TrainConfig` is the single declaration of every training setting: its
default, its help text (written into the binary's --help and the README flag
table) and whether it may change when a run is resumed. Binaries define their
absl flags from it (`define_flags`) and read them back (`from_flags`), so a
new setting is one field here. Library code takes a `TrainConfig`; only
binaries know flags.
"""

import dataclasses
import math
from typing import Any, Dict, Optional, Sequence

from absl import flags
import numpy as np

from dpftrl_tff import checks
from dpftrl_tff import participation as participation_lib
from dpftrl_tff import settings
from dpftrl_tff.accounting import bandmf as bandmf_accounting
from dpftrl_tff.accounting import blt_optimizer
from dpftrl_tff.aggregators import registry
from dpftrl_tff.aggregators.mechanisms import adaptive as adaptive_mechanism
from dpftrl_tff.aggregators.mechanisms import bandmf as bandmf_mechanism
from dpftrl_tff.aggregators.mechanisms import base as mechanism_base
from dpftrl_tff.aggregators.mechanisms import blt as blt_mechanism
from dpftrl_tff.aggregators.mechanisms import dp_fedavg as dp_fedavg_mechanism
from dpftrl_tff.remote import workers


_field = settings.setting
_of = settings.same_setting
# The groups of settings TrainConfig carries, each declared (default, help,
# validation) by the module it configures; TrainConfig holds their fields
# flat (one flag each, one hparams.json key each) and gives each group back
# as its frozen dataclass (`adaptive_settings()`, ...), which is what the
# mechanisms read.
_ADAPTIVE = adaptive_mechanism.AdaptiveSettings
_BLT = blt_mechanism.BLTSettings
_BANDMF = bandmf_mechanism.BandMFSettings
_DP_FEDAVG = dp_fedavg_mechanism.DPFedAvgSettings
_SECAGG = mechanism_base.SecAggSettings
_TIMER = participation_lib.TimerSettings


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Everything that defines a training run (written to hparams.json).

  Frozen and validated when made (`validate`: every error names its flag),
  so code below takes its values as checked; a changed value is a new
  config (`dataclasses.replace`, validated again). What depends on the data
  (the number of training clients) is checked by `check_data`.
  """
  total_rounds: int = _field(
      100, 'Number of training rounds T (may be raised to extend a run, '
      'never lowered below the rounds already run).', resumable=True)
  clients_per_round: int = _field(
      100, 'Clients per round: the report goal m (DP-FTRL divides the noisy '
      'sum by it).')
  client_lr: float = _field(0.5, 'Client SGD learning rate eta_c.')
  server_lr: float = _field(1.0, 'Server learning rate eta_s.')
  server_momentum: float = _field(0.9, 'Server momentum beta.')
  client_batch_size: int = _field(16, 'Client batch size.')
  client_epochs_per_round: int = _field(1, 'Local epochs per round.')
  max_elements_per_client: int = _field(
      256, 'Sentences used per client and round (after shuffling).')
  shuffle_buffer_size: int = _field(
      1000, 'Each round every client shuffles its examples with a buffer '
      'of this size, seeded by (seed, round, client), before taking '
      '--max_elements_per_client; 0 or 1: no shuffling.')
  sequence_length: int = _field(20, 'Words per sentence (then BOS/EOS).')
  vocab_size: int = _field(
      10000, 'Vocabulary words V (ids add pad, OOV, BOS, EOS).')
  latent_size: int = _field(670, 'CIFG units.')
  embedding_size: int = _field(96, 'Embedding and projection size.')
  shared_embedding: bool = _field(False,
                                  'Tie input and output embeddings.')
  initial_weights: Optional[str] = _field(
      None, 'Start from pretrained weights: an output directory of '
      'experiments.pretrain (its vocabulary and model sizes must equal this '
      'run\'s). Unset: the seeded random initialization.')
  aggregator: str = _field(
      'dp_ftrl', 'Model-update aggregation (see '
      'dpftrl_tff.aggregators.registry): none (plain FedAvg mean), dp_ftrl '
      '(fixed clip, tree noise), dp_ftrl_adaptive (Algorithm 1), '
      'dp_ftrl_blt (fixed clip, BLT noise), dp_ftrl_bandmf (fixed clip, '
      'banded matrix factorization noise) or dp_fedavg (DP-FedAvg: '
      'independent noise each round, with --participation=poisson).',
      flag_type='enum')
  noise_multiplier: float = _field(
      0.0, 'Noise multiplier z: tree node noise std z * C (adaptive: the '
      'equivalent z of Theorem 1; BLT and BandMF: noise z * C * (C^-1 Z)_t).')
  clip_norm: float = _field(1.0, 'l2 clip norm C of client updates (fixed '
                            'clip, and SecAgg).')
  noise_seed: Optional[int] = _field(
      None, 'Fixes the DP noise (tests and debugging only: no privacy; '
      'warns). Unset: drawn from the operating system\'s entropy.')
  # Algorithm 1's settings, declared in mechanisms.adaptive.AdaptiveSettings.
  initial_clip_norm: float = _of(_ADAPTIVE, 'initial_clip_norm')
  target_unclipped_quantile: float = _of(_ADAPTIVE, 'target_unclipped_quantile')
  clip_learning_rate: float = _of(_ADAPTIVE, 'clip_learning_rate')
  clipped_count_stddev: Optional[float] = _of(_ADAPTIVE, 'clipped_count_stddev')
  restart_warmup: int = _of(_ADAPTIVE, 'restart_warmup')
  restart_frequency: int = _of(_ADAPTIVE, 'restart_frequency')
  # SecAgg's, declared in mechanisms.base.SecAggSettings.
  secagg: bool = _of(_SECAGG, 'secagg')
  secagg_scale: float = _of(_SECAGG, 'secagg_scale')
  secagg_debug: bool = _of(_SECAGG, 'secagg_debug')
  # The BLT's, declared in mechanisms.blt.BLTSettings.
  blt_params: Optional[str] = _of(_BLT, 'blt_params')
  blt_num_buffers: Optional[int] = _of(_BLT, 'blt_num_buffers')
  blt_error: str = _of(_BLT, 'blt_error')
  blt_min_separation: Optional[int] = _of(_BLT, 'blt_min_separation')
  blt_max_participation: Optional[int] = _of(_BLT, 'blt_max_participation')
  # BandMF's, declared in mechanisms.bandmf.BandMFSettings.
  bandmf_bands: Optional[int] = _of(_BANDMF, 'bandmf_bands')
  bandmf_error: str = _of(_BANDMF, 'bandmf_error')
  bandmf_matrix_dir: Optional[str] = _of(_BANDMF, 'bandmf_matrix_dir')
  # DP-FedAvg's, declared in mechanisms.dp_fedavg.DPFedAvgSettings.
  sampling_probability: Optional[float] = _of(_DP_FEDAVG,
                                              'sampling_probability')
  # Participation (dpftrl_tff.participation).
  participation: str = _field(
      'uniform', 'Who takes part in each round: uniform (independent '
      'rounds), min_sep_groups (round r from group r mod b: MinS >= b - 1), '
      'timer (device-level simulation with a participation timer) or '
      'poisson (each client independently with probability '
      'clients_per_round / N: DP-FedAvg\'s sampling).',
      flag_type='enum')
  min_sep_groups: Optional[int] = _field(
      None, 'min_sep_groups: the number of groups b; unset: the largest, '
      'floor(clients / clients_per_round).')
  # The timer model's settings, declared in participation.TimerSettings.
  timer_hours: float = _of(_TIMER, 'timer_hours')
  round_minutes: float = _of(_TIMER, 'round_minutes')
  daily_active_fraction: float = _of(_TIMER, 'daily_active_fraction')
  availability_hours: float = _of(_TIMER, 'availability_hours')
  window_start_hour: float = _of(_TIMER, 'window_start_hour')
  window_spread_hours: float = _of(_TIMER, 'window_spread_hours')
  shortfall: str = _of(_TIMER, 'shortfall')
  max_wait_hours: float = _of(_TIMER, 'max_wait_hours')
  # Where rounds run (dpftrl_tff.remote): no part of the run's identity.
  workers: Optional[str] = _field(
      None, 'Run each round\'s cohort across these TFF workers, '
      'host:port,host:port,... (each started with `python -m '
      'experiments.serve_worker`; the database must be at the same path on '
      'every worker machine). Unset: on this machine.', resumable=True)
  subrounds: int = _field(
      0, 'With --workers: cut each cohort into this many parts S, run on '
      'free workers and summed in a fixed order (0: one per worker). '
      'Results depend on S, not on the number of workers.', resumable=True)
  on_worker_failure: str = _field(
      'stop', 'With --workers: when a worker is lost during a round, stop '
      '(re-run the command to resume from the last checkpoint) or continue '
      '(the round again on the remaining workers; same S, same result).',
      resumable=True, flag_type='enum')
  # Launch-equivalent privacy (reported beside the run's own).
  launch_report_goal: int = _field(
      6500, 'Report goal of the equivalent launch: its noise multiplier is '
      'z * launch_report_goal / clients_per_round (same noise per client).',
      resumable=True)
  launch_population: Optional[int] = _field(
      None, 'Estimated population of the launch; with it the binary also '
      'prints the launch-equivalent privacy at the largest MinS it allows. '
      'Unset: not printed.', resumable=True)
  launch_rounds: Optional[int] = _field(
      None, 'Rounds of the equivalent launch; unset: the run\'s rounds.',
      resumable=True)
  # Empirical privacy (dpftrl_tff.empirical.canaries).
  canaries: int = _field(
      0, 'One-shot empirical privacy (Andrew et al. 2024): K training '
      'clients, chosen from --seed, become canary clients whose update is a '
      'fixed random direction through the same clipping, noise and SecAgg '
      'path; as many directions are never inserted. The summary gets the '
      'estimated epsilon (final model and all iterates) beside the accounted '
      'one. 0: none; else at least 2.')
  canary_norm: Optional[float] = _field(
      None, 'Norm of a canary update before clipping. Unset: 100 times the '
      '(initial) clip norm, so it is always clipped; without DP, 1.')
  canary_phrases: int = _field(
      0, 'Memorization (the secret sharer, Carlini et al. 2019): N random '
      'phrases of --canary_phrase_length vocabulary words, each inserted '
      'into the data of --canary_phrase_repeats training clients (from '
      '--seed); the summary gets each phrase\'s exposure against '
      '--exposure_candidates random phrases. 0: none.')
  canary_phrase_repeats: int = _field(
      1, 'Clients whose data holds each canary phrase.')
  canary_phrase_length: int = _field(5, 'Words per canary phrase.')
  exposure_candidates: int = _field(
      10000, 'Random candidate phrases each canary phrase is ranked among '
      '(the rank exposure is at most log2 of it plus one; the extrapolated '
      'one is not capped).')
  seed: Optional[int] = _field(
      None, 'Seed of model init, client sampling and client shuffling. '
      'Unset: random, recorded in hparams.json.')
  rounds_per_eval: int = _field(10, 'Evaluate every this many rounds.',
                                resumable=True)
  num_eval_examples: int = _field(
      10000, 'Sentences of the held-out split used for evaluation.',
      resumable=True)
  eval_sentences_per_author: int = _field(
      20, 'At most this many of the --num_eval_examples sentences come from '
      'one held-out author (client), so that no author dominates the '
      'evaluation; 0: no cap (each author\'s sentences in turn).',
      resumable=True)
  rounds_per_checkpoint: int = _field(
      10, 'Checkpoint every this many rounds.', resumable=True)
  allow_changed_learning_rates: bool = _field(
      False, 'On resume, accept --client_lr, --server_lr and '
      '--server_momentum other than the run started with (e.g. after it '
      'diverged): the new values apply from the resumed round on and are '
      'recorded in hparams.json. Off: a change is refused.', resumable=True)
  debug_measurements: bool = _field(
      True, 'Record client update norm statistics (simulation '
      'diagnostics).')
  # Resolved at run time by the mechanism (`mechanisms.base.RunParameters`), not a
  # setting: no flag, not in hparams.json. A resumed dp_ftrl_blt run's BLT,
  # read back from its blt.json.
  resolved_blt: Optional[Any] = dataclasses.field(
      default=None, metadata=dict(derived=True))
  # A resumed dp_ftrl_bandmf run's C (its band by row, nested tuples), read
  # back from its bandmf.json.
  resolved_bandmf: Optional[tuple] = dataclasses.field(
      default=None, metadata=dict(derived=True), repr=False)
  # A dp_fedavg run's secret seed of its Poisson sampling (planned when the
  # run starts, kept in its dp_fedavg.json): the amplification it is
  # accounted with holds only if who was sampled is unpredictable, which a
  # --seed in a flag file is not.
  resolved_sampling_seed: Optional[int] = dataclasses.field(
      default=None, metadata=dict(derived=True), repr=False)

  def __post_init__(self):
    self.validate()

  def validate(self):
    """Raises ValueError naming the flag for any bad value (run when the
    config is made; data-dependent checks are `check_data`'s)."""
    checks.check_int(self.total_rounds, '--total_rounds', minimum=1,
                     maximum=MAX_ROUNDS)
    checks.check_int(self.clients_per_round, '--clients_per_round', minimum=1)
    for name in ('client_lr', 'server_lr'):
      checks.check_float(getattr(self, name), f'--{name}', minimum=0,
                         strict_minimum=True)
    checks.check_float(self.server_momentum, '--server_momentum', minimum=0,
                       maximum=1, strict_maximum=True)
    for name in ('client_batch_size', 'client_epochs_per_round',
                 'max_elements_per_client', 'sequence_length', 'vocab_size',
                 'latent_size', 'embedding_size', 'rounds_per_eval',
                 'num_eval_examples', 'rounds_per_checkpoint'):
      checks.check_int(getattr(self, name), f'--{name}', minimum=1)
    checks.check_int(self.shuffle_buffer_size, '--shuffle_buffer_size',
                     minimum=0)
    checks.check_int(self.eval_sentences_per_author,
                     '--eval_sentences_per_author', minimum=0)
    if self.noise_seed is not None:
      checks.check_int(self.noise_seed, '--noise_seed', minimum=0)
    if self.seed is not None:
      checks.check_int(self.seed, '--seed', minimum=0)
    registry.get(self.aggregator).validate(self)
    if self.participation not in participation_lib.MODELS:
      raise ValueError(f'--participation={self.participation!r} is unknown; '
                       f'allowed: {", ".join(participation_lib.MODELS)}.')
    if self.min_sep_groups is not None:
      checks.check_int(self.min_sep_groups, '--min_sep_groups', minimum=1)
    if self.participation == 'timer':
      self.timer_settings().validate(None, self.clients_per_round)
    checks.check_int(self.launch_report_goal, '--launch_report_goal',
                     minimum=1)
    if self.launch_population is not None:
      checks.check_int(self.launch_population, '--launch_population',
                       minimum=self.launch_report_goal)
    if self.launch_rounds is not None:
      checks.check_int(self.launch_rounds, '--launch_rounds', minimum=1)
    workers.parse_workers(self.workers)
    self._validate_canaries()
    checks.check_int(self.subrounds, '--subrounds', minimum=0)
    if self.subrounds and not self.workers:
      raise ValueError(f'--subrounds={self.subrounds} needs --workers (on '
                       f'one machine a round is not cut into parts).')
    if self.on_worker_failure not in workers.FAILURE_POLICIES:
      raise ValueError(f'--on_worker_failure={self.on_worker_failure!r} is '
                       f'unknown; allowed: '
                       f'{", ".join(workers.FAILURE_POLICIES)}.')

  def check_data(self, num_train_clients: int):
    """Raises ValueError naming the flag when the run does not fit a
    training split of `num_train_clients` clients."""
    if self.clients_per_round > num_train_clients:
      raise ValueError(
          f'--clients_per_round={self.clients_per_round} is larger than the '
          f'{num_train_clients} clients of the training split.')
    # The participation model's own checks on the population (the groups of
    # min_sep_groups, the timer's settings): its sampler is cheap to make,
    # and what it refuses must be refused before the run directory is
    # touched. The seed does not change what is checked.
    dataclasses.replace(self, seed=0 if self.seed is None else self.seed
                        ).build_sampler(num_train_clients)
    used = self.canaries + self.canary_phrases * self.canary_phrase_repeats
    if used and used >= num_train_clients:
      raise ValueError(
          f'--canaries={self.canaries} and --canary_phrases='
          f'{self.canary_phrases} x --canary_phrase_repeats='
          f'{self.canary_phrase_repeats} need {used} of the '
          f'{num_train_clients} training clients; leave some real ones.')

  def _validate_canaries(self):
    checks.check_int(self.canaries, '--canaries', minimum=0)
    checks.check_int(self.canary_phrases, '--canary_phrases', minimum=0)
    checks.check_int(self.canary_phrase_repeats, '--canary_phrase_repeats',
                     minimum=1)
    checks.check_int(self.canary_phrase_length, '--canary_phrase_length',
                     minimum=1, maximum=self.sequence_length - 1)
    checks.check_int(self.exposure_candidates, '--exposure_candidates',
                     minimum=1)
    if self.canary_phrases and self.workers:
      raise ValueError(f'--canary_phrases={self.canary_phrases} runs on this '
                       f'machine only; leave out --workers.')
    if self.canary_norm is not None:
      checks.check_float(self.canary_norm, '--canary_norm', minimum=0,
                         strict_minimum=True)
    if not self.canaries:
      return
    checks.check_int(self.canaries, '--canaries', minimum=2)
    if self.workers:
      raise ValueError(f'--canaries={self.canaries} runs on this machine '
                       f'only; leave out --workers.')

  def timer_settings(self) -> participation_lib.TimerSettings:
    return settings.values_of(_TIMER, self)

  def adaptive_settings(self) -> adaptive_mechanism.AdaptiveSettings:
    return settings.values_of(_ADAPTIVE, self)

  def blt_settings(self) -> blt_mechanism.BLTSettings:
    return settings.values_of(_BLT, self)

  def bandmf_settings(self) -> bandmf_mechanism.BandMFSettings:
    return settings.values_of(_BANDMF, self)

  def dp_fedavg_settings(self) -> dp_fedavg_mechanism.DPFedAvgSettings:
    return settings.values_of(_DP_FEDAVG, self)

  def secagg_settings(self) -> mechanism_base.SecAggSettings:
    return settings.values_of(_SECAGG, self)

  def build_sampler(self, num_clients: int):
    """The participation sampler of this run (over client indices), seeded
    by --seed, or by the secret sampling seed a mechanism resolved
    (`resolved_sampling_seed`, dp_fedavg's)."""
    seed = (self.seed if self.resolved_sampling_seed is None else
            self.resolved_sampling_seed)
    return participation_lib.build_sampler(
        self.participation, num_clients=num_clients,
        report_goal=self.clients_per_round, seed=seed,
        min_sep_groups=self.min_sep_groups, timer=self.timer_settings())


LEARNING_RATE_FIELDS = ('client_lr', 'server_lr', 'server_momentum')

# --total_rounds at most: 25 times the paper's longest launches (about 4,000
# rounds); a typo such as 20000000 fails at once instead of running for
# years (each round is seconds to minutes here).
MAX_ROUNDS = 100_000


def draw_seed() -> int:
  """An unpredictable seed for an unset --seed (recorded by the caller)."""
  return int(np.random.SeedSequence().generate_state(1)[0] >> 1)


def setting_fields(config_class=TrainConfig):
  """The fields of `config_class` that are settings (a flag each), not
  values resolved at run time."""
  return tuple(f for f in dataclasses.fields(config_class)
               if not f.metadata.get('derived'))


def hparams(config: TrainConfig) -> Dict[str, Any]:
  """The run's settings by name, as hparams.json records them."""
  return {f.name: getattr(config, f.name) for f in setting_fields()}


def resumable_fields():
  """Names of the settings a resumed run may change."""
  return tuple(f.name for f in setting_fields()
               if f.metadata.get('resumable'))


def default_enum_values() -> Dict[str, Any]:
  """Allowed values of TrainConfig's enum fields, from their modules."""
  return dict(aggregator=registry.names(),
              participation=participation_lib.MODELS,
              shortfall=participation_lib.SHORTFALL_POLICIES,
              blt_error=blt_optimizer.ERRORS,
              bandmf_error=bandmf_accounting.ERRORS,
              on_worker_failure=workers.FAILURE_POLICIES)


def define_flags(flag_values=None, config_class=TrainConfig, *,
                 enum_values: Optional[Dict[str, Any]] = None,
                 only: Optional[Sequence[str]] = None,
                 defaults: Optional[Dict[str, Any]] = None):
  """Defines one absl flag per config field; returns {name: FlagHolder}.

  Args:
    flag_values: the absl FlagValues to define them in (default FLAGS).
    config_class: the dataclass whose fields become flags.
    enum_values: allowed values of the fields declared with
      flag_type='enum' (default: `default_enum_values()`).
    only: define flags for these fields only (the others keep their
      defaults in `from_flags`).
    defaults: other defaults by field, for a binary where the setting means
      something else when unset (the accountant: None, "not given").
  """
  flag_values = flags.FLAGS if flag_values is None else flag_values
  if enum_values is None:
    enum_values = default_enum_values()
  holders = {}
  for field in setting_fields(config_class):
    if only is not None and field.name not in only:
      continue
    help_text = field.metadata.get('help', field.name)
    default = (defaults or {}).get(field.name, field.default)
    args = (field.name, default, help_text)
    kind = field.metadata.get('flag_type')
    if kind == 'enum':
      holder = flags.DEFINE_enum(field.name, default,
                                 list(enum_values[field.name]), help_text,
                                 flag_values=flag_values)
    elif field.type is bool:
      holder = flags.DEFINE_bool(*args, flag_values=flag_values)
    elif field.type in (int, Optional[int]):
      holder = flags.DEFINE_integer(*args, flag_values=flag_values)
    elif field.type in (float, Optional[float]):
      holder = flags.DEFINE_float(*args, flag_values=flag_values)
    else:
      holder = flags.DEFINE_string(*args, flag_values=flag_values)
    holders[field.name] = holder
  return holders


def from_flags(holders, config_class=TrainConfig):
  """The config built from the holders `define_flags` returned."""
  values = {name: holder.value for name, holder in holders.items()}
  return config_class(**values)


# Copies of a model-size buffer of the server state alive at a round's peak:
# measured with BandMF at b = 64 and the paper's 2.4M parameters
# (benchmarks.round_time, 2026-11-27): the 63 buffers (0.6 GB) raised the
# peak memory of a 10-client round by 4.8 GB (TFF's state in and out, its
# serialized forms and the Python copy).
STATE_BUFFER_COPIES = 8


def estimate_memory_bytes(config: TrainConfig) -> int:
  """A rough upper estimate of a run's peak memory, before building anything.

  Model-size copies: the server model, momentum, the clients' models,
  gradients and deltas being summed, TFF's serialized state and, for
  DP-FTRL, one tree node per level (log2 T + 2); the mechanism's noise
  buffers (BandMF: b - 1), `STATE_BUFFER_COPIES` times each; plus the
  logits of a training batch (forward and backward) and of an evaluation
  batch.
  """
  # TensorFlow (through models) only when a binary estimates memory.
  from dpftrl_tff import models  # pylint: disable=g-import-not-at-top
  params = models.count_parameters(
      config.vocab_size, latent_size=config.latent_size,
      embedding_size=config.embedding_size,
      shared_embedding=config.shared_embedding)
  copies = (16 + math.log2(max(2, config.total_rounds)) + 2 +
            STATE_BUFFER_COPIES *
            registry.get(config.aggregator).noise_buffers(config))
  num_ids = models.extended_vocab_size(config.vocab_size)
  logits = config.sequence_length * num_ids * (
      6 * config.client_batch_size + 2 * 256)
  return int(4 * (params * copies + logits))
