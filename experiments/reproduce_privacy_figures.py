"""Draws the paper's three privacy figures (Fig. 3), as PNG with CSV data.

(a, b) zCDP against rounds for populations of 1M and 3M when report goal m and
noise multiplier z grow together (z = 7 m / 6500: 500 with 0.54 up to 6500
with 7, and beyond), with MinS at its maximum floor(population / m) - 1 and
the worst-case MaxP for the rounds.
(c) zCDP against rounds for report goal 6500 and z = 7 at several MinS, with
the worst-case MaxP.
"""

import csv
import os

from absl import app
from absl import flags

from dpftrl_tff import accounting
from dpftrl_tff import checks
from dpftrl_tff import console
from dpftrl_tff import plotting

_OUTPUT_DIR = flags.DEFINE_string('output_dir', 'docs/figures',
                                  'Where to write the PNG and CSV files.')
_MAX_ROUNDS = flags.DEFINE_integer('max_rounds', 4000,
                                   'Largest number of rounds on the x axis.')
_ROUND_STEP = flags.DEFINE_integer('round_step', 50, 'x-axis step in rounds.')
_REPORT_GOALS = flags.DEFINE_list(
    'report_goals', ['500', '1000', '2000', '3000', '4000', '5000', '6500',
                     '8000', '10000'],
    'Report goals for the population figures.')
_MIN_SEPARATIONS = flags.DEFINE_list(
    'min_separations', ['50', '100', '150', '200', '300', '500', '1000'],
    'MinS values for the report-goal-6500 figure.')


def population_curves(population, report_goals, rounds):
  rows = []
  for m in report_goals:
    if m > population:
      continue
    z = 7.0 * m / 6500.0
    min_sep = accounting.max_min_separation(population, m)
    for t in rounds:
      max_p = accounting.worst_case_max_participation(t, min_sep)
      rows.append(dict(population=population, report_goal=m,
                       noise_multiplier=z, min_separation=min_sep,
                       max_participation=max_p, rounds=t,
                       zcdp=accounting.compute_zcdp_single_tree(
                           z, t, max_p, min_sep)))
  return rows


def min_separation_curves(min_separations, rounds, report_goal=6500,
                          noise_multiplier=7.0):
  rows = []
  for min_sep in min_separations:
    for t in rounds:
      max_p = accounting.worst_case_max_participation(t, min_sep)
      rows.append(dict(population=None, report_goal=report_goal,
                       noise_multiplier=noise_multiplier,
                       min_separation=min_sep, max_participation=max_p,
                       rounds=t,
                       zcdp=accounting.compute_zcdp_single_tree(
                           noise_multiplier, t, max_p, min_sep)))
  return rows


def _write(rows, name, group_key, label_fmt, title, output_dir):
  fields = ['population', 'report_goal', 'noise_multiplier', 'min_separation',
            'max_participation', 'rounds', 'zcdp']
  with open(os.path.join(output_dir, name + '.csv'), 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
  series = []
  for key in sorted({r[group_key] for r in rows}):
    sel = [r for r in rows if r[group_key] == key]
    series.append((label_fmt(sel[0]), [r['rounds'] for r in sel],
                   [r['zcdp'] for r in sel]))
  plotting.line_plot(os.path.join(output_dir, name + '.png'), series,
                     title=title, xlabel='rounds', ylabel='zCDP rho',
                     logy=True)


def run():
  checks.check_int(_ROUND_STEP.value, '--round_step', minimum=1)
  checks.check_int(_MAX_ROUNDS.value, '--max_rounds',
                   minimum=_ROUND_STEP.value)
  goals = checks.check_int_list(_REPORT_GOALS.value, '--report_goals',
                                minimum=1)
  min_separations = checks.check_int_list(_MIN_SEPARATIONS.value,
                                          '--min_separations', minimum=0)
  os.makedirs(_OUTPUT_DIR.value, exist_ok=True)
  rounds = list(range(_ROUND_STEP.value, _MAX_ROUNDS.value + 1,
                      _ROUND_STEP.value))
  for population, name in ((1_000_000, 'pop1m'), (3_000_000, 'pop3m')):
    rows = population_curves(population, goals, rounds)
    _write(rows, name, 'report_goal',
           lambda r: (f'm={r["report_goal"]}, z={r["noise_multiplier"]:.2f}, '
                      f'MinS={r["min_separation"]}'),
           f'Population {population // 1_000_000}M, MinS max', _OUTPUT_DIR.value)
  rows = min_separation_curves(min_separations, rounds)
  _write(rows, 'min_sep', 'min_separation',
         lambda r: f'MinS={r["min_separation"]}',
         'Report goal 6500, z=7, worst-case MaxP', _OUTPUT_DIR.value)
  print(f'Wrote pop1m, pop3m and min_sep (.png, .csv) to {_OUTPUT_DIR.value}')


def main(argv):
  return console.run_main(run, argv)


if __name__ == '__main__':
  app.run(main)
