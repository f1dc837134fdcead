r"""Builds a federated text corpus from a git history (TFF StackOverflow format).

Authors are the clients, their commit messages their private text; the
repository's documentation becomes public text for pretraining. The output
directory is a `--cache_dir` for `run_stackoverflow` and `pretrain`:

  python -m experiments.build_git_corpus --git_repo=~/src/linux \
      --docs_dir=~/src/linux/Documentation --output_dir=corpora/linux
  python -m experiments.build_git_corpus \
      --commits_jsonl=commits.jsonl.xz --docs_jsonl=docs.jsonl.xz \
      --output_dir=corpora/git
  python -m experiments.run_stackoverflow --cache_dir=corpora/git ...
  python -m experiments.pretrain --cache_dir=corpora/git \
      --tfds_name=dpftrl_public_text ...

What is kept and dropped of a message, how authors are hashed and how the
splits are drawn: `dpftrl_tff.data.git_corpus` and docs/real_text.md.
"""

import time

from dpftrl_tff import runtime

runtime.install()   # Before TensorFlow is imported: quiet C++ logs.

# pylint: disable=g-import-not-at-top
from absl import flags

from dpftrl_tff import console
from dpftrl_tff.data import build_progress
from dpftrl_tff.data import git_corpus
# pylint: enable=g-import-not-at-top

_REPO = flags.DEFINE_string('git_repo', None,
                            'A git repository to read with `git log`.')
_JSONL = flags.DEFINE_string(
    'commits_jsonl', None, 'Or: a JSON-lines export of commits (commit, '
    'author, date, message), optionally .xz / .gz / .bz2 compressed.')
_DOCS_DIR = flags.DEFINE_string(
    'docs_dir', None, 'Public text: a directory of documentation files '
    '(.txt, .adoc, .md, .rst, .html and extensionless).')
_DOCS_JSONL = flags.DEFINE_string(
    'docs_jsonl', None, 'Or: a JSON-lines export of documents (path, text).')
_OUTPUT = flags.DEFINE_string('output_dir', None,
                              'Where the corpus is written (a --cache_dir).')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the split by author.')
_SPLIT = flags.DEFINE_enum(
    'split', 'random', list(git_corpus.SPLIT_MODES),
    'random: authors split at random (by --seed); date: the oldest authors '
    '(first commit) train, then heldout, the newest test.')
_HELDOUT = flags.DEFINE_float('heldout_fraction', 0.1,
                              'Share of the authors in the heldout split.')
_TEST = flags.DEFINE_float('test_fraction', 0.1,
                           'Share of the authors in the test split.')
_MIN_EXAMPLES = flags.DEFINE_integer(
    'min_examples_per_client', 5,
    'Authors with fewer sentences are left out of every split.')
_MIN_TOKENS = flags.DEFINE_integer(
    'min_tokens_per_sentence', 2, 'Shorter sentences are dropped.')
_SINCE = flags.DEFINE_string('since', None,
                             'Only commits on or after this date (YYYY-MM-DD).')
_UNTIL = flags.DEFINE_string('until', None,
                             'Only commits before this date (YYYY-MM-DD).')
_COUNT_BY = flags.DEFINE_enum(
    'count_words_by', 'tokens', list(git_corpus.WORD_COUNT_MODES),
    'How stackoverflow.word_count (the vocabulary\'s ranking) counts the '
    'train split\'s words: tokens, every occurrence; authors, the number of '
    'train authors who use the word (as TFF\'s StackOverflow word_count '
    'counts users: one prolific author cannot fill the vocabulary).')
_EXCLUDE = flags.DEFINE_string(
    'exclude_authors_matching', git_corpus.DEFAULT_EXCLUDED_AUTHORS,
    'Authors whose "name <e-mail>" (git) or author field (JSON lines) '
    'matches this regular expression (case-insensitive) are left out: by '
    'default GitHub apps ("dependabot[bot]"), whose templated messages are no '
    'person\'s text. Empty: keep every author.')


