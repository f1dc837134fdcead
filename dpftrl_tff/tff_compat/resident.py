"""Keeps a TFF learning process's server state in TFF's worker between rounds.

TFF's synchronous execution context runs `process.next(state, client_data)`
by sending the whole server state from Python to the C++ worker and the new
state back, every round: the model, the server optimizer's momentum and, for
DP-FTRL, the tree aggregation state (the previous cumulative noise and one
model-size node per level of the tree, so log2(t) + 2 model copies at round
t). For the paper-size model (2.4M parameters, 9.6 MB) that is 40 to 80 MB
each way per round, copied several times on both sides; a real server keeps
its state in memory instead.

`ResidentProcess` does what a server does: the state stays a value inside the
worker. Each round sends only the clients' datasets, calls the process on the
worker's copy of the state, and brings back the round's metrics and the l2
norm of the model update (computed in the worker). The state comes to Python
only when asked (`materialize`: evaluation, checkpoints, the end of a run).
Every round computes exactly what `process.next` computes (a test compares
them bit for bit).

It drives TFF's executor interface (`create_value`, `create_struct`,
`create_call`, `create_selection`, `compute`) through the current synchronous
execution context's executor factory, as TFF's own `invoke` does; values are
disposed in the worker as soon as Python drops them. Under a context without
that interface it falls back to plain calls (state in Python).
"""

from typing import Any, Dict, Sequence, Tuple

import tensorflow as tf
import tensorflow_federated as tff
# pylint: disable=g-direct-tensorflow-import
from tensorflow_federated.python.core.impl.execution_contexts import (
    async_execution_context)
from tensorflow_federated.python.core.impl.types import type_conversions
# pylint: enable=g-direct-tensorflow-import

from dpftrl_tff import runtime


class ResidentStateLostError(RuntimeError):
  """The worker value behind a `ResidentState` no longer exists."""


class ResidentState:
  """A handle on a server state held in TFF's worker (see module doc)."""

  def __init__(self, value, executor, executor_id):
    self._value = value
    self._executor = executor
    self._executor_id = executor_id
    self._materialized = None

  @property
  def value(self):
    return self._value

  def belongs_to(self, executor) -> bool:
    return (executor is self._executor and
            getattr(executor, '_executor_id', None) == self._executor_id)

  def check_alive(self):
    if getattr(self._executor, '_executor_id', None) != self._executor_id:
      raise ResidentStateLostError(
          'The server state kept in the TFF worker was lost: TFF reset its '
          'executor (after an error in another computation, or a new '
          'execution context). Resume the run from its last checkpoint.')


def _leaves(structure) -> Sequence[tf.Tensor]:
  if isinstance(structure, tff.structure.Struct):
    return tff.structure.flatten(structure)
  return tf.nest.flatten(structure)


def _build_state_copy(state_type) -> tff.Computation:
  """A server state -> the same values as new tensors, in the worker.

  An aggregation state kept in the worker is otherwise a reference into
  the round's call, and keeps that call's arguments alive: every earlier
  round's client values (an audit at d = 2.4M: 70 MB a round, 12 GB after
  150 rounds). The copy cuts the chain; it changes no value. (A learning
  process's state is made by its own TF computations: flat without it.)
  """

  @tff.tensorflow.computation(state_type.member)
  def copy(state):
    return tf.nest.map_structure(tf.identity, state)

  return copy


def build_next_with_update_norm(process, statistic=None) -> tff.Computation:
  """(state, client_data) -> (new state, metrics, ||theta_new - theta||_2).

  The norm is over the trainable weights, in float64, on the server. With
  `statistic`, a TFF computation (old weights, new weights) -> value, the
  result has that value of the round as a fourth element.
  """
  state_type, data_type = process.next.type_signature.parameter
  get_weights = process.get_model_weights
  weights_type = get_weights.type_signature.result

  @tff.tensorflow.computation(weights_type, weights_type)
  def update_norm(old, new):
    squares = [tf.reduce_sum(tf.square(tf.cast(b, tf.float64) -
                                       tf.cast(a, tf.float64)))
               for a, b in zip(_leaves(old.trainable), _leaves(new.trainable))]
    return tf.sqrt(tf.add_n(squares) if squares else
                   tf.constant(0.0, tf.float64))

  @tff.federated_computation(state_type, data_type)
  def next_with_update_norm(state, client_data):
    output = process.next(state, client_data)
    old = tff.federated_map(get_weights, state)
    new = tff.federated_map(get_weights, output.state)
    norm = tff.federated_map(update_norm, (old, new))
    if statistic is None:
      return output.state, output.metrics, norm
    return (output.state, output.metrics, norm,
            tff.federated_map(statistic, (old, new)))

  return next_with_update_norm


