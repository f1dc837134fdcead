"""Client participation limits reachable from a population (paper's Sec. 3.2).

If every round trains at least `report_goal` distinct clients and no client
returns within MinS rounds after taking part, then any MinS + 1 consecutive
rounds use (MinS + 1) * report_goal distinct clients, so

    MinS <= floor(population / report_goal) - 1.

(The paper quotes the bound loosely as population / report_goal.) Over T rounds
a client then takes part at most MaxP = floor((T - 1) / (MinS + 1)) + 1 times,
the worst case used when MaxP is not measured.
"""

from dpftrl_tff import checks
from dpftrl_tff.accounting import tree


def max_min_separation(population: int, report_goal: int) -> int:
  """Largest MinS a population can sustain at the given report goal."""
  population = checks.check_int(population, 'population', minimum=1)
  report_goal = checks.check_int(report_goal, 'report_goal', minimum=1)
  if population < report_goal:
    raise ValueError(
        f'population ({population}) must be at least report_goal '
        f'({report_goal}): a round needs report_goal distinct clients.')
  return population // report_goal - 1


def worst_case_max_participation(rounds: int, min_separation: int) -> int:
  """MaxP = floor((T - 1) / (MinS + 1)) + 1."""
  return tree.max_possible_participation(rounds, min_separation)
