// trainyard-recovery-bench: how long a restarted controller takes to read its store
// back. Builds a store (directly through SqliteJobStore, in batches) of --events events
// over --finished finished jobs and --active running ones, with event blobs like a
// training job's (step metrics with expert loads, log lines, rank states, checkpoints),
// then times what ControllerServer::Start does before it serves: SqliteJobStore::Open
// (schema check and migration) and JobManager::Recover. Prints figures; asserts nothing.
//
//   trainyard-recovery-bench                       # 10 M events, 1,000 + 10 jobs
//   trainyard-recovery-bench --events 10000        # the tiny version ctest runs
//   trainyard-recovery-bench --dir /tmp/s --keep   # build once, then time again with --reuse
//   ... --reuse --read-all                         # as before: every event of the active jobs
//   ... --active-events 500000                     # long-running active jobs hold half the events
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/proto_time.h"
#include "server/metrics/controller_metrics.h"
#include "server/state/event_hub.h"
#include "server/state/job_manager.h"
#include "server/store/sqlite_job_store.h"
#include "tests/fakes/test_job_store.h"

namespace {

using trainyard::v1::Event;
using trainyard::v1::Job;

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Job MakeJob(int n, bool active, int world, absl::Time now) {
  Job job;
  job.set_owner(absl::StrCat("user", n % 17));
  job.set_state(active ? Job::RUNNING : (n % 10 == 0 ? Job::FAILED : Job::SUCCEEDED));
  job.set_attempt(1);
  job.set_world_size(world);
  auto* spec = job.mutable_spec();
  spec->mutable_job()->set_name(absl::StrCat("moe-run-", n));
  spec->mutable_parallelism()->set_dp(world);
  spec->mutable_parallelism()->set_tp(1);
  spec->mutable_training()->set_steps(1'000'000);
  auto* placement = job.mutable_placement();
  for (int r = 0; r < world; ++r) {
    auto* rank = placement->add_ranks();
    rank->set_rank(r);
    rank->set_worker(absl::StrCat("w", (n * world + r) % 64));
  }
  placement->set_master_addr("10.0.0.1");
  placement->set_master_port(29500 + n % 1000);
  *job.mutable_create_time() = trainyard::ToProtoTime(now - absl::Hours(48));
  *job.mutable_start_time() = trainyard::ToProtoTime(now - absl::Hours(47));
  if (!active) *job.mutable_end_time() = trainyard::ToProtoTime(now - absl::Hours(1));
  job.mutable_last_checkpoint()->set_step(1000);
  job.mutable_last_checkpoint()->set_path(absl::StrCat("/ckpt/job-", n, "/step-1000"));
  job.mutable_last_checkpoint()->set_attempt(1);
  return job;
}

// The i-th event of a job's attempt 1: mostly step metrics, a log line every 20, a
// checkpoint every 5,000; the first `world` after the SCHEDULED state are RUNNING ranks.
Event MakeEvent(int64_t i, int world, absl::Time now) {
  Event e;
  e.set_attempt(1);
  *e.mutable_time() = trainyard::ToProtoTime(now - absl::Hours(40) + absl::Milliseconds(i * 10));
  if (i == 0) {
    e.set_rank(-1);
    e.mutable_job_state()->set_state(Job::SCHEDULED);
    e.mutable_job_state()->set_reason("placed on 8 workers");
    return e;
  }
  const int rank = static_cast<int>(i % world);
  e.set_rank(rank);
  e.set_source_seq(i);
  if (i <= world) {
    e.mutable_rank_state()->set_state(trainyard::v1::RankState::RUNNING);
    e.mutable_rank_state()->set_worker(absl::StrCat("w", rank));
    e.mutable_rank_state()->set_pid(1000 + rank);
  } else if (i % 5000 == 0) {
    e.set_rank(0);
    e.mutable_checkpoint()->set_step(i / world);
    e.mutable_checkpoint()->set_path(absl::StrCat("/ckpt/step-", i / world));
    e.mutable_checkpoint()->set_bytes(1 << 30);
  } else if (i % 20 == 0) {
    e.mutable_log()->set_level("info");
    e.mutable_log()->set_message(absl::StrCat("step ", i / world, ": loss 2.3141 lr 3.0e-4 tokens/s 181234"));
  } else {
    auto* s = e.mutable_step_metrics();
    s->set_step(i / world + 1);
    s->set_loss(2.5 - 1e-7 * static_cast<double>(i));
    s->set_grad_norm(0.93);
    s->set_lr(3e-4);
    s->set_tokens_per_s(181234.5);
    s->set_model_tflops(123.4);
    s->set_mfu(0.41);
    s->set_step_ms(412.5);
    s->set_data_ms(3.2);
    s->set_peak_rss_mb(20480);
    for (int x = 0; x < 8; ++x) s->add_expert_load(4096 + (i * 7 + x * 13) % 512);
    s->set_imbalance(1.08);
    s->set_tokens(524288);
  }
  return e;
}

// --read-all: recovery as before ReadRecoveryEvents, every event of each active job.
class ReadAllStore : public trainyard::testing::TestJobStore {
 public:
  using TestJobStore::TestJobStore;
  absl::StatusOr<std::vector<Event>> ReadRecoveryEvents(const std::string& job_id, int, int) override {
    return ReadEvents(job_id, 1, 1 << 30);
  }
};

}  // namespace

