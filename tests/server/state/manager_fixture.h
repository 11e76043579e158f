// A JobManager over a real SqliteJobStore in a temp dir (wrapped by TestJobStore), with a
// fake clock and fake worker channels. Every committed store write and every message
// sent to a worker go to one journal, in the order they happened.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/metrics/controller_metrics.h"
#include "server/state/event_hub.h"
#include "server/state/job_manager.h"
#include "server/store/sqlite_job_store.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_worker_channel.h"
#include "tests/fakes/test_job_store.h"
#include "tests/support/temp_dir.h"

namespace trainyard::testing {

class ManagerFixture : public ::testing::Test {
 protected:
  struct Conn {
    int64_t id = 0;
    std::string name;
    std::shared_ptr<FakeWorkerChannel> channel;
  };

  ManagerFixture() {
    auto db = SqliteJobStore::Open(dir_.path());
    EXPECT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
    store_ = std::make_unique<TestJobStore>(db_.get(), [this](const std::string& l) { Log(l); });
    manager_ = NewManager();
  }

  std::unique_ptr<JobManager> NewManager() {
    JobManagerOptions options;
    options.heartbeat_interval = absl::Seconds(2);
    options.heartbeat_timeout = absl::Seconds(15);
    options.reconnect_window = reconnect_window_;
    options.max_events_per_s_per_rank = max_events_per_s_per_rank_;
    options.sharing = sharing_;
    options.on_lost_write = [this](const absl::Status& s) { Log("lost write: " + std::string(s.message())); };
    auto manager = std::make_unique<JobManager>(store_.get(), hub_.get(), &metrics_, &clock_, options);
    if (policy_) manager->SetPolicy(*policy_);  // as the controller: before Recover
    return manager;
  }

  // A controller restart: a new store over the same directory, a new hub and a new
  // manager, recovered from what is on disk.
  void Restart() {
    manager_.reset();
    store_.reset();
    db_.reset();
    auto db = SqliteJobStore::Open(dir_.path());
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
    store_ = std::make_unique<TestJobStore>(db_.get(), [this](const std::string& l) { Log(l); });
    hub_ = std::make_unique<EventHub>();
    manager_ = NewManager();
    absl::Status s = manager_->Recover();
    ASSERT_TRUE(s.ok()) << s;
  }

  void Log(const std::string& line) {
    absl::MutexLock lock(&journal_mu_);
    journal_.push_back(line);
  }
  std::vector<std::string> Journal() {
    absl::MutexLock lock(&journal_mu_);
    return journal_;
  }
  // Position of the first journal line equal to `line`, or -1.
  int IndexOf(const std::string& line) {
    auto j = Journal();
    for (size_t i = 0; i < j.size(); ++i) {
      if (j[i] == line) return static_cast<int>(i);
    }
    return -1;
  }

  // Registers worker `name` (address "<name>.local", ports 40000-40009) on a new stream.
  Conn Connect(const std::string& name, int slots,
               const std::vector<v1::RunningAttempt>& running = {}) {
    v1::Register reg;
    reg.set_name(name);
    reg.set_slots(slots);
    reg.set_address(name + ".local");
    reg.set_rendezvous_port_min(40000);
    reg.set_rendezvous_port_max(40009);
    for (const auto& r : running) *reg.add_running() = r;
    Conn c{next_conn_++, name, nullptr};
    c.channel = std::make_shared<FakeWorkerChannel>(
        [this, name](const std::string& l) { Log(name + ": " + l); });
    absl::Status s = manager_->RegisterWorker(c.id, reg, c.channel);
    EXPECT_TRUE(s.ok()) << s;
    return c;
  }

  static v1::JobSpec Spec(int dp, int tp = 1, int max_restarts = 0, int priority = 0) {
    v1::JobSpec spec;
    spec.mutable_job()->set_name("t");
    spec.mutable_job()->set_priority(priority);
    spec.mutable_model()->set_preset("tiny");
    spec.mutable_parallelism()->set_dp(dp);
    spec.mutable_parallelism()->set_tp(tp);
    spec.mutable_restart()->set_max_restarts(max_restarts);
    return spec;
  }

  std::string Submit(const v1::JobSpec& spec, const std::string& owner = "alice") {
    auto job = manager_->Submit(spec, owner);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }

  // One RankState event per rank, as the worker on `c` reports them; source_seq
  // continues per (job, attempt, rank) like the worker's.
  v1::EventBatch RankStates(const Conn& c, const std::string& job, int attempt,
                            const std::vector<int>& ranks, v1::RankState::State state,
                            const std::string& message = "") {
    v1::EventBatch batch;
    batch.set_batch_id(next_batch_++);
    for (int r : ranks) {
      v1::Event* e = batch.add_events();
      e->set_job_id(job);
      e->set_attempt(attempt);
      e->set_rank(r);
      e->set_source_seq(++source_seq_[{job, attempt, r}]);
      e->mutable_rank_state()->set_state(state);
      e->mutable_rank_state()->set_worker(c.name);
      e->mutable_rank_state()->set_message(message);
    }
    return batch;
  }
  // `events` as one batch from the worker on `c`; the batch must be acknowledged (even
  // with events dropped: refusing it would make a real worker resend it forever).
  void Send(const Conn& c, std::vector<v1::Event> events) {
    v1::EventBatch batch;
    batch.set_batch_id(next_batch_++);
    for (auto& e : events) *batch.add_events() = std::move(e);
    absl::Status s = manager_->IngestEvents(c.id, batch);
    EXPECT_TRUE(s.ok()) << s << " (the batch must be acknowledged)";
  }
  void Report(const Conn& c, const std::string& job, int attempt, const std::vector<int>& ranks,
              v1::RankState::State state, const std::string& message = "") {
    absl::Status s =
        manager_->IngestEvents(c.id, RankStates(c, job, attempt, ranks, state, message));
    EXPECT_TRUE(s.ok()) << s;
  }

