"""watch()'s reconnect-and-resume against an in-process fake JobService whose streams
break midway, over WatchJobBatched (events in batches) and, against a fake controller
older than that RPC, over WatchJob (no controller needed: tests/client/python runs it
on its own too)."""

import threading
import unittest
from concurrent import futures

import grpc

import trainyard_client as ty
from trainyard_client._stubs import event_pb2, job_pb2, job_service_pb2, job_service_pb2_grpc


def _event(seq, state=None):
    e = event_pb2.Event(job_id="j", seq=seq, rank=-1 if state else 0)
    if state is not None:
        e.job_state.state = state
    else:
        e.step_metrics.step = seq
        e.step_metrics.loss = 1.0 / seq
    return e


def _validation(seq, step, loss):
    e = event_pb2.Event(job_id="j", seq=seq, rank=0, attempt=1)
    e.validation.step = step
    e.validation.loss = loss
    e.validation.tokens = 2048
    e.validation.ms = 12.5
    return e


# seq 1 PENDING, 2, 3 and 5 steps, 4 a validation, 6 SUCCEEDED.
EVENTS = ([_event(1, job_pb2.Job.PENDING), _event(2), _event(3), _validation(4, 3, 0.4375), _event(5)]
          + [_event(6, job_pb2.Job.SUCCEEDED)])


class FakeJobService(job_service_pb2_grpc.JobServiceServicer):
    """Call n of WatchJob or WatchJobBatched answers as script[n-1] (else `fallback`):
    (replay_before, stop_after_seq or None, a grpc.StatusCode to end with or None).
    WatchJobBatched sends the events `batch` to a message."""

    def __init__(self, script, fallback=(0, None, None), batch=2):
        self.script = list(script)
        self.fallback = fallback
        self.batch = batch
        self.calls = []    # (rpc, from_seq) of every watch call
        self.batches = []  # the seqs of each WatchJobBatched message sent
        self.lock = threading.Lock()

    @property
    def from_seqs(self):
        return [from_seq for _, from_seq in self.calls]

    def GetJob(self, request, context):
        return job_pb2.Job(id=request.id, state=job_pb2.Job.RUNNING)

    def _answer(self, rpc, request):
        with self.lock:
            self.calls.append((rpc, request.from_seq))
            n = len(self.calls)
        replay_before, stop_after, code = self.script[n - 1] if n <= len(self.script) else self.fallback
        start = max(1, request.from_seq - replay_before)
        return [e for e in EVENTS if e.seq >= start and (stop_after is None or e.seq <= stop_after)], code

    def WatchJob(self, request, context):
        events, code = self._answer("WatchJob", request)
        yield from events
        if code is not None:
            context.abort(code, "controller restarting")

    def WatchJobBatched(self, request, context):
        events, code = self._answer("WatchJobBatched", request)
        for i in range(0, len(events), self.batch):
            batch = events[i:i + self.batch]
            with self.lock:
                self.batches.append([e.seq for e in batch])
            yield job_service_pb2.WatchJobResponse(events=batch)
        if code is not None:
            context.abort(code, "controller restarting")


class MethodRecorder(grpc.ServerInterceptor):
    """The method name of every call that reached the server, served or not."""

    def __init__(self):
        self.methods = []

    def intercept_service(self, continuation, handler_call_details):
        self.methods.append(handler_call_details.method.rsplit("/", 1)[-1])
        return continuation(handler_call_details)


def old_controller_handler(service):
    """A JobService that predates WatchJobBatched: only GetJob and WatchJob are served,
    so WatchJobBatched is UNIMPLEMENTED as an unknown method."""
    return grpc.method_handlers_generic_handler("trainyard.v1.JobService", {
        "GetJob": grpc.unary_unary_rpc_method_handler(
            service.GetJob, request_deserializer=job_service_pb2.GetJobRequest.FromString,
            response_serializer=job_pb2.Job.SerializeToString),
        "WatchJob": grpc.unary_stream_rpc_method_handler(
            service.WatchJob, request_deserializer=job_service_pb2.WatchJobRequest.FromString,
            response_serializer=event_pb2.Event.SerializeToString),
    })


