"""Tests of preprocessing, the generated database and data validation."""

import collections
import os
import sqlite3
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import hypothesis
from hypothesis import strategies as st
import numpy as np
import tensorflow as tf

from dpftrl_tff.data import stackoverflow
from dpftrl_tff.data import synthetic
from tests import fixtures


def generated_cache():
  return fixtures.generated_cache(420, 800, 3)


def _sentences(split):
  """Every sentence of `split` in the generated database, read with
  sqlite3 and the Example proto (a dataset per client through TFF's loader
  takes about 50 s for them all; the loader has its own tests)."""
  con = sqlite3.connect(stackoverflow.database_path(generated_cache()))
  rows = con.execute('SELECT serialized_example_proto FROM examples WHERE '
                     'split_name = ?', (split,)).fetchall()
  con.close()
  return [tf.train.Example.FromString(proto).features.feature['tokens']
          .bytes_list.value[0].decode() for (proto,) in rows]


class PreprocessTest(parameterized.TestCase):

  def test_ids_bos_eos_oov_and_padding(self):
    vocab = ['a', 'b', 'c']
    pre = stackoverflow.build_preprocess_fn(vocab, sequence_length=4, batch_size=2,
                                   max_elements_per_client=10)
    ds = tf.data.Dataset.from_tensor_slices(
        {'tokens': ['a b zz', 'c c c c c c']})
    (x, y), = list(pre(ds))
    # ids: pad 0, words 1..3, OOV 4, BOS 5, EOS 6.
    np.testing.assert_array_equal(x.numpy(), [[5, 1, 2, 4], [5, 3, 3, 3]])
    np.testing.assert_array_equal(y.numpy(), [[1, 2, 4, 6], [3, 3, 3, 3]])

  @parameterized.named_parameters(('small', 5), ('generated', 2000))
  def test_vocab_lookup_equals_tf_lookup_table(self, vocab_size):
    words = stackoverflow.load_vocab(generated_cache(), 4000)
    vocab = words[:vocab_size]
    queries = words + ['', ' ', 'zz_not_a_word', 'ünïcödé', vocab[0] * 2]
    table = tf.lookup.StaticVocabularyTable(
        tf.lookup.KeyValueTensorInitializer(
            keys=tf.constant(vocab),
            values=tf.range(len(vocab), dtype=tf.int64)),
        num_oov_buckets=1)
    expected = table.lookup(tf.constant(queries)).numpy()
    actual = stackoverflow.VocabLookup(vocab).lookup(tf.constant(queries)).numpy()
    np.testing.assert_array_equal(actual, expected)
    self.assertGreater(int(np.sum(actual == len(vocab))), 4)  # OOV seen.

  def test_vocab_lookup_refuses_repeated_words(self):
    with self.assertRaisesRegex(stackoverflow.DataError, 'repeated'):
      stackoverflow.VocabLookup(['a', 'b', 'a'])

  def test_client_pipeline_has_no_resource_ops(self):
    # A lookup-table resource in a client dataset leaked in TFF's worker
    # (one table per client per round); the pipeline must not have one.
    pre = stackoverflow.build_preprocess_fn(['a', 'b'], sequence_length=4)
    ds = pre(tf.data.Dataset.from_tensor_slices({'tokens': ['a b']}))
    graph = tf.compat.v1.GraphDef.FromString(
        ds._as_serialized_graph().numpy())  # pylint: disable=protected-access
    ops = {n.op for n in graph.node}
    for function in graph.library.function:
      ops.update(n.op for n in function.node_def)
    self.assertIn('StringToHashBucketFast', ops)
    self.assertEmpty({op for op in ops if 'Table' in op or 'Resource' in op})

  def test_max_elements_and_epochs(self):
    pre = stackoverflow.build_preprocess_fn(['a'], sequence_length=3, batch_size=1,
                                   max_elements_per_client=2, num_epochs=3)
    ds = tf.data.Dataset.from_tensor_slices({'tokens': ['a'] * 5})
    self.assertLen(list(pre(ds)), 6)

  def test_word_count_file(self):
    path = os.path.join(tempfile.mkdtemp(), 'wc')
    with open(path, 'w') as f:
      f.write('the 10\nof 5\nto 2\n')
    self.assertEqual(stackoverflow.load_word_counts_file(path, 2), ['the', 'of'])
    with open(path, 'w') as f:
      f.write('the ten\n')
    with self.assertRaisesRegex(stackoverflow.DataError, 'word count'):
      stackoverflow.load_word_counts_file(path, 2)


