"""Names that cannot resolve, found without running the code (pyflakes).

A binary's rarely run branch (`compare_mechanisms --train`) used a module it
no longer imported, and failed only when a user asked for it: pyflakes'
"undefined name" finds such a line in any file. Unused imports are refused
too, except in package `__init__.py` files, whose imports are the
package's API.
"""

import pathlib
import tempfile

from absl.testing import absltest
from pyflakes import api
from pyflakes import messages
from pyflakes import reporter

ROOT = pathlib.Path(__file__).resolve().parent.parent
FOLDERS = ('dpftrl_tff', 'experiments', 'benchmarks', 'tests')


class _Collect(reporter.Reporter):

  def __init__(self):
    super().__init__(None, None)
    self.found = []

  def unexpectedError(self, filename, msg):
    self.found.append((filename, None, msg))

  def syntaxError(self, filename, msg, lineno, offset, text):
    self.found.append((filename, lineno, msg))

  def flake(self, message):
    self.found.append((message.filename, message.lineno, message))


def _messages(path: pathlib.Path):
  collect = _Collect()
  api.checkPath(str(path), collect)
  return collect.found


class StaticCheckTest(absltest.TestCase):

  def test_no_undefined_names_or_unused_imports(self):
    bad = []
    for folder in FOLDERS:
      for path in sorted((ROOT / folder).rglob('*.py')):
        for filename, lineno, message in _messages(path):
          if isinstance(message, messages.UnusedImport) and (
              path.name == '__init__.py'):
            continue
          if isinstance(message, (messages.UndefinedName,
                                  messages.UndefinedLocal,
                                  messages.UndefinedExport,
                                  messages.UnusedImport, str)):
            bad.append(f'{filename}:{lineno}: {message}')
    self.assertEmpty(bad, '\n'.join(bad))

  def test_finds_an_undefined_name(self):
    path = pathlib.Path(tempfile.mkdtemp()) / 'broken.py'
    path.write_text('def f():\n  return blt_optimizer.optimize()\n')
    found = _messages(path)
    self.assertLen(found, 1)
    self.assertIsInstance(found[0][2], messages.UndefinedName)


if __name__ == '__main__':
  absltest.main()
