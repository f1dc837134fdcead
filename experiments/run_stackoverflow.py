r"""Trains the CIFG next-word model on StackOverflow with DP-FTRL in TFF.

Real data: download and decompress TFF's StackOverflow database into a
directory (README) and pass it as --cache_dir; it is opened through
`tff.simulation.datasets.stackoverflow.load_data(cache_dir)`, never
downloaded. Without --cache_dir a small StackOverflow-format database is
generated (deterministically, in seconds) and used, and the run says so.

The training flags are declared once, in `dpftrl_tff.run.config.TrainConfig`.

  python -m experiments.run_stackoverflow --flagfile=configs/demo.flags
"""

import os

from dpftrl_tff import runtime

runtime.install()   # Before TensorFlow is imported: quiet C++ logs.

# pylint: disable=g-import-not-at-top
from absl import flags

from dpftrl_tff import checks
from dpftrl_tff import console
from dpftrl_tff.data import data_flags
from dpftrl_tff.privacy import run_privacy
from dpftrl_tff.run import config as config_lib
# pylint: enable=g-import-not-at-top

# Output.
_ROOT = flags.DEFINE_string('root_output_dir', 'runs',
                            'Root of all run directories.')
_NAME = flags.DEFINE_string('experiment_name', 'dpftrl_stackoverflow',
                            'Run directory name under --root_output_dir; an '
                            'existing run of the same flags is resumed.')
_STOP_AFTER = flags.DEFINE_integer(
    'stop_after_round', None,
    'Stop after this many rounds as if killed (testing resumption).')
# Training: one flag per TrainConfig field.
_CONFIG = config_lib.define_flags()
_DATA = data_flags.define_flags()
flags.adopt_module_key_flags(config_lib)   # Listed by --helpshort too.


def run() -> dict:
  checks.check_name(_NAME.value, '--experiment_name')
  config = config_lib.from_flags(_CONFIG)   # Validated when made.
  for warning in run_privacy.start_warnings(config):
    console.warn(warning)
  so = data_flags.load(data_flags.from_flags(_DATA), _ROOT.value,
                       config.vocab_size)
  train_data, heldout_data, vocab = so.train, so.heldout, so.vocab
  output_dir = os.path.join(_ROOT.value, _NAME.value)
  description = so.description
  print(f'Training {config.aggregator} on {len(train_data.client_ids)} '
        f'clients, {config.clients_per_round} per round, '
        f'{config.total_rounds} rounds; output in {output_dir}')
  # TFF and the rest after the flags are read (TensorFlow itself loads with
  # the data flags, before absl's app.run: see data_flags.py).
  from dpftrl_tff import tff_compat  # pylint: disable=g-import-not-at-top
  from dpftrl_tff.run import training  # pylint: disable=g-import-not-at-top
  tff_compat.install()
  summary = training.train(config, train_data=train_data,
                           eval_data=heldout_data, vocab=vocab,
                           output_dir=output_dir,
                           data_description=description,
                           stop_after_round=_STOP_AFTER.value)
  print(console.summary_text(summary))
  return summary


def main(argv):
  return console.run_main(run, argv, cleanup=runtime.shutdown_workers)


if __name__ == '__main__':
  runtime.run_app(main)
