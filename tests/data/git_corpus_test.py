"""Tests of the git-history corpus (experiments.build_git_corpus)."""

import collections
import os
import random
import re
import sqlite3
import subprocess
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from dpftrl_tff import strict_json
from dpftrl_tff.data import data_flags
from dpftrl_tff.data import git_corpus
from dpftrl_tff.data import git_text
from dpftrl_tff.data import public_corpus
from dpftrl_tff.data import stackoverflow
from tests import fixtures

_AUTHORS = [(f'Author {i}', f'author{i}@example.org') for i in range(12)]

_MESSAGE = """area: fix the frobnicator for author {i}

The frobnicator broke when the widget was empty. This fixes it for
the common case, and keeps the old behaviour otherwise.

    $ git frob --now
    error: secret-code-line-{i}

diff --git a/frob.c b/frob.c
--- a/frob.c
+++ b/frob.c
@@ -1 +1 @@
-old diff line {i}
+new diff line {i}

See https://example.org/bug/{i} for the report by {email}.

Reported-by: Someone Else <reporter{i}@example.org>
Signed-off-by: {name} <{email}>
"""


def _git(repo, *args, env=None):
  subprocess.run(['git', '-C', repo, *args], check=True, capture_output=True,
                 env=env)


def make_repo(num_commits_per_author=6) -> str:
  repo = tempfile.mkdtemp()
  _git(repo, 'init', '-q')
  for k in range(num_commits_per_author):
    for i, (name, email) in enumerate(_AUTHORS):
      env = dict(os.environ, GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email,
                 GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email,
                 GIT_AUTHOR_DATE=f'2020-01-{1 + k:02d}T{i:02d}:00:00+00:00',
                 GIT_COMMITTER_DATE=f'2020-01-{1 + k:02d}T{i:02d}:00:00+00:00')
      _git(repo, 'commit', '-q', '--allow-empty', '-m',
           _MESSAGE.format(i=i, name=name, email=email) + f'\nround {k}',
           env=env)
  return repo


def _dump(cache_dir):
  con = sqlite3.connect(stackoverflow.database_path(cache_dir))
  try:
    return (con.execute('SELECT * FROM examples ORDER BY rowid').fetchall(),
            con.execute('SELECT * FROM client_metadata ORDER BY rowid'
                        ).fetchall())
  finally:
    con.close()


