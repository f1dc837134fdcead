"""A federated text corpus from a git history, in TFF's StackOverflow schema.

A git repository is a natural federated corpus: its authors are the clients,
their commit messages their private text, and the repository's own
documentation public prose for pretraining (as web text is for Gboard, paper
Sec. 2.3). `build` writes `stackoverflow.sqlite` (TFF's exact schema: tables
`examples(split_name, client_id, serialized_example_proto)` and
`client_metadata(client_id, split_name, num_examples)`, splits train,
heldout and test) and `stackoverflow.word_count` (the train split's words,
most frequent first: by occurrences, or with `count_words_by='authors'` by
the number of authors using each word, as TFF's StackOverflow file counts
users), so that `tff.simulation.datasets.stackoverflow.
load_data(cache_dir)` and `run_stackoverflow --cache_dir` read it unchanged.

What a commit message becomes (`message_sentences`):
* dropped whole: merge commits ("Merge branch ...", "Merge pull request
  ..."), reverts' boilerplate is kept (it is the author's text);
* dropped lines: trailers (`Signed-off-by:`, any `*-by:`, `Cc:`,
  `Change-Id:`, `Link:`, `Fixes:` ...), quoted diffs (from `diff --git`,
  `--- a/`, `@@ ` to the end of the block), indented blocks (a tab or four
  spaces: commands, code, logs), fenced code blocks, quoted e-mail (`>`),
  scissors lines;
* removed from the text: URLs and e-mail addresses;
* the subject line is one sentence; body paragraphs are joined and split at
  sentence ends (`. `, `? `, `! `, and CJK's `。`, `！`, `？`);
  bullets start a new sentence;
* tokenized as TFF's StackOverflow `tokens`: lower case, words of any
  script ("für", "ошибку"), CJK ideographs and kana one token each,
  punctuation split off as its own token, English contractions split
  ("don't" -> "do n't"), tokens joined by single spaces; sentences of
  fewer than `min_tokens_per_sentence` tokens are dropped.

Clients: an author's identity (the e-mail git reports, after .mailmap) is
replaced on reading by its HMAC-SHA256 under a random salt drawn for this
process and never stored; client ids are sequence numbers in order of the
author's first commit (its time in UTC, then commit id), so the database
depends only on the input and `seed`, never on the salt. Authors with fewer than
`min_examples_per_client` sentences are left out. Splits are by author:
`split='random'` permutes the authors with `seed`; `split='date'` gives the
oldest authors (by first commit) to train, the next to heldout and the
newest to test (a model trained on earlier contributors, evaluated on later
ones).

Public text: documentation files (a directory, or a JSON-lines export of
`path`, `text`) are cut into sentences the same way (AsciiDoc / Markdown
markup, code blocks and tables dropped; HTML pages, .html or .htm, as their
text without tags, scripts or preformatted blocks) and written as
`public_text.txt`, one tokenized sentence a line, then prepared as the
project's TFDS dataset `dpftrl_public_text` in `<output_dir>/tfds` for
`experiments.pretrain --tfds_name=dpftrl_public_text`, and its words counted
in `public.word_count`: with `--word_counts_path` a vocabulary made without
the clients' data, which the DP guarantee then covers (the default,
`stackoverflow.word_count`, is counted from the train split's messages, and
the privacy report says the guarantee does not cover it).
"""

import bz2
import collections
import dataclasses
import datetime
import gzip
import hashlib
import hmac
import io
import json
import lzma
import os
import re
import secrets
import sqlite3
import subprocess
import tempfile
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from dpftrl_tff import checks
from dpftrl_tff import strict_json
from dpftrl_tff.data import stackoverflow
from dpftrl_tff.data.git_text import document_sentences
from dpftrl_tff.data.git_text import html_text
from dpftrl_tff.data.git_text import message_sentences

PUBLIC_TEXT_NAME = 'public_text.txt'
PUBLIC_WORD_COUNTS_NAME = 'public.word_count'
CORPUS_RECORD_NAME = 'corpus.json'
SPLIT_MODES = ('random', 'date')
WORD_COUNT_MODES = ('tokens', 'authors')
DOC_EXTENSIONS = ('.txt', '.adoc', '.asciidoc', '.md', '.markdown', '.rst',
                  '.html', '.htm', '')
