"""Public text for pretraining, read through TensorFlow Datasets, offline.

Two sources (paper Sec. 2.3: the model is pretrained centrally on public
web text before federated fine-tuning):

* Real corpora (`lm1b`, `wiki40b/en`, `c4/en`, ...), read with TFDS from a
  `data_dir` prepared beforehand on a machine with network. Downloads are
  never attempted: a dataset missing from the directory is a clear error
  that says how to prepare it (`tfds build NAME --data_dir=DIR`) and its
  download size where TFDS knows it.
* `dpftrl_public_corpus`, the project's own TFDS builder
  (`PublicCorpus`, registered by importing this module), built offline into
  the data directory on first use. It imitates public web text in the same
  language as the generated StackOverflow-format data
  (`dpftrl_tff.data.synthetic`): the same vocabulary and the same general word
  statistics (the language's bigram chain), but honestly different from the
  federated clients: about a third of the words' successors are redrawn
  (another style), the topics are other vocabulary slices than the
  clients' (other subjects), sentences are longer, there are no client
  habits (openings, favourite words), and no sentence is one of the
  clients' (it comes from its own random stream). Pretraining on it helps
  the way public text helps a keyboard model, without being the same
  distribution.

Every source yields sentences as lower-case strings of words separated by
single spaces (`sentences`), which the fine-tuning task's vocabulary maps to
ids (unknown words to OOV), as for the federated data.
"""

import bisect
import dataclasses
import os
import shutil
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from dpftrl_tff import checks
from dpftrl_tff.data import synthetic

EMBEDDED_NAME = 'dpftrl_public_corpus'


class CorpusError(ValueError):
  """A corpus that cannot be read here (the message says what to do)."""


@dataclasses.dataclass
class PublicCorpusConfig(tfds.core.BuilderConfig):
  """Which generated language the public corpus speaks, and how much.

  Attributes:
    language_seed: the `seed` of `synthetic.generate` whose language (words,
      bigram chain) the corpus shares.
    num_words, num_topics: as given to `synthetic.generate` (its defaults).
    num_sentences: sentences of the train split (validation: 1 / 20 of it).
    corpus_seed: the corpus's own random stream.
  """
  language_seed: int = 0
  num_words: int = 4000
  num_topics: int = 40
  num_sentences: int = 200_000
  corpus_seed: int = 1


def make_config(*, language_seed: int = 0, num_words: int = 4000,
                num_topics: int = 40, num_sentences: int = 200_000,
                corpus_seed: int = 1) -> PublicCorpusConfig:
  """The corpus for a generated language (`synthetic.generate`'s settings)."""
  checks.check_int(language_seed, '--synthetic_seed', minimum=0)
  checks.check_int(num_words, 'num_words', minimum=50)
  checks.check_int(num_topics, 'num_topics', minimum=1)
  checks.check_int(num_sentences, '--public_sentences', minimum=20)
  checks.check_int(corpus_seed, '--public_corpus_seed', minimum=0)
  return PublicCorpusConfig(
      name=(f'lang{language_seed}_w{num_words}_t{num_topics}_'
            f'n{num_sentences}_seed{corpus_seed}'),
      description='Generated public text in the language of the generated '
      'StackOverflow-format data.', language_seed=language_seed,
      num_words=num_words, num_topics=num_topics,
      num_sentences=num_sentences, corpus_seed=corpus_seed)


