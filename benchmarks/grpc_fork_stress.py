"""gRPC's fork handlers under a live channel: what `runtime.configure_grpc` avoids.

Each trial is a fresh Python process that holds one gRPC channel with a
connectivity subscription (its polling thread, as TFF's stub keeps one) to a
closed local port, and starts `true` with `subprocess.Popen(...,
preexec_fn=...)` in a loop for --seconds: a `preexec_fn` makes Python fork
(not vfork), as every TFF worker start here does (PR_SET_PDEATHSIG). Trials
alternate between gRPC's default and the project's setting (the trial
calls `runtime.configure_grpc()` before importing gRPC, as
`runtime.install()` does: GRPC_ENABLE_FORK_SUPPORT=0), with gRPC's INFO
log on. Counted per setting:

  forks          `Popen` calls made;
  skipped        forks logged "Other threads are currently calling into
                 gRPC, skipping fork() handlers" (the polling thread sits
                 in gRPC almost all the time, so registered handlers log
                 nearly every fork; none logged means none registered);
  handlers ran   forks where the registered handlers stopped and restarted
                 gRPC's threads: forks less skipped, when any were skipped
                 (the handlers log nothing when they run), else 0;
  gRPC errors    error or fatal lines of gRPC's log ("E0000"/"F0000"), e.g.
                 "Kick failed: eventfd_write: Bad file descriptor": a
                 polling thread using a descriptor the handlers closed;
  crashes        trials that died of a signal or failed.

On 2026-11-28 (2 AVX2 cores, 6 trials of 30 s per setting) the default
ran the handlers in 92 of 14,441 forks, with 11 gRPC errors; the setting
in none of 17,160, with no error (docs/performance.md, stop 55).

  python -m benchmarks.grpc_fork_stress [--seconds=30] [--repeats=6]
"""

import json
import os
import re
import subprocess
import sys

from absl import flags

from dpftrl_tff import runtime

_SECONDS = flags.DEFINE_float('seconds', 30.0, 'Wall seconds per trial.',
                              lower_bound=0.1)
_REPEATS = flags.DEFINE_integer('repeats', 6, 'Trials per setting.',
                                lower_bound=1)

_TRIAL = r'''
import random, subprocess, sys, time
if sys.argv[2] == 'project':
  from dpftrl_tff import runtime
  runtime.configure_grpc()   # As runtime.install() does, before gRPC.
import grpc
channel = grpc.insecure_channel('localhost:1')
channel.subscribe(lambda state: None, try_to_connect=True)
forks, end = 0, time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
  subprocess.Popen(['true'], preexec_fn=lambda: None).wait()
  forks += 1
  time.sleep(random.random() * 0.01)
print('FORKS', forks, flush=True)
'''

SETTINGS = ('default', 'project')
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIPPED = 'skipping fork() handlers'
_GRPC_ERROR = re.compile(r'^[EF]\d{4} ', re.MULTILINE)


def trial(setting: str, seconds: float) -> dict:
  """One trial's counts under `setting` ('default' or 'project')."""
  env = {k: v for k, v in os.environ.items()
         if k not in runtime.GRPC_ENVIRONMENT}
  env['GRPC_VERBOSITY'] = 'INFO'
  proc = subprocess.run(
      [sys.executable, '-c', _TRIAL, str(seconds), setting], cwd=_REPO,
      env=env, capture_output=True, text=True, timeout=seconds + 120)
  found = re.search(r'^FORKS (\d+)$', proc.stdout, re.MULTILINE)
  forks = int(found.group(1)) if found else 0
  skipped = proc.stderr.count(_SKIPPED)
  return dict(forks=forks, skipped=skipped,
              handlers_ran=forks - skipped if skipped else 0,
              grpc_errors=len(_GRPC_ERROR.findall(proc.stderr)),
              crashes=int(proc.returncode != 0 or not found))


def run(seconds: float, repeats: int) -> dict:
  """{setting: summed counts} over `repeats` interleaved trials each."""
  totals = {s: dict(forks=0, skipped=0, handlers_ran=0, grpc_errors=0,
                    crashes=0, trials=0) for s in SETTINGS}
  for _ in range(repeats):
    for setting in SETTINGS:
      counts = trial(setting, seconds)
      for key, value in counts.items():
        totals[setting][key] += value
      totals[setting]['trials'] += 1
  return totals


def main(argv):
  del argv
  totals = run(_SECONDS.value, _REPEATS.value)
  print(f'{_REPEATS.value} trials of {_SECONDS.value:g} s per setting')
  print('| setting | forks | skipped | handlers ran | gRPC errors | '
        'crashes |')
  print('| --- | --- | --- | --- | --- | --- |')
  names = {'default': "gRPC's default",
           'project': ', '.join(f'{k}={v}' for k, v in
                                runtime.GRPC_ENVIRONMENT.items())}
  for setting in SETTINGS:
    t = totals[setting]
    print(f'| {names[setting]} | {t["forks"]:,} | {t["skipped"]:,} | '
          f'{t["handlers_ran"]:,} | {t["grpc_errors"]} | {t["crashes"]} |')
  print(json.dumps(totals, allow_nan=False))


if __name__ == '__main__':
  runtime.run_app(main)
