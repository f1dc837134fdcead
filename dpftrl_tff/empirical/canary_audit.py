"""A canary audit of a mechanism alone, without training a model.

One-shot empirical privacy estimation (Andrew et al., ICLR 2024, arXiv
2302.03098) applied to the aggregation path of a training run: the DP
factory of `--aggregator` (tree, BLT, adaptive clipping, SecAgg inside) is
built by the mechanism registry exactly as training builds it, for a model
of `dimension` parameters, and run for T rounds in TFF on:

  * real clients' updates replaced by random vectors (independent random
    signs, norm `update_norm`: `empirical_privacy.random_signs`), and
  * K canary clients, each with its own fixed random unit direction u_k
    (random signs from (seed, k)) scaled to `canary_norm` (past the clip
    norm, so clipped to C like any update). The canaries are members of
    the population and take part whenever the participation model in use
    (uniform, min_sep_groups, timer) puts them in a cohort, taking real
    clients' places: the report goal and the real clients' participation
    rules are unchanged.

K further directions are never inserted. Each u_k is drawn from (seed, k)
when it is needed (`empirical_privacy.SeededDirections`), so memory holds
one round's updates, not 2K directions. The statistic is the cosine of the
final model delta (the sum of the T released aggregates) with each
direction: the final-model threat model. `empirical_privacy` turns the two
sets of cosines into the estimate and its interval.

Here only the final-model statistic; canaries inside training
(`canaries`, --canaries) also give the all-iterates one.
"""

from concurrent import futures
import dataclasses
import os
import time
from typing import Any, Callable, Dict, Iterator, Optional

import numpy as np

from dpftrl_tff import accounting
from dpftrl_tff import participation
from dpftrl_tff import plotting
from dpftrl_tff import strict_json
from dpftrl_tff.aggregators import registry
from dpftrl_tff.empirical import empirical_privacy
from dpftrl_tff.privacy import privacy_report
from dpftrl_tff.run import run_directory


def _prefetched(make: Callable[[int], Any], count: int) -> Iterator[Any]:
  """make(0), ..., make(count - 1), in this order, each made in a thread
  while the caller works on the one before (an audit round waits on TFF's
  worker; the next cohort's values are drawn meanwhile, with the same random
  draws in the same order as without the thread)."""
  with futures.ThreadPoolExecutor(1) as pool:
    upcoming = pool.submit(make, 0) if count > 0 else None
    for r in range(count):
      current = upcoming.result()
      if r + 1 < count:
        upcoming = pool.submit(make, r + 1)
      yield current


