r"""Accuracy against noise multiplier: a one-axis case of `experiments.sweep`.

For every noise multiplier z in --noise_multipliers and every seed in
--seeds it runs `experiments.run_stackoverflow` (flags from
--training_flagfile, then --noise_multiplier=z --seed=s and the flags given
after `--`), each in its own process and output directory
<root_output_dir>/z<z>_seed<s>, through `dpftrl_tff.studies.sweeps.run_sweep`
(finished runs of identical flags and data are reused, interrupted ones
resumed, a directory of other flags refused by name). It writes, next to the
runs, the sweep's tables as noise_sweep.csv (one row per run, with the
launch-equivalent zCDP and epsilon when --launch_population is given after
`--`: not the run's guarantee) and noise_sweep_summary.csv (per z: mean,
standard deviation and number of runs of accuracy and loss), its frontier
plot, and noise_sweep.png: accuracy against z, mean +- one standard
deviation over the seeds.

  python -m experiments.noise_sweep --noise_multipliers=0,0.5,1,1.5,2 \
      --seeds=1,2,3 -- --total_rounds=100

Its cost is one training run per (z, seed): with the defaults (5 z, 3
seeds, the demo's flags at 200 rounds, about 2 minutes a run on 2 cores)
about 30 minutes; each run prints its own progress and ETA.
"""

import math
import sys

from absl import app
from absl import flags

from dpftrl_tff import console
from dpftrl_tff import plotting
from dpftrl_tff.studies import sweeps
from dpftrl_tff.studies import training_runs

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
  noise_multipliers = []
  for text in _Z.value:
    try:
      z = float(text)
    except ValueError:
      z = float('nan')
    if not math.isfinite(z) or z < 0:
      raise ValueError(f'--noise_multipliers must be finite numbers >= 0, '
                       f'got {text!r}.')
    noise_multipliers.append(z)
  if not noise_multipliers:
    raise ValueError('--noise_multipliers must not be empty.')
  seeds = sweeps.parse_seeds(_SEEDS.value)
  sweeps.check_flagfile(_FLAGFILE.value)
  return noise_multipliers, seeds


def run_name(point, seed: int) -> str:
  return f'z{point["noise_multiplier"]:g}_seed{seed}'


def summarize(rows):
  """Per noise multiplier: mean, std (ddof 1 when n > 1) and n of the runs."""
  return sweeps.summarize(rows, ['noise_multiplier'])


def _main(argv):
  extra_flags = argv[1:]
  console.quiet_libraries()
  try:
    noise_multipliers, seeds = _parse_grid()
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  try:
    rows, table = sweeps.run_sweep(
        root=_ROOT.value, flagfile=_FLAGFILE.value,
        axes={'noise_multiplier': noise_multipliers}, ties=[], seeds=seeds,
        extra_flags=extra_flags, prefix='noise_sweep', run_name=run_name,
        explain_heatmap=False)   # One axis by design; its own plot.
  except RuntimeError as e:
    print(f'error: {e}', file=sys.stderr)
    return training_runs.exit_code(e)
  plotting.errorbar_plot(
      f'{_ROOT.value}/noise_sweep.png',
      [r['noise_multiplier'] for r in table],
      [100 * r['accuracy_mean'] for r in table],
      [100 * r['accuracy_std'] for r in table],
      baseline=100 * rows[0]['unigram_baseline_accuracy'],
      title='Final eval in-vocab accuracy vs noise',
      xlabel='noise multiplier z', ylabel='accuracy (%)')
  sweeps.print_table(table, ['noise_multiplier'])
  print(f'Unigram baseline {100 * rows[0]["unigram_baseline_accuracy"]:.2f}%.'
        f' Tables and plots in {_ROOT.value}.')
  return 0


def main(argv):
  # An unwritable output place, like every refusal: one line, exit 2.
  return console.run_main(lambda: _main(argv), argv[:1])


if __name__ == '__main__':
  app.run(main)
