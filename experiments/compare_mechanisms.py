r"""Tree aggregation against BLT and BandMF noise on the paper's NWP rows
(and a training).

For every NWP row of the paper (T, MinS, MaxP; noise multiplier z = 7) it
optimizes a BLT for (T, MinS, MaxP) (`accounting.blt_optimizer`, max error),
takes a column-normalized BandMF C with min(MinS + 1, 64) bands (the banded
square root, `accounting.comparison`: its privacy is every such C's, its
noise the optimizer's start), and prints:

  * the tree's rho-zCDP, the BLT's and BandMF's at the same z;
  * z_blt (z_bandmf), the noise multiplier the BLT (BandMF) needs for the
    tree's rho-zCDP: z_blt = sqrt(sens_blt^2 / (2 rho_tree));
  * at that equal rho, the max over rounds of the noise standard deviation
    of the released prefix sum (the model's noise before the server's
    momentum and learning rate, which are the same for both), in units of
    the clip norm C (divide by the report goal m for the model update):
    z sqrt(max_t Var_t), with Var_t the tree's (`tree_prefix_variance`) or
    the BLT's (`blt_prefix_variance`) per-round variance, and their ratio.
  * epsilon at delta 1e-10 of the tree, the BLT and, for comparison only,
    DP-FedAvg with Poisson sampling at q = 1 / (MinS + 1) at the same z and
    T (`accounting.sampled_gaussian`), which assumes sampling the
    production system cannot guarantee.

It writes compare_mechanisms.csv and compare_mechanisms.png (noise std per
round at the de-DE setting, and the ratio per row) into --output_dir.

With --train it also trains, on the generated StackOverflow-format data,
one DP-FTRL run with tree noise (z = --train_noise_multiplier), one with
BLT noise and one with BandMF noise at the same planned rho-zCDP (the BLT
optimized for the runs' planned participation and given to the run as a
file; BandMF with its planned bands), and DP-FedAvg with Poisson sampling
of the same clients at the same report goal, at the tree's planned epsilon
(which it reaches only by assuming the sampling), and writes the accuracy
against rounds as compare_training.csv and compare_training.png.

  python -m experiments.compare_mechanisms
  python -m experiments.compare_mechanisms --train --train_root=runs/compare
"""

import math
import os
import sys

from absl import app
from absl import flags
import numpy as np

from dpftrl_tff import accounting
from dpftrl_tff import console
from dpftrl_tff import plotting
from dpftrl_tff import strict_json
from dpftrl_tff.accounting import blt_optimizer
from dpftrl_tff.accounting import comparison
from dpftrl_tff.accounting import paper_tables
from dpftrl_tff.accounting import sampled_gaussian
from dpftrl_tff.aggregators.mechanisms import bandmf as bandmf_mechanism
from dpftrl_tff.privacy import planned_privacy
from dpftrl_tff.run import run_directory
from dpftrl_tff.studies import sweeps
from dpftrl_tff.studies import training_runs

_OUTPUT_DIR = flags.DEFINE_string('output_dir', 'docs/figures',
                                  'Where the CSV and PNG files go.')
_TRAIN = flags.DEFINE_bool(
    'train', False, 'Also train the tree, BLT and BandMF at equal rho-zCDP, '
    'and DP-FedAvg (Poisson sampling) at equal epsilon.')
_TRAIN_ROOT = flags.DEFINE_string('train_root', 'runs/compare_mechanisms',
                                  'Run directories of --train.')
_TRAIN_FLAGFILE = flags.DEFINE_string(
    'train_flagfile', 'configs/demo.flags',
    'Flag file of both training runs (the participation must plan MinS and '
    'MaxP: --participation=min_sep_groups).')
_TRAIN_Z = flags.DEFINE_float(
    'train_noise_multiplier', None,
    'Noise multiplier z of the tree run. Unset: the flag file\'s (its '
    'learning rates were tuned for it; at 1.5 the demo\'s diverge).')
_TRAIN_SEED = flags.DEFINE_integer('train_seed', 1, 'Seed of every run.')


