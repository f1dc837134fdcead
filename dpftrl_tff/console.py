"""What a binary prints: one-line errors and warnings, quiet libraries.

By default a binary's console shows only its own lines: TensorFlow's C++
logs (including the 'E' lines about CUDA plugins on a machine without a GPU)
are off (`runtime.install` sets TF_CPP_MIN_LOG_LEVEL=3 unless set), and
absl, TensorFlow and TFF Python logs and warnings below ERROR are dropped.
absl's `--verbosity=1` (or `-v 1`) shows them all again.
"""

import errno
import logging as std_logging
import math
import os
import sys
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence

from absl import flags
from absl import logging

from dpftrl_tff import runtime
from dpftrl_tff.aggregators import registry
from dpftrl_tff.aggregators.mechanisms.base import number
from dpftrl_tff.privacy import privacy_report
from dpftrl_tff.run import divergence


def warn(message: str):
  print(f'warning: {message}', file=sys.stderr, flush=True)


def error(message: str):
  print(f'error: {message}', file=sys.stderr, flush=True)


def verbose() -> bool:
  try:
    return flags.FLAGS['verbosity'].value >= 1
  except (KeyError, flags.UnparsedFlagAccessError):
    return False


def quiet_libraries():
  """Drops library logs and warnings below ERROR unless --verbosity >= 1.

  TensorFlow's Python logs go through the standard logger 'tensorflow'
  (what `tf.get_logger()` returns), set here without importing TensorFlow:
  a binary that does not use it does not pay its import (about 2.5 s; every
  binary paid it until 2026-11-26). Its C++ logs are `runtime.install`'s;
  autograph's own verbosity is 0 unless AUTOGRAPH_VERBOSITY says otherwise.
  """
  if verbose():
    os.environ['TF_CPP_MIN_LOG_LEVEL'] = '0'
    return
  logging.set_verbosity(logging.ERROR)
  warnings.filterwarnings('ignore')
  std_logging.getLogger('tensorflow').setLevel(std_logging.ERROR)


def run_main(run: Callable[[], Any], argv: Sequence[str],
             cleanup: Callable[[], None] = lambda: None) -> int:
  """A binary's main: run(), with bad input and interrupts as one line.

  Refuses positional arguments; ValueError and OSError print one line, no
  traceback (--verbosity=1 logs it). An int that run() returns is the exit
  code (anything else: 0). Exit codes: 2 the command was refused
  (a bad flag, bad data, an unwritable output place); 1 the infrastructure
  failed (a crashed local TFF worker, `runtime.WorkerLost`; a lost or
  unreachable remote worker, an error marked `infrastructure`; a full disk
  or an I/O error), so re-running the same command may succeed; 3 a
  diverged run; 130 Ctrl-C (a run keeps its last checkpoint). `cleanup`
  always runs last (e.g. stopping TFF workers).
  """
  if len(argv) > 1:
    error(f'unexpected arguments {list(argv[1:])}: every setting is a '
          f'--flag (see --helpshort).')
    return 2
  quiet_libraries()
  try:
    code = run()
  except KeyboardInterrupt as e:
    error(f'interrupted; {e}' if str(e) else
          'interrupted; the run keeps its last checkpoint (re-run the same '
          'command to resume).')
    return 130
  except divergence.DivergenceError as e:
    logging.debug('Diverged', exc_info=True)
    error(str(e))
    return 3
  except runtime.WorkerLost as e:
    logging.debug('TFF worker lost', exc_info=True)
    error(str(e))
    return 1
  except (ValueError, OSError) as e:
    logging.debug('Refused', exc_info=True)
    error(str(e) if isinstance(e, ValueError) else describe_os_error(e))
    return exit_code(e)
  finally:
    cleanup()
  # A binary whose run() decides its own exit code returns it.
  return code if isinstance(code, int) and not isinstance(code, bool) else 0


# OSError numbers of a failing machine rather than a refused command.
_INFRASTRUCTURE_ERRNOS = (errno.ENOSPC, errno.EIO, errno.EDQUOT)


