"""A round's cohort split across several TFF workers (TFF's mergeable context).

TFF compiles a round (`compile_to_mergeable_comp_form`) into three
computations around its one aggregation:

  up_to_merge   broadcast, the clients' training and their partial
                aggregate (for DP-FTRL the sum of clipped updates
                sum_i clip(Delta_i, C), for adaptive clipping also the
                count of unclipped updates);
  merge         the sum of two partial aggregates;
  after_merge   the server: DP noise, the server optimizer, the metrics.

`DistributedContext` is TFF's `MergeableCompExecutionContext` over one
`AsyncExecutionContext` per worker (TFF's `RemoteExecutor` on a gRPC channel
to the worker's `worker_binary`). The cohort (the clients' round keys) is
cut by TFF into S subrounds of consecutive clients (sizes differ by at most
one); each runs `up_to_merge` on a free worker. Two things differ from TFF's
context:

  * Partial aggregates are merged in subround order, ((p_1 + p_2) + p_3)
    + ..., not in order of completion, and `after_merge` (the server step)
    runs once, on one worker. A round's result is therefore a function of the
    cohort, the state and S only: equal, bit for bit, on any number of
    workers. With another S only the rounding of the float sum differs.
    The DP noise is drawn once, in `after_merge`, from the seed in the
    server state, exactly as on one machine.
  * A worker that stops answering is not retried for ever (TFF's contexts
    retry unavailable workers without limit): the round fails with
    `WorkerLostError` naming it, and the remaining in-flight work is
    abandoned. `rounds.DistributedProcess` then stops the run or, if asked,
    runs the round again on the remaining workers (same S: same result).

SecAgg's secure modular sum runs, as on one machine, through TFF's test
compiler (a plain integer sum reduced mod M on the server), which splits
into subrounds like any sum.
"""

import asyncio
import threading
from typing import Dict, List, Optional, Sequence

# pylint: disable=g-direct-tensorflow-import
from tensorflow_federated.proto.v0 import executor_pb2
from tensorflow_federated.python.common_libs import structure
from tensorflow_federated.python.core.backends.native import compiler as native_compiler
from tensorflow_federated.python.core.backends.native import mergeable_comp_compiler
from tensorflow_federated.python.core.backends.test import compiler as test_compiler
from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation
from tensorflow_federated.python.core.impl.execution_contexts import async_execution_context
from tensorflow_federated.python.core.impl.execution_contexts import mergeable_comp_execution_context as mergeable
from tensorflow_federated.python.core.impl.executor_stacks import python_executor_stacks
from tensorflow_federated.python.core.impl.executors import executors_errors
from tensorflow_federated.python.core.impl.executors import remote_executor
from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub
from tensorflow_federated.python.core.impl.executors import value_serialization
from tensorflow_federated.python.core.impl.types import placements
from tensorflow_federated.python.core.impl.types import type_analysis
from tensorflow_federated.python.core.impl.types import type_conversions
# pylint: enable=g-direct-tensorflow-import

from dpftrl_tff.remote import workers as workers_lib

# How often a call that failed as retryable is tried again while its worker
# still answers (e.g. a worker restarted between two calls).
_ATTEMPTS = 3
# How long a worker that failed a call has to answer again.
_RECONNECT_SECONDS = 5.0


class WorkerLostError(workers_lib.WorkerError):
  """A worker stopped answering during a computation."""

  def __init__(self, worker: workers_lib.Worker, detail: str):
    super().__init__(
        f'TFF worker {worker} stopped answering ({detail}).', [worker])
    self.worker = worker


def _finish(coroutine):
  """Runs a coroutine that never suspends (TFF's blocking gRPC calls)."""
  try:
    coroutine.send(None)
  except StopIteration as done:
    return done.value
  coroutine.close()
  raise RuntimeError('A TFF executor call suspended unexpectedly.')


async def _in_thread(fn, *args):
  """fn(*args) in a daemon thread, awaited without blocking the loop.

  Not the loop's thread pool: Python joins those threads at exit, so a call
  stuck on a lost worker's abandoned work would hold the process.
  """
  loop = asyncio.get_running_loop()
  future = loop.create_future()

  def settle(result, error):
    if not future.done():
      if error is None:
        future.set_result(result)
      else:
        future.set_exception(error)

  def target():
    try:
      result, error = fn(*args), None
    except BaseException as e:  # pylint: disable=broad-except
      result, error = None, e
    try:
      loop.call_soon_threadsafe(settle, result, error)
    except RuntimeError:   # The loop is gone (abandoned work at exit).
      pass

  threading.Thread(target=target, daemon=True).start()
  return await future