def _quiet_disposal(executor):
  """Disposal of a value whose worker is gone (exit, reset) is a no-op.

  TFF disposes values from finalizers, also at interpreter exit, when the
  worker has already been stopped; the failed RPC printed tracebacks (and
  TFF's retry log) after every successful run. There is nothing left to free
  then: no RPC is made once `runtime.shutdown_workers` has run since the
  executor's last round, and a failed one is ignored.
  """
  executor._dpftrl_shutdowns = runtime.shutdown_count()  # pylint: disable=protected-access
  dispose = executor._dispose  # pylint: disable=protected-access
  if getattr(dispose, 'quiet', False):
    return

  def quiet(value_ref, executor_id):
    if runtime.shutdown_count() != getattr(executor, '_dpftrl_shutdowns', 0):
      return   # runtime.shutdown_workers stopped this executor's worker.
    try:
      dispose(value_ref, executor_id)
    except Exception:  # pylint: disable=broad-except
      pass

  quiet.quiet = True
  executor._dispose = quiet  # pylint: disable=protected-access


def _resident_context(context):
  """The async context inside `context` if it can keep values, else None."""
  async_context = getattr(context, '_async_context', None)
  runner = getattr(context, '_async_runner', None)
  if not isinstance(async_context,
                    async_execution_context.AsyncExecutionContext):
    return None
  if runner is None or not hasattr(runner, 'run_coro_and_return_result'):
    return None
  return async_context


