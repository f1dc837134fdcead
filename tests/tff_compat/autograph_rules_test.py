"""autograph_rules: the modules it names exist, and a training process
built with its rules has the same TensorFlow graphs as one built without."""

import collections
import importlib.util

from absl.testing import absltest
import tensorflow as tf
from tensorflow.python.autograph.core import config as autograph_config

from dpftrl_tff import tff_compat
from dpftrl_tff.run import learning_process
from dpftrl_tff.tff_compat import autograph_rules
from tests.run import training_test


def _op_counts(computation) -> collections.Counter:
  """Every TensorFlow op of a TFF computation (its graphs and their
  function libraries), by type and dtype attributes."""
  counts = collections.Counter()

  def add(node_defs):
    for node in node_defs:
      dtypes = sorted((k, str(v)) for k, v in node.attr.items()
                      if k in ('T', 'dtype', 'Tidx', 'out_type'))
      counts[(node.op, tuple(dtypes))] += 1

  def walk(message):
    for field, value in message.ListFields():
      if field.message_type is None:
        continue
      for item in (value if field.label == field.LABEL_REPEATED
                   else [value]):
        if field.message_type.full_name == 'google.protobuf.Any':
          graph = tf.compat.v1.GraphDef()
          if item.Unpack(graph):
            add(graph.node)
            for function in graph.library.function:
              add(function.node_def)
        elif hasattr(item, 'ListFields'):
          walk(item)

  walk(computation.to_building_block().proto)
  return counts


class AutographRulesTest(absltest.TestCase):

  def tearDown(self):
    super().tearDown()
    tff_compat.install()

  def test_every_named_module_exists(self):
    for module in autograph_rules.PURE_MODULES:
      self.assertIsNotNone(importlib.util.find_spec(module), module)

  def test_install_is_idempotent_and_uninstall_removes_only_its_rules(self):
    autograph_rules.uninstall()
    before = tuple(autograph_config.CONVERSION_RULES)
    self.assertFalse(autograph_rules.installed())
    autograph_rules.install()
    autograph_rules.install()
    self.assertTrue(autograph_rules.installed())
    self.assertLen(autograph_config.CONVERSION_RULES,
                   len(before) + len(autograph_rules.PURE_MODULES))
    autograph_rules.uninstall()
    self.assertEqual(tuple(autograph_config.CONVERSION_RULES), before)

  def test_same_graphs_with_and_without_the_rules(self):
    config = training_test.tiny_config(aggregator='dp_ftrl_adaptive',
                                       clipped_count_stddev=1.0)
    counts = {}
    for rules in (False, True):
      if rules:
        autograph_rules.install()
      else:
        autograph_rules.uninstall()
      process = learning_process.build_learning_process(config)
      counts[rules] = (_op_counts(process.initialize),
                       _op_counts(process.next))
    self.assertGreater(sum(counts[False][1].values()), 1000)
    self.assertEqual(counts[True], counts[False])


if __name__ == '__main__':
  absltest.main()
