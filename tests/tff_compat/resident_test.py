"""Rounds with the state kept in TFF's worker equal plain `process.next`."""

import dataclasses
import os
import subprocess
import sys

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff import runtime
from dpftrl_tff.aggregators import registry
from dpftrl_tff.run import learning_process
from dpftrl_tff.run import training
from dpftrl_tff.tff_compat import resident
from tests import fixtures

_VOCAB = 30
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _config(aggregator, secagg=False):
  adaptive = dict(initial_clip_norm=0.05, restart_warmup=1,
                  restart_frequency=2, clipped_count_stddev=1.0)
  return training.TrainConfig(
      clients_per_round=3, vocab_size=_VOCAB, latent_size=6,
      embedding_size=4, aggregator=aggregator, secagg=secagg,
      secagg_scale=64.0, clip_norm=0.5,
      noise_multiplier=0.0 if aggregator == 'none' else 0.5,
      seed=0, noise_seed=11,
      # Algorithm 1's settings only where they apply (refused elsewhere).
      **(adaptive if aggregator == 'dp_ftrl_adaptive' else {}))


def _dataset(seed, sentences=4):
  x = tf.random.stateless_uniform([sentences, 20], seed=[seed, 1],
                                  maxval=_VOCAB + 4, dtype=tf.int64)
  return tf.data.Dataset.from_tensor_slices((x, x)).batch(2)


# Cohort sizes 3, 2, 3: the middle round runs on another TFF executor.
_COHORTS = [[1, 2, 3], [4, 5], [6, 7, 8], [9, 10, 11]]


def _leaves(state):
  return [np.asarray(x) for x in tf.nest.flatten(state)]


def _norm(process, before, after):
  a = process.get_model_weights(before).trainable
  b = process.get_model_weights(after).trainable
  return np.sqrt(sum(np.sum((np.float64(y) - np.float64(x))**2)
                     for x, y in zip(a, b)))