class _Resident:
  """A (state, client data) -> (state, outputs...) computation run with the
  state kept in the worker; the outputs after the state come to Python."""

  def __init__(self, computation, *, context=None):
    self._next = computation
    self._state_type, self._data_type = self._next.type_signature.parameter
    self._result_type = self._next.type_signature.result
    self._names = [name for name, _ in
                   tff.structure.to_elements(self._next.type_signature.parameter)]
    self._context = context or tff.framework.get_context_stack().current
    self._async_context = _resident_context(self._context)
    self._compiled = None
    self._functions: Dict[int, Tuple[Any, Any]] = {}

  @property
  def keeps_state_in_worker(self) -> bool:
    return self._async_context is not None

  def _run(self, coroutine):
    return self._context._async_runner.run_coro_and_return_result(  # pylint: disable=protected-access
        coroutine)

  def _transform_args(self, value):
    transform = getattr(self._async_context, '_transform_args', None)
    return transform(value) if transform is not None else value

  def _transform_result(self, value):
    transform = getattr(self._async_context, '_transform_result', None)
    return transform(value) if transform is not None else value

  def _call(self, state, client_data: Sequence[Any]):
    """(new state, [outputs after the state as Python values])."""
    client_data = list(client_data)
    if not self.keeps_state_in_worker:
      new_state, *outputs = self._next(self.materialize(state), client_data)
      return new_state, outputs
    return self._run(self._call_async(state, client_data))

  def materialize(self, state):
    """The state as Python values (cached per handle)."""
    if not isinstance(state, ResidentState):
      return state
    if state._materialized is None:  # pylint: disable=protected-access
      state._materialized = self._run(self._materialize_async(state))  # pylint: disable=protected-access
    return state._materialized  # pylint: disable=protected-access

  async def _materialize_async(self, state: ResidentState):
    state.check_alive()
    value = await state.value.compute()
    return self._transform_result(
        type_conversions.type_to_py_container(value, self._state_type))

  async def _function(self, executor):
    key = id(executor)
    entry = self._functions.get(key)
    if entry is not None and entry[0] == executor._executor_id:  # pylint: disable=protected-access
      return entry[1]
    if self._compiled is None:
      pipeline = getattr(self._async_context, '_compiler_pipeline', None)
      self._compiled = (pipeline.compile(self._next) if pipeline is not None
                        else self._next)
    function = await executor.create_value(self._compiled,
                                           self._compiled.type_signature)
    self._functions[key] = (executor._executor_id, function)  # pylint: disable=protected-access
    return function

  async def _call_async(self, state, client_data):
    cardinalities = {tff.CLIENTS: len(client_data)}
    factory = self._async_context.executor_factory
    executor = factory.create_executor(dict(cardinalities))
    if isinstance(state, ResidentState) and not state.belongs_to(executor):
      # Another cohort size has another executor: move the state over.
      state = await self._materialize_async(state)
    # Free worker values as soon as Python drops them (old states are large).
    if hasattr(executor, '_dispose_batch_size'):
      executor._dispose_batch_size = 1  # pylint: disable=protected-access
      _quiet_disposal(executor)
    try:
      function = await self._function(executor)
      if isinstance(state, ResidentState):
        state_value = state.value
      else:
        state_value = await async_execution_context._ingest(  # pylint: disable=protected-access
            executor, self._transform_args(state), self._state_type)
      data_value = await async_execution_context._ingest(  # pylint: disable=protected-access
          executor, self._transform_args(client_data), self._data_type)
      argument = await executor.create_struct(tff.structure.Struct(
          [(self._names[0], state_value), (self._names[1], data_value)]))
      result = await executor.create_call(function, argument)
      new_state = await executor.create_selection(result, 0)
      outputs = []
      for index in range(1, len(self._result_type)):
        value = await (await executor.create_selection(result, index)).compute()
        outputs.append(self._transform_result(
            type_conversions.type_to_py_container(
                value, self._result_type[index])))
    except Exception:
      factory.clean_up_executor(dict(cardinalities))
      self._functions.pop(id(executor), None)
      raise
    return (ResidentState(new_state, executor,
                          executor._executor_id),  # pylint: disable=protected-access
            outputs)


class ResidentProcess(_Resident):
  """Runs rounds of a learning process with its state kept in the worker.

  Usage:
    resident = ResidentProcess(process)
    state = process.initialize()          # or any Python state
    for data in cohorts:
      state, metrics, update_norm = resident.next(state, data)
    python_state = resident.materialize(state)
  """

  def __init__(self, process, *, context=None, statistic=None):
    """`statistic`: see `build_next_with_update_norm`; each round's value is
    `last_statistic` after `next`."""
    super().__init__(build_next_with_update_norm(process, statistic),
                     context=context)
    self.last_statistic = None

  def next(self, state, client_data: Sequence[Any]):
    """One round: returns (state handle, metrics, model update norm)."""
    new_state, (metrics, norm, *statistic) = self._call(state, client_data)
    self.last_statistic = statistic[0] if statistic else None
    return new_state, metrics, float(norm)


class ResidentAggregation(_Resident):
  """Runs an aggregation process (`tff.templates.AggregationProcess`, e.g. a
  DP factory's) with its state kept in the worker: a round sends the
  clients' values and brings back only the aggregate. For DP-FTRL the state
  is the tree (log2(t) + 2 model-size vectors), which otherwise crosses to
  the worker and back every round (copied there: `_build_state_copy`).

  Usage:
    resident = ResidentAggregation(process)
    state = process.initialize()
    state, aggregate = resident.next(state, client_values)
  """

  def __init__(self, process, *, context=None):
    state_type, value_type = process.next.type_signature.parameter

    copy = _build_state_copy(state_type)

    @tff.federated_computation(state_type, value_type)
    def next_state_and_result(state, value):
      output = process.next(state, value)
      return tff.federated_map(copy, output.state), output.result

    super().__init__(next_state_and_result, context=context)

  def next(self, state, client_values: Sequence[Any]):
    """One round: (state handle, the released aggregate)."""
    new_state, (result,) = self._call(state, client_values)
    return new_state, result