HTML_EXTENSIONS = ('.html', '.htm')


class CorpusError(ValueError):
  """Input that cannot become a corpus (the message says which and why)."""


@dataclasses.dataclass(frozen=True)
class Commit:
  """One commit as read: the author already replaced by a salted digest;
  `excluded` when the author's identity, as read, matched the build's
  exclusion pattern (`BuildSettings.exclude_authors_matching`)."""
  commit: str
  author_key: str
  date: str
  message: str
  excluded: bool = False


# Automated authors: GitHub apps commit as "name[bot]" (dependabot[bot],
# renovate[bot], github-actions[bot], pre-commit-ci[bot]), in the name and in
# the e-mail's local part. Their templated messages are no person's text.
DEFAULT_EXCLUDED_AUTHORS = r'\[bot\]'


def _excluded(pattern: Optional[re.Pattern], identity: str) -> bool:
  return bool(pattern is not None and pattern.search(identity))


def commit_time(date: str) -> float:
  """Seconds since the epoch of an ISO 8601 date ("2005-04-07",
  "2005-04-07T15:13:13-07:00", "...Z"); without a UTC offset, UTC.

  Commits and sentences are ordered by this, not by the date's text, whose
  order is not time's across UTC offsets. Raises ValueError otherwise.
  """
  when = datetime.datetime.fromisoformat(date.strip())
  if when.tzinfo is None:
    when = when.replace(tzinfo=datetime.timezone.utc)
  return when.timestamp()


# ---- Reading commits.


class _AuthorHasher:
  """HMAC-SHA256 of author identities under a salt never written anywhere."""

  def __init__(self, salt: Optional[bytes] = None):
    self._salt = salt if salt is not None else secrets.token_bytes(32)

  def __call__(self, identity: str) -> str:
    return hmac.new(self._salt, identity.strip().lower().encode('utf-8'),
                    hashlib.sha256).hexdigest()


def _open_text(raw):
  """Text of the binary file `raw`, decompressed by its name's extension."""
  opener = {'.xz': lzma.open, '.lzma': lzma.open, '.gz': gzip.open,
            '.bz2': bz2.open}.get(os.path.splitext(raw.name)[1].lower())
  # utf-8-sig: a byte-order mark, as some Windows tools write, is not text.
  if opener is None:
    return io.TextIOWrapper(raw, encoding='utf-8-sig')
  return opener(raw, 'rt', encoding='utf-8-sig')


def _read_jsonl(path: str, flag: str, fields: Sequence[str],
                progress=None) -> Iterator[tuple]:
  """(line number, object) of a JSON-lines file, maybe compressed.

  Every object must have string `fields`; anything else raises CorpusError
  naming the flag, the file and the line. `progress` (a
  `build_progress.BuildProgress`) is told the share of the file's bytes
  read.
  """
  if not os.path.isfile(path):
    raise CorpusError(f'--{flag}={path}: no such file.')
  try:
    with open(path, 'rb') as raw, _open_text(raw) as f:
      if progress is not None:
        size = max(1, os.fstat(raw.fileno()).st_size)
        progress.set_read_share(
            lambda: 1.0 if raw.closed else raw.tell() / size)
      for number, line in enumerate(f, 1):
        if not line.strip():
          continue
        where = f'--{flag}={path}, line {number}'
        try:
          obj = json.loads(line)
        except ValueError as e:
          raise CorpusError(f'{where}: not JSON ({e}).') from None
        if not isinstance(obj, dict):
          raise CorpusError(f'{where}: expected an object with '
                            f'{", ".join(fields)}.')
        missing = [k for k in fields if not isinstance(obj.get(k), str)]
        if missing:
          raise CorpusError(f'{where}: no string field(s) '
                            f'{", ".join(missing)}.')
        yield number, obj
  except (OSError, EOFError, lzma.LZMAError, UnicodeDecodeError) as e:
    raise CorpusError(f'--{flag}={path}: cannot read it '
                      f'({type(e).__name__}: {e}).') from None


