"""benchmarks.matmul_peak's peak: the better of oneDNN on and off."""

from absl.testing import absltest

from benchmarks import matmul_peak


class BestOfTest(absltest.TestCase):

  def test_the_better_setting_per_dtype(self):
    outputs = {
        'on': ('2048 x 2048 matmuls, 1 thread(s), best of 3, oneDNN on:\n'
               '  fp32:    79.9 GFLOP per CPU-second,    79.5 per wall '
               'second\n'
               '  bf16:    70.0 GFLOP per CPU-second,    69.0 per wall '
               'second\n'),
        'off': ('2048 x 2048 matmuls, 1 thread(s), best of 3, oneDNN off:\n'
                '  fp32:    76.6 GFLOP per CPU-second,    76.5 per wall '
                'second\n'
                '  bf16:    74.3 GFLOP per CPU-second,    74.0 per wall '
                'second\n')}
    self.assertEqual(matmul_peak.best_of(outputs),
                     {'fp32': (79.9, 79.5, 'on'), 'bf16': (74.3, 74.0, 'off')})

  def test_its_own_lines_are_not_read_as_a_peak(self):
    # The per-setting lines it prints are not taken for the peak line
    # (benchmarks.round_time reads the first 'fp32:' line).
    self.assertEqual(matmul_peak.best_of(
        {'on': '  fp32 (oneDNN on):    84.3 GFLOP per CPU-second,    84.3 '
               'per wall second\n'}), {})


if __name__ == '__main__':
  absltest.main()
