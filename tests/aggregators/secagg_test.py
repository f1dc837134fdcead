"""Tests of the SecAgg discretization factory (Algorithm 2)."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
from scipy import linalg
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff import accounting
from dpftrl_tff.aggregators import dp_ftrl
from dpftrl_tff.aggregators import secagg
from tests.reference import secagg_reference as ref


def setUpModule():
  # Secure sums run (as plain sums mod M) only in TFF's test context.
  tff.backends.test.set_sync_test_cpp_execution_context()


def _params(dim, scale=2.0**8, clip=1.0, m=8):
  return secagg.SecAggParams(clip_norm=clip, scale=scale, report_goal=m,
                             dim=dim, alpha=math.exp(-0.5))


def _round_zero_signs(seed, dim):
  """The signs a factory made with `seed` uses in its first round."""
  return secagg.random_signs(tf.random.experimental.stateless_fold_in(
      tf.constant([seed, 0], tf.int64), 0), dim)


class StepsTest(parameterized.TestCase):

  @parameterized.named_parameters(('d2', 2), ('d8', 8), ('d64', 64),
                                  ('d128_two_factors', 128),
                                  ('d4096_two_full_factors', 4096))
  def test_hadamard_matches_scipy_and_reference(self, d):
    x = np.random.default_rng(d).normal(size=d).astype(np.float32)
    expected = linalg.hadamard(d) @ x
    # float32 sums of d terms of size ~1: error relative to sqrt(d).
    np.testing.assert_allclose(
        secagg.fast_walsh_hadamard(tf.constant(x)).numpy(), expected,
        rtol=0, atol=1e-5 * math.sqrt(d))
    np.testing.assert_allclose(ref.hadamard_transform(x), expected,
                               rtol=1e-9, atol=1e-9)

  @parameterized.named_parameters(('d8192_three_factors', 2**13),
                                  ('d2pow19_four_factors', 2**19),
                                  ('d2pow22_paper_size', 2**22))
  def test_large_hadamard_matches_reference(self, d):
    x = np.random.default_rng(d).normal(size=d).astype(np.float32)
    expected = ref.hadamard_transform(x.astype(np.float64))
    got = secagg.fast_walsh_hadamard(tf.constant(x)).numpy()
    # Entries are sums of d terms of size ~1: compare relative to sqrt(d).
    np.testing.assert_allclose(got, expected, rtol=0,
                               atol=1e-5 * math.sqrt(d))

  def test_hadamard_refuses_other_lengths(self):
    with self.assertRaisesRegex(ValueError, 'power-of-two'):
      secagg.fast_walsh_hadamard(tf.zeros([12]))

  @parameterized.named_parameters(('d100000', 100_000), ('d2pow20', 2**20))
  def test_random_signs_are_fair_and_independent(self, d):
    signs = secagg.random_signs(tf.constant([7, 8], tf.int64), d).numpy()
    self.assertEqual(signs.shape, (d,))
    self.assertEqual(set(np.unique(signs)), {-1.0, 1.0})
    # Mean, lag-1 and lag-32 (same bit of consecutive words) correlations
    # are sums of d fair +-1 terms: |.| < 5 / sqrt(d) but for 6e-7.
    bound = 5 / math.sqrt(d)
    self.assertLess(abs(signs.mean()), bound)
    self.assertLess(abs(np.mean(signs[1:] * signs[:-1])), bound)
    self.assertLess(abs(np.mean(signs[32:] * signs[:-32])), bound)
    other = secagg.random_signs(tf.constant([7, 9], tf.int64), d).numpy()
    self.assertLess(abs(np.mean(signs * other)), bound)
    again = secagg.random_signs(tf.constant([7, 8], tf.int64), d).numpy()
    np.testing.assert_array_equal(signs, again)

  @parameterized.named_parameters(('d16', 16), ('d1024', 1024))
  def test_rotation_is_inverted_exactly(self, d):
    rng = np.random.default_rng(1)
    x = rng.normal(size=d).astype(np.float32)
    signs = secagg.random_signs(tf.constant([3, 4], tf.int64), d)
    self.assertEqual(set(np.unique(signs.numpy())), {-1.0, 1.0})
    y = secagg.rotate(tf.constant(x), signs)
    self.assertAlmostEqual(float(tf.norm(y)), float(np.linalg.norm(x)),
                           places=3)
    np.testing.assert_allclose(secagg.unrotate(y, signs).numpy(), x,
                               atol=1e-5)

  def test_encode_steps_match_reference(self):
    # Same signs; rounding draws differ, so compare the pre-rounding vector
    # and check that each rounded coordinate is its floor or ceiling.
    dim = 37                    # not a power of two: padded to 64
    params = _params(dim)
    rng = np.random.default_rng(2)
    x = rng.normal(size=dim).astype(np.float32) * 3.0
    signs = secagg.random_signs(tf.constant([5, 6], tf.int64),
                                params.padded_dim)
    # TF steps 1-3.
    y = secagg.clip_l2(tf.constant(x), params.clip_norm) * params.scale
    y = tf.pad(y, [[0, params.padded_dim - dim]])
    y = secagg.clip_linf(secagg.rotate(y, signs), params.linf_bound).numpy()
    # Reference steps 1-3 (float64).
    z = x.astype(np.float64) * min(1, 1 / np.linalg.norm(x)) * params.scale
    z = np.concatenate([z, np.zeros(params.padded_dim - dim)])
    z = ref.hadamard_transform(signs.numpy() * z) / math.sqrt(
        params.padded_dim)
    z = z * min(1.0, params.linf_bound / np.max(np.abs(z)))
    np.testing.assert_allclose(y, z, rtol=1e-4, atol=1e-3)
    encoded, retries, ok, top = secagg.encode(
        tf.constant(x), signs, tf.constant([1, 2], tf.int64), params, 100)
    self.assertGreaterEqual(int(top), int(np.max(encoded.numpy())))
    self.assertLessEqual(int(top), 2 * params.linf_bound)
    self.assertTrue(bool(ok))
    self.assertGreaterEqual(int(retries), 0)
    rounded = encoded.numpy() - params.linf_bound
    self.assertTrue(np.all((rounded == np.floor(z)) | (rounded == np.ceil(z))
                           | (np.abs(rounded - z) < 1e-3)))
    ref_encoded, _ = ref.encode(
        x, clip_norm=1.0, scale=params.scale, signs=signs.numpy(),
        linf_bound=params.linf_bound,
        norm_bound_squared=params.norm_bound_squared,
        rng=np.random.default_rng(0))
    self.assertLessEqual(np.max(np.abs(ref_encoded - encoded.numpy())), 1)

  @parameterized.named_parameters(
      ('float32_path', 3000.5),
      ('float32_path_near_2_24', 2.0**24 - 1),
      ('float64_path', 2.0**24 + 17.25))
  def test_squared_norm_decision_is_exact(self, bound):
    # Integer vectors (d = 2^20) with squared norms exactly at, one below
    # and one above floor(bound), and far above it (1600 * 2^20 > 2^24):
    # the decision equals the exact integer comparison.
    dim = 2**20

    def vector_with_squared_norm(target):
      big, ones = divmod(target, 1600)   # 40^2 = 1600.
      v = np.zeros(dim, np.float32)
      v[:big] = -40.0
      v[big:big + ones] = 1.0
      return v

    edge = math.floor(bound)
    cases = [vector_with_squared_norm(t) for t in (edge - 1, edge, edge + 1)]
    cases.append(np.full(dim, 40.0, np.float32))
    for v in cases:
      norm2 = int(np.sum(v.astype(np.int64)**2))
      got = bool(secagg.squared_norm_at_most(tf.constant(v), bound))
      self.assertEqual(got, norm2 <= bound, msg=f'{norm2} vs {bound}')

  @parameterized.named_parameters(('small_scale', 4.0), ('mid', 64.0),
                                  ('large', 4096.0))
  def test_every_encoded_vector_meets_the_norm_bound(self, scale):
    params = _params(300, scale=scale)
    rng = np.random.default_rng(3)
    signs = secagg.random_signs(tf.constant([1, 1], tf.int64),
                                params.padded_dim)
    for i in range(20):
      x = rng.normal(size=300).astype(np.float32) * rng.uniform(0.01, 10)
      encoded, _, ok, top = secagg.encode(tf.constant(x), signs,
                                          tf.constant([i, 9], tf.int64),
                                          params, 1000)
      self.assertTrue(bool(ok))
      self.assertGreaterEqual(int(top), int(np.max(encoded.numpy())))
      centred = encoded.numpy().astype(np.float64) - params.linf_bound
      self.assertLessEqual(np.sum(centred**2), params.norm_bound_squared)
      self.assertTrue(np.all(encoded.numpy() >= 0))
      self.assertTrue(np.all(encoded.numpy() <= 2 * params.linf_bound))

  def test_reference_round_trip(self):
    params = _params(50, scale=2.0**12)
    rng = np.random.default_rng(4)
    signs = np.where(rng.random(params.padded_dim) < 0.5, -1.0, 1.0)
    xs = [rng.normal(size=50) * 0.1 for _ in range(5)]
    total = sum(ref.encode(x, clip_norm=1.0, scale=params.scale, signs=signs,
                           linf_bound=params.linf_bound,
                           norm_bound_squared=params.norm_bound_squared,
                           rng=rng)[0] for x in xs) % params.modulus
    decoded = ref.decode(total, 5, scale=params.scale, signs=signs,
                         linf_bound=params.linf_bound, dim=50)
    true = sum(x * min(1, 1 / np.linalg.norm(x)) for x in xs)
    self.assertLess(np.linalg.norm(decoded - true), 0.01)


def _value_type(dim):
  return tff.StructType([('w', tff.TensorType(np.float32, [dim]))])


def _run(factory, values):
  process = factory.create(_value_type(values[0].shape[0]))
  out = process.next(process.initialize(), [{'w': v} for v in values])
  return np.asarray(out.result['w']), out.measurements


class FactoryTest(parameterized.TestCase):

  @parameterized.named_parameters(('pow2', 64), ('not_pow2', 100),
                                  ('odd', 333))
  def test_decoded_sum_matches_true_clipped_sum(self, dim):
    rng = np.random.default_rng(dim)
    values = [rng.normal(size=dim).astype(np.float32) * s
              for s in (0.01, 0.3, 5.0)]
    true = sum(v * min(1.0, 1.0 / np.linalg.norm(v)) for v in values)
    errors = []
    for scale in (2.0**4, 2.0**8, 2.0**12):
      factory = secagg.SecAggDiscretizationFactory(
          clip_norm=1.0, scale=scale, report_goal=4, debug=True, seed=1)
      decoded, measurements = _run(factory, values)
      errors.append(np.linalg.norm(decoded - true))
      self.assertAlmostEqual(float(measurements['decode_error_l2']),
                             errors[-1], places=4)
      self.assertEqual(int(measurements['wraparounds']), 0)
      self.assertEqual(int(measurements['num_clients']), 3)
      # Rounding error: each of n clients adds at most sqrt(d')/2 per
      # coordinate-norm before unscaling (plus the l_inf clip, a no-op here).
      d_pad = secagg.SecAggParams(clip_norm=1.0, scale=scale, report_goal=4,
                                  dim=dim, alpha=0.6).padded_dim
      self.assertLess(errors[-1], 3 * math.sqrt(d_pad) / scale + 1e-4)
    self.assertLess(errors[2], errors[1])
    self.assertLess(errors[1], errors[0])

  @parameterized.named_parameters(('fresh_entropy', None), ('fixed_seed', 3))
  def test_equal_norm_clients_round_independently(self, seed):
    # Inside DP-FTRL every update arrives clipped on the device, so all
    # norms equal C (as here) for every clipped client. Independent rounding
    # errors (variance f(1 - f) <= 1/4 per coordinate and client) add up
    # like sqrt(n): E||error||^2 <= n d' / (4 s^2). Shared uniforms (the
    # rounding seeded by the norm alone) made them add up like n.
    n, dim, scale, rounds = 16, 256, 8.0, 10
    rng = np.random.default_rng(5)
    values = []
    for _ in range(n):
      v = rng.normal(size=dim).astype(np.float32)
      values.append((v / np.linalg.norm(v)).astype(np.float32))
    factory = secagg.SecAggDiscretizationFactory(
        clip_norm=1.0, scale=scale, report_goal=n, debug=True, seed=seed)
    process = factory.create(_value_type(dim))
    state = process.initialize()
    squared = []
    for _ in range(rounds):
      out = process.next(state, [{'w': v} for v in values])
      state = out.state
      squared.append(float(out.measurements['decode_error_l2'])**2)
    bound = n * dim / (4 * scale**2)
    self.assertLess(np.mean(squared), 1.2 * bound)
    # Fully correlated rounding would be about n times larger.
    self.assertGreater(np.mean(squared), 0.2 * bound)

  def test_equal_updates_round_independently_by_default(self):
    dim, scale = 256, 8.0
    value = 10.0 * np.random.default_rng(1).normal(size=dim).astype(
        np.float32)
    process = secagg.SecAggDiscretizationFactory(
        clip_norm=1.0, scale=scale, report_goal=2,
        debug=True).create(_value_type(dim))
    out = process.next(process.initialize(), [{'w': value}] * 2)
    # Identical rounding would give an error of exactly twice a client's;
    # independent rounding an error whose squared norm is about the sum.
    error = float(out.measurements['decode_error_l2'])
    single = secagg.SecAggDiscretizationFactory(
        clip_norm=1.0, scale=scale, report_goal=1,
        debug=True).create(_value_type(dim))
    one = float(single.next(single.initialize(),
                            [{'w': value}]).measurements['decode_error_l2'])
    self.assertLess(error, 1.8 * one)

  @parameterized.named_parameters(('exact_count', True),
                                  ('bound_only', False))
  def test_no_wraparound_with_m_clients_at_the_extreme(self, debug):
    # m clients whose rotated updates all sit at the same positive value
    # s C / sqrt(d') in every coordinate: the largest integer sums m equal
    # updates can give (an l2-clipped vector cannot reach C_inf everywhere).
    m, dim = 6, 16
    factory = secagg.SecAggDiscretizationFactory(
        clip_norm=1.0, scale=2.0**6, report_goal=m, debug=debug, seed=2)
    params = factory.params_for(dim)
    signs = _round_zero_signs(2, params.padded_dim)
    # Pre-image of the all-ones direction: unrotate a constant vector.
    v = secagg.unrotate(tf.ones([params.padded_dim]), signs).numpy()
    values = [v.astype(np.float32)] * m
    decoded, measurements = _run(factory, values)
    self.assertEqual(int(measurements['wraparounds']), 0)
    top = params.linf_bound + 1.0 * 2.0**6 / math.sqrt(params.padded_dim)
    self.assertBetween(int(measurements['integer_sum_bound']),
                       m * math.floor(top), m * math.ceil(top))
    self.assertLess(int(measurements['integer_sum_bound']), params.modulus)
    true = m * v / np.linalg.norm(v)
    self.assertLess(np.linalg.norm(decoded - true), 0.2)

  @parameterized.named_parameters(('exact_count', True),
                                  ('bound_only', False))
  def test_integer_sum_reaches_m_minus_1_without_wrapping(self, debug):
    # With d' = 128, s C > C_inf: an update whose rotation is one spike is
    # l_inf-clipped to exactly C_inf there, so m of them sum to 2 C_inf m =
    # M - 1 in that coordinate, the largest sum without wrapping.
    m, dim = 5, 128
    factory = secagg.SecAggDiscretizationFactory(
        clip_norm=1.0, scale=2.0**6, report_goal=m, debug=debug, seed=3)
    params = factory.params_for(dim)
    self.assertGreater(params.scale * params.clip_norm, params.linf_bound)
    signs = _round_zero_signs(3, params.padded_dim)
    spike = np.zeros(params.padded_dim, np.float32)
    spike[0] = 1.0
    v = secagg.unrotate(tf.constant(spike), signs).numpy()
    _, measurements = _run(factory, [v] * m)
    self.assertEqual(int(measurements['integer_sum_bound']),
                     params.modulus - 1)
    self.assertEqual(int(measurements['wraparounds']), 0)

  def test_more_clients_than_report_goal_is_refused(self):
    factory = secagg.SecAggDiscretizationFactory(clip_norm=1.0, scale=16.0,
                                                 report_goal=2, seed=1)
    with self.assertRaisesRegex(Exception, 'more clients than report_goal'):
      _run(factory, [np.ones(8, np.float32)] * 3)

  def test_measurements(self):
    factory = secagg.SecAggDiscretizationFactory(clip_norm=1.0, scale=256.0,
                                                 report_goal=10, seed=1)
    _, m = _run(factory, [np.ones(100, np.float32)] * 4)
    params = factory.params_for(100)
    self.assertEqual(float(m['bits_per_parameter']),
                     accounting.bits_per_parameter(params.modulus))
    self.assertEqual(float(m['modulus']), params.modulus)
    self.assertGreaterEqual(int(m['rounding_retries']), 0)
    self.assertEqual(int(m['rounding_failures']), 0)
    self.assertNotIn('decode_error_l2', m)
    self.assertEqual(int(m['wraparounds']), 0)
    self.assertBetween(int(m['integer_sum_bound']), 1, params.modulus - 1)

  def test_modulus_too_large_is_a_clear_error(self):
    factory = secagg.SecAggDiscretizationFactory(clip_norm=1.0, scale=2.0**40,
                                                 report_goal=100)
    with self.assertRaisesRegex(ValueError, '--secagg_scale'):
      factory.create(_value_type(64))

  def test_inside_dp_ftrl_without_noise_equals_plain_mean(self):
    dim, m = 40, 5
    rng = np.random.default_rng(9)
    values = [rng.normal(size=dim).astype(np.float32) for _ in range(m)]
    inner = secagg.SecAggDiscretizationFactory(clip_norm=1.0, scale=2.0**14,
                                               report_goal=m, seed=3)
    factory = dp_ftrl.build_dp_ftrl_factory(
        noise_multiplier=0.0, clients_per_round=m, clip_norm=1.0,
        record_specs=tf.TensorSpec([dim], tf.float32),
        record_aggregation_factory=inner)
    process = factory.create(tff.TensorType(np.float32, [dim]))
    result = process.next(process.initialize(), values).result
    expected = sum(v / max(1.0, np.linalg.norm(v)) for v in values) / m
    np.testing.assert_allclose(result, expected, atol=2e-3)

  def test_noise_calibrated_to_inflated_clip(self):
    params = _params(2**20, scale=2.0**4, clip=1.0)
    z = secagg.noise_multiplier_for_secagg(2.0, params)
    self.assertAlmostEqual(z * params.clip_norm,
                           2.0 * accounting.inflated_clip_norm(
                               1.0, params.padded_dim, 2.0**4))


if __name__ == '__main__':
  absltest.main()
