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
from typing import Dict, List, Optional, Sequence, Tuple

from google.protobuf import message
import numpy as np
import tensorflow as tf

from dpftrl_tff import checks
from dpftrl_tff import pretrained

DATABASE_NAME = 'stackoverflow.sqlite'
WORD_COUNTS_NAME = 'stackoverflow.word_count'
SPLITS = ('train', 'heldout', 'test')
REQUIRED_TABLES = {
    'examples': {'split_name', 'client_id', 'serialized_example_proto'},
    'client_metadata': {'client_id', 'split_name', 'num_examples'},
}


class DataError(ValueError):
  """The data on disk is missing or not in StackOverflow format."""


def create_tables(con: sqlite3.Connection):
  """Creates TFF's StackOverflow tables (examples, client_metadata)."""
  con.execute('CREATE TABLE examples (split_name TEXT NOT NULL, '
              'client_id TEXT NOT NULL, '
              'serialized_example_proto BLOB NOT NULL);')
  con.execute('CREATE TABLE client_metadata (client_id TEXT NOT NULL, '
              'split_name TEXT NOT NULL, num_examples INTEGER NOT NULL);')


def index_tables(con: sqlite3.Connection):
  """The index TFF's per-client queries use."""
  con.execute('CREATE INDEX examples_client ON examples '
              '(client_id, split_name);')


def serialize_example(*, tokens: str, date: str, kind: str, title: str = '',
                      tags: str = '', score: int = 0) -> bytes:
  """A StackOverflow `tf.train.Example` with the six features TFF parses.

  Written directly in the protocol-buffer wire format, with the map's
  entries in key order: the bytes equal
  `proto_example(...).SerializeToString(deterministic=True)`
  (tests/data/data_test.py), five to seven times faster than building the
  message (generating data and building a corpus write one per sentence).
  An Example is field 1 (Features), whose field 1 is the map: an entry per
  feature, each a message of key (field 1) and Feature (field 2), the
  Feature a BytesList (field 1) or a packed Int64List (field 3).
  """
  return _length_delimited(_TAG_1, b''.join((
      _map_entry(_KEY_CREATION_DATE, _bytes_feature(date)),
      _map_entry(_KEY_SCORE, _int64_feature(score)),
      _map_entry(_KEY_TAGS, _bytes_feature(tags)),
      _map_entry(_KEY_TITLE, _bytes_feature(title)),
      _map_entry(_KEY_TOKENS, _bytes_feature(tokens)),
      _map_entry(_KEY_TYPE, _bytes_feature(kind)))))


def proto_example(*, tokens: str, date: str, kind: str, title: str = '',
                  tags: str = '', score: int = 0) -> tf.train.Example:
  """The message `serialize_example` writes, built with protobuf."""
  def text(value):
    return tf.train.Feature(bytes_list=tf.train.BytesList(
        value=[value.encode('utf-8')]))
  feature = {
      'creation_date': text(date),
      'score': tf.train.Feature(int64_list=tf.train.Int64List(value=[score])),
      'tags': text(tags),
      'title': text(title),
      'tokens': text(tokens),
      'type': text(kind),
  }
  return tf.train.Example(features=tf.train.Features(feature=feature))


