"""Federated training loop: DP-FTRL (or plain FedAvg) on next-word prediction.

Builds TFF's unweighted FedAvg learning process with client SGD, server SGD
with momentum and a model-update aggregator (plain mean, or DP-FTRL tree
aggregation normalized by the report goal), and runs it round by round with:
metrics per round to `metrics.csv` and TensorBoard, hyperparameters in
`hparams.json`, a progress line with ETA, checkpoints every
`rounds_per_checkpoint` rounds, and resumption from the latest checkpoint.
A resumed run ends with the same model as an uninterrupted one: the cohort of
round t is a function of (seed, t), the model initializer is seeded, and the
aggregator state (tree noise generator included) is checkpointed.
"""

import asyncio
import csv
import dataclasses
import json
import math
import os
import time
from typing import Any, Callable, Dict, List, Optional

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff import accounting
from dpftrl_tff import checks
from dpftrl_tff import data
from dpftrl_tff import fast_serialization
from dpftrl_tff import metrics as lm_metrics
from dpftrl_tff import models
from dpftrl_tff import participation
from dpftrl_tff import resident
from dpftrl_tff import runtime
from dpftrl_tff.aggregators import adaptive
from dpftrl_tff.aggregators import dp_ftrl
from dpftrl_tff.aggregators import secagg

HPARAMS_FILE = 'hparams.json'
METRICS_FILE = 'metrics.csv'
SUMMARY_FILE = 'summary.json'
FINAL_WEIGHTS_FILE = 'final_weights.npz'
# Hyperparameters that may change when a run is resumed (they do not change
# the trajectory of the rounds already done).
RESUMABLE_CHANGES = ('total_rounds', 'rounds_per_eval', 'rounds_per_checkpoint',
                     'num_eval_examples')


