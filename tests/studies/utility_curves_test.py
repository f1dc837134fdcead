"""The utility-curves reproduction runs end to end at its --quick scale."""

import csv
import json
import os
import tempfile
import types
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dpftrl_tff.data import git_corpus
from dpftrl_tff.studies import utility_curves
from tests import fixtures


class _FakeRunner:
  """Runner's interface, with canned curves: run name -> (rounds, acc)."""

  def __init__(self, curves):
    self.curves, self.trained = curves, []

  def config(self, **overrides):
    return types.SimpleNamespace(**dict(dict(clients_per_round=20),
                                        **overrides))

  def train(self, name, config):
    self.trained.append((name, config.seed, config.clients_per_round,
                         config.noise_multiplier))
    return dict(eval_curve=self.curves[name], privacy={})


class ReportGoalSeedsTest(absltest.TestCase):
  """The report-goal figure over several seeds, in process."""

  def test_every_goal_and_seed_with_mean_and_band(self):
    curves = {'report_goal_10': ([1, 2], [0.1, 0.3]),
              'report_goal_10_seed2': ([1, 2], [0.2, 0.5])}
    runner = _FakeRunner(curves)
    fixed = {1: ([1, 2], [0.2, 0.4]), 2: ([1, 2], [0.3, 0.6])}
    runs = {('fixed', s): dict(eval_curve=c, privacy={})
            for s, c in fixed.items()}
    out = tempfile.mkdtemp()
    study = utility_curves.Study(
        runner=runner, scale=types.SimpleNamespace(noise_multiplier=0.5),
        seeds=(1, 2), out=out, suffix='_t', data_label='test')
    bands = []
    with mock.patch.object(utility_curves.plotting, 'panels_plot',
                           lambda path, panels, **_: bands.append(panels)):
      utility_curves.report_goal_figure(study, runs, [10, 20])
    # m = 20 is the fixed-clip run of each seed; m = 10 trained per seed
    # with z / m fixed (z = 0.5 at m = 20).
    self.assertEqual(runner.trained, [('report_goal_10', 1, 10, 0.25),
                                      ('report_goal_10_seed2', 2, 10, 0.25)])
    with open(os.path.join(out, 'utility_report_goal_t.csv')) as f:
      rows = list(csv.DictReader(f))
    self.assertEqual({(r['report_goal'], r['seed']) for r in rows},
                     {(m, s) for m in ('10', '20') for s in ('1', '2')})
    by_round = bands[0][0][1]
    label, xs, mean, low, high = by_round[1]   # m = 20.
    self.assertTrue(label.startswith('m = 20'), label)
    self.assertEqual(list(xs), [1, 2])
    np.testing.assert_allclose(mean, [25.0, 50.0])
    np.testing.assert_allclose(low, [20.0, 40.0])
    np.testing.assert_allclose(high, [30.0, 60.0])
    by_updates = bands[0][1][1]
    self.assertEqual(list(by_updates[0][1]), [10, 20])   # Rounds x m.


class AdaptiveAgainstFixedTest(absltest.TestCase):

  def test_means_over_seeds_at_fractions_of_the_rounds(self):
    xs = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    runs = {('fixed', 1): dict(eval_curve=(xs, [0.1 * i for i in range(10)])),
            ('fixed', 2): dict(eval_curve=(xs, [0.1 * i + 0.02
                                                for i in range(10)])),
            ('adaptive', 1): dict(eval_curve=(xs, [0.05 * i
                                                   for i in range(10)])),
            ('adaptive', 2): dict(eval_curve=(xs, [0.1 * i
                                                   for i in range(10)]))}
    study = utility_curves.Study(
        runner=None, scale=types.SimpleNamespace(rounds=100), seeds=(1, 2),
        out='', suffix='', data_label='test')
    rows = utility_curves.adaptive_against_fixed(study, runs)
    # A tenth of 100 rounds: round 10; a quarter: 30 (the first at or
    # after 25); half: 50; all: 100.
    self.assertEqual([r[0] for r in rows], [10, 30, 50, 100])
    x, fixed, adaptive, gap = rows[-1]
    self.assertAlmostEqual(fixed, 0.91)
    self.assertAlmostEqual(adaptive, 0.675)
    self.assertAlmostEqual(gap, -0.235)
    with mock.patch('builtins.print') as printed:
      runs[('adaptive', 1)] = dict(eval_curve=(xs, [float('nan')] * 10))
      utility_curves.print_adaptive_against_fixed(study, runs)
    text = ' '.join(str(c.args[0]) for c in printed.call_args_list)
    self.assertIn('round 100: fixed 91.00%, adaptive not finite (not finite)',
                  text)
    self.assertNotIn('nan', text)


