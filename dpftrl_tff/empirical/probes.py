"""What a training run inserts to measure its privacy empirically.

Two probes, both optional and both invisible to every other client:
  * canary clients (`canaries`, --canaries): the one-shot empirical epsilon
    (Andrew et al. 2024), final model and all iterates;
  * canary phrases (`exposure`, --canary_phrases): the secret sharer's
    exposure (Carlini et al. 2019).
`Probes` gives training one object for both: the cohort's round keys and
the client datasets marked, the per-round statistic, the metrics columns
and the summary blocks. With neither probe it changes nothing (no mark, no
statistic): the run is exactly the run without probes.
"""

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from dpftrl_tff import accounting
from dpftrl_tff.aggregators import registry
from dpftrl_tff.data import stackoverflow
from dpftrl_tff.empirical import canaries as canaries_lib
from dpftrl_tff.empirical import exposure
from dpftrl_tff.privacy import run_privacy


def choose_canaries(config, num_clients: int
                    ) -> Optional[canaries_lib.Canaries]:
  """The run's canary clients (--canaries), a function of its seed; the
  learning process is built with them (`canaries.build_client_work`)."""
  if not config.canaries:
    return None
  clip = registry.get(config.aggregator).initial_clip(config)
  return canaries_lib.choose(
      config.canaries, seed=config.seed, num_clients=num_clients,
      norm=(canaries_lib.default_norm(clip) if config.canary_norm is None
            else config.canary_norm))


class Probes:
  """The probes of one run (see module doc).

  Args:
    config: the run's settings (canaries, canary phrases, seed).
    canaries: `choose_canaries(config, ...)`.
    client_ids: the training clients, by index.
    vocab: the vocabulary (the phrases' words and special ids).
    initial_weights: theta_0's trainable weights.
    weights_type: the process's model weights type (for the statistic).
    cosines_path: where the canaries' per-round cosines are kept.
    start_round: the round the run starts (or resumes) from.
  """

  def __init__(self, config, canaries: Optional[canaries_lib.Canaries], *,
               client_ids: Sequence[str], vocab: Sequence[str],
               initial_weights, weights_type, cosines_path: str,
               start_round: int):
    self._config = config
    self._canaries = canaries and canaries_lib.CanaryRun(
        canaries, client_ids=list(client_ids),
        sequence_length=config.sequence_length,
        initial_weights=initial_weights, weights_type=weights_type,
        cosines_path=cosines_path, start_round=start_round)
    self._phrases = None
    if config.canary_phrases:
      _, _, bos, eos = stackoverflow.special_ids(len(vocab))
      phrases = exposure.choose(
          config.canary_phrases, repeats=config.canary_phrase_repeats,
          length=config.canary_phrase_length, seed=config.seed,
          num_clients=len(client_ids), num_words=len(vocab),
          exclude=canaries.client_indices if canaries else ())
      self._phrases = exposure.PhraseRun(
          phrases, client_ids=list(client_ids), bos=bos, eos=eos,
          sequence_length=config.sequence_length)
    self._markers = [p for p in (self._canaries, self._phrases) if p]

  @property
  def mark(self) -> Optional[Callable[[Any, Any], Any]]:
    """(client dataset, round key tensor) -> dataset, or None."""
    if not self._markers:
      return None

    def mark(dataset, key):
      for marker in self._markers:
        dataset = marker.mark(dataset, key)
      return dataset
    return mark

  @property
  def statistic(self):
    """The per-round TFF statistic for the runner, or None."""
    return self._canaries.statistic if self._canaries else None

  def keys(self, keys: Sequence[str], cohort: Sequence[str]) -> List[str]:
    """The cohort's client round keys, the probes' clients marked."""
    for marker in self._markers:
      keys = marker.keys(keys, cohort)
    return list(keys)

  def canaries_in(self, cohort: Sequence[str]) -> int:
    """Canary clients in a cohort (they train nothing)."""
    return self._canaries.count(cohort) if self._canaries else 0

  def record(self, row: Dict, cohort: Sequence[str], statistic_value):
    """After a round: the canaries' cosines kept, `row` gets its column."""
    if self._canaries:
      self._canaries.record(row, cohort, statistic_value)

  def finish(self, summary: Dict, *, final_weights, counts: np.ndarray,
             plot_path: str, final_model: Callable[[], Any]):
    """Adds `empirical_privacy` and `exposure` to `summary`.

    Args:
      summary: the run's summary, with its `privacy`.
      final_weights: theta_T's trainable weights.
      counts: participations per client (the participation log's).
      plot_path: where empirical_privacy.png goes.
      final_model: () -> the Keras model holding theta_T (called only for
        the phrases).
    """
    privacy = run_privacy.accounted(summary)
    if self._canaries:
      indices = list(self._canaries.canaries.client_indices)
      summary['empirical_privacy'] = self._canaries.finish(
          [np.asarray(w) for w in final_weights], counts[indices],
          privacy['delta'] if privacy else accounting.DEFAULT_DELTA,
          plot_path=plot_path,
          accounted_epsilon=privacy['epsilon'] if privacy else None)
    if self._phrases:
      model = final_model()
      summary['exposure'] = self._phrases.finish(
          lambda x: model(x, training=False), counts,
          candidates=self._config.exposure_candidates,
          seed=self._config.seed)
