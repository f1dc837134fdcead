"""Tests of the privacy report (privacy_report.md)."""

import math

from absl.testing import absltest

from dpftrl_tff import accounting
from dpftrl_tff.data import git_corpus
from dpftrl_tff.privacy import privacy_report


def assert_report_matches(test, text, privacy):
  """Every accounted figure printed in `text` equals `privacy`'s value."""
  printed = privacy_report.parse_figures(text)
  test.assertLen(printed, len(privacy_report.FIGURES))
  for label, key, fmt in privacy_report.FIGURES:
    test.assertEqual(printed[label],
                     privacy_report.number(privacy[key], fmt), label)
    value = privacy[key]
    if isinstance(value, float) and math.isfinite(value):
      test.assertAlmostEqual(float(printed[label]) / value, 1.0, places=5,
                             msg=label)
  if 'noise_seed' in privacy:   # A fixed noise seed: no statement.
    test.assertIn('No differential privacy guarantee', text)
    test.assertNotIn('-zCDP, hence', text)
  else:
    test.assertIn(f'{privacy_report.number(privacy["zcdp"], ".6g")}-zCDP',
                  text)


def render(privacy, **kwargs):
  return privacy_report.render(
      privacy, subject='run /tmp/x', participation='min_sep_groups ...',
      clipping='fixed l2 clip norm C = 1', released='the weights.',
      **kwargs)


class PrivacyReportTest(absltest.TestCase):

  def test_tree_with_restarts_adaptive_and_secagg(self):
    privacy = accounting.compute_privacy(
        rounds=2000, noise_multiplier=7.0, min_separation=212,
        max_participation=4, restart_rounds=[1024],
        clipped_count_stddev=325.0, secagg_scale=1000.0, model_dim=20000,
        clip_norm=5.0).as_dict()
    text = render(privacy)
    assert_report_matches(self, text, privacy)
    for phrase in ('zero-out', 'Unit of privacy: the device',
                   'Central DP', 'tree restarts at rounds 1024',
                   'C_inflated', 'z_Delta', 'Not measured',
                   # Evaluation on held-out clients is a data access too.
                   'Not covered: hyperparameter tuning, the evaluation '
                   'metrics (computed without noise on held-out clients\''):
      self.assertIn(phrase, text)
    self.assertIn(f'{privacy["secagg"]["inflated_clip_norm"]:.6g}', text)

  def test_blt_names_its_parameters(self):
    blt = accounting.BLT(buf_decay=[0.9], output_scale=[0.3])
    privacy = accounting.compute_privacy(
        rounds=100, noise_multiplier=2.0, min_separation=9,
        max_participation=5, blt=blt).as_dict()
    text = render(privacy)
    assert_report_matches(self, text, privacy)
    self.assertIn('BLT-DP-FTRL', text)
    self.assertIn('buffer decays [0.9]', text)
    self.assertNotIn('tree aggregation', text)

  def test_launch_equivalent_is_labelled_not_the_runs(self):
    privacy = accounting.compute_privacy(
        rounds=10, noise_multiplier=1.0, min_separation=0).as_dict()
    launch = dict(privacy, report_goal=6500, population=4210000,
                  population_min_separation=646)
    text = render(privacy, launch_equivalent=launch)
    self.assertIn("NOT this run's guarantee", text)
    self.assertIn('report goal 6500', text)

  def test_no_noise_says_no_guarantee(self):
    text = render(None)
    self.assertIn('No differential privacy guarantee', text)
    self.assertEqual(privacy_report.parse_figures(text), {})

  def test_non_finite_is_never_a_number(self):
    privacy = accounting.compute_privacy(
        rounds=10, noise_multiplier=1.0, with_epsilon=False).as_dict()
    self.assertTrue(math.isnan(privacy['epsilon']))
    text = render(privacy)
    self.assertEqual(privacy_report.parse_figures(text)['epsilon (PLD)'],
                     'nan')
    self.assertEqual(privacy_report.number(float('inf'), '.3g'), 'inf')
    self.assertEqual(privacy_report.number(None, '.3g'), '-')

  def test_empirical_estimate_is_labelled_an_estimate(self):
    privacy = accounting.compute_privacy(
        rounds=10, noise_multiplier=1.0).as_dict()
    text = render(privacy, empirical=dict(
        empirical_epsilon=1.25, epsilon_interval=[0.9, 1.6],
        confidence=0.95, interval_method='bootstrap', seen_canaries=100,
        unseen_canaries=100, delta=1e-10, threat_model='final model'))
    self.assertIn('epsilon 1.25, 95% interval [0.9, 1.6]', text)
    self.assertIn('not a guarantee', text)
    # What an audit can catch, as measured, beside every estimate.
    self.assertIn('caught a noise cut to a quarter in every audit of up to 4 '
                  'rounds', ' '.join(text.split()))
    self.assertIn('is no evidence that the noise is right', text)


