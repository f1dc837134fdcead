"""Tests of the run directory: lock, identity, atomic files, checkpoints."""

import errno
import gc
import io
import json
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest
import numpy as np

from dpftrl_tff import console
from dpftrl_tff import strict_json
from dpftrl_tff.run import run_directory
from tests import fixtures


def _leaves(seed):
  rng = np.random.default_rng(seed)
  return [rng.normal(size=[3, 2]).astype(np.float32), np.int64(seed),
          np.array([seed, seed + 1], np.int64)]


class _FullDisk(io.RawIOBase):
  """A file that takes `room` bytes, then fails as a full disk does."""

  def __init__(self, room):
    super().__init__()
    self.room, self.size = room, 0

  def writable(self):
    return True

  def seekable(self):
    return True

  def tell(self):
    return self.size

  def seek(self, offset, whence=0):
    self.size = offset if whence == 0 else self.size + offset
    return self.size

  def write(self, data):
    if self.size + len(data) > self.room:
      raise OSError(errno.ENOSPC, 'No space left on device')
    self.size += len(data)
    return len(data)


class SaveNpzTest(absltest.TestCase):

  def test_same_arrays_as_np_savez(self):
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3),
              np.array([2**40, -1], np.int64), np.zeros([0])]
    path = os.path.join(tempfile.mkdtemp(), 'x.npz')
    with open(path, 'wb') as f:
      run_directory.save_npz(f, arrays)
    with np.load(path) as f:
      self.assertEqual(sorted(f.files), ['arr_0', 'arr_1', 'arr_2'])
      for i, array in enumerate(arrays):
        np.testing.assert_array_equal(f[f'arr_{i}'], array)
        self.assertEqual(f[f'arr_{i}'].dtype, array.dtype)

  def test_full_disk_leaves_no_zip_file_to_finish(self):
    # np.savez left its ZipFile open: the garbage collector's
    # ZipFile.__del__ then printed a traceback after the one-line error.
    unraisable = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
      for room in (10, 300, 5000):
        with self.assertRaises(OSError):
          run_directory.save_npz(_FullDisk(room),
                                 [np.zeros(1000, np.float32)] * 3)
        gc.collect()
    finally:
      sys.unraisablehook = hook
    self.assertEqual(unraisable, [])


