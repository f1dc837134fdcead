"""Reproduces the privacy columns of the paper's NWP and OTF tables.

For every row it prints the paper's zCDP (and epsilon where given) beside the
values this project computes from the row's rounds, MinS and MaxP, with report
goal 6500 and noise multiplier 7, and whether they agree to the paper's
printed precision (2 decimals). Epsilon is by PLD at delta = 1e-10. `eps ours`
is the epsilon of the exact zCDP, `eps(rounded)` that of the paper's printed
zCDP (the paper converts its rounded values); how the SecAgg rows and the
agreement are decided: `dpftrl_tff.accounting.paper_tables`.
"""

import csv
import sys

from absl import app
from absl import flags

from dpftrl_tff import console
from dpftrl_tff.accounting import paper_tables

_OUTPUT_CSV = flags.DEFINE_string('output_csv', None,
                                  'Also write the table to this CSV file.')


def main(argv):
  del argv
  console.quiet_libraries()
  rows = paper_tables.reproduce()
  header = (f'{"table":5} {"task":7} {"rounds":>6} {"MinS":>5} {"MaxP":>4} '
            f'{"zCDP paper":>10} {"zCDP ours":>10} {"eps paper":>9} '
            f'{"eps ours":>9} {"eps(rounded)":>12} {"agree":>5}  note')
  print(f'Report goal {paper_tables.REPORT_GOAL}, noise multiplier '
        f'{paper_tables.NOISE_MULTIPLIER:g}, delta 1e-10 (PLD).')
  print(header)
  for r in rows:
    eps_paper = '' if r['paper_epsilon'] is None else f'{r["paper_epsilon"]:.2f}'
    eps_ours = '' if r['epsilon'] is None else f'{r["epsilon"]:.4f}'
    eps_rounded = ('' if r['epsilon_of_rounded_zcdp'] is None else
                   f'{r["epsilon_of_rounded_zcdp"]:.4f}')
    print(f'{r["table"]:5} {r["task"]:7} {r["rounds"]:6d} '
          f'{r["min_separation"]:5d} {r["max_participation"]:4d} '
          f'{r["paper_zcdp"]:10.2f} {r["zcdp"]:10.4f} {eps_paper:>9} '
          f'{eps_ours:>9} {eps_rounded:>12} {"yes" if r["agrees"] else "NO":>5}  {r["note"]}')
  agree = sum(r['agrees'] for r in rows)
  print(f'{agree} of {len(rows)} rows agree to the printed precision.')
  if _OUTPUT_CSV.value:
    fields = ['table', 'task', 'rounds', 'min_separation',
              'max_participation', 'paper_zcdp', 'zcdp', 'paper_epsilon',
              'epsilon', 'epsilon_of_rounded_zcdp', 'agrees', 'note']
    try:
      with open(_OUTPUT_CSV.value, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction='ignore')
        writer.writeheader()
        writer.writerows(rows)
    except OSError as e:
      print(f'error: --output_csv={_OUTPUT_CSV.value}: '
            f'{console.describe_os_error(e)}', file=sys.stderr)
      return 2
  return 0 if agree == len(rows) else 1


if __name__ == '__main__':
  sys.exit(app.run(main))
