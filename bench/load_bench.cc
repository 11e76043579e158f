// trainyard-load-bench: the controller under load, over real gRPC on loopback. Starts
// a real trainyard-controller; synthetic workers (raw WorkerService streams, no ranks)
// take its Assigns and push StepMetrics events into running jobs while watchers follow
// them with WatchJob. Prints figures; asserts nothing, but counts every event each
// watcher got, so "exactly once" is checked, not assumed.
//
//   ingest:  --jobs jobs, one watcher each, workers push --ingest-events per job as fast
//            as the controller acknowledges (a window of --window batches of --batch
//            events): events/s committed durably (acknowledged = in SQLite).
//   fan-out: --watchers watchers spread over the jobs while the fleet sends --rate
//            events/s in all for --seconds: delivery lag (worker send -> watcher
//            receive) p50/p99, deliveries/s, and p50/p99 SubmitJob latency of a client
//            submitting (and cancelling) a job every 50 ms meanwhile.
//            The same client also times a GetJob and a ListJobs after each submit.
//   heartbeat: --heartbeat-workers simulated workers (Register, then a Heartbeat at the
//            interval the controller's RegisterAck names, staggered evenly) for
//            --heartbeat-seconds: the controller CPU they cost, as % of one core.
//   controller: peak and final RSS, CPU seconds per phase. Its pid is printed first, for
//            `perf record -g -p PID` while a phase runs.
#include <unistd.h>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/load_clients.h"
#include "tests/support/test_process.h"
#include "trainyard/v1/job_service.grpc.pb.h"
#include "trainyard/v1/worker_service.grpc.pb.h"