int main(int argc, char** argv) {
  int64_t events = 10'000'000;
  int finished = 1000;
  int active = 10;
  int world = 8;
  int batch = 5000;
  int64_t active_events = -1;
  std::string dir;
  bool keep = false;
  bool reuse = false;
  bool read_all = false;
  CLI::App app{"trainyard-recovery-bench: time to open a large store and recover from it"};
  app.add_option("--events", events, "Events in the store, spread evenly over the jobs")->capture_default_str();
  app.add_option("--finished", finished, "Finished jobs (SUCCEEDED or FAILED)")->capture_default_str();
  app.add_option("--active", active, "RUNNING jobs, whose events recovery reads")->capture_default_str();
  app.add_option("--world", world, "Ranks per job")->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--active-events", active_events,
                 "Events of each active job (default: the even share); the rest go to the finished ones");
  app.add_option("--batch", batch, "Events per AppendEvents transaction while building")->capture_default_str();
  app.add_option("--dir", dir, "Store directory (default: a fresh one under $TMPDIR)");
  app.add_flag("--keep", keep, "Keep the store afterwards");
  app.add_flag("--reuse", reuse, "Time an existing store in --dir instead of building one");
  app.add_flag("--read-all", read_all, "Recover as before: read every event of each active job");
  CLI11_PARSE(app, argc, argv);
  if (dir.empty()) {
    dir = (std::filesystem::temp_directory_path() / absl::StrCat("trainyard-recovery-bench-", ::getpid())).string();
  }
  const absl::Time now = absl::Now();
  const int jobs = finished + active;
  if (!reuse) {
    std::filesystem::remove_all(dir);
    auto store = trainyard::SqliteJobStore::Open(dir);
    if (!store.ok()) {
      std::fprintf(stderr, "open: %s\n", std::string(store.status().message()).c_str());
      return 1;
    }
    const auto t0 = std::chrono::steady_clock::now();
    int64_t written = 0;
    for (int n = 0; n < jobs; ++n) {
      // Finished first, then the running ones: the active jobs are the newest rows.
      Job job = MakeJob(n, n >= finished, world, now);
      if (auto s = (*store)->CreateJob(&job); !s.ok()) {
        std::fprintf(stderr, "create: %s\n", std::string(s.message()).c_str());
        return 1;
      }
      int64_t share = events / jobs + (n < events % jobs ? 1 : 0);
      if (active_events >= 0) {
        const int64_t rest = std::max<int64_t>(0, events - active_events * active);
        share = n >= finished ? active_events : rest / finished + (n < rest % finished ? 1 : 0);
      }
      for (int64_t i = 0; i < share; i += batch) {
        std::vector<Event> chunk;
        for (int64_t k = i; k < std::min<int64_t>(share, i + batch); ++k) chunk.push_back(MakeEvent(k, world, now));
        auto done = (*store)->AppendEvents(job.id(), std::move(chunk));
        if (!done.ok()) {
          std::fprintf(stderr, "append: %s\n", std::string(done.status().message()).c_str());
          return 1;
        }
        written += static_cast<int64_t>(done->size());
      }
    }
    std::printf("[figures] built: %lld events over %d jobs in %.1f s (%s)\n", static_cast<long long>(written), jobs,
                Since(t0), dir.c_str());
  }
  // What ControllerServer::Start does before it serves.
  const auto t0 = std::chrono::steady_clock::now();
  auto store = trainyard::SqliteJobStore::Open(dir);
  if (!store.ok()) {
    std::fprintf(stderr, "open: %s\n", std::string(store.status().message()).c_str());
    return 1;
  }
  const double opened = Since(t0);
  trainyard::RealClock clock;
  trainyard::ControllerMetrics metrics;
  trainyard::EventHub hub;
  ReadAllStore all(store->get());
  trainyard::JobStore* used = read_all ? static_cast<trainyard::JobStore*>(&all) : store->get();
  trainyard::JobManager manager(used, &hub, &metrics, &clock, trainyard::JobManagerOptions());
  if (auto s = manager.Recover(); !s.ok()) {
    std::fprintf(stderr, "recover: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const double total = Since(t0);
  // What the store holds (after the timing): the figures name it, --reuse included.
  int stored_finished = 0;
  int stored_active = 0;
  int64_t stored_events = 0;
  if (auto rows = (*store)->LoadJobs(); rows.ok()) {
    for (const Job& job : *rows) {
      const bool ended = job.state() == Job::SUCCEEDED || job.state() == Job::FAILED || job.state() == Job::CANCELLED;
      ++(ended ? stored_finished : stored_active);
      stored_events += (*store)->LastSeq(job.id());
    }
  }
  auto stats = (*store)->GetStats();
  std::printf("[figures] recovery: %.3f s for %lld events (open %.3f s, Recover %.3f s; %d finished + %d active jobs; "
              "store %.0f MiB%s)\n",
              total, static_cast<long long>(stored_events), opened, total - opened, stored_finished, stored_active,
              stats.ok() ? static_cast<double>(stats->size_bytes) / (1 << 20) : -1.0,
              read_all ? "; --read-all: every event of the active jobs" : "");
  if (!keep && !reuse) std::filesystem::remove_all(dir);
  return 0;
}
