"""From a proxy corpus to a launch plan (the paper's Sec. 2.5 practices).

  policy     each practice's decision on results already had (tested on
             canned numbers);
  launch     report goal, noise, timer and the launch's privacy;
  search     the simulations within a budget, resumable;
  pipeline   the practices in order (`recommend`);
  report     recommendation.json, the flag files, recommendation.md and its
             figures.
"""
