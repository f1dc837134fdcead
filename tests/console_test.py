"""Tests of a binary's main: one line and an exit code that says why."""

import contextlib
import errno
import io

from absl.testing import absltest
from absl.testing import parameterized

from dpftrl_tff import console
from dpftrl_tff import runtime
from dpftrl_tff.remote import workers
from dpftrl_tff.run import divergence


def _raise(error):
  def run():
    raise error
  return run


class RunMainTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('bad_flag', ValueError('--clip_norm must be > 0, got 0.'), 2),
      ('unwritable_output', PermissionError(errno.EACCES, 'Permission denied',
                                            '/runs'), 2),
      ('missing_input', FileNotFoundError(errno.ENOENT, 'No such file',
                                          '/x.flags'), 2),
      ('full_disk', OSError(errno.ENOSPC, 'No space left on device',
                            '/runs/metrics.csv'), 1),
      ('io_error', OSError(errno.EIO, 'Input/output error'), 1),
      ('lost_remote_worker', workers.WorkerError('worker host:1 was lost.'),
       1),
      ('crashed_local_worker', runtime.WorkerLost('worker_binary stopped.'),
       1),
      ('diverged', divergence.DivergenceError('round 3 is not finite.'), 3),
  )
  def test_exit_code_tells_a_refusal_from_a_failure(self, error, code):
    cleanups = []
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
      got = console.run_main(_raise(error), ['binary'],
                             cleanup=lambda: cleanups.append(1))
    self.assertEqual(got, code)
    self.assertEqual(cleanups, [1])
    lines = [l for l in err.getvalue().splitlines() if l.strip()]
    self.assertLen(lines, 1, err.getvalue())
    self.assertNotIn('Traceback', err.getvalue())


if __name__ == '__main__':
  absltest.main()
