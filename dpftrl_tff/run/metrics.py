"""Next-word loss and in-vocab accuracy (top-1 and top-3).

In-vocab accuracy is top-1 accuracy over the target tokens that are real
vocabulary words: pad, OOV and EOS targets are excluded (BOS is never a
target), the metric of Reddi et al. 2020 and Kairouz et al. 2021. Top-3
in-vocab accuracy counts a target as right when it is among the model's
three highest logits (a keyboard's three suggestions), over the same
targets. The loss is the mean cross-entropy over non-pad targets.

The loss's and metrics' methods hold no Python control flow on tensors, so
they are marked `do_not_convert`: autograph's conversion of them (and of
what they call) cost about 0.9 CPU-s at the start of every training binary.
"""

import tensorflow as tf

from dpftrl_tff.data import stackoverflow


# Below this softmax probability of the target (a loss above 69 nats; it
# may underflow), `cross_entropy_rows` computes the row's loss exactly.
MIN_SOFTMAX_TARGET = 1e-30


def _target_positions(targets):
  """[[i, y_i] for each row i]: int64 [n, 2], the gather_nd indices of the
  targets' logits in [n, V'] rows."""
  rows = tf.range(tf.shape(targets, out_type=tf.int64)[0])
  return tf.stack([rows, targets], axis=1)


# `_subtract_at_targets` writes in place while a [n, V'] tensor has fewer
# elements than this (InplaceSub's int32 indices), and through a scatter
# that copies the tensor otherwise.
MAX_IN_PLACE_ELEMENTS = 2**31 - 1


def _subtract_at_targets(scaled, targets, values):
  """`scaled` [n, V'] with values[i] subtracted at (i, targets[i]).

  `tf.tensor_scatter_nd_sub` does the same, but on CPU it copies its
  9.2 MB input at the paper's size to change 230 values: the loss and its
  gradient took 5.9 CPU-ms with it, 4.5 in place, about 3% of a training
  step (docs/performance.md, stop 59). Here
  `tf.raw_ops.InplaceSub` changes them in place, on the tensor's flat view
  [n V', 1] at rows i V' + y_i. That op writes through its input's buffer
  and does not check its indices, so this function may only be given a
  tensor nothing else reads (`scaled` is the gradient's own fresh product;
  grappler knows the op writes its input, `ModifiesInputsInPlace`, and
  then simplifies to a copying Snapshot rather than an alias), and its
  indices are in bounds by construction: the targets are clipped to
  [0, V') (an id out of range already fails the forward pass's
  `gather_nd`), rows are 0..n-1, and a tensor of `MAX_IN_PLACE_ELEMENTS`
  or more takes the copying scatter instead (int32 indices).

  Args:
    scaled: float [n, V'], read by nothing else.
    targets: int64 [n].
    values: float [n].

  Returns:
    float [n, V'].
  """
  shape = tf.shape(scaled, out_type=tf.int64)
  num_ids = shape[1]
  rows = tf.range(shape[0])

  def in_place():
    flat_index = rows * num_ids + tf.clip_by_value(targets, 0, num_ids - 1)
    flat = tf.raw_ops.InplaceSub(x=tf.reshape(scaled, [-1, 1]),
                                 i=tf.cast(flat_index, tf.int32),
                                 v=values[:, None])
    return tf.reshape(flat, shape)

  def copying():
    return tf.tensor_scatter_nd_sub(scaled, _target_positions(targets),
                                    values)

  return tf.cond(shape[0] * num_ids < MAX_IN_PLACE_ELEMENTS, in_place,
                 copying)


