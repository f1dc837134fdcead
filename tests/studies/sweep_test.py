"""Tests of the general sweep: grid, tied axes, summaries, frontier, plots.

The runs themselves go through dpftrl_tff.studies.training_runs, exercised end to
end (runs, reuse, refusal) by tests/studies/noise_sweep_test.py.
"""

import contextlib
import csv
import io
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest
from absl.testing import parameterized

from dpftrl_tff.studies import sweeps
from dpftrl_tff.studies import training_runs
from tests import fixtures


_BAD_INPUT = (
    ('axis_value_its_flag_cannot_take', ['--axis=clients_per_round=4,abc'],
     "--axis / --tie point {'clients_per_round': 'abc'}"),
    ('unknown_axis_flag', ['--axis=nonexistent_flag=1,2'],
     'is not a training flag'),
    ('tie_to_no_axis', ['--axis=clients_per_round=10',
                        '--tie=noise_multiplier=0.025*client_lr'],
     'is not an --axis'),
    ('no_axis', [], '--axis: give at least one axis'),
    # Refused by the training binary (its flags after `--`): the sweep
    # stops with exit 2 too (it was 1, as if re-running could help).
    ('a_run_its_binary_refuses', ['--axis=client_lr=0.5', '--',
                                  '--client_batch_size=0'],
     'the run client_lr0.5_seed1 was refused (exit code 2)'),
)


class SweepBinaryBadInputTest(fixtures.BadInputTest):
  # The binary's own lines (the library's checks are tested below): exit 2,
  # no traceback, before any run.
  MODULE = 'experiments.sweep'
  CASES = _BAD_INPUT
  RETURNCODE = 2

  @classmethod
  def case_args(cls, args):
    return [f'--root_output_dir={tempfile.mkdtemp()}', *args]

  @parameterized.named_parameters(fixtures.case_parameters(_BAD_INPUT))
  def test_bad_input_is_refused_clearly(self, case, expected):
    self.check_refused(case, expected)


class GridTest(parameterized.TestCase):

  def test_tied_axis_keeps_z_over_m_constant(self):
    axes = sweeps.parse_axes(['clients_per_round=10,20,40,80',
                             'client_lr=0.5,1.0'])
    ties = sweeps.parse_ties(['noise_multiplier=0.075*clients_per_round'],
                            axes)
    points = sweeps.grid_points(axes, ties)
    self.assertLen(points, 8)
    for p in points:
      self.assertAlmostEqual(p['noise_multiplier'] / p['clients_per_round'],
                             0.075)
    self.assertEqual([p['clients_per_round'] for p in points[:2]], [10, 10])
    self.assertEqual(sweeps.point_name(points[0], 3),
                     'clients_per_round10_client_lr0.5_noise_multiplier0.75'
                     '_seed3')

  @parameterized.named_parameters(
      ('no_equals', ['noise_multiplier'], [], 'expected NAME=V1,V2'),
      ('unknown', ['learning_rate=1,2'], [], "'learning_rate' is not a "
       'training flag'),
      ('seed_axis', ['seed=1,2'], [], 'set by the sweep itself'),
      ('twice', ['client_lr=1', 'client_lr=2'], [], 'given twice'),
      ('repeated_value', ['client_lr=1,1'], [], 'repeated'),
      ('tie_unknown_axis', ['client_lr=1,2'],
       ['noise_multiplier=0.1*clients_per_round'], "'clients_per_round' is "
       'not an --axis'),
      ('tie_bad_ratio', ['clients_per_round=1,2'],
       ['noise_multiplier=x*clients_per_round'], 'finite number RATIO'),
      ('tie_on_axis', ['clients_per_round=1,2', 'noise_multiplier=1'],
       ['noise_multiplier=0.1*clients_per_round'], 'already set'),
      ('tie_on_text', ['aggregator=dp_ftrl,none'],
       ['noise_multiplier=0.1*aggregator'], 'not numeric'))
  def test_bad_grids_are_refused(self, axes, ties, message):
    with self.assertRaisesRegex(ValueError, message):
      sweeps.parse_ties(ties, sweeps.parse_axes(axes))


