"""Client of the controller's JobService: submit, get, list, watch, cancel, checkpoint,
artifacts, and the fleet: workers, cordon, uncordon, drain."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from typing import Any, Iterable, Iterator, List, Mapping, Optional, Union

import grpc

from ._stubs import job_pb2, job_service_pb2, job_service_pb2_grpc, spec_pb2
from .errors import DataLoss, TrainyardError, from_rpc_error
from .results import ArtifactInfo, CheckpointRef, DrainResult, Event, Job, JobState, WorkerInfo
from .spec import spec_from_dict

DEFAULT_CONTROLLER = "127.0.0.1:7070"
# A token travels as an HTTP/2 header value: printable ASCII without spaces. The CLI
# allows the same (client/job_client.cc).
_MAX_TOKEN_BYTES = 4096
# What the controller accepts as an artifact name; checked before anything is written,
# so a name never reaches outside the destination directory.
_ARTIFACT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# watch() reconnects a broken stream after this long, doubling up to the cap (the CLI's
# figures, JobWatch::Options in client/job_watch.h).
_FIRST_BACKOFF_S = 0.25
_MAX_BACKOFF_S = 5.0
# watch() streams WatchJobBatched (WatchJobResponse: a batch of events per message); a
# controller older than that RPC answers UNIMPLEMENTED, and the client then uses WatchJob
# (one Event per message) from then on.
_WATCH_BATCHED = "WatchJobBatched"
_WATCH_ONE_BY_ONE = "WatchJob"
# checkpoint(): the controller waits at most this long (0 asks for its default, 300 s),
# and the call's deadline is the wait plus a margin so that the controller's own
# DEADLINE_EXCEEDED, which says how far the ranks got, arrives first (the CLI's figures,
# client/job_client.h).
_CHECKPOINT_DEFAULT_TIMEOUT_S = 300.0
_CHECKPOINT_MAX_TIMEOUT_S = 3600.0
_CHECKPOINT_DEADLINE_MARGIN_S = 30.0
# A ListJobs answer of 1000 jobs with their specs outgrows gRPC's 4 MiB default.
_MAX_RECEIVE_BYTES = 64 * 1024 * 1024

Spec = Union[Mapping[str, Any], "spec_pb2.JobSpec"]


def _quote(text: str, limit: int = 100) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def check_token(token: str, source: str) -> str:
    """token, or ValueError saying why it cannot be sent (never quoting it)."""
    if not token:
        raise ValueError(f"{source}: the token is empty")
    if len(token) > _MAX_TOKEN_BYTES:
        raise ValueError(f"{source}: the token is {len(token)} bytes, more than the "
                         f"{_MAX_TOKEN_BYTES} allowed")
    for i, c in enumerate(token):
        if not 0x21 <= ord(c) <= 0x7E:
            raise ValueError(f"{source}: the token has a space or a byte that is not printable "
                             f"ASCII at offset {i} (it is sent as an HTTP/2 header value)")
    return token


def read_token_file(path: str) -> str:
    """The token in the first line of `path`, trailing whitespace removed, checked."""
    source = f"token_file {_quote(str(path))}"
    with open(path, "rb") as f:
        line = f.readline(_MAX_TOKEN_BYTES + 2)
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError(f"{source}: the token is not printable ASCII") from None
    return check_token(text.rstrip(), source)


def is_loopback(address: str) -> bool:
    """localhost:P, [::1]:P or 127.A.B.C:P (decimal octets), as the CLI decides."""
    if address.startswith("localhost:") or address.startswith("[::1]:"):
        return True
    host, sep, _ = address.rpartition(":")
    parts = host.split(".")
    return bool(sep) and len(parts) == 4 and parts[0] == "127" and all(p.isdigit() for p in parts)


class Client:
    """A connection to one controller. Every unary call has a deadline of `timeout`
    seconds; watch() has none unless given. Failed calls raise a TrainyardError
    subclass (NotFound, InvalidArgument, Unauthenticated, ...) with the gRPC code.

    TLS: `tls_ca` (a PEM file) verifies the controller. A bearer token (`token`, or the
    first line of `token_file`) goes with every call as `authorization: Bearer TOKEN`;
    like the CLI, the client refuses to send it in plaintext beyond loopback.
    """

    def __init__(self, address: str = DEFAULT_CONTROLLER, *, tls_ca: Optional[str] = None,
                 token: Optional[str] = None, token_file: Optional[str] = None,
                 timeout: float = 10.0):
        if token is not None and token_file is not None:
            raise ValueError("give token or token_file, not both")
        if token_file is not None:
            token = read_token_file(token_file)
        elif token is not None:
            token = check_token(token, "token")
        if token and tls_ca is None and not is_loopback(address):
            raise ValueError(f"refusing to send the bearer token in plaintext to {_quote(address)}, "
                             "which is not a loopback address: give tls_ca to connect over TLS")
        options = [("grpc.max_receive_message_length", _MAX_RECEIVE_BYTES)]
        if tls_ca is not None:
            with open(tls_ca, "rb") as f:
                credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
            self._channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._stub = job_service_pb2_grpc.JobServiceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.address = address
        self.timeout = timeout
        # The RPC watch() calls: WatchJobBatched until a controller answers UNIMPLEMENTED.
        self._watch_rpc = _WATCH_BATCHED

    @classmethod
    def from_env(cls, **kwargs) -> "Client":
        """A client for TRAINYARD_CONTROLLER (default 127.0.0.1:7070) with the token in
        TRAINYARD_TOKEN, if any, as the CLI does; kwargs as for Client()."""
        address = kwargs.pop("address", os.environ.get("TRAINYARD_CONTROLLER", DEFAULT_CONTROLLER))
        if "token" not in kwargs and "token_file" not in kwargs and os.environ.get("TRAINYARD_TOKEN"):
            kwargs["token"] = check_token(os.environ["TRAINYARD_TOKEN"], "TRAINYARD_TOKEN")
        return cls(address, **kwargs)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, name: str, request, timeout: Optional[float] = None):
        try:
            return getattr(self._stub, name)(request, metadata=self._metadata,
                                             timeout=self.timeout if timeout is None else timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, name) from None

    # ---- Jobs ----

    def submit(self, spec: Spec, *, timeout: Optional[float] = None) -> Job:
        """Submits a job; `spec` is a JobSpec or a dict in the job file's shape. A job
        with compile.preflight waits for the controller's preflight: give it a timeout of
        a few minutes."""
        message = spec if isinstance(spec, spec_pb2.JobSpec) else spec_from_dict(spec)
        request = job_service_pb2.SubmitJobRequest(spec=message)
        return Job.from_proto(self._call("SubmitJob", request, timeout))

    def get(self, job_id: str) -> Job:
        return Job.from_proto(self._call("GetJob", job_service_pb2.GetJobRequest(id=job_id)))

    def list(self, states: Optional[Iterable[Union[JobState, int, str]]] = None,
             limit: int = 0) -> List[Job]:
        """Jobs newest first, those in `states` only (None: all); at most `limit` (0: the
        controller's default 100; at most 1000). A submitter sees its own jobs."""
        request = job_service_pb2.ListJobsRequest(
            states=[int(JobState.parse(s)) for s in states or ()], limit=limit)
        return [Job.from_proto(j) for j in self._call("ListJobs", request).jobs]

    def cancel(self, job_id: str, reason: str = "") -> Job:
        """Cancels a job; its failure_reason becomes "cancelled: REASON". A job that
        already ended raises FailedPrecondition."""
        request = job_service_pb2.CancelJobRequest(id=job_id, reason=reason)
        return Job.from_proto(self._call("CancelJob", request))

    def resize(self, job_id: str, dp: int) -> Job:
        """Restarts a running job from its last checkpoint at data-parallel degree dp."""
        request = job_service_pb2.ResizeJobRequest(job_id=job_id, dp=dp)
        return Job.from_proto(self._call("ResizeJob", request).job)

    def checkpoint(self, job_id: str, timeout_s: float = 0.0) -> CheckpointRef:
        """Asks a RUNNING job's ranks to save a checkpoint at their next step boundary
        (outside checkpoint.interval, which may be 0; the job needs checkpoint.dir) and
        returns it once complete: step, path, attempt, bytes. The controller waits up to
        `timeout_s` (0: its default, 300 s; at most 3600) and then raises
        DeadlineExceeded; FailedPrecondition for a job that is not RUNNING or has no
        checkpoint.dir, Aborted when the attempt ends first."""
        timeout_s = float(timeout_s)
        if not 0.0 <= timeout_s <= _CHECKPOINT_MAX_TIMEOUT_S:  # NaN fails both
            raise ValueError(f"timeout_s must be in [0, {_CHECKPOINT_MAX_TIMEOUT_S:g}] seconds, got {timeout_s!r}")
        request = job_service_pb2.CheckpointJobRequest(job_id=job_id, timeout_s=timeout_s)
        waits = timeout_s or _CHECKPOINT_DEFAULT_TIMEOUT_S
        response = self._call("CheckpointJob", request, waits + _CHECKPOINT_DEADLINE_MARGIN_S)
        return CheckpointRef.from_proto(response.checkpoint)

    def watch(self, job_id: str, from_seq: int = 0, *, timeout: Optional[float] = None,
              reconnect_for: float = 300.0) -> Iterator[Event]:
        """The job's events in seq order: the stored ones from `from_seq` (0 or 1: from the
        start), then live ones; the iterator ends once the job has ended and every event
        of it was sent (the terminal job_state, and for a cancelled job its ranks' KILLED
        states, which come after it).

        It streams WatchJobBatched, whose messages each carry one or more events (what
        the controller had for the stream at once), and yields them one at a time. A
        controller older than that RPC answers UNIMPLEMENTED before sending anything: the
        call is then made again at once as WatchJob (one event per message), and this
        client uses WatchJob from then on. An error names the RPC it came from.

        A stream that breaks (UNAVAILABLE: the controller restarted, the network dropped)
        after delivering an event is resumed from the seq after the last one delivered,
        as the CLI's watch does: backoff from 0.25 s doubling to 5 s, for at most
        `reconnect_for` seconds of outage (0: raise at the first break); an event sent
        again (alone, or in a batch that also has new ones) is dropped, so each seq comes
        once. `timeout` bounds the whole watch. Closing the iterator (or breaking out of a
        for loop over it) cancels the stream."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last_seq = from_seq - 1 if from_seq > 0 else 0
        connected = False
        outage_since: Optional[float] = None
        backoff = _FIRST_BACKOFF_S
        # Only one GetJob probe may end an outage per new event: a stream that keeps
        # breaking at the same seq while GetJob answers still gives up.
        probe_ended_outage = False
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if outage_since is not None and not probe_ended_outage:
                # A resumed stream may have nothing to say for long (a PENDING job): the
                # controller answering ends the outage.
                try:
                    self.get(job_id)
                    probe_ended_outage, outage_since, backoff = True, None, _FIRST_BACKOFF_S
                except TrainyardError:
                    pass
            rpc = self._watch_rpc
            batched = rpc == _WATCH_BATCHED
            request = job_service_pb2.WatchJobRequest(id=job_id, from_seq=last_seq + 1)
            stream = getattr(self._stub, rpc)(request, metadata=self._metadata, timeout=remaining)
            answered = False  # this call sent a message
            try:
                for message in stream:
                    answered = connected = True
                    outage_since, backoff = None, _FIRST_BACKOFF_S
                    for event in message.events if batched else (message,):
                        if event.seq <= last_seq:
                            continue  # replayed across a reconnect
                        last_seq = event.seq
                        probe_ended_outage = False
                        yield Event.from_proto(event)
                return
            except grpc.RpcError as e:
                if batched and not answered and e.code() == grpc.StatusCode.UNIMPLEMENTED:
                    # A controller older than WatchJobBatched: the same call as WatchJob,
                    # now and for every later watch of this client.
                    self._watch_rpc = _WATCH_ONE_BY_ONE
                    continue
                if (not connected or e.code() != grpc.StatusCode.UNAVAILABLE
                        or reconnect_for <= 0):
                    raise from_rpc_error(e, rpc) from None
                now = time.monotonic()
                if outage_since is None:
                    outage_since = now
                elif now - outage_since >= reconnect_for:
                    raise from_rpc_error(e, rpc) from None
            finally:
                stream.cancel()
            time.sleep(backoff if deadline is None else min(backoff, max(0.0, deadline - time.monotonic())))
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def wait(self, job_id: str, *, timeout: Optional[float] = None) -> Job:
        """Follows the job until it ends and returns its final record."""
        for _ in self.watch(job_id, timeout=timeout):
            pass
        return self.get(job_id)

    def workers(self) -> List[WorkerInfo]:
        """Every worker the controller knows: slots, and for a GPU worker its gpus,
        gpu_samples (the newest reading of each), free_gpus, unhealthy_gpus and
        capabilities (WorkerInfo in results.py)."""
        response = self._call("ListWorkers", job_service_pb2.ListWorkersRequest())
        return [WorkerInfo.from_proto(w) for w in response.workers]

    def cordon(self, name: str, reason: str = "") -> WorkerInfo:
        """Admin only: the worker takes no new ranks (what runs there keeps running) until
        uncordon(); survives a controller restart. Returns the worker (cordoned,
        cordon_reason). NotFound for an unknown worker, PermissionDenied without the
        admin role."""
        request = job_service_pb2.CordonWorkerRequest(name=name, cordon=True, reason=reason)
        return WorkerInfo.from_proto(self._call("CordonWorker", request))

    def uncordon(self, name: str) -> WorkerInfo:
        """Admin only: the worker takes new ranks again."""
        request = job_service_pb2.CordonWorkerRequest(name=name, cordon=False)
        return WorkerInfo.from_proto(self._call("CordonWorker", request))

    def drain(self, name: str, reason: str = "") -> DrainResult:
        """Admin only: cordons the worker, then asks every job with a rank there to save a
        checkpoint and stop, as a preemption does (no restart used), so that it is
        rescheduled elsewhere. Returns DrainResult(worker, job_ids): the jobs it moves.
        It does not wait for them to move: watch() them."""
        request = job_service_pb2.DrainWorkerRequest(name=name, reason=reason)
        return DrainResult.from_proto(self._call("DrainWorker", request))

    # ---- Artifacts ----

    def artifacts(self, job_id: str) -> List[ArtifactInfo]:
        """The job's stored artifacts (profiler traces, flight-recorder dumps), oldest first."""
        response = self._call("ListArtifacts", job_service_pb2.ListArtifactsRequest(job_id=job_id))
        return [ArtifactInfo.from_proto(a) for a in response.artifacts]

    def pull_artifact(self, job_id: str, name: str, dest_dir: str = ".", *,
                      timeout: float = 1800.0) -> str:
        """Downloads one artifact to dest_dir/name and returns that path. The bytes go to a
        temporary file in dest_dir that is renamed only once their size and sha256 match
        the controller's; otherwise nothing is left and DataLoss is raised."""
        if not _ARTIFACT_NAME.fullmatch(name):
            raise ValueError(f"{_quote(name)} is not an artifact name "
                             "([A-Za-z0-9][A-Za-z0-9._-]{0,127})")
        os.makedirs(dest_dir, exist_ok=True)
        request = job_service_pb2.PullArtifactRequest(job_id=job_id, name=name)
        stream = self._stub.PullArtifact(request, metadata=self._metadata, timeout=timeout)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=dest_dir)
        try:
            info = None
            digest = hashlib.sha256()
            size = 0
            with os.fdopen(fd, "wb") as out:
                try:
                    for chunk in stream:
                        if info is None:
                            info = chunk.info
                        digest.update(chunk.data)
                        size += len(chunk.data)
                        out.write(chunk.data)
                except grpc.RpcError as e:
                    raise from_rpc_error(e, "PullArtifact") from None
            if info is None or size != info.size_bytes or digest.hexdigest() != info.sha256:
                want = "no info" if info is None else f"{info.size_bytes} bytes, sha256 {info.sha256}"
                raise DataLoss(f"artifact {name}: got {size} bytes, sha256 {digest.hexdigest()}; "
                               f"the controller has {want}", rpc="PullArtifact")
            path = os.path.join(dest_dir, name)
            os.replace(tmp, path)
            tmp = None
            return path
        finally:
            stream.cancel()
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)
