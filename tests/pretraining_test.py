"""Tests of public pretraining: the TFDS corpora, pretraining, fine-tuning."""

import csv
import json
import os
import tempfile

from absl.testing import absltest
import numpy as np
import tensorflow_datasets as tfds

from dpftrl_tff import pretrained
from dpftrl_tff import pretraining
from dpftrl_tff.data import public_corpus
from dpftrl_tff.data import stackoverflow
from dpftrl_tff.run import learning_process
from dpftrl_tff.run import training
from tests import fixtures


class TinyWebText(tfds.core.GeneratorBasedBuilder):
  """A small real-corpus-format dataset (documents with a "text" feature)."""

  VERSION = tfds.core.Version('1.0.0')

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        features=tfds.features.FeaturesDict({'text': tfds.features.Text()}))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {'train': self._generate_examples()}

  def _generate_examples(self):
    yield 0, {'text': '_START_ARTICLE_\nThe Cat, sat. On the MAT!\n'
                      '_START_PARAGRAPH_\nIt\'s a dog: too short? no'}
    yield 1, {'text': 'one two three four. five six'}


def _cache():
  return fixtures.generated_cache(210, 400, 1)


def _vocab():
  return stackoverflow.load_vocab(_cache(), 100)


def _config(**overrides):
  values = dict(vocab_size=100, latent_size=8, embedding_size=4, seed=3,
                total_rounds=2, clients_per_round=3, rounds_per_eval=1,
                num_eval_examples=20, max_elements_per_client=4,
                aggregator='none')
  values.update(overrides)
  return training.TrainConfig(**values)


def _language_settings():
  with open(os.path.join(_cache(), 'generation.json')) as f:
    record = json.load(f)
  return dict(language_seed=record['seed'], num_words=record['num_words'],
              num_topics=record['num_topics'])


class CorpusTest(absltest.TestCase):

  def test_embedded_corpus_is_deterministic_and_not_the_clients_text(self):
    config = public_corpus.make_config(num_sentences=200,
                                       **_language_settings())
    first = list(public_corpus.generate_sentences(config, 'train'))
    self.assertEqual(first, list(public_corpus.generate_sentences(
        config, 'train')))
    other = public_corpus.make_config(num_sentences=200, corpus_seed=2,
                                      **_language_settings())
    self.assertNotEqual(first, list(public_corpus.generate_sentences(
        other, 'train')))
    # The same language (its words are the fine-tuning vocabulary's) ...
    vocab = set(_vocab())
    words = [w for _, s in first for w in s.split()]
    self.assertGreater(np.mean([w in vocab for w in words]), 0.5)
    # ... but none of the federated clients' sentences.
    train, _, _ = stackoverflow.load_stackoverflow(_cache())
    client_sentences = {
        x['tokens'].numpy().decode()
        for x in train.create_tf_dataset_from_all_clients(seed=0)}
    self.assertEmpty({s for _, s in first} & client_sentences)

  def test_embedded_builder_prepares_offline_and_reads_back(self):
    builder = public_corpus.embedded_builder(
        tempfile.mkdtemp(), num_sentences=40, **_language_settings())
    self.assertTrue(builder.is_prepared())
    got = [s.numpy().decode() for s in public_corpus.sentences(builder)]
    expected = sorted(s for _, s in public_corpus.generate_sentences(
        builder.builder_config, 'train'))
    self.assertEqual(sorted(got), expected)

  def test_missing_real_corpus_says_how_to_prepare_it(self):
    with self.assertRaisesRegex(
        public_corpus.CorpusError,
        r'--tfds_name=lm1b is not prepared in --tfds_data_dir=.*'
        r'`tfds build lm1b --data_dir='):
      public_corpus.real_builder('lm1b', tempfile.mkdtemp())
    with self.assertRaisesRegex(public_corpus.CorpusError,
                                'needs --tfds_data_dir'):
      public_corpus.real_builder('lm1b', None)

  def test_real_corpus_path_reads_a_prepared_directory(self):
    data_dir = tempfile.mkdtemp()
    TinyWebText(data_dir=data_dir).download_and_prepare()
    builder = public_corpus.real_builder('tiny_web_text', data_dir)
    got = sorted(s.numpy().decode()
                 for s in public_corpus.sentences(builder))
    # Split at . ! ? and paragraph markers; other punctuation is a space;
    # fewer than 3 words ("no", "five six") dropped.
    self.assertEqual(got, ['it\'s a dog too short', 'on the mat',
                           'one two three four', 'the cat sat'])