class RunDirectoryTest(absltest.TestCase):

  def test_second_process_is_refused_while_locked(self):
    path = os.path.join(tempfile.mkdtemp(), 'run')
    script = ('import sys; from dpftrl_tff.run import run_directory as r\n'
              'try:\n'
              '  with r.RunDirectory(sys.argv[1]).lock(): print("locked")\n'
              'except r.RunDirectoryError as e: print("refused:", e)\n')
    with run_directory.RunDirectory(path).lock():
      proc = subprocess.run([sys.executable, '-c', script, path],
                            capture_output=True, text=True, cwd=fixtures.ROOT,
                            timeout=60)
    self.assertIn('refused:', proc.stdout)
    self.assertIn(f'pid {os.getpid()}', proc.stdout)
    proc = subprocess.run([sys.executable, '-c', script, path],
                          capture_output=True, text=True, cwd=fixtures.ROOT,
                          timeout=60)
    self.assertEqual(proc.stdout.strip(), 'locked')

  def test_unclaimed_directory_is_free_and_foreign_one_refused(self):
    path = os.path.join(tempfile.mkdtemp(), 'run')
    run_dir = run_directory.RunDirectory(path)
    with run_dir.lock():   # Only the lock file: not claimed.
      self.assertIsNone(run_dir.previous_hparams())
    with open(os.path.join(path, 'notes.txt'), 'w') as f:
      f.write('x')
    with run_dir.lock():
      with self.assertRaisesRegex(run_directory.RunDirectoryError,
                                  'not a dpftrl_tff run'):
        run_dir.previous_hparams()

  def test_checkpoint_fallback_and_temporaries_removed(self):
    path = os.path.join(tempfile.mkdtemp(), 'run')
    run_dir = run_directory.RunDirectory(path)
    warnings = []
    with run_dir.lock():
      for r in (1, 2, 3, 4):
        run_dir.save_checkpoint(_leaves(r), r)
      # Only the newest 3 are kept.
      self.assertEqual(run_dir._checkpoint_rounds(), [2, 3, 4])  # pylint: disable=protected-access
      newest = os.path.join(path, 'checkpoints', 'round_4.npz')
      with open(newest, 'r+b') as f:
        f.truncate(os.path.getsize(newest) // 2)   # A torn write.
      leaves, round_num = run_dir.load_checkpoint(_leaves(0), warnings.append)
    self.assertEqual(round_num, 3)
    for got, want in zip(leaves, _leaves(3)):
      np.testing.assert_array_equal(got, want)
    self.assertLen(warnings, 1)
    self.assertIn('round_4.npz is unreadable', warnings[0])
    # A checkpoint of another state's shape is skipped too.
    with run_dir.lock():
      leaves, round_num = run_dir.load_checkpoint(
          [np.zeros([5, 2, 1]), np.int64(0), np.zeros([2], np.int64)],
          warnings.append)
    self.assertIsNone(leaves)
    self.assertEqual(round_num, 0)
    # Temporaries of a killed write are removed when the run is reopened.
    leftovers = [os.path.join(path, 'hparams.json.tmp-999'),
                 os.path.join(path, 'checkpoints', 'round_5.npz.tmp-999')]
    for name in leftovers:
      with open(name, 'w') as f:
        f.write('partial')
    with run_dir.lock():
      pass
    for name in leftovers:
      self.assertFalse(os.path.exists(name), name)

  def test_json_written_atomically(self):
    path = os.path.join(tempfile.mkdtemp(), 'x.json')
    run_directory.write_json_atomic(path, {'a': 1})
    run_directory.write_json_atomic(path, {'a': 2})
    with open(path) as f:
      self.assertEqual(json.load(f), {'a': 2})
    self.assertEqual(os.listdir(os.path.dirname(path)), ['x.json'])

  def test_json_is_strict(self):
    path = os.path.join(tempfile.mkdtemp(), 'x.json')
    run_directory.write_json_atomic(path, {
        'loss': float('nan'), 'big': float('inf'), 'n': np.float32(2.5),
        'list': [np.int64(3), float('-inf')]})
    text = open(path).read()
    self.assertNotIn('NaN', text)
    self.assertNotIn('Infinity', text)
    self.assertEqual(strict_json.loads(text), {
        'loss': None, 'big': None, 'n': 2.5, 'list': [3, None]})
    with self.assertRaisesRegex(ValueError, 'not strict JSON'):
      strict_json.loads('{"a": NaN}')

  def test_full_disk_names_the_file_and_leaves_no_temporary(self):
    run = run_directory.RunDirectory(tempfile.mkdtemp())

    def full_disk(f, *arrays):
      del arrays
      f.write(b'x' * 1000)   # Part of the checkpoint got written.
      raise OSError(errno.ENOSPC, 'No space left on device')

    original = run_directory.save_npz
    run_directory.save_npz = full_disk
    try:
      with self.assertRaises(OSError) as caught:
        run.save_checkpoint([np.ones(3)], 7)
    finally:
      run_directory.save_npz = original
    path = os.path.join(run.path, run_directory.CHECKPOINT_DIR,
                        'round_7.npz')
    self.assertEqual(caught.exception.filename, path)
    self.assertEqual(caught.exception.errno, errno.ENOSPC)
    self.assertEqual(os.listdir(os.path.dirname(path)), [])
    self.assertEqual(console.describe_os_error(caught.exception),
                     f'cannot use {path}: No space left on device (free '
                     f'some disk space).')

  def test_identity_differences_name_nested_keys(self):
    previous = dict(lr=0.5, total_rounds=4, provenance=[1],
                    data=dict(database='/a', vocab_sha256='x'))
    current = dict(lr=0.5, total_rounds=9, provenance=[2],
                   data=dict(database='/b', vocab_sha256='x'))
    self.assertEqual(
        run_directory.identity_differences(previous, current,
                                           ('total_rounds',)),
        ["data.database: '/a' -> '/b'"])


if __name__ == '__main__':
  absltest.main()
