#!/usr/bin/env bash
# Starts one TFF worker (python -m experiments.serve_worker) on each host
# over ssh and prints the --workers value for the controller.
#
#   docs/deploy/start_workers.sh PORT host1 host2 ...
#
# Every host needs this checkout at the same path as here, set up with
# `make setup` (.venv), and the training database at the same path as on
# the controller (for example the same --cache_dir on a shared or copied
# disk). Stop the workers with: ssh HOST pkill -f experiments.serve_worker
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 PORT HOST [HOST ...]" >&2
  exit 2
fi
port=$1
shift
repo=$(cd "$(dirname "$0")/../.." && pwd)
workers=()
for host in "$@"; do
  ssh "$host" "cd '$repo' && nohup .venv/bin/python -m experiments.serve_worker \
      --port=$port > serve_worker_$port.log 2>&1 < /dev/null &"
  workers+=("$host:$port")
done
# Wait until every worker answers (the first start loads TensorFlow).
for w in "${workers[@]}"; do
  for _ in $(seq 120); do
    if PYTHONPATH="$repo" "$repo/.venv/bin/python" -c "
import sys
from dpftrl_tff.remote import workers
w = workers.parse_workers(sys.argv[1])[0]
sys.exit(0 if workers.is_reachable(w, 1.0) else 1)" "$w"; then
      break
    fi
  done
done
(IFS=,; echo "--workers=${workers[*]}")
