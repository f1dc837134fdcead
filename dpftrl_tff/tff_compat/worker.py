"""TFF 0.87 worker launch: the kernel kills a worker whose parent dies.

TFF starts its C++ `worker_binary` with `subprocess.Popen` from
`executor_factory`; a worker left behind by a parent killed with SIGKILL (or
SIGTERM during a long C++ call) holds its parent's pipes open for ever.
`patch_worker_launch` makes TFF start its workers with PR_SET_PDEATHSIG =
SIGKILL and `worker_environment()`, and bounds TFF's unbounded wait for a
stopping worker.
"""

import os
import signal
import subprocess
import types

from absl import logging

from dpftrl_tff import runtime

_PR_SET_PDEATHSIG = 1


def _die_with_parent():  # Runs in the forked child, before exec.
  libc = runtime._load_libc()  # pylint: disable=protected-access
  if libc:
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


# TensorFlow settings of every worker, unless the environment sets them.
# The worker runs a cohort's clients concurrently (TFF's executor, one call
# per client), so the cores are already shared out among clients; with
# TensorFlow's default of one intra-op thread per core each client's small
# kernels were also split across the cores, and the threads' hand-offs and
# spinning cost CPU: at paper scale (20 clients, 3,582 sequences, 2 cores)
# a round took 3.37 s and 5.9 CPU-s, with one intra-op thread 2.74 s and
# 5.3 CPU-s (docs/performance.md, 2026-11-27, eighth stop). On a machine
# with more cores than a worker has clients at once, set
# TF_NUM_INTRAOP_THREADS in the environment (docs/scaling.md).
# oneDNN's kernels on: TensorFlow 2.14 turns them on by itself only on CPUs
# with AVX-512 VNNI, BF16 or AMX; elsewhere its matmuls go through Eigen's
# contraction (packing compiled without AVX2 or FMA). On an AVX2 EPYC a
# paper-size round took 15.1 CPU-s with them off, 13.4 on (the client
# step alone 58 against 47 CPU-ms); the CPU-scale round was unchanged
# (docs/performance.md, 2026-11-28, stop 57). The binaries' own processes
# (pretraining, evaluation, the Keras yardstick) keep TensorFlow's choice:
# at the CPU scale the Keras loop was 8% slower with oneDNN.
WORKER_ENVIRONMENT = {'TF_NUM_INTRAOP_THREADS': '1',
                      'TF_ENABLE_ONEDNN_OPTS': '1'}


def worker_environment():
  """The environment a TFF worker starts with: this process's, with
  `WORKER_ENVIRONMENT` where it sets nothing."""
  env = dict(os.environ)
  for name, value in WORKER_ENVIRONMENT.items():
    env.setdefault(name, value)
  return env


# How long an unbounded wait() on a worker lasts before SIGKILL.
WORKER_STOP_TIMEOUT_SECONDS = 10.0


class _WorkerPopen(subprocess.Popen):
  """Popen for TFF's worker: the kernel kills it when its parent dies.

  TFF stops a worker (when its execution context is replaced) with SIGINT
  and an unbounded `wait()`; a worker that does not exit on SIGINT (seen in
  the test suite after a context switch) hung the caller for ever. An
  unbounded wait here lasts WORKER_STOP_TIMEOUT_SECONDS, then the worker is
  killed.
  """

  def __init__(self, *args, **kwargs):
    kwargs.setdefault('preexec_fn', _die_with_parent)
    if kwargs.get('env') is None:
      kwargs['env'] = worker_environment()
    super().__init__(*args, **kwargs)

  def wait(self, timeout=None):
    if timeout is not None:
      return super().wait(timeout)
    try:
      return super().wait(WORKER_STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
      logging.warning('TFF worker %d did not stop within %.0f s; killing it.',
                      self.pid, WORKER_STOP_TIMEOUT_SECONDS)
      self.kill()
      return super().wait()


def patch_worker_launch() -> bool:
  """Starts TFF's workers with PR_SET_PDEATHSIG = SIGKILL (idempotent).

  TFF launches the worker from the execution context's event-loop thread,
  which lives as long as the context; the death signal fires when that
  thread ends (the context is gone) or the process dies, however it dies.
  Workers already running are not affected. Returns True when patched.
  """
  # TFF internals only when patching.
  from tensorflow_federated.python.core.impl.executor_stacks import executor_factory  # pylint: disable=g-import-not-at-top
  if not runtime._load_libc():  # pylint: disable=protected-access
    return False
  if getattr(executor_factory.subprocess, 'Popen', None) is not _WorkerPopen:
    shim = types.SimpleNamespace(**vars(subprocess))
    shim.Popen = _WorkerPopen
    executor_factory.subprocess = shim
  return True
