// MLflow tracking end to end: a real `mlflow server` (deploy/install-mlflow.sh's venv,
// SQLite backend), the real controller with --mlflow-uri, a worker and a tiny job. The
// MLflow server is SIGKILLed mid-job and the controller too, both come back on the
// same port and stores, and afterwards MLflow's own Python client (mlflow_dump.py)
// must read one run with every step's metrics once, equal to the job's events as the
// CLI reads them, the spec as params, the tags and the FINISHED status. Also: flags the
// controller refuses before serving, and what the real MLflow does with a resent
// batch and with NaN/inf (server/mlflow/mlflow_client.h against it directly).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/mlflow/mlflow_client.h"
#include "tests/support/http_get.h"
#include "tests/support/test_cluster.h"

#ifndef TRAINYARD_MLFLOW
#define TRAINYARD_MLFLOW ""
#endif

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kMlflow = TRAINYARD_MLFLOW;

// `mlflow server` on 127.0.0.1:port with its store under `dir`; Start again after Kill
// reuses both.
class MlflowServer {
 public:
  MlflowServer(fs::path dir, int port) : dir_(std::move(dir)), port_(port) {}
  bool Start() {
    process_ = std::make_unique<TestProcess>(
        std::vector<std::string>{kMlflow, "server", "--backend-store-uri", "sqlite:///" + (dir_ / "mlflow.db").string(),
                                 "--default-artifact-root", (dir_ / "mlflow-artifacts").string(), "--host",
                                 "127.0.0.1", "--port", std::to_string(port_), "--workers", "1"},
        (dir_ / "mlflow.log").string());
    for (int i = 0; i < 1800; ++i) {  // its first start migrates the store: tens of seconds on a busy machine
      if (HttpGet(port_, "/health").find("OK") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  void Kill() { process_.reset(); }  // SIGKILL to its whole process group
  std::string uri() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Every run of `experiment` as MLflow's Python client reads it.
  json Dump(const std::string& experiment) const {
    const std::string python = (fs::path(kMlflow).parent_path() / "python3").string();
    const CommandResult r =
        RunCommand({python, TRAINYARD_SOURCE_DIR "/tests/integration/mlflow_dump.py", uri(), experiment});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out, nullptr, false);
    return j.is_discarded() ? json{{"runs", json::array()}} : j;
  }

 private:
  fs::path dir_;
  int port_;
  std::unique_ptr<TestProcess> process_;
};

class MlflowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // CI installs it (deploy/install-mlflow.sh): a missing server fails, it never skips.
    ASSERT_FALSE(kMlflow.empty()) << "no mlflow program: run deploy/install-mlflow.sh, then reconfigure "
                                     "(cmake -DTRAINYARD_MLFLOW_BIN=/opt/trainyard/mlflow-venv/bin/mlflow)";
    ASSERT_EQ(access(kMlflow.c_str(), X_OK), 0) << kMlflow << " is not executable";
  }
};

