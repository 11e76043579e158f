// The server the sweep page's browser test (sweep_page_test.py) drives: the in-process
// controller of the web API's tests (a SqliteJobStore, JobManager, JobActions and one
// fake worker w1, as tests/fakes/auth_fixture.h builds them) behind the real web
// listener, holding a sweep submitted through JobActions as the JobService does, and
// its children's training and validation losses: the two children placed on w1 report
// theirs through the manager as a worker's rank does (so they are RUNNING, with a last
// step), the waiting ones have theirs in the store as from an earlier attempt. No
// worker trains anything: the page sees known data, so the test can compare every row
// and every curve with what the API serves.
//
//   web_sweep_page_server --data-dir DIR --token-file FILE
//
// The token file names the owners alice (the sweep's) and bob. Once listening it prints
// one JSON line: {"port": N, "sweep": ID, "children": [IDs by index], "job": ID} (job:
// alice's job outside the sweep). Then it reads commands from stdin, one a line:
//   grow   two more steps and a validation for child 0 (its best yet), then "grown"
// and stops at end of input.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "server/auth/authorizer.h"
#include "server/metrics/controller_metrics.h"
#include "server/service/job_actions.h"
#include "server/state/artifact_store.h"
#include "server/state/event_hub.h"
#include "server/state/job_manager.h"
#include "server/store/sqlite_job_store.h"
#include "server/web/web_api.h"
#include "server/web/web_server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "tests/fakes/fake_worker_channel.h"

namespace trainyard::testing {
namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "web_sweep_page_server: %s\n", what.c_str());
  return 1;
}

v1::JobSpec TinySpec(const std::string& name) {
  v1::JobSpec spec;
  spec.mutable_job()->set_name(name);
  spec.mutable_model()->set_preset("tiny");
  spec.mutable_parallelism()->set_dp(1);
  spec.mutable_parallelism()->set_tp(1);
  return spec;
}

// A child's events as a worker's rank 0 reports them (attempt 1).
class Events {
 public:
  explicit Events(std::string job) : job_(std::move(job)) {}
  Events& Running() {
    v1::Event e = Base();
    e.mutable_rank_state()->set_state(v1::RankState::RUNNING);
    e.mutable_rank_state()->set_worker("w1");
    events_.push_back(std::move(e));
    return *this;
  }
  Events& Step(int64_t step, double loss) {
    v1::Event e = Base();
    e.mutable_step_metrics()->set_step(step);
    e.mutable_step_metrics()->set_loss(loss);
    e.mutable_step_metrics()->set_tokens_per_s(1000);
    events_.push_back(std::move(e));
    return *this;
  }
  Events& Validation(int64_t step, double loss) {
    v1::Event e = Base();
    e.mutable_validation()->set_step(step);
    e.mutable_validation()->set_loss(loss);
    e.mutable_validation()->set_tokens(2048);
    e.mutable_validation()->set_ms(3.5);
    events_.push_back(std::move(e));
    return *this;
  }
  absl::Status StoreIn(JobStore* store) {
    auto committed = store->AppendEvents(job_, std::move(events_));
    events_.clear();
    return committed.status();
  }
  // As the worker on connection `conn` sends them: the manager commits and applies them.
  absl::Status SendTo(JobManager* manager, int64_t conn) {
    static int64_t batch_id = 0;
    v1::EventBatch batch;
    batch.set_batch_id(++batch_id);
    for (v1::Event& e : events_) *batch.add_events() = std::move(e);
    events_.clear();
    return manager->IngestEvents(conn, batch);
  }

 private:
  v1::Event Base() {
    v1::Event e;
    e.set_job_id(job_);
    e.set_attempt(1);
    e.set_rank(0);
    e.set_source_seq(++source_seq_);
    return e;
  }
  std::string job_;
  std::vector<v1::Event> events_;
  int64_t source_seq_ = 0;
};

