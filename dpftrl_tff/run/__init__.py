"""One training run: its settings, process, round loop, records and directory.

  config            TrainConfig: every training setting, declared once;
  learning_process  model and mechanism to a TFF learning process;
  loop              the round loop (cohorts from a sampler, rounds run);
  round_record      one round's metrics row, checks, evaluation, checkpoint;
  training          `train`: one run, end to end;
  run_directory     identity, lock, hparams, metrics, checkpoints, summary;
  evaluation, metrics  held-out evaluation; loss and in-vocab accuracy;
  divergence        a round whose numbers are not finite stops the run;
  progress, provenance  the progress line; where and with what a run started.
"""
