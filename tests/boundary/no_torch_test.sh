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
if ! ldd "$control" | grep -Eq "$torch_re"; then
  echo "FAIL: $control does not show LibTorch in ldd; the check cannot see it" >&2
  exit 1
fi
status=0
for bin in "$@"; do
  if found=$(ldd "$bin" | grep -E "$torch_re"); then
    echo "FAIL: $(basename "$bin") links LibTorch:" >&2
    echo "$found" >&2
    status=1
  else
    echo "ok: $(basename "$bin") links no LibTorch ($(ldd "$bin" | wc -l) libraries)"
  fi
done
exit $status
