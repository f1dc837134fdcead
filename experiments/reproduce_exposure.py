r"""Memorization with and without DP: the secret sharer's exposure.

Trains the demo's model (configs/demo.flags, generated data; or the git
corpus with --cache_dir and configs/git_corpus.flags) three times with the
same canary phrases (--canary_phrases, each in --canary_phrase_repeats
clients): no DP (plain FedAvg mean, no clipping), DP-FTRL and BLT at the
flag file's noise. Writes exposure.csv (one row per run and phrase) and
prints each run's mean exposure beside its accounted epsilon. Runs are
training runs under --root_output_dir, so a second call reuses or resumes
them.

  python -m experiments.reproduce_exposure --root_output_dir=runs/exposure
"""

import csv
import os

from dpftrl_tff import runtime

runtime.install()   # Before TensorFlow is imported: quiet C++ logs.

from absl import flags

from dpftrl_tff import checks
from dpftrl_tff import console
from dpftrl_tff.studies import training_runs

_ROOT = flags.DEFINE_string('root_output_dir', 'runs/exposure',
                            'Where the three training runs go.')
_OUTPUT_DIR = flags.DEFINE_string('output_dir', None,
                                  'Where exposure.csv goes; unset: the root.')
_CACHE_DIR = flags.DEFINE_string(
    'cache_dir', None, 'A corpus of experiments.build_git_corpus (then '
    'configs/git_corpus.flags); unset: the demo on generated data.')
_PHRASES = flags.DEFINE_integer('canary_phrases', 20, 'Phrases inserted.')
_REPEATS = flags.DEFINE_integer('canary_phrase_repeats', 10,
                                'Clients holding each phrase.')
_CANDIDATES = flags.DEFINE_integer('exposure_candidates', 10000,
                                   'Random candidates per phrase.')
_EXTRA = flags.DEFINE_multi_string(
    'training_flag', [], 'Extra training flags for every run, e.g. '
    '--training_flag=--total_rounds=20. A run\'s own --aggregator (and the '
    'no-DP run\'s --noise_multiplier=0) come after them.')
_NOISE = flags.DEFINE_float(
    'noise_multiplier', None, 'Noise multiplier z of the DP-FTRL and BLT '
    'runs; unset: the flag file\'s.')

# (name, flags): the same phrases (same --seed) in every run.
RUNS = (
    ('no_dp', ['--aggregator=none', '--noise_multiplier=0']),
    ('dp_ftrl', ['--aggregator=dp_ftrl']),
    ('blt', ['--aggregator=dp_ftrl_blt']),
)


def _run_flags(name, run_flags):
  """A run's own flags, last (absl keeps a flag's last value)."""
  if name != 'no_dp' and _NOISE.value is not None:
    return run_flags + [f'--noise_multiplier={_NOISE.value}']
  return run_flags


def run():
  for name, value, minimum in (('canary_phrases', _PHRASES.value, 1),
                               ('canary_phrase_repeats', _REPEATS.value, 1),
                               ('exposure_candidates', _CANDIDATES.value, 1)):
    if value < minimum:
      raise ValueError(f'--{name} must be >= {minimum}, got {value}.')
  if _NOISE.value is not None:
    checks.check_noise_multiplier(_NOISE.value, positive=True,
                                  what='the DP runs\' noise')
  flagfile = ('configs/git_corpus.flags' if _CACHE_DIR.value else
              'configs/demo.flags')
  common = [f'--flagfile={flagfile}', f'--canary_phrases={_PHRASES.value}',
            f'--canary_phrase_repeats={_REPEATS.value}',
            f'--exposure_candidates={_CANDIDATES.value}', '--seed=0']
  if _CACHE_DIR.value:
    common.append(f'--cache_dir={_CACHE_DIR.value}')
  rows, lines = [], []
  for name, run_flags in RUNS:
    try:
      summary = training_runs.run_training(
          _ROOT.value, name, common + list(_EXTRA.value) + _run_flags(
              name, run_flags))
    except RuntimeError as e:   # DivergedRun too: one line, not a trace.
      raise ValueError(str(e)) from None
    block = summary['exposure']
    privacy = summary.get('privacy')
    epsilon = privacy['epsilon'] if privacy else None
    for phrase in block['per_phrase']:
      rows.append(dict(run=name, epsilon=epsilon, **{
          k: phrase[k] for k in ('phrase', 'clients', 'participations',
                                 'log_perplexity', 'rank', 'exposure',
                                 'extrapolated_exposure')}))
    lines.append(
        f'{name:8s} accuracy '
        f'{console.number(summary["final_eval"].get("in_vocab_accuracy"))}'
        f', epsilon '
        f'{"none (no DP)" if epsilon is None else console.number(epsilon, ".3g")}'
        f': mean exposure '
        f'{console.number(block["mean_exposure_trained"], ".2f")} by rank '
        f'(at most {block["max_rank_exposure"]:.2f}), '
        f'{console.number(block["mean_extrapolated_exposure_trained"], ".2f")}'
        ' extrapolated')
  out = _OUTPUT_DIR.value or _ROOT.value
  os.makedirs(out, exist_ok=True)
  path = os.path.join(out, 'exposure.csv')
  with open(path, 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  print(f'Exposure of {_PHRASES.value} phrases, each in {_REPEATS.value} '
        f'clients, among {_CANDIDATES.value} candidates ({path}):')
  print('\n'.join(lines))


def main(argv):
  return console.run_main(run, argv, cleanup=runtime.shutdown_workers)


if __name__ == '__main__':
  runtime.run_app(main)
