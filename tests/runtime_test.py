"""runtime.run_app: a binary's exit status, exit handlers, flushed output,
and no interpreter teardown; every binary that loads TFF exits through it.
runtime.install: gRPC's fork handlers off; SIGTERM ends a stuck binary;
imports nothing here uses deferred until first used."""

import os
import pathlib
import signal
import subprocess
import sys
import tempfile

from absl.testing import absltest
from absl.testing import parameterized

from dpftrl_tff import runtime

ROOT = pathlib.Path(__file__).resolve().parent.parent

# A binary whose main returns or raises what argv[1] says. Its output is not
# flushed by hand; the exit handler must run; the module-level object's
# __del__ runs only in the interpreter's teardown, which run_app skips.
_SCRIPT = r'''
import atexit
import sys
from dpftrl_tff import runtime

class Teardown:
  def __del__(self):
    print('teardown ran', flush=True)

TEARDOWN = Teardown()
atexit.register(lambda: print('exit handler ran'))

def main(argv):
  print('main ran')
  what = argv[1]
  if what == 'message':
    raise SystemExit('one line for the user')
  return None if what == 'none' else int(what)

runtime.run_app(main)
'''


# A binary whose main thread waits on a lock (as TFF binaries wait for TFF's
# event loop) when SIGTERM is delivered to argv[1]: 'main' (the main thread:
# Python's handler runs at once) or 'other' (another thread: the handler
# cannot run until the wait ends, which it never does here).
_STUCK_SCRIPT = r'''
import signal, sys, threading, time
from dpftrl_tff import runtime
runtime.SIGNAL_GRACE_SECONDS = 1.0
runtime.install()
target = sys.argv[1]
main_id = threading.main_thread().ident

def send():
  time.sleep(0.5)
  signal.pthread_kill(main_id if target == 'main' else threading.get_ident(),
                      signal.SIGTERM)
  time.sleep(60)

threading.Thread(target=send, daemon=True).start()
lock = threading.Lock()
lock.acquire()
lock.acquire()   # Forever, unless a signal ends the process.
'''


# A process that forks as every worker start does (Popen with preexec_fn
# forks; without it Python may vfork, which runs no fork handlers) while a
# gRPC channel's connectivity-polling thread runs. gRPC's fork handlers,
# when on, log every fork at INFO: "Other threads are currently calling
# into gRPC, skipping fork() handlers", or they stop and restart gRPC's
# threads around it.
_FORK_SCRIPT = r'''
import subprocess, sys, time
from dpftrl_tff import runtime
if sys.argv[1] == 'install':
  runtime.install()
import grpc
channel = grpc.insecure_channel('localhost:1')
channel.subscribe(lambda state: None, try_to_connect=True)
for _ in range(20):
  subprocess.run(['true'], preexec_fn=lambda: None, check=True)
  time.sleep(0.01)
print('forked', flush=True)
'''


def _environment_without_grpc_setting():
  """This process's environment less `runtime.GRPC_ENVIRONMENT`'s names."""
  return {k: v for k, v in os.environ.items()
          if k not in runtime.GRPC_ENVIRONMENT}


