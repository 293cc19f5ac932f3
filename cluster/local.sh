#!/usr/bin/env bash
# Start a real local Dask cluster on loopback: one `dask scheduler` and N `dask worker`
# processes, each with a memory limit. Stops everything on Ctrl-C / SIGTERM.
#
#   bash cluster/local.sh [N_WORKERS=2] [MEMORY_LIMIT=4GiB] [PORT=8786]
#   # in another shell:
#   sphdist fit --input corpus.zarr --scheduler-address tcp://127.0.0.1:8786
#
# Uses the `dask` command of the environment on PATH (or .venv/bin if present). Everything,
# the dashboard included, binds to 127.0.0.1.
set -euo pipefail
N_WORKERS="${1:-2}"
MEMORY_LIMIT="${2:-4GiB}"
PORT="${3:-8786}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DASK="dask"
[ -x "$ROOT/.venv/bin/dask" ] && DASK="$ROOT/.venv/bin/dask"
ADDRESS="tcp://127.0.0.1:$PORT"

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

"$DASK" scheduler --host 127.0.0.1 --port "$PORT" --dashboard-address 127.0.0.1:0 &
pids+=($!)
for _ in $(seq 1 50); do  # wait for the scheduler port
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    sleep 0.2
done
for i in $(seq 1 "$N_WORKERS"); do
    "$DASK" worker "$ADDRESS" --host 127.0.0.1 --nthreads 1 --nworkers 1 \
        --memory-limit "$MEMORY_LIMIT" --name "worker-$i" --no-dashboard \
        --dashboard-address 127.0.0.1:0 &
    pids+=($!)
done
echo "scheduler at $ADDRESS with $N_WORKERS workers ($MEMORY_LIMIT each); Ctrl-C to stop" >&2
wait
