#!/usr/bin/env bash
# package_systemd_units (ctest, label package): the units in deploy/systemd/ against the
# programs they start.
#   - systemd-analyze verify accepts each unit with no message at all (it exits 0 on
#     unknown keys and only prints them), with ExecStart pointed at the built programs,
#     so the command it checks exists and is executable;
#   - every --flag in ExecStart, and in the env file's examples (commented or not), is
#     an option the program's --help lists;
#   - every variable ExecStart expands has a default in the unit (Environment=), so the
#     service starts without the env file, and every variable the env file sets is one
#     ExecStart uses (a misspelt name would be silently ignored);
#   - the two command lines, expanded as systemd does (the unit's defaults, then the env
#     file's values; ${VAR} one argument even when empty, $VAR split into words; %S and
#     %H), start a controller and a worker that registers with it (`trainyard workers`),
#     and both exit 0 on SIGTERM, as on `systemctl stop`. Only the ports (0, and no
#     /metrics) and the state folder are changed, through the env variables.
# systemd-analyze verify works without systemd running (a container); where it is not
# installed at all the test is skipped (exit 77) and says so.
#
# Usage: systemd_units_test.sh --units SRC/deploy/systemd --bin-dir BUILD/bin
set -uo pipefail

UNITS="" BIN_DIR=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --units) UNITS=$2; shift 2 ;;
    --bin-dir) BIN_DIR=$(cd "$2" && pwd); shift 2 ;;
    *) echo "systemd_units_test: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

