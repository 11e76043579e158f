"""Typed errors: every failed call raises a TrainyardError subclass carrying the gRPC
status code and the controller's message (which names the field and the rule)."""

from __future__ import annotations

import grpc


class TrainyardError(Exception):
    """A call to the controller failed. ``code`` is the grpc.StatusCode, ``message`` the
    controller's (or gRPC's) text."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: grpc.StatusCode | None = None, rpc: str = ""):
        if code is not None:
            self.code = code
        self.message = message
        self.rpc = rpc
        where = f"{rpc}: " if rpc else ""
        super().__init__(f"{where}{self.code.name}: {message}")


class Cancelled(TrainyardError):
    code = grpc.StatusCode.CANCELLED


class InvalidArgument(TrainyardError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(TrainyardError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(TrainyardError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(TrainyardError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(TrainyardError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(TrainyardError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(TrainyardError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(TrainyardError):
    """checkpoint(): the job's attempt ended before the checkpoint was complete."""
    code = grpc.StatusCode.ABORTED


class Unimplemented(TrainyardError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(TrainyardError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(TrainyardError):
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(TrainyardError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(TrainyardError):
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE = {
    cls.code: cls
    for cls in (Cancelled, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
                PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, Unimplemented,
                Internal, Unavailable, DataLoss, Unauthenticated)
}


def from_rpc_error(error: grpc.RpcError, rpc: str) -> TrainyardError:
    """The typed error of a failed call (codes without a class of their own, such as
    UNKNOWN, are a plain TrainyardError with that code)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = error.details() if hasattr(error, "details") else str(error)
    cls = _BY_CODE.get(code, TrainyardError)
    if cls is TrainyardError:
        return TrainyardError(message or "", code, rpc)
    return cls(message or "", rpc=rpc)
