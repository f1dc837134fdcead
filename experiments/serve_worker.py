r"""Serves TFF's executor on this machine for runs started elsewhere.

Starts TensorFlow Federated's own C++ `worker_binary` (the one TFF runs
locally for every simulation) on --port, with the project's allocator
settings and quiet logs, waits until it answers, prints where it listens
and runs until stopped (Ctrl-C or SIGTERM stop the worker too; it also dies
with this process). A controller then uses it with
`run_stackoverflow --workers=THIS_HOST:PORT,...`.

The machine needs the project installed (the same tensorflow-federated) and
the training database at the same path as on the controller. The service
is unauthenticated gRPC: expose the port on a private network only. See
docs/scaling.md.

  python -m experiments.serve_worker --port=8000
  python -m experiments.serve_worker --port=8001 --cpus=1   # pinned to CPU 1
"""

from dpftrl_tff import runtime

runtime.install()   # Quiet TF logs (inherited by the worker), cleanup.

# pylint: disable=g-import-not-at-top
import os
import socket
import time

from absl import flags

from dpftrl_tff import console
# pylint: enable=g-import-not-at-top

_PORT = flags.DEFINE_integer('port', None, 'Port to serve on (1-65535), on '
                             'all network interfaces.')
_CPUS = flags.DEFINE_list(
    'cpus', None, 'Pin the worker to these CPU ids (like taskset), e.g. 0 or '
    '0,1. Unset: all CPUs.')
_MAX_CALLS = flags.DEFINE_integer(
    'max_concurrent_computation_calls', -1,
    'TFF\'s limit on parallel calls of one computation (clients trained at '
    'once); -1: no limit.')
_READY_TIMEOUT = flags.DEFINE_float(
    'ready_timeout_seconds', 120.0,
    'How long the worker may take to start answering.')


def _check_port(port: int):
  with socket.socket(socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET,
                     socket.SOCK_STREAM) as s:
    # As gRPC binds: a port in TIME_WAIT after a stopped worker is free.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      s.bind(('', port))
    except OSError as e:
      raise ValueError(f'--port={port} cannot be used ({e.strerror}); choose '
                       f'a free port.') from None


def _cpus():
  if _CPUS.value is None:
    return None
  available = sorted(os.sched_getaffinity(0))
  cpus = []
  for item in _CPUS.value:
    if not item.strip().isdigit() or int(item) not in available:
      raise ValueError(f'--cpus={",".join(_CPUS.value)}: {item!r} is not one '
                       f'of this machine\'s CPUs {available}.')
    cpus.append(int(item))
  return cpus


def run():
  # After flags are parsed: a bad flag is one line, without TFF.
  from dpftrl_tff import checks  # pylint: disable=g-import-not-at-top
  from dpftrl_tff.remote import workers  # pylint: disable=g-import-not-at-top
  if _PORT.value is None:
    raise ValueError('--port is required (the port to serve on, 1-65535).')
  port = checks.check_int(_PORT.value, '--port', minimum=1, maximum=65535)
  cpus = _cpus()
  checks.check_float(_READY_TIMEOUT.value, '--ready_timeout_seconds',
                     minimum=0, strict_minimum=True)
  _check_port(port)
  process = workers.start_worker(
      port, cpus=cpus,
      max_concurrent_computation_calls=_MAX_CALLS.value)
  local = workers.Worker('localhost', port)
  deadline = time.monotonic() + _READY_TIMEOUT.value
  while not workers.is_reachable(local, 1.0):
    if process.poll() is not None:
      raise ValueError(f'TFF\'s worker_binary exited with code '
                       f'{process.returncode} before answering on port '
                       f'{port}.')
    if time.monotonic() > deadline:
      raise ValueError(f'TFF\'s worker_binary did not answer on port {port} '
                       f'within {_READY_TIMEOUT.value:.0f} s.')
  pinned = f', pinned to CPUs {cpus}' if cpus is not None else ''
  print(f'TFF worker listening on {socket.getfqdn()}:{port} (pid '
        f'{process.pid}{pinned}). Use it with --workers='
        f'{socket.getfqdn()}:{port}; stop with Ctrl-C.', flush=True)
  try:
    code = process.wait()
  except KeyboardInterrupt:
    print('Stopping the TFF worker.', flush=True)
    return
  raise ValueError(f'TFF\'s worker_binary on port {port} exited with code '
                   f'{code}.')


def main(argv):
  return console.run_main(run, argv, cleanup=runtime.shutdown_workers)


if __name__ == '__main__':
  runtime.run_app(main)
