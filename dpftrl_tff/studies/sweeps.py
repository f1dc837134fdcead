"""Sweeps of the training binary over a grid of training flags (library).

The grid, tied axes, per-run rows, per-point summaries, the frontier and the
plots of `experiments.sweep` (and of `experiments.noise_sweep`, its one-axis
case); see `experiments/sweep.py` for what a sweep writes.
"""

import collections
import dataclasses
import json
import math
import os
from typing import Dict, List, Sequence, Tuple

from absl import flags
import numpy as np

from dpftrl_tff import checks
from dpftrl_tff import plotting
from dpftrl_tff.run import config as config_lib
from dpftrl_tff.run import run_directory
from dpftrl_tff.studies import training_runs

# Flags a sweep sets itself, or that name the run rather than configure it.
_NOT_AXES = ('seed', 'root_output_dir', 'experiment_name')


@dataclasses.dataclass(frozen=True)
class Tie:
  name: str
  ratio: float
  axis: str


def _number(text: str):
  """An int or a float when `text` is one, else the text itself."""
  try:
    return int(text)
  except ValueError:
    pass
  try:
    return float(text)
  except ValueError:
    return text


def _check_name(name: str, option: str):
  allowed = {f.name for f in config_lib.setting_fields()}
  if name in _NOT_AXES:
    raise ValueError(f'{option}: {name} is set by the sweep itself '
                     f'(--seeds, --root_output_dir).')
  if name not in allowed:
    raise ValueError(f'{option}: {name!r} is not a training flag of '
                     f'experiments.run_stackoverflow.')


def parse_axes(texts: Sequence[str]) -> Dict[str, List]:
  """{name: values} from --axis NAME=V1,V2,... (order kept)."""
  axes = collections.OrderedDict()
  for text in texts:
    name, sep, values = text.partition('=')
    name = name.strip().lstrip('-')
    if not sep or not name or not values.strip():
      raise ValueError(f'--axis={text!r}: expected NAME=V1,V2,...')
    _check_name(name, f'--axis={text!r}')
    if name in axes:
      raise ValueError(f'--axis: {name} is given twice.')
    parsed = [_number(v.strip()) for v in values.split(',') if v.strip()]
    if len(set(map(str, parsed))) != len(parsed):
      raise ValueError(f'--axis={text!r}: a value is repeated.')
    axes[name] = parsed
  return axes


def parse_ties(texts: Sequence[str], axes: Dict[str, List]) -> List[Tie]:
  """Ties from --tie NAME=RATIO*AXIS; the axis must be a numeric --axis."""
  ties = []
  for text in texts:
    name, sep, expression = text.partition('=')
    name = name.strip().lstrip('-')
    ratio_text, star, axis = expression.partition('*')
    try:
      ratio = float(ratio_text)
    except ValueError:
      ratio = math.nan
    if not sep or not star or not math.isfinite(ratio):
      raise ValueError(f'--tie={text!r}: expected NAME=RATIO*AXIS with a '
                       f'finite number RATIO.')
    _check_name(name, f'--tie={text!r}')
    axis = axis.strip()
    if axis not in axes:
      raise ValueError(f'--tie={text!r}: {axis!r} is not an --axis '
                       f'(axes: {", ".join(axes) or "none"}).')
    if name in axes or name in [t.name for t in ties]:
      raise ValueError(f'--tie={text!r}: {name} is already set by another '
                       f'--axis or --tie.')
    if not all(isinstance(v, (int, float)) for v in axes[axis]):
      raise ValueError(f'--tie={text!r}: the axis {axis} is not numeric.')
    ties.append(Tie(name, ratio, axis))
  return ties


def grid_points(axes: Dict[str, List], ties: Sequence[Tie]) -> List[Dict]:
  """Every combination of the axes, with the tied flags filled in."""
  names = list(axes)
  points = []
  for combination in (np.array(np.meshgrid(
      *[np.arange(len(axes[n])) for n in names], indexing='ij')).reshape(
          len(names), -1).T if names else [()]):
    point = collections.OrderedDict(
        (n, axes[n][int(i)]) for n, i in zip(names, combination))
    for tie in ties:
      point[tie.name] = float(tie.ratio * point[tie.axis])
    points.append(point)
  return points


def check_points(points: Sequence[Dict]):
  """Refuses a point whose value its flag cannot take (before any run).

  Each point's values are parsed by the training binary's own flag
  definitions (`config.define_flags` on a private FlagValues), so `abc`
  for an integer flag, or a value outside an enum, is one line naming the
  flag, before the first point trains.
  """
  for point in points:
    flag_values = flags.FlagValues()
    config_lib.define_flags(flag_values=flag_values)
    argv = ['sweep'] + [f'--{n}={_flag_value(v)}' for n, v in point.items()]
    try:
      flag_values(argv)
    except flags.Error as e:
      raise ValueError(f'--axis / --tie point {dict(point)}: {e}') from None


