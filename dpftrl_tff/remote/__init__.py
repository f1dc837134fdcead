"""Training rounds across several machines with TFF's own remote workers.

`workers` starts and reaches TFF's `worker_binary` services, `context` is
TFF's mergeable-computation context over them (one cohort split into
subrounds, merged in a fixed order), `rounds` runs a learning process's
rounds there and checks the workers' data. See docs/scaling.md.
"""
