"""Canary clients inside training: the one-shot empirical privacy of a run.

Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar, "One-shot Empirical
Privacy Estimation for Federated Learning" (ICLR 2024, arXiv 2302.03098),
run on the model being trained (`--canaries=K`):

  * K clients of the training population, chosen from the run's seed,
    become canary clients. They stay members of the population, so the
    participation model in use (uniform, min_sep_groups, timer) puts them in
    cohorts exactly as it puts the client they replace: the cohorts of a run
    with canaries are those of the same run without (same seed), the report
    goal and every real client's participation are unchanged.
  * A canary's update is a fixed pseudorandom unit direction u_k (a
    stateless normal draw from the canaries' seed and k, normalized) scaled
    to `norm` (past the clip norm). It replaces the locally trained delta at
    the client, before aggregation, so it takes exactly the path of a real
    update: per-client clipping, the DP-FTRL tree, BLT or adaptive noise,
    SecAgg discretization, server momentum.
  * K more directions (k = K .. 2K - 1) are never inserted.

Statistics (both computed for every direction):
  * final model: cos(theta_0 - theta_T, u_k), the paper's final-model
    threat model (TFF's client update is the model delta theta - theta',
    which the server subtracts, so the canary moves the model along -u_k);
  * all iterates: max over rounds t of cos(theta_t - theta_{t+1}, u_k), an
    attacker who sees every released model (each round's model is sent to
    the next cohort). The max over rounds is this project's statistic for
    that threat model (it is symmetric in seen and unseen canaries, so it is
    a valid test statistic); the paper's own all-iterates statistic may
    differ in detail.
`empirical_privacy.estimate` turns each pair of statistic sets (seen
canaries: inserted and taking part at least once; unseen: never inserted)
into an epsilon at the run's delta with a bootstrap interval.

How a canary is marked: its client round key gets the prefix
'canary<k>|'; the client dataset computation then yields one marker batch
whose first token is -(k + 1) instead of the client's data
(`mark_dataset`), and the canary client work (`build_client_work`) skips
the marker, trains on what is left (nothing for a canary) and substitutes
the canary update when it saw the marker.
"""

import collections
import dataclasses
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
# TFF's client update function (not in its public API), wrapped whole.
from tensorflow_federated.python.learning.templates import (
    model_delta_client_work as tff_client_work)

from dpftrl_tff.data import stackoverflow
from dpftrl_tff.empirical import empirical_privacy

_PREFIX = 'canary'
_STREAM = 0xCA7A12   # Separates the canaries' draws from the run's others.
ROUND_COSINES_FILE = 'canary_round_cosines.f32'


@dataclasses.dataclass(frozen=True)
class Canaries:
  """The canaries of a run: which clients, their seed and update norm."""
  count: int
  seed: int
  norm: float
  client_indices: Tuple[int, ...]

  def index_of(self) -> Dict[int, int]:
    """{client index: canary k}."""
    return {c: k for k, c in enumerate(self.client_indices)}

  @property
  def num_directions(self) -> int:
    """Inserted (k < count) and never inserted (k >= count) directions."""
    return 2 * self.count


def default_norm(clip: Optional[float]) -> float:
  """100 times the (initial) clip norm: clipped in every round, also when an
  adaptive clip grows; without clipping (no DP) a unit update."""
  return 100.0 * clip if clip else 1.0


def choose(count: int, *, seed: int, num_clients: int,
           norm: float) -> Canaries:
  """K distinct training clients, a function of the run's seed (so a
  resumed run has the same canaries)."""
  rng = np.random.default_rng([int(seed), _STREAM])
  indices = rng.choice(num_clients, count, replace=False)
  return Canaries(count=count, seed=int(rng.integers(2**31 - 1)),
                  norm=float(norm),
                  client_indices=tuple(int(i) for i in indices))


def mark_dataset(dataset, key, sequence_length: int):
  """`dataset`, or for a marked key one marker batch of canary k.

  Built from `take` and `repeat` with tensor counts, without dataset
  functions (`filter` with a captured predicate): every run that hung in
  TFF's worker had probes marked with `filter` and `concatenate`
  (docs/performance.md); these count-based datasets carry no function.

  Args:
    dataset: the client's preprocessed dataset of (x, y) int64 batches.
    key: the client round key, a string tensor.
    sequence_length: L, the width of a batch.
  """
  is_canary, k = stackoverflow.round_key_mark(key, _PREFIX, unmarked=-1)
  marker = tf.fill([1, sequence_length], -(k + 1))
  markers = tf.data.Dataset.from_tensors((marker, marker))
  # take(-1) keeps every batch, take(0) none; repeat(1) one marker, (0) none.
  return dataset.take(tf.where(is_canary, tf.constant(0, tf.int64), -1)
                      ).concatenate(markers.repeat(tf.cast(is_canary,
                                                           tf.int64)))