class _PublicStyle:
  """The public text's generator over a `synthetic._Language`."""

  def __init__(self, lang, rng: np.random.Generator):
    self.lang = lang
    n = len(lang.words)
    zipf = 1.0 / np.arange(1, n + 1)**1.05
    # Another style: a third of the words get other successors.
    self.succ = [list(s) for s in lang.succ]
    for w in np.flatnonzero(rng.random(n) < 1 / 3):
      self.succ[w] = rng.choice(n, size=len(self.succ[w]), replace=False,
                                p=zipf / zipf.sum()).tolist()
    # Other subjects: topic slices drawn anew, of the rarer half of the
    # vocabulary's mid-frequency words.
    per_topic = max(20, n // (2 * lang.num_topics))
    self.topics = [rng.choice(np.arange(n // 10, n), size=per_topic,
                              replace=False).tolist()
                   for _ in range(lang.num_topics)]
    self.topic_cum = synthetic._cumulative(  # pylint: disable=protected-access
        1.0 / np.arange(1, per_topic + 1))

  def sentence(self, rng: np.random.Generator, topic: int) -> str:
    length = int(min(40, 6 + rng.poisson(11)))
    w = int(bisect.bisect(self.lang.unigram_cum, rng.random()))
    out = [w]
    while len(out) < length:
      if rng.random() < 0.8:
        w = self.succ[w][bisect.bisect(self.lang.succ_cum[w], rng.random())]
      else:
        w = self.topics[topic][bisect.bisect(self.topic_cum, rng.random())]
      out.append(int(w))
    return ' '.join(self.lang.words[i] for i in out)


def generate_sentences(config: PublicCorpusConfig, split: str):
  """Yields (key, sentence) of a split, deterministically from the config."""
  lang = synthetic.language(seed=config.language_seed,
                            num_words=config.num_words,
                            num_topics=config.num_topics)
  style = _PublicStyle(lang, np.random.default_rng(
      [config.corpus_seed, 7]))
  count = (config.num_sentences if split == 'train' else
           max(1, config.num_sentences // 20))
  rng = np.random.default_rng([config.corpus_seed, 0 if split == 'train'
                               else 1])
  topic = 0
  for i in range(count):
    if i % 20 == 0:   # A document: 20 sentences on one subject.
      topic = int(rng.integers(lang.num_topics))
    yield f'{split}_{i}', style.sentence(rng, topic)


class PublicCorpus(tfds.core.GeneratorBasedBuilder):
  """The project's generated public corpus (see the module docstring)."""

  VERSION = tfds.core.Version('1.0.0')
  BUILDER_CONFIGS = [make_config()]

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self, description=__doc__,
        features=tfds.features.FeaturesDict({'text': tfds.features.Text()}))

  def _split_generators(self, dl_manager):
    del dl_manager   # Nothing to download.
    return {'train': self._generate_examples('train'),
            'validation': self._generate_examples('validation')}

  def _generate_examples(self, split):
    for key, text in generate_sentences(self.builder_config, split):
      yield key, {'text': text}


def embedded_builder(data_dir: str, **config):
  """The embedded corpus's builder, prepared in `data_dir` (offline).

  `config`: the arguments of `make_config`. A configuration equal to a
  registered one is passed by name (TFDS refuses a custom configuration
  named like a registered one).
  """
  made = make_config(**config)
  registered = {c.name: c for c in PublicCorpus.BUILDER_CONFIGS}
  if made.name in registered:
    if registered[made.name] != made:
      raise CorpusError(f'Embedded corpus configuration {made.name} differs '
                        f'from the registered one of that name.')
    made = made.name
  builder = PublicCorpus(data_dir=data_dir, config=made)
  if not builder.is_prepared():
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        try_download_gcs=False))
  return builder


PUBLIC_TEXT_NAME = 'dpftrl_public_text'
PUBLIC_TEXT_FILE = 'public_text.txt'
VALIDATION_EVERY = 20


class PublicText(tfds.core.GeneratorBasedBuilder):
  """Real public text, tokenized, one sentence a line (`build_git_corpus`).

  The source is `public_text.txt` in a corpus directory (written by
  `git_corpus.write_public_text` from a repository's documentation); it is
  prepared into `<corpus directory>/tfds` and read from there through TFDS
  (`--tfds_name=dpftrl_public_text --tfds_data_dir=<corpus>/tfds`). Every
  20th sentence goes to the validation split. The text is already
  tokenized as the federated data is, so `sentences` passes it unchanged.
  """

  name = PUBLIC_TEXT_NAME
  VERSION = tfds.core.Version('1.0.0')

  def __init__(self, *, source_file: Optional[str] = None, **kwargs):
    self._source_file = source_file
    super().__init__(**kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self, description=self.__doc__,
        features=tfds.features.FeaturesDict({'text': tfds.features.Text()}))

  def _split_generators(self, dl_manager):
    del dl_manager   # Nothing to download.
    if not self._source_file or not os.path.isfile(self._source_file):
      raise CorpusError(f'{PUBLIC_TEXT_NAME} needs its source file '
                        f'{self._source_file or PUBLIC_TEXT_FILE}; build '
                        f'the corpus with experiments.build_git_corpus '
                        f'--docs_dir or --docs_jsonl.')
    return {'train': self._generate_examples(False),
            'validation': self._generate_examples(True)}

  def _generate_examples(self, validation: bool):
    with open(self._source_file, encoding='utf-8') as f:
      for i, line in enumerate(f):
        if (i % VALIDATION_EVERY == VALIDATION_EVERY - 1) == validation:
          yield i, {'text': line.rstrip('\n')}


def has_public_text(corpus_dir: str) -> bool:
  """Whether a corpus directory holds public text (its source file, or its
  TFDS preparation)."""
  return (os.path.isfile(os.path.join(corpus_dir, PUBLIC_TEXT_FILE)) or
          os.path.isdir(os.path.join(corpus_dir, 'tfds', PUBLIC_TEXT_NAME)))


def public_text_builder(corpus_dir: str, *, prepare: bool = False):
  """The public text of a corpus directory, prepared in `<corpus_dir>/tfds`.

  With `prepare`, an existing preparation is replaced (the corpus was just
  rebuilt); otherwise it is prepared only when missing.
  """
  data_dir = os.path.join(corpus_dir, 'tfds')
  if prepare and os.path.isdir(os.path.join(data_dir, PUBLIC_TEXT_NAME)):
    shutil.rmtree(os.path.join(data_dir, PUBLIC_TEXT_NAME))
  source = os.path.join(corpus_dir, PUBLIC_TEXT_FILE)
  builder = PublicText(data_dir=data_dir, source_file=source)
  if not builder.is_prepared():
    tfds.disable_progress_bar()
    if not os.path.isfile(source):
      raise CorpusError(
          f'{corpus_dir} has no public text ({PUBLIC_TEXT_FILE}): build it '
          f'with experiments.build_git_corpus --docs_dir=... or '
          f'--docs_jsonl=..., or pass --tfds_data_dir=<corpus>/tfds.')
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        try_download_gcs=False))
  return builder


