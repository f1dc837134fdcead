"""The fast tree accountant against the short reference (property-based).

`accounting/tree_reference.py` is the readable, exact reference (its
docstring has the proof); it equals the exponential brute force on every
small case, and the fast `tree.max_sensitivity_squared` must equal it on
random (T, MinS, MaxP, restarts), binding and non-binding MaxP alike.
"""

from absl.testing import absltest
import hypothesis
from hypothesis import strategies as st

from dpftrl_tff.accounting import tree
from tests.reference import tree_brute_force
from tests.reference import tree_reference


@st.composite
def configurations(draw, max_rounds=64):
  rounds = draw(st.integers(1, max_rounds))
  min_sep = draw(st.integers(0, max(0, rounds // 2)))
  possible = tree.max_possible_participation(rounds, min_sep)
  # Binding (below the participations that fit) and non-binding MaxP.
  max_p = draw(st.one_of(st.integers(1, possible),
                         st.integers(possible, possible + 3)))
  restarts = draw(st.lists(st.integers(1, rounds), max_size=3,
                           unique=True)) if rounds > 1 else []
  return rounds, max_p, min_sep, sorted(restarts)


class TreeReferenceTest(absltest.TestCase):

  def test_reference_equals_brute_force_exhaustively(self):
    for rounds in range(1, 12):
      for min_sep in range(0, 4):
        for max_p in range(1, 5):
          for restarts in ([], [rounds // 2 + 1], [1, rounds // 3 + 1]):
            restarts = [r for r in restarts if 1 <= r]
            self.assertEqual(
                tree_reference.sensitivity_squared(rounds, max_p, min_sep,
                                                   restarts),
                tree_brute_force.brute_force_sensitivity_squared(
                    rounds, max_p, min_sep, restart_rounds=restarts),
                (rounds, max_p, min_sep, restarts))

  @hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
  @hypothesis.given(configurations())
  def test_fast_equals_reference(self, configuration):
    rounds, max_p, min_sep, restarts = configuration
    self.assertEqual(
        tree.max_sensitivity_squared(rounds, max_p, min_sep, restarts),
        tree_reference.sensitivity_squared(rounds, max_p, min_sep, restarts))

  @hypothesis.settings(max_examples=20, deadline=None, derandomize=True)
  @hypothesis.given(configurations(max_rounds=160))
  def test_fast_equals_reference_on_longer_runs(self, configuration):
    rounds, max_p, min_sep, restarts = configuration
    hypothesis.assume(min_sep <= 12)   # Keeps the reference fast.
    self.assertEqual(
        tree.max_sensitivity_squared(rounds, max_p, min_sep, restarts),
        tree_reference.sensitivity_squared(rounds, max_p, min_sep, restarts))

  @hypothesis.settings(max_examples=8, deadline=None, derandomize=True)
  @hypothesis.given(st.integers(100, 220), st.integers(0, 1),
                    st.integers(65, 110),
                    st.lists(st.integers(1, 219), min_size=1, max_size=3,
                             unique=True))
  def test_dense_tables_across_restarts(self, rounds, min_sep, max_p,
                                        restarts):
    # Binding MaxP above 64 counts with restarts: the dense program and the
    # pruning of hopeless counts between trees (a weaker pruning bound was
    # caught here).
    restarts = sorted(r for r in restarts if r < rounds)
    self.assertEqual(
        tree.max_sensitivity_squared(rounds, max_p, min_sep, restarts),
        tree_reference.sensitivity_squared(rounds, max_p, min_sep, restarts))

  def test_fast_paths_forced(self):
    # The dense program (binding MaxP above 64 counts) and the sparse one.
    for rounds, max_p, min_sep, restarts in ((140, 70, 0, []),
                                             (140, 66, 0, [70]),
                                             (100, 100, 0, [30, 60]),
                                             (128, 3, 20, [64]),
                                             # Found by mutating the
                                             # pruning across restarts.
                                             (218, 65, 0, [80]),
                                             (218, 69, 2, [201, 208])):
      for fast_path in (True, False):
        self.assertEqual(
            tree.max_sensitivity_squared(rounds, max_p, min_sep, restarts,
                                         _fast_path=fast_path),
            tree_reference.sensitivity_squared(rounds, max_p, min_sep,
                                               restarts),
            (rounds, max_p, min_sep, restarts, fast_path))


if __name__ == '__main__':
  absltest.main()
