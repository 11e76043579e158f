#!/usr/bin/env bash
# Installs every Debian 12 package that building, testing and running the demo need
# (openssl: deploy/make-certs.sh; clang, compiler-rt and llvm's symbolizer: the
# sanitizer and fuzzing build of .ci/sanitizers.sh; kubernetes-client, yamllint and
# prometheus's promtool: the deploy/ checks; tmux: the CLI's terminal test; chromium:
# the web UI test; python3-grpcio: the Python client; iproute2: the multi-host tests'
# network namespaces, veths, bridge and tc).
# Idempotent: packages already present are skipped by apt; safe to run repeatedly.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git procps
  libtorch-dev libgloo-dev libopenblas0-pthread
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libsqlite3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libssl-dev libsentencepiece-dev
  prometheus
  openssl
  iproute2
  clang libclang-rt-14-dev llvm
  yamllint tmux chromium
  python3 python3-grpcio python3-protobuf
)

# kubectl renders deploy/k8s (kubectl kustomize). Debian's is kubernetes-client; a machine
# that already has a kubectl from elsewhere (Google's cloud SDK, say) keeps it, since the
# two packages both own /usr/bin/kubectl.
if ! command -v kubectl >/dev/null 2>&1; then PACKAGES+=(kubernetes-client); fi
# node and npm run the web UI's browser test (playwright-core from npm, driving Debian's
# chromium). A machine with another Node.js (nodesource's, which bundles its own npm)
# keeps it: Debian's npm would conflict with it.
if ! command -v npm >/dev/null 2>&1; then PACKAGES+=(nodejs npm); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