class SummaryTest(absltest.TestCase):

  def test_per_point_mean_and_sample_std(self):
    rows = [dict(clients_per_round=m, noise_multiplier=z,
                 eval_in_vocab_accuracy=a, eval_loss=5.0, zcdp=1.0,
                 epsilon=2.0, launch_epsilon=None)
            for m, z, a in [(10, 1.0, 0.2), (20, 2.0, 0.3), (10, 1.0, 0.4)]]
    table = sweeps.summarize(rows, ['clients_per_round', 'noise_multiplier'])
    self.assertEqual([(r['clients_per_round'], r['runs']) for r in table],
                     [(10, 2), (20, 1)])
    self.assertAlmostEqual(table[0]['accuracy_mean'], 0.3)
    self.assertAlmostEqual(table[0]['accuracy_std'], 0.02**0.5)

  def test_frontier_keeps_only_undominated_points(self):
    # (epsilon, accuracy): (2, 20) dominates (3, 18); (1, 10) and (5, 25)
    # are kept; (5, 22) is dominated by (5, 25).
    points = [(3, 18), (1, 10), (2, 20), (5, 25), (5, 22)]
    self.assertEqual(sweeps.frontier(points), [1, 2, 3])


class RunSweepTest(absltest.TestCase):

  def test_rows_tables_and_plots(self):
    root = tempfile.mkdtemp()
    calls = []

    def fake_run(run_root, name, flags):
      calls.append((name, flags))
      m = int([f for f in flags if f.startswith('--clients_per_round=')][0]
              .split('=')[1])
      z = float([f for f in flags if f.startswith('--noise_multiplier=')][0]
                .split('=')[1])
      return dict(rounds=5, final_eval=dict(in_vocab_accuracy=0.1 + m / 1000,
                                            loss=5.0),
                  privacy=dict(zcdp=1 / z, epsilon=10 / z,
                               launch_equivalent=dict(zcdp=0.1 / z,
                                                      epsilon=1 / z)),
                  unigram_baseline_accuracy=0.09)

    original = training_runs.run_training
    training_runs.run_training = fake_run
    try:
      axes = sweeps.parse_axes(['clients_per_round=10,20', 'client_lr=0.5,1'])
      ties = sweeps.parse_ties(['noise_multiplier=0.1*clients_per_round'],
                              axes)
      rows, table = sweeps.run_sweep(root=root, flagfile='x.flags', axes=axes,
                                    ties=ties, seeds=[1, 2],
                                    extra_flags=['--total_rounds=5'])
    finally:
      training_runs.run_training = original
    self.assertLen(calls, 8)
    self.assertIn('--noise_multiplier=2.0', calls[-1][1])
    # The point's values and seed come after the flags for every run, so a
    # flag file there cannot override an axis (absl keeps the last value).
    self.assertEqual(calls[-1][1][:2], ['--flagfile=x.flags',
                                        '--total_rounds=5'])
    self.assertEqual(calls[-1][1][-1], '--seed=2')
    self.assertEqual(rows[0]['client_updates'], 50)
    self.assertLen(table, 4)
    for name in ('sweep.csv', 'sweep_summary.csv', 'sweep_heatmap.png',
                 'sweep_frontier.png'):
      self.assertTrue(os.path.isfile(os.path.join(root, name)), name)


  def test_a_run_with_other_values_than_its_point_is_refused(self):
    # Found on 2026-11-25: `-- --flagfile=configs/demo.flags` after an axis
    # on noise_multiplier made the z = 0 point train with the file's 0.5,
    # and sweep.csv reported it as z = 0.
    root = tempfile.mkdtemp()

    def fake_run(run_root, name, flags):
      del flags
      os.makedirs(os.path.join(run_root, name))
      with open(os.path.join(run_root, name, 'hparams.json'), 'w') as f:
        json.dump(dict(noise_multiplier=0.5, seed=0), f)
      return dict(rounds=5, final_eval=dict(in_vocab_accuracy=0.1, loss=5.0))

    original = training_runs.run_training
    training_runs.run_training = fake_run
    try:
      with self.assertRaisesRegex(RuntimeError, 'trained with '
                                  'noise_multiplier=0.5, not the sweep\'s '
                                  'noise_multiplier=0;'):
        sweeps.run_sweep(root=root, flagfile='x.flags',
                         axes=sweeps.parse_axes(['noise_multiplier=0,0.5']),
                         ties=[], seeds=[0], extra_flags=[])
    finally:
      training_runs.run_training = original