@tf.function
def _canary_index(dataset):
  """k when the dataset is canary k's marker, else -1.

  Reads the first batch with a dataset iterator, as TFF's DATASET_ITERATOR
  loop does (an empty dataset reads as not a canary). Not with
  `get_single_element`: in TFF's worker that grew the worker by about
  28 MB a round (docs/performance.md).
  """
  first = tf.constant(0, tf.int64)
  for x, _ in iter(dataset.take(1)):
    first = x[0, 0]
  return tf.where(first < 0, -first - 1, tf.constant(-1, tf.int64))


def _direction(seed, k, sizes: Sequence[int], shapes):
  """Direction k as tensors of `shapes` (unit l2 norm over all of them)."""
  flat = tf.random.stateless_normal(
      [sum(sizes)], seed=tf.stack([tf.cast(seed, tf.int64),
                                   tf.cast(k, tf.int64)]), dtype=tf.float32)
  flat = flat / tf.norm(flat)
  return [tf.reshape(part, shape)
          for part, shape in zip(tf.split(flat, list(sizes)), shapes)]


def _flat_direction(seed, k, dimension: int):
  return _direction(seed, k, [dimension], [[dimension]])[0]


def _shapes(tensor_types) -> Tuple[List[List[int]], List[int]]:
  shapes = [list(t.shape) for t in tensor_types]
  return shapes, [int(np.prod(s)) for s in shapes]


def build_client_work(model_fn, optimizer, canaries: Canaries):
  """TFF's model-delta client work (unweighted, as FedAvg's) with canaries.

  A client whose dataset carries a canary marker (`mark_dataset`) returns
  norm * u_k as its update instead of a trained delta; every other client
  trains as usual. The marker is read, skipped and substituted inside the
  client's one TF computation around TFF's own client update
  (`model_delta_client_work.build_model_delta_update_with_tff_optimizer`),
  so real clients run TFF's update on their unchanged dataset, and the
  round's metrics are aggregated as TFF's `build_model_delta_client_work`
  aggregates them (`sum_then_finalize`). A canary trains on nothing: its
  metrics stay zero, as before.

  The marker is read with a dataset iterator (`_canary_index`), which
  keeps TFF's worker flat over a run (docs/performance.md).
  """
  inner = tff.learning.templates.build_model_delta_client_work(
      model_fn, optimizer, tff.learning.ClientWeighting.UNIFORM,
      loop_implementation=tff.learning.LoopImplementation.DATASET_ITERATOR)
  state_type, weights_type, data_type = inner.next.type_signature.parameter
  with tf.Graph().as_default():   # As TFF: no variables in the global graph.
    metrics_aggregation = tff.learning.metrics.sum_then_finalize(
        model_fn().metric_finalizers())
  result_type = inner.next.type_signature.result.result.member
  shapes, sizes = _shapes(tff.structure.flatten(result_type.update))
  seed, norm = canaries.seed, canaries.norm

  @tff.tensorflow.computation(state_type.member, weights_type.member,
                              data_type.member)
  def client_update(hparams, weights, dataset):
    k = _canary_index(dataset)
    update_fn = tff_client_work.build_model_delta_update_with_tff_optimizer(
        model_fn=model_fn, weighting=tff.learning.ClientWeighting.UNIFORM,
        loop_implementation=tff.learning.LoopImplementation.DATASET_ITERATOR)
    result, model_output = update_fn(
        optimizer, weights, dataset.skip(tf.cast(k >= 0, tf.int64)),
        hparams)   # A canary's dataset is its one marker: nothing is left.
    update = tf.nest.flatten(result.update)
    chosen = tf.cond(
        k >= 0,
        lambda: [norm * d for d in _direction(seed, k, sizes, shapes)],
        lambda: update)
    return tff.learning.templates.ClientResult(
        update=tf.nest.pack_sequence_as(result.update, chosen),
        update_weight=result.update_weight), model_output

  @tff.federated_computation(state_type, weights_type, data_type)
  def next_fn(state, weights, client_data):
    result, model_outputs = tff.federated_map(
        client_update, (tff.federated_broadcast(state), weights, client_data))
    measurements = tff.federated_zip(
        collections.OrderedDict(train=metrics_aggregation(model_outputs)))
    return tff.templates.MeasuredProcessOutput(state, result, measurements)

  return tff.learning.templates.ClientWorkProcess(
      inner.initialize, next_fn, get_hparams_fn=inner.get_hparams,
      set_hparams_fn=inner.set_hparams)


