"""The README's flag table lists every flag of the training binary."""

import os
import re

from absl import flags
from absl.testing import absltest

from experiments import run_stackoverflow
from tests import fixtures


class ReadmeFlagsTest(absltest.TestCase):

  def test_every_training_flag_is_in_the_readme_table(self):
    with open(os.path.join(fixtures.ROOT, 'README.md'),
              encoding='utf-8') as f:
      listed = set(re.findall(r'^\| `--([a-z0-9_]+)` \|', f.read(),
                              flags=re.MULTILINE))
    defined = {f.name for f in flags.FLAGS.get_flags_for_module(
        run_stackoverflow)}
    self.assertGreater(len(defined), 20)
    self.assertEqual(sorted(defined - listed), [],
                     'flags of experiments/run_stackoverflow.py missing from '
                     'the README flag table')
    self.assertEqual(sorted(listed - defined), [],
                     'README lists flags the binary does not define')


if __name__ == '__main__':
  absltest.main()