def _steps(output_dir):
  with open(os.path.join(output_dir, pretraining.METRICS_FILE)) as f:
    return [int(r['step']) for r in csv.DictReader(f)]


class PretrainTest(absltest.TestCase):

  def _pretrain(self, out, steps=6, stop=None):
    builder = public_corpus.embedded_builder(
        os.path.join(os.path.dirname(out), 'tfds'), num_sentences=400,
        **_language_settings())
    return pretraining.pretrain(
        _config(), pretraining.PretrainConfig(
            steps=steps, batch_size=8, steps_per_checkpoint=3,
            steps_per_eval=3, shuffle_buffer_size=100),
        sentences=public_corpus.sentences(builder), vocab=_vocab(),
        output_dir=out, corpus=public_corpus.corpus_description(builder),
        vocab_source=_cache(), build_model=learning_process.build_keras_model,
        eval_dataset=stackoverflow.build_eval_dataset(
            stackoverflow.load_stackoverflow(_cache())[1], _vocab(), num_examples=20),
        stop_after_step=stop, print_fn=lambda s: None)

  def test_resumed_pretraining_equals_uninterrupted_and_fine_tuning_starts_there(
      self):
    root = tempfile.mkdtemp()
    full = os.path.join(root, 'full')
    metadata = self._pretrain(full)
    self.assertEqual(metadata['steps'], 6)
    self.assertEqual(metadata['vocab_sha256'],
                     pretrained.vocab_sha256(_vocab()))
    killed = os.path.join(root, 'killed')
    self.assertIsNone(self._pretrain(killed, stop=3))
    self.assertEqual(_steps(killed), [1, 2, 3])
    self._pretrain(killed)
    # The loss history survives the kill: one file, every step once.
    self.assertEqual(_steps(killed), [1, 2, 3, 4, 5, 6])
    for a, b in zip(pretrained.load_weights(full),
                    pretrained.load_weights(killed)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # Another pretraining in the same directory is refused.
    with self.assertRaisesRegex(ValueError, 'holds another pretraining'):
      self._pretrain(full, steps=7)

    # Fine-tuning starts exactly from the pretrained weights.
    config = _config(initial_weights=full)
    identity = pretrained.check_compatible(full, vocab=_vocab(),
                                           config=config)
    self.assertEqual(identity['steps'], 6)
    process = learning_process.build_learning_process(config)
    model = learning_process.build_keras_model(config)
    pretrained.assign(model, pretrained.load_weights(full), full)
    state = learning_process.initial_state(process, config, model)
    for got, want in zip(process.get_model_weights(state).trainable,
                         pretrained.load_weights(full)):
      np.testing.assert_array_equal(got, want)
    fresh = learning_process.build_keras_model(config)
    self.assertFalse(np.array_equal(pretrained.load_weights(full)[0],
                                    fresh.trainable_weights[0].numpy()))

    # Mismatches are refused with both sides named.
    with self.assertRaisesRegex(
        pretrained.PretrainedError,
        r'--latent_size: pretrained 8, this run 16'):
      pretrained.check_compatible(full, vocab=_vocab(),
                                  config=_config(latent_size=16))
    with self.assertRaisesRegex(pretrained.PretrainedError,
                                r'vocabulary: pretrained on 100 words .* '
                                r'this run 99 words'):
      pretrained.check_compatible(full, vocab=_vocab()[:99], config=config)
    with self.assertRaisesRegex(pretrained.PretrainedError,
                                'not a pretraining output'):
      pretrained.check_compatible(root, vocab=_vocab(), config=config)


class PretrainBinaryTest(absltest.TestCase):

  def test_missing_corpus_is_one_clear_line(self):
    proc = fixtures.run_module(
        'experiments.pretrain', '--tfds_name=lm1b',
        f'--tfds_data_dir={tempfile.mkdtemp()}', f'--cache_dir={_cache()}',
        '--vocab_size=100', f'--output_dir={tempfile.mkdtemp()}/p')
    self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
    self.assertIn('tfds build lm1b', proc.stderr)
    self.assertNotIn('Traceback', proc.stderr)

  def test_bad_steps_are_refused_before_any_data_is_read(self):
    proc = fixtures.run_module(
        'experiments.pretrain', '--steps=0', '--cache_dir=/nonexistent',
        f'--output_dir={tempfile.mkdtemp()}/p')
    self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
    # The steps' line, not the missing database's (read after).
    self.assertIn('--steps must be an integer >= 1, got 0', proc.stderr)
    self.assertNotIn('Traceback', proc.stderr)


if __name__ == '__main__':
  absltest.main()
