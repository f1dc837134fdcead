r"""Trains the CIFG next-word model on StackOverflow with DP-FTRL in TFF.

Real data: download and decompress TFF's StackOverflow database into a
directory (README) and pass it as --cache_dir; it is opened through
`tff.simulation.datasets.stackoverflow.load_data(cache_dir)`, never
downloaded. Without --cache_dir a small StackOverflow-format database is
generated (deterministically, in seconds) and used, and the run says so.

  python -m experiments.run_stackoverflow --flagfile=configs/demo.flags
"""

import os
import sys

from absl import app
from absl import flags
from absl import logging

from dpftrl_tff import runtime

runtime.install()

# pylint: disable=g-import-not-at-top
from dpftrl_tff import data
from dpftrl_tff import synthetic
from dpftrl_tff import training
from dpftrl_tff.aggregators import dp_ftrl
# pylint: enable=g-import-not-at-top

_DEFAULTS = training.TrainConfig()

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
# Training.
_ROUNDS = flags.DEFINE_integer('total_rounds', _DEFAULTS.total_rounds,
                               'Number of training rounds T.')
_CLIENTS = flags.DEFINE_integer(
    'clients_per_round', _DEFAULTS.clients_per_round,
    'Clients per round: the report goal m (DP-FTRL divides the noisy sum '
    'by it).')
_CLIENT_LR = flags.DEFINE_float('client_lr', _DEFAULTS.client_lr,
                                'Client SGD learning rate eta_c.')
_SERVER_LR = flags.DEFINE_float('server_lr', _DEFAULTS.server_lr,
                                'Server learning rate eta_s.')
_MOMENTUM = flags.DEFINE_float('server_momentum', _DEFAULTS.server_momentum,
                               'Server momentum beta.')
_BATCH = flags.DEFINE_integer('client_batch_size', _DEFAULTS.client_batch_size,
                              'Client batch size.')
_EPOCHS = flags.DEFINE_integer('client_epochs_per_round',
                               _DEFAULTS.client_epochs_per_round,
                               'Local epochs per round.')
_MAX_ELEMENTS = flags.DEFINE_integer(
    'max_elements_per_client', _DEFAULTS.max_elements_per_client,
    'Sentences used per client and round.')
_SEQ_LEN = flags.DEFINE_integer('sequence_length', _DEFAULTS.sequence_length,
                                'Words per sentence (then BOS/EOS).')
# Model.
_VOCAB = flags.DEFINE_integer('vocab_size', _DEFAULTS.vocab_size,
                              'Vocabulary words V (ids add pad/OOV/BOS/EOS).')
_LATENT = flags.DEFINE_integer('latent_size', _DEFAULTS.latent_size,
                               'CIFG units.')
_EMBEDDING = flags.DEFINE_integer('embedding_size', _DEFAULTS.embedding_size,
                                  'Embedding and projection size.')
_SHARED = flags.DEFINE_bool('shared_embedding', _DEFAULTS.shared_embedding,
                            'Tie input and output embeddings.')
# DP.
_AGGREGATOR = flags.DEFINE_enum(
    'aggregator', _DEFAULTS.aggregator, list(dp_ftrl.AGGREGATORS),
    'none: plain FedAvg mean; dp_ftrl: fixed clip + tree-aggregation noise; '
    'dp_ftrl_adaptive: Algorithm 1, adaptive clip through tree restarts.')
_NOISE = flags.DEFINE_float('noise_multiplier', _DEFAULTS.noise_multiplier,
                            'Noise multiplier z (node noise std z * C).')
_CLIP = flags.DEFINE_float('clip_norm', _DEFAULTS.clip_norm,
                           'l2 clip norm C of client updates.')
_INITIAL_CLIP = flags.DEFINE_float(
    'initial_clip_norm', _DEFAULTS.initial_clip_norm,
    'dp_ftrl_adaptive: initial clip norm C^0.')
