"""BUILD builds: `bazel build //...` and a small test, offline.

Bazel 4.2.3 is Debian's bazel-bootstrap (`make bazel` installs it; CI's
.ci/run does). Without a `bazel` on PATH this test skips with the reason,
except under CI (CI=true), where a missing Bazel fails it.
"""

import os
import shutil
import subprocess

from absl.testing import absltest

from tests import fixtures


def _bazel(*args, timeout=600):
  return subprocess.run(['bazel', *args], cwd=fixtures.ROOT,
                        capture_output=True, text=True, timeout=timeout)


class BazelTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    if shutil.which('bazel') is None:
      if os.environ.get('CI') == 'true':
        self.fail('bazel is not on PATH: .ci/run installs bazel-bootstrap.')
      self.skipTest('bazel is not installed (`make bazel` installs it).')
    if not os.path.exists(os.path.join(fixtures.ROOT, '.venv', 'bin',
                                       'python')):
      self.skipTest('no .venv in the checkout (Bazel runs its interpreter).')

  def tearDown(self):
    _bazel('shutdown', timeout=120)   # No server left behind.
    super().tearDown()

  def test_build_and_a_small_test_offline(self):
    built = _bazel('build', '//...')
    self.assertEqual(built.returncode, 0, built.stderr[-3000:])
    # One small test through Bazel's test runner and toolchain (pytest runs
    # them all; `make bazel` runs every small one through Bazel).
    tested = _bazel('test', '--nocache_test_results',
                    '//:accounting_formulas_test')
    self.assertEqual(tested.returncode, 0,
                     tested.stdout[-3000:] + tested.stderr[-3000:])
    self.assertRegex(tested.stdout + tested.stderr,
                     r'Executed 1 out of 1 test: 1 test passes')


if __name__ == '__main__':
  absltest.main()
