"""checkpoint(), cordon(), uncordon() and drain() against an in-process fake JobService:
what they send, the deadline a checkpoint gets, what they return, the controller's
refusals as typed errors, and the arguments refused before anything is sent (no
controller needed: ctest's python_client_unit_test runs it)."""

import math
import threading
import unittest
from concurrent import futures

import grpc

import trainyard_client as ty
from trainyard_client._stubs import job_pb2, job_service_pb2, job_service_pb2_grpc


class FakeJobService(job_service_pb2_grpc.JobServiceServicer):
    """job-3 runs with checkpoint.dir on w1; job-5 runs without it; w1 and w2 exist.
    `refuse` maps an id or name to (grpc.StatusCode, message) for its next call."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []  # (method, request, seconds left before the call's deadline)
        self.workers = {n: job_service_pb2.WorkerInfo(name=n, slots=2, connected=True) for n in ("w1", "w2")}
        self.refuse = {}

    def _record(self, method, request, context):
        with self.lock:
            self.requests.append((method, request, context.time_remaining()))
        key = getattr(request, "job_id", "") or getattr(request, "name", "")
        if key in self.refuse:
            code, message = self.refuse.pop(key)
            context.abort(code, message)

    def CheckpointJob(self, request, context):
        self._record("CheckpointJob", request, context)
        if request.job_id not in ("job-3", "job-5"):
            context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id} not found")
        if request.job_id == "job-5":
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "job job-5 has no checkpoint.dir")
        return job_service_pb2.CheckpointJobResponse(checkpoint=job_pb2.CheckpointRef(
            step=120, path="/ckpt/job-3/step-120", attempt=2, bytes=73728))

    def _worker(self, name, context):
        if name not in self.workers:
            context.abort(grpc.StatusCode.NOT_FOUND, f"worker '{name}' is not known to this controller")
        return self.workers[name]

    def CordonWorker(self, request, context):
        self._record("CordonWorker", request, context)
        w = self._worker(request.name, context)
        w.cordoned = request.cordon
        w.cordon_reason = request.reason if request.cordon else ""
        return w

    def DrainWorker(self, request, context):
        self._record("DrainWorker", request, context)
        w = self._worker(request.name, context)
        w.cordoned, w.cordon_reason = True, request.reason
        return job_service_pb2.DrainWorkerResponse(worker=w, job_ids=["job-3"] if request.name == "w1" else [])


class FleetAdminTest(unittest.TestCase):
    def setUp(self):
        self.service = FakeJobService()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        job_service_pb2_grpc.add_JobServiceServicer_to_server(self.service, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self.addCleanup(server.stop, None)
        self.client = ty.Client(f"127.0.0.1:{port}", timeout=5)
        self.addCleanup(self.client.close)

    def last(self, method):
        calls = [(r, left) for m, r, left in self.service.requests if m == method]
        return calls[-1] if calls else (None, None)

    def test_checkpoint_returns_the_saved_checkpoint_and_waits_past_the_controllers_deadline(self):
        ck = self.client.checkpoint("job-3")
        self.assertIsInstance(ck, ty.CheckpointRef)
        self.assertEqual((ck.step, ck.path, ck.attempt, ck.bytes), (120, "/ckpt/job-3/step-120", 2, 73728))
        request, left = self.last("CheckpointJob")
        self.assertEqual((request.job_id, request.timeout_s), ("job-3", 0.0))
        # 0 asks for the controller's 300 s; the call outlives it by the 30 s margin, not
        # by the client's 5 s default (gRPC rounds a deadline up on the wire: 1 s slack).
        self.assertGreater(left, 300)
        self.assertLessEqual(left, 331)
        self.client.checkpoint("job-3", timeout_s=12.5)
        request, left = self.last("CheckpointJob")
        self.assertEqual(request.timeout_s, 12.5)
        self.assertGreater(left, 12.5)
        self.assertLessEqual(left, 43.5)

    def test_checkpoint_refusals_are_typed_errors_with_the_controllers_message(self):
        with self.assertRaises(ty.NotFound) as e:
            self.client.checkpoint("job-9")
        self.assertEqual((e.exception.message, e.exception.rpc), ("job job-9 not found", "CheckpointJob"))
        with self.assertRaises(ty.FailedPrecondition) as e:
            self.client.checkpoint("job-5")
        self.assertEqual(e.exception.message, "job job-5 has no checkpoint.dir")
        self.service.refuse["job-3"] = (grpc.StatusCode.DEADLINE_EXCEEDED, "no checkpoint within 5 s")
        with self.assertRaises(ty.DeadlineExceeded) as e:
            self.client.checkpoint("job-3", timeout_s=5)
        self.assertEqual(e.exception.message, "no checkpoint within 5 s")
        self.service.refuse["job-3"] = (grpc.StatusCode.ABORTED, "attempt 2 ended before the checkpoint")
        with self.assertRaises(ty.Aborted) as e:
            self.client.checkpoint("job-3")
        self.assertEqual(e.exception.code, grpc.StatusCode.ABORTED)

    def test_a_bad_checkpoint_timeout_is_refused_before_anything_is_sent(self):
        for bad in (-1, math.nan, math.inf, 3601):
            with self.subTest(timeout_s=bad), self.assertRaises(ValueError) as e:
                self.client.checkpoint("job-3", timeout_s=bad)
            self.assertIn("timeout_s must be in [0, 3600] seconds", str(e.exception))
        self.assertEqual(self.service.requests, [])

    def test_cordon_uncordon_and_drain(self):
        w = self.client.cordon("w1", "disk swap")
        self.assertIsInstance(w, ty.WorkerInfo)
        self.assertEqual((w.name, w.cordoned, w.cordon_reason), ("w1", True, "disk swap"))
        request, _ = self.last("CordonWorker")
        self.assertEqual((request.name, request.cordon, request.reason), ("w1", True, "disk swap"))
        w = self.client.uncordon("w1")
        self.assertEqual((w.cordoned, w.cordon_reason), (False, ""))
        request, _ = self.last("CordonWorker")
        self.assertEqual((request.name, request.cordon), ("w1", False))
        drained = self.client.drain("w1", reason="kernel update")
        self.assertIsInstance(drained, ty.DrainResult)
        self.assertEqual((drained.worker.name, drained.worker.cordoned, drained.worker.cordon_reason,
                          drained.job_ids), ("w1", True, "kernel update", ["job-3"]))
        self.assertEqual(self.client.drain("w2").job_ids, [])
        request, _ = self.last("DrainWorker")
        self.assertEqual((request.name, request.reason), ("w2", ""))

    def test_worker_refusals(self):
        for call in (lambda: self.client.cordon("w9"), lambda: self.client.uncordon("w9"),
                     lambda: self.client.drain("w9")):
            with self.assertRaises(ty.NotFound) as e:
                call()
            self.assertEqual(e.exception.message, "worker 'w9' is not known to this controller")
        self.service.refuse["w1"] = (grpc.StatusCode.PERMISSION_DENIED, "DrainWorker needs the admin role")
        with self.assertRaises(ty.PermissionDenied) as e:
            self.client.drain("w1")
        self.assertEqual((e.exception.message, e.exception.rpc), ("DrainWorker needs the admin role", "DrainWorker"))
        self.assertFalse(self.service.workers["w1"].cordoned)


if __name__ == "__main__":
    unittest.main()
