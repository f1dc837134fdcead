r"""Trains the CIFG next-word model on StackOverflow with DP-FTRL in TFF.

Real data: download and decompress TFF's StackOverflow database into a
directory (README) and pass it as --cache_dir; it is opened through
`tff.simulation.datasets.stackoverflow.load_data(cache_dir)`, never
downloaded. Without --cache_dir a small StackOverflow-format database is
generated (deterministically, in seconds) and used, and the run says so.

The training flags are declared once, in `dpftrl_tff.config.TrainConfig`.

  python -m experiments.run_stackoverflow --flagfile=configs/demo.flags
"""

import os

from dpftrl_tff import runtime

runtime.install()   # Before TensorFlow is imported: quiet C++ logs.

# pylint: disable=g-import-not-at-top
from absl import app
from absl import flags
from absl import logging

from dpftrl_tff import config as config_lib
from dpftrl_tff import console
from dpftrl_tff import data
from dpftrl_tff import synthetic
# pylint: enable=g-import-not-at-top

# Data and output.
_CACHE_DIR = flags.DEFINE_string(
    'cache_dir', None,
    'Directory holding stackoverflow.sqlite (TFF format). Unset: generate a '
    'small StackOverflow-format database under --root_output_dir.')
_WORD_COUNTS = flags.DEFINE_string(
    'word_counts_path', None,
    'Vocabulary file, one "word count" per line, most frequent first. '
    'Default: <cache_dir>/stackoverflow.word_count if present, else counted '
    'from the train split.')
_ROOT = flags.DEFINE_string('root_output_dir', 'runs',
                            'Root of all run directories.')
_NAME = flags.DEFINE_string('experiment_name', 'dpftrl_stackoverflow',
                            'Run directory name under --root_output_dir; an '
                            'existing run of the same flags is resumed.')
_SYNTH_CLIENTS = flags.DEFINE_integer(
    'synthetic_train_clients', 3000,
    'Training clients of the generated database (no --cache_dir).')
_SYNTH_SEED = flags.DEFINE_integer('synthetic_seed', 0,
                                   'Seed of the generated database.')
_SYNTH_MIN = flags.DEFINE_integer(
    'synthetic_min_sentences_per_client', synthetic.DEFAULT_MIN_SENTENCES,
    'Scale of the generated clients\' heavy-tailed sizes: every client has '
    'at least this many sentences, about 4.3 times it on average. 4: small '
    f'clients (quick); {synthetic.STACKOVERFLOW_MIN_SENTENCES}: like the real '
    'train split (users with fewer than 100 sentences removed, mean 397).')
_STOP_AFTER = flags.DEFINE_integer(
    'stop_after_round', None,
    'Stop after this many rounds as if killed (testing resumption).')
# Training: one flag per TrainConfig field.
_CONFIG = config_lib.define_flags()
flags.adopt_module_key_flags(config_lib)   # Listed by --helpshort too.


def _synthetic_dir_name() -> str:
  """synthetic_stackoverflow, suffixed with the non-default settings."""
  name = 'synthetic_stackoverflow'
  for flag, suffix in ((_SYNTH_MIN, 'min'), (_SYNTH_CLIENTS, 'clients'),
                       (_SYNTH_SEED, 'seed')):
    if flag.value != flag.default:
      name += f'_{suffix}{flag.value}'
  return name


def run() -> dict:
  config = config_lib.from_flags(_CONFIG)
  config.validate()
  if config.noise_seed is not None:
    console.warn(f'--noise_seed={config.noise_seed} fixes the DP noise: it '
                 f'is predictable and the run gives no privacy (tests and '
                 f'debugging only).')
  cache_dir = _CACHE_DIR.value
  generated = None
  if cache_dir is None:
    cache_dir = os.path.join(_ROOT.value, _synthetic_dir_name())
    print(f'No --cache_dir given: using the generated StackOverflow-format '
          f'database in {cache_dir} (not the real StackOverflow data).')
    generated = synthetic.ensure_generated(
        cache_dir, seed=_SYNTH_SEED.value,
        num_train_clients=_SYNTH_CLIENTS.value,
        min_sentences_per_client=_SYNTH_MIN.value)
  train_data, heldout_data, _ = data.load_stackoverflow(cache_dir)
  vocab = data.load_vocab(cache_dir, config.vocab_size, train_data,
                          _WORD_COUNTS.value)
  if len(vocab) < config.vocab_size:
    print(f'Note: the data has only {len(vocab)} distinct words; '
          f'--vocab_size={config.vocab_size} keeps ids for all of them.')
  output_dir = os.path.join(_ROOT.value, _NAME.value)
  description = data.describe(
      cache_dir, vocab, num_train_clients=len(train_data.client_ids),
      word_counts_path=_WORD_COUNTS.value, generated=generated)
  print(f'Training {config.aggregator} on {len(train_data.client_ids)} '
        f'clients, {config.clients_per_round} per round, '
        f'{config.total_rounds} rounds; output in {output_dir}')
  from dpftrl_tff import tff_compat  # pylint: disable=g-import-not-at-top
  from dpftrl_tff import training  # pylint: disable=g-import-not-at-top
  tff_compat.install()
  summary = training.train(config, train_data=train_data,
                           eval_data=heldout_data, vocab=vocab,
                           output_dir=output_dir,
                           data_description=description,
                           stop_after_round=_STOP_AFTER.value)
  print(console.summary_text(summary))
  return summary


def main(argv):
  if len(argv) > 1:
    console.error(f'unexpected arguments {argv[1:]}: every setting is a '
                  f'--flag (see --helpshort).')
    return 2
  console.quiet_libraries()
  try:
    run()
  except KeyboardInterrupt:
    console.error('interrupted; the run keeps its last checkpoint (re-run '
                  'the same command to resume).')
    return 130
  except (ValueError, OSError) as e:
    # ValueError: bad flags or data (data.DataError,
    # run_directory.RunDirectoryError); OSError: unwritable output and the
    # like. One line, no traceback (--verbosity=1 logs it).
    logging.debug('Refused', exc_info=True)
    console.error(str(e) if isinstance(e, ValueError)
                  else console.describe_os_error(e))
    return 2
  finally:
    runtime.shutdown_workers()
  return 0


if __name__ == '__main__':
  app.run(main)
