// deploy/grafana/trainyard.json against a real controller: the JSON parses as a
// dashboard, and every PromQL expression in it (panels and template variables) selects
// metrics, with labels, that a real controller exports on --metrics-listen after a
// real job ran to its end on a real worker, and a second real worker with two GPUs (the
// fake NVML, tests/fakes/fake_nvml) heartbeated its GPU samples, so the per-GPU gauges
// the GPUs row reads exist too.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/deploy/promql_names.h"
#include "tests/support/files.h"
#include "tests/support/http_get.h"
#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kDashboard = fs::path(TRAINYARD_SOURCE_DIR) / "deploy/grafana/trainyard.json";

// The controller's per-GPU gauges, each labelled {worker, gpu} (gpu: the NVML index).
const std::vector<std::string> kWorkerGpuGauges = {
    "trainyard_worker_gpu_utilization_ratio",   "trainyard_worker_gpu_memory_used_bytes",
    "trainyard_worker_gpu_memory_total_bytes",  "trainyard_worker_gpu_power_watts",
    "trainyard_worker_gpu_temperature_celsius", "trainyard_worker_gpu_ecc_uncorrected_errors",
    "trainyard_worker_gpu_xid_errors",          "trainyard_worker_gpu_healthy"};

json LoadDashboard() {
  std::ifstream in(kDashboard);
  EXPECT_TRUE(in.good()) << kDashboard;
  return json::parse(in);  // throws (and fails the test) on a syntax error
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += "\n  " + s;
  return out;
}

// ---- The extraction itself, on expressions whose names are known ----

