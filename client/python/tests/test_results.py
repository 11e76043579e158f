"""results.py's dataclasses against the generated messages: every field of every Event
payload (and of the other results) comes across by its .proto name with its value, so
a field added to the .proto cannot be dropped or misspelled here (no controller needed)."""

import math
import unittest
from datetime import datetime, timezone

from google.protobuf.descriptor import FieldDescriptor

import trainyard_client as ty
from trainyard_client._stubs import device_pb2, event_pb2, job_pb2, job_service_pb2


def _fill(msg, base):
    """Sets every scalar/enum field of msg to a value from `base` and the field's index
    (repeated: two of them); returns {name: the value expected in the dataclass}."""
    expected = {}
    for i, f in enumerate(msg.DESCRIPTOR.fields):
        n = base + i + 1
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            continue
        if f.type == FieldDescriptor.TYPE_ENUM:
            number = f.enum_type.values[-1].number
            values, shown = [number], [f.enum_type.values[-1].name]
        elif f.type == FieldDescriptor.TYPE_STRING:
            values = shown = [f"{f.name}-{n}"]
        elif f.type == FieldDescriptor.TYPE_BOOL:
            values = shown = [True]
        elif f.cpp_type in (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT):
            values = shown = [n + 0.5]
        else:
            values = shown = [n]
        if f.is_repeated:
            getattr(msg, f.name).extend(values * 2)
            expected[f.name] = shown * 2
        else:
            setattr(msg, f.name, values[0])
            expected[f.name] = shown[0]
    return expected


class PayloadTest(unittest.TestCase):
    def test_every_payload_field_comes_across_by_its_proto_name(self):
        payloads = event_pb2.Event.DESCRIPTOR.oneofs_by_name["payload"].fields
        self.assertEqual(len(payloads), 10)
        for k, f in enumerate(payloads):
            with self.subTest(payload=f.name):
                msg = event_pb2.Event(job_id="j", seq=7 + k, rank=1, attempt=2, source_seq=3)
                expected = _fill(getattr(msg, f.name), 10 * k)
                event = ty.Event.from_proto(msg)
                self.assertEqual(event.kind, f.name)
                self.assertEqual((event.job_id, event.seq, event.rank, event.attempt, event.source_seq),
                                 ("j", 7 + k, 1, 2, 3))
                self.assertEqual(type(event.payload).__name__, f.message_type.name)
                got = {name: getattr(event.payload, name) for name in expected}
                if f.name == "job_state":  # Job.State becomes JobState
                    self.assertIsInstance(event.payload.state, ty.JobState)
                    expected["state"] = ty.JobState[expected["state"]]
                self.assertEqual(got, expected)
                self.assertEqual([x.name for x in type(event.payload).__dataclass_fields__.values()],
                                 [x.name for x in f.message_type.fields])

    def test_step_metrics_keep_their_values(self):
        msg = event_pb2.Event(seq=4)
        msg.step_metrics.step = 12
        msg.step_metrics.loss = 6.25
        msg.step_metrics.tokens_per_s = 1500.0
        msg.step_metrics.expert_load.extend([3, 5])
        m = ty.Event.from_proto(msg).payload
        self.assertIsInstance(m, ty.StepMetrics)
        self.assertEqual((m.step, m.loss, m.tokens_per_s, m.expert_load, m.mfu), (12, 6.25, 1500.0, [3, 5], 0.0))

    def test_validation_and_epoch_keep_their_values_and_a_nan_loss(self):
        msg = event_pb2.Event(seq=5, rank=0)
        msg.validation.step = 40
        msg.validation.loss = 3.125
        msg.validation.tokens = 1 << 40
        msg.validation.ms = 812.5
        event = ty.Event.from_proto(msg)
        self.assertEqual(event.kind, "validation")
        v = event.payload
        self.assertIsInstance(v, ty.Validation)
        self.assertEqual((v.step, v.loss, v.tokens, v.ms), (40, 3.125, 1 << 40, 812.5))
        msg.validation.loss = float("nan")  # a diverged model
        self.assertTrue(math.isnan(ty.Event.from_proto(msg).payload.loss))
        step = event_pb2.Event(seq=6)
        step.step_metrics.step = 41
        step.step_metrics.epoch = 3
        self.assertEqual(ty.Event.from_proto(step).payload.epoch, 3)

    def test_the_envelope_is_the_events_fields_outside_the_payload(self):
        envelope = [f.name for f in event_pb2.Event.DESCRIPTOR.fields if f.containing_oneof is None]
        self.assertEqual(list(ty.Event.__dataclass_fields__), envelope + ["kind", "payload"])
        msg = event_pb2.Event(job_id="j", seq=9, rank=-1)
        msg.time.FromSeconds(1796083200)
        event = ty.Event.from_proto(msg)
        self.assertEqual(event.time, datetime(2026, 12, 1, tzinfo=timezone.utc))
        self.assertEqual(event.rank, -1)
        self.assertIsNone(ty.Event.from_proto(event_pb2.Event()).time)

    def test_an_event_without_payload(self):
        event = ty.Event.from_proto(event_pb2.Event(seq=1))
        self.assertEqual((event.kind, event.payload), ("", None))