def _varint(value: int) -> bytes:
  """Base-128 varint; a negative int64 as its 64-bit two's complement."""
  if value < 0:
    value += 1 << 64
  out = bytearray()
  while value > 0x7f:
    out.append((value & 0x7f) | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


_ONE_BYTE = [bytes((n,)) for n in range(128)]
# Field numbers 1, 2, 3 with wire type 2 (length-delimited).
_TAG_1, _TAG_2, _TAG_3 = b'\x0a', b'\x12', b'\x1a'


def _length_delimited(tag: bytes, payload: bytes) -> bytes:
  n = len(payload)
  return tag + (_ONE_BYTE[n] if n < 128 else _varint(n)) + payload


def _key(name: str) -> bytes:
  return _length_delimited(_TAG_1, name.encode('ascii'))


_KEY_CREATION_DATE, _KEY_SCORE, _KEY_TAGS, _KEY_TITLE, _KEY_TOKENS, \
    _KEY_TYPE = map(_key, ('creation_date', 'score', 'tags', 'title',
                           'tokens', 'type'))


def _bytes_feature(value: str) -> bytes:
  """A Feature's bytes_list (field 1) of one value (field 1)."""
  return _length_delimited(
      _TAG_1, _length_delimited(_TAG_1, value.encode('utf-8')))


def _int64_feature(value: int) -> bytes:
  """A Feature's int64_list (field 3) of one value, packed (field 1)."""
  if not -2**63 <= value < 2**63:
    raise ValueError(f'score {value} is not an int64')
  return _length_delimited(_TAG_3, _length_delimited(_TAG_1, _varint(value)))


def _map_entry(key: bytes, feature: bytes) -> bytes:
  """A map entry (field 1 of Features): the key, then the Feature."""
  return _length_delimited(_TAG_1, key + _length_delimited(_TAG_2, feature))


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
      samples = [r[0] for r in conn.execute(
          'SELECT serialized_example_proto FROM examples LIMIT 20')]
    finally:
      conn.close()
  except sqlite3.DatabaseError as e:
    raise DataError(f'--cache_dir={cache_dir}: {DATABASE_NAME} is not a '
                    f'readable SQLite database ({e}).') from None
  missing = [s for s in SPLITS if s not in splits]
  if missing:
    raise DataError(f'--cache_dir={cache_dir}: {DATABASE_NAME} has no '
                    f'clients in split(s) {missing}.')
  for blob in samples:
    _check_example(blob, cache_dir)
  return path


def num_clients(cache_dir: str, split: str = 'train') -> int:
  """Clients of `split` in the database of `cache_dir` (checked first with
  `check_database`), without loading it through TFF."""
  conn = sqlite3.connect(f'file:{database_path(cache_dir)}?mode=ro', uri=True)
  try:
    return conn.execute('SELECT COUNT(DISTINCT client_id) FROM '
                        'client_metadata WHERE split_name = ?',
                        (split,)).fetchone()[0]
  finally:
    conn.close()


def check_clients_per_round(clients_per_round: int, available: int, *,
                            flag: str, data: str):
  """Raises DataError naming `flag` when a round takes more clients than
  the training split's `available` (of `data`, in words): a binary that
  starts many runs refuses it before the first."""
  if available < clients_per_round:
    raise DataError(f'{flag}={clients_per_round}: {data} has {available} '
                    f'training clients; use at most that many a round.')


def _check_example(blob, cache_dir: str):
  """Refuses a stored example that is not a StackOverflow tf.train.Example."""
  try:
    example = tf.train.Example.FromString(bytes(blob))
  except (message.DecodeError, TypeError) as e:
    raise DataError(f'--cache_dir={cache_dir}: {DATABASE_NAME} holds '
                    f'examples that are not tf.train.Example protos ({e}).'
                    ) from None
  feature = example.features.feature
  if 'tokens' not in feature or not feature['tokens'].bytes_list.value:
    raise DataError(f'--cache_dir={cache_dir}: {DATABASE_NAME} holds '
                    f'examples without a "tokens" text feature; it is not '
                    f'a StackOverflow database.')


def serialized_examples_fn(client_data):
  """client id -> dataset of serialized tf.Examples for `client_data`, or None.

  For the ClientData `load_stackoverflow` returns (TFF 0.87's
  `SqlClientData` with TFF's StackOverflow parsing, `PreprocessClientData`):
  the SQL ClientData's own dataset function, before the parsing `map`, so
  that `build_preprocess_fn(...).from_serialized` can parse in the graph.
  None for any other ClientData.
  """
  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff
  from tensorflow_federated.python.simulation.datasets import stackoverflow as tff_stackoverflow
  # pylint: enable=g-import-not-at-top
  underlying = getattr(client_data, '_underlying_client_data', None)
  parse = getattr(client_data, '_preprocess_fn', None)
  if (isinstance(underlying, tff.simulation.datasets.SqlClientData) and
      parse is getattr(tff_stackoverflow, '_add_proto_parsing', None)):
    return underlying.serializable_dataset_fn
  return None


def load_stackoverflow(cache_dir: str):
  """(train, heldout, test) ClientData through TFF's loader, offline.

  The database path is made absolute: it is written into the clients'
  dataset computations, which remote workers (`dpftrl_tff.remote`) run in
  their own working directory.
  """
  # TFF (heavy; its import starts an execution context) only to load or compose.
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  check_database(cache_dir)
  return tff.simulation.datasets.stackoverflow.load_data(
      cache_dir=os.path.abspath(cache_dir))


def describe(cache_dir: str, vocab: Sequence[str], *, num_train_clients: int,
             word_counts_path: Optional[str] = None,
             generated: Optional[dict] = None) -> dict:
  """What identifies a run's data (hparams.json "data"; resume compares it).

  The database (absolute path and size), the vocabulary (its words'
  SHA-256, so another word-count file or vocabulary size is another run)
  and, for generated data, the generation settings.
  """
  path = database_path(cache_dir)
  return dict(
      source='synthetic' if generated is not None else 'stackoverflow',
      database=os.path.abspath(path), database_bytes=os.path.getsize(path),
      num_train_clients=int(num_train_clients), vocab_words=len(vocab),
      vocab_sha256=pretrained.vocab_sha256(vocab),
      word_counts_path=(os.path.abspath(word_counts_path)
                        if word_counts_path else None),
      generation=generated)


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


_HASH_BUCKETS = 2**63 - 1


def _word_hashes(words):
  """63-bit FarmHash fingerprints of strings (stable across platforms)."""
  return tf.strings.to_hash_bucket_fast(words, _HASH_BUCKETS)


class VocabLookup:
  """Word -> id (0..V-1, V for out of vocabulary) without a TF resource.

  `tf.lookup` tables are resources: every client dataset that TFF
  instantiates in its worker builds one (V string inserts) and the worker
  never frees it, so a run leaked about 1 MB per client per round at
  V = 10000 (the worker grew by ~50 MB a round at 50 clients). Here the
  vocabulary is a sorted constant of 63-bit word fingerprints: a word's id
  is found by binary search (`tf.searchsorted`) and an exact fingerprint
  match, with no state. Distinct vocabulary words with equal fingerprints
  are refused at construction; an out-of-vocabulary word is mistaken for a
  vocabulary word only if its 63-bit fingerprint equals one of the V
  (probability about V / 2^63 per word).
  """

  def __init__(self, vocab: Sequence[str]):
    vocab = list(vocab)
    if len(set(vocab)) != len(vocab):
      raise DataError('The vocabulary has repeated words.')
    self.vocab_size = len(vocab)
    hashes = _word_hashes(tf.constant(vocab, tf.string)).numpy() if vocab else (
        np.zeros([0], np.int64))
    order = np.argsort(hashes, kind='stable')
    sorted_hashes = hashes[order]
    if np.any(sorted_hashes[1:] == sorted_hashes[:-1]):
      raise DataError('Two vocabulary words share a 63-bit fingerprint; '
                      'remove one of them from the word-count file.')
    # A sentinel above every fingerprint keeps searchsorted in range.
    self._sorted_hashes = np.append(sorted_hashes, np.int64(2**63 - 1))
    self._ids = np.append(order.astype(np.int64), np.int64(self.vocab_size))

  def lookup(self, words: tf.Tensor) -> tf.Tensor:
    """int64 ids of `words` (same shape, rank 1): 0..V-1, or V (OOV)."""
    keys = tf.constant(self._sorted_hashes)
    hashes = _word_hashes(words)
    pos = tf.searchsorted(keys, hashes, side='left')
    found = tf.equal(tf.gather(keys, pos), hashes)
    return tf.where(found, tf.gather(tf.constant(self._ids), pos),
                    tf.constant(self.vocab_size, tf.int64))


def build_to_ids_fn(vocab: Sequence[str], sequence_length: int,
                    batch_to_ids=None):
  """Maps an example's `tokens` to sequence_length + 1 ids (with BOS/EOS),
  padded with 0: one row of `build_batch_to_ids_fn` (or of `batch_to_ids`,
  one already built for the same vocabulary and length).

  The work is one `tf.function` traced once: `Dataset.map` traces the
  function it is given for every dataset, and with the body inline that
  was ~0.1 s of Python per client per round (more than a small model's
  training); the per-dataset trace is now only a call.
  """
  if batch_to_ids is None:
    batch_to_ids = build_batch_to_ids_fn(vocab, sequence_length)

  @tf.function(input_signature=[tf.TensorSpec([], tf.string)],
               autograph=False)
  def tokens_to_ids(tokens):
    return batch_to_ids(tokens[tf.newaxis])[0]

  def to_ids(example):
    return tokens_to_ids(example['tokens'])

  return to_ids


def build_batch_to_ids_fn(vocab: Sequence[str], sequence_length: int):
  """A vector of `tokens` to ids: [n] -> [n, L + 1].

  Each sentence: split on spaces, its first L words, BOS first, EOS after a
  sentence shorter than L, padded with 0 (module docstring). Plain graph ops
  on ragged words: no `tf.function`, no `tf.cond`, so a graph that holds it
  calls no function (see `build_preprocess_fn`).
  """
  vocab_size = len(vocab)
  _, oov, bos, eos = special_ids(vocab_size)
  assert oov == vocab_size + 1
  table = VocabLookup(vocab)

  def tokens_to_ids(tokens):
    words = tf.strings.split(tokens, sep=' ')[:, :sequence_length]
    # Words map to 0..V-1 and OOV to V; shift by one so that 0 is pad,
    # words are 1..V and OOV is V+1.
    ids = words.with_flat_values(table.lookup(words.flat_values) + 1)
    ids = ids.to_tensor(default_value=0, shape=[None, sequence_length])
    ids = tf.concat([tf.fill([tf.shape(ids)[0], 1],
                             tf.constant(bos, tf.int64)), ids], axis=1)
    # EOS right after a sentence shorter than L (where a pad 0 is now).
    lengths = words.row_lengths()
    ends = tf.logical_and(
        tf.equal(tf.range(sequence_length + 1, dtype=tf.int64)[tf.newaxis],
                 lengths[:, tf.newaxis] + 1),
        (lengths < sequence_length)[:, tf.newaxis])
    return tf.where(ends, tf.constant(eos, tf.int64), ids)

  return tokens_to_ids


# More sentences than any client holds: a client's whole (shuffled, capped)
# data is read as one batch (`build_preprocess_fn`).
_WHOLE_CLIENT = 2**31 - 1


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
                        shuffle_buffer_size: int = 0):
  """Returns (dataset, shuffle_seed=None) -> dataset of (x, y) batches [B, L].

  With `shuffle_buffer_size` > 1 and a `shuffle_seed` (int64 scalar), the
  client's examples are shuffled with that buffer before the first
  `max_elements_per_client` are taken (so a large client trains on a
  different subset each round), in the same order for every local epoch.
  """
  sequence_length = checks.check_int(sequence_length, 'sequence_length',
                                     minimum=1)
  batch_size = checks.check_int(batch_size, 'client_batch_size', minimum=1)
  num_epochs = checks.check_int(num_epochs, 'client_epochs_per_round',
                                minimum=1)
  shuffle_buffer_size = checks.check_int(shuffle_buffer_size,
                                         'shuffle_buffer_size', minimum=0)
  batch_to_ids = build_batch_to_ids_fn(vocab, sequence_length)
  to_ids = build_to_ids_fn(vocab, sequence_length, batch_to_ids)

  @tf.function(input_signature=[
      tf.TensorSpec([None, sequence_length + 1], tf.int64)], autograph=False)
  def split(ids):   # Traced once (see build_to_ids_fn).
    return ids[:, :-1], ids[:, 1:]

  def select(dataset, shuffle_seed):
    if shuffle_buffer_size > 1 and shuffle_seed is not None:
      dataset = dataset.shuffle(shuffle_buffer_size, seed=shuffle_seed,
                                reshuffle_each_iteration=False)
    if max_elements_per_client > 0:
      dataset = dataset.take(max_elements_per_client)
    return dataset

  def preprocess(dataset, shuffle_seed=None):
    dataset = select(dataset, shuffle_seed).repeat(num_epochs).map(to_ids)
    dataset = dataset.padded_batch(batch_size,
                                   padded_shapes=[sequence_length + 1])
    return dataset.map(split).with_options(_client_dataset_options())

  def from_serialized(serialized, shuffle_seed=None):
    """`preprocess` of the parsed examples, from the serialized ones.

    The same batches as `preprocess(parse(serialized), seed)` (tested),
    built without a dataset function: the client's selected examples are
    read as one tensor, parsed, tokenized and split in the graph, and the
    dataset returned is slices, repeat and batch. A dataset with `map`
    functions makes TFF's worker instantiate and optimize each function
    again for every client's iterator (about 4 ms a function, five
    functions: a third of the worker's CPU at the git corpus's scale).
    """
    selected = select(serialized, shuffle_seed).batch(_WHOLE_CLIENT)
    # An empty client yields no batch: then the empty one after it.
    blobs = selected.concatenate(tf.data.Dataset.from_tensors(
        tf.zeros([0], tf.string))).take(1).get_single_element()
    tokens = tf.io.parse_example(
        blobs, {'tokens': tf.io.FixedLenFeature([], tf.string)})['tokens']
    ids = batch_to_ids(tokens)
    dataset = tf.data.Dataset.from_tensor_slices((ids[:, :-1], ids[:, 1:]))
    return dataset.repeat(num_epochs).batch(batch_size).with_options(
        _client_dataset_options())

  preprocess.shuffles = shuffle_buffer_size > 1
  preprocess.from_serialized = from_serialized
  return preprocess


