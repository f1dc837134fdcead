"""Shared test helpers: a generated database per size, running binaries.

`python -m tests.fixtures MODULE` is the driver of `run_module_cases`: it
imports the binary once and runs every argument list it reads (a JSON list
on stdin) through the binary's own flags and `main`, as `app.run` would.
"""

import collections
import contextlib
import dataclasses
import functools
import importlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import traceback
from unittest import mock

from absl.testing import parameterized

from dpftrl_tff.data import synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=None)
def generated_cache(num_train_clients: int, num_words: int,
                    seed: int) -> str:
  """A small generated StackOverflow-format database (made once per args)."""
  cache = tempfile.mkdtemp()
  num_eval = max(3, num_train_clients // 7)
  synthetic.generate(cache, num_train_clients=num_train_clients,
                     num_heldout_clients=num_eval, num_test_clients=num_eval,
                     num_words=num_words, seed=seed)
  return cache


# What importing TensorFlow sets in os.environ (TF2_BEHAVIOR in its
# __init__.py, the others in its libraries). A binary started by a test
# process that imported TensorFlow inherits them, unlike one a user starts
# from a shell: on 2026-11-29 TF2_BEHAVIOR=1 hid a training binary that failed
# in every shell (docs/performance.md, stop 63).
TENSORFLOW_SET_ENVIRONMENT = ('TF2_BEHAVIOR', 'TPU_ML_PLATFORM',
                              'KMP_DUPLICATE_LIB_OK', 'KMP_INIT_AT_FORK')


def binary_environment(**extra: str) -> dict:
  """The environment of a binary a test starts: this process's without what
  TensorFlow's import set in it, C++ logs at warnings, plus `extra`."""
  env = {k: v for k, v in os.environ.items()
         if k not in TENSORFLOW_SET_ENVIRONMENT}
  env.update(TF_CPP_MIN_LOG_LEVEL='2', **extra)
  return env


def run_module(module: str, *args: str,
               timeout: float = 300) -> subprocess.CompletedProcess:
  """Runs `python -m module args` from the checkout root, captured."""
  env = binary_environment()
  return subprocess.run([sys.executable, '-m', module, *args], cwd=ROOT,
                        env=env, capture_output=True, text=True,
                        timeout=timeout)


def stderr_tail(text: str, size: int = 3000) -> str:
  """The end of a binary's stderr for a failure message; after a fatal
  signal, faulthandler's stacks instead (not its long list of extension
  modules, which would fill the excerpt)."""
  fatal = text.find('Fatal Python error')
  if fatal >= 0:
    text = text[fatal:].split('\nExtension modules:', 1)[0]
    return text[:size]
  return text[-size:]


_RESULTS = '=== run_module_cases results ==='


def run_module_cases(module: str, cases, timeout: float = 300):
  """Runs the binary `module` once per argument list in `cases`, all in one
  process (one TensorFlow import instead of one a case): for checks of what
  a binary says about bad input. Flags are reset to their defaults between
  cases. Returns a CompletedProcess-like result per case (returncode,
  stdout, stderr).
  """
  env = binary_environment()
  proc = subprocess.run([sys.executable, '-m', 'tests.fixtures', module],
                        input=json.dumps([list(c) for c in cases]), cwd=ROOT,
                        env=env, capture_output=True, text=True,
                        timeout=timeout)
  if proc.returncode or _RESULTS not in proc.stdout:
    raise AssertionError(f'the case driver of {module} failed:\n'
                         f'{proc.stdout[-2000:]}\n{stderr_tail(proc.stderr)}')
  results = json.loads(proc.stdout.rsplit(_RESULTS, 1)[1])
  return [subprocess.CompletedProcess([module, *args], r['returncode'],
                                      r['stdout'], r['stderr'])
          for args, r in zip(cases, results)]


def _run_case(binary, module: str, args) -> int:
  """One run of `binary.main` on `args`, as absl's app.run would."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.FLAGS.unparse_flags()
  try:
    argv = flags.FLAGS([module, *args])
  except flags.Error as e:
    print(f'FATAL Flags parsing error: {e}', file=sys.stderr)
    return 1
  try:
    code = binary.main(argv)
  except SystemExit as e:
    code = e.code
  except Exception:  # pylint: disable=broad-except
    traceback.print_exc()
    return 1
  return 0 if code is None else code


def _drive_cases(module: str):
  binary = importlib.import_module(module)
  results = []
  for args in json.load(sys.stdin):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      code = _run_case(binary, module, args)
    results.append(dict(returncode=code, stdout=out.getvalue(),
                        stderr=err.getvalue()))
  print(_RESULTS + json.dumps(results), flush=True)
  # Every binary's main stopped its TFF workers; skip the interpreter's
  # teardown, where TFF's executor factory complains about a gone module.
  from dpftrl_tff import runtime  # pylint: disable=g-import-not-at-top
  runtime.shutdown_workers()
  sys.stderr.flush()
  os._exit(0)  # pylint: disable=protected-access


def case_parameters(cases):
  """named_parameters of (name, args, expected) cases: case and expected."""
  return [dict(testcase_name=name, case=name, expected=expected)
          for name, _, expected in cases]


class BadInputTest(parameterized.TestCase):
  """Bad-input cases of one binary, run together in one process.

  A subclass sets MODULE, CASES ((name, args, text the error must hold),
  ...) and RETURNCODE (None: any failure), and may extend `case_args`; its
  parameterized test (`case_parameters(CASES)`) calls `check_refused`.
  """
  MODULE = ''
  CASES = ()
  RETURNCODE = None

  @classmethod
  def case_args(cls, args):
    return list(args)

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    results = run_module_cases(
        cls.MODULE, [cls.case_args(args) for _, args, _ in cls.CASES])
    cls.results = {name: r for (name, _, _), r in zip(cls.CASES, results)}

  def check_refused(self, case, expected):
    assert_refused(self, self.results[case], expected, self.RETURNCODE)


def assert_refused(test, proc, expected: str, returncode=2, context=None):
  """`proc` refused its command: exit code `returncode` (None: any
  failure), `expected` in its stderr, no traceback. `context` (for
  example the case's flags) goes into the failure message."""
  if returncode is None:
    test.assertNotEqual(proc.returncode, 0, proc.stdout[-2000:])
  else:
    test.assertEqual(proc.returncode, returncode,
                     (context, proc.stderr[-2000:]))
  test.assertIn(expected, proc.stderr)
  test.assertNotIn('Traceback', proc.stderr)


_TF_LOG_RE = re.compile(r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] ')


def own_lines(text: str):
  """The lines of a binary's output that are not TensorFlow's C++ logs."""
  return [line for line in text.strip().splitlines()
          if line.strip() and not _TF_LOG_RE.match(line)]


def documented_metrics():
  """(names, prefixes) of the metrics.csv columns docs/metrics.md
  documents: every backticked name in its column table's first cell, and
  the prefixes of its `name_*` patterns."""
  names, prefixes = set(), set()
  with open(os.path.join(ROOT, 'docs', 'metrics.md'), encoding='utf-8') as f:
    for line in f:
      if line.startswith('| `'):
        for token in re.findall(r'`([^`]+)`', line.split(' | ')[0]):
          if token.endswith('*'):
            prefixes.add(token[:-1])
          else:
            names.add(token)
  return names, prefixes


def assert_metrics_documented(test, metrics_csv: str):
  """Every column of the run's metrics.csv is in docs/metrics.md."""
  import csv  # pylint: disable=g-import-not-at-top
  with open(metrics_csv, encoding='utf-8') as f:
    columns = next(csv.reader(f))
  names, prefixes = documented_metrics()
  missing = [c for c in columns if c not in names and
             not any(c.startswith(p) for p in prefixes)]
  test.assertEmpty(missing, f'metrics.csv columns not in docs/metrics.md: '
                   f'{missing}')


def write_jsonl(path: str, objects) -> str:
  """Writes one JSON object a line (a commits or docs export); the path."""
  with open(path, 'w', encoding='utf-8') as f:
    for obj in objects:
      f.write(json.dumps(obj) + '\n')
  return path


def small_git_corpus() -> str:
  """A build_git_corpus output of 30 authors of 3 commits (with public
  text) in a new temporary directory; its path."""
  folder = tempfile.mkdtemp()
  commits = write_jsonl(os.path.join(folder, 'commits.jsonl'), [
      dict(commit=f'{k}-{i}', author=f'author{i}', date=f'2021-0{1 + k}-01',
           message=f'area{i % 4}: fix the widget number {k}\n\nThe widget '
           f'broke when it was empty. This keeps it safe. It was reported '
           f'twice.\n')
      for k in range(3) for i in range(30)])
  docs = write_jsonl(os.path.join(folder, 'docs.jsonl'), [dict(
      path='a.adoc',
      text='The widget is safe when it is empty. It keeps its data.\n' * 50)])
  corpus = os.path.join(folder, 'corpus')
  built = run_module('experiments.build_git_corpus',
                     f'--commits_jsonl={commits}', f'--docs_jsonl={docs}',
                     f'--output_dir={corpus}')
  if built.returncode:
    raise AssertionError(stderr_tail(built.stderr))
  return corpus


@contextlib.contextmanager
def reused_builds(capacity: int = 8):
  """While open, `learning_process.build_learning_process` returns the
  process it built before for an equal config and canaries, instead of
  building it again (about 8 s of TFF tracing each: a resumed-run test
  builds the same one three times).

  Only configs with a fixed noise seed are reused (with an unpredictable
  seed every build differs). Never open around a test that patches what a
  build runs (`broken_noise`): the patched build would not happen.
  """
  # TensorFlow's import only where a test reuses builds (see broken_noise).
  from dpftrl_tff.run import learning_process  # pylint: disable=g-import-not-at-top
  build = learning_process.build_learning_process
  built = collections.OrderedDict()

  def reusing(config, canaries=None):
    if config.noise_seed is None:
      return build(config, canaries)
    key = repr((config, canaries))
    if key in built:
      learning_process.prepare_execution(config)   # As a build would.
      built.move_to_end(key)
      return built[key]
    built[key] = build(config, canaries)
    if len(built) > capacity:
      built.popitem(last=False)
    return built[key]

  with mock.patch.object(learning_process, 'build_learning_process',
                         reusing):
    yield


@contextlib.contextmanager
def broken_noise(aggregator: str, divide_by: float):
  """While open, registry.get(aggregator)'s factory adds 1 / divide_by of
  the noise its config asks for; the accountant still counts the config's
  (an implementation mistake that an empirical audit must catch)."""
  # The registry (TensorFlow's import) only where a test breaks a mechanism:
  # the binaries' test drivers import this module too.
  from dpftrl_tff.aggregators import registry  # pylint: disable=g-import-not-at-top
  original = registry.get(aggregator)

  def broken_factory(config, record_specs):
    return original.build_factory(
        dataclasses.replace(
            config, noise_multiplier=config.noise_multiplier / divide_by),
        record_specs)

  broken = dataclasses.replace(original, build_factory=broken_factory)
  get = registry.get
  with mock.patch.object(
      registry, 'get',
      lambda name: broken if name == aggregator else get(name)):
    yield


if __name__ == '__main__':
  _drive_cases(sys.argv[1])