  // A CheckpointSaved of rank 0 for `step` at its exact path under /ckpt, as the rank
  // reports it (requested: saved on a CheckpointRequest).
  void SaveCheckpoint(const Conn& c, const std::string& job, int attempt, int64_t step, bool requested = false) {
    v1::Event e;
    e.set_job_id(job);
    e.set_attempt(attempt);
    e.set_rank(0);
    e.set_source_seq(++source_seq_[{job, attempt, 0}]);
    auto* ck = e.mutable_checkpoint();
    ck->set_step(step);
    char name[64];
    std::snprintf(name, sizeof name, "/step-%08lld-attempt-%d", static_cast<long long>(step), attempt);
    ck->set_path("/ckpt/" + job + name);
    ck->set_bytes(4096);
    ck->set_dp(1);
    ck->set_tp(1);
    ck->set_ep(1);
    ck->set_requested(requested);
    Send(c, {e});
  }
  // Moves the fake clock, keeping `alive` heartbeating, and runs the controller tick.
  void Pass(absl::Duration d, const std::vector<Conn>& alive) {
    clock_.Advance(d);
    for (const auto& c : alive) manager_->Heartbeat(c.id, v1::Heartbeat());
    manager_->Tick();
  }
  // The reason of the job's last committed change to `state` ("" when none).
  std::string LastReason(const std::string& id, v1::Job::State state) {
    std::string out;
    for (const auto& e : Stored(id)) {
      if (e.has_job_state() && e.job_state().state() == state) out = e.job_state().reason();
    }
    return out;
  }

  v1::Job Job(const std::string& id) {
    auto job = manager_->Get(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::Job();
  }
  std::vector<v1::Event> Stored(const std::string& id) {
    auto events = db_->ReadEvents(id, 1, 100000);
    EXPECT_TRUE(events.ok()) << events.status();
    return events.ok() ? *events : std::vector<v1::Event>();
  }
  // The job_state events committed for `id`, in seq order.
  std::vector<v1::Job::State> StoredStates(const std::string& id) {
    std::vector<v1::Job::State> out;
    for (const auto& e : Stored(id)) {
      if (e.has_job_state()) out.push_back(e.job_state().state());
    }
    return out;
  }
  v1::Job StoredJob(const std::string& id) {
    auto jobs = db_->LoadJobs();
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    for (const auto& j : jobs.ok() ? *jobs : std::vector<v1::Job>()) {
      if (j.id() == id) return j;
    }
    ADD_FAILURE() << "no stored row for " << id;
    return v1::Job();
  }

  double Counter(const std::string& family) {
    for (const auto& f : metrics_.registry()->Collect()) {
      if (f.name != family) continue;
      for (const auto& m : f.metric) {
        if (m.label.empty()) return m.counter.value;
      }
    }
    return -1;
  }

  // trainyard_events_dropped_total{reason=`reason`}, 0 when absent.
  double Dropped(const std::string& reason) {
    for (const auto& f : metrics_.registry()->Collect()) {
      if (f.name != "trainyard_events_dropped_total") continue;
      for (const auto& m : f.metric) {
        for (const auto& l : m.label) {
          if (l.name == "reason" && l.value == reason) return m.counter.value;
        }
      }
    }
    return 0;
  }

  TempDir dir_;
  absl::Mutex journal_mu_;
  std::vector<std::string> journal_ ABSL_GUARDED_BY(journal_mu_);
  FakeClock clock_;
  double max_events_per_s_per_rank_ = 0;  // set before NewManager() for a capped manager
  SharingOptions sharing_;  // preemption grace and guard, read by NewManager()
  // Zero: a silent worker is lost at the heartbeat timeout, as before unreachable
  // workers (the reconnect tests set a window before NewManager()).
  absl::Duration reconnect_window_ = absl::ZeroDuration();
  std::optional<SharingPolicy> policy_;  // the --policy-file, given by NewManager()
  std::unique_ptr<EventHub> hub_ = std::make_unique<EventHub>();
  ControllerMetrics metrics_;
  std::unique_ptr<SqliteJobStore> db_;
  std::unique_ptr<TestJobStore> store_;
  std::unique_ptr<JobManager> manager_;
  int64_t next_conn_ = 1;
  int64_t next_batch_ = 1;
  std::map<std::tuple<std::string, int, int>, int64_t> source_seq_;
};

}  // namespace trainyard::testing
