"""The Makefile's choice of interpreter for .venv (Debian's python3.11 if
usable, else python3), and its test command's scheduling."""

import os
import subprocess

from absl.testing import absltest

from tests import fixtures


def _make_python(*overrides):
  proc = subprocess.run(
      ['make', '-s', '--no-print-directory', *overrides, '--eval',
       'print_python:\n\t@echo $(PYTHON)', 'print_python'],
      cwd=fixtures.ROOT, capture_output=True, text=True, timeout=60,
      env={k: v for k, v in os.environ.items() if k != 'PYTHON'})
  if proc.returncode:
    raise AssertionError(proc.stderr)
  return proc.stdout.strip()


class InterpreterTest(absltest.TestCase):

  def test_debians_python_when_it_makes_venvs_else_python3(self):
    debian = '/usr/bin/python3.11'
    usable = os.path.exists(debian) and subprocess.run(
        [debian, '-c', 'import ensurepip, sys; v = sys.version_info; '
         'assert v[:2] == (3, 11) and v.releaselevel == "final"'],
        capture_output=True).returncode == 0
    self.assertEqual(_make_python(), debian if usable else 'python3')

  def test_not_a_python_that_cannot_make_venvs(self):
    # Any interpreter whose check fails: here one that is not Python.
    self.assertEqual(_make_python('DEBIAN_PYTHON=/bin/false'), 'python3')

  def test_python3_without_debians(self):
    self.assertEqual(_make_python('DEBIAN_PYTHON=/nonexistent/python3.11'),
                     'python3')

  def test_the_command_line_wins(self):
    self.assertEqual(_make_python('PYTHON=/opt/my/python3.11'),
                     '/opt/my/python3.11')


class TestCommandTest(absltest.TestCase):

  def test_xdist_keeps_the_slow_first_order(self):
    # pytest-xdist's --dist loadscope has sorted test classes by their
    # number of tests since 3.5.0 (pytest-dev/pytest-xdist#632), unless
    # --no-loadscope-reorder says not to; the sort undoes
    # tests/conftest.py's slowest-first order: a class of one long test then
    # starts among the last and runs alone at the end.
    with open(os.path.join(fixtures.ROOT, 'Makefile'), encoding='utf-8') as f:
      (command,) = [line for line in f if ' -m pytest ' in line]
    self.assertIn('--dist loadscope', command)
    self.assertIn('--no-loadscope-reorder', command)

  def test_every_slow_first_class_exists(self):
    # A renamed or moved class would silently drop out of the order.
    from tests import conftest  # pylint: disable=g-import-not-at-top
    for node_id in conftest._SLOW_FIRST:  # pylint: disable=protected-access
      path, name = node_id.split('::')
      with open(os.path.join(fixtures.ROOT, path), encoding='utf-8') as f:
        self.assertRegex(f.read(), rf'(?m)^class {name}\(', node_id)


if __name__ == '__main__':
  absltest.main()
