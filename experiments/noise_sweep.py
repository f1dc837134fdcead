r"""Accuracy against noise multiplier: runs the training binary over a grid.

For every noise multiplier z in --noise_multipliers and every seed in
--seeds it runs `experiments.run_stackoverflow` (flags from
--training_flagfile, then --noise_multiplier=z --seed=s and the flags given
after `--`), each in its own process and output directory
<root_output_dir>/z<z>_seed<s>. Every run goes through the training binary,
which reuses a finished run only if it was made with exactly the same flags
and data (and says so), resumes an interrupted one, and refuses a directory
holding a run of other flags (the sweep then stops, naming it): an
interrupted sweep continues where it stopped, and a changed flag never
reuses stale results. It then writes, next to the runs:

  noise_sweep.csv          one row per run: z, seed, rounds, final eval
                           in-vocab accuracy and loss, rho-zCDP, epsilon,
                           and with --launch_population (after `--`) the
                           launch-equivalent zCDP and epsilon (labelled:
                           not the run's guarantee);
  noise_sweep_summary.csv  per z: mean, standard deviation and number of
                           runs of the accuracy and the loss;
  noise_sweep.png          accuracy against z, mean with +- one standard
                           deviation over the seeds.

  python -m experiments.noise_sweep --noise_multipliers=0,0.5,1,1.5,2 \
      --seeds=1,2,3 -- --total_rounds=100
"""

import math
import os
import sys

from absl import app
from absl import flags
import numpy as np

from dpftrl_tff import plotting
from dpftrl_tff import run_directory
from experiments import training_runs

_Z = flags.DEFINE_list('noise_multipliers', ['0', '0.5', '1', '1.5', '2'],
                       'Noise multipliers z (>= 0) to run.')
_SEEDS = flags.DEFINE_list('seeds', ['1', '2', '3'],
                           'Seeds (model initialization and client sampling).')
_FLAGFILE = flags.DEFINE_string(
    'training_flagfile', 'configs/demo.flags',
    'Flag file of experiments.run_stackoverflow for every run.')
_ROOT = flags.DEFINE_string('root_output_dir', 'runs/noise_sweep',
                            'Where the runs and the sweep tables go.')


def _parse_grid():
  """(noise multipliers, seeds) from the flags, or a ValueError naming them."""
  noise_multipliers, seeds = [], []
  for text in _Z.value:
    try:
      z = float(text)
    except ValueError:
      z = float('nan')
    if not math.isfinite(z) or z < 0:
      raise ValueError(f'--noise_multipliers must be finite numbers >= 0, '
                       f'got {text!r}.')
    noise_multipliers.append(z)
  for text in _SEEDS.value:
    if not text.strip().isdigit():
      raise ValueError(f'--seeds must be integers >= 0, got {text!r}.')
    seeds.append(int(text))
  if not noise_multipliers or not seeds:
    raise ValueError('--noise_multipliers and --seeds must not be empty.')
  if not os.path.isfile(_FLAGFILE.value):
    raise ValueError(f'--training_flagfile={_FLAGFILE.value!r} does not '
                     f'exist.')
  return noise_multipliers, seeds


def run_name(z: float, seed: int) -> str:
  return f'z{z:g}_seed{seed}'


def _run(z, seed, extra_flags):
  """Runs one training (unless done); its summary dict."""
  return training_runs.run_training(
      _ROOT.value, run_name(z, seed),
      [f'--flagfile={_FLAGFILE.value}', f'--noise_multiplier={z!r}',
       f'--seed={seed}', *extra_flags])


def summarize(rows):
  """Per noise multiplier: mean, std (ddof 1 when n > 1) and n of the runs."""
  by_z = {}
  for row in rows:
    by_z.setdefault(row['noise_multiplier'], []).append(row)
  out = []
  for z in sorted(by_z):
    acc = np.array([r['eval_in_vocab_accuracy'] for r in by_z[z]])
    loss = np.array([r['eval_loss'] for r in by_z[z]])
    ddof = 1 if len(acc) > 1 else 0
    out.append(dict(noise_multiplier=z, runs=len(acc),
                    accuracy_mean=float(acc.mean()),
                    accuracy_std=float(acc.std(ddof=ddof)),
                    loss_mean=float(loss.mean()),
                    loss_std=float(loss.std(ddof=ddof)),
                    launch_epsilon=by_z[z][0].get('launch_epsilon')))
  return out


def main(argv):
  extra_flags = argv[1:]
  try:
    noise_multipliers, seeds = _parse_grid()
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  try:
    return _sweep(noise_multipliers, seeds, extra_flags)
  except RuntimeError as e:
    print(f'error: {e}', file=sys.stderr)
    return 1


def _sweep(noise_multipliers, seeds, extra_flags):
  os.makedirs(_ROOT.value, exist_ok=True)
  rows = []
  for z in noise_multipliers:
    for seed in seeds:
      summary = _run(z, seed, extra_flags)
      privacy = summary.get('privacy') or {}
      final = summary['final_eval']
      rows.append(dict(
          noise_multiplier=z, seed=seed, rounds=summary['rounds'],
          eval_in_vocab_accuracy=final['in_vocab_accuracy'],
          eval_loss=final['loss'],
          zcdp=privacy.get('zcdp', 0.0),
          epsilon=privacy.get('epsilon', 0.0),
          # The equivalent launch's privacy (--launch_population): NOT the
          # run's own guarantee.
          launch_zcdp=(privacy.get('launch_equivalent') or {}).get('zcdp'),
          launch_epsilon=(privacy.get('launch_equivalent') or {}).get(
              'epsilon'),
          unigram_baseline_accuracy=summary['unigram_baseline_accuracy']))
  run_directory.write_csv_atomic(os.path.join(_ROOT.value, 'noise_sweep.csv'), rows)
  table = summarize(rows)
  run_directory.write_csv_atomic(os.path.join(_ROOT.value, 'noise_sweep_summary.csv'), table)
  plotting.errorbar_plot(
      os.path.join(_ROOT.value, 'noise_sweep.png'),
      [r['noise_multiplier'] for r in table],
      [100 * r['accuracy_mean'] for r in table],
      [100 * r['accuracy_std'] for r in table],
      baseline=100 * rows[0]['unigram_baseline_accuracy'],
      title='Final eval in-vocab accuracy vs noise',
      xlabel='noise multiplier z', ylabel='accuracy (%)')
  print(f'{"z":>6} {"runs":>4} {"accuracy %":>16} {"eval loss":>16}')
  for r in table:
    launch = (f'   launch-equivalent epsilon {r["launch_epsilon"]:.3f}'
              if r.get('launch_epsilon') is not None else '')
    print(f'{r["noise_multiplier"]:6g} {r["runs"]:4d} '
          f'{100 * r["accuracy_mean"]:8.2f} +- {100 * r["accuracy_std"]:5.2f} '
          f'{r["loss_mean"]:8.3f} +- {r["loss_std"]:5.3f}{launch}')
  print(f'Unigram baseline {100 * rows[0]["unigram_baseline_accuracy"]:.2f}%.'
        f' Tables and plot in {_ROOT.value}.')
  return 0


if __name__ == '__main__':
  app.run(main)
