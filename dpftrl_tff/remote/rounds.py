"""Training rounds on remote TFF workers, and the checks before the first.

`DistributedProcess` runs a learning process's rounds through a
`context.DistributedContext` with the interface of
`tff_compat.resident.ResidentProcess` (`next`, `materialize`), so the round
loop does not know where rounds run. The server state lives in the
controller between rounds and is sent with each subround (a remote worker
keeps nothing between rounds, so any worker can take any subround).

`check_client_data` runs, on every worker, a computation that opens the
training database at the path the controller uses and reads one client:
workers build their clients' datasets themselves, from client ids, so the
database must be at the same path, with the same content, on every machine.
"""

from typing import Callable, List, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dpftrl_tff.remote import context as context_lib
from dpftrl_tff.remote import workers as workers_lib
from dpftrl_tff.tff_compat import resident

# SQLite's own size of the database file, in bytes.
_DATABASE_BYTES_QUERY = ('SELECT page_count * page_size FROM pragma_page_count(),'
                         ' pragma_page_size()')


class DistributedProcess:
  """Runs rounds of a learning process across remote workers.

  Args:
    process: a learning process (taking client ids, so that workers build
      the datasets).
    context: the `context.DistributedContext` of the workers.
    continue_on_worker_failure: when a worker is lost during a round, run
      the round again on the remaining workers (the same subrounds: the
      same result) instead of raising `context.WorkerLostError`.
    warn: where the message about a lost worker goes when continuing.
  """

  keeps_state_in_worker = False

  def __init__(self, process, context: context_lib.DistributedContext, *,
               continue_on_worker_failure: bool = False,
               warn: Callable[[str], None] = print):
    self._next = resident.build_next_with_update_norm(process)
    self._context = context
    self._continue = continue_on_worker_failure
    self._warn = warn

  @property
  def workers(self) -> List[workers_lib.Worker]:
    return self._context.workers

  def next(self, state, client_data: Sequence):
    """One round: (new state, metrics, model update norm)."""
    client_data = list(client_data)
    while True:
      try:
        with tff.framework.get_context_stack().install(self._context):
          new_state, metrics, norm = self._next(state, client_data)
        return new_state, metrics, float(norm)
      except context_lib.WorkerLostError as e:
        remaining = [w for w in self._context.workers if w != e.worker]
        if not self._continue or not remaining:
          raise
        self._context.drop(e.worker)
        self._warn(f'{e} Running the round again on the {len(remaining)} '
                   f'remaining worker(s): {", ".join(map(str, remaining))}.')

  def materialize(self, state):
    return state


def _probe(dataset_fn, client_id: str, database: str):
  """(examples of `client_id`, bytes of `database`) as a TFF computation."""

  @tff.tensorflow.computation
  def probe():
    examples = dataset_fn(client_id).reduce(
        np.int64(0), lambda count, _: count + 1)
    size = tf.data.experimental.SqlDataset(
        'sqlite', database, _DATABASE_BYTES_QUERY, (tf.int64,))
    database_bytes = size.reduce(np.int64(-1), lambda _, row: row[0])
    return examples, database_bytes

  return probe


def check_client_data(context: context_lib.DistributedContext, *,
                      dataset_fn, client_id: str, database: str):
  """Raises WorkerError naming every worker that cannot serve the data.

  Every worker must read client `client_id` and the database at
  `database` (the path the controller uses) exactly as the controller
  does: the same number of examples and the same database size.

  Args:
    context: the workers.
    dataset_fn: the training ClientData's `serializable_dataset_fn`.
    client_id: a training client to read.
    database: the absolute path of the database file.
  """
  probe = _probe(dataset_fn, client_id, database)
  expected = tuple(int(x) for x in probe())   # On this machine.
  problems = []
  bad = []
  for worker, worker_context in zip(context.workers,
                                    context._async_execution_contexts):  # pylint: disable=protected-access
    try:
      got = context.run(worker_context.invoke(probe, None))
      got = tuple(int(x) for x in got)
    except context_lib.WorkerLostError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      reason = str(e).strip().splitlines()
      problems.append(f'{worker} cannot read it '
                      f'({reason[0][:200] if reason else type(e).__name__})')
      bad.append(worker)
      continue
    if got != expected:
      problems.append(
          f'{worker} has another database there ({got[1]} bytes and '
          f'{got[0]} examples for client {client_id!r}; this machine: '
          f'{expected[1]} bytes, {expected[0]} examples)')
      bad.append(worker)
  if problems:
    raise workers_lib.WorkerError(
        f'The training database {database} must be at the same path, with '
        f'the same content, on every worker machine: '
        f'{"; ".join(problems)}. Copy it there (docs/scaling.md).', bad)
