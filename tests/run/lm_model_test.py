"""TargetPositionsModel against TFF's from_keras_model on padded batches."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff import models
from dpftrl_tff.data import stackoverflow
from dpftrl_tff.run import lm_model
from dpftrl_tff.run import metrics as lm_metrics

VOCAB, LENGTH = 30, 7


def _batch(rng, rows):
  """Sequences as the data pipeline makes them: BOS, words, EOS, pads."""
  x = np.zeros([rows, LENGTH], np.int64)
  y = np.zeros([rows, LENGTH], np.int64)
  _, oov, bos, eos = (int(i) for i in
                      stackoverflow.special_ids(VOCAB))
  for i in range(rows):
    words = list(rng.integers(1, VOCAB + 1, size=rng.integers(0, LENGTH + 3)))
    words = [oov if rng.random() < 0.1 else w for w in words]
    ids = [bos] + words + [eos]
    ids = (ids + [0] * (LENGTH + 1))[:LENGTH + 1]
    x[i], y[i] = ids[:-1], ids[1:]
  return tf.constant(x), tf.constant(y)


def _models(shared_embedding, units):
  keras_a = models.create_cifg_lm(VOCAB, latent_size=units, embedding_size=5,
                                  shared_embedding=shared_embedding,
                                  sequence_length=LENGTH, seed=3)
  keras_b = models.create_cifg_lm(VOCAB, latent_size=units, embedding_size=5,
                                  shared_embedding=shared_embedding,
                                  sequence_length=LENGTH, seed=4)
  keras_b.set_weights(keras_a.get_weights())
  spec = (tf.TensorSpec([None, LENGTH], tf.int64),) * 2
  reference = tff.learning.models.from_keras_model(
      keras_a, loss=lm_metrics.MaskedCrossEntropy(), input_spec=spec,
      metrics=lm_metrics.build_metrics(VOCAB))
  fast = lm_model.from_keras_lm(
      keras_b, loss=lm_metrics.MaskedCrossEntropy(), input_spec=spec,
      metrics=lm_metrics.build_metrics(VOCAB))
  return reference, fast


def _step(model, batches):
  grads = []
  for batch in batches:
    with tf.GradientTape() as tape:
      output = model.forward_pass(batch, training=True)
    grads.append(tape.gradient(output.loss, model.trainable_variables))
    assert int(output.num_examples) == int(batch[0].shape[0])
  metrics = {k: [np.asarray(v) for v in vs] for k, vs in
             model.report_local_unfinalized_metrics().items()}
  return grads, metrics


# Keras's RNN layer with a tied output; the unrolled CIFG with its own.
@pytest.mark.parametrize('shared_embedding,units', [(True, 6), (False, 40)])
def test_same_loss_gradients_and_metrics(shared_embedding, units):
  rng = np.random.default_rng(0)
  batches = [_batch(rng, 9), _batch(rng, 4)]
  # A batch whose targets are all pads (an empty sentence cut to BOS, EOS
  # would have one target; this is all padding): loss 0, no NaN.
  batches.append((tf.zeros([2, LENGTH], tf.int64),) * 2)
  reference, fast = _models(shared_embedding, units)
  ref_grads, ref_metrics = _step(reference, batches)
  grads, metrics = _step(fast, batches)
  for ref_batch, batch in zip(ref_grads, grads):
    for ref, got in zip(ref_batch, batch):
      ref, got = tf.convert_to_tensor(ref), tf.convert_to_tensor(got)
      np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)
  assert list(metrics) == list(ref_metrics)
  for name, values in ref_metrics.items():
    for ref, got in zip(values, metrics[name]):
      np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=name)
  assert metrics['num_examples'][0] == 15 and metrics['num_batches'][0] == 3


def test_predict_on_batch_keeps_every_position():
  _, fast = _models(False, 6)
  x, _ = _batch(np.random.default_rng(1), 3)
  assert fast.predict_on_batch(x).shape == (3, LENGTH, VOCAB + 4)


def test_needs_the_named_output_layer():
  inputs = tf.keras.Input([LENGTH], dtype=tf.int64)
  keras_model = tf.keras.Model(
      inputs, tf.keras.layers.Dense(VOCAB + 4)(
          tf.keras.layers.Embedding(VOCAB + 4, 3)(inputs)))
  spec = (tf.TensorSpec([None, LENGTH], tf.int64),) * 2
  with pytest.raises(ValueError, match='output_embedding'):
    lm_model.from_keras_lm(keras_model, loss=lm_metrics.MaskedCrossEntropy(),
                           input_spec=spec, metrics=[])
