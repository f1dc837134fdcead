"""Federated training of the CIFG LM: `train` orchestrates one run.

The TFF learning process (FedAvg with the mechanism's model-update
aggregation) comes from `learning_process`; `train` runs it: the run
directory (`run_directory`: identity check, lock, hparams, metrics,
checkpoints, summary), the round loop (`loop.run_rounds` with a
`participation` sampler; after each round `round_record.RoundRecorder`),
the empirical privacy probes (`probes`: canaries and canary phrases),
evaluation (`evaluation`), the privacy spent from
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
import tree

from dpftrl_tff import participation
from dpftrl_tff import pretrained
from dpftrl_tff import runtime
from dpftrl_tff.aggregators import registry
from dpftrl_tff.data import stackoverflow
from dpftrl_tff.empirical import canaries as canaries_lib
from dpftrl_tff.empirical import probes as probes_lib
from dpftrl_tff.privacy import privacy_report
from dpftrl_tff.privacy import run_privacy
from dpftrl_tff.remote import workers as workers_lib
from dpftrl_tff.run import config as config_lib
from dpftrl_tff.run import evaluation
from dpftrl_tff.run import learning_process
from dpftrl_tff.run import loop
from dpftrl_tff.run import provenance
from dpftrl_tff.run import round_record
from dpftrl_tff.run import run_directory

TrainConfig = config_lib.TrainConfig
HPARAMS_FILE = run_directory.HPARAMS_FILE
METRICS_FILE = run_directory.METRICS_FILE
SUMMARY_FILE = run_directory.SUMMARY_FILE
FINAL_WEIGHTS_FILE = run_directory.FINAL_WEIGHTS_FILE

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


def _run_parameters(config: TrainConfig):
  """The mechanism's `mechanisms.base.RunParameters`, or None."""
  return registry.get(config.aggregator).run_parameters


def _restore_run_parameters(config: TrainConfig, run_dir) -> TrainConfig:
  """`config` with the run-time parameters its run directory keeps."""
  parameters = _run_parameters(config)
  if parameters is None:
    return config
  path = run_dir.file(parameters.file_name)
  if not os.path.exists(path):
    return config
  with open(path) as f:
    saved = json.load(f)
  try:
    return parameters.restore(config, saved, path)
  except ValueError as e:
    raise run_directory.RunDirectoryError(str(e)) from None


def _record_run_parameters(config: TrainConfig, run_dir, print_fn):
  """Writes the mechanism's run-time parameters (once) and names them."""
  parameters = _run_parameters(config)
  if parameters is None:
    return
  path = run_dir.file(parameters.file_name)
  if not os.path.exists(path):
    run_directory.write_json_atomic(path, parameters.contents(config))
  print_fn(parameters.describe(config, path))


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
  given = config
  config, data_description = _prepare(config, train_data, vocab,
                                      data_description)
  run_dir = run_directory.RunDirectory(output_dir)
  try:
    with run_dir.lock():
      return _train_in_directory(
          given, config, run_dir, train_data=train_data,
          eval_data=eval_data, vocab=vocab,
          data_description=data_description,
          stop_after_round=stop_after_round, print_fn=print_fn,
          progress_stream=progress_stream)
  except run_directory.ReadOnlyRunDirectory as e:   # Raised by lock() only.
    return _finished_read_only(given, config, run_dir, data_description,
                               print_fn, e)


def _train_in_directory(given, config, run_dir, *, train_data, eval_data,
                        vocab, data_description, stop_after_round, print_fn,
                        progress_stream):
  """`train` once the run directory is locked."""
  previous = run_dir.previous_hparams()
  if previous is not None:
    config, finished = _resumed(given, config, run_dir, previous,
                                data_description, print_fn,
                                'raise --total_rounds to extend it')
    if finished is not None:
      return finished
  if config.seed is None:
    config = dataclasses.replace(config, seed=config_lib.draw_seed())
  config = _restore_run_parameters(config, run_dir)
  return _train_locked(config, run_dir, previous, train_data=train_data,
                       eval_data=eval_data, vocab=vocab,
                       data_description=data_description,
                       stop_after_round=stop_after_round,
                       print_fn=print_fn, progress_stream=progress_stream)


def _prepare(config: TrainConfig, train_data, vocab, data_description):
  """Checks that fail before the run directory is touched; the config with
  the mechanism's planned parameters and the data with the initial weights
  (both part of the run's identity)."""
  config.check_data(len(train_data.client_ids))
  # Before anything else: a worker that is down fails the run now.
  workers_lib.check_reachable(workers_lib.parse_workers(config.workers))
  # What the mechanism plans is recorded in hparams.json.
  config = registry.get(config.aggregator).planned(
      config, len(train_data.client_ids))
  learning_process.check_memory(config)
  if config.initial_weights is not None:
    # Part of the run's identity: other weights are another run.
    data_description = dict(
        data_description or {}, initial_weights=pretrained.check_compatible(
            config.initial_weights, vocab=vocab, config=config))
  return config, data_description