@dataclasses.dataclass
class TrainConfig:
  """Everything that defines a training run (written to hparams.json)."""
  total_rounds: int = 100
  clients_per_round: int = 100
  client_lr: float = 0.5
  server_lr: float = 1.0
  server_momentum: float = 0.9
  client_batch_size: int = 16
  client_epochs_per_round: int = 1
  max_elements_per_client: int = 256
  sequence_length: int = 20
  vocab_size: int = 10000
  latent_size: int = 670
  embedding_size: int = 96
  shared_embedding: bool = False
  aggregator: str = 'dp_ftrl'
  noise_multiplier: float = 0.0
  clip_norm: float = 1.0
  noise_seed: Optional[int] = None
  # Adaptive clipping (aggregator dp_ftrl_adaptive, Algorithm 1).
  initial_clip_norm: float = 0.1
  target_unclipped_quantile: float = 0.5
  clip_learning_rate: float = 0.2
  clipped_count_stddev: Optional[float] = None
  restart_warmup: int = 128
  restart_frequency: int = 1024
  # SecAgg-style discretization (Algorithm 2) of the client updates.
  secagg: bool = False
  secagg_scale: float = 1024.0
  secagg_debug: bool = False
  seed: Optional[int] = None
  rounds_per_eval: int = 10
  num_eval_examples: int = 10000
  rounds_per_checkpoint: int = 10
  debug_measurements: bool = True

  def adaptive_arguments(self) -> Dict[str, Any]:
    """Algorithm 1's arguments, as the adaptive factory takes them."""
    return dict(initial_clip_norm=self.initial_clip_norm,
                target_unclipped_quantile=self.target_unclipped_quantile,
                clip_learning_rate=self.clip_learning_rate,
                clipped_count_stddev=self.clipped_count_stddev,
                restart_warmup=self.restart_warmup,
                restart_frequency=self.restart_frequency)

  def validate(self, num_train_clients: Optional[int] = None):
    """Raises ValueError naming the flag for any bad value."""
    checks.check_int(self.total_rounds, '--total_rounds', minimum=1)
    checks.check_int(self.clients_per_round, '--clients_per_round', minimum=1)
    if num_train_clients is not None and (self.clients_per_round >
                                          num_train_clients):
      raise ValueError(
          f'--clients_per_round={self.clients_per_round} is larger than the '
          f'{num_train_clients} clients of the training split.')
    checks.check_float(self.client_lr, '--client_lr', minimum=0,
                       strict_minimum=True)
    checks.check_float(self.server_lr, '--server_lr', minimum=0,
                       strict_minimum=True)
    checks.check_float(self.server_momentum, '--server_momentum', minimum=0,
                       maximum=1, strict_maximum=True)
    checks.check_int(self.client_batch_size, '--client_batch_size', minimum=1)
    checks.check_int(self.client_epochs_per_round, '--client_epochs_per_round',
                     minimum=1)
    checks.check_int(self.max_elements_per_client,
                     '--max_elements_per_client', minimum=1)
    checks.check_int(self.sequence_length, '--sequence_length', minimum=1)
    checks.check_int(self.vocab_size, '--vocab_size', minimum=1)
    checks.check_int(self.latent_size, '--latent_size', minimum=1)
    checks.check_int(self.embedding_size, '--embedding_size', minimum=1)
    if self.aggregator not in dp_ftrl.AGGREGATORS:
      raise ValueError(f'--aggregator={self.aggregator!r} is unknown; '
                       f'allowed: {", ".join(dp_ftrl.AGGREGATORS)}.')
    if self.secagg:
      if self.aggregator == 'dp_ftrl_adaptive':
        raise ValueError('--secagg works with --aggregator=dp_ftrl (fixed '
                         'clip) or none, not dp_ftrl_adaptive.')
      checks.check_positive(self.secagg_scale, '--secagg_scale')
      checks.check_positive(self.clip_norm, '--clip_norm')
    if self.aggregator == 'dp_ftrl':
      dp_ftrl.validate_dp_arguments(noise_multiplier=self.noise_multiplier,
                                    clip_norm=self.clip_norm,
                                    clients_per_round=self.clients_per_round)
    if self.aggregator == 'dp_ftrl_adaptive':
      dp_ftrl.validate_dp_arguments(noise_multiplier=self.noise_multiplier,
                                    clip_norm=self.initial_clip_norm,
                                    clients_per_round=self.clients_per_round)
      adaptive.validate_adaptive_arguments(
          noise_multiplier=self.noise_multiplier,
          clients_per_round=self.clients_per_round,
          **self.adaptive_arguments())
    checks.check_int(self.rounds_per_eval, '--rounds_per_eval', minimum=1)
    checks.check_int(self.num_eval_examples, '--num_eval_examples',
                     minimum=1)
    checks.check_int(self.rounds_per_checkpoint, '--rounds_per_checkpoint',
                     minimum=1)


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
  """The model-update aggregation factory named by config.aggregator."""
  record_specs = tff.types.type_to_tf_tensor_specs(
      tff.learning.models.weights_type_from_model(model_fn).trainable)
  secagg_factory = None
  noise_multiplier = config.noise_multiplier
  if config.secagg:
    secagg_factory = secagg.SecAggDiscretizationFactory(
        clip_norm=config.clip_norm, scale=config.secagg_scale,
        report_goal=config.clients_per_round, debug=config.secagg_debug)
    params = secagg_factory.params_for(
        sum(int(np.prod(s.shape)) for s in tf.nest.flatten(record_specs)))
    noise_multiplier = secagg.noise_multiplier_for_secagg(
        config.noise_multiplier, params)
    logging.info('SecAgg: d=%d padded to %d, C_inf=%d, modulus %d (%d bits), '
                 'C_inflated=%.6g; tree noise multiplier %.6g on C.',
                 params.dim, params.padded_dim, params.linf_bound,
                 params.modulus, params.bits_per_parameter,
                 params.inflated_clip_norm, noise_multiplier)
  if config.aggregator == 'none':
    if secagg_factory is not None:
      factory = tff.aggregators.UnweightedMeanFactory(
          value_sum_factory=secagg_factory)
    else:
      factory = tff.aggregators.UnweightedMeanFactory()
  elif config.aggregator == 'dp_ftrl_adaptive':
    factory = adaptive.build_dp_ftrl_adaptive_factory(
        noise_multiplier=config.noise_multiplier,
        clients_per_round=config.clients_per_round,
        record_specs=record_specs, noise_seed=config.noise_seed,
        **config.adaptive_arguments())
  elif config.aggregator == 'dp_ftrl':
    factory = dp_ftrl.build_dp_ftrl_factory(
        noise_multiplier=noise_multiplier,
        clients_per_round=config.clients_per_round,
        clip_norm=config.clip_norm, record_specs=record_specs,
        noise_seed=config.noise_seed,
        record_aggregation_factory=secagg_factory)
  else:
    raise ValueError(f'--aggregator={config.aggregator!r} is unknown.')
  if config.debug_measurements:
    factory = tff.learning.add_debug_measurements(factory)
  return factory


def prepare_execution(config: TrainConfig):
  """TFF's runtime patches, and the execution context `config` needs.

  With SecAgg the context is TFF's test context, the only one that runs
  secure-sum intrinsics in simulation (as plain sums mod M).
  """
  fast_serialization.install()
  runtime.patch_worker_launch()
  if config.secagg:
    tff.backends.test.set_sync_test_cpp_execution_context()


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


def _format_seconds(seconds: float) -> str:
  seconds = int(round(seconds))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f'{h}h{m:02d}m{s:02d}s' if h else f'{m}m{s:02d}s'