def build_round_statistic(weights_type, canaries: Canaries):
  """(old weights, new weights) -> cos(old - new, u_k) for all 2K
  directions, as a TFF computation (run in the worker every round)."""
  leaves = tff.structure.flatten(weights_type.trainable)
  dimension = sum(_shapes(leaves)[1])
  seed, count = canaries.seed, canaries.num_directions

  @tff.tensorflow.computation(weights_type, weights_type)
  def round_cosines(old, new):
    delta = tf.concat(
        [tf.reshape(a - b, [-1]) for a, b in
         zip(tf.nest.flatten(old.trainable), tf.nest.flatten(new.trainable))],
        axis=0)
    dots = tf.map_fn(
        lambda k: tf.tensordot(_flat_direction(seed, k, dimension), delta, 1),
        tf.range(count, dtype=tf.int64), fn_output_signature=tf.float32)
    return tf.math.divide_no_nan(dots, tf.norm(delta))

  return round_cosines


def final_cosines(canaries: Canaries, initial: Sequence[np.ndarray],
                  final: Sequence[np.ndarray]) -> np.ndarray:
  """cos(theta_0 - theta_T, u_k) for the 2K directions, in float64."""
  delta = np.concatenate([np.ravel(np.asarray(a, np.float64) -
                                   np.asarray(b, np.float64))
                          for a, b in zip(initial, final)])
  dimension = delta.size
  scale = np.linalg.norm(delta)
  out = np.zeros(canaries.num_directions)
  for k in range(canaries.num_directions):
    direction = _flat_direction(tf.constant(canaries.seed, tf.int64),
                                tf.constant(k, tf.int64), dimension).numpy()
    out[k] = float(direction.astype(np.float64) @ delta) / scale if scale else 0.0
  return out


class RoundCosines:
  """The per-round cosines of a run, kept in its directory (rows of 2K
  float32) so that a resumed run keeps those of the rounds before."""

  def __init__(self, path: str, num_directions: int, start_round: int):
    self._path = path
    self._width = num_directions
    rows = self.read().shape[0] if os.path.exists(path) else 0
    if rows < start_round:
      raise ValueError(f'{path} holds {rows} rounds of canary cosines, but '
                       f'the run resumes from round {start_round}.')
    if os.path.exists(path):
      with open(path, 'r+b') as f:   # Rounds after the checkpoint re-run.
        f.truncate(start_round * self._width * 4)

  def append(self, cosines: np.ndarray):
    row = np.asarray(cosines, np.float32).reshape(self._width)
    with open(self._path, 'ab') as f:
      f.write(row.tobytes())
      f.flush()
      os.fsync(f.fileno())

  def read(self) -> np.ndarray:
    values = np.fromfile(self._path, dtype=np.float32)
    return values[:values.size // self._width * self._width].reshape(
        -1, self._width)


def _facts(canaries: Canaries, participations: np.ndarray) -> Dict:
  participations = np.asarray(participations)
  return dict(canaries=canaries.count, canary_norm=canaries.norm,
              canary_participations=dict(
                  mean=float(np.mean(participations)),
                  max=int(np.max(participations)),
                  never=int(np.sum(participations == 0))))


