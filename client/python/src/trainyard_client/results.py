"""Typed results: frozen dataclasses made from the controller's messages.

Field names are the .proto names (proto/trainyard/v1/*.proto documents each); enums
become JobState or their .proto value names, timestamps timezone-aware datetimes (None
when unset), repeated fields lists."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Union

from google.protobuf import json_format

from ._stubs import event_pb2, job_pb2


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


def _time(msg, name: str) -> Optional[datetime]:
    if not msg.HasField(name):
        return None
    return getattr(msg, name).ToDatetime(tzinfo=timezone.utc)


def _plain(cls, msg, **converted):
    """cls made from the scalar and repeated-scalar fields of msg of the same names; the
    fields in `converted` are given already converted."""
    values: Dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in converted:
            values[f.name] = converted[f.name]
            continue
        v = getattr(msg, f.name)
        values[f.name] = list(v) if not isinstance(v, (str, bytes, int, float, bool)) else v
    return cls(**values)


# ---- Jobs ----

@dataclass(frozen=True)
class CheckpointRef:
    step: int
    path: str
    attempt: int
    bytes: int


@dataclass(frozen=True)
class RankPlacement:
    rank: int
    worker: str


@dataclass(frozen=True)
class Placement:
    ranks: List[RankPlacement]
    master_addr: str
    master_port: int


@dataclass(frozen=True)
class Job:
    id: str
    owner: str
    state: JobState
    pending_reason: str
    # The normalised spec (preset and defaults applied) in the job file's shape:
    # {"model": {"preset": "tiny", "dim": 64, ...}, "training": {...}, ...}.
    spec: Dict[str, Any]
    placement: Placement
    attempt: int
    failure_reason: str
    last_seq: int
    world_size: int
    create_time: Optional[datetime]
    start_time: Optional[datetime]
    end_time: Optional[datetime]
    estimated_start_time: Optional[datetime]
    reserved_workers: List[str]
    last_checkpoint: Optional[CheckpointRef]
    failure_causes: List[str]

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    @classmethod
    def from_proto(cls, msg: "job_pb2.Job") -> "Job":
        placement = Placement(
            ranks=[RankPlacement(rank=r.rank, worker=r.worker) for r in msg.placement.ranks],
            master_addr=msg.placement.master_addr, master_port=msg.placement.master_port)
        checkpoint = (_plain(CheckpointRef, msg.last_checkpoint)
                      if msg.HasField("last_checkpoint") else None)
        return _plain(
            cls, msg, state=JobState(msg.state), placement=placement,
            spec=json_format.MessageToDict(msg.spec, preserving_proto_field_name=True),
            create_time=_time(msg, "create_time"), start_time=_time(msg, "start_time"),
            end_time=_time(msg, "end_time"),
            estimated_start_time=_time(msg, "estimated_start_time"),
            last_checkpoint=checkpoint)


# ---- Events ----

@dataclass(frozen=True)
class StepMetrics:
    step: int
    loss: float
    grad_norm: float
    lr: float
    tokens_per_s: float
    model_tflops: float
    mfu: float
    step_ms: float
    data_ms: float
    peak_rss_mb: float
    expert_load: List[int]
    imbalance: float
    tokens: int


@dataclass(frozen=True)
class CompileEvent:
    kind: str  # CompileEvent.Kind name: "COMPILE", "RECOMPILE", ...
    region: str
    layers: List[int]
    reason: str
    compile_ms: float
    cache_entries: int


@dataclass(frozen=True)
class RankState:
    state: str  # RankState.State name: "STARTING", "RUNNING", "EXITED", "FAILED", "KILLED"
    worker: str
    pid: int
    exit_code: int
    signal: int
    message: str


@dataclass(frozen=True)
class LogLine:
    level: str
    message: str


@dataclass(frozen=True)
class ArtifactRef:
    name: str
    kind: str
    size_bytes: int
    uri: str
    sha256: str


@dataclass(frozen=True)
class Stall:
    collective: str
    collective_seq: int
    lagging_rank: int
    waited_s: float
    message: str
    waiting_ranks: List[int]
    step: int


@dataclass(frozen=True)
class JobStateChange:
    state: JobState
    reason: str


@dataclass(frozen=True)
class CheckpointSaved:
    step: int
    path: str
    bytes: int
    blocked_ms: float
    write_ms: float
    dp: int
    tp: int
    ep: int


Payload = Union[StepMetrics, CompileEvent, RankState, LogLine, ArtifactRef, Stall,
                JobStateChange, CheckpointSaved, None]


def _payload(msg: "event_pb2.Event") -> Payload:
    kind = msg.WhichOneof("payload")
    if kind is None:
        return None
    p = getattr(msg, kind)
    if kind == "step_metrics":
        return _plain(StepMetrics, p)
    if kind == "compile":
        return _plain(CompileEvent, p, kind=event_pb2.CompileEvent.Kind.Name(p.kind))
    if kind == "rank_state":
        return _plain(RankState, p, state=event_pb2.RankState.State.Name(p.state))
    if kind == "log":
        return _plain(LogLine, p)
    if kind == "artifact":
        return _plain(ArtifactRef, p)
    if kind == "stall":
        return _plain(Stall, p)
    if kind == "job_state":
        return JobStateChange(state=JobState(p.state), reason=p.reason)
    if kind == "checkpoint":
        return _plain(CheckpointSaved, p)
    return None  # a payload newer than this client


@dataclass(frozen=True)
class Event:
    job_id: str
    seq: int
    time: Optional[datetime]
    rank: int  # -1 for the controller's events
    attempt: int
    source_seq: int
    # The payload's .proto field name ("step_metrics", "job_state", ...; "" when unset)
    # and the payload itself.
    kind: str
    payload: Payload = field(repr=True)

    @classmethod
    def from_proto(cls, msg: "event_pb2.Event") -> "Event":
        return cls(job_id=msg.job_id, seq=msg.seq, time=_time(msg, "time"), rank=msg.rank,
                   attempt=msg.attempt, source_seq=msg.source_seq,
                   kind=msg.WhichOneof("payload") or "", payload=_payload(msg))


# ---- Artifacts and workers ----

@dataclass(frozen=True)
class ArtifactInfo:
    job_id: str
    name: str
    kind: str  # "trace" | "flight_recorder"
    attempt: int
    rank: int  # -1: a worker's own file
    worker: str
    size_bytes: int
    sha256: str
    create_time: Optional[datetime]

    @classmethod
    def from_proto(cls, msg) -> "ArtifactInfo":
        return _plain(cls, msg, create_time=_time(msg, "create_time"))


@dataclass(frozen=True)
class WorkerInfo:
    name: str
    slots: int
    free_slots: int
    connected: bool
    address: str

    @classmethod
    def from_proto(cls, msg) -> "WorkerInfo":
        return _plain(cls, msg)
