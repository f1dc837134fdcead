"""DP-FTRL with adaptive clipping through tree restarts (paper's Algorithm 1).

The quantile estimate C^t of the update norms is tracked every round with its
own tree over the centred clipped counts b_i - 1/2 (b_i = 1[||Delta_i|| <= C^t],
noise std sigma_b on their sum), and becomes the clip norm in force C_theta
only when both trees restart:

    C^{t+1} = C^{r} exp(-eta_gamma (sum_{k=r}^{t} b~^k - (t - r + 1) gamma)),

where r is the first round of the current tree and b~^k the noisy fraction of
unclipped updates of round k; trees restart after round t when
t + 1 = warmup + frequency i (new trees at rounds 128 + 1024 i). The value
noise is z_Delta = (z^-2 - (2 sigma_b)^-2)^-1/2 (Theorem 1), so the run has the
privacy of plain DP-FTRL with noise multiplier z and these restarts.

The query is TensorFlow Privacy's `QAdaClipTreeResSumQuery` inside a
`RestartQuery` and a `NormalizedQuery`, exactly as TFF's
`DifferentiallyPrivateFactory.tree_adaptive` builds it, with one change: the
clipped-count tree gets a seed of its own. TFF forwards its `noise_seed` to the
value tree only; TF Privacy then builds the count tree unseeded, and its
`GaussianNoiseGenerator` seeds itself from `tf.timestamp()` (the start time in
microseconds, held in the state and checkpoints). Anyone who knows roughly
when a run started could find that seed and subtract the count noise. Here
both trees are seeded from the operating system's entropy, or both derived
from `--noise_seed` (`dp_ftrl.derived_noise_seed`).

The result was checked against an independent NumPy simulation of
Algorithm 1 (tests/aggregators/adaptive_clipping_test.py): with noise off its results,
estimates and clips in force equal the simulation's in every round, and with
noise on its value and count noise have the stds above. The paper's box
writes t gamma where the code (and the algebra of a per-round geometric
update) has (t - r + 1) gamma: the box is off by one round. TF Privacy also
clamps the noisy fraction b~ to [0, 1], a post-processing that does not
change the privacy.
"""

from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp
from tensorflow_privacy.privacy.dp_query import quantile_estimator_query
from tensorflow_privacy.privacy.dp_query import tree_aggregation_query

from dpftrl_tff.accounting import adaptive as adaptive_accounting
from dpftrl_tff.aggregators import dp_ftrl

# The stream name the count tree's seed is derived under from --noise_seed.
COUNT_SEED_STREAM = 'adaptive_clipped_count'


class SeededTreeQuantileEstimatorQuery(
    quantile_estimator_query.TreeQuantileEstimatorQuery):
  """TF Privacy's tree quantile estimator with a seeded count tree.

  Identical to `TreeQuantileEstimatorQuery` (the centred clipped counts
  b_i - 1/2 summed by a residual tree with node noise std sigma_b, i.e. l2
  clip 0.5 and noise multiplier 2 sigma_b, normalized by m) except that the
  tree's Gaussian noise generator takes `noise_seed` instead of seeding
  itself from the clock.
  """

  def __init__(self, *args, noise_seed: int, **kwargs):
    self._count_noise_seed = int(noise_seed)
    super().__init__(*args, **kwargs)

  def _construct_below_estimate_query(self, below_estimate_stddev,
                                      expected_num_records):
    sum_query = (
        tree_aggregation_query.TreeResidualSumQuery.build_l2_gaussian_query(
            clip_norm=0.5, noise_multiplier=2 * below_estimate_stddev,
            record_specs=tf.TensorSpec([]),
            noise_seed=self._count_noise_seed))
    return tfp.NormalizedQuery(sum_query, denominator=expected_num_records)


