"""Federated training of the CIFG LM: TFF FedAvg with a DP mechanism.

Builds TFF's unweighted FedAvg learning process (client SGD, server SGD with
momentum, the model-update aggregation of `aggregators.registry`), and
`train` runs it: the run directory (`run_directory`: identity check, lock,
hparams, metrics, checkpoints, summary), the round loop (`loop.run_rounds`
with a `participation` sampler), evaluation, and the privacy spent from the
run's own participation log. A resumed run ends with the same model as an
uninterrupted one: the cohort and client shuffling of round t are functions
of (seed, t), the model initializer is seeded, and the aggregator state
(the DP noise generator included) is checkpointed.
"""

import dataclasses
import datetime
import json
import os
import subprocess
import sys
from typing import Any, Callable, Dict, List, Optional

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tree

from dpftrl_tff import accounting
from dpftrl_tff import config as config_lib
from dpftrl_tff import data
from dpftrl_tff import divergence
from dpftrl_tff import loop
from dpftrl_tff import metrics as lm_metrics
from dpftrl_tff import models
from dpftrl_tff import participation
from dpftrl_tff import pretrained
from dpftrl_tff import privacy_report
from dpftrl_tff import progress
from dpftrl_tff import run_directory
from dpftrl_tff import runtime
from dpftrl_tff import tff_compat
from dpftrl_tff.tff_compat import resident
from dpftrl_tff.aggregators import registry
from dpftrl_tff.remote import workers as workers_lib

TrainConfig = config_lib.TrainConfig
HPARAMS_FILE = run_directory.HPARAMS_FILE
METRICS_FILE = run_directory.METRICS_FILE
SUMMARY_FILE = run_directory.SUMMARY_FILE
FINAL_WEIGHTS_FILE = run_directory.FINAL_WEIGHTS_FILE


def _input_spec(sequence_length):
  spec = tf.TensorSpec([None, sequence_length], tf.int64)
  return (spec, spec)


def build_keras_model(config: TrainConfig,
                      zero_init: bool = False) -> tf.keras.Model:
  return models.create_cifg_lm(
      config.vocab_size, latent_size=config.latent_size,
      embedding_size=config.embedding_size,
      shared_embedding=config.shared_embedding,
      sequence_length=config.sequence_length, seed=config.seed,
      zero_init=zero_init)


def build_model_fn(config: TrainConfig) -> Callable[[], Any]:
  """The TFF model: the CIFG LM with loss and in-vocab accuracy.

  Its variables start at zero: TFF builds the model inside every client's
  computation (and the server's) and overwrites the weights with the
  broadcast model right away, so real initializers (an orthogonal init needs
  a QR decomposition) would only cost time on every client, every round. The
  run's actual initial model comes from `initial_state`.
  """
  def model_fn():
    return tff.learning.models.from_keras_model(
        build_keras_model(config, zero_init=True),
        loss=lm_metrics.MaskedCrossEntropy(),
        input_spec=_input_spec(config.sequence_length),
        metrics=lm_metrics.build_metrics(config.vocab_size))
  return model_fn


def build_aggregator(config: TrainConfig, model_fn):
  """The model-update aggregation factory of `config.aggregator`."""
  record_specs = tff.types.type_to_tf_tensor_specs(
      tff.learning.models.weights_type_from_model(model_fn).trainable)
  factory = registry.get(config.aggregator).build_factory(config,
                                                          record_specs)
  if config.debug_measurements:
    factory = tff.learning.add_debug_measurements(factory)
  return factory


def prepare_execution(config: TrainConfig):
  """The execution context `config` needs (`tff_compat`): with SecAgg, TFF's
  test context, the only one that runs secure-sum intrinsics in simulation.
  TFF's workarounds are installed by the binaries (`tff_compat.install`)."""
  tff_compat.set_execution_context(secure_sums=config.secagg)


def taking_client_ids(process, train_data, preprocess):
  """`process` with rounds given client ids instead of datasets, or None.

  TFF's worker then builds each client's dataset itself
  (`data.build_client_dataset_computation`); None when `train_data` cannot
  build a dataset from an id tensor.
  """
  client_datasets = data.build_client_dataset_computation(train_data,
                                                          preprocess)
  if client_datasets is None:
    return None
  return tff.simulation.compose_dataset_computation_with_learning_process(
      client_datasets, process)