class EvalDatasetTest(absltest.TestCase):

  def test_at_most_per_client_sentences_from_each_author(self):
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    sizes = dict(prolific=50, short=2, middle=5)
    client_data = tff.simulation.datasets.TestClientData({
        name: collections.OrderedDict(tokens=[
            f'{name} said word{i}' for i in range(n)])
        for name, n in sizes.items()})
    vocab = ['said'] + [f'word{i}' for i in range(50)] + list(sizes)

    def count(**kwargs):
      dataset = stackoverflow.build_eval_dataset(client_data, vocab, num_examples=100,
                                        **kwargs)
      return sum(int(x.shape[0]) for x, _ in dataset)

    self.assertEqual(count(per_client=3), 3 + 2 + 3)
    self.assertEqual(count(per_client=0), 57)   # No cap: every sentence.
    self.assertEqual(count(), 57)


def _serialized(sentences):
  return tf.data.Dataset.from_tensor_slices([
      stackoverflow.serialize_example(tokens=t, date='2020-01-01',
                                      kind='question')
      for t in sentences] or tf.zeros([0], tf.string))


def _parsed(serialized):
  return serialized.map(lambda blob: tf.io.parse_example(
      blob, {'tokens': tf.io.FixedLenFeature([], tf.string)}))


def _batches(dataset):
  return [(x.numpy(), y.numpy()) for x, y in dataset]


class FunctionFreeClientPipelineTest(parameterized.TestCase):
  """`from_serialized` gives `preprocess`'s batches without dataset
  functions (TFF's worker instantiates those for every client)."""

  @parameterized.named_parameters(
      ('plain', dict()),
      ('capped_epochs', dict(max_elements_per_client=3, num_epochs=3,
                             batch_size=2)),
      ('uncapped', dict(max_elements_per_client=0, batch_size=5)),
      ('shuffled', dict(shuffle_buffer_size=100, max_elements_per_client=4)),
      ('long_sentences', dict(sequence_length=2)),
  )
  def test_same_batches_as_the_parsing_pipeline(self, kwargs):
    vocab = ['a', 'b', 'c', 'd']
    sentences = ['a b zz', 'c c c c c c', '', 'd', 'a b', 'b a d c',
                 'zz yy', 'c']
    pre = stackoverflow.build_preprocess_fn(vocab, **dict(
        dict(sequence_length=4, batch_size=3), **kwargs))
    for seed in (None, 7, 123456789):
      expected = _batches(pre(_parsed(_serialized(sentences)), seed))
      actual = _batches(pre.from_serialized(_serialized(sentences), seed))
      self.assertLen(actual, len(expected))
      for (ex, ey), (ax, ay) in zip(expected, actual):
        np.testing.assert_array_equal(ax, ex)
        np.testing.assert_array_equal(ay, ey)

  def test_empty_client(self):
    pre = stackoverflow.build_preprocess_fn(['a'], sequence_length=3)
    ds = pre.from_serialized(_serialized([]))
    self.assertEqual(_batches(ds), [])
    self.assertEqual(ds.element_spec, pre(_parsed(_serialized(['a']))
                                          ).element_spec)

  def test_generated_database_through_tffs_loader(self):
    train, _, _ = stackoverflow.load_stackoverflow(generated_cache())
    serialized_fn = stackoverflow.serialized_examples_fn(train)
    self.assertIsNotNone(serialized_fn)
    vocab = stackoverflow.load_vocab(generated_cache(), 200)
    pre = stackoverflow.build_preprocess_fn(
        vocab, max_elements_per_client=16, batch_size=4,
        shuffle_buffer_size=50)
    for client in train.client_ids[:5]:
      expected = _batches(pre(train.create_tf_dataset_for_client(client), 5))
      actual = _batches(pre.from_serialized(
          serialized_fn(tf.constant(client)), 5))
      self.assertNotEmpty(expected)
      self.assertEqual(len(actual), len(expected))
      for (ex, ey), (ax, ay) in zip(expected, actual):
        np.testing.assert_array_equal(ax, ex)
        np.testing.assert_array_equal(ay, ey)

  def test_other_client_data_has_no_serialized_source(self):
    train, _, _ = stackoverflow.load_stackoverflow(generated_cache())
    self.assertIsNone(stackoverflow.serialized_examples_fn(
        train.preprocess(lambda ds: ds)))
    self.assertIsNone(stackoverflow.serialized_examples_fn(object()))

  def test_client_dataset_computation_calls_no_function(self):
    train, _, _ = stackoverflow.load_stackoverflow(generated_cache())
    vocab = stackoverflow.load_vocab(generated_cache(), 200)
    pre = stackoverflow.build_preprocess_fn(vocab, shuffle_buffer_size=10)
    computation = stackoverflow.build_client_dataset_computation(train, pre)
    graph = tf.compat.v1.GraphDef()
    computation.to_building_block().proto.tensorflow.graph_def.Unpack(graph)
    self.assertEmpty(graph.library.function)
    ops = {n.op for n in graph.node}
    self.assertIn('SqlDataset', ops)
    self.assertNotIn('MapDataset', ops)
    self.assertNotIn('ParallelMapDatasetV2', ops)


