// GPU workers through the service, on CPU: the real controller, worker and CLI, with
// the worker's NVML loaded from the fake library of tests/fakes/fake_nvml (8 H200s in
// two NVLink domains, 0-3 and 4-7, read from a config file the test rewrites mid-run).
// The ranks are the real trainyard-rank behind a stand-in script that reports CUDA
// capabilities, records the environment the worker gave it, and trains the job on CPU
// (it rewrites resources.device to "cpu" in its config copy), so the jobs run, checkpoint
// and restart for real while the controller believes they use GPUs.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kTinyJob = TRAINYARD_EXAMPLES "/tiny.toml";
const std::string kDeepSeekJob = TRAINYARD_EXAMPLES "/deepseek_v3_16b.toml";

std::string FakeNvmlConfig(const std::string& extra) {
  return "count 8\nname NVIDIA H200\nmemory_mib 143771\ndriver 580.159.04\ncuda 13000\n"
         "nvlink 0-3 4-7\n" + extra;
}

void WriteText(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  std::ofstream(tmp) << text;
  fs::rename(tmp, path);  // the fake re-reads the file: never let it see half of one
}

// The stand-in rank. `--capabilities` answers as a CUDA build with NCCL would; a rank
// writes the variables under test to $TY_TEST_ENV_DIR/<job name>-a<attempt>-r<rank>.env
// and then runs the real rank on CPU.
std::string RankStandIn() {
  return std::string("#!/bin/bash\n") +
         "if [ \"$1\" = --capabilities ]; then\n"
         "  echo '{\"libtorch_version\":\"2.11.0\",\"cuda\":true,\"cuda_version\":\"13.0\","
         "\"nccl\":true,\"bf16\":false,\"cudagraph\":false}'\n"
         "  exit 0\n"
         "fi\n"
         "config=''; rank=''; attempt=''; prev=''; args=()\n"
         "for a in \"$@\"; do\n"
         "  case \"$prev\" in --config) config=$a ;; --rank) rank=$a ;; --attempt) attempt=$a ;; esac\n"
         "  prev=$a\n"
         "done\n"
         "name=$(grep -o '\"name\": *\"[^\"]*\"' \"$config\" | head -1 | sed 's/.*\"\\([^\"]*\\)\"$/\\1/')\n"
         "out=\"$TY_TEST_ENV_DIR/$name-a$attempt-r$rank.env\"\n"
         "env | grep -E '^(CUDA_VISIBLE_DEVICES|LOCAL_RANK|LOCAL_WORLD_SIZE|NCCL_[A-Z0-9_]*)=' | sort > \"$out.tmp\"\n"
         "mv \"$out.tmp\" \"$out\"\n"
         "sed 's/\"device\": *\"cuda\"/\"device\": \"cpu\"/' \"$config\" > \"$config.cpu.json\"\n"
         "prev=''\n"
         "for a in \"$@\"; do\n"
         "  if [ \"$prev\" = --config ]; then args+=(\"$config.cpu.json\"); else args+=(\"$a\"); fi\n"
         "  prev=$a\n"
         "done\n"
         "exec " TRAINYARD_RANK " \"${args[@]}\"\n";
}

