"""The paper's keyboard language model: a one-layer CIFG LSTM with projection.

Hard et al. 2018 and the paper (Sec. 1): input embedding of size 96, one CIFG
layer of 670 units whose cell output is projected back to 96 inside the
recurrence, and an output embedding over the vocabulary. With separate input
and output embeddings this has 2.4M / 4.4M / 6.4M parameters for 10k / 20k /
30k words (2,383,022 at 10,004 ids).

The CIFG cell (Coupled Input and Forget Gate LSTM), for input x_t (size E),
projected output h_{t-1} (size E) and cell c_{t-1} (size N):

    [a_i, a_o, a_g] = W x_t + U h_{t-1} + b          (W: E x 3N, U: E x 3N)
    i_t = sigmoid(a_i),  f_t = 1 - i_t,  o_t = sigmoid(a_o),  g_t = tanh(a_g)
    c_t = f_t * c_{t-1} + i_t * g_t
    h_t = P (o_t * tanh(c_t))                        (P: N x E, no bias)

Token ids: 0 pad, 1..V words, V+1 OOV, V+2 BOS, V+3 EOS (see data.py).
"""

import tensorflow as tf

from dpftrl_tff import checks

NUM_SPECIAL_TOKENS = 4  # pad, OOV, BOS, EOS
# Smaller CIFGs keep Keras's RNN layer: their steps cost next to nothing and
# the unrolled graph takes longer to trace (0.6 to 0.8 CPU-s more per TFF
# process build at the tests' 8 units), so unrolling only pays from here.
MIN_UNROLLED_UNITS = 32


def extended_vocab_size(vocab_size: int) -> int:
  return vocab_size + NUM_SPECIAL_TOKENS


def count_parameters(vocab_size: int, *, latent_size: int = 670,
                     embedding_size: int = 96,
                     shared_embedding: bool = False) -> int:
  """Trainable parameters of `create_cifg_lm`, without building it.

  Input embedding (V+4) E; CIFG kernels 2 E 3N, bias 3N, projection N E;
  output kernel E (V+4) unless tied, and bias V+4.
  """
  num_ids = extended_vocab_size(vocab_size)
  n, e = latent_size, embedding_size
  cifg = 2 * e * 3 * n + 3 * n + n * e
  output = num_ids + (0 if shared_embedding else e * num_ids)
  return num_ids * e + cifg + output


