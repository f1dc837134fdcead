"""Evaluation of the model on held-out data, and the flattening of TFF's
nested metrics into metrics.csv columns."""

from typing import Dict

import numpy as np
import tensorflow as tf

from dpftrl_tff import metrics as lm_metrics


def flatten_metrics(prefix: str, value, out: Dict[str, float]):
  """Adds the numbers of a nested metrics structure to `out`, keyed by
  their path joined with '/' (metrics.csv's columns)."""
  if isinstance(value, dict) or hasattr(value, 'items'):
    for k, v in value.items():
      flatten_metrics(f'{prefix}/{k}' if prefix else str(k), v, out)
  elif isinstance(value, (list, tuple)):
    for i, v in enumerate(value):
      flatten_metrics(f'{prefix}/{i}', v, out)
  else:
    arr = np.asarray(value)
    if arr.size == 1 and np.issubdtype(arr.dtype, np.number):
      out[prefix] = float(arr.reshape(()))


class Evaluator:
  """Loss and in-vocab accuracy of a Keras model on a fixed dataset.

  An explicit loop (not `Model.evaluate`, whose v1 variant Keras may swap in
  once TFF has built graphs) over pre-batched (x, y).
  """

  def __init__(self, keras_model: tf.keras.Model, dataset, vocab_size: int):
    self.model = keras_model
    self.dataset = dataset
    self.loss_fn = lm_metrics.MaskedCrossEntropy()
    self.accuracy = lm_metrics.InVocabAccuracy(vocab_size)
    self.tokens = lm_metrics.NumTokens()
    self.loss_sum = tf.Variable(0.0, dtype=tf.float64)
    self._baseline = None

    @tf.function
    def _step(x, y):
      logits = self.model(x, training=False)
      self.accuracy.update_state(y, logits)
      n = tf.reduce_sum(tf.cast(tf.not_equal(y, 0), tf.float64))
      self.loss_sum.assign_add(
          tf.cast(self.loss_fn(y, logits), tf.float64) * n)
      self.tokens.update_state(y, logits)
    self._step = _step

  def __call__(self) -> Dict[str, float]:
    self.accuracy.reset_state()
    self.tokens.reset_state()
    self.loss_sum.assign(0.0)
    for x, y in self.dataset:
      self._step(x, y)
    tokens = float(self.tokens.result())
    return dict(loss=float(self.loss_sum.numpy()) / max(tokens, 1.0),
                in_vocab_accuracy=float(self.accuracy.result()),
                num_tokens=tokens)

  def unigram_baseline(self) -> float:
    """In-vocab accuracy of always predicting the most frequent word.

    Word id 1 is the most frequent word of the vocabulary (word counts are
    sorted), the unigram guess the trained model must beat.
    """
    if self._baseline is None:
      metric = lm_metrics.InVocabAccuracy(self.accuracy.vocab_size)
      num_ids = self.accuracy.vocab_size + 4
      for _, y in self.dataset:
        metric.update_state(y, tf.one_hot(tf.ones_like(y), num_ids))
      self._baseline = float(metric.result())
    return self._baseline
