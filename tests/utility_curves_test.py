"""The utility-curves reproduction runs end to end at its --quick scale."""

import csv
import os
import tempfile

from absl.testing import absltest

from tests import fixtures


class ReproduceUtilityCurvesTest(absltest.TestCase):

  def test_quick_mode_writes_every_figure(self):
    root, out = tempfile.mkdtemp(), tempfile.mkdtemp()
    proc = fixtures.run_module('experiments.reproduce_utility_curves',
                               '--quick', '--seeds=1',
                               f'--root_output_dir={root}',
                               f'--output_dir={out}', timeout=600)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    for name in ('fig1a', 'fig1b', 'report_goal', 'pretraining', 'targets'):
      self.assertTrue(os.path.isfile(
          os.path.join(out, f'utility_{name}_quick.csv')), name)
    for name in ('fig1a', 'fig1b', 'report_goal', 'pretraining'):
      self.assertTrue(os.path.isfile(
          os.path.join(out, f'utility_{name}_quick.png')), name)
    with open(os.path.join(out, 'utility_report_goal_quick.csv')) as f:
      rows = list(csv.DictReader(f))
    # z / m fixed across report goals.
    ratios = {round(float(r['noise_multiplier']) / int(r['report_goal']), 9)
              for r in rows}
    self.assertLen(ratios, 1)
    with open(os.path.join(out, 'utility_fig1b_quick.csv')) as f:
      clips = list(csv.DictReader(f))
    self.assertLen(clips, 2)   # One row per round of the adaptive run.
    self.assertIn('pretraining (6 steps) reduces the rounds', proc.stdout)


if __name__ == '__main__':
  absltest.main()