def _vocabulary_text(data):
  """The report's vocabulary line for a run whose hparams.json holds
  `data` (as training writes it: through summary.json's `vocabulary`)."""
  return privacy_report.vocabulary_line(
      privacy_report.vocabulary_summary(data))


class VocabularyTest(absltest.TestCase):
  """The report's vocabulary line: the model's vocabulary is released with
  it, and the DP mechanism covers it only when it was fixed without the
  clients' data."""

  def setUp(self):
    super().setUp()
    self.privacy = accounting.compute_privacy(
        rounds=100, noise_multiplier=2.0, min_separation=9,
        max_participation=5).as_dict()

  def test_counted_from_the_clients_is_not_covered(self):
    data = dict(source='stackoverflow', database='/d/stackoverflow.sqlite',
                vocab_words=10000, word_counts_path=None)
    text = render(self.privacy,
                  vocabulary=_vocabulary_text(data))
    self.assertIn('- Vocabulary: the 10,000 most frequent words of the '
                  "training clients' text", text)
    self.assertIn('this guarantee does not cover it', text)
    # The way out it names is the file build_git_corpus writes.
    self.assertIn(git_corpus.PUBLIC_WORD_COUNTS_NAME, text)
    assert_report_matches(self, text, self.privacy)

  def test_summary_says_true_only_for_the_clients_counts(self):
    database = dict(database='/d/stackoverflow.sqlite', vocab_words=50)
    self.assertEqual(privacy_report.vocabulary_summary(
        dict(database, word_counts_path=None)),
        dict(words=50, word_counts_path=None, counted_from_clients=True))
    self.assertIsNone(privacy_report.vocabulary_summary(dict(
        database, word_counts_path='/p'))['counted_from_clients'])
    self.assertIsNone(
        privacy_report.vocabulary_summary(None)['counted_from_clients'])

  def test_a_given_file_is_covered_only_if_made_without_the_clients(self):
    data = dict(source='stackoverflow', database='/d/stackoverflow.sqlite',
                vocab_words=4000, word_counts_path='/c/public.word_count')
    line = _vocabulary_text(data)
    self.assertIn('the first 4,000 words of --word_counts_path='
                  '/c/public.word_count', line)
    self.assertIn('covers the vocabulary only if that file was made without '
                  "the clients' data", line)
    self.assertNotIn('does not cover', line)

  def test_unrecorded_source_and_launch_and_audit(self):
    self.assertIn('its source was not recorded',
                  _vocabulary_text(None))
    launch = render(self.privacy, kind='launch')
    # A simulation's client is its data's; a launch's is a device.
    self.assertIn('one person committing under two e-mails is two clients',
                  render(self.privacy, vocabulary=_vocabulary_text(None)))
    self.assertNotIn('e-mail', launch)
    # Nor in a mechanism audit (random vectors, no corpus).
    self.assertNotIn('e-mail', render(self.privacy))
    self.assertIn('- Vocabulary: ' + privacy_report.LAUNCH_VOCABULARY,
                  launch)
    # A mechanism audit releases no vocabulary: no line.
    self.assertNotIn('Vocabulary', render(self.privacy))


if __name__ == '__main__':
  absltest.main()