def estimates(canaries: Canaries, *, participations: np.ndarray,
              final: np.ndarray, rounds: Optional[np.ndarray], delta: float,
              dimension: int, rng: Optional[np.random.Generator] = None,
              bootstrap: int = 500) -> Dict:
  """summary.json's `empirical_privacy`: the final-model estimate (its
  fields at the top level) and the all-iterates one under `all_iterates`.

  Args:
    canaries: the run's canaries.
    participations: how often each canary took part (length K).
    final: `final_cosines` (length 2K).
    rounds: the per-round cosines (rounds x 2K), or None.
    delta: the run's delta.
    dimension: d, the model's trainable parameters (the final cosines of
      never inserted canaries are N(0, 1/d): the known null).
    rng: for the bootstrap.
    bootstrap: resamples of the interval.
  """
  seen = np.asarray(participations) > 0
  count = canaries.count
  out = empirical_privacy.estimate(
      final[:count][seen], final[count:], delta, dimension=dimension,
      estimator='known_null', rng=rng, bootstrap=bootstrap).as_dict()
  out.update(_facts(canaries, participations))
  if rounds is not None and len(rounds):
    best = np.max(rounds.astype(np.float64), axis=0)
    # The maximum over rounds has no known null: both sets are fitted.
    iterates = empirical_privacy.estimate(
        best[:count][seen], best[count:], delta, estimator='fitted_null',
        rng=rng, bootstrap=bootstrap)
    out['all_iterates'] = dict(
        iterates.as_dict(),
        threat_model='all iterates (max over rounds of the cosine of each '
                     'round\'s model update)')
  return out


class CanaryRun:
  """The canaries of one training run, from start (or resume) to summary.

  Usage (training.py): `keys` marks a cohort's round keys, `mark` goes to
  the client dataset computation, `statistic` to the runner, `record` is
  called after every round, `finish` at the end.
  """

  def __init__(self, canaries: Canaries, *, client_ids: Sequence[str],
               sequence_length: int, initial_weights: Sequence[np.ndarray],
               weights_type, cosines_path: str, start_round: int):
    self.canaries = canaries
    self._k_of = {client_ids[i]: k for i, k in canaries.index_of().items()}
    self._sequence_length = sequence_length
    self._initial = [np.asarray(w) for w in initial_weights]
    self.statistic = build_round_statistic(weights_type, canaries)
    self._cosines = RoundCosines(cosines_path, canaries.num_directions,
                                 start_round)

  def mark(self, dataset, key):
    return mark_dataset(dataset, key, self._sequence_length)

  def keys(self, keys: Sequence[str], cohort: Sequence[str]) -> List[str]:
    """The cohort's round keys, canaries' marked."""
    return stackoverflow.mark_round_keys(keys, cohort, self._k_of, _PREFIX)

  def count(self, cohort: Sequence[str]) -> int:
    """The canaries in a cohort (of client ids)."""
    return sum(c in self._k_of for c in cohort)

  def record(self, row: Dict, cohort: Sequence[str], round_cosines):
    """Keeps the round's cosines; `row` gets `canaries_in_cohort`."""
    row['canaries_in_cohort'] = self.count(cohort)
    self._cosines.append(np.asarray(round_cosines))

  def finish(self, final_weights: Sequence[np.ndarray],
             participations: np.ndarray, delta: float, *, plot_path: str,
             accounted_epsilon: Optional[float]) -> Dict:
    """summary.json's `empirical_privacy` (see `estimates`) and its plot.

    Fewer than 2 canaries seen (or a diverged model) give a block that says
    why instead of an estimate. The bootstrap is seeded by the canaries'
    seed, so a resumed run reports the same interval.
    """
    # pylint: disable=g-import-not-at-top
    from dpftrl_tff import plotting   # matplotlib: only when plotting.
    # pylint: enable=g-import-not-at-top
    final = final_cosines(self.canaries, self._initial, final_weights)
    try:
      out = estimates(self.canaries, participations=participations,
                      final=final, rounds=self._cosines.read(), delta=delta,
                      dimension=sum(int(np.size(w)) for w in final_weights),
                      rng=np.random.default_rng([self.canaries.seed, 1]))
    except ValueError as e:
      return dict(_facts(self.canaries, participations),
                  empirical_epsilon=None, not_estimated=str(e),
                  accounted_epsilon=accounted_epsilon)
    out['accounted_epsilon'] = accounted_epsilon
    count = self.canaries.count
    seen = np.asarray(participations) > 0
    plotting.histogram_plot(
        plot_path,
        [(f'{int(np.sum(seen))} inserted canaries', final[:count][seen]),
         (f'{count} never inserted', final[count:])],
        title=(f'empirical eps {out["empirical_epsilon"]:.3g} (accounted '
               + ('none' if accounted_epsilon is None
                  else f'{accounted_epsilon:.3g}')
               + f') at delta {delta:g}'),
        xlabel='cosine of theta_0 - theta_T with the canary direction')
    return out
