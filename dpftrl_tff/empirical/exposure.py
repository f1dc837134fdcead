"""Memorization of the language model: the secret sharer's exposure.

Carlini, Liu, Erlingsson, Kos, Song, "The Secret Sharer" (USENIX Security
2019), as used for Gboard models by Ramaswamy et al. (2020):
`--canary_phrases=N` draws N random phrases of `--canary_phrase_length`
words, uniformly from the vocabulary, each inserted into the data of
`--canary_phrase_repeats` training clients (chosen from the run's seed,
never canary clients): every round such a client takes part, its dataset
holds one more batch with the phrase as a sentence (BOS, the words, EOS).

After training, a phrase s is ranked by the model's log-perplexity
    lp(s) = - sum_i log p(w_i | BOS, w_1 .. w_{i-1})    (its L words)
among candidates r drawn from the same space R (L uniform words, |R| = V^L):
    exposure(s) = log2 |R| - log2 rank(s),
    rank(s) = 1 + |{r in R : lp(r) < lp(s)}|.
Ranking all of R is too costly, so two estimates from M sampled candidates:
  * rank estimate: log2(M + 1) - log2(1 + |{sampled r : lp(r) < lp(s)}|),
    at most log2(M + 1) (the phrase beats every candidate);
  * extrapolated (Carlini et al. Sec. 4.3 fit a distribution to the
    candidates' log-perplexities): -log2 Phi((lp(s) - mu) / sigma) with a
    normal fit (mu, sigma) of the sampled candidates' lp; it can exceed
    log2(M + 1) and is capped at log2 |R|, the exposure of rank 1.
A model that has not memorized s gives exposure about 1 (s is a typical
candidate); exposure near log2 |R| means s is the model's favourite.
"""

import dataclasses
import math
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
from scipy import special
import tensorflow as tf

from dpftrl_tff.data import stackoverflow

_PREFIX = 'phrase'
_STREAM = 0x5EC12E7


@dataclasses.dataclass(frozen=True)
class Phrases:
  """The inserted phrases: word ids (1..V) and the clients holding each."""
  words: Tuple[Tuple[int, ...], ...]
  clients: Tuple[Tuple[int, ...], ...]
  num_words: int   # V: words are drawn from ids 1..V.

  def phrase_of(self) -> Dict[int, int]:
    """{client index: phrase j}."""
    return {c: j for j, clients in enumerate(self.clients) for c in clients}


def choose(count: int, *, repeats: int, length: int, seed: int,
           num_clients: int, num_words: int,
           exclude: Sequence[int] = ()) -> Phrases:
  """N phrases and their clients, a function of the run's seed."""
  rng = np.random.default_rng([int(seed), _STREAM])
  allowed = np.setdiff1d(np.arange(num_clients), np.asarray(exclude, int))
  if count * repeats > len(allowed):
    raise ValueError(
        f'--canary_phrases={count} x --canary_phrase_repeats={repeats} '
        f'needs {count * repeats} clients; {len(allowed)} are available.')
  clients = rng.choice(allowed, count * repeats, replace=False)
  words = rng.integers(1, num_words + 1, size=(count, length))
  return Phrases(
      words=tuple(tuple(int(w) for w in row) for row in words),
      clients=tuple(tuple(int(c) for c in clients[j * repeats:
                                                  (j + 1) * repeats])
                    for j in range(count)),
      num_words=num_words)


def sentence_ids(words: np.ndarray, *, bos: int, eos: int,
                 sequence_length: int) -> Tuple[np.ndarray, np.ndarray]:
  """(x, y) of phrases as the data pipeline makes sentences: rows of
  [BOS, words, EOS] padded to sequence_length + 1, x = ids[:-1],
  y = ids[1:]."""
  words = np.asarray(words, np.int64)
  n, length = words.shape
  if length + 1 > sequence_length:
    raise ValueError(f'--canary_phrase_length={length} must be below '
                     f'--sequence_length={sequence_length}.')
  ids = np.zeros((n, sequence_length + 1), np.int64)
  ids[:, 0] = bos
  ids[:, 1:length + 1] = words
  ids[:, length + 1] = eos
  return ids[:, :-1], ids[:, 1:]


def mark_dataset(dataset, key, phrase_x, phrase_y):
  """`dataset`, plus one batch with phrase j when `key` is marked j.

  Args:
    dataset: a client's (x, y) batches.
    key: its client round key (string tensor), maybe marked
      (`stackoverflow.mark_round_keys`).
    phrase_x, phrase_y: `sentence_ids` of all phrases ([N, L] int64).
  """
  is_phrase, j = stackoverflow.round_key_mark(key, _PREFIX, unmarked=0)
  extra = tf.data.Dataset.from_tensors(
      (tf.gather(tf.constant(phrase_x), j)[tf.newaxis],
       tf.gather(tf.constant(phrase_y), j)[tf.newaxis]))
  # repeat(0) is empty: no dataset function (see canaries.mark_dataset).
  return dataset.concatenate(extra.repeat(tf.cast(is_phrase, tf.int64)))


