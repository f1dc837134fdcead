r"""Privacy of a DP-FTRL configuration: rho-zCDP and (epsilon, delta).

Examples:
  # One paper row (de-DE NWP): 930 rounds, MinS 212, MaxP 4, z = 7.
  python -m experiments.privacy_accountant --rounds=930 --noise_multiplier=7 \
      --min_separation=212 --max_participation=4
  # Plan from a population: the largest MinS and the worst-case MaxP.
  python -m experiments.privacy_accountant --rounds=2000 --noise_multiplier=7 \
      --population=4210000 --report_goal=6500 --json
  # Adaptive clipping (Algorithm 1) with training's restarts (--restart_warmup
  # 128, --restart_frequency 1024: the paper's) and sigma_b = m / 20.
  python -m experiments.privacy_accountant --rounds=2000 --noise_multiplier=7 \
      --min_separation=300 --report_goal=6500 --aggregator=dp_ftrl_adaptive
  # BLT noise (BLT-DP-FTRL) at the same setting, the BLT optimized on the spot
  # for these T, MinS and MaxP (or read with --blt_params=FILE).
  python -m experiments.privacy_accountant --rounds=930 --noise_multiplier=7 \
      --min_separation=212 --max_participation=4 --aggregator=dp_ftrl_blt
  # BandMF noise: C optimized with 64 bands (or read from Gboard's published
  # format with --bandmf_matrix_dir=DIR); prints C's prefix-sum error too.
  python -m experiments.privacy_accountant --rounds=930 --noise_multiplier=7 \
      --min_separation=212 --max_participation=4 --aggregator=dp_ftrl_bandmf \
      --bandmf_bands=64

--aggregator, --restart_warmup and --restart_frequency are the training
binary's settings (declared once in `config.TrainConfig`). The earlier
spellings --mechanism and --adaptive_clipping are refused with the new one.
"""

import os
import sys

from dpftrl_tff import runtime

runtime.install()   # Before TensorFlow (the BLT optimizer's): quiet C++ logs.

from absl import app
from absl import flags

from dpftrl_tff import accounting
from dpftrl_tff import console
from dpftrl_tff import strict_json
from dpftrl_tff.aggregators import registry
from dpftrl_tff.privacy import planned_privacy
from dpftrl_tff.run import config as config_lib
from dpftrl_tff.run import run_directory

_ROUNDS = flags.DEFINE_integer('rounds', None, 'Total training rounds T.')
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
    '"paper" for 128 + 1024 i, or "periodic:WARMUP:FREQUENCY". With '
    'dp_ftrl: a fixed-clip tree restarted there; with dp_ftrl_adaptive: '
    'instead of --restart_warmup and --restart_frequency.')
# The mechanism, its noise, clip, SecAgg scale and restarts, as the
# training binary declares them; z, C and s unset mean "not given" here.
_CONFIG = config_lib.define_flags(
    only=('noise_multiplier',) + planned_privacy.MECHANISM_FLAGS,
    defaults=dict(planned_privacy.MECHANISM_FLAG_DEFAULTS,
                  noise_multiplier=None))
flags.adopt_module_key_flags(config_lib)   # Listed by --helpshort too.
# Earlier spellings, refused with the new one (`_refused_spellings`).
_MECHANISM = flags.DEFINE_string(
    'mechanism', None, 'Refused: --aggregator=dp_ftrl (tree) or '
    '--aggregator=dp_ftrl_blt (blt).')
_ADAPTIVE = flags.DEFINE_bool(
    'adaptive_clipping', None, 'Refused: --aggregator=dp_ftrl_adaptive.')
_MODEL_DIM = flags.DEFINE_integer('model_dim', None,
                                  'Number of model parameters d (SecAgg).')
_JSON = flags.DEFINE_bool('json', False, 'Print one JSON object.')
_REPORT = flags.DEFINE_string(
    'privacy_report', None,
    'Also write the privacy report of this planned launch (Markdown, the '
    'paper\'s appendix structure; a run writes its own privacy_report.md) '
    'to this file.')


def _refused_spellings():
  """The earlier spellings of the mechanism, with what replaces them."""
  if _MECHANISM.present:
    try:   # Its values were the accounted noises: 'tree', 'blt'.
      new = registry.owner_of_noise(_MECHANISM.value).name
    except ValueError:
      new = None
    raise ValueError(
        f'--mechanism={_MECHANISM.value} is now spelled as in training: '
        + (f'--aggregator={new}.' if new else
           '--aggregator=dp_ftrl (tree) or dp_ftrl_blt (blt).'))
  if _ADAPTIVE.present:
    raise ValueError('--adaptive_clipping is now spelled as in training: '
                     '--aggregator=dp_ftrl_adaptive (restarts at '
                     '--restart_warmup + --restart_frequency i, default the '
                     'paper\'s 128 + 1024 i, unless --restart_rounds).')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  console.quiet_libraries()   # The optimizer's logs.
  try:
    _refused_spellings()
    config = {name: holder.value for name, holder in _CONFIG.items()}
    report = planned_privacy.build_report(
        rounds=_ROUNDS.value, max_participation=_MAXP.value,
        min_separation=_MINS.value, population=_POPULATION.value,
        report_goal=_REPORT_GOAL.value, delta=_DELTA.value,
        restart_rounds=_RESTARTS.value, model_dim=_MODEL_DIM.value,
        **config)
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
  runtime.run_app(main)