def build_runner(config: TrainConfig, process, *, train_data,
                 by_client_id: bool, database: Optional[str],
                 print_fn: Callable[[str], None] = print):
  """What runs the rounds: on this machine, or across `config.workers`.

  On this machine, `resident.ResidentProcess` (the server state stays in
  TFF's local worker). With workers, `remote.rounds.DistributedProcess`
  over TFF's mergeable context, after checking that every worker reads the
  training database at `database` as this machine does.
  """
  if not config.workers:
    return resident.ResidentProcess(process)
  # pylint: disable=g-import-not-at-top
  from dpftrl_tff.remote import context as context_lib
  from dpftrl_tff.remote import rounds
  # pylint: enable=g-import-not-at-top
  if not by_client_id or not database:
    raise ValueError(
        '--workers needs training data that workers open themselves from a '
        'database file (TFF\'s SQL ClientData, as --cache_dir and the '
        'generated data give).')
  distributed = context_lib.DistributedContext(
      workers_lib.parse_workers(config.workers), subrounds=config.subrounds,
      secure_sums=config.secagg)
  rounds.check_client_data(distributed,
                           dataset_fn=train_data.serializable_dataset_fn,
                           client_id=train_data.client_ids[0],
                           database=database)
  print_fn(f'Rounds run on {len(distributed.workers)} TFF worker(s) '
           f'({", ".join(map(str, distributed.workers))}), each cohort cut '
           f'into {distributed.subrounds} subround(s).')
  return rounds.DistributedProcess(
      process, distributed,
      continue_on_worker_failure=config.on_worker_failure == 'continue',
      warn=print_fn)


def build_learning_process(config: TrainConfig):
  """TFF FedAvg with the configured aggregator.

  Start it from `initial_state(process, config)`, not `process.initialize()`
  (whose model is all zeros, see `build_model_fn`). Clients iterate their
  data with a dataset iterator rather than `DatasetReduce`, which
  re-instantiates (and re-optimizes) the training step for every client in
  every round. The execution context is set by `prepare_execution`.
  """
  prepare_execution(config)
  model_fn = build_model_fn(config)
  return tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=config.client_lr),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=config.server_lr, momentum=config.server_momentum),
      model_aggregator=build_aggregator(config, model_fn),
      loop_implementation=tff.learning.LoopImplementation.DATASET_ITERATOR)


def initial_state(process, config: TrainConfig, keras_model=None):
  """`process.initialize()` with the model set to the seeded initial model.

  Args:
    process: from `build_learning_process(config)`.
    config: the run's hyperparameters (config.seed seeds the initializers).
    keras_model: a freshly built `build_keras_model(config)` to take the
      initial weights from (built here when None).
  """
  if keras_model is None:
    keras_model = build_keras_model(config)
  return process.set_model_weights(
      process.initialize(),
      tff.learning.models.ModelWeights.from_model(keras_model))


def _flatten(prefix: str, value, out: Dict[str, float]):
  if isinstance(value, dict) or hasattr(value, 'items'):
    for k, v in value.items():
      _flatten(f'{prefix}/{k}' if prefix else str(k), v, out)
  elif isinstance(value, (list, tuple)):
    for i, v in enumerate(value):
      _flatten(f'{prefix}/{i}', v, out)
  else:
    arr = np.asarray(value)
    if arr.size == 1 and np.issubdtype(arr.dtype, np.number):
      out[prefix] = float(arr.reshape(()))


