"""TFF runtime hygiene: quiet logs, and no `worker_binary` left behind.

Every TFF 0.87 execution context starts a C++ `worker_binary` subprocess that
outlives Python and keeps the parent's stdout/stderr pipes open, so a binary or
a test run that leaves one behind hangs whoever reads its output (CI included).
`install()` registers `shutdown_workers` to run at exit and on SIGTERM/SIGINT;
binaries call it first thing, and the test suite calls `shutdown_workers` in
its teardown. It also configures glibc's allocator (see
`configure_allocator`). That the kernel kills a worker whose parent dies is
`tff_compat.worker`'s patch of TFF's worker launch.
"""

import atexit
import ctypes
import gc
import importlib
import importlib.util
import os
import signal
import sys
import threading
import time
import types
from typing import Any, Callable, List, Optional


_WORKER_NAME = 'worker_binary'
_installed = False


def _children(pid: int) -> List[int]:
  """Direct and indirect child pids of `pid`, read from /proc."""
  parents = {}
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    try:
      with open(f'/proc/{entry}/stat', 'rb') as f:
        stat = f.read().decode(errors='replace')
    except OSError:
      continue
    # Format: pid (comm) state ppid ...; comm may contain spaces or ')'.
    ppid = int(stat[stat.rindex(')') + 2:].split()[1])
    parents[int(entry)] = ppid
  result, frontier = [], [pid]
  while frontier:
    parent = frontier.pop()
    for child, ppid in parents.items():
      if ppid == parent:
        result.append(child)
        frontier.append(child)
  return result


def _name(pid: int) -> str:
  try:
    with open(f'/proc/{pid}/comm') as f:
      return f.read().strip()
  except OSError:
    return ''


def _alive(pid: int) -> bool:
  """True if `pid` exists and is not a zombie."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().split(')')[-1].split()[0] != 'Z'
  except OSError:
    return False


def worker_pids() -> List[int]:
  """Pids of the TFF workers started by this process (or its children)."""
  return [p for p in _children(os.getpid())
          if _name(p) == _WORKER_NAME and _alive(p)]


class WorkerLost(RuntimeError):
  """This machine's TFF worker_binary stopped (crashed) during a call."""


def _exit_status(pid: int) -> Optional[str]:
  """How an unreaped (zombie) process ended, from /proc/<pid>/stat's
  exit_code field (Linux 3.5+, waitpid's format); None if unreadable."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      fields = f.read().split(')')[-1].split()
    code = int(fields[49])   # Field 52; fields[0] is field 3 (state).
  except (OSError, IndexError, ValueError):
    return None
  if code & 0x7f:
    try:
      name = signal.Signals(code & 0x7f).name
    except ValueError:
      name = f'signal {code & 0x7f}'
    return f'killed by {name}'
  return f'exit code {(code >> 8) & 0xff}'


def _rpc_failure(error: BaseException) -> bool:
  """True if a gRPC error is in `error`'s chain (TFF's remote calls)."""
  grpc = sys.modules.get('grpc')   # Loaded by TFF; not imported here.
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if grpc is not None and isinstance(error, grpc.RpcError):
      return True
    if 'GRPC' in type(error).__name__:   # TFF's RetryableGRPCError.
      return True
    error = error.__cause__ or error.__context__
  return False


def lost_worker(error: BaseException) -> Optional[str]:
  """Why this process's TFF worker is gone, if `error` is a gRPC failure
  and no worker of this process is alive; else None."""
  if not _rpc_failure(error):
    return None
  workers = [p for p in _children(os.getpid()) if _name(p) == _WORKER_NAME]
  if any(_alive(p) for p in workers):
    return None
  for pid in workers:   # Dead, not yet reaped.
    status = _exit_status(pid)
    if status:
      return status
  return 'it is gone'


_shutdowns = 0


def shutdown_count() -> int:
  """How many times `shutdown_workers` has run in this process."""
  return _shutdowns


def shutdown_workers(timeout: float = 5.0) -> int:
  """Stops this process's TFF workers: SIGINT, wait, then SIGKILL.

  Returns:
    The number of workers that were running.
  """
  global _shutdowns
  _shutdowns += 1
  pids = worker_pids()
  for pid in pids:
    try:
      os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
      pass
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline and any(_alive(p) for p in pids):
    time.sleep(0.05)
  for pid in pids:
    if _alive(pid):
      try:
        os.kill(pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
  # Not reaped on purpose: TFF's ServiceManager owns the Popen object and,
  # when it next needs a worker, signals and waits for the old one before
  # starting a new one; a zombie holds no pipes and is reaped then (or at
  # exit), whereas a pid reaped here would make that signal fail.
  return len(pids)


def _forget_tff_workers():
  """Stops TFF's service managers from signalling workers at teardown.

  TFF's ServiceManager.__del__ signals its worker when the interpreter tears
  down, after the `subprocess` module is gone, and prints an ignored
  AttributeError. Once the workers are stopped here, it has nothing to do, so
  its __del__ is replaced by a no-op.
  """
  for obj in gc.get_objects():
    if type(obj).__name__ == 'ServiceManager' and hasattr(obj, '_process'):
      type(obj).__del__ = lambda self: None


def _at_exit():
  shutdown_workers()
  _forget_tff_workers()


_stop_note = None


def set_stop_note(note):
  """`note()` is printed when a signal stops the process (None: nothing).

  Training sets it to say at which round the run stopped and which
  checkpoint it keeps.
  """
  global _stop_note
  _stop_note = note


def stop_note() -> str:
  """The current stop note's text, or ''."""
  if _stop_note is None:
    return ''
  try:
    return _stop_note()
  except Exception:  # pylint: disable=broad-except
    return ''


