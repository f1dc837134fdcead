"""DP-FTRL with a fixed clip norm: the paper's update, as a TFF factory.

Each round the clients' updates Delta_i are clipped to l2 norm C and summed;
tree aggregation (Kairouz et al. 2021) adds to the running sum noise whose
every tree node has std z C, and the server receives the per-round residual
of the noisy prefix sums divided by the report goal m:

    Delta~^t = (1/m) [PrivateSum(sum_{k<=t} sum_i Delta_i^k)
                      - PrivateSum(sum_{k<t} sum_i Delta_i^k)].

Server SGD with momentum beta on Delta~^t is then exactly the paper's
theta^{t+1} = theta^0 + eta_s * sum of momentum-filtered noisy prefix sums
(Algorithm 1 without the adaptive parts). The query is TensorFlow
Privacy's TreeResidualSumQuery normalized by m, exactly as TFF's
`DifferentiallyPrivateFactory.tree_aggregation` builds it; the tests check
its noise std and normalization against the formula. With a plain sum the
clip is folded into the summation (`fused_clip.FusedClipDPFactory`, equal to
TFF's factory round by round, one call per client instead of two and no m
clipped copies held at once); with another record aggregation (SecAgg) each
client clips on its device, through TFF's factory.
"""

import hashlib
import math
import secrets
from typing import Optional

import tensorflow_federated as tff
import tensorflow_privacy as tfp

from dpftrl_tff.aggregators import fused_clip

def assert_dp_arguments(*, noise_multiplier, clip_norm, clients_per_round):
  """Asserts what `checks.check_dp_arguments` checked where the settings
  entered (`config.TrainConfig`, the binaries): the factories below do not
  check again."""
  assert math.isfinite(noise_multiplier) and noise_multiplier >= 0, (
      noise_multiplier)
  assert math.isfinite(clip_norm) and clip_norm > 0, clip_norm
  assert int(clients_per_round) == clients_per_round >= 1, clients_per_round


def resolve_noise_seed(noise_seed: Optional[int]) -> int:
  """The seed to build DP noise with: unpredictable unless one is given.

  Unset (None), the seed is 62 bits from the operating system's entropy
  (`secrets`); TensorFlow Privacy's own default is the start time in
  microseconds, which an observer of the run could guess. The seed becomes
  part of the aggregator state, so checkpoints carry it and a resumed run
  continues the same noise sequence; it is never written elsewhere. A given
  seed makes the noise predictable (no privacy): it was checked, and the
  user warned once, where it entered (`--noise_seed`, the binaries).
  """
  if noise_seed is None:
    return secrets.randbits(62)
  assert isinstance(noise_seed, int) and noise_seed >= 0, noise_seed
  return noise_seed


def derived_noise_seed(noise_seed: int, stream: str) -> int:
  """A second fixed seed derived from a given `--noise_seed` for `stream`.

  For a mechanism with more than one noise generator (adaptive clipping's
  count tree beside its value tree): 62 bits of SHA-256 of the stream name
  and the seed, so that a fixed --noise_seed fixes all of a run's noise while
  no two generators share a seed (shared seeds would correlate their noise).
  Without --noise_seed every generator draws its own seed from the operating
  system (`resolve_noise_seed(None)`) instead.
  """
  assert isinstance(noise_seed, int) and noise_seed >= 0, noise_seed
  digest = hashlib.sha256(f'{stream}:{noise_seed}'.encode()).digest()
  return int.from_bytes(digest[:8], 'big') >> 2


def build_dp_ftrl_factory(*, noise_multiplier: float, clients_per_round: int,
                          clip_norm: float, record_specs,
                          noise_seed: Optional[int] = None,
                          record_aggregation_factory=None):
  """Tree-aggregation DP-FTRL factory normalized by the report goal.

  Args:
    noise_multiplier: z >= 0; node noise std is z * clip_norm.
    clients_per_round: m, the report goal; the noisy sum is divided by m.
    clip_norm: C > 0, the l2 clip of every client update.
    record_specs: tf.TensorSpec structure of one update.
    noise_seed: None (default) draws an unpredictable seed from the
      operating system (`resolve_noise_seed`); an int fixes the noise (for
      tests and debugging only; a warning is logged).
    record_aggregation_factory: inner sum factory for the clipped records
      (e.g. a SecAgg discretization factory); default plain sum.
  """
  assert_dp_arguments(noise_multiplier=noise_multiplier, clip_norm=clip_norm,
                      clients_per_round=clients_per_round)
  noise_seed = resolve_noise_seed(noise_seed)
  if record_aggregation_factory is not None:
    return tff.aggregators.DifferentiallyPrivateFactory.tree_aggregation(
        noise_multiplier=float(noise_multiplier),
        clients_per_round=float(clients_per_round),
        l2_norm_clip=float(clip_norm),
        record_specs=record_specs,
        noise_seed=noise_seed,
        use_efficient=True,
        record_aggregation_factory=record_aggregation_factory)
  # The same query as TFF's tree_aggregation builds, clip fused into the sum.
  sum_query = tfp.TreeResidualSumQuery.build_l2_gaussian_query(
      float(clip_norm), float(noise_multiplier), record_specs,
      noise_seed=noise_seed, use_efficient=True)
  return fused_clip.FusedClipDPFactory(
      tfp.NormalizedQuery(sum_query, denominator=float(clients_per_round)))
