"""Seconds per round, sequences per second and peak memory of one round.

Paper-size CIFG model (vocab 10000, 670 units, embedding 96; 2.4M
parameters) on the generated StackOverflow-format data, at 10 and 50 clients
per round, for:
  tff_none     TFF FedAvg with a plain mean,
  tff_dp_ftrl  TFF with DP-FTRL tree aggregation (clip + noise),
  tff_adaptive DP-FTRL with adaptive clipping (Algorithm 1),
  tff_secagg   DP-FTRL with SecAgg discretization (Algorithm 2, s = 2^10;
               the rotation pads 2.4M parameters to 2^22),
  tff_blt      BLT-DP-FTRL (fixed clip, BLT noise optimized for the de-DE
               setting T = 930, MinS 212, MaxP 4: 3 buffers),
  tff_bandmf   BandMF-DP-FTRL (fixed clip, a C optimized for T = 930 with
               64 bands: 63 model-size noise buffers in the state),
  keras        a plain Keras loop doing the same client work (SGD from the
               global model on every client's batches, averaged deltas)
               over the same client tf.data datasets (built before the
               timing; the TFF cases build them in the timed rounds, from
               the cohort's client ids, as training does),
  tff_empty    TFF FedAvg over clients with no data: the per-round cost of
               the controller and TFF's plumbing alone,
  keras_in_memory  the same loop over batches materialized in memory
               beforehand (no input pipeline: a compute-only bound),
  agg_none, agg_dp_ftrl, agg_adaptive, agg_secagg, agg_blt, agg_bandmf
               the model-update aggregation alone (see
               `_run_aggregation_case`): its cost per round, with which the
               summary states each aggregator's overhead against the
               measured round of the case it adds to; far less noisy than
               the difference of two whole rounds.
Every case runs in its own process (so peak memory is its own: the maximum
of the Python process and its TFF worker_binary), a warm-up round first, then
`--rounds` timed rounds over the same cohorts for every case. Besides wall
time it reports CPU seconds per round (this process and its worker), which
varies less than wall time on a shared machine. With `--repeats=k` every
case runs k times, the cases interleaved (a, b, a, b, ...) so that a slow
spell of the machine hits all of them; the summary compares the medians and
also gives each repeat's ratio, so a 5% goal is judged against the spread.
GFLOP per CPU-second of client training is set against this machine's
single-core fp32 matmul peak, measured before the cases
(`benchmarks.matmul_peak`) unless `--fp32_peak` gives it.

Across machines (docs/scaling.md): with `--workers=host:port,...` the TFF
cases run their rounds on those TFF workers (`dpftrl_tff.remote`);
`--start_workers=1,2` starts that many loopback workers itself, worker i
pinned to CPU i (like `taskset`), runs the cases for each count and prints
the throughput of each count against the first.

The client data is generated (dpftrl_tff/data/synthetic.py) with
`--min_sentences_per_client=100` by default: client sizes like the real
StackOverflow train split's, so a round does as much training as on the real
data. Fixed per-client costs (clipping, SecAgg's encoding) are the same for a
client of 5 or 250 sentences, so their share of the round depends on this;
`--min_sentences_per_client=4` measures on the demo's small clients.

  python -m benchmarks.round_time [--rounds=5] [--clients=10,50] [--cases=...]
      [--repeats=1] [--min_sentences_per_client=100]
      [--workers=host:port,... | --start_workers=1,2] [--subrounds=0]
      [--fp32_peak=0] [--json]
"""

import dataclasses
import json
import os
import re
import subprocess
import sys
import time

from absl import app
from absl import flags
import numpy as np

from dpftrl_tff.aggregators import registry
from dpftrl_tff.data import synthetic

_CASE = flags.DEFINE_string('case', None, 'Internal: run one case.')
_CLIENTS = flags.DEFINE_list('clients', ['10', '50'], 'Clients per round.')
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'Timed rounds per case.')
_CACHE = flags.DEFINE_string(
    'cache_dir', None, 'Generated data for the benchmark; default '
    '/tmp/dpftrl_bench_data_min<--min_sentences_per_client>.')
_MIN_SENTENCES = flags.DEFINE_integer(
    'min_sentences_per_client', synthetic.STACKOVERFLOW_MIN_SENTENCES,
    'Size scale of the generated clients (dpftrl_tff/data/synthetic.py). 100: '
    'like the real StackOverflow train split (every user at least 100 '
    'sentences, mean 397; about 180 per client after the 256 cap), the '
    'workload whose round time the goals are about; 4: the small clients of '
    '`make demo` and the tests (about 14 after the cap), where fixed '
    'per-client costs weigh about 10 times more.')