_KEY_SEPARATOR = ':'


def client_round_key(round_seed: int, client_id: str) -> str:
  """The string a round sends for one client: '<round seed>:<client id>'.

  `round_seed` is a function of (run seed, round) (see
  `participation.round_seed`); the client's shuffle seed is the 63-bit
  fingerprint of the whole key, a function of (seed, round, client).
  """
  return f'{int(round_seed)}{_KEY_SEPARATOR}{client_id}'


def mark_round_keys(keys: Sequence[str], cohort: Sequence[str],
                    index_of: Dict[str, int], prefix: str) -> List[str]:
  """`keys` with those of the clients in `index_of` marked
  '<prefix><index>|<key>' (the probes' clients; see `round_key_mark`)."""
  return [f'{prefix}{int(index_of[c])}|{key}' if c in index_of else key
          for key, c in zip(keys, cohort)]


def round_key_mark(key, prefix: str, unmarked: int):
  """(is marked, index) tensors of a round key tensor `mark_round_keys`
  may have marked with `prefix`; index `unmarked` when it is not."""
  is_marked = tf.strings.regex_full_match(key, prefix + r'[0-9]+\|.*')
  index = tf.cond(
      is_marked,
      lambda: tf.strings.to_number(tf.strings.regex_replace(
          key, '^' + prefix + r'([0-9]+)\|.*$', r'\1'), tf.int64),
      lambda: tf.constant(unmarked, tf.int64))
  return is_marked, index