def exit_code(e: Exception) -> int:
  """`run_main`'s exit code for a ValueError or OSError: 1 when the
  infrastructure failed (the error says `infrastructure`, or a full disk or
  I/O error), else 2 (the command was refused)."""
  if getattr(e, 'infrastructure', False):
    return 1
  if isinstance(e, OSError) and e.errno in _INFRASTRUCTURE_ERRNOS:
    return 1
  return 2


def describe_os_error(e: OSError) -> str:
  """One line for a failed file operation (unwritable output, full disk)."""
  where = f' {e.filename}' if getattr(e, 'filename', None) else ''
  reason = e.strerror or str(e)
  hint = ''
  if e.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
    hint = ' (choose a writable --root_output_dir)'
  elif e.errno == errno.ENOSPC:
    hint = ' (free some disk space)'
  return f'cannot use{where}: {reason}{hint}.'


def _rho_epsilon(privacy: Dict[str, Any]) -> str:
  """'rho-zCDP x, epsilon y', or what the noise's accounting gives
  (`NoiseDescription.figures_phrase`)."""
  return registry.noise_description(privacy).figures_phrase(privacy)


def _noise_text(privacy: Dict[str, Any]) -> str:
  return registry.noise_description(privacy).console(privacy)


def _explosion_lines(explosion: Optional[Dict[str, Any]]) -> List[str]:
  """The warning of a run whose training loss exploded (finite)."""
  if not explosion:
    return []
  text = (f'WARNING: the training loss exploded: round '
          f'{explosion["round"]} {explosion["loss"]:.4g}, over '
          f'{explosion["factor"]:g} times the first round\'s '
          f'({explosion["first_round_loss"]:.4g}); round '
          f'{explosion["last_round"]} {explosion["last_loss"]:.4g}.')
  if explosion['ended_exploded']:
    text += (' The final model is a diverged one: its accuracy says so, not '
             'what this setting can reach.')
  return [text]


def summary_text(summary: Dict[str, Any]) -> str:
  """The final lines of a training run: accuracy and privacy spent."""
  lines = []
  if summary.get('already_finished'):
    lines.append('(Already finished: the result of the earlier run.)')
  final = summary.get('final_eval')
  if final:
    top3 = ''
    if final.get('in_vocab_top3_accuracy') is not None:
      top3 = (f', top-3 {number(final.get("in_vocab_top3_accuracy"))} '
              f'(baseline, the three most frequent words: '
              f'{number(summary.get("unigram_top3_baseline_accuracy"))})')
    lines.append(
        f'Final eval in-vocab accuracy: '
        f'{number(final.get("in_vocab_accuracy"))} '
        f'(loss {number(final.get("loss"))}) after {summary["rounds"]} '
        f'rounds; unigram baseline (always the most frequent word) '
        f'{number(summary.get("unigram_baseline_accuracy"))}{top3}')
  lines += _explosion_lines(summary.get('training_loss_explosion'))
  privacy = summary.get('privacy')
  hypothetical = summary.get(privacy_report.UNPREDICTABLE_NOISE_KEY)
  if hypothetical:
    lines.append(
        f'Privacy: NONE. --noise_seed={hypothetical["noise_seed"]} fixed the '
        f'DP noise, so anyone with the seed can remove it. With '
        f'unpredictable noise the same run would have had '
        f'{_rho_epsilon(hypothetical)} at delta {hypothetical["delta"]:g} '
        f'(not this run\'s guarantee).')
  elif privacy is None:
    lines.append('Privacy: none (--aggregator=none or --noise_multiplier=0).')
  else:
    min_sep = privacy['observed_min_separation']
    min_sep_text = (str(min_sep) if min_sep >= 0 else
                    'none: no client took part twice')
    lines.append(
        f'Privacy spent: {_rho_epsilon(privacy)} at delta '
        f'{privacy["delta"]:g} '
        f'(z={privacy["noise_multiplier"]:g}, T={privacy["rounds"]}, '
        f'{_noise_text(privacy)}, observed '
        f'MaxP={privacy["observed_max_participation"]}, '
        f'MinS={min_sep_text})')
    planned = privacy.get('planned')
    if planned:
      lines.append(
          f'  planned by the participation model (MinS >= '
          f'{planned["guaranteed_min_separation"]}, MaxP <= '
          f'{planned["max_participation"]}): {_rho_epsilon(planned)}')
    if (summary.get('vocabulary') or {}).get('counted_from_clients'):
      lines.append('  not covered: the vocabulary, counted from the training '
                   'clients\' text (privacy_report.md; --word_counts_path '
                   'for one made without them)')
    launch = privacy.get('launch_equivalent')
    if launch:
      participation = registry.noise_description(
          launch).launch_participation_phrase(launch)
      lines.append(
          f'Launch-equivalent privacy (NOT this run\'s guarantee: a launch '
          f'with report goal {launch["report_goal"]} and the same noise per '
          f'client, z={launch["noise_multiplier"]:g}, population '
          f'{launch["population"]:,} {participation}): '
          f'{_rho_epsilon(launch)} at delta {launch["delta"]:g}')
  lines += empirical_privacy_lines(summary.get('empirical_privacy'),
                                   bool(hypothetical))
  if summary.get('exposure'):
    lines += exposure_lines(summary['exposure'])
  return '\n'.join(lines)


