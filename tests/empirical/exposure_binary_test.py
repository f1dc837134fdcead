"""experiments.reproduce_exposure end to end at a tiny scale."""

import csv
import json
import os
import tempfile

from absl.testing import absltest

from tests import fixtures


class ReproduceExposureTest(absltest.TestCase):

  def test_three_runs_write_the_table(self):
    root = tempfile.mkdtemp()
    tiny = ['--total_rounds=2', '--num_eval_examples=50',
            '--rounds_per_eval=2', '--synthetic_train_clients=200',
            '--clients_per_round=10', '--vocab_size=100',
            '--latent_size=8', '--embedding_size=4']
    proc = fixtures.run_module(
        'experiments.reproduce_exposure', f'--root_output_dir={root}',
        '--canary_phrases=2', '--canary_phrase_repeats=3',
        '--exposure_candidates=50', '--noise_multiplier=2',
        *[f'--training_flag={flag}' for flag in tiny], timeout=600)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    with open(os.path.join(root, 'exposure.csv')) as f:
      rows = list(csv.DictReader(f))
    self.assertEqual([(r['run'], r['phrase']) for r in rows],
                     [(run, p) for run in ('no_dp', 'dp_ftrl', 'blt')
                      for p in ('0', '1')])
    self.assertEqual(rows[0]['epsilon'], '')   # No DP: no epsilon.
    self.assertGreater(float(rows[2]['epsilon']), 0)
    self.assertIn('Exposure of 2 phrases, each in 3 clients', proc.stdout)
    # --noise_multiplier is the DP runs' z; the no-DP run keeps none.
    for run, z in (('no_dp', 0.0), ('dp_ftrl', 2.0), ('blt', 2.0)):
      with open(os.path.join(root, run, 'hparams.json')) as f:
        self.assertEqual(json.load(f)['noise_multiplier'], z, run)

  def test_bad_count_is_one_line(self):
    proc = fixtures.run_module('experiments.reproduce_exposure',
                               '--canary_phrases=0', timeout=120)
    self.assertEqual(proc.returncode, 2)
    self.assertIn('--canary_phrases must be >= 1, got 0', proc.stderr)
    self.assertNotIn('Traceback', proc.stderr)
    proc = fixtures.run_module('experiments.reproduce_exposure',
                               '--noise_multiplier=0', timeout=120)
    self.assertEqual(proc.returncode, 2)
    self.assertIn('--noise_multiplier must be > 0', proc.stderr)


if __name__ == '__main__':
  absltest.main()
