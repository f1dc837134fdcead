"""experiments.recommend: bad input, and what an end-to-end run must give.

The end-to-end run (--quick) is README's own recommend command, run by
tests/readme_commands_test.py, which checks it with `check_recommendation`.
"""

import json
import os
import tempfile

from absl.testing import absltest

from dpftrl_tff.recommend import report
from dpftrl_tff.recommend import search
from tests import fixtures


def check_recommendation(test, out, run_again):
  """What a recommendation must be, checked on `out` (an --output_dir of
  `experiments.recommend --quick`): every key the issue lists, the figures
  and report, the flag files taken as they are by the binaries (the
  accountant's own epsilon, the measured run reused), and `run_again()`
  (the same command again) reusing every simulation.

  Run by tests/readme_commands_test.py on README's own recommend command
  (one end-to-end run of the tool serves both).
  """
  with open(os.path.join(out, 'recommendation.json')) as f:
    text = f.read()
  result = json.loads(text, parse_constant=lambda c: test.fail(c))
  sim, launch = result['simulation'], result['launch']
  for key in ('flagfile', 'clients_per_round', 'noise_multiplier',
              'clip_norm', 'server_lr', 'client_lr', 'rounds',
              'eval_accuracy', 'unigram_accuracy', 'no_dp_accuracy'):
    test.assertIn(key, sim)
  for key in ('flagfile', 'report_goal', 'noise_multiplier', 'rounds',
              'population', 'min_separation', 'max_participation',
              'timer_hours', 'simulated_days', 'short_rounds', 'epsilon',
              'delta', 'meets_privacy_target'):
    test.assertIn(key, launch)
  # The launch's duration is its chosen timer simulation's.
  (chosen,) = [s for s in result['timer_simulations']
               if (s['report_goal'], s['timer_hours']) ==
               (launch['report_goal'], launch['timer_hours'])]
  test.assertEqual(launch['simulated_days'], chosen['simulated_days'])
  test.assertEqual(launch['short_rounds'], chosen['short_rounds'])
  test.assertIn('meets_utility_target', result)
  test.assertIn('noise_above_no_noise', result)
  # Each setting ran at every seed asked for (README's test asks for two),
  # and simulation.flags names its first.
  seeds = sim['seeds']
  test.assertEqual(len(seeds), result['budget']['seeds'])
  test.assertEqual(len(sim['seed_accuracies']), len(seeds))
  for seed in seeds[1:]:
    test.assertTrue(os.path.isfile(os.path.join(
        f'{sim["run_dir"]}_seed{seed}', 'metrics.csv')), seed)
  # README's test asks for --learning_rates_at_every_seed=2: with --quick's
  # two pairs, both ran at every seed too, and the higher mean was chosen.
  again = result['learning_rate_runs_at_every_seed']
  if again:
    test.assertLen(again, 2)
    for row in again:
      test.assertEqual(row['seeds'], seeds)
      for seed in seeds[1:]:
        test.assertTrue(os.path.isfile(os.path.join(
            out, 'runs', f'{row["name"]}_seed{seed}', 'metrics.csv')), seed)
    means = [r for r in again if r['accuracy'] is not None]
    means = [r for r in means if not r['exploded']] or means
    if means:
      best = max(means, key=lambda r: (r['accuracy'], -r['client_lr'],
                                       -r['server_lr']))
      test.assertEqual((sim['client_lr'], sim['server_lr']),
                       (best['client_lr'], best['server_lr']))
  # README's test asks for --learning_rates_past_grid_edge: a pair past the
  # grid's edge ran only from a best pair at it, and ran (--quick's two
  # pairs are inside the grid, so none does there).
  test.assertTrue(result['budget']['learning_rates_past_grid_edge'])
  grid = search.LEARNING_RATE_GRID
  for row in result['learning_rate_runs']:
    pair = (row['client_lr'], row['server_lr'])
    test.assertEqual(bool(row.get('past_grid_edge')), pair not in grid, pair)
    test.assertTrue(os.path.isfile(os.path.join(
        out, 'runs', row['name'], 'metrics.csv')), pair)
  # Met for the launch only if met in simulation (report.utility_verdict).
  test.assertLessEqual(result['meets_utility_target'],
                       result['meets_utility_target_in_simulation'])
  test.assertIn('utility_target', result)
  # The launch keeps at least the simulated noise per client; where the
  # utility target is met, the simulation had the launch's (a run at a
  # capped launch's noise rounds its z up at 6 significant digits).
  launch_per_client = launch['noise_multiplier'] / launch['report_goal']
  sim_per_client = sim['noise_multiplier'] / sim['clients_per_round']
  test.assertGreaterEqual(launch_per_client, sim_per_client * (1 - 1e-5))
  if result['meets_utility_target']:
    test.assertLessEqual(launch_per_client, sim_per_client * (1 + 1e-9))
  if result['launch_noise_run'] is None:
    test.assertGreaterEqual(launch_per_client, sim_per_client * (1 - 1e-9))
  if launch['meets_privacy_target']:
    test.assertLessEqual(launch['epsilon'], 10 + 1e-9)
  for name in ('recommendation.md', 'privacy_report.md', 'noise.png',
               'learning_rates.png', 'launch_epsilon.png', 'timer.png'):
    test.assertTrue(os.path.isfile(os.path.join(out, name)), name)
  with open(os.path.join(out, 'recommendation.md')) as f:
    markdown = f.read()
  for text in ('Privacy of the tuning runs', 'proxy', 'utility target',
               f'. It {report.utility_verdict(result)}.',
               'Timer (practice 4)', '--quick',
               f'its {launch["rounds"]} rounds take '
               f'{launch["simulated_days"]:.1f} days'):
    test.assertIn(text, markdown)

  # The launch flag file, as it is: the accountant's own epsilon.
  accountant = fixtures.run_module(
      'experiments.privacy_accountant', f'--flagfile={launch["flagfile"]}',
      '--json')
  test.assertEqual(accountant.returncode, 0, accountant.stderr[-2000:])
  test.assertAlmostEqual(json.loads(accountant.stdout)['epsilon'],
                         launch['epsilon'], delta=1e-6)
  # The simulation flag file, as it is: the run it measured, reused.
  training = fixtures.run_module(
      'experiments.run_stackoverflow', f'--flagfile={sim["flagfile"]}')
  test.assertEqual(training.returncode, 0, training.stderr[-2000:])
  # (Its first seed's: the simulation's accuracy is the seeds' mean.)
  test.assertIn(f'accuracy: {sim["seed_accuracies"][0]:.4f}',
                training.stdout)
  # Its launch-equivalent line is of the planned launch's report goal,
  # rounds and population, at the simulation's noise per client.
  test.assertIn(f'a launch with report goal {launch["report_goal"]} and the '
                f'same noise per client', training.stdout)
  test.assertIn(f'population {launch["population"]:,}', training.stdout)
  test.assertIn(f'T={launch["rounds"]},', training.stdout)

  # Run again: every simulation is reused, the same recommendation.
  metrics = {}
  runs = os.path.join(out, 'runs')
  for name in os.listdir(runs):
    path = os.path.join(runs, name, 'metrics.csv')
    if os.path.isfile(path):
      metrics[name] = os.path.getmtime(path)
  test.assertGreaterEqual(len(metrics), 4)   # 2 lr pairs, no noise, z
  again = run_again()
  test.assertEqual(again.returncode, 0, again.stderr[-3000:])
  # The launch's timer-model simulations too.
  test.assertIn('reusing the timer model', again.stdout)
  test.assertNotIn('simulating the timer model', again.stdout)
  for name, mtime in metrics.items():
    test.assertEqual(
        os.path.getmtime(os.path.join(runs, name, 'metrics.csv')), mtime,
        name)
  with open(os.path.join(out, 'recommendation.json')) as f:
    second = json.load(f)
  test.assertEqual(second['simulation']['eval_accuracy'],
                   sim['eval_accuracy'])


class RecommendTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.corpus = fixtures.small_git_corpus()

  def test_bad_input_is_one_line(self):
    cases = (
        (['--population=0'], '--population'),
        (['--target_epsilon=-1'], '--target_epsilon'),
        (['--timer_hours=x'], '--timer_hours'),
        (['--seeds=0'], '--seeds'),
        (['--learning_rates_at_every_seed=2'],
         '--learning_rates_at_every_seed=2 needs --seeds of 2 or more'),
        (['--seeds=3', '--learning_rates_at_every_seed=9'],
         '--learning_rates_at_every_seed must be an integer <= 8'),
        (['--max_report_goal=2', '--clients_per_round=20'],
         '--max_report_goal'),
        (['--population=30'], '--population=30: its launch can have a '
         'report goal of at most 15'),
        # Before any simulation: the launch's timer model would not fit.
        (['--population=1000000000000'],
         '--population=1000000000000: simulating the participation'),
        (['--cache_dir=/nonexistent'], '/nonexistent'),
        # More clients a round than the corpus's training split holds:
        # refused before any pretraining or simulation.
        (['--clients_per_round=500'], '--clients_per_round=500: the corpus '
         'in --cache_dir='))
    # One process for these (one TensorFlow import) ...
    results = fixtures.run_module_cases('experiments.recommend', [
        [f'--cache_dir={self.corpus}', '--population=1000',
         f'--output_dir={tempfile.mkdtemp()}', *args] for args, _ in cases])
    # ... and a process of its own for a refused simulation, whose
    # training binary writes to the same stderr (no traceback there either).
    refused = ['--quick', '--pretrain_steps=0', '--',
               '--client_batch_size=0']
    cases += ((refused, 'refused'),)
    results.append(fixtures.run_module(
        'experiments.recommend', f'--cache_dir={self.corpus}',
        '--population=1000', f'--output_dir={tempfile.mkdtemp()}', *refused))
    for (args, expected), proc in zip(cases, results):
      fixtures.assert_refused(self, proc, expected, context=args)


if __name__ == '__main__':
  absltest.main()