std::map<std::string, std::string> ReadEnvFile(const fs::path& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

bool Eventually(const std::function<bool()>& pred, int timeout_ms) {
  for (int waited = 0; waited < timeout_ms; waited += 200) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return pred();
}

std::vector<std::string> CudaTp4(const std::string& name, int steps) {
  return {"job.name=" + name, "resources.device=cuda", "parallelism.tp=4", "parallelism.dp=1",
          "parallelism.ep=1", "model.n_kv_heads=4", "training.steps=" + std::to_string(steps),
          "parallelism.collective_timeout_s=60"};
}

class GpuFleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<TestCluster>(kBuiltBinaries, "gpu_fleet");
    nvml_config_ = cluster_->dir() / "fake-nvml.conf";
    WriteText(nvml_config_, FakeNvmlConfig(""));
    env_dir_ = cluster_->dir() / "rank-env";
    fs::create_directories(env_dir_);
    const fs::path stand_in = cluster_->dir() / "rank-stand-in.sh";
    std::ofstream(stand_in) << RankStandIn();
    fs::permissions(stand_in, fs::perms::owner_all);
    ASSERT_TRUE(cluster_->StartController()) << "see " << cluster_->dir() / "controller.log";
    WorkerOptions w;
    w.name = "w1";
    w.slots = 8;
    w.env = {"FAKE_NVML_CONFIG=" + nvml_config_.string(), "TY_TEST_ENV_DIR=" + env_dir_.string()};
    w.extra_args = {"--nvml-library", TRAINYARD_FAKE_NVML, "--gpu-sample-interval", "1",
                    "--nccl-env", "NCCL_SOCKET_IFNAME=lo", "--nccl-env", "NCCL_DEBUG=WARN",
                    "--rank-binary", stand_in.string(), "--threads-per-rank", "1"};
    cluster_->StartWorker(w);
    ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 60000)) << "see " << cluster_->dir() / "worker-w1.log";
  }
  void TearDown() override {
    if (HasFailure()) cluster_->KeepFiles();
  }

  json Worker() const {
    for (const json& w : JsonLines(cluster_->Cli({"workers", "--output", "json"}).out)) {
      if (w.value("name", "") == "w1") return w;
    }
    return json::object();
  }
  std::string State(const std::string& id) const { return cluster_->Get(id).value("state", ""); }
  bool WaitState(const std::string& id, const std::string& state, int timeout_ms) const {
    return Eventually([&] { return State(id) == state; }, timeout_ms);
  }
  // The GPU index of each rank of the job's current placement, by rank.
  std::map<int, int> RankGpus(const std::string& id) const {
    std::map<int, int> out;
    const json job = cluster_->Get(id);
    for (const json& r : job.value("placement", json::object()).value("ranks", json::array())) {
      out[r.value("rank", 0)] = r.value("gpu", -1);
    }
    return out;
  }

  std::unique_ptr<TestCluster> cluster_;
  fs::path nvml_config_;
  fs::path env_dir_;
};