def cross_entropy_rows(targets, logits):
  """Per row i, logsumexp(z_i) - z_i[y_i], with a hand-written gradient.

  The loss is -log p_y with p = softmax(z) (one fused kernel: oneDNN's in
  TFF's workers, `tff_compat.worker`), and its gradient the softmax minus
  the target's one-hot, from the same p:

      loss_i = -log p_i[y_i],
      d loss_i / d z_ij = g_i (p_ij - [j == y_i]).

  Where p_y is below `MIN_SOFTMAX_TARGET` or not a number, the row's loss
  is computed exactly instead, as `tf.reduce_logsumexp(z_i) - z_i[y_i]`.
  Autodiff of that expression takes three passes more over the logits
  (about 2.3 M values per client step at the paper's size) and
  TensorFlow's own exp, which its pip build compiles without AVX2: with
  oneDNN the loss and its gradient take 5.2 CPU-ms against 9.2 for 230
  targets of 10,004 ids, without it 7.2 against 9.1 (docs/performance.md,
  stop 57); the one-hot is then subtracted in place
  (`_subtract_at_targets`). Value and gradient equal autodiff's and
  `sparse_softmax_cross_entropy_with_logits`'s (tests/run/metrics_test.py),
  for zero rows and infinite logits too.

  Args:
    targets: int64 [n], ids in [0, V').
    logits: float [n, V'].

  Returns:
    float [n].
  """
  target_positions = _target_positions(targets)

  @tf.custom_gradient
  def rows_loss(z):
    p = tf.nn.softmax(z)
    p_target = tf.gather_nd(p, target_positions)
    inexact = tf.where(tf.logical_not(p_target >= MIN_SOFTMAX_TARGET))
    exact = (tf.reduce_logsumexp(tf.gather_nd(z, inexact), axis=-1) -
             tf.gather_nd(z, tf.gather_nd(target_positions, inexact)))
    value = tf.tensor_scatter_nd_update(-tf.math.log(p_target), inexact,
                                        exact)

    def gradient(upstream):
      return _subtract_at_targets(p * upstream[:, None], targets, upstream)

    return value, gradient

  return rows_loss(logits)


@tf.keras.utils.register_keras_serializable(package='dpftrl_tff')
class MaskedCrossEntropy(tf.keras.losses.Loss):
  """Mean sparse cross-entropy over non-pad targets.

  Per target y with logits z: logsumexp(z) - z_y (`cross_entropy_rows`),
  the same function as `sparse_softmax_cross_entropy_with_logits` (tests:
  value and gradient within 1e-5 relative), written so because that kernel
  is slow on CPU: a paper-size training step alone takes 1.25x less CPU, a
  TFF DP-FTRL round of 20 real-size clients 4% less (docs/performance.md).
  """

  def __init__(self, name='masked_cross_entropy', **kwargs):
    kwargs.setdefault('reduction', tf.keras.losses.Reduction.NONE)
    super().__init__(name=name, **kwargs)

  @tf.autograph.experimental.do_not_convert
  def call(self, y_true, y_pred):
    # Flattened to [n, V'] rows and the target picked by gather_nd: the
    # gradient of gather(batch_dims=1) fails on n = 0 rows (TF 2.14), which
    # `lm_model.TargetPositionsModel` gives a batch of pad targets only.
    targets = tf.reshape(tf.cast(y_true, tf.int64), [-1])
    logits = tf.reshape(y_pred, [-1, tf.shape(y_pred)[-1]])
    per_token = cross_entropy_rows(targets, logits)
    mask = tf.cast(tf.not_equal(targets, 0), per_token.dtype)
    return tf.math.divide_no_nan(tf.reduce_sum(per_token * mask),
                                 tf.reduce_sum(mask))

  def __call__(self, y_true, y_pred, sample_weight=None):
    del sample_weight
    return self.call(y_true, y_pred)