class JobTest(unittest.TestCase):
    def test_job_fields_nested_messages_and_unset_ones(self):
        msg = job_pb2.Job(id="j1", state=job_pb2.Job.SUCCEEDED, world_size=2)
        msg.spec.model.preset = "tiny"
        msg.placement.ranks.add(rank=0, worker="w1")
        msg.create_time.FromSeconds(1796083200)
        msg.failure_causes.extend(["a", "b"])
        job = ty.Job.from_proto(msg)
        self.assertEqual(job.state, ty.JobState.SUCCEEDED)
        self.assertTrue(job.terminal)
        self.assertEqual(job.spec, {"model": {"preset": "tiny"}})
        self.assertEqual([(r.rank, r.worker) for r in job.placement.ranks], [(0, "w1")])
        self.assertEqual(job.create_time, datetime(2026, 12, 1, tzinfo=timezone.utc))
        self.assertIsNone(job.start_time)
        self.assertIsNone(job.last_checkpoint)
        self.assertEqual(job.failure_causes, ["a", "b"])
        # An unplaced job still has an (empty) placement.
        self.assertEqual(ty.Job.from_proto(job_pb2.Job(id="p")).placement.ranks, [])

    def test_artifact_and_worker_info(self):
        a = job_service_pb2.ArtifactInfo()
        expected = _fill(a, 0)
        info = ty.ArtifactInfo.from_proto(a)
        self.assertEqual({name: getattr(info, name) for name in expected}, expected)
        self.assertIsNone(info.create_time)
        w = job_service_pb2.WorkerInfo()
        expected = _fill(w, 100)
        worker = ty.WorkerInfo.from_proto(w)
        self.assertEqual({name: getattr(worker, name) for name in expected}, expected)


    def test_share_preemptions_and_a_cordoned_worker(self):
        msg = job_pb2.Job(id="j1", state=job_pb2.Job.PENDING, preemptions=2)
        msg.preempt_times.add(seconds=1796083200)
        msg.preempt_times.add(seconds=1796083260)
        expected = _fill(msg.share, 200)
        job = ty.Job.from_proto(msg)
        self.assertIsInstance(job.share, ty.ShareInfo)
        self.assertEqual({name: getattr(job.share, name) for name in expected}, expected)
        self.assertEqual(list(ty.ShareInfo.__dataclass_fields__),
                         [f.name for f in job_pb2.ShareInfo.DESCRIPTOR.fields])
        self.assertEqual(job.preemptions, 2)
        self.assertEqual(job.preempt_times, [datetime(2026, 12, 1, tzinfo=timezone.utc),
                                             datetime(2026, 12, 1, 0, 1, tzinfo=timezone.utc)])
        # ListJobs leaves the share unset: None, not a record of zeros.
        self.assertIsNone(ty.Job.from_proto(job_pb2.Job(id="j2")).share)
        share = ty.Job.from_proto(job_pb2.Job(id="j3", share=job_pb2.ShareInfo(
            owner="alice", owner_slots_in_use=6, owner_slot_limit=8, weight=2.0, usage_slot_seconds=45000.0,
            fair_share=22500.0, queue_position=3, queue_length=5))).share
        self.assertEqual((share.owner, share.group, share.owner_slots_in_use, share.owner_slot_limit,
                          share.owner_gpu_limit, share.weight, share.fair_share, share.queue_position,
                          share.queue_length), ("alice", "", 6, 8, 0, 2.0, 22500.0, 3, 5))

        w = ty.WorkerInfo.from_proto(job_service_pb2.WorkerInfo(name="w1", cordoned=True, cordon_reason="disk swap"))
        self.assertEqual((w.name, w.cordoned, w.cordon_reason), ("w1", True, "disk swap"))
        self.assertFalse(ty.WorkerInfo.from_proto(job_service_pb2.WorkerInfo(name="w2")).cordoned)
        drained = ty.DrainResult.from_proto(job_service_pb2.DrainWorkerResponse(
            worker=job_service_pb2.WorkerInfo(name="w1", cordoned=True), job_ids=["job-3", "job-5"]))
        self.assertIsInstance(drained.worker, ty.WorkerInfo)
        self.assertEqual((drained.worker.name, drained.worker.cordoned, drained.job_ids),
                         ("w1", True, ["job-3", "job-5"]))