def _finished_read_only(given, config, run_dir, data_description,
                        print_fn, error):
  """The summary of a finished run in a directory that cannot be written
  (nothing is written, and nothing can write there, so no lock is
  needed); otherwise `error`."""
  previous = run_dir.previous_hparams()
  if previous is None:
    raise error
  _, finished = _resumed(given, config, run_dir, previous, data_description,
                         print_fn, 'on storage that cannot be written; '
                         'nothing written')
  if finished is None:
    raise error
  return finished


def _resumed(given, config, run_dir, previous, data_description, print_fn,
             finished_note: str):
  """(config of the run `previous` describes, with what it planned at its
  start; its summary marked `already_finished` when it is finished, said
  with `finished_note`, else None)."""
  config = _keep_planned(given, config, previous, print_fn)
  config, finished = _check_resumable(config, run_dir, previous,
                                      data_description)
  if finished is None:
    return config, None
  print_fn(f'{run_dir.path} is a finished run of {config.total_rounds} '
           f'rounds; nothing to do ({finished_note}).')
  finished = dict(finished, already_finished=True)
  # The launch flags may differ from the run's (they are not part of its
  # identity): the launch-equivalent figure is of the ones given now.
  for key in ('privacy', run_privacy.UNPREDICTABLE_NOISE_KEY):
    if finished.get(key):
      finished[key] = dict(finished[key], launch_equivalent=(
          run_privacy.launch_equivalent_privacy(
              config, finished[key]['rounds'])))
  return config, finished


def _keep_planned(given: TrainConfig, planned: TrainConfig,
                  previous: Dict, print_fn) -> TrainConfig:
  """`planned` with the values the mechanism planned when the run started.

  What a mechanism plans may depend on --total_rounds (a BLT's MinS is at
  most T - 1), so extending a run would plan other values and look like
  another run; the run keeps what it started with (its blt.json holds the
  BLT made for them). Only values the user did not give are kept.
  """
  kept = {}
  for field in config_lib.setting_fields():
    name = field.name
    if (getattr(given, name) != getattr(planned, name) and
        name in previous and previous[name] != getattr(planned, name)):
      kept[name] = previous[name]
  if not kept:
    return planned
  print_fn('Resuming with what the run planned at its start: ' +
           ', '.join(f'{k}={v}' for k, v in kept.items()) + '.')
  return dataclasses.replace(planned, **kept)


def _check_resumable(config: TrainConfig, run_dir, previous: Dict,
                     data_description):
  """(config with the run's seed, its summary if it is finished) for the run
  `previous` describes; RunDirectoryError if `config` is another run."""
  if config.seed is None:
    config = dataclasses.replace(config, seed=previous.get('seed'))
  current = dict(config_lib.hparams(config), data=data_description or {})
  resumable = config_lib.resumable_fields()
  if config.allow_changed_learning_rates:
    resumable += config_lib.LEARNING_RATE_FIELDS
  diffs = run_directory.identity_differences(previous, current, resumable)
  if diffs:
    raise run_directory.RunDirectoryError(
        f'Output directory {run_dir.path} holds another run '
        f'({"; ".join(diffs)}); resume it with the same flags and data, '
        f'or choose another --experiment_name.')
  summary = run_dir.read_summary()
  rounds_done = max(run_dir.latest_checkpoint_round(),
                    (summary or {}).get('rounds', 0))
  if config.total_rounds < rounds_done:
    raise run_directory.RunDirectoryError(
        f'--total_rounds={config.total_rounds} is below the '
        f'{rounds_done} rounds the run in {run_dir.path} has already run: '
        f'its model and its privacy spent are those of {rounds_done} '
        f'rounds. Use --total_rounds >= {rounds_done}, or another '
        f'--experiment_name.')
  if (summary and summary.get('final_eval') and
      summary.get('rounds') == config.total_rounds):
    return config, summary
  return config, None


@dataclasses.dataclass
class _Run:
  """What `_train_locked` builds before the first round."""
  process: Any
  runner: Any
  state: Any
  start_round: int
  eval_model: Any
  evaluator: evaluation.Evaluator
  probes: probes_lib.Probes
  client_data_fn: Callable[[int, List[str]], List[Any]]


