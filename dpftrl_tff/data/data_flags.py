"""The StackOverflow data flags shared by the training and pretraining binaries.

Real data: TFF's StackOverflow database in --cache_dir, opened through
`tff.simulation.datasets.stackoverflow.load_data(cache_dir)`, never
downloaded. Without --cache_dir a small StackOverflow-format database is
generated (deterministically, in seconds) under the output root and used,
and the binary says so.
"""

import dataclasses
import os
from typing import Any, List, Optional

from dpftrl_tff import settings
# TensorFlow (with `stackoverflow`) loads here, when a training binary is
# imported, before absl's app.run: imported after it, TensorFlow 2.14 runs
# an absl after-init callback mid-import (distribute/combinations.py lists
# the devices) and Keras's RNN layer then fails to build ("'SymbolicTensor'
# object cannot be interpreted as an integer") unless TF2_BEHAVIOR=1 is
# in the environment (docs/performance.md, stop 63; tests/run/training_test.py's
# BinaryTest fails if it loads later).
from dpftrl_tff.data import stackoverflow
from dpftrl_tff.data import synthetic


@dataclasses.dataclass(frozen=True)
class DataSettings:
  """Where the data comes from, declared once; a binary defines these flags
  with `define_flags()` (nothing is defined at import)."""
  cache_dir: Optional[str] = settings.setting(
      None, 'Directory holding stackoverflow.sqlite (TFF format). Unset: '
      'generate a small StackOverflow-format database under '
      '--root_output_dir.')
  word_counts_path: Optional[str] = settings.setting(
      None, 'Vocabulary file, one "word count" per line, most frequent '
      'first. Default: <cache_dir>/stackoverflow.word_count if present, else '
      'counted from the train split.')
  synthetic_train_clients: int = settings.setting(
      3000, 'Training clients of the generated database (no --cache_dir).')
  synthetic_seed: int = settings.setting(0,
                                         'Seed of the generated database.')
  synthetic_min_sentences_per_client: int = settings.setting(
      synthetic.DEFAULT_MIN_SENTENCES,
      'Scale of the generated clients\' heavy-tailed sizes: every client has '
      'at least this many sentences, about 4.3 times it on average. 4: small '
      f'clients (quick); {synthetic.STACKOVERFLOW_MIN_SENTENCES}: like the '
      'real train split (users with fewer than 100 sentences removed, mean '
      '397).')


def define_flags():
  """Defines the data flags (in the calling binary); their holders."""
  from dpftrl_tff.run import config as config_lib  # pylint: disable=g-import-not-at-top
  return config_lib.define_flags(config_class=DataSettings)


def from_flags(holders) -> DataSettings:
  return DataSettings(**{name: h.value for name, h in holders.items()})


@dataclasses.dataclass
class StackOverflowData:
  train: Any
  heldout: Any
  vocab: List[str]
  description: dict
  cache_dir: str
  generated: Optional[dict]


def synthetic_dir_name(data_settings: DataSettings) -> str:
  """synthetic_stackoverflow, suffixed with the non-default settings."""
  defaults = DataSettings()
  name = 'synthetic_stackoverflow'
  for field, suffix in (('synthetic_min_sentences_per_client', 'min'),
                        ('synthetic_train_clients', 'clients'),
                        ('synthetic_seed', 'seed')):
    value = getattr(data_settings, field)
    if value != getattr(defaults, field):
      name += f'_{suffix}{value}'
  return name


def load(data_settings: DataSettings, root_output_dir: str, vocab_size: int,
         print_fn=print) -> StackOverflowData:
  """The splits, vocabulary and data identity the settings select."""
  cache_dir = data_settings.cache_dir
  word_counts = data_settings.word_counts_path
  generated = None
  if cache_dir is None:
    cache_dir = os.path.join(root_output_dir,
                             synthetic_dir_name(data_settings))
    print_fn(f'No --cache_dir given: using the generated StackOverflow-format '
             f'database in {cache_dir} (not the real StackOverflow data).')
    generated = synthetic.ensure_generated(
        cache_dir, seed=data_settings.synthetic_seed,
        num_train_clients=data_settings.synthetic_train_clients,
        min_sentences_per_client=(
            data_settings.synthetic_min_sentences_per_client))
  train_data, heldout_data, _ = stackoverflow.load_stackoverflow(cache_dir)
  vocab = stackoverflow.load_vocab(cache_dir, vocab_size, train_data, word_counts)
  if len(vocab) < vocab_size:
    source = (f'--word_counts_path={word_counts} has' if word_counts
              else 'the data has')
    print_fn(f'Note: {source} only {len(vocab)} distinct words; '
             f'--vocab_size={vocab_size} keeps ids for all of them.')
  description = stackoverflow.describe(
      cache_dir, vocab, num_train_clients=len(train_data.client_ids),
      word_counts_path=word_counts, generated=generated)
  return StackOverflowData(train=train_data, heldout=heldout_data, vocab=vocab,
                           description=description, cache_dir=cache_dir,
                           generated=generated)