class ClientShuffleTest(absltest.TestCase):

  def _first_batch(self, key, buffer_size):
    train, _, _ = stackoverflow.load_stackoverflow(generated_cache())
    vocab = stackoverflow.load_vocab(generated_cache(), 200)
    preprocess = stackoverflow.build_preprocess_fn(
        vocab, max_elements_per_client=4, batch_size=4,
        shuffle_buffer_size=buffer_size)
    x, _ = next(iter(stackoverflow.build_client_dataset(train, preprocess, key)))
    return x.numpy()

  def test_shuffled_by_seed_round_and_client(self):
    train, _, _ = stackoverflow.load_stackoverflow(generated_cache())
    sizes = {c: len(list(train.create_tf_dataset_for_client(c)))
             for c in train.client_ids[:40]}
    client = max(sizes, key=sizes.get)
    self.assertGreater(sizes[client], 8)
    same_a = self._first_batch(stackoverflow.client_round_key(1, client), 1000)
    same_b = self._first_batch(stackoverflow.client_round_key(1, client), 1000)
    np.testing.assert_array_equal(same_a, same_b)   # Reproducible.
    others = [self._first_batch(stackoverflow.client_round_key(r, client), 1000)
              for r in (2, 3, 4)]
    self.assertTrue(any(not np.array_equal(same_a, o) for o in others))
    # Without shuffling, the first sentences whatever the round.
    plain = [self._first_batch(stackoverflow.client_round_key(r, client), 0)
             for r in (1, 2)]
    np.testing.assert_array_equal(plain[0], plain[1])

  def test_round_seed_depends_on_seed_and_round(self):
    from dpftrl_tff import participation  # pylint: disable=g-import-not-at-top
    seeds = {participation.round_seed(s, r) for s in (0, 1) for r in (0, 1)}
    self.assertLen(seeds, 4)
    self.assertEqual(participation.round_seed(3, 9),
                     participation.round_seed(3, 9))
    self.assertLess(max(seeds), 2**63)


class SerializeExampleTest(absltest.TestCase):

  @hypothesis.settings(max_examples=300, deadline=None, derandomize=True)
  @hypothesis.given(tokens=st.text(), date=st.text(max_size=40),
                    kind=st.text(max_size=10), title=st.text(max_size=300),
                    tags=st.text(max_size=20),
                    score=st.integers(-2**63, 2**63 - 1))
  def test_bytes_are_protobufs_deterministic_serialization(
      self, tokens, date, kind, title, tags, score):
    fields = dict(tokens=tokens, date=date, kind=kind, title=title,
                  tags=tags, score=score)
    written = stackoverflow.serialize_example(**fields)
    self.assertEqual(
        written, stackoverflow.proto_example(**fields).SerializeToString(
            deterministic=True))
    self.assertEqual(tf.train.Example.FromString(written),
                     stackoverflow.proto_example(**fields))

  def test_empty_fields_and_long_text_parse_in_tensorflow(self):
    written = stackoverflow.serialize_example(
        tokens='w ' * 5000, date='', kind='answer', score=-1)
    parsed = tf.io.parse_single_example(written, {
        'tokens': tf.io.FixedLenFeature([], tf.string),
        'title': tf.io.FixedLenFeature([], tf.string),
        'score': tf.io.FixedLenFeature([], tf.int64)})
    self.assertEqual(parsed['tokens'].numpy(), b'w ' * 5000)
    self.assertEqual(parsed['title'].numpy(), b'')
    self.assertEqual(parsed['score'].numpy(), -1)

  def test_score_outside_int64_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'int64'):
      stackoverflow.serialize_example(tokens='a', date='', kind='answer',
                                      score=2**63)


