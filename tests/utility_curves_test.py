"""The utility-curves reproduction runs end to end at its --quick scale."""

import csv
import json
import os
import tempfile

from absl.testing import absltest

from tests import fixtures


class ReproduceUtilityCurvesTest(absltest.TestCase):

  def test_quick_mode_writes_every_figure(self):
    root, out = tempfile.mkdtemp(), tempfile.mkdtemp()
    proc = fixtures.run_module('experiments.reproduce_utility_curves',
                               '--quick', '--seeds=1,2',
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
    # Every report goal over every seed (mean and band in the figure).
    self.assertEqual({(r['report_goal'], r['seed']) for r in rows},
                     {(m, s) for m in ('10', '20') for s in ('1', '2')})
    with open(os.path.join(out, 'utility_fig1b_quick.csv')) as f:
      clips = list(csv.DictReader(f))
    self.assertLen(clips, 2)   # One row per round of the adaptive run.
    self.assertIn('pretraining (6 steps) reduces the rounds', proc.stdout)


class ReproduceUtilityCurvesGitTest(absltest.TestCase):
  # A class of its own: it runs beside the generated-data test.

  def test_quick_mode_on_a_git_corpus(self):
    folder = tempfile.mkdtemp()
    commits = fixtures.write_jsonl(os.path.join(folder, 'commits.jsonl'), [
        dict(commit=f'{k}-{i}', author=f'author{i}', date=f'2021-0{1 + k}-01',
             message=f'area{i % 4}: fix the widget number {k}\n\nThe '
             f'widget broke when it was empty. This keeps it safe. It was '
             f'reported twice.\n')
        for k in range(3) for i in range(30)])
    docs = fixtures.write_jsonl(os.path.join(folder, 'docs.jsonl'), [dict(
        path='a.adoc',
        text='The widget is safe when it is empty. It keeps its data.\n' * 50)])
    corpus = os.path.join(folder, 'corpus')
    built = fixtures.run_module(
        'experiments.build_git_corpus', f'--commits_jsonl={commits}',
        f'--docs_jsonl={docs}', f'--output_dir={corpus}')
    self.assertEqual(built.returncode, 0, built.stderr[-2000:])
    root, out = tempfile.mkdtemp(), tempfile.mkdtemp()
    proc = fixtures.run_module('experiments.reproduce_utility_curves',
                               '--quick', '--seeds=1',
                               f'--cache_dir={corpus}',
                               f'--root_output_dir={root}',
                               f'--output_dir={out}', timeout=600)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    for name in ('fig1a', 'fig1b', 'report_goal', 'pretraining', 'targets'):
      self.assertTrue(os.path.isfile(
          os.path.join(out, f'utility_{name}_git_quick.csv')), name)
    self.assertIn('reaches the from-scratch final accuracy', proc.stdout)
    with open(os.path.join(out, 'utility_report_goal_git_quick.csv')) as f:
      goal_rows = list(csv.DictReader(f))
    # Both report goals (several seeds: the generated-data test).
    self.assertEqual({(r['report_goal'], r['seed']) for r in goal_rows},
                     {('10', '1'), ('20', '1')})
    with open(os.path.join(root, 'fixed_seed1', 'summary.json')) as f:
      privacy = json.load(f)['privacy']
    # The run's own guarantee (planned groups) and the labelled launch.
    self.assertIn('guaranteed_min_separation', privacy['planned'])
    self.assertIsNotNone(privacy['launch_equivalent'])


if __name__ == '__main__':
  absltest.main()