_QUANTILE = flags.DEFINE_float(
    'target_unclipped_quantile', _DEFAULTS.target_unclipped_quantile,
    'dp_ftrl_adaptive: target quantile gamma of unclipped updates.')
_CLIP_LR = flags.DEFINE_float('clip_learning_rate',
                              _DEFAULTS.clip_learning_rate,
                              'dp_ftrl_adaptive: clip learning rate eta_gamma.')
_SIGMA_B = flags.DEFINE_float(
    'clipped_count_stddev', None,
    'dp_ftrl_adaptive: noise std sigma_b of the clipped counts; default '
    'clients_per_round / 20.')
_WARMUP = flags.DEFINE_integer(
    'restart_warmup', _DEFAULTS.restart_warmup,
    'dp_ftrl_adaptive: first tree restart (new clip) at this round.')
_FREQUENCY = flags.DEFINE_integer(
    'restart_frequency', _DEFAULTS.restart_frequency,
    'dp_ftrl_adaptive: then a restart every this many rounds.')
_SECAGG = flags.DEFINE_bool(
    'secagg', False,
    'SecAgg-style discretization of client updates (Algorithm 2) with '
    'aggregator none or dp_ftrl; DP noise is calibrated to C_inflated.')
_SECAGG_SCALE = flags.DEFINE_float('secagg_scale', _DEFAULTS.secagg_scale,
                                   'SecAgg scale s.')
_SECAGG_DEBUG = flags.DEFINE_bool(
    'secagg_debug', False,
    'Also record the l2 distance between the decoded and the true clipped '
    'sum (simulation only).')
_NOISE_SEED = flags.DEFINE_integer(
    'noise_seed', None,
    'Fixes the DP noise (tests only: no privacy). Unset: unpredictable.')
_SEED = flags.DEFINE_integer(
    'seed', None, 'Seed of model init and client sampling. Unset: random, '
    'recorded in hparams.json.')
# Evaluation and checkpoints.
_ROUNDS_PER_EVAL = flags.DEFINE_integer('rounds_per_eval',
                                        _DEFAULTS.rounds_per_eval,
                                        'Evaluate every this many rounds.')
_NUM_EVAL = flags.DEFINE_integer(
    'num_eval_examples', _DEFAULTS.num_eval_examples,
    'Sentences of the held-out split used for evaluation.')
_ROUNDS_PER_CKPT = flags.DEFINE_integer('rounds_per_checkpoint',
                                        _DEFAULTS.rounds_per_checkpoint,
                                        'Checkpoint every this many rounds.')
_DEBUG = flags.DEFINE_bool(
    'debug_measurements', True,
    'Record client update norm statistics (simulation diagnostics).')
_STOP_AFTER = flags.DEFINE_integer(
    'stop_after_round', None,
    'Stop after this many rounds as if killed (testing resumption).')


def config_from_flags() -> training.TrainConfig:
  return training.TrainConfig(
      total_rounds=_ROUNDS.value, clients_per_round=_CLIENTS.value,
      client_lr=_CLIENT_LR.value, server_lr=_SERVER_LR.value,
      server_momentum=_MOMENTUM.value, client_batch_size=_BATCH.value,
      client_epochs_per_round=_EPOCHS.value,
      max_elements_per_client=_MAX_ELEMENTS.value,
      sequence_length=_SEQ_LEN.value, vocab_size=_VOCAB.value,
      latent_size=_LATENT.value, embedding_size=_EMBEDDING.value,
      shared_embedding=_SHARED.value, aggregator=_AGGREGATOR.value,
      noise_multiplier=_NOISE.value, clip_norm=_CLIP.value,
      noise_seed=_NOISE_SEED.value, seed=_SEED.value,
      initial_clip_norm=_INITIAL_CLIP.value,
      target_unclipped_quantile=_QUANTILE.value,
      clip_learning_rate=_CLIP_LR.value,
      clipped_count_stddev=_SIGMA_B.value,
      restart_warmup=_WARMUP.value, restart_frequency=_FREQUENCY.value,
      secagg=_SECAGG.value, secagg_scale=_SECAGG_SCALE.value,
      secagg_debug=_SECAGG_DEBUG.value,
      rounds_per_eval=_ROUNDS_PER_EVAL.value,
      num_eval_examples=_NUM_EVAL.value,
      rounds_per_checkpoint=_ROUNDS_PER_CKPT.value,
      debug_measurements=_DEBUG.value)