class SeededQAdaClipTreeResSumQuery(tfp.QAdaClipTreeResSumQuery):
  """`QAdaClipTreeResSumQuery` whose count tree is seeded too.

  TF Privacy passes `noise_seed` to the value tree only; this replaces the
  quantile estimator it built (same arguments) by one whose count tree uses
  `count_noise_seed`. tests/aggregators/noise_seed_test.py checks the state holds both
  seeds, so a change inside TF Privacy cannot bring the clock back silently.
  """

  def __init__(self, *, initial_l2_norm_clip, noise_multiplier, record_specs,
               target_unclipped_quantile, learning_rate, clipped_count_stddev,
               expected_num_records, noise_seed: int, count_noise_seed: int):
    super().__init__(
        initial_l2_norm_clip, noise_multiplier, record_specs,
        target_unclipped_quantile, learning_rate, clipped_count_stddev,
        expected_num_records, geometric_update=True, noise_seed=noise_seed)
    self._quantile_estimator_query = SeededTreeQuantileEstimatorQuery(
        initial_l2_norm_clip, target_unclipped_quantile, learning_rate,
        clipped_count_stddev, expected_num_records, True,
        noise_seed=count_noise_seed)


def build_dp_ftrl_adaptive_factory(**kwargs):
  """Algorithm 1 as a TFF aggregation factory (mean over the report goal);
  the arguments are `build_adaptive_query`'s."""
  return tff.aggregators.DifferentiallyPrivateFactory(
      build_adaptive_query(**kwargs))


def build_adaptive_query(*, noise_multiplier: float, clients_per_round: int,
                         record_specs, initial_clip_norm: float = 0.1,
                         target_unclipped_quantile: float = 0.5,
                         clip_learning_rate: float = 0.2,
                         clipped_count_stddev: Optional[float] = None,
                         restart_warmup: int = 128,
                         restart_frequency: int = 1024,
                         noise_seed: Optional[int] = None):
  """Algorithm 1 as a TF Privacy query: the mean over the report goal.

  Args:
    noise_multiplier: z, the equivalent noise multiplier the run is accounted
      with (value noise is the larger z_Delta of Theorem 1; 0 for no noise on
      the values).
    clients_per_round: m, the report goal.
    record_specs: tf.TensorSpec structure of one update.
    initial_clip_norm: C^0.
    target_unclipped_quantile: gamma.
    clip_learning_rate: eta_gamma.
    clipped_count_stddev: sigma_b; default m / 20.
    restart_warmup, restart_frequency: trees restart at rounds
      warmup + frequency i (the clip in force changes only then).
    noise_seed: None (default) for unpredictable noise in both trees from the
      operating system's entropy; an int fixes both (the value tree's seed is
      the int, the count tree's is derived from it; tests only, a warning is
      logged where it entered).
  """
  # Checked where the settings entered
  # (`mechanisms.adaptive.AdaptiveSettings.validate`, run by
  # config.TrainConfig); asserted here.
  dp_ftrl.assert_dp_arguments(noise_multiplier=noise_multiplier,
                              clip_norm=initial_clip_norm,
                              clients_per_round=clients_per_round)
  assert 0 < restart_warmup < restart_frequency, (restart_warmup,
                                                  restart_frequency)
  sigma_b = clipped_count_stddev
  if sigma_b is None:
    sigma_b = adaptive_accounting.default_clipped_count_stddev(
        clients_per_round)
  value_noise = 0.0
  if noise_multiplier > 0:
    value_noise = adaptive_accounting.value_noise_multiplier(
        float(noise_multiplier), float(sigma_b))
  value_seed = dp_ftrl.resolve_noise_seed(noise_seed)
  count_seed = (dp_ftrl.resolve_noise_seed(None) if noise_seed is None else
                dp_ftrl.derived_noise_seed(noise_seed, COUNT_SEED_STREAM))
  query = SeededQAdaClipTreeResSumQuery(
      initial_l2_norm_clip=float(initial_clip_norm),
      noise_multiplier=value_noise, record_specs=record_specs,
      target_unclipped_quantile=float(target_unclipped_quantile),
      learning_rate=float(clip_learning_rate),
      clipped_count_stddev=float(sigma_b),
      expected_num_records=float(clients_per_round),
      noise_seed=value_seed, count_noise_seed=count_seed)
  query = tfp.RestartQuery(
      query, tfp.restart_query.PeriodicRoundRestartIndicator(
          period=int(restart_frequency), warmup=int(restart_warmup)))
  return tfp.NormalizedQuery(query, denominator=float(clients_per_round))
