"""Every command of README.md runs as written (with flags that keep it short).

The commands are read from README.md's `sh` blocks, in order, and run with
bash in a scratch directory that links to the checkout (so their outputs,
`runs/` and `corpora/`, stay out of it), with HOME set to a scratch home
holding the repository the README clones (`$HOME/src/git`, made here with
several authors: cloning needs the network). Each command gets the flags of
its binary in `_SHORTER` appended (absl: the last value of a flag wins), so
that it finishes in seconds; a command this test has no rule for fails it,
so a new README command cannot go untested. Not run: `make test` (this very
suite) and `git clone` (network).
"""

import os
import re
import subprocess
import tempfile

from absl.testing import absltest

from tests import fixtures
from tests.data import git_corpus_test
from tests.recommend import recommend_test

_NOT_RUN = {
    'make test': 'the test suite itself',
    'git clone': 'needs the network; the test makes $HOME/src/git itself',
}
_TRAINING = ('--total_rounds=2 --rounds_per_eval=2 --rounds_per_checkpoint=2 '
             '--num_eval_examples=100 --clients_per_round=4')
_SHORTER = {
    'make demo': f'ARGS="{_TRAINING}"',
    'experiments.build_git_corpus': '',
    'experiments.pretrain': ('--steps=2 --steps_per_eval=2 '
                             '--steps_per_checkpoint=2 '
                             '--num_eval_examples=50'),
    'experiments.run_stackoverflow': _TRAINING,
    # After the sweep's `--`: flags of every training run.
    'experiments.sweep': (_TRAINING.replace(' --clients_per_round=4', '') +
                          ' --synthetic_train_clients=200'),
    'experiments.plan_launch': '--population=20000 --rounds=60',
    # Two seeds: each setting's runs and their means, end to end, the
    # learning-rate pairs again at the second seed, and past the grid's
    # edge when the chosen pair is at it.
    'experiments.recommend': ('--quick --population=20000 '
                              '--launch_rounds=60 --clients_per_round=4 '
                              '--timer_hours=24 --seeds=2 '
                              '--learning_rates_at_every_seed=2 '
                              '--learning_rates_past_grid_edge'),
    'experiments.privacy_accountant': '',
    'experiments.audit_mechanism': '--total_rounds=5 --bootstrap=20',
}


def readme_blocks():
  """The shell commands of each of README.md's sh blocks (continuations
  joined), block by block."""
  with open(os.path.join(fixtures.ROOT, 'README.md'), encoding='utf-8') as f:
    text = f.read()
  blocks = []
  for block in re.findall(r'```sh\n(.*?)```', text, flags=re.DOTALL):
    commands = []
    for line in block.replace('\\\n', ' ').splitlines():
      line = line.split('#', 1)[0].strip()
      if line:
        commands.append(re.sub(r'\s+', ' ', line))
    blocks.append(commands)
  return blocks


def readme_commands():
  """Every shell command of README.md's sh blocks, in order."""
  return [command for block in readme_blocks() for command in block]


def _rule(command):
  for prefix, reason in _NOT_RUN.items():
    if command.startswith(prefix):
      return None, reason
  for key, extra in _SHORTER.items():
    if command.startswith(key) or f'-m {key} ' in command + ' ':
      return extra, None
  return False, None


def _scratch():
  """A working directory linking to the checkout, and a home with a repo."""
  work = tempfile.mkdtemp()
  for name in os.listdir(fixtures.ROOT):
    if name not in ('runs', 'corpora', '.git'):
      os.symlink(os.path.join(fixtures.ROOT, name), os.path.join(work, name))
  home = tempfile.mkdtemp()
  os.makedirs(os.path.join(home, 'src'))
  repo = git_corpus_test.make_repo()
  os.rename(repo, os.path.join(home, 'src', 'git'))
  docs = os.path.join(home, 'src', 'git', 'Documentation')
  os.makedirs(docs)
  for i in range(4):
    with open(os.path.join(docs, f'page{i}.adoc'), 'w') as f:
      f.write(f'= Page {i}\n\nThis page explains how the frobnicator works. '
              'It keeps the widget safe when it is empty.\n' * 20)
  return work, home


# A line of TensorFlow's C++ log (`2026-11-29 09:13:15.755722: E
# tensorflow/...`): a user's command prints none unless asked.
_TF_LOG_LINE = re.compile(r'^\d{4}-\d\d-\d\d [\d:.]+: [IWEF] ', re.MULTILINE)


def _run_block(test, index):
  """Runs README's sh block `index` as written (plus `_SHORTER`), in a
  scratch checkout, in a user's environment (no TensorFlow log level set);
  returns ({command: stdout}, the scratch directory)."""
  work, home = _scratch()
  env = fixtures.binary_environment(HOME=home)
  del env['TF_CPP_MIN_LOG_LEVEL']
  outputs = {}
  for command in readme_blocks()[index]:
    extra, reason = _rule(command)
    if reason:
      continue
    full = f'{command} {extra}'.strip()
    proc = subprocess.run(['bash', '-c', full], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    test.assertEqual(proc.returncode, 0,
                     f'{full}\n{proc.stdout[-2000:]}\n'
                     f'{fixtures.stderr_tail(proc.stderr)}')
    test.assertNotIn('Traceback', proc.stderr, full)
    test.assertIsNone(_TF_LOG_LINE.search(proc.stdout + proc.stderr),
                      f'{full}: TensorFlow\'s C++ log in its output\n'
                      f'{fixtures.stderr_tail(proc.stderr)}')
    outputs[command] = proc.stdout
  return outputs, work


class ReadmeCommandsTest(absltest.TestCase):

  def test_every_command_has_a_rule(self):
    commands = readme_commands()
    self.assertGreaterEqual(len(commands), 8)
    for command in commands:
      extra, reason = _rule(command)
      self.assertTrue(extra is not False or reason,
                      f'README command without a rule in {__file__}: '
                      f'{command}')

  def test_every_block_is_run(self):
    # One test class a block (they run in parallel): a new block needs one.
    self.assertLen(readme_blocks(), 3)


class TwoCommandsTest(absltest.TestCase):

  def test_demo_runs_as_written(self):
    outputs, _ = _run_block(self, 0)
    demo = outputs['make demo']
    self.assertIn('Final eval in-vocab accuracy', demo)
    self.assertIn('Launch-equivalent privacy (NOT this run', demo)
    self.assertIn('Privacy spent: rho-zCDP', demo)
    # The guarantee's limit, beside it: the generated clients' vocabulary.
    self.assertIn('not covered: the vocabulary, counted from the training '
                  'clients\' text', demo)


class GitHistoryCommandsTest(absltest.TestCase):

  def test_git_history_commands_run_as_written(self):
    outputs, work = _run_block(self, 1)
    # build, pretrain, train, recommend (not git clone)
    self.assertLen(outputs, 4)
    self.assertTrue(os.path.isfile(os.path.join(
        work, 'corpora', 'git', 'stackoverflow.sqlite')))
    (recommend,) = [c for c in outputs if 'experiments.recommend' in c]
    extra, _ = _rule(recommend)
    recommend_test.check_recommendation(
        self, os.path.join(work, 'runs', 'git_recommend'),
        lambda: subprocess.run(
            ['bash', '-c', f'{recommend} {extra}'], cwd=work,
            env=fixtures.binary_environment(),
            capture_output=True, text=True, timeout=600))


class OtherBinariesCommandsTest(absltest.TestCase):

  def test_other_binaries_run_as_written(self):
    outputs, _ = _run_block(self, 2)
    self.assertGreaterEqual(len(outputs), 5)


if __name__ == '__main__':
  absltest.main()
