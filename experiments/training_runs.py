"""Runs the training binary as a subprocess, for the sweeps and comparisons.

Every run goes through `experiments.run_stackoverflow`, which reuses a
finished run only if it was made with exactly the same flags and data,
resumes an interrupted one and refuses a directory holding another run: a
sweep that is run again continues where it stopped.
"""

import json
import os
import subprocess
import sys


def run_training(root: str, name: str, flags) -> dict:
  """Runs (or reuses) <root>/<name> with `flags`; returns its summary."""
  summary_path = os.path.join(root, name, 'summary.json')
  # The run's directory last: it overrides any in a flag file.
  command = [sys.executable, '-m', 'experiments.run_stackoverflow', *flags,
             f'--root_output_dir={root}', f'--experiment_name={name}']
  print(f'--- {name}: {" ".join(command[1:])}', flush=True)
  proc = subprocess.run(command, check=False)
  if proc.returncode or not os.path.isfile(summary_path):
    raise RuntimeError(f'The run {name} failed or was refused (exit code '
                       f'{proc.returncode}); see its output above.')
  with open(summary_path) as f:
    return json.load(f)
