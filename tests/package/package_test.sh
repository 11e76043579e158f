#!/usr/bin/env bash
# package_debs (ctest, label package): builds the three Debian packages of
# deploy/install.cmake from the configured build tree with cpack, into a temporary
# folder, and checks them as a user would get them:
#   - trainyard-{controller,worker,cli}_VERSION_ARCH.deb exist, with their control fields
#     (name, version, architecture, maintainer) and Depends from dpkg-shlibdeps: the
#     programs' real libraries (gRPC for the controller and the worker, neither LibTorch,
#     which comes from the pinned torch wheel's venv named in the engine programs'
#     RUNPATH), plus adduser for the two services and python3-venv for the worker;
#   - each holds exactly the expected files (no headers, static libraries, test or bench
#     programs), the services' units and env files as in deploy/systemd/, the env files
#     as conffiles and the maintainer scripts executable and valid sh;
#   - unpacked with dpkg-deb -x into one temporary root, every program runs from there
#     (--help, exit 0), and a controller, a worker and the CLI from that root run
#     examples/tiny.toml to SUCCEEDED: the worker finds trainyard-rank beside it in the
#     installed bin/, and the installed example is a valid job.
# Nothing is written to the source or build tree except what cpack's install step
# writes there (the configured units under build/deploy/). Needs the programs built
# (ctest has no build step; CI builds everything first).
#
# Usage: package_test.sh --cpack CPACK --config BUILD/CPackConfig.cmake --source SRC
#                        --version VERSION --bin-dir BUILD/bin
set -uo pipefail

CPACK="" CONFIG="" SRC="" VERSION="" BIN_DIR=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cpack) CPACK=$2; shift 2 ;;
    --config) CONFIG=$2; shift 2 ;;
    --source) SRC=$2; shift 2 ;;
    --version) VERSION=$2; shift 2 ;;
    --bin-dir) BIN_DIR=$2; shift 2 ;;
    *) echo "package_test: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