def top1_correct(y_true, y_pred):
  """`argmax(y_pred, -1) == y_true` (ties to the lowest id), without an
  argmax over every row.

  TensorFlow's ArgMax kernel (a reduction over (index, value) pairs) is
  slow on CPU: 3.8 CPU-ms for 230 rows of 10,004 logits against 1.7 here
  (the whole count of right rows), 4.7% of a paper-size TFF round
  (docs/performance.md, stop 57). A row's argmax can be its target only if
  the target's logit is the row's maximum, so only those rows (the right
  ones and ties, a superset) take the argmax. Equal to the argmax for any
  logits without NaN (tests/run/metrics_test.py).

  Args:
    y_true: int ids, any shape S.
    y_pred: logits, shape S + [V'].

  Returns:
    bool, shape S.
  """
  num_ids = tf.shape(y_pred)[-1]
  logits = tf.reshape(y_pred, [-1, num_ids])
  targets = tf.reshape(tf.cast(y_true, tf.int64), [-1])
  target_logits = tf.gather_nd(logits, _target_positions(targets))
  candidates = tf.where(
      tf.equal(target_logits, tf.reduce_max(logits, axis=-1)))[:, 0]
  predicted = tf.argmax(tf.gather(logits, candidates), axis=-1,
                        output_type=tf.int64)
  right = tf.scatter_nd(
      candidates[:, None],
      tf.cast(tf.equal(predicted, tf.gather(targets, candidates)), tf.int32),
      tf.shape(targets, out_type=tf.int64))
  return tf.reshape(tf.cast(right, tf.bool), tf.shape(y_true))


@tf.keras.utils.register_keras_serializable(package='dpftrl_tff')
class InVocabAccuracy(tf.keras.metrics.Mean):
  """Top-k accuracy (default top-1) excluding pad, OOV and EOS targets.

  Top-1 is the argmax; top-k (k > 1) counts the target when it is among the
  k highest logits (`tf.math.top_k`, ties to the lower id as argmax).
  """

  def __init__(self, vocab_size: int, name=None, k: int = 1, **kwargs):
    if name is None:
      name = 'in_vocab_accuracy' if k == 1 else f'in_vocab_top{k}_accuracy'
    super().__init__(name=name, **kwargs)
    self.vocab_size = vocab_size
    self.k = int(k)
    pad, oov, _, eos = stackoverflow.special_ids(vocab_size)
    self._excluded = (pad, oov, eos)

  @tf.autograph.experimental.do_not_convert
  def update_state(self, y_true, y_pred, sample_weight=None):
    del sample_weight
    y_true = tf.cast(y_true, tf.int64)
    mask = tf.ones_like(y_true, dtype=tf.bool)
    for token in self._excluded:
      mask = tf.logical_and(mask, tf.not_equal(y_true, token))
    if self.k == 1:
      correct = tf.cast(top1_correct(y_true, y_pred), tf.float32)
    else:
      top = tf.cast(tf.math.top_k(y_pred, self.k).indices, tf.int64)
      correct = tf.cast(tf.reduce_any(tf.equal(top, y_true[..., None]),
                                      axis=-1), tf.float32)
    return super().update_state(tf.boolean_mask(correct, mask))

  def get_config(self):
    config = super().get_config()
    config.update(vocab_size=self.vocab_size, k=self.k)
    return config


@tf.keras.utils.register_keras_serializable(package='dpftrl_tff')
class NumTokens(tf.keras.metrics.Sum):
  """Number of non-pad target tokens."""

  def __init__(self, name='num_tokens', **kwargs):
    super().__init__(name=name, **kwargs)

  @tf.autograph.experimental.do_not_convert
  def update_state(self, y_true, y_pred, sample_weight=None):
    del y_pred, sample_weight
    return super().update_state(
        tf.reduce_sum(tf.cast(tf.not_equal(y_true, 0), tf.float32)))


class NumClients(tf.keras.metrics.Metric):
  """1 on a client that trained; summed by TFF, the round's finite clients.

  TFF resets the metrics of a client whose update is not finite
  (`model_delta_client_work`), so the sum over the cohort counts the
  clients whose update was kept (`divergence.nonfinite_clients`).
  """

  def __init__(self, name='num_clients', **kwargs):
    super().__init__(name=name, **kwargs)
    self.count = self.add_weight(name='count', initializer='zeros')

  @tf.autograph.experimental.do_not_convert
  def update_state(self, y_true, y_pred, sample_weight=None):
    del y_true, y_pred, sample_weight
    return self.count.assign(1.0)

  def result(self):
    return tf.identity(self.count)

  def reset_state(self):
    self.count.assign(0.0)


def build_metrics(vocab_size: int):
  return [InVocabAccuracy(vocab_size), NumTokens(), NumClients()]
