"""Evaluation of the model on held-out data, and the flattening of TFF's
nested metrics into metrics.csv columns."""

from typing import Dict

import numpy as np
import tensorflow as tf

from dpftrl_tff.run import metrics as lm_metrics


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
    self.top3 = lm_metrics.InVocabAccuracy(vocab_size, k=3)
    self.tokens = lm_metrics.NumTokens()
    self.loss_sum = tf.Variable(0.0, dtype=tf.float64)
    self._baseline = None

    @tf.function(autograph=False)   # No Python control flow on tensors.
    def _step(x, y):
      logits = self.model(x, training=False)
      self.accuracy.update_state(y, logits)
      self.top3.update_state(y, logits)
      n = tf.reduce_sum(tf.cast(tf.not_equal(y, 0), tf.float64))
      self.loss_sum.assign_add(
          tf.cast(self.loss_fn(y, logits), tf.float64) * n)
      self.tokens.update_state(y, logits)
    self._step = _step

  def __call__(self) -> Dict[str, float]:
    self.accuracy.reset_state()
    self.top3.reset_state()
    self.tokens.reset_state()
    self.loss_sum.assign(0.0)
    for x, y in self.dataset:
      self._step(x, y)
    tokens = float(self.tokens.result())
    return dict(loss=float(self.loss_sum.numpy()) / max(tokens, 1.0),
                in_vocab_accuracy=float(self.accuracy.result()),
                in_vocab_top3_accuracy=float(self.top3.result()),
                num_tokens=tokens)

  def unigram_baseline(self) -> float:
    """In-vocab accuracy of always predicting the most frequent word.

    Word id 1 is the most frequent word of the vocabulary (word counts are
    sorted), the unigram guess the trained model must beat.
    """
    return self._unigram()[0]

  def unigram_top3_baseline(self) -> float:
    """Top-3 in-vocab accuracy of always suggesting the three most frequent
    words (ids 1, 2, 3)."""
    return self._unigram()[1]

  def _unigram(self):
    if self._baseline is None:
      vocab_size = self.accuracy.vocab_size
      top1 = lm_metrics.InVocabAccuracy(vocab_size)
      top3 = lm_metrics.InVocabAccuracy(vocab_size, k=3)
      num_ids = vocab_size + 4
      # Logits 3, 2, 1 for ids 1, 2, 3 (in frequency order), 0 elsewhere.
      ranked = tf.constant([0.0, 3.0, 2.0, 1.0] + [0.0] * (num_ids - 4))
      for _, y in self.dataset:
        logits = tf.broadcast_to(ranked, tf.concat([tf.shape(y), [num_ids]],
                                                   0))
        top1.update_state(y, logits)
        top3.update_state(y, logits)
      self._baseline = (float(top1.result()), float(top3.result()))
    return self._baseline