_TRAIN_CLIENTS = flags.DEFINE_integer(
    'train_clients', 600, 'Training clients of the generated data.')
_VOCAB = flags.DEFINE_integer('vocab_size', 10000, 'Model vocabulary.')
_LATENT = flags.DEFINE_integer('latent_size', 670, 'CIFG units.')
_EMBEDDING = flags.DEFINE_integer('embedding_size', 96, 'Embedding size.')
_RESIDENT = flags.DEFINE_bool(
    'keep_state_in_worker', True,
    'TFF cases keep the server state in the worker between rounds, as '
    'training does (dpftrl_tff/tff_compat/resident.py); false: plain process.next.')
_REPEATS = flags.DEFINE_integer(
    'repeats', 1, 'Runs of every case, interleaved; the summary uses medians.')
_WORKERS = flags.DEFINE_string(
    'workers', None, 'TFF cases run their rounds across these TFF workers '
    '(host:port,...; see experiments.serve_worker).')
_START_WORKERS = flags.DEFINE_list(
    'start_workers', None, 'Worker counts: for each, start that many '
    'loopback TFF workers (worker i pinned to CPU i mod the CPU count) and '
    'run the cases on them.')
_SUBROUNDS = flags.DEFINE_integer(
    'subrounds', 0, 'With workers: parts each cohort is cut into (0: one per '
    'worker).')
CASES = ('keras', 'keras_in_memory', 'tff_none', 'tff_empty', 'tff_dp_ftrl',
         'tff_adaptive', 'tff_secagg', 'tff_blt', 'tff_bandmf', 'agg_none',
         'agg_dp_ftrl', 'agg_adaptive', 'agg_secagg', 'agg_blt',
         'agg_bandmf')
_CASES = flags.DEFINE_list('cases', list(CASES), 'Cases to run.')
BANDMF_BANDS = 64
_FP32_PEAK = flags.DEFINE_float(
    'fp32_peak', 0.0, "This machine's single-core fp32 matmul peak in GFLOP "
    'per CPU-second, the yardstick of the printed share of the peak; 0 '
    'measures it before the cases (`benchmarks.matmul_peak`, one thread, '
    'the better of oneDNN on and off: about 25 s).', lower_bound=0.0)
_JSON = flags.DEFINE_bool(
    'json', False, 'Also print one line of JSON at the end: {case: '
    '{seconds_per_round, cpu_seconds_per_round, sequences_per_round, '
    'gflop_per_cpu_second}} (keys "case@clients" with several --clients).')


def flop_per_token(vocab_size: int, latent_size: int,
                   embedding_size: int) -> tuple[float, float]:
  """Matmul FLOPs of training the CIFG on one token, forward and backward:
  (the CIFG's, the output layer's).

  Per token, forward: the CIFG's input and recurrent kernels 2 x 2 E 3N, its
  projection 2 N E, the output layer 2 E V' (V' = V + 4 ids): 14 E N + 2 E V';
  the backward pass twice that (gradients for inputs and weights), so
  42 E N + 6 E V' per token (8.46 MFLOP at the paper's size). Element-wise
  work is not counted: GFLOP per CPU-second is the matmul rate the training
  achieves, against the machine's peak (docs/performance.md).
  """
  return (42.0 * embedding_size * latent_size,
          6.0 * embedding_size * (vocab_size + 4))


def flop_per_round(case: str, sequences: float, targets: float,
                   vocab_size: int, latent_size: int, embedding_size: int,
                   sequence_length: int = 20) -> float:
  """Matmul FLOPs a case performs in a round of `sequences` sequences
  holding `targets` non-pad targets.

  The CIFG runs over every position. The Keras yardstick computes the
  output layer at every position too; TFF's training applies it only where
  the target is not the pad (`run.lm_model`), so its skipped positions are
  not counted as work done.
  """
  cifg, output = flop_per_token(vocab_size, latent_size, embedding_size)
  positions = sequences * sequence_length
  return cifg * positions + output * (positions if case.startswith('keras')
                                      else targets)


def _cache_dir():
  return _CACHE.value or (f'/tmp/dpftrl_bench_data_min'
                          f'{_MIN_SENTENCES.value}')


