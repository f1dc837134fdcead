"""Shared test helpers: a generated database per size, running binaries."""

import functools
import json
import os
import re
import subprocess
import sys
import tempfile

from dpftrl_tff import synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=None)
def generated_cache(num_train_clients: int, num_words: int,
                    seed: int) -> str:
  """A small generated StackOverflow-format database (made once per args)."""
  cache = tempfile.mkdtemp()
  num_eval = max(3, num_train_clients // 7)
  synthetic.generate(cache, num_train_clients=num_train_clients,
                     num_heldout_clients=num_eval, num_test_clients=num_eval,
                     num_words=num_words, seed=seed)
  return cache


def run_module(module: str, *args: str,
               timeout: float = 300) -> subprocess.CompletedProcess:
  """Runs `python -m module args` from the checkout root, captured."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run([sys.executable, '-m', module, *args], cwd=ROOT,
                        env=env, capture_output=True, text=True,
                        timeout=timeout)


_TF_LOG_RE = re.compile(r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] ')


def own_lines(text: str):
  """The lines of a binary's output that are not TensorFlow's C++ logs."""
  return [line for line in text.strip().splitlines()
          if line.strip() and not _TF_LOG_RE.match(line)]


def write_jsonl(path: str, objects) -> str:
  """Writes one JSON object a line (a commits or docs export); the path."""
  with open(path, 'w', encoding='utf-8') as f:
    for obj in objects:
      f.write(json.dumps(obj) + '\n')
  return path
