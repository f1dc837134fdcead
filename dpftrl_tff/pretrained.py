"""Pretrained weights: written by `experiments.pretrain`, read by fine-tuning.

A pretraining output directory holds

  pretrained_weights.npz   the model's trainable weights, in the order of
                           `keras_model.trainable_weights`;
  pretrained.json          what they are: the vocabulary (its size and the
                           SHA-256 of its words, the fine-tuning task's), the
                           model sizes, the corpus, the steps and the
                           pretraining hyperparameters.

Fine-tuning (`run_stackoverflow --initial_weights=DIR`) starts exactly from
these weights (paper Sec. 2.3: public pretraining), and refuses weights made
for another vocabulary or model size, naming both sides: a weight matrix of
the right shape but for other words would silently be a wrong start.
"""

import hashlib
import json
import os
from typing import Dict, List, Sequence

import numpy as np

from dpftrl_tff.run import run_directory

WEIGHTS_FILE = 'pretrained_weights.npz'
METADATA_FILE = 'pretrained.json'
MODEL_FIELDS = ('vocab_size', 'latent_size', 'embedding_size',
                'shared_embedding', 'sequence_length')


class PretrainedError(ValueError):
  """Pretrained weights that cannot start this run (message names why)."""


def vocab_sha256(vocab: Sequence[str]) -> str:
  """The SHA-256 of the vocabulary's words (as `data.describe` records)."""
  return hashlib.sha256('\n'.join(vocab).encode()).hexdigest()


def model_sizes(config) -> Dict:
  return {name: getattr(config, name) for name in MODEL_FIELDS}


def file_sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      digest.update(block)
  return digest.hexdigest()


def save(directory: str, weights: Sequence[np.ndarray], metadata: Dict):
  """Writes the weights and the metadata atomically (weights first)."""
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, WEIGHTS_FILE)
  tmp = path + '.tmp'
  with open(tmp, 'wb') as f:
    run_directory.save_npz(f, weights)
  os.replace(tmp, path)
  run_directory.write_json_atomic(
      os.path.join(directory, METADATA_FILE),
      dict(metadata, weights_sha256=file_sha256(path)))


def read_metadata(directory: str, flag: str = '--initial_weights') -> Dict:
  path = os.path.join(directory, METADATA_FILE)
  if not os.path.isfile(path) or not os.path.isfile(
      os.path.join(directory, WEIGHTS_FILE)):
    raise PretrainedError(
        f'{flag}={directory}: not a pretraining output (it needs '
        f'{WEIGHTS_FILE} and {METADATA_FILE}; make one with '
        f'python -m experiments.pretrain).')
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise PretrainedError(f'{flag}={directory}: cannot read {METADATA_FILE}: '
                          f'{e}.') from e


def check_compatible(directory: str, *, vocab: Sequence[str], config,
                     flag: str = '--initial_weights') -> Dict:
  """Refuses weights for another vocabulary or model; returns their identity.

  The identity (path, weights' SHA-256, corpus, steps) goes into the run's
  hparams, so a resumed run refuses other weights under the same path.
  """
  metadata = read_metadata(directory, flag)
  differences = []
  for name, value in model_sizes(config).items():
    theirs = metadata.get('model', {}).get(name)
    if theirs != value:
      differences.append(f'--{name}: pretrained {theirs}, this run {value}')
  if metadata.get('vocab_sha256') != vocab_sha256(vocab):
    differences.append(
        f'vocabulary: pretrained on {metadata.get("vocab_words")} words '
        f'(SHA-256 {str(metadata.get("vocab_sha256"))[:12]}, from '
        f'{metadata.get("vocab_source")}), this run {len(vocab)} words '
        f'(SHA-256 {vocab_sha256(vocab)[:12]})')
  if differences:
    raise PretrainedError(
        f'{flag}={directory} does not fit this run: '
        f'{"; ".join(differences)}. Pretrain with the fine-tuning task\'s '
        f'vocabulary and model flags.')
  weights_path = os.path.join(directory, WEIGHTS_FILE)
  weights_sha = file_sha256(weights_path)
  if metadata.get('weights_sha256') not in (None, weights_sha):
    raise PretrainedError(f'{flag}={directory}: {WEIGHTS_FILE} is not the '
                          f'file {METADATA_FILE} describes (changed since).')
  return dict(path=os.path.abspath(directory), weights_sha256=weights_sha,
              corpus=metadata.get('corpus'), steps=metadata.get('steps'))


def load_weights(directory: str) -> List[np.ndarray]:
  with np.load(os.path.join(directory, WEIGHTS_FILE)) as f:
    return [f[k] for k in sorted(f.files, key=lambda k: int(k.split('_')[1]))]


def assign(keras_model, weights: Sequence[np.ndarray], directory: str,
           flag: str = '--initial_weights'):
  """Sets the model's trainable weights, refusing any shape mismatch."""
  variables = keras_model.trainable_weights
  if len(variables) != len(weights) or any(
      tuple(v.shape) != w.shape for v, w in zip(variables, weights)):
    raise PretrainedError(
        f'{flag}={directory}: its weights have shapes '
        f'{[w.shape for w in weights]}, this model '
        f'{[tuple(v.shape) for v in variables]}.')
  for variable, value in zip(variables, weights):
    variable.assign(value)