def _split_key(key):
  """(client id, shuffle seed) tensors of a `client_round_key` tensor."""
  parts = tf.strings.split(key, sep=_KEY_SEPARATOR, maxsplit=1)
  return parts[1], tf.strings.to_hash_bucket_fast(key, _HASH_BUCKETS)


def build_client_dataset(client_data, preprocess, key: str, mark=None):
  """The preprocessed dataset of a `client_round_key`, built in Python.

  `mark`: (dataset, key tensor) -> dataset, applied last (the canaries'
  `mark_dataset`); as in `build_client_dataset_computation`.
  """
  key = tf.constant(key)
  client_id, seed = _split_key(key)
  dataset = preprocess(
      client_data.create_tf_dataset_for_client(client_id.numpy().decode()),
      seed)
  return dataset if mark is None else mark(dataset, key)


def build_client_dataset_computation(client_data, preprocess, mark=None):
  """client round key -> preprocessed client dataset, as a TFF computation.

  Composed with a learning process
  (`tff.simulation.compose_dataset_computation_with_learning_process`), a
  round takes the cohort's `client_round_key`s and TFF's worker builds every
  client's dataset itself, as TFF's own simulations do. Building the
  datasets in Python instead costs a `Dataset.map` trace and a graph
  serialization per client per round. Returns None when `client_data`
  cannot build a dataset from an id tensor (no `serializable_dataset_fn`);
  then build the datasets in Python (`build_client_dataset`). `mark`:
  (dataset, key tensor) -> dataset, applied last (the canaries' marker).
  """
  # TFF (heavy; its import starts an execution context) only to load or compose.
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  dataset_fn = getattr(client_data, 'serializable_dataset_fn', None)
  if dataset_fn is None:
    return None
  serialized_fn = serialized_examples_fn(client_data)
  from_serialized = getattr(preprocess, 'from_serialized', None)
  if serialized_fn is not None and from_serialized is not None:
    def build(client_id, seed):
      return from_serialized(serialized_fn(client_id), seed)
  else:
    def build(client_id, seed):
      return preprocess(dataset_fn(client_id), seed)

  @tff.tensorflow.computation(np.str_)
  def client_dataset(key):
    client_id, seed = _split_key(key)
    dataset = build(client_id, seed)
    return dataset if mark is None else mark(dataset, key)

  return client_dataset


def build_eval_dataset(client_data, vocab: Sequence[str], *,
                       num_examples: int, sequence_length: int = 20,
                       batch_size: int = 256, per_client: int = 0):
  """The first `num_examples` sentences of a split, centralized, batched.

  Authors in a fixed shuffled order (TFF's `create_tf_dataset_from_all_
  clients` order, seed 0), each giving its first `per_client` sentences (all
  of them if 0): a cap keeps one prolific author from making most of the
  evaluation set, and so most of its accuracy.
  """
  to_ids = build_to_ids_fn(vocab, sequence_length)
  if per_client:
    client_ids = list(client_data.client_ids)
    np.random.RandomState(seed=0).shuffle(client_ids)
    dataset = tf.data.Dataset.from_tensor_slices(client_ids).flat_map(
        lambda client_id: client_data.serializable_dataset_fn(
            client_id).take(per_client))
  else:
    dataset = client_data.create_tf_dataset_from_all_clients(seed=0)
  if num_examples > 0:
    dataset = dataset.take(num_examples)
  return dataset.map(to_ids).padded_batch(
      batch_size, padded_shapes=[sequence_length + 1]).map(
          lambda ids: (ids[:, :-1], ids[:, 1:]))
