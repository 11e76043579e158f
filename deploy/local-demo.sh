#!/usr/bin/env bash
# Starts a local controller and one worker from ./build, submits a job file and streams
# its events until the job ends; stops both daemons on exit. Usage:
#   deploy/local-demo.sh [JOB.toml] [extra `trainyard submit` args, e.g. --set training.steps=5]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TRAINYARD_BIN:-build/bin}
JOB=${1:-examples/debug.toml}
shift || true
DEMO_DIR=$(mktemp -d /tmp/trainyard-demo.XXXXXX)
PORT=${TRAINYARD_DEMO_PORT:-7070}
SLOTS=${TRAINYARD_DEMO_SLOTS:-2}

cleanup() {
  kill "${WORKER_PID:-}" "${CONTROLLER_PID:-}" 2>/dev/null || true
  wait 2>/dev/null || true
  echo "demo: logs in $DEMO_DIR"
}
trap cleanup EXIT

"$BIN/trainyard-controller" --listen "127.0.0.1:$PORT" --data-dir "$DEMO_DIR/data" \
  --metrics-listen 127.0.0.1:9464 >"$DEMO_DIR/controller.log" 2>&1 &
CONTROLLER_PID=$!
"$BIN/trainyard-worker" --controller "127.0.0.1:$PORT" --slots "$SLOTS" --name local \
  --work-dir "$DEMO_DIR/worker" >"$DEMO_DIR/worker.log" 2>&1 &
WORKER_PID=$!

for _ in $(seq 1 100); do
  if "$BIN/trainyard" workers --controller "127.0.0.1:$PORT" 2>/dev/null | grep -q local; then
    break
  fi
  sleep 0.2
done
echo "demo: controller 127.0.0.1:$PORT (metrics http://127.0.0.1:9464/metrics), worker 'local' with $SLOTS slots"
"$BIN/trainyard" submit "$JOB" --controller "127.0.0.1:$PORT" --wait "$@"