FAILURES=0
fail() { echo "FAIL: $*"; FAILURES=$((FAILURES + 1)); }
ok() { echo "ok: $*"; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/trainyard-package-test.XXXXXX")
CONTROLLER_PID="" WORKER_PID=""
cleanup() {
  for pid in $WORKER_PID $CONTROLLER_PID; do kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT

PROGRAMS=(trainyard-controller trainyard-worker trainyard-rank trainyard-train trainyard-bench trainyard
          trainyard-tokenize)
for p in "${PROGRAMS[@]}"; do
  if [[ ! -x "$BIN_DIR/$p" ]]; then
    echo "package_test: $BIN_DIR/$p is not built; build the tree first (cmake --build build)" >&2
    exit 1
  fi
done
if [[ ! -f "$CONFIG" ]]; then
  echo "package_test: $CONFIG is missing: the top-level CMakeLists.txt must include deploy/install.cmake" >&2
  exit 1
fi

# --- Build the packages.
START=$SECONDS
if ! "$CPACK" --config "$CONFIG" -B "$TMP/pkg" > "$TMP/cpack.log" 2>&1; then
  cat "$TMP/cpack.log"
  echo "package_test: cpack failed" >&2
  exit 1
fi
echo "cpack: $((SECONDS - START)) s"
ARCH=$(dpkg --print-architecture)
declare -A DEB
for c in controller worker cli; do
  DEB[$c]="$TMP/pkg/trainyard-${c}_${VERSION}_${ARCH}.deb"
done
found=$(cd "$TMP/pkg" && ls ./*.deb 2>/dev/null | sed 's#^\./##' | sort | tr '\n' ' ')
expected_debs=$(for c in cli controller worker; do basename "${DEB[$c]}"; done | sort | tr '\n' ' ')
if [[ "$found" == "$expected_debs" ]]; then
  ok "packages: $found"
else
  fail "packages: expected '$expected_debs', cpack made '$found'"
  exit 1
fi

# --- Control fields.
field() { dpkg-deb -f "${DEB[$1]}" "$2"; }
for c in controller worker cli; do
  name=$(field "$c" Package) version=$(field "$c" Version) arch=$(field "$c" Architecture)
  if [[ "$name" == "trainyard-$c" && "$version" == "$VERSION" && "$arch" == "$ARCH" ]]; then
    ok "trainyard-$c: Package, Version $version, Architecture $arch"
  else
    fail "trainyard-$c: Package '$name', Version '$version', Architecture '$arch'"
  fi
  [[ -n "$(field "$c" Maintainer)" ]] || fail "trainyard-$c: no Maintainer"
  [[ -n "$(field "$c" Description)" ]] || fail "trainyard-$c: no Description"
done
# Depends as dpkg-shlibdeps derived them from the binaries: each package names the
# libraries its programs really link, and only those.
depends_has() {  # PACKAGE REGEX WANT(yes|no) WHY
  local deps
  deps=$(field "$1" Depends)
  if echo "$deps" | tr ',' '\n' | grep -qE "^ *($2)( |$)"; then
    [[ "$3" == yes ]] && ok "trainyard-$1 depends on $2 ($4)" || fail "trainyard-$1 depends on $2 ($4): $deps"
  else
    [[ "$3" == no ]] && ok "trainyard-$1 does not depend on $2 ($4)" || fail "trainyard-$1 lacks $2 ($4): $deps"
  fi
}
depends_has controller 'libc6' yes "shlibdeps ran"
depends_has controller 'libgrpc\+\+[0-9.]+' yes "gRPC server"
depends_has controller 'libsqlite3-0' yes "SQLite store"
depends_has controller 'adduser' yes "postinst makes the trainyard user"
depends_has controller 'libtorch[0-9.]*' no "no LibTorch outside the engine"
depends_has worker 'libgrpc\+\+[0-9.]+' yes "controller link"
depends_has worker 'libtorch[0-9.]*' no "LibTorch comes from the pinned torch wheel in a venv, not from Debian"
depends_has worker 'python3-venv' yes "install-python.sh makes that venv"
depends_has worker 'adduser' yes "postinst makes the trainyard user"
depends_has cli 'libgrpc\+\+[0-9.]+' yes "JobService client"
depends_has cli 'libtorch[0-9.]*' no "no LibTorch outside the engine"
depends_has cli 'libsqlite3-0' no "the store is the controller's"
depends_has cli 'libsentencepiece0' yes "trainyard-tokenize"

# --- Contents: exactly these files and links (directories aside).
expect_files() {  # COMPONENT: the expected paths, sorted
  case "$1" in
    controller)
      printf '%s\n' ./etc/trainyard/controller.env ./usr/bin/trainyard-controller \
        ./usr/lib/systemd/system/trainyard-controller.service ;;
    worker)
      printf '%s\n' ./etc/trainyard/worker.env ./usr/bin/trainyard-bench ./usr/bin/trainyard-rank \
        ./usr/bin/trainyard-train ./usr/bin/trainyard-worker \
        ./usr/lib/systemd/system/trainyard-worker.service \
        ./usr/share/trainyard/install-python.sh ./usr/share/trainyard/python-requirements.txt ;;
    cli)
      printf '%s\n' ./usr/bin/trainyard ./usr/bin/trainyard-tokenize
      if [[ -f "$SRC/client/cli/completion/trainyard.bash" ]]; then
        echo ./usr/share/bash-completion/completions/trainyard
      fi
      for f in "$SRC"/examples/*.toml; do echo "./usr/share/trainyard/examples/$(basename "$f")"; done
      echo ./usr/share/trainyard/make-certs.sh ;;
  esac | sort
}
ROOT=$TMP/root
mkdir -p "$ROOT"
for c in controller worker cli; do
  actual=$(dpkg-deb --fsys-tarfile "${DEB[$c]}" | tar -t | grep -v '/$' | sort)
  expected=$(expect_files "$c")
  if [[ "$actual" == "$expected" ]]; then
    ok "trainyard-$c holds exactly: $(echo "$expected" | tr '\n' ' ')"
  else
    fail "trainyard-$c contents differ from the expected list (re-run cmake if client/cli/completion/trainyard.bash is new):"
    diff <(echo "$expected") <(echo "$actual") | sed 's/^/    /'
  fi
  dpkg-deb -x "${DEB[$c]}" "$ROOT" || fail "dpkg-deb -x trainyard-$c"
done

# The installed units and env files are the ones in deploy/systemd/ (the /usr prefix
# leaves their paths as they are); examples and make-certs.sh are the source files.
same() {  # INSTALLED SOURCE WHAT
  if cmp -s "$ROOT/$1" "$SRC/$2"; then ok "$3 is $2"; else fail "$3 ($1) differs from $2"; fi
}
for c in controller worker; do
  same "usr/lib/systemd/system/trainyard-$c.service" "deploy/systemd/trainyard-$c.service" "trainyard-$c.service"
  same "etc/trainyard/$c.env" "deploy/systemd/$c.env" "$c.env"
done
same usr/share/trainyard/make-certs.sh deploy/make-certs.sh make-certs.sh
same usr/share/trainyard/install-python.sh deploy/install-python.sh install-python.sh
same usr/share/trainyard/python-requirements.txt deploy/python-requirements.txt python-requirements.txt
[[ -x "$ROOT/usr/share/trainyard/install-python.sh" ]] || fail "install-python.sh is not executable"
# The engine's programs find LibTorch in the venv through their RUNPATH (no Debian
# package holds it); the worker daemon links none.
for p in trainyard-rank trainyard-train trainyard-bench; do
  runpath=$(readelf -d "$ROOT/usr/bin/$p" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  if [[ -n "$runpath" && -f "$runpath/libtorch.so" ]]; then
    ok "$p's RUNPATH names LibTorch's folder ($runpath)"
  else
    fail "$p's RUNPATH '$runpath' holds no libtorch.so"
  fi
done
same usr/share/trainyard/examples/tiny.toml examples/tiny.toml "examples/tiny.toml"
[[ -x "$ROOT/usr/share/trainyard/make-certs.sh" ]] || fail "make-certs.sh is not executable"
for p in "${PROGRAMS[@]}"; do
  if [[ -n "$(readelf -S "$ROOT/usr/bin/$p" 2>/dev/null | grep -F .debug_info)" ]]; then
    fail "$p still has debug info (CPACK_STRIP_FILES)"
  fi
done

# --- Control area: conffiles and maintainer scripts.
for c in controller worker; do
  ctl=$TMP/control-$c
  dpkg-deb -e "${DEB[$c]}" "$ctl"
  if [[ "$(cat "$ctl/conffiles" 2>/dev/null)" == "/etc/trainyard/$c.env" ]]; then
    ok "trainyard-$c conffiles: /etc/trainyard/$c.env"
  else
    fail "trainyard-$c conffiles: '$(cat "$ctl/conffiles" 2>/dev/null)'"
  fi
  for s in postinst prerm postrm; do
    if [[ -x "$ctl/$s" ]] && sh -n "$ctl/$s" && grep -q "trainyard-$c.service" "$ctl/$s"; then
      ok "trainyard-$c $s: executable, valid sh, names trainyard-$c.service"
    else
      fail "trainyard-$c $s: missing, not executable, not valid sh or not about trainyard-$c.service"
    fi
  done
  grep -q "@" "$ctl/postinst" && fail "trainyard-$c postinst has an unsubstituted @VAR@"
done
[[ -z "$(dpkg-deb -e "${DEB[cli]}" "$TMP/control-cli" && ls "$TMP/control-cli" | grep -vE '^(control|md5sums)$')" ]] \
  || fail "trainyard-cli has maintainer scripts or conffiles"

# --- The programs run from the temporary root.
for p in "${PROGRAMS[@]}"; do
  out=$("$ROOT/usr/bin/$p" --help 2>&1)
  rc=$?
  if [[ $rc -eq 0 && -n "$out" ]]; then
    ok "$p --help from the unpacked root: exit 0"
  else
    fail "$p --help from the unpacked root: exit $rc: $(echo "$out" | head -3)"
  fi
done

# A fleet from the root: controller, one worker with two slots, the CLI submitting the
# installed tiny example for 3 steps with dp=2 and waiting for its end.
B=$ROOT/usr/bin
"$B/trainyard-controller" --listen 127.0.0.1:0 --port-file "$TMP/port" --data-dir "$TMP/data" \
  > "$TMP/controller.log" 2>&1 &
CONTROLLER_PID=$!
for _ in $(seq 1 100); do [[ -s "$TMP/port" ]] && break; sleep 0.1; done
PORT=$(cat "$TMP/port" 2>/dev/null)
if [[ -z "$PORT" ]]; then
  fail "installed trainyard-controller did not start:"; sed 's/^/    /' "$TMP/controller.log"
else
  # Rendezvous ports of this test's own, below the kernel's ephemeral range (32768 and
  # up), which outgoing connections and Gloo take.
  RZ=$((10000 + ($$ % 560) * 40))
  "$B/trainyard-worker" --controller "127.0.0.1:$PORT" --slots 2 --name package-test \
    --work-dir "$TMP/work" --threads-per-rank 1 --rendezvous-ports "$RZ-$((RZ + 9))" \
    > "$TMP/worker.log" 2>&1 &
  WORKER_PID=$!
  for _ in $(seq 1 100); do
    "$B/trainyard" workers --controller "127.0.0.1:$PORT" 2>/dev/null | grep -q package-test && break
    sleep 0.1
  done
  START=$SECONDS
  timeout 120 "$B/trainyard" submit "$ROOT/usr/share/trainyard/examples/tiny.toml" \
    --controller "127.0.0.1:$PORT" --set training.steps=3 --set parallelism.dp=2 --wait \
    > "$TMP/submit.log" 2>&1
  rc=$?
  if [[ $rc -eq 0 ]] && grep -q "SUCCEEDED" "$TMP/submit.log"; then
    ok "installed controller + worker + CLI: examples/tiny.toml (dp=2, 3 steps) SUCCEEDED in $((SECONDS - START)) s"
  else
    fail "installed fleet: submit --wait exited $rc"
    for f in submit controller worker; do echo "  -- $f.log (last 15 lines)"; tail -15 "$TMP/$f.log" | sed 's/^/    /'; done
  fi
fi

if [[ $FAILURES -gt 0 ]]; then
  echo "package_test: $FAILURES check(s) failed"
  exit 1
fi
echo "package_test: all checks passed"
