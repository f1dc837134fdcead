"""A run's directory: identity, lock, hparams, metrics, checkpoints, summary.

One training run owns one directory:

  hparams.json      the run's identity (every hyperparameter and the data it
                    trains on) and its provenance (command lines, package
                    versions, the project's commit), written once the run
                    has started; a directory without it is not claimed.
  metrics.csv       one row per round (columns: docs/metrics.md);
  tensorboard/      the same scalars, one event per round and tag;
  checkpoints/      round_<t>.npz: the full TFF server state after round t;
  final_weights.npz the final model's trainable weights;
  summary.json      the final evaluation and the privacy spent;
  metrics.png       loss and accuracy against rounds.

Every file is written to a temporary name and renamed, so a kill leaves the
previous version, never a torn one; temporaries a kill left behind are
removed when the directory is next opened. `lock()` takes an exclusive
`flock` on the directory, so a second process on the same run is refused
instead of interleaving its rows with the first's.
"""

import contextlib
import csv
import errno
import fcntl
import json
import math
import os
import re
import shutil
import zipfile
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from dpftrl_tff import strict_json

HPARAMS_FILE = 'hparams.json'
METRICS_FILE = 'metrics.csv'
SUMMARY_FILE = 'summary.json'
FINAL_WEIGHTS_FILE = 'final_weights.npz'
METRICS_PLOT_FILE = 'metrics.png'
CHECKPOINT_DIR = 'checkpoints'
TENSORBOARD_DIR = 'tensorboard'
LOCK_FILE = '.lock'
_TMP_MARK = '.tmp-'
_CHECKPOINT_RE = re.compile(r'^round_(\d+)\.npz$')
# Settings outside the identity: where provenance goes.
PROVENANCE_KEY = 'provenance'


class RunDirectoryError(ValueError):
  """The directory cannot be used for this run (the message says why)."""


class ReadOnlyRunDirectory(RunDirectoryError):
  """The run directory exists but cannot be written (read-only media or
  permissions): a finished run there can still be reported."""


def _tmp_path(path: str) -> str:
  return f'{path}{_TMP_MARK}{os.getpid()}'


def write_json_atomic(path: str, value: Any):
  """Writes strict JSON (non-finite numbers as null) to a temporary file,
  fsyncs it, renames it over `path`; a failed write leaves no temporary."""
  strict_json.write(path, value)


@contextlib.contextmanager
def _atomic(path: str, mode: str = 'w', sync: bool = True):
  """A file at a temporary name, renamed over `path` when the block ends.

  A failed write (a full disk) removes the temporary, so nothing is left
  filling the disk, and raises an OSError that names `path`.
  """
  tmp = _tmp_path(path)
  try:
    kwargs = {} if 'b' in mode else dict(encoding='utf-8', newline='')
    with open(tmp, mode, **kwargs) as f:
      yield f
      f.flush()
      if sync:
        os.fsync(f.fileno())
    os.replace(tmp, path)
  except OSError as e:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    raise OSError(e.errno, e.strerror or str(e), path) from None
  except BaseException:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    raise


def save_npz(f, arrays: Sequence[Any]):
  """`np.savez(f, *arrays)` (the same file: arr_0, arr_1, ...; read with
  np.load) whose zip file is closed even when a write fails.

  np.savez leaves its ZipFile open when a write raises (a full disk); the
  garbage collector's ZipFile.__del__ then tries to finish the file and
  prints a traceback after the run's one-line error.
  """
  with zipfile.ZipFile(f, mode='w', compression=zipfile.ZIP_STORED,
                       allowZip64=True) as archive:
    for i, array in enumerate(arrays):
      with archive.open(f'arr_{i}.npy', 'w', force_zip64=True) as member:
        np.lib.format.write_array(member, np.asanyarray(array),
                                  allow_pickle=False)


def write_text_atomic(path: str, text: str):
  """Writes `text` (UTF-8) atomically: a temporary file renamed over it."""
  with _atomic(path, sync=False) as f:
    f.write(text)


def write_csv_atomic(path: str, rows: Sequence[Dict[str, Any]]):
  """Writes dict rows to a CSV atomically.

  Columns: every key in order of first appearance (rows may differ: a key
  missing from a row is an empty cell).
  """
  fields = list(dict.fromkeys(k for row in rows for k in row))
  with _atomic(path, sync=False) as f:
    writer = csv.DictWriter(f, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)


def _read_json(path: str) -> Optional[Dict[str, Any]]:
  if not os.path.isfile(path):
    return None
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise RunDirectoryError(f'{path} is unreadable ({e}); move the run '
                            f'directory aside or choose another '
                            f'--experiment_name.') from None


