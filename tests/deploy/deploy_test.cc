// What deploy/ relies on in the binaries: the worker's gRPC health endpoint
// (--health-listen, probed by the DaemonSet), the controller series the alert rules read,
// and deploy/prometheus/alerts.yml loaded by a real Prometheus scraping a real
// controller, whose recompile-storm and stalled-job alerts must fire.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "server/metrics/controller_metrics.h"
#include "tests/support/files.h"
#include "tests/support/http_get.h"
#include "tests/support/ports.h"
#include "tests/support/test_cluster.h"
#include "worker/daemon/health_server.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using grpc::health::v1::HealthCheckResponse;

// Polls `pred` every 100 ms until it holds or `timeout_ms` passed; true when it held.
bool Eventually(const std::function<bool()>& pred, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return pred();
}

// One grpc.health.v1 Check against `target`: the status, or "RPC <code>" when the call
// failed (NOT_FOUND for a service the server does not know).
std::string HealthCheck(const std::string& target, const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  const grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) return "RPC " + std::to_string(s.error_code());
  return HealthCheckResponse::ServingStatus_Name(resp.status());
}

// ---------------------------------------------------------------------------------------
// --health-listen

TEST(HealthListenTest, ABarePortIsLoopbackAndBeyondLoopbackNeedsInsecure) {
  EXPECT_EQ(HealthServer::ResolveAddress("8081", false).value(), "127.0.0.1:8081");
  EXPECT_EQ(HealthServer::ResolveAddress("127.0.0.1:9", false).value(), "127.0.0.1:9");
  EXPECT_EQ(HealthServer::ResolveAddress("localhost:9", false).value(), "localhost:9");
  EXPECT_EQ(HealthServer::ResolveAddress("[::1]:9", false).value(), "[::1]:9");
  EXPECT_EQ(HealthServer::ResolveAddress("0.0.0.0:8081", true).value(), "0.0.0.0:8081");
  for (const std::string beyond : {"0.0.0.0:8081", "10.0.0.7:8081", "node-1:8081"}) {
    const auto r = HealthServer::ResolveAddress(beyond, false);
    ASSERT_FALSE(r.ok()) << beyond;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("beyond loopback"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("--insecure"), std::string::npos) << r.status();
  }
  for (const std::string bad : {"", "70000", "127.0.0.1", ":8081", "host:"}) {
    const auto r = HealthServer::ResolveAddress(bad, true);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--health-listen"), std::string::npos) << r.status();
  }
  // Hostile input is quoted, not echoed whole.
  const auto r = HealthServer::ResolveAddress(std::string(100000, '9'), true);
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.status().message().size(), 300u) << r.status().message().substr(0, 400);
}

TEST(HealthServerTest, FollowsRegistrationWhileLivenessStaysServingUntilShutdown) {
  std::atomic<bool> registered{false};
  auto started = HealthServer::Start(
      "127.0.0.1:0", [&] { return registered.load(); }, absl::Milliseconds(20));
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<HealthServer> health = std::move(*started);
  const std::string target = "127.0.0.1:" + std::to_string(health->port());
  EXPECT_EQ(HealthCheck(target, ""), "NOT_SERVING");
  EXPECT_EQ(HealthCheck(target, "trainyard.worker"), "NOT_SERVING");
  EXPECT_EQ(HealthCheck(target, "liveness"), "SERVING");
  EXPECT_EQ(HealthCheck(target, "no.such.Service"), "RPC " + std::to_string(grpc::StatusCode::NOT_FOUND));

  registered = true;
  EXPECT_TRUE(Eventually([&] { return HealthCheck(target, "") == "SERVING"; }, 10000));
  EXPECT_EQ(HealthCheck(target, "trainyard.worker"), "SERVING");
  registered = false;
  EXPECT_TRUE(Eventually([&] { return HealthCheck(target, "") == "NOT_SERVING"; }, 10000));
  EXPECT_EQ(HealthCheck(target, "liveness"), "SERVING") << "a lost controller must not fail liveness";

  health->Shutdown();
  EXPECT_NE(HealthCheck(target, "liveness"), "SERVING");
}

