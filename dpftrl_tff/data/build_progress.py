"""Progress of a git corpus build, with an ETA for each of its two phases.

Building the corpus of a large history takes minutes: the Linux kernel's
(over a million commits) about six on a 2-core machine, most of it reading
and tokenizing the messages, then writing the database. `BuildProgress`
prints a line at most every `every_seconds`, so a small history builds
without any and a large one says how far each phase is:

  reading commits: 35% (412,000 commits, 9,876 authors), 1m33s, ETA 2m53s
  writing the database: 60% (14,000 of 24,464 authors), 0m40s, ETA 0m27s

A phase's ETA is its elapsed time times (1 - f) / f at the share f done:
of the commits (git: `git rev-list --count` of the log's commits), of the
input file's bytes (JSON lines, compressed or not), or of the sentences
written (not of the authors: one author can have a hundred thousand).
Without a share (a reader that cannot tell) the line gives counts only.
"""

import time
from typing import Callable, Optional

from dpftrl_tff.run import progress as progress_lib

# Commits between two looks at the clock while reading.
_CHECK_EVERY = 256


class BuildProgress:
  """Throttled progress lines of `git_corpus.build` (module docstring)."""

  def __init__(self, print_fn: Callable[[str], None] = print, *,
               every_seconds: float = 10.0,
               clock: Callable[[], float] = time.monotonic):
    self._print = print_fn
    self._every = every_seconds
    self._clock = clock
    self._read_share: Optional[Callable[[], Optional[float]]] = None
    self._phase_start = None
    self._last = None

  def set_read_share(self, share: Callable[[], Optional[float]]):
    """How to tell the share of the input read so far (a reader sets it)."""
    self._read_share = share

  def _due(self) -> bool:
    now = self._clock()
    if self._phase_start is None:
      self._phase_start = self._last = now
    if now - self._last < self._every:
      return False
    self._last = now
    return True

  def _line(self, phase: str, share: Optional[float], counts: str) -> str:
    elapsed = self._clock() - self._phase_start
    if share is None or not 0 < share <= 1:
      return f'{phase}: {counts}, {progress_lib.format_seconds(elapsed)}'
    eta = elapsed * (1 - share) / share
    return (f'{phase}: {100 * share:.0f}% ({counts}), '
            f'{progress_lib.format_seconds(elapsed)}, ETA '
            f'{progress_lib.format_seconds(eta)}')

  def commit_read(self, commits: int, authors: int):
    """Called after each commit read; prints when a line is due."""
    if commits % _CHECK_EVERY and commits != 1:
      return
    if not self._due():
      return
    share = self._read_share() if self._read_share else None
    self._print(self._line('reading commits', share,
                           f'{commits:,} commits, {authors:,} authors'))

  def reading_done(self):
    """The next phase's clock starts now."""
    self._phase_start = None

  def author_written(self, done: int, total: int, share: float):
    """Called after each author's rows are written; `share`: of the
    sentences (authors' sizes differ by orders of magnitude)."""
    if not self._due():
      return
    self._print(self._line('writing the database', share,
                           f'{done:,} of {total:,} authors'))
