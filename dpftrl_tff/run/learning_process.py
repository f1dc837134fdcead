"""Model and mechanism to a TFF learning process (paper Algorithm 1's
FedAvg with a DP model-update aggregation), its initial state, and what runs
its rounds: on this machine or across TFF workers."""

from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff import models
from dpftrl_tff import runtime
from dpftrl_tff import tff_compat
from dpftrl_tff.aggregators import registry
from dpftrl_tff.data import stackoverflow
from dpftrl_tff.empirical import canaries as canaries_lib
from dpftrl_tff.remote import workers as workers_lib
from dpftrl_tff.run import config as config_lib
from dpftrl_tff.run import lm_model
from dpftrl_tff.run import metrics as lm_metrics
from dpftrl_tff.tff_compat import resident

TrainConfig = config_lib.TrainConfig


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
  run's actual initial model comes from `initial_state`. Its forward pass
  computes the output layer at non-pad targets only (`lm_model`).
  """
  def model_fn():
    return lm_model.from_keras_lm(
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
  tff_compat.set_execution_context(
      secure_sums=config.secagg_settings().secagg)


def taking_client_ids(process, train_data, preprocess, mark=None):
  """`process` with rounds given client ids instead of datasets, or None.

  TFF's worker then builds each client's dataset itself
  (`stackoverflow.build_client_dataset_computation`, with `mark`); None when
  `train_data` cannot build a dataset from an id tensor.
  """
  client_datasets = stackoverflow.build_client_dataset_computation(train_data,
                                                          preprocess, mark)
  if client_datasets is None:
    return None
  return tff.simulation.compose_dataset_computation_with_learning_process(
      client_datasets, process)


def build_runner(config: TrainConfig, process, *, train_data,
                 by_client_id: bool, database: Optional[str],
                 print_fn: Callable[[str], None] = print, statistic=None):
  """What runs the rounds: on this machine, or across `config.workers`.

  On this machine, `resident.ResidentProcess` (the server state stays in
  TFF's local worker), computing `statistic` of every round when given
  (the canaries' cosines; not with workers, which the config refuses). With workers, `remote.rounds.DistributedProcess`
  over TFF's mergeable context, after checking that every worker reads the
  training database at `database` as this machine does.
  """
  if not config.workers:
    return resident.ResidentProcess(process, statistic=statistic)
  # The remote runner (gRPC) only with --workers.
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
      secure_sums=config.secagg_settings().secagg)
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


def build_learning_process(config: TrainConfig, canaries=None):
  """TFF FedAvg with the configured aggregator.

  Start it from `initial_state(process, config)`, not `process.initialize()`
  (whose model is all zeros, see `build_model_fn`). Clients iterate their
  data with a dataset iterator rather than `DatasetReduce`, which
  re-instantiates (and re-optimizes) the training step for every client in
  every round. The execution context is set by `prepare_execution`.

  Args:
    config: the run's settings.
    canaries: a `canaries.Canaries` (--canaries): FedAvg composed from
      TFF's parts with the canary client work (`canaries.build_client_work`)
      in place of the plain one; None: TFF's unweighted FedAvg itself.
  """
  prepare_execution(config)
  model_fn = build_model_fn(config)
  client_optimizer = tff.learning.optimizers.build_sgdm(
      learning_rate=config.client_lr)
  server_optimizer = tff.learning.optimizers.build_sgdm(
      learning_rate=config.server_lr, momentum=config.server_momentum)
  aggregator = build_aggregator(config, model_fn)
  if canaries is None:
    return tff.learning.algorithms.build_unweighted_fed_avg(
        model_fn, client_optimizer_fn=client_optimizer,
        server_optimizer_fn=server_optimizer, model_aggregator=aggregator,
        loop_implementation=tff.learning.LoopImplementation.DATASET_ITERATOR)
  # The same composition as tff.learning.algorithms' FedAvg.
  @tff.tensorflow.computation
  def initial_weights():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  weights_type = initial_weights.type_signature.result
  return tff.learning.templates.compose_learning_process(
      initial_weights,
      tff.learning.templates.build_broadcast_process(weights_type),
      canaries_lib.build_client_work(model_fn, client_optimizer, canaries),
      tff.aggregators.as_weighted_aggregator(aggregator).create(
          weights_type.trainable, tff.TensorType(np.float32)),
      tff.learning.templates.build_apply_optimizer_finalizer(
          server_optimizer, weights_type))


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


def check_memory(config: TrainConfig):
  """Refuses a model that cannot fit this machine, before building it."""
  estimate = config_lib.estimate_memory_bytes(config)
  total = runtime.physical_memory_bytes()
  if total is not None and estimate > total:
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
