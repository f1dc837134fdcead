"""Runs the training binary as a subprocess, for the sweeps and comparisons.

Every run goes through `experiments.run_stackoverflow`, which reuses a
finished run only if it was made with exactly the same flags and data,
resumes an interrupted one and refuses a directory holding another run: a
sweep that is run again continues where it stopped.
"""

import ctypes
import json
import os
import signal
import subprocess
import sys

# The training binary's exit code for a run that diverged
# (`console.run_main`, `divergence.DivergenceError`).
DIVERGED_EXIT_CODE = 3
_PR_SET_PDEATHSIG = 1


class DivergedRun(RuntimeError):
  """The run stopped because it diverged (its output says where)."""


class RefusedRun(RuntimeError):
  """The training binary refused the run's flags (exit code 2; its output
  says which)."""


# The training binary's exit code for a refused command (`console.run_main`).
REFUSED_EXIT_CODE = 2


def exit_code(error: Exception) -> int:
  """A binary's exit code when one of its runs raised `error`, as
  `console.run_main`'s: 2 refused (bad flags: re-running will not help),
  3 diverged, 1 any other failure."""
  if isinstance(error, (RefusedRun, ValueError)):
    return REFUSED_EXIT_CODE
  if isinstance(error, DivergedRun):
    return DIVERGED_EXIT_CODE
  return 1


def _die_with_parent():
  """In the child, before exec: SIGTERM when the launching process dies.

  A sweep killed with SIGKILL or SIGTERM then takes its training run down
  with it; the run's own SIGTERM handler stops its TFF worker_binary
  (`runtime.install`), so nothing is left training or holding the run
  directory's lock.
  """
  try:
    libc = ctypes.CDLL('libc.so.6', use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
  except OSError:
    pass


def run_child(command, **kwargs) -> subprocess.CompletedProcess:
  """subprocess.run of `command` whose life is tied to this process's."""
  parent = os.getpid()

  def preexec():
    _die_with_parent()
    if os.getppid() != parent:   # The parent died before prctl took hold.
      os.kill(os.getpid(), signal.SIGTERM)

  return subprocess.run(command, check=False, preexec_fn=preexec, **kwargs)


def run_training(root: str, name: str, flags) -> dict:
  """Runs (or reuses) <root>/<name> with `flags`; returns its summary.

  Raises DivergedRun if the run diverged, RuntimeError if it failed.
  """
  summary_path = os.path.join(root, name, 'summary.json')
  # The run's directory last: it overrides any in a flag file.
  command = [sys.executable, '-m', 'experiments.run_stackoverflow', *flags,
             f'--root_output_dir={root}', f'--experiment_name={name}']
  print(f'--- {name}: {" ".join(command[1:])}', flush=True)
  proc = run_child(command)
  if proc.returncode == DIVERGED_EXIT_CODE:
    raise DivergedRun(f'the run {name} diverged (exit code '
                      f'{DIVERGED_EXIT_CODE}); see its output above.')
  if proc.returncode == REFUSED_EXIT_CODE:
    raise RefusedRun(f'the run {name} was refused (exit code '
                     f'{REFUSED_EXIT_CODE}): its settings are not accepted; '
                     f'its error is above.')
  if proc.returncode or not os.path.isfile(summary_path):
    raise RuntimeError(f'The run {name} failed or was refused (exit code '
                       f'{proc.returncode}); see its output above.')
  with open(summary_path) as f:
    return json.load(f)