def read_commits_jsonl(path: str, hasher=None,
                       exclude: Optional[re.Pattern] = None,
                       progress=None) -> Iterator[Commit]:
  """Commits of a JSON-lines export (`commit`, `author`, `date`, `message`).

  The file may be compressed (.xz, .gz, .bz2). A line that is not such an
  object raises CorpusError naming the file and line. A commit whose
  `author` matches `exclude` is marked excluded (an export whose authors
  are already hashed matches nothing). `progress` (a
  `build_progress.BuildProgress`) is told the share of the file read.
  """
  hasher = hasher or _AuthorHasher()
  for number, obj in _read_jsonl(path, 'commits_jsonl',
                                 ('author', 'date', 'message'), progress):
    try:
      commit_time(obj['date'])
    except ValueError:
      raise CorpusError(
          f'--commits_jsonl={path}, line {number}: date {obj["date"]!r} is '
          f'not ISO 8601 (YYYY-MM-DD, optionally THH:MM:SS and a UTC '
          f'offset, as git log --format=%aI prints).') from None
    yield Commit(str(obj.get('commit', number)), hasher(obj['author']),
                 obj['date'], obj['message'],
                 _excluded(exclude, obj['author']))


_FIELD, _RECORD = '\x1f', '\x1e'
_LOG_CHUNK_BYTES = 1 << 20


def read_git_log(repo: str, hasher=None,
                 exclude: Optional[re.Pattern] = None,
                 progress=None) -> Iterator[Commit]:
  """Commits of `git log` in `repo` (merges excluded; .mailmap applied).

  A commit whose author "name <e-mail>" (after .mailmap) matches `exclude`
  is marked excluded. `progress` (a `build_progress.BuildProgress`) is told
  the share of the log's commits read (`git rev-list --count`).

  Messages are asked for in UTF-8 (`--encoding=UTF-8`): git re-encodes a
  commit recorded in another encoding (its `encoding` header, e.g. Latin-1)
  rather than passing its bytes on, which would decode to replacement
  characters.
  """
  hasher = hasher or _AuthorHasher()
  if not os.path.isdir(repo):
    raise CorpusError(f'--git_repo={repo}: no such directory.')
  try:
    check = subprocess.run(['git', '-C', repo, 'rev-parse', '--git-dir'],
                           capture_output=True, text=True, check=False)
  except OSError as e:
    raise CorpusError(f'--git_repo={repo}: cannot run git ({e}).') from None
  if check.returncode:
    raise CorpusError(f'--git_repo={repo}: not a git repository.')
  fmt = _FIELD.join(['%H', '%aN', '%aE', '%aI', '%B']) + _RECORD
  read = 0
  if progress is not None:
    total = _count_commits(repo)
    progress.set_read_share(lambda: read / total if total else None)
  # Streamed, a record at a time: a large history's log (the Linux
  # kernel's: over a million commits) is never held whole in memory.
  with tempfile.TemporaryFile() as stderr:
    proc = subprocess.Popen(
        ['git', '-C', repo, 'log', '--no-merges', '--encoding=UTF-8',
         f'--format={fmt}'], stdout=subprocess.PIPE, stderr=stderr)
    try:
      pending: List[bytes] = []   # The start of a record cut by a chunk.
      while True:
        chunk = proc.stdout.read(_LOG_CHUNK_BYTES)
        if not chunk:   # The end: what is left is the last record.
          records = [b''.join(pending)]
        else:
          parts = chunk.split(_RECORD.encode())
          if len(parts) == 1:
            pending.append(chunk)
            continue
          records = [b''.join(pending) + parts[0]] + parts[1:-1]
          pending = [parts[-1]]
        for raw in records:
          record = _decode_record(raw).lstrip('\n')
          if record:
            read += 1
            commit, name, email, date, message = record.split(_FIELD, 4)
            yield Commit(commit, hasher(email), date, message,
                         _excluded(exclude, f'{name} <{email}>'))
        if not chunk:
          break
    finally:
      proc.stdout.close()
      returncode = proc.wait()
    if returncode:
      stderr.seek(0)
      error = stderr.read().decode('utf-8', 'replace').strip().splitlines()
      if any('does not have any commits' in line for line in error):
        raise CorpusError(
            f'--git_repo={repo}: the repository has no commits.')
      raise CorpusError(f'--git_repo={repo}: git log failed '
                        f'({error[-1] if error else returncode}).')