def _estimate_text(block: Dict[str, Any]) -> str:
  """An estimate; unbounded (null in JSON, inf before) said in words."""
  value = block.get('empirical_epsilon')
  if block.get('epsilon_unbounded') or (value is not None and
                                        math.isinf(value)):
    return 'unbounded (no finite epsilon below 1e4)'
  return number(value, '.3f')


def empirical_privacy_lines(empirical: Optional[Dict[str, Any]],
                            fixed_noise_seed: bool = False) -> List[str]:
  """The canary estimates of a run (--canaries), labelled as estimates;
  beside them the accounted epsilon, labelled as no bound of this run when
  --noise_seed fixed its noise."""
  if not empirical:
    return []
  if 'not_estimated' in empirical:
    return [f'Empirical privacy (canaries): not estimated: '
            f'{empirical.get("not_estimated")}']
  lines = []
  for label, block in (('final model', empirical),
                       ('all iterates', empirical.get('all_iterates'))):
    if block:
      low, high = block['epsilon_interval']
      lines.append(
          f'Empirical privacy, {label} (canary estimate, not a bound): '
          f'epsilon {_estimate_text(block)}, '
          f'{int(100 * block["confidence"])}% interval [{number(low, ".3f")}, '
          f'{number(high, ".3f")}] from {block["seen_canaries"]} seen and '
          f'{block["unseen_canaries"]} unseen canaries at delta '
          f'{block["delta"]:g}')
  accounted = empirical.get('accounted_epsilon')
  lines.append('  accounted epsilon ('
               + ('the bound had the noise been unpredictable; this run has '
                  'none' if fixed_noise_seed else 'the proven bound') + '): '
               + ('none (no DP)' if accounted is None
                  else number(accounted, '.3f')))
  for label, block in (('final model', empirical),
                       ('all iterates', empirical.get('all_iterates'))):
    if block:
      lines.append(f'  {label}, judged by the interval: '
                   + privacy_report.empirical_verdict(block, accounted))
  return lines


def exposure_lines(block: Dict[str, Any]) -> List[str]:
  """The console's lines for a run's `exposure` block
  (`dpftrl_tff.empirical.exposure`)."""
  def text(value):
    return 'none took part' if value is None else number(value, '.2f')
  return [
      f'Exposure of {block["phrases"]} canary phrases ({block["repeats"]} '
      f'client(s) each, {block["phrase_length"]} words; secret sharer, '
      f'{block["candidates"]} random candidates): mean '
      f'{text(block["mean_exposure_trained"])} bits by rank (at most '
      f'{block["max_rank_exposure"]:.2f}), '
      f'{text(block["mean_extrapolated_exposure_trained"])} extrapolated '
      f'(log2 of the phrase space: {block["log2_space"]:.1f}); about 1 '
      'means not memorized.']