TEST_F(GpuFleetTest, EightGpusTwoTp4JobsAThirdWaitsEachRankGetsItsGpuAndCapabilitiesAreChecked) {
  // The inventory the worker registered, read from the fake NVML.
  const json w1 = Worker();
  ASSERT_EQ(w1.value("device", ""), "cuda") << w1.dump();
  ASSERT_EQ(w1.value("gpus", json::array()).size(), 8u) << w1.dump();
  std::map<int, std::string> uuid_of;
  for (const json& g : w1.at("gpus")) {
    EXPECT_EQ(g.value("name", ""), "NVIDIA H200");
    EXPECT_EQ(JsonInt(g.at("memory_bytes")), 143771LL << 20);
    uuid_of[g.value("index", -1)] = g.value("uuid", "");
  }
  EXPECT_EQ(uuid_of.size(), 8u);
  EXPECT_EQ(w1.value("free_gpus", json::array()).size(), 8u);
  EXPECT_TRUE(w1.value("capabilities", json::object()).value("cuda", false)) << w1.dump();
  EXPECT_EQ(w1.value("gpu_driver_version", ""), "580.159.04");

  // Capabilities no worker has, and memory no GPU has: refused at submit, named.
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"compile.backend=cudagraph"}, "cudagraph"},
      {{"training.mixed_precision=bf16"}, "bf16"},
  };
  for (const auto& [sets, word] : refused) {
    std::vector<std::string> args = {"submit", kTinyJob, "--output", "json"};
    for (const std::string& s : CudaTp4("refused", 10)) args.insert(args.end(), {"--set", s});
    for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
    const CommandResult r = cluster_->Cli(args);
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_NE(r.err.find(word), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("w1"), std::string::npos) << "the workers considered: " << r.err;
  }
  {
    // One rank of the 16B model with no expert or data parallelism: far over 140 GiB.
    const CommandResult r = cluster_->Cli(
        {"submit", kDeepSeekJob, "--output", "json", "--set", "parallelism.dp=1", "--set", "parallelism.ep=1",
         "--set", "parallelism.dp_shard=1", "--set", "resources.ranks_per_worker=1", "--set",
         "checkpoint.dir=" + (cluster_->dir() / "ck").string()});
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_NE(r.err.find("GPU"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("GiB"), std::string::npos) << r.err;
  }

  // Two tp=4 jobs take the 8 GPUs; a third waits, naming GPUs.
  const std::string a = cluster_->Submit(kTinyJob, CudaTp4("gpu-a", 100000));
  ASSERT_TRUE(WaitState(a, "RUNNING", 120000)) << cluster_->Get(a).dump();
  const std::string b = cluster_->Submit(kTinyJob, CudaTp4("gpu-b", 100000));
  ASSERT_TRUE(WaitState(b, "RUNNING", 120000)) << cluster_->Get(b).dump();
  const std::string c = cluster_->Submit(kTinyJob, CudaTp4("gpu-c", 100000));
  ASSERT_TRUE(Eventually([&] { return !cluster_->Get(c).value("pending_reason", "").empty(); }, 10000));
  const json pending = cluster_->Get(c);
  EXPECT_EQ(pending.value("state", ""), "PENDING");
  EXPECT_NE(pending.value("pending_reason", "").find("GPU"), std::string::npos) << pending.dump();

  std::set<int> all;
  for (const auto& [id, name] : {std::pair{a, std::string("gpu-a")}, std::pair{b, std::string("gpu-b")}}) {
    const json job = cluster_->Get(id);
    const std::map<int, int> gpus = RankGpus(id);
    ASSERT_EQ(gpus.size(), 4u) << job.dump();
    std::set<int> domain;
    for (const auto& [rank, gpu] : gpus) {
      ASSERT_GE(gpu, 0) << job.dump();
      EXPECT_TRUE(all.insert(gpu).second) << "GPU " << gpu << " given twice";
      domain.insert(gpu / 4);
    }
    EXPECT_EQ(domain.size(), 1u) << "a TP group on one NVLink domain: " << job.dump();
    // What each rank process was started with.
    for (const auto& [rank, gpu] : gpus) {
      const fs::path file = env_dir_ / (name + "-a1-r" + std::to_string(rank) + ".env");
      ASSERT_TRUE(Eventually([&] { return fs::exists(file); }, 30000)) << file;
      const auto env = ReadEnvFile(file);
      EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES") ? env.at("CUDA_VISIBLE_DEVICES") : "?", uuid_of.at(gpu)) << file;
      EXPECT_EQ(env.count("LOCAL_RANK") ? env.at("LOCAL_RANK") : "?", std::to_string(rank)) << file;
      EXPECT_EQ(env.count("LOCAL_WORLD_SIZE") ? env.at("LOCAL_WORLD_SIZE") : "?", "4") << file;
      EXPECT_EQ(env.count("NCCL_SOCKET_IFNAME") ? env.at("NCCL_SOCKET_IFNAME") : "?", "lo") << file;
      EXPECT_EQ(env.count("NCCL_DEBUG") ? env.at("NCCL_DEBUG") : "?", "WARN") << file;
    }
    // `get` shows the NCCL settings the ranks got.
    const std::string env_text = job.value("placement", json::object()).value("worker_env", json::array()).dump();
    EXPECT_NE(env_text.find("NCCL_SOCKET_IFNAME=lo"), std::string::npos) << job.dump();
  }
  EXPECT_EQ(all.size(), 8u);
  EXPECT_TRUE(Worker().value("free_gpus", json::array()).empty()) << Worker().dump();

  // Cancelling one frees its GPUs for the waiting job.
  const std::map<int, int> a_gpus = RankGpus(a);
  ASSERT_EQ(cluster_->Cli({"cancel", a}).exit_code, 0);
  ASSERT_TRUE(WaitState(c, "RUNNING", 120000)) << cluster_->Get(c).dump();
  std::set<int> a_set, c_set;
  for (const auto& [r, g] : a_gpus) a_set.insert(g);
  for (const auto& [r, g] : RankGpus(c)) c_set.insert(g);
  EXPECT_EQ(c_set, a_set);
  for (const std::string& id : {b, c}) ASSERT_EQ(cluster_->Cli({"cancel", id}).exit_code, 0);
  for (const std::string& id : {a, b, c}) EXPECT_TRUE(WaitState(id, "CANCELLED", 60000)) << id;
  EXPECT_TRUE(Eventually([&] { return Worker().value("free_gpus", json::array()).size() == 8u; }, 30000))
      << Worker().dump();
}

// Long enough (~0.2 s a step here) that the fault, sampled each second and sent with the
// next heartbeat, lands while the first attempt trains.
constexpr int kEccSteps = 120;