def _count_commits(repo: str) -> Optional[int]:
  """How many commits `read_git_log`'s `git log` lists (None if unknown)."""
  proc = subprocess.run(['git', '-C', repo, 'rev-list', '--no-merges',
                         '--count', 'HEAD'], capture_output=True, text=True,
                        check=False)
  try:
    return int(proc.stdout) if proc.returncode == 0 else None
  except ValueError:
    return None


def _decode_record(raw: bytes) -> str:
  """A commit's record from `git log --encoding=UTF-8`: UTF-8, or, for a
  message stored in another encoding without saying so (git cannot
  re-encode it), Latin-1, which decodes any bytes; never replacement
  characters."""
  try:
    return raw.decode('utf-8')
  except UnicodeDecodeError:
    return raw.decode('latin-1')


def read_docs_jsonl(path: str) -> Iterator[Dict[str, str]]:
  """Documents of a JSON-lines export (`path`, `text`); maybe compressed."""
  for number, obj in _read_jsonl(path, 'docs_jsonl', ('text',)):
    yield dict(path=str(obj.get('path', number)), text=obj['text'])


def read_docs_dir(root: str) -> Iterator[Dict[str, str]]:
  """Text documents under `root` (by extension; .git skipped), sorted."""
  if not os.path.isdir(root):
    raise CorpusError(f'--docs_dir={root}: no such directory.')
  paths = []
  for folder, dirs, files in os.walk(root):
    dirs[:] = sorted(d for d in dirs if not d.startswith('.'))
    for name in files:
      if os.path.splitext(name)[1].lower() in DOC_EXTENSIONS and (
          not name.startswith('.')):
        paths.append(os.path.join(folder, name))
  if not paths:
    raise CorpusError(
        f'--docs_dir={root}: no documentation files there (read: '
        f'{", ".join(e for e in DOC_EXTENSIONS if e)} and files without an '
        f'extension).')
  for path in sorted(paths):
    try:
      with open(path, encoding='utf-8-sig') as f:
        text = f.read()
    except (UnicodeDecodeError, OSError):
      continue   # Binary or unreadable: not prose.
    yield dict(path=os.path.relpath(path, root), text=text)


# ---- Building the database.


@dataclasses.dataclass
class BuildSettings:
  """How commits become a federated corpus (the binary's flags)."""
  seed: int = 0
  split: str = 'random'
  heldout_fraction: float = 0.1
  test_fraction: float = 0.1
  min_examples_per_client: int = 5
  min_tokens_per_sentence: int = 2
  since: Optional[str] = None
  until: Optional[str] = None
  exclude_authors_matching: str = DEFAULT_EXCLUDED_AUTHORS
  count_words_by: str = 'tokens'

  def exclusion(self) -> Optional[re.Pattern]:
    """The compiled exclusion pattern (case-insensitive); None if empty."""
    if not self.exclude_authors_matching:
      return None
    try:
      return re.compile(self.exclude_authors_matching, re.IGNORECASE)
    except re.error as e:
      raise CorpusError(
          f'--exclude_authors_matching={self.exclude_authors_matching!r}: '
          f'not a regular expression ({e}); give one, or an empty value to '
          f'keep every author.') from None

  def validate(self):
    checks.check_int(self.seed, '--seed', minimum=0)
    if self.count_words_by not in WORD_COUNT_MODES:
      raise CorpusError(f'--count_words_by={self.count_words_by!r}: use one '
                        f'of {", ".join(WORD_COUNT_MODES)}.')
    if self.split not in SPLIT_MODES:
      raise CorpusError(f'--split={self.split!r}: use one of '
                        f'{", ".join(SPLIT_MODES)}.')
    for name in ('heldout_fraction', 'test_fraction'):
      checks.check_float(getattr(self, name), f'--{name}', minimum=0.0,
                         maximum=0.5, strict_minimum=True)
    checks.check_int(self.min_examples_per_client,
                     '--min_examples_per_client', minimum=1)
    checks.check_int(self.min_tokens_per_sentence,
                     '--min_tokens_per_sentence', minimum=1)
    for name in ('since', 'until'):
      value = getattr(self, name)
      if value is not None and not re.fullmatch(r'\d{4}-\d\d-\d\d.*', value):
        raise CorpusError(f'--{name}={value!r}: expected a date '
                          f'YYYY-MM-DD.')
    self.exclusion()


