"""Workarounds for TensorFlow Federated 0.87, installed explicitly.

Importing dpftrl_tff changes no global state. A binary's `main` (and the
test suite) calls `install()`, which applies, for the supported TFF version
only:

  worker               TFF's C++ worker dies with its parent (PR_SET_PDEATHSIG)
                       and a worker that ignores SIGINT is killed after 10 s
                       (`worker.py`); switch: DPFTRL_TFF_WORKER_PATCH=0.
  fast_serialization   struct and federated values sent to the worker are
                       encoded without TFF's per-level copies
                       (`fast_serialization.py`, byte-identical);
                       switch: DPFTRL_TFF_FAST_SERIALIZATION=0.
  autograph_rules      autograph leaves TFF's, attrs' and this project's pure
                       structure helpers unconverted: about 0.6 CPU-s less
                       at every process build, the same graph
                       (`autograph_rules.py`);
                       switch: DPFTRL_TFF_AUTOGRAPH_RULES=0.

`resident.ResidentProcess` (the server state kept in the worker between
rounds) and `set_execution_context` (TFF's test context for SecAgg's secure
sums) are used explicitly, not patched in.

On another TFF version `install()` applies nothing and logs which version it
supports: the patches reach into TFF internals that change between versions.
"""

import os
from typing import Dict

from absl import logging

SUPPORTED_TFF_VERSION = '0.87.0'
WORKER_SWITCH = 'DPFTRL_TFF_WORKER_PATCH'
AUTOGRAPH_SWITCH = 'DPFTRL_TFF_AUTOGRAPH_RULES'


def _enabled(switch: str) -> bool:
  return os.environ.get(switch, '1') != '0'


def install() -> Dict[str, bool]:
  """Applies the workarounds (idempotent); returns which are active."""
  # TFF only when the workarounds are installed.
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from dpftrl_tff.tff_compat import autograph_rules  # pylint: disable=g-import-not-at-top
  from dpftrl_tff.tff_compat import fast_serialization  # pylint: disable=g-import-not-at-top
  from dpftrl_tff.tff_compat import worker  # pylint: disable=g-import-not-at-top
  if tff.__version__ != SUPPORTED_TFF_VERSION:
    logging.warning(
        'dpftrl_tff.tff_compat supports tensorflow-federated %s, found %s: '
        'its patches are not applied (runs are slower, and a killed run may '
        'leave a TFF worker_binary behind).', SUPPORTED_TFF_VERSION,
        tff.__version__)
    return dict(worker=False, fast_serialization=False,
                autograph_rules=False)
  active = dict(worker=False, fast_serialization=False,
                autograph_rules=False)
  if _enabled(WORKER_SWITCH):
    active['worker'] = worker.patch_worker_launch()
  active['fast_serialization'] = fast_serialization.install()
  if _enabled(AUTOGRAPH_SWITCH):
    active['autograph_rules'] = autograph_rules.install()
  return active


def set_execution_context(*, secure_sums: bool):
  """The one place that chooses TFF's execution context.

  Secure-sum intrinsics (SecAgg's `federated_secure_modular_sum`) run in
  simulation only under TFF's test context, which replaces them with plain
  sums mod M; otherwise the context TFF sets at import (a local C++ worker)
  is kept.
  """
  # TFF only when the workarounds are installed.
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  if secure_sums:
    tff.backends.test.set_sync_test_cpp_execution_context()