def point_name(point: Dict, seed: int) -> str:
  parts = [f'{name}{value:g}' if isinstance(value, (int, float)) else
           f'{name}{value}' for name, value in point.items()]
  return '_'.join(parts + [f'seed{seed}'])


def _flag_value(value) -> str:
  return repr(value) if isinstance(value, float) else str(value)


def run_row(point: Dict, seed: int, summary: Dict) -> Dict:
  """sweep.csv's row of one finished run.

  A run without privacy (no noise) has privacy 'none' and empty zcdp and
  epsilon cells, never 0 (which would read as perfectly private). A run
  that diverged (`summary` {'diverged': message}) has status 'diverged' and
  nan accuracy and loss; one whose finite training loss was still exploded
  at its end (`divergence.explosion`) has status 'loss exploded' and keeps
  its (diverged model's) accuracy.
  """
  privacy = summary.get('privacy') or {}
  launch = privacy.get('launch_equivalent') or {}
  final = summary.get('final_eval') or {}
  clients = point.get('clients_per_round', summary.get('clients_per_round'))
  rounds = summary.get('rounds')
  status = 'finished'
  if summary.get('diverged'):
    status = 'diverged'
  elif (summary.get('training_loss_explosion') or {}).get('ended_exploded'):
    status = 'loss exploded'
  return dict(
      point, seed=seed, status=status,
      rounds=rounds,
      client_updates=(rounds * clients if clients and rounds else None),
      eval_in_vocab_accuracy=final.get('in_vocab_accuracy', math.nan),
      eval_loss=final.get('loss', math.nan),
      privacy=privacy.get('mechanism', 'tree') if privacy else 'none',
      zcdp=privacy.get('zcdp'), epsilon=privacy.get('epsilon'),
      launch_zcdp=launch.get('zcdp'), launch_epsilon=launch.get('epsilon'),
      unigram_baseline_accuracy=summary.get('unigram_baseline_accuracy'))


def summarize(rows: Sequence[Dict], keys: Sequence[str]) -> List[Dict]:
  """Per point (the values of `keys`): mean, std (ddof 1 when n > 1), n."""
  groups = collections.OrderedDict()
  for row in rows:
    groups.setdefault(tuple(row[k] for k in keys), []).append(row)
  out = []
  for key in sorted(groups, key=lambda k: tuple(map(str, k)) if any(
      not isinstance(v, (int, float)) for v in k) else k):
    runs = groups[key]
    acc = np.array([r['eval_in_vocab_accuracy'] for r in runs], float)
    loss = np.array([r['eval_loss'] for r in runs], float)
    ddof = 1 if len(runs) > 1 else 0
    out.append(dict(
        zip(keys, key), runs=len(runs), accuracy_mean=float(acc.mean()),
        accuracy_std=float(acc.std(ddof=ddof)),
        loss_mean=float(loss.mean()), loss_std=float(loss.std(ddof=ddof)),
        diverged=sum(r.get('status') == 'diverged' for r in runs),
        loss_exploded=sum(r.get('status') == 'loss exploded' for r in runs),
        privacy=runs[0].get('privacy'),
        zcdp=runs[0].get('zcdp'), epsilon=runs[0].get('epsilon'),
        launch_epsilon=runs[0].get('launch_epsilon')))
  return out


def frontier(points: Sequence[Tuple[float, float]]) -> List[int]:
  """Indices of the (epsilon, accuracy) points no other point dominates.

  A point is dominated when another has epsilon <= and accuracy >= with one
  of them strict. Sorted by epsilon.
  """
  order = sorted(range(len(points)), key=lambda i: (points[i][0],
                                                    -points[i][1]))
  best, kept = -math.inf, []
  for i in order:
    if points[i][1] > best:
      kept.append(i)
      best = points[i][1]
  return kept


def _plots(root: str, prefix: str, table: List[Dict], axes: Dict[str, List],
           explain_heatmap: bool = True):
  varying = [n for n, values in axes.items() if len(values) > 1]
  if len(varying) == 2:
    rows_axis, cols_axis = varying
    grid = np.full((len(axes[rows_axis]), len(axes[cols_axis])), np.nan)
    for r in table:
      grid[axes[rows_axis].index(r[rows_axis]),
           axes[cols_axis].index(r[cols_axis])] = 100 * r['accuracy_mean']
    plotting.heatmap_plot(
        os.path.join(root, f'{prefix}_heatmap.png'), grid,
        row_labels=axes[rows_axis], col_labels=axes[cols_axis],
        ylabel=rows_axis, xlabel=cols_axis,
        title='final eval in-vocab accuracy (%), mean over seeds')
  elif explain_heatmap:
    print(f'No {prefix}_heatmap.png: the grid varies {len(varying)} '
          f'ax{"i" if len(varying) == 1 else "e"}s '
          f'({", ".join(varying) or "none"}); a heatmap needs exactly two. '
          f'{prefix}_summary.csv has every point.',
          flush=True)
  use_launch = all(r.get('launch_epsilon') is not None for r in table)
  key = 'launch_epsilon' if use_launch else 'epsilon'
  private = [r for r in table if r.get(key) is not None and
             math.isfinite(r['accuracy_mean'])]
  if private:
    points = [(r[key], 100 * r['accuracy_mean']) for r in private]
    labels = [', '.join(f'{n}={r[n]:g}' if isinstance(r[n], (int, float))
                        else f'{n}={r[n]}' for n in axes) for r in private]
    plotting.frontier_plot(
        os.path.join(root, f'{prefix}_frontier.png'), points, labels,
        frontier(points),
        xlabel=('launch-equivalent epsilon (not the runs\' guarantee)'
                if use_launch else 'epsilon (delta 1e-10)'),
        ylabel='final eval in-vocab accuracy (%)',
        title='Privacy-utility frontier')


