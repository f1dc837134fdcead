"""A progress line with an ETA for round loops.

The ETA is the mean time of the rounds timed so far times the rounds left,
leaving out the first round of a process (it traces and compiles TFF's
computations, often several times a normal round). On a terminal the line
is redrawn in place; elsewhere (logs, CI) a line is printed every
`every` rounds, after the first round, on evaluation rounds and at the
end.
"""

import sys
from typing import Callable, Optional


def format_seconds(seconds: float) -> str:
  seconds = int(round(seconds))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f'{h}h{m:02d}m{s:02d}s' if h else f'{m}m{s:02d}s'


class Progress:
  """Reports round `done` of `total` (see the module docstring)."""

  def __init__(self, total: int, start: int, *,
               print_fn: Optional[Callable[[str], None]] = None,
               every: Optional[int] = None, stream=None,
               unit: str = 'round'):
    self.total = total
    self.unit = unit
    self.start = start
    self._stream = stream or sys.stdout
    self._print = print_fn
    self._tty = print_fn is None and getattr(self._stream, 'isatty',
                                             lambda: False)()
    self._every = every or max(1, (total - start) // 20)
    self._timed_seconds = 0.0
    self._timed_rounds = 0
    self._last_line = ''

  def eta_seconds(self, done: int) -> Optional[float]:
    if not self._timed_rounds:
      return None
    return self._timed_seconds / self._timed_rounds * (self.total - done)

  def update(self, done: int, round_seconds: float, text: str,
             force: bool = False):
    if done - self.start > 1:   # The process's first round traces: not timed.
      self._timed_seconds += round_seconds
      self._timed_rounds += 1
    eta = self.eta_seconds(done)
    eta_text = format_seconds(eta) if eta is not None else '...'
    bar_len = 20
    filled = int(bar_len * done / max(1, self.total))
    line = (f'[{"#" * filled}{"." * (bar_len - filled)}] {self.unit} '
            f'{done}/{self.total} {text} {round_seconds:.1f}s/{self.unit} '
            f'ETA {eta_text}')
    if self._tty:
      pad = ' ' * max(0, len(self._last_line) - len(line))
      self._stream.write('\r' + line + pad)
      if force or done == self.total:
        self._stream.write('\n')
      self._stream.flush()
      self._last_line = line
    elif (force or done == self.total or done - self.start == 1 or
          (done - self.start) % self._every == 0):
      (self._print or (lambda s: print(s, file=self._stream, flush=True)))(
          line)

  def close(self):
    if self._tty and self._last_line:
      self._stream.write('\n')
      self._stream.flush()
      self._last_line = ''