def _on_signal(signum, frame):
  del frame
  note = stop_note()
  if note:
    print(f'error: stopped by signal {signal.Signals(signum).name}; {note}',
          file=sys.stderr, flush=True)
  shutdown_workers()
  signal.signal(signum, signal.SIG_DFL)
  os.kill(os.getpid(), signum)


# How long the main thread has to act on SIGTERM or SIGINT before
# `_watch_signals` stops the workers and ends the process itself.
SIGNAL_GRACE_SECONDS = 10.0


def _force_exit(signum: int):
  """SIGTERM or SIGINT came `SIGNAL_GRACE_SECONDS` ago and the process still
  runs: stop the workers and exit with 128 + signum, from this thread."""
  time.sleep(SIGNAL_GRACE_SECONDS)
  note = stop_note()
  print(f'error: stopped by signal {signal.Signals(signum).name}, which the '
        f'main thread did not act on within {SIGNAL_GRACE_SECONDS:g} s'
        + (f'; {note}' if note else '') + '.', file=sys.stderr, flush=True)
  shutdown_workers()
  os._exit(128 + signum)  # pylint: disable=protected-access


def _watch_signals(read_fd: int):
  """Makes SIGTERM and SIGINT end the process even if their Python handler
  never runs.

  Python runs signal handlers in the main thread only, between bytecodes.
  A TFF binary's main thread waits on a lock for TFF's event loop thread
  (`Future.result`); a signal that the kernel hands to another thread (TF's
  and gRPC's threads do not block signals) sets the handler's flag but does
  not wake that wait, so the handler runs only when the TFF call returns:
  never, if it waits for a worker that died. Seen on 2026-11-26: a training
  binary sent SIGTERM while its worker started was still running half an
  hour later, main thread in `initial_state`, its worker dead. Python's C
  handler also writes the signal's number to the wakeup fd, from whatever
  thread: this thread reads it and, if the process is still alive
  SIGNAL_GRACE_SECONDS later, ends it (`_force_exit`).
  """
  while True:
    try:
      data = os.read(read_fd, 64)
    except OSError:
      return
    if not data:
      return
    for signum in data:
      if signum in (signal.SIGTERM, signal.SIGINT):
        threading.Thread(target=_force_exit, args=(signum,), daemon=True,
                         name='signal-grace').start()


def _start_signal_watch():
  read_fd, write_fd = os.pipe()
  os.set_blocking(write_fd, False)
  signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
  threading.Thread(target=_watch_signals, args=(read_fd,), daemon=True,
                   name='signal-watch').start()


# glibc mallopt parameters and the values `configure_allocator` sets.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
ALLOCATOR_SETTINGS = {
    # Keep up to 1 GiB of freed heap instead of returning it to the kernel.
    'MALLOC_TRIM_THRESHOLD_': (_M_TRIM_THRESHOLD, 1 << 30),
    # Serve blocks up to 32 MiB (glibc's maximum threshold) from the heap...
    'MALLOC_MMAP_THRESHOLD_': (_M_MMAP_THRESHOLD, 32 << 20),
    # ... and larger ones too (the worker's gRPC messages of the server
    # state are 20-100 MB): no mmap at all.
    'MALLOC_MMAP_MAX_': (_M_MMAP_MAX, 0),
}
_libc = None


