"""SecAgg-style discretization of client updates (paper's Algorithm 2).

A TFF `UnweightedAggregationFactory` that sums client updates through a
modular integer sum (SecAgg), usable as the record aggregation inside DP-FTRL.
Each client, in this order (d = number of parameters, padded to d' = 2^k):

  1. l2-clip to C and scale by s:       x <- s x min(1, C / ||x||)
  2. rotate with the round's shared signs xi and the normalized Hadamard
     matrix:                             x <- (1/sqrt(d')) H_{d'} D_xi x
  3. clip to l_inf C_inf = ceil(2 s C log(d') / sqrt(d')):
                                         x <- x min(1, C_inf / ||x||_inf)
  4. conditional stochastic rounding: round every coordinate up with
     probability equal to its fractional part, retrying until
     ||x~||^2 <= s^2 C^2 + d'/4 + sqrt(2 log(1/alpha)) (s C + sqrt(d')/2)
     (after `max_rounding_retries` failures the client sends zeros, which
     meets the bound; counted in `rounding_failures`);
  5. shift into {0..2 C_inf} and reduce mod M = 2 C_inf m + 1 (the identity
     on {0..2 C_inf}, so no operation is spent on it).

The modular sum is taken by `inner_agg_factory` (default
`tff.aggregators.SecureModularSumFactory(M)`, run as a plain sum mod M by
TFF's test execution context in simulation). The server then decodes.

Unshift, derived (the paper's box abbreviates it as Delta_t - C_inf): client
i sends u_i = x~_i + C_inf 1 with every coordinate in [0, 2 C_inf]. With
n <= m clients, sum_i u_i has coordinates in [0, 2 C_inf n] within
[0, M - 1], so the modular sum S equals the integer sum and

    sum_i x~_i = S - n C_inf 1      (n C_inf, not C_inf),

then unscale by 1/s and unrotate, D_xi H_{d'}^T / sqrt(d') (H is symmetric),
and drop the padding. More than m clients could wrap around; the server
checks n <= m and fails the round with an error naming report_goal. It also
checks sum_i top_i < M, where each client reports top_i >= max_j u_ij
(ceil(min(||x_i||_inf, C_inf)) + C_inf, known from step 3 at no cost); the
sum bounds every coordinate's integer sum, so a completed round provably has
no wrap-around without a second full-size aggregation to count them.

The signs xi are drawn once per round from the round's seed (on the server)
and broadcast with it.

The l2 norm of every client's contribution to the decoded sum is at most
C_inflated (accounting/secagg.py); DP-FTRL must calibrate its noise to it
(`noise_multiplier_for_secagg`).

Modules, along TFF's aggregators: `rotation` (step 2), `rounding` (steps 1,
3, 4), `codec` (the constants, a client's encoding and the server's
decoding), `factory` (the TFF factory); `tests/reference/secagg_reference.py` is
the NumPy reference every step is tested against.
"""

# pylint: disable=g-importing-member,unused-import
from dpftrl_tff.aggregators.secagg.codec import client_rounding_seed
from dpftrl_tff.aggregators.secagg.codec import decode
from dpftrl_tff.aggregators.secagg.codec import DEFAULT_MAX_ROUNDING_RETRIES
from dpftrl_tff.aggregators.secagg.codec import encode
from dpftrl_tff.aggregators.secagg.codec import SecAggParams
from dpftrl_tff.aggregators.secagg.factory import noise_multiplier_for_secagg
from dpftrl_tff.aggregators.secagg.factory import SecAggDiscretizationFactory
from dpftrl_tff.aggregators.secagg.rotation import fast_walsh_hadamard
from dpftrl_tff.aggregators.secagg.rotation import hadamard_matrix
from dpftrl_tff.aggregators.secagg.rotation import random_signs
from dpftrl_tff.aggregators.secagg.rotation import rotate
from dpftrl_tff.aggregators.secagg.rotation import unrotate
from dpftrl_tff.aggregators.secagg.rounding import clip_l2
from dpftrl_tff.aggregators.secagg.rounding import clip_linf
from dpftrl_tff.aggregators.secagg.rounding import conditional_stochastic_round
from dpftrl_tff.aggregators.secagg.rounding import squared_norm_at_most