class TargetLineTest(absltest.TestCase):

  def test_reached_and_not_reached_read_as_words_and_short_numbers(self):
    reached = dict(run='fixed', seed=1, rounds_to_target=200,
                   zcdp_at_target=1249.9999999999998, final_accuracy=0.1025)
    self.assertEqual(
        utility_curves.target_line(reached, 200),
        'fixed      seed 1: target reached at round 200 (rho-zCDP then '
        '1250), final 10.25%')
    missed = dict(run='adaptive', seed=3, rounds_to_target=None,
                  zcdp_at_target=None, final_accuracy=float('nan'))
    self.assertEqual(
        utility_curves.target_line(missed, 200),
        'adaptive   seed 3: target not reached in 200 rounds, final not '
        'finite')


_BAD_INPUT = (
    ('seeds_not_integers', ['--seeds=a'], '--seeds must be integers'),
    ('no_seeds', ['--seeds='], '--seeds must not be empty'),
    ('negative_pretraining', ['--pretrain_steps=-5'],
     "--pretrain_steps must be integers >= 0, got '-5'."),
    ('target_above_one', ['--target_accuracy=2'], '--target_accuracy'),
    ('not_a_corpus', ['--cache_dir=/nonexistent'], '--cache_dir=/nonexistent'),
    # Refused before any run (no traceback from the first run's checks).
    ('corpus_smaller_than_a_round', ['--cache_dir={few_authors}'],
     'its corpus has 3 training clients, fewer than the 20 a round'),
    ('report_goal_above_the_corpus',
     ['--cache_dir={corpus}', '--report_goals=10,100000'],
     '--report_goals=100000: the corpus in --cache_dir='),
)


class ReproduceUtilityCurvesBadInputTest(fixtures.BadInputTest):
  MODULE = 'experiments.reproduce_utility_curves'
  CASES = _BAD_INPUT
  RETURNCODE = 2

  @classmethod
  def setUpClass(cls):
    cls.corpus = fixtures.small_git_corpus()
    # 5 authors of 6 commits: 3 train, 1 heldout, 1 test.
    cls.few_authors = tempfile.mkdtemp()
    git_corpus.build(cls.few_authors, [
        git_corpus.Commit(f'{i}{k}', f'author{i}', f'2021-01-0{1 + k}',
                          f'fix the widget {k} of area {i}')
        for i in range(5) for k in range(6)], git_corpus.BuildSettings())
    super().setUpClass()

  @classmethod
  def case_args(cls, args):
    return [f'--root_output_dir={tempfile.mkdtemp()}',
            f'--output_dir={tempfile.mkdtemp()}',
            *[a.format(corpus=cls.corpus, few_authors=cls.few_authors)
              for a in args]]

  @parameterized.named_parameters(fixtures.case_parameters(_BAD_INPUT))
  def test_bad_input_is_refused_clearly(self, case, expected):
    self.check_refused(case, expected)


class ReproduceUtilityCurvesGitTest(absltest.TestCase):
  # End to end once, on real text; the generated data's path differs only in
  # where the database comes from (`Runner`), which the training tests and
  # README's demo run. ReportGoalSeedsTest covers several seeds.

  def test_quick_mode_on_a_git_corpus(self):
    corpus = fixtures.small_git_corpus()
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
    for name in ('fig1a', 'fig1b', 'report_goal', 'pretraining'):
      self.assertTrue(os.path.isfile(
          os.path.join(out, f'utility_{name}_git_quick.png')), name)
    self.assertIn('reaches the from-scratch final accuracy', proc.stdout)
    self.assertIn('pretraining (6 steps) reduces the rounds', proc.stdout)
    with open(os.path.join(out, 'utility_fig1b_git_quick.csv')) as f:
      clips = list(csv.DictReader(f))
    self.assertLen(clips, 2)   # One row per round of the adaptive run.
    with open(os.path.join(out, 'utility_report_goal_git_quick.csv')) as f:
      goal_rows = list(csv.DictReader(f))
    # Both report goals (several seeds: ReportGoalSeedsTest).
    self.assertEqual({(r['report_goal'], r['seed']) for r in goal_rows},
                     {('10', '1'), ('20', '1')})
    # z / m fixed across report goals.
    ratios = {round(float(r['noise_multiplier']) / int(r['report_goal']), 9)
              for r in goal_rows}
    self.assertLen(ratios, 1)
    with open(os.path.join(root, 'fixed_seed1', 'summary.json')) as f:
      privacy = json.load(f)['privacy']
    # The run's own guarantee (planned groups) and the labelled launch.
    self.assertIn('guaranteed_min_separation', privacy['planned'])
    self.assertIsNotNone(privacy['launch_equivalent'])


if __name__ == '__main__':
  absltest.main()
