"""The modules protoc generates from proto/trainyard/v1 (package ``trainyard.v1``).

They are generated, never committed: into the package tree before installing, or into
a build directory named by TRAINYARD_PYTHON_STUBS (tests/api does that). See
README.md."""

from __future__ import annotations

import importlib
import os
import sys

_HOWTO = (
    "the generated modules trainyard.v1.*_pb2 are missing: generate them with this "
    "Python's grpcio-tools (deploy/python-requirements.txt pins it)\n"
    "  python3 -m grpc_tools.protoc -I proto --python_out=DIR --grpc_python_out=DIR "
    "proto/trainyard/v1/*.proto\n"
    "and put DIR on PYTHONPATH or in TRAINYARD_PYTHON_STUBS (or build the CMake target "
    "trainyard_python_stubs, which writes them to BUILD/client/python/stubs)")


def _load():
    names = ("device_pb2", "spec_pb2", "job_pb2", "event_pb2", "job_service_pb2", "job_service_pb2_grpc")
    extra = os.environ.get("TRAINYARD_PYTHON_STUBS", "")
    if extra and extra not in sys.path:
        sys.path.insert(0, extra)
    try:
        return [importlib.import_module(f"trainyard.v1.{n}") for n in names]
    except ImportError as e:
        raise ImportError(f"{_HOWTO}\n({e})") from None


device_pb2, spec_pb2, job_pb2, event_pb2, job_service_pb2, job_service_pb2_grpc = _load()
