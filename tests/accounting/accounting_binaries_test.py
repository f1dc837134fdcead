"""Tests of the accounting binaries as a user runs them."""

import csv
import json
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized

from dpftrl_tff import accounting
from dpftrl_tff import strict_json
from dpftrl_tff.accounting import paper_tables
from dpftrl_tff.aggregators import registry
from dpftrl_tff.privacy import planned_privacy
from dpftrl_tff.run import config as config_lib

from tests import fixtures
from tests.privacy import privacy_report_test

_run = fixtures.run_module


_BAD_INPUT = (
    ('negative_rounds', ['--rounds=-1', '--noise_multiplier=1'], 'rounds'),
    ('rounds_above_the_limit', ['--rounds=1000000', '--noise_multiplier=1'],
     '--rounds must be an integer <= 100000'),
    ('noise_that_overflows', ['--rounds=10', '--noise_multiplier=1e300'],
     '--noise_multiplier must be > 0 and <= 1e+12'),
    ('zero_noise', ['--rounds=10', '--noise_multiplier=0'],
     'noise_multiplier'),
    # z squared underflows to 0 (a ZeroDivisionError traceback until
    # 2026-11-29).
    ('noise_that_underflows', ['--rounds=10', '--noise_multiplier=1e-300',
                               '--min_separation=1', '--max_participation=2'],
     'at least 1e-12; got 1e-300'),
    # DP-FedAvg's PLD at z = 0.001 would hold about 5e9 points (38 GiB): a
    # MemoryError traceback until 2026-11-29.
    ('fedavg_noise_beyond_pld', ['--rounds=10', '--noise_multiplier=0.001',
                                 '--aggregator=dp_fedavg',
                                 '--sampling_probability=0.01'],
     '--noise_multiplier=0.001 with DP-FedAvg'),
    ('missing_noise', ['--rounds=10'], 'noise_multiplier'),
    ('non_integer_count', ['--rounds=10.5', '--noise_multiplier=1'],
     'rounds'),
    ('min_sep_too_large', ['--rounds=10', '--noise_multiplier=1',
                           '--population=1000', '--report_goal=100',
                           '--min_separation=50'], 'min_separation'),
    ('bad_restarts', ['--rounds=10', '--noise_multiplier=1',
                      '--restart_rounds=a,b'], 'restart_rounds'),
    ('no_z_delta', ['--rounds=10', '--noise_multiplier=7',
                    '--aggregator=dp_ftrl_adaptive',
                    '--clipped_count_stddev=1'], 'clipped_count_stddev'),
    ('sigma_b_without_adaptive', ['--rounds=10', '--noise_multiplier=1',
                                  '--clipped_count_stddev=1'],
     'applies only with --aggregator=dp_ftrl_adaptive'),
    ('no_noise_aggregator', ['--rounds=10', '--noise_multiplier=1',
                             '--aggregator=none'],
     "--aggregator='none' has no DP noise"),
    ('old_mechanism_spelling', ['--rounds=10', '--noise_multiplier=1',
                                '--mechanism=blt'],
     '--mechanism=blt is now spelled as in training: '
     '--aggregator=dp_ftrl_blt'),
    ('old_adaptive_spelling', ['--rounds=10', '--noise_multiplier=1',
                               '--adaptive_clipping'],
     '--adaptive_clipping is now spelled as in training: '
     '--aggregator=dp_ftrl_adaptive'),
    ('bad_restart_warmup', ['--rounds=10', '--noise_multiplier=1',
                            '--report_goal=100',
                            '--aggregator=dp_ftrl_adaptive',
                            '--restart_warmup=5', '--restart_frequency=5'],
     '--restart_warmup'),
    ('partial_secagg', ['--rounds=10', '--noise_multiplier=1',
                        '--secagg_scale=10'], 'secagg_scale'),
    ('restart_beyond_rounds', ['--rounds=100', '--noise_multiplier=1',
                               '--restart_rounds=500'],
     '--restart_rounds: a restart'),
    ('periodic_beyond_rounds', ['--rounds=100', '--noise_multiplier=1',
                                '--restart_rounds=periodic:200:10'],
     "--restart_rounds='periodic:200:10'"),
    ('negative_min_sep', ['--rounds=100', '--noise_multiplier=1',
                          '--min_separation=-2'], '--min_separation'),
    ('blt_file_with_tree', ['--rounds=10', '--noise_multiplier=1',
                            '--blt_params=/tmp/x.json'], '--blt_params'),
    ('blt_with_restarts', ['--rounds=100', '--noise_multiplier=1',
                           '--aggregator=dp_ftrl_blt', '--restart_rounds=50'],
     '--restart_rounds'),
    ('missing_blt_file', ['--rounds=100', '--noise_multiplier=1',
                          '--aggregator=dp_ftrl_blt',
                          '--blt_params=/nonexistent/blt.json'],
     '--blt_params=/nonexistent/blt.json: Cannot read'),
    ('blt_buffers', ['--rounds=100', '--noise_multiplier=1',
                     '--aggregator=dp_ftrl_blt', '--blt_num_buffers=9'],
     '--blt_num_buffers'),
)


