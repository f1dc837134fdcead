"""The paper's utility curves at CPU scale: runs and figures.

The library of `experiments.reproduce_utility_curves` (its docstring lists
the figures): `Runner` trains (or reuses) runs in this process on the
generated data or a git corpus, `Scale` sizes them, and each figure is one
function of a `Study` (Figure 1a and its rounds to the target, Figure 1b,
report goal with z / m fixed as in Sec. 2.2, pretraining as in Sec. 2.3).
"""

import dataclasses
import os
from typing import Optional

import numpy as np

from dpftrl_tff import plotting
from dpftrl_tff.data import synthetic
from dpftrl_tff.run import config as config_lib
from dpftrl_tff.run import run_directory


@dataclasses.dataclass
class Scale:
  """The model, data and run lengths of a reproduction."""
  rounds: int
  noise_multiplier: float
  model: dict
  data: dict
  pretrain_batch: int
  rounds_per_eval: int
  num_eval_examples: int
  restart_warmup: int
  restart_frequency: int
  # Real text: other training settings (git_corpus.flags), the planned
  # participation and the launch whose equivalent privacy is reported.
  extra: dict = dataclasses.field(default_factory=dict)


# Real text (configs/git_corpus.flags): min_sep_groups participation, so
# the run's own privacy is a guarantee, and the launch-equivalent privacy
# (report goal 6500, es-ES's estimated population), labelled as such.
_GIT_EXTRA = dict(client_lr=0.5, participation='min_sep_groups',
                  launch_report_goal=6500, launch_population=4_210_000)


def git_scale(quick: bool) -> Scale:
  """The git corpus's scale (configs/git_corpus.flags' model)."""
  if quick:
    return dataclasses.replace(quick_or_full_scale(True), data={},
                               extra=_GIT_EXTRA)
  return Scale(rounds=200, noise_multiplier=0.1,
               model=dict(vocab_size=4000, latent_size=128,
                          embedding_size=64),
               data={}, pretrain_batch=64, rounds_per_eval=20,
               num_eval_examples=2000, restart_warmup=50,
               restart_frequency=100, extra=_GIT_EXTRA)


def quick_or_full_scale(quick: bool) -> Scale:
  """The generated data's scale: --quick's (the tests') or the full one."""
  if quick:
    return Scale(rounds=2, noise_multiplier=0.5,
                 model=dict(vocab_size=100, latent_size=8, embedding_size=4),
                 data=dict(num_train_clients=120, num_words=400),
                 pretrain_batch=8, rounds_per_eval=1, num_eval_examples=50,
                 restart_warmup=1, restart_frequency=2)
  return Scale(rounds=200, noise_multiplier=0.5,
               model=dict(vocab_size=1000, latent_size=96, embedding_size=48),
               data=dict(num_train_clients=3000, num_words=4000),
               pretrain_batch=64, rounds_per_eval=10, num_eval_examples=2000,
               restart_warmup=40, restart_frequency=80)


