"""Test-suite hygiene: no TFF worker_binary survives a test module."""

import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import pytest  # pylint: disable=g-import-not-at-top

from dpftrl_tff import runtime  # pylint: disable=g-import-not-at-top
from dpftrl_tff import tff_compat  # pylint: disable=g-import-not-at-top


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