def serve(test, service, old_controller=False):
    """A client of a server running `service`, and the server's MethodRecorder."""
    recorder = MethodRecorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), interceptors=(recorder,))
    if old_controller:
        server.add_generic_rpc_handlers((old_controller_handler(service),))
    else:
        job_service_pb2_grpc.add_JobServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    test.addCleanup(server.stop, None)
    client = ty.Client(f"127.0.0.1:{port}", timeout=5)
    test.addCleanup(client.close)
    return client, recorder


class WatchResumeTest(unittest.TestCase):
    """Over WatchJobBatched, two events to a message."""
    OLD_CONTROLLER = False
    RPC = "WatchJobBatched"

    def serve(self, service):
        client, _ = serve(self, service, self.OLD_CONTROLLER)
        return client

    def assert_calls(self, service, from_seqs):
        self.assertEqual(service.calls, [(self.RPC, s) for s in from_seqs])

    def test_a_broken_stream_resumes_at_the_next_seq_with_no_event_twice(self):
        unavailable = grpc.StatusCode.UNAVAILABLE
        # Breaks after 3; the resumed stream replays two events too early.
        service = FakeJobService([(0, 3, unavailable), (2, None, None)])
        c = self.serve(service)
        events = list(c.watch("j", timeout=30))
        self.assertEqual([e.seq for e in events], [1, 2, 3, 4, 5, 6])
        self.assert_calls(service, [1, 4])
        self.assertEqual(events[-1].payload.state, ty.JobState.SUCCEEDED)

    def test_validations_come_with_the_steps_as_typed_payloads(self):
        # A break right after the validation: the resumed stream does not send it twice.
        service = FakeJobService([(0, 4, grpc.StatusCode.UNAVAILABLE), (1, None, None)])
        c = self.serve(service)
        events = list(c.watch("j", timeout=30))
        self.assertEqual([e.kind for e in events], ["job_state", "step_metrics", "step_metrics", "validation",
                                                    "step_metrics", "job_state"])
        v = [e.payload for e in events if e.kind == "validation"]
        self.assertEqual(len(v), 1)
        self.assertIsInstance(v[0], ty.Validation)
        self.assertEqual((v[0].step, v[0].loss, v[0].tokens, v[0].ms), (3, 0.4375, 2048, 12.5))
        self.assert_calls(service, [1, 5])

    def test_from_seq_and_repeated_breaks(self):
        unavailable = grpc.StatusCode.UNAVAILABLE
        service = FakeJobService([(0, 4, unavailable), (0, 4, unavailable), (1, 5, unavailable)])
        c = self.serve(service)
        self.assertEqual([e.seq for e in c.watch("j", 3, timeout=30)], [3, 4, 5, 6])
        self.assert_calls(service, [3, 5, 5, 6])

    def test_a_first_call_that_fails_is_raised_without_retrying(self):
        service = FakeJobService([(0, 0, grpc.StatusCode.UNAVAILABLE)])
        c = self.serve(service)
        with self.assertRaises(ty.Unavailable) as raised:
            list(c.watch("j", timeout=30))
        self.assertEqual(raised.exception.rpc, self.RPC)
        self.assertEqual(str(raised.exception), f"{self.RPC}: UNAVAILABLE: controller restarting")
        self.assert_calls(service, [1])

    def test_reconnect_for_zero_raises_at_the_first_break(self):
        service = FakeJobService([(0, 2, grpc.StatusCode.UNAVAILABLE)])
        c = self.serve(service)
        seen = []
        with self.assertRaises(ty.Unavailable) as raised:
            for e in c.watch("j", reconnect_for=0, timeout=30):
                seen.append(e.seq)
        self.assertEqual(seen, [1, 2])
        self.assertEqual(raised.exception.rpc, self.RPC)
        self.assert_calls(service, [1])

    def test_a_stream_that_keeps_breaking_gives_up(self):
        service = FakeJobService([], fallback=(0, 2, grpc.StatusCode.UNAVAILABLE))
        c = self.serve(service)
        seen = []
        with self.assertRaises(ty.Unavailable) as raised:
            for e in c.watch("j", reconnect_for=0.6, timeout=30):
                seen.append(e.seq)
        self.assertEqual(seen, [1, 2])
        self.assertEqual(raised.exception.rpc, self.RPC)
        self.assertGreaterEqual(len(service.from_seqs), 2)  # how many retries fit depends on the machine
        self.assertEqual(set(service.from_seqs[1:]), {3})
        self.assertEqual({rpc for rpc, _ in service.calls}, {self.RPC})

    def test_a_refusal_is_not_retried(self):
        service = FakeJobService([(0, 2, grpc.StatusCode.UNAVAILABLE), (0, 2, grpc.StatusCode.PERMISSION_DENIED)])
        c = self.serve(service)
        with self.assertRaises(ty.PermissionDenied) as raised:
            list(c.watch("j", timeout=30))
        self.assertEqual(raised.exception.rpc, self.RPC)
        self.assert_calls(service, [1, 3])


