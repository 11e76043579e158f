// `trainyard export` and the weights-only loader on checkpoints written by real
// trainyard-rank processes (tiny model, 10 steps, a checkpoint every 5, --save-final),
// under dp=2 ep=2 and under tp=2: the exported file (the `trainyard` binary, --checkpoint)
// holds every model tensor, equal to the one assembled here from the rank files' slices
// and to --save-final's; --names hf has the Hugging Face names and shapes with each
// expert's weights; LoadInitialWeights starts a 1-rank model and both ranks of a tp=2
// model from the dp=2 ep=2 checkpoint folder, its checkpoint directory or the export,
// with the same weights; hostile paths are refused as std::invalid_argument.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "tests/worker/engine/rank_harness.h"
#include "worker/engine/checkpoint/checkpoint_layout.h"
#include "worker/engine/checkpoint/checkpoint_loader.h"
#include "worker/engine/io/safetensors_file.h"
#include "worker/engine/parallel/parameter_sharding.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;
using NamedList = std::vector<std::pair<std::string, torch::Tensor>>;

std::string Prefix() { return ::testing::TempDir() + "ckexportranks_" + std::to_string(::getpid()) + "_"; }

// One run of `world` ranks with checkpoints under Prefix()+tag+"_ck" and the final
// weights in Prefix()+tag+"_final.safetensors".
struct TrainedRun {
  std::string root, final_weights;
};

TrainedRun TrainAndCheckpoint(const std::string& tag, int dp, int tp, int ep) {
  EngineConfig c = testing::TinySpec();
  c.job.name = "export";
  c.training.batch_size = 8 / dp;
  c.parallelism.dp = dp;
  c.parallelism.tp = tp;
  c.parallelism.ep = ep;
  TrainedRun run{Prefix() + tag + "_ck", Prefix() + tag + "_final.safetensors"};
  fs::remove_all(run.root);
  c.checkpoint.interval = 5;
  c.checkpoint.keep = 3;
  c.checkpoint.dir = run.root;
  const std::string config = testing::WriteSpec(Prefix() + tag + ".json", c);
  const int world = dp * tp, port = testing::FreePort();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pids.push_back(testing::SpawnRank(config, r, world, port, Prefix() + tag + "_r" + std::to_string(r) + ".jsonl",
                                      {"--save-final", run.final_weights}));
  }
  for (pid_t pid : pids) EXPECT_EQ(testing::WaitExit(pid), 0) << tag;
  return run;
}

// `trainyard export ARGS...` (the real binary); its exit code.
int Cli(std::vector<std::string> args, const std::string& tag) {
  args.insert(args.begin(), {TRAINYARD_CLI, "export"});
  return testing::RankSpawner::Get().Wait(testing::RankSpawner::Get().Spawn(args, Prefix() + tag + "_cli.txt"));
}

// The full model tensors assembled here from the rank files' slices (parameters and
// buffers; not optim.*, not rng.*), independently of the export code.
std::map<std::string, torch::Tensor> AssembleFromSlices(const std::string& dir) {
  std::map<std::string, torch::Tensor> full;
  for (const ManifestFile& f : ReadVerifiedManifest(dir).files) {
    const std::string path = dir + "/" + f.name;
    const auto meta = nlohmann::json::parse(ReadSafetensorsHeader(path).metadata.at("trainyard.checkpoint"));
    for (const auto& [key, t] : ReadSafetensors(path)) {
      if (!meta["slices"].contains(key)) continue;  // RNG state
      const auto& s = meta["slices"][key];
      const std::string name = s["name"];
      if (name.rfind("optim.", 0) == 0) continue;
      if (!full.count(name)) full[name] = torch::full(s["global_shape"].get<std::vector<int64_t>>(), NAN, t.options());
      torch::Tensor dst = full[name];
      const auto offsets = s["offsets"].get<std::vector<int64_t>>();
      for (size_t d = 0; d < offsets.size(); ++d) dst = dst.narrow(d, offsets[d], t.size(d));
      dst.copy_(t);
    }
  }
  return full;
}

class ExportRanksTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dpep_ = new TrainedRun(TrainAndCheckpoint("dp2ep2", 2, 1, 2));
    tp_ = new TrainedRun(TrainAndCheckpoint("tp2", 1, 2, 1));
  }
  static void ExpectExportMatches(const TrainedRun& run, const std::string& tag) {
    const std::string out = Prefix() + tag + "_export.safetensors";
    fs::remove(out);
    ASSERT_EQ(Cli({"--checkpoint", run.root, "-o", out}, tag), 0);
    const NamedList exported = ReadSafetensors(out), final_weights = ReadSafetensors(run.final_weights);
    const auto assembled = AssembleFromSlices((fs::path(run.root) / CheckpointDirName(10, 1)).string());
    ASSERT_EQ(exported.size(), final_weights.size());
    EXPECT_EQ(assembled.size(), exported.size());
    for (size_t i = 0; i < exported.size(); ++i) {
      const auto& [name, t] = exported[i];
      EXPECT_EQ(name, final_weights[i].first) << "the --save-final order";
      EXPECT_TRUE(torch::equal(t, final_weights[i].second)) << tag << " " << name << " differs from --save-final";
      ASSERT_TRUE(assembled.count(name)) << name;
      EXPECT_TRUE(torch::equal(t, assembled.at(name))) << tag << " " << name << " differs from its slices";
    }
    EXPECT_EQ(ReadSafetensorsHeader(out).metadata.at("trainyard.step"), "10");
  }
  static TrainedRun* dpep_;
  static TrainedRun* tp_;
};
TrainedRun* ExportRanksTest::dpep_ = nullptr;
TrainedRun* ExportRanksTest::tp_ = nullptr;

TEST_F(ExportRanksTest, DpEpCheckpointExportsTheFinalWeights) { ExpectExportMatches(*dpep_, "dp2ep2"); }

TEST_F(ExportRanksTest, TensorParallelCheckpointExportsTheFinalWeights) { ExpectExportMatches(*tp_, "tp2"); }