def _peak_rss_mb(pids):
  peak = 0
  for pid in pids:
    try:
      with open(f'/proc/{pid}/status') as f:
        for line in f:
          if line.startswith('VmHWM:'):
            peak = max(peak, int(line.split()[1]) / 1024)
    except OSError:
      pass
  return peak


def _cpu_seconds(pids):
  """User + system CPU seconds of this process and `pids` (the workers)."""
  total = sum(os.times()[:2])
  for pid in pids:
    try:
      with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
      total += (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')
    except (OSError, IndexError, ValueError):
      pass
  return total


_AGG_ROUNDS_PER_CALL = 2


def _run_aggregation_case(case, clients, rounds, config):
  """Times the model-update aggregation alone (the agg_* cases).

  One TFF computation initializes the case's aggregator and runs
  min(`rounds`, 2) rounds of it (TFF's executor holds every round's client
  values until the computation ends: at 50 clients SecAgg's 5 rounds peaked
  at 23 GB, 2 rounds stay far below the machine's memory), each on
  `clients` model-size updates drawn in the worker (norms around the clip
  norm); a second computation draws the same updates
  and sums them without aggregating. The difference, per round, is what the
  aggregator itself costs: the part of a training round that differs between
  the aggregators, timed without the client training's run-to-run noise.
  Runs alternate between the two computations; medians are reported.
  """
  from dpftrl_tff import runtime  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from dpftrl_tff.run import learning_process  # pylint: disable=g-import-not-at-top

  rounds = min(rounds, _AGG_ROUNDS_PER_CALL)
  learning_process.prepare_execution(config)
  model_fn = learning_process.build_model_fn(config)
  value_type = tff.learning.models.weights_type_from_model(model_fn).trainable
  specs = tff.types.type_to_tf_tensor_specs(value_type)
  aggregator = learning_process.build_aggregator(config, model_fn).create(
      value_type)
  dim = sum(int(np.prod(s.shape)) for s in tf.nest.flatten(specs))

  @tff.tensorflow.computation(np.int64)
  def draw_update(seed):
    # Norms spread around the clip norm C: from C / 2 to 2 C.
    norm = config.clip_norm * (0.5 + 1.5 * tf.cast(seed % 7, tf.float32) / 6)
    return tf.nest.map_structure(
        lambda s: tf.random.stateless_normal(
            s.shape, seed=tf.stack([seed, tf.constant(s.shape.num_elements(),
                                                      tf.int64)]))
        * (norm / np.sqrt(dim)), specs)

  @tff.tensorflow.computation(value_type)
  def total_norm(value):
    return tf.linalg.global_norm(tf.nest.flatten(value))

  seeds_type = tff.FederatedType(np.int64, tff.CLIENTS)

  @tff.federated_computation(seeds_type)
  def aggregate_rounds(seeds):
    state = aggregator.initialize()
    norms = []
    for _ in range(rounds):
      output = aggregator.next(state, tff.federated_map(draw_update, seeds))
      state = output.state
      norms.append(tff.federated_map(total_norm, output.result))
    return norms

  @tff.federated_computation(seeds_type)
  def draw_only(seeds):
    return [tff.federated_sum(tff.federated_map(
        total_norm, tff.federated_map(draw_update, seeds)))
            for _ in range(rounds)]

  seeds = list(range(1, clients + 1))
  aggregate_rounds(seeds)   # warm-up
  draw_only(seeds)
  workers = runtime.worker_pids()
  timings = {'aggregate': [], 'draw': [], 'cpu_aggregate': [], 'cpu_draw': []}
  for _ in range(3):
    for name, fn in (('aggregate', aggregate_rounds), ('draw', draw_only)):
      cpu_start = _cpu_seconds(workers)
      start = time.perf_counter()
      fn(seeds)
      timings[name].append((time.perf_counter() - start) / rounds)
      timings['cpu_' + name].append((_cpu_seconds(workers) - cpu_start) /
                                    rounds)
  med = {k: float(np.median(v)) for k, v in timings.items()}
  return dict(case=case, clients=clients,
              seconds_per_round=med['aggregate'] - med['draw'],
              cpu_seconds_per_round=med['cpu_aggregate'] - med['cpu_draw'],
              sequences_per_second=0.0, sequences_per_round=0.0,
              targets_per_round=0.0,
              peak_memory_mb=_peak_rss_mb([os.getpid()] +
                                          runtime.worker_pids()))


def _case_config(case, clients):
  """The TrainConfig a case runs (its aggregator, SecAgg, BLT)."""
  from dpftrl_tff.run import training  # pylint: disable=g-import-not-at-top
  aggregator = {'tff_dp_ftrl': 'dp_ftrl', 'tff_secagg': 'dp_ftrl',
                'tff_adaptive': 'dp_ftrl_adaptive', 'agg_dp_ftrl': 'dp_ftrl',
                'agg_secagg': 'dp_ftrl', 'agg_adaptive': 'dp_ftrl_adaptive',
                'tff_blt': 'dp_ftrl_blt', 'agg_blt': 'dp_ftrl_blt',
                'tff_bandmf': 'dp_ftrl_bandmf', 'agg_bandmf': 'dp_ftrl_bandmf',
                }.get(case, 'none')
  blt = (dict(total_rounds=930, blt_min_separation=212,
              blt_max_participation=4)   # The BLT of the de-DE setting.
         if case.endswith('_blt') else {})
  if case.endswith('_bandmf'):   # The b = 64, T of de-DE.
    blt = dict(total_rounds=930, bandmf_bands=BANDMF_BANDS)
  return training.TrainConfig(
      clients_per_round=clients, vocab_size=_VOCAB.value,
      latent_size=_LATENT.value, embedding_size=_EMBEDDING.value,
      aggregator=aggregator,
      secagg=case in ('tff_secagg', 'agg_secagg'), secagg_scale=1024.0,
      noise_multiplier=(0.3 if registry.get(aggregator).accounted_noise
                        else 0.0), clip_norm=1.0,
      seed=0, debug_measurements=False, **blt)


def _keras_round(config):
  """A round of plain Keras training (the baseline): run_round(cohort)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from dpftrl_tff import models  # pylint: disable=g-import-not-at-top
  # The Keras RNN layer over the CIFG cell, as a user would write it (the
  # project's model unrolls it, `models.UnrolledCIFG`).
  model = models.create_cifg_lm(
      config.vocab_size, latent_size=config.latent_size,
      embedding_size=config.embedding_size, seed=config.seed)
  assert isinstance(model.get_layer('cifg'), tf.keras.layers.RNN)
  # The standard Keras loss, masked as a user would (the yardstick; the
  # project's own loss is written for speed, `metrics.MaskedCrossEntropy`).
  keras_loss = tf.keras.losses.SparseCategoricalCrossentropy(
      from_logits=True)

  def loss_fn(y, logits):
    return keras_loss(y, logits,
                      sample_weight=tf.cast(tf.not_equal(y, 0), tf.float32))

  opt = tf.keras.optimizers.SGD(config.client_lr)
  global_weights = [tf.Variable(w) for w in model.trainable_variables]
  spec = tf.TensorSpec([None, config.sequence_length], tf.int64)

  @tf.function(input_signature=[spec, spec])
  def client_step(x, y):
    with tf.GradientTape() as tape:
      loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))

  def run_round(cohort):
    total = [tf.zeros_like(w) for w in global_weights]
    for ds in cohort:
      for v, g in zip(model.trainable_variables, global_weights):
        v.assign(g)
      for x, y in ds:
        client_step(x, y)
      total = [t + (v - g) for t, v, g in
               zip(total, model.trainable_variables, global_weights)]
    for g, t in zip(global_weights, total):
      g.assign_add(t / len(cohort))
  return run_round


def _tff_round(case, config, train_data, preprocess):
  """A round of the TFF process, as training.train runs it: run_round(keys).

  A round gets the cohort's client keys and TFF's worker builds their
  datasets (so the timing includes that), and the server state stays in
  TFF's worker (or, with --workers, rounds run across the workers).
  """
  from dpftrl_tff.data import stackoverflow  # pylint: disable=g-import-not-at-top
  from dpftrl_tff.run import learning_process  # pylint: disable=g-import-not-at-top
  from dpftrl_tff.tff_compat import resident  # pylint: disable=g-import-not-at-top
  process = learning_process.build_learning_process(config)
  state = learning_process.initial_state(process, config)
  if case == 'tff_empty':   # Clients without data: TFF's plumbing alone.
    full = preprocess
    preprocess = lambda dataset, seed=None: full(dataset, seed).take(0)
  process = learning_process.taking_client_ids(process, train_data,
                                               preprocess)
  if _WORKERS.value:
    config = dataclasses.replace(config, workers=_WORKERS.value,
                                 subrounds=_SUBROUNDS.value)
    kept = learning_process.build_runner(
        config, process, train_data=train_data, by_client_id=True,
        database=stackoverflow.database_path(os.path.abspath(_cache_dir())),
        print_fn=lambda _: None)
  else:
    kept = resident.ResidentProcess(process)

  def run_round(cohort):
    nonlocal state
    if _RESIDENT.value or _WORKERS.value:
      state = kept.next(state, cohort)[0]
    else:
      state = process.next(state, cohort).state
  return run_round


def _run_case(case, clients, rounds):
  """Runs one case in this process; returns its measurements."""
  from dpftrl_tff import runtime  # pylint: disable=g-import-not-at-top
  runtime.install()
  from dpftrl_tff import tff_compat as _compat  # pylint: disable=g-import-not-at-top
  _compat.install()
  from dpftrl_tff.data import stackoverflow  # pylint: disable=g-import-not-at-top
  from dpftrl_tff import participation  # pylint: disable=g-import-not-at-top

  train_data, _, _ = stackoverflow.load_stackoverflow(_cache_dir())
  config = _case_config(case, clients)
  if case.startswith('agg_'):
    return _run_aggregation_case(case, clients, rounds, config)
  vocab = stackoverflow.load_vocab(_cache_dir(), config.vocab_size)
  preprocess = stackoverflow.build_preprocess_fn(
      vocab, sequence_length=config.sequence_length,
      max_elements_per_client=config.max_elements_per_client,
      batch_size=config.client_batch_size)
  client_ids = list(train_data.client_ids)
  sampler = participation.UniformSampler(len(client_ids), clients, 0)
  cohort_ids = [[client_ids[i] for i in sampler.sample(r)]
                for r in range(rounds + 1)]
  cohorts = [[preprocess(train_data.create_tf_dataset_for_client(c))
              for c in ids] for ids in cohort_ids]
  sequences = [sum(int(x.shape[0]) for ds in cohort for x, _ in ds)
               for cohort in cohorts]
  targets = [sum(int(np.count_nonzero(y)) for ds in cohort for _, y in ds)
             for cohort in cohorts]
  if case == 'keras_in_memory':
    cohorts = [[[(x, y) for x, y in ds] for ds in cohort]
               for cohort in cohorts]
  if case.startswith('keras'):
    run_round = _keras_round(config)
  else:
    run_round = _tff_round(case, config, train_data, preprocess)
    if case == 'tff_empty':
      sequences = targets = [0] * len(sequences)
    cohorts = [[stackoverflow.client_round_key(0, c) for c in ids]
               for ids in cohort_ids]
  return _measure(run_round, cohorts, sequences,
                  dict(case=case, clients=clients,
                       targets_per_round=sum(targets[1:]) / rounds))


def _measure(run_round, cohorts, sequences, labels):
  """Times rounds 1.. of `cohorts` after round 0 (tracing): CPU, memory."""
  from dpftrl_tff import runtime  # pylint: disable=g-import-not-at-top
  rounds = len(cohorts) - 1
  run_round(cohorts[0])   # warm-up (tracing)
  workers = runtime.worker_pids()
  cpu_start = _cpu_seconds(workers)
  start = time.perf_counter()
  for cohort in cohorts[1:]:
    run_round(cohort)
  seconds = (time.perf_counter() - start) / rounds
  cpu = (_cpu_seconds(workers) - cpu_start) / rounds
  peak = _peak_rss_mb([os.getpid()] + runtime.worker_pids())
  return dict(labels, seconds_per_round=seconds, cpu_seconds_per_round=cpu,
              sequences_per_second=sum(sequences[1:]) / (seconds * rounds) if
              seconds else 0.0,
              sequences_per_round=sum(sequences[1:]) / rounds,
              peak_memory_mb=peak)


def _run_in_subprocess(case, clients, workers=None):
  """Runs one case in a fresh process; its result dict, or None."""
  remote = [f'--workers={workers}', f'--subrounds={_SUBROUNDS.value}'
            ] if workers else []
  proc = subprocess.run(
      [sys.executable, '-m', 'benchmarks.round_time', *remote,
       f'--case={case}:{clients}', f'--rounds={_ROUNDS.value}',
       f'--cache_dir={_cache_dir()}', f'--vocab_size={_VOCAB.value}',
       f'--latent_size={_LATENT.value}',
       f'--embedding_size={_EMBEDDING.value}',
       f'--keep_state_in_worker={_RESIDENT.value}'],
      capture_output=True, text=True, check=False,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  lines = [l for l in proc.stdout.splitlines() if l.startswith('RESULT ')]
  if proc.returncode or not lines:
    print(f'{case} at {clients} clients failed:\n{proc.stderr[-2000:]}')
    return None
  return json.loads(lines[-1][len('RESULT '):])


def measure_fp32_peak() -> float:
  """This machine's single-core fp32 matmul peak, GFLOP per CPU-second
  (`benchmarks.matmul_peak --dtypes=fp32`: the better of oneDNN on and
  off, each in its own process; TFF's workers run with it on).

  Measured, not assumed: the machines this project runs on differ (an
  AVX-512 EPYC gave 251 on 2026-11-27, an AVX2 one 78 on 2026-11-28).
  """
  proc = subprocess.run(
      [sys.executable, '-m', 'benchmarks.matmul_peak', '--dtypes=fp32',
       '--seconds=1'], capture_output=True, text=True, check=False,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  found = re.search(r'fp32:\s*([0-9.]+) GFLOP per CPU-second', proc.stdout)
  if proc.returncode or not found:
    raise RuntimeError(f'benchmarks.matmul_peak failed:\n'
                       f'{proc.stderr[-2000:]}')
  return float(found.group(1))


def _median(values):
  return float(np.median(values)) if values else None


def _summary(runs):
  """Per case: the median of its runs' figures (runs: that case's results),
  and the GFLOP of client training per CPU-second (`flop_per_round`)."""
  if not runs:
    return None
  keys = ('seconds_per_round', 'cpu_seconds_per_round',
          'sequences_per_second', 'sequences_per_round', 'targets_per_round',
          'peak_memory_mb')
  out = dict({k: _median([r[k] for r in runs]) for k in keys},
             runs=len(runs))
  flop = flop_per_round(runs[0]['case'], out['sequences_per_round'],
                        out['targets_per_round'], _VOCAB.value, _LATENT.value,
                        _EMBEDDING.value)
  out['gflop_per_cpu_second'] = (
      flop / out['cpu_seconds_per_round'] / 1e9
      if out['cpu_seconds_per_round'] else None)
  return out


def _overhead(runs_by_case, base, case, key='seconds_per_round'):
  """(median overhead %, per-repeat overheads %) of `case` over `base`."""
  base_runs, runs = runs_by_case.get(base, []), runs_by_case.get(case, [])
  if not base_runs or not runs:
    return None, []
  paired = [100 * (r[key] / b[key] - 1) for b, r in zip(base_runs, runs)]
  median = 100 * (_median([r[key] for r in runs]) /
                  _median([b[key] for b in base_runs]) - 1)
  return median, paired


def _print_overhead(label, runs_by_case, medians, base, case, goal):
  wall, paired = _overhead(runs_by_case, base, case)
  if wall is None:
    return
  cpu, _ = _overhead(runs_by_case, base, case, 'cpu_seconds_per_round')
  spread = ''
  if len(paired) > 1:
    spread = ('; per repeat ' + ', '.join(f'{p:+.1f}%' for p in paired))
  print(f'  {label}: round time {wall:+.1f}% (medians{spread}), CPU time '
        f'{cpu:+.1f}%{goal}; peak '
        f'{medians[case]["peak_memory_mb"]:.0f} MB vs '
        f'{medians[base]["peak_memory_mb"]:.0f} MB')


def _print_aggregation_cost(medians, base, case, round_case, label, goal):
  """The extra aggregation time of `case` over `base` against a round."""
  if not (medians.get(base) and medians.get(case)):
    return
  extra = (medians[case]['seconds_per_round'] -
           medians[base]['seconds_per_round'])
  extra_cpu = (medians[case]['cpu_seconds_per_round'] -
               medians[base]['cpu_seconds_per_round'])
  text = (f'  {label} aggregation adds {extra:.3f} s ({extra_cpu:.3f} CPU-s) '
          f'per round over {base}')
  if medians.get(round_case):
    round_median = medians[round_case]
    text += (f': {100 * extra / round_median["seconds_per_round"]:+.1f}% of '
             f'the {round_case} round '
             f'({round_median["seconds_per_round"]:.2f} s), CPU '
             f'{100 * extra_cpu / round_median["cpu_seconds_per_round"]:+.1f}%'
             f'{goal}')
  print(text)


def _run_all(workers=None, fp32_peak=None):
  """Runs the cases at every cohort size; {clients: {case: medians}}."""
  all_medians = {}
  for clients in [int(c) for c in _CLIENTS.value]:
    runs_by_case = {}
    for repeat in range(_REPEATS.value):
      for case in _CASES.value:    # Interleaved: a, b, ..., a, b, ...
        r = _run_in_subprocess(case, clients, workers)
        if r is None:
          continue
        runs_by_case.setdefault(case, []).append(r)
        print(f'{case:15} clients {clients:3d} run {repeat + 1}: '
              f'{r["seconds_per_round"]:7.2f} s/round '
              f'{r["sequences_per_round"]:6.0f} seq/round '
              f'{r["sequences_per_second"]:7.1f} seq/s '
              f'{r["cpu_seconds_per_round"]:7.2f} CPU-s/round '
              f'peak {r["peak_memory_mb"]:7.0f} MB', flush=True)
    print(f'clients {clients}, medians over {_REPEATS.value} run(s):')
    medians = {c: _summary(r) for c, r in runs_by_case.items()}
    for m in medians.values():
      if m and fp32_peak:
        m['fp32_peak_gflop_per_cpu_second'] = fp32_peak
    all_medians[clients] = medians
    for case, m in medians.items():
      print(f'  {case:15} {m["seconds_per_round"]:7.2f} s/round '
            f'{m["sequences_per_round"]:6.0f} seq/round '
            f'{m["sequences_per_second"]:7.1f} seq/s '
            f'{m["cpu_seconds_per_round"]:7.2f} CPU-s/round '
            f'{m["gflop_per_cpu_second"] or 0:6.1f} GFLOP/CPU-s '
            f'peak {m["peak_memory_mb"]:7.0f} MB')
    for base, label in (('keras', 'TFF/Keras throughput'),
                        ('keras_in_memory', 'TFF/in-memory Keras throughput')):
      if medians.get(base) and medians.get('tff_none'):
        ratio = (medians['tff_none']['sequences_per_second'] /
                 medians[base]['sequences_per_second'])
        note = (' (goal >= 0.9)' if base == 'keras' else
                ' (for reference: TFF reads every round from SQLite)')
        print(f'  {label} {ratio:.2f}{note}')
    if medians.get('keras') and medians.get('tff_dp_ftrl'):
      keras, tff = medians['keras'], medians['tff_dp_ftrl']
      ratio = keras['cpu_seconds_per_round'] / tff['cpu_seconds_per_round']
      print(f'  TFF DP-FTRL/Keras sequences per CPU-second {ratio:.2f} '
            f'(goals: >= 1.8 at the paper\'s size, >= 1.3 at the CPU '
            f'scale); its matmuls at '
            f'{100 * tff["gflop_per_cpu_second"] / fp32_peak:.0f}% of '
            f'this machine\'s fp32 peak, {fp32_peak:.0f} GFLOP/CPU-s '
            '(goal >= 50% at the paper\'s size)')
    for label, base, case, goal in (
        ('DP-FTRL over no DP', 'tff_none', 'tff_dp_ftrl',
         ' (goal <= 5% at 50 clients)'),
        ('adaptive over DP-FTRL', 'tff_dp_ftrl', 'tff_adaptive', ''),
        ('SecAgg over DP-FTRL', 'tff_dp_ftrl', 'tff_secagg',
         ' (goal <= 30% at 50 clients)'),
        ('BLT over DP-FTRL', 'tff_dp_ftrl', 'tff_blt',
         ' (goal <= 5% at 50 clients)'),
        ('BandMF over DP-FTRL', 'tff_dp_ftrl', 'tff_bandmf',
         f' (b = {BANDMF_BANDS}; goal <= 10%)')):
      _print_overhead(label, runs_by_case, medians, base, case, goal)
    _print_aggregation_cost(medians, 'agg_none', 'agg_dp_ftrl', 'tff_none',
                            'DP-FTRL', ' (goal <= 5% at 50 clients)')
    _print_aggregation_cost(medians, 'agg_dp_ftrl', 'agg_adaptive',
                            'tff_dp_ftrl', 'Adaptive clipping', '')
    _print_aggregation_cost(medians, 'agg_dp_ftrl', 'agg_secagg',
                            'tff_dp_ftrl', 'SecAgg',
                            ' (goal <= 30% at 50 clients)')
    _print_aggregation_cost(medians, 'agg_dp_ftrl', 'agg_blt', 'tff_dp_ftrl',
                            'BLT noise', ' (goal <= 5% at 50 clients)')
    _print_aggregation_cost(medians, 'agg_dp_ftrl', 'agg_bandmf',
                            'tff_dp_ftrl', 'BandMF noise',
                            f' (b = {BANDMF_BANDS}; goal <= 10%)')
  return all_medians


def json_line(all_medians):
  """--json's object: {case: figures}, or {"case@clients": figures} when
  the run measured several cohort sizes."""
  keys = ('seconds_per_round', 'cpu_seconds_per_round',
          'sequences_per_round', 'gflop_per_cpu_second',
          'fp32_peak_gflop_per_cpu_second')
  several = len(all_medians) > 1
  return {(f'{case}@{clients}' if several else case):
          {k: m[k] for k in keys if k in m}
          for clients, medians in all_medians.items()
          for case, m in medians.items() if m}


def _start_pinned_workers(count):
  """Starts `count` loopback TFF workers, worker i pinned to CPU i mod n."""
  import portpicker  # pylint: disable=g-import-not-at-top
  from dpftrl_tff.remote import workers  # pylint: disable=g-import-not-at-top
  cpus = sorted(os.sched_getaffinity(0))
  started, names = [], []
  for i in range(count):
    port = portpicker.pick_unused_port()
    started.append(workers.start_worker(port, cpus=[cpus[i % len(cpus)]],
                                        stderr=subprocess.DEVNULL))
    names.append(f'localhost:{port}')
  for name in names:
    host, port = name.split(':')
    if not workers.is_reachable(workers.Worker(host, int(port)), 120):
      raise RuntimeError(f'loopback worker {name} did not start')
  return started, ','.join(names)


def main(argv):
  del argv
  if _CASE.value:
    case, clients = _CASE.value.split(':')
    print('RESULT ' + json.dumps(_run_case(case, int(clients),
                                           _ROUNDS.value)))
    return 0
  if _REPEATS.value < 1:
    raise app.UsageError(f'--repeats must be >= 1, got {_REPEATS.value}.')
  unknown = [c for c in _CASES.value if c not in CASES]
  if unknown:
    raise app.UsageError(f'--cases: unknown {unknown}; allowed: '
                         f'{", ".join(CASES)}.')
  synthetic.ensure_generated(
      _cache_dir(), seed=0, num_words=12000,
      num_train_clients=_TRAIN_CLIENTS.value,
      min_sentences_per_client=_MIN_SENTENCES.value)
  print(f'Data: {_cache_dir()} (generated, at least '
        f'{_MIN_SENTENCES.value} sentences per client, '
        f'{_TRAIN_CLIENTS.value} training clients)')
  if _START_WORKERS.value and _WORKERS.value:
    raise app.UsageError('--workers and --start_workers exclude each other.')
  fp32_peak = _FP32_PEAK.value or measure_fp32_peak()
  source = ('--fp32_peak' if _FP32_PEAK.value else
            'measured by benchmarks.matmul_peak')
  print(f"This machine's single-core fp32 matmul peak: {fp32_peak:.1f} "
        f'GFLOP per CPU-second ({source})', flush=True)
  if not _START_WORKERS.value:
    all_medians = _run_all(_WORKERS.value, fp32_peak)
    if _JSON.value:
      print(json.dumps(json_line(all_medians), sort_keys=True))
    return 0
  counts = [int(c) for c in _START_WORKERS.value]
  by_count = {}
  for count in counts:
    started, names = _start_pinned_workers(count)
    print(f'{count} loopback TFF worker(s): {names}', flush=True)
    try:
      by_count[count] = _run_all(names, fp32_peak)
    finally:
      for process in started:
        process.kill()
        process.wait()
  base = counts[0]
  for count in counts[1:]:
    for clients, medians in by_count[count].items():
      for case, m in medians.items():
        b = by_count[base].get(clients, {}).get(case)
        if b and b['seconds_per_round']:
          goal = ' (goal >= 1.7 for 2 workers at 50 clients)' if (
              base == 1 and count == 2) else ''
          print(f'{case} at {clients} clients: {count} workers give '
                f'{b["seconds_per_round"] / m["seconds_per_round"]:.2f}x the '
                f'round throughput of {base} ({m["seconds_per_round"]:.2f} '
                f'vs {b["seconds_per_round"]:.2f} s/round){goal}')
  return 0


if __name__ == '__main__':
  app.run(main)