def _load_libc():
  global _libc
  if _libc is None:
    try:
      _libc = ctypes.CDLL('libc.so.6', use_errno=True)
    except OSError:
      _libc = False
  return _libc


def physical_memory_bytes() -> Optional[int]:
  """This machine's physical memory in bytes (None where the OS does not
  say): what the memory checks before a run or a simulation compare with."""
  try:
    return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
  except (ValueError, OSError):
    return None


def configure_allocator(arenas: Optional[int] = None):
  """Makes glibc reuse freed tensor memory instead of unmapping it.

  A TFF round allocates and frees many model-sized (10 MB) tensors: every
  client's copy of the model, its delta, the serialized state (20-100 MB
  gRPC messages). With glibc's defaults each one is a fresh mmap,
  page-faulted and zeroed by the kernel, then unmapped; in profiles of the
  worker that was 10-14% of its time. This
  sets the thresholds in ALLOCATOR_SETTINGS for this process (mallopt) and,
  through the environment, for child processes such as TFF's worker. Values
  already in the environment are kept. The Keras baseline of
  `benchmarks/round_time.py` runs with the same settings.

  `arenas`: glibc's MALLOC_ARENA_MAX (default: 8 per core). Without mmap,
  every thread's arena keeps its own freed blocks: in an audit of 2.4M-long
  updates TFF's worker grew to 3.5-4.8 GB with the default, 1.6 GB with 2
  arenas (`benchmarks/audit_speed.py`); training's rounds were 5% slower
  with 2, so only the audit asks for it.
  """
  libc = _load_libc()
  settings = dict(ALLOCATOR_SETTINGS)
  if arenas is not None:
    settings['MALLOC_ARENA_MAX'] = (_M_ARENA_MAX, arenas)
  for name, (param, value) in settings.items():
    value = int(os.environ.setdefault(name, str(value)))
    if libc:
      libc.mallopt(param, value)


# gRPC's fork handlers off. gRPC's C core registers pthread_atfork handlers
# that, when no other thread is inside gRPC at that instant, stop its
# timer and event-engine threads before fork() and restart them after;
# when another thread is inside gRPC they log "skipping fork() handlers"
# and do nothing. This project forks only to exec at once (TFF's worker,
# training binaries; `preexec_fn` makes Python fork instead of vfork, so
# the handlers run), so the child never uses gRPC and the handlers buy
# nothing. In CI (2026-11-28) a pytest worker died with SIGSEGV in a
# channel's connectivity-polling thread (`watch_connectivity_state`) while
# another thread was in `Popen` starting TFF's worker, and in another run a
# child aborted between fork and exec (grpc/grpc#37259 reports that abort
# in `Popen`). In a stress run the handlers left polling threads using
# closed descriptors 21 times in 13,282 forks, never with this setting
# (docs/performance.md, stop 55; `benchmarks.grpc_fork_stress`).
GRPC_ENVIRONMENT = {'GRPC_ENABLE_FORK_SUPPORT': '0'}


def configure_grpc() -> bool:
  """Turns gRPC's fork handlers off (`GRPC_ENVIRONMENT`), unless set.

  gRPC reads the variable when it is imported, so this must run before
  anything imports `grpc` (TFF does): `install()` and the test suite's
  conftest call it first thing. Called later it still reaches the child
  processes. Returns False when gRPC was already imported in this process.
  """
  for name, value in GRPC_ENVIRONMENT.items():
    os.environ.setdefault(name, value)
  return 'grpc' not in sys.modules


# Modules imported by a library this project imports but never used by it:
# TF Privacy's package import loads its discrete Gaussian utilities (through
# TFF's aggregators), which import TensorFlow Probability at the top, for
# samplers this project does not call (SecAgg here is its own, not TF
# Privacy's distributed discrete Gaussian). Loading TensorFlow Probability
# cost 0.74 CPU-s of the 5.3 that importing TensorFlow and TFF takes (six
# interleaved pairs on the 2-core VM, 2026-11-29).
DEFERRED_IMPORTS = ('tensorflow_probability',)


