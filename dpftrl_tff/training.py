"""Federated training of the CIFG LM: `train` orchestrates one run.

The TFF learning process (FedAvg with the mechanism's model-update
aggregation) comes from `learning_process`; `train` runs it: the run
directory (`run_directory`: identity check, lock, hparams, metrics,
checkpoints, summary), the round loop (`loop.run_rounds` with a
`participation` sampler), evaluation (`evaluation`), the privacy spent from
the run's own participation log (`run_privacy`) and the privacy report, and
the run's provenance. A resumed run ends with the same model as an
uninterrupted one: the cohort and client shuffling of round t are functions
of (seed, t), the model initializer is seeded, and the aggregator state
(the DP noise generator included) is checkpointed.
"""

import dataclasses
import datetime
import json
import os
from typing import Any, Callable, Dict, List, Optional

from absl import logging
import numpy as np
import tree

from dpftrl_tff import accounting
from dpftrl_tff import canaries as canaries_lib
from dpftrl_tff import config as config_lib
from dpftrl_tff import data
from dpftrl_tff import divergence
from dpftrl_tff import evaluation
from dpftrl_tff import learning_process
from dpftrl_tff import loop
from dpftrl_tff import participation
from dpftrl_tff import pretrained
from dpftrl_tff import privacy_report
from dpftrl_tff import progress
from dpftrl_tff import provenance
from dpftrl_tff import run_directory
from dpftrl_tff import run_privacy
from dpftrl_tff import runtime
from dpftrl_tff.aggregators import registry
from dpftrl_tff.remote import workers as workers_lib

TrainConfig = config_lib.TrainConfig
HPARAMS_FILE = run_directory.HPARAMS_FILE
METRICS_FILE = run_directory.METRICS_FILE
SUMMARY_FILE = run_directory.SUMMARY_FILE
FINAL_WEIGHTS_FILE = run_directory.FINAL_WEIGHTS_FILE

def _short(value: float) -> str:
  """A loss for the progress line: 4 decimals, or 4 digits when huge."""
  return f'{value:.4f}' if abs(value) < 1e4 else f'{value:.4g}'