class ResidentProcessTest(tf.test.TestCase, parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # Seven tests, four configs: a build each (nothing here patches one).
    cls.enter_context(fixtures.reused_builds())

  def tearDown(self):
    runtime.shutdown_workers()
    tff.backends.native.set_sync_local_cpp_execution_context()
    super().tearDown()

  @parameterized.named_parameters(
      ('fedavg', 'none', False),
      ('dp_ftrl', 'dp_ftrl', False),
      ('dp_ftrl_adaptive_with_restarts', 'dp_ftrl_adaptive', False),
      ('dp_ftrl_secagg', 'dp_ftrl', True))
  def test_rounds_equal_plain_process_next(self, aggregator, secagg):
    config = _config(aggregator, secagg)
    process = learning_process.build_learning_process(config)
    initial = learning_process.initial_state(process, config)
    rounds = resident.ResidentProcess(process)
    self.assertTrue(rounds.keeps_state_in_worker)
    plain, kept = initial, initial
    for cohort in _COHORTS:
      datasets = [_dataset(seed) for seed in cohort]
      output = process.next(plain, datasets)
      kept, metrics, norm = rounds.next(kept, datasets)
      self.assertIsInstance(kept, resident.ResidentState)
      self.assertEqual(str(metrics), str(output.metrics))
      self.assertAllClose(norm, _norm(process, plain, output.state),
                          rtol=1e-12, atol=0)
      self.assertGreater(norm, 0.0)
      plain = output.state
    materialized = rounds.materialize(kept)
    self.assertIs(type(materialized), type(plain))
    self.assertIs(rounds.materialize(kept), materialized)  # Cached.
    expected, actual = _leaves(plain), _leaves(materialized)
    self.assertLen(actual, len(expected))
    for want, got in zip(expected, actual):
      self.assertEqual(want.dtype, got.dtype)
      np.testing.assert_array_equal(got, want)

  def test_fallback_without_executor_interface_equals_plain(self):
    config = _config('dp_ftrl')
    process = learning_process.build_learning_process(config)
    initial = learning_process.initial_state(process, config)

    class _PlainContext:
      pass

    rounds = resident.ResidentProcess(process, context=_PlainContext())
    self.assertFalse(rounds.keeps_state_in_worker)
    datasets = [_dataset(seed) for seed in _COHORTS[0]]
    kept, _, norm = rounds.next(initial, datasets)
    plain = process.next(initial, datasets).state
    self.assertAllClose(norm, _norm(process, initial, plain), rtol=1e-12)
    for want, got in zip(_leaves(plain), _leaves(rounds.materialize(kept))):
      np.testing.assert_array_equal(got, want)

  def test_error_in_a_round_is_raised_and_next_round_works(self):
    # SecAgg refuses more clients than the report goal (3): the worker's
    # error reaches the caller, and the process keeps working afterwards.
    config = _config('dp_ftrl', secagg=True)
    process = learning_process.build_learning_process(config)
    initial = learning_process.initial_state(process, config)
    rounds = resident.ResidentProcess(process)
    with self.assertRaisesRegex(Exception, 'more clients than report_goal'):
      rounds.next(initial, [_dataset(s) for s in range(4)])
    kept, _, norm = rounds.next(initial, [_dataset(s) for s in range(3)])
    self.assertGreater(norm, 0.0)
    self.assertIsInstance(kept, resident.ResidentState)

  def test_lost_state_is_a_clear_error(self):
    config = _config('none')
    process = learning_process.build_learning_process(config)
    rounds = resident.ResidentProcess(process)
    kept, _, _ = rounds.next(learning_process.initial_state(process, config),
                             [_dataset(s) for s in range(3)])
    context = tff.framework.get_context_stack().current
    context.executor_factory.clean_up_executor({tff.CLIENTS: 3})
    with self.assertRaises(resident.ResidentStateLostError):
      rounds.materialize(kept)
    with self.assertRaises(resident.ResidentStateLostError):
      rounds.next(kept, [_dataset(s) for s in range(3)])


class ResidentAggregationTest(tf.test.TestCase, parameterized.TestCase):

  def tearDown(self):
    runtime.shutdown_workers()
    tff.backends.native.set_sync_local_cpp_execution_context()
    super().tearDown()

  @parameterized.named_parameters(('dp_ftrl', 'dp_ftrl'),
                                  ('dp_ftrl_blt', 'dp_ftrl_blt'))
  def test_rounds_equal_plain_process_next(self, aggregator):
    config = dataclasses.replace(_config(aggregator), total_rounds=8)
    mechanism = registry.get(aggregator)
    config = mechanism.planned(config, 40)
    factory = mechanism.build_factory(config, tf.TensorSpec([50], tf.float32))
    process = factory.create(tff.TensorType(np.float32, [50]))
    rounds = resident.ResidentAggregation(process)
    self.assertTrue(rounds.keeps_state_in_worker)
    rng = np.random.default_rng(0)
    plain = kept = process.initialize()
    for cohort in _COHORTS:   # Fresh values each round, sizes 3, 2, 3, 3.
      values = list(rng.standard_normal((len(cohort), 50), np.float32))
      output = process.next(plain, values)
      plain = output.state
      kept, result = rounds.next(kept, values)
      self.assertIsInstance(kept, resident.ResidentState)
      np.testing.assert_array_equal(result, output.result)
    for want, got in zip(_leaves(plain), _leaves(rounds.materialize(kept))):
      np.testing.assert_array_equal(got, want)


_EXIT_SCRIPT = """
from absl import logging
import tensorflow as tf
from dpftrl_tff import runtime, tff_compat
from dpftrl_tff.run import learning_process, training
from dpftrl_tff.tff_compat import resident
runtime.install()
tff_compat.install()
logging.set_verbosity(logging.INFO)   # TFF's gRPC retry log is INFO.
config = training.TrainConfig(clients_per_round=2, vocab_size=30,
                              latent_size=6, embedding_size=4,
                              aggregator='dp_ftrl', noise_multiplier=0.5,
                              clip_norm=1.0, seed=0)
process = learning_process.build_learning_process(config)
rounds = resident.ResidentProcess(process)
x = tf.zeros([4, 20], tf.int64)
data = [tf.data.Dataset.from_tensor_slices((x, x)).batch(2)] * 2
state = learning_process.initial_state(process, config)
for _ in range(3):
  state, _, _ = rounds.next(state, data)
runtime.shutdown_workers()   # Worker gone before the values' finalizers.
del state
print('done', flush=True)
"""


class ExitTest(tf.test.TestCase):

  def test_no_traceback_when_worker_stops_before_values_are_freed(self):
    proc = subprocess.run(
        [sys.executable, '-c', _EXIT_SCRIPT], cwd=_ROOT, capture_output=True,
        text=True, timeout=600,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn('done', proc.stdout)
    self.assertNotIn('Traceback', proc.stderr)
    self.assertNotIn('gRPC error', proc.stderr)


if __name__ == '__main__':
  tf.test.main()