class _DeferredModule(types.ModuleType):
  """Stands in `sys.modules` for a module until one of its attributes is
  read; then the real module is imported and answers every read."""

  def __getattr__(self, name):   # Only for names not set on the stand-in.
    real = self.__dict__.get('_deferred_real')
    if real is None:
      if sys.modules.get(self.__name__) is self:
        del sys.modules[self.__name__]
      real = importlib.import_module(self.__name__)
      self.__dict__['_deferred_real'] = real
    return getattr(real, name)


def defer_unused_imports(names=DEFERRED_IMPORTS) -> List[str]:
  """Puts a stand-in in `sys.modules` for each module of `names` that is
  installed and not yet imported: `import name` then costs nothing, and the
  module is imported when an attribute of it is first read (the stand-in
  carries the real module's spec and __file__, so the import system finds
  it complete and code scanning sys.modules for a file leaves it alone).
  Called by `install()` and the test suite's conftest, before TFF is
  imported. Returns the names deferred."""
  deferred = []
  for name in names:
    if name in sys.modules:
      continue
    spec = importlib.util.find_spec(name)
    if spec is None:
      continue
    stand_in = _DeferredModule(name)
    stand_in.__spec__ = spec
    # The real module's __file__: code that scans sys.modules for a file
    # (autograph's `inspect_utils._fix_linecache_record`, at every function
    # it converts) reads it, and a read would import the module.
    stand_in.__file__ = spec.origin
    sys.modules[name] = stand_in
    deferred.append(name)
  return deferred


def exit_code(code) -> int:
  """The process exit status of `sys.exit(code)` (None 0, an int itself,
  anything else printed to stderr and 1), as the interpreter computes it."""
  if code is None:
    return 0
  if isinstance(code, int):
    return code & 0xff
  print(code, file=sys.stderr)
  return 1


def run_app(main: Callable[[List[str]], Any]):
  """`absl.app.run(main)` for a binary, then its exit without Python's own
  teardown of TensorFlow, TFF and gRPC.

  After `main` the exit handlers run as usual (`atexit`: TFF workers stop,
  `_forget_tff_workers`) and standard streams are flushed; then the process
  ends with `os._exit`, with the status `sys.exit` would give. Skipped is
  only the interpreter's finalization (module teardown, the last garbage
  collection), where the C++ objects of TensorFlow's eager context and
  TFF's gRPC channels are destroyed while their threads may still run: on
  2026-11-26 `audit_mechanism` printed its results, flushed, and then died
  there with SIGSEGV (exit -11), once in a full test suite. A run's files
  are closed and flushed by then (TensorBoard after every row).
  """
  from absl import app  # pylint: disable=g-import-not-at-top
  try:
    app.run(main)
    code = 0
  except SystemExit as e:
    code = exit_code(e.code)
  atexit._run_exitfuncs()  # pylint: disable=protected-access
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):
      pass
  os._exit(code)  # pylint: disable=protected-access


def install(malloc_arenas: Optional[int] = None):
  """For binaries: quiet TF, allocator settings, worker shutdown at exit.

  Call it first thing, before TensorFlow is imported (its C++ log level is
  read at import): it sets TF_CPP_MIN_LOG_LEVEL=3 unless set (or unless
  the command line asks for --verbosity, see `console`), turns gRPC's fork
  handlers off (`configure_grpc`), defers imports nothing here uses
  (`defer_unused_imports`), configures the allocator
  (`configure_allocator`), and registers `shutdown_workers` at
  exit, on SIGTERM and SIGINT (ended within SIGNAL_GRACE_SECONDS even when
  the main thread is stuck: `_watch_signals`). Importing this module
  changes nothing.
  """
  global _installed
  if _installed:
    return
  _installed = True
  wants_logs = any(a.startswith(('--verbosity', '-v')) for a in sys.argv[1:])
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '0' if wants_logs else '3')
  configure_grpc()
  defer_unused_imports()
  configure_allocator(malloc_arenas)
  atexit.register(_at_exit)
  signal.signal(signal.SIGTERM, _on_signal)
  # Ctrl-C: let Python raise KeyboardInterrupt (atexit then runs), but also
  # make sure a hard second Ctrl-C still cleans up.
  previous = signal.getsignal(signal.SIGINT)

  def _sigint(signum, frame):
    shutdown_workers()
    if callable(previous):
      previous(signum, frame)
    else:
      raise KeyboardInterrupt
  signal.signal(signal.SIGINT, _sigint)
  _start_signal_watch()