TEST_F(GpuFleetTest, AnUncorrectableEccErrorMidJobRestartsTheJobOnOtherGpusAndMarksTheGpu) {
  const fs::path checkpoints = cluster_->dir() / "checkpoints";
  std::vector<std::string> sets = CudaTp4("gpu-ecc", kEccSteps);
  sets.insert(sets.end(), {"checkpoint.interval=10", "checkpoint.keep=2", "checkpoint.dir=" + checkpoints.string(),
                           "restart.max_restarts=2", "restart.backoff_s=0", "training.log_freq=1"});
  const std::string id = cluster_->Submit(kTinyJob, sets);
  ASSERT_FALSE(id.empty());
  std::unique_ptr<EventFollower> events = cluster_->Follow(id, "watch-ecc.log");
  ASSERT_TRUE(events->WaitFor(
      [](const json& e) { return e.contains("step_metrics") && JsonInt(e.at("step_metrics").at("step")) >= 12; },
      240000))
      << "see " << cluster_->dir();
  const std::map<int, int> first = RankGpus(id);
  ASSERT_EQ(first.size(), 4u);
  const int bad = first.at(3);
  WriteText(nvml_config_, FakeNvmlConfig("ecc " + std::to_string(bad) + " 1\n"));

  const std::vector<json> all = events->WaitEnd();
  const json job = cluster_->Get(id);
  EXPECT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump();
  EXPECT_EQ(job.value("attempt", 0), 2) << job.dump();
  const std::string causes = job.value("failure_causes", json::array()).dump();
  EXPECT_NE(causes.find("GPU " + std::to_string(bad)), std::string::npos) << causes;
  // Three healthy GPUs are left in the bad one's NVLink domain: the group of four goes
  // to the other domain whole.
  const int other_domain = bad / 4 == 0 ? 1 : 0;
  for (const auto& [rank, gpu] : RankGpus(id)) {
    EXPECT_NE(gpu, bad) << "rank " << rank << " back on the bad GPU";
    EXPECT_EQ(gpu / 4, other_domain) << "rank " << rank << " on GPU " << gpu;
  }

  // The restart resumed from a checkpoint and trained exactly as the first attempt did.
  // When the kill lands between a checkpoint and the next step's report, no step ran in
  // both attempts; then the reference is the same job run uninterrupted on
  // trainyard-train (on CPU, as the stand-in rank trains).
  std::map<int64_t, double> one = LossesByStep(all, 1);
  const std::map<int64_t, double> two = LossesByStep(all, 2);
  ASSERT_FALSE(two.empty());
  EXPECT_EQ(two.rbegin()->first, kEccSteps);
  ASSERT_GE(two.begin()->first, 2) << "the restart did not resume from a checkpoint";
  const bool overlap = one.count(two.begin()->first) > 0;
  if (!overlap) {
    std::vector<std::string> argv = {TRAINYARD_TRAIN, kTinyJob, "--json"};
    for (std::string s : CudaTp4("gpu-ecc", kEccSteps)) {
      if (s == "resources.device=cuda") s = "resources.device=cpu";
      argv.insert(argv.end(), {"--set", s});
    }
    argv.insert(argv.end(), {"--set", "training.log_freq=1"});
    const CommandResult r = RunCommand(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    one = LossesByStep(JsonLines(r.out), 0);
  }
  int compared = 0;
  for (const auto& [step, loss] : two) {
    if (one.count(step)) {
      EXPECT_EQ(loss, one.at(step)) << "step " << step << (overlap ? " (attempt 1)" : " (trainyard-train)");
      ++compared;
    }
  }
  EXPECT_GT(compared, 0) << "no step to compare";

  // The GPU stays out of service, shown with its reason.
  const json w1 = Worker();
  const std::string unhealthy = w1.value("unhealthy_gpus", json::array()).dump();
  EXPECT_NE(unhealthy.find(std::to_string(bad)), std::string::npos) << w1.dump();
  bool reason = false;
  for (const json& s : w1.value("gpu_samples", json::array())) {
    if (s.value("index", -1) == bad) {
      reason = !s.value("healthy", true) && s.value("unhealthy_reason", "").find("ECC") != std::string::npos;
    }
  }
  EXPECT_TRUE(reason) << w1.dump();
  std::printf("[figures] ECC on GPU %d: restarted from step %lld on GPUs", bad,
              static_cast<long long>(two.begin()->first - 1));
  for (const auto& [rank, gpu] : RankGpus(id)) std::printf(" %d", gpu);
  std::printf(" (%d steps compared with %s)\n", compared, overlap ? "attempt 1" : "trainyard-train");
}

}  // namespace
}  // namespace trainyard::testing
