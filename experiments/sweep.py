r"""A sweep of the training binary over a grid of any training flags.

Every --axis is a grid axis over one flag of `experiments.run_stackoverflow`
(`name=v1,v2,...`); every --tie sets one more flag proportional to an axis
at each point (`name=RATIO*axis`: the paper's hypothesis of Sec. 2.2 keeps
the noise per client z / m fixed, `--tie=noise_multiplier=0.075*clients_per_round`).
Each point of the grid runs once per seed in --seeds, each in its own process
and directory <root_output_dir>/<point>_seed<s>, through
`dpftrl_tff.studies.training_runs`: a finished run of the same flags and data is
reused, an interrupted one resumed, and a directory holding a run of other
flags is refused by name, so an interrupted sweep continues where it stopped.

It writes into --root_output_dir:

  sweep.csv           one row per run: the point's flags, the seed, rounds,
                      client updates processed (rounds x clients_per_round),
                      final eval in-vocab accuracy and loss, rho-zCDP and
                      epsilon, and with --launch_population the
                      launch-equivalent zCDP and epsilon (not the run's own
                      guarantee);
  sweep_summary.csv   per point: mean, standard deviation (ddof 1) and number
                      of runs of accuracy and loss, and the privacy;
  sweep_heatmap.png   mean accuracy over the grid, when exactly two axes have
                      several values;
  sweep_frontier.png  mean accuracy against epsilon (the launch-equivalent
                      epsilon when every point has one), the privacy-utility
                      frontier (no other point is both more accurate and
                      more private) marked.

Flags after `--` go to every run (a point's axis, tie and seed values win
over them and over flag files there; a run that trained with other values
than its point stops the sweep): `-- --workers=host1:8000,host2:8000` runs
every point's rounds across TFF workers (docs/scaling.md).

  python -m experiments.sweep --axis=clients_per_round=10,20,40 \
      --tie=noise_multiplier=0.05*clients_per_round --seeds=1,2 \
      -- --total_rounds=100 --launch_population=4210000
"""

import sys

from absl import app
from absl import flags

from dpftrl_tff import console
from dpftrl_tff.studies import sweeps
from dpftrl_tff.studies import training_runs

_AXES = flags.DEFINE_multi_string(
    'axis', [], 'A grid axis: NAME=V1,V2,... over a flag of '
    'experiments.run_stackoverflow (repeatable).')
_TIES = flags.DEFINE_multi_string(
    'tie', [], 'A tied flag: NAME=RATIO*AXIS sets NAME to RATIO times the '
    'axis value at every point (repeatable).')
_SEEDS = flags.DEFINE_list('seeds', ['1'], 'Seeds of every point.')
_FLAGFILE = flags.DEFINE_string(
    'training_flagfile', 'configs/demo.flags',
    'Flag file of experiments.run_stackoverflow for every run.')
_ROOT = flags.DEFINE_string('root_output_dir', 'runs/sweep',
                            'Where the runs and the sweep tables go.')


def _main(argv):
  extra_flags = argv[1:]
  console.quiet_libraries()
  try:
    axes = sweeps.parse_axes(_AXES.value)
    ties = sweeps.parse_ties(_TIES.value, axes)
    if not axes:
      raise ValueError('--axis: give at least one axis.')
    seeds = sweeps.parse_seeds(_SEEDS.value)
    sweeps.check_flagfile(_FLAGFILE.value)
    sweeps.check_points(sweeps.grid_points(axes, ties))
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  try:
    _, table = sweeps.run_sweep(root=_ROOT.value, flagfile=_FLAGFILE.value,
                                axes=axes, ties=ties, seeds=seeds,
                                extra_flags=extra_flags)
  except RuntimeError as e:
    print(f'error: {e}', file=sys.stderr)
    return training_runs.exit_code(e)
  sweeps.print_table(table, list(sweeps.grid_points(axes, ties)[0]))
  print(f'Tables and plots in {_ROOT.value}.')
  return 0


def main(argv):
  # An unwritable output place, like every refusal: one line, exit 2.
  return console.run_main(lambda: _main(argv), argv[:1])


if __name__ == '__main__':
  app.run(main)