class _MetricsWriter:
  """Appends one row per round to metrics.csv and TensorBoard."""

  def __init__(self, output_dir: str, resume_round: int):
    self.path = os.path.join(output_dir, METRICS_FILE)
    self.rows: List[Dict[str, Any]] = []
    if os.path.exists(self.path):
      with open(self.path, newline='') as f:
        self.rows = [r for r in csv.DictReader(f)
                     if int(r['round']) <= resume_round]
    self.tb = tf.summary.create_file_writer(
        os.path.join(output_dir, 'tensorboard'))

  def write(self, row: Dict[str, Any]):
    self.rows.append(row)
    fields = []
    for r in self.rows:
      for k in r:
        if k not in fields:
          fields.append(k)
    tmp = self.path + '.tmp'
    with open(tmp, 'w', newline='') as f:
      writer = csv.DictWriter(f, fieldnames=fields, restval='')
      writer.writeheader()
      writer.writerows(self.rows)
    os.replace(tmp, self.path)
    with self.tb.as_default(step=int(row['round'])):
      for k, v in row.items():
        if k != 'round' and isinstance(v, (int, float)) and math.isfinite(v):
          tf.summary.scalar(k, v)
    self.tb.flush()


def prepare_output_dir(output_dir: str, config: TrainConfig) -> bool:
  """Creates the run directory; returns True when resuming an existing run.

  Refuses a non-empty directory that is not a run with the same
  hyperparameters (up to RESUMABLE_CHANGES).
  """
  hparams_path = os.path.join(output_dir, HPARAMS_FILE)
  if os.path.isdir(output_dir) and os.listdir(output_dir):
    if not os.path.isfile(hparams_path):
      raise ValueError(
          f'Output directory {output_dir} exists and is not a dpftrl_tff run; '
          f'choose another --experiment_name or --root_output_dir.')
    with open(hparams_path) as f:
      previous = json.load(f)
    current = dataclasses.asdict(config)
    if current.get('seed') is None:
      current['seed'] = previous.get('seed')
    diffs = sorted(k for k in set(previous) | set(current)
                   if k not in RESUMABLE_CHANGES and k != 'data' and
                   previous.get(k) != current.get(k))
    if diffs:
      detail = ', '.join(f'{k}: {previous.get(k)!r} -> {current.get(k)!r}'
                         for k in diffs)
      raise ValueError(
          f'Output directory {output_dir} holds another run ({detail}); '
          f'resume it with the same flags or choose another '
          f'--experiment_name.')
    config.seed = previous.get('seed')
    return True
  os.makedirs(output_dir, exist_ok=True)
  return False


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


def privacy_spent(config: TrainConfig, rounds: int,
                  log: participation.ParticipationLog) -> Optional[Dict]:
  """rho-zCDP and epsilon from the participation actually observed."""
  if config.aggregator == 'none' or config.noise_multiplier <= 0:
    return None
  max_p = max(1, log.max_participation)
  min_sep = log.min_separation if log.min_separation >= 0 else rounds
  restarts = []
  if config.aggregator == 'dp_ftrl_adaptive':
    restarts = accounting.paper_restart_rounds(
        rounds, warmup=config.restart_warmup,
        frequency=config.restart_frequency)
  report = accounting.compute_privacy(
      rounds=rounds, noise_multiplier=config.noise_multiplier,
      max_participation=max_p, min_separation=min(min_sep, rounds),
      restart_rounds=restarts)
  return dict(rounds=rounds, noise_multiplier=config.noise_multiplier,
              restart_rounds=restarts,
              observed_max_participation=max_p,
              observed_min_separation=log.min_separation,
              zcdp=report.zcdp, epsilon=report.epsilon, delta=report.delta)


