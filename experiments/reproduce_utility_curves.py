r"""The paper's utility curves at CPU scale (Figure 1, Sec. 2.2 and 2.3).

On the generated StackOverflow-format data (the demo's model and data, 20
clients per round unless stated), resumably (every run is a run directory
under --root_output_dir; re-running reuses finished runs and resumes the
others), it trains and writes PNG and CSV into --output_dir:

  utility_fig1a.{png,csv}   eval accuracy against rounds: DP-FTRL with fixed
                            clip, with adaptive clip (Algorithm 1), and with
                            fixed clip from pretrained weights, at the same
                            noise multiplier; the rounds each needs to reach
                            the target accuracy and the zCDP spent by then
                            (utility_targets.csv);
  utility_fig1b.{png,csv}   the adaptive run's clip norm in force and its
                            quantile estimate against rounds;
  utility_report_goal.{png,csv}
                            report goal m in --report_goals with z / m fixed
                            (Sec. 2.2): accuracy against rounds and against
                            client updates processed;
  utility_pretraining.{png,csv}
                            rounds to the target against pretraining steps
                            (--pretrain_steps), the diminishing returns of
                            Sec. 2.3.

Fixed clip and pretrained runs repeat over --seeds (the pretraining steps
between 0 and the most run the first seed only); the reduction factor of
rounds to the target from pretraining is printed per seed. --quick runs a
tiny model for a few rounds (the tests' scale: checks the pipeline, not the
findings).

With --cache_dir=<corpus of experiments.build_git_corpus, built with its
documentation> it reproduces the same figures on real text (files suffixed
_git): configs/git_corpus.flags' model (vocab 4000, CIFG 128, embedding 64)
and settings at 20 clients a round for 200 rounds, min_sep_groups
participation (the runs' own privacy is a guarantee) with the equivalent
launch's privacy labelled beside it, pretraining on the corpus's
documentation (TFDS dpftrl_public_text).

  python -m experiments.reproduce_utility_curves          # about 28 minutes
  python -m experiments.reproduce_utility_curves --quick  # about a minute
  python -m experiments.reproduce_utility_curves --cache_dir=corpora/git
  # Figure 1a alone at 1,000 rounds (docs/reproduction.md: about an hour):
  python -m experiments.reproduce_utility_curves --cache_dir=corpora/git \\
      --rounds=1000 --figure_1a_only --root_output_dir=runs/fig1a_1000
"""

import dataclasses
import os
import time

from dpftrl_tff import runtime

runtime.install()   # Before TensorFlow is imported: quiet C++ logs.

# pylint: disable=g-import-not-at-top
from absl import flags

from dpftrl_tff import checks
from dpftrl_tff import console
from dpftrl_tff.data import stackoverflow
from dpftrl_tff.studies import utility_curves
# pylint: enable=g-import-not-at-top

_ROOT = flags.DEFINE_string(
    'root_output_dir', None, 'Run directories (reused and resumed). '
    'Default: runs/utility_curves followed by the figures\' suffix (_git, '
    '_<rounds>r, _quick), so that each scale and corpus resumes its own '
    'runs.')
_OUT = flags.DEFINE_string('output_dir', 'docs/figures',
                           'Where the PNG and CSV files go.')
_QUICK = flags.DEFINE_bool('quick', False, 'Tiny model, few rounds.')
_CACHE_DIR = flags.DEFINE_string(
    'cache_dir', None, 'Real text: a corpus directory of '
    'experiments.build_git_corpus built with its documentation (public '
    'text for pretraining); figures get the suffix _git. Unset: the '
    'generated StackOverflow-format data.')
_SEEDS = flags.DEFINE_list('seeds', ['1', '2', '3'],
                           'Seeds of the runs compared in Figure 1a.')
_TARGET = flags.DEFINE_float(
    'target_accuracy', None, 'Utility target (eval in-vocab accuracy). '
    'Default: 0.9 of the best final accuracy of the fixed-clip runs.')
_REPORT_GOALS = flags.DEFINE_list('report_goals', ['5', '10', '20', '40'],
                                  'Report goals m of the Sec. 2.2 runs.')