class Evaluator:
  """Loss and in-vocab accuracy of a Keras model on a fixed dataset.

  An explicit loop (not `Model.evaluate`, whose v1 variant Keras may swap in
  once TFF has built graphs) over pre-batched (x, y).
  """

  def __init__(self, keras_model: tf.keras.Model, dataset, vocab_size: int):
    self.model = keras_model
    self.dataset = dataset
    self.loss_fn = lm_metrics.MaskedCrossEntropy()
    self.accuracy = lm_metrics.InVocabAccuracy(vocab_size)
    self.tokens = lm_metrics.NumTokens()
    self.loss_sum = tf.Variable(0.0, dtype=tf.float64)
    self._baseline = None

    @tf.function
    def _step(x, y):
      logits = self.model(x, training=False)
      self.accuracy.update_state(y, logits)
      n = tf.reduce_sum(tf.cast(tf.not_equal(y, 0), tf.float64))
      self.loss_sum.assign_add(
          tf.cast(self.loss_fn(y, logits), tf.float64) * n)
      self.tokens.update_state(y, logits)
    self._step = _step

  def __call__(self) -> Dict[str, float]:
    self.accuracy.reset_state()
    self.tokens.reset_state()
    self.loss_sum.assign(0.0)
    for x, y in self.dataset:
      self._step(x, y)
    tokens = float(self.tokens.result())
    return dict(loss=float(self.loss_sum.numpy()) / max(tokens, 1.0),
                in_vocab_accuracy=float(self.accuracy.result()),
                num_tokens=tokens)

  def unigram_baseline(self) -> float:
    """In-vocab accuracy of always predicting the most frequent word.

    Word id 1 is the most frequent word of the vocabulary (word counts are
    sorted), the unigram guess the trained model must beat.
    """
    if self._baseline is None:
      metric = lm_metrics.InVocabAccuracy(self.accuracy.vocab_size)
      num_ids = self.accuracy.vocab_size + 4
      for _, y in self.dataset:
        metric.update_state(y, tf.one_hot(tf.ones_like(y), num_ids))
      self._baseline = float(metric.result())
    return self._baseline


def _privacy_dict(report, **extra):
  if report is None:
    return None
  return dict(extra, rounds=report.rounds,
              noise_multiplier=report.noise_multiplier,
              max_participation=report.max_participation,
              min_separation=report.min_separation,
              restart_rounds=list(report.restart_rounds),
              mechanism=report.mechanism, zcdp=report.zcdp,
              epsilon=report.epsilon, delta=report.delta,
              epsilon_closed_form=report.epsilon_closed_form,
              sensitivity_squared=report.sensitivity_squared,
              effective_noise_multiplier=report.effective_noise_multiplier,
              value_noise_multiplier=report.value_noise_multiplier,
              clipped_count_stddev=report.clipped_count_stddev,
              secagg=report.secagg, blt=report.blt)


def launch_equivalent_privacy(config: TrainConfig,
                              rounds: int) -> Optional[Dict]:
  """The privacy of the launch this simulation stands for (paper Sec. 2.2).

  Small simulations tune with a small report goal m and launch with a large
  one, keeping the noise per client z / m: z_launch = z * m_launch / m. With
  the launch population P the launch can reach MinS = floor(P / m_launch) - 1
  (participation at that separation, MaxP its worst case). This is NOT the
  simulation's own guarantee. None without --launch_population or noise.
  """
  if config.launch_population is None or config.noise_multiplier <= 0:
    return None
  m_launch = config.launch_report_goal
  scale = m_launch / config.clients_per_round
  launch = dataclasses.replace(
      config, noise_multiplier=config.noise_multiplier * scale,
      clients_per_round=m_launch,
      clipped_count_stddev=(None if config.clipped_count_stddev is None else
                            config.clipped_count_stddev * scale))
  launch_rounds = config.launch_rounds or rounds
  population_min_sep = accounting.max_min_separation(
      config.launch_population, m_launch)
  min_sep = min(population_min_sep, launch_rounds - 1)
  report = registry.get(config.aggregator).privacy(launch, launch_rounds,
                                                   None, min_sep)
  return _privacy_dict(report, report_goal=m_launch,
                       population=config.launch_population,
                       population_min_separation=population_min_sep)


