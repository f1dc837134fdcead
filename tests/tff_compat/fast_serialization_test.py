"""The copy-free serializer writes exactly the bytes TFF's own would."""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import executor_pb2
from tensorflow_federated.python.core.impl.executors import value_serialization

from dpftrl_tff.tff_compat import fast_serialization

_F32 = tff.TensorType(np.float32, [3])
_I64 = tff.TensorType(np.int64, [2, 2])


def _cases():
  rng = np.random.default_rng(0)
  vec = lambda: rng.normal(size=3).astype(np.float32)
  mat = lambda: rng.integers(0, 9, size=(2, 2)).astype(np.int64)
  named = tff.StructType([('a', _F32), ('b', tff.StructType([_I64, _F32]))])
  return [
      ('tensor', vec(), _F32),
      ('scalar', np.float32(2.5), tff.TensorType(np.float32)),
      ('unnamed_struct', [vec(), mat()], tff.StructType([_F32, _I64])),
      ('named_nested_struct',
       collections.OrderedDict(a=vec(), b=[mat(), vec()]), named),
      ('empty_struct', [], tff.StructType([])),
      ('server_placed',
       collections.OrderedDict(a=vec(), b=[mat(), vec()]),
       tff.FederatedType(named, tff.SERVER)),
      ('clients_placed', [vec(), vec(), vec()],
       tff.FederatedType(_F32, tff.CLIENTS)),
      ('clients_all_equal', vec(),
       tff.FederatedType(_F32, tff.CLIENTS, all_equal=True)),
      ('no_clients', [], tff.FederatedType(_F32, tff.CLIENTS)),
      ('struct_of_federated',
       [vec(), [[vec(), mat()], [vec(), mat()]]],
       tff.StructType([
           tff.FederatedType(_F32, tff.SERVER),
           tff.FederatedType(tff.StructType([_F32, _I64]), tff.CLIENTS)])),
  ]


def _leaves(value):
  if isinstance(value, tff.structure.Struct):
    return _leaves([v for _, v in tff.structure.iter_elements(value)])
  if isinstance(value, dict):
    return _leaves(list(value.values()))
  if isinstance(value, (list, tuple)):
    return [leaf for v in value for leaf in _leaves(v)]
  return [np.asarray(value)]


class FastSerializationTest(tf.test.TestCase, parameterized.TestCase):

  def tearDown(self):
    fast_serialization.uninstall()
    super().tearDown()

  @parameterized.named_parameters(*_cases())
  def test_same_bytes_and_type_as_tff(self, value, type_spec):
    expected, expected_type = fast_serialization._ORIGINAL(value, type_spec)
    # The hand-encoded wire bytes parse to the same message.
    raw, raw_type = fast_serialization.encode_value(value, type_spec)
    got = executor_pb2.Value.FromString(raw)
    self.assertEqual(got.SerializeToString(deterministic=True),
                     expected.SerializeToString(deterministic=True))
    self.assertEqual(raw_type, expected_type)
    if isinstance(type_spec, tff.FederatedType) and isinstance(
        value, list) and not value:
      return  # TFF refuses to deserialize a federated value with no members.
    # And it round-trips through TFF's deserializer.
    back, _ = value_serialization.deserialize_value(got, type_spec)
    flat_in, flat_back = _leaves(value), _leaves(back)
    self.assertLen(flat_back, len(flat_in))
    for a, b in zip(flat_in, flat_back):
      self.assertAllEqual(a, b)

  def test_datasets_inside_federated_values(self):
    ds = tf.data.Dataset.range(5).map(lambda x: x * 2).batch(2)
    type_spec = tff.FederatedType(tff.SequenceType(
        tff.TensorType(np.int64, [None])), tff.CLIENTS)
    expected, _ = fast_serialization._ORIGINAL([ds, ds], type_spec)
    raw, _ = fast_serialization.encode_value([ds, ds], type_spec)
    got = executor_pb2.Value.FromString(raw)
    # TF's dataset graphs are not byte-deterministic; compare the rest, and
    # the elements the datasets give back.
    self.assertEqual(got.federated.type, expected.federated.type)
    self.assertLen(got.federated.value, 2)
    for g, e in zip(got.federated.value, expected.federated.value):
      self.assertEqual(g.sequence.element_type, e.sequence.element_type)
    back, _ = value_serialization.deserialize_value(got, type_spec)
    for client_ds in back:
      self.assertAllEqual([x.numpy().tolist() for x in client_ds],
                          [[0, 2], [4, 6], [8]])

  def test_wrong_arity_is_refused(self):
    with self.assertRaisesRegex(TypeError, '2 elements'):
      fast_serialization.encode_value([np.zeros(3, np.float32)],
                                      tff.StructType([_F32, _F32]))

  def test_wrong_dtype_is_refused_as_by_tff(self):
    with self.assertRaisesRegex(TypeError, 'dtype'):
      fast_serialization.encode_value(
          [np.zeros(3, np.float64)], tff.StructType([_F32]))

  def test_non_contiguous_array(self):
    value = [np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]]
    type_spec = tff.StructType([tff.TensorType(np.float32, [3, 2])])
    raw, _ = fast_serialization.encode_value(value, type_spec)
    expected, _ = fast_serialization._ORIGINAL(value, type_spec)
    self.assertEqual(executor_pb2.Value.FromString(raw), expected)

  def test_install_and_switch_off(self):
    self.assertTrue(fast_serialization.install())
    self.assertTrue(fast_serialization.installed())
    with self.subTest('env switch'):
      with tf.compat.v1.test.mock.patch.dict(
          'os.environ', {fast_serialization.ENV_SWITCH: '0'}):
        self.assertFalse(fast_serialization.install())
      self.assertFalse(fast_serialization.installed())

  def test_computation_gives_same_result_with_and_without(self):
    @tff.tensorflow.computation(tff.StructType([('w', _F32), ('b', _I64)]))
    def add_one(x):
      return collections.OrderedDict(w=x['w'] + 1.0, b=x['b'] + 1)

    @tff.federated_computation(
        tff.FederatedType(add_one.type_signature.parameter, tff.CLIENTS))
    def run(x):
      return tff.federated_map(add_one, x)

    values = [collections.OrderedDict(w=np.full(3, i, np.float32),
                                      b=np.full((2, 2), i, np.int64))
              for i in range(3)]
    fast_serialization.uninstall()
    expected = run(values)
    fast_serialization.install()
    got = run(values)
    self.assertLen(got, 3)
    for v, e, g in zip(values, expected, got):
      self.assertAllEqual(g['w'], v['w'] + 1.0)
      self.assertAllEqual(g['b'], v['b'] + 1)
      self.assertAllEqual(e['w'], g['w'])
      self.assertAllEqual(e['b'], g['b'])


if __name__ == '__main__':
  tf.test.main()
