"""Speed of this project's tree accountant against TensorFlow Privacy's.

For several rows of the paper's NWP table, prints the time of TFP's
`compute_zcdp_single_tree`, this project's time (cold caches), their ratio and
whether the values agree (relative error <= 1e-9); then the time to compute
the whole NWP table (11 distinct rows plus the two SecAgg rows) from cold
caches.

Then, for T = 100000 and a MaxP that binds (below the participations that fit
with MinS rounds between two), the time of this project's accountant from
cold caches over a grid of MinS and MaxP (TFP would take hours to days
there), and over a second grid with the paper's tree restarts.

  python -m benchmarks.accounting_speed            # quick rows (~1 min)
  python -m benchmarks.accounting_speed --rows=all # every row (hours in TFP)
  python -m benchmarks.accounting_speed --rows=    # only the binding grid
"""

import time

from absl import app
from absl import flags
from tensorflow_privacy.privacy.analysis import tree_aggregation_accountant as tfp_tree

from dpftrl_tff.accounting import paper_tables
from dpftrl_tff.accounting import tree

_ROWS = flags.DEFINE_string(
    'rows', 'pt-PT,es-AR,en-IN,de-DE',
    'Comma-separated NWP tasks to time against TFP, "all", or empty.')
_BINDING_ROUNDS = flags.DEFINE_integer(
    'binding_rounds', 100000, 'T of the binding-MaxP grid (0: skip it).')
_BINDING_MIN_SEPARATIONS = flags.DEFINE_list(
    'binding_min_separations', ['0', '3', '10', '30', '50', '60', '100',
                                '120', '150', '250', '300', '1000'],
    'MinS values of the binding-MaxP grid.')
_REPEATS = flags.DEFINE_integer(
    'repeats', 3, 'Binding grid: the least time of this many cold runs.')
_BINDING_FRACTIONS = flags.DEFINE_list(
    'binding_fractions', ['0.1', '0.3', '0.5', '0.99'],
    'MaxP of the grid, as fractions of the participations that fit.')
_RESTART_MIN_SEPARATIONS = flags.DEFINE_list(
    'restart_min_separations', ['0', '1', '2', '4', '6', '10', '20', '30',
                                '50', '60', '120', '250'],
    'MinS values of the grid timed at the same T with the paper\'s restarts '
    '(trees starting at 128 + 1024 i, MaxP and MinS across them; MaxP the '
    'same fractions); empty: none.')

NOISE = 7.0


def _ours(rounds, max_p, min_sep):
  tree._block_tree.cache_clear()  # pylint: disable=protected-access
  start = time.perf_counter()
  value = tree.compute_zcdp_single_tree(NOISE, rounds, max_p, min_sep)
  return value, time.perf_counter() - start


def main(argv):
  del argv
  if _ROWS.value:
    _paper_rows()
  if _BINDING_ROUNDS.value:
    rounds = _BINDING_ROUNDS.value
    _binding_grid(rounds, _BINDING_MIN_SEPARATIONS.value, ())
    _binding_grid(rounds, _RESTART_MIN_SEPARATIONS.value,
                  tree.paper_restart_rounds(rounds))


def _binding_grid(rounds, min_separations, restarts):
  """Times over MinS x MaxP fractions, MaxP below what fits (it binds)."""
  if not min_separations:
    return
  if restarts:
    print(f'\nWith the paper\'s restarts ({len(restarts) + 1} trees), ', end='')
  else:
    print(f'\nBinding MaxP at T = {rounds}, ', end='')
  print(f'cold caches, least of {_REPEATS.value} runs')
  print(f'{"MinS":>5} {"MaxP":>6} {"fits":>6} {"seconds":>8}  sensitivity^2')
  slowest = 0.0
  for min_sep in (int(m) for m in min_separations):
    fits = tree.max_possible_participation(rounds, min_sep)
    for fraction in (float(f) for f in _BINDING_FRACTIONS.value):
      max_p = max(1, min(fits - 1, int(fits * fraction)))
      value, seconds = _least_time(rounds, max_p, min_sep, restarts)
      slowest = max(slowest, seconds)
      print(f'{min_sep:5d} {max_p:6d} {fits:6d} {seconds:8.3f}  {value}',
            flush=True)
  print(f'Slowest: {slowest:.2f} s')


def _least_time(rounds, max_p, min_sep, restarts):
  """The value and the least time of _REPEATS cold runs (timings vary)."""
  seconds = float('inf')
  for _ in range(_REPEATS.value):
    tree._block_tree.cache_clear()  # pylint: disable=protected-access
    start = time.perf_counter()
    value = tree.max_sensitivity_squared(rounds, max_p, min_sep, restarts)
    seconds = min(seconds, time.perf_counter() - start)
  return value, seconds


def _paper_rows():
  nwp = [r for r in paper_tables.PAPER_ROWS if r[0] == 'NWP']
  wanted = None if _ROWS.value == 'all' else set(_ROWS.value.split(','))
  print(f'{"task":7} {"T":>5} {"MinS":>5} {"MaxP":>4} {"TFP s":>9} '
        f'{"ours s":>9} {"speed-up":>9} {"agree":>5}  zCDP')
  for _, task, rounds, min_sep, max_p, _, _, _ in nwp:
    if wanted is not None and task not in wanted:
      continue
    start = time.perf_counter()
    expected = tfp_tree.compute_zcdp_single_tree(NOISE, rounds, max_p,
                                                 min_sep)
    tfp_seconds = time.perf_counter() - start
    tfp_tree._tree_sensitivity_square_sum.cache_clear()  # pylint: disable=protected-access
    value, ours_seconds = _ours(rounds, max_p, min_sep)
    agree = abs(value - expected) <= 1e-9 * expected
    print(f'{task:7} {rounds:5d} {min_sep:5d} {max_p:4d} {tfp_seconds:9.3f} '
          f'{ours_seconds:9.6f} {tfp_seconds / ours_seconds:9.0f} '
          f'{"yes" if agree else "NO":>5}  {value:.6f}', flush=True)
  tree._block_tree.cache_clear()  # pylint: disable=protected-access
  start = time.perf_counter()
  for _, _, rounds, min_sep, max_p, _, _, _ in nwp:
    tree.compute_zcdp_single_tree(NOISE, rounds, max_p, min_sep)
  total = time.perf_counter() - start
  print(f'Whole NWP table ({len(nwp)} rows), cold caches: {total:.4f} s')


if __name__ == '__main__':
  app.run(main)
