"""docs/flags.md lists every flag of the training binary."""

import os
import re

from absl.testing import absltest

from tests import fixtures


def _defined_flags():
  """Flag names the training binary defines, from its --helpshort.

  Read from a subprocess, not by importing: the binaries define flags of
  the same names (--root_output_dir), which one test process cannot hold
  twice; and most flags are generated from dpftrl_tff.run.config.TrainConfig.
  """
  proc = fixtures.run_module('experiments.run_stackoverflow', '--helpshort',
                             timeout=120)
  return set(re.findall(r'^\s+--(?:\[no\])?([a-z0-9_]+):', proc.stdout,
                        flags=re.MULTILINE))


class ReadmeFlagsTest(absltest.TestCase):

  def test_every_training_flag_is_in_the_readme_table(self):
    with open(os.path.join(fixtures.ROOT, 'docs', 'flags.md'),
              encoding='utf-8') as f:
      listed = set(re.findall(r'^\| `--([a-z0-9_]+)` \|', f.read(),
                              flags=re.MULTILINE))
    defined = _defined_flags()
    self.assertGreater(len(defined), 20)
    self.assertEqual(sorted(defined - listed), [],
                     'flags of experiments/run_stackoverflow.py missing from '
                     'docs/flags.md')
    self.assertEqual(sorted(listed - defined), [],
                     'docs/flags.md lists flags the binary does not define')


if __name__ == '__main__':
  absltest.main()