class WatchResumeOnAnOldControllerTest(WatchResumeTest):
    """The same against a controller without WatchJobBatched: over WatchJob."""
    OLD_CONTROLLER = True
    RPC = "WatchJob"


class WatchBatchedTest(unittest.TestCase):
    def test_a_batch_comes_out_as_its_events_in_seq_order(self):
        service = FakeJobService([], batch=4)
        c, recorder = serve(self, service)
        events = list(c.watch("j", timeout=30))
        self.assertEqual(service.batches, [[1, 2, 3, 4], [5, 6]])
        self.assertEqual([e.seq for e in events], [1, 2, 3, 4, 5, 6])
        self.assertEqual([e.kind for e in events], ["job_state", "step_metrics", "step_metrics", "validation",
                                                    "step_metrics", "job_state"])
        self.assertEqual([(e.payload.step, e.payload.loss) for e in events[1:3]], [(2, 0.5), (3, 1.0 / 3)])
        self.assertEqual((events[3].payload.step, events[3].payload.loss, events[3].payload.tokens), (3, 0.4375, 2048))
        self.assertEqual((events[0].payload.state, events[5].payload.state),
                         (ty.JobState.PENDING, ty.JobState.SUCCEEDED))
        self.assertEqual(service.calls, [("WatchJobBatched", 1)])
        self.assertEqual(recorder.methods, ["WatchJobBatched"])

    def test_a_whole_job_in_one_batch_from_a_seq(self):
        service = FakeJobService([], batch=100)
        c, _ = serve(self, service)
        self.assertEqual([e.seq for e in c.watch("j", 3, timeout=30)], [3, 4, 5, 6])
        self.assertEqual(service.batches, [[3, 4, 5, 6]])
        self.assertEqual(service.calls, [("WatchJobBatched", 3)])

    def test_a_resumed_batch_that_repeats_delivered_events_yields_only_the_new_ones(self):
        unavailable = grpc.StatusCode.UNAVAILABLE
        # Breaks after the batch [1, 2, 3]; the resumed stream from 4 replays 2 and 3 in
        # the same batch as 4, then [5, 6].
        service = FakeJobService([(0, 3, unavailable), (2, None, None)], batch=3)
        c, recorder = serve(self, service)
        events = list(c.watch("j", timeout=30))
        self.assertEqual(service.batches, [[1, 2, 3], [2, 3, 4], [5, 6]])
        self.assertEqual([e.seq for e in events], [1, 2, 3, 4, 5, 6])
        self.assertEqual(events[3].kind, "validation")
        self.assertEqual(service.calls, [("WatchJobBatched", 1), ("WatchJobBatched", 4)])
        self.assertEqual(recorder.methods, ["WatchJobBatched", "GetJob", "WatchJobBatched"])

    def test_a_resumed_batch_of_only_delivered_events_yields_nothing_from_it(self):
        unavailable = grpc.StatusCode.UNAVAILABLE
        # Breaks after [1, 2] [3, 4]; the resumed stream from 5 replays [2, 3] [4, 5] [6].
        service = FakeJobService([(0, 4, unavailable), (3, None, None)], batch=2)
        c, _ = serve(self, service)
        self.assertEqual([e.seq for e in c.watch("j", timeout=30)], [1, 2, 3, 4, 5, 6])
        self.assertEqual(service.batches, [[1, 2], [3, 4], [2, 3], [4, 5], [6]])
        self.assertEqual(service.from_seqs, [1, 5])

    def test_an_old_controller_is_watched_over_watch_job_and_the_client_remembers(self):
        service = FakeJobService([(0, 3, grpc.StatusCode.UNAVAILABLE)], batch=4)
        c, recorder = serve(self, service, old_controller=True)
        first = list(c.watch("j", timeout=30))
        self.assertEqual([e.seq for e in first], [1, 2, 3, 4, 5, 6])
        self.assertEqual(first[-1].payload.state, ty.JobState.SUCCEEDED)
        # WatchJobBatched once, UNIMPLEMENTED; then WatchJob from 1, broken after 3 and
        # resumed from 4, still WatchJob.
        self.assertEqual(recorder.methods, ["WatchJobBatched", "WatchJob", "GetJob", "WatchJob"])
        self.assertEqual(service.calls, [("WatchJob", 1), ("WatchJob", 4)])
        self.assertEqual(service.batches, [])
        # A later watch by the same client goes straight to WatchJob.
        second = list(c.watch("j", 5, timeout=30))
        self.assertEqual([e.seq for e in second], [5, 6])
        self.assertEqual(recorder.methods[4:], ["WatchJob"])
        self.assertEqual(service.calls[2:], [("WatchJob", 5)])
        # A new client asks for WatchJobBatched again.
        other = ty.Client(c.address, timeout=5)
        self.addCleanup(other.close)
        self.assertEqual([e.seq for e in other.watch("j", 6, timeout=30)], [6])
        self.assertEqual(recorder.methods[5:], ["WatchJobBatched", "WatchJob"])

    def test_an_error_after_the_fallback_names_watch_job(self):
        service = FakeJobService([(0, 0, grpc.StatusCode.NOT_FOUND)])
        c, recorder = serve(self, service, old_controller=True)
        with self.assertRaises(ty.NotFound) as raised:
            list(c.watch("j", timeout=30))
        self.assertEqual(raised.exception.rpc, "WatchJob")
        self.assertEqual(str(raised.exception), "WatchJob: NOT_FOUND: controller restarting")
        self.assertEqual(recorder.methods, ["WatchJobBatched", "WatchJob"])

    def test_a_controller_that_has_watch_job_batched_is_not_given_up_on(self):
        # Another error of WatchJobBatched (here a refusal) is raised, never a fallback.
        service = FakeJobService([(0, 0, grpc.StatusCode.PERMISSION_DENIED)])
        c, recorder = serve(self, service)
        with self.assertRaises(ty.PermissionDenied) as raised:
            list(c.watch("j", timeout=30))
        self.assertEqual(raised.exception.rpc, "WatchJobBatched")
        self.assertEqual(recorder.methods, ["WatchJobBatched"])
        self.assertEqual([e.seq for e in c.watch("j", 6, timeout=30)], [6])
        self.assertEqual(service.calls, [("WatchJobBatched", 1), ("WatchJobBatched", 6)])


if __name__ == "__main__":
    unittest.main()