def privacy_spent(config: TrainConfig, rounds: int,
                  log: participation.ParticipationLog,
                  sampler: Optional[participation.Sampler] = None
                  ) -> Optional[Dict]:
  """rho-zCDP and epsilon of `rounds` rounds with the observed participation.

  MaxP and MinS are those of the run's own participation log (MinS: rounds
  strictly between two participations; no client took part twice: MaxP 1).
  Beside it: `planned`, the privacy the participation model guarantees
  (min_sep_groups), and `launch_equivalent` (see
  `launch_equivalent_privacy`).
  """
  max_p = max(1, log.max_participation)
  min_sep = log.min_separation if log.min_separation >= 0 else rounds - 1
  mechanism = registry.get(config.aggregator)
  report = mechanism.privacy(config, rounds, max_p, min(min_sep, rounds - 1))
  if report is None:
    return None
  out = _privacy_dict(report, observed_max_participation=max_p,
                      observed_min_separation=log.min_separation,
                      planned=None)
  planned = sampler.planned(rounds) if sampler is not None else None
  if planned is not None:
    out['planned'] = _privacy_dict(
        mechanism.privacy(config, rounds, planned['max_participation'],
                          min(planned['min_separation'], rounds - 1)),
        guaranteed_min_separation=planned['min_separation'])
  out['launch_equivalent'] = launch_equivalent_privacy(config, rounds)
  return out


