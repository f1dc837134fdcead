"""Every mechanism's noise comes from the operating system or --noise_seed.

No integer of any mechanism's state (what checkpoints hold) is the clock:
TensorFlow Privacy's noise generators seed themselves from `tf.timestamp()`
when given no seed, and adaptive clipping's count tree once did. A fixed
--noise_seed fixes all of a mechanism's noise (value and count trees, BLT,
SecAgg's rotation and rounding); without it two builds differ.
"""

import glob
import os
import tempfile
import time

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff.aggregators import adaptive
from dpftrl_tff.aggregators import dp_ftrl
from dpftrl_tff.aggregators import registry
from dpftrl_tff.run import learning_process
from dpftrl_tff.run import training
from tests.run import training_test

_DAY_SECONDS = 86400.0
_DIM = 16

# (name, config overrides): every mechanism with noise, SecAgg inside each
# mechanism that takes it.
_MECHANISMS = (
    ('tree', dict(aggregator='dp_ftrl')),
    ('adaptive', dict(aggregator='dp_ftrl_adaptive', initial_clip_norm=0.5,
                      clipped_count_stddev=1.0, restart_warmup=1,
                      restart_frequency=2)),
    ('blt', dict(aggregator='dp_ftrl_blt')),
    ('tree_secagg', dict(aggregator='dp_ftrl', secagg=True,
                         secagg_scale=4096.0)),
    ('blt_secagg', dict(aggregator='dp_ftrl_blt', secagg=True,
                        secagg_scale=4096.0)),
    ('none_secagg', dict(aggregator='none', noise_multiplier=0.0,
                         secagg=True, secagg_scale=4096.0)),
)


def clock_values(start: float, end: float, ints) -> list:
  """The integers in `ints` within a day of [start, end] (seconds since the
  epoch) in seconds, milliseconds, microseconds or nanoseconds."""
  found = []
  for scale in (1, 1e3, 1e6, 1e9):
    low, high = (start - _DAY_SECONDS) * scale, (end + _DAY_SECONDS) * scale
    found += [int(v) for v in ints if low <= v <= high]
  return found


def integers(structure) -> np.ndarray:
  """Every integer entry of every array in a nested state."""
  leaves = [np.asarray(x) for x in tf.nest.flatten(structure)]
  ints = [x.ravel() for x in leaves if np.issubdtype(x.dtype, np.integer)]
  return np.concatenate(ints) if ints else np.zeros([0], np.int64)


_CONTEXT = {'secure_sums': False}   # The TFF context this module last set.


def _process(overrides, noise_seed):
  config = training_test.tiny_config(**dict(
      dict(noise_multiplier=0.5, noise_seed=noise_seed, total_rounds=8),
      **overrides))
  # SecAgg runs under TFF's test context, the rest under the default one:
  # switched only when the kind changes (each switch starts another TFF
  # worker, and the test context is slower for the rest).
  secure_sums = config.secagg_settings().secagg
  if secure_sums != _CONTEXT['secure_sums']:
    if secure_sums:
      learning_process.prepare_execution(config)
    else:
      tff.backends.native.set_sync_local_cpp_execution_context()
    _CONTEXT['secure_sums'] = secure_sums
  factory = registry.get(config.aggregator).build_factory(
      config, tf.TensorSpec([_DIM], tf.float32))
  return factory.create(tff.TensorType(np.float32, [_DIM]))


def _rounds(process, rounds=3):
  """The state after each round and every round's result and measurements."""
  rng = np.random.default_rng(0)
  state, states, outputs = process.initialize(), [], []
  for _ in range(rounds):
    values = [rng.normal(size=_DIM).astype(np.float32) for _ in range(4)]
    out = process.next(state, values)
    state = out.state
    states.append(state)
    outputs.append((np.asarray(out.result),
                    tf.nest.flatten(out.measurements)))
  return states, outputs


def _equal(a, b) -> bool:
  flat_a, flat_b = tf.nest.flatten(a), tf.nest.flatten(b)
  return len(flat_a) == len(flat_b) and all(
      np.array_equal(np.asarray(x), np.asarray(y))
      for x, y in zip(flat_a, flat_b))