TEST_F(ExportRanksTest, HuggingFaceNamesAndShapes) {
  const std::string out = Prefix() + "hf_export.safetensors";
  fs::remove(out);
  ASSERT_EQ(Cli({"--checkpoint", dpep_->root, "--names", "hf", "-o", out}, "hf"), 0);
  std::map<std::string, torch::Tensor> hf;
  for (auto& [name, t] : ReadSafetensors(out)) hf[name] = t;
  std::map<std::string, torch::Tensor> want;  // from --save-final, with the table of docs/checkpoints.md
  const std::map<std::string, std::string> layer = {
      {"attention.wq.weight", "self_attn.q_proj.weight"}, {"attention.wk.weight", "self_attn.k_proj.weight"},
      {"attention.wv.weight", "self_attn.v_proj.weight"}, {"attention.wo.weight", "self_attn.o_proj.weight"},
      {"attention_norm.weight", "input_layernorm.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"feed_forward.w1.weight", "mlp.gate_proj.weight"},  {"feed_forward.w3.weight", "mlp.up_proj.weight"},
      {"feed_forward.w2.weight", "mlp.down_proj.weight"},  {"moe.router.gate.weight", "mlp.gate.weight"},
      {"moe.expert_bias", "mlp.gate.e_score_correction_bias"},
      {"moe.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},
      {"moe.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"},
      {"moe.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"}};
  const std::map<std::string, std::string> experts = {
      {"moe.experts.w1", "gate_proj.weight"}, {"moe.experts.w3", "up_proj.weight"}, {"moe.experts.w2", "down_proj.weight"}};
  int expert_tensors = 0;
  for (const auto& [name, t] : ReadSafetensors(dpep_->final_weights)) {
    if (name == "tok_embeddings.weight") want["model.embed_tokens.weight"] = t;
    else if (name == "norm.weight") want["model.norm.weight"] = t;
    else if (name == "output.weight") want["lm_head.weight"] = t;
    else {
      const size_t dot = name.find('.', 7);  // after "layers.<i>"
      const std::string prefix = "model." + name.substr(0, dot + 1), rest = name.substr(dot + 1);
      if (experts.count(rest)) {
        ++expert_tensors;
        for (int64_t e = 0; e < t.size(0); ++e) {
          want[prefix + "mlp.experts." + std::to_string(e) + "." + experts.at(rest)] = t[e];
        }
      } else {
        ASSERT_TRUE(layer.count(rest)) << name;
        want[prefix + layer.at(rest)] = t;
      }
    }
  }
  EXPECT_GT(expert_tensors, 0);
  ASSERT_EQ(hf.size(), want.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(hf.count(name)) << name << " missing";
    EXPECT_EQ(hf.at(name).sizes(), t.sizes()) << name;
    EXPECT_TRUE(torch::equal(hf.at(name), t)) << name;
  }
  // [out, in], as HF's nn.Linear: gate/up [expert_hidden, dim], down [dim, expert_hidden].
  const ModelConfig m = testing::TinySpec().model;
  EXPECT_EQ(hf.at("model.layers.1.mlp.experts.0.gate_proj.weight").sizes(), (c10::IntArrayRef{m.expert_hidden, m.dim}));
  EXPECT_EQ(hf.at("model.layers.1.mlp.experts.0.down_proj.weight").sizes(), (c10::IntArrayRef{m.dim, m.expert_hidden}));
}

// Each of the model's tensors equals this rank's shard of --save-final's full tensor.
void ExpectModelHolds(TransformerModelImpl& model, const std::string& final_weights, const std::string& what) {
  std::map<std::string, torch::Tensor> full;
  for (auto& [name, t] : ReadSafetensors(final_weights)) full[name] = t;
  size_t n = 0;
  auto check = [&](const std::string& name, const torch::Tensor& local) {
    ASSERT_TRUE(full.count(name)) << name;
    EXPECT_TRUE(torch::equal(local, TakeShard(full.at(name), ShardKindOf(name), model.parallel())))
        << what << ": " << name;
    ++n;
  };
  for (const auto& p : model.named_parameters()) check(p.key(), p.value());
  for (const auto& b : model.named_buffers()) check(b.key(), b.value());
  EXPECT_EQ(n, full.size()) << what;
}

TEST_F(ExportRanksTest, InitialWeightsFromACheckpointFolderOfAnotherLayout) {
  const EngineConfig c = testing::TinySpec();
  TransformerModel one(c.model, c.training.seq_len);
  one->InitWeights(7);
  const std::string from = LoadInitialWeights(dpep_->root, *one);
  EXPECT_EQ(from, "checkpoint " + (fs::path(dpep_->root) / CheckpointDirName(10, 1)).string() +
                      " (step 10, written under dp=2 tp=1 ep=2)");
  ExpectModelHolds(*one, dpep_->final_weights, "1 rank from the folder");
  for (int r = 0; r < 2; ++r) {
    ParallelContext ctx;
    ctx.rank = ctx.tp_rank = r;
    ctx.world = ctx.tp = 2;
    TransformerModel shard(c.model, c.training.seq_len, ctx);
    shard->InitWeights(7);
    LoadInitialWeights((fs::path(dpep_->root) / CheckpointDirName(5, 1)).string(), *shard);  // not the final one
    LoadInitialWeights(dpep_->root, *shard);
    ExpectModelHolds(*shard, dpep_->final_weights, "tp=2 rank " + std::to_string(r));
  }
  // The export loads back as initial weights, the same ones.
  const std::string out = Prefix() + "reload.safetensors";
  fs::remove(out);
  ASSERT_EQ(Cli({"--checkpoint", dpep_->root, "-o", out}, "reload"), 0);
  TransformerModel again(c.model, c.training.seq_len);
  again->InitWeights(8);
  EXPECT_EQ(LoadInitialWeights(out, *again).rfind("safetensors file " + out, 0), 0u);
  ExpectModelHolds(*again, dpep_->final_weights, "1 rank from the export");
}

TEST_F(ExportRanksTest, InitialWeightsRefuseBadPaths) {
  const EngineConfig c = testing::TinySpec();
  TransformerModel model(c.model, c.training.seq_len);
  auto error = [&](const std::string& path) -> std::string {
    try {
      LoadInitialWeights(path, *model);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "no std::invalid_argument";
  };
  EXPECT_EQ(error(Prefix() + "nowhere"), "initial weights '" + Prefix() + "nowhere': does not exist");
  const std::string empty = Prefix() + "empty_ck";
  fs::create_directories(empty + "/" + CheckpointDirName(5, 1));
  EXPECT_NE(error(empty).find("no complete checkpoint under"), std::string::npos) << error(empty);
  const std::string hf = Prefix() + "hf_bad.safetensors";
  fs::remove(hf);
  ASSERT_EQ(Cli({"--checkpoint", dpep_->root, "--names", "hf", "-o", hf}, "hf_bad"), 0);
  EXPECT_NE(error(hf).find("was exported with --names hf"), std::string::npos) << error(hf);
  // A checkpoint of another model shape names the tensor.
  EngineConfig wide = c;
  wide.model.dim = 2 * c.model.dim;
  TransformerModel other(wide.model, wide.training.seq_len);
  try {
    LoadInitialWeights(dpep_->root, *other);
    ADD_FAILURE() << "loaded into another shape";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tensor \"tok_embeddings.weight\": has global shape"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace trainyard::engine
