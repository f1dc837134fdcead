"""Tests of the next-word loss and the in-vocab accuracy (run/metrics.py).

The fast paths are tested against the plain TensorFlow expressions and
NumPy: `top1_correct` against the argmax (ties, infinities, empty
batches), `cross_entropy_rows`'s value and hand-written gradient against
autodiff of logsumexp and the standard sparse cross-entropy.
"""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from dpftrl_tff.data import stackoverflow
from dpftrl_tff.run import metrics


def _tied_logits(rng, shape, num_ids):
  """Small integer logits (many ties), some rows all equal, some infinite
  entries: the cases where a shortcut around the argmax could go wrong."""
  logits = rng.integers(-2, 3, size=(*shape, num_ids)).astype(np.float32)
  flat = logits.reshape(-1, num_ids)
  for row in flat:
    kind = rng.integers(0, 6)
    if kind == 0:
      row[:] = row[0]                       # every id tied
    elif kind == 1:
      row[rng.integers(0, num_ids)] = np.inf
    elif kind == 2:
      row[rng.integers(0, num_ids, size=2)] = -np.inf
    elif kind == 3:
      row[:] = -np.inf                      # argmax 0
  return flat.reshape(logits.shape)


class InVocabAccuracyTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('rows', (37,)), ('batch', (4, 9)), ('one', (1,)), ('empty', (0,)),
      ('empty_batch', (0, 20)))
  def test_top1_correct_is_argmax_equals_target(self, shape):
    rng = np.random.default_rng(len(shape) * 10 + sum(shape))
    num_ids = 7
    fn = tf.function(metrics.top1_correct)
    for trial in range(30):
      logits = _tied_logits(rng, shape, num_ids)
      # Targets often at a row's maximum, so that ties decide.
      y_true = np.where(rng.random(shape) < 0.5,
                        rng.integers(0, num_ids, size=shape),
                        np.argmax(logits, axis=-1) + rng.integers(0, 2,
                                                                  size=shape))
      y_true = np.minimum(y_true, num_ids - 1)
      expected = np.argmax(logits, axis=-1) == y_true
      for run in (metrics.top1_correct, fn):
        got = run(tf.constant(y_true), tf.constant(logits)).numpy()
        np.testing.assert_array_equal(got, expected, f'trial {trial}')

  def test_top1_correct_against_tf_argmax_on_real_valued_logits(self):
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(50, 300)).astype(np.float32)
    y_true = rng.integers(0, 300, size=50)
    y_true[::3] = np.argmax(logits[::3], axis=-1)
    expected = tf.equal(tf.argmax(logits, axis=-1), y_true).numpy()
    self.assertEqual(int(expected.sum()), 17)
    np.testing.assert_array_equal(
        metrics.top1_correct(tf.constant(y_true), tf.constant(logits)),
        expected)