class _ThreadedRemoteExecutor(remote_executor.RemoteExecutor):
  """TFF's RemoteExecutor with its RPCs off the event loop.

  TFF's RemoteExecutor makes blocking gRPC calls inside coroutines (and the
  worker answers a call only once its value is computed), so one worker's
  subround blocked the event loop and the workers ran one after the other.
  Every call runs in a thread here, so all workers train at once.
  """

  async def create_value(self, value, type_spec=None):
    # RemoteExecutor.create_value may be tff_compat's fast serializer.
    parent = super().create_value
    return await _in_thread(lambda: _finish(parent(value, type_spec)))

  async def create_call(self, comp, arg=None):
    parent = super().create_call
    return await _in_thread(lambda: _finish(parent(comp, arg)))

  async def create_struct(self, elements):
    parent = super().create_struct
    return await _in_thread(lambda: _finish(parent(elements)))

  async def create_selection(self, source, index):
    parent = super().create_selection
    return await _in_thread(lambda: _finish(parent(source, index)))

  async def _compute(self, value_ref, type_spec):
    self._check_has_executor_id()
    request = executor_pb2.ComputeRequest(executor=self._executor_id,
                                          value_ref=value_ref)
    response = await _in_thread(self._stub.compute, request)
    value, _ = value_serialization.deserialize_value(response.value,
                                                     type_spec)
    return value


def _compiler(compile_fn, secure_sums: bool):
  """`compile_fn`, after lowering secure sums as TFF's test context does."""
  if not secure_sums:
    return compile_fn

  def compile_with_secure_sums(comp):
    return compile_fn(test_compiler.replace_secure_intrinsics_with_bodies(comp))
  return compile_with_secure_sums


_UNRETRIED_INVOKE = async_execution_context.AsyncExecutionContext.invoke.__wrapped__


class WorkerContext(async_execution_context.AsyncExecutionContext):
  """TFF's async context on one remote worker, with bounded retries."""

  def __init__(self, worker: workers_lib.Worker, *, secure_sums: bool):
    self.worker = worker
    self._channel = workers_lib.channel(worker)
    stub = remote_executor_grpc_stub.RemoteExecutorGrpcStub(self._channel)

    def stack_fn(cardinalities):
      # Computations without clients-placed arguments (merge, after_merge)
      # still need a CLIENTS cardinality, as in TFF's local factory.
      cardinalities.setdefault(placements.CLIENTS, 0)
      executor = _ThreadedRemoteExecutor(stub)
      executor.worker = worker
      executor.set_cardinalities(cardinalities)
      return executor

    super().__init__(
        executor_fn=python_executor_stacks.ResourceManagingExecutorFactory(
            executor_stack_fn=stack_fn),
        compiler_fn=_compiler(native_compiler.desugar_and_transform_to_native,
                              secure_sums),
        transform_args=tensorflow_computation.transform_args,
        transform_result=tensorflow_computation.transform_result)

  async def invoke(self, comp, arg):
    for attempt in range(_ATTEMPTS):
      try:
        return await _UNRETRIED_INVOKE(self, comp, arg)
      except executors_errors.RetryableError as e:
        if not await _in_thread(workers_lib.is_reachable, self.worker,
                                _RECONNECT_SECONDS):
          raise WorkerLostError(self.worker, _grpc_detail(e)) from None
        if attempt + 1 == _ATTEMPTS:
          raise workers_lib.WorkerError(
              f'TFF worker {self.worker} failed {_ATTEMPTS} times: '
              f'{_grpc_detail(e)}', [self.worker]) from None

  def close(self):
    # Not `self._channel.close()`: TFF's stub keeps a connectivity
    # subscription whose polling thread must end first (`close_channel`).
    workers_lib.close_channel(self._channel)


def _grpc_detail(error) -> str:
  """A short reason from TFF's wrapped gRPC error."""
  cause = error.args[0] if error.args else error
  code = getattr(cause, 'code', None)
  details = getattr(cause, 'details', None)
  if callable(code) and callable(details):
    text = f'{code().name}: {details() or ""}'
  else:
    text = str(cause) or type(error).__name__
  return text.splitlines()[0][:200]


