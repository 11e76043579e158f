// End to end: the real controller, worker and CLI binaries on loopback, training the
// debug MoE model with real Gloo ranks.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "tests/support/files.h"
#include "tests/support/http_get.h"
#include "tests/support/ports.h"
#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

int64_t AsInt(const json& v) { return JsonInt(v); }
int FreePort() { return FreeLoopbackPort(); }

class EndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("trainyard_e2e_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    StartController("127.0.0.1:0");
    ASSERT_FALSE(address_.empty()) << "controller did not start; see " << dir_ / "controller.log";
    // A rendezvous port range of our own, below the ephemeral ports (ports.h).
    const int base = RendezvousPortBase();
    worker_ = std::make_unique<TestProcess>(
        std::vector<std::string>{TRAINYARD_WORKER, "--controller", address_, "--slots", "2", "--name", "w1",
                                 "--rendezvous-ports", std::to_string(base) + "-" + std::to_string(base + 9),
                                 "--work-dir", (dir_ / "worker").string()},
        (dir_ / "worker.log").string());
    // Wait until the worker registered, so validation counts its slots.
    for (int i = 0; i < 200; ++i) {
      auto r = Cli({"workers", "--output", "json"});
      if (r.exit_code == 0 && r.out.find("\"connected\":true") != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL() << "worker never registered; see " << dir_ / "worker.log";
  }

  // Starts the controller on `listen` with this test's data dir; sets address_.
  void StartController(const std::string& listen) {
    fs::remove(dir_ / "port");
    if (metrics_port_ == 0) metrics_port_ = FreePort();
    controller_ = std::make_unique<TestProcess>(
        std::vector<std::string>{TRAINYARD_CONTROLLER, "--listen", listen, "--data-dir", (dir_ / "data").string(),
                                 "--port-file", (dir_ / "port").string(), "--metrics-listen",
                                 "127.0.0.1:" + std::to_string(metrics_port_)},
        (dir_ / "controller.log").string());
    std::string port = WaitForFile((dir_ / "port").string(), 20000);
    address_ = port.empty() ? "" : "127.0.0.1:" + std::to_string(std::stoi(port));
  }

  // Follows `id` with `trainyard watch` in the background until a step is reported.
  std::unique_ptr<TestProcess> WatchUntilTraining(const std::string& id, const std::string& log) {
    auto watcher = std::make_unique<TestProcess>(
        // --reconnect-for 0: the crash tests wait for this watch to end when the
        // controller dies, rather than resume.
        std::vector<std::string>{TRAINYARD_CLI, "watch", id, "--output", "json", "--reconnect-for", "0", "--controller",
                                 address_},
        log);
    for (int i = 0; i < 1200; ++i) {
      const bool watching = ProcessAlive(watcher->pid());
      if (ReadFileOrEmpty(log).find("\"step_metrics\"") != std::string::npos) return watcher;
      if (!watching) break;  // the stream ended (the job did) before any step
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const auto tail = [](const std::string& text) {
      return text.size() > 8000 ? text.substr(text.size() - 8000) : text;
    };
    ADD_FAILURE() << "no step reported; the watch printed:\n"
                  << tail(ReadFileOrEmpty(log)) << "\nthe worker's log ends:\n"
                  << tail(ReadFileOrEmpty((dir_ / "worker.log").string()));
    return watcher;
  }

  void TearDown() override {
    worker_.reset();
    controller_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }

  CommandResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(), TRAINYARD_CLI);
    args.push_back("--controller");
    args.push_back(address_);
    return RunCommand(args);
  }

  std::string Submit(const std::vector<std::string>& sets) {
    std::vector<std::string> args = {"submit", TRAINYARD_EXAMPLES "/debug.toml", "--output", "json"};
    for (const auto& s : sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    auto r = Cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code != 0) return "";
    return JsonLines(r.out).at(0).at("id").get<std::string>();
  }

  // Runs a job to its end and checks the training figures the issue asks for.
  void RunAndCheckTraining(std::vector<std::string> sets) {
    const int steps = 20;
    sets.push_back("training.steps=" + std::to_string(steps));
    std::string id = Submit(sets);
    ASSERT_FALSE(id.empty());
    auto watch = Cli({"watch", id, "--output", "json"});
    ASSERT_EQ(watch.exit_code, 0) << "watch: " << watch.err << "\n" << watch.out;

    std::map<int64_t, double> loss_by_step;
    std::string end_state;
    int64_t last_seq = 0;
    for (const auto& e : JsonLines(watch.out)) {
      int64_t seq = AsInt(e.at("seq"));
      EXPECT_EQ(seq, last_seq + 1) << "events must arrive in seq order without gaps";
      last_seq = seq;
      if (e.contains("step_metrics")) {
        const auto& m = e.at("step_metrics");
        int64_t step = AsInt(m.at("step"));
        EXPECT_EQ(loss_by_step.count(step), 0u) << "step " << step << " reported twice";
        loss_by_step[step] = m.at("loss").get<double>();
      }
      if (e.contains("job_state")) end_state = e.at("job_state").at("state").get<std::string>();
    }
    EXPECT_EQ(end_state, "SUCCEEDED");
    ASSERT_EQ(loss_by_step.size(), static_cast<size_t>(steps));
    for (int s = 1; s <= steps; ++s) {
      ASSERT_TRUE(loss_by_step.count(s)) << "no StepMetrics for step " << s;
      EXPECT_TRUE(std::isfinite(loss_by_step[s])) << "step " << s;
    }
    double first5 = 0, last5 = 0;
    for (int s = 1; s <= 5; ++s) first5 += loss_by_step[s] / 5;
    for (int s = steps - 4; s <= steps; ++s) last5 += loss_by_step[s] / 5;
    EXPECT_LT(last5, first5) << "the synthetic Markov data must be learnable";

    auto get = Cli({"get", id, "--output", "json"});
    ASSERT_EQ(get.exit_code, 0) << get.err;
    EXPECT_EQ(JsonLines(get.out).at(0).at("state"), "SUCCEEDED");
    std::printf("[figures] %s: loss %.4f -> %.4f over %d steps\n", sets[0].c_str(), first5, last5, steps);
  }

  fs::path dir_;
  std::string address_;
  int metrics_port_ = 0;  // the controller's /metrics
  std::unique_ptr<TestProcess> controller_;
  std::unique_ptr<TestProcess> worker_;
};

