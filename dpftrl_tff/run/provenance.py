"""Where and with what a run was started: command, Python, package
versions, the project's commit."""

import datetime
import importlib.metadata
import os
import subprocess
import sys
from typing import Any, Dict, Optional


def _git_commit() -> Optional[str]:
  """The project's commit (with '+dirty' for local changes), if known."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  try:
    commit = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=root,
                            capture_output=True, text=True, timeout=10,
                            check=True).stdout.strip()
    dirty = subprocess.run(['git', 'status', '--porcelain',
                            '--untracked-files=no'], cwd=root,
                           capture_output=True, text=True, timeout=10,
                           check=True).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return None
  return commit + ('+dirty' if dirty else '')


def provenance() -> Dict[str, Any]:
  """Where and with what a run (or a resumption of it) was started."""
  versions = {}
  for package in ('tensorflow', 'tensorflow-federated', 'tensorflow-privacy',
                  'dp-accounting', 'numpy', 'absl-py'):
    try:
      versions[package] = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
      versions[package] = None
  return dict(command=list(sys.argv), python=sys.version.split()[0],
              packages=versions, commit=_git_commit(),
              started=datetime.datetime.now(datetime.timezone.utc).isoformat(
                  timespec='seconds'))