class PrivacyNoneAndDivergenceTest(absltest.TestCase):

  def test_no_privacy_reads_none_never_zero(self):
    row = sweeps.run_row(dict(noise_multiplier=0.0), 1, dict(
        rounds=5, final_eval=dict(in_vocab_accuracy=0.2, loss=4.0),
        privacy=None, unigram_baseline_accuracy=0.1))
    self.assertIsNone(row['epsilon'])
    self.assertIsNone(row['zcdp'])
    self.assertEqual(row['privacy'], 'none')
    root = tempfile.mkdtemp()
    path = os.path.join(root, 'x.csv')
    sweeps.run_directory.write_csv_atomic(path, [row])
    with open(path) as f:
      rows = list(csv.DictReader(f))
    self.assertEqual((rows[0]['epsilon'], rows[0]['privacy']), ('', 'none'))
    table = sweeps.summarize([row], ['noise_multiplier'])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
      sweeps.print_table(table, ['noise_multiplier'])
    self.assertRegex(out.getvalue().splitlines()[1], r' none$')

  def test_bad_axis_value_is_refused_before_any_run(self):
    calls = []
    original = training_runs.run_training
    training_runs.run_training = lambda *a: calls.append(a)
    try:
      with self.assertRaisesRegex(ValueError,
                                  r"'abc'.*clients_per_round|"
                                  r"clients_per_round.*'abc'"):
        sweeps.run_sweep(
            root=tempfile.mkdtemp(), flagfile='x.flags',
            axes=sweeps.parse_axes(['clients_per_round=4,abc']), ties=[],
            seeds=[1], extra_flags=[])
    finally:
      training_runs.run_training = original
    self.assertEqual(calls, [])

  def test_diverged_point_is_recorded_and_the_sweep_goes_on(self):
    def fake_run(run_root, name, flags):
      del run_root, flags
      if 'client_lr100' in name:
        raise training_runs.DivergedRun(f'the run {name} diverged')
      return dict(rounds=5, final_eval=dict(in_vocab_accuracy=0.2, loss=4.0),
                  privacy=None, unigram_baseline_accuracy=0.1,
                  training_loss_explosion=dict(ended_exploded=True) if
                  'client_lr10_' in name else None)

    original = training_runs.run_training
    training_runs.run_training = fake_run
    root = tempfile.mkdtemp()
    try:
      with contextlib.redirect_stdout(io.StringIO()) as out:
        rows, table = sweeps.run_sweep(
            root=root, flagfile='x.flags',
            axes=sweeps.parse_axes(['client_lr=1,10,100']), ties=[],
            seeds=[1], extra_flags=[])
    finally:
      training_runs.run_training = original
    # One axis: no heatmap, and the output says why.
    self.assertFalse(os.path.exists(os.path.join(root, 'sweep_heatmap.png')))
    self.assertIn('No sweep_heatmap.png: the grid varies 1 axis (client_lr); '
                  'a heatmap needs exactly two.', out.getvalue())
    self.assertEqual([r['status'] for r in rows],
                     ['finished', 'loss exploded', 'diverged'])
    self.assertTrue(math.isnan(table[2]['accuracy_mean']))
    self.assertEqual(table[2]['diverged'], 1)
    self.assertEqual((table[1]['loss_exploded'], table[1]['accuracy_mean']),
                     (1, 0.2))


class ChildLifeTest(absltest.TestCase):

  def test_a_killed_launcher_takes_its_child_down(self):
    # The launcher runs a child through run_child, then is SIGKILLed: the
    # child (which would sleep for minutes) must die with it.
    folder = tempfile.mkdtemp()
    pid_file = os.path.join(folder, 'child.pid')
    launcher = subprocess.Popen([sys.executable, '-c', (
        'import sys; from dpftrl_tff.studies import training_runs; '
        'training_runs.run_child([sys.executable, "-c", '
        f'"import os, time; open({pid_file!r}, \'w\').write(str(os.getpid()));'
        ' time.sleep(300)"])')], cwd=fixtures.ROOT)
    deadline = time.monotonic() + 60
    while not os.path.exists(pid_file) or not open(pid_file).read():
      self.assertLess(time.monotonic(), deadline)
      time.sleep(0.1)
    child = int(open(pid_file).read())
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    deadline = time.monotonic() + 20
    while _alive(child):
      self.assertLess(time.monotonic(), deadline, 'the child outlived it')
      time.sleep(0.1)


def _alive(pid):
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().split(')')[-1].split()[0] != 'Z'
  except OSError:
    return False


if __name__ == '__main__':
  absltest.main()