class CrossEntropyRowsTest(parameterized.TestCase):

  def _autodiff(self, targets, logits, weights):
    """Value and gradient of the plain expression, by autodiff."""
    var = tf.Variable(logits)
    with tf.GradientTape() as tape:
      rows = tf.range(tf.shape(targets, out_type=tf.int64)[0])
      per_row = (tf.reduce_logsumexp(var, axis=-1) -
                 tf.gather_nd(var, tf.stack([rows, targets], axis=1)))
      total = tf.reduce_sum(per_row * weights)
    return per_row.numpy(), tape.gradient(total, var).numpy()

  def _fused(self, targets, logits, weights, function=False,
             max_in_place=None):
    """`cross_entropy_rows`'s rows and gradient (in a `tf.function` if
    `function`; the one-hot subtracted by the copying scatter when
    `max_in_place` is below the rows' size), checking that the logits are
    left untouched (the in-place subtraction writes through a buffer)."""
    var = tf.Variable(logits)

    def value_and_gradient():
      with tf.GradientTape() as tape:
        per_row = metrics.cross_entropy_rows(targets, var)
        total = tf.reduce_sum(per_row * weights)
      return per_row, tape.gradient(total, var)

    if function:
      value_and_gradient = tf.function(value_and_gradient)
    saved = metrics.MAX_IN_PLACE_ELEMENTS
    try:
      if max_in_place is not None:
        metrics.MAX_IN_PLACE_ELEMENTS = max_in_place
      per_row, gradient = value_and_gradient()
    finally:
      metrics.MAX_IN_PLACE_ELEMENTS = saved
    np.testing.assert_array_equal(var.numpy(), logits)
    return per_row.numpy(), gradient.numpy()

  @parameterized.named_parameters(
      ('unit', 1.0, 40), ('wide', 30.0, 40),
      # exp(z - m) underflows for most ids, and p_y for some targets.
      ('underflow', 1e4, 40), ('one_id', 1.0, 1))
  def test_value_and_gradient_equal_autodiff_and_numpy(self, scale, num_ids):
    rng = np.random.default_rng(int(scale) + num_ids)
    n = 23
    logits = (scale * rng.normal(size=(n, num_ids))).astype(np.float32)
    targets = tf.constant(rng.integers(0, num_ids, size=n), tf.int64)
    weights = tf.constant(rng.uniform(0.0, 2.0, size=n), tf.float32)
    plain_value, plain_gradient = self._autodiff(targets, logits, weights)
    for function in (False, True):
      value, gradient = self._fused(targets, logits, weights, function)
      np.testing.assert_allclose(value, plain_value, rtol=1e-6, atol=1e-6)
      np.testing.assert_allclose(gradient, plain_gradient, rtol=1e-5,
                                 atol=1e-6)
    # float64 NumPy: the loss and the softmax minus the one-hot.
    z = logits.astype(np.float64)
    shifted = z - z.max(axis=-1, keepdims=True)
    log_total = np.log(np.exp(shifted).sum(axis=-1))
    y = targets.numpy()
    expected = log_total - shifted[np.arange(n), y]
    np.testing.assert_allclose(value, expected, rtol=1e-5,
                               atol=1e-5 * max(1.0, scale / 100))
    softmax = np.exp(shifted - log_total[:, None])
    softmax[np.arange(n), y] -= 1
    np.testing.assert_allclose(gradient, softmax * weights.numpy()[:, None],
                               rtol=1e-4, atol=1e-6)

  def test_equals_the_standard_sparse_cross_entropy(self):
    rng = np.random.default_rng(5)
    logits = (4 * rng.normal(size=(31, 57))).astype(np.float32)
    targets = rng.integers(0, 57, size=31)
    weights = tf.ones([31])
    value, gradient = self._fused(tf.constant(targets), logits, weights)
    var = tf.Variable(logits)
    with tf.GradientTape() as tape:
      standard = tf.nn.sparse_softmax_cross_entropy_with_logits(targets, var)
      total = tf.reduce_sum(standard)
    np.testing.assert_allclose(value, standard.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gradient, tape.gradient(total, var).numpy(),
                               rtol=1e-5, atol=1e-7)

  def test_infinite_logits_as_autodiff(self):
    logits = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf],
                       [np.inf, 0.0, 0.0], [2.0, 2.0, -np.inf]], np.float32)
    targets = tf.constant([2, 0, 1, 1], tf.int64)
    weights = tf.ones([4])
    plain_value, plain_gradient = self._autodiff(targets, logits, weights)
    value, gradient = self._fused(targets, logits, weights)
    np.testing.assert_allclose(value, plain_value, rtol=1e-6)
    self.assertTrue(np.isfinite(value[0]) and np.isfinite(value[3]))
    # A +inf logit (row 2) makes both gradients' rows not a number there
    # (autodiff's at the infinite logit, the softmax's everywhere): the
    # client's update is not finite either way. The other rows are equal.
    np.testing.assert_allclose(gradient[[0, 1, 3]], plain_gradient[[0, 1, 3]],
                               rtol=1e-6)
    self.assertTrue(np.isnan(gradient[2]).any())
    self.assertTrue(np.isnan(plain_gradient[2]).any())

  def test_losses_around_the_exact_fallback(self):
    # Target logits k below 99 zeros: losses from about 5 to 125 nats, on
    # both sides of MIN_SOFTMAX_TARGET (a loss of 69 nats).
    offsets = np.arange(0.0, 120.0, 1.5)
    logits = np.zeros((len(offsets), 100), np.float32)
    logits[:, 7] = -offsets
    targets = tf.fill([len(offsets)], tf.constant(7, tf.int64))
    value, gradient = self._fused(targets, logits, tf.ones([len(offsets)]))
    expected = offsets + np.log(99 + np.exp(-offsets))
    np.testing.assert_allclose(value, expected, rtol=1e-6)
    plain_value, plain_gradient = self._autodiff(targets, logits,
                                                 tf.ones([len(offsets)]))
    np.testing.assert_allclose(value, plain_value, rtol=1e-6)
    np.testing.assert_allclose(gradient, plain_gradient, rtol=1e-5,
                               atol=1e-7)

  @parameterized.named_parameters(('in_place', None), ('copying', 1))
  def test_both_ways_of_subtracting_the_one_hot(self, max_in_place):
    # The in-place subtraction (InplaceSub on the flat view) and the copying
    # scatter it falls back to give autodiff's gradient; targets at both
    # ends of the ids.
    rng = np.random.default_rng(11)
    logits = rng.normal(size=(9, 13)).astype(np.float32)
    targets = tf.constant([0, 12, 5, 0, 12, 3, 3, 7, 1], tf.int64)
    weights = tf.constant(rng.uniform(0.5, 2.0, size=9), tf.float32)
    plain_value, plain_gradient = self._autodiff(targets, logits, weights)
    for function in (False, True):
      value, gradient = self._fused(targets, logits, weights, function,
                                    max_in_place)
      np.testing.assert_allclose(value, plain_value, rtol=1e-6)
      np.testing.assert_allclose(gradient, plain_gradient, rtol=1e-5,
                                 atol=1e-7)

  def test_in_place_and_copying_gradients_are_bitwise_equal(self):
    # The same float subtraction either way: runs and checkpoints made with
    # the copying scatter continue bit for bit.
    rng = np.random.default_rng(12)
    logits = (3 * rng.normal(size=(17, 29))).astype(np.float32)
    targets = tf.constant(rng.integers(0, 29, size=17), tf.int64)
    weights = tf.constant(rng.uniform(0.5, 2.0, size=17), tf.float32)
    for function in (False, True):
      in_place = self._fused(targets, logits, weights, function)
      copying = self._fused(targets, logits, weights, function,
                            max_in_place=1)
      np.testing.assert_array_equal(in_place[0], copying[0])
      np.testing.assert_array_equal(in_place[1], copying[1])

  def test_subtract_at_targets_writes_only_the_targets(self):
    scaled = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
    result = metrics._subtract_at_targets(  # pylint: disable=protected-access
        scaled * 1.0, tf.constant([3, 0, 3], tf.int64),
        tf.constant([100.0, 200.0, 300.0]))
    expected = np.arange(12, dtype=np.float32).reshape(3, 4)
    expected[[0, 1, 2], [3, 0, 3]] -= [100.0, 200.0, 300.0]
    np.testing.assert_array_equal(result.numpy(), expected)

  def test_zero_rows(self):
    targets = tf.zeros([0], tf.int64)
    value, gradient = self._fused(targets, np.zeros((0, 9), np.float32),
                                  tf.zeros([0]), function=True)
    self.assertEqual(value.shape, (0,))
    self.assertEqual(gradient.shape, (0, 9))


