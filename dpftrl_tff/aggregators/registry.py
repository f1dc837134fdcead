"""The model-update mechanisms a run can use, by name.

Each mechanism is one module of `aggregators.mechanisms` defining a
`Mechanism` (`mechanisms.base`): how to validate its settings, build its TFF
aggregation factory, account its privacy, describe its clipping, and what it
resolves when a run starts, and its noise in words
(`base.NoiseDescription`). Training, the binaries, the accountant, the
planner and the reports look mechanisms up here; nothing outside the
mechanism modules branches on the aggregator's name. A new mechanism is one
module plus one line in `_MODULES`.

The mechanisms' modules import TensorFlow and TFF only inside the functions
that build a factory: the accountant, the launch planner and the flag
definitions use this registry without loading TensorFlow.
"""

from typing import Dict, Tuple

from dpftrl_tff.aggregators.mechanisms import adaptive
from dpftrl_tff.aggregators.mechanisms import bandmf
from dpftrl_tff.aggregators.mechanisms import base
from dpftrl_tff.aggregators.mechanisms import blt
from dpftrl_tff.aggregators.mechanisms import dp_fedavg
from dpftrl_tff.aggregators.mechanisms import dp_ftrl
from dpftrl_tff.aggregators.mechanisms import none

# In the order --help lists them.
_MODULES = (none, dp_ftrl, adaptive, blt, bandmf, dp_fedavg)
_MECHANISMS: Dict[str, base.Mechanism] = {m.MECHANISM.name: m.MECHANISM
                                     for m in _MODULES}


def names() -> Tuple[str, ...]:
  return tuple(_MECHANISMS)


def get(name: str) -> base.Mechanism:
  """The mechanism called `name`, or a ValueError listing the allowed ones."""
  if name not in _MECHANISMS:
    raise ValueError(f'--aggregator={name!r} is unknown; allowed: '
                     f'{", ".join(_MECHANISMS)}.')
  return _MECHANISMS[name]


def accounted() -> Tuple[str, ...]:
  """The mechanisms with DP noise to account, in order."""
  return tuple(n for n, m in _MECHANISMS.items() if m.accounted_noise)


def owner_of_noise(noise: str) -> base.Mechanism:
  """The first mechanism (in `names()` order) that accounts `noise` ('tree',
  'blt', 'bandmf', 'poisson_gaussian'), or a ValueError listing them."""
  for mechanism in _MECHANISMS.values():
    if mechanism.accounted_noise == noise:
      return mechanism
  known = sorted({_MECHANISMS[n].accounted_noise for n in accounted()})
  raise ValueError(f'no mechanism accounts the noise {noise!r}; known: '
                   f'{", ".join(known)}.')


def noise_description(privacy) -> base.NoiseDescription:
  """The words for the noise an accounted privacy dict covers (its
  'mechanism' field: the accounted noise, 'tree' when absent), from the
  mechanism that owns that noise."""
  return owner_of_noise(privacy.get('mechanism', 'tree')).noise


# The BLT a dp_ftrl_blt config resolves to (the accountant's and the tests').
optimized_blt = blt.optimized_blt