_ROUNDS = flags.DEFINE_integer(
    'rounds', None, 'Rounds of every run (default: the scale\'s, 200; 2 '
    'with --quick); the adaptive runs keep the scale\'s restart schedule. '
    'Output files get the suffix _<rounds>r.', lower_bound=1)
_FIGURE_1A_ONLY = flags.DEFINE_bool(
    'figure_1a_only', False, 'Only Figures 1a and 1b (fixed, adaptive and '
    'pretrained runs over --seeds): no report-goal or pretraining-steps '
    'runs.')
_PRETRAIN_STEPS = flags.DEFINE_list(
    'pretrain_steps', ['0', '300', '1000', '3000'],
    'Pretraining steps of the diminishing-returns runs.')


def run():
  started = time.time()
  seeds = tuple(checks.check_int_list(_SEEDS.value, '--seeds', minimum=0))
  pretrain_steps = checks.check_int_list(_PRETRAIN_STEPS.value,
                                         '--pretrain_steps', minimum=0)
  goals = checks.check_int_list(_REPORT_GOALS.value, '--report_goals',
                                minimum=1)
  if _TARGET.value is not None:
    checks.check_float(_TARGET.value, '--target_accuracy', minimum=0,
                       maximum=1, strict_minimum=True)
  real_text = _CACHE_DIR.value is not None
  if real_text:
    stackoverflow.check_database(_CACHE_DIR.value)
  scale = (utility_curves.git_scale(_QUICK.value) if real_text else
           utility_curves.quick_or_full_scale(_QUICK.value))
  if _QUICK.value:
    pretrain_steps = [0, 6]
    goals = [10, 20]   # 20: the fixed-clip run, reused.
  if _ROUNDS.value is not None:
    scale = dataclasses.replace(scale, rounds=_ROUNDS.value)
  suffix = (('_git' if real_text else '') +
            ('' if _ROUNDS.value is None else f'_{_ROUNDS.value}r') +
            ('_quick' if _QUICK.value else ''))
  # One public corpus for every pretraining: about 1.5 epochs at the most.
  runner = utility_curves.Runner(
      _ROOT.value or f'runs/utility_curves{suffix}', scale,
      cache_dir=_CACHE_DIR.value, corpus_sentences=max(
          2000, scale.pretrain_batch * max(pretrain_steps) * 2 // 3))
  # Refused before the first run, not in the middle of the study.
  available = len(runner.train_data.client_ids)
  data = (f'the corpus in --cache_dir={_CACHE_DIR.value}' if real_text else
          'the generated data')
  clients = runner.config().clients_per_round
  if available < clients:
    raise stackoverflow.DataError(
        f'--cache_dir={_CACHE_DIR.value}: its corpus has {available} '
        f'training clients, fewer than the {clients} a round of these runs '
        f'(a longer history, or a lower build_git_corpus '
        f'--min_examples_per_client).')
  if not _FIGURE_1A_ONLY.value:
    stackoverflow.check_clients_per_round(max(goals), available,
                                          flag='--report_goals', data=data)
  os.makedirs(_OUT.value, exist_ok=True)
  study = utility_curves.Study(
      runner=runner, scale=scale, seeds=seeds, out=_OUT.value, suffix=suffix,
      data_label='git commit messages' if real_text else 'generated data')
  main_steps = max(pretrain_steps)
  runs = utility_curves.train_figure_1a_runs(study, main_steps)
  target = _TARGET.value
  if target is None:
    best = max(utility_curves.curve(runs[('fixed', s)])[1][-1]
               for s in seeds)
    target = 0.9 * best
  targets = utility_curves.figure_1a(study, runs, target)
  utility_curves.figure_1b(study, runs[('adaptive', seeds[0])])
  utility_curves.print_adaptive_against_fixed(study, runs)
  if _FIGURE_1A_ONLY.value:
    print(f'Done in {time.time() - started:.0f} s; figures in {study.out}.')
    return
  utility_curves.report_goal_figure(study, runs, goals)
  utility_curves.pretraining_figure(study, runs, pretrain_steps, main_steps,
                                    target)
  utility_curves.print_findings(study, runs, targets, target, main_steps)
  print(f'Done in {time.time() - started:.0f} s; figures in {study.out}.')


def main(argv):
  return console.run_main(run, argv, cleanup=runtime.shutdown_workers)


if __name__ == '__main__':
  runtime.run_app(main)