TEST_F(EndToEndTest, DebugJobOnOneRankSucceedsAndLearns) { RunAndCheckTraining({"parallelism.dp=1"}); }

TEST_F(EndToEndTest, DebugJobOnTwoRanksDataParallelSucceedsAndLearns) { RunAndCheckTraining({"parallelism.dp=2"}); }

TEST_F(EndToEndTest, TensorAndExpertParallelJobSucceedsAndLearns) {
  RunAndCheckTraining({"parallelism.tp=2", "parallelism.ep=2", "model.preset=tiny"});
}

#ifdef TRAINYARD_PROMETHEUS
// A real Prometheus (Debian's) scrapes the controller while a job runs; the job's token
// counter and step read back through Prometheus's HTTP query API equal what the job's
// own spec says it trained: steps * batch_size * seq_len * dp. log_freq 2 over 5 steps
// reports at steps 2, 4 and 5, so the counter must count the unreported steps too.
TEST_F(EndToEndTest, ARealPrometheusReadsTheJobsTokensAndStepFromTheController) {
  const int prom_port = FreePort();
  ASSERT_NE(prom_port, 0);
  const fs::path config = dir_ / "prometheus.yml";
  {
    std::ofstream out(config);
    out << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        << "scrape_configs:\n  - job_name: trainyard\n    static_configs:\n"
        << "      - targets: ['127.0.0.1:" << metrics_port_ << "']\n";
  }
  TestProcess prometheus(
      {TRAINYARD_PROMETHEUS, "--config.file=" + config.string(), "--storage.tsdb.path=" + (dir_ / "tsdb").string(),
       "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
      (dir_ / "prometheus.log").string());
  const int steps = 5;
  std::string id = Submit({"training.steps=" + std::to_string(steps), "training.log_freq=2", "parallelism.dp=2"});
  ASSERT_FALSE(id.empty());
  auto watch = Cli({"watch", id, "--output", "json"});
  ASSERT_EQ(watch.exit_code, 0) << watch.err;
  auto get = Cli({"get", id, "--output", "json"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  const json job = JsonLines(get.out).at(0);
  ASSERT_EQ(job.at("state"), "SUCCEEDED");
  const json& spec = job.at("spec");
  const int64_t expected_tokens = steps * AsInt(spec.at("training").at("batch_size")) *
                                  AsInt(spec.at("training").at("seq_len")) * AsInt(spec.at("parallelism").at("dp"));

  // Query until a scrape after the job's last report has landed (scrapes are 1 s apart;
  // the controller keeps a finished job's series for 10 minutes).
  auto query = [&](const std::string& expr) -> std::optional<double> {
    const std::string body = HttpGet(prom_port, "/api/v1/query?query=" + UrlEncode(expr));
    if (body.empty()) return std::nullopt;
    const json r = json::parse(body, nullptr, false);
    if (r.is_discarded() || r.value("status", "") != "success") return std::nullopt;
    const json& result = r.at("data").at("result");
    if (result.empty()) return std::nullopt;
    return std::stod(result.at(0).at("value").at(1).get<std::string>());
  };
  const std::string selector = "{job_id=\"" + id + "\",job=\"trainyard\"}";
  std::optional<double> tokens, step, succeeded;
  for (int i = 0; i < 600; ++i) {
    tokens = query("trainyard_job_tokens_total" + selector);
    step = query("trainyard_job_step" + selector);
    succeeded = query("trainyard_jobs{state=\"succeeded\"}");
    if (tokens && step && *step == steps && *tokens == static_cast<double>(expected_tokens) && succeeded == 1.0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(tokens.has_value()) << "Prometheus never had the series; see " << dir_ / "prometheus.log";
  EXPECT_EQ(*tokens, static_cast<double>(expected_tokens));
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(*step, steps);
  // Prometheus's own view of the target: up, and the controller's gRPC and job-state
  // series arrived with it.
  EXPECT_EQ(query("up{job=\"trainyard\"}").value_or(-1), 1);
  EXPECT_EQ(succeeded.value_or(-1), 1);
  EXPECT_GE(query("sum(trainyard_grpc_server_handled_total{grpc_method=\"SubmitJob\",grpc_code=\"OK\"})").value_or(-1),
            1);
  std::printf("[figures] Prometheus read trainyard_job_tokens_total=%.0f (expected %lld)\n", *tokens,
              static_cast<long long>(expected_tokens));
}
#endif  // TRAINYARD_PROMETHEUS

TEST_F(EndToEndTest, CancelKillsEveryRankOfARunningJob) {
  std::string id = Submit({"training.steps=100000", "parallelism.dp=2"});
  ASSERT_FALSE(id.empty());
  // Follow the job live and cancel it once it is training (a step was reported).
  const std::string watch_log = (dir_ / "cancel-watch.jsonl").string();
  auto watcher = WatchUntilTraining(id, watch_log);
  ASSERT_FALSE(HasFailure());

  auto cancel = Cli({"cancel", id});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  auto cancelled_at = std::chrono::steady_clock::now();

  // The stream ends once every rank is accounted for; exit code 1: FAILED or CANCELLED.
  EXPECT_EQ(watcher->Wait(), 1);
  std::set<int> pids;
  std::set<int> killed_ranks;
  std::string end_state;
  for (const auto& e : JsonLines(ReadFileOrEmpty(watch_log))) {
    if (e.contains("rank_state")) {
      const auto& rs = e.at("rank_state");
      if (rs.value("state", "") == "RUNNING") pids.insert(rs.at("pid").get<int>());
      if (rs.value("state", "") == "KILLED") killed_ranks.insert(e.value("rank", 0));
    }
    if (e.contains("job_state")) end_state = e.at("job_state").at("state").get<std::string>();
  }
  EXPECT_EQ(end_state, "CANCELLED");
  ASSERT_EQ(pids.size(), 2u) << "expected the pids of both ranks";
  EXPECT_EQ(killed_ranks, (std::set<int>{0, 1}));
  for (int pid : pids) {
    while (ProcessAlive(pid) && std::chrono::steady_clock::now() - cancelled_at < std::chrono::seconds(5)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_FALSE(ProcessAlive(pid)) << "rank pid " << pid << " outlived the cancel by 5 s";
  }
  auto get = Cli({"get", id, "--output", "json"});
  EXPECT_EQ(JsonLines(get.out).at(0).at("state"), "CANCELLED");
}

TEST_F(EndToEndTest, ControllerCrashMidJobLosesNoEvent) {
  const int steps = 600;
  std::string id = Submit({"model.preset=tiny", "parallelism.dp=2", "training.steps=" + std::to_string(steps)});
  ASSERT_FALSE(id.empty());
  auto watcher = WatchUntilTraining(id, (dir_ / "before-crash.jsonl").string());
  ASSERT_FALSE(HasFailure());
  // Crash the controller while the ranks train; restart it on the same port and data.
  const std::string listen = address_;
  controller_->Kill();
  watcher->Wait();
  StartController(listen);
  ASSERT_EQ(address_, listen) << "could not restart on the same port";

  // The worker reconnects and resends what was not acknowledged; the job finishes.
  auto watch = Cli({"watch", id, "--output", "json"});
  ASSERT_EQ(watch.exit_code, 0) << watch.err << "\n" << ReadFileOrEmpty((dir_ / "controller.log").string());
  std::map<int64_t, int> step_count;
  int64_t last_seq = 0;
  std::string end_state;
  for (const auto& e : JsonLines(watch.out)) {
    int64_t seq = AsInt(e.at("seq"));
    EXPECT_EQ(seq, last_seq + 1) << "seq gap after the crash";
    last_seq = seq;
    if (e.contains("step_metrics")) ++step_count[AsInt(e.at("step_metrics").at("step"))];
    if (e.contains("job_state")) end_state = e.at("job_state").at("state").get<std::string>();
  }
  EXPECT_EQ(end_state, "SUCCEEDED");
  // The crash really hit a running job: the new controller recovered it as RUNNING.
  EXPECT_NE(ReadFileOrEmpty((dir_ / "controller.log").string()).find("recovered job=" + id + " state=RUNNING"),
            std::string::npos);
  ASSERT_EQ(step_count.size(), static_cast<size_t>(steps)) << "steps lost across the crash";
  for (const auto& [step, n] : step_count) EXPECT_EQ(n, 1) << "step " << step << " duplicated";
}

// kill -9 of the controller while a job runs, and its rank exits 0 during the outage:
// the worker re-registers reporting the attempt as ended and resends its held events,
// so the job ends SUCCEEDED with every step once and nothing after the terminal state
// (it used to end FAILED "rank 0 ... is gone", with the steps appended after FAILED).
TEST_F(EndToEndTest, ARankThatExitsWhileTheControllerIsDownEndsSucceededWithEveryStepOnce) {
  const int steps = 300;
  std::string id = Submit({"model.preset=tiny", "training.steps=" + std::to_string(steps)});
  ASSERT_FALSE(id.empty());
  auto watcher = WatchUntilTraining(id, (dir_ / "before-kill.jsonl").string());
  ASSERT_FALSE(HasFailure());
  const std::string listen = address_;
  controller_->Kill();
  watcher->Wait();
  // The rank finishes while no controller runs (the worker logs its exit).
  const std::string exited = "job=" + id + " attempt=1 rank=0 EXITED";
  bool seen = false;
  for (int i = 0; i < 1200 && !seen; ++i) {
    seen = ReadFileOrEmpty((dir_ / "worker.log").string()).find(exited) != std::string::npos;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(seen) << "the rank never exited; see " << dir_ / "worker.log";
  StartController(listen);
  ASSERT_EQ(address_, listen) << "could not restart on the same port";

  auto watch = Cli({"watch", id, "--output", "json"});
  ASSERT_EQ(watch.exit_code, 0) << watch.err << "\n" << ReadFileOrEmpty((dir_ / "controller.log").string());
  const auto events = JsonLines(watch.out);
  ASSERT_FALSE(events.empty());
  std::map<int64_t, int> step_count;
  int64_t last_seq = 0;
  for (const auto& e : events) {
    EXPECT_EQ(AsInt(e.at("seq")), last_seq + 1) << "seq gap";
    last_seq = AsInt(e.at("seq"));
    if (e.contains("step_metrics")) ++step_count[AsInt(e.at("step_metrics").at("step"))];
  }
  ASSERT_TRUE(events.back().contains("job_state")) << events.back().dump();
  EXPECT_EQ(events.back().at("job_state").at("state"), "SUCCEEDED") << events.back().dump();
  EXPECT_EQ(step_count.size(), static_cast<size_t>(steps)) << "steps lost";
  for (const auto& [step, n] : step_count) EXPECT_EQ(n, 1) << "step " << step << " duplicated";
}

TEST_F(EndToEndTest, InvalidSpecsAreRejectedWithTheFieldAndLeaveNoJob) {
  struct Case {
    std::vector<std::string> sets;
    std::string expected;  // must appear in the error
  };
  const std::vector<Case> cases = {
      {{"parallelism.tp=3"}, "parallelism.tp=3 must divide model.n_heads=8"},
      {{"parallelism.ep=3", "parallelism.dp=1"}, "parallelism.ep=3 must divide model.n_routed_experts=8"},
      {{"parallelism.ep=4", "parallelism.dp=2"}, "parallelism.ep=4 must divide dp*tp=2"},
      {{"parallelism.dp=3"}, "world size"},
      {{"model.dim=0"}, "model.dim must be in [2, 65536], got 0"},
      {{"training.steps=-1"}, "training.steps must be in [1, 1000000000], got -1"},
      // Admitted before the spec core and refused by every rank: none may take a slot.
      {{"training.lr=20"}, "training.lr must be in (0, 10], got 20"},
      {{"model.vocab_size=1"}, "model.vocab_size must be in [2, 16777216], got 1"},
      {{"compile.regions=model", "parallelism.tp=2", "compile.backend=jit"},
       "compile.regions=\"model\" needs parallelism.tp=1"},
      {{"model.preset=huge"}, "model.preset"},
      {{"compile.backend=fast"}, "compile.backend"},
  };
  auto before = Cli({"list", "--output", "json"});
  ASSERT_EQ(before.exit_code, 0) << before.err;
  for (const auto& c : cases) {
    std::vector<std::string> args = {"submit", TRAINYARD_EXAMPLES "/debug.toml"};
    for (const auto& s : c.sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    auto r = Cli(args);
    EXPECT_NE(r.exit_code, 0) << c.sets[0];
    EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << "error for " << c.sets[0] << " was: " << r.err;
  }
  auto after = Cli({"list", "--output", "json"});
  EXPECT_EQ(JsonLines(after.out).size(), JsonLines(before.out).size()) << "a rejected job left a row behind";
}

}  // namespace
}  // namespace trainyard::testing
