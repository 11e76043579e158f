"""The Python client against a real controller and worker.

tests/client/python/python_client_test.cc starts them (TLS, bearer tokens) and runs this module
with the connection in the environment:
  TRAINYARD_TEST_CONTROLLER   host:port
  TRAINYARD_TEST_TLS_CA       the fleet's CA (PEM)
  TRAINYARD_TEST_TOKEN_FILE   a submitter's token; TRAINYARD_TEST_VIEWER_TOKEN_FILE a viewer's
  TRAINYARD_TEST_JOB_FILE     examples/tiny.toml
Run by hand: PYTHONPATH=client/python/src:BUILD/client/python/stubs
/opt/trainyard/venv/bin/python3 -m unittest discover -s client/python/tests -v
"""

import hashlib
import math
import os
import tempfile
import time
import unittest

import grpc

import trainyard_client as ty

ENV = ("TRAINYARD_TEST_CONTROLLER", "TRAINYARD_TEST_TLS_CA", "TRAINYARD_TEST_TOKEN_FILE",
       "TRAINYARD_TEST_VIEWER_TOKEN_FILE", "TRAINYARD_TEST_JOB_FILE")
STEPS = 6
# A watch of a 6-step tiny job ends in seconds; this only stops a hang.
WATCH_TIMEOUT_S = 120


def setUpModule():
    missing = [name for name in ENV if not os.environ.get(name)]
    if missing:
        raise RuntimeError(f"set {', '.join(missing)}: this module needs a real controller "
                           "(tests/client/python/python_client_test.cc starts one)")


def client(token_file=None, **kwargs):
    return ty.Client(os.environ["TRAINYARD_TEST_CONTROLLER"], tls_ca=os.environ["TRAINYARD_TEST_TLS_CA"],
                     token_file=token_file or os.environ["TRAINYARD_TEST_TOKEN_FILE"], **kwargs)