def _round_row(config, result: loop.RoundResult, clip_in_force,
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


def _changed_learning_rates(config: TrainConfig,
                            previous: Optional[Dict]) -> Dict[str, List]:
  """{field: [old, new]} of the learning rates a resumed run changes."""
  if not previous:
    return {}
  return {f: [previous.get(f), getattr(config, f)]
          for f in config_lib.LEARNING_RATE_FIELDS
          if previous.get(f) is not None and
          previous.get(f) != getattr(config, f)}


def _set_changed_learning_rates(process, state, config: TrainConfig,
                                previous: Optional[Dict], start_round: int,
                                print_fn):
  """The checkpointed state with the learning rates of `config`.

  TFF keeps the optimizers' hyperparameters in the server state, so a
  checkpoint restores the old ones; with --allow_changed_learning_rates
  (checked by `train`) the new ones are set through the process's
  `set_hparams`.
  """
  changed = _changed_learning_rates(config, previous)
  if not changed:
    return state
  hparams = process.get_hparams(state)
  hparams['client_work']['learning_rate'] = config.client_lr
  hparams['finalizer']['learning_rate'] = config.server_lr
  hparams['finalizer']['momentum'] = config.server_momentum
  text = ', '.join(f'--{k} {old:g} -> {new:g}'
                   for k, (old, new) in changed.items())
  print_fn(f'Changed learning rates from round {start_round + 1} on: '
           f'{text} (--allow_changed_learning_rates; recorded in '
           f'{HPARAMS_FILE}).')
  return process.set_hparams(state, hparams)


def plan_blt(config: TrainConfig, num_clients: int):
  """Fills in the participation a dp_ftrl_blt run's BLT is optimized for.

  Unset --blt_min_separation becomes the participation model's guaranteed
  MinS (min_sep_groups; its MaxP too when --blt_max_participation is unset),
  otherwise the best separation N clients allow at report goal m,
  floor(N / m) - 1, at most T - 1. Deterministic, so a resumed run plans
  the same BLT.
  """
  if config.aggregator != 'dp_ftrl_blt' or config.blt_params is not None:
    return
  if config.blt_min_separation is not None:
    return
  # The plan does not depend on the seed, which may still be unset here
  # (it is drawn later, once the run directory is known).
  planned = dataclasses.replace(
      config, seed=0 if config.seed is None else config.seed).build_sampler(
          num_clients).planned(config.total_rounds)
  if planned is not None:
    min_sep = planned['min_separation']
    if config.blt_max_participation is None:
      config.blt_max_participation = planned['max_participation']
  else:
    min_sep = accounting.max_min_separation(num_clients,
                                            config.clients_per_round)
  config.blt_min_separation = int(min(min_sep, config.total_rounds - 1))


def _blt_file(run_dir) -> str:
  return run_dir.file('blt.json')


def _pin_saved_blt(config: TrainConfig, run_dir):
  """A resumed dp_ftrl_blt run keeps the BLT it started with (blt.json).

  An optimized BLT is taken from the file rather than optimized again (the
  same up to floating point); a given --blt_params must equal it.
  """
  path = _blt_file(run_dir)
  if config.aggregator != 'dp_ftrl_blt' or not os.path.exists(path):
    return
  with open(path) as f:
    saved = json.load(f)
  saved_blt = accounting.BLT.from_dict(
      {k: saved[k] for k in ('buf_decay', 'output_scale')}, source=path)
  if config.blt_params is None:
    registry.pin_blt(config, saved_blt)
    return
  blt = accounting.BLT.load(config.blt_params)
  if blt != saved_blt:
    raise run_directory.RunDirectoryError(
        f'{path} holds the BLT {saved_blt} this run started with, but '
        f'--blt_params={config.blt_params} is {blt}; resume with the same '
        f'BLT.')


def _record_blt(config: TrainConfig, run_dir, print_fn):
  """Writes the run's BLT and what it was optimized for to blt.json."""
  path = _blt_file(run_dir)
  optimized, blt = registry.optimized_blt(config)
  if not os.path.exists(path):
    value = (optimized.as_dict() if optimized is not None else
             dict(blt.as_dict(), source=os.path.abspath(config.blt_params)))
    run_directory.write_json_atomic(path, value)
  print_fn(f'BLT noise: {blt} (in {path}).')


def _choose_canaries(config: TrainConfig, num_clients: int
                     ) -> Optional[canaries_lib.Canaries]:
  """The run's canary clients (--canaries), a function of its seed."""
  if not config.canaries:
    return None
  clip = registry.get(config.aggregator).initial_clip(config)
  return canaries_lib.choose(
      config.canaries, seed=config.seed, num_clients=num_clients,
      norm=(canaries_lib.default_norm(clip) if config.canary_norm is None
            else config.canary_norm))


def _empirical_privacy(canary_run, weights, log, privacy, run_dir) -> Dict:
  """summary.json's `empirical_privacy` at the run's delta (the accounting
  default without DP) and empirical_privacy.png."""
  delta = privacy['delta'] if privacy else accounting.DEFAULT_DELTA
  indices = list(canary_run.canaries.client_indices)
  return canary_run.finish(
      [np.asarray(w) for w in weights], log.counts[indices], delta,
      plot_path=run_dir.file('empirical_privacy.png'),
      accounted_epsilon=privacy['epsilon'] if privacy else None)


def train(config: TrainConfig, *, train_data, eval_data, vocab: List[str],
          output_dir: str, data_description: Optional[Dict] = None,
          stop_after_round: Optional[int] = None,
          print_fn: Callable[[str], None] = print,
          progress_stream=None) -> Dict[str, Any]:
  """Runs, resumes or (when finished) reports a federated training run.

  The run's identity is `config` (up to `config_lib.resumable_fields()`)
  plus `data_description`: a directory holding another run, or this run on
  other data, is refused. A finished run is not run again: its summary is
  returned (with `already_finished`). `total_rounds` may be raised to extend
  a run, never lowered below the rounds it has run (its privacy is spent).

  Args:
    config: hyperparameters.
    train_data: tff ClientData of the training split.
    eval_data: tff ClientData of the evaluation split.
    vocab: the vocabulary (len == config.vocab_size or fewer words).
    output_dir: the run directory (`run_directory.RunDirectory`).
    data_description: what identifies the data (source, database, vocabulary
      fingerprint); written to hparams.json under "data".
    stop_after_round: stop (as if killed) once this many rounds are done;
      for tests of resumption.
    print_fn: where messages go; progress lines go to `progress_stream`
      (a terminal gets one line redrawn in place), or to `print_fn` when
      that is not the default `print`.
    progress_stream: stream of the progress line (default stdout).
  """
  config.validate(num_train_clients=len(train_data.client_ids))
  # Before anything else: a worker that is down fails the run now.
  workers_lib.check_reachable(workers_lib.parse_workers(config.workers))
  plan_blt(config, len(train_data.client_ids))
  learning_process.check_memory(config)
  if config.initial_weights is not None:
    # Part of the run's identity: other weights are another run.
    data_description = dict(
        data_description or {}, initial_weights=pretrained.check_compatible(
            config.initial_weights, vocab=vocab, config=config))
  run_dir = run_directory.RunDirectory(output_dir)
  with run_dir.lock():
    previous = run_dir.previous_hparams()
    summary = None
    if previous is not None:
      if config.seed is None:
        config.seed = previous.get('seed')
      current = dict(dataclasses.asdict(config),
                     data=data_description or {})
      resumable = config_lib.resumable_fields()
      if config.allow_changed_learning_rates:
        resumable += config_lib.LEARNING_RATE_FIELDS
      diffs = run_directory.identity_differences(previous, current,
                                                 resumable)
      if diffs:
        raise run_directory.RunDirectoryError(
            f'Output directory {output_dir} holds another run '
            f'({"; ".join(diffs)}); resume it with the same flags and data, '
            f'or choose another --experiment_name.')
      summary = run_dir.read_summary()
      rounds_done = max(run_dir.latest_checkpoint_round(),
                        (summary or {}).get('rounds', 0))
      if config.total_rounds < rounds_done:
        raise run_directory.RunDirectoryError(
            f'--total_rounds={config.total_rounds} is below the '
            f'{rounds_done} rounds the run in {output_dir} has already run: '
            f'its model and its privacy spent are those of {rounds_done} '
            f'rounds. Use --total_rounds >= {rounds_done}, or another '
            f'--experiment_name.')
      if (summary and summary.get('final_eval') and
          summary.get('rounds') == config.total_rounds):
        print_fn(f'{output_dir} is a finished run of {config.total_rounds} '
                 f'rounds; nothing to do (raise --total_rounds to extend '
                 f'it).')
        return dict(summary, already_finished=True)
    if config.seed is None:
      config.seed = config_lib.draw_seed()
    return _train_locked(config, run_dir, previous, train_data=train_data,
                         eval_data=eval_data, vocab=vocab,
                         data_description=data_description,
                         stop_after_round=stop_after_round,
                         print_fn=print_fn, progress_stream=progress_stream)


def _train_locked(config, run_dir, previous, *, train_data, eval_data, vocab,
                  data_description, stop_after_round, print_fn,
                  progress_stream):
  """`train` once the directory is locked and the run's identity checked."""
  preprocess = data.build_preprocess_fn(
      vocab, sequence_length=config.sequence_length,
      max_elements_per_client=config.max_elements_per_client,
      batch_size=config.client_batch_size,
      num_epochs=config.client_epochs_per_round,
      shuffle_buffer_size=config.shuffle_buffer_size)
  eval_dataset = data.build_eval_dataset(
      eval_data, vocab, num_examples=config.num_eval_examples,
      sequence_length=config.sequence_length)
  _pin_saved_blt(config, run_dir)
  chosen = _choose_canaries(config, len(train_data.client_ids))
  process = learning_process.build_learning_process(config, chosen)
  # Built after TFF has traced its graphs: Keras invalidates models made
  # before a tf.compat.v1 graph builds layers.
  eval_model = learning_process.build_keras_model(config)
  if config.initial_weights is not None:
    pretrained.assign(eval_model,
                      pretrained.load_weights(config.initial_weights),
                      config.initial_weights)
  state = learning_process.initial_state(process, config, eval_model)
  initial_trainable = process.get_model_weights(state).trainable
  evaluator = evaluation.Evaluator(eval_model, eval_dataset, config.vocab_size)
  start_round = 0
  if previous is not None:
    leaves, start_round = run_dir.load_checkpoint(tree.flatten(state),
                                                  warn=print_fn)
    if leaves is not None:
      state = tree.unflatten_as(state, leaves)
      print_fn(f'Resuming {run_dir.path} from round {start_round}.')
      state = _set_changed_learning_rates(process, state, config, previous,
                                          start_round, print_fn)
  canary_run = chosen and canaries_lib.CanaryRun(
      chosen, client_ids=list(train_data.client_ids),
      sequence_length=config.sequence_length,
      initial_weights=initial_trainable,
      weights_type=process.get_model_weights.type_signature.result,
      cosines_path=run_dir.file(canaries_lib.ROUND_COSINES_FILE),
      start_round=start_round)
  # TFF's workers build the cohort's datasets from their client round keys.
  by_client_id = learning_process.taking_client_ids(
      process, train_data, preprocess, canary_run and canary_run.mark)
  # Locally, the state stays in TFF's worker between rounds
  # (tff_compat.resident); with --workers, rounds run across them.
  runner = learning_process.build_runner(
      config, by_client_id or process, train_data=train_data,
      by_client_id=by_client_id is not None,
      database=(data_description or {}).get('database'), print_fn=print_fn,
      statistic=canary_run and canary_run.statistic)
  hparams = dict(dataclasses.asdict(config), data=data_description or {})
  hparams[run_directory.PROVENANCE_KEY] = (
      (previous or {}).get(run_directory.PROVENANCE_KEY, []) +
      [dict(provenance.provenance(), resumed_from_round=start_round,
            changed_learning_rates=_changed_learning_rates(config,
                                                           previous))])
  run_dir.claim(hparams)   # The run has started: the directory is its own.
  if config.aggregator == 'dp_ftrl_blt':
    _record_blt(config, run_dir, print_fn)

  client_ids = list(train_data.client_ids)
  sampler = config.build_sampler(len(client_ids))
  log = participation.ParticipationLog(len(client_ids))
  for r in range(start_round):   # Replayed: stateful models need it.
    log.record(r, sampler.sample(r))
  writer = run_directory.MetricsWriter(run_dir, start_round)

  shuffle = getattr(preprocess, 'shuffles', False)

  def client_data_fn(round_num, cohort):
    seed = participation.round_seed(config.seed, round_num) if shuffle else 0
    keys = [data.client_round_key(seed, c) for c in cohort]
    if canary_run:
      keys = canary_run.keys(keys, cohort)
    if by_client_id is not None:
      return keys
    return [data.build_client_dataset(train_data, preprocess, k,
                                      canary_run and canary_run.mark)
            for k in keys]

  clip_in_force = registry.get(config.aggregator).initial_clip(config)
  if writer.rows and writer.rows[-1].get('clip_norm_next_round'):
    clip_in_force = float(writer.rows[-1]['clip_norm_next_round'])
  last_eval: Dict[str, float] = {}
  watch = divergence.ExplosionWatch(
      lambda message: print_fn(f'warning: {message}'),
      divergence.first_loss(writer.rows))
  last_done = start_round
  end_round = config.total_rounds
  if stop_after_round is not None:
    end_round = min(end_round, stop_after_round)
  bar = progress.Progress(
      config.total_rounds, start_round, stream=progress_stream,
      print_fn=None if print_fn is print else print_fn)
  started = datetime.datetime.now()

  def on_round(new_state, result: loop.RoundResult):
    nonlocal clip_in_force, last_eval, last_done
    canaries_in_cohort = canary_run.count(result.cohort) if canary_run else 0
    row, clip_in_force = _round_row(config, result, clip_in_force,
                                    canaries_in_cohort)
    done = result.round_num + 1
    try:
      divergence.check_round(
          done, train_loss=row['train_loss'],
          update_norm=result.update_norm,
          cohort_size=len(result.cohort) - canaries_in_cohort,
          nonfinite=row['nonfinite_clients'],
          server_rejected=row['server_update_rejected'],
          checkpoint_round=run_dir.latest_checkpoint_round())
    except divergence.DivergenceError:
      writer.write(row)   # The diverged round stays visible (as nan).
      raise
    watch.update(done, row['train_loss'])
    if canary_run:
      canary_run.record(row, result.cohort, runner.last_statistic)
    evaluated = (done % config.rounds_per_eval == 0 or
                 done == config.total_rounds)
    if evaluated:
      process.get_model_weights(runner.materialize(new_state)
                               ).assign_weights_to(eval_model)
      last_eval = evaluator()
      row['eval_loss'] = last_eval['loss']
      row['eval_in_vocab_accuracy'] = last_eval['in_vocab_accuracy']
    writer.write(row)
    if done % config.rounds_per_checkpoint == 0 or done == end_round:
      leaves = tree.flatten(runner.materialize(new_state))
      divergence.check_state(leaves, done)
      run_dir.save_checkpoint(leaves, done)
      writer.plot()
    last_done = done
    eval_text = (f' eval_acc {row["eval_in_vocab_accuracy"]:.4f}'
                 if evaluated else '')
    bar.update(done, result.seconds,
               f'loss {_short(row["train_loss"])} '
               f'acc {row["train_in_vocab_accuracy"]:.4f}{eval_text}',
               force=evaluated)

  def stop_note():
    checkpoint = run_dir.latest_checkpoint_round()
    kept = (f'it keeps its last checkpoint (round {checkpoint})' if
            checkpoint else 'it has no checkpoint yet')
    return (f'the run stopped after round {last_done} of '
            f'{config.total_rounds}; {kept}: re-run the same command to '
            f'resume.')

  runtime.set_stop_note(stop_note)
  try:
    state = loop.run_rounds(
        runner=runner, sampler=sampler, client_ids=client_ids, log=log,
        client_data_fn=client_data_fn, state=state, start_round=start_round,
        end_round=end_round, on_round=on_round)
  except KeyboardInterrupt:
    raise KeyboardInterrupt(stop_note()) from None
  except workers_lib.WorkerError as e:
    done = int(writer.rows[-1]['round']) if writer.rows else start_round
    checkpoint = run_dir.latest_checkpoint_round()
    kept = (f'it keeps its last checkpoint (round {checkpoint})' if checkpoint
            else 'it has no checkpoint yet')
    raise workers_lib.WorkerError(
        f'{e} The run stopped after round {done}; {kept}: start the worker '
        f'again (or leave it out of --workers) and re-run the same command '
        f'to resume, or pass --on_worker_failure=continue to go on without '
        f'it.', e.workers) from None
  finally:
    runtime.set_stop_note(None)
    bar.close()
  weights = process.get_model_weights(runner.materialize(state)).trainable
  run_dir.write_final_weights(weights)
  summary = dict(rounds=end_round, total_rounds=config.total_rounds,
                 final_eval=last_eval,
                 unigram_baseline_accuracy=evaluator.unigram_baseline(),
                 privacy=run_privacy.privacy_spent(config, end_round, log,
                                                   sampler),
                 participation=dict(
                     sampler.describe(),
                     observed_max_participation=log.max_participation,
                     observed_min_separation=log.min_separation,
                     participations_histogram=log.histogram().tolist()),
                 seconds=(datetime.datetime.now() - started).total_seconds())
  if canary_run:
    summary['empirical_privacy'] = _empirical_privacy(
        canary_run, weights, log, summary['privacy'], run_dir)
  run_dir.write_summary(summary)
  run_directory.write_text_atomic(
      run_dir.file(privacy_report.FILE_NAME),
      privacy_report.for_run(summary, config, run_dir.path))
  logging.info('Summary: %s', summary)
  return summary
