"""Tests of a corpus build's progress lines (data/build_progress.py)."""

import lzma
import os
import random
import re
import tempfile

from absl.testing import absltest

from dpftrl_tff.data import build_progress
from dpftrl_tff.data import git_corpus
from tests import fixtures
from tests.data import git_corpus_test


class _Clock:

  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


class BuildProgressTest(absltest.TestCase):

  def test_lines_are_throttled_and_the_eta_is_the_rate_left(self):
    clock, lines = _Clock(), []
    progress = build_progress.BuildProgress(lines.append, every_seconds=10,
                                            clock=clock)
    share = [0.0]
    progress.set_read_share(lambda: share[0])
    progress.commit_read(1, 1)          # Starts the phase's clock.
    for commits in range(2, 2049):
      clock.now += 0.01                 # 20.47 s over 2048 commits.
      share[0] = commits / 8192
      progress.commit_read(commits, commits // 10)
    # Looked at every 256 commits: lines at 10.24 s and 20.48 s... only
    # when 10 s have passed since the last line.
    self.assertLen(lines, 2)
    self.assertEqual(lines[0], 'reading commits: 12% (1,024 commits, 102 '
                     'authors), 0m10s, ETA 1m12s')
    # At a quarter read after 20.47 s: three times as long left.
    self.assertEqual(lines[1], 'reading commits: 25% (2,048 commits, 204 '
                     'authors), 0m20s, ETA 1m01s')

  def test_without_a_share_the_line_gives_counts_only(self):
    clock, lines = _Clock(), []
    progress = build_progress.BuildProgress(lines.append, every_seconds=5,
                                            clock=clock)
    progress.set_read_share(lambda: None)
    progress.commit_read(1, 1)
    clock.now += 6
    progress.commit_read(512, 7)
    self.assertEqual(lines, ['reading commits: 512 commits, 7 authors, '
                             '0m06s'])

  def test_the_database_phase_has_its_own_clock(self):
    clock, lines = _Clock(), []
    progress = build_progress.BuildProgress(lines.append, every_seconds=1,
                                            clock=clock)
    progress.commit_read(1, 1)
    clock.now += 500                    # Reading took long.
    progress.reading_done()
    progress.author_written(1, 40, 0.01)   # Starts the phase's clock.
    clock.now += 30
    progress.author_written(10, 40, 0.25)  # The share: of the sentences.
    self.assertEqual(lines, ['writing the database: 25% (10 of 40 authors), '
                             '0m30s, ETA 1m30s'])


class _Recorder:
  """A progress that keeps the reader's share function."""

  def __init__(self):
    self.share = None

  def set_read_share(self, share):
    self.share = share


class ReadShareTest(absltest.TestCase):

  def test_git_log_share_is_commits_read_over_the_logs_count(self):
    repo = git_corpus_test.make_repo(num_commits_per_author=2)   # 24
    recorder = _Recorder()
    commits = git_corpus.read_git_log(repo, progress=recorder)
    next(commits)
    self.assertAlmostEqual(recorder.share(), 1 / 24)
    rest = list(commits)
    self.assertLen(rest, 23)
    self.assertEqual(recorder.share(), 1.0)

  def test_jsonl_share_is_the_files_bytes_read_compressed_or_not(self):
    folder = tempfile.mkdtemp()
    rng = random.Random(0)   # Text that does not compress to one buffer.
    rows = [dict(commit=str(k), author=f'a{k % 7}', date='2021-02-01',
                 message=f'change {k}: ' + ' '.join(
                     f'{rng.getrandbits(32):x}' for _ in range(20)))
            for k in range(3000)]
    plain = fixtures.write_jsonl(os.path.join(folder, 'c.jsonl'), rows)
    packed = os.path.join(folder, 'c.jsonl.xz')
    with open(plain, 'rb') as f, lzma.open(packed, 'wb') as g:
      g.write(f.read())
    for path in (plain, packed):
      recorder = _Recorder()
      commits = git_corpus.read_commits_jsonl(path, progress=recorder)
      shares = []
      for k, _ in enumerate(commits):
        if k % 500 == 0:
          shares.append(recorder.share())
      self.assertLen(shares, 6, path)
      self.assertEqual(shares, sorted(shares), path)
      self.assertLess(shares[0], 0.5, path)
      self.assertEqual(recorder.share(), 1.0, path)

  def test_progress_changes_nothing_in_the_corpus(self):
    repo = git_corpus_test.make_repo(num_commits_per_author=2)
    settings = git_corpus.BuildSettings(heldout_fraction=0.2,
                                        test_fraction=0.2,
                                        min_examples_per_client=2)
    lines = []
    progress = build_progress.BuildProgress(lines.append, every_seconds=0)
    with_lines, without = tempfile.mkdtemp(), tempfile.mkdtemp()
    git_corpus.build(with_lines, git_corpus.read_git_log(
        repo, progress=progress), settings, progress=progress)
    git_corpus.build(without, git_corpus.read_git_log(repo), settings)
    dump = git_corpus_test._dump  # pylint: disable=protected-access
    self.assertEqual(dump(with_lines), dump(without))
    # Every commit's first line, then one a written author (12 authors).
    self.assertRegex(lines[0], r'^reading commits: 4% \(1 commits, 0 '
                     r'authors\), 0m00s, ETA 0m00s$')
    writing = [line for line in lines if line.startswith('writing')]
    self.assertLen(writing, 12)
    self.assertTrue(re.match(r'writing the database: 100% \(12 of 12 '
                             r'authors\)', writing[-1]), writing[-1])


if __name__ == '__main__':
  absltest.main()
