"""FusedClipDPFactory equals TFF's DifferentiallyPrivateFactory."""

import collections

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from dpftrl_tff.aggregators import fused_clip

_STRUCT = collections.OrderedDict(
    kernel=tf.TensorSpec([30, 7], tf.float32),
    bias=tf.TensorSpec([7], tf.float32))


def _query(specs, clip, noise_multiplier, clients, seed):
  sum_query = tfp.TreeResidualSumQuery.build_l2_gaussian_query(
      clip, noise_multiplier, specs, noise_seed=seed, use_efficient=True)
  return tfp.NormalizedQuery(sum_query, denominator=float(clients))


def _updates(specs, scales, seed=0):
  rng = np.random.default_rng(seed)
  return [tf.nest.map_structure(
      lambda s, k=k: (rng.normal(size=s.shape) * k).astype(np.float32),
      specs) for k in scales]


class FusedClipDPFactoryTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('vector', tf.TensorSpec([50], tf.float32)),
      ('struct', _STRUCT),
      ('list', [tf.TensorSpec([4, 3], tf.float32),
                tf.TensorSpec([5], tf.float32)]))
  def test_equals_tff_factory_round_by_round(self, specs):
    # Same seeded query: TFF's factory and the fused one must give the same
    # results, states and DP events, round after round (tree noise included)
    # and over cohorts of different sizes and update norms.
    value_type = tff.types.tensorflow_to_type(specs)
    make = lambda: _query(specs, 1.5, 0.7, 4, seed=11)
    reference = tff.aggregators.DifferentiallyPrivateFactory(make()).create(
        value_type)
    fused = fused_clip.FusedClipDPFactory(make()).create(value_type)
    self.assertTrue(fused.initialize.type_signature.is_equivalent_to(
        reference.initialize.type_signature))
    self.assertTrue(fused.next.type_signature.is_equivalent_to(
        reference.next.type_signature))
    state_ref, state = reference.initialize(), fused.initialize()
    for round_num, scales in enumerate([(0.01, 5.0, 1.0), (3.0,),
                                        (0.5, 0.2, 9.0, 1.4)]):
      updates = _updates(specs, scales, seed=round_num)
      out_ref = reference.next(state_ref, updates)
      out = fused.next(state, updates)
      for a, b in zip(tf.nest.flatten(out_ref.result),
                      tf.nest.flatten(out.result)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
      self.assertEqual(str(out.measurements), str(out_ref.measurements))
      ref_leaves = tff.structure.flatten(out_ref.state)
      leaves = tff.structure.flatten(out.state)
      self.assertLen(leaves, len(ref_leaves))
      for a, b in zip(ref_leaves, leaves):
        if isinstance(a, (bytes, str)):   # The DP event's names.
          self.assertEqual(a, b)
        else:
          np.testing.assert_allclose(np.asarray(a, np.float64),
                                     np.asarray(b, np.float64),
                                     rtol=1e-5, atol=1e-6)
      state_ref, state = out_ref.state, out.state

  def test_noise_free_result_is_clipped_mean(self):
    specs = _STRUCT
    process = fused_clip.FusedClipDPFactory(
        _query(specs, 1.0, 0.0, 5, seed=None)).create(
            tff.types.tensorflow_to_type(specs))
    updates = _updates(specs, (1e-3, 0.2, 4.0, 30.0))
    out = process.next(process.initialize(), updates)

    def clipped(u):
      norm = np.sqrt(sum(np.sum(np.square(x)) for x in u.values()))
      return {k: x * min(1.0, 1.0 / norm) for k, x in u.items()}

    expected = {k: sum(clipped(u)[k] for u in updates) / 5 for k in specs}
    for k in specs:
      np.testing.assert_allclose(out.result[k], expected[k], rtol=1e-5,
                                 atol=1e-7)

  @parameterized.named_parameters(
      ('int', tff.TensorType(np.int32, [3])),
      ('struct_with_int', tff.StructType([tff.TensorType(np.float32, [2]),
                                          tff.TensorType(np.int64, [2])])))
  def test_refuses_non_float_values(self, value_type):
    factory = fused_clip.FusedClipDPFactory(
        _query(tf.TensorSpec([3], tf.float32), 1.0, 1.0, 2, seed=None))
    with self.assertRaisesRegex(TypeError, 'float tensors'):
      factory.create(value_type)

  def test_refuses_non_query(self):
    with self.assertRaisesRegex(TypeError, 'DPQuery'):
      fused_clip.FusedClipDPFactory(object())


if __name__ == '__main__':
  absltest.main()