def _describe(stats: dict) -> str:
  lines = [f'Authors: {stats["authors"]:,} ({stats["authors_dropped"]:,} '
           f'with fewer than --min_examples_per_client='
           f'{_MIN_EXAMPLES.value} sentences left out)']
  if stats['authors_excluded']:
    lines.append(f'Left out before that: {stats["authors_excluded"]:,} '
                 f'author(s) matching --exclude_authors_matching='
                 f'{_EXCLUDE.value} ({stats["commits_excluded"]:,} commits)')
  for split, s in stats['splits'].items():
    d = s['sentences_per_client']
    lines.append(
        f'  {split:8s} {s["clients"]:6,} clients {s["sentences"]:9,} '
        f'sentences {s["tokens"]:10,} tokens; sentences per client: min '
        f'{d["min"]}, median {d["median"]:g}, mean {d["mean"]:g}, p90 '
        f'{d["p90"]:g}, max {d["max"]}')
  coverage = ', '.join(f'{k} {100 * v:.1f}%'
                       for k, v in stats['vocab_coverage'].items())
  lines.append(f'Distinct train words: {stats["distinct_train_words"]:,}; '
               f'the {stats["coverage_vocab_size"]:,} most frequent cover '
               f'{coverage} of the tokens')
  train = stats['splits']['train']['tokens_per_sentence']
  if train:
    lines.append(f'Train sentences: median {train["median"]:g} tokens, p90 '
                 f'{train["p90"]:g}, max {train["max"]}')
  for length, share in stats.get('train_sentences_longer_than', {}).items():
    if share > 0.1:
      lines.append(
          f'{100 * share:.0f}% of the train sentences are longer than '
          f'{length} tokens: training keeps the first --sequence_length='
          f'{length} of each (a larger --sequence_length keeps more, at '
          f'more cost a round)')
  public = stats.get('public_text')
  if public:
    lines.append(f'Public text: {public["files"]:,} files, '
                 f'{public["sentences"]:,} sentences, {public["tokens"]:,} '
                 f'tokens (TFDS dpftrl_public_text in '
                 f'{public["tfds_data_dir"]}); its {public["distinct_words"]:,} '
                 f'words counted in {public["word_counts_path"]}, a '
                 f'vocabulary without the clients\' data for '
                 f'--word_counts_path')
  return '\n'.join(lines)


def run() -> dict:
  if bool(_REPO.value) == bool(_JSONL.value):
    raise ValueError('Give exactly one of --git_repo and --commits_jsonl.')
  if _DOCS_DIR.value and _DOCS_JSONL.value:
    raise ValueError('Give at most one of --docs_dir and --docs_jsonl.')
  if not _OUTPUT.value:
    raise ValueError('--output_dir is required.')
  started = time.monotonic()
  settings = git_corpus.BuildSettings(
      seed=_SEED.value, split=_SPLIT.value,
      heldout_fraction=_HELDOUT.value, test_fraction=_TEST.value,
      min_examples_per_client=_MIN_EXAMPLES.value,
      min_tokens_per_sentence=_MIN_TOKENS.value, since=_SINCE.value,
      until=_UNTIL.value, exclude_authors_matching=_EXCLUDE.value,
      count_words_by=_COUNT_BY.value)
  settings.validate()
  exclude = settings.exclusion()
  progress = build_progress.BuildProgress()
  if _REPO.value:
    commits = git_corpus.read_git_log(_REPO.value, exclude=exclude,
                                      progress=progress)
    source = dict(git_repo=_REPO.value)
  else:
    commits = git_corpus.read_commits_jsonl(_JSONL.value, exclude=exclude,
                                            progress=progress)
    source = dict(commits_jsonl=_JSONL.value)
  documents = None
  if _DOCS_DIR.value:
    documents = git_corpus.read_docs_dir(_DOCS_DIR.value)
    source['docs_dir'] = _DOCS_DIR.value
  elif _DOCS_JSONL.value:
    documents = git_corpus.read_docs_jsonl(_DOCS_JSONL.value)
    source['docs_jsonl'] = _DOCS_JSONL.value
  stats = git_corpus.build(_OUTPUT.value, commits, settings,
                           documents=documents, source=source,
                           progress=progress)
  print(_describe(stats))
  print(f'Wrote {_OUTPUT.value} in {time.monotonic() - started:.1f} s; '
        f'train on it with --cache_dir={_OUTPUT.value}')
  return stats


def main(argv):
  return console.run_main(run, argv)


if __name__ == '__main__':
  runtime.run_app(main)
