r"""Central pretraining of the CIFG LM on public text (paper Sec. 2.3).

The corpus is read through TensorFlow Datasets, never downloaded:

  # The embedded default: the project's generated public corpus, built
  # offline into <root_output_dir>/tfds on first use.
  python -m experiments.pretrain --steps=2000 --vocab_size=1000 \
      --latent_size=96 --embedding_size=48 --output_dir=runs/pretrained
  # A real corpus prepared beforehand (`tfds build lm1b --data_dir=DIR` on a
  # machine with network), with the real StackOverflow vocabulary.
  python -m experiments.pretrain --tfds_name=lm1b --tfds_data_dir=DIR \
      --cache_dir=~/data/stackoverflow --steps=20000

The vocabulary is the fine-tuning task's (--cache_dir, --word_counts_path,
or the generated StackOverflow-format data under --root_output_dir, the same
flags as experiments.run_stackoverflow); public words outside it are OOV.
The output directory holds pretrained_weights.npz and pretrained.json (the
vocabulary's fingerprint, the model sizes, the corpus, the steps) for
`run_stackoverflow --initial_weights=<output_dir>`; it is a run directory
(checkpoints, resume, refused if it holds another pretraining).
"""

import dataclasses
import os

from dpftrl_tff import runtime

runtime.install()   # Before TensorFlow is imported: quiet C++ logs.

# pylint: disable=g-import-not-at-top
from absl import flags

from dpftrl_tff import console
from dpftrl_tff import pretrained
from dpftrl_tff.data import data_flags
from dpftrl_tff.run import config as config_lib
# pylint: enable=g-import-not-at-top

_ROOT = flags.DEFINE_string(
    'root_output_dir', 'runs', 'Where the generated StackOverflow-format '
    'data (vocabulary) and the embedded corpus live, as for '
    'experiments.run_stackoverflow.')
_OUTPUT = flags.DEFINE_string('output_dir', 'runs/pretrained',
                              'The pretraining run directory.')
_TFDS_NAME = flags.DEFINE_string(
    'tfds_name', 'dpftrl_public_corpus',
    'TFDS dataset with a "text" feature: dpftrl_public_corpus (embedded, '
    'generated offline), dpftrl_public_text (the documentation of a '
    'build_git_corpus directory: <cache_dir>/tfds unless --tfds_data_dir) '
    'or a real corpus such as lm1b, wiki40b/en, c4/en prepared in '
    '--tfds_data_dir.')
_TFDS_DIR = flags.DEFINE_string(
    'tfds_data_dir', None, 'TFDS data directory. Default for the embedded '
    'corpus: <root_output_dir>/tfds; required for a real corpus.')
_TFDS_SPLIT = flags.DEFINE_string('tfds_split', 'train',
                                  'Split of the corpus to pretrain on.')
_PUBLIC_SENTENCES = flags.DEFINE_integer(
    'public_sentences', 200_000,
    'Embedded corpus: sentences of its train split.')
_PUBLIC_SEED = flags.DEFINE_integer('public_corpus_seed', 1,
                                    'Embedded corpus: its random stream.')
_STEPS = flags.DEFINE_integer('steps', 1000, 'Training steps (batches).')
_BATCH = flags.DEFINE_integer('batch_size', 64, 'Sentences per batch.')
_LR = flags.DEFINE_float('learning_rate', 1e-3, 'Adam learning rate.')
_CKPT = flags.DEFINE_integer('steps_per_checkpoint', 200,
                             'Checkpoint every this many steps.')
_EVAL_EVERY = flags.DEFINE_integer(
    'steps_per_eval', 200, 'Evaluate on the fine-tuning task\'s held-out '
    'split every this many steps.')
_EVAL_EXAMPLES = flags.DEFINE_integer(
    'num_eval_examples', 2000, 'Held-out sentences for evaluation.')
_SHUFFLE = flags.DEFINE_integer('shuffle_buffer_size', 10000,
                                'Sentence shuffle buffer.')
_SEED = flags.DEFINE_integer('seed', 0,
                             'Seed of the model init and the shuffling.')
