"""Typed results: frozen dataclasses made from the controller's messages.

Each class is built from its generated message's descriptor (trainyard.v1 Job, Event's
payloads, ArtifactInfo, ...), so its fields are the .proto fields, by their .proto names
(proto/trainyard/v1/*.proto documents each), and a field added there appears here.
Job.State becomes JobState, other enums their .proto value names, timestamps
timezone-aware datetimes (None when unset), a nested message its own dataclass (None
when unset; a Job's spec a dict in the job file's shape), repeated fields lists, and a
proto3 `optional` scalar (Placement.Rank.gpu) None when unset, so GPU 0 is not "no GPU"."""

from __future__ import annotations

import dataclasses
import enum
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional, Union

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from ._stubs import device_pb2, event_pb2, job_pb2, job_service_pb2


class JobState(enum.IntEnum):
    """Job.State, with the .proto numbers."""

    STATE_UNSPECIFIED = 0
    PENDING = 1
    SCHEDULED = 2
    RUNNING = 3
    SUCCEEDED = 4
    FAILED = 5
    CANCELLED = 6
    RESTARTING = 7

    # Python 3.11's IntEnum prints as its number (`print(job.state)` said 2); a state is
    # read by people as its name, as the CLI prints it. int(state) is still the number.
    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)

    @property
    def terminal(self) -> bool:
        """SUCCEEDED, FAILED and CANCELLED: the job will not change again."""
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)

    @classmethod
    def parse(cls, value: Union["JobState", int, str]) -> "JobState":
        """A state from its number, its name (any case) or itself."""
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                names = ", ".join(s.name for s in cls if s != cls.STATE_UNSPECIFIED)
                raise ValueError(f"{value[:100]!r} is not a job state ({names})") from None
        return cls(value)


_SCALARS = {
    FieldDescriptor.CPPTYPE_INT32: int, FieldDescriptor.CPPTYPE_INT64: int,
    FieldDescriptor.CPPTYPE_UINT32: int, FieldDescriptor.CPPTYPE_UINT64: int,
    FieldDescriptor.CPPTYPE_DOUBLE: float, FieldDescriptor.CPPTYPE_FLOAT: float,
    FieldDescriptor.CPPTYPE_BOOL: bool, FieldDescriptor.CPPTYPE_STRING: str,
}
_TIMESTAMP = "google.protobuf.Timestamp"
_JOB_STATE = "trainyard.v1.Job.State"
_JOB_SPEC = "trainyard.v1.JobSpec"
# Messages that stand even when unset (an empty placement until the job is placed, the
# spec); any other unset message field is None.
_ALWAYS_SET = {_JOB_SPEC, "trainyard.v1.Placement"}
# Dataclasses by message full name, made once each (see _dataclass).
_CLASSES: Dict[str, type] = {}


def _enum_name(f: FieldDescriptor) -> Callable[[int], str]:
    def name(number: int) -> str:
        value = f.enum_type.values_by_number.get(number)
        return value.name if value is not None else str(number)  # newer than this client
    return name


def _converter(f: FieldDescriptor) -> Callable[[Any], Any]:
    """One value of field f (an element, for a repeated field) as the dataclass holds it."""
    if f.type == FieldDescriptor.TYPE_ENUM:
        return JobState if f.enum_type.full_name == _JOB_STATE else _enum_name(f)
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        full = f.message_type.full_name
        if full == _TIMESTAMP:
            return lambda v: v.ToDatetime(tzinfo=timezone.utc)
        if full == _JOB_SPEC:
            return lambda v: json_format.MessageToDict(v, preserving_proto_field_name=True)
        cls = _dataclass(f.message_type)
        return cls.from_proto
    return lambda v: v


def _repeated(f: FieldDescriptor) -> bool:
    """A repeated field: FieldDescriptor.is_repeated. protobuf 7's descriptors have no
    `label` (the fallback, for an older runtime without is_repeated)."""
    repeated = getattr(f, "is_repeated", None)
    return repeated if repeated is not None else f.label == FieldDescriptor.LABEL_REPEATED


def _optional_scalar(f: FieldDescriptor) -> bool:
    """A proto3 `optional` scalar: its presence is tracked (a synthetic oneof "_name")."""
    o = f.containing_oneof
    return (f.type != FieldDescriptor.TYPE_MESSAGE and o is not None and o.name == "_" + f.name
            and len(o.fields) == 1)