def _train_locked(config, run_dir, previous, *, train_data, eval_data, vocab,
                  data_description, stop_after_round, print_fn,
                  progress_stream):
  """`train` once the directory is locked and the run's identity checked."""
  run = _build_run(config, run_dir, previous, train_data=train_data,
                   eval_data=eval_data, vocab=vocab,
                   data_description=data_description, print_fn=print_fn)
  hparams = dict(config_lib.hparams(config), data=data_description or {})
  hparams[run_directory.PROVENANCE_KEY] = (
      (previous or {}).get(run_directory.PROVENANCE_KEY, []) +
      [dict(provenance.provenance(), resumed_from_round=run.start_round,
            changed_learning_rates=_changed_learning_rates(config,
                                                           previous))])
  run_dir.claim(hparams)   # The run has started: the directory is its own.
  _record_run_parameters(config, run_dir, print_fn)

  client_ids = list(train_data.client_ids)
  sampler = config.build_sampler(len(client_ids))
  log = participation.ParticipationLog(len(client_ids))
  for r in range(run.start_round):   # Replayed: stateful models need it.
    log.record(r, sampler.sample(r))
  end_round = config.total_rounds
  if stop_after_round is not None:
    end_round = min(end_round, stop_after_round)
  writer = run_directory.MetricsWriter(run_dir, run.start_round)
  recorder = round_record.RoundRecorder(
      config, run_dir=run_dir, writer=writer, process=run.process,
      runner=run.runner, evaluation_model=run.eval_model,
      evaluator=run.evaluator, probes=run.probes,
      start_round=run.start_round, end_round=end_round, print_fn=print_fn,
      progress_stream=progress_stream)
  started = datetime.datetime.now()
  state = _run_rounds(run, run_dir, recorder, writer, sampler=sampler,
                      client_ids=client_ids, log=log, end_round=end_round)
  return _finish(config, run_dir, run, state, recorder=recorder, log=log,
                 sampler=sampler, end_round=end_round,
                 seconds=(datetime.datetime.now() - started).total_seconds())


def _build_run(config, run_dir, previous, *, train_data, eval_data, vocab,
               data_description, print_fn) -> _Run:
  """The process, its (restored) state, evaluation, probes and runner."""
  preprocess = stackoverflow.build_preprocess_fn(
      vocab, sequence_length=config.sequence_length,
      max_elements_per_client=config.max_elements_per_client,
      batch_size=config.client_batch_size,
      num_epochs=config.client_epochs_per_round,
      shuffle_buffer_size=config.shuffle_buffer_size)
  eval_dataset = stackoverflow.build_eval_dataset(
      eval_data, vocab, num_examples=config.num_eval_examples,
      sequence_length=config.sequence_length,
      per_client=config.eval_sentences_per_author)
  chosen = probes_lib.choose_canaries(config, len(train_data.client_ids))
  process = learning_process.build_learning_process(config, chosen)
  # Built after TFF has traced its graphs: Keras invalidates models made
  # before a tf.compat.v1 graph builds layers.
  eval_model = learning_process.build_keras_model(config)
  if config.initial_weights is not None:
    pretrained.assign(eval_model,
                      pretrained.load_weights(config.initial_weights),
                      config.initial_weights)
  state = learning_process.initial_state(process, config, eval_model)
  # theta_0 for the canaries' final-model statistic.
  initial_trainable = (process.get_model_weights(state).trainable
                       if chosen else None)
  evaluator = evaluation.Evaluator(eval_model, eval_dataset, config.vocab_size)
  state, start_round = _restore_checkpoint(config, run_dir, previous,
                                           process, state, print_fn)
  probes = probes_lib.Probes(
      config, chosen, client_ids=train_data.client_ids, vocab=vocab,
      initial_weights=initial_trainable,
      weights_type=process.get_model_weights.type_signature.result,
      cosines_path=run_dir.file(canaries_lib.ROUND_COSINES_FILE),
      start_round=start_round)
  # TFF's workers build the cohort's datasets from their client round keys.
  by_client_id = learning_process.taking_client_ids(
      process, train_data, preprocess, probes.mark)
  # Locally, the state stays in TFF's worker between rounds
  # (tff_compat.resident); with --workers, rounds run across them.
  runner = learning_process.build_runner(
      config, by_client_id or process, train_data=train_data,
      by_client_id=by_client_id is not None,
      database=(data_description or {}).get('database'), print_fn=print_fn,
      statistic=probes.statistic)
  shuffle = getattr(preprocess, 'shuffles', False)

  def client_data_fn(round_num, cohort):
    seed = participation.round_seed(config.seed, round_num) if shuffle else 0
    keys = probes.keys([stackoverflow.client_round_key(seed, c) for c in cohort],
                       cohort)
    if by_client_id is not None:
      return keys
    return [stackoverflow.build_client_dataset(train_data, preprocess, k, probes.mark)
            for k in keys]

  return _Run(process=process, runner=runner, state=state,
              start_round=start_round, eval_model=eval_model,
              evaluator=evaluator, probes=probes,
              client_data_fn=client_data_fn)