# The model: the fine-tuning run's flags of the same names.
_MODEL = config_lib.define_flags(only=pretrained.MODEL_FIELDS)
# The evaluation's cap per author, declared once in TrainConfig.
_EVAL_PER_AUTHOR = config_lib.define_flags(
    only=['eval_sentences_per_author'])['eval_sentences_per_author']
_DATA = data_flags.define_flags()
flags.adopt_module_key_flags(config_lib)


def run() -> dict:
  # TFF and the rest after the flags are read (TensorFlow itself loads with
  # the data flags, before absl's app.run: see data_flags.py).
  # pylint: disable=g-import-not-at-top
  from dpftrl_tff.data import stackoverflow
  from dpftrl_tff import pretraining
  from dpftrl_tff.data import public_corpus
  from dpftrl_tff.run import learning_process
  # pylint: enable=g-import-not-at-top
  config = dataclasses.replace(
      config_lib.from_flags(_MODEL), seed=_SEED.value,
      eval_sentences_per_author=_EVAL_PER_AUTHOR.value)  # Validated when made.
  # Validated here, before any data is generated or read.
  pretrain_config = pretraining.PretrainConfig(
      steps=_STEPS.value, batch_size=_BATCH.value,
      learning_rate=_LR.value, steps_per_checkpoint=_CKPT.value,
      steps_per_eval=_EVAL_EVERY.value,
      shuffle_buffer_size=_SHUFFLE.value, seed=_SEED.value)
  pretrain_config.validate()
  so = data_flags.load(data_flags.from_flags(_DATA), _ROOT.value,
                       config.vocab_size)
  if _TFDS_NAME.value == public_corpus.EMBEDDED_NAME:
    data_dir = _TFDS_DIR.value or os.path.join(_ROOT.value, 'tfds')
    generated = so.generated or {}
    if so.generated is None:
      print('Note: the embedded public corpus speaks the generated data\'s '
            'language; ' + (
                f'{so.cache_dir} has public text of its own: '
                f'--tfds_name={public_corpus.PUBLIC_TEXT_NAME}.'
                if public_corpus.has_public_text(so.cache_dir) else
                'with real StackOverflow data use a real corpus '
                '(--tfds_name=lm1b, wiki40b/en, c4/en).'))
    builder = public_corpus.embedded_builder(
        data_dir, language_seed=generated.get('seed', 0),
        num_words=generated.get('num_words', 4000),
        num_topics=generated.get('num_topics', 40),
        num_sentences=_PUBLIC_SENTENCES.value,
        corpus_seed=_PUBLIC_SEED.value)
  elif _TFDS_NAME.value == public_corpus.PUBLIC_TEXT_NAME:
    # Real public text of a build_git_corpus directory (its docs).
    corpus_dir = (os.path.dirname(os.path.normpath(_TFDS_DIR.value))
                  if _TFDS_DIR.value else so.cache_dir)
    builder = public_corpus.public_text_builder(corpus_dir)
  else:
    builder = public_corpus.real_builder(_TFDS_NAME.value, _TFDS_DIR.value)
  corpus = dict(public_corpus.corpus_description(builder),
                split=_TFDS_SPLIT.value)
  print(f'Pretraining on {corpus["name"]} ({_TFDS_SPLIT.value}) with the '
        f'vocabulary of {so.cache_dir}; output in {_OUTPUT.value}')
  eval_dataset = stackoverflow.build_eval_dataset(
      so.heldout, so.vocab, num_examples=_EVAL_EXAMPLES.value,
      sequence_length=config.sequence_length,
      per_client=_EVAL_PER_AUTHOR.value)
  metadata = pretraining.pretrain(
      config, pretrain_config,
      sentences=public_corpus.sentences(builder, _TFDS_SPLIT.value),
      vocab=so.vocab, output_dir=_OUTPUT.value, corpus=corpus,
      vocab_source=so.description.get('database'),
      eval_dataset=eval_dataset,
      build_model=learning_process.build_keras_model)
  final = metadata.get('final_eval') or {}
  print(f'Pretrained {metadata["steps"]} steps; held-out in-vocab accuracy '
        f'{100 * final.get("in_vocab_accuracy", float("nan")):.2f}%. '
        f'Fine-tune with --initial_weights={_OUTPUT.value}')
  return metadata


def main(argv):
  return console.run_main(run, argv)


if __name__ == '__main__':
  runtime.run_app(main)