async def _up_to_merge_in_order(comp, args: Sequence, contexts: Sequence):
  """Runs up_to_merge on every subround, merging in subround order.

  A subround starts on the first free worker; the merge of partial result
  k waits for partials 1..k-1, so the sum's association is fixed.
  Returns (merged result, a context to run after_merge on).
  """
  free: asyncio.Queue = asyncio.Queue()
  for context in contexts:
    free.put_nowait(context)

  async def subround(arg):
    context = await free.get()
    try:
      return await context.invoke(comp.up_to_merge, arg), context
    finally:
      free.put_nowait(context)

  tasks = [asyncio.ensure_future(subround(a)) for a in args]
  try:
    merged, last_context = await tasks[0]
    for task in tasks[1:]:
      partial, last_context = await task
      merged = await mergeable._merge_results(  # pylint: disable=protected-access
          comp, merged, partial, last_context)
    return merged, last_context
  finally:
    for task in tasks:
      task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class DistributedContext(mergeable.MergeableCompExecutionContext):
  """TFF's mergeable-computation context over remote workers (module doc).

  Args:
    workers: the workers (`workers.Worker`), each serving TFF's executor.
    subrounds: S, the number of parts a cohort is cut into (at most one
      part per client); 0: one per worker.
    secure_sums: compile SecAgg's secure sums as TFF's test context does.
  """

  def __init__(self, workers: Sequence[workers_lib.Worker], *,
               subrounds: int = 0, secure_sums: bool = False):
    if not workers:
      raise ValueError('DistributedContext needs at least one worker.')
    self._worker_contexts: Dict[workers_lib.Worker, WorkerContext] = {
        w: WorkerContext(w, secure_sums=secure_sums) for w in workers}
    super().__init__(
        async_contexts=list(self._worker_contexts.values()),
        compiler_fn=_compiler(
            mergeable_comp_compiler.compile_to_mergeable_comp_form,
            secure_sums),
        transform_args=tensorflow_computation.transform_args,
        transform_result=tensorflow_computation.transform_result,
        num_subrounds=subrounds or len(workers))

  @property
  def workers(self) -> List[workers_lib.Worker]:
    return list(self._worker_contexts)

  @property
  def subrounds(self) -> int:
    return self._num_subrounds

  def drop(self, worker: workers_lib.Worker):
    """Stops using `worker` (lost); S stays the same."""
    context = self._worker_contexts.pop(worker)
    context.close()
    self._async_execution_contexts = list(self._worker_contexts.values())

  def close(self):
    for context in self._worker_contexts.values():
      context.close()

  def run(self, coroutine):
    """Runs a coroutine on this context's event loop thread."""
    return self._async_runner.run_coro_and_return_result(coroutine)

  def invoke(self, comp, arg=None):
    # The result's Python containers, before compilation loses them (TFF's
    # test compiler for secure sums drops them).
    if isinstance(comp, mergeable.MergeableCompForm):
      result_type = comp.after_merge.type_signature.result
    else:
      result_type = comp.type_signature.result
      comp = self._compiler_pipeline.compile(comp)
    # after_merge runs once, so its result must not be per client.
    if not type_analysis.contains_only(comp.after_merge.type_signature.result,
                                       _not_per_client):
      raise ValueError(
          'DistributedContext runs computations whose results are placed at '
          f'the server (a training round); this one returns {result_type}.')
    if arg is not None:
      arg = mergeable.MergeableCompExecutionContextValue(
          arg, comp.up_to_merge.type_signature.parameter, self._num_subrounds)
    result = self.run(self._invoke(comp, arg))
    # The worker's context returned plain containers: rebuild the types'.
    result = type_conversions.type_to_py_container(
        structure.from_container(result, recursive=True), result_type)
    if self._transform_result is not None:
      result = self._transform_result(result)
    return result

  async def _invoke(self, comp, arg: Optional[
      mergeable.MergeableCompExecutionContextValue]):
    contexts = list(self._async_execution_contexts)
    args = arg.value() if arg is not None else [None] * len(contexts)
    merged, context = await _up_to_merge_in_order(comp, args, contexts)
    return await mergeable._compute_after_merged(  # pylint: disable=protected-access
        comp, args[0], merged, context)


def _not_per_client(type_spec) -> bool:
  return not (hasattr(type_spec, 'placement') and
              type_spec.placement is placements.CLIENTS and
              not type_spec.all_equal)
