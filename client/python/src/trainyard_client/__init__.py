"""Python client of the Trainyard controller's JobService (docs/api.md).

    from trainyard_client import Client, load_job_file
    with Client("127.0.0.1:7070") as c:
        job = c.submit(load_job_file("examples/tiny.toml", {"training.steps": 5}))
        for event in c.watch(job.id):
            print(event.seq, event.kind, event.payload)
        print(c.get(job.id).state)
"""

from .client import DEFAULT_CONTROLLER, Client, check_token, is_loopback, read_token_file
from .errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded, FailedPrecondition,
                     Internal, InvalidArgument, NotFound, PermissionDenied, ResourceExhausted,
                     TrainyardError, Unauthenticated, Unavailable, Unimplemented)
from .results import (ArtifactInfo, ArtifactRef, CheckpointRef, CheckpointSaved, CheckpointsPruned, CompileEvent,
                      DrainResult, EngineCapabilities, Event, GpuDevice, GpuSample, Job, JobState,
                      JobStateChange, LogLine, Placement, RankPlacement, RankState, ShareInfo, Stall,
                      StepMetrics, Validation, WorkerEnv, WorkerInfo)
from .spec import SpecError, check_spec_dict, load_job_file, spec_from_dict

__version__ = "0.9.0"

__all__ = [name for name in dir() if not name.startswith("_")]
