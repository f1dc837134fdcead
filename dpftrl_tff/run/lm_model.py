"""The language model as TFF trains it: logits only where there is a target.

A client batch holds B sequences of L = 20 ids, padded: 30% of the
positions have the pad id as their target on the generated data, 24% on
the git corpus, and the loss and every metric ignore them. `from_keras_model`
still computes the output layer and its softmax over all V' = V + 4 ids
at every position; at the paper's size that layer is 68% of a training
step's matmul FLOPs, and with its softmax about half of the step's CPU
even at the target positions alone (docs/performance.md). `TargetPositionsModel` applies the
output layer to the non-pad target positions only:

  h = CIFG(embedding(x))                 [B, L, E]
  P = {(i, t) : y[i, t] != pad}
  logits = output_layer(h[P])            [|P|, V']
  loss = mean over P of logsumexp(logits) - logits[y[P]]

the same loss as `MaskedCrossEntropy` over [B, L, V'] (its mask is P), so
the same gradients to float rounding (tests/run/lm_model_test.py), and the
same metrics: the loss metric is still weighted by B (TFF's
`from_keras_model`), `num_examples` and `num_batches` count sequences and
batches. `predict_on_batch` still returns [B, L, V'] logits.
"""

import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.learning.metrics import counters
from tensorflow_federated.python.learning.models import keras_utils

OUTPUT_LAYER = 'output_embedding'


class TargetPositionsModel(keras_utils._KerasModel):  # pylint: disable=protected-access
  """TFF's Keras model wrapper whose forward pass skips pad targets.

  Built by `from_keras_lm`; the Keras model's last layer (named
  `OUTPUT_LAYER`) maps hidden states [..., E] to logits [..., V'].
  `forward_pass(...).predictions` are the logits at the target positions,
  [|P|, V'] in row-major order of (sequence, position); its `num_examples`
  is the batch's sequences, as TFF's.
  """

  def __init__(self, keras_model: tf.keras.Model, **kwargs):
    super().__init__(keras_model, **kwargs)
    output_layer = keras_model.get_layer(OUTPUT_LAYER)
    self._hidden_model = tf.keras.Model(keras_model.inputs,
                                        output_layer.input)
    self._output_layer = output_layer

  @tf.autograph.experimental.do_not_convert
  def _forward_pass(self, batch_input, training=True):
    inputs, y_true = batch_input
    hidden = self._hidden_model(inputs, training=training)
    positions = tf.where(tf.not_equal(y_true, 0))
    targets = tf.gather_nd(y_true, positions)
    logits = self._output_layer(tf.gather_nd(hidden, positions))
    batch_loss = tf.add_n([self._loss_fns[0](targets, logits)] +
                          self._keras_model.losses)
    sequences = tf.shape(inputs)[0]
    for metric in self.get_metrics():
      if isinstance(metric, (counters.NumExamplesCounter,
                             counters.NumBatchesCounter)):
        metric.update_state(y_true=y_true)
      elif metric.name == 'loss':
        # TFF's loss metric: the batch's loss weighted by its sequences.
        tf.keras.metrics.Mean.update_state(metric, batch_loss, sequences)
      else:
        metric.update_state(y_true=targets, y_pred=logits)
    return tff.learning.models.BatchOutput(loss=batch_loss, predictions=logits,
                                           num_examples=sequences)


def from_keras_lm(keras_model: tf.keras.Model, *, loss, input_spec,
                  metrics) -> TargetPositionsModel:
  """`tff.learning.models.from_keras_model` for the next-word model.

  Args:
    keras_model: maps ids [B, L] to logits [B, L, V'] through a last layer
      named `OUTPUT_LAYER`.
    loss: a loss of (targets, logits) that averages over its targets, as
      `metrics.MaskedCrossEntropy` does (its pad mask is then all ones).
    input_spec: (x, y) tensor specs, both [None, L] ids.
    metrics: Keras metrics of (targets, logits) that ignore pad targets.
  """
  return TargetPositionsModel(keras_model, input_spec=input_spec,
                              loss_fns=[loss], loss_weights=[1.0],
                              metrics=metrics)
