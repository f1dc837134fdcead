"""One round's record: its metrics.csv row, the divergence checks, the
evaluation, the checkpoint and the progress line (`RoundRecorder`, called
by `loop.run_rounds` after every round of `training.train`)."""

import time
from typing import Any, Dict

import tree

from dpftrl_tff.aggregators import registry
from dpftrl_tff.run import divergence
from dpftrl_tff.run import evaluation
from dpftrl_tff.run import loop
from dpftrl_tff.run import progress


# metrics.png is drawn at a checkpoint once this long has passed since the
# run (or resumed run) started or last drew it, and always at its end:
# matplotlib takes about half a CPU-second a figure, and a figure of the
# first round alone shows nothing.
PLOT_EVERY_SECONDS = 60.0


def _short(value: float) -> str:
  """A loss for the progress line: 4 decimals, or 4 digits when huge."""
  return f'{value:.4f}' if abs(value) < 1e4 else f'{value:.4g}'


def round_row(config, result: loop.RoundResult, clip_in_force,
               canaries_in_cohort: int = 0):
  """The metrics.csv row of one round; returns (row, clip for next round).

  Canary clients (--canaries) train nothing, so they are not counted among
  the clients whose update TFF zeroed.
  """
  flat: Dict[str, float] = {}
  evaluation.flatten_metrics('', result.metrics, flat)
  train_metrics = result.metrics['client_work']['train']
  row: Dict[str, Any] = {
      'round': result.round_num + 1,
      'train_loss': float(train_metrics['loss']),
      'train_in_vocab_accuracy': float(train_metrics['in_vocab_accuracy']),
      'server_update_norm': result.update_norm,
      'round_seconds': result.seconds,
      'nonfinite_clients': divergence.nonfinite_clients(
          len(result.cohort) - canaries_in_cohort,
          train_metrics.get('num_clients')),
      'server_update_rejected': flat.get('finalizer/update_non_finite'),
  }
  for key, value in flat.items():
    if key.startswith('aggregator/'):
      row[key.replace('/', '_')] = value
    if key.endswith('dp_query_metrics/current_clip') or key.endswith(
        'dp_query_metrics/tree_agg_dpftrl_clip'):
      # TFF reports the clip in force after the round (for the next one).
      row['clip_norm_in_force'] = clip_in_force
      clip_in_force = value
    if key.endswith('dp_query_metrics/estimate_clip'):
      row['clip_norm_estimate'] = value
    for name in ('bits_per_parameter', 'rounding_retries',
                 'rounding_failures', 'integer_sum_bound', 'wraparounds',
                 'decode_error_l2'):
      if key.endswith('/' + name):
        row['secagg_' + name] = value
  if 'clip_norm_in_force' in row:
    row['clip_norm_next_round'] = clip_in_force
  if result.participation is not None:
    row.update(result.participation.as_row())
  return row, clip_in_force



class RoundRecorder:
  """What happens after every round of a run (`loop.run_rounds`' on_round).

  Keeps the clip in force (adaptive clipping reports the next round's),
  the last evaluation and the last round done (for `stop_note`).
  """

  def __init__(self, config, *, run_dir, writer, process, runner,
               evaluation_model, evaluator, probes, start_round: int,
               end_round: int, print_fn, progress_stream):
    self._config = config
    self._run_dir, self._writer = run_dir, writer
    self._process, self._runner = process, runner
    self._model, self._evaluator = evaluation_model, evaluator
    self._probes = probes
    self._end_round = end_round
    self._clip = registry.get(config.aggregator).initial_clip(config)
    if writer.rows and writer.rows[-1].get('clip_norm_next_round'):
      self._clip = float(writer.rows[-1]['clip_norm_next_round'])
    self._watch = divergence.ExplosionWatch(
        lambda message: print_fn(f'warning: {message}'),
        divergence.first_loss(writer.rows))
    self._bar = progress.Progress(
        config.total_rounds, start_round, stream=progress_stream,
        print_fn=None if print_fn is print else print_fn)
    self.last_eval: Dict[str, float] = {}
    self.last_done = start_round
    # time.monotonic() of the last metrics.png, or of this run's start.
    self._plotted_at = time.monotonic()

  def __call__(self, new_state, result: loop.RoundResult):
    config = self._config
    canaries = self._probes.canaries_in(result.cohort)
    row, self._clip = round_row(config, result, self._clip, canaries)
    done = result.round_num + 1
    try:
      divergence.check_round(
          done, train_loss=row['train_loss'],
          update_norm=result.update_norm,
          cohort_size=len(result.cohort) - canaries,
          nonfinite=row['nonfinite_clients'],
          server_rejected=row['server_update_rejected'],
          checkpoint_round=self._run_dir.latest_checkpoint_round())
    except divergence.DivergenceError:
      self._writer.write(row)   # The diverged round stays visible (as nan).
      raise
    self._watch.update(done, row['train_loss'])
    self._probes.record(row, result.cohort,
                        getattr(self._runner, 'last_statistic', None))
    evaluated = (done % config.rounds_per_eval == 0 or
                 done == config.total_rounds)
    if evaluated:
      self._process.get_model_weights(self._runner.materialize(new_state)
                                     ).assign_weights_to(self._model)
      self.last_eval = self._evaluator()
      row['eval_loss'] = self.last_eval['loss']
      row['eval_in_vocab_accuracy'] = self.last_eval['in_vocab_accuracy']
      row['eval_in_vocab_top3_accuracy'] = self.last_eval[
          'in_vocab_top3_accuracy']
    self._writer.write(row)
    if done % config.rounds_per_checkpoint == 0 or done == self._end_round:
      leaves = tree.flatten(self._runner.materialize(new_state))
      divergence.check_state(leaves, done)
      self._run_dir.save_checkpoint(leaves, done)
      self._plot(final=done == self._end_round)
    self.last_done = done
    eval_text = (f' eval_acc {row["eval_in_vocab_accuracy"]:.4f}'
                 if evaluated else '')
    self._bar.update(done, result.seconds,
                     f'loss {_short(row["train_loss"])} '
                     f'acc {row["train_in_vocab_accuracy"]:.4f}{eval_text}',
                     force=evaluated)

  def explosion(self):
    """`divergence.explosion` of the run's rows (resumed ones too)."""
    return divergence.explosion(self._writer.rows)

  def _plot(self, final: bool):
    now = time.monotonic()
    if final or now - self._plotted_at >= PLOT_EVERY_SECONDS:
      self._writer.plot()
      self._plotted_at = now

  def stop_note(self) -> str:
    checkpoint = self._run_dir.latest_checkpoint_round()
    kept = (f'it keeps its last checkpoint (round {checkpoint})' if
            checkpoint else 'it has no checkpoint yet')
    return (f'the run stopped after round {self.last_done} of '
            f'{self._config.total_rounds}; {kept}: re-run the same command '
            f'to resume.')

  def close(self):
    self._bar.close()