class MetricsTest(absltest.TestCase):

  def test_in_vocab_accuracy_excludes_pad_oov_eos(self):
    metric = metrics.InVocabAccuracy(vocab_size=3)
    y_true = tf.constant([[1, 2, 4, 6, 0]], tf.int64)   # word word OOV EOS pad
    predicted = tf.constant([[1, 3, 4, 6, 0]], tf.int64)
    metric.update_state(y_true, tf.one_hot(predicted, 7))
    self.assertAlmostEqual(float(metric.result()), 0.5)

  def test_top3_in_vocab_accuracy_against_numpy(self):
    rng = np.random.default_rng(0)
    vocab_size, num_ids = 20, 24
    y_true = rng.integers(0, num_ids, size=(6, 9))
    logits = rng.normal(size=(6, 9, num_ids)).astype(np.float32)
    metric = metrics.InVocabAccuracy(vocab_size=vocab_size, k=3)
    self.assertEqual(metric.name, 'in_vocab_top3_accuracy')
    metric.update_state(tf.constant(y_true), tf.constant(logits))
    pad, oov, _, eos = stackoverflow.special_ids(vocab_size)
    keep = ~np.isin(y_true, [pad, oov, eos])
    top3 = np.argsort(-logits, axis=-1)[..., :3]
    hit = (top3 == y_true[..., None]).any(axis=-1)
    self.assertAlmostEqual(float(metric.result()), hit[keep].mean(), places=6)
    # Top-3 is at least top-1 on the same predictions.
    top1 = metrics.InVocabAccuracy(vocab_size=vocab_size)
    top1.update_state(tf.constant(y_true), tf.constant(logits))
    self.assertLessEqual(float(top1.result()), float(metric.result()))

  def test_masked_cross_entropy_against_numpy_and_the_standard_loss(self):
    rng = np.random.default_rng(1)
    y_true = rng.integers(0, 50, size=(4, 7))
    y_true[0, 3:] = 0   # pad targets do not count
    logits = (5 * rng.normal(size=(4, 7, 50))).astype(np.float32)
    shifted = logits.astype(np.float64) - logits.max(-1, keepdims=True)
    per = (np.log(np.exp(shifted).sum(-1)) -
           np.take_along_axis(shifted, y_true[..., None], -1)[..., 0])
    keep = y_true != 0
    loss_fn = metrics.MaskedCrossEntropy()
    self.assertAlmostEqual(
        float(loss_fn(tf.constant(y_true), tf.constant(logits))),
        per[keep].mean(), delta=1e-5 * per[keep].mean())
    # Value and gradient equal the standard sparse cross-entropy's.
    logits_var = tf.Variable(logits)
    grads = []
    for fn in (lambda: loss_fn(tf.constant(y_true), logits_var),
               lambda: tf.math.divide_no_nan(tf.reduce_sum(
                   tf.keras.losses.sparse_categorical_crossentropy(
                       y_true, logits_var, from_logits=True) * keep),
                   float(keep.sum()))):
      with tf.GradientTape() as tape:
        value = fn()
      grads.append((float(value), tape.gradient(value, logits_var).numpy()))
    (ours, our_grad), (standard, standard_grad) = grads
    self.assertAlmostEqual(ours, standard, delta=1e-5 * standard)
    np.testing.assert_allclose(our_grad, standard_grad, rtol=1e-5,
                               atol=1e-7)


if __name__ == '__main__':
  absltest.main()