@dataclasses.dataclass
class _Author:
  first_time: float
  first_commit: str
  sentences: List[tuple]   # (commit_time, date, tokens)


def group_by_author(commits: Iterable[Commit], settings: BuildSettings,
                    excluded: Optional[Dict[str, int]] = None,
                    progress=None) -> Dict[str, _Author]:
  """Salted author digest -> the author's sentences, in the date range.

  Commits marked excluded are left out; `excluded`, if given, receives
  their count per author digest. `progress`: a
  `build_progress.BuildProgress`, told of every commit read.
  """
  authors: Dict[str, _Author] = {}
  excluded = {} if excluded is None else excluded
  count = 0
  for c in commits:
    count += 1
    if progress is not None:
      progress.commit_read(count, len(authors))
    if c.excluded:
      excluded[c.author_key] = excluded.get(c.author_key, 0) + 1
      continue
    day = c.date[:10]
    if settings.since and day < settings.since[:10]:
      continue
    if settings.until and day >= settings.until[:10]:
      continue
    sentences = message_sentences(
        c.message, min_tokens_per_sentence=settings.min_tokens_per_sentence)
    when = commit_time(c.date)
    author = authors.get(c.author_key)
    if author is None:
      author = authors[c.author_key] = _Author(when, c.commit, [])
    elif (when, c.commit) < (author.first_time, author.first_commit):
      author.first_time, author.first_commit = when, c.commit
    author.sentences.extend((when, c.date, s) for s in sentences)
  if count == 0:
    raise CorpusError('The history has no commits.')
  if sum(excluded.values()) == count:
    raise CorpusError(
        f'All {count} commits are by authors matching '
        f'--exclude_authors_matching={settings.exclude_authors_matching}: '
        f'give another pattern, or an empty one to keep every author.')
  return authors


def assign_splits(authors: Dict[str, _Author], settings: BuildSettings
                  ) -> Dict[str, List[_Author]]:
  """Kept authors (enough sentences) by split, in client-id order."""
  kept = sorted((a for a in authors.values()
                 if len(a.sentences) >= settings.min_examples_per_client),
                key=lambda a: (a.first_time, a.first_commit))
  n = len(kept)
  n_heldout = max(1, int(round(settings.heldout_fraction * n)))
  n_test = max(1, int(round(settings.test_fraction * n)))
  if n - n_heldout - n_test < 1:
    if len(authors) < 3:
      within = (' in the --since/--until range' if settings.since or
                settings.until else '')
      raise CorpusError(
          f'The history has {len(authors)} author(s){within}: a corpus '
          f'needs at least 3 (train, heldout and test clients); use a '
          f'repository with more authors.')
    raise CorpusError(
        f'Only {n} author(s) have at least --min_examples_per_client='
        f'{settings.min_examples_per_client} sentences: too few for train, '
        f'heldout and test splits (lower --min_examples_per_client or use '
        f'a longer history).')
  if settings.split == 'random':
    order = np.random.default_rng(settings.seed).permutation(n)
    kept = [kept[i] for i in order]
  n_train = n - n_heldout - n_test
  return dict(train=kept[:n_train],
              heldout=kept[n_train:n_train + n_heldout],
              test=kept[n_train + n_heldout:])


def _percentiles(sizes: Sequence[int]) -> Dict[str, float]:
  if not sizes:
    return {}
  arr = np.asarray(sizes)
  return dict(min=int(arr.min()), median=float(np.median(arr)),
              mean=round(float(arr.mean()), 1),
              p90=float(np.percentile(arr, 90)), max=int(arr.max()))