def run(config, *, dimension: int, canaries: int, population: int,
        delta: float, canary_norm: Optional[float] = None,
        update_norm: Optional[float] = None,
        rng: Optional[np.random.Generator] = None, bootstrap: int = 500,
        progress: Optional[Callable[[int, int], None]] = None
        ) -> 'Audit':
  """Audits `config`'s mechanism: the figures, cosines and accounting.

  Args:
    config: a validated TrainConfig (aggregator, z, C, report goal, T,
      participation, restarts, BLT, SecAgg), with `seed` set.
    dimension: the model dimension d of the updates.
    canaries: K, the canaries inserted (and as many never inserted).
    population: N, clients including the K canaries.
    delta: delta of the estimate and of the accounted epsilon.
    canary_norm: a canary update's norm; default 2 C (clipped to C).
    update_norm: a real client's update norm; default C.
    rng: for canary directions and real updates (unpredictable default).
    bootstrap: resamples for the interval.
    progress: called with (round, rounds) after each round.
  """
  _check_arguments(config, dimension=dimension, canaries=canaries,
                   population=population)
  rng = rng or np.random.default_rng()
  mechanism = registry.get(config.aggregator)
  clip = mechanism.initial_clip(config)
  scale = clip if clip else 1.0   # No clip (no DP): unit updates.
  canary_norm = 2.0 * scale if canary_norm is None else canary_norm
  update_norm = scale if update_norm is None else update_norm
  config = mechanism.planned(config, population)   # The BLT's MinS, MaxP.
  canary_ids = rng.choice(population, canaries, replace=False)
  # u_0 .. u_{K-1} inserted, u_K .. u_{2K-1} never; drawn when needed.
  directions = empirical_privacy.SeededDirections(
      2 * canaries, dimension, seed=int(rng.integers(2**62)))
  started = time.time()
  total, log = _run_rounds(
      config, mechanism, dimension=dimension, population=population,
      canary_of={int(c): k for k, c in enumerate(canary_ids)},
      directions=directions, norms=(canary_norm, update_norm), rng=rng,
      progress=progress)
  counts = log.counts[canary_ids]
  seen = counts > 0
  cos_seen = directions.cosines(total, np.flatnonzero(seen))
  cos_never = directions.cosines(total, range(canaries, 2 * canaries))
  result = empirical_privacy.estimate(
      cos_seen, cos_never, delta, dimension=dimension,
      estimator='known_null', rng=rng, bootstrap=bootstrap).as_dict()
  accounted = _accounted(mechanism, config, log, delta)
  result.update(
      mechanism=config.aggregator, participation=config.participation,
      rounds=config.total_rounds, dimension=dimension,
      clients_per_round=config.clients_per_round, population=population,
      noise_multiplier=config.noise_multiplier, clip_norm=clip,
      canary_norm=canary_norm, update_norm=update_norm,
      canary_participations=dict(
          mean=float(np.mean(counts)), max=int(np.max(counts)),
          never=int(np.sum(~seen))),
      observed_max_participation=max(1, log.max_participation),
      observed_min_separation=log.min_separation,
      accounted_epsilon=accounted and accounted['epsilon'],
      accounted_zcdp=accounted and accounted['zcdp'],
      seconds=time.time() - started)
  return Audit(result=result, seen_cosines=cos_seen,
               unseen_cosines=cos_never, accounted=accounted)


def _check_arguments(config, *, dimension: int, canaries: int,
                     population: int):
  if canaries < 2:
    raise ValueError(f'--canaries must be >= 2, got {canaries}.')
  if population < max(config.clients_per_round, canaries + 1):
    raise ValueError(
        f'--population={population} must be at least --clients_per_round '
        f'({config.clients_per_round}) and above --canaries ({canaries}).')
  if dimension < 2:
    raise ValueError(f'--dimension must be >= 2, got {dimension}.')


def _run_rounds(config, mechanism, *, dimension: int, population: int,
                canary_of: Dict[int, int], directions, norms, rng, progress):
  """The T rounds of the mechanism's factory in TFF: (the sum of the
  released aggregates in float64, the participation log)."""
  # TF and TFF only when an audit runs (the checks above need neither).
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  import tensorflow_federated as tff
  from dpftrl_tff.run import learning_process
  from dpftrl_tff.tff_compat import resident
  # pylint: enable=g-import-not-at-top
  learning_process.prepare_execution(config)   # SecAgg's secure sums need TFF's
                                       # test context, as in training.
  factory = mechanism.build_factory(
      config, tf.TensorSpec([dimension], tf.float32))
  process = factory.create(tff.TensorType(np.float32, [dimension]))
  sampler = config.build_sampler(population)
  log = participation.ParticipationLog(population)
  canary_norm, update_norm = norms

  def cohort_values(r):
    """Round r's client values: real clients' random signs, canaries' u_k."""
    cohort = sampler.sample(r)
    log.record(r, cohort)
    num_real = sum(int(c) not in canary_of for c in cohort)
    real = iter(empirical_privacy.random_signs(rng, num_real, dimension,
                                              update_norm))
    return [(canary_norm * directions.unit(canary_of[int(c)])).astype(
        np.float32) if int(c) in canary_of else next(real) for c in cohort]

  rounds = resident.ResidentAggregation(process)   # The tree stays in TFF.
  state = process.initialize()
  total = np.zeros(dimension)
  for r, values in enumerate(_prefetched(cohort_values, config.total_rounds)):
    state, result = rounds.next(state, values)
    result = np.asarray(result, np.float64)
    if not np.all(np.isfinite(result)):
      raise ValueError(f'round {r + 1}: the mechanism released a value that '
                       'is not finite.')
    total += result
    if progress is not None:
      progress(r + 1, config.total_rounds)
  return total, log