def _git_commit() -> Optional[str]:
  """The project's commit (with '+dirty' for local changes), if known."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  try:
    commit = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=root,
                            capture_output=True, text=True, timeout=10,
                            check=True).stdout.strip()
    dirty = subprocess.run(['git', 'status', '--porcelain',
                            '--untracked-files=no'], cwd=root,
                           capture_output=True, text=True, timeout=10,
                           check=True).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return None
  return commit + ('+dirty' if dirty else '')


def provenance() -> Dict[str, Any]:
  """Where and with what a run (or a resumption of it) was started."""
  import importlib.metadata  # pylint: disable=g-import-not-at-top
  versions = {}
  for package in ('tensorflow', 'tensorflow-federated', 'tensorflow-privacy',
                  'dp-accounting', 'numpy', 'absl-py'):
    try:
      versions[package] = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
      versions[package] = None
  return dict(command=list(sys.argv), python=sys.version.split()[0],
              packages=versions, commit=_git_commit(),
              started=datetime.datetime.now(datetime.timezone.utc).isoformat(
                  timespec='seconds'))


def check_memory(config: TrainConfig):
  """Refuses a model that cannot fit this machine, before building it."""
  estimate = config_lib.estimate_memory_bytes(config)
  try:
    total = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
  except (ValueError, OSError):
    return
  if estimate > total:
    params = models.count_parameters(
        config.vocab_size, latent_size=config.latent_size,
        embedding_size=config.embedding_size,
        shared_embedding=config.shared_embedding)
    raise ValueError(
        f'--vocab_size={config.vocab_size}, --latent_size='
        f'{config.latent_size}, --embedding_size={config.embedding_size}: '
        f'the model has {params:,} parameters ({4 * params / 2**30:.1f} GiB '
        f'a copy) and a run needs about {estimate / 2**30:.0f} GiB; this '
        f'machine has {total / 2**30:.0f} GiB. Choose a smaller model.')


def _short(value: float) -> str:
  """A loss for the progress line: 4 decimals, or 4 digits when huge."""
  return f'{value:.4f}' if abs(value) < 1e4 else f'{value:.4g}'


def _round_row(config, result: loop.RoundResult, clip_in_force):
  """The metrics.csv row of one round; returns (row, clip for next round)."""
  flat: Dict[str, float] = {}
  _flatten('', result.metrics, flat)
  train_metrics = result.metrics['client_work']['train']
  row: Dict[str, Any] = {
      'round': result.round_num + 1,
      'train_loss': float(train_metrics['loss']),
      'train_in_vocab_accuracy': float(train_metrics['in_vocab_accuracy']),
      'server_update_norm': result.update_norm,
      'round_seconds': result.seconds,
      'nonfinite_clients': divergence.nonfinite_clients(
          len(result.cohort), train_metrics.get('num_clients')),
      'server_update_rejected': flat.get('finalizer/update_non_finite'),
  }
  for key, value in flat.items():
    if key.startswith('aggregator/'):
      row[key.replace('/', '_')] = value
    if key.endswith('dp_query_metrics/current_clip') or key.endswith(
        'dp_query_metrics/tree_agg_dpftrl_clip'):
      # TFF reports the clip in force after the round (for the next one).
      row['clip_norm_in_force'] = clip_in_force
      clip_in_force = value
    if key.endswith('dp_query_metrics/estimate_clip'):
      row['clip_norm_estimate'] = value
    for name in ('bits_per_parameter', 'rounding_retries',
                 'rounding_failures', 'integer_sum_bound', 'wraparounds',
                 'decode_error_l2'):
      if key.endswith('/' + name):
        row['secagg_' + name] = value
  if 'clip_norm_in_force' in row:
    row['clip_norm_next_round'] = clip_in_force
  if result.participation is not None:
    row.update(result.participation.as_row())
  return row, clip_in_force


def _changed_learning_rates(config: TrainConfig,
                            previous: Optional[Dict]) -> Dict[str, List]:
  """{field: [old, new]} of the learning rates a resumed run changes."""
  if not previous:
    return {}
  return {f: [previous.get(f), getattr(config, f)]
          for f in config_lib.LEARNING_RATE_FIELDS
          if previous.get(f) is not None and
          previous.get(f) != getattr(config, f)}


def _set_changed_learning_rates(process, state, config: TrainConfig,
                                previous: Optional[Dict], start_round: int,
                                print_fn):
  """The checkpointed state with the learning rates of `config`.

  TFF keeps the optimizers' hyperparameters in the server state, so a
  checkpoint restores the old ones; with --allow_changed_learning_rates
  (checked by `train`) the new ones are set through the process's
  `set_hparams`.
  """
  changed = _changed_learning_rates(config, previous)
  if not changed:
    return state
  hparams = process.get_hparams(state)
  hparams['client_work']['learning_rate'] = config.client_lr
  hparams['finalizer']['learning_rate'] = config.server_lr
  hparams['finalizer']['momentum'] = config.server_momentum
  text = ', '.join(f'--{k} {old:g} -> {new:g}'
                   for k, (old, new) in changed.items())
  print_fn(f'Changed learning rates from round {start_round + 1} on: '
           f'{text} (--allow_changed_learning_rates; recorded in '
           f'{HPARAMS_FILE}).')
  return process.set_hparams(state, hparams)


def plan_blt(config: TrainConfig, num_clients: int):
  """Fills in the participation a dp_ftrl_blt run's BLT is optimized for.

  Unset --blt_min_separation becomes the participation model's guaranteed
  MinS (min_sep_groups; its MaxP too when --blt_max_participation is unset),
  otherwise the best separation N clients allow at report goal m,
  floor(N / m) - 1, at most T - 1. Deterministic, so a resumed run plans
  the same BLT.
  """
  if config.aggregator != 'dp_ftrl_blt' or config.blt_params is not None:
    return
  if config.blt_min_separation is not None:
    return
  # The plan does not depend on the seed, which may still be unset here
  # (it is drawn later, once the run directory is known).
  planned = dataclasses.replace(
      config, seed=0 if config.seed is None else config.seed).build_sampler(
          num_clients).planned(config.total_rounds)
  if planned is not None:
    min_sep = planned['min_separation']
    if config.blt_max_participation is None:
      config.blt_max_participation = planned['max_participation']
  else:
    min_sep = accounting.max_min_separation(num_clients,
                                            config.clients_per_round)
  config.blt_min_separation = int(min(min_sep, config.total_rounds - 1))


def _blt_file(run_dir) -> str:
  return run_dir.file('blt.json')


def _pin_saved_blt(config: TrainConfig, run_dir):
  """A resumed dp_ftrl_blt run keeps the BLT it started with (blt.json).

  An optimized BLT is taken from the file rather than optimized again (the
  same up to floating point); a given --blt_params must equal it.
  """
  path = _blt_file(run_dir)
  if config.aggregator != 'dp_ftrl_blt' or not os.path.exists(path):
    return
  with open(path) as f:
    saved = json.load(f)
  saved_blt = accounting.BLT.from_dict(
      {k: saved[k] for k in ('buf_decay', 'output_scale')}, source=path)
  if config.blt_params is None:
    registry.pin_blt(config, saved_blt)
    return
  blt = accounting.BLT.load(config.blt_params)
  if blt != saved_blt:
    raise run_directory.RunDirectoryError(
        f'{path} holds the BLT {saved_blt} this run started with, but '
        f'--blt_params={config.blt_params} is {blt}; resume with the same '
        f'BLT.')


def _record_blt(config: TrainConfig, run_dir, print_fn):
  """Writes the run's BLT and what it was optimized for to blt.json."""
  path = _blt_file(run_dir)
  optimized, blt = registry.optimized_blt(config)
  if not os.path.exists(path):
    value = (optimized.as_dict() if optimized is not None else
             dict(blt.as_dict(), source=os.path.abspath(config.blt_params)))
    run_directory.write_json_atomic(path, value)
  print_fn(f'BLT noise: {blt} (in {path}).')


