r"""Canary audit of a DP mechanism alone: empirical epsilon beside the bound.

One-shot empirical privacy estimation (Andrew et al., ICLR 2024) on the
aggregation path of a training configuration, without a model: real
clients' updates are random vectors of --dimension parameters, --canaries
canary clients join the population through the participation model in use
and send a fixed random direction each, past the clip norm; as many
directions are never inserted. From the cosines of the final model delta
with both sets it prints the estimated epsilon with its interval, beside
the accounted epsilon of the same rounds and participation
(`dpftrl_tff/empirical/canary_audit.py`). Every training flag applies (--aggregator,
--noise_multiplier, --clip_norm, --clients_per_round, --total_rounds,
--participation, restarts, BLT, --secagg).

  python -m experiments.audit_mechanism --aggregator=dp_ftrl \
      --noise_multiplier=1 --clients_per_round=20 --total_rounds=50 \
      --participation=min_sep_groups --population=400 --canaries=100 --json
"""

import dataclasses
import sys
import time

from dpftrl_tff import runtime

runtime.install(malloc_arenas=2)   # Before TensorFlow: quiet C++ logs; two
                                   # malloc arenas keep the worker small.

from absl import flags
import numpy as np

from dpftrl_tff import accounting
from dpftrl_tff import console
from dpftrl_tff import strict_json
from dpftrl_tff.privacy import privacy_report
from dpftrl_tff.run import config as config_lib
from dpftrl_tff.run import progress

_DIMENSION = flags.DEFINE_integer(
    'dimension', 2000, 'Model dimension d of the random updates (the '
    'estimate needs d well above the number of canaries).')
_POPULATION = flags.DEFINE_integer(
    'population', None, 'Clients including the canaries; unset: 10 times '
    '--clients_per_round, at least --clients_per_round + --canaries.')
_DELTA = flags.DEFINE_float('delta', accounting.DEFAULT_DELTA,
                            'delta of both epsilons.')
_BOOTSTRAP = flags.DEFINE_integer('bootstrap', 500,
                                  'Bootstrap resamples for the interval.')
_JSON = flags.DEFINE_bool('json', False, 'Print one JSON object.')
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', None, 'Also write audit.json, empirical_privacy.png (the '
    'cosine histograms) and privacy_report.md (the accounted privacy with '
    'the empirical estimate) here.')
_CONFIG = config_lib.define_flags()
flags.adopt_module_key_flags(config_lib)
# --canaries and --canary_norm are the training settings; an audit inserts
# canaries by default.
flags.set_default(_CONFIG['canaries'], 100)


def run():
  # After flags are parsed: a bad flag is one line, without TensorFlow.
  # pylint: disable=g-import-not-at-top
  from dpftrl_tff.empirical import canary_audit
  from dpftrl_tff import tff_compat
  # pylint: enable=g-import-not-at-top
  config = config_lib.from_flags(_CONFIG)   # Validated (one line a flag).
  if not 0 < _DELTA.value < 1:
    raise ValueError(f'--delta must be in (0, 1), got {_DELTA.value}.')
  if _BOOTSTRAP.value < 0:
    raise ValueError(f'--bootstrap must be >= 0, got {_BOOTSTRAP.value}.')
  if config.noise_seed is not None:
    console.warn(f'--noise_seed={config.noise_seed} fixes the DP noise: '
                 'the audit then measures a predictable mechanism.')
  if config.seed is None:
    config = dataclasses.replace(config, seed=config_lib.draw_seed())
  population = _POPULATION.value or max(
      10 * config.clients_per_round,
      config.clients_per_round + config.canaries)
  tff_compat.install()
  bar = progress.Progress(config.total_rounds, 0, stream=sys.stderr)
  clock = [time.time()]

  def report(done, total):
    del total
    now = time.time()
    bar.update(done, now - clock[0], '')
    clock[0] = now

  audit = canary_audit.run(
      config, dimension=_DIMENSION.value, canaries=config.canaries,
      canary_norm=config.canary_norm,
      population=population, delta=_DELTA.value,
      bootstrap=_BOOTSTRAP.value,
      rng=np.random.default_rng(config.seed),
      progress=report)
  bar.close()
  result = audit.result
  if _OUTPUT_DIR.value:
    canary_audit.write_outputs(
        audit, _OUTPUT_DIR.value,
        clipping=privacy_report.clipping_text(config),
        fixed_noise_seed=config.noise_seed)
  if _JSON.value:
    print(strict_json.dumps(result, sort_keys=True))
    return
  lo, hi = result['epsilon_interval']
  print(f'{result["mechanism"]}: T={result["rounds"]}, m='
        f'{result["clients_per_round"]}, z={result["noise_multiplier"]:g}, '
        f'd={result["dimension"]}, {result["seen_canaries"]} canaries seen '
        f'(mean {result["canary_participations"]["mean"]:.2f} '
        f'participations), {result["unseen_canaries"]} never inserted')
  print(f'Empirical epsilon (final model, one-shot estimate): '
        f'{console.number(result["empirical_epsilon"], ".4g")}, '
        f'{100 * result["confidence"]:.0f}% interval '
        f'[{console.number(lo, ".4g")}, {console.number(hi, ".4g")}] at '
        f'delta {result["delta"]:g}')
  bound = ('upper bound' if config.noise_seed is None else
           'NOT a bound of this audit, whose --noise_seed fixed the noise: '
           'the bound had it been unpredictable')
  min_sep = result['observed_min_separation']
  print(f'Accounted epsilon ({bound}; observed MaxP '
        f'{result["observed_max_participation"]}, MinS '
        f'{min_sep if min_sep >= 0 else "none: no client took part twice"}'
        '): '
        + ('none (no DP noise)' if result['accounted_epsilon'] is None
           else console.number(result['accounted_epsilon'], '.4g')))
  print('Judged by the interval: ' + privacy_report.empirical_verdict(
      result, result['accounted_epsilon']))


def main(argv):
  return console.run_main(run, argv, cleanup=runtime.shutdown_workers)


if __name__ == '__main__':
  runtime.run_app(main)