class MessageTest(absltest.TestCase):

  def test_trailers_diffs_code_urls_and_emails_are_dropped(self):
    sentences = git_text.message_sentences(_MESSAGE.format(
        i=3, name='Author 3', email='author3@example.org'))
    self.assertEqual(sentences, [
        'area : fix the frobnicator for author 3',
        'the frobnicator broke when the widget was empty .',
        'this fixes it for the common case , and keeps the old behaviour '
        'otherwise .',
        'see for the report by .'])

  def test_merges_are_dropped_and_bullets_split(self):
    self.assertEqual(git_text.message_sentences(
        "Merge branch 'topic' into next\n\n* topic:\n  foo"), [])
    self.assertEqual(git_text.message_sentences(
        'doc: two items\n\n * first item,\n   wrapped\n * second one'),
                     ['doc : two items', 'first item , wrapped',
                      'second one'])

  def test_tokens_are_stackoverflow_style(self):
    self.assertEqual(git_text.tokenize("Don't call foo.c's frob() now!"),
                     ['do', "n't", 'call', 'foo.c', "'s", 'frob', '(', ')',
                      'now', '!'])

  def test_words_of_any_script_are_tokens(self):
    decomposed_e = 'e\u0301'   # "e" and a combining acute accent (NFD)
    cases = {
        'F\u00fcge Unterst\u00fctzung f\u00fcr \u00c4rger hinzu.':
            ['f\u00fcge', 'unterst\u00fctzung', 'f\u00fcr',
             '\u00e4rger', 'hinzu', '.'],
        f'Donn{decomposed_e}es r{decomposed_e}elles, caf\u00e9-cr\u00e8me':
            ['donn\u00e9es', 'r\u00e9elles', ',',
             'caf\u00e9-cr\u00e8me'],
        '\u0418\u0441\u043f\u0440\u0430\u0432\u0438\u0442\u044c '
        '\u043e\u0448\u0438\u0431\u043a\u0443':
            ['\u0438\u0441\u043f\u0440\u0430\u0432\u0438\u0442\u044c',
             '\u043e\u0448\u0438\u0431\u043a\u0443'],
        # Hindi: vowel signs and the virama are combining marks.
        '\u0939\u093f\u0928\u094d\u0926\u0940 \u0938\u0941\u0927'
        '\u093e\u0930':
            ['\u0939\u093f\u0928\u094d\u0926\u0940',
             '\u0938\u0941\u0927\u093e\u0930'],
        # Chinese and Japanese: an ideograph or kana a token.
        '\u4fee\u590d\u9519\u8bef\u3002': ['\u4fee', '\u590d', '\u9519',
                                         '\u8bef', '\u3002'],
        '\u30d0\u30b0\u3092\u4fee\u6b63': ['\u30d0', '\u30b0',
                                         '\u3092', '\u4fee', '\u6b63'],
        # Thai, Lao, Khmer, Myanmar: no word boundaries written and no
        # segmenter shipped, a grapheme a token (vowel signs and tone marks
        # stay on their consonant, a stacked consonant on the one above).
        '\u0e41\u0e01\u0e49\u0e44\u0e02 config.py':
            ['\u0e41', '\u0e01\u0e49', '\u0e44', '\u0e02', 'config.py'],
        '\u0ec1\u0e81\u0ec9\u0ec4\u0e82': ['\u0ec1', '\u0e81\u0ec9',
                                          '\u0ec4', '\u0e82'],
        '\u1780\u17d2\u179a\u17bb\u1798': ['\u1780\u17d2\u179a\u17bb',
                                          '\u1798'],
        '\u1019\u103c\u1014\u103a\u1019\u102c': [
            '\u1019\u103c', '\u1014\u103a', '\u1019\u102c'],
        # Korean writes spaces between words.
        '\ubc84\uadf8\ub97c \uc218\uc815': ['\ubc84\uadf8\ub97c',
                                          '\uc218\uc815'],
        'fix \u03c3 \u221a\u03c0 \U0001f680 v2.0': [
            'fix', '\u03c3', '\u221a', '\u03c0', '\U0001f680', 'v2.0'],
        "Ren\u00e9's patch didn't": ['ren\u00e9', "'s", 'patch', 'did',
                                      "n't"],
    }
    for text, tokens in cases.items():
      self.assertEqual(git_text.tokenize(text), tokens, text)

  def test_ascii_text_tokenizes_as_the_general_pattern(self):
    # ASCII text takes a shorter pattern; it must find the same tokens.
    rng = random.Random(0)
    alphabet = "ab9Z_-.'` ()!?:;,\t\n/@#ntsrevldm"
    for _ in range(3000):
      text = ''.join(rng.choice(alphabet)
                     for _ in range(rng.randint(0, 30))).lower()
      self.assertEqual(git_text._ASCII_TOKEN_RE.findall(text),
                       git_text._token_re().findall(text), repr(text))

  def test_cjk_sentences_end_at_their_marks(self):
    self.assertEqual(
        git_text.message_sentences('\u4fee\u590d\u9519\u8bef\u3002\u6dfb'
                                   '\u52a0\u529f\u80fd\uff01\u5b8c\u6210'),
        ['\u4fee \u590d \u9519 \u8bef \u3002',
         '\u6dfb \u52a0 \u529f \u80fd \uff01', '\u5b8c \u6210'])

  def test_sentences_of_other_scripts_end_at_their_marks(self):
    # Devanagari's danda and the Arabic question mark before a space;
    # Khmer's khan without one; a space between Thai characters.
    self.assertEqual(
        git_text.message_sentences('\u0920\u0940\u0915 \u0939\u0948\u0964 '
                                   '\u0905\u092c \u0920\u0940\u0915\u0964'),
        ['\u0920\u0940\u0915 \u0939\u0948 \u0964',
         '\u0905\u092c \u0920\u0940\u0915 \u0964'])
    self.assertEqual(
        git_text.message_sentences('\u0647\u0644 \u062a\u0645\u061f '
                                   '\u0646\u0639\u0645 \u062a\u0645'),
        ['\u0647\u0644 \u062a\u0645 \u061f', '\u0646\u0639\u0645 '
         '\u062a\u0645'])
    self.assertEqual(
        git_text.message_sentences('\u1787\u17bd\u179f\u17d4\u1794\u1793'
                                   '\u17d2\u1790\u17c2\u1798'),
        ['\u1787\u17bd \u179f \u17d4', '\u1794 \u1793\u17d2\u1790\u17c2 '
         '\u1798'])
    self.assertEqual(
        git_text.message_sentences('\u0e41\u0e01\u0e49\u0e44\u0e02 '
                                   'config \u0e41\u0e25\u0e49\u0e27 '
                                   '\u0e40\u0e1e\u0e34\u0e48\u0e21\u0e01'),
        ['\u0e41 \u0e01\u0e49 \u0e44 \u0e02 config \u0e41 \u0e25\u0e49 '
         '\u0e27', '\u0e40 \u0e1e\u0e34\u0e48 \u0e21 \u0e01'])

  def test_line_ends_of_any_platform(self):
    expected = ['fix the thing now', 'body text is here .', 'and more .']
    for end in ('\n', '\r\n', '\r'):
      message = end.join(['Fix the thing now', '', 'Body text is here. And '
                          'more.', '', 'Signed-off-by: A <a@b.c>', ''])
      self.assertEqual(git_text.message_sentences(message), expected,
                       repr(end))
      self.assertEqual(git_text.document_sentences(message.replace(
          'Signed-off-by: A <a@b.c>', '')), ['fix the thing now'] +
                       expected[1:], repr(end))

  def test_tags_and_emails_end_where_they_should(self):
    # A tag is "<" to the next ">" without another "<" between; an e-mail
    # address is removed whole, from the start of its local part.
    self.assertEqual(git_text.document_sentences(
        'Read <<naming-commits>> and the <b>bold</b> text here.\n'),
                     ['read < > and the bold text here .'])
    self.assertEqual(git_text.message_sentences(
        'fix: mail from <a.b+c@x-y.org> and x.foo@bar.com is dropped'),
                     ['fix : mail from and is dropped'])

  def test_html_pages_are_their_prose(self):
    page = ('<!DOCTYPE html><html><head><title>Widget</title><style>p {}'
            '</style></head><body><h1>Using the widget</h1>\n<p>This page '
            'explains the widget &amp; its parts. It is\nsafe when <code>'
            'empty</code>.</p><pre>$ widget --run\nsecret output</pre><ul>'
            '<li>First item here now</li><li>Second item too</li></ul>'
            '<script>var hidden = 1;</script></body></html>')
    self.assertEqual(git_text.document_sentences(git_text.html_text(page)), [
        'using the widget', 'this page explains the widget & its parts .',
        'it is safe when empty .', 'first item here now', 'second item too'])

  def test_documents_drop_markup_and_blocks(self):
    text = ('= Title of the page\n:toc:\n\nSome prose here, and more.\n'
            '----\n$ code block line\n----\n[verse]\n'
            'Another sentence with `git log` here.\n\n    indented code\n')
    self.assertEqual(git_text.document_sentences(text), [
        'title of the page', 'some prose here , and more .',
        'another sentence with git log here .'])


class BuildTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.repo = make_repo()

  def _build_here(self, **settings):
    """The corpus built in this process (as the binary does)."""
    out = tempfile.mkdtemp()
    git_corpus.build(out, git_corpus.read_git_log(self.repo),
                     git_corpus.BuildSettings(heldout_fraction=0.2,
                                              test_fraction=0.2, **settings))
    return out

  def _build(self, seed=0, **kwargs):
    out = tempfile.mkdtemp()
    proc = fixtures.run_module(
        'experiments.build_git_corpus', f'--git_repo={self.repo}',
        f'--output_dir={out}', f'--seed={seed}', '--heldout_fraction=0.2',
        '--test_fraction=0.2', *[f'--{k}={v}' for k, v in kwargs.items()])
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    return out, proc.stdout

  def test_git_repo_loads_through_tff_and_is_deterministic(self):
    out, stdout = self._build(seed=4)
    self.assertIn('train', stdout)
    self.assertIn('clients', stdout)
    self.assertIn('cover', stdout)
    self.assertRegex(stdout, r'Train sentences: median \d+ tokens')
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    train, heldout, test = tff.simulation.datasets.stackoverflow.load_data(
        cache_dir=out)
    self.assertEqual((len(train.client_ids), len(heldout.client_ids),
                      len(test.client_ids)), (8, 2, 2))
    tokens = [ex['tokens'].numpy().decode() for ex in
              train.create_tf_dataset_for_client(train.client_ids[0])]
    self.assertLen(tokens, 6 * 5)   # 5 sentences in each of 6 commits.
    self.assertIn('the frobnicator broke when the widget was empty .',
                  tokens)
    # Word counts: the train split's, most frequent first.
    vocab = stackoverflow.load_vocab(out, 5)
    self.assertEqual(vocab[0], 'the')
    # The same seed gives the same database; another seed other splits.
    again = self._build_here(seed=4)   # Another salt, the same database.
    self.assertEqual(_dump(out), _dump(again))
    other = self._build_here(seed=5)
    self.assertNotEqual(_dump(out)[0], _dump(other)[0])
    # No identity, no dropped text anywhere in the output.
    blobs = open(stackoverflow.database_path(out), 'rb').read()
    blobs += open(os.path.join(out, stackoverflow.WORD_COUNTS_NAME), 'rb').read()
    blobs += open(os.path.join(out, 'corpus.json'), 'rb').read()
    for name, email in _AUTHORS:
      self.assertNotIn(email.encode(), blobs)
      self.assertNotIn(email.split('@')[0].encode(), blobs)
    for dropped in (b'secret-code-line', b'diff line', b'example.org',
                    b'reporter', b'signed-off-by'):
      self.assertNotIn(dropped, blobs.lower())
    strict_json.load(os.path.join(out, 'corpus.json'))

  def test_github_apps_are_left_out_unless_asked(self):
    repo = make_repo(num_commits_per_author=1)
    bot = ('dependabot[bot]',
           '49699333+dependabot[bot]@users.noreply.github.com')
    for k in range(10):
      env = dict(os.environ, GIT_AUTHOR_NAME=bot[0], GIT_AUTHOR_EMAIL=bot[1],
                 GIT_COMMITTER_NAME='GitHub', GIT_COMMITTER_EMAIL='n@x.org')
      _git(repo, 'commit', '-q', '--allow-empty', '-m',
           f'Bump lodash from 4.17.{k} to 4.17.{k + 1}\n\nBumps lodash '
           'from the old version to the new version.', env=env)
    commits = list(git_corpus.read_git_log(
        repo, exclude=git_corpus.BuildSettings().exclusion()))
    self.assertEqual(sum(c.excluded for c in commits), 10)
    # The binary leaves them out and says so.
    out = tempfile.mkdtemp()
    proc = fixtures.run_module(
        'experiments.build_git_corpus', f'--git_repo={repo}',
        f'--output_dir={out}', '--min_examples_per_client=1')
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn('Left out before that: 1 author(s) matching '
                  '--exclude_authors_matching=\\[bot\\] (10 commits)',
                  proc.stdout)
    record = strict_json.load(os.path.join(out, 'corpus.json'))
    self.assertEqual((record['stats']['authors'],
                      record['stats']['authors_excluded']), (12, 1))
    self.assertNotIn('lodash', stackoverflow.load_vocab(out, 10**6))
    # An empty pattern keeps every author.
    kept = tempfile.mkdtemp()
    git_corpus.build(kept, git_corpus.read_git_log(repo),
                     git_corpus.BuildSettings(min_examples_per_client=1,
                                              exclude_authors_matching=''))
    self.assertIn('lodash', stackoverflow.load_vocab(kept, 10**6))
    # A JSON-lines export's author field is matched the same way.
    jsonl = fixtures.write_jsonl(
        os.path.join(tempfile.mkdtemp(), 'c.jsonl'),
        [dict(author=a, date='2021-01-01', message='Update the lock file')
         for a in ('renovate[bot]', 'alice@example.org', 'Renovate[BOT] <x>')])
    self.assertEqual([c.excluded for c in git_corpus.read_commits_jsonl(
        jsonl, exclude=git_corpus.BuildSettings().exclusion())],
                     [True, False, True])
    # A history of automated authors only is one clear line.
    with self.assertRaisesRegex(git_corpus.CorpusError,
                                r'All 72 commits are by authors matching '
                                r'--exclude_authors_matching=\.'):
      git_corpus.build(tempfile.mkdtemp(), git_corpus.read_git_log(
          self.repo, exclude=re.compile('.')), git_corpus.BuildSettings(
              exclude_authors_matching='.'))

  def test_word_counts_by_tokens_or_by_authors(self):
    for mode in git_corpus.WORD_COUNT_MODES:
      out = self._build_here(count_words_by=mode)
      # Brute force from the database: the train split's words per client.
      with sqlite3.connect(stackoverflow.database_path(out)) as con:
        rows = con.execute("SELECT client_id, serialized_example_proto FROM "
                           "examples WHERE split_name = 'train'").fetchall()
      tokens, authors = collections.Counter(), collections.defaultdict(set)
      for client, blob in rows:
        words = tf.train.Example.FromString(blob).features.feature[
            'tokens'].bytes_list.value[0].decode().split(' ')
        tokens.update(words)
        for w in words:
          authors[w].add(client)
      expected = (tokens if mode == 'tokens' else
                  collections.Counter({w: len(c) for w, c in authors.items()}))
      ranked = sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))
      with open(os.path.join(out, stackoverflow.WORD_COUNTS_NAME)) as f:
        self.assertEqual(f.read(), ''.join(f'{w} {c}\n' for w, c in ranked),
                         mode)
    # By authors no count exceeds the train authors.
    self.assertLessEqual(ranked[0][1], len({c for c, _ in rows}))
    self.assertGreater(max(tokens.values()), ranked[0][1])

  def test_the_log_is_read_the_same_in_any_chunk_size(self):
    # Streamed: records cut across chunks join up.
    commits = list(git_corpus.read_git_log(self.repo, hasher=str))
    self.assertLen(commits, 72)
    with mock.patch.object(git_corpus, '_LOG_CHUNK_BYTES', 7):
      self.assertEqual(list(git_corpus.read_git_log(self.repo, hasher=str)),
                       commits)

  def test_date_split_trains_on_the_oldest_authors(self):
    rows = _dump(self._build_here(split='date'))[1]
    # Client ids follow the first commit; date split: oldest train.
    self.assertEqual([r[1] for r in rows], ['train'] * 8 + ['heldout'] * 2 +
                     ['test'] * 2)

  def test_messages_in_other_encodings_are_text(self):
    repo = tempfile.mkdtemp()
    _git(repo, 'init', '-q')
    env = dict(os.environ, GIT_AUTHOR_NAME='A', GIT_AUTHOR_EMAIL='a@x.org',
               GIT_COMMITTER_NAME='A', GIT_COMMITTER_EMAIL='a@x.org')
    message = os.path.join(tempfile.mkdtemp(), 'message')
    # A Latin-1 repository (its messages recorded as Latin-1, and git log
    # asked to print Latin-1 by the repository's own configuration), then a
    # Latin-1 message stored as if it were UTF-8 (no encoding header).
    _git(repo, 'config', 'i18n.commitEncoding', 'ISO-8859-1')
    _git(repo, 'config', 'i18n.logOutputEncoding', 'ISO-8859-1')
    for text in ('Corrige le caf\u00e9 de la f\u00eate',
                 'Na\u00efve d\u00e9j\u00e0 vu'):
      with open(message, 'wb') as f:
        f.write(text.encode('latin-1'))
      _git(repo, 'commit', '-q', '--allow-empty', '-F', message, env=env)
      _git(repo, 'config', 'i18n.commitEncoding', 'UTF-8')
    messages = sorted(c.message.strip()
                      for c in git_corpus.read_git_log(repo))
    self.assertEqual(messages, ['Corrige le caf\u00e9 de la f\u00eate',
                                'Na\u00efve d\u00e9j\u00e0 vu'])

  def test_authors_are_ordered_by_time_across_utc_offsets(self):
    # 10:00 at +09:00 is 01:00 UTC, before 05:00 UTC, though its text sorts
    # after it; a date without an offset is UTC.
    commits = [git_corpus.Commit(f'{who}{k}', who, date,
                                 f'{who} wrote change {k}')
               for who, date in (('late', '2020-01-01T05:00:00+00:00'),
                                 ('early', '2020-01-01T10:00:00+09:00'),
                                 ('last', '2020-01-01 06:00'))
               for k in range(2)]
    settings = git_corpus.BuildSettings(split='date', heldout_fraction=0.3,
                                        test_fraction=0.3,
                                        min_examples_per_client=1)
    splits = git_corpus.assign_splits(
        git_corpus.group_by_author(commits, settings), settings)
    self.assertEqual([a.sentences[0][2].split()[0] for split in
                      ('train', 'heldout', 'test') for a in splits[split]],
                     ['early', 'late', 'last'])

  def test_a_byte_order_mark_is_not_text(self):
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, 'commits.jsonl')
    with open(path, 'w', encoding='utf-8-sig') as f:
      f.write('{"author": "a", "date": "2020-01-01", "message": "x y"}\n')
    self.assertEqual([c.message for c in git_corpus.read_commits_jsonl(
        path, hasher=str)], ['x y'])
    with open(os.path.join(folder, 'page.md'), 'w',
              encoding='utf-8-sig') as f:
      f.write('Some words here.')
    self.assertEqual([d['text'] for d in git_corpus.read_docs_dir(folder)],
                     ['Some words here.'])

  def test_bad_inputs_are_one_line(self):
    not_repo = tempfile.mkdtemp()
    empty_repo = tempfile.mkdtemp()
    _git(empty_repo, 'init', '-q')
    bad_jsonl = os.path.join(tempfile.mkdtemp(), 'c.jsonl')
    with open(bad_jsonl, 'w') as f:
      f.write('{"author": "a", "date": "2020-01-01", "message": "x y"}\n'
              '{"author": 3}\n')
    few_docs = fixtures.write_jsonl(
        os.path.join(tempfile.mkdtemp(), 'docs.jsonl'),
        [dict(path='a.md', text='The widget is safe. It keeps its data.')])
    bad_date = os.path.join(tempfile.mkdtemp(), 'c.jsonl')
    with open(bad_date, 'w') as f:
      f.write('{"author": "a", "date": "2020-01-01T10:00:00Z", "message": '
              '"x y"}\n{"author": "a", "date": "Thu Apr 7 15:13:13 2005 '
              '-0700", "message": "x y"}\n')
    one_author = fixtures.write_jsonl(
        os.path.join(tempfile.mkdtemp(), 'one.jsonl'),
        [dict(author='a', date=f'2020-01-0{k + 1}',
              message=f'Change {k} of the widget so it keeps its data.')
         for k in range(8)])
    settings = git_corpus.BuildSettings
    for build, expected in (
        (lambda: list(git_corpus.read_docs_dir(not_repo)),
         'no documentation files there'),
        (lambda: list(git_corpus.read_git_log(not_repo)),
         'not a git repository'),
        (lambda: list(git_corpus.read_git_log(empty_repo)), 'no commits'),
        (lambda: list(git_corpus.read_commits_jsonl(bad_jsonl)),
         'line 2: no string field'),
        (lambda: list(git_corpus.read_commits_jsonl(bad_date)),
         "line 2: date 'Thu Apr 7 .* is not ISO 8601"),
        (lambda: self._build_here(min_examples_per_client=1000), 'too few'),
        (lambda: git_corpus.build(
            tempfile.mkdtemp(), git_corpus.read_commits_jsonl(one_author),
            git_corpus.BuildSettings(min_examples_per_client=1)),
         'The history has 1 author\\(s\\): a corpus needs at least 3'),
        # Too little public text for its validation split (every 20th):
        # refused before the database is written (it was TFDS's traceback).
        (lambda: git_corpus.build(
            tempfile.mkdtemp(), git_corpus.read_git_log(self.repo),
            git_corpus.BuildSettings(heldout_fraction=0.2, test_fraction=0.2),
            documents=git_corpus.read_docs_jsonl(few_docs)),
         'has 2 sentence\\(s\\) of at least 3 tokens: public text needs 20'),
        (lambda: settings(heldout_fraction=0.9).validate(),
         '--heldout_fraction'),
        (lambda: settings(split='time').validate(), '--split'),
        (lambda: settings(count_words_by='users').validate(),
         "--count_words_by='users': use one of tokens, authors"),
        (lambda: settings(exclude_authors_matching='[bot').validate(),
         "--exclude_authors_matching='\\[bot': not a regular expression")):
      with self.assertRaisesRegex(ValueError, expected):
        build()
    # The binary turns them into one line (the error, no traceback).
    cases = (([f'--git_repo={not_repo}'], 'not a git repository'),
             ([f'--git_repo={self.repo}', '--exclude_authors_matching=(bot'],
              "--exclude_authors_matching='(bot': not a regular"),
             ([], 'exactly one of --git_repo and --commits_jsonl'))
    procs = fixtures.run_module_cases(
        'experiments.build_git_corpus',
        [[f'--output_dir={tempfile.mkdtemp()}', *args] for args, _ in cases])
    for (args, expected), proc in zip(cases, procs):
      fixtures.assert_refused(self, proc, expected, context=args)
      self.assertLen(fixtures.own_lines(proc.stderr), 1, proc.stderr)


