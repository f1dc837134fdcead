"""NumPy reference of Algorithm 2's client encoding and server decoding.

Independent of the TFF factory (plain loops, explicit randomness passed in),
used by the tests to check the factory step by step.
"""

import math

import numpy as np


def hadamard_transform(x: np.ndarray) -> np.ndarray:
  """Unnormalized Walsh-Hadamard transform (Sylvester order), in float64."""
  y = np.array(x, dtype=np.float64)
  d = y.shape[0]
  h = 1
  while h < d:
    for start in range(0, d, 2 * h):
      a = y[start:start + h].copy()
      b = y[start + h:start + 2 * h].copy()
      y[start:start + h] = a + b
      y[start + h:start + 2 * h] = a - b
    h *= 2
  return y


def encode(x, *, clip_norm, scale, signs, linf_bound, norm_bound_squared,
           rng, max_retries=1000):
  """Returns (shifted integer vector in [0, 2 C_inf], retries)."""
  x = np.asarray(x, np.float64)
  d_pad = signs.shape[0]
  norm = np.linalg.norm(x)
  x = x * min(1.0, clip_norm / norm if norm > 0 else 1.0) * scale
  x = np.concatenate([x, np.zeros(d_pad - x.shape[0])])
  x = hadamard_transform(signs * x) / math.sqrt(d_pad)
  top = np.max(np.abs(x))
  if top > linf_bound:
    x = x * (linf_bound / top)
  floor = np.floor(x)
  for retries in range(max_retries + 1):
    rounded = floor + (rng.random(d_pad) < x - floor)
    if np.sum(rounded**2) <= norm_bound_squared:
      return (rounded + linf_bound).astype(np.int64), retries
  return np.full(d_pad, linf_bound, np.int64), max_retries


def decode(modular_sum, num_clients, *, scale, signs, linf_bound, dim):
  """Unshift by n C_inf, unscale, unrotate, unpad."""
  total = np.asarray(modular_sum, np.float64) - num_clients * linf_bound
  y = total / scale
  d_pad = signs.shape[0]
  return (signs * hadamard_transform(y) / math.sqrt(d_pad))[:dim]
