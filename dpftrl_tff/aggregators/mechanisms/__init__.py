"""The model-update mechanisms, one module each.

  base       `Mechanism` (what the project needs to know about one
             aggregation), `RunParameters`, the checks and the SecAgg sum
             that several mechanisms share;
  none       plain FedAvg mean (no DP);
  dp_ftrl    fixed clip, tree-aggregation noise;
  adaptive   Algorithm 1: adaptive clip through tree restarts;
  blt        fixed clip, BLT noise;
  bandmf     fixed clip, banded matrix factorization noise;
  dp_fedavg  DP-FedAvg: independent noise, Poisson sampling assumed.

Each module defines `MECHANISM`; `aggregators.registry` looks them up by
name. Nothing outside these modules branches on a mechanism's name: what
differs between mechanisms (noise, clipping, accounting, the report's words)
is an attribute of `Mechanism`.
"""
