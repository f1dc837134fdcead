"""StackOverflow next-word prediction data for federated training.

Loading goes through TFF's own loader,
`tff.simulation.datasets.stackoverflow.load_data(cache_dir)`, which opens
`<cache_dir>/stackoverflow.sqlite` when it is there. This module checks the
file and its tables first, so that a missing database is a clear error and
never a 4 GB download at run time.

Preprocessing follows the common StackOverflow next-word setup (Reddi et al.
2020, Kairouz et al. 2021): split `tokens` on spaces, keep the first
`sequence_length` words, map them to ids (0 pad, 1..V words by frequency,
V+1 OOV, V+2 BOS, V+3 EOS), prepend BOS, append EOS when the sentence was
shorter than `sequence_length`, pad to `sequence_length + 1`, and predict
ids[1:] from ids[:-1]. At most `max_elements_per_client` sentences per client,
batches of `batch_size`, `num_epochs` local epochs.
"""

import collections
import os
import sqlite3
from typing import List, Optional, Sequence, Tuple

import tensorflow as tf

from dpftrl_tff import checks

DATABASE_NAME = 'stackoverflow.sqlite'
WORD_COUNTS_NAME = 'stackoverflow.word_count'
SPLITS = ('train', 'heldout', 'test')
REQUIRED_TABLES = {
    'examples': {'split_name', 'client_id', 'serialized_example_proto'},
    'client_metadata': {'client_id', 'split_name', 'num_examples'},
}


class DataError(ValueError):
  """The data on disk is missing or not in StackOverflow format."""


def database_path(cache_dir: str) -> str:
  return os.path.join(cache_dir, DATABASE_NAME)


def check_database(cache_dir: str) -> str:
  """Checks `<cache_dir>/stackoverflow.sqlite` and its schema; returns path."""
  if not cache_dir:
    raise DataError('--cache_dir is empty.')
  path = database_path(cache_dir)
  if not os.path.isfile(path):
    raise DataError(
        f'--cache_dir={cache_dir}: no {DATABASE_NAME} there. Download and '
        f'decompress the StackOverflow database into that directory (see '
        f'README), or omit --cache_dir to generate a small '
        f'StackOverflow-format database.')
  try:
    conn = sqlite3.connect(f'file:{path}?mode=ro', uri=True)
    try:
      for table, columns in REQUIRED_TABLES.items():
        rows = conn.execute(f'PRAGMA table_info({table})').fetchall()
        have = {r[1] for r in rows}
        if not rows:
          raise DataError(f'--cache_dir={cache_dir}: {DATABASE_NAME} has no '
                          f'table "{table}"; it is not a StackOverflow '
                          f'database.')
        if not columns <= have:
          raise DataError(
              f'--cache_dir={cache_dir}: table "{table}" lacks columns '
              f'{sorted(columns - have)}.')
      splits = {r[0] for r in conn.execute(
          'SELECT DISTINCT split_name FROM client_metadata')}
    finally:
      conn.close()
  except sqlite3.DatabaseError as e:
    raise DataError(f'--cache_dir={cache_dir}: {DATABASE_NAME} is not a '
                    f'readable SQLite database ({e}).') from None
  missing = [s for s in SPLITS if s not in splits]
  if missing:
    raise DataError(f'--cache_dir={cache_dir}: {DATABASE_NAME} has no '
                    f'clients in split(s) {missing}.')
  return path


