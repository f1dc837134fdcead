"""Up-front argument validation with precise, user-facing error messages.

Every public builder and accountant in dpftrl_tff validates its arguments here
before doing any work, so that bad input fails with a `ValueError` that names
the argument (or flag), the value given and what is allowed, instead of a
traceback from deep inside TensorFlow or a silently wrong privacy number.
"""

import math
import numbers
from typing import Any, Sequence


def _describe(value: Any) -> str:
  return repr(value)


def check_int(value: Any, name: str, *, minimum: int | None = None,
              maximum: int | None = None) -> int:
  """Returns `value` as an int, or raises ValueError naming `name`.

  Booleans and non-integral floats are refused (2.0 is accepted as 2).
  """
  if isinstance(value, bool) or not isinstance(
      value, (numbers.Integral, numbers.Real)):
    raise ValueError(f'{name} must be an integer, got {_describe(value)}.')
  if isinstance(value, numbers.Real) and not isinstance(value,
                                                        numbers.Integral):
    if not math.isfinite(value) or value != int(value):
      raise ValueError(f'{name} must be an integer, got {_describe(value)}.')
  value = int(value)
  if minimum is not None and value < minimum:
    raise ValueError(f'{name} must be an integer >= {minimum}, got {value}.')
  if maximum is not None and value > maximum:
    raise ValueError(f'{name} must be an integer <= {maximum}, got {value}.')
  return value


def check_int_list(values: Sequence[Any], name: str, *,
                   minimum: int | None = None) -> list[int]:
  """A list flag (absl's DEFINE_list gives strings) as ints >= `minimum`;
  raises ValueError naming `name` when it is empty or a value is not such
  an int."""
  out = []
  for value in values:
    try:
      number = check_int(int(value) if isinstance(value, str) else value,
                         name, minimum=minimum)
    except ValueError:
      allowed = '' if minimum is None else f' >= {minimum}'
      raise ValueError(f'{name} must be integers{allowed}, got '
                       f'{value!r}.') from None
    out.append(number)
  if not out:
    raise ValueError(f'{name} must not be empty.')
  return out


def check_positive_list(values: Sequence[Any], name: str) -> list[float]:
  """A list flag as finite floats > 0; raises ValueError naming `name` when
  it is empty or a value is not such a number."""
  out = []
  for value in values:
    try:
      number = float(value)
    except (TypeError, ValueError):
      number = math.nan
    if not 0 < number < math.inf:
      raise ValueError(f'{name} must be numbers > 0, got {value!r}.')
    out.append(number)
  if not out:
    raise ValueError(f'{name} must not be empty.')
  return out


def check_float(value: Any, name: str, *, minimum: float | None = None,
                maximum: float | None = None, strict_minimum: bool = False,
                strict_maximum: bool = False) -> float:
  """Returns `value` as a finite float, or raises ValueError naming `name`."""
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise ValueError(f'{name} must be a finite number, got {_describe(value)}.')
  value = float(value)
  if not math.isfinite(value):
    raise ValueError(f'{name} must be a finite number, got {value}.')
  if minimum is not None:
    if strict_minimum and value <= minimum:
      raise ValueError(f'{name} must be > {minimum}, got {value}.')
    if not strict_minimum and value < minimum:
      raise ValueError(f'{name} must be >= {minimum}, got {value}.')
  if maximum is not None:
    if strict_maximum and value >= maximum:
      raise ValueError(f'{name} must be < {maximum}, got {value}.')
    if not strict_maximum and value > maximum:
      raise ValueError(f'{name} must be <= {maximum}, got {value}.')
  return value


def check_positive(value: Any, name: str) -> float:
  return check_float(value, name, minimum=0.0, strict_minimum=True)


def check_nonnegative(value: Any, name: str) -> float:
  return check_float(value, name, minimum=0.0)


def check_probability(value: Any, name: str) -> float:
  """A number strictly between 0 and 1."""
  return check_float(value, name, minimum=0.0, maximum=1.0,
                     strict_minimum=True, strict_maximum=True)


def check_name(value: Any, name: str) -> str:
  """A directory name of one path component (no '/', not '.' or '..')."""
  if (not isinstance(value, str) or not value.strip() or '/' in value or
      '\\' in value or value in ('.', '..') or '\0' in value):
    raise ValueError(f'{name}={value!r}: must be one directory name (no '
                     f'"/", not "." or ".."), so the run stays inside '
                     f'--root_output_dir.')
  return value


# z at most: far above any useful noise (the planner's largest launches
# need thousands), and the accounting squares z, which overflows a float
# near 1e154.
MAX_NOISE_MULTIPLIER = 1e12
# A positive z at least: below it z squared (the accounting divides by it)
# is no longer a normal float (about 1e-154 and below it underflows to 0),
# and no DP noise is that small.
MIN_NOISE_MULTIPLIER = 1e-12


def check_noise_multiplier(value: Any, *, positive: bool = False,
                           what: str = '') -> float:
  """The one check of --noise_multiplier z (every binary and mechanism).

  z >= 0 in training (0: no noise, said at the start); z > 0 where privacy
  is computed (`positive`); a positive z in [MIN_NOISE_MULTIPLIER,
  MAX_NOISE_MULTIPLIER]. `what` says what the noise is for, in binaries
  whose z is one of several (e.g. "the DP runs' noise").
  """
  bound = '> 0' if positive else '>= 0'
  if (value is None or isinstance(value, bool) or
      not isinstance(value, (int, float)) or not math.isfinite(value) or
      value < 0 or (positive and value == 0) or
      0 < value < MIN_NOISE_MULTIPLIER or value > MAX_NOISE_MULTIPLIER):
    raise ValueError(f'--noise_multiplier must be {bound} and <= '
                     f'{MAX_NOISE_MULTIPLIER:g}'
                     f'{f" ({what})" if what else ""}, a finite number, '
                     f'{"" if positive else "0 or "}at least '
                     f'{MIN_NOISE_MULTIPLIER:g}; got {value}.')
  return float(value)


def check_dp_arguments(*, noise_multiplier, clip_norm, clients_per_round):
  """Checks DP-FTRL's arguments; names the flags in the errors (pure
  Python: the accountant validates a configuration without TensorFlow)."""
  check_noise_multiplier(noise_multiplier)
  if clip_norm is None or not isinstance(
      clip_norm, (int, float)) or not math.isfinite(clip_norm) or (
          clip_norm <= 0):
    raise ValueError(f'--clip_norm must be a finite number > 0, got '
                     f'{clip_norm}.')
  check_int(clients_per_round, '--clients_per_round', minimum=1)