def _accounted(mechanism, config, log, delta: float
               ) -> Optional[Dict[str, Any]]:
  """The accountant's report at the observed MinS and MaxP (PrivacyReport
  fields at `delta`), None without noise."""
  rounds = config.total_rounds
  max_p = max(1, log.max_participation)
  min_sep = log.min_separation if log.min_separation >= 0 else rounds - 1
  accounted = mechanism.privacy(config, rounds, max_p,
                                min(min_sep, rounds - 1))
  if accounted is None:
    return None
  if accounted.poisson is not None:   # DP-FedAvg: PLD at this delta.
    return dict(
        accounted.as_dict(), restart_rounds=[], delta=delta,
        epsilon=accounting.compute_privacy(
            rounds=rounds, noise_multiplier=accounted.noise_multiplier,
            sampling_probability=accounted.poisson['sampling_probability'],
            delta=delta).epsilon)
  return dict(
      accounted.as_dict(), restart_rounds=list(accounted.restart_rounds),
      delta=delta, epsilon=accounting.epsilon_pld(accounted.zcdp, delta),
      epsilon_closed_form=accounting.epsilon_closed_form(accounted.zcdp,
                                                         delta))


@dataclasses.dataclass(frozen=True)
class Audit:
  """`result`: the JSON-ready figures; the cosines; the accountant's report
  (PrivacyReport fields at the audit's delta, None without noise)."""
  result: Dict[str, Any]
  seen_cosines: np.ndarray
  unseen_cosines: np.ndarray
  accounted: Optional[Dict[str, Any]]


def write_outputs(audit: Audit, output_dir: str, *, clipping: str,
                  fixed_noise_seed: Optional[int] = None):
  """audit.json, empirical_privacy.png and privacy_report.md (which states
  no guarantee when `fixed_noise_seed`, the audit's --noise_seed, fixed the
  noise)."""
  os.makedirs(output_dir, exist_ok=True)
  r = audit.result
  strict_json.write(os.path.join(output_dir, 'audit.json'), r)
  plotting.histogram_plot(
      os.path.join(output_dir, 'empirical_privacy.png'),
      [(f'{r["seen_canaries"]} inserted canaries', audit.seen_cosines),
       (f'{r["unseen_canaries"]} never inserted', audit.unseen_cosines)],
      title=(f'{r["mechanism"]}: empirical eps '
             f'{r["empirical_epsilon"]:.3g} (accounted '
             + ('none' if r['accounted_epsilon'] is None
                else f'{r["accounted_epsilon"]:.3g}')
             + f') at delta {r["delta"]:g}'),
      xlabel='cosine of the final model delta with the canary direction')
  participation_text = (
      f'{r["participation"]} participation over a population of '
      f'{r["population"]} (canaries included); observed MaxP '
      f'{r["observed_max_participation"]}, MinS '
      f'{r["observed_min_separation"]}; the figures below use the observed '
      'values of this audit run.')
  run_directory.write_text_atomic(
      os.path.join(output_dir, privacy_report.FILE_NAME),
      privacy_report.render(
          audit.accounted, subject=f'run {output_dir} (mechanism audit)',
          participation=participation_text, clipping=clipping,
          released=(f'the {r["rounds"]} aggregated updates of random '
                    f'client vectors of dimension {r["dimension"]} (no '
                    'model is trained).'),
          empirical=r, fixed_noise_seed=fixed_noise_seed))