def identity_differences(previous: Dict[str, Any], current: Dict[str, Any],
                         resumable: Sequence[str]) -> List[str]:
  """'key: old -> new' for every identity setting that differs."""
  keys = sorted((set(previous) | set(current)) - set(resumable) -
                {PROVENANCE_KEY})
  out = []
  for k in keys:
    old, new = previous.get(k), current.get(k)
    if isinstance(old, dict) and isinstance(new, dict):
      out += [f'{k}.{d}' for d in identity_differences(old, new, ())]
    elif old != new:
      out.append(f'{k}: {old!r} -> {new!r}')
  return out


class RunDirectory:
  """The files of one run (see the module docstring)."""

  def __init__(self, path: str):
    self.path = path

  def file(self, name: str) -> str:
    return os.path.join(self.path, name)

  # ---- Lock.

  @contextlib.contextmanager
  def lock(self):
    """Holds an exclusive lock on the directory (creating it if needed)."""
    try:
      os.makedirs(self.path, exist_ok=True)
      handle = open(self.file(LOCK_FILE), 'a+', encoding='utf-8')
    except OSError as e:
      if os.path.isdir(self.path) and e.errno in (errno.EROFS, errno.EACCES,
                                                   errno.EPERM):
        raise ReadOnlyRunDirectory(
            f'{self.path} cannot be written ({e.strerror or e}): a run there '
            f'cannot start or resume; copy it to writable storage, or '
            f'choose another --root_output_dir.') from None
      raise RunDirectoryError(
          f'Cannot create the run directory {self.path}: '
          f'{e.strerror or e}.') from None
    try:
      fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      handle.seek(0)
      holder = handle.read().strip() or 'another process'
      handle.close()
      if e.errno in (errno.EAGAIN, errno.EACCES):
        raise RunDirectoryError(
            f'{self.path} is in use by {holder}: two processes cannot run '
            f'one run directory. Wait for it, or choose another '
            f'--experiment_name.') from None
      raise
    handle.seek(0)
    handle.truncate()
    handle.write(f'pid {os.getpid()}\n')
    handle.flush()
    try:
      self._remove_temporaries()
      yield self
    finally:
      fcntl.flock(handle, fcntl.LOCK_UN)
      handle.close()

  def _remove_temporaries(self):
    """Deletes temporary files a killed process left (never real ones)."""
    for folder in (self.path, self.file(CHECKPOINT_DIR)):
      if not os.path.isdir(folder):
        continue
      for name in os.listdir(folder):
        if _TMP_MARK in name:
          target = os.path.join(folder, name)
          if os.path.isdir(target):
            shutil.rmtree(target, ignore_errors=True)
          else:
            os.remove(target)

  # ---- Identity.

  def previous_hparams(self) -> Optional[Dict[str, Any]]:
    """The hparams of the run this directory holds; None if unclaimed.

    Raises RunDirectoryError for a directory that holds something else.
    """
    hparams = _read_json(self.file(HPARAMS_FILE))
    if hparams is not None:
      return hparams
    others = [n for n in (os.listdir(self.path)
                          if os.path.isdir(self.path) else [])
              if n != LOCK_FILE and _TMP_MARK not in n]
    if others:
      raise RunDirectoryError(
          f'Output directory {self.path} exists and is not a dpftrl_tff run '
          f'(it has {", ".join(sorted(others)[:3])} but no {HPARAMS_FILE}); '
          f'choose another --experiment_name or --root_output_dir.')
    return None

  def claim(self, hparams: Dict[str, Any]):
    """Writes hparams.json: from now on the directory holds this run."""
    write_json_atomic(self.file(HPARAMS_FILE), hparams)

  # ---- Checkpoints.

  def _checkpoint_rounds(self) -> List[int]:
    folder = self.file(CHECKPOINT_DIR)
    if not os.path.isdir(folder):
      return []
    rounds = []
    for name in os.listdir(folder):
      match = _CHECKPOINT_RE.match(name)
      if match:
        rounds.append(int(match.group(1)))
    return sorted(rounds)

  def latest_checkpoint_round(self) -> int:
    rounds = self._checkpoint_rounds()
    return rounds[-1] if rounds else 0

  def save_checkpoint(self, leaves: Sequence[Any], round_num: int,
                      keep: int = 3):
    """Saves the flattened state after `round_num`; keeps the newest `keep`."""
    folder = self.file(CHECKPOINT_DIR)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f'round_{round_num}.npz')
    with _atomic(path, 'wb') as f:
      save_npz(f, leaves)
    for old in self._checkpoint_rounds()[:-keep]:
      os.remove(os.path.join(folder, f'round_{old}.npz'))

  def load_checkpoint(self, template: Sequence[Any],
                      warn: Callable[[str], None]
                     ) -> Tuple[Optional[List[np.ndarray]], int]:
    """(leaves, round) of the newest readable checkpoint matching `template`.

    A checkpoint that cannot be read or whose arrays do not match the
    template's number, ranks and dtypes (truncated by a kill, corrupted) is
    reported through `warn` and skipped for the next older one. (Sizes are
    not compared: DP-FTRL's tree state grows with the round.) (None, 0)
    when there is none.
    """
    expected = [(np.ndim(x), np.asarray(x).dtype) for x in template]
    for round_num in reversed(self._checkpoint_rounds()):
      path = os.path.join(self.file(CHECKPOINT_DIR),
                          f'round_{round_num}.npz')
      try:
        with np.load(path, allow_pickle=False) as f:
          leaves = [f[f'arr_{i}'] for i in range(len(f.files))]
        got = [(x.ndim, x.dtype) for x in leaves]
        if got != expected:
          raise ValueError('its arrays do not match this run\'s state')
      except Exception as e:  # pylint: disable=broad-except
        warn(f'Checkpoint {path} is unreadable ({type(e).__name__}: {e}); '
             f'falling back to an older one.')
        continue
      return leaves, round_num
    return None, 0

  # ---- Summary and weights.

  def read_summary(self) -> Optional[Dict[str, Any]]:
    return _read_json(self.file(SUMMARY_FILE))

  def write_summary(self, summary: Dict[str, Any]):
    write_json_atomic(self.file(SUMMARY_FILE), summary)

  def write_final_weights(self, weights: Sequence[Any]):
    with _atomic(self.file(FINAL_WEIGHTS_FILE), 'wb', sync=False) as f:
      save_npz(f, weights)