// gRPC servers share a port by default (SO_REUSEPORT): a second worker's health server
// on the first's port would answer half the kubelet's probes. It is refused, naming the
// address and why.
TEST(HealthServerTest, APortAnotherServerHoldsIsRefusedNamingIt) {
  auto first = HealthServer::Start("127.0.0.1:0", [] { return true; });
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = HealthServer::Start(address, [] { return true; });
  ASSERT_FALSE(second.ok()) << "two health servers share " << address;
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("--health-listen '" + address + "': cannot listen: address already in use"),
            std::string::npos)
      << second.status();
  EXPECT_EQ(HealthCheck(address, "liveness"), "SERVING") << "the first still serves";
}

// The real worker binary against a real controller: SERVING once registered, NOT_SERVING
// while the controller is down (liveness still SERVING), SERVING again after it is back.
TEST(WorkerHealthTest, ServingWhileRegisteredAndNotWhileTheControllerIsDown) {
  TestCluster cluster(kBuiltBinaries, "deploy_health");
  ASSERT_TRUE(cluster.StartController()) << "see " << cluster.dir() / "controller.log";
  const int port = FreeLoopbackPort();
  ASSERT_NE(port, 0);
  const std::string target = "127.0.0.1:" + std::to_string(port);
  const int base = RendezvousPortBase();
  TestProcess worker({TRAINYARD_WORKER, "--controller", cluster.address(), "--slots", "1", "--name", "w1", "--work-dir",
                      (cluster.dir() / "w1").string(), "--rendezvous-ports",
                      std::to_string(base) + "-" + std::to_string(base + 9), "--health-listen", target},
                     (cluster.dir() / "worker.log").string());
  ASSERT_TRUE(cluster.WaitConnected({"w1"}, 30000)) << "see " << cluster.dir() / "worker.log";
  EXPECT_TRUE(Eventually([&] { return HealthCheck(target, "") == "SERVING"; }, 30000))
      << HealthCheck(target, "") << "; see " << cluster.dir() / "worker.log";
  EXPECT_EQ(HealthCheck(target, "trainyard.worker"), "SERVING");

  cluster.KillController();
  EXPECT_TRUE(Eventually([&] { return HealthCheck(target, "") == "NOT_SERVING"; }, 30000)) << HealthCheck(target, "");
  EXPECT_EQ(HealthCheck(target, "liveness"), "SERVING");

  ASSERT_TRUE(cluster.RestartController());
  EXPECT_TRUE(Eventually([&] { return HealthCheck(target, "") == "SERVING"; }, 30000))
      << HealthCheck(target, "") << "; see " << cluster.dir() / "worker.log";
  EXPECT_EQ(worker.Stop(), 0);
}

TEST(WorkerHealthTest, ANonLoopbackHealthListenerNeedsInsecure) {
  const fs::path dir = fs::temp_directory_path() / ("trainyard_deploy_insecure_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const int port = FreeLoopbackPort();
  ASSERT_NE(port, 0);
  const std::vector<std::string> argv = {TRAINYARD_WORKER,
                                         "--controller",
                                         "127.0.0.1:1",
                                         "--slots",
                                         "1",
                                         "--name",
                                         "w1",
                                         "--work-dir",
                                         (dir / "w1").string(),
                                         "--health-listen",
                                         "0.0.0.0:" + std::to_string(port)};
  const CommandResult refused = RunCommand(argv);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("--health-listen"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("beyond loopback"), std::string::npos) << refused.err;

  // With --insecure it listens on every interface, loopback included; the controller at
  // 127.0.0.1:1 is unreachable, so it is alive but not ready.
  std::vector<std::string> insecure = argv;
  insecure.push_back("--insecure");
  {
    TestProcess worker(insecure, (dir / "worker.log").string());
    const std::string target = "127.0.0.1:" + std::to_string(port);
    EXPECT_TRUE(Eventually([&] { return HealthCheck(target, "liveness") == "SERVING"; }, 20000))
        << ReadFileOrEmpty(dir / "worker.log");
    EXPECT_EQ(HealthCheck(target, ""), "NOT_SERVING");
    EXPECT_NE(ReadFileOrEmpty(dir / "worker.log").find("--insecure"), std::string::npos) << "no warning logged";
  }
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------
// The series the alert rules read (deploy/prometheus/alerts.yml)

// The value of the exposition line that starts with `series` + " ", if any.
std::optional<double> Sample(const std::string& text, const std::string& series) {
  const std::string key = series + " ";
  for (std::size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + key.size()));
  }
  return std::nullopt;
}

