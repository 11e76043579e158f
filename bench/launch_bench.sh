#!/usr/bin/env bash
# Tokens/s of the same debug job run two ways: through a local controller + worker (the
# CLI submits it, the worker spawns the ranks) and through trainyard-train (the engine's
# own launcher), for dp=1 and dp=2, in alternating runs. Prints, per (path, dp), the
# median over runs of each run's median tokens_per_s over its steps after the first
# WARMUP, and the CPU, BLAS and thread facts. Prints figures; asserts nothing.
#
#   bench/launch_bench.sh [BIN_DIR] [ROUNDS] [STEPS]   (issue 25: one rank launch policy)
set -euo pipefail
BIN=$(cd "${1:-build/bin}" && pwd)
ROUNDS=${2:-3}
STEPS=${3:-20}
WARMUP=${WARMUP:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
JOB=$ROOT/examples/debug.toml
DIR=$(mktemp -d /tmp/trainyard-launch-bench.XXXXXX)
PORT_FILE=$DIR/port
# The tree's Python (stdlib only here): $TRAINYARD_PYTHON, else the venv of
# deploy/python-requirements.txt, else python3.
PYTHON=${TRAINYARD_PYTHON:-/opt/trainyard/venv/bin/python3}
if [ ! -x "$PYTHON" ]; then PYTHON=python3; fi

cleanup() {
  kill "${WORKER_PID:-}" "${CONTROLLER_PID:-}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT

"$BIN/trainyard-controller" --listen 127.0.0.1:0 --port-file "$PORT_FILE" --data-dir "$DIR/data" \
  >"$DIR/controller.log" 2>&1 &
CONTROLLER_PID=$!
for _ in $(seq 1 100); do [[ -s $PORT_FILE ]] && break; sleep 0.1; done
ADDR=127.0.0.1:$(cat "$PORT_FILE")
"$BIN/trainyard-worker" --controller "$ADDR" --slots 2 --name bench --work-dir "$DIR/worker" \
  >"$DIR/worker.log" 2>&1 &
WORKER_PID=$!
for _ in $(seq 1 100); do
  "$BIN/trainyard" workers --controller "$ADDR" 2>/dev/null | grep -q bench && break
  sleep 0.2
done

# From JSON lines on stdin: the median tokens_per_s of the step_metrics after step
# WARMUP, and the thread settings rank 0 reported in its "engine start" line (the
# threads it ran and the variables it was started with; an older engine prints fewer).
median_tps() {
  "$PYTHON" -c '
import json, re, statistics, sys
warmup = int(sys.argv[1])
v, env = [], "?"
for line in sys.stdin:
    try:
        e = json.loads(line)
    except ValueError:
        continue
    m = e.get("step_metrics")
    if m and int(m["step"]) > warmup:
        v.append(float(m["tokens_per_s"]))
    msg = (e.get("log") or {}).get("message", "")
    if msg.startswith("engine start:"):
        env = " ".join(re.findall(r"(?:threads|OMP_NUM_THREADS|OPENBLAS_NUM_THREADS|OMP_WAIT_POLICY)=\S+", msg))
print((f"{statistics.median(v):.1f}" if v else "nan") + " [" + env + "]")' "$WARMUP"
}

declare -A RESULTS
for round in $(seq 1 "$ROUNDS"); do
  for dp in 1 2; do
    sets=(--set "training.steps=$STEPS" --set "parallelism.dp=$dp")
    svc=$("$BIN/trainyard" --controller "$ADDR" --json submit "$JOB" "${sets[@]}" --wait | median_tps)
    loc=$("$BIN/trainyard-train" "$JOB" "${sets[@]}" --json --run-dir "$DIR/train-$round-$dp" | median_tps)
    echo "round $round dp=$dp: controller $svc tokens/s; trainyard-train $loc tokens/s"
    RESULTS[svc$dp]+="${svc%% *} "
    RESULTS[loc$dp]+="${loc%% *} "
  done
done

med() { "$PYTHON" -c 'import statistics,sys; print(f"{statistics.median(float(x) for x in sys.argv[1:]):.1f}")' "$@"; }
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores," \
  "avx512f=$(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)" \
  "avx512_bf16=$(grep -qw avx512_bf16 /proc/cpuinfo && echo yes || echo no)," \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}"
for dp in 1 2; do
  echo "dp=$dp (debug, $STEPS steps, median of $ROUNDS runs' medians after step $WARMUP):" \
    "controller $(med ${RESULTS[svc$dp]}) tokens/s, trainyard-train $(med ${RESULTS[loc$dp]}) tokens/s"
done
echo "logs in $DIR"
