"""Tests of the list flags' checks (`dpftrl_tff.checks`)."""

import math

from absl.testing import absltest

from dpftrl_tff import checks


class ListChecksTest(absltest.TestCase):

  def test_int_list_parses_and_bounds(self):
    self.assertEqual(checks.check_int_list(['3', '0', '12'], '--seeds',
                                           minimum=0), [3, 0, 12])
    self.assertEqual(checks.check_int_list([2, 5.0], '--goals'), [2, 5])
    for values, minimum, message in (
        (['1', 'a'], 0, "--x must be integers >= 0, got 'a'."),
        (['-1'], 0, "--x must be integers >= 0, got '-1'."),
        (['2.5'], None, "--x must be integers, got '2.5'."),
        ([True], None, '--x must be integers, got True.'),
        ([], 1, '--x must not be empty.')):
      with self.assertRaises(ValueError) as raised:
        checks.check_int_list(values, '--x', minimum=minimum)
      self.assertEqual(str(raised.exception), message)

  def test_positive_list_refuses_zero_and_not_finite(self):
    self.assertEqual(checks.check_positive_list(['0.5', '24'], '--t'),
                     [0.5, 24.0])
    for bad in ('0', '-1', 'nan', 'inf', 'x', math.inf):
      with self.assertRaisesRegex(ValueError, '--t must be numbers > 0'):
        checks.check_positive_list(['1', bad], '--t')
    with self.assertRaisesRegex(ValueError, '--t must not be empty'):
      checks.check_positive_list([], '--t')


if __name__ == '__main__':
  absltest.main()
