"""A diverging run stops with the round and the quantity, and can resume."""

import csv
import math
import os
import tempfile

from absl.testing import absltest
import numpy as np

from dpftrl_tff import console
from dpftrl_tff import strict_json
from dpftrl_tff.run import divergence
from dpftrl_tff.run import run_directory
from tests import fixtures
from tests.run import training_test


class CheckRoundTest(absltest.TestCase):

  def _check(self, **overrides):
    args = dict(train_loss=4.0, update_norm=1.0, cohort_size=5,
                nonfinite=0, server_rejected=0.0, checkpoint_round=10)
    args.update(overrides)
    divergence.check_round(12, **args)

  def test_each_quantity(self):
    self._check()   # Finite: nothing raised.
    self._check(nonfinite=4)   # Some clients zeroed: counted, not fatal.
    for overrides, text in (
        (dict(train_loss=math.nan), 'training loss is not finite'),
        (dict(update_norm=math.inf), 'new model weights are not finite'),
        (dict(nonfinite=5), 'every client\'s update was not finite'),
        (dict(server_rejected=1.0), 'aggregated update was not finite')):
      with self.assertRaisesRegex(divergence.DivergenceError,
                                  f'Round 12 diverged: .*{text}.*'
                                  'last checkpoint, round 10.*--server_lr'):
        self._check(**overrides)

  def test_state_and_explosion(self):
    with self.assertRaisesRegex(divergence.DivergenceError, 'server state'):
      divergence.check_state([np.ones(3), np.array([1.0, np.nan])], 3)
    divergence.check_state([np.ones(3), np.array([7], np.int64)], 3)
    warnings = []
    watch = divergence.ExplosionWatch(warnings.append)
    for r, loss in enumerate([5.0, 20.0, 51.0, 80.0], 1):
      watch.update(r, loss)
    self.assertLen(warnings, 1)
    self.assertIn('round 3: training loss 51', warnings[0])

  def test_explosion_in_the_summary_and_final_lines(self):
    rows = [dict(round=r, train_loss=loss) for r, loss in
            enumerate(['5.0', 20.0, 'nan', 51.0, 80.0], 1)]   # CSV or float.
    got = divergence.explosion(rows)
    self.assertEqual(got, dict(first_round_loss=5.0, round=4, loss=51.0,
                               last_round=5, last_loss=80.0,
                               ended_exploded=True, factor=10.0))
    strict_json.loads(strict_json.dumps(got))
    lines = console.summary_text(dict(
        final_eval=dict(in_vocab_accuracy=0.001, loss=30.0), rounds=5,
        privacy=None, training_loss_explosion=got))
    self.assertIn('WARNING: the training loss exploded: round 4 51, over 10 '
                  'times the first round\'s (5); round 5 80. The final model '
                  'is a diverged one', lines)
    # Recovered by the end: said, but not that the final model diverged.
    rows.append(dict(round=6, train_loss=4.0))
    self.assertFalse(divergence.explosion(rows)['ended_exploded'])
    self.assertIsNone(divergence.explosion(rows[:3]))
    self.assertIsNone(divergence.explosion([]))
    self.assertNotIn('exploded', console.summary_text(dict(
        final_eval=dict(in_vocab_accuracy=0.2, loss=3.0), rounds=5,
        privacy=None, training_loss_explosion=None)))


