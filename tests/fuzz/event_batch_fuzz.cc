// Fuzz target: the bytes of a worker's EventBatch as the controller ingests them
// (server/service/worker_service.cc): ParseRequest, request_validation::Check, then
// JobManager::IngestEvents on a real JobManager over a real SqliteJobStore (SQLite in a fresh
// temp dir per input; set TMPDIR=/dev/shm to keep it in memory), with fake worker
// channels and a fake clock. Before each input: worker w1 (2 slots) runs job-1 (dp=2,
// RUNNING, both ranks on w1, attempt 1) and worker w2 holds job-2 (dp=2, SCHEDULED);
// the batch comes from w1's stream. Invariants: errors stay short; job-2 is untouched
// (w1 holds none of its ranks); each job's stored seqs stay gapless from 1.
// Nothing survives from one input to the next, so every finding reproduces alone.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>
#include <spdlog/spdlog.h>

#include "server/metrics/controller_metrics.h"
#include "server/state/event_hub.h"
#include "server/state/job_manager.h"
#include "server/store/sqlite_job_store.h"
#include "server/policy/request_validation.h"
#include "server/service/wire_codec.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_worker_channel.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/support/temp_dir.h"

namespace trainyard {
namespace {

void Must(const absl::Status& s, const char* what) {
  if (!s.ok()) fuzz::Violated(std::string("set-up: ") + what + ": " + s.ToString());
}

v1::Register Worker(const std::string& name) {
  v1::Register reg;
  reg.set_name(name);
  reg.set_slots(2);
  reg.set_address(name + ".local");
  reg.set_rendezvous_port_min(40000);
  reg.set_rendezvous_port_max(40009);
  return reg;
}

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.mutable_job()->set_name("fuzz");
  spec.mutable_model()->set_preset("tiny");
  spec.mutable_parallelism()->set_dp(2);
  spec.mutable_training()->set_steps(100);
  spec.mutable_checkpoint()->set_interval(10);
  spec.mutable_checkpoint()->set_dir("/ckpt");  // job-1's: /ckpt/job-1/step-%08d-attempt-1
  return spec;
}

// The job's stored events carry seqs 1..n.
void CheckSeqs(SqliteJobStore& db, const std::string& job) {
  auto events = db.ReadEvents(job, 1, 1 << 20);
  if (!events.ok()) fuzz::Violated("ReadEvents " + job + ": " + events.status().ToString());
  int64_t want = 1;
  for (const v1::Event& e : *events) {
    if (e.seq() != want++) fuzz::Violated(job + ": stored seq " + std::to_string(e.seq()) + " out of order");
  }
}

void Run(const std::uint8_t* data, std::size_t size) {
  grpc::Slice slice(data, size);
  grpc::ByteBuffer bytes(&slice, 1);
  v1::EventBatch batch;
  if (absl::Status s = ParseRequest(bytes, &batch); !s.ok()) {
    fuzz::CheckErrorSize("ParseRequest", std::string(s.message()));
    return;
  }
  if (absl::Status s = request_validation::Check(batch); !s.ok()) {
    fuzz::CheckErrorSize("Check(EventBatch)", std::string(s.message()));
    return;
  }

  testing::TempDir dir;
  auto db = SqliteJobStore::Open(dir.path());
  if (!db.ok()) fuzz::Violated("SqliteJobStore::Open: " + db.status().ToString());
  EventHub hub;
  ControllerMetrics metrics;
  testing::FakeClock clock;
  JobManager manager(db->get(), &hub, &metrics, &clock, JobManagerOptions{});
  auto w1 = std::make_shared<testing::FakeWorkerChannel>();
  auto w2 = std::make_shared<testing::FakeWorkerChannel>();
  Must(manager.RegisterWorker(1, Worker("w1"), w1), "register w1");
  auto job1 = manager.Submit(Spec(), "fuzz");
  Must(job1.status(), "submit job-1");
  v1::EventBatch running;
  for (int rank = 0; rank < 2; ++rank) {
    v1::Event* e = running.add_events();
    e->set_job_id(job1->id());
    e->set_attempt(1);
    e->set_rank(rank);
    e->set_source_seq(1);
    e->mutable_rank_state()->set_state(v1::RankState::RUNNING);
    e->mutable_rank_state()->set_worker("w1");
  }
  Must(manager.IngestEvents(1, running), "job-1 RUNNING");
  Must(manager.RegisterWorker(2, Worker("w2"), w2), "register w2");
  auto job2 = manager.Submit(Spec(), "fuzz");
  Must(job2.status(), "submit job-2");
  auto before = manager.Get(job2->id());
  Must(before.status(), "get job-2");
  if (manager.Get(job1->id())->state() != v1::Job::RUNNING || before->state() != v1::Job::SCHEDULED) {
    fuzz::Violated("set-up: job-1 " + v1::Job::State_Name(manager.Get(job1->id())->state()) + ", job-2 " +
                   v1::Job::State_Name(before->state()));
  }

  if (absl::Status s = manager.IngestEvents(1, batch); !s.ok()) fuzz::CheckErrorSize("IngestEvents", std::string(s.message()));
  manager.Tick();

  auto after = manager.Get(job2->id());
  Must(after.status(), "get job-2 after");
  if (after->state() != before->state() || after->attempt() != before->attempt()) {
    fuzz::Violated("w1's batch changed job-2, whose ranks are all on w2: now " + v1::Job::State_Name(after->state()));
  }
  CheckSeqs(**db, job1->id());
  CheckSeqs(**db, job2->id());
}

}  // namespace
}  // namespace trainyard

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // one warn line per dropped event otherwise
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  trainyard::Run(data, size);
  return 0;
}