def load_stackoverflow(cache_dir: str):
  """(train, heldout, test) ClientData through TFF's loader, offline."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  check_database(cache_dir)
  return tff.simulation.datasets.stackoverflow.load_data(cache_dir=cache_dir)


def load_word_counts_file(path: str, vocab_size: int) -> List[str]:
  """First `vocab_size` words of a `word count` file (most frequent first)."""
  vocab_size = checks.check_int(vocab_size, 'vocab_size', minimum=1)
  if not os.path.isfile(path):
    raise DataError(f'Word count file {path} does not exist.')
  words = []
  with open(path, encoding='utf-8') as f:
    for line_number, line in enumerate(f, 1):
      parts = line.split()
      if not parts:
        continue
      if len(parts) != 2 or not parts[1].isdigit():
        raise DataError(f'{path}:{line_number}: expected "word count", got '
                        f'{line.strip()!r}.')
      words.append(parts[0])
      if len(words) == vocab_size:
        break
  if not words:
    raise DataError(f'Word count file {path} is empty.')
  return words


def compute_vocab(client_data, vocab_size: int,
                  max_clients: Optional[int] = None) -> List[str]:
  """Most frequent `vocab_size` words of (some clients of) a split."""
  counts = collections.Counter()
  ids = client_data.client_ids
  if max_clients is not None:
    ids = ids[:max_clients]
  for cid in ids:
    for ex in client_data.create_tf_dataset_for_client(cid):
      counts.update(ex['tokens'].numpy().decode('utf-8').split())
  return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
          ][:vocab_size]


def load_vocab(cache_dir: str, vocab_size: int, train_data=None,
               word_counts_path: Optional[str] = None) -> List[str]:
  """Vocabulary from a word-count file, else computed from the train split."""
  path = word_counts_path or os.path.join(cache_dir, WORD_COUNTS_NAME)
  if os.path.isfile(path):
    return load_word_counts_file(path, vocab_size)
  if word_counts_path:
    raise DataError(f'--word_counts_path={word_counts_path} does not exist.')
  if train_data is None:
    raise DataError(f'No word count file at {path} and no train data.')
  return compute_vocab(train_data, vocab_size)


def special_ids(vocab_size: int) -> Tuple[int, int, int, int]:
  """(pad, oov, bos, eos) ids."""
  return 0, vocab_size + 1, vocab_size + 2, vocab_size + 3


def build_to_ids_fn(vocab: Sequence[str], sequence_length: int):
  """Maps an example's `tokens` to sequence_length + 1 ids (with BOS/EOS)."""
  vocab_size = len(vocab)
  _, oov, bos, eos = special_ids(vocab_size)
  table = tf.lookup.StaticVocabularyTable(
      tf.lookup.KeyValueTensorInitializer(
          keys=tf.constant(list(vocab)),
          values=tf.range(vocab_size, dtype=tf.int64)),
      num_oov_buckets=1)

  def to_ids(example):
    words = tf.strings.split(example['tokens'], sep=' ')[:sequence_length]
    # Words map to 0..V-1 and the OOV bucket to V; shift by one so that
    # 0 is pad, words are 1..V and OOV is V+1.
    ids = table.lookup(words) + 1
    ids = tf.concat([[tf.constant(bos, tf.int64)], ids], axis=0)
    ids = tf.cond(
        tf.size(words) < sequence_length,
        lambda: tf.concat([ids, [tf.constant(eos, tf.int64)]], axis=0),
        lambda: ids)
    return ids

  assert oov == vocab_size + 1
  return to_ids


def _client_dataset_options() -> tf.data.Options:
  """tf.data options for a client's (small, single-pass) dataset.

  tf.data rewrites every dataset with Grappler when its iterator is made; in
  a TFF round that is once per client per round, and for a client's few
  batches the rewrite costs more than it saves (it was ~20% of the TFF
  worker's time in a profile). Static graph rewrites and autotuning are off.
  """
  options = tf.data.Options()
  options.experimental_optimization.apply_default_optimizations = False
  options.autotune.enabled = False
  return options


def build_preprocess_fn(vocab: Sequence[str], *, sequence_length: int = 20,
                        max_elements_per_client: int = 256,
                        batch_size: int = 16, num_epochs: int = 1,
                        shuffle_buffer: int = 0):
  """Returns dataset -> dataset of (x, y) int64 batches [B, L]."""
  sequence_length = checks.check_int(sequence_length, 'sequence_length',
                                     minimum=1)
  batch_size = checks.check_int(batch_size, 'client_batch_size', minimum=1)
  num_epochs = checks.check_int(num_epochs, 'client_epochs_per_round',
                                minimum=1)
  to_ids = build_to_ids_fn(vocab, sequence_length)

  def split(ids):
    return ids[:, :-1], ids[:, 1:]

  def preprocess(dataset):
    if max_elements_per_client > 0:
      dataset = dataset.take(max_elements_per_client)
    if shuffle_buffer > 1:
      dataset = dataset.shuffle(shuffle_buffer, seed=0,
                                reshuffle_each_iteration=False)
    dataset = dataset.repeat(num_epochs).map(to_ids)
    dataset = dataset.padded_batch(batch_size,
                                   padded_shapes=[sequence_length + 1])
    return dataset.map(split).with_options(_client_dataset_options())

  return preprocess


def build_eval_dataset(client_data, vocab: Sequence[str], *,
                       num_examples: int, sequence_length: int = 20,
                       batch_size: int = 256):
  """The first `num_examples` sentences of a split, centralized, batched."""
  to_ids = build_to_ids_fn(vocab, sequence_length)
  dataset = client_data.create_tf_dataset_from_all_clients(seed=0)
  if num_examples > 0:
    dataset = dataset.take(num_examples)
  return dataset.map(to_ids).padded_batch(
      batch_size, padded_shapes=[sequence_length + 1]).map(
          lambda ids: (ids[:, :-1], ids[:, 1:]))
