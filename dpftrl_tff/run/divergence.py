"""Divergence: a round whose numbers are not finite stops the run.

TFF hides a diverging run. A client whose update is not finite has its
update zeroed and its metrics reset (`model_delta_client_work`), so when
every client diverges the round's training loss reads 0.0; the server
rejects a non-finite aggregate and keeps the old model
(`apply_optimizer_finalizer`, measurement `update_non_finite`). A run that
went on would print zeros, evaluate NaN and end "successfully". Here every
round is checked (`check_round`); the first non-finite quantity stops the
run with `DivergenceError`, which names the round and the quantity and
says what to change. The run keeps its last checkpoint, which is finite:
checkpoints are written only after a round passes the check, and their
leaves are checked too (`check_state`).
"""

import math
from typing import Any, Dict, Optional, Sequence

import numpy as np

EXPLOSION_FACTOR = 10.0

HINT = ('lower --server_lr or --client_lr, raise --clients_per_round, '
        'lower --noise_multiplier, or clip client updates (--clip_norm with '
        'a DP aggregator)')


class DivergenceError(ValueError):
  """Training produced non-finite numbers; the message says where."""


def _finite(value) -> bool:
  try:
    return math.isfinite(float(value))
  except (TypeError, ValueError):
    return False


def nonfinite_clients(cohort_size: int, finite_clients: Optional[float]
                      ) -> Optional[int]:
  """Clients of the round whose update TFF zeroed because it was not finite.

  `finite_clients` is the round's summed `num_clients` metric: every client
  that trained sets its own to 1, and TFF resets the metrics of a client
  whose update is not finite.
  """
  if finite_clients is None or not _finite(finite_clients):
    return None
  return int(cohort_size - round(float(finite_clients)))


def check_round(round_number: int, *, train_loss: float, update_norm: float,
                cohort_size: int, nonfinite: Optional[int],
                server_rejected: Optional[float],
                checkpoint_round: int) -> None:
  """Raises DivergenceError if round `round_number` (1-based) diverged.

  Diverged: the training loss or the server's update norm (hence the new
  weights) is not finite, TFF's server rejected the aggregated update as
  not finite, or every client's update was not finite.
  """
  problem = None
  if nonfinite is not None and cohort_size > 0 and nonfinite >= cohort_size:
    problem = (f'every client\'s update was not finite ({nonfinite} of '
               f'{cohort_size}; TFF zeroed them all)')
  elif server_rejected is not None and _finite(server_rejected) and float(
      server_rejected) > 0:
    problem = 'the aggregated update was not finite (TFF\'s server rejected it)'
  elif not _finite(update_norm):
    problem = f'the new model weights are not finite (update norm {update_norm})'
  elif cohort_size > 0 and not _finite(train_loss):
    # (A cohort of canaries only trains nobody: no loss to check.)
    problem = f'the training loss is not finite ({train_loss})'
  if problem is None:
    return
  kept = (f'the run keeps its last checkpoint, round {checkpoint_round}'
          if checkpoint_round else 'the run has no checkpoint yet')
  raise DivergenceError(
      f'Round {round_number} diverged: {problem}. Training stopped; {kept}. '
      f'Try: {HINT}. To go on from the checkpoint with other learning rates, '
      f're-run with them and --allow_changed_learning_rates.')


def check_state(leaves: Sequence[Any], round_number: int) -> None:
  """Raises DivergenceError if a floating leaf of the state is not finite."""
  for leaf in leaves:
    array = np.asarray(leaf)
    if np.issubdtype(array.dtype, np.floating) and not np.all(
        np.isfinite(array)):
      raise DivergenceError(
          f'Round {round_number} diverged: the server state holds values '
          f'that are not finite; it is not checkpointed. Try: {HINT}.')


def _exploded(loss: float, first: float) -> bool:
  """The training loss is over EXPLOSION_FACTOR times the first round's."""
  return first > 0 and loss > EXPLOSION_FACTOR * first


class ExplosionWatch:
  """Warns once when the training loss exceeds 10 times the first round's."""

  def __init__(self, warn, first_loss: Optional[float] = None):
    self._warn = warn
    self.first_loss = first_loss
    self.warned = False

  def update(self, round_number: int, train_loss: float):
    if not _finite(train_loss):
      return
    if self.first_loss is None:
      self.first_loss = float(train_loss)
      return
    if not self.warned and _exploded(train_loss, self.first_loss):
      self.warned = True
      self._warn(f'round {round_number}: training loss {train_loss:.4g} is '
                 f'over {EXPLOSION_FACTOR:g} times the first round\'s '
                 f'({self.first_loss:.4g}); the run may be diverging. Try: '
                 f'{HINT}.')


def explosion(rows: Sequence[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
  """Where a run's finite training loss exploded, from its metrics rows.

  None if no round's training loss exceeded EXPLOSION_FACTOR times the
  first round's; else the first such round and loss, the first round's loss
  and the last round's (`ended_exploded`: the last is still over the
  factor, so the final model is a diverged one). Such a run is not stopped
  (its numbers are finite, and a sweep over the noise wants its accuracy),
  but its summary and final lines say so.
  """
  losses = [(int(row['round']), float(row['train_loss'])) for row in rows
            if _finite(row.get('train_loss'))]
  first = losses[0][1] if losses else 0.0
  over = [(r, loss) for r, loss in losses if _exploded(loss, first)]
  if not over:
    return None
  last_round, last = losses[-1]
  return dict(first_round_loss=first, round=over[0][0], loss=over[0][1],
              last_round=last_round, last_loss=last,
              ended_exploded=_exploded(last, first),
              factor=EXPLOSION_FACTOR)


def first_loss(rows: Sequence[Dict[str, Any]]) -> Optional[float]:
  """The first round's training loss of resumed metrics rows, if any."""
  for row in rows:
    if _finite(row.get('train_loss')):
      return float(row['train_loss'])
  return None
