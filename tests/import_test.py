"""Importing the library changes no global state; binaries install patches."""

import ast
import os
import pathlib
import subprocess
import sys

from absl.testing import absltest

from tests import fixtures

_SCRIPT = """
import os, signal, sys
import tensorflow_federated   # TensorFlow sets its own log level.
before_signals = (signal.getsignal(signal.SIGINT),
                  signal.getsignal(signal.SIGTERM))
tf_level = os.environ.get('TF_CPP_MIN_LOG_LEVEL')
import dpftrl_tff
from dpftrl_tff import (accounting, console, models, participation, plotting,
                        runtime, tff_compat)
from dpftrl_tff.data import stackoverflow, synthetic
from dpftrl_tff.run import (config, loop, metrics, progress, run_directory,
                            training)
from dpftrl_tff.aggregators import (adaptive, dp_ftrl, fused_clip, registry,
                                    secagg)
from dpftrl_tff.tff_compat import (autograph_rules, fast_serialization,
                                   resident, worker)
from tensorflow_federated.python.core.impl.executor_stacks import (
    executor_factory)
from tensorflow_federated.python.core.impl.executors import remote_executor
checks = dict(
    log_level=os.environ.get('TF_CPP_MIN_LOG_LEVEL') == tf_level,
    malloc=os.environ.get('MALLOC_MMAP_MAX_'),
    signals=(signal.getsignal(signal.SIGINT),
             signal.getsignal(signal.SIGTERM)) == before_signals,
    popen_patched=executor_factory.subprocess.Popen is worker._WorkerPopen,
    serialization=fast_serialization.installed(),
    autograph=autograph_rules.installed(),
    pyplot='matplotlib.pyplot' in sys.modules)
print(checks)
active = tff_compat.install()
print(active, executor_factory.subprocess.Popen is worker._WorkerPopen,
      fast_serialization.installed(), autograph_rules.installed())
"""


class ImportTest(absltest.TestCase):

  def test_import_is_inert_and_install_is_explicit(self):
    env = {k: v for k, v in os.environ.items()
           if k not in ('TF_CPP_MIN_LOG_LEVEL', 'MALLOC_MMAP_MAX_')}
    proc = subprocess.run([sys.executable, '-c', _SCRIPT], cwd=fixtures.ROOT,
                          env=env, capture_output=True, text=True,
                          timeout=300)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    first, second = proc.stdout.strip().splitlines()[-2:]
    self.assertEqual(first, str(dict(
        log_level=True, malloc=None, signals=True, popen_patched=False,
        serialization=False, autograph=False, pyplot=False)))
    self.assertEqual(
        second, "{'worker': True, 'fast_serialization': True, "
        "'autograph_rules': True} True True True")


  def test_the_library_defines_no_flags_at_import(self):
    # Flags belong to the binaries (`config.define_flags`,
    # `data_flags.define_flags`); importing every library module defines
    # none (data_flags defined the data flags at import until 2026-11-27).
    script = (
        'import os, pkgutil, importlib\n'
        'from absl import flags\n'
        'import tensorflow, tensorflow_datasets, tensorflow_federated\n'
        'before = set(flags.FLAGS)\n'
        'import dpftrl_tff\n'
        'for m in pkgutil.walk_packages(dpftrl_tff.__path__, "dpftrl_tff."):\n'
        '  importlib.import_module(m.name)\n'
        'print("NEW", sorted(set(flags.FLAGS) - before), flush=True)\n'
        'os._exit(0)\n')
    proc = subprocess.run([sys.executable, '-c', script], cwd=fixtures.ROOT,
                          capture_output=True, text=True, timeout=300)
    self.assertIn('NEW []', proc.stdout, fixtures.stderr_tail(proc.stderr))

  def test_binaries_without_training_do_not_load_tensorflow(self):
    # Accounting, planning and the launchers of training subprocesses run
    # in a fraction of a second without TensorFlow (its import is about
    # 2.5 s, TFF's 4 s). Until 2026-11-26 every binary imported it to quiet
    # its logs, and the accountant imported TFF to validate z.
    cases = (
        ('privacy_accountant', '--rounds=930', '--noise_multiplier=7',
         '--min_separation=212', '--max_participation=4'),
        ('privacy_accountant', '--rounds=100', '--noise_multiplier=1',
         '--population=10000', '--report_goal=100',
         '--aggregator=dp_ftrl_adaptive'),
        ('plan_launch', '--population=20000', '--rounds=60',
         '--report_goals=6500', '--timer_hours=24', '--target_epsilon=10'),
        ('reproduce_tables',),
        ('reproduce_exposure', '--canary_phrases=0'),
        ('sweep', '--axis=client_lr=1,1'),
        ('noise_sweep', '--noise_multipliers=-1'),
    )
    # plan_launch also keeps freed memory (glibc's allocator settings of the
    # training binaries): its timer model's per-round arrays cost system
    # time when mapped afresh.
    script = ('import atexit, os, runpy, sys\n'
              'atexit.register(lambda: print("LOADED", "tensorflow" in '
              'sys.modules, "MMAP_MAX", os.environ.get("MALLOC_MMAP_MAX_"), '
              'file=sys.stderr))\n'
              'sys.argv = sys.argv[1:]\n'
              'runpy.run_module("experiments." + sys.argv[0], '
              'run_name="__main__")\n')
    env = {k: v for k, v in os.environ.items()
           if not k.startswith('MALLOC_')}
    for case in cases:
      proc = subprocess.run([sys.executable, '-c', script, *case],
                            cwd=fixtures.ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
      self.assertIn('LOADED False', proc.stderr,
                    f'{case}: {fixtures.stderr_tail(proc.stderr)}')
      if case[0] == 'plan_launch':
        self.assertIn('MMAP_MAX 0', proc.stderr)

  def test_no_binary_or_library_module_imports_a_binary(self):
    # Binaries are thin (flags to library calls): the library and the other
    # binaries never import one.
    root = pathlib.Path(fixtures.ROOT)
    offenders = []
    for path in sorted([*root.glob('experiments/*.py'),
                        *root.glob('dpftrl_tff/**/*.py'),
                        *root.glob('benchmarks/*.py')]):
      for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
          names = [node.module]
        elif isinstance(node, ast.Import):
          names = [alias.name for alias in node.names]
        if any(name.split('.')[0] == 'experiments' for name in names):
          offenders.append(f'{path.relative_to(root)}:{node.lineno}')
    self.assertEmpty(offenders)


if __name__ == '__main__':
  absltest.main()
