"""gRPC channels to workers are closed only after their polling thread ends.

A subscribed channel (TFF's stub subscribes; so does
`grpc.channel_ready_future`) has a thread calling `watch_connectivity_state`
every 0.2 s. Closing the channel while that thread is inside the call made
a pytest worker die with SIGSEGV in CI (grpc/grpc#16290). Each test records,
at the moment the channel really closes, whether that thread still ran:
with a plain `Channel.close()` it does (the first test shows it), so these
tests fail if `close_channel` stops waiting or gRPC renames the state it
reads.
"""

from concurrent import futures
import time
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import grpc
from grpc import _channel as grpc_channel  # pylint: disable=protected-access
import portpicker

from dpftrl_tff.remote import context as context_lib
from dpftrl_tff.remote import workers as workers_lib

_CLOSE = grpc_channel.Channel.close


def _record_polling_at_close():
  """Patches Channel.close to record whether its polling thread ran then."""
  polling_at_close = []

  def close(channel):
    state = channel._connectivity_state  # pylint: disable=protected-access
    with state.lock:
      polling_at_close.append(state.polling)
    _CLOSE(channel)
  patch = mock.patch.object(grpc_channel.Channel, 'close', close)
  return patch, polling_at_close


class CloseChannelTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.port = portpicker.pick_unused_port()
    self.worker = workers_lib.Worker('localhost', self.port)

  def _serve(self):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    server.add_insecure_port(self.worker.target)
    server.start()
    self.addCleanup(server.stop, None)

  def _close_subscribed(self, close):
    """Polling states recorded when `close` closes a subscribed channel."""
    patch, polling_at_close = _record_polling_at_close()
    channel = workers_lib.channel(self.worker)
    channel.subscribe(lambda _: None, try_to_connect=True)
    time.sleep(0.05)
    with patch:
      close(channel)
    return polling_at_close

  def test_plain_close_runs_while_polling(self):
    # The race itself: why close_channel exists (and what the other tests
    # would see without it).
    self.assertEqual(self._close_subscribed(lambda c: c.close()), [True])

  def test_close_channel_waits_for_polling_to_end(self):
    self.assertEqual(self._close_subscribed(workers_lib.close_channel),
                     [False])

  @parameterized.named_parameters(('closed_port', False, 0.3),
                                  ('serving_port', True, 10))
  def test_probe(self, serving, timeout):
    if serving:
      self._serve()
    patch, polling_at_close = _record_polling_at_close()
    with patch:
      self.assertEqual(workers_lib.is_reachable(self.worker, timeout),
                       serving)
    self.assertEqual(polling_at_close, [False])

  def test_worker_context_close(self):
    # TFF's RemoteExecutorGrpcStub subscribes to the channel on creation
    # and never unsubscribes.
    self._serve()
    patch, polling_at_close = _record_polling_at_close()
    context = context_lib.WorkerContext(self.worker, secure_sums=False)
    time.sleep(0.05)
    with patch:
      context.close()
    self.assertEqual(polling_at_close, [False])


if __name__ == '__main__':
  absltest.main()
