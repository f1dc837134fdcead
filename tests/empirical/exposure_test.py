"""Tests of the secret sharer's exposure (--canary_phrases)."""

import itertools
import math

from absl.testing import absltest
import numpy as np
from scipy import stats
import tensorflow as tf

from dpftrl_tff.data import stackoverflow
from dpftrl_tff.empirical import exposure

_BOS, _EOS, _SEQ = 7, 8, 6   # Words 1..5 (V = 5), pad 0, OOV 6.


def _bigram_logits(table):
  """A stand-in model: the logits of the next token depend on the last."""
  return lambda x: table[np.asarray(x)]


def _direct_log_perplexity(table, words):
  """- sum log p(w_i | previous), one softmax at a time (independent of
  `exposure.log_perplexities`' batching and indexing)."""
  total, previous = 0.0, _BOS
  for w in words:
    logits = table[previous].astype(np.float64)
    total -= logits[w] - math.log(np.sum(np.exp(logits)))
    previous = w
  return total


class ExposureTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.table = np.random.default_rng(0).normal(size=(9, 9)) * 2

  def test_log_perplexity_equals_the_direct_sum(self):
    words = np.array([[1, 2, 3], [5, 5, 1], [4, 1, 2]])
    x, y = exposure.sentence_ids(words, bos=_BOS, eos=_EOS,
                                 sequence_length=_SEQ)
    np.testing.assert_array_equal(x[0], [7, 1, 2, 3, 8, 0])
    np.testing.assert_array_equal(y[0], [1, 2, 3, 8, 0, 0])
    got = exposure.log_perplexities(_bigram_logits(self.table), x, y, 3,
                                    batch_size=2)
    want = [_direct_log_perplexity(self.table, w) for w in words]
    np.testing.assert_allclose(got, want, rtol=1e-12)

  def test_rank_exposure_equals_brute_force_over_the_whole_space(self):
    space = np.array(list(itertools.product(range(1, 6), repeat=3)))
    direct = np.array([_direct_log_perplexity(self.table, w) for w in space])
    x, y = exposure.sentence_ids(space, bos=_BOS, eos=_EOS,
                                 sequence_length=_SEQ)
    lps = exposure.log_perplexities(_bigram_logits(self.table), x, y, 3)
    for index in (0, 17, 64, 124):
      rank_exact = 1 + int(np.sum(direct < direct[index]))
      rank, rank_exposure, _ = exposure.exposures(lps[index], lps)
      self.assertEqual(rank, rank_exact)
      # Candidates = all of R: log2(|R| + 1) - log2 rank.
      self.assertAlmostEqual(rank_exposure,
                             math.log2(126) - math.log2(rank_exact))
    best = int(np.argmin(direct))
    self.assertAlmostEqual(exposure.exposures(lps[best], lps)[1],
                           math.log2(126))

  def test_extrapolated_exposure_is_the_normal_tail(self):
    candidates = np.random.default_rng(1).normal(10.0, 2.0, 100000)
    _, _, extrapolated = exposure.exposures(0.0, candidates)
    want = -stats.norm.logcdf(0.0, np.mean(candidates),
                              np.std(candidates)) / math.log(2)
    self.assertAlmostEqual(extrapolated, want, places=9)
    self.assertGreater(extrapolated, math.log2(100001))   # Past the cap.

  def test_marked_key_adds_the_phrase_batch(self):
    x, y = exposure.sentence_ids(np.array([[1, 2], [3, 4]]), bos=_BOS,
                                 eos=_EOS, sequence_length=_SEQ)
    real = tf.data.Dataset.from_tensors(
        (tf.ones([2, _SEQ], tf.int64), tf.ones([2, _SEQ], tf.int64)))
    marked = list(exposure.mark_dataset(
        real, tf.constant(stackoverflow.mark_round_keys(
            ['3:c'], ['c'], {'c': 1}, 'phrase')[0]), x, y))
    self.assertLen(marked, 2)
    np.testing.assert_array_equal(marked[1][0], x[1:2])
    np.testing.assert_array_equal(marked[1][1], y[1:2])
    self.assertLen(list(exposure.mark_dataset(real, tf.constant('3:c'), x,
                                              y)), 1)

  def test_choice_is_seeded_and_avoids_excluded_clients(self):
    a = exposure.choose(3, repeats=4, length=5, seed=2, num_clients=40,
                        num_words=100, exclude=range(20))
    self.assertEqual(a, exposure.choose(3, repeats=4, length=5, seed=2,
                                        num_clients=40, num_words=100,
                                        exclude=range(20)))
    clients = [c for group in a.clients for c in group]
    self.assertLen(set(clients), 12)
    self.assertGreaterEqual(min(clients), 20)
    self.assertTrue(all(1 <= w <= 100 for row in a.words for w in row))
    with self.assertRaisesRegex(ValueError, '--canary_phrase_repeats=30'):
      exposure.choose(3, repeats=30, length=5, seed=2, num_clients=40,
                      num_words=100)


if __name__ == '__main__':
  absltest.main()