def write_database(output_dir: str, splits: Dict[str, List[_Author]],
                   vocab_size_for_coverage: int = 10000,
                   sequence_lengths: Sequence[int] = (),
                   count_words_by: str = 'tokens', progress=None) -> Dict:
  """Writes the database and word counts; returns the corpus statistics.

  The word counts are the train split's: every occurrence
  (`count_words_by='tokens'`) or the number of train authors who use the
  word (`'authors'`, the definition of TFF's StackOverflow word_count: one
  prolific author cannot fill the vocabulary with their own words). Among
  the statistics the share of training sentences longer than each of
  `sequence_lengths` (training keeps a sentence's first words only).
  `progress`: a `build_progress.BuildProgress`, told of every author
  written and the share of the sentences written.
  """
  os.makedirs(output_dir, exist_ok=True)
  total_authors = sum(len(v) for v in splits.values())
  total_sentences = sum(len(a.sentences) for v in splits.values() for a in v)
  written = 0
  path = stackoverflow.database_path(output_dir)
  tmp = path + '.tmp'
  for stale in (tmp, tmp + '-journal'):
    if os.path.exists(stale):
      os.remove(stale)
  con = sqlite3.connect(tmp)
  word_counts: collections.Counter = collections.Counter()
  split_counts: Dict[str, collections.Counter] = {}
  train_authors_using: collections.Counter = collections.Counter()
  stats: Dict[str, Dict] = {}
  try:
    stackoverflow.create_tables(con)
    number, train_lengths = 0, []
    for split in stackoverflow.SPLITS:
      counter = split_counts[split] = collections.Counter()
      sizes, lengths = [], []
      for author in splits[split]:
        number += 1
        cid = f'{number:08d}'
        rows = [(split, cid, stackoverflow.serialize_example(
            tokens=s, date=date, kind='commit'))
                for _, date, s in sorted(author.sentences)]
        for _, _, s in author.sentences:
          words = s.split(' ')
          counter.update(words)
          lengths.append(len(words))
        if split == 'train' and count_words_by == 'authors':
          train_authors_using.update(
              {w for _, _, s in author.sentences for w in s.split(' ')})
        con.executemany('INSERT INTO examples VALUES (?, ?, ?)', rows)
        con.execute('INSERT INTO client_metadata VALUES (?, ?, ?)',
                    (cid, split, len(rows)))
        sizes.append(len(rows))
        written += len(rows)
        if progress is not None:
          progress.author_written(number, total_authors,
                                  written / max(1, total_sentences))
      stats[split] = dict(clients=len(sizes), sentences=int(sum(sizes)),
                          tokens=int(sum(lengths)),
                          sentences_per_client=_percentiles(sizes),
                          tokens_per_sentence=_percentiles(lengths))
      if split == 'train':
        train_lengths = lengths
    word_counts = (split_counts['train'] if count_words_by == 'tokens' else
                   train_authors_using)
    stackoverflow.index_tables(con)
    con.commit()
  finally:
    con.close()
  ranked = write_word_counts(
      os.path.join(output_dir, stackoverflow.WORD_COUNTS_NAME), word_counts)
  os.replace(tmp, path)
  vocab = {w for w, _ in ranked[:vocab_size_for_coverage]}
  coverage = {}
  for split, counter in split_counts.items():
    total = sum(counter.values())
    covered = sum(c for w, c in counter.items() if w in vocab)
    coverage[split] = covered / total if total else float('nan')
  longer = {str(n): (float(np.mean(np.asarray(train_lengths) > n))
                     if train_lengths else 0.0)
            for n in sequence_lengths}
  return dict(splits=stats, distinct_train_words=len(ranked),
              coverage_vocab_size=vocab_size_for_coverage,
              vocab_coverage=coverage,
              train_sentences_longer_than=longer)


def write_word_counts(path: str, counts: collections.Counter
                      ) -> List[Tuple[str, int]]:
  """Writes `word count` lines, most frequent first (ties by word), the
  format of stackoverflow.word_count; returns them ranked."""
  ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
  with open(path + '.tmp', 'w', encoding='utf-8') as f:
    for word, count in ranked:
      f.write(f'{word} {count}\n')
  os.replace(path + '.tmp', path)
  return ranked


