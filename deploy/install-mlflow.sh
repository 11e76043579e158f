#!/usr/bin/env bash
# Makes the MLflow tracking server's own venv, $TRAINYARD_MLFLOW_VENV (default
# /opt/trainyard/mlflow-venv), with the fully pinned mlflow-requirements.txt beside it:
# what the MLflow integration test (tests/integration/mlflow_test.cc) starts as
# `mlflow server`. Apart from /opt/trainyard/venv so that MLflow's ~85 packages never
# move the project's pins. The controller itself needs none of it: it speaks MLflow's
# REST API (--mlflow-uri). Idempotent, as install-python.sh (which it runs) is.
set -euo pipefail
here=$(dirname "$0")
TRAINYARD_VENV=${TRAINYARD_MLFLOW_VENV:-/opt/trainyard/mlflow-venv} \
  exec bash "$here/install-python.sh" "$here/mlflow-requirements.txt"
