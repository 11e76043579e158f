#!/usr/bin/env bash
# The sanitizer stage of CI (issue 14): builds the torch-free code, its unit tests and
# the libFuzzer targets with clang under ASan+UBSan in a second build directory
# (TRAINYARD_SANITIZE=ON; /work's normal build is untouched), runs those tests once,
# then each fuzz target for FUZZ_SECONDS (default 60) from a temporary copy of its seed
# corpus, so CI never grows the repository. Fails on any test failure, sanitizer report
# or fuzzer finding; a finding's input is kept under $ARTIFACTS (printed). JOBS (default
# 2) sets the build's parallelism, ctest's, and how many fuzz targets run at once.
#
#   bash .ci/sanitizers.sh                    # everything, 60 s per target
#   FUZZ_SECONDS=10 bash .ci/sanitizers.sh     # a shorter local run
#   FUZZ_TARGETS="job_file_fuzz" SKIP_BUILD=1 SKIP_TESTS=1 bash .ci/sanitizers.sh
#   SKIP_TESTS=1 SKIP_FUZZ=1 bash .ci/sanitizers.sh   # the build alone (.ci/run)
#
# Needs, beyond deploy/install-deps.sh: clang (14) and libclang-rt-14-dev (the ASan,
# UBSan and libFuzzer runtimes); llvm-14 (llvm-symbolizer) for symbolised reports.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD_DIR:-build-san}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
JOBS=${JOBS:-2}
ARTIFACTS=${ARTIFACTS:-$BUILD/fuzz-artifacts}
ALL_TARGETS="job_file_fuzz submit_request_fuzz event_batch_fuzz safetensors_header_fuzz checkpoint_manifest_fuzz indexed_index_fuzz"
TARGETS=${FUZZ_TARGETS:-$ALL_TARGETS}

for tool in clang++ cmake ninja; do
  command -v "$tool" >/dev/null || { echo "sanitizers: $tool not found (apt-get install clang cmake ninja-build)" >&2; exit 2; }
done
rt=$(clang++ -print-file-name=libclang_rt.fuzzer-x86_64.a)
if [ ! -f "$rt" ]; then
  echo "sanitizers: clang's libFuzzer runtime is missing ($rt): apt-get install libclang-rt-14-dev" >&2
  exit 2
fi
symbolizer=$(command -v llvm-symbolizer || true)
[ -z "$symbolizer" ] && [ -x /usr/lib/llvm-14/bin/llvm-symbolizer ] && symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
[ -n "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH=$symbolizer

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# SQLite stores of the server tests and the EventBatch target: in memory when possible.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi

start=$(date +%s)
if [ -z "${SKIP_BUILD:-}" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DTRAINYARD_SANITIZE=ON >/dev/null
  cmake --build "$BUILD" -j"$JOBS"
fi
built=$(date +%s)
echo "sanitizers: build of $BUILD took $((built - start)) s"

if [ -z "${SKIP_TESTS:-}" ]; then
  # Every test of this build (the torch-free unit, common, server and worker tests, and
  # each fuzz target over its seeds) under ASan+UBSan.
  ctest --test-dir "$BUILD" --output-on-failure -j"$JOBS"
  tested=$(date +%s)
  echo "sanitizers: tests under ASan+UBSan took $((tested - built)) s"
fi

if [ -n "${SKIP_FUZZ:-}" ]; then
  exit 0
fi

mkdir -p "$ARTIFACTS"
# One fuzz target: FUZZ_SECONDS on a temporary copy of its seeds; its exit code goes to
# $ARTIFACTS/$t.rc. JOBS targets run at a time (each is one single-threaded process).
fuzz_one() {
  local t=$1 corpus rc
  corpus=$(mktemp -d)
  cp -r "tests/fuzz/corpus/$t/." "$corpus/"
  set +e
  "$BUILD/bin/$t" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$ARTIFACTS/$t-" "$corpus" >"$ARTIFACTS/$t.log" 2>&1
  rc=$?
  set -e
  rm -rf "$corpus"
  echo "$rc" >"$ARTIFACTS/$t.rc"
}
fuzz_start=$(date +%s)
running=0
for t in $TARGETS; do
  if [ "$running" -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi
  echo "sanitizers: fuzzing $t for ${FUZZ_SECONDS} s"
  fuzz_one "$t" &
  running=$((running + 1))
done
wait || true
echo "sanitizers: fuzzing took $(( $(date +%s) - fuzz_start )) s ($JOBS at a time)"

failed=()
summary=()
for t in $TARGETS; do
  log=$ARTIFACTS/$t.log
  rc=$(cat "$ARTIFACTS/$t.rc" 2>/dev/null || echo "?")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  summary+=("$t: ${execs:-?} runs, ${rate:-?} exec/s, exit $rc")
  if [ "$rc" != 0 ]; then
    failed+=("$t")
    echo "sanitizers: $t FAILED (exit $rc); last lines of $log:" >&2
    tail -40 "$log" >&2
    ls "$ARTIFACTS"/"$t"-* 2>/dev/null | sed 's/^/  finding: /' >&2 || true
  fi
done

printf 'sanitizers: %s\n' "${summary[@]}"
if [ "${#failed[@]}" -ne 0 ]; then
  echo "sanitizers: findings in ${failed[*]} (inputs under $ARTIFACTS)" >&2
  exit 1
fi
echo "sanitizers: OK"