def real_builder(name: str, data_dir: Optional[str]):
  """A prepared TFDS dataset, or a CorpusError saying how to prepare it."""
  if not data_dir:
    raise CorpusError(f'--tfds_name={name} needs --tfds_data_dir, the '
                      f'directory where it was prepared (this code never '
                      f'downloads).')
  try:
    builder = tfds.builder(name, data_dir=data_dir, try_gcs=False)
  except Exception as e:  # pylint: disable=broad-except
    first = (str(e).strip().splitlines() or [''])[0]
    if len(first) > 160:
      first = first[:160] + '...'
    raise CorpusError(f'--tfds_name={name}: TFDS does not know this dataset '
                      f'({type(e).__name__}: {first}); give a dataset name '
                      f'such as lm1b, wiki40b/en, c4/en, '
                      f'{EMBEDDED_NAME} or {PUBLIC_TEXT_NAME}.') from None
  if not builder.is_prepared():
    size = getattr(builder.info, 'download_size', 0) or 0
    size_text = (f' (download about {size / 2**30:.1f} GiB)' if size else '')
    raise CorpusError(
        f'--tfds_name={name} is not prepared in --tfds_data_dir={data_dir}'
        f'{size_text}. On a machine with network run '
        f'`tfds build {name.split("/")[0]} --data_dir={data_dir}` (or '
        f'`tfds.load("{name}", data_dir="{data_dir}", download=True)` in '
        f'Python), then copy the directory here.')
  return builder


def sentences(builder, split: str = 'train') -> tf.data.Dataset:
  """The split's text as sentences: lower case, words separated by spaces.

  Documents (c4, wiki40b) are split at sentence ends and paragraph markers
  (wiki40b's _START_ARTICLE_ etc. removed); punctuation other than the
  apostrophe becomes a space; sentences of fewer than 3 words are dropped.
  """
  if split not in builder.info.splits:
    raise CorpusError(f'{builder.name} has no split {split!r}; it has '
                      f'{", ".join(builder.info.splits)}.')
  dataset = builder.as_dataset(split=split, shuffle_files=False)
  if builder.name == PUBLIC_TEXT_NAME:   # Already tokenized sentences.
    return dataset.map(lambda example: example['text'])

  def split_text(example):
    text = tf.strings.lower(example['text'])
    text = tf.strings.regex_replace(text, r'_start_\w+_|_newline_', ' . ')
    parts = tf.strings.split(tf.strings.regex_replace(text, r'[.!?\n]+',
                                                      '\n'), '\n')
    parts = tf.strings.regex_replace(parts, r"[^a-z0-9']+", ' ')
    return tf.data.Dataset.from_tensor_slices(
        tf.strings.strip(tf.strings.regex_replace(parts, ' +', ' ')))

  return dataset.flat_map(split_text).filter(
      lambda s: tf.size(tf.strings.split(s)) >= 3)


def corpus_description(builder) -> dict:
  return dict(name=builder.info.full_name, data_dir=os.path.abspath(
      builder.data_dir))
