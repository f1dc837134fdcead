"""Test-suite hygiene: no TFF worker_binary survives a test module."""

import atexit
import os
import shutil
import sys
import tempfile

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# Every temporary file of this test process and of the binaries it starts
# (tempfile honours TMPDIR; TensorFlow's autograph writes its generated
# modules there too) goes into one directory, removed when the process
# ends: before, each suite run left about 150 directories in /tmp.
_TEMP_ROOT = tempfile.mkdtemp(prefix='dpftrl_tests_')
tempfile.tempdir = _TEMP_ROOT
os.environ['TMPDIR'] = _TEMP_ROOT
atexit.register(shutil.rmtree, _TEMP_ROOT, ignore_errors=True)

import pytest  # pylint: disable=g-import-not-at-top

from dpftrl_tff import runtime  # pylint: disable=g-import-not-at-top

# gRPC's fork handlers off in the test processes and the binaries they
# start, as `runtime.install` does for a binary; only before gRPC loads.
if not runtime.configure_grpc():
  raise RuntimeError('gRPC was imported before tests/conftest.py: its fork '
                     'handlers stay on (runtime.configure_grpc).')
# As `install` does: TensorFlow Probability, which TFF's import would load
# for nothing this project uses, is imported only if something reads it.
runtime.defer_unused_imports()

from dpftrl_tff import tff_compat  # pylint: disable=g-import-not-at-top,g-bad-import-order


@pytest.fixture(autouse=True, scope='module')
def _stop_tff_workers():
  if 'tensorflow_federated' in sys.modules:
    tff_compat.install()
  yield
  runtime.shutdown_workers()
  if 'tensorflow_federated' in sys.modules:
    # A module may have switched to TFF's test context (SecAgg); give the
    # next one the default context with a fresh worker.
    tff = sys.modules['tensorflow_federated']
    tff.backends.native.set_sync_local_cpp_execution_context()


def pytest_sessionfinish(session, exitstatus):
  del session, exitstatus
  runtime.shutdown_workers()
  runtime._forget_tff_workers()  # pylint: disable=protected-access


# The classes that take longest go first: pytest-xdist hands out test
# classes (--dist loadscope) in collection order, so a long class collected
# last would run alone at the end while the other workers idle (longest
# first is the classic rule for spreading jobs over workers). Only with
# --no-loadscope-reorder (the Makefile's; tests/makefile_test.py): by
# default xdist 3.8 sorts the classes by their number of tests, which put
# README's one-test git class, the longest, among the last. Every class of
# 45 s or more, longest first, by their summed test durations in a
# `--durations=0` run of the whole suite (2026-11-29, 2-core VM, 3 workers,
# seconds): without the seven added then, the resident-process class (108 s)
# ran last, alone for its last 70 s.
_SLOW_FIRST = (
    'tests/run/training_test.py::TrainingLoopTest',                    # 419
    'tests/readme_commands_test.py::GitHistoryCommandsTest',           # 395
    'tests/remote/remote_test.py::RemoteTest',                         # 323
    'tests/run/training_test.py::BinaryTest',                          # 170
    'tests/readme_commands_test.py::OtherBinariesCommandsTest',        # 169
    'tests/empirical/canaries_test.py::CanaryTrainingTest',            # 166
    'tests/studies/utility_curves_test.py::ReproduceUtilityCurvesGitTest',
    'tests/studies/noise_sweep_test.py::NoiseSweepBinaryTest',         # 134
    'tests/empirical/exposure_binary_test.py::ReproduceExposureTest',  # 127
    'tests/empirical/canaries_test.py::BrokenMechanismInTrainingTest',  # 122
    'tests/aggregators/noise_seed_test.py::MechanismSeedTest',         # 115
    'tests/tff_compat/resident_test.py::ResidentProcessTest',          # 108
    'tests/aggregators/noise_seed_test.py::TrainingSeedTest',          # 90
    'tests/accounting/accounting_binaries_test.py::ReproduceTest',     # 90
    'tests/readme_commands_test.py::TwoCommandsTest',                  # 89
    'tests/empirical/canary_audit_test.py::CanaryAuditTest',           # 72
    'tests/aggregators/adaptive_clipping_test.py::AdaptiveClippingTest',  # 63
    'tests/privacy/plan_launch_test.py::ReproduceParticipationTest',   # 62
    'tests/run/divergence_test.py::DivergingRunTest',                  # 55
    'tests/bazel_test.py::BazelTest',                                  # 53
    'tests/aggregators/secagg_test.py::FactoryTest',                   # 50
    'tests/run/training_test.py::LostWorkerTest',                      # 48
)


def _slow_rank(item):
  for rank, prefix in enumerate(_SLOW_FIRST):
    if item.nodeid.startswith(prefix + '::'):
      return rank
  return len(_SLOW_FIRST)


def pytest_collection_modifyitems(session, config, items):
  del session, config
  items.sort(key=_slow_rank)   # Stable: the rest keep their order.
