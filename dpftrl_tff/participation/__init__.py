"""Who takes part in round t, and the participation it implies.

The paper's privacy comes as much from how clients take part as from noise:
the min separation (MinS: rounds strictly between two participations of a
client, TF Privacy's and the paper's convention) and the max participation
(MaxP) enter the accounting. Participation models are `Sampler`s (one module
each, one `MODELS` line each):

  uniform          every round, report_goal clients uniformly without
                   replacement, independently across rounds (MinS 0 possible).
  min_sep_groups   clients shuffled once into b groups, round r draws from
                   group r mod b: MinS >= b - 1 and MaxP <= ceil(T / b), the
                   tightest schedule a population allows (b = N // m).
  poisson          every client independently with probability
                   q = report_goal / N (DP-FedAvg's Poisson sampling; the
                   cohort's size varies).
  timer            a device-level simulation of the production system: daily
                   availability windows, check-ins, the server filling each
                   round with the first eligible check-ins, a timer that keeps
                   a client out for --timer_hours after it took part.

`ParticipationLog` records who took part when (vectorized, for populations
of millions) and gives the observed MinS, MaxP and participation histogram.
"""

from dpftrl_tff import runtime
from dpftrl_tff.participation.base import round_seed
from dpftrl_tff.participation.base import RoundInfo
from dpftrl_tff.participation.base import Sampler
from dpftrl_tff.participation.log import ParticipationLog
from dpftrl_tff.participation.min_sep_groups import MinSepGroupsSampler
from dpftrl_tff.participation.poisson import PoissonSampler
from dpftrl_tff.participation.timer import format_hours
from dpftrl_tff.participation.timer import SHORTFALL_POLICIES
from dpftrl_tff.participation.timer import TimerSampler
from dpftrl_tff.participation.timer import TimerSettings
from dpftrl_tff.participation.uniform import UniformSampler

MODELS = ('uniform', 'min_sep_groups', 'timer', 'poisson')

from dpftrl_tff.participation.simulation import simulate  # pylint: disable=g-import-not-at-top,wrong-import-position


# Bytes a client that a model's sampler keeps at its peak (its per-client
# arrays, NumPy's temporaries included), and `ParticipationLog`'s (an int32
# count and an int64 last round).
_SAMPLER_BYTES_PER_CLIENT = {'uniform': 0, 'min_sep_groups': 16,
                             'poisson': 9, 'timer': 56}
_LOG_BYTES_PER_CLIENT = 12


def check_memory(model: str, num_clients: int):
  """Refuses, naming --population, a population whose participation
  simulation cannot fit this machine's memory (a MemoryError traceback from
  NumPy otherwise)."""
  per_client = _SAMPLER_BYTES_PER_CLIENT.get(model, 0) + _LOG_BYTES_PER_CLIENT
  total = runtime.physical_memory_bytes()
  if total is not None and num_clients * per_client > total:
    raise ValueError(
        f'--population={num_clients}: simulating the participation of '
        f'{num_clients:,} clients ({model}) keeps about {per_client} bytes '
        f'a client, {num_clients * per_client / 2**30:,.0f} GiB; this '
        f'machine has {total / 2**30:.0f} GiB. Give a smaller population.')


def build_sampler(model: str, *, num_clients: int, report_goal: int,
                  seed: int, min_sep_groups=None,
                  timer: TimerSettings = None) -> Sampler:
  """The sampler of participation model `model` (see the module docstring);
  ValueError if simulating it for `num_clients` cannot fit in memory."""
  check_memory(model, num_clients)
  if model == 'uniform':
    return UniformSampler(num_clients, report_goal, seed)
  if model == 'min_sep_groups':
    return MinSepGroupsSampler(num_clients, report_goal, seed,
                               num_groups=min_sep_groups)
  if model == 'timer':
    return TimerSampler(num_clients, report_goal, seed,
                        timer or TimerSettings())
  if model == 'poisson':
    return PoissonSampler(num_clients, report_goal, seed)
  raise ValueError(f'--participation={model!r} is unknown; allowed: '
                   f'{", ".join(MODELS)}.')
