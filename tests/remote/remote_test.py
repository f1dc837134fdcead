"""Rounds across TFF workers: equal results, and the failures of issue 15.

Two loopback workers (TFF's worker_binary on free ports, started here) stand
for two machines.
"""

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import portpicker
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff import runtime
from dpftrl_tff.data import stackoverflow
from dpftrl_tff.remote import context as context_lib
from dpftrl_tff.remote import rounds
from dpftrl_tff.remote import workers as workers_lib
from dpftrl_tff.run import learning_process
from dpftrl_tff.run import run_directory
from dpftrl_tff.run import training
from dpftrl_tff.tff_compat import resident
from dpftrl_tff.tff_compat import worker as worker_patch
from tests import fixtures

_VOCAB = 40


def _config(aggregator='dp_ftrl', **overrides):
  values = dict(
      clients_per_round=6, total_rounds=4, vocab_size=_VOCAB, latent_size=8,
      embedding_size=4, aggregator=aggregator,
      noise_multiplier=0.0 if aggregator == 'none' else 0.5,
      clip_norm=0.5, secagg_scale=64.0,
      max_elements_per_client=16, client_batch_size=4, seed=3, noise_seed=11,
      rounds_per_eval=2, rounds_per_checkpoint=1, num_eval_examples=50)
  if aggregator == 'dp_ftrl_adaptive':   # Refused by the other mechanisms.
    values.update(initial_clip_norm=0.05, restart_warmup=1,
                  restart_frequency=2, clipped_count_stddev=1.0)
  values.update(overrides)
  return training.TrainConfig(**values)


def _start(port, **kwargs):
  process = workers_lib.start_worker(port, stderr=subprocess.DEVNULL,
                                     **kwargs)
  worker = workers_lib.Worker('localhost', port)
  if not workers_lib.is_reachable(worker, 60):
    raise RuntimeError(f'test worker on port {port} did not start')
  return process


def _stop(process):
  if process.poll() is None:
    process.kill()
  process.wait()


def _leaves(state):
  return [np.asarray(x) for x in tf.nest.flatten(state)]