class DivergingRunTest(absltest.TestCase):

  def test_diverging_run_stops_keeps_checkpoint_and_resumes_on_request(self):
    out = os.path.join(tempfile.mkdtemp(), 'run')
    config = training_test.tiny_config(
        aggregator='none', noise_multiplier=0.0, total_rounds=2,
        rounds_per_checkpoint=2)
    training_test.train(config, out)
    # Extended with an absurd client learning rate: diverges at round 3.
    bad = training_test.tiny_config(
        aggregator='none', noise_multiplier=0.0, total_rounds=6,
        rounds_per_checkpoint=2, client_lr=1e30, server_lr=1e30,
        allow_changed_learning_rates=True)
    with self.assertRaisesRegex(divergence.DivergenceError,
                                r'Round 3 diverged: .*round 2'):
      training_test.train(bad, out)
    with open(os.path.join(out, run_directory.METRICS_FILE)) as f:
      rows = list(csv.DictReader(f))
    self.assertEqual([r['round'] for r in rows], ['1', '2', '3'])
    self.assertIn('nonfinite_clients', rows[0])
    self.assertEqual(float(rows[0]['nonfinite_clients']), 0)
    last_checkpoint = run_directory.RunDirectory(out)
    self.assertEqual(last_checkpoint.latest_checkpoint_round(), 2)
    # The summary is still the finished 2-round run's, not a diverged one.
    self.assertEqual(strict_json.load(os.path.join(
        out, run_directory.SUMMARY_FILE))['rounds'], 2)
    # The original rates without the flag: refused, naming the flag.
    with self.assertRaisesRegex(ValueError, 'client_lr'):
      training_test.train(training_test.tiny_config(
          aggregator='none', noise_multiplier=0.0, total_rounds=6,
          rounds_per_checkpoint=2, client_lr=0.3), out)
    # With it: resumes from round 2 with the new rates and finishes.
    lines = []
    summary = training_test.train(training_test.tiny_config(
        aggregator='none', noise_multiplier=0.0, total_rounds=6,
        rounds_per_checkpoint=2, client_lr=0.3,
        allow_changed_learning_rates=True), out, print_fn=lines.append)
    self.assertTrue(any('Changed learning rates from round 3 on: '
                        '--client_lr 1e+30 -> 0.3' in l for l in lines),
                    lines)
    self.assertEqual(summary['rounds'], 6)
    self.assertTrue(math.isfinite(summary['final_eval']['loss']))
    # Every JSON file of the run is strict JSON (RFC 8259).
    found = []
    for folder, _, files in os.walk(out):
      for name in files:
        if name.endswith('.json'):
          found.append(name)
          strict_json.load(os.path.join(folder, name))
    self.assertContainsSubset(
        {run_directory.SUMMARY_FILE, run_directory.HPARAMS_FILE}, found)
    hparams = strict_json.load(os.path.join(out, run_directory.HPARAMS_FILE))
    self.assertEqual(hparams['client_lr'], 0.3)
    self.assertEqual(hparams['provenance'][-1]['changed_learning_rates'],
                     {'client_lr': [1e30, 0.3], 'server_lr': [1e30, 1.0]})


class DivergingBinaryTest(absltest.TestCase):

  def test_binary_exits_non_zero_with_one_line(self):
    root = tempfile.mkdtemp()
    proc = fixtures.run_module(
        'experiments.run_stackoverflow',
        f'--cache_dir={training_test.cache_dir()}', f'--root_output_dir={root}',
        '--experiment_name=x', '--vocab_size=100', '--latent_size=8',
        '--embedding_size=4', '--clients_per_round=4', '--total_rounds=3',
        '--aggregator=none', '--client_lr=1e30', '--server_lr=1e30',
        '--seed=1', '--max_elements_per_client=8', '--num_eval_examples=50')
    self.assertEqual(proc.returncode, 3, proc.stderr[-3000:])
    errors = [l for l in fixtures.own_lines(proc.stderr)
              if l.startswith('error:')]
    self.assertLen(errors, 1, proc.stderr)
    self.assertRegex(errors[0], r'Round 1 diverged: .*no checkpoint yet.*'
                     r'--server_lr')
    self.assertNotIn('Traceback', proc.stderr)
    self.assertNotIn('Final eval', proc.stdout)
    strict_json.load(os.path.join(root, 'x', run_directory.HPARAMS_FILE))


if __name__ == '__main__':
  absltest.main()
