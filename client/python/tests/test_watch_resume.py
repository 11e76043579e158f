"""watch()'s reconnect-and-resume against an in-process fake JobService whose streams
break midway (no controller needed: tests/client/python runs it on its own too)."""

import threading
import unittest
from concurrent import futures

import grpc

import trainyard_client as ty
from trainyard_client._stubs import event_pb2, job_pb2, job_service_pb2_grpc


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
    """Call n of WatchJob answers as script[n-1] (else `fallback`): (replay_before,
    stop_after_seq or None, a grpc.StatusCode to end with or None)."""

    def __init__(self, script, fallback=(0, None, None)):
        self.script = list(script)
        self.fallback = fallback
        self.from_seqs = []
        self.lock = threading.Lock()

    def GetJob(self, request, context):
        return job_pb2.Job(id=request.id, state=job_pb2.Job.RUNNING)

    def WatchJob(self, request, context):
        with self.lock:
            self.from_seqs.append(request.from_seq)
            n = len(self.from_seqs)
        replay_before, stop_after, code = self.script[n - 1] if n <= len(self.script) else self.fallback
        start = max(1, request.from_seq - replay_before)
        for e in EVENTS:
            if e.seq < start:
                continue
            if stop_after is not None and e.seq > stop_after:
                break
            yield e
        if code is not None:
            context.abort(code, "controller restarting")


class WatchResumeTest(unittest.TestCase):
    def serve(self, service):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        job_service_pb2_grpc.add_JobServiceServicer_to_server(service, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self.addCleanup(server.stop, None)
        client = ty.Client(f"127.0.0.1:{port}", timeout=5)
        self.addCleanup(client.close)
        return client

    def test_a_broken_stream_resumes_at_the_next_seq_with_no_event_twice(self):
        unavailable = grpc.StatusCode.UNAVAILABLE
        # Breaks after 3; the resumed stream replays two events too early.
        service = FakeJobService([(0, 3, unavailable), (2, None, None)])
        c = self.serve(service)
        events = list(c.watch("j", timeout=30))
        self.assertEqual([e.seq for e in events], [1, 2, 3, 4, 5, 6])
        self.assertEqual(service.from_seqs, [1, 4])
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
        self.assertEqual(service.from_seqs, [1, 5])

    def test_from_seq_and_repeated_breaks(self):
        unavailable = grpc.StatusCode.UNAVAILABLE
        service = FakeJobService([(0, 4, unavailable), (0, 4, unavailable), (1, 5, unavailable)])
        c = self.serve(service)
        self.assertEqual([e.seq for e in c.watch("j", 3, timeout=30)], [3, 4, 5, 6])
        self.assertEqual(service.from_seqs, [3, 5, 5, 6])

    def test_a_first_call_that_fails_is_raised_without_retrying(self):
        service = FakeJobService([(0, 0, grpc.StatusCode.UNAVAILABLE)])
        c = self.serve(service)
        with self.assertRaises(ty.Unavailable):
            list(c.watch("j", timeout=30))
        self.assertEqual(service.from_seqs, [1])

    def test_reconnect_for_zero_raises_at_the_first_break(self):
        service = FakeJobService([(0, 2, grpc.StatusCode.UNAVAILABLE)])
        c = self.serve(service)
        seen = []
        with self.assertRaises(ty.Unavailable):
            for e in c.watch("j", reconnect_for=0, timeout=30):
                seen.append(e.seq)
        self.assertEqual(seen, [1, 2])
        self.assertEqual(service.from_seqs, [1])

    def test_a_stream_that_keeps_breaking_gives_up(self):
        service = FakeJobService([], fallback=(0, 2, grpc.StatusCode.UNAVAILABLE))
        c = self.serve(service)
        seen = []
        with self.assertRaises(ty.Unavailable):
            for e in c.watch("j", reconnect_for=0.6, timeout=30):
                seen.append(e.seq)
        self.assertEqual(seen, [1, 2])
        self.assertGreaterEqual(len(service.from_seqs), 2)  # how many retries fit depends on the machine
        self.assertEqual(set(service.from_seqs[1:]), {3})

    def test_a_refusal_is_not_retried(self):
        service = FakeJobService([(0, 2, grpc.StatusCode.UNAVAILABLE), (0, 2, grpc.StatusCode.PERMISSION_DENIED)])
        c = self.serve(service)
        with self.assertRaises(ty.PermissionDenied):
            list(c.watch("j", timeout=30))
        self.assertEqual(service.from_seqs, [1, 3])


if __name__ == "__main__":
    unittest.main()
