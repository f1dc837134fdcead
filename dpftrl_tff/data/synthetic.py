"""A small StackOverflow-format database, generated offline, deterministic.

Writes `<cache_dir>/stackoverflow.sqlite` with TFF's exact schema (tables
`examples(split_name, client_id, serialized_example_proto)` and
`client_metadata(client_id, split_name, num_examples)`, splits train, heldout
and test; every example a `tf.train.Example` with `creation_date`, `score`,
`tags`, `title`, `tokens` and `type`) plus `stackoverflow.word_count`
(`word count` per line, most frequent first, from the train split), so that
`tff.simulation.datasets.stackoverflow.load_data(cache_dir)` opens it exactly
like the real 4 GB database.

What makes it federated-learning-like:
* thousands of clients whose number of sentences is heavy tailed
  (a discretized Pareto, capped), so a few clients hold many sentences.
  The scale `min_sentences_per_client` sets the sizes: the default 4 gives
  small clients (median 6, mean about 17: quick demos and tests);
  `STACKOVERFLOW_MIN_SENTENCES` = 100 imitates the real train split, whose
  users all wrote at least 100 sentences (TFF's loader documents that users
  with fewer were removed) and 397 on average (135,818,730 examples over
  342,477 users): minimum 100, mean about 433 before the cap;
* each client writes questions and answers about a few topics (a sparse
  Dirichlet mixture over topics, each topic with its own tags and vocabulary),
  and has habits: a preferred opening phrase and its own favourite words;
* sentences come from a sparse word-bigram chain shared by all clients mixed
  with topic words, so a next-word model can learn far more than a unigram
  guess (the tests check that bigram prediction beats unigram prediction).
"""

import bisect
import json
import os
import sqlite3
import tempfile
from typing import Any, Dict, List, Optional

import numpy as np

from dpftrl_tff import checks
from dpftrl_tff import strict_json
from dpftrl_tff.data import stackoverflow

# The real StackOverflow train split: users with fewer than 100 sentences
# were removed (tff.simulation.datasets.stackoverflow.load_data's docs).
STACKOVERFLOW_MIN_SENTENCES = 100
DEFAULT_MIN_SENTENCES = 4
_PARETO_SHAPE = 1.3
PARAMS_NAME = 'generation.json'

_SYLLABLES = [c + v for c in 'bcdfghjklmnprstvwz' for v in 'aeiou']


def _make_words(rng: np.random.Generator, count: int) -> List[str]:
  words, seen = [], set()
  while len(words) < count:
    n = int(rng.integers(1, 4))
    w = ''.join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), n))
    if w not in seen:
      seen.add(w)
      words.append(w)
  return words


def _cumulative(weights: np.ndarray) -> List[float]:
  c = np.cumsum(weights / weights.sum())
  c[-1] = 1.0
  return c.tolist()