namespace {

namespace v1 = trainyard::v1;
using trainyard::bench::HeartbeatWorker;
using trainyard::bench::LatencyHistogram;
using trainyard::bench::ReadProc;
using trainyard::bench::ProcStat;
using trainyard::bench::SyntheticWorker;
using trainyard::bench::Watcher;
using trainyard::testing::TestProcess;

v1::JobSpec BenchSpec() {
  v1::JobSpec spec;
  spec.mutable_job()->set_name("load");
  spec.mutable_model()->set_preset("tiny");
  spec.mutable_training()->set_steps(100000000);
  spec.mutable_parallelism()->set_dp(1);
  spec.mutable_parallelism()->set_tp(1);
  return spec;
}

std::string SubmitOrDie(v1::JobService::Stub* jobs, const v1::JobSpec& spec) {
  grpc::ClientContext ctx;
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::Job job;
  grpc::Status s = jobs->SubmitJob(&ctx, req, &job);
  if (!s.ok()) {
    std::fprintf(stderr, "SubmitJob: %s\n", s.error_message().c_str());
    std::exit(1);
  }
  return job.id();
}

// Runs `jobs` on the workers (one each), ends them by EXITED; returns the Assigns.
std::vector<v1::Assign> StartJobs(v1::JobService::Stub* stub, std::vector<std::unique_ptr<SyntheticWorker>>& workers) {
  std::vector<v1::Assign> out;
  for (size_t i = 0; i < workers.size(); ++i) SubmitOrDie(stub, BenchSpec());
  for (auto& w : workers) {
    out.push_back(w->NextAssign());
    w->SendRankState(out.back(), v1::RankState::RUNNING);
  }
  return out;
}

void EndJobs(std::vector<std::unique_ptr<SyntheticWorker>>& workers, const std::vector<v1::Assign>& assigns) {
  for (size_t i = 0; i < workers.size(); ++i) workers[i]->SendRankState(assigns[i], v1::RankState::EXITED);
  for (auto& w : workers) w->Drain();
}

// Joins the watchers; returns how many got every step event of their job exactly once
// (`expected` each) with gapless seqs and an OK end.
int CheckWatchers(std::vector<Watcher>& watchers, int64_t expected) {
  int ok = 0;
  for (auto& w : watchers) {
    w.Join();
    if (w.status.ok() && w.gaps == 0 && w.steps == expected) {
      ++ok;
    } else if (ok + 5 > static_cast<int>(watchers.size())) {
      std::printf("  watcher of %s: %lld steps (expected %lld), %lld gaps, status %d %s\n", w.job_id.c_str(),
                  static_cast<long long>(w.steps), static_cast<long long>(expected),
                  static_cast<long long>(w.gaps), w.status.error_code(), w.status.error_message().c_str());
    }
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin_dir;
  int n_jobs = 10;
  int ingest_events = 30000;
  int batch = 1000;
  int window = 4;
  int n_watchers = 1000;
  int rate = 1000;
  int seconds = 10;
  int heartbeat_workers = 1000;
  int heartbeat_seconds = 20;
  std::string watch_rpc = "batched";
  std::vector<std::string> controller_args;
  CLI::App app{"trainyard-load-bench: controller ingest, watcher fan-out and SubmitJob latency "
               "under load, over real gRPC on loopback"};
  app.add_option("--bin-dir", bin_dir, "Directory with trainyard-controller")->required();
  app.add_option("--jobs", n_jobs, "Running jobs (one synthetic worker each)")->capture_default_str();
  app.add_option("--ingest-events", ingest_events, "Ingest phase: events per job")->capture_default_str();
  app.add_option("--batch", batch, "Ingest phase: events per batch (a worker sends 64)")->capture_default_str();
  app.add_option("--window", window, "Ingest phase: unacknowledged batches per worker")->capture_default_str();
  app.add_option("--watchers", n_watchers, "Fan-out phase: watchers over all jobs")->capture_default_str();
  app.add_option("--rate", rate, "Fan-out phase: events/s sent by the whole fleet")->capture_default_str();
  app.add_option("--seconds", seconds, "Fan-out phase: duration")->capture_default_str();
  app.add_option("--heartbeat-workers", heartbeat_workers, "Heartbeat phase: simulated workers (0: no phase)")
      ->capture_default_str();
  app.add_option("--heartbeat-seconds", heartbeat_seconds, "Heartbeat phase: duration")->capture_default_str();
  app.add_option("--watch-rpc", watch_rpc,
                 "How watchers watch: batched (WatchJobBatched, several events a message, what the clients "
                 "use) or single (WatchJob, one event a message)")
      ->check(CLI::IsMember({"batched", "single"}))
      ->capture_default_str();
  app.add_option("--controller-arg", controller_args,
                 "One more argument for the controller, repeatable (e.g. --controller-arg=--tensorboard-dir=DIR), "
                 "to measure what an integration costs against a run without it")
      ->allow_extra_args(false);
  CLI11_PARSE(app, argc, argv);
  const bool batched = watch_rpc == "batched";

  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("trainyard_load_bench_" + std::to_string(getpid()));
  fs::create_directories(dir);
  // No per-job event cap: the ingest phase measures what the controller can commit.
  std::vector<std::string> controller_argv = {bin_dir + "/trainyard-controller", "--listen", "127.0.0.1:0",
                                              "--data-dir", (dir / "data").string(), "--port-file",
                                              (dir / "port").string(), "--max-events-per-s-per-rank", "0"};
  controller_argv.insert(controller_argv.end(), controller_args.begin(), controller_args.end());
  TestProcess controller(controller_argv, (dir / "controller.log").string());
  const std::string port = trainyard::testing::WaitForFile((dir / "port").string(), 20000);
  if (port.empty()) {
    std::fprintf(stderr, "controller did not start; see %s\n", (dir / "controller.log").c_str());
    return 1;
  }
  const std::string address = "127.0.0.1:" + std::to_string(std::stoi(port));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // Separate channels (and so TCP connections) for workers, watchers and the submitter,
  // as separate processes would have.
  auto worker_channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  auto submit_channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  auto jobs = v1::JobService::NewStub(submit_channel);
  std::vector<std::shared_ptr<grpc::Channel>> watch_channels;
  for (int i = 0; i < 8; ++i) {
    grpc::ChannelArguments a = args;
    a.SetInt("trainyard.bench.channel", i);  // distinct args: a channel of its own
    watch_channels.push_back(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), a));
  }
  std::vector<std::unique_ptr<v1::JobService::Stub>> watch_stubs;
  for (auto& c : watch_channels) watch_stubs.push_back(v1::JobService::NewStub(c));

