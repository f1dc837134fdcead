"""Resident memory of processes and their children, from /proc (Linux)."""

import os
from typing import List


def child_pids(parent: int) -> List[int]:
  """Pids whose parent is `parent` (TFF's worker_binary is a child of the
  Python process that started its execution context)."""
  out = []
  for pid in os.listdir('/proc'):
    try:
      with open(f'/proc/{pid}/stat') as f:
        if int(f.read().rsplit(')', 1)[1].split()[1]) == parent:
          out.append(int(pid))
    except (OSError, ValueError, IndexError):
      continue
  return out


def memory_mb(pid: int, field: str = 'VmRSS') -> float:
  """`field` of /proc/<pid>/status in MB (VmRSS now, VmHWM the peak); 0.0
  when the process is gone."""
  try:
    with open(f'/proc/{pid}/status') as f:
      for line in f:
        if line.startswith(field + ':'):
          return int(line.split()[1]) / 1024
  except OSError:
    pass
  return 0.0
