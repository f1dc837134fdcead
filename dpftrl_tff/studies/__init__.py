"""Many runs of the training binary: sweeps and the paper's utility curves.

  training_runs   runs `experiments.run_stackoverflow` as a subprocess;
  sweeps          grids of training flags, per-point summaries, the frontier;
  utility_curves  the paper's utility curves at CPU scale.
"""
