"""Strict JSON (RFC 8259) for every file and --json output the project writes.

Python's `json` writes `NaN`, `Infinity` and `-Infinity` for non-finite
floats, which no strict parser accepts. Here a non-finite number becomes
`null` (the value is absent, never a made-up number), NumPy scalars and
arrays become plain numbers and lists, and the encoder is called with
`allow_nan=False`, so anything that slips through raises instead of writing
an invalid file.
"""

import json
import math
import os
from typing import Any

import numpy as np


def sanitize(value: Any) -> Any:
  """`value` with non-finite floats as None and NumPy values as Python's."""
  if isinstance(value, dict):
    return {str(k): sanitize(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [sanitize(v) for v in value]
  if isinstance(value, np.ndarray):
    return sanitize(value.tolist())
  if isinstance(value, (bool, np.bool_)):
    return bool(value)
  if isinstance(value, (int, np.integer)):
    return int(value)
  if isinstance(value, (float, np.floating)):
    value = float(value)
    return value if math.isfinite(value) else None
  return value


def dumps(value: Any, **kwargs) -> str:
  """Strict JSON text of `value` (see `sanitize`)."""
  return json.dumps(sanitize(value), allow_nan=False, **kwargs)


def write(path: str, value: Any, *, indent: int = 2):
  """Writes strict JSON to a temporary file, fsyncs it, renames it."""
  text = dumps(value, indent=indent, sort_keys=True)
  tmp = f'{path}.tmp-{os.getpid()}'
  try:
    with open(tmp, 'w', encoding='utf-8') as f:
      f.write(text)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except OSError as e:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise OSError(e.errno, e.strerror or str(e), path) from None
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def _refuse_constant(name: str):
  raise ValueError(f'not strict JSON: {name}')


def loads(text: str) -> Any:
  """Parses strict JSON: NaN and Infinity tokens are refused."""
  return json.loads(text, parse_constant=_refuse_constant)


def load_file(f) -> Any:
  """Parses strict JSON from an open text file."""
  return loads(f.read())


def load(path: str) -> Any:
  with open(path, encoding='utf-8') as f:
    return load_file(f)
