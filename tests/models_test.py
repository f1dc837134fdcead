"""Tests of the CIFG language model."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from dpftrl_tff import models


def _sigmoid(x):
  return 1 / (1 + np.exp(-x))


def numpy_cifg(x, kernel, recurrent, bias, projection):
  """Direct implementation of the CIFG equations (models.py docstring)."""
  batch, steps, _ = x.shape
  units = kernel.shape[1] // 3
  h = np.zeros((batch, projection.shape[1]))
  c = np.zeros((batch, units))
  outputs = []
  for t in range(steps):
    z = x[:, t] @ kernel + h @ recurrent + bias
    i = _sigmoid(z[:, :units])
    o = _sigmoid(z[:, units:2 * units])
    g = np.tanh(z[:, 2 * units:])
    c = (1 - i) * c + i * g
    h = (o * np.tanh(c)) @ projection
    outputs.append(h)
  return np.stack(outputs, axis=1)


class CIFGTest(parameterized.TestCase):

  def test_cell_matches_numpy(self):
    rng = np.random.default_rng(0)
    units, proj, emb = 7, 5, 4
    layer = tf.keras.layers.RNN(models.CIFGCell(units, proj),
                                return_sequences=True)
    x = rng.normal(size=(3, 6, emb)).astype(np.float32)
    layer(x)  # build
    weights = [rng.normal(scale=0.5, size=w.shape).astype(np.float32)
               for w in layer.get_weights()]
    layer.set_weights(weights)
    kernel, recurrent, bias, projection = weights
    np.testing.assert_allclose(
        layer(x).numpy(), numpy_cifg(x, kernel, recurrent, bias, projection),
        rtol=1e-4, atol=1e-5)

  @parameterized.named_parameters(('small', 7, 5, 4, 6), ('wide', 40, 12, 9, 20))
  def test_unrolled_layer_equals_the_keras_rnn(self, units, proj, emb, steps):
    rng = np.random.default_rng(1)
    rnn = tf.keras.layers.RNN(models.CIFGCell(units, proj),
                              return_sequences=True)
    unrolled = models.UnrolledCIFG(units, proj)
    x = tf.constant(rng.normal(size=(3, steps, emb)).astype(np.float32))
    rnn(x)
    unrolled(x)
    weights = [rng.normal(scale=0.5, size=w.shape).astype(np.float32)
               for w in rnn.get_weights()]
    rnn.set_weights(weights)
    unrolled.set_weights(weights)   # Same weights, same order.
    self.assertEqual([w.shape for w in unrolled.trainable_weights],
                     [w.shape for w in rnn.trainable_weights])
    upstream = tf.constant(rng.normal(size=(3, steps, proj)), tf.float32)
    results = []
    for layer in (rnn, unrolled):
      with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tf.reduce_sum(y * upstream)
      grads = tape.gradient(loss, [x] + layer.trainable_weights)
      results.append([y] + grads)
    for expected, actual in zip(*results):
      # float32 rounding, summed in another order, through L steps.
      expected = expected.numpy()
      np.testing.assert_allclose(actual.numpy(), expected, rtol=1e-4,
                                 atol=1e-5 * np.max(np.abs(expected)))
    np.testing.assert_allclose(
        unrolled(x).numpy(), numpy_cifg(x.numpy(), *weights),
        rtol=1e-4, atol=1e-5)

  def test_model_weights_keep_their_order_with_or_without_unrolling(self):
    units = models.MIN_UNROLLED_UNITS
    fixed = models.create_cifg_lm(30, latent_size=units, embedding_size=4,
                                  sequence_length=5, seed=3)
    free = models.create_cifg_lm(30, latent_size=units, embedding_size=4,
                                 seed=3)
    small = models.create_cifg_lm(30, latent_size=units - 1,
                                  embedding_size=4, sequence_length=5)
    self.assertIsInstance(fixed.get_layer('cifg'), models.UnrolledCIFG)
    self.assertIsInstance(free.get_layer('cifg'), tf.keras.layers.RNN)
    self.assertIsInstance(small.get_layer('cifg'), tf.keras.layers.RNN)
    for a, b in zip(fixed.get_weights(), free.get_weights()):
      np.testing.assert_array_equal(a, b)   # Seeded: the same initial model.
    ids = tf.constant([[1, 2, 3, 4, 5], [6, 7, 0, 0, 0]], tf.int64)
    np.testing.assert_allclose(fixed(ids).numpy(), free(ids).numpy(),
                               rtol=1e-5, atol=1e-6)

  def test_forget_gate_is_coupled(self):
    # With the input gate saturated open (i = 1) the cell forgets everything:
    # c_t = g_t, whatever c_{t-1} was.
    cell = models.CIFGCell(3, 2)
    cell.build((None, 2))
    cell.bias.assign(np.array([50.0] * 3 + [0.0] * 6, np.float32))
    x = tf.constant([[0.3, -0.2]])
    h = tf.zeros([1, 2])
    _, (_, c1) = cell(x, [h, tf.fill([1, 3], 5.0)])
    _, (_, c2) = cell(x, [h, tf.fill([1, 3], -5.0)])
    np.testing.assert_allclose(c1.numpy(), c2.numpy(), atol=1e-6)

  @parameterized.named_parameters(('10k', 10000, 2.4e6), ('20k', 20000, 4.4e6),
                                  ('30k', 30000, 6.4e6))
  def test_parameter_count_matches_paper(self, vocab_size, paper_count):
    count = models.create_cifg_lm(vocab_size).count_params()
    self.assertLess(abs(count - paper_count) / paper_count, 0.05)

  def test_exact_parameter_count(self):
    v, n, e = 10004, 670, 96
    expected = v * e + (e * 3 * n + e * 3 * n + 3 * n + n * e) + e * v + v
    self.assertEqual(models.create_cifg_lm(10000).count_params(), expected)

  def test_shared_embedding_ties_weights(self):
    model = models.create_cifg_lm(50, latent_size=8, embedding_size=4,
                                  shared_embedding=True)
    self.assertEqual(model.count_params(),
                     54 * 4 + (4 * 24 * 2 + 24 + 8 * 4) + 54)
    logits = model(tf.constant([[1, 2, 3]], tf.int64))
    self.assertEqual(logits.shape, (1, 3, 54))

  def test_seeded_models_are_equal(self):
    a = models.create_cifg_lm(20, latent_size=4, embedding_size=3, seed=3)
    b = models.create_cifg_lm(20, latent_size=4, embedding_size=3, seed=3)
    for wa, wb in zip(a.get_weights(), b.get_weights()):
      np.testing.assert_array_equal(wa, wb)

  def test_zero_init_has_the_same_variables_all_zero(self):
    seeded = models.create_cifg_lm(50, latent_size=6, embedding_size=4,
                                   seed=1)
    zeros = models.create_cifg_lm(50, latent_size=6, embedding_size=4,
                                  zero_init=True)
    self.assertEqual([w.shape for w in zeros.get_weights()],
                     [w.shape for w in seeded.get_weights()])
    self.assertTrue(all(not np.any(w) for w in zeros.get_weights()))

  def test_bad_vocab_size(self):
    with self.assertRaisesRegex(ValueError, 'vocab_size'):
      models.create_cifg_lm(0)


if __name__ == '__main__':
  absltest.main()
