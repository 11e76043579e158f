#!/usr/bin/env bash
# Makes the one Python environment Trainyard uses, a venv at $TRAINYARD_VENV (default
# /opt/trainyard/venv, from Debian's python3 and python3-venv), and installs the pinned
# packages of python-requirements.txt from PyPI into it: the torch wheel (LibTorch 2.11
# with CUDA 13.0 and its nvidia-* runtime wheels: what the engine's programs link and
# load), grpcio/protobuf for the Python client, playwright for the browser test.
#   deploy/install-python.sh [REQUIREMENTS]     (default: python-requirements.txt beside it)
# deploy/install-deps.sh runs it for a build machine; the trainyard-worker package ships
# it (/usr/share/trainyard/install-python.sh) for a GPU host. Idempotent: a venv that
# already holds every pinned version is left as it is.
set -euo pipefail

VENV=${TRAINYARD_VENV:-/opt/trainyard/venv}
REQUIREMENTS=${1:-$(dirname "$0")/python-requirements.txt}
if [ ! -f "$REQUIREMENTS" ]; then
  echo "install-python: no requirements file $REQUIREMENTS" >&2
  exit 2
fi
SUDO=""
if [ "$(id -u)" -ne 0 ] && [ ! -w "$(dirname "$VENV")" ]; then SUDO="sudo"; fi

if [ ! -x "$VENV/bin/python3" ]; then
  if ! /usr/bin/python3 -c 'import ensurepip' 2>/dev/null; then
    echo "install-python: /usr/bin/python3 cannot make a venv: apt-get install python3-venv" >&2
    exit 2
  fi
  echo "install-python: creating the venv $VENV"
  $SUDO mkdir -p "$(dirname "$VENV")"
  $SUDO /usr/bin/python3 -m venv "$VENV"
fi
# Every pinned distribution at its version already: nothing to download.
if "$VENV/bin/python3" - "$REQUIREMENTS" <<'PY'
import sys
from importlib import metadata
def norm(name):
    return name.lower().replace("_", "-").replace(".", "-")
want = {}
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if line:
        name, version = line.split("==")
        want[norm(name)] = version
have = {norm(d.metadata["Name"]): d.version for d in metadata.distributions()}
sys.exit(1 if any(have.get(n) != v for n, v in want.items()) else 0)
PY
then
  echo "install-python: $VENV holds every pinned package of $REQUIREMENTS"
  exit 0
fi
echo "install-python: pip install -r $REQUIREMENTS into $VENV (the torch wheel and its CUDA runtime: ~3 GB)"
start=$SECONDS
$SUDO "$VENV/bin/pip" install --no-input --disable-pip-version-check -r "$REQUIREMENTS"
echo "install-python: done in $((SECONDS - start)) s"
