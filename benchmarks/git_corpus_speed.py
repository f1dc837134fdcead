r"""Time and memory of building the git corpus (goal: under 60 s and 1 GB).

Runs `experiments.build_git_corpus` in a child process on a JSON-lines
export (default: the git project's 60,751 commits and 944 documentation
files in ../shared/corpora, development material only) and prints the wall
time and the child's peak resident memory.

  python -m benchmarks.git_corpus_speed
  python -m benchmarks.git_corpus_speed --commits_jsonl=C --docs_jsonl=D
"""

import os
import resource
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

_SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), '..', 'shared', 'corpora')
_COMMITS = flags.DEFINE_string(
    'commits_jsonl', os.path.join(_SHARED, 'git-commits.jsonl.xz'),
    'Commits export (commit, author, date, message).')
_DOCS = flags.DEFINE_string(
    'docs_jsonl', os.path.join(_SHARED, 'git-docs.jsonl.xz'),
    'Documentation export (path, text); empty: none.')


def main(argv):
  del argv
  if not os.path.isfile(_COMMITS.value):
    print(f'error: --commits_jsonl={_COMMITS.value}: no such file.',
          file=sys.stderr)
    return 2
  output = tempfile.mkdtemp()
  command = [sys.executable, '-m', 'experiments.build_git_corpus',
             f'--commits_jsonl={_COMMITS.value}', f'--output_dir={output}']
  if _DOCS.value:
    command.append(f'--docs_jsonl={_DOCS.value}')
  started = time.monotonic()
  proc = subprocess.run(command, capture_output=True, text=True, check=False)
  seconds = time.monotonic() - started
  peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
  if proc.returncode:
    print(proc.stderr[-2000:], file=sys.stderr)
    return proc.returncode
  print(proc.stdout.strip())
  print(f'build_git_corpus: {seconds:.1f} s wall (process start included), '
        f'peak memory {peak_mb:.0f} MB (goals: 60 s, 1024 MB)')
  return 0


if __name__ == '__main__':
  sys.exit(app.run(main))