@tf.keras.utils.register_keras_serializable(package='dpftrl_tff')
class CIFGCell(tf.keras.layers.Layer):
  """CIFG LSTM cell with the output projected inside the recurrence."""

  def __init__(self, units: int, projection_units: int,
               kernel_initializer='glorot_uniform',
               recurrent_initializer='orthogonal', **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.projection_units = projection_units
    self.kernel_initializer = tf.keras.initializers.get(kernel_initializer)
    self.recurrent_initializer = tf.keras.initializers.get(
        recurrent_initializer)
    self.state_size = [projection_units, units]
    self.output_size = projection_units

  def build(self, input_shape):
    input_dim = input_shape[-1]
    self.kernel = self.add_weight(
        name='kernel', shape=(input_dim, 3 * self.units),
        initializer=self.kernel_initializer)
    self.recurrent_kernel = self.add_weight(
        name='recurrent_kernel', shape=(self.projection_units, 3 * self.units),
        initializer=self.recurrent_initializer)
    self.bias = self.add_weight(name='bias', shape=(3 * self.units,),
                                initializer='zeros')
    self.projection = self.add_weight(
        name='projection', shape=(self.units, self.projection_units),
        initializer=self.kernel_initializer)
    self.built = True

  def call(self, inputs, states):
    h_prev, c_prev = states
    z = (tf.matmul(inputs, self.kernel) +
         tf.matmul(h_prev, self.recurrent_kernel) + self.bias)
    h, c = self.gates(z, c_prev)
    return h, [h, c]

  def gates(self, z, c_prev):
    """(h_t, c_t) from the pre-activations z = [a_i, a_o, a_g] and c_{t-1}."""
    a_i, a_o, a_g = tf.split(z, 3, axis=-1)
    i = tf.sigmoid(a_i)
    o = tf.sigmoid(a_o)
    g = tf.tanh(a_g)
    c = (1.0 - i) * c_prev + i * g
    return tf.matmul(o * tf.tanh(c), self.projection), c

  def get_config(self):
    config = super().get_config()
    config.update(units=self.units, projection_units=self.projection_units,
                  kernel_initializer=tf.keras.initializers.serialize(
                      self.kernel_initializer),
                  recurrent_initializer=tf.keras.initializers.serialize(
                      self.recurrent_initializer))
    return config


@tf.keras.utils.register_keras_serializable(package='dpftrl_tff')
class UnrolledCIFG(tf.keras.layers.Layer):
  """`tf.keras.layers.RNN(CIFGCell(...), return_sequences=True)` for inputs
  of a static length L, unrolled over time steps.

  The same function and the same weights (the cell's, in the cell's order):
  the input kernel is applied to all L steps in one matmul,
  [B L, E] x [E, 3N], before the recurrence, and the L steps are a Python
  loop over `tf.unstack`, with no while loop or TensorArray. Outputs and
  gradients equal the Keras RNN's to float rounding (tests/models_test.py);
  a training step took 10 to 15% less CPU at the paper's size and at the
  git corpus's (docs/performance.md).
  """

  def __init__(self, units: int, projection_units: int,
               kernel_initializer='glorot_uniform',
               recurrent_initializer='orthogonal', **kwargs):
    super().__init__(**kwargs)
    self.cell = CIFGCell(units, projection_units,
                         kernel_initializer=kernel_initializer,
                         recurrent_initializer=recurrent_initializer,
                         name='cifg_cell')

  def build(self, input_shape):
    if input_shape[1] is None:
      raise ValueError('UnrolledCIFG needs a static sequence length.')
    self.cell.build(input_shape[-1:])
    self.built = True

  def call(self, inputs):
    cell = self.cell
    batch, steps = tf.shape(inputs)[0], inputs.shape[1]
    projected = tf.matmul(tf.reshape(inputs, [-1, inputs.shape[-1]]),
                          cell.kernel)
    projected = tf.reshape(projected, [batch, steps, 3 * cell.units])
    h = tf.zeros([batch, cell.projection_units], inputs.dtype)
    c = tf.zeros([batch, cell.units], inputs.dtype)
    outputs = []
    for x_kernel in tf.unstack(projected + cell.bias, axis=1):
      h, c = cell.gates(x_kernel + tf.matmul(h, cell.recurrent_kernel), c)
      outputs.append(h)
    return tf.stack(outputs, axis=1)

  def get_config(self):
    config = super().get_config()
    cell = self.cell.get_config()
    config.update(units=cell['units'],
                  projection_units=cell['projection_units'],
                  kernel_initializer=cell['kernel_initializer'],
                  recurrent_initializer=cell['recurrent_initializer'])
    return config


@tf.keras.utils.register_keras_serializable(package='dpftrl_tff')
class TiedOutputEmbedding(tf.keras.layers.Layer):
  """Logits from the transposed input embedding plus a bias."""

  def __init__(self, embedding: tf.keras.layers.Embedding, **kwargs):
    super().__init__(**kwargs)
    self.embedding = embedding

  def build(self, input_shape):
    self.bias = self.add_weight(name='bias',
                                shape=(self.embedding.input_dim,),
                                initializer='zeros')
    self.built = True

  def call(self, inputs):
    return tf.matmul(inputs, self.embedding.embeddings,
                     transpose_b=True) + self.bias


def create_cifg_lm(vocab_size: int, *, latent_size: int = 670,
                   embedding_size: int = 96, shared_embedding: bool = False,
                   sequence_length: int | None = None,
                   seed: int | None = None,
                   zero_init: bool = False) -> tf.keras.Model:
  """Returns the CIFG next-word model mapping ids [B, L] to logits [B, L, V+4].

  Args:
    vocab_size: V, words in the vocabulary (ids add pad, OOV, BOS, EOS).
    latent_size: N, CIFG units (670 in the paper).
    embedding_size: E, embedding and projection size (96 in the paper).
    shared_embedding: tie the output embedding to the input embedding.
    sequence_length: optional fixed input length; with it (and at least
      `MIN_UNROLLED_UNITS` units) the CIFG is unrolled (`UnrolledCIFG`,
      the same function and weights).
    seed: optional initializer seed (for reproducible tests).
    zero_init: start every weight at zero (for TFF computations that assign
      the weights before use; skips the initializers' cost).
  """
  vocab_size = checks.check_int(vocab_size, 'vocab_size', minimum=1)
  latent_size = checks.check_int(latent_size, 'latent_size', minimum=1)
  embedding_size = checks.check_int(embedding_size, 'embedding_size',
                                    minimum=1)
  num_ids = extended_vocab_size(vocab_size)

  def init(kind):
    if zero_init:
      return 'zeros'
    if seed is None:
      return kind
    initializer = tf.keras.initializers.get(kind)
    config = initializer.get_config()
    config['seed'] = seed
    return initializer.__class__.from_config(config)

  inputs = tf.keras.layers.Input(shape=(sequence_length,), dtype=tf.int64)
  embedding = tf.keras.layers.Embedding(
      num_ids, embedding_size, embeddings_initializer=init('uniform'),
      mask_zero=False, name='input_embedding')
  x = embedding(inputs)
  cifg_initializers = dict(kernel_initializer=init('glorot_uniform'),
                           recurrent_initializer=init('orthogonal'))
  if sequence_length is None or latent_size < MIN_UNROLLED_UNITS:
    x = tf.keras.layers.RNN(
        CIFGCell(latent_size, embedding_size, **cifg_initializers),
        return_sequences=True, name='cifg')(x)
  else:
    x = UnrolledCIFG(latent_size, embedding_size, **cifg_initializers,
                     name='cifg')(x)
  if shared_embedding:
    logits = TiedOutputEmbedding(embedding, name='output_embedding')(x)
  else:
    logits = tf.keras.layers.Dense(
        num_ids, kernel_initializer=init('glorot_uniform'),
        name='output_embedding')(x)
  return tf.keras.Model(inputs=inputs, outputs=logits, name='cifg_lm')
