"""Tests of the noise-multiplier sweep binary."""

import csv
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized

from experiments import noise_sweep
from tests import fixtures


class SummarizeTest(absltest.TestCase):

  def test_mean_and_sample_std_per_noise_multiplier(self):
    rows = [dict(noise_multiplier=z, eval_in_vocab_accuracy=a, eval_loss=l)
            for z, a, l in [(1.0, 0.2, 5.0), (0.0, 0.3, 4.0),
                            (1.0, 0.4, 3.0)]]
    table = noise_sweep.summarize(rows)
    self.assertEqual([r['noise_multiplier'] for r in table], [0.0, 1.0])
    self.assertEqual(table[0]['runs'], 1)
    self.assertAlmostEqual(table[0]['accuracy_std'], 0.0)
    self.assertAlmostEqual(table[1]['accuracy_mean'], 0.3)
    # Sample std of (0.2, 0.4): sqrt(0.02) (ddof 1).
    self.assertAlmostEqual(table[1]['accuracy_std'], 0.02**0.5)
    self.assertAlmostEqual(table[1]['loss_mean'], 4.0)


class NoiseSweepBinaryTest(parameterized.TestCase):

  def test_runs_grid_writes_tables_and_plot_and_resumes(self):
    root = tempfile.mkdtemp()
    flagfile = os.path.join(root, 'tiny.flags')
    with open(flagfile, 'w') as f:
      f.write('\n'.join([
          f'--cache_dir={fixtures.generated_cache(210, 400, 1)}',
          '--aggregator=dp_ftrl', '--clip_norm=0.5', '--total_rounds=2',
          '--clients_per_round=3', '--vocab_size=100', '--latent_size=8',
          '--embedding_size=4', '--max_elements_per_client=8',
          '--rounds_per_eval=2', '--num_eval_examples=50',
          '--rounds_per_checkpoint=2', '--launch_population=1000000'])
              + '\n')
    args = ['--noise_multipliers=0,2', '--seeds=4',
            f'--training_flagfile={flagfile}', f'--root_output_dir={root}']
    proc = fixtures.run_module('experiments.noise_sweep', *args, timeout=600)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    with open(os.path.join(root, 'noise_sweep.csv')) as f:
      rows = list(csv.DictReader(f))
    self.assertEqual([(r['noise_multiplier'], r['seed']) for r in rows],
                     [('0.0', '4'), ('2.0', '4')])
    # No noise: no privacy, which reads 'none', never 0.
    self.assertEqual((rows[0]['zcdp'], rows[0]['epsilon'],
                      rows[0]['privacy']), ('', '', 'none'))
    self.assertGreater(float(rows[1]['zcdp']), 0.0)
    self.assertEqual(rows[0]['launch_epsilon'], '')     # No noise, none.
    # z = 2 at 3 clients is z = 2 * 6500 / 3 at the launch's report goal.
    self.assertLess(float(rows[1]['launch_epsilon']),
                    float(rows[1]['epsilon']))
    self.assertIn('launch-equivalent epsilon', proc.stdout)
    for r in rows:
      self.assertEqual(r['rounds'], '2')
      self.assertEqual(r['client_updates'], '6')   # 2 rounds x 3 clients.
      self.assertBetween(float(r['eval_in_vocab_accuracy']), 0.0, 1.0)
    self.assertTrue(os.path.isfile(os.path.join(root, 'noise_sweep.png')))
    self.assertTrue(os.path.isfile(
        os.path.join(root, 'noise_sweep_summary.csv')))
    # Finished runs of the same flags are reused, not run again.
    again = fixtures.run_module('experiments.noise_sweep', *args,
                                timeout=600)
    self.assertEqual(again.returncode, 0, again.stderr[-3000:])
    self.assertEqual(again.stdout.count('nothing to do'), 2, again.stdout)
    self.assertNotIn('round 1/2', again.stdout)
    # Other flags after `--` never reuse them: the run is refused, by name,
    # and the sweep with it (exit 2: re-running the same command will not
    # help).
    other = fixtures.run_module('experiments.noise_sweep', *args, '--',
                                '--client_lr=0.7', timeout=600)
    self.assertEqual(other.returncode, 2)
    self.assertIn('client_lr: 0.5 -> 0.7', other.stderr)
    self.assertIn('z0_seed4', other.stderr)


_BAD_INPUT = (
    ('negative_z', ['--noise_multipliers=-1'], '--noise_multipliers'),
    ('nan_z', ['--noise_multipliers=nan'], '--noise_multipliers'),
    ('bad_seed', ['--seeds=x'], '--seeds'),
    ('missing_flagfile', ['--training_flagfile=/nonexistent.flags'],
     '--training_flagfile'))


class BadInputTest(fixtures.BadInputTest):
  MODULE = 'experiments.noise_sweep'
  CASES = _BAD_INPUT
  RETURNCODE = 2

  @classmethod
  def case_args(cls, args):
    return list(args) + [f'--root_output_dir={tempfile.mkdtemp()}']

  @parameterized.named_parameters(fixtures.case_parameters(_BAD_INPUT))
  def test_bad_input_is_refused_clearly(self, case, expected):
    self.check_refused(case, expected)


if __name__ == '__main__':
  absltest.main()
