"""The README's flag table lists every flag of the training binary."""

import ast
import os
import re

from absl.testing import absltest

from tests import fixtures


def _defined_flags(path):
  """Names of the flags.DEFINE_* calls in a module's source.

  Read from the source, not by importing: the binaries define flags of the
  same names (--root_output_dir), which one test process cannot hold twice.
  """
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read())
  names = set()
  for node in ast.walk(tree):
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr.startswith('DEFINE_') and node.args
        and isinstance(node.args[0], ast.Constant)):
      names.add(node.args[0].value)
  return names


class ReadmeFlagsTest(absltest.TestCase):

  def test_every_training_flag_is_in_the_readme_table(self):
    with open(os.path.join(fixtures.ROOT, 'README.md'),
              encoding='utf-8') as f:
      listed = set(re.findall(r'^\| `--([a-z0-9_]+)` \|', f.read(),
                              flags=re.MULTILINE))
    defined = _defined_flags(os.path.join(
        fixtures.ROOT, 'experiments', 'run_stackoverflow.py'))
    self.assertGreater(len(defined), 20)
    self.assertEqual(sorted(defined - listed), [],
                     'flags of experiments/run_stackoverflow.py missing from '
                     'the README flag table')
    self.assertEqual(sorted(listed - defined), [],
                     'README lists flags the binary does not define')


if __name__ == '__main__':
  absltest.main()