def _write_privacy(rows, output_dir):
  os.makedirs(output_dir, exist_ok=True)
  fields = ['task', 'rounds', 'min_separation', 'max_participation',
            'noise_multiplier', 'tree_zcdp', 'blt_zcdp', 'tree_epsilon',
            'blt_epsilon', 'dp_fedavg_sampling_probability',
            'dp_fedavg_epsilon',
            'blt_noise_multiplier_at_tree_zcdp', 'tree_max_noise_std',
            'blt_max_noise_std', 'std_ratio', 'blt_num_buffers',
            'blt_buf_decay', 'blt_output_scale', 'bandmf_bands',
            'bandmf_zcdp', 'bandmf_epsilon',
            'bandmf_noise_multiplier_at_tree_zcdp', 'bandmf_max_noise_std',
            'bandmf_std_ratio']
  run_directory.write_csv_atomic(
      os.path.join(output_dir, 'compare_mechanisms.csv'),
      [{k: r[k] for k in fields} for r in rows])
  de = rows[0]
  xs = np.arange(1, de['rounds'] + 1)
  by_rounds = sorted(rows, key=lambda r: r['rounds'])
  plotting.panels_plot(
      os.path.join(output_dir, 'compare_mechanisms.png'),
      [('prefix-sum noise std / C (de-DE, equal zCDP)',
        [('tree (z = 7)', xs, de['tree_std_per_round']),
         (f'BLT (z = {de["blt_noise_multiplier_at_tree_zcdp"]:.2f})', xs,
          de['blt_std_per_round']),
         (f'BandMF, {de["bandmf_bands"]} bands (z = '
          f'{de["bandmf_noise_multiplier_at_tree_zcdp"]:.2f})', xs,
          de['bandmf_std_per_round'])], False),
       ('max noise std / tree\'s',
        [('BLT', [r['rounds'] for r in by_rounds],
          [r['std_ratio'] for r in by_rounds]),
         ('BandMF', [r['rounds'] for r in by_rounds],
          [r['bandmf_std_ratio'] for r in by_rounds])], False)],
      xlabel='round (left) / rounds T of the row (right)',
      title='Tree vs BLT vs BandMF noise at equal rho-zCDP (paper NWP rows)')


def _print_privacy(rows):
  print(f'Paper NWP rows, z = {paper_tables.NOISE_MULTIPLIER:g}; BLT '
        f'optimized for each (T, MinS, MaxP), max error.')
  print(f'{"task":7} {"T":>5} {"MinS":>5} {"MaxP":>4} {"tree zCDP":>9} '
        f'{"BLT zCDP":>9} {"z_BLT":>7} {"std tree":>9} {"std BLT":>8} '
        f'{"ratio":>6} {"buf":>3} {"b":>3} {"z_MF":>6} {"std MF":>7} '
        f'{"eps tree":>8} {"eps BLT":>8} {"eps MF":>7} {"eps FedAvg*":>11}')
  for r in rows:
    print(f'{r["task"]:7} {r["rounds"]:5d} {r["min_separation"]:5d} '
          f'{r["max_participation"]:4d} {r["tree_zcdp"]:9.4f} '
          f'{r["blt_zcdp"]:9.4f} {r["blt_noise_multiplier_at_tree_zcdp"]:7.3f} '
          f'{r["tree_max_noise_std"]:9.2f} {r["blt_max_noise_std"]:8.2f} '
          f'{r["std_ratio"]:6.3f} {r["blt_num_buffers"]:3d} '
          f'{r["bandmf_bands"]:3d} '
          f'{r["bandmf_noise_multiplier_at_tree_zcdp"]:6.3f} '
          f'{r["bandmf_max_noise_std"]:7.2f} '
          f'{r["tree_epsilon"]:8.3f} {r["blt_epsilon"]:8.3f} '
          f'{r["bandmf_epsilon"]:7.3f} {r["dp_fedavg_epsilon"]:11.4f}')
  print('z_BLT, z_MF: the BLT\'s and BandMF\'s noise multipliers for the '
        'tree\'s zCDP. std: max over rounds of the prefix-sum noise std / C '
        'at that equal zCDP. b: BandMF\'s bands (column-normalized; noise of '
        'the banded square root, the optimizer\'s start: see '
        f'docs/algorithms.md). eps: at delta {accounting.DEFAULT_DELTA:g}, z = '
        f'{paper_tables.NOISE_MULTIPLIER:g} for all four.')
  print('* DP-FedAvg (Gaussian noise z C each round) with Poisson sampling '
        'at q = 1 / (MinS + 1), the rate of the population that allows the '
        'row\'s MinS: it ' + sampled_gaussian.ASSUMPTION + '. Not a '
        'guarantee the paper\'s launches could claim.')