def _annotation(f: FieldDescriptor) -> Any:
    if f.type == FieldDescriptor.TYPE_ENUM:
        t: Any = JobState if f.enum_type.full_name == _JOB_STATE else str
    elif f.type == FieldDescriptor.TYPE_MESSAGE:
        full = f.message_type.full_name
        t = (datetime if full == _TIMESTAMP else Dict[str, Any] if full == _JOB_SPEC
             else _dataclass(f.message_type))
    elif f.type == FieldDescriptor.TYPE_BYTES:
        t = bytes
    else:
        t = _SCALARS[f.cpp_type]
    if _repeated(f):
        return List[t]
    if f.type == FieldDescriptor.TYPE_MESSAGE and f.message_type.full_name not in _ALWAYS_SET:
        return Optional[t]
    if _optional_scalar(f):
        return Optional[t]
    return t


def _dataclass(descriptor: Descriptor, name: Optional[str] = None,
               namespace: Optional[Dict[str, Any]] = None) -> type:
    """The frozen dataclass of `descriptor`'s message, its fields the message's in .proto
    order, with from_proto(msg)."""
    if descriptor.full_name in _CLASSES:
        return _CLASSES[descriptor.full_name]
    fields = list(descriptor.fields)
    converters = {f.name: _converter(f) for f in fields}

    def from_proto(cls, msg):
        values: Dict[str, Any] = {}
        for f in fields:
            v = getattr(msg, f.name)
            convert = converters[f.name]
            if _repeated(f):
                values[f.name] = [convert(x) for x in v]
            elif (f.type == FieldDescriptor.TYPE_MESSAGE
                  and f.message_type.full_name not in _ALWAYS_SET and not msg.HasField(f.name)):
                values[f.name] = None
            elif _optional_scalar(f) and not msg.HasField(f.name):
                values[f.name] = None
            else:
                values[f.name] = convert(v)
        return cls(**values)

    ns = {"from_proto": classmethod(from_proto),
          "__doc__": f"trainyard.v1 {descriptor.full_name[len('trainyard.v1.'):]} as a dataclass."}
    ns.update(namespace or {})
    cls = dataclasses.make_dataclass(name or descriptor.name,
                                     [(f.name, _annotation(f)) for f in fields],
                                     frozen=True, namespace=ns)
    cls.__module__ = __name__
    _CLASSES[descriptor.full_name] = cls
    return cls


# ---- Jobs ----

CheckpointRef = _dataclass(job_pb2.CheckpointRef.DESCRIPTOR)
# A rank's worker, and on a CUDA job its GPU there: gpu (NVML index; None on CPU) and
# gpu_uuid (what the rank got as CUDA_VISIBLE_DEVICES).
RankPlacement = _dataclass(job_pb2.Placement.DESCRIPTOR.fields_by_name["ranks"].message_type,
                           "RankPlacement")
# A placed worker's --nccl-env settings as its ranks got them (Placement.worker_env).
WorkerEnv = _dataclass(job_pb2.Placement.DESCRIPTOR.fields_by_name["worker_env"].message_type, "WorkerEnv")
Placement = _dataclass(job_pb2.Placement.DESCRIPTOR)
# Job.spec is the normalised spec (preset and defaults applied) in the job file's shape:
# {"model": {"preset": "tiny", "dim": 64, ...}, "training": {...}, ...}.
# Where a job's owner stands under the controller's --policy-file (Job.share, filled by
# get(); None from list()): owner, group ("" for none), owner/group slots and GPUs in use
# and their limits (0: no limit), weight, usage_slot_seconds (decayed), fair_share
# (usage / weight: lower is served first among equal priority), queue_position (1-based
# while PENDING, else 0) and queue_length.
ShareInfo = _dataclass(job_pb2.ShareInfo.DESCRIPTOR)
# preemptions counts attempts stopped for a higher-priority job or a drain (not failures),
# preempt_times the newest of them.
Job = _dataclass(job_pb2.Job.DESCRIPTOR,
                 namespace={"terminal": property(lambda self: self.state.terminal)})

# ---- Events ----