FAILURES=0
fail() { echo "FAIL: $*"; FAILURES=$((FAILURES + 1)); }
ok() { echo "ok: $*"; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/trainyard-units-test.XXXXXX")
CONTROLLER_PID="" WORKER_PID=""
cleanup() {
  for pid in $WORKER_PID $CONTROLLER_PID; do kill -9 "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
HOST=$(hostname)

# expand_exec UNIT ENV_FILE [VAR=VALUE...]: ExecStart's arguments, one per line (NUL
# would be exact; no value here holds a newline), expanded as systemd would with the
# unit's Environment= defaults, then ENV_FILE's assignments, then the given overrides;
# /usr/bin/ becomes the build's bin folder and %S the test's state folder.
expand_exec() {
  local unit=$1 env=$2
  shift 2
  declare -A vars=()
  local line k v
  while IFS= read -r line; do
    line=${line#Environment=}
    vars[${line%%=*}]=${line#*=}
  done < <(grep -E '^Environment=' "$unit")
  while IFS= read -r line; do
    vars[${line%%=*}]=${line#*=}
  done < <(grep -E '^[A-Z][A-Z0-9_]*=' "$env")
  for kv in "$@"; do vars[${kv%%=*}]=${kv#*=}; done
  local cmd
  cmd=$(grep -E '^ExecStart=' "$unit" | sed 's/^ExecStart=//')
  local tok
  for tok in $cmd; do
    if [[ "$tok" =~ ^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$ ]]; then
      v=${vars[${BASH_REMATCH[1]}]:-}
      v=${v//%H/$HOST}
      printf '%s\n' "$v"
    elif [[ "$tok" =~ ^\$([A-Za-z_][A-Za-z0-9_]*)$ ]]; then
      for v in ${vars[${BASH_REMATCH[1]}]:-}; do printf '%s\n' "$v"; done
    else
      tok=${tok/#\/usr\/bin\//$BIN_DIR/}
      tok=${tok//%S/$TMP/state}
      tok=${tok//%H/$HOST}
      printf '%s\n' "$tok"
    fi
  done
}

for service in controller worker; do
  unit=$UNITS/trainyard-$service.service
  env=$UNITS/$service.env
  program=trainyard-$service
  [[ -f "$unit" && -f "$env" ]] || { fail "$unit or $env is missing"; continue; }
  [[ -x "$BIN_DIR/$program" ]] || { echo "systemd_units_test: $BIN_DIR/$program is not built" >&2; exit 1; }

  # ExecStart= as one line, and the program it names.
  exec_start=$(grep -E '^ExecStart=' "$unit")
  [[ $(grep -cE '^ExecStart=' "$unit") -eq 1 ]] || fail "$program: expected one ExecStart= line"
  binary=$(echo "$exec_start" | sed -E 's/^ExecStart=([^ ]+).*/\1/')
  [[ "$binary" == "/usr/bin/$program" ]] && ok "$program: ExecStart runs $binary" \
    || fail "$program: ExecStart runs '$binary', expected /usr/bin/$program"

  # systemd-analyze verify, on a copy whose programs are the built ones.
  if command -v systemd-analyze >/dev/null 2>&1; then
    mkdir -p "$TMP/$service"
    sed "s#/usr/bin/#$BIN_DIR/#g" "$unit" > "$TMP/$service/trainyard-$service.service"
    out=$(cd "$TMP/$service" && systemd-analyze verify --man=no "./trainyard-$service.service" 2>&1)
    rc=$?
    if [[ $rc -eq 0 && -z "$out" ]]; then
      ok "$program: systemd-analyze verify: clean"
    else
      fail "$program: systemd-analyze verify exited $rc:"
      echo "$out" | sed 's/^/    /'
    fi
  fi

  # Flags of ExecStart and of the env file's TRAINYARD_*_ARGS examples against --help.
  help=$("$BIN_DIR/$program" --help 2>&1)
  flags=$( { echo "$exec_start"; grep -E '^#? *TRAINYARD_[A-Z_]*ARGS=' "$env"; } \
    | grep -oE -- '(^|[ =])--[a-z0-9-]+' | sed 's/^[ =]//' | sort -u)
  [[ -n "$flags" ]] || fail "$program: no flags found in ExecStart"
  for flag in $flags; do
    if echo "$help" | grep -qE -- "(^|[ ,])$flag([ =,]|\$)"; then
      ok "$program: $flag is one of its options"
    else
      fail "$program: $flag (ExecStart or $service.env) is not in $program --help"
    fi
  done

  # Variables: used by ExecStart, defaulted by the unit, set by the env file.
  used=$(echo "$exec_start" | grep -oE '\$\{?[A-Za-z_][A-Za-z0-9_]*' | tr -d '${' | sort -u)
  defaulted=$(grep -oE '^Environment=[A-Za-z_][A-Za-z0-9_]*=' "$unit" | sed -E 's/^Environment=(.*)=$/\1/' | sort -u)
  in_env=$(grep -oE '^#? *[A-Z][A-Z0-9_]*=' "$env" | sed -E 's/^#? *//; s/=$//' | sort -u)
  for v in $used; do
    echo "$defaulted" | grep -qx "$v" && ok "$program: \$$v has a default in the unit" \
      || fail "$program: ExecStart uses \$$v, which the unit does not default (Environment=)"
  done
  for v in $in_env; do
    echo "$used" | grep -qx "$v" && ok "$program: $service.env's $v is used by ExecStart" \
      || fail "$program: $service.env sets $v, which ExecStart does not use"
  done
done

# The services' command lines, started as the units would start them.
if [[ -x "$BIN_DIR/trainyard" ]]; then
  mapfile -t cargs < <(expand_exec "$UNITS/trainyard-controller.service" "$UNITS/controller.env" \
    TRAINYARD_LISTEN=127.0.0.1:0 TRAINYARD_METRICS_LISTEN= "TRAINYARD_CONTROLLER_ARGS=--port-file $TMP/port")
  echo "controller: ${cargs[*]}"
  "${cargs[@]}" > "$TMP/controller.log" 2>&1 &
  CONTROLLER_PID=$!
  for _ in $(seq 1 100); do [[ -s "$TMP/port" ]] && break; sleep 0.1; done
  PORT=$(cat "$TMP/port" 2>/dev/null)
  if [[ -z "$PORT" ]]; then
    fail "the controller unit's command line did not start a controller:"
    sed 's/^/    /' "$TMP/controller.log"
  else
    ok "the controller unit's command line starts a controller (port $PORT, data in $TMP/state/trainyard)"
    [[ -f "$TMP/state/trainyard/trainyard.db" ]] || fail "no trainyard.db in the unit's state folder"
    mapfile -t wargs < <(expand_exec "$UNITS/trainyard-worker.service" "$UNITS/worker.env" \
      "TRAINYARD_CONTROLLER=127.0.0.1:$PORT")
    echo "worker: ${wargs[*]}"
    "${wargs[@]}" > "$TMP/worker.log" 2>&1 &
    WORKER_PID=$!
    listed=""
    for _ in $(seq 1 100); do
      listed=$("$BIN_DIR/trainyard" workers --controller "127.0.0.1:$PORT" 2>/dev/null | grep -F -- "$HOST")
      [[ -n "$listed" ]] && break
      sleep 0.1
    done
    if [[ -n "$listed" ]]; then
      ok "the worker unit's command line registers worker '$HOST' (the %H default name)"
    else
      fail "the worker unit's command line did not register a worker named '$HOST':"
      sed 's/^/    /' "$TMP/worker.log"
    fi
    kill -TERM "$WORKER_PID" 2>/dev/null
    wait "$WORKER_PID"
    rc=$?
    WORKER_PID=""
    [[ $rc -eq 0 ]] && ok "the worker exits 0 on SIGTERM" || fail "the worker exited $rc (SIGTERM sent, or it had ended)"
  fi
  kill -TERM "$CONTROLLER_PID" 2>/dev/null
  wait "$CONTROLLER_PID"
  rc=$?
  CONTROLLER_PID=""
  [[ $rc -eq 0 ]] && ok "the controller exits 0 on SIGTERM" || fail "the controller exited $rc (SIGTERM sent, or it had ended)"
else
  fail "$BIN_DIR/trainyard is not built"
fi

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "systemd_units_test: systemd-analyze is not installed (Debian package systemd): skipped the verify step"
  [[ $FAILURES -eq 0 ]] && exit 77
fi
if [[ $FAILURES -gt 0 ]]; then
  echo "systemd_units_test: $FAILURES check(s) failed"
  exit 1
fi
echo "systemd_units_test: all checks passed"
