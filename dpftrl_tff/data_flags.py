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

from absl import flags

from dpftrl_tff import data
from dpftrl_tff import synthetic

CACHE_DIR = flags.DEFINE_string(
    'cache_dir', None,
    'Directory holding stackoverflow.sqlite (TFF format). Unset: generate a '
    'small StackOverflow-format database under --root_output_dir.')
WORD_COUNTS = flags.DEFINE_string(
    'word_counts_path', None,
    'Vocabulary file, one "word count" per line, most frequent first. '
    'Default: <cache_dir>/stackoverflow.word_count if present, else counted '
    'from the train split.')
SYNTH_CLIENTS = flags.DEFINE_integer(
    'synthetic_train_clients', 3000,
    'Training clients of the generated database (no --cache_dir).')
SYNTH_SEED = flags.DEFINE_integer('synthetic_seed', 0,
                                  'Seed of the generated database.')
SYNTH_MIN = flags.DEFINE_integer(
    'synthetic_min_sentences_per_client', synthetic.DEFAULT_MIN_SENTENCES,
    'Scale of the generated clients\' heavy-tailed sizes: every client has '
    'at least this many sentences, about 4.3 times it on average. 4: small '
    f'clients (quick); {synthetic.STACKOVERFLOW_MIN_SENTENCES}: like the real '
    'train split (users with fewer than 100 sentences removed, mean 397).')


@dataclasses.dataclass
class StackOverflowData:
  train: Any
  heldout: Any
  vocab: List[str]
  description: dict
  cache_dir: str
  generated: Optional[dict]


def synthetic_dir_name() -> str:
  """synthetic_stackoverflow, suffixed with the non-default settings."""
  name = 'synthetic_stackoverflow'
  for flag, suffix in ((SYNTH_MIN, 'min'), (SYNTH_CLIENTS, 'clients'),
                       (SYNTH_SEED, 'seed')):
    if flag.value != flag.default:
      name += f'_{suffix}{flag.value}'
  return name


def load(root_output_dir: str, vocab_size: int,
         print_fn=print) -> StackOverflowData:
  """The splits, vocabulary and data identity the flags select."""
  cache_dir = CACHE_DIR.value
  generated = None
  if cache_dir is None:
    cache_dir = os.path.join(root_output_dir, synthetic_dir_name())
    print_fn(f'No --cache_dir given: using the generated StackOverflow-format '
             f'database in {cache_dir} (not the real StackOverflow data).')
    generated = synthetic.ensure_generated(
        cache_dir, seed=SYNTH_SEED.value, num_train_clients=SYNTH_CLIENTS.value,
        min_sentences_per_client=SYNTH_MIN.value)
  train_data, heldout_data, _ = data.load_stackoverflow(cache_dir)
  vocab = data.load_vocab(cache_dir, vocab_size, train_data, WORD_COUNTS.value)
  if len(vocab) < vocab_size:
    print_fn(f'Note: the data has only {len(vocab)} distinct words; '
             f'--vocab_size={vocab_size} keeps ids for all of them.')
  description = data.describe(
      cache_dir, vocab, num_train_clients=len(train_data.client_ids),
      word_counts_path=WORD_COUNTS.value, generated=generated)
  return StackOverflowData(train=train_data, heldout=heldout_data, vocab=vocab,
                           description=description, cache_dir=cache_dir,
                           generated=generated)