def train(config: TrainConfig, *, train_data, eval_data, vocab: List[str],
          output_dir: str, data_description: Optional[Dict] = None,
          stop_after_round: Optional[int] = None,
          print_fn: Callable[[str], None] = print) -> Dict[str, Any]:
  """Runs (or resumes) federated training; returns the final summary.

  Args:
    config: hyperparameters.
    train_data: tff ClientData of the training split.
    eval_data: tff ClientData of the evaluation split.
    vocab: the vocabulary (len == config.vocab_size or fewer words).
    output_dir: run directory (created, or resumed when it holds this run).
    data_description: written to hparams.json under "data".
    stop_after_round: stop (as if killed) once this many rounds are done;
      for tests of resumption.
    print_fn: where progress lines go.
  """
  config.validate(num_train_clients=len(train_data.client_ids))
  resuming = prepare_output_dir(output_dir, config)
  if config.seed is None:
    config.seed = int(np.random.SeedSequence().generate_state(1)[0] >> 1)
  hparams = dataclasses.asdict(config)
  hparams['data'] = data_description or {}
  with open(os.path.join(output_dir, HPARAMS_FILE), 'w') as f:
    json.dump(hparams, f, indent=2, sort_keys=True)

  preprocess = data.build_preprocess_fn(
      vocab, sequence_length=config.sequence_length,
      max_elements_per_client=config.max_elements_per_client,
      batch_size=config.client_batch_size,
      num_epochs=config.client_epochs_per_round)
  eval_dataset = data.build_eval_dataset(
      eval_data, vocab, num_examples=config.num_eval_examples,
      sequence_length=config.sequence_length)
  process = build_learning_process(config)
  # Built after TFF has traced its graphs: Keras invalidates models made
  # before a tf.compat.v1 graph builds layers.
  eval_model = build_keras_model(config)
  state = initial_state(process, config, eval_model)
  evaluator = Evaluator(eval_model, eval_dataset, config.vocab_size)
  checkpoints = tff.program.FileProgramStateManager(
      os.path.join(output_dir, 'checkpoints'), keep_total=3, keep_first=False)
  start_round = 0
  if resuming:
    loaded, version = asyncio.run(checkpoints.load_latest(state))
    if loaded is not None:
      state, start_round = loaded, int(version)
      print_fn(f'Resuming {output_dir} from round {start_round}.')
  sampler = participation.UniformSampler(train_data.client_ids,
                                         config.clients_per_round, config.seed)
  log = participation.ParticipationLog()
  for r in range(start_round):
    log.record(r, sampler.sample(r))
  writer = _MetricsWriter(output_dir, start_round)

  # TFF's worker builds the cohort's datasets from their client ids.
  by_client_id = taking_client_ids(process, train_data, preprocess)
  # The state stays in TFF's worker between rounds (resident.py).
  rounds = resident.ResidentProcess(by_client_id or process)
  # The clip norm used in the coming round (C_theta of Algorithm 1).
  clip_in_force = (config.initial_clip_norm
                   if config.aggregator == 'dp_ftrl_adaptive'
                   else config.clip_norm)
  if writer.rows and writer.rows[-1].get('clip_norm_next_round'):
    clip_in_force = float(writer.rows[-1]['clip_norm_next_round'])
  started = time.monotonic()
  last_eval: Dict[str, float] = {}
  end_round = config.total_rounds
  if stop_after_round is not None:
    end_round = min(end_round, stop_after_round)
  for round_num in range(start_round, end_round):
    round_start = time.monotonic()
    cohort = sampler.sample(round_num)
    log.record(round_num, cohort)
    if by_client_id is not None:
      client_data = list(cohort)
    else:
      client_data = [preprocess(train_data.create_tf_dataset_for_client(c))
                     for c in cohort]
    state, round_metrics, update_norm = rounds.next(state, client_data)
    round_seconds = time.monotonic() - round_start

    flat: Dict[str, float] = {}
    _flatten('', round_metrics, flat)
    train_metrics = round_metrics['client_work']['train']
    row: Dict[str, Any] = {
        'round': round_num + 1,
        'train_loss': float(train_metrics['loss']),
        'train_in_vocab_accuracy': float(
            train_metrics['in_vocab_accuracy']),
        'server_update_norm': update_norm,
        'round_seconds': round_seconds,
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
    done = round_num + 1
    if done % config.rounds_per_eval == 0 or done == config.total_rounds:
      process.get_model_weights(rounds.materialize(state)).assign_weights_to(
          eval_model)
      last_eval = evaluator()
      row['eval_loss'] = last_eval['loss']
      row['eval_in_vocab_accuracy'] = last_eval['in_vocab_accuracy']
    writer.write(row)
    if done % config.rounds_per_checkpoint == 0 or done == end_round:
      asyncio.run(checkpoints.save(rounds.materialize(state), done))
    elapsed = time.monotonic() - started
    per_round = elapsed / (done - start_round)
    eta = per_round * (config.total_rounds - done)
    eval_text = (f' eval_acc {row["eval_in_vocab_accuracy"]:.4f}'
                 if 'eval_in_vocab_accuracy' in row else '')
    print_fn(f'round {done}/{config.total_rounds} '
             f'loss {row["train_loss"]:.4f} '
             f'acc {row["train_in_vocab_accuracy"]:.4f}{eval_text} '
             f'{round_seconds:.1f}s/round ETA {_format_seconds(eta)}')

  rounds_done = end_round
  weights = process.get_model_weights(rounds.materialize(state)).trainable
  np.savez(os.path.join(output_dir, FINAL_WEIGHTS_FILE),
           *[np.asarray(w) for w in weights])
  summary = dict(rounds=rounds_done, total_rounds=config.total_rounds,
                 final_eval=last_eval,
                 unigram_baseline_accuracy=evaluator.unigram_baseline(),
                 privacy=privacy_spent(config, rounds_done, log),
                 seconds=time.monotonic() - started)
  with open(os.path.join(output_dir, SUMMARY_FILE), 'w') as f:
    json.dump(summary, f, indent=2, sort_keys=True)
  logging.info('Summary: %s', summary)
  return summary