TEST(AlertMetricsTest, PlacedJobsGetZeroedCountersRunningAndProgressTimestamps) {
  ControllerMetrics m;
  auto scrape = [&] { return prometheus::TextSerializer().Serialize(m.registry()->Collect()); };
  const absl::Time t0 = absl::FromUnixSeconds(1700000000);
  m.JobStateChanged("j", v1::Job::PENDING, t0);
  EXPECT_EQ(scrape().find("job_id=\"j\""), std::string::npos) << "a queued job has no series";

  m.JobStateChanged("j", v1::Job::SCHEDULED, t0);
  std::string text = scrape();
  // Counters exist at 0 from placement, so increase() sees their first increment.
  EXPECT_EQ(Sample(text, "trainyard_job_stalls_total{job_id=\"j\"}"), 0.0) << text;
  EXPECT_EQ(Sample(text, "trainyard_job_restarts_total{job_id=\"j\"}"), 0.0) << text;
  EXPECT_EQ(Sample(text, "trainyard_compile_events_total{job_id=\"j\",kind=\"recompile\"}"), 0.0) << text;
  EXPECT_EQ(Sample(text, "trainyard_job_running{job_id=\"j\"}"), 0.0) << text;
  // No step yet: no loss or MFU of 0, and no progress time.
  EXPECT_FALSE(Sample(text, "trainyard_job_loss{job_id=\"j\"}").has_value()) << text;
  EXPECT_FALSE(Sample(text, "trainyard_job_mfu_ratio{job_id=\"j\"}").has_value()) << text;
  EXPECT_FALSE(Sample(text, "trainyard_job_last_progress_timestamp_seconds{job_id=\"j\"}").has_value()) << text;

  m.JobStateChanged("j", v1::Job::RUNNING, t0 + absl::Seconds(5));
  text = scrape();
  EXPECT_EQ(Sample(text, "trainyard_job_running{job_id=\"j\"}"), 1.0) << text;
  EXPECT_EQ(Sample(text, "trainyard_job_last_progress_timestamp_seconds{job_id=\"j\"}"), 1700000005.0) << text;

  v1::StepMetrics step;
  step.set_step(4);
  step.set_mfu(0.25);
  m.StepReported("j", step, t0 + absl::Seconds(9));
  m.StepReported("j", step, t0 + absl::Seconds(7));  // committed out of order: the later time stays
  v1::CompileEvent recompile;
  recompile.set_kind(v1::CompileEvent::RECOMPILE);
  recompile.set_region("attention");
  m.CompileReported("j", recompile);
  m.CompileReported("j", recompile);
  m.StallReported("j");
  text = scrape();
  EXPECT_EQ(Sample(text, "trainyard_job_last_progress_timestamp_seconds{job_id=\"j\"}"), 1700000009.0) << text;
  EXPECT_EQ(Sample(text, "trainyard_job_mfu_ratio{job_id=\"j\"}"), 0.25) << text;
  EXPECT_EQ(Sample(text, "trainyard_compile_events_total{job_id=\"j\",kind=\"recompile\"}"), 2.0) << text;
  EXPECT_EQ(Sample(text, "trainyard_job_recompiles_total{job_id=\"j\",region=\"attention\"}"), 2.0) << text;
  EXPECT_EQ(Sample(text, "trainyard_job_stalls_total{job_id=\"j\"}"), 1.0) << text;

  m.JobStateChanged("j", v1::Job::RESTARTING, t0 + absl::Seconds(10));
  EXPECT_EQ(Sample(scrape(), "trainyard_job_running{job_id=\"j\"}"), 0.0);
  m.JobStateChanged("j", v1::Job::RUNNING, t0 + absl::Seconds(30));  // a new attempt is progress
  EXPECT_EQ(Sample(scrape(), "trainyard_job_last_progress_timestamp_seconds{job_id=\"j\"}"), 1700000030.0);
  m.JobStateChanged("j", v1::Job::FAILED, t0 + absl::Seconds(40));
  m.JobEnded("j", t0 + absl::Seconds(40));
  EXPECT_EQ(Sample(scrape(), "trainyard_job_running{job_id=\"j\"}"), 0.0);
  m.Sweep(t0 + absl::Minutes(20), absl::Minutes(10));
  EXPECT_EQ(scrape().find("job_id=\"j\""), std::string::npos) << scrape();

  EXPECT_EQ(Sample(scrape(), "trainyard_workers_lost_total"), 0.0);
  m.WorkersLost(2);
  EXPECT_EQ(Sample(scrape(), "trainyard_workers_lost_total"), 2.0);
}