def train(config: TrainConfig, *, train_data, eval_data, vocab: List[str],
          output_dir: str, data_description: Optional[Dict] = None,
          stop_after_round: Optional[int] = None,
          print_fn: Callable[[str], None] = print,
          progress_stream=None) -> Dict[str, Any]:
  """Runs, resumes or (when finished) reports a federated training run.

  The run's identity is `config` (up to `config_lib.resumable_fields()`)
  plus `data_description`: a directory holding another run, or this run on
  other data, is refused. A finished run is not run again: its summary is
  returned (with `already_finished`). `total_rounds` may be raised to extend
  a run, never lowered below the rounds it has run (its privacy is spent).

  Args:
    config: hyperparameters.
    train_data: tff ClientData of the training split.
    eval_data: tff ClientData of the evaluation split.
    vocab: the vocabulary (len == config.vocab_size or fewer words).
    output_dir: the run directory (`run_directory.RunDirectory`).
    data_description: what identifies the data (source, database, vocabulary
      fingerprint); written to hparams.json under "data".
    stop_after_round: stop (as if killed) once this many rounds are done;
      for tests of resumption.
    print_fn: where messages go; progress lines go to `progress_stream`
      (a terminal gets one line redrawn in place), or to `print_fn` when
      that is not the default `print`.
    progress_stream: stream of the progress line (default stdout).
  """
  config.validate(num_train_clients=len(train_data.client_ids))
  # Before anything else: a worker that is down fails the run now.
  workers_lib.check_reachable(workers_lib.parse_workers(config.workers))
  plan_blt(config, len(train_data.client_ids))
  check_memory(config)
  if config.initial_weights is not None:
    # Part of the run's identity: other weights are another run.
    data_description = dict(
        data_description or {}, initial_weights=pretrained.check_compatible(
            config.initial_weights, vocab=vocab, config=config))
  run_dir = run_directory.RunDirectory(output_dir)
  with run_dir.lock():
    previous = run_dir.previous_hparams()
    summary = None
    if previous is not None:
      if config.seed is None:
        config.seed = previous.get('seed')
      current = dict(dataclasses.asdict(config),
                     data=data_description or {})
      resumable = config_lib.resumable_fields()
      if config.allow_changed_learning_rates:
        resumable += config_lib.LEARNING_RATE_FIELDS
      diffs = run_directory.identity_differences(previous, current,
                                                 resumable)
      if diffs:
        raise run_directory.RunDirectoryError(
            f'Output directory {output_dir} holds another run '
            f'({"; ".join(diffs)}); resume it with the same flags and data, '
            f'or choose another --experiment_name.')
      summary = run_dir.read_summary()
      rounds_done = max(run_dir.latest_checkpoint_round(),
                        (summary or {}).get('rounds', 0))
      if config.total_rounds < rounds_done:
        raise run_directory.RunDirectoryError(
            f'--total_rounds={config.total_rounds} is below the '
            f'{rounds_done} rounds the run in {output_dir} has already run: '
            f'its model and its privacy spent are those of {rounds_done} '
            f'rounds. Use --total_rounds >= {rounds_done}, or another '
            f'--experiment_name.')
      if (summary and summary.get('final_eval') and
          summary.get('rounds') == config.total_rounds):
        print_fn(f'{output_dir} is a finished run of {config.total_rounds} '
                 f'rounds; nothing to do (raise --total_rounds to extend '
                 f'it).')
        return dict(summary, already_finished=True)
    if config.seed is None:
      config.seed = config_lib.draw_seed()
    return _train_locked(config, run_dir, previous, train_data=train_data,
                         eval_data=eval_data, vocab=vocab,
                         data_description=data_description,
                         stop_after_round=stop_after_round,
                         print_fn=print_fn, progress_stream=progress_stream)