TEST(PromqlNamesTest, FindsSelectorsLabelsAndGrouping) {
  ExprNames n = NamesOf(
      R"(sum by (job_id, region) (increase(trainyard_job_recompiles_total{job_id=~"$job"}[$__rate_interval])))");
  ASSERT_EQ(n.selectors.size(), 1u);
  EXPECT_EQ(n.selectors[0].metric, "trainyard_job_recompiles_total");
  EXPECT_EQ(n.selectors[0].labels, (std::set<std::string>{"job_id"}));
  EXPECT_EQ(n.grouping, (std::set<std::string>{"job_id", "region"}));

  n = NamesOf("trainyard_slots - trainyard_slots_free");
  ASSERT_EQ(n.selectors.size(), 2u);
  EXPECT_EQ(n.selectors[0].metric, "trainyard_slots");
  EXPECT_EQ(n.selectors[1].metric, "trainyard_slots_free");

  n = NamesOf(R"(histogram_quantile(0.95, sum by (le) (rate(x_seconds_bucket{a="trainyard_fake", b!~'c'}[5m]))))");
  ASSERT_EQ(n.selectors.size(), 1u);
  EXPECT_EQ(n.selectors[0].metric, "x_seconds_bucket");
  EXPECT_EQ(n.selectors[0].labels, (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(n.grouping, (std::set<std::string>{"le"}));

  n = NamesOf("label_values(trainyard_job_step, job_id)");
  ASSERT_EQ(n.selectors.size(), 1u);
  EXPECT_EQ(n.selectors[0].metric, "trainyard_job_step");
  EXPECT_EQ(n.result_labels, (std::set<std::string>{"job_id"}));

  n = NamesOf(R"(rate(up{job="${job}"}[1h:5m]) and on (instance) ignoring(x) foo offset 5m)");
  ASSERT_EQ(n.selectors.size(), 2u);
  EXPECT_EQ(n.selectors[0].metric, "up");
  EXPECT_EQ(n.selectors[1].metric, "foo");
  EXPECT_EQ(n.grouping, (std::set<std::string>{"instance", "x"}));
}

TEST(PromqlNamesTest, ReportsWhatAnExpositionLacks) {
  const Exposition e = ParseExposition(
      "# HELP a_total help\n# TYPE a_total counter\na_total{job_id=\"job-1\",kind=\"x\"} 3\n"
      "# TYPE h_seconds histogram\nh_seconds_bucket{le=\"0.1\"} 1\nh_seconds_sum 0.05\nh_seconds_count 1\n"
      "g 2\n");
  EXPECT_EQ(e.types.at("h_seconds"), "histogram");
  EXPECT_EQ(e.samples.at("a_total"), (std::set<std::string>{"job_id", "kind"}));
  EXPECT_TRUE(Problems(R"(sum by (kind) (rate(a_total{job_id=~"$job"}[5m])))", e).empty());
  EXPECT_TRUE(Problems("histogram_quantile(0.9, sum by (le) (rate(h_seconds_bucket[5m])))", e).empty());
  EXPECT_TRUE(Problems("g", e).empty());
  EXPECT_EQ(Problems("a_total_typo", e), std::vector<std::string>{"metric a_total_typo is not exported"});
  EXPECT_EQ(Problems(R"(a_total{region="r"})", e), std::vector<std::string>{"metric a_total has no label region"});
  EXPECT_EQ(Problems("sum by (region) (a_total)", e),
            std::vector<std::string>{"no selected metric carries the grouping label region"});
  EXPECT_EQ(Problems("label_values(g, job_id)", e),
            std::vector<std::string>{"label_values: no selected metric carries job_id"});
}

// ---- The dashboard ----

TEST(DashboardTest, IsAGrafanaDashboardWithDatasourceAndJobVariables) {
  const json d = LoadDashboard();
  EXPECT_EQ(d.value("uid", ""), "trainyard-overview");
  EXPECT_GE(d.value("schemaVersion", 0), 36);
  const json& vars = d["templating"]["list"];
  ASSERT_TRUE(vars.is_array());
  std::set<std::string> names;
  for (const json& v : vars) names.insert(v.value("name", ""));
  EXPECT_EQ(names, (std::set<std::string>{"datasource", "job"}));
  for (const json& v : vars) {
    if (v["name"] == "datasource") {
      EXPECT_EQ(v.value("type", ""), "datasource");
      EXPECT_EQ(v.value("query", ""), "prometheus");
    } else {
      EXPECT_EQ(v.value("type", ""), "query");
      EXPECT_EQ(v["query"].value("query", ""), "label_values(trainyard_job_step, job_id)");
      EXPECT_EQ(v["datasource"].value("uid", ""), "${datasource}");
    }
  }
  std::set<int> ids;
  std::set<std::string> titles;
  for (const json& p : d["panels"]) {
    EXPECT_TRUE(ids.insert(p.value("id", -1)).second) << "duplicate panel id " << p["id"];
    titles.insert(p.value("title", ""));
    if (p.value("type", "") == "row") continue;
    EXPECT_EQ(p["datasource"].value("uid", ""), "${datasource}") << p.value("title", "");
    ASSERT_TRUE(p.contains("gridPos")) << p.value("title", "");
    const json& g = p["gridPos"];
    EXPECT_LE(g.value("x", 0) + g.value("w", 0), 24) << p.value("title", "");
    ASSERT_FALSE(p["targets"].empty()) << p.value("title", "");
    for (const json& t : p["targets"]) EXPECT_EQ(t["datasource"].value("uid", ""), "${datasource}");
  }
  for (const char* want : {"Loss",
                           "Tokens/s",
                           "MFU",
                           "Step time",
                           "Recompiles by region",
                           "Slots",
                           "Jobs by state",
                           "Queue",
                           "Workers connected",
                           "Restarts",
                           "Stalls",
                           "Expert-load imbalance (max/mean)",
                           "Tokens per expert",
                           "Dropped tokens (expert capacity)",
                           "Dropped share of routed assignments",
                           "Workers lost",
                           "GPUs",
                           "GPU utilisation",
                           "GPU memory used / total",
                           "GPU power",
                           "GPU temperature",
                           "GPU ECC and XID errors",
                           "GPU health",
                           "Unhealthy GPUs"}) {
    EXPECT_TRUE(titles.count(want)) << "no panel titled " << want;
  }
}

// The GPUs row uses every per-GPU gauge and no other trainyard_worker_gpu_* name, and
// each of its per-GPU series is told apart by worker and gpu (in its legend).
TEST(DashboardTest, TheGpuPanelsUseEveryGpuGaugeByWorkerAndGpu) {
  const json d = LoadDashboard();
  std::set<std::string> used;
  int gpu_targets = 0;
  for (const json& p : d["panels"]) {
    if (!p.contains("targets")) continue;
    for (const json& t : p["targets"]) {
      const std::string expr = t.value("expr", "");
      bool gpu = false;
      for (const Selector& s : NamesOf(expr).selectors) {
        if (s.metric.rfind("trainyard_worker_gpu_", 0) != 0) continue;
        used.insert(s.metric);
        gpu = true;
      }
      if (!gpu) continue;
      ++gpu_targets;
      // A sum over the fleet has one series; every other GPU target has one per GPU.
      if (expr.rfind("sum(", 0) == 0) continue;
      const std::string legend = t.value("legendFormat", "");
      EXPECT_NE(legend.find("{{worker}}"), std::string::npos) << p.value("title", "") << ": " << legend;
      EXPECT_NE(legend.find("{{gpu}}"), std::string::npos) << p.value("title", "") << ": " << legend;
    }
  }
  EXPECT_EQ(used, std::set<std::string>(kWorkerGpuGauges.begin(), kWorkerGpuGauges.end()));
  EXPECT_GE(gpu_targets, 9);
}

// Every expression against the exposition of a real controller after a real job: a
// jit-compiled job with full activation checkpointing, whose recompute is a second
// guard set of each region (a RECOMPILE with its region), and [validation] on, so every
// labelled family the dashboard uses exists.
TEST(DashboardTest, EveryExpressionNamesMetricsTheControllerExports) {
  const json dashboard = LoadDashboard();
  const std::vector<std::string> exprs = DashboardExpressions(dashboard);
  ASSERT_GE(exprs.size(), 20u);

  TestCluster cluster(kBuiltBinaries, "api_dashboard");
  const int metrics_port = FreeLoopbackPort();
  ASSERT_GT(metrics_port, 0);
  ASSERT_TRUE(cluster.StartController({"--metrics-listen", "127.0.0.1:" + std::to_string(metrics_port)}))
      << "see " << cluster.dir() / "controller.log";
  cluster.StartWorker(OneSlotWorker("w1"));
  ASSERT_TRUE(cluster.WaitConnected({"w1"}, 30000));
  const std::string id = cluster.Submit(
      TRAINYARD_EXAMPLES "/tiny.toml",
      {"training.steps=3", "compile.backend=jit", "activation_checkpoint.mode=full", "restart.max_restarts=0",
       "validation.dataset=synthetic", "validation.freq=2", "validation.steps=1"});
  ASSERT_FALSE(id.empty());
  cluster.Follow(id, "events.jsonl")->WaitEnd();
  ASSERT_EQ(cluster.Get(id).value("state", ""), "SUCCEEDED") << "see " << cluster.dir();

  // A GPU worker (two H200s of the fake NVML) whose heartbeats carry GPU samples: the
  // controller's trainyard_worker_gpu_*{worker,gpu} series appear with the first.
  const fs::path nvml_config = cluster.dir() / "fake_nvml.conf";
  std::ofstream(nvml_config) << "count 2\nname NVIDIA H200\nmemory_mib 143771\ndriver 580.159.04\ncuda 13000\n"
                                "nvlink all\nutil 0 0.5\nutil 1 0.25\n";
  WorkerOptions gpu_worker = OneSlotWorker("g1");
  gpu_worker.slots = 2;
  gpu_worker.env = {"FAKE_NVML_CONFIG=" + nvml_config.string()};
  gpu_worker.extra_args = {"--nvml-library", TRAINYARD_FAKE_NVML, "--gpu-sample-interval", "0.2"};
  cluster.StartWorker(gpu_worker);
  ASSERT_TRUE(cluster.WaitConnected({"g1"}, 30000)) << "see " << cluster.dir();
  std::string text;
  const bool gpu_series = WaitUntil(
      [&] {
        text = HttpGet(metrics_port, "/metrics");
        return text.find("trainyard_worker_gpu_utilization_ratio{") != std::string::npos;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(200));
  ASSERT_FALSE(text.empty()) << "no /metrics on port " << metrics_port;
  ASSERT_TRUE(gpu_series) << "g1's GPU samples never reached /metrics; see " << cluster.dir() << "\n" << text;
  const Exposition exposition = ParseExposition(text);
  for (const std::string& name : kWorkerGpuGauges) {
    ASSERT_TRUE(exposition.samples.count(name)) << name << " is not exported with a GPU worker:\n" << text;
    EXPECT_EQ(exposition.samples.at(name), (std::set<std::string>{"worker", "gpu"})) << name;
  }
  EXPECT_NE(text.find("trainyard_worker_gpu_utilization_ratio{gpu=\"1\",worker=\"g1\"} 0.25"), std::string::npos)
      << text;
  // The job's own series are there, labelled with it (what $job selects).
  ASSERT_TRUE(exposition.samples.count("trainyard_job_loss")) << text;
  ASSERT_TRUE(exposition.samples.count("trainyard_job_recompiles_total"))
      << "the job reported no RECOMPILE; the recompile panels cannot be checked:\n"
      << text;
  // tiny.toml is MoE (4 routed experts), so its steps carry expert_load.
  ASSERT_TRUE(exposition.samples.count("trainyard_job_expert_tokens"))
      << "the job reported no expert_load; the expert panels cannot be checked:\n"
      << text;
  // [validation] on: the engine's rank 0 reported Validation events (before step 1,
  // at step 2 and after the last).
  ASSERT_TRUE(exposition.samples.count("trainyard_job_validation_loss"))
      << "the job reported no Validation; the validation-loss panel cannot be checked:\n"
      << text;
  EXPECT_TRUE(text.find("trainyard_job_loss{job_id=\"" + id + "\"}") != std::string::npos) << text;

  std::vector<std::string> problems;
  for (const std::string& expr : exprs) {
    for (const std::string& p : Problems(expr, exposition)) problems.push_back(p + "  in: " + expr);
  }
  EXPECT_TRUE(problems.empty()) << "the dashboard uses what the controller does not export:" << Join(problems);

  // The check can fail: a name the controller does not export is reported.
  EXPECT_FALSE(Problems(R"(trainyard_no_such_metric_total{job_id=~"$job"})", exposition).empty());
  if (HasFailure()) {
    cluster.KeepFiles();
    std::ofstream(cluster.dir() / "metrics.txt") << text;
  }
}

}  // namespace
}  // namespace trainyard::testing