int Run(int argc, char** argv) {
  std::string data_dir, token_file;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--data-dir") {
      data_dir = argv[i + 1];
    } else if (flag == "--token-file") {
      token_file = argv[i + 1];
    } else {
      return Fail("unknown flag " + flag);
    }
  }
  if (data_dir.empty() || token_file.empty()) return Fail("usage: --data-dir DIR --token-file FILE");
  // stdout is the test's: its JSON line and the answers to commands.
  spdlog::set_default_logger(spdlog::stderr_color_mt("sweep-page-server"));

  auto authz = Authorizer::FromFile(token_file);
  if (!authz.ok()) return Fail(std::string(authz.status().message()));
  auto store = SqliteJobStore::Open(data_dir);
  if (!store.ok()) return Fail(std::string(store.status().message()));
  EventHub hub;
  ControllerMetrics metrics;
  Clock* clock = SystemClock();
  JobManager manager(store->get(), &hub, &metrics, clock, JobManagerOptions{});
  if (auto s = manager.Recover(); !s.ok()) return Fail(std::string(s.message()));
  auto artifacts = ArtifactStore::Open(data_dir, &manager, clock);
  if (!artifacts.ok()) return Fail(std::string(artifacts.status().message()));
  JobActions actions(&manager, nullptr, store->get(), clock);
  // One worker with room for the sweep's max_concurrent children: two are placed (and
  // stay SCHEDULED: nothing runs them), the rest wait their turn.
  v1::Register reg;
  reg.set_name("w1");
  reg.set_slots(4);
  reg.set_address("w1.local");
  reg.set_rendezvous_port_min(40000);
  reg.set_rendezvous_port_max(40009);
  if (auto s = manager.RegisterWorker(1, reg, std::make_shared<FakeWorkerChannel>()); !s.ok()) {
    return Fail(std::string(s.message()));
  }

  const Caller alice{Role::kSubmitter, "alice"};
  v1::SubmitSweepRequest request;
  *request.mutable_spec() = TinySpec("lr-grid");
  v1::SweepAxis* lr = request.add_axes();
  lr->set_key("training.lr");
  for (const char* v : {"1e-4", "3e-4", "1e-3"}) lr->add_values(v);
  v1::SweepAxis* top_k = request.add_axes();
  top_k->set_key("model.top_k");
  for (const char* v : {"1", "2"}) top_k->add_values(v);
  request.set_max_concurrent(2);
  auto view = actions.SubmitSweep(alice, Via::kGrpc, request);
  if (!view.ok()) return Fail(absl::StrCat("SubmitSweep: ", view.status().ToString()));
  const std::vector<std::string> children(view->sweep().job_ids().begin(), view->sweep().job_ids().end());
  if (children.size() != 6) return Fail(absl::StrCat("the sweep has ", children.size(), " children, not 6"));
  auto solo = manager.Submit(TinySpec("solo"), "alice");
  if (!solo.ok()) return Fail(absl::StrCat("Submit: ", solo.status().ToString()));

  // Child i trains 4 + i steps; its validations rank them 2, 1, 0, 3 (losses 2.2, 2.5,
  // 2.8, 2.9); child 4 has steps but no validation, child 5 nothing at all.
  std::vector<Events> events;
  std::vector<bool> placed;
  for (const std::string& id : children) {
    events.emplace_back(id);
    auto job = manager.Get(id);
    placed.push_back(job.ok() && job->state() == v1::Job::SCHEDULED && job->attempt() == 1);
    if (placed.back()) events.back().Running();
  }
  if (!placed[0] || !placed[1]) return Fail("children 0 and 1 were not placed on w1");
  for (int i = 0; i < 5; ++i) {
    for (int step = 1; step <= 4 + i; ++step) events[i].Step(step, 5.0 - 0.2 * step - 0.05 * i);
  }
  events[0].Validation(2, 3.0).Validation(4, 2.8);
  events[1].Validation(4, 2.5);
  events[2].Validation(2, 3.2).Validation(4, 3.1).Validation(6, 2.2);
  events[3].Validation(4, 2.9);
  for (size_t i = 0; i < events.size(); ++i) {
    absl::Status s = placed[i] ? events[i].SendTo(&manager, 1) : events[i].StoreIn(store->get());
    if (!s.ok()) return Fail(absl::StrCat("the events of child ", i, ": ", s.ToString()));
  }

  web::WebApi api(&manager, store->get(), artifacts->get(), authz->get(), &actions, &hub);
  auto server = web::WebServer::Start("127.0.0.1:0", &api, 8);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  std::string ids;
  for (const std::string& id : children) absl::StrAppend(&ids, ids.empty() ? "" : ",", "\"", id, "\"");
  std::printf("{\"port\": %d, \"sweep\": \"%s\", \"children\": [%s], \"job\": \"%s\"}\n", (*server)->port(),
              view->sweep().id().c_str(), ids.c_str(), solo->id().c_str());
  std::fflush(stdout);

  std::string line;
  int64_t next_step = 5;
  while (std::getline(std::cin, line)) {
    if (line == "grow") {
      events[0].Step(next_step, 2.0).Step(next_step + 1, 1.9).Validation(next_step + 1, 1.5);
      next_step += 2;
      if (auto s = events[0].SendTo(&manager, 1); !s.ok()) return Fail(s.ToString());
      std::printf("grown\n");
    } else {
      std::printf("unknown command\n");
    }
    std::fflush(stdout);
  }
  api.Stop();
  (*server)->Stop();
  return 0;
}

}  // namespace
}  // namespace trainyard::testing

int main(int argc, char** argv) { return trainyard::testing::Run(argc, argv); }