def _train_locked(config, run_dir, previous, *, train_data, eval_data, vocab,
                  data_description, stop_after_round, print_fn,
                  progress_stream):
  """`train` once the directory is locked and the run's identity checked."""
  preprocess = data.build_preprocess_fn(
      vocab, sequence_length=config.sequence_length,
      max_elements_per_client=config.max_elements_per_client,
      batch_size=config.client_batch_size,
      num_epochs=config.client_epochs_per_round,
      shuffle_buffer_size=config.shuffle_buffer_size)
  eval_dataset = data.build_eval_dataset(
      eval_data, vocab, num_examples=config.num_eval_examples,
      sequence_length=config.sequence_length)
  _pin_saved_blt(config, run_dir)
  process = build_learning_process(config)
  # Built after TFF has traced its graphs: Keras invalidates models made
  # before a tf.compat.v1 graph builds layers.
  eval_model = build_keras_model(config)
  if config.initial_weights is not None:
    pretrained.assign(eval_model,
                      pretrained.load_weights(config.initial_weights),
                      config.initial_weights)
  state = initial_state(process, config, eval_model)
  evaluator = Evaluator(eval_model, eval_dataset, config.vocab_size)
  start_round = 0
  if previous is not None:
    leaves, start_round = run_dir.load_checkpoint(tree.flatten(state),
                                                  warn=print_fn)
    if leaves is not None:
      state = tree.unflatten_as(state, leaves)
      print_fn(f'Resuming {run_dir.path} from round {start_round}.')
      state = _set_changed_learning_rates(process, state, config, previous,
                                          start_round, print_fn)
  # TFF's workers build the cohort's datasets from their client round keys.
  by_client_id = taking_client_ids(process, train_data, preprocess)
  # Locally, the state stays in TFF's worker between rounds
  # (tff_compat.resident); with --workers, rounds run across them.
  runner = build_runner(
      config, by_client_id or process, train_data=train_data,
      by_client_id=by_client_id is not None,
      database=(data_description or {}).get('database'), print_fn=print_fn)
  hparams = dict(dataclasses.asdict(config), data=data_description or {})
  hparams[run_directory.PROVENANCE_KEY] = (
      (previous or {}).get(run_directory.PROVENANCE_KEY, []) +
      [dict(provenance(), resumed_from_round=start_round,
            changed_learning_rates=_changed_learning_rates(config,
                                                           previous))])
  run_dir.claim(hparams)   # The run has started: the directory is its own.
  if config.aggregator == 'dp_ftrl_blt':
    _record_blt(config, run_dir, print_fn)

  client_ids = list(train_data.client_ids)
  sampler = config.build_sampler(len(client_ids))
  log = participation.ParticipationLog(len(client_ids))
  for r in range(start_round):   # Replayed: stateful models need it.
    log.record(r, sampler.sample(r))
  writer = run_directory.MetricsWriter(run_dir, start_round)

  shuffle = getattr(preprocess, 'shuffles', False)

  def client_data_fn(round_num, cohort):
    seed = participation.round_seed(config.seed, round_num) if shuffle else 0
    keys = [data.client_round_key(seed, c) for c in cohort]
    if by_client_id is not None:
      return keys
    return [data.build_client_dataset(train_data, preprocess, k)
            for k in keys]

  clip_in_force = registry.get(config.aggregator).initial_clip(config)
  if writer.rows and writer.rows[-1].get('clip_norm_next_round'):
    clip_in_force = float(writer.rows[-1]['clip_norm_next_round'])
  last_eval: Dict[str, float] = {}
  watch = divergence.ExplosionWatch(
      lambda message: print_fn(f'warning: {message}'),
      divergence.first_loss(writer.rows))
  last_done = start_round
  end_round = config.total_rounds
  if stop_after_round is not None:
    end_round = min(end_round, stop_after_round)
  bar = progress.Progress(
      config.total_rounds, start_round, stream=progress_stream,
      print_fn=None if print_fn is print else print_fn)
  started = datetime.datetime.now()

  def on_round(new_state, result: loop.RoundResult):
    nonlocal clip_in_force, last_eval, last_done
    row, clip_in_force = _round_row(config, result, clip_in_force)
    done = result.round_num + 1
    try:
      divergence.check_round(
          done, train_loss=row['train_loss'],
          update_norm=result.update_norm, cohort_size=len(result.cohort),
          nonfinite=row['nonfinite_clients'],
          server_rejected=row['server_update_rejected'],
          checkpoint_round=run_dir.latest_checkpoint_round())
    except divergence.DivergenceError:
      writer.write(row)   # The diverged round stays visible (as nan).
      raise
    watch.update(done, row['train_loss'])
    evaluated = (done % config.rounds_per_eval == 0 or
                 done == config.total_rounds)
    if evaluated:
      process.get_model_weights(runner.materialize(new_state)
                               ).assign_weights_to(eval_model)
      last_eval = evaluator()
      row['eval_loss'] = last_eval['loss']
      row['eval_in_vocab_accuracy'] = last_eval['in_vocab_accuracy']
    writer.write(row)
    if done % config.rounds_per_checkpoint == 0 or done == end_round:
      leaves = tree.flatten(runner.materialize(new_state))
      divergence.check_state(leaves, done)
      run_dir.save_checkpoint(leaves, done)
      writer.plot()
    last_done = done
    eval_text = (f' eval_acc {row["eval_in_vocab_accuracy"]:.4f}'
                 if evaluated else '')
    bar.update(done, result.seconds,
               f'loss {_short(row["train_loss"])} '
               f'acc {row["train_in_vocab_accuracy"]:.4f}{eval_text}',
               force=evaluated)

  def stop_note():
    checkpoint = run_dir.latest_checkpoint_round()
    kept = (f'it keeps its last checkpoint (round {checkpoint})' if
            checkpoint else 'it has no checkpoint yet')
    return (f'the run stopped after round {last_done} of '
            f'{config.total_rounds}; {kept}: re-run the same command to '
            f'resume.')

  runtime.set_stop_note(stop_note)
  try:
    state = loop.run_rounds(
        runner=runner, sampler=sampler, client_ids=client_ids, log=log,
        client_data_fn=client_data_fn, state=state, start_round=start_round,
        end_round=end_round, on_round=on_round)
  except KeyboardInterrupt:
    raise KeyboardInterrupt(stop_note()) from None
  except workers_lib.WorkerError as e:
    done = int(writer.rows[-1]['round']) if writer.rows else start_round
    checkpoint = run_dir.latest_checkpoint_round()
    kept = (f'it keeps its last checkpoint (round {checkpoint})' if checkpoint
            else 'it has no checkpoint yet')
    raise workers_lib.WorkerError(
        f'{e} The run stopped after round {done}; {kept}: start the worker '
        f'again (or leave it out of --workers) and re-run the same command '
        f'to resume, or pass --on_worker_failure=continue to go on without '
        f'it.', e.workers) from None
  finally:
    runtime.set_stop_note(None)
    bar.close()
  weights = process.get_model_weights(runner.materialize(state)).trainable
  run_dir.write_final_weights(weights)
  summary = dict(rounds=end_round, total_rounds=config.total_rounds,
                 final_eval=last_eval,
                 unigram_baseline_accuracy=evaluator.unigram_baseline(),
                 privacy=privacy_spent(config, end_round, log, sampler),
                 participation=dict(
                     sampler.describe(),
                     observed_max_participation=log.max_participation,
                     observed_min_separation=log.min_separation,
                     participations_histogram=log.histogram().tolist()),
                 seconds=(datetime.datetime.now() - started).total_seconds())
  run_dir.write_summary(summary)
  run_directory.write_text_atomic(
      run_dir.file(privacy_report.FILE_NAME),
      privacy_report.for_run(summary, config, run_dir.path))
  logging.info('Summary: %s', summary)
  return summary