  std::vector<std::unique_ptr<SyntheticWorker>> workers;
  for (int i = 0; i < n_jobs; ++i) workers.push_back(std::make_unique<SyntheticWorker>(worker_channel, "synth-" + std::to_string(i)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // registered

  std::printf("trainyard-load-bench: %u cores, controller pid %d, %d jobs\n",
              std::thread::hardware_concurrency(), controller.pid(), n_jobs);
  std::fflush(stdout);  // the pid, now, for perf record -p

  // ---- ingest ----
  {
    std::vector<v1::Assign> assigns = StartJobs(jobs.get(), workers);
    std::vector<Watcher> watchers(n_jobs);
    std::atomic<int> ready{0};
    for (int i = 0; i < n_jobs; ++i) {
      watchers[i].job_id = assigns[i].job_id();
      watchers[i].Start(watch_stubs[i % watch_stubs.size()].get(), batched, nullptr, &ready);
    }
    while (ready.load() < n_jobs) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const ProcStat before = ReadProc(controller.pid());
    const absl::Time start = absl::Now();
    std::vector<std::thread> senders;
    for (int i = 0; i < n_jobs; ++i) {
      senders.emplace_back([&, i] {
        int64_t step = 1;
        for (int sent = 0; sent < ingest_events; sent += batch) {
          step = workers[i]->SendBatch(assigns[i], std::min(batch, ingest_events - sent), step, window);
        }
        workers[i]->Drain();
      });
    }
    for (auto& t : senders) t.join();
    const absl::Duration took = absl::Now() - start;
    const ProcStat after = ReadProc(controller.pid());
    EndJobs(workers, assigns);
    const int ok = CheckWatchers(watchers, ingest_events);
    const double total = static_cast<double>(n_jobs) * ingest_events;
    std::printf("ingest: %.0f events in %.2f s = %.0f events/s committed (acknowledged), batches of %d, "
                "window %d; controller CPU %.2f s = %.0f events per CPU-second; watchers complete and "
                "gapless: %d/%d\n",
                total, absl::ToDoubleSeconds(took), total / absl::ToDoubleSeconds(took), batch, window,
                after.cpu_s - before.cpu_s, total / std::max(1e-9, after.cpu_s - before.cpu_s), ok, n_jobs);
  }

  // ---- fan-out, with SubmitJob latency ----
  {
    std::vector<v1::Assign> assigns = StartJobs(jobs.get(), workers);
    std::vector<Watcher> watchers(n_watchers);
    LatencyHistogram lag;
    std::atomic<int> ready{0};
    for (int i = 0; i < n_watchers; ++i) {
      watchers[i].job_id = assigns[i % n_jobs].job_id();
      watchers[i].Start(watch_stubs[i % watch_stubs.size()].get(), batched, &lag, &ready);
    }
    while (ready.load() < n_watchers) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // streams open

    LatencyHistogram submit_latency;
    LatencyHistogram get_latency;
    LatencyHistogram list_latency;
    std::atomic<bool> stop{false};
    std::thread submitter([&] {
      v1::JobSpec spec = BenchSpec();
      while (!stop.load()) {
        const absl::Time t0 = absl::Now();
        const std::string id = SubmitOrDie(jobs.get(), spec);  // PENDING: no free slot
        submit_latency.Add(absl::Now() - t0);
        {
          grpc::ClientContext get_ctx;
          v1::GetJobRequest get;
          get.set_id(id);
          v1::Job got;
          const absl::Time t1 = absl::Now();
          if (jobs->GetJob(&get_ctx, get, &got).ok()) get_latency.Add(absl::Now() - t1);
          grpc::ClientContext list_ctx;
          v1::ListJobsRequest list;
          list.set_limit(20);
          v1::ListJobsResponse listed;
          const absl::Time t2 = absl::Now();
          if (jobs->ListJobs(&list_ctx, list, &listed).ok()) list_latency.Add(absl::Now() - t2);
        }
        grpc::ClientContext ctx;
        v1::CancelJobRequest cancel;
        cancel.set_id(id);
        v1::Job out;
        jobs->CancelJob(&ctx, cancel, &out);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });

    const ProcStat bench_before = ReadProc(getpid());  // this process: the watchers, workers, submitter
    const ProcStat before = ReadProc(controller.pid());
    const int per_worker_per_tick = std::max(1, rate / n_jobs / 10);  // a batch every 100 ms
    const int ticks = seconds * 10;
    const absl::Time start = absl::Now();
    std::vector<std::thread> senders;
    for (int i = 0; i < n_jobs; ++i) {
      senders.emplace_back([&, i] {
        int64_t step = 1;
        for (int t = 0; t < ticks; ++t) {
          absl::SleepFor(start + absl::Milliseconds(100) * (t + 1) - absl::Now());
          step = workers[i]->SendBatch(assigns[i], per_worker_per_tick, step, 1000);
        }
        workers[i]->Drain();
      });
    }
    for (auto& t : senders) t.join();
    const absl::Duration took = absl::Now() - start;
    stop.store(true);
    submitter.join();
    const ProcStat after = ReadProc(controller.pid());
    EndJobs(workers, assigns);
    const int64_t per_job = static_cast<int64_t>(per_worker_per_tick) * ticks;
    const int ok = CheckWatchers(watchers, per_job);
    // Until every watcher had every event: what the deliveries cost in all, also when
    // the controller falls behind the fleet and delivers after the senders stop.
    const ProcStat after_all = ReadProc(controller.pid());
    const ProcStat bench_after = ReadProc(getpid());
    const absl::Duration took_all = absl::Now() - start;
    std::printf("fan-out: %d watchers over %d jobs, %lld events/s sent in all for %.1f s -> %.0f "
                "deliveries/s; lag send->receive p50 %.1f ms p99 %.1f ms max<=%.1f ms (%lld samples); "
                "every event exactly once, gapless: %d/%d watchers; controller CPU %.2f s\n",
                n_watchers, n_jobs, static_cast<long long>(per_worker_per_tick) * n_jobs * 10,
                absl::ToDoubleSeconds(took), lag.count() / absl::ToDoubleSeconds(took), lag.QuantileMs(0.5),
                lag.QuantileMs(0.99), lag.QuantileMs(1.0), static_cast<long long>(lag.count()), ok, n_watchers,
                after.cpu_s - before.cpu_s);
    int64_t messages = 0;
    int64_t events = 0;
    for (const auto& w : watchers) {
      messages += w.messages;
      events += w.events;
    }
    std::printf("fan-out cost (%s): every watcher had every event %.1f s after the start in %lld stream "
                "messages (%.1f events each); controller CPU %.2f s until then = %.1f %% of a core, %.2f us per "
                "delivery\n",
                batched ? "WatchJobBatched" : "WatchJob", absl::ToDoubleSeconds(took_all),
                static_cast<long long>(messages), static_cast<double>(events) / std::max<int64_t>(1, messages),
                after_all.cpu_s - before.cpu_s,
                100.0 * (after_all.cpu_s - before.cpu_s) / absl::ToDoubleSeconds(took_all),
                1e6 * (after_all.cpu_s - before.cpu_s) / std::max<double>(1, lag.count()));
    std::printf("load generator (this process, on the same cores): CPU %.2f s = %.1f %% of a core\n",
                bench_after.cpu_s - bench_before.cpu_s,
                100.0 * (bench_after.cpu_s - bench_before.cpu_s) / absl::ToDoubleSeconds(took_all));
    std::printf("submit under fan-out load: %lld SubmitJob calls, p50 %.2f ms p99 %.2f ms\n",
                static_cast<long long>(submit_latency.count()), submit_latency.QuantileMs(0.5),
                submit_latency.QuantileMs(0.99));
    std::printf("reads under fan-out load: GetJob p50 %.2f ms p99 %.2f ms, ListJobs (20) p50 %.2f ms p99 %.2f ms\n",
                get_latency.QuantileMs(0.5), get_latency.QuantileMs(0.99), list_latency.QuantileMs(0.5),
                list_latency.QuantileMs(0.99));
  }

  // ---- heartbeats ----
  if (heartbeat_workers > 0) {
    std::vector<std::unique_ptr<v1::WorkerService::Stub>> stubs;
    for (auto& c : watch_channels) stubs.push_back(v1::WorkerService::NewStub(c));
    std::vector<std::unique_ptr<HeartbeatWorker>> fleet;
    const ProcStat before_register = ReadProc(controller.pid());
    const absl::Time register_start = absl::Now();
    for (int i = 0; i < heartbeat_workers; ++i) {
      fleet.push_back(std::make_unique<HeartbeatWorker>());
      fleet.back()->Start(stubs[i % stubs.size()].get(), "hb-" + std::to_string(i));
    }
    int interval_ms = 0;
    for (auto& w : fleet) {
      while (w->interval_ms() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      interval_ms = w->interval_ms();
    }
    const absl::Duration register_took = absl::Now() - register_start;
    const ProcStat before = ReadProc(controller.pid());
    const absl::Time start = absl::Now();
    const absl::Duration interval = absl::Milliseconds(interval_ms);
    int64_t beats = 0, skipped = 0;
    // Worker i beats at start + i/N of the interval, then every interval.
    for (int64_t k = 0;; ++k) {
      const absl::Time at = start + interval * (k / heartbeat_workers) +
                            interval * static_cast<double>(k % heartbeat_workers) / heartbeat_workers;
      if (at - start >= absl::Seconds(heartbeat_seconds)) break;
      absl::SleepFor(at - absl::Now());
      if (fleet[k % heartbeat_workers]->Beat()) {
        ++beats;
      } else {
        ++skipped;
      }
    }
    const absl::Duration took = absl::Now() - start;
    const ProcStat after = ReadProc(controller.pid());
    for (auto& w : fleet) w->Stop();
    const double cpu = after.cpu_s - before.cpu_s;
    std::printf("heartbeat: %d workers registered in %.2f s (controller CPU %.2f s); a heartbeat each every %d ms "
                "(the controller's interval) for %.1f s: %lld heartbeats (%lld skipped, write in flight) = %.0f/s; "
                "controller CPU %.2f s = %.1f %% of a core\n",
                heartbeat_workers, absl::ToDoubleSeconds(register_took), before.cpu_s - before_register.cpu_s,
                interval_ms, absl::ToDoubleSeconds(took), static_cast<long long>(beats),
                static_cast<long long>(skipped), beats / absl::ToDoubleSeconds(took), cpu,
                100.0 * cpu / absl::ToDoubleSeconds(took));
  }
  const ProcStat end = ReadProc(controller.pid());
  std::printf("controller RSS: %.1f MB now, %.1f MB peak (VmHWM)\n", end.rss_kb / 1024.0, end.hwm_kb / 1024.0);
  workers.clear();
  controller.Stop();
  fs::remove_all(dir);
  return 0;
}
