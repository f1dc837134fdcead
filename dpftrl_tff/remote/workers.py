"""TFF's C++ `worker_binary` as a remote executor service.

A worker is TFF's own `worker_binary` (shipped in the tensorflow-federated
wheel) serving TFF's executor over gRPC on a port; the controller of a run
reaches it at `host:port`. This module parses worker addresses, starts a
worker process (`start_worker`, used by `experiments.serve_worker`, the
tests and the benchmarks) and checks that workers answer
(`check_reachable`).

The gRPC service is insecure (no TLS, no authentication): anybody who can
reach the port can run TensorFlow code on the worker. Run workers on a
private network only (docs/scaling.md).
"""

import dataclasses
import importlib.util
import os
import subprocess
import time
from typing import Iterable, List, Optional, Sequence

from dpftrl_tff import runtime

# TFF's own gRPC options for its worker (executor_stacks/executor_factory):
# messages up to 2 GB (the server state and model deltas are large).
_GRPC_MAX_MESSAGE_BYTES = 2 * 1000 * 1000 * 1000
GRPC_CHANNEL_OPTIONS = (
    ('grpc.max_message_length', _GRPC_MAX_MESSAGE_BYTES),
    ('grpc.max_receive_message_length', _GRPC_MAX_MESSAGE_BYTES),
    ('grpc.max_send_message_length', _GRPC_MAX_MESSAGE_BYTES),
)
# How long a worker has to answer when a run starts.
CONNECT_TIMEOUT_SECONDS = 10.0
# What a run does when a worker is lost during a round (--on_worker_failure).
FAILURE_POLICIES = ('stop', 'continue')


class WorkerError(ValueError):
  """A worker is unreachable, lost, or cannot serve this run: a failure of
  the infrastructure, not of the command (a binary exits 1, not 2)."""
  infrastructure = True

  def __init__(self, message: str, workers: Sequence['Worker'] = ()):
    super().__init__(message)
    self.workers = tuple(workers)


@dataclasses.dataclass(frozen=True)
class Worker:
  """A TFF worker's address."""
  host: str
  port: int

  def __str__(self) -> str:
    host = f'[{self.host}]' if ':' in self.host else self.host
    return f'{host}:{self.port}'

  @property
  def target(self) -> str:
    """The gRPC target."""
    return str(self)


def parse_workers(text: Optional[str], flag: str = '--workers'
                  ) -> List[Worker]:
  """`host:port,host:port,...` as Workers (empty text: no workers).

  Raises:
    ValueError naming `flag` for a malformed address, a port outside
    1..65535 or a worker listed twice.
  """
  if text is None or not text.strip():
    return []
  workers = []
  for item in text.split(','):
    item = item.strip()
    host, sep, port = item.rpartition(':')
    if host.startswith('[') and host.endswith(']'):
      host = host[1:-1]
    if not sep or not host or not port.isdigit() or not (
        1 <= int(port) <= 65535):
      raise ValueError(
          f'{flag}={text!r}: {item!r} is not host:port (a port 1-65535, '
          f'e.g. localhost:8000 or 10.0.0.2:8000; IPv6 as [::1]:8000).')
    worker = Worker(host, int(port))
    if worker in workers:
      raise ValueError(f'{flag}={text!r}: {worker} is listed twice.')
    workers.append(worker)
  return workers


def worker_binary_path() -> str:
  """The `worker_binary` of the installed tensorflow-federated.

  Found without importing TFF (a worker starts in a second, not ten).
  """
  spec = importlib.util.find_spec('tensorflow_federated')
  if spec is None or spec.origin is None:
    raise RuntimeError('tensorflow-federated is not installed.')
  path = os.path.join(os.path.dirname(spec.origin), 'data', 'worker_binary')
  if not os.path.isfile(path):
    raise RuntimeError(f'the installed tensorflow-federated has no '
                       f'worker_binary at {path}.')
  return path