class MechanismSeedTest(parameterized.TestCase):

  @parameterized.named_parameters(*_MECHANISMS)
  def test_state_holds_no_clock_and_seeds_decide_the_noise(self, overrides):
    start = time.time()
    unseeded = _rounds(_process(overrides, None))
    other = _rounds(_process(overrides, None))
    end = time.time()
    for state in unseeded[0] + other[0]:
      self.assertEqual(clock_values(start, end, integers(state)), [])
    self.assertFalse(_equal(unseeded[1], other[1]))
    seeded = _rounds(_process(overrides, 11))
    self.assertTrue(_equal(seeded, _rounds(_process(overrides, 11))))
    self.assertFalse(_equal(seeded[1], _rounds(_process(overrides, 12))[1]))

  def test_adaptive_count_noise_follows_the_seed(self):
    # The clipped count's noise alone: value noise off (z = 0 keeps the
    # count noise sigma_b), so the clip estimates carry only the count tree.
    # The clip starts at the clients' median norm (their values are N(0, 1)
    # in 16 dimensions: norm about 4), so the clipped fraction is near 1/2,
    # away from TFF's clamp to [0, 1]. At the default clip (0.5) every
    # client was clipped: the noisy fraction was clamped to 0 whenever its
    # noise was negative, and two unseeded runs could give equal estimates.
    overrides = dict(_MECHANISMS[1][1], noise_multiplier=0.0,
                     initial_clip_norm=4.0)

    def estimates(noise_seed):
      _, outputs = _rounds(_process(overrides, noise_seed), rounds=4)
      return [m for _, m in outputs]

    self.assertTrue(_equal(estimates(11), estimates(11)))
    self.assertFalse(_equal(estimates(None), estimates(None)))
    self.assertFalse(_equal(estimates(11), estimates(12)))

  def test_count_tree_seed_is_derived_and_distinct(self):
    query = adaptive.build_adaptive_query(
        noise_multiplier=1.0, clients_per_round=10,
        record_specs=tf.TensorSpec([2], tf.float32),
        clipped_count_stddev=1.0, noise_seed=11)
    seeds = [int(s) for s in integers(query.initial_global_state())
             if s > 2**20]
    count_seed = dp_ftrl.derived_noise_seed(11, adaptive.COUNT_SEED_STREAM)
    # The value tree's pair (11, 11) and the count tree's derived pair, each
    # advanced by the one draw made when the state is built.
    self.assertEqual(seeds, [count_seed + 1] * 2)
    self.assertNotEqual(count_seed, 11)
    self.assertLess(count_seed, 2**62)
    self.assertNotEqual(
        count_seed, dp_ftrl.derived_noise_seed(12, adaptive.COUNT_SEED_STREAM))


class TrainingSeedTest(absltest.TestCase):
  """Adaptive clipping in training: checkpoints and metrics."""

  def setUp(self):
    super().setUp()
    if _CONTEXT['secure_sums']:
      tff.backends.native.set_sync_local_cpp_execution_context()
      _CONTEXT['secure_sums'] = False

  def _train(self, noise_seed):
    out = os.path.join(tempfile.mkdtemp(), 'run')
    summary = training_test.train(training_test.tiny_config(
        **dict(_MECHANISMS[1][1], total_rounds=3, noise_seed=noise_seed)),
        out)
    with open(os.path.join(out, training.METRICS_FILE)) as f:
      estimates = [line.split(',') for line in f.read().splitlines()]
    header = estimates[0]
    column = header.index('clip_norm_estimate')
    # Only unpredictable noise gives the run a guarantee.
    self.assertEqual(summary['privacy'] is None, noise_seed is not None)
    return out, [row[column] for row in estimates[1:]]

  def test_checkpoints_hold_no_clock_and_the_seed_fixes_the_clips(self):
    start = time.time()
    unseeded, unseeded_clips = self._train(None)
    end = time.time()
    checkpoints = glob.glob(os.path.join(unseeded, 'checkpoints', '*.npz'))
    self.assertNotEmpty(checkpoints)
    for path in checkpoints:
      with np.load(path) as f:
        ints = integers([f[k] for k in f.files])
      self.assertNotEmpty(ints)
      self.assertEqual(clock_values(start, end, ints), [], path)
    _, first = self._train(11)
    _, second = self._train(11)
    self.assertEqual(first, second)
    self.assertNotEqual(first, unseeded_clips)


if __name__ == '__main__':
  absltest.main()