class RemoteTest(tf.test.TestCase, parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cache = fixtures.generated_cache(30, 200, 5)
    cls.train, cls.heldout, _ = stackoverflow.load_stackoverflow(cls.cache)
    cls.vocab = stackoverflow.load_vocab(cls.cache, _VOCAB, cls.train)
    cls.description = stackoverflow.describe(cls.cache, cls.vocab,
                                    num_train_clients=30)
    cls.ports = [portpicker.pick_unused_port() for _ in range(2)]
    cls.processes = [_start(p) for p in cls.ports]
    cls.workers = [workers_lib.Worker('localhost', p) for p in cls.ports]

  @classmethod
  def tearDownClass(cls):
    for process in cls.processes:
      _stop(process)
    runtime.shutdown_workers()
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    # A killed worker is started again for the next test.
    for i, process in enumerate(self.processes):
      if process.poll() is not None:
        self.processes[i] = _start(self.ports[i])

  def _cohorts(self, config, rounds_=3):
    ids = list(self.train.client_ids)
    m = config.clients_per_round
    return [[stackoverflow.client_round_key(r, c) for c in ids[r * m:(r + 1) * m]]
            for r in range(rounds_)]

  # The tree's state across rounds and subrounds is in both DP cases (the
  # adaptive mechanism keeps two trees, SecAgg's wraps one), plain DP-FTRL
  # on two workers in the killed-worker test below (bit for bit against
  # its own two-worker reference), so it has no case of its own here.
  @parameterized.named_parameters(
      ('fedavg', 'none', False),
      ('dp_ftrl_adaptive', 'dp_ftrl_adaptive', False),
      ('dp_ftrl_secagg', 'dp_ftrl', True))
  def test_two_workers_equal_one_worker(self, aggregator, secagg):
    config = _config(aggregator, secagg=secagg)
    preprocess = stackoverflow.build_preprocess_fn(
        self.vocab, sequence_length=20, max_elements_per_client=16,
        batch_size=4, shuffle_buffer_size=8)
    process = learning_process.build_learning_process(config)
    initial = learning_process.initial_state(process, config)
    by_id = learning_process.taking_client_ids(process, self.train, preprocess)
    cohorts = self._cohorts(config)

    def run(runner):
      state, norms = initial, []
      for cohort in cohorts:
        state, _, norm = runner.next(state, cohort)
        norms.append(norm)
      return _leaves(runner.materialize(state)), norms

    results = {}
    for name, workers in (('two', self.workers), ('one', self.workers[:1])):
      distributed = context_lib.DistributedContext(
          workers, subrounds=3, secure_sums=secagg)
      results[name] = run(rounds.DistributedProcess(by_id, distributed))
      distributed.close()
    local = run(resident.ResidentProcess(by_id))
    # Same subrounds S = 3 (summed in a fixed order): bit for bit, whatever
    # the number of workers.
    self.assertEqual(results['two'][1], results['one'][1])
    for a, b in zip(results['two'][0], results['one'][0]):
      np.testing.assert_array_equal(a, b)
    # One machine sums the cohort in one piece: float rounding only.
    self.assertGreater(min(results['two'][1]), 0.0)
    np.testing.assert_allclose(results['two'][1], local[1], rtol=1e-5)
    for a, b in zip(results['two'][0], local[0]):
      if a.dtype.kind == 'f':
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
      else:
        np.testing.assert_array_equal(a, b)

  def _train(self, name, config, out=None):
    out = out or tempfile.mkdtemp()
    summary = training.train(
        config, train_data=self.train, eval_data=self.heldout,
        vocab=self.vocab, output_dir=os.path.join(out, name),
        data_description=self.description, print_fn=lambda _: None)
    return summary, os.path.join(out, name)

  def _kill_second_worker_in_round(self, round_num):
    """Kills worker 2 while its subround of round `round_num` is running.

    Worker 2 is killed when the controller asks it for its subround's
    result: the subround has been sent and is running (or done, unsent).
    """
    original_next = rounds.DistributedProcess.next
    original_compute = context_lib._ThreadedRemoteExecutor._compute  # pylint: disable=protected-access
    count = dict(round=0)
    victim, victim_worker = self.processes[1], self.workers[1]

    def next_counting(runner, state, client_data):
      count['round'] += 1
      return original_next(runner, state, client_data)

    async def compute_and_kill(executor, value_ref, type_spec):
      if (count['round'] == round_num and executor.worker == victim_worker
          and victim.poll() is None):
        victim.kill()
        victim.wait()
      return await original_compute(executor, value_ref, type_spec)

    rounds.DistributedProcess.next = next_counting
    context_lib._ThreadedRemoteExecutor._compute = compute_and_kill  # pylint: disable=protected-access
    self.addCleanup(setattr, rounds.DistributedProcess, 'next', original_next)
    self.addCleanup(setattr, context_lib._ThreadedRemoteExecutor, '_compute',  # pylint: disable=protected-access
                    original_compute)

  def test_killed_worker_stops_then_resumes_or_continues(self):
    self.enter_context(fixtures.reused_builds())   # Four runs, two configs.
    workers = ','.join(map(str, self.workers))
    config = _config(workers=workers, subrounds=3)
    reference, ref_dir = self._train('reference', config)
    expected = np.load(os.path.join(ref_dir, run_directory.FINAL_WEIGHTS_FILE))

    # Killed in round 3: the run stops with the worker's name, checkpoints
    # intact and no TFF worker of this process left behind.
    self._kill_second_worker_in_round(3)
    out = tempfile.mkdtemp()
    before = set(runtime.worker_pids())
    with self.assertRaisesRegex(workers_lib.WorkerError,
                                f'{self.workers[1]}.*re-run'):
      self._train('stopped', config, out)
    # No TFF worker started by the failure; the killed one is gone.
    self.assertLessEqual(set(runtime.worker_pids()), before)
    self.assertNotIn(self.processes[1].pid, runtime.worker_pids())
    run_dir = run_directory.RunDirectory(os.path.join(out, 'stopped'))
    self.assertEqual(run_dir.latest_checkpoint_round(), 2)
    self.assertFalse(os.path.exists(os.path.join(out, 'stopped',
                                                 'summary.json')))
    # The same command, the worker back: resumes and equals the reference.
    self.setUp()
    resumed, resumed_dir = self._train('stopped', config, out)
    self.assertEqual(resumed['rounds'], 4)
    got = np.load(os.path.join(resumed_dir, run_directory.FINAL_WEIGHTS_FILE))
    for key in expected.files:
      np.testing.assert_array_equal(got[key], expected[key])
    self.assertEqual(resumed['final_eval'], reference['final_eval'])

    # With --on_worker_failure=continue the round runs again on worker 1:
    # the same subrounds, so the same result.
    self._kill_second_worker_in_round(3)
    config = dataclasses.replace(config, on_worker_failure='continue')
    continued, continued_dir = self._train('continued', config)
    got = np.load(os.path.join(continued_dir, run_directory.FINAL_WEIGHTS_FILE))
    for key in expected.files:
      np.testing.assert_array_equal(got[key], expected[key])
    self.assertEqual(continued['final_eval'], reference['final_eval'])

  def test_worker_down_at_start_is_named_before_training(self):
    down = workers_lib.Worker('localhost', portpicker.pick_unused_port())
    config = _config(workers=f'{self.workers[0]},{down}')
    self.enter_context(
        tf.compat.v1.test.mock.patch.object(
            workers_lib, 'CONNECT_TIMEOUT_SECONDS', 1.0))
    out = tempfile.mkdtemp()
    with self.assertRaisesRegex(workers_lib.WorkerError,
                                f'no TFF worker answers at {down} '):
      self._train('down', config, out)
    self.assertEqual(os.listdir(out), [])   # Nothing claimed or written.

  def test_worker_without_the_database_is_named(self):
    if not shutil.which('unshare'):
      self.skipTest('needs unshare(1) to hide the database from a worker')
    # The second worker runs in its own mount namespace, where the data
    # directory is an empty tmpfs: a machine without the database.
    port = portpicker.pick_unused_port()
    binary = workers_lib.worker_binary_path()
    hidden = subprocess.Popen(
        ['unshare', '--user', '--map-root-user', '--mount', 'sh', '-c',
         f'mount -t tmpfs none "{self.cache}" && exec "{binary}" '
         f'--port={port}'], stderr=subprocess.DEVNULL,
        preexec_fn=worker_patch._die_with_parent)  # pylint: disable=protected-access
    self.addCleanup(_stop, hidden)
    blind = workers_lib.Worker('localhost', port)
    if not workers_lib.is_reachable(blind, 60):
      self.skipTest('this machine cannot start a worker in a mount namespace')
    config = _config(workers=f'{self.workers[0]},{blind}')
    out = tempfile.mkdtemp()
    with self.assertRaises(workers_lib.WorkerError) as raised:
      self._train('blind', config, out)
    message = str(raised.exception)
    self.assertIn(f'{blind} cannot read it', message)
    self.assertNotIn(f'{self.workers[0]} cannot', message)
    self.assertIn(self.description['database'], message)
    self.assertEqual(raised.exception.workers, (blind,))
    # Not claimed: the corrected command may use the directory.
    self.assertFalse(os.path.exists(os.path.join(out, 'blind',
                                                 'hparams.json')))

  def test_bad_workers_flags_are_refused(self):
    for value, text in (('localhost', 'not host:port'),
                        ('localhost:0', 'not host:port'),
                        ('a:1,a:1', 'listed twice')):
      with self.assertRaisesRegex(ValueError, f'--workers=.*{text}'):
        _config(workers=value).validate()
    with self.assertRaisesRegex(ValueError, '--subrounds=2 needs --workers'):
      _config(subrounds=2).validate()
    self.assertEqual(workers_lib.parse_workers('[::1]:80, h:9'),
                     [workers_lib.Worker('::1', 80),
                      workers_lib.Worker('h', 9)])


class ServeWorkerTest(absltest.TestCase):

  def test_serves_until_sigterm_and_leaves_no_worker(self):
    port = portpicker.pick_unused_port()
    proc = subprocess.Popen(
        [sys.executable, '-m', 'experiments.serve_worker', f'--port={port}',
         '--cpus=0'], cwd=fixtures.ROOT, stdout=subprocess.PIPE, text=True,
        stderr=subprocess.DEVNULL)
    self.addCleanup(_stop, proc)
    line = proc.stdout.readline()
    self.assertIn('TFF worker listening on ', line)
    self.assertIn(f':{port} (pid ', line)
    pid = int(re.search(r'\(pid (\d+)', line).group(1))
    self.assertEqual(runtime._name(pid), 'worker_binary')  # pylint: disable=protected-access
    self.assertEqual(os.sched_getaffinity(pid), {0})
    self.assertTrue(workers_lib.is_reachable(
        workers_lib.Worker('localhost', port), 5))
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    self.assertFalse(runtime._alive(pid))  # pylint: disable=protected-access

  def test_bad_flags_are_one_line(self):
    cases = ((['--port=70000'], '--port must be an integer <= '),
             ([], '--port is required'),
             (['--port=8000', '--cpus=x'], '--cpus=x'))
    procs = fixtures.run_module_cases('experiments.serve_worker',
                                      [args for args, _ in cases])
    for (_, text), proc in zip(cases, procs):
      fixtures.assert_refused(self, proc, text)


if __name__ == '__main__':
  tff.backends.native.set_sync_local_cpp_execution_context()
  tf.test.main()