class MetricsWriter:
  """One row per round to metrics.csv, TensorBoard and metrics.png.

  On resume the rows after the resumed round are dropped, and the
  TensorBoard events are rewritten from the kept rows, so every (tag, round)
  has exactly one event (TensorBoard would otherwise show two values for
  the rounds run again).
  """

  def __init__(self, run_dir: RunDirectory, resume_round: int):
    # TensorFlow (TensorBoard) and matplotlib only when a run writes them.
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    self._tf = tf
    self.path = run_dir.file(METRICS_FILE)
    self.plot_path = run_dir.file(METRICS_PLOT_FILE)
    self.rows: List[Dict[str, Any]] = []
    if os.path.exists(self.path):
      with open(self.path, newline='', encoding='utf-8') as f:
        self.rows = [_parse_row(r) for r in csv.DictReader(f)
                     if int(r['round']) <= resume_round]
    tb_dir = run_dir.file(TENSORBOARD_DIR)
    if os.path.isdir(tb_dir):
      shutil.rmtree(tb_dir)
    self.tb = tf.summary.create_file_writer(tb_dir)
    for row in self.rows:
      self._write_tb(row)
    self.tb.flush()

  def _write_tb(self, row):
    with self.tb.as_default(step=int(row['round'])):
      for k, v in row.items():
        if k != 'round' and isinstance(v, (int, float)) and math.isfinite(v):
          self._tf.summary.scalar(k, v)

  def write(self, row: Dict[str, Any]):
    self.rows.append(row)
    fields = []
    for r in self.rows:
      for k in r:
        if k not in fields:
          fields.append(k)
    with _atomic(self.path, sync=False) as f:
      writer = csv.DictWriter(f, fieldnames=fields, restval='')
      writer.writeheader()
      writer.writerows(self.rows)
    self._write_tb(row)
    self.tb.flush()

  def plot(self):
    """metrics.png: train and eval loss and accuracy against rounds."""
    # TensorFlow (TensorBoard) and matplotlib only when a run writes them.
    from dpftrl_tff import plotting  # pylint: disable=g-import-not-at-top
    plotting.training_curves(self.plot_path, self.rows)


def read_metric(run_path: str, key: str = 'eval_in_vocab_accuracy'
               ) -> Tuple[List[int], List[float]]:
  """(rounds, values) of one metrics.csv column, at the rounds it has one."""
  with open(os.path.join(run_path, METRICS_FILE), newline='',
            encoding='utf-8') as f:
    rows = [r for r in csv.DictReader(f) if r.get(key)]
  return [int(r['round']) for r in rows], [float(r[key]) for r in rows]


_INTEGER = re.compile(r'-?[0-9]+')


def _parse_row(row: Dict[str, str]) -> Dict[str, Any]:
  """A metrics.csv row read back as it was written: integers as int (a
  resumed run rewrites them as '4', not '4.0'), other numbers as float
  (float32 values were written in their shortest form, which a float
  prints the same), anything else as text."""
  out = {}
  for k, v in row.items():
    if v == '' or v is None:
      continue
    try:
      out[k] = int(v) if _INTEGER.fullmatch(v) else float(v)
    except ValueError:
      out[k] = v
  return out