class JsonlAndPublicTextTest(absltest.TestCase):

  def test_jsonl_export_and_docs_become_corpus_and_public_text(self):
    folder = tempfile.mkdtemp()
    commits = fixtures.write_jsonl(os.path.join(folder, 'commits.jsonl'), [
        dict(commit=f'{k}{i}', author=f'hash{i}', date=f'2021-02-0{1 + k}',
             message=f'topic{i}: change number {k}\n\nIt does {k} things '
             f'well. Signed-off-by: x\n' + (
                 ' '.join(['word'] * (15 + 3 * i)) + '.\n' if k == 0
                 else ''))
        for k in range(6) for i in range(10)])
    docs = fixtures.write_jsonl(os.path.join(folder, 'docs.jsonl'), [
        dict(path=f'doc{d}.adoc', text=(
            f'= Document {d}\n\nThis is public prose number {d}. '
            'It talks about many things at length.\n') * 5)
        for d in range(5)] + [dict(path='site/page.HTML', text=(
            '<p>An HTML page of public prose.</p><script>var secret_code = '
            '1;</script>'))])
    out = os.path.join(folder, 'corpus')
    stats = git_corpus.build(
        out, git_corpus.read_commits_jsonl(commits),
        git_corpus.BuildSettings(heldout_fraction=0.2, test_fraction=0.2),
        documents=git_corpus.read_docs_jsonl(docs))
    self.assertEqual(stats['splits']['train']['clients'], 6)
    self.assertEqual(stats['public_text']['files'], 6)
    # Sentence lengths, against the database's train sentences read back.
    with sqlite3.connect(stackoverflow.database_path(out)) as con:
      lengths = [len(tf.train.Example.FromString(row[0]).features.feature[
          'tokens'].bytes_list.value[0].split()) for row in con.execute(
              "SELECT serialized_example_proto FROM examples WHERE "
              "split_name = 'train'")]
    self.assertEqual(stats['splits']['train']['tokens_per_sentence']['max'],
                     max(lengths))
    self.assertGreater(max(lengths), 20)
    self.assertAlmostEqual(stats['train_sentences_longer_than']['20'],
                           np.mean(np.asarray(lengths) > 20))
    self.assertGreater(stats['train_sentences_longer_than']['20'], 0)
    with open(os.path.join(out, git_corpus.PUBLIC_TEXT_NAME)) as f:
      public = f.read().splitlines()
    self.assertIn('an html page of public prose .', public)
    self.assertNotIn('secret_code', ' '.join(public))
    # public.word_count: the public text's words counted, most frequent
    # first, ties by word; a vocabulary file as training reads it.
    counts = collections.Counter(w for s in public for w in s.split(' '))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    path = os.path.join(out, git_corpus.PUBLIC_WORD_COUNTS_NAME)
    with open(path, encoding='utf-8') as f:
      self.assertEqual(f.read(), ''.join(f'{w} {c}\n' for w, c in ranked))
    self.assertEqual(stats['public_text']['word_counts_path'], path)
    self.assertEqual(stats['public_text']['distinct_words'], len(ranked))
    self.assertEqual(stackoverflow.load_word_counts_file(path, 5),
                     [w for w, _ in ranked[:5]])
    # No word of a commit message that the documentation lacks.
    self.assertNotIn('secret_code', counts)
    # Training's data loading takes it as its vocabulary and says so.
    printed = []
    data = data_flags.load(
        data_flags.DataSettings(cache_dir=out, word_counts_path=path),
        tempfile.mkdtemp(), vocab_size=len(ranked) + 5,
        print_fn=printed.append)
    self.assertEqual(data.vocab, [w for w, _ in ranked])
    self.assertEqual(data.description['word_counts_path'], path)
    self.assertEqual(printed, [
        f'Note: --word_counts_path={path} has only {len(ranked)} distinct '
        f'words; --vocab_size={len(ranked) + 5} keeps ids for all of them.'])
    stackoverflow.check_database(out)
    # The public text reads back through the project's TFDS builder,
    # tokenized as the federated data (punctuation kept as tokens).
    builder = public_corpus.public_text_builder(out)
    got = [s.numpy().decode() for s in public_corpus.sentences(builder)]
    self.assertIn('this is public prose number 0 .', got)
    self.assertEqual(len(got) + len(list(public_corpus.sentences(
        builder, 'validation'))), stats['public_text']['sentences'])
    tf.debugging.assert_equal(len(got) > 0, True)


if __name__ == '__main__':
  absltest.main()