// ---------------------------------------------------------------------------------------
// A real Prometheus with deploy/prometheus/alerts.yml

#ifdef TRAINYARD_PROMETHEUS

// The engine recompiles only at start-up by design (docs/compile.md: one entry per
// region key and grad mode, then RECOMPILE_LIMIT stops it), so no job file makes a real
// rank recompile all the time. This rank stands in for one that does: for the job named
// recompile-storm it writes the engine's RECOMPILE event line 20 times a second; every
// other job gets the real trainyard-rank.
std::string RankWrapper() {
  return std::string("#!/bin/bash\n") +
         "config=\"\"\n"
         "prev=\"\"\n"
         "for a in \"$@\"; do [ \"$prev\" = --config ] && config=$a; prev=$a; done\n"
         "if grep -q '\"name\": *\"recompile-storm\"' \"$config\"; then\n"
         "  for i in $(seq 1 3000); do\n"
         "    echo '{\"compile\":{\"kind\":\"RECOMPILE\",\"region\":\"attention\",\"layers\":[0,1],"
         "\"reason\":\"input[0].size(1): expected 32, got 33\",\"compile_ms\":2.5,\"cache_entries\":2}}'\n"
         "    sleep 0.05\n"
         "  done\n"
         "  exit 0\n"
         "fi\n"
         "exec " TRAINYARD_RANK " \"$@\"\n";
}

// alerts.yml with every `for:` set to 0s, so the test need not wait out the 10-15
// minutes an alert must hold in production; expressions, windows and thresholds are the
// file's own. Returns the number of `for:` lines changed (0 when the file is missing).
int WriteTestRules(const fs::path& out) {
  const std::string rules = ReadFileOrEmpty(TRAINYARD_ALERT_RULES);
  const std::regex for_line(R"((\n[ ]+for:)[ ]*\S+)");
  int changed = 0;
  for (std::sregex_iterator it(rules.begin(), rules.end(), for_line), end; it != end; ++it) ++changed;
  std::ofstream(out) << std::regex_replace(rules, for_line, "$1 0s");
  return changed;
}

