"""Tests of a binary's main: one line and an exit code that says why."""

import contextlib
import errno
import io
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized

from dpftrl_tff import console
from dpftrl_tff import runtime
from dpftrl_tff.remote import workers
from dpftrl_tff.run import divergence
from tests import fixtures


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

  def test_an_int_from_run_is_the_exit_code(self):
    self.assertEqual(console.run_main(lambda: 3, ['binary']), 3)
    self.assertEqual(console.run_main(lambda: dict(a=1), ['binary']), 0)
    self.assertEqual(console.run_main(lambda: True, ['binary']), 0)


# The binaries that write outside a run directory, given a place under a
# file: one line and exit 2 (four of them were tracebacks).
_UNWRITABLE = (
    ('reproduce_participation', ['--output_dir={place}', '--scale=500']),
    ('reproduce_privacy_figures', ['--output_dir={place}']),
    ('compare_mechanisms', ['--output_dir={place}']),
    ('sweep', ['--axis=client_lr=0.5', '--root_output_dir={place}']),
    ('noise_sweep', ['--noise_multipliers=0', '--seeds=1',
                     '--root_output_dir={place}']),
)


class UnwritableOutputTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(m, m, args) for m, args in _UNWRITABLE])
  def test_is_one_line(self, module, args):
    folder = tempfile.mkdtemp()
    not_a_dir = os.path.join(folder, 'file')
    with open(not_a_dir, 'w') as f:
      f.write('x')
    place = os.path.join(not_a_dir, 'out')
    proc = fixtures.run_module(f'experiments.{module}',
                               *[a.format(place=place) for a in args])
    self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
    self.assertIn(f'cannot use {place}', proc.stderr)
    self.assertNotIn('Traceback', proc.stderr)
    self.assertLen(fixtures.own_lines(proc.stderr), 1, proc.stderr)


if __name__ == '__main__':
  absltest.main()