double Scrape(int port, const std::string& series) {
  const std::string text = HttpGet(port, "/metrics");
  const std::size_t at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

TEST(MlflowFlagsTest, BadMlflowFlagsStopTheControllerBeforeItServesWithExit2) {
  const fs::path dir = fs::temp_directory_path() / ("ty_mlflow_flags_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{"--mlflow-uri", "ftp://mlflow:21"}, "--mlflow-uri"},
      {{"--mlflow-uri", "http://user:hunter2@mlflow:5000"}, "--mlflow-uri"},
      {{"--mlflow-uri", ""}, "--mlflow-uri is empty"},
      {{"--mlflow-uri", "http://" + std::string(5000, 'a') + ":5000"}, "--mlflow-uri"},
      {{"--mlflow-uri", "http://ml\xff\xfe" "flow:5000"}, "--mlflow-uri"},
      {{"--mlflow-experiment", "x"}, "--mlflow-experiment needs --mlflow-uri"},
      {{"--mlflow-uri", "http://127.0.0.1:5000", "--mlflow-experiment", ""}, "--mlflow-experiment"},
      {{"--mlflow-uri", "http://127.0.0.1:5000", "--mlflow-experiment", "a\x01" "b"}, "--mlflow-experiment"},
      {{"--mlflow-uri", "http://127.0.0.1:5000", "--mlflow-max-backoff", "nan"}, "--mlflow-max-backoff"},
      {{"--mlflow-uri", "http://127.0.0.1:5000", "--mlflow-max-backoff", "-1"}, "--mlflow-max-backoff"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {TRAINYARD_CONTROLLER, "--listen", "127.0.0.1:0", "--data-dir",
                                     (dir / "data").string(), "--port-file", (dir / "port").string()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const CommandResult r = RunCommand(argv);
    SCOPED_TRACE(c.args.back().substr(0, 40));
    EXPECT_NE(r.exit_code, 0);
    // Ours exit 2; CLI11's own range checks exit with its code for a malformed command line.
    if (c.expect.rfind("--mlflow-max-backoff", 0) != 0) EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("hunter2"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir / "port")) << "it served";
    EXPECT_FALSE(fs::exists(dir / "data")) << "the data dir was made before the flag was checked";
  }
  fs::remove_all(dir);
}

TEST_F(MlflowTest, ARealMlflowStoresAResentBatchOnceAndTakesNan) {
  TestCluster scratch(kBuiltBinaries, "mlflow_probe");
  MlflowServer server(scratch.dir(), FreeLoopbackPort());
  ASSERT_TRUE(server.Start()) << "see " << scratch.dir() / "mlflow.log";
  mlflow::MlflowClient client(mlflow::MlflowClientOptions{server.uri()});
  auto experiment = client.GetOrCreateExperiment("probe");
  ASSERT_TRUE(experiment.ok()) << experiment.status();
  auto again = client.GetOrCreateExperiment("probe");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *experiment);
  auto run = client.CreateRun(*experiment, "probe-run", 1000, {{"trainyard.job_id", "job-77"}});
  ASSERT_TRUE(run.ok()) << run.status();
  auto found = client.FindRun(*experiment, "trainyard.job_id", "job-77");
  ASSERT_TRUE(found.ok() && found->has_value()) << found.status();
  EXPECT_EQ(**found, *run);
  const std::vector<mlflow::Metric> batch = {
      {"m", 0.25, 5000, 1}, {"m", std::nan(""), 6000, 2}, {"m", INFINITY, 7000, 3}};
  ASSERT_TRUE(client.LogBatch(*run, batch, {{"p", "v"}}, {}).ok());
  // The same batch again (a resend after a lost answer): same params, same points.
  ASSERT_TRUE(client.LogBatch(*run, batch, {{"p", "v"}}, {}).ok());
  // A changed param is MLflow's error, named with its code.
  const absl::Status changed = client.LogBatch(*run, {}, {{"p", "other"}}, {});
  EXPECT_EQ(mlflow::MlflowErrorCode(changed), "INVALID_PARAMETER_VALUE") << changed;
  ASSERT_TRUE(client.UpdateRun(*run, "FINISHED", 9000).ok());
  const json dump = server.Dump("probe");
  ASSERT_EQ(dump["runs"].size(), 1u) << dump.dump();
  const json& r = dump["runs"][0];
  EXPECT_EQ(r["status"], "FINISHED");
  EXPECT_EQ(r["end_time"], 9000);
  const json& history = r["metrics"]["m"];
  ASSERT_EQ(history.size(), 3u) << history.dump();  // not 6
  EXPECT_EQ(history[0][2], 0.25);
  EXPECT_EQ(history[1][2], "NaN");
  EXPECT_EQ(history[2][2].get<double>(), 1.7976931348623157e308);  // MLflow stores +inf as the largest double
  server.Kill();
}

TEST_F(MlflowTest, EveryStepReachesMlflowThroughAnMlflowKillAndAControllerCrash) {
  TestCluster cluster(kBuiltBinaries, "mlflow");
  MlflowServer server(cluster.dir(), FreeLoopbackPort());
  ASSERT_TRUE(server.Start()) << "see " << cluster.dir() / "mlflow.log";
  const int metrics_port = FreeLoopbackPort();
  ASSERT_TRUE(cluster.StartController({"--mlflow-uri", server.uri(), "--mlflow-experiment", "trainyard-e2e",
                                       "--mlflow-max-backoff", "2", "--metrics-listen",
                                       "127.0.0.1:" + std::to_string(metrics_port),
                                       // Both exporters share the hub's one commit observer.
                                       "--tensorboard-dir", (cluster.dir() / "tensorboard").string()}))
      << "see " << cluster.dir();
  cluster.StartWorker(OneSlotWorker("w1"));
  ASSERT_TRUE(cluster.WaitConnected({"w1"}, 60000)) << "see " << cluster.dir();
  const int steps = 300;
  const std::string id = cluster.Submit(TRAINYARD_EXAMPLES "/tiny.toml",
                                        {"training.steps=" + std::to_string(steps), "training.log_freq=1"});
  ASSERT_FALSE(id.empty());
  auto step_at_least = [](int64_t n) {
    return [n](const json& e) { return e.contains("step_metrics") && JsonInt(e["step_metrics"]["step"]) >= n; };
  };
  {
    auto follower = cluster.Follow(id, "watch-1.log");
    ASSERT_TRUE(follower->WaitFor(step_at_least(5), 300000)) << "no step 5; see " << cluster.dir();
    server.Kill();  // mid-job: the controller keeps ingesting, MLflow's requests fail
    ASSERT_TRUE(follower->WaitFor(step_at_least(60), 300000)) << "see " << cluster.dir();
  }
  EXPECT_GE(Scrape(metrics_port, "trainyard_mlflow_requests_total{outcome=\"failed\"}"), 1);
  EXPECT_GT(Scrape(metrics_port, "trainyard_mlflow_outbox_events"), 0);
  // The controller crashes too, while MLflow is still down: its cursor is in trainyard.db.
  cluster.KillController();
  ASSERT_TRUE(cluster.RestartController()) << "see " << cluster.dir();
  ASSERT_TRUE(server.Start()) << "see " << cluster.dir() / "mlflow.log";

  json job;
  for (int i = 0; i < 6000; ++i) {
    job = cluster.Get(id);
    const std::string state = job.value("state", "");
    if (state == "SUCCEEDED" || state == "FAILED" || state == "CANCELLED") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump();
  // The job's own record, read independently of MLflow: every event through the CLI.
  const CommandResult watch = cluster.Cli({"watch", id, "--output", "json"});
  ASSERT_EQ(watch.exit_code, 0) << watch.err;
  std::map<int64_t, std::vector<std::pair<double, double>>> reported;  // step -> (loss, lr) per report
  std::size_t reports = 0;
  for (const json& e : JsonLines(watch.out)) {
    if (!e.contains("step_metrics")) continue;
    const json& m = e["step_metrics"];
    reported[JsonInt(m["step"])].push_back({m.value("loss", 0.0), m.value("lr", 0.0)});
    ++reports;
  }
  ASSERT_EQ(reported.size(), static_cast<std::size_t>(steps));

  // MLflow catches up after its restart (retries back off at most 2 s here).
  json dump;
  for (int i = 0; i < 1200; ++i) {
    dump = server.Dump("trainyard-e2e");
    if (dump["runs"].size() == 1 && dump["runs"][0]["status"] == "FINISHED" &&
        dump["runs"][0]["metrics"].contains("train/loss") &&
        dump["runs"][0]["metrics"]["train/loss"].size() >= reports) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_EQ(dump["runs"].size(), 1u) << "one run per job, even across the controller's restart: " << dump.dump().substr(0, 2000);
  const json& run = dump["runs"][0];
  EXPECT_EQ(run["status"], "FINISHED");
  EXPECT_GT(run["end_time"].get<int64_t>(), run["start_time"].get<int64_t>());
  EXPECT_EQ(run["tags"]["trainyard.job_id"], id);
  EXPECT_EQ(run["tags"]["trainyard.owner"], job["owner"]);
  EXPECT_EQ(run["tags"]["trainyard.attempt"], std::to_string(job.value("attempt", 0)));
  const json& spec = job["spec"];
  EXPECT_EQ(run["params"]["model.dim"], std::to_string(spec["model"]["dim"].get<int>()));
  EXPECT_EQ(run["params"]["training.steps"], std::to_string(steps));
  EXPECT_EQ(run["params"]["training.log_freq"], "1");
  EXPECT_EQ(run["params"]["job.name"], spec["job"]["name"]);
  // Every report's loss and lr, each exactly once, at its step.
  for (const char* key : {"train/loss", "train/lr"}) {
    SCOPED_TRACE(key);
    ASSERT_TRUE(run["metrics"].contains(key));
    const json& history = run["metrics"][key];
    EXPECT_EQ(history.size(), reports);
    std::map<int64_t, std::vector<double>> logged;
    for (const json& p : history) logged[p[0].get<int64_t>()].push_back(p[2].get<double>());
    for (const auto& [step, values] : reported) {
      ASSERT_EQ(logged[step].size(), values.size()) << "step " << step;
      for (std::size_t i = 0; i < values.size(); ++i) {
        const double want = std::string(key) == "train/loss" ? values[i].first : values[i].second;
        EXPECT_DOUBLE_EQ(logged[step][i], want) << "step " << step;
      }
    }
  }
  for (const char* key : {"train/tokens_per_s", "train/step_ms", "train/grad_norm", "memory/peak_rss_mb"}) {
    EXPECT_EQ(run["metrics"][key].size(), reports) << key;
  }
  EXPECT_EQ(Scrape(metrics_port, "trainyard_mlflow_outbox_events"), 0);
  EXPECT_TRUE(fs::exists(cluster.dir() / "tensorboard" / id)) << "the TensorBoard exporter was not told";
  std::printf("[figures] MLflow run of %s: %zu step reports, %zu metric keys, after an MLflow kill and a controller crash\n",
              id.c_str(), reports, run["metrics"].size());
}

}  // namespace
}  // namespace trainyard::testing
