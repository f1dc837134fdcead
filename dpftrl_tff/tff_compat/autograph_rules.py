"""Library modules that autograph leaves as they are: pure Python structure
code that TFF traces at every process build.

Autograph rewrites every function a `tf.function` calls (parsing its source,
transforming the syntax tree, compiling the result) unless a rule of
`tensorflow.python.autograph.core.config.CONVERSION_RULES` says not to; it
already skips TensorFlow, Keras and NumPy. Building a training process
converted about 100 functions, 2.3 CPU-seconds of a tiny training binary's
start (measured 2026-11-27, docs/performance.md), most of them TFF's and
attrs' helpers that only walk Python structures: `nest_utils.map_at_leaves`
alone 0.39 s. Their control flow tests Python values only (`is None`,
`isinstance`, `len`, key membership), so the converted and the unconverted
function trace the same operations: the graph, hence every result, is the
same (tests/tff_compat/autograph_rules_test.py). A function of these modules
that branched on a tensor would fail at trace time, not change a result.

Functions whose loops or branches depend on tensors keep autograph: TFF's
client update (its loop over the dataset), `tensor_utils`, TF Privacy's
tree aggregation.
"""

from typing import Tuple

# Prefixes of module names, as autograph's rules match them.
PURE_MODULES: Tuple[str, ...] = (
    'attr',   # attrs: class machinery.
    'tensorflow_federated.python.common_libs',   # structure, py_typecheck.
    'tensorflow_federated.python.learning.metrics.counters',
    'tensorflow_federated.python.learning.metrics.keras_finalizer',
    'tensorflow_federated.python.learning.models.keras_utils',
    'tensorflow_federated.python.learning.optimizers.nest_utils',
    'tensorflow_federated.python.learning.optimizers.optimizer',
    'tensorflow_federated.python.learning.optimizers.sgdm',
    'tensorflow_federated.python.simulation.datasets.sql_client_data',
    'tensorflow_federated.python.simulation.datasets.stackoverflow',
    # This project's Keras layers and metrics: loops over Python lists only.
    'dpftrl_tff.models',
    'dpftrl_tff.run.metrics',
)


def install() -> bool:
  """Puts a do-not-convert rule for each of `PURE_MODULES` first in
  autograph's rules (idempotent); returns True."""
  from tensorflow.python.autograph.core import config  # pylint: disable=g-import-not-at-top
  if not installed():
    config.CONVERSION_RULES = (
        tuple(config.DoNotConvert(m) for m in PURE_MODULES)
        + tuple(config.CONVERSION_RULES))
  return True


def installed() -> bool:
  """Whether every module of `PURE_MODULES` has its rule."""
  from tensorflow.python.autograph.core import config  # pylint: disable=g-import-not-at-top
  have = {str(rule) for rule in config.CONVERSION_RULES}
  return all(str(config.DoNotConvert(m)) in have for m in PURE_MODULES)


def uninstall():
  """Removes the rules `install` added (tests compare both ways)."""
  from tensorflow.python.autograph.core import config  # pylint: disable=g-import-not-at-top
  ours = {str(config.DoNotConvert(m)) for m in PURE_MODULES}
  config.CONVERSION_RULES = tuple(rule for rule in config.CONVERSION_RULES
                                  if str(rule) not in ours)