def train_comparison(root, flagfile, z_tree, seed, output_dir):
  """Tree at z_tree; BLT and BandMF at the tree's planned zCDP; DP-FedAvg
  with Poisson sampling (which it assumes) at the tree's planned epsilon,
  same report goal and clients. Returns the rows of compare_training.csv."""
  # Evaluated every 10 rounds for the curves.
  common = [f'--flagfile={flagfile}', f'--seed={seed}', '--rounds_per_eval=10']
  tree = training_runs.run_training(
      root, 'tree', common + ['--aggregator=dp_ftrl'] + (
          [] if z_tree is None else [f'--noise_multiplier={z_tree!r}']))
  planned = (tree.get('privacy') or {}).get('planned')
  if not planned:
    raise ValueError(f'--train_flagfile={flagfile}: the tree run has no '
                     f'planned participation; use '
                     f'--participation=min_sep_groups.')
  rounds, z_tree = tree['rounds'], planned['noise_multiplier']
  min_sep, max_p = planned['min_separation'], planned['max_participation']
  optimized = blt_optimizer.optimize(
      rounds=rounds, min_separation=min_sep, max_participation=max_p)
  blt_file = os.path.join(root, 'blt_for_comparison.json')
  os.makedirs(root, exist_ok=True)
  run_directory.write_json_atomic(blt_file, optimized.as_dict())
  sens2 = accounting.blt_sensitivity_squared(
      optimized.blt, rounds=rounds, min_separation=min_sep,
      max_participation=max_p)
  z_blt = math.sqrt(sens2 / (2 * planned['zcdp']))
  blt = training_runs.run_training(
      root, 'blt', common + ['--aggregator=dp_ftrl_blt',
                             f'--noise_multiplier={z_blt!r}',
                             f'--blt_params={blt_file}'])
  # BandMF: the C the run optimizes (its planned bands), its sens^2 from
  # the accountant.
  bands = bandmf_mechanism.default_bands(min_sep, rounds)
  sens2 = planned_privacy.build_report(
      rounds=rounds, noise_multiplier=1.0, min_separation=min_sep,
      max_participation=max_p, aggregator='dp_ftrl_bandmf',
      bandmf_bands=bands, with_epsilon=False)['sensitivity_squared']
  z_bandmf = math.sqrt(sens2 / (2 * planned['zcdp']))
  bandmf = training_runs.run_training(
      root, 'bandmf', common + ['--aggregator=dp_ftrl_bandmf',
                                f'--noise_multiplier={z_bandmf!r}',
                                f'--bandmf_bands={bands}'])
  # DP-FedAvg: the same report goal m over the same N clients, Poisson
  # sampled at q = m / N, at the tree's planned epsilon.
  num_clients = sum(tree['participation']['participations_histogram'])
  q = tree['clients_per_round'] / num_clients
  z_fedavg = sampled_gaussian.noise_for_epsilon(
      planned['epsilon'], sampling_probability=q, rounds=rounds)
  fedavg = training_runs.run_training(
      root, 'dp_fedavg', common + ['--aggregator=dp_fedavg',
                                   '--participation=poisson',
                                   f'--noise_multiplier={z_fedavg!r}'])
  runs = (('tree', 'tree', tree, z_tree), ('BLT', 'blt', blt, z_blt),
          (f'BandMF, {bands} bands', 'bandmf', bandmf, z_bandmf),
          ('DP-FedAvg*', 'dp_fedavg', fedavg, z_fedavg))
  out = []
  series = []
  for name, directory, summary, z in runs:
    xs, ys = run_directory.read_metric(os.path.join(root, directory))
    series.append((f'{name} (z = {z:.3f})', xs, [100 * y for y in ys]))
    privacy = summary['privacy']
    for x, y in zip(xs, ys):
      out.append(dict(mechanism=name, noise_multiplier=z, round=x,
                      eval_in_vocab_accuracy=y,
                      planned_zcdp=(privacy.get('planned') or {}).get('zcdp'),
                      epsilon=(privacy.get('planned') or privacy)['epsilon']))
  os.makedirs(output_dir, exist_ok=True)
  run_directory.write_csv_atomic(
      os.path.join(output_dir, 'compare_training.csv'), out)
  plotting.line_plot(
      os.path.join(output_dir, 'compare_training.png'), series,
      title=f'Equal privacy (seed {seed}): zCDP {planned["zcdp"]:.3g}\n'
            f'*DP-FedAvg at epsilon {planned["epsilon"]:.3g}, Poisson '
            f'sampling assumed',
      xlabel='round', ylabel='eval in-vocab accuracy (%)')
  for name, _, summary, z in runs:
    privacy = summary['privacy']
    shown = privacy.get('planned') or privacy
    print(f'{name:18}: z = {z:.4f}, '
          + (f'planned zCDP {shown["zcdp"]:.4f}, ' if shown.get('zcdp')
             is not None else '')
          + f'epsilon {shown["epsilon"]:.3f}, final eval accuracy '
          f'{100 * summary["final_eval"]["in_vocab_accuracy"]:.2f}%'
          + (' (the loss exploded)' if summary.get('training_loss_explosion')
             else ''))
  print('* DP-FedAvg ' + sampled_gaussian.ASSUMPTION + '.')
  print(strict_json.dumps(dict(blt=optimized.as_dict()), sort_keys=True))
  return out


def _main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  console.quiet_libraries()   # No absl INFO lines (the BLT optimizer's).
  os.makedirs(_OUTPUT_DIR.value, exist_ok=True)   # Refused now, not after.
  if _TRAIN.value:
    try:   # Before the tables: the runs would each fail on it.
      sweeps.check_flagfile(_TRAIN_FLAGFILE.value, '--train_flagfile')
    except ValueError as e:
      print(f'error: {e}', file=sys.stderr)
      return 2
  rows = comparison.compare_paper_rows()
  _print_privacy(rows)
  _write_privacy(rows, _OUTPUT_DIR.value)
  if _TRAIN.value:
    try:
      train_comparison(_TRAIN_ROOT.value, _TRAIN_FLAGFILE.value,
                       _TRAIN_Z.value, _TRAIN_SEED.value, _OUTPUT_DIR.value)
    except (RuntimeError, ValueError) as e:
      print(f'error: {e}', file=sys.stderr)
      return training_runs.exit_code(e)
  print(f'Tables and plots in {_OUTPUT_DIR.value}.')
  return 0


def main(argv):
  # An unwritable output place, like every refusal: one line, exit 2.
  return console.run_main(lambda: _main(argv), argv)


if __name__ == '__main__':
  sys.exit(app.run(main))