class Runner:
  """Trains (or reuses) runs in this process on one generated database."""

  def __init__(self, root: str, scale: Scale, corpus_sentences: int,
               cache_dir: Optional[str] = None):
    # TensorFlow only when a curve is trained (the plot-only path needs none).
    # pylint: disable=g-import-not-at-top
    from dpftrl_tff.data import stackoverflow
    from dpftrl_tff import tff_compat
    # pylint: enable=g-import-not-at-top
    tff_compat.install()
    self.root, self.scale = root, scale
    self.corpus_sentences = corpus_sentences
    self.real_text = cache_dir is not None
    if self.real_text:
      self.cache_dir, self.generated = cache_dir, None
    else:
      self.cache_dir = os.path.join(root, 'data')
      self.generated = synthetic.ensure_generated(self.cache_dir, seed=0,
                                                  **scale.data)
    self.train_data, self.heldout, _ = stackoverflow.load_stackoverflow(self.cache_dir)
    self.vocab = stackoverflow.load_vocab(self.cache_dir, scale.model['vocab_size'])
    self.description = stackoverflow.describe(
        self.cache_dir, self.vocab,
        num_train_clients=len(self.train_data.client_ids),
        generated=self.generated)

  def config(self, **overrides) -> config_lib.TrainConfig:
    s = self.scale
    values = dict(total_rounds=s.rounds, clients_per_round=20, client_lr=1.0,
                  server_lr=1.0, server_momentum=0.9, client_batch_size=8,
                  max_elements_per_client=32, aggregator='dp_ftrl',
                  noise_multiplier=s.noise_multiplier, clip_norm=0.5,
                  rounds_per_eval=s.rounds_per_eval,
                  num_eval_examples=s.num_eval_examples,
                  rounds_per_checkpoint=max(1, s.rounds // 4), **s.model)
    values.update(s.extra)
    values.update(overrides)
    return config_lib.TrainConfig(**values)

  def train(self, name: str, config) -> dict:
    # TensorFlow only when a curve is trained (the plot-only path needs none).
    from dpftrl_tff.run import training  # pylint: disable=g-import-not-at-top
    print(f'--- {name}', flush=True)
    out = os.path.join(self.root, name)
    summary = training.train(config, train_data=self.train_data,
                             eval_data=self.heldout, vocab=self.vocab,
                             output_dir=out,
                             data_description=self.description)
    return dict(summary, clip_rows=_clip_rows(out),
                eval_curve=run_directory.read_metric(out))

  def pretrain(self, steps: int, seed: int) -> str:
    # TensorFlow only when a curve is trained (the plot-only path needs none).
    # pylint: disable=g-import-not-at-top
    from dpftrl_tff.run import learning_process
    from dpftrl_tff import pretraining
    from dpftrl_tff.data import public_corpus
    # pylint: enable=g-import-not-at-top
    out = os.path.join(self.root, f'pretrained_{steps}_seed{seed}')
    if self.real_text:   # The corpus's own documentation.
      builder = public_corpus.public_text_builder(self.cache_dir)
    else:
      builder = public_corpus.embedded_builder(
          os.path.join(self.root, 'tfds'), language_seed=0,
          num_words=self.scale.data['num_words'],
          num_sentences=self.corpus_sentences)
    print(f'--- pretraining {steps} steps, seed {seed}', flush=True)
    pretraining.pretrain(
        self.config(seed=seed), pretraining.PretrainConfig(
            steps=steps, batch_size=self.scale.pretrain_batch,
            steps_per_checkpoint=max(1, steps // 4),
            steps_per_eval=max(1, steps // 4), seed=seed),
        sentences=public_corpus.sentences(builder), vocab=self.vocab,
        output_dir=out, corpus=public_corpus.corpus_description(builder),
        vocab_source=self.cache_dir,
        build_model=learning_process.build_keras_model)
    return out


def _clip_rows(run_path: str):
  """The adaptive clip columns of metrics.csv, at the rounds that have them."""
  rounds, in_force = run_directory.read_metric(run_path, 'clip_norm_in_force')
  _, estimate = run_directory.read_metric(run_path, 'clip_norm_estimate')
  return [dict(round=r, clip_norm_in_force=c, clip_norm_estimate=e)
          for r, c, e in zip(rounds, in_force, estimate)]


def curve(summary):
  """(evaluated rounds, eval in-vocab accuracies) of a run."""
  return summary['eval_curve']


def rounds_to_target(summary, target: float):
  """The first evaluated round whose accuracy reaches `target`, or None."""
  for r, a in zip(*curve(summary)):
    if a >= target:
      return r
  return None


def _zcdp_at(config, rounds, num_clients):
  """zCDP of `rounds` rounds under the participation the run planned.

  min_sep_groups plans MinS and MaxP; uniform participation plans none, and
  the worst case (MinS 0) is used for every mechanism alike, so the
  comparison is like for like.
  """
  # TensorFlow only when a curve is trained (the plot-only path needs none).
  from dpftrl_tff.aggregators import registry  # pylint: disable=g-import-not-at-top
  planned = config.build_sampler(num_clients).planned(rounds)
  if planned is None:
    report = registry.get(config.aggregator).privacy(config, rounds, None, 0)
  else:
    report = registry.get(config.aggregator).privacy(
        config, rounds, planned['max_participation'],
        min(planned['min_separation'], rounds - 1))
  return None if report is None else report.zcdp


def _privacy_label(summary) -> str:
  """The run's own epsilon and the launch-equivalent one, labelled."""
  privacy = summary.get('privacy') or {}
  if not privacy:
    return 'no privacy'
  text = f'run eps {privacy["epsilon"]:.3g}'
  launch = privacy.get('launch_equivalent')
  if launch:
    text += f', launch-equivalent eps {launch["epsilon"]:.3g}'
  return text


def _band(curves):
  """(xs, mean, min, max) over seeds, at the rounds every seed evaluated."""
  common = sorted(set.intersection(*[set(xs) for xs, _ in curves]))
  values = np.array([[dict(zip(xs, ys))[x] for x in common]
                     for xs, ys in curves])
  return common, values.mean(0), values.min(0), values.max(0)


@dataclasses.dataclass(frozen=True)
class Study:
  """What every figure of one reproduction shares."""
  runner: Runner
  scale: Scale
  seeds: tuple
  out: str
  suffix: str        # Of the file names: '_git' and/or '_quick'.
  data_label: str

  def path(self, name: str) -> str:
    return os.path.join(self.out, f'utility_{name}{self.suffix}')


def train_figure_1a_runs(study: Study, main_steps: int) -> dict:
  """Fixed clip, fixed clip from pretrained weights and adaptive clip
  (Algorithm 1; trees restart, the new clip in force, at warmup + i
  frequency), for every seed: {(kind, seed): summary}."""
  runner, scale = study.runner, study.scale
  runs = {}
  for seed in study.seeds:
    runs[('fixed', seed)] = runner.train(
        f'fixed_seed{seed}', runner.config(seed=seed))
    weights = runner.pretrain(main_steps, seed)
    runs[('pretrained', seed)] = runner.train(
        f'pretrained{main_steps}_seed{seed}',
        runner.config(seed=seed, initial_weights=weights))
  for seed in study.seeds:
    runs[('adaptive', seed)] = runner.train(
        'adaptive_seed1' if seed == study.seeds[0] else f'adaptive_seed{seed}',
        runner.config(seed=seed, aggregator='dp_ftrl_adaptive',
                      initial_clip_norm=0.1,
                      restart_warmup=scale.restart_warmup,
                      restart_frequency=scale.restart_frequency))
  return runs


def figure_1a(study: Study, runs: dict, target: float):
  """Figure 1a (PNG, CSV) and the rounds to `target` with the zCDP spent by
  then (utility_targets CSV); returns the targets' rows."""
  runner, scale = study.runner, study.scale
  num_clients = len(runner.train_data.client_ids)
  rows, series, targets = [], [], []
  for kind in ('fixed', 'adaptive', 'pretrained'):
    summaries = [runs[(kind, seed)] for seed in study.seeds]
    xs, mean, low, high = _band([curve(x) for x in summaries])
    series.append((f'{kind} ({_privacy_label(summaries[0])})', xs,
                   100 * mean, 100 * low, 100 * high))
  for (kind, seed), summary in runs.items():
    xs, ys = curve(summary)
    rows += [dict(run=kind, seed=seed, round=x, eval_in_vocab_accuracy=y)
             for x, y in zip(xs, ys)]
    config = (runner.config(
        seed=seed, aggregator='dp_ftrl_adaptive',
        restart_warmup=scale.restart_warmup,
        restart_frequency=scale.restart_frequency) if kind == 'adaptive'
              else runner.config(seed=seed))
    reached = rounds_to_target(summary, target)
    targets.append(dict(run=kind, seed=seed, target_accuracy=target,
                        rounds_to_target=reached,
                        zcdp_at_target=(_zcdp_at(config, reached,
                                                 num_clients)
                                        if reached else None),
                        final_accuracy=ys[-1]))
  run_directory.write_csv_atomic(study.path('fig1a') + '.csv', rows)
  run_directory.write_csv_atomic(study.path('targets') + '.csv', targets)
  plotting.band_plot(
      study.path('fig1a') + '.png', series,
      title=f'DP-FTRL, z = {scale.noise_multiplier:g}, '
      f'{runner.config().clients_per_round} clients/round, '
      f'{study.data_label}\n'
      f'mean and min-max of {len(study.seeds)} seeds; eps at delta 1e-10',
      xlabel='round', ylabel='eval in-vocab accuracy (%)')
  return targets


def figure_1b(study: Study, adaptive: dict):
  """Figure 1b: the adaptive clip norm in force and its estimate."""
  clip_rows = adaptive['clip_rows']
  run_directory.write_csv_atomic(study.path('fig1b') + '.csv', clip_rows)
  plotting.line_plot(
      study.path('fig1b') + '.png',
      [('clip norm in force', [r['round'] for r in clip_rows],
        [r['clip_norm_in_force'] for r in clip_rows]),
       ('quantile estimate', [r['round'] for r in clip_rows],
        [r['clip_norm_estimate'] for r in clip_rows])],
      title='Adaptive clipping (Algorithm 1)', xlabel='round',
      ylabel='clip norm')


def report_goal_figure(study: Study, runs: dict, goals):
  """Sec. 2.2: report goal m in `goals` with z / m fixed, against rounds
  and against client updates processed (mean and min-max over the seeds);
  the fixed-clip runs serve for their own report goal."""
  runner, seeds = study.runner, study.seeds
  ratio = study.scale.noise_multiplier / 20
  goal_rows, by_round, by_updates = [], [], []
  for m in goals:
    curves, label = [], None
    for seed in seeds:
      if m == runner.config().clients_per_round:
        summary = runs[('fixed', seed)]   # The same run.
      else:
        # Seed 1 keeps its old run name, so earlier runs are reused.
        name = f'report_goal_{m}' + ('' if seed == seeds[0] else
                                     f'_seed{seed}')
        summary = runner.train(name, runner.config(
            seed=seed, clients_per_round=m, noise_multiplier=ratio * m))
      label = label or _privacy_label(summary)
      xs, ys = curve(summary)
      curves.append((xs, ys))
      goal_rows += [dict(report_goal=m, noise_multiplier=ratio * m,
                         seed=seed, round=x, client_updates=x * m,
                         eval_in_vocab_accuracy=y) for x, y in zip(xs, ys)]
    xs, mean, low, high = _band(curves)
    by_round.append((f'm = {m}, z = {ratio * m:g} ({label})', xs,
                     [100 * y for y in mean], [100 * y for y in low],
                     [100 * y for y in high]))
    by_updates.append((f'm = {m}', [x * m for x in xs],
                       [100 * y for y in mean], [100 * y for y in low],
                       [100 * y for y in high]))
  run_directory.write_csv_atomic(study.path('report_goal') + '.csv',
                                 goal_rows)
  plotting.panels_plot(
      study.path('report_goal') + '.png',
      [('eval in-vocab accuracy (%)', by_round, False),
       ('eval in-vocab accuracy (%)', by_updates, False)],
      xlabel='round (left) / client updates processed (right)',
      title=(f'Report goal with z / m = {ratio:g} fixed: mean and min-max '
             f'of {len(seeds)} seed' + ('s' if len(seeds) > 1 else '')))


def pretraining_figure(study: Study, runs: dict, pretrain_steps,
                        main_steps: int, target: float):
  """Sec. 2.3: rounds to the target against pretraining steps (every seed
  at 0 and at the most steps; the steps between: the first seed)."""
  runner, seeds = study.runner, study.seeds
  pre_rows = []
  for steps in pretrain_steps:
    for seed in (seeds if steps in (0, main_steps) else seeds[:1]):
      if steps == 0:
        summary = runs[('fixed', seed)]
      elif steps == main_steps:
        summary = runs[('pretrained', seed)]
      else:
        summary = runner.train(
            f'pretrained{steps}_seed{seed}', runner.config(
                seed=seed, initial_weights=runner.pretrain(steps, seed)))
      pre_rows.append(dict(pretrain_steps=steps, seed=seed,
                           rounds_to_target=rounds_to_target(summary, target),
                           final_accuracy=curve(summary)[1][-1]))
  run_directory.write_csv_atomic(study.path('pretraining') + '.csv',
                                 pre_rows)
  def per_seed(key, scale_by=1.0):
    return [(f'seed {seed}',
             [r['pretrain_steps'] for r in pre_rows if r['seed'] == seed],
             [scale_by * r[key] if r[key] is not None else np.nan
              for r in pre_rows if r['seed'] == seed]) for seed in seeds]
  # Markers, so that a seed with one point (or with a gap where a run did
  # not reach the target) still shows.
  plotting.panels_plot(
      study.path('pretraining') + '.png',
      [(f'rounds to {100 * target:.1f}% (gap: not reached)',
        per_seed('rounds_to_target'), False),
       ('final eval in-vocab accuracy (%)',
        per_seed('final_accuracy', 100.0), False)],
      xlabel='pretraining steps',
      title=f'Pretraining on public text, then DP-FTRL ({study.data_label})')


def adaptive_against_fixed(study: Study, runs: dict):
  """Rows (round, fixed mean, adaptive mean, adaptive - fixed) of the eval
  accuracy averaged over seeds, at a tenth, a quarter, half and all of the
  rounds (the evaluated round at or after each): does adaptive clipping
  catch up with the fixed clip given the rounds (the paper's Figure 1a)?"""
  means = {}
  for kind in ('fixed', 'adaptive'):
    xs, mean, _, _ = _band([curve(runs[(kind, seed)])
                            for seed in study.seeds])
    means[kind] = dict(zip(xs, mean))
  shared = sorted(set(means['fixed']) & set(means['adaptive']))
  rows = []
  for fraction in (0.1, 0.25, 0.5, 1.0):
    later = [x for x in shared if x >= fraction * study.scale.rounds]
    if later and (not rows or rows[-1][0] != later[0]):
      x = later[0]
      fixed, adaptive = means['fixed'][x], means['adaptive'][x]
      rows.append((x, fixed, adaptive, adaptive - fixed))
  return rows


def _percent(value, unit='%', sign=''):
  """An accuracy (a fraction) in percent, 2 decimals; 'not finite' for
  NaN or infinity (never shown as a number)."""
  return (f'{100 * value:{sign}.2f}{unit}' if np.isfinite(value) else
          'not finite')


def print_adaptive_against_fixed(study: Study, runs: dict):
  print(f'Adaptive against fixed clip, eval accuracy (mean over seeds '
        f'{", ".join(map(str, study.seeds))}):')
  for x, fixed, adaptive, gap in adaptive_against_fixed(study, runs):
    print(f'  round {x}: fixed {_percent(fixed)}, adaptive '
          f'{_percent(adaptive)} ({_percent(gap, " points", "+")})')


def target_line(target: dict, rounds: int) -> str:
  """One run's line of `print_findings`: when it reached the target
  accuracy and the rho-zCDP spent by then (4 significant digits)."""
  if target['rounds_to_target'] is None:
    reached = f'not reached in {rounds} rounds'
  else:
    zcdp = target['zcdp_at_target']
    reached = f'reached at round {target["rounds_to_target"]}' + (
        '' if zcdp is None else f' (rho-zCDP then {zcdp:.4g})')
  return (f'{target["run"]:10} seed {target["seed"]}: target {reached}, '
          f'final {_percent(target["final_accuracy"])}')


def print_findings(study: Study, runs: dict, targets, target: float,
                    main_steps: int):
  """Rounds to the target per run, and what pretraining saves per seed."""
  print(f'Target accuracy {100 * target:.2f}%.')
  for t in targets:
    print(f'  {target_line(t, study.scale.rounds)}')
  rounds = study.scale.rounds
  for seed in study.seeds:
    fixed = rounds_to_target(runs[('fixed', seed)], target)
    pre = rounds_to_target(runs[('pretrained', seed)], target)
    factor = (f'{fixed / pre:.2f}x' if fixed and pre else
              'n/a (a run did not reach the target)')
    print(f'  seed {seed}: pretraining ({main_steps} steps) reduces the '
          f'rounds to target from {fixed} to {pre}: {factor}')
    # The goal: the from-scratch run's final accuracy in at most half its
    # rounds.
    final = curve(runs[('fixed', seed)])[1][-1]
    reach = rounds_to_target(runs[('pretrained', seed)], final)
    print(f'  seed {seed}: the pretrained run reaches the from-scratch '
          f'final accuracy {100 * final:.2f}% at round {reach} of '
          f'{rounds} ('
          + ('at most half: yes' if reach is not None and
             reach <= rounds / 2 else 'at most half: no') + ')')
