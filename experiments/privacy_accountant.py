r"""Privacy of a DP-FTRL configuration: rho-zCDP and (epsilon, delta).

Examples:
  # One paper row (de-DE NWP): 930 rounds, MinS 212, MaxP 4, z = 7.
  python -m experiments.privacy_accountant --rounds=930 --noise_multiplier=7 \
      --min_separation=212 --max_participation=4
  # Plan from a population: the largest MinS and the worst-case MaxP.
  python -m experiments.privacy_accountant --rounds=2000 --noise_multiplier=7 \
      --population=4210000 --report_goal=6500 --json
  # Adaptive clipping with the paper's restarts and sigma_b = m / 20.
  python -m experiments.privacy_accountant --rounds=2000 --noise_multiplier=7 \
      --min_separation=300 --report_goal=6500 --adaptive_clipping \
      --restart_rounds=paper
  # BLT noise (BLT-DP-FTRL) at the same setting, the BLT optimized on the spot
  # for these T, MinS and MaxP (or read with --blt_params=FILE).
  python -m experiments.privacy_accountant --rounds=930 --noise_multiplier=7 \
      --min_separation=212 --max_participation=4 --mechanism=blt
"""

import os
import sys

from absl import app
from absl import flags

from dpftrl_tff import accounting
from dpftrl_tff import planned_privacy
from dpftrl_tff import run_directory
from dpftrl_tff import strict_json
from dpftrl_tff.accounting import blt_optimizer

_ROUNDS = flags.DEFINE_integer('rounds', None, 'Total training rounds T.')
_NOISE = flags.DEFINE_float(
    'noise_multiplier', None,
    'Noise multiplier z (tree noise std = z * clip norm). With adaptive '
    'clipping, the equivalent z of Theorem 1.')
_MAXP = flags.DEFINE_integer(
    'max_participation', None,
    'MaxP: most participations of one client. Default: the worst case '
    'floor((T-1)/(MinS+1)) + 1.')
_MINS = flags.DEFINE_integer(
    'min_separation', None,
    'MinS: fewest rounds between two participations of a client. Default: '
    '0, or the largest the population allows when --population is given.')
_POPULATION = flags.DEFINE_integer(
    'population', None, 'Estimated population; with --report_goal gives the '
    'largest reachable MinS, floor(population / report_goal) - 1.')
_REPORT_GOAL = flags.DEFINE_integer(
    'report_goal', None, 'Clients per round m (population planning, '
    'SecAgg modulus, default clipped_count_stddev m/20).')
_DELTA = flags.DEFINE_float('delta', accounting.DEFAULT_DELTA,
                            'delta of (epsilon, delta)-DP.')
_RESTARTS = flags.DEFINE_string(
    'restart_rounds', None,
    'Rounds (0-based) at which a new tree starts: a comma-separated list, '
    '"paper" for 128 + 1024 i, or "periodic:WARMUP:FREQUENCY".')
_ADAPTIVE = flags.DEFINE_bool(
    'adaptive_clipping', False,
    'Report the value noise z_Delta of Theorem 1 (uses '
    '--clipped_count_stddev, default report_goal / 20).')
_SIGMA_B = flags.DEFINE_float(
    'clipped_count_stddev', None,
    'sigma_b, noise std of the clipped counts (adaptive clipping).')
_SECAGG_SCALE = flags.DEFINE_float('secagg_scale', None,
                                   'SecAgg scale s (with --model_dim, '
                                   '--clip_norm).')
_MODEL_DIM = flags.DEFINE_integer('model_dim', None,
                                  'Number of model parameters d (SecAgg).')
_CLIP = flags.DEFINE_float('clip_norm', None, 'l2 clip norm C (SecAgg).')
_MECHANISM = flags.DEFINE_enum(
    'mechanism', 'tree', ['tree', 'blt'],
    'The correlated noise: tree aggregation (the paper) or a BLT (buffered '
    'linear Toeplitz, BLT-DP-FTRL).')
_BLT_PARAMS = flags.DEFINE_string(
    'blt_params', None, 'With --mechanism=blt: JSON file with the BLT '
    '(lists buf_decay and output_scale; a run\'s blt.json). Unset: the BLT '
    'is optimized for --rounds, --min_separation and --max_participation.')
_BLT_BUFFERS = flags.DEFINE_integer(
    'blt_num_buffers', None, 'With --mechanism=blt and no --blt_params: '
    'buffers, 1 to 7 (unset: added while the loss improves by 1%).')
_BLT_ERROR = flags.DEFINE_enum(
    'blt_error', 'max', list(blt_optimizer.ERRORS),
    'With --mechanism=blt and no --blt_params: optimize the max or mean '
    'squared error of the prefix sums.')
_JSON = flags.DEFINE_bool('json', False, 'Print one JSON object.')
_REPORT = flags.DEFINE_string(
    'privacy_report', None,
    'Also write the privacy report of this planned launch (Markdown, the '
    'paper\'s appendix structure; a run writes its own privacy_report.md) '
    'to this file.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  try:
    report = planned_privacy.build_report(
        rounds=_ROUNDS.value, noise_multiplier=_NOISE.value,
        max_participation=_MAXP.value, min_separation=_MINS.value,
        population=_POPULATION.value, report_goal=_REPORT_GOAL.value,
        delta=_DELTA.value, restart_rounds=_RESTARTS.value,
        adaptive_clipping=_ADAPTIVE.value,
        clipped_count_stddev=_SIGMA_B.value,
        secagg_scale=_SECAGG_SCALE.value, model_dim=_MODEL_DIM.value,
        clip_norm=_CLIP.value, mechanism=_MECHANISM.value,
        blt_params=_BLT_PARAMS.value, blt_num_buffers=_BLT_BUFFERS.value,
        blt_error=_BLT_ERROR.value)
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  if _REPORT.value:
    try:
      os.makedirs(os.path.dirname(os.path.abspath(_REPORT.value)),
                  exist_ok=True)
      run_directory.write_text_atomic(_REPORT.value,
                                     planned_privacy.launch_report(report))
    except OSError as e:
      print(f'error: --privacy_report={_REPORT.value}: cannot write: '
            f'{e.strerror}', file=sys.stderr)
      return 2
  if _JSON.value:
    print(strict_json.dumps(report, sort_keys=True))
  else:
    print(planned_privacy.format_report(report))
  return 0


if __name__ == '__main__':
  app.run(main)