def log_perplexities(logits_fn: Callable[[np.ndarray], np.ndarray],
                     x: np.ndarray, y: np.ndarray, length: int,
                     batch_size: int = 1024) -> np.ndarray:
  """lp of each row: - sum of log p(y_i | x_..i) over its first `length`
  positions (the phrase's words), in float64.

  Args:
    logits_fn: x batch -> logits [batch, positions, vocabulary].
    x, y: `sentence_ids`.
    length: L.
    batch_size: rows per call.
  """
  out = np.zeros(len(x))
  for start in range(0, len(x), batch_size):
    logits = np.asarray(logits_fn(x[start:start + batch_size]),
                        np.float64)[:, :length]
    log_probs = logits - special.logsumexp(logits, axis=-1, keepdims=True)
    target = y[start:start + batch_size, :length]
    out[start:start + len(target)] = -np.take_along_axis(
        log_probs, target[..., None], axis=-1)[..., 0].sum(axis=1)
  return out


def exposures(phrase_lp: float, candidate_lps: np.ndarray
              ) -> Tuple[int, float, float]:
  """(rank among the candidates, rank exposure, extrapolated exposure)."""
  candidate_lps = np.asarray(candidate_lps, np.float64)
  below = int(np.sum(candidate_lps < phrase_lp))
  rank_exposure = math.log2(len(candidate_lps) + 1) - math.log2(1 + below)
  mu, sigma = float(np.mean(candidate_lps)), float(np.std(candidate_lps))
  if sigma > 0:
    z = (phrase_lp - mu) / sigma
    # -log2 Phi(z), accurate far in the lower tail.
    extrapolated = -float(special.log_ndtr(z)) / math.log(2)
  else:
    extrapolated = math.nan
  return below + 1, rank_exposure, extrapolated


def measure(phrases: Phrases, logits_fn, *, bos: int, eos: int,
            sequence_length: int, candidates: int, participations:
            Sequence[int], rng: np.random.Generator) -> Dict:
  """summary.json's `exposure` block: every phrase's exposure.

  Args:
    phrases: the run's phrases.
    logits_fn: the trained model, x -> logits.
    bos, eos: the pipeline's special ids.
    sequence_length: the pipeline's sentence length.
    candidates: M, random candidates of the same shape.
    participations: for each phrase, the rounds its clients took part in
      (summed over its clients).
    rng: for the candidates.
  """
  words = np.asarray(phrases.words)
  length = words.shape[1]
  x, y = sentence_ids(words, bos=bos, eos=eos,
                      sequence_length=sequence_length)
  phrase_lps = log_perplexities(logits_fn, x, y, length)
  cand = rng.integers(1, phrases.num_words + 1, size=(candidates, length))
  cx, cy = sentence_ids(cand, bos=bos, eos=eos,
                        sequence_length=sequence_length)
  candidate_lps = log_perplexities(logits_fn, cx, cy, length)
  log2_space = length * math.log2(phrases.num_words)
  rows: List[Dict] = []
  for j, lp in enumerate(phrase_lps):
    rank, rank_exposure, extrapolated = exposures(lp, candidate_lps)
    # Exposure is at most log2 |R| (rank 1); the fit's tail is not capped.
    extrapolated = min(extrapolated, log2_space)
    rows.append(dict(phrase=j, clients=len(phrases.clients[j]),
                     participations=int(participations[j]),
                     log_perplexity=float(lp), rank=rank,
                     exposure=rank_exposure,
                     extrapolated_exposure=extrapolated))
  taken = [r for r in rows if r['participations'] > 0]
  return dict(
      phrases=len(rows), phrase_length=length,
      repeats=len(phrases.clients[0]) if phrases.clients else 0,
      candidates=candidates,
      max_rank_exposure=math.log2(candidates + 1),
      log2_space=log2_space,
      candidate_log_perplexity=dict(mean=float(np.mean(candidate_lps)),
                                    std=float(np.std(candidate_lps))),
      mean_exposure_trained=(float(np.mean([r['exposure'] for r in taken]))
                             if taken else None),
      mean_extrapolated_exposure_trained=(
          float(np.mean([r['extrapolated_exposure'] for r in taken]))
          if taken else None),
      per_phrase=rows)


class PhraseRun:
  """The phrases of one training run: marks its clients' keys and
  datasets, and measures the exposure at the end (training.py)."""

  def __init__(self, phrases: Phrases, *, client_ids: Sequence[str],
               bos: int, eos: int, sequence_length: int):
    self.phrases = phrases
    self._j_of = {client_ids[c]: j for c, j in phrases.phrase_of().items()}
    self._bos, self._eos = bos, eos
    self._sequence_length = sequence_length
    self._x, self._y = sentence_ids(np.asarray(phrases.words), bos=bos,
                                    eos=eos, sequence_length=sequence_length)

  def keys(self, keys: Sequence[str], cohort: Sequence[str]) -> List[str]:
    return stackoverflow.mark_round_keys(keys, cohort, self._j_of, _PREFIX)

  def mark(self, dataset, key):
    return mark_dataset(dataset, key, self._x, self._y)

  def finish(self, logits_fn, counts: np.ndarray, *, candidates: int,
             seed: int) -> Dict:
    """The `exposure` block; candidates seeded by the run's seed."""
    return measure(
        self.phrases, logits_fn, bos=self._bos, eos=self._eos,
        sequence_length=self._sequence_length, candidates=candidates,
        participations=[int(np.sum(counts[list(c)]))
                        for c in self.phrases.clients],
        rng=np.random.default_rng([int(seed), _STREAM, 1]))