class BadInputTest(fixtures.BadInputTest):
  MODULE = 'experiments.privacy_accountant'
  CASES = _BAD_INPUT

  @parameterized.named_parameters(fixtures.case_parameters(_BAD_INPUT))
  def test_bad_input_names_the_flag(self, case, expected):
    self.check_refused(case, expected)
    stderr = self.results[case].stderr
    self.assertNotRegex(stderr, r'error: --[A-Z]')   # No stray --.


class PrivacyAccountantTest(parameterized.TestCase):

  def test_json_and_privacy_report_match_library(self):
    path = os.path.join(tempfile.mkdtemp(), 'privacy_report.md')
    proc = _run('experiments.privacy_accountant', '--rounds=930',
                '--noise_multiplier=7', '--min_separation=212',
                '--max_participation=4', '--json', f'--privacy_report={path}')
    self.assertEqual(proc.returncode, 0, proc.stderr)
    report = strict_json.loads(proc.stdout.strip().splitlines()[-1])
    with open(path) as f:
      text = f.read()
    privacy_report_test.assert_report_matches(self, text, report)
    self.assertIn('planned launch', text)
    self.assertIn('MinS >= 212 and MaxP <= 4', text)
    self.assertAlmostEqual(
        report['zcdp'],
        accounting.compute_zcdp_single_tree(7.0, 930, 4, 212))
    self.assertAlmostEqual(report['epsilon'],
                           accounting.epsilon_pld(report['zcdp']))

  def test_population_planning(self):
    proc = _run('experiments.privacy_accountant', '--rounds=1900',
                '--noise_multiplier=7', '--population=4210000',
                '--report_goal=6500', '--json')
    self.assertEqual(proc.returncode, 0, proc.stderr)
    report = strict_json.loads(proc.stdout.strip().splitlines()[-1])
    self.assertEqual(report['min_separation'], 4210000 // 6500 - 1)
    self.assertEqual(report['max_participation'],
                     (1900 - 1) // (report['min_separation'] + 1) + 1)

  def test_optimized_blt_prints_no_library_logs(self):
    # The optimizer logs each L-BFGS-B run at INFO: not on a user's screen
    # (--verbosity=1 shows them), and no TF C++ INFO lines either.
    proc = _run('experiments.privacy_accountant', '--rounds=50',
                '--noise_multiplier=3', '--min_separation=5',
                '--max_participation=3', '--aggregator=dp_ftrl_blt')
    self.assertEqual(proc.returncode, 0, proc.stderr)
    self.assertNotRegex(proc.stderr, r'(?m)^[IW]\d{4} |L-BFGS-B|oneDNN')
    self.assertIn('BLT noise', proc.stdout)

  def test_blt_json_matches_library(self):
    path = os.path.join(tempfile.mkdtemp(), 'blt.json')
    with open(path, 'w') as f:
      json.dump({'buf_decay': [0.99, 0.6], 'output_scale': [0.1, 0.3]}, f)
    proc = _run('experiments.privacy_accountant', '--rounds=930',
                '--noise_multiplier=7', '--min_separation=212',
                '--max_participation=4', '--aggregator=dp_ftrl_blt',
                f'--blt_params={path}', '--json')
    self.assertEqual(proc.returncode, 0, proc.stderr)
    report = strict_json.loads(proc.stdout.strip().splitlines()[-1])
    expected = accounting.compute_privacy(
        rounds=930, noise_multiplier=7, min_separation=212,
        max_participation=4,
        blt=accounting.BLT([0.99, 0.6], [0.1, 0.3]))
    self.assertAlmostEqual(report['zcdp'], expected.zcdp, places=12)
    self.assertEqual(report['mechanism'], 'blt')

  @parameterized.named_parameters(
      ('tree', 'dp_ftrl', {}),
      ('adaptive_with_restarts', 'dp_ftrl_adaptive',
       dict(restart_warmup=40, restart_frequency=100)),
      ('blt', 'dp_ftrl_blt', dict(blt_num_buffers=2)))
  def test_planned_privacy_is_what_training_accounts(self, aggregator,
                                                     settings):
    # The accountant's --aggregator means what it means in training: the
    # same zCDP as the registry's Mechanism for the same settings (a BLT
    # optimized for the same T, MinS and MaxP, as training plans it).
    planned = (dict(blt_min_separation=30, blt_max_participation=5)
               if aggregator == 'dp_ftrl_blt' else {})
    config = config_lib.TrainConfig(
        aggregator=aggregator, noise_multiplier=3.0, clip_norm=1.0,
        clients_per_round=40, total_rounds=300, **settings, **planned)
    expected = registry.get(aggregator).privacy(config, 300, 5, 30)
    report = planned_privacy.build_report(
        rounds=300, noise_multiplier=3.0, max_participation=5,
        min_separation=30, report_goal=40, aggregator=aggregator,
        **settings)
    self.assertAlmostEqual(report['zcdp'], expected.zcdp, places=12)
    self.assertEqual(report['restart_rounds'], list(expected.restart_rounds))
    if aggregator == 'dp_ftrl_adaptive':
      self.assertEqual(report['restart_rounds'], [40, 140, 240])

  def test_impossible_max_participation_reports_the_effective_one(self):
    proc = _run('experiments.privacy_accountant', '--rounds=100',
                '--noise_multiplier=1', '--max_participation=50',
                '--min_separation=10', '--json')
    self.assertEqual(proc.returncode, 0, proc.stderr)
    report = strict_json.loads(proc.stdout)
    self.assertEqual(report['max_participation'], 10)   # floor(99/11) + 1
    self.assertEqual(report['requested_max_participation'], 50)
    text = _run('experiments.privacy_accountant', '--rounds=100',
                '--noise_multiplier=1', '--max_participation=50',
                '--min_separation=10').stdout
    self.assertIn('--max_participation=50 cannot happen', text)


class ReproduceTest(absltest.TestCase):

  def test_every_paper_row_agrees(self):
    rows = paper_tables.reproduce()
    self.assertLen(rows, 20)
    for row in rows:
      self.assertTrue(row['agrees'], row)

  def test_reproduce_tables_writes_every_row_or_refuses_the_place(self):
    folder = tempfile.mkdtemp()
    not_a_dir = os.path.join(folder, 'file')
    with open(not_a_dir, 'w') as f:
      f.write('x')
    path = os.path.join(folder, 'tables.csv')
    ok, refused = fixtures.run_module_cases('experiments.reproduce_tables', [
        [f'--output_csv={path}'], [f'--output_csv={not_a_dir}/t.csv']])
    self.assertEqual(ok.returncode, 0, ok.stderr[-2000:])
    self.assertIn('20 of 20 rows agree', ok.stdout)
    with open(path) as f:
      rows = list(csv.DictReader(f))
    self.assertLen(rows, 20)
    self.assertTrue(all(r['agrees'] == 'True' for r in rows))
    self.assertEqual(refused.returncode, 2, refused.stderr[-2000:])
    self.assertIn(f'--output_csv={not_a_dir}/t.csv: cannot use',
                  refused.stderr)
    self.assertNotIn('Traceback', refused.stderr)

  def test_compare_mechanisms_writes_its_table(self):
    out = tempfile.mkdtemp()
    procs = fixtures.run_module_cases('experiments.compare_mechanisms', [
        [f'--output_dir={out}'],
        # Refused before the tables, not by each of its four runs.
        ['--train', '--train_flagfile=/nonexistent.flags',
         f'--output_dir={tempfile.mkdtemp()}']])
    self.assertEqual(procs[0].returncode, 0, procs[0].stderr[-2000:])
    with open(os.path.join(out, 'compare_mechanisms.csv')) as f:
      rows = {r['task']: r for r in csv.DictReader(f)}
    self.assertIn('de-DE', rows)
    de = rows['de-DE']
    # The tree's column is the accountant's (Table 1's de-DE row); BLT and
    # BandMF spend less rho than the tree at the same z (their purpose).
    self.assertAlmostEqual(float(de['tree_zcdp']),
                           accounting.compute_zcdp_single_tree(7.0, 930, 4,
                                                               212))
    self.assertLess(float(de['blt_zcdp']), float(de['tree_zcdp']))
    self.assertLess(float(de['bandmf_zcdp']), float(de['tree_zcdp']))
    self.assertTrue(os.path.isfile(os.path.join(out,
                                                'compare_mechanisms.png')))
    self.assertEqual(procs[1].returncode, 2, procs[1].stderr[-2000:])
    self.assertIn("--train_flagfile='/nonexistent.flags' does not exist",
                  procs[1].stderr)
    self.assertNotIn('Traceback', procs[1].stderr)

  def test_figures_refuse_bad_lists_in_one_line(self):
    cases = ((['--min_separations=a'], '--min_separations must be integers'),
             (['--report_goals=0'], '--report_goals must be integers >= 1'),
             (['--round_step=0'], '--round_step must be an integer >= 1'))
    procs = fixtures.run_module_cases(
        'experiments.reproduce_privacy_figures',
        [[f'--output_dir={tempfile.mkdtemp()}', *args] for args, _ in cases])
    for (args, expected), proc in zip(cases, procs):
      fixtures.assert_refused(self, proc, expected, context=args)

  def test_figures_are_written(self):
    out = tempfile.mkdtemp()
    proc = _run('experiments.reproduce_privacy_figures',
                f'--output_dir={out}', '--max_rounds=400', '--round_step=100')
    self.assertEqual(proc.returncode, 0, proc.stderr)
    for name in ('pop1m', 'pop3m', 'min_sep'):
      self.assertGreater(os.path.getsize(os.path.join(out, name + '.png')), 0)
      with open(os.path.join(out, name + '.csv')) as f:
        self.assertGreater(len(f.readlines()), 4)


if __name__ == '__main__':
  absltest.main()
