// A Hugging Face model fine-tuned through the service: transformers saves a small
// random Qwen3-MoE (sharded) and PyPI's tokenizers trains its tokenizer.json on Python
// sources (hf_model_fixture.py); trainyard-tokenize encodes the training and held-out
// sources with that tokenizer.json; a job file that names nothing of the model but the
// folder (config.json gives every model key) runs 30 steps through the real
// controller, worker and rank; it SUCCEEDS with its held-out loss falling, and
// `trainyard export --names hf` gives a folder transformers' from_pretrained loads as a
// Qwen3MoeForCausalLM that scores held-out text better than the model it started from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kPythonLib = "/usr/lib/python3.11";
const std::string kFixture = TRAINYARD_SOURCE_DIR "/tests/integration/hf_model_fixture.py";

CommandResult Python(std::vector<std::string> args) {
  args.insert(args.begin(), {"/usr/bin/env", "PYTHONDONTWRITEBYTECODE=1", TRAINYARD_PYTHON, kFixture});
  return RunCommand(args);
}

// Python sources by first letter: training a-m, held out n-p.
std::vector<std::string> Sources(char first, char last) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(kPythonLib)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".py" && entry.is_regular_file() && name[0] >= first && name[0] <= last) {
      out.push_back(entry.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::map<int64_t, double> ValidationLosses(const std::vector<json>& events) {
  std::map<int64_t, double> out;
  for (const json& e : events) {
    if (!e.contains("validation")) continue;
    const json& v = e.at("validation");
    out[v.contains("step") ? JsonInt(v.at("step")) : 0] = v.at("loss").get<double>();
  }
  return out;
}

bool Logged(const std::vector<json>& events, const std::string& text) {
  for (const json& e : events) {
    if (e.contains("log") && e.at("log").value("message", "").find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(HfFinetuneTest, AQwenFolderFineTunesThroughTheServiceAndItsExportLoadsInTransformers) {
  TestCluster cluster(kBuiltBinaries, "hf_finetune");
  const fs::path d = cluster.dir();
  const std::vector<std::string> train = Sources('a', 'm'), held_out = Sources('n', 'p');
  ASSERT_GT(train.size(), 30u) << "expected Python's standard library under " << kPythonLib;
  ASSERT_GT(held_out.size(), 5u);
  std::vector<std::string> make = {"make", (d / "hf").string()};
  make.insert(make.end(), train.begin(), train.end());
  const CommandResult made = Python(make);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const fs::path model = d / "hf" / "model", tokenizer = model / "tokenizer.json";
  ASSERT_TRUE(fs::exists(model / "model.safetensors.index.json")) << "a sharded folder";

  auto tokenize = [&](const std::string& prefix, const std::vector<std::string>& files) {
    std::vector<std::string> argv = {TRAINYARD_TOKENIZE, "-o", (d / prefix).string(), "--tokenizer",
                                     tokenizer.string()};
    argv.insert(argv.end(), files.begin(), files.end());
    const CommandResult r = RunCommand(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::printf("[figures] %s", r.out.c_str());
  };
  tokenize("train", train);
  tokenize("val", held_out);
  ASSERT_TRUE(fs::exists(d / "train.idx") && fs::exists(d / "val.idx"));

  // The model section names nothing: config.json gives it all.
  const fs::path job = d / "finetune.toml";
  std::ofstream(job) << "[job]\nname = \"qwen-finetune\"\n"
                     << "[training]\nsteps = 30\nseq_len = 64\nbatch_size = 8\nlr = 3e-3\nwarmup_steps = 3\n"
                     << "dataset = \"tokens\"\ndataset_path = \"" << (d / "train.idx").string() << "\"\n"
                     << "shuffle = true\n"
                     << "[validation]\ndataset = \"tokens\"\ndataset_path = \"" << (d / "val.idx").string()
                     << "\"\nfreq = 10\nsteps = 4\n"
                     << "[checkpoint]\ninitial_load_path = \"" << model.string() << "\"\ndir = \""
                     << (d / "ck").string() << "\"\ninterval = 30\n"
                     << "[parallelism]\ncollective_timeout_s = 60\n";

  ASSERT_TRUE(cluster.StartController({"--heartbeat-timeout", "3"}))
      << "controller did not start; see " << d / "controller.log";
  WorkerOptions worker;
  worker.name = "w1";
  cluster.StartWorker(worker);
  ASSERT_TRUE(cluster.WaitConnected({"w1"}, 20000)) << "worker never registered; see " << d;
  const std::string id = cluster.Submit(job.string(), {});
  ASSERT_FALSE(id.empty());
  const std::vector<json> events = cluster.Follow(id, "finetune.jsonl")->WaitEnd();
  const json got = cluster.Get(id);
  ASSERT_EQ(got.value("state", ""), "SUCCEEDED") << got.dump();
  EXPECT_EQ(got.at("spec").at("model").value("architecture", ""), "qwen3_moe") << "from config.json";
  EXPECT_TRUE(Logged(events, "initial weights: Hugging Face model " + model.string())) << "the rank names its source";
  const std::map<int64_t, double> val = ValidationLosses(events);
  ASSERT_EQ(val.size(), 4u) << "before step 1, after steps 10, 20 and 30";
  for (const auto& [step, loss] : val) {
    std::printf("[figures] held-out loss after step %lld: %.4f\n", static_cast<long long>(step), loss);
  }
  EXPECT_LT(val.at(30), val.at(0) - 0.5) << "the held-out loss must fall";

  const fs::path out = d / "export";
  const CommandResult exported = cluster.Cli({"export", id, "--names", "hf", "-o", out.string()});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  std::printf("[figures] %s", exported.out.c_str());
  const CommandResult check = Python({"check", out.string(), model.string(), held_out.front()});
  ASSERT_EQ(check.exit_code, 0) << check.err;
  const json result = json::parse(check.out);
  std::printf("[figures] transformers on the export: %s\n", result.dump().c_str());
  EXPECT_EQ(result.at("class"), "Qwen3MoeForCausalLM");
  EXPECT_LT(result.at("loss_export").get<double>(), result.at("loss_start").get<double>() - 0.5)
      << "the exported model is the fine-tuned one";
}

}  // namespace
}  // namespace trainyard::testing