def _restore_checkpoint(config, run_dir, previous, process, state, print_fn):
  """(state, start round): the run's last checkpoint, or (state, 0)."""
  if previous is None:
    return state, 0
  leaves, start_round = run_dir.load_checkpoint(tree.flatten(state),
                                                warn=print_fn)
  if leaves is None:
    return state, start_round
  state = tree.unflatten_as(state, leaves)
  print_fn(f'Resuming {run_dir.path} from round {start_round}.')
  return _set_changed_learning_rates(process, state, config, previous,
                                     start_round, print_fn), start_round


def _stopped(run: _Run, run_dir, writer):
  """(last round done, what the run keeps) of a run stopped by a failure."""
  done = int(writer.rows[-1]['round']) if writer.rows else run.start_round
  checkpoint = run_dir.latest_checkpoint_round()
  kept = (f'it keeps its last checkpoint (round {checkpoint})' if checkpoint
          else 'it has no checkpoint yet')
  return done, kept


def _run_rounds(run: _Run, run_dir, recorder, writer, *, sampler,
                client_ids, log, end_round):
  """The rounds from `run.start_round` to `end_round`; the final state."""
  stop_note = recorder.stop_note
  runtime.set_stop_note(stop_note)
  try:
    return loop.run_rounds(
        runner=run.runner, sampler=sampler, client_ids=client_ids, log=log,
        client_data_fn=run.client_data_fn, state=run.state,
        start_round=run.start_round, end_round=end_round, on_round=recorder)
  except KeyboardInterrupt:
    raise KeyboardInterrupt(stop_note()) from None
  except workers_lib.WorkerError as e:
    done, kept = _stopped(run, run_dir, writer)
    raise workers_lib.WorkerError(
        f'{e} The run stopped after round {done}; {kept}: start the worker '
        f'again (or leave it out of --workers) and re-run the same command '
        f'to resume, or pass --on_worker_failure=continue to go on without '
        f'it.', e.workers) from None
  except Exception as e:  # pylint: disable=broad-except
    reason = runtime.lost_worker(e)
    if reason is None:
      raise
    done, kept = _stopped(run, run_dir, writer)
    raise runtime.WorkerLost(
        f'TFF\'s worker_binary on this machine stopped during round '
        f'{done + 1} ({reason}): a failure of TFF\'s C++ runtime, not of '
        f'this run\'s settings. The run stopped after round {done}; {kept}: '
        f're-run the same command to resume.') from e
  finally:
    runtime.set_stop_note(None)
    recorder.close()


def _finish(config, run_dir, run: _Run, state, *, recorder, log, sampler,
            end_round, seconds) -> Dict[str, Any]:
  """Final weights, summary.json (with the probes' figures) and the
  privacy report; returns the summary."""
  process, runner = run.process, run.runner
  weights = process.get_model_weights(runner.materialize(state)).trainable
  run_dir.write_final_weights(weights)
  summary = dict(rounds=end_round, total_rounds=config.total_rounds,
                 clients_per_round=config.clients_per_round,
                 final_eval=recorder.last_eval,
                 training_loss_explosion=recorder.explosion(),
                 unigram_baseline_accuracy=run.evaluator.unigram_baseline(),
                 unigram_top3_baseline_accuracy=(
                     run.evaluator.unigram_top3_baseline()),
                 **run_privacy.split_by_noise_seed(
                     config, run_privacy.privacy_spent(config, end_round,
                                                       log, sampler)),
                 vocabulary=privacy_report.vocabulary_summary(
                     (run_dir.previous_hparams() or {}).get('data')),
                 participation=dict(
                     sampler.describe(),
                     observed_max_participation=log.max_participation,
                     observed_min_separation=log.min_separation,
                     participations_histogram=log.histogram().tolist()),
                 seconds=seconds)

  def final_model():
    process.get_model_weights(runner.materialize(state)).assign_weights_to(
        run.eval_model)
    return run.eval_model

  run.probes.finish(summary, final_weights=weights, counts=log.counts,
                    plot_path=run_dir.file('empirical_privacy.png'),
                    final_model=final_model)
  run_dir.write_summary(summary)
  run_directory.write_text_atomic(
      run_dir.file(privacy_report.FILE_NAME),
      privacy_report.for_run(summary, config, run_dir.path))
  logging.info('Summary: %s', summary)
  return summary