def run_sweep(*, root: str, flagfile: str, axes: Dict[str, List],
              ties: Sequence[Tie], seeds: Sequence[int],
              extra_flags: Sequence[str], prefix: str = 'sweep',
              run_name=point_name, explain_heatmap: bool = True):
  """Runs (or reuses) every point and seed; writes the tables and plots
  (a heatmap when exactly two axes vary; otherwise, with `explain_heatmap`,
  a line saying why there is none).

  Returns (rows, per-point table).
  """
  os.makedirs(root, exist_ok=True)
  points = grid_points(axes, ties)
  check_points(points)   # Every point, before the first run trains.
  rows = []
  for point in points:
    for seed in seeds:
      # The point's values and seed last: absl keeps a flag's last value,
      # so a flag file after `--` that sets an axis flag cannot override it.
      flags_here = [f'--flagfile={flagfile}', *extra_flags] + [
          f'--{n}={_flag_value(v)}' for n, v in point.items()] + [
              f'--seed={seed}']
      try:
        summary = training_runs.run_training(root, run_name(point, seed),
                                             flags_here)
        _check_run_is_the_point(root, run_name(point, seed), point, seed)
      except training_runs.DivergedRun as e:
        print(f'--- {run_name(point, seed)} diverged; the sweep goes on: '
              f'{e}', flush=True)
        summary = dict(diverged=str(e))
      rows.append(run_row(point, seed, summary))
  run_directory.write_csv_atomic(os.path.join(root, f'{prefix}.csv'), rows)
  keys = list(points[0]) if points else []
  table = summarize(rows, keys)
  run_directory.write_csv_atomic(os.path.join(root, f'{prefix}_summary.csv'),
                                 table)
  _plots(root, prefix, table, axes, explain_heatmap)
  return rows, table


def _check_run_is_the_point(root: str, name: str, point: Dict, seed: int):
  """Raises if the run <root>/<name> did not train with the point's values
  (its hparams.json), so that a row never reports one setting and holds
  another's results."""
  path = os.path.join(root, name, run_directory.HPARAMS_FILE)
  if not os.path.exists(path):   # Not a training run's directory.
    return
  with open(path, encoding='utf-8') as f:
    hparams = json.load(f)
  for key, want in dict(point, seed=seed).items():
    got = hparams.get(key)
    same = (math.isclose(got, want, rel_tol=1e-12)
            if isinstance(want, float) and isinstance(got, (int, float))
            else got == want)
    if not same:
      raise RuntimeError(
          f'The run {name} trained with {key}={got}, not the sweep\'s '
          f'{key}={want}; its results would be reported under the wrong '
          f'setting.')


def parse_seeds(texts: Sequence[str], option: str = '--seeds') -> List[int]:
  return checks.check_int_list(texts, option, minimum=0)


def check_flagfile(path: str, option: str = '--training_flagfile'):
  if not os.path.isfile(path):
    raise ValueError(f'{option}={path!r} does not exist.')


def print_table(table: List[Dict], keys: Sequence[str]):
  header = ' '.join(f'{k:>18}' for k in keys)
  print(f'{header} {"runs":>4} {"accuracy %":>16} {"eval loss":>16} '
        f'{"epsilon":>10}')
  for r in table:
    values = ' '.join(f'{r[k]:>18g}' if isinstance(r[k], (int, float)) else
                      f'{r[k]:>18}' for k in keys)
    launch = (f'   launch-equivalent epsilon {r["launch_epsilon"]:.3f}'
              if r.get('launch_epsilon') is not None else '')
    epsilon = ('none' if r.get('epsilon') is None else
               f'{r["epsilon"]:.3f}')
    diverged = (f'   {r["diverged"]} of {r["runs"]} run(s) diverged'
                if r.get('diverged') else '')
    print(f'{values} {r["runs"]:4d} '
          f'{100 * r["accuracy_mean"]:8.2f} +- {100 * r["accuracy_std"]:5.2f} '
          f'{r["loss_mean"]:8.3f} +- {r["loss_std"]:5.3f} '
          f'{epsilon:>10}{launch}{diverged}')