TEST(PrometheusAlertsTest, RecompileStormAndStalledJobAlertsFireFromARealController) {
  TestCluster cluster(kBuiltBinaries, "deploy_alerts");
  const int metrics_port = FreeLoopbackPort();
  const int prom_port = FreeLoopbackPort();
  ASSERT_TRUE(metrics_port != 0 && prom_port != 0 && metrics_port != prom_port);
  ASSERT_TRUE(cluster.StartController({"--metrics-listen", "127.0.0.1:" + std::to_string(metrics_port)}))
      << "see " << cluster.dir() / "controller.log";

  const fs::path wrapper = cluster.dir() / "rank-wrapper.sh";
  std::ofstream(wrapper) << RankWrapper();
  fs::permissions(wrapper, fs::perms::owner_all);
  const int base = RendezvousPortBase();
  // Rank 0 of every real job's first attempt stops before step 3's data (outside any
  // collective): the stall that training.step_timeout_s must catch.
  TestProcess worker({"/usr/bin/env", "TRAINYARD_TEST_STALL_RANK=0", "TRAINYARD_TEST_STALL_AT_STEP=3", TRAINYARD_WORKER,
                      "--controller", cluster.address(), "--slots", "2", "--name", "w1", "--rank-binary",
                      wrapper.string(), "--work-dir", (cluster.dir() / "w1").string(), "--rendezvous-ports",
                      std::to_string(base) + "-" + std::to_string(base + 9)},
                     (cluster.dir() / "worker.log").string());
  ASSERT_TRUE(cluster.WaitConnected({"w1"}, 30000)) << "see " << cluster.dir() / "worker.log";

  const fs::path rules = cluster.dir() / "alerts.yml";
  ASSERT_GE(WriteTestRules(rules), 2) << TRAINYARD_ALERT_RULES << " has no `for:` lines";
  const fs::path config = cluster.dir() / "prometheus.yml";
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        << "rule_files:\n  - " << rules.string() << "\n"
                        << "scrape_configs:\n  - job_name: trainyard-controller\n    static_configs:\n"
                        << "      - targets: ['127.0.0.1:" << metrics_port << "']\n";
  TestProcess prometheus({TRAINYARD_PROMETHEUS, "--config.file=" + config.string(),
                          "--storage.tsdb.path=" + (cluster.dir() / "tsdb").string(),
                          "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
                         (cluster.dir() / "prometheus.log").string());

  // Prometheus up with both rules loaded (a rule file it refuses stops it at start).
  const bool loaded = Eventually(
      [&] {
        const std::string body = HttpGet(prom_port, "/api/v1/rules");
        return body.find("\"TrainyardRecompileStorm\"") != std::string::npos &&
               body.find("\"TrainyardJobStalled\"") != std::string::npos;
      },
      30000);
  ASSERT_TRUE(loaded) << "Prometheus did not load " << rules << ":\n"
                      << ReadFileOrEmpty(cluster.dir() / "prometheus.log").substr(0, 4000);
  // ... and scraping the controller: a counter whose series first appears with its
  // increment (a stall within a second of placement, before any scrape) has no
  // increase() to see.
  const std::string up = "/api/v1/query?query=" + UrlEncode("up{job=\"trainyard-controller\"}");
  ASSERT_TRUE(Eventually([&] { return HttpGet(prom_port, up).find("\"1\"]") != std::string::npos; }, 30000))
      << HttpGet(prom_port, up);

  const std::string tiny = TRAINYARD_EXAMPLES "/tiny.toml";
  const std::string storm = cluster.Submit(tiny, {"job.name=recompile-storm", "training.steps=100000"});
  const std::string stalled = cluster.Submit(
      tiny, {"job.name=stalled", "training.steps=100000", "training.step_timeout_s=2", "restart.max_restarts=0"});
  ASSERT_FALSE(storm.empty());
  ASSERT_FALSE(stalled.empty());

  // Firing alerts as (alertname, job_id) -> labels, from Prometheus's own API.
  auto firing = [&] {
    std::map<std::pair<std::string, std::string>, json> out;
    const json r = json::parse(HttpGet(prom_port, "/api/v1/alerts"), nullptr, false);
    if (r.is_discarded() || r.value("status", "") != "success") return out;
    for (const json& a : r.at("data").at("alerts")) {
      if (a.value("state", "") != "firing") continue;
      const json& l = a.at("labels");
      out[{l.value("alertname", ""), l.value("job_id", "")}] = l;
    }
    return out;
  };
  std::map<std::pair<std::string, std::string>, json> alerts;
  const auto started = std::chrono::steady_clock::now();
  const bool both = Eventually(
      [&] {
        alerts = firing();
        return alerts.count({"TrainyardRecompileStorm", storm}) && alerts.count({"TrainyardJobStalled", stalled});
      },
      240000);
  std::string seen;
  for (const auto& [key, labels] : alerts) seen += key.first + "{job_id=" + key.second + "} ";
  ASSERT_TRUE(both) << "firing: [" << seen << "]; see " << cluster.dir();
  std::printf("[figures] both alerts firing %.1f s after the jobs were submitted\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());

  const json& storm_labels = alerts.at({"TrainyardRecompileStorm", storm});
  EXPECT_EQ(storm_labels.value("severity", ""), "warning");
  EXPECT_EQ(storm_labels.value("job", ""), "trainyard-controller");
  const json& stall_labels = alerts.at({"TrainyardJobStalled", stalled});
  EXPECT_EQ(stall_labels.value("cause", ""), "watchdog") << stall_labels.dump();
  EXPECT_EQ(stall_labels.value("severity", ""), "critical");
  // Each alert names only the job that earned it: the real tiny job compiles once per
  // region and never recompiles; the stand-in rank never stalls.
  EXPECT_EQ(alerts.count({"TrainyardRecompileStorm", stalled}), 0u) << seen;
  EXPECT_EQ(alerts.count({"TrainyardJobStalled", storm}), 0u) << seen;

  // The stalled job's own stream holds the watchdog's Stall, and it failed for it.
  const CommandResult stalled_events = cluster.Cli({"watch", stalled, "--output", "json"});
  bool stall_event = false;
  for (const json& e : JsonLines(stalled_events.out)) stall_event |= e.contains("stall");
  EXPECT_TRUE(stall_event) << stalled_events.out.substr(0, 2000);
  EXPECT_EQ(cluster.Get(stalled).value("state", ""), "FAILED");

  // Cancel the storm; once it ended, Prometheus's count of its recompiles equals the
  // RECOMPILE events its stream holds.
  ASSERT_EQ(cluster.Cli({"cancel", storm}).exit_code, 0);
  const CommandResult storm_events = cluster.Cli({"watch", storm, "--output", "json"});
  int recompiles = 0;
  for (const json& e : JsonLines(storm_events.out)) {
    if (e.contains("compile") && e.at("compile").value("kind", "") == "RECOMPILE") ++recompiles;
  }
  EXPECT_GT(recompiles, 30);
  const std::string query = "trainyard_compile_events_total{kind=\"recompile\",job_id=\"" + storm + "\"}";
  double scraped = -1;
  EXPECT_TRUE(Eventually(
      [&] {
        const json r = json::parse(HttpGet(prom_port, "/api/v1/query?query=" + UrlEncode(query)), nullptr, false);
        if (r.is_discarded() || r.value("status", "") != "success" || r["data"]["result"].empty()) return false;
        scraped = std::stod(r["data"]["result"][0]["value"][1].get<std::string>());
        return scraped == recompiles;
      },
      30000))
      << "Prometheus has " << scraped << ", the stream " << recompiles;
  std::printf("[figures] recompile-storm job: %d RECOMPILE events in its stream, %.0f in Prometheus\n", recompiles,
              scraped);
}
#endif  // TRAINYARD_PROMETHEUS

}  // namespace
}  // namespace trainyard::testing