# One class per payload of Event's oneof, named as its message: StepMetrics (epoch: the
# 1-based epoch of the step's last sample, 0 for synthetic data), CompileEvent (kind: a
# Kind name), RankState (state: a State name), LogLine, ArtifactRef, Stall,
# JobStateChange (state: a JobState), CheckpointSaved (metric_name and metric: the
# checkpoint's checkpoint.best_metric when the job keeps best ones), Validation (step,
# loss, tokens, ms of one [validation] run; loss may be nan for a diverged model),
# CheckpointsPruned (what retention removed after a save: removed, bytes_freed,
# bytes_kept, kept).
_PAYLOADS: Dict[str, type] = {
    f.name: _dataclass(f.message_type)
    for f in event_pb2.Event.DESCRIPTOR.oneofs_by_name["payload"].fields
}
StepMetrics = _CLASSES["trainyard.v1.StepMetrics"]
CompileEvent = _CLASSES["trainyard.v1.CompileEvent"]
RankState = _CLASSES["trainyard.v1.RankState"]
LogLine = _CLASSES["trainyard.v1.LogLine"]
ArtifactRef = _CLASSES["trainyard.v1.ArtifactRef"]
Stall = _CLASSES["trainyard.v1.Stall"]
JobStateChange = _CLASSES["trainyard.v1.JobStateChange"]
CheckpointSaved = _CLASSES["trainyard.v1.CheckpointSaved"]
Validation = _CLASSES["trainyard.v1.Validation"]
CheckpointsPruned = _CLASSES["trainyard.v1.CheckpointsPruned"]

Payload = Any  # one of the classes above, or None


def _event_from_proto(cls, msg: "event_pb2.Event") -> "Event":
    kind = msg.WhichOneof("payload") or ""
    payload_class = _PAYLOADS.get(kind)
    values = {f.name: _ENVELOPE_CONVERTERS[f.name](msg) for f in _ENVELOPE}
    return cls(**values, kind=kind,
               payload=payload_class.from_proto(getattr(msg, kind)) if payload_class else None)


def _envelope_converter(f: FieldDescriptor) -> Callable[[Any], Any]:
    convert = _converter(f)
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        return lambda msg: convert(getattr(msg, f.name)) if msg.HasField(f.name) else None
    return lambda msg: convert(getattr(msg, f.name))


# Event: its fields outside the payload oneof (job_id, seq, time, rank -1 for the
# controller's events, attempt, source_seq, ...), then `kind`, the payload's .proto field
# name ("step_metrics", "job_state", ...; "" when unset), and `payload` (None when unset
# or newer than this client).
_ENVELOPE = [f for f in event_pb2.Event.DESCRIPTOR.fields if f.containing_oneof is None]
_ENVELOPE_CONVERTERS = {f.name: _envelope_converter(f) for f in _ENVELOPE}
Event = dataclasses.make_dataclass(
    "Event", [(f.name, _annotation(f)) for f in _ENVELOPE] + [("kind", str), ("payload", Payload)],
    frozen=True, namespace={"from_proto": classmethod(_event_from_proto),
                            "__doc__": "trainyard.v1 Event as a dataclass: kind and payload for its oneof."})
Event.__module__ = __name__


# ---- Artifacts and workers ----

ArtifactInfo = _dataclass(job_service_pb2.ArtifactInfo.DESCRIPTOR)
# What a worker offers (device.proto): its GPUs (index, uuid, name, memory_bytes,
# nvlink_domain), their newest readings (utilization 0..1, memory_used_bytes,
# power_watts, temperature_celsius, ECC and XID counts, healthy, unhealthy_reason; -1
# where NVML does not report a value) and what its rank binary runs.
GpuDevice = _dataclass(device_pb2.GpuDevice.DESCRIPTOR)
GpuSample = _dataclass(device_pb2.GpuSample.DESCRIPTOR)
EngineCapabilities = _dataclass(device_pb2.EngineCapabilities.DESCRIPTOR)
# A worker: slots, device ("cpu" | "cuda"), gpus, gpu_samples, free_gpus and
# unhealthy_gpus (NVML indices), capabilities (None when the worker sent none), driver
# versions, nvlink_topology_known, nccl_env; cordoned and cordon_reason (a cordoned worker
# takes no new ranks).
WorkerInfo = _dataclass(job_service_pb2.WorkerInfo.DESCRIPTOR)
# drain()'s answer: the worker (now cordoned) and job_ids, the jobs it moves.
DrainResult = _dataclass(job_service_pb2.DrainWorkerResponse.DESCRIPTOR, "DrainResult")