class GpuTest(unittest.TestCase):
    def test_a_gpu_workers_devices_samples_and_capabilities(self):
        w = job_service_pb2.WorkerInfo(name="g1", slots=2, free_slots=1, device="cuda",
                                       memory_bytes=1 << 40, free_gpus=[1], unhealthy_gpus=[0],
                                       gpu_driver_version="550.54.15", cuda_driver_version="12.4",
                                       nvlink_topology_known=True, nccl_env=["NCCL_IB_DISABLE=1"])
        for i in range(2):
            w.gpus.add(index=i, uuid=f"GPU-{i}", name="NVIDIA H200", memory_bytes=143771 << 20,
                       nvlink_domain=1)
        w.gpu_samples.add(index=0, utilization=-1.0, memory_used_bytes=-1, power_watts=-1.0,
                          temperature_celsius=-1.0, ecc_uncorrected=3, xid_errors=1, last_xid=48,
                          healthy=False, unhealthy_reason="uncorrectable ECC error")
        w.gpu_samples.add(index=1, utilization=0.75, memory_used_bytes=40 << 30, power_watts=512.5,
                          temperature_celsius=61.0, healthy=True)
        w.capabilities.CopyFrom(device_pb2.EngineCapabilities(
            libtorch_version="2.4.0", cuda=True, cuda_version="12.4", nccl=True, bf16=True, cudagraph=False))
        info = ty.WorkerInfo.from_proto(w)
        self.assertEqual((info.device, info.memory_bytes, info.free_gpus, info.unhealthy_gpus),
                         ("cuda", 1 << 40, [1], [0]))
        self.assertEqual([(g.index, g.uuid, g.name, g.memory_bytes, g.nvlink_domain) for g in info.gpus],
                         [(0, "GPU-0", "NVIDIA H200", 150754820096, 1), (1, "GPU-1", "NVIDIA H200", 150754820096, 1)])
        self.assertIsInstance(info.gpus[0], ty.GpuDevice)
        bad, good = info.gpu_samples
        self.assertIsInstance(bad, ty.GpuSample)
        self.assertEqual((bad.healthy, bad.unhealthy_reason, bad.ecc_uncorrected, bad.last_xid, bad.utilization),
                         (False, "uncorrectable ECC error", 3, 48, -1.0))
        self.assertEqual((good.utilization, good.memory_used_bytes, good.power_watts, good.temperature_celsius),
                         (0.75, 40 << 30, 512.5, 61.0))
        self.assertEqual(info.capabilities, ty.EngineCapabilities(
            libtorch_version="2.4.0", cuda=True, cuda_version="12.4", nccl=True, bf16=True, cudagraph=False))
        self.assertEqual((info.gpu_driver_version, info.cuda_driver_version, info.nvlink_topology_known,
                          info.nccl_env), ("550.54.15", "12.4", True, ["NCCL_IB_DISABLE=1"]))
        # A worker that sent no capabilities (an older one): None, not an empty record.
        self.assertIsNone(ty.WorkerInfo.from_proto(job_service_pb2.WorkerInfo(name="c1")).capabilities)
        # Every field of the messages, by its .proto name.
        for cls, msg in ((ty.GpuDevice, device_pb2.GpuDevice), (ty.GpuSample, device_pb2.GpuSample),
                         (ty.EngineCapabilities, device_pb2.EngineCapabilities)):
            self.assertEqual(list(cls.__dataclass_fields__), [f.name for f in msg.DESCRIPTOR.fields])

    def test_a_ranks_gpu_is_none_on_cpu_and_gpu_0_is_a_gpu(self):
        msg = job_pb2.Job(id="j")
        msg.placement.ranks.add(rank=0, worker="g1", gpu=0, gpu_uuid="GPU-0")
        msg.placement.ranks.add(rank=1, worker="c1")
        msg.placement.worker_env.add(worker="g1", nccl_env=["NCCL_SOCKET_IFNAME=eth0"])
        p = ty.Job.from_proto(msg).placement
        self.assertEqual([(r.rank, r.worker, r.gpu, r.gpu_uuid) for r in p.ranks],
                         [(0, "g1", 0, "GPU-0"), (1, "c1", None, "")])
        self.assertEqual(p.worker_env, [ty.WorkerEnv(worker="g1", nccl_env=["NCCL_SOCKET_IFNAME=eth0"])])


if __name__ == "__main__":
    unittest.main()
