#!/usr/bin/env bash
# Installs what building, testing and running the demo need:
# - Debian 12 packages (openssl: deploy/make-certs.sh; clang, compiler-rt and llvm's
#   symbolizer: the sanitizer and fuzzing build of .ci/sanitizers.sh; clang-format: the
#   formatting check of .ci/run; kubernetes-client,
#   yamllint and prometheus's promtool: the deploy/ checks; tmux: the CLI's terminal
#   test; chromium: the web UI test; iproute2: the multi-host tests' network namespaces,
#   veths, bridge and tc; libgloo-dev: the Gloo headers c10d's ProcessGroupGloo.hpp
#   includes, which the torch wheel does not ship; python3-venv: the venv below);
# - the one Python environment, a venv at $TRAINYARD_VENV (default /opt/trainyard/venv)
#   with the pinned packages of deploy/python-requirements.txt from PyPI: the torch
#   wheel (LibTorch 2.11 with CUDA 13.0: the engine's headers, libraries and CMake
#   config, with its nvidia-* runtime wheels), grpcio/protobuf for the Python client,
#   playwright for the browser test. CMake finds it there (cmake/trainyard_python.cmake).
# Idempotent: packages already present are skipped by apt, and pip leaves a venv that
# already holds every pinned version as it is; safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git procps
  libgloo-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libsqlite3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libssl-dev libcurl4-openssl-dev libsentencepiece-dev
  libpcre2-dev libicu-dev
  prometheus
  openssl
  iproute2
  clang libclang-rt-14-dev llvm clang-format
  yamllint tmux chromium
  python3 python3-venv
  libboost-dev
)

# kubectl renders deploy/k8s (kubectl kustomize). Debian's is kubernetes-client; a machine
# that already has a kubectl from elsewhere (Google's cloud SDK, say) keeps it, since the
# two packages both own /usr/bin/kubectl.
if ! command -v kubectl >/dev/null 2>&1; then PACKAGES+=(kubernetes-client); fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

# The venv with the pinned PyPI packages (deploy/install-python.sh); .ci/run sets
# TRAINYARD_SKIP_PYTHON=1 and runs it beside apt instead.
if [ -z "${TRAINYARD_SKIP_PYTHON:-}" ]; then
  bash deploy/install-python.sh deploy/python-requirements.txt
fi