def start_worker(port: int, *, cpus: Optional[Iterable[int]] = None,
                 stdout=None, stderr=None,
                 max_concurrent_computation_calls: int = -1
                 ) -> subprocess.Popen:
  """Starts TFF's worker_binary serving on `port` (all interfaces).

  As TFF starts its local worker, with the allocator settings of local runs
  (`runtime.configure_allocator`, through the environment) and the
  worker's TensorFlow settings (`tff_compat.worker.worker_environment`);
  the kernel kills the worker when the calling thread's process dies
  (PR_SET_PDEATHSIG), so none outlives its parent.

  Args:
    port: the port to serve on.
    cpus: pin the worker to these CPU ids (like `taskset`); None: all.
    stdout, stderr: where the worker's output goes (subprocess arguments).
    max_concurrent_computation_calls: TFF's limit on parallel calls of one
      computation (-1: none).
  """
  # TFF internals and gRPC only when a worker is started or probed.
  from dpftrl_tff.tff_compat import worker as worker_patch  # pylint: disable=g-import-not-at-top
  runtime.configure_allocator()
  cpus = None if cpus is None else sorted(set(cpus))

  def before_exec():
    worker_patch._die_with_parent()  # pylint: disable=protected-access
    if cpus is not None:
      os.sched_setaffinity(0, cpus)

  args = [worker_binary_path(), f'--port={port}',
          f'--max_concurrent_computation_calls='
          f'{max_concurrent_computation_calls}']
  return subprocess.Popen(args, stdout=stdout, stderr=stderr,
                          preexec_fn=before_exec,
                          env=worker_patch.worker_environment())


def channel(worker: Worker):
  """An insecure gRPC channel to `worker` with TFF's message limits."""
  # TFF internals and gRPC only when a worker is started or probed.
  import grpc  # pylint: disable=g-import-not-at-top
  return grpc.insecure_channel(worker.target, list(GRPC_CHANNEL_OPTIONS))


def close_channel(grpc_channel, wait_seconds: float = 5.0):
  """Closes a gRPC channel once its connectivity polling thread has ended.

  `Channel.subscribe` (TFF's `RemoteExecutorGrpcStub` subscribes and never
  unsubscribes; `grpc.channel_ready_future` subscribes too) starts a thread
  that calls `watch_connectivity_state` on the channel every 0.2 s until no
  subscription is left. `Channel.close()` drops the subscriptions and frees
  the channel at once, while that thread may still be inside the call: it
  then fails on the closed channel or, inside the C core, crashes the
  process (SIGSEGV, grpc/grpc#16290; seen in this project's CI). Here the
  subscriptions are dropped first and the channel is closed only when the
  thread has noticed and ended (within one 0.2 s poll), or after
  `wait_seconds`. gRPC has no public way to see that thread: this reads
  the channel's private `_connectivity_state`, and a gRPC without it is
  closed at once (tested, so that an upgrade that renames it fails a test).
  """
  state = getattr(grpc_channel, '_connectivity_state', None)
  if state is not None:
    with state.lock:
      del state.callbacks_and_connectivities[:]
      state.try_to_connect = False
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
      with state.lock:
        if not state.polling:
          break
      time.sleep(0.01)
  grpc_channel.close()


def is_reachable(worker: Worker, timeout: float) -> bool:
  """True when a gRPC connection to `worker` opens within `timeout` s."""
  # TFF internals and gRPC only when a worker is started or probed.
  import grpc  # pylint: disable=g-import-not-at-top
  probe = channel(worker)
  ready = grpc.channel_ready_future(probe)
  try:
    ready.result(timeout=timeout)
    return True
  except grpc.FutureTimeoutError:
    ready.cancel()
    return False
  finally:
    close_channel(probe)


def check_reachable(workers: Sequence[Worker], *,
                    timeout: Optional[float] = None,
                    flag: str = '--workers'):
  """Raises WorkerError naming every worker that does not answer.

  Args:
    workers: the workers.
    timeout: seconds each may take to answer (CONNECT_TIMEOUT_SECONDS).
    flag: the flag named in the message.
  """
  timeout = CONNECT_TIMEOUT_SECONDS if timeout is None else timeout
  down = [w for w in workers if not is_reachable(w, timeout)]
  if down:
    names = ', '.join(str(w) for w in down)
    raise WorkerError(
        f'{flag}: no TFF worker answers at {names} (waited {timeout:.0f} s). '
        f'Start one on each machine with `python -m experiments.serve_worker '
        f'--port=PORT`, or remove it from {flag}.', down)
