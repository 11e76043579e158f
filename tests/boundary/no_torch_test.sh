#!/usr/bin/env bash
# Checks the architecture's link boundary: the controller, the CLI and the worker daemon
# must not load LibTorch (only worker/engine links it). Usage:
#   no_torch_test.sh TORCH_BINARY -- BINARY...
# TORCH_BINARY (trainyard-rank) must show LibTorch in ldd, which proves the check can
# see it; every BINARY after -- must not.
set -euo pipefail
torch_re='lib(torch|torch_cpu|torch_cuda|c10|c10_cuda)\.so'
control="$1"
shift
[ "$1" = "--" ] && shift
# ldd's output is read whole before grep: with pipefail, `ldd | grep -q` fails whenever grep
# exits at its first match while ldd is still writing (SIGPIPE), which made this check flaky.
control_libs=$(ldd "$control")
if ! grep -Eq "$torch_re" <<<"$control_libs"; then
  echo "FAIL: $control does not show LibTorch in ldd; the check cannot see it" >&2
  exit 1
fi
status=0
for bin in "$@"; do
  libs=$(ldd "$bin")
  if found=$(grep -E "$torch_re" <<<"$libs"); then
    echo "FAIL: $(basename "$bin") links LibTorch:" >&2
    echo "$found" >&2
    status=1
  else
    echo "ok: $(basename "$bin") links no LibTorch ($(wc -l <<<"$libs") libraries)"
  fi
done
exit $status