class GrpcForkTest(absltest.TestCase):

  def _fork_log(self, how):
    env = _environment_without_grpc_setting()
    env['GRPC_VERBOSITY'] = 'INFO'
    proc = subprocess.run([sys.executable, '-c', _FORK_SCRIPT, how],
                          cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    self.assertEqual(proc.returncode, 0, proc.stderr)
    self.assertIn('forked', proc.stdout)
    return proc.stderr

  def test_a_binary_forks_without_grpc_fork_handlers(self):
    self.assertNotIn('fork', self._fork_log('install').lower())

  def test_without_the_runtime_the_handlers_run(self):
    # The probe sees gRPC's default: the handlers on.
    self.assertIn('fork() handlers', self._fork_log('plain'))

  def test_configure_grpc_keeps_a_setting_and_says_when_it_is_late(self):
    self.assertEqual(runtime.configure_grpc(), 'grpc' not in sys.modules)
    script = ('import os, sys; from dpftrl_tff import runtime; '
              'print(runtime.configure_grpc(), '
              'os.environ["GRPC_ENABLE_FORK_SUPPORT"]); import grpc; '
              'print(runtime.configure_grpc())')
    for preset, expected in ((None, 'True 0\nFalse\n'),
                             ('1', 'True 1\nFalse\n')):
      env = _environment_without_grpc_setting()
      if preset is not None:
        env['GRPC_ENABLE_FORK_SUPPORT'] = preset
      proc = subprocess.run([sys.executable, '-c', script], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
      self.assertEqual(proc.stdout, expected, proc.stderr)


class SignalTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('main_thread', 'main', -signal.SIGTERM, ''),
      ('other_thread', 'other', 128 + signal.SIGTERM,
       'stopped by signal SIGTERM, which the main thread did not act on '
       'within 1 s'))
  def test_sigterm_ends_a_process_whose_main_thread_is_stuck(
      self, target, code, message):
    proc = subprocess.run([sys.executable, '-c', _STUCK_SCRIPT, target],
                          cwd=ROOT, capture_output=True, text=True,
                          timeout=30)
    self.assertEqual(proc.returncode, code, proc.stderr)
    self.assertIn(message, proc.stderr)


class RunAppTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('zero', '0', 0), ('none', 'none', 0), ('three', '3', 3),
      ('message', 'message', 1))
  def test_exit_status_handlers_output_and_no_teardown(self, what, code):
    proc = subprocess.run([sys.executable, '-c', _SCRIPT, what], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    self.assertEqual(proc.returncode, code, proc.stderr)
    self.assertIn('main ran', proc.stdout)
    self.assertIn('exit handler ran', proc.stdout)
    self.assertNotIn('teardown ran', proc.stdout)
    if what == 'message':
      self.assertIn('one line for the user', proc.stderr)

  def test_exit_code_as_the_interpreter_computes_it(self):
    self.assertEqual(runtime.exit_code(None), 0)
    self.assertEqual(runtime.exit_code(2), 2)
    self.assertEqual(runtime.exit_code(256 + 3), 3)

  def test_every_binary_that_installs_the_runtime_exits_through_run_app(self):
    # Binaries that start TFF at import (runtime.install at the top) end in
    # run_app, whose exit skips the teardown that once segfaulted.
    missing = []
    for folder in ('experiments', 'benchmarks'):
      for path in sorted((ROOT / folder).glob('*.py')):
        text = path.read_text()
        if '\nruntime.install(' in text and 'runtime.run_app(main)' not in text:
          missing.append(str(path.relative_to(ROOT)))
    self.assertEmpty(missing)

  def test_every_binary_quiets_library_logs(self):
    # absl INFO lines from the libraries (the BLT optimizer's, once 102 of
    # them in compare_mechanisms) are not a binary's output.
    missing = []
    for path in sorted((ROOT / 'experiments').glob('*.py')):
      text = path.read_text()
      if 'def main(' in text and not any(
          call in text for call in ('console.run_main(',
                                    'console.quiet_libraries()')):
        missing.append(str(path.relative_to(ROOT)))
    self.assertEmpty(missing)


# TFF imported after runtime.install: TensorFlow Probability (imported by TF
# Privacy for samplers this project does not call) is not loaded; TF
# Privacy's discrete Gaussian sampler, which uses it, still works.
_DEFERRED_SCRIPT = r"""
import sys
from dpftrl_tff import runtime
runtime.install()
import tensorflow as tf
import tensorflow_federated
print('loaded at import:', 'tensorflow_probability.python' in sys.modules)
# Autograph reads __file__ of every module in sys.modules at each function
# it converts (every training build does).
@tf.function
def count(n):
  total = tf.constant(0)
  for i in tf.range(n):
    total += i
  return total
print('converted:', int(count(tf.constant(4))))
print('loaded by autograph:', 'tensorflow_probability.python' in sys.modules)
from tensorflow_privacy.privacy.dp_query import discrete_gaussian_utils
draws = discrete_gaussian_utils.sample_discrete_gaussian(
    scale=tf.constant(3, tf.int64), shape=tf.constant([1000]),
    dtype=tf.int64).numpy()
print('draws:', draws.dtype, draws.shape, round(float(draws.std())))
print('loaded when used:', 'tensorflow_probability.python' in sys.modules)
"""


class DeferredImportTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp()
    sys.path.insert(0, self.root)
    self.addCleanup(sys.path.remove, self.root)

  def _package(self, name):
    """A package that counts its imports in `sys.deferred_probe`, with a
    submodule `sub`."""
    os.makedirs(os.path.join(self.root, name))
    with open(os.path.join(self.root, name, '__init__.py'), 'w') as f:
      f.write('import sys\n'
              'sys.deferred_probe = getattr(sys, "deferred_probe", 0) + 1\n'
              'VALUE = 42\n')
    with open(os.path.join(self.root, name, 'sub.py'), 'w') as f:
      f.write('SUB = 7\n')
    self.addCleanup(lambda: [sys.modules.pop(k) for k in list(sys.modules)
                             if k == name or k.startswith(name + '.')])
    sys.deferred_probe = 0
    return name

  def test_imported_when_first_read_and_once(self):
    name = self._package('deferred_probe_a')
    self.assertEqual(runtime.defer_unused_imports((name,)), [name])
    module = __import__(name)   # As `import name` does.
    self.assertEqual(sys.deferred_probe, 0)
    self.assertEqual(module.VALUE, 42)
    self.assertEqual(sys.deferred_probe, 1)
    self.assertEqual(__import__(name).VALUE, 42)
    self.assertEqual(module.VALUE, 42)
    self.assertEqual(sys.deferred_probe, 1)

  def test_file_is_read_without_importing(self):
    name = self._package('deferred_probe_c')
    runtime.defer_unused_imports((name,))
    stand_in = sys.modules[name]
    self.assertEqual(stand_in.__file__,
                     os.path.join(self.root, name, '__init__.py'))
    self.assertEqual(sys.deferred_probe, 0)
    self.assertEqual(stand_in.VALUE, 42)
    self.assertEqual(stand_in.__file__, __import__(name).__file__)

  def test_from_import_and_submodule_import(self):
    name = self._package('deferred_probe_b')
    runtime.defer_unused_imports((name,))
    namespace = {}
    exec(f'from {name} import VALUE\nimport {name}.sub as sub',  # pylint: disable=exec-used
         namespace)
    self.assertEqual((namespace['VALUE'], namespace['sub'].SUB), (42, 7))
    self.assertEqual(sys.deferred_probe, 1)

  def test_missing_or_imported_modules_are_left_alone(self):
    self.assertEqual(runtime.defer_unused_imports(
        ('no_such_module_here', 'os')), [])
    self.assertNotIn('no_such_module_here', sys.modules)
    self.assertIs(sys.modules['os'], os)

  def test_tff_imports_without_tensorflow_probability_which_still_works(self):
    # A file, not `-c`: autograph converts only functions with a source.
    script = os.path.join(self.root, 'deferred_script.py')
    with open(script, 'w') as f:
      f.write(_DEFERRED_SCRIPT)
    proc = subprocess.run([sys.executable, script], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=300)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn('loaded at import: False', proc.stdout)
    self.assertIn('converted: 6', proc.stdout)
    self.assertIn('loaded by autograph: False', proc.stdout)
    self.assertIn('draws: int64 (1000,) 3', proc.stdout)
    self.assertIn('loaded when used: True', proc.stdout)


if __name__ == '__main__':
  absltest.main()