class GeneratedDatabaseTest(parameterized.TestCase):

  def test_schema_is_tffs(self):
    path = stackoverflow.check_database(generated_cache())
    con = sqlite3.connect(path)
    cols = [r[1] for r in con.execute('PRAGMA table_info(examples)')]
    self.assertEqual(cols, ['split_name', 'client_id',
                            'serialized_example_proto'])
    cols = [r[1] for r in con.execute('PRAGMA table_info(client_metadata)')]
    self.assertEqual(cols, ['client_id', 'split_name', 'num_examples'])
    counts = dict(con.execute('SELECT split_name, COUNT(*) FROM '
                              'client_metadata GROUP BY split_name'))
    self.assertEqual(counts, {'train': 420, 'heldout': 60, 'test': 60})

  def test_loads_through_tff_with_all_features(self):
    train, heldout, test = stackoverflow.load_stackoverflow(generated_cache())
    self.assertLen(train.client_ids, 420)
    self.assertLen(heldout.client_ids, 60)
    self.assertLen(test.client_ids, 60)
    example = next(iter(train.create_tf_dataset_for_client(
        train.client_ids[0])))
    self.assertEqual(set(example), {'creation_date', 'score', 'tags', 'title',
                                    'tokens', 'type'})
    self.assertIn(example['type'].numpy(), (b'question', b'answer'))

  def test_deterministic_by_seed(self):
    a, b = tempfile.mkdtemp(), tempfile.mkdtemp()
    for d in (a, b):
      synthetic.generate(d, num_train_clients=20, num_heldout_clients=3,
                         num_test_clients=3, num_words=100, seed=5)
    rows = []
    for d in (a, b):
      con = sqlite3.connect(stackoverflow.database_path(d))
      rows.append(con.execute('SELECT * FROM examples').fetchall())
    self.assertEqual(rows[0], rows[1])

  @parameterized.named_parameters(('small', 4), ('stackoverflow_like', 100))
  def test_min_sentences_per_client_is_the_floor(self, minimum):
    d = tempfile.mkdtemp()
    synthetic.generate(d, num_train_clients=30, num_heldout_clients=3,
                       num_test_clients=3, num_words=100, seed=2,
                       min_sentences_per_client=minimum,
                       max_sentences_per_client=50 * minimum)
    con = sqlite3.connect(stackoverflow.database_path(d))
    sizes = dict(con.execute("SELECT client_id, num_examples FROM "
                             "client_metadata WHERE split_name='train'"))
    counted = dict(con.execute("SELECT client_id, COUNT(*) FROM examples "
                               "WHERE split_name='train' GROUP BY client_id"))
    self.assertEqual(sizes, counted)
    self.assertGreaterEqual(min(sizes.values()), minimum)
    # Pareto(1.3) scale `minimum`: median 2^(1/1.3) = 1.70 times it.
    self.assertBetween(np.median(list(sizes.values())) / minimum, 1.2, 2.6)

  def test_size_arguments_are_checked(self):
    with self.assertRaisesRegex(ValueError, 'min_sentences_per_client'):
      synthetic.generate(tempfile.mkdtemp(), min_sentences_per_client=0)
    with self.assertRaisesRegex(ValueError,
                                'max_sentences_per_client must be an '
                                'integer >= 200'):
      synthetic.generate(tempfile.mkdtemp(), min_sentences_per_client=200,
                         max_sentences_per_client=100)

  def test_ensure_generated_reuses_only_the_same_settings(self):
    d = tempfile.mkdtemp()
    small = dict(num_train_clients=10, num_heldout_clients=3,
                 num_test_clients=3, num_words=100)
    made = synthetic.ensure_generated(d, seed=1, **small)
    self.assertEqual(made['seed'], 1)
    mtime = os.path.getmtime(stackoverflow.database_path(d))
    self.assertEqual(synthetic.ensure_generated(d, seed=1, **small), made)
    self.assertEqual(os.path.getmtime(stackoverflow.database_path(d)), mtime)
    with self.assertRaisesRegex(ValueError,
                                r'min_sentences_per_client=100 \(the '
                                r'database has 4\)'):
      synthetic.ensure_generated(d, seed=1, min_sentences_per_client=100,
                                 **small)
    with self.assertRaisesRegex(ValueError, r'seed=2 \(the database has 1'):
      synthetic.ensure_generated(d, seed=2, **small)
    # A database from before generation.json: default sizes assumed.
    os.remove(os.path.join(d, synthetic.PARAMS_NAME))
    self.assertEqual(
        synthetic.ensure_generated(d, seed=1, **small),
        {'min_sentences_per_client': synthetic.DEFAULT_MIN_SENTENCES})
    with self.assertRaisesRegex(ValueError, 'min_sentences_per_client=100'):
      synthetic.ensure_generated(d, seed=1, min_sentences_per_client=100,
                                 **small)

  def test_generation_killed_midway_leaves_no_database(self):
    d = tempfile.mkdtemp()
    with open(os.path.join(d, 'leftover.sqlite.tmp'), 'w') as f:
      f.write('partial')   # What a killed generation leaves.
    synthetic.generate(d, num_train_clients=5, num_heldout_clients=2,
                       num_test_clients=2, num_words=50)
    self.assertEqual([n for n in os.listdir(d) if n.endswith('.tmp')], [])
    self.assertTrue(os.path.isfile(os.path.join(d, stackoverflow.WORD_COUNTS_NAME)))

  def test_heavy_tailed_and_non_iid(self):
    path = stackoverflow.database_path(generated_cache())
    con = sqlite3.connect(path)
    sizes = np.array([n for (n,) in con.execute(
        "SELECT num_examples FROM client_metadata WHERE split_name='train'")])
    self.assertGreater(sizes.max(), 8 * np.median(sizes))   # heavy tail
    train, _, _ = stackoverflow.load_stackoverflow(generated_cache())
    # Non-IID: a client's word distribution is far from the global one.
    global_counts = collections.Counter()
    per_client = []
    for cid in train.client_ids[:60]:
      c = collections.Counter()
      for ex in train.create_tf_dataset_for_client(cid):
        c.update(ex['tokens'].numpy().decode().split())
      per_client.append(c)
      global_counts.update(c)
    total = sum(global_counts.values())

    def tv(c):
      n = sum(c.values())
      words = set(c) | set(global_counts)
      return 0.5 * sum(abs(c[w] / n - global_counts[w] / total)
                       for w in words)
    self.assertGreater(np.median([tv(c) for c in per_client
                                  if sum(c.values()) > 100]), 0.3)

  def test_bigram_structure_beats_unigram(self):
    uni, bi = collections.Counter(), collections.defaultdict(
        collections.Counter)
    for sentence in _sentences('train'):
      words = ['<s>'] + sentence.split()
      uni.update(words[1:])
      for a, b in zip(words[:-1], words[1:]):
        bi[a][b] += 1
    top = uni.most_common(1)[0][0]
    best = {a: following.most_common(1)[0][0] for a, following in bi.items()}
    hits_uni = hits_bi = n = 0
    for sentence in _sentences('heldout'):
      words = ['<s>'] + sentence.split()
      for a, b in zip(words[:-1], words[1:]):
        n += 1
        hits_uni += b == top
        hits_bi += best.get(a) == b
    self.assertGreater(n, 1000)
    self.assertGreater(hits_bi / n, 2.5 * hits_uni / n)

  def test_word_counts_file_written(self):
    vocab = stackoverflow.load_vocab(generated_cache(), 50)
    self.assertLen(vocab, 50)


class DatabaseValidationTest(parameterized.TestCase):

  def test_missing_database(self):
    with self.assertRaisesRegex(stackoverflow.DataError, 'no stackoverflow.sqlite'):
      stackoverflow.check_database(tempfile.mkdtemp())

  def test_missing_table(self):
    d = tempfile.mkdtemp()
    con = sqlite3.connect(stackoverflow.database_path(d))
    con.execute('CREATE TABLE examples (split_name TEXT, client_id TEXT, '
                'serialized_example_proto BLOB)')
    con.commit()
    con.close()
    with self.assertRaisesRegex(stackoverflow.DataError, 'client_metadata'):
      stackoverflow.check_database(d)

  def test_not_sqlite(self):
    d = tempfile.mkdtemp()
    with open(stackoverflow.database_path(d), 'w') as f:
      f.write('not a database' * 100)
    with self.assertRaisesRegex(stackoverflow.DataError, 'not a readable SQLite'):
      stackoverflow.check_database(d)


if __name__ == '__main__':
  absltest.main()