def write_public_text(output_dir: str, documents: Iterable[Dict[str, str]],
                      min_tokens_per_sentence: int = 3) -> Dict:
  """public_text.txt: every document's sentences, one a line; and
  public.word_count, their words counted (a vocabulary made without the
  clients' data, for --word_counts_path)."""
  os.makedirs(output_dir, exist_ok=True)
  path = os.path.join(output_dir, PUBLIC_TEXT_NAME)
  files = sentences = tokens = 0
  counts: collections.Counter = collections.Counter()
  with open(path + '.tmp', 'w', encoding='utf-8') as f:
    for doc in documents:
      files += 1
      text = doc['text']
      if os.path.splitext(doc['path'])[1].lower() in HTML_EXTENSIONS:
        text = html_text(text)
      for s in document_sentences(
          text, min_tokens_per_sentence=min_tokens_per_sentence):
        f.write(s + '\n')
        sentences += 1
        tokens += s.count(' ') + 1
        counts.update(s.split(' '))
  os.replace(path + '.tmp', path)
  # Its TFDS validation split is every VALIDATION_EVERY-th sentence.
  # TensorFlow (and TFDS) only where public text is written.
  from dpftrl_tff.data import public_corpus  # pylint: disable=g-import-not-at-top
  least = public_corpus.VALIDATION_EVERY
  if sentences < least:
    raise CorpusError(
        f'The documentation ({files} file(s)) has {sentences} sentence(s) of '
        f'at least {min_tokens_per_sentence} tokens: public text needs '
        f'{least} or more (every {least}th is held out for validation). '
        f'Give more documentation, or none (no --docs_dir or --docs_jsonl) '
        f'to build the corpus without public text.')
  counts_path = os.path.join(output_dir, PUBLIC_WORD_COUNTS_NAME)
  write_word_counts(counts_path, counts)
  return dict(files=files, sentences=sentences, tokens=tokens, path=path,
              distinct_words=len(counts), word_counts_path=counts_path)


def default_sequence_length() -> int:
  """Training's default `--sequence_length` (words kept of a sentence)."""
  from dpftrl_tff.run import config  # pylint: disable=g-import-not-at-top
  return next(f.default for f in dataclasses.fields(config.TrainConfig)
              if f.name == 'sequence_length')


def build(output_dir: str, commits: Iterable[Commit],
          settings: BuildSettings, *,
          documents: Optional[Iterable[Dict[str, str]]] = None,
          source: Optional[Dict] = None, progress=None) -> Dict:
  """Builds the corpus in `output_dir`; returns its statistics.

  Also writes `corpus.json` (the settings, the source and the statistics;
  no identity). With `documents`, the public text and its TFDS dataset.
  `progress`: a `build_progress.BuildProgress` (the same one the commits'
  reader was given), or None for no progress lines.
  """
  settings.validate()
  excluded: Dict[str, int] = {}
  authors = group_by_author(commits, settings, excluded, progress)
  if progress is not None:
    progress.reading_done()
  splits = assign_splits(authors, settings)
  # The public text first: documentation too short for it is refused
  # before the database is written.
  public = (None if documents is None else
            write_public_text(output_dir, documents))
  stats = write_database(output_dir, splits,
                         sequence_lengths=(default_sequence_length(),),
                         count_words_by=settings.count_words_by,
                         progress=progress)
  stats['authors'] = len(authors)
  stats['authors_excluded'] = len(excluded)
  stats['commits_excluded'] = sum(excluded.values())
  stats['authors_dropped'] = len(authors) - sum(
      len(v) for v in splits.values())
  if public is not None:
    stats['public_text'] = public
    # TensorFlow Datasets only when there is public text to prepare.
    from dpftrl_tff.data import public_corpus  # pylint: disable=g-import-not-at-top
    builder = public_corpus.public_text_builder(output_dir, prepare=True)
    stats['public_text']['tfds_data_dir'] = os.path.abspath(
        builder.data_dir_root)
  record = dict(settings=dataclasses.asdict(settings), source=source or {},
                stats=stats)
  strict_json.write(os.path.join(output_dir, CORPUS_RECORD_NAME), record)
  return stats
