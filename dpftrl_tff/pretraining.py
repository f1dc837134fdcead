"""Central (not federated, not private) pretraining of the CIFG LM.

Paper Sec. 2.3: pretraining on public text before DP federated fine-tuning
saves about a thousand rounds, so it buys privacy. The model is the
fine-tuning run's (`learning_process.build_keras_model`, separate input and
output embeddings unless --shared_embedding: the paper found tied embeddings
fine-tune badly) and its vocabulary is the fine-tuning task's, so its
weights start a federated run as they are (`pretrained.py`).

Training: Adam on the masked next-word cross entropy over batches of
sentences (public words outside the vocabulary map to OOV), the sentences
repeated and shuffled with a fixed seed. The output directory is a run
directory (lock, hparams identity, checkpoints every `steps_per_checkpoint`
steps holding the weights, the optimizer's slots and the step; a resumed
run skips the batches already seen and ends where an uninterrupted run
ends) plus `pretrained_weights.npz` and `pretrained.json`.
"""

import csv
import dataclasses
import datetime
import os
from typing import Callable, Dict, Optional, Sequence

import tensorflow as tf

from dpftrl_tff import checks
from dpftrl_tff import pretrained
from dpftrl_tff.data import stackoverflow
from dpftrl_tff.run import metrics as lm_metrics
from dpftrl_tff.run import progress
from dpftrl_tff.run import run_directory


@dataclasses.dataclass
class PretrainConfig:
  """Pretraining hyperparameters (the model sizes come from the TrainConfig)."""
  steps: int = 1000
  batch_size: int = 64
  learning_rate: float = 1e-3
  steps_per_checkpoint: int = 200
  steps_per_eval: int = 200
  shuffle_buffer_size: int = 10000
  seed: int = 0

  def validate(self):
    for name in ('steps', 'batch_size', 'steps_per_checkpoint',
                 'steps_per_eval'):
      checks.check_int(getattr(self, name), f'--{name}', minimum=1)
    checks.check_positive(self.learning_rate, '--learning_rate')
    checks.check_int(self.shuffle_buffer_size, '--shuffle_buffer_size',
                     minimum=1)
    checks.check_int(self.seed, '--seed', minimum=0)


METRICS_FILE = 'pretrain_metrics.csv'


def _read_rows(path: str, last_step: int):
  """The metrics rows of steps <= last_step already written (resume)."""
  if not os.path.isfile(path):
    return []
  with open(path, newline='', encoding='utf-8') as f:
    rows = []
    for row in csv.DictReader(f):
      if int(row['step']) > last_step:
        break
      rows.append({k: (int(v) if k == 'step' else float(v))
                   for k, v in row.items() if v not in ('', None)})
  return rows


def batches(sentences: tf.data.Dataset, vocab: Sequence[str], *,
            sequence_length: int, batch_size: int, shuffle_buffer_size: int,
            seed: int, repeat: bool = True) -> tf.data.Dataset:
  """(x, y) batches [B, L] of word ids from a dataset of sentences."""
  to_ids = stackoverflow.build_to_ids_fn(vocab, sequence_length)
  dataset = sentences.map(lambda s: {'tokens': s})
  if repeat:
    dataset = dataset.repeat().shuffle(shuffle_buffer_size, seed=seed,
                                       reshuffle_each_iteration=True)
  return dataset.map(to_ids).padded_batch(
      batch_size, padded_shapes=[sequence_length + 1]).map(
          lambda ids: (ids[:, :-1], ids[:, 1:]))


def evaluate(model, dataset, vocab_size: int) -> Dict[str, float]:
  loss = lm_metrics.MaskedCrossEntropy()
  accuracy = lm_metrics.InVocabAccuracy(vocab_size)
  top3 = lm_metrics.InVocabAccuracy(vocab_size, k=3)
  total, count = 0.0, 0
  for x, y in dataset:
    logits = model(x, training=False)
    total += float(loss(y, logits)) * int(x.shape[0])
    count += int(x.shape[0])
    accuracy.update_state(y, logits)
    top3.update_state(y, logits)
  return dict(loss=total / max(1, count),
              in_vocab_accuracy=float(accuracy.result()),
              in_vocab_top3_accuracy=float(top3.result()))


