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

TFF's `DifferentiallyPrivateFactory.tree_adaptive` was checked against an
independent NumPy simulation of Algorithm 1 (tests/adaptive_clipping_test.py):
with noise off its results, estimates and clips in force equal the
simulation's in every round, and with noise on its value and count noise have
the stds above. It is therefore used as is. The paper's box writes t gamma
where the code (and the algebra of a per-round geometric update) has
(t - r + 1) gamma: the box is off by one round. TFF also clamps the noisy
fraction b~ to [0, 1], a post-processing that does not change the privacy.
"""

from typing import Optional

import tensorflow_federated as tff

from dpftrl_tff.accounting import adaptive as adaptive_accounting
from dpftrl_tff.aggregators import dp_ftrl


def build_dp_ftrl_adaptive_factory(*, noise_multiplier: float,
                                   clients_per_round: int, record_specs,
                                   initial_clip_norm: float = 0.1,
                                   target_unclipped_quantile: float = 0.5,
                                   clip_learning_rate: float = 0.2,
                                   clipped_count_stddev: Optional[float] = None,
                                   restart_warmup: int = 128,
                                   restart_frequency: int = 1024,
                                   noise_seed: Optional[int] = None):
  """Algorithm 1 as a TFF aggregation factory (mean over the report goal).

  Args:
    noise_multiplier: z, the equivalent noise multiplier the run is accounted
      with (value noise is the larger z_Delta of Theorem 1).
    clients_per_round: m, the report goal.
    record_specs: tf.TensorSpec structure of one update.
    initial_clip_norm: C^0.
    target_unclipped_quantile: gamma.
    clip_learning_rate: eta_gamma.
    clipped_count_stddev: sigma_b; default m / 20.
    restart_warmup, restart_frequency: trees restart at rounds
      warmup + frequency i (the clip in force changes only then).
    noise_seed: None (default) for unpredictable noise from the operating
      system's entropy; an int fixes it (tests only; a warning is logged).
  """
  # Checked where the settings entered (`registry.check_adaptive_arguments`, run
  # by config.TrainConfig); asserted here.
  dp_ftrl.assert_dp_arguments(noise_multiplier=noise_multiplier,
                              clip_norm=initial_clip_norm,
                              clients_per_round=clients_per_round)
  assert 0 < restart_warmup < restart_frequency, (restart_warmup,
                                                  restart_frequency)
  sigma_b = clipped_count_stddev
  if sigma_b is None:
    sigma_b = adaptive_accounting.default_clipped_count_stddev(
        clients_per_round)
  noise_seed = dp_ftrl.resolve_noise_seed(noise_seed)
  return tff.aggregators.DifferentiallyPrivateFactory.tree_adaptive(
      noise_multiplier=float(noise_multiplier),
      clients_per_round=float(clients_per_round),
      record_specs=record_specs,
      initial_l2_norm_clip=float(initial_clip_norm),
      restart_warmup=int(restart_warmup),
      restart_frequency=int(restart_frequency),
      target_unclipped_quantile=float(target_unclipped_quantile),
      clip_learning_rate=float(clip_learning_rate),
      clipped_count_stddev=float(sigma_b),
      noise_seed=noise_seed)
