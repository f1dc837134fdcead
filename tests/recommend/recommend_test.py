"""experiments.recommend end to end (--quick) on a small git corpus."""

import json
import os
import tempfile

from absl.testing import absltest

from tests import fixtures


class RecommendTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.corpus = fixtures.small_git_corpus()
    cls.out = tempfile.mkdtemp()
    cls.args = ['--quick', f'--cache_dir={cls.corpus}',
                f'--output_dir={cls.out}', '--population=100000',
                '--launch_rounds=200', '--clients_per_round=4',
                '--timer_hours=24,48']
    cls.proc = fixtures.run_module('experiments.recommend', *cls.args,
                                   timeout=900)

  def test_writes_a_recommendation_the_binaries_take_as_it_is(self):
    self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-3000:])
    self.assertIn('Plan:', self.proc.stdout)
    self.assertIn('ETA', self.proc.stdout)
    with open(os.path.join(self.out, 'recommendation.json')) as f:
      text = f.read()
    result = json.loads(text, parse_constant=lambda c: self.fail(c))
    sim, launch = result['simulation'], result['launch']
    for key in ('flagfile', 'clients_per_round', 'noise_multiplier',
                'clip_norm', 'server_lr', 'client_lr', 'rounds',
                'eval_accuracy', 'unigram_accuracy', 'no_dp_accuracy'):
      self.assertIn(key, sim)
    for key in ('flagfile', 'report_goal', 'noise_multiplier', 'rounds',
                'population', 'min_separation', 'max_participation',
                'timer_hours', 'epsilon', 'delta', 'meets_privacy_target'):
      self.assertIn(key, launch)
    self.assertIn('meets_utility_target', result)
    self.assertIn('utility_target', result)
    # The launch keeps at least the simulated noise per client.
    self.assertGreaterEqual(
        launch['noise_multiplier'] / launch['report_goal'],
        sim['noise_multiplier'] / sim['clients_per_round'] * (1 - 1e-9))
    if launch['meets_privacy_target']:
      self.assertLessEqual(launch['epsilon'], 10 + 1e-9)
    for name in ('recommendation.md', 'privacy_report.md', 'noise.png',
                 'learning_rates.png', 'launch_epsilon.png', 'timer.png'):
      self.assertTrue(os.path.isfile(os.path.join(self.out, name)), name)
    with open(os.path.join(self.out, 'recommendation.md')) as f:
      markdown = f.read()
    for text in ('Privacy of the tuning runs', 'proxy', 'utility target',
                 'Timer (practice 4)', '--quick'):
      self.assertIn(text, markdown)

    # The launch flag file, as it is: the accountant's own epsilon.
    accountant = fixtures.run_module(
        'experiments.privacy_accountant', f'--flagfile={launch["flagfile"]}',
        '--json')
    self.assertEqual(accountant.returncode, 0, accountant.stderr[-2000:])
    self.assertAlmostEqual(json.loads(accountant.stdout)['epsilon'],
                           launch['epsilon'], delta=1e-6)
    # The simulation flag file, as it is: the run it measured, reused.
    training = fixtures.run_module(
        'experiments.run_stackoverflow', f'--flagfile={sim["flagfile"]}')
    self.assertEqual(training.returncode, 0, training.stderr[-2000:])
    self.assertIn(f'accuracy: {sim["eval_accuracy"]:.4f}', training.stdout)

    # Run again: every simulation is reused, the same recommendation.
    metrics = {}
    runs = os.path.join(self.out, 'runs')
    for name in os.listdir(runs):
      path = os.path.join(runs, name, 'metrics.csv')
      if os.path.isfile(path):
        metrics[name] = os.path.getmtime(path)
    again = fixtures.run_module('experiments.recommend', *self.args,
                                timeout=900)
    self.assertEqual(again.returncode, 0, again.stderr[-3000:])
    for name, mtime in metrics.items():
      self.assertEqual(
          os.path.getmtime(os.path.join(runs, name, 'metrics.csv')), mtime,
          name)
    with open(os.path.join(self.out, 'recommendation.json')) as f:
      second = json.load(f)
    self.assertEqual(second['simulation']['eval_accuracy'],
                     sim['eval_accuracy'])

  def test_bad_input_is_one_line(self):
    for args, expected in (
        (['--population=0'], '--population'),
        (['--target_epsilon=-1'], '--target_epsilon'),
        (['--timer_hours=x'], '--timer_hours'),
        (['--max_report_goal=2', '--clients_per_round=20'],
         '--max_report_goal'),
        (['--cache_dir=/nonexistent'], '/nonexistent'),
        (['--quick', '--pretrain_steps=0', '--', '--client_batch_size=0'],
         'refused')):
      proc = fixtures.run_module(
          'experiments.recommend', f'--cache_dir={self.corpus}',
          '--population=1000', f'--output_dir={tempfile.mkdtemp()}', *args)
      self.assertEqual(proc.returncode, 2, (args, proc.stderr[-1000:]))
      self.assertIn(expected, proc.stderr)
      self.assertNotIn('Traceback', proc.stderr)


if __name__ == '__main__':
  absltest.main()