def pretrain(train_config, pretrain_config: PretrainConfig, *,
             sentences: tf.data.Dataset, vocab: Sequence[str],
             output_dir: str, corpus: Dict, vocab_source: str,
             eval_dataset: Optional[tf.data.Dataset] = None,
             build_model: Callable[..., tf.keras.Model],
             stop_after_step: Optional[int] = None,
             print_fn: Callable[[str], None] = print,
             progress_stream=None) -> Optional[Dict]:
  """Pretrains (or resumes, or reports a finished run); its metadata.

  Args:
    train_config: the fine-tuning run's TrainConfig (model sizes, seed).
    pretrain_config: steps, batch size, learning rate, checkpoints.
    sentences: the public corpus's sentences (`public_corpus.sentences`).
    vocab: the fine-tuning task's vocabulary.
    output_dir: the pretraining run directory.
    corpus: what identifies the corpus (recorded, and part of the identity).
    vocab_source: where the vocabulary came from (recorded).
    eval_dataset: (x, y) batches to evaluate on (e.g. the fine-tuning task's
      held-out split), every `steps_per_eval` steps and at the end.
    build_model: config -> a fresh Keras model
      (`learning_process.build_keras_model`).
    stop_after_step: stop (as if killed, after its checkpoint) once this
      many steps are done; returns None. For tests of resumption.
  """
  pretrain_config.validate()
  run_dir = run_directory.RunDirectory(output_dir)
  identity = dict(pretrain=dataclasses.asdict(pretrain_config),
                  model=pretrained.model_sizes(train_config),
                  model_seed=train_config.seed, corpus=corpus,
                  vocab_sha256=pretrained.vocab_sha256(vocab))
  with run_dir.lock():
    _claim(run_dir, identity, output_dir)
    model = build_model(train_config)
    optimizer = tf.keras.optimizers.Adam(pretrain_config.learning_rate)
    optimizer.build(model.trainable_variables)
    state = list(model.trainable_variables) + list(optimizer.variables)
    leaves, start = run_dir.load_checkpoint(
        [v.numpy() for v in state], warn=print_fn)
    if leaves is not None:
      if start >= pretrain_config.steps and os.path.isfile(
          run_dir.file(pretrained.METADATA_FILE)):
        print_fn(f'{output_dir} is a finished pretraining of {start} steps; '
                 f'nothing to do.')
        return pretrained.read_metadata(output_dir, '--output_dir')
      for variable, value in zip(state, leaves):
        variable.assign(value)
      print_fn(f'Resuming {output_dir} from step {start}.')
    dataset = batches(sentences, vocab,
                      sequence_length=train_config.sequence_length,
                      batch_size=pretrain_config.batch_size,
                      shuffle_buffer_size=pretrain_config.shuffle_buffer_size,
                      seed=pretrain_config.seed).skip(start)
    end = pretrain_config.steps
    if stop_after_step is not None:
      end = min(end, stop_after_step)
    started = datetime.datetime.now()
    last_eval = _train_steps(
        model, optimizer, state, dataset, run_dir=run_dir, start=start,
        end=end, pretrain_config=pretrain_config,
        eval_dataset=eval_dataset, vocab_size=train_config.vocab_size,
        print_fn=print_fn, progress_stream=progress_stream)
    if end < pretrain_config.steps:
      return None
    metadata = dict(
        model=pretrained.model_sizes(train_config),
        vocab_sha256=pretrained.vocab_sha256(vocab), vocab_words=len(vocab),
        vocab_source=vocab_source, corpus=corpus,
        steps=pretrain_config.steps, pretrain=dataclasses.asdict(
            pretrain_config),
        final_eval=last_eval or None,
        seconds_this_session=(datetime.datetime.now() -
                              started).total_seconds())
    pretrained.save(output_dir, [v.numpy() for v in model.trainable_weights],
                    metadata)
    return metadata


def _claim(run_dir, identity: Dict, output_dir: str):
  """Claims `run_dir` for `identity`, or refuses another pretraining's."""
  previous = run_dir.previous_hparams()
  if previous is not None:
    diffs = run_directory.identity_differences(previous, identity, ())
    if diffs:
      raise run_directory.RunDirectoryError(
          f'{output_dir} holds another pretraining ({"; ".join(diffs)}); '
          f'use the same flags or another --output_dir.')
  run_dir.claim(identity)


def _train_steps(model, optimizer, state, dataset, *, run_dir, start: int,
                 end: int, pretrain_config: PretrainConfig, eval_dataset,
                 vocab_size: int, print_fn, progress_stream) -> Dict:
  """Steps start+1..end: trains, evaluates, checkpoints `state` and writes
  the metrics; the last evaluation (empty if none). Raises ValueError when
  the corpus runs out first."""
  loss_fn = lm_metrics.MaskedCrossEntropy()

  @tf.function(autograph=False)   # No Python control flow on tensors.
  def train_step(x, y):
    with tf.GradientTape() as tape:
      loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  bar = progress.Progress(pretrain_config.steps, start,
                          stream=progress_stream, unit='step',
                          print_fn=None if print_fn is print else print_fn)
  metrics_path = run_dir.file(METRICS_FILE)
  rows, last_eval = _read_rows(metrics_path, start), {}
  step = start
  try:
    for x, y in dataset.take(max(0, end - start)):
      tick = datetime.datetime.now()
      loss = float(train_step(x, y))
      step += 1
      row = dict(step=step, train_loss=loss)
      evaluated = eval_dataset is not None and (
          step % pretrain_config.steps_per_eval == 0 or
          step == pretrain_config.steps)
      if evaluated:
        last_eval = evaluate(model, eval_dataset, vocab_size)
        row.update(eval_loss=last_eval['loss'],
                   eval_in_vocab_accuracy=last_eval['in_vocab_accuracy'],
                   eval_in_vocab_top3_accuracy=last_eval[
                       'in_vocab_top3_accuracy'])
      rows.append(row)
      if step % pretrain_config.steps_per_checkpoint == 0 or step == end:
        run_dir.save_checkpoint([v.numpy() for v in state], step)
        # With its checkpoint: a kill keeps the loss history up to it.
        run_directory.write_csv_atomic(metrics_path, rows)
      eval_text = (f' eval_acc {last_eval["in_vocab_accuracy"]:.4f}'
                   if evaluated else '')
      bar.update(step, (datetime.datetime.now() - tick).total_seconds(),
                 f'loss {loss:.4f}{eval_text}', force=evaluated)
  finally:
    bar.close()
  if rows:
    run_directory.write_csv_atomic(metrics_path, rows)
  if step < end:
    raise ValueError(f'The corpus ran out after {step} steps.')
  return last_eval