class JobFlowTest(unittest.TestCase):
    """One short job, profiled so that it leaves a trace artifact, followed to its end."""

    @classmethod
    def setUpClass(cls):
        cls.c = client()
        spec = ty.load_job_file(os.environ["TRAINYARD_TEST_JOB_FILE"], {
            "training.steps": STEPS, "training.log_freq": 1, "restart.max_restarts": 0,
            "profiling.enable": True, "profiling.freq": 5, "profiling.warmup": 1,
            "profiling.active": 2, "validation.dataset": "synthetic", "validation.freq": 3,
            "validation.steps": 1})
        cls.submitted = cls.c.submit(spec)
        cls.events = list(cls.c.watch(cls.submitted.id, timeout=WATCH_TIMEOUT_S))
        cls.final = cls.c.get(cls.submitted.id)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_submit_returns_the_stored_normalised_job(self):
        job = self.submitted
        self.assertIsInstance(job, ty.Job)
        self.assertRegex(job.id, r"^job-\d+$")
        self.assertEqual(job.owner, "alice")  # the submitter token's owner
        self.assertIn(job.state, (ty.JobState.PENDING, ty.JobState.SCHEDULED, ty.JobState.RUNNING))
        # Normalised: the tiny preset's sizes (examples/tiny.toml lists them) are filled in.
        self.assertEqual(job.spec["model"]["preset"], "tiny")
        self.assertEqual(job.spec["model"]["dim"], 64)
        self.assertEqual(job.spec["model"]["n_layers"], 2)
        self.assertEqual(job.spec["training"]["steps"], STEPS)
        self.assertIsNotNone(job.create_time)
        self.assertIsNotNone(job.create_time.tzinfo)

    def test_watch_streams_every_event_in_order_to_the_terminal_state(self):
        seqs = [e.seq for e in self.events]
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)))
        self.assertTrue(all(isinstance(e, ty.Event) and e.job_id == self.submitted.id for e in self.events))
        steps = [e.payload for e in self.events if e.kind == "step_metrics"]
        self.assertEqual([s.step for s in steps], list(range(1, STEPS + 1)))
        for s in steps:
            self.assertIsInstance(s, ty.StepMetrics)
            self.assertTrue(math.isfinite(s.loss) and s.loss > 0, s)
            self.assertGreater(s.tokens_per_s, 0)
            self.assertIsInstance(s.expert_load, list)
        last = self.events[-1]
        self.assertEqual(last.kind, "job_state")
        self.assertEqual(last.rank, -1)
        self.assertIsInstance(last.payload, ty.JobStateChange)
        self.assertEqual(last.payload.state, ty.JobState.SUCCEEDED)
        states = [e.payload.state for e in self.events if e.kind == "job_state"]
        self.assertIn(ty.JobState.RUNNING, states)
        ranks = [e.payload for e in self.events if e.kind == "rank_state"]
        self.assertIn("EXITED", [r.state for r in ranks])
        self.assertEqual({r.worker for r in ranks}, {"w1"})

    def test_watch_returns_the_validations_beside_the_steps(self):
        # [validation] on: rank 0 evaluates every 3 steps (and before the first and after
        # the last); each comes as a typed Validation in seq order with the steps.
        validations = [e for e in self.events if e.kind == "validation"]
        self.assertTrue(validations, "no validation event in the job's stream")
        for e in validations:
            v = e.payload
            self.assertIsInstance(v, ty.Validation)
            self.assertEqual(e.rank, 0)
            self.assertTrue(0 <= v.step <= STEPS, v)
            self.assertTrue(math.isfinite(v.loss) and v.loss > 0, v)
            self.assertGreater(v.tokens, 0)
            self.assertGreaterEqual(v.ms, 0)
        steps = [v.payload.step for v in validations]
        self.assertEqual(steps, sorted(steps))

    def test_watch_from_a_seq_replays_from_there(self):
        tail = list(self.c.watch(self.submitted.id, from_seq=self.final.last_seq - 1,
                                 timeout=WATCH_TIMEOUT_S))
        self.assertEqual([e.seq for e in tail], [self.final.last_seq - 1, self.final.last_seq])
        self.assertEqual(tail, self.events[-2:])

    def test_get_returns_the_final_record(self):
        job = self.final
        self.assertEqual(job.state, ty.JobState.SUCCEEDED)
        self.assertTrue(job.terminal)
        self.assertEqual(job.last_seq, self.events[-1].seq)
        self.assertEqual(job.attempt, 1)
        self.assertEqual(job.world_size, 1)
        self.assertEqual([(r.rank, r.worker) for r in job.placement.ranks], [(0, "w1")])
        self.assertLessEqual(job.create_time, job.start_time)
        self.assertLessEqual(job.start_time, job.end_time)
        self.assertEqual(job.failure_reason, "")

    def test_list_filters_by_state_and_limits(self):
        succeeded = self.c.list(states=["succeeded"])
        self.assertIn(self.submitted.id, [j.id for j in succeeded])
        self.assertTrue(all(j.state == ty.JobState.SUCCEEDED for j in succeeded))
        self.assertNotIn(self.submitted.id,
                         [j.id for j in self.c.list(states=[ty.JobState.RUNNING, ty.JobState.PENDING])])
        everything = self.c.list()
        self.assertGreaterEqual(len(everything), 1)
        self.assertEqual(len(self.c.list(limit=1)), 1)
        # Newest first.
        numbers = [int(j.id.split("-")[1]) for j in everything]
        self.assertEqual(numbers, sorted(numbers, reverse=True))

    def test_artifacts_lists_and_pulls_the_trace(self):
        traces = []
        deadline = time.monotonic() + 60  # uploaded by the worker after the ranks wrote them
        while not traces and time.monotonic() < deadline:
            traces = [a for a in self.c.artifacts(self.submitted.id) if a.kind == "trace"]
            if not traces:
                time.sleep(0.2)
        self.assertTrue(traces, "no trace artifact arrived within 60 s")
        info = traces[0]
        self.assertIsInstance(info, ty.ArtifactInfo)
        self.assertEqual((info.job_id, info.attempt, info.worker), (self.submitted.id, 1, "w1"))
        with tempfile.TemporaryDirectory() as d:
            path = self.c.pull_artifact(self.submitted.id, info.name, d)
            self.assertEqual(path, os.path.join(d, info.name))
            with open(path, "rb") as f:
                data = f.read()
            self.assertEqual(len(data), info.size_bytes)
            self.assertEqual(hashlib.sha256(data).hexdigest(), info.sha256)
            self.assertEqual(os.listdir(d), [info.name])  # no temporary file left

    def test_workers(self):
        workers = self.c.workers()
        self.assertEqual([(w.name, w.slots, w.connected, w.cordoned) for w in workers], [("w1", 1, True, False)])

    def test_an_ended_job_cannot_checkpoint(self):
        with self.assertRaises(ty.FailedPrecondition) as e:
            self.c.checkpoint(self.submitted.id, timeout_s=10)
        self.assertEqual(e.exception.rpc, "CheckpointJob")
        self.assertIn(self.submitted.id, e.exception.message)

    def test_get_tells_the_owners_share(self):
        # No --policy-file: no group, weight 1, no limits; an ended job has no queue place.
        share = self.final.share
        self.assertIsInstance(share, ty.ShareInfo)
        self.assertEqual((share.owner, share.group, share.weight, share.owner_slot_limit, share.queue_position),
                         ("alice", "", 1.0, 0, 0))
        self.assertGreaterEqual(share.usage_slot_seconds, 0)
        self.assertEqual((self.final.preemptions, self.final.preempt_times), (0, []))


class CancelTest(unittest.TestCase):
    def test_cancel_ends_a_job_cancelled(self):
        with client() as c:
            spec = ty.load_job_file(os.environ["TRAINYARD_TEST_JOB_FILE"], {"training.steps": 100000})
            job = c.submit(spec)
            cancelled = c.cancel(job.id, "api test")
            self.assertEqual(cancelled.id, job.id)
            self.assertEqual(cancelled.state, ty.JobState.CANCELLED)
            self.assertEqual(cancelled.failure_reason, "cancelled: api test")
            events = list(c.watch(job.id, timeout=WATCH_TIMEOUT_S))
            final = c.get(job.id)
            self.assertEqual(final.state, ty.JobState.CANCELLED)
            self.assertEqual(events[-1].seq, final.last_seq)  # the watch ended with the last event
            states = [e.payload for e in events if e.kind == "job_state"]
            self.assertEqual(states[-1].state, ty.JobState.CANCELLED)
            self.assertEqual(states[-1].reason, "cancelled: api test")
            with self.assertRaises(ty.FailedPrecondition) as again:
                c.cancel(job.id)
            self.assertIn("already ended", again.exception.message)


class ErrorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = client()

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_unknown_job_is_not_found(self):
        with self.assertRaises(ty.NotFound) as e:
            self.c.get("job-987654")
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertEqual(e.exception.message, "job job-987654 not found")
        self.assertEqual(e.exception.rpc, "GetJob")
        self.assertIsInstance(e.exception, ty.TrainyardError)
        with self.assertRaises(ty.NotFound):
            list(self.c.watch("job-987654", timeout=WATCH_TIMEOUT_S))
        with self.assertRaises(ty.NotFound):
            self.c.cancel("job-987654")
        with self.assertRaises(ty.NotFound):
            self.c.artifacts("job-987654")
        with self.assertRaises(ty.NotFound) as e:
            self.c.checkpoint("job-987654")
        self.assertEqual(e.exception.message, "job job-987654 not found")

    def test_bad_spec_is_invalid_argument_naming_the_field(self):
        before = len(self.c.list(limit=1000))
        with self.assertRaises(ty.InvalidArgument) as e:
            self.c.submit({"model": {"preset": "tiny"}, "training": {"lr": 20.0}})
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("training.lr must be in (0, 10], got 20", e.exception.message)
        self.assertEqual(len(self.c.list(limit=1000)), before)  # nothing stored

    def test_bad_requests_are_invalid_argument(self):
        with self.assertRaises(ty.InvalidArgument) as e:
            self.c.list(limit=5000)
        self.assertIn("ListJobsRequest.limit", e.exception.message)
        with self.assertRaises(ty.InvalidArgument):
            self.c.get("")
        with self.assertRaises(ValueError):
            self.c.list(states=["sleeping"])

    def test_unknown_key_is_refused_before_sending(self):
        with self.assertRaises(ty.SpecError) as e:
            self.c.submit({"training": {"stepz": 5}})
        self.assertEqual(str(e.exception), "unknown key training.stepz (did you mean training.steps?)")
        with self.assertRaises(ty.SpecError):
            ty.load_job_file(os.environ["TRAINYARD_TEST_JOB_FILE"], {"steps": 5})


class AuthTest(unittest.TestCase):
    def test_no_token_is_unauthenticated(self):
        with ty.Client(os.environ["TRAINYARD_TEST_CONTROLLER"], tls_ca=os.environ["TRAINYARD_TEST_TLS_CA"]) as c:
            with self.assertRaises(ty.Unauthenticated) as e:
                c.list()
        self.assertIn("no bearer token", e.exception.message)

    def test_a_viewer_may_look_but_not_cancel(self):
        with client() as alice:
            job = alice.submit({"model": {"preset": "tiny"}, "training": {"steps": 100000},
                                "resources": {"device": "cpu"}})
            try:
                with client(os.environ["TRAINYARD_TEST_VIEWER_TOKEN_FILE"]) as viewer:
                    self.assertEqual(viewer.get(job.id).id, job.id)
                    with self.assertRaises(ty.PermissionDenied):
                        viewer.cancel(job.id)
                    with self.assertRaises(ty.PermissionDenied):
                        viewer.submit({"model": {"preset": "tiny"}})
                    with self.assertRaises(ty.PermissionDenied):
                        viewer.checkpoint(job.id)
            finally:
                alice.cancel(job.id)

    def test_only_an_admin_may_cordon_or_drain(self):
        with client() as alice:  # a submitter
            for call in (lambda: alice.cordon("w1", "test"), lambda: alice.uncordon("w1"),
                         lambda: alice.drain("w1", "test")):
                with self.assertRaises(ty.PermissionDenied):
                    call()
            self.assertEqual([(w.name, w.cordoned) for w in alice.workers()], [("w1", False)])
        with client(os.environ["TRAINYARD_TEST_VIEWER_TOKEN_FILE"]) as viewer:
            with self.assertRaises(ty.PermissionDenied):
                viewer.drain("w1")

    def test_plaintext_without_tls_is_unavailable(self):
        with ty.Client(os.environ["TRAINYARD_TEST_CONTROLLER"], timeout=20) as c:
            with self.assertRaises(ty.Unavailable):
                c.workers()

    def test_tokens_are_checked_before_sending(self):
        with self.assertRaises(ValueError) as e:
            ty.Client("10.1.2.3:7070", token="secret-token")
        self.assertIn("refusing to send the bearer token in plaintext", str(e.exception))
        self.assertNotIn("secret-token", str(e.exception))
        with self.assertRaises(ValueError):
            ty.Client("127.0.0.1:7070", token="has space")


if __name__ == "__main__":
    unittest.main()