def _synthetic_dir_name() -> str:
  """synthetic_stackoverflow, suffixed with the non-default settings."""
  name = 'synthetic_stackoverflow'
  for flag, suffix in ((_SYNTH_MIN, 'min'), (_SYNTH_CLIENTS, 'clients'),
                       (_SYNTH_SEED, 'seed')):
    if flag.value != flag.default:
      name += f'_{suffix}{flag.value}'
  return name


def run() -> dict:
  config = config_from_flags()
  config.validate()
  cache_dir = _CACHE_DIR.value
  if cache_dir is None:
    cache_dir = os.path.join(_ROOT.value, _synthetic_dir_name())
    print(f'No --cache_dir given: using the generated StackOverflow-format '
          f'database in {cache_dir} (not the real StackOverflow data).')
    synthetic.ensure_generated(
        cache_dir, seed=_SYNTH_SEED.value,
        num_train_clients=_SYNTH_CLIENTS.value,
        min_sentences_per_client=_SYNTH_MIN.value)
    source = 'synthetic'
  else:
    source = 'stackoverflow'
  train_data, heldout_data, _ = data.load_stackoverflow(cache_dir)
  vocab = data.load_vocab(cache_dir, config.vocab_size, train_data,
                          _WORD_COUNTS.value)
  if len(vocab) < config.vocab_size:
    print(f'Note: the data has only {len(vocab)} distinct words; '
          f'--vocab_size={config.vocab_size} keeps ids for all of them.')
  output_dir = os.path.join(_ROOT.value, _NAME.value)
  description = dict(source=source, cache_dir=os.path.abspath(cache_dir),
                     num_train_clients=len(train_data.client_ids),
                     vocab_words=len(vocab))
  print(f'Training {config.aggregator} on {len(train_data.client_ids)} '
        f'clients, {config.clients_per_round} per round, '
        f'{config.total_rounds} rounds; output in {output_dir}')
  summary = training.train(config, train_data=train_data,
                           eval_data=heldout_data, vocab=vocab,
                           output_dir=output_dir,
                           data_description=description,
                           stop_after_round=_STOP_AFTER.value)
  final = summary['final_eval']
  if final:
    print(f'Final eval in-vocab accuracy: '
          f'{final["in_vocab_accuracy"]:.4f} (loss {final["loss"]:.4f}) '
          f'after {summary["rounds"]} rounds; unigram baseline (always the '
          f'most frequent word) {summary["unigram_baseline_accuracy"]:.4f}')
  privacy = summary['privacy']
  if privacy is None:
    print('Privacy: none (--aggregator=none or --noise_multiplier=0).')
  else:
    min_sep_text = (str(privacy['observed_min_separation'])
                    if privacy['observed_min_separation'] >= 0 else
                    'none: no client took part twice')
    print(f'Privacy spent: rho-zCDP {privacy["zcdp"]:.4g}, epsilon '
          f'{privacy["epsilon"]:.3f} at delta {privacy["delta"]:g} '
          f'(z={privacy["noise_multiplier"]:g}, T={privacy["rounds"]}, '
          f'{len(privacy["restart_rounds"])} tree restarts, '
          f'observed MaxP={privacy["observed_max_participation"]}, '
          f'MinS={min_sep_text})')
  return summary


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  try:
    run()
  except (ValueError, data.DataError, FileExistsError) as e:
    logging.debug('Refused input', exc_info=True)
    print(f'error: {e}', file=sys.stderr)
    return 2
  finally:
    runtime.shutdown_workers()
  return 0


if __name__ == '__main__':
  app.run(main)