class _Language:
  """The shared generative model: vocabulary, bigram chain and topics."""

  def __init__(self, rng: np.random.Generator, num_words: int,
               num_topics: int, successors: int = 6):
    self.words = _make_words(rng, num_words)
    self.num_topics = num_topics
    zipf = 1.0 / np.arange(1, num_words + 1)**1.05
    self.unigram_cum = _cumulative(zipf)
    # Sparse bigram chain: every word has a few successors, Zipf-weighted,
    # drawn from the global Zipf distribution (so frequent words recur).
    self.succ = []
    self.succ_cum = []
    for _ in range(num_words):
      nxt = rng.choice(num_words, size=successors, replace=False,
                       p=zipf / zipf.sum())
      self.succ.append(nxt.tolist())
      self.succ_cum.append(_cumulative(1.0 / np.arange(1, successors + 1)**2))
    # Topics: a vocabulary slice each (mid-frequency words) and tags.
    self.topic_words = []
    self.topic_cum = []
    per_topic = max(20, num_words // (2 * num_topics))
    for _ in range(num_topics):
      ws = rng.choice(np.arange(num_words // 20, num_words), size=per_topic,
                      replace=False)
      self.topic_words.append(ws.tolist())
      self.topic_cum.append(_cumulative(1.0 / np.arange(1, per_topic + 1)))
    self.tags = [f'tag-{w}' for w in _make_words(rng, num_topics * 3)]

  def sentence(self, rng, client) -> List[int]:
    length = int(min(35, 4 + rng.poisson(9)))
    if rng.random() < 0.3:   # the client's habitual opening phrase
      out = list(client['opening'])
    else:                    # or one of its favourite words
      favourites = client['favourites']
      out = [int(favourites[int(rng.integers(len(favourites)))])]
    w = out[-1]
    draws = rng.random((length, 3))
    while len(out) < length:
      r_mode, r_pick, r_topic = draws[len(out) - 1]
      if r_mode < 0.72:        # follow the shared bigram chain
        w = self.succ[w][bisect.bisect(self.succ_cum[w], r_pick)]
      elif r_mode < 0.92:      # a word of one of the client's topics
        t = client['topics'][bisect.bisect(client['topic_cum'], r_topic)]
        w = self.topic_words[t][bisect.bisect(self.topic_cum[t], r_pick)]
      else:                    # a client favourite
        w = client['favourites'][int(r_pick * len(client['favourites']))]
      out.append(int(w))
    return out[:length]

  def client(self, rng) -> Dict:
    mix = rng.dirichlet(np.full(self.num_topics, 0.15))
    topics = np.argsort(-mix)[:3]
    weights = mix[topics] + 1e-9
    opening_start = int(bisect.bisect(self.unigram_cum, rng.random()))
    opening = [opening_start]
    for _ in range(int(rng.integers(1, 4))):
      opening.append(self.succ[opening[-1]][0])
    favourites = [self.topic_words[int(topics[0])][int(i)]
                  for i in rng.integers(0, 10, 5)]
    return dict(topics=topics.tolist(), topic_cum=_cumulative(weights),
                opening=opening, favourites=favourites)


def language(*, seed: int = 0, num_words: int = 4000,
             num_topics: int = 40) -> _Language:
  """The language (words, bigram chain, topics) `generate(seed=...)` uses."""
  return _Language(np.random.default_rng(seed), num_words, num_topics)


def generate(cache_dir: str, *, num_train_clients: int = 3000,
             num_heldout_clients: int = 300, num_test_clients: int = 300,
             num_words: int = 4000, num_topics: int = 40,
             max_sentences_per_client: int = 600,
             min_sentences_per_client: int = DEFAULT_MIN_SENTENCES,
             seed: int = 0, overwrite: bool = False) -> Dict[str, int]:
  """Writes the database and word counts into `cache_dir`.

  A client's number of sentences is
  n = min(max_sentences_per_client, floor(min_sentences_per_client (1 + P)))
  with P ~ Lomax(1.3) (numpy's `pareto`): n >= min_sentences_per_client,
  median about 1.70 and mean about 4.33 times it before the cap. The
  arguments are recorded in `<cache_dir>/generation.json`.

  Returns:
    Number of sentences per split.
  """
  checks.check_int(num_train_clients, 'num_train_clients', minimum=1)
  checks.check_int(min_sentences_per_client, 'min_sentences_per_client',
                   minimum=1)
  checks.check_int(max_sentences_per_client, 'max_sentences_per_client',
                   minimum=min_sentences_per_client)
  checks.check_int(num_heldout_clients, 'num_heldout_clients', minimum=1)
  checks.check_int(num_test_clients, 'num_test_clients', minimum=1)
  checks.check_int(num_words, 'num_words', minimum=50)
  params = dict(num_train_clients=num_train_clients,
                num_heldout_clients=num_heldout_clients,
                num_test_clients=num_test_clients, num_words=num_words,
                num_topics=num_topics,
                max_sentences_per_client=max_sentences_per_client,
                min_sentences_per_client=min_sentences_per_client, seed=seed)
  os.makedirs(cache_dir, exist_ok=True)
  path = stackoverflow.database_path(cache_dir)
  if os.path.exists(path) and not overwrite:
    raise FileExistsError(f'{path} exists; pass overwrite=True to replace.')
  rng = np.random.default_rng(seed)
  lang = _Language(rng, num_words, num_topics)
  word_counts = np.zeros(num_words, dtype=np.int64)
  _remove_temporaries(cache_dir)
  fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=_TMP_SUFFIX)
  os.close(fd)
  os.remove(tmp)
  con = sqlite3.connect(tmp)
  try:
    stackoverflow.create_tables(con)
    counts = _write_clients(
        con, lang, rng, (('train', num_train_clients),
                         ('heldout', num_heldout_clients),
                         ('test', num_test_clients)),
        (min_sentences_per_client, max_sentences_per_client), word_counts)
    stackoverflow.index_tables(con)
    con.commit()
  finally:
    con.close()
  # The word counts and the record first, the database last: a database
  # never exists without them (a kill leaves only temporaries, removed by
  # the next generation).
  _write_word_counts(cache_dir, lang.words, word_counts)
  record = os.path.join(cache_dir, PARAMS_NAME)
  with open(record + _TMP_SUFFIX, 'w') as f:
    f.write(strict_json.dumps(params, indent=1, sort_keys=True))
  os.replace(record + _TMP_SUFFIX, record)
  os.replace(tmp, path)
  return counts


def _write_clients(con, lang, rng, splits, sentences_range,
                   word_counts: np.ndarray) -> Dict[str, int]:
  """Every split's clients into the database; sentences per split.

  Client ids count up across the splits (00000001, ...); a client has
  n = min(high, floor(low (1 + P))) sentences, P ~ Lomax(_PARETO_SHAPE),
  for sentences_range = (low, high).
  """
  low, high = sentences_range
  counts, client_number = {}, 0
  for split, num_clients in splits:
    total, train_ids = 0, []
    for _ in range(num_clients):
      client_number += 1
      cid = f'{client_number:08d}'
      client = lang.client(rng)
      n = int(min(high, np.floor((rng.pareto(_PARETO_SHAPE) + 1.0) * low)))
      rows = _client_rows(lang, rng, client, n, split, cid,
                          train_ids if split == 'train' else None)
      con.executemany('INSERT INTO examples VALUES (?, ?, ?)', rows)
      con.execute('INSERT INTO client_metadata VALUES (?, ?, ?)',
                  (cid, split, n))
      total += n
    counts[split] = total
    if train_ids:
      word_counts += np.bincount(np.concatenate(train_ids),
                                 minlength=len(word_counts))
  return counts


def _client_rows(lang, rng, client, n: int, split: str, cid: str,
                 train_ids: Optional[List[np.ndarray]]):
  """The (split, client id, serialized example) rows of one client's n
  sentences; a train sentence's word ids are appended to `train_ids`."""
  rows = []
  for k in range(n):
    ids = lang.sentence(rng, client)
    if train_ids is not None:
      train_ids.append(np.asarray(ids, np.int64))
    tokens = ' '.join(lang.words[i] for i in ids)
    topic = client['topics'][0]
    tags = '|'.join(lang.tags[3 * topic + j] for j in range(1 + k % 2))
    kind = 'question' if k % 3 == 0 else 'answer'
    title = ' '.join(tokens.split()[:5]) if kind == 'question' else ''
    date = f'2010-{1 + k % 12:02d}-{1 + k % 28:02d} 00:00:00.000 UTC'
    rows.append((split, cid, stackoverflow.serialize_example(
        tokens=tokens, title=title, tags=tags, kind=kind,
        score=int(rng.integers(-2, 20)), date=date)))
  return rows


def _write_word_counts(cache_dir: str, words, word_counts: np.ndarray):
  """The word counts file, most frequent first (ties in word order)."""
  order = np.argsort(-word_counts, kind='stable')
  counts_path = os.path.join(cache_dir, stackoverflow.WORD_COUNTS_NAME)
  with open(counts_path + _TMP_SUFFIX, 'w', encoding='utf-8') as f:
    for i in order:
      if word_counts[i] > 0:
        f.write(f'{words[i]} {word_counts[i]}\n')
  os.replace(counts_path + _TMP_SUFFIX, counts_path)


_TMP_SUFFIX = '.tmp'


def _remove_temporaries(cache_dir: str):
  """Deletes the temporary files of a generation that was killed."""
  for name in os.listdir(cache_dir):
    if name.endswith(_TMP_SUFFIX):
      os.remove(os.path.join(cache_dir, name))


def ensure_generated(cache_dir: str, *, seed: int = 0,
                     **kwargs) -> Dict[str, Any]:
  """Generates the database unless `cache_dir` already has one.

  An existing database is reused only if it was generated with the same
  arguments, as recorded in generation.json (a database made before that
  record existed has the default sentences per client); otherwise
  ValueError, so that a changed setting never silently reuses the old data.
  Returns the generation settings (generation.json).
  """
  record = os.path.join(cache_dir, PARAMS_NAME)
  if not os.path.isfile(stackoverflow.database_path(cache_dir)):
    generate(cache_dir, seed=seed, **kwargs)
    with open(record) as f:
      return json.load(f)
  found = {'min_sentences_per_client': DEFAULT_MIN_SENTENCES}
  if os.path.isfile(record):
    with open(record) as f:
      found = json.load(f)
  differ = [f'{k}={v} (the database has {found[k]})'
            for k, v in sorted(dict(kwargs, seed=seed).items())
            if k in found and found[k] != v]
  if differ:
    raise ValueError(
        f'The generated database in {cache_dir} was made with other '
        f'settings: {", ".join(differ)}. Use another directory or delete '
        f'it.')
  return found
