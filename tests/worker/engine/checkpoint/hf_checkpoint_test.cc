// The Hugging Face folder reader (hf_checkpoint.h) on folders written here: a rank's
// windows (rows, a column range, its experts) equal the full tensors' parts computed
// independently, Qwen's rotate-half rows come back in the engine's order, bf16 files
// load as their fp32 values, and hostile folders (an index reaching outside, a broken
// index, a tensor missing, of another shape or an integer dtype, a tensor the model has
// no place for, a truncated shard, no weights file, a config.json contradicting the
// model) are refused naming the file and tensor; multi-token-prediction layers are
// skipped.
#include "worker/engine/checkpoint/hf_checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/spec/hf_config.h"
#include "common/spec/presets.h"
#include "worker/engine/io/safetensors_file.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;

#define EXPECT_THROW_HAS(stmt, needle)                                                           \
  try {                                                                                          \
    stmt;                                                                                        \
    ADD_FAILURE() << "no exception; expected one saying " << (needle);                           \
  } catch (const std::runtime_error& e) {                                                        \
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what(); \
  }

// A full tensor whose every element names its place: 1000·row + column (+ 0.5 per
// matrix index `tag`), exact in bf16 for the small sizes used (as integers < 256 are).
torch::Tensor Full(std::vector<int64_t> shape, double tag) {
  auto t = torch::arange(torch::tensor(shape).prod().item<int64_t>(), torch::kFloat).reshape(shape);
  return t.remainder(97) + tag;
}

class HfCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "hfck_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    spec_ = spec::FromPreset("qwen3_moe_debug").value();
    const spec::Result<std::string> config = spec::HuggingFaceConfigJson(spec_);
    ASSERT_TRUE(config.ok());
    std::ofstream(dir_ + "/config.json") << config.value();
    hd_ = spec_.model.head_dim();  // 48
    // The folder: a query projection of 2 heads, its norm, an o_proj, 4 experts.
    wq_ = Full({2 * hd_, 6}, 0);
    q_norm_ = Full({hd_}, 0.25);
    wo_ = Full({6, 8}, 0.5);
    for (int e = 0; e < 4; ++e) experts_.push_back(Full({5, 6}, e));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Engine row g of a head comes from HF row k where the engine's order is 0, 2, 4, ...
  // then 1, 3, ... (HF row k holds engine row order[k]), written out by hand here.
  torch::Tensor EngineRows(const torch::Tensor& hf) const {
    auto out = torch::empty_like(hf);
    for (int64_t h = 0; h < hf.size(0) / hd_; ++h) {
      for (int64_t k = 0; k < hd_; ++k) {
        const int64_t engine_row = k < hd_ / 2 ? 2 * k : 2 * (k - hd_ / 2) + 1;
        out[h * hd_ + engine_row] = hf[h * hd_ + k];
      }
    }
    return out;
  }

  // Writes the tensors as two shards and an index (or `index` as given).
  void WriteFolder(torch::ScalarType dtype = torch::kFloat,
                   std::vector<std::pair<std::string, torch::Tensor>> more = {}, const std::string& index = "") {
    std::vector<std::pair<std::string, torch::Tensor>> a = {
        {"model.layers.0.self_attn.q_proj.weight", wq_.to(dtype)},
        {"model.layers.0.self_attn.q_norm.weight", q_norm_.to(dtype)},
        {"model.layers.0.self_attn.o_proj.weight", wo_.to(dtype)}};
    std::vector<std::pair<std::string, torch::Tensor>> b;
    for (int e = 0; e < 4; ++e) {
      b.push_back({"model.layers.1.mlp.experts." + std::to_string(e) + ".gate_proj.weight", experts_[e].to(dtype)});
    }
    b.insert(b.end(), more.begin(), more.end());
    WriteSafetensors(dir_ + "/model-00001-of-00002.safetensors", a);
    WriteSafetensors(dir_ + "/model-00002-of-00002.safetensors", b);
    std::string text = index;
    if (text.empty()) {
      text = "{\"metadata\": {}, \"weight_map\": {";
      for (const auto& [n, t] : a) text += "\"" + n + "\": \"model-00001-of-00002.safetensors\", ";
      for (const auto& [n, t] : b) text += "\"" + n + "\": \"model-00002-of-00002.safetensors\", ";
      text.resize(text.size() - 2);
      text += "}}";
    }
    std::ofstream(dir_ + "/model.safetensors.index.json") << text;
  }

  // This rank: the second head of wq (rows hd..2hd), columns 4..8 of wo, experts 2 and
  // 3, the whole q_norm.
  std::vector<StateTensor> RankState() {
    local_wq_ = torch::zeros({hd_, 6});
    local_norm_ = torch::zeros({hd_});
    local_wo_ = torch::zeros({6, 4});
    local_experts_ = torch::zeros({2, 5, 6});
    return {{"layers.0.attention.wq.weight", local_wq_, {2 * hd_, 6}, {hd_, 0}, true},
            {"layers.0.attention.q_norm.weight", local_norm_, {hd_}, {0}, true},
            {"layers.0.attention.wo.weight", local_wo_, {6, 8}, {0, 4}, true},
            {"layers.1.moe.experts.w1", local_experts_, {4, 5, 6}, {2, 0, 0}, true}};
  }

  std::string dir_;
  spec::JobSpec spec_;
  int64_t hd_ = 0;
  torch::Tensor wq_, q_norm_, wo_;
  std::vector<torch::Tensor> experts_;
  torch::Tensor local_wq_, local_norm_, local_wo_, local_experts_;
};

TEST_F(HfCheckpointTest, ARankGetsItsWindowsWithQwenRowsInTheEnginesOrder) {
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    WriteFolder(dtype);
    const std::string loaded = LoadHuggingFaceWeights(dir_, spec_.model, RankState());
    EXPECT_NE(loaded.find("5 tensors read for this rank"), std::string::npos) << loaded;
    EXPECT_TRUE(torch::equal(local_wq_, EngineRows(wq_).slice(0, hd_, 2 * hd_))) << torch::toString(dtype);
    EXPECT_TRUE(torch::equal(local_norm_, EngineRows(q_norm_.unsqueeze(1)).squeeze(1)));
    EXPECT_FALSE(torch::equal(local_norm_, q_norm_)) << "the case tells the orders apart";
    EXPECT_TRUE(torch::equal(local_wo_, wo_.slice(1, 4, 8)));
    EXPECT_TRUE(torch::equal(local_experts_[0], experts_[2]));
    EXPECT_TRUE(torch::equal(local_experts_[1], experts_[3]));
  }
}

TEST_F(HfCheckpointTest, MultiTokenPredictionLayersAreSkippedAndOtherStrangersRefused) {
  WriteFolder(torch::kFloat,
              {{"model.layers." + std::to_string(spec_.model.n_layers) + ".eh_proj.weight", torch::zeros({2, 2})}});
  EXPECT_NE(LoadHuggingFaceWeights(dir_, spec_.model, RankState()).find("1 multi-token-prediction tensors skipped"),
            std::string::npos);
  WriteFolder(torch::kFloat, {{"model.layers.0.mlp.shared_experts.gate_proj.weight", torch::zeros({2, 2})}});
  EXPECT_THROW_HAS(LoadHuggingFaceWeights(dir_, spec_.model, RankState()),
                   "model-00002-of-00002.safetensors: tensor \"model.layers.0.mlp.shared_experts.gate_proj.weight\" "
                   "has no place in the model");
}

TEST_F(HfCheckpointTest, HostileFoldersAreRefusedNamingTheProblem) {
  WriteFolder();
  std::vector<StateTensor> state = RankState();
  // A tensor of another shape, and one the folder lacks.
  state[2].global_shape = {6, 10};
  EXPECT_THROW_HAS(LoadHuggingFaceWeights(dir_, spec_.model, state),
                   "tensor \"model.layers.0.self_attn.o_proj.weight\" (the engine's \"layers.0.attention.wo.weight\"): "
                   "has shape [6, 8], the model needs [6, 10]");
  state = RankState();
  state.push_back({"layers.0.attention.wk.weight", torch::zeros({hd_, 6}), {hd_, 6}, {0, 0}, true});
  EXPECT_THROW_HAS(LoadHuggingFaceWeights(dir_, spec_.model, state),
                   "its Hugging Face tensor \"model.layers.0.self_attn.k_proj.weight\" is not in the folder");
  // Integer weights.
  WriteFolder(torch::kInt);
  EXPECT_THROW_HAS(LoadHuggingFaceWeights(dir_, spec_.model, RankState()), "has dtype Int, not a float type");
  // Indexes: reaching outside the folder, not JSON, no weight_map, a wrong shard.
  WriteFolder(torch::kFloat, {}, "{\"weight_map\": {\"model.norm.weight\": \"../elsewhere.safetensors\"}}");
  EXPECT_THROW_HAS(LoadHuggingFaceWeights(dir_, spec_.model, RankState()), "is not a file in the folder");
  WriteFolder(torch::kFloat, {}, "{\"weight_map\": ");
  EXPECT_THROW_HAS(LoadHuggingFaceWeights(dir_, spec_.model, RankState()), "is not a JSON object");
  WriteFolder(torch::kFloat, {}, "{\"metadata\": {}}");
  EXPECT_THROW_HAS(LoadHuggingFaceWeights(dir_, spec_.model, RankState()), "has no \"weight_map\" object");
  WriteFolder(torch::kFloat, {},
              "{\"weight_map\": {\"model.layers.0.self_attn.q_proj.weight\": \"model-00002-of-00002.safetensors\"}}");
  EXPECT_THROW_HAS(LoadHuggingFaceWeights(dir_, spec_.model, RankState()),
                   "the index places \"model.layers.0.self_attn.q_proj.weight\" here, but it holds no such tensor");
  // A truncated shard.
  WriteFolder();
  fs::resize_file(dir_ + "/model-00002-of-00002.safetensors",
                  fs::file_size(dir_ + "/model-00002-of-00002.safetensors") - 9);
  EXPECT_THROW_HAS(LoadHuggingFaceWeights(dir_, spec_.model, RankState()), "model-00002-of-00002.safetensors");
  // No weights at all.
  fs::remove(dir_ + "/model.safetensors.index.json");
  EXPECT_THROW_HAS(LoadHuggingFaceWeights(dir_, spec_.model, RankState()),
                   "holds neither model.safetensors.index.json nor model.safetensors");
}

TEST_F(HfCheckpointTest, AModelThatContradictsConfigJsonOrHasNoHfClassIsRefusedBeforeAnyRead) {
  WriteFolder();
  spec::ModelSpec other = spec_.model;
  other.n_layers += 1;
  EXPECT_THROW_HAS(LoadHuggingFaceWeights(dir_, other, RankState()), "the job's model.n_layers = 5 contradicts");
  other = spec_.model;
  other.architecture = "trainyard";
  EXPECT_THROW_HAS(LoadHuggingFaceWeights(dir_, other, RankState()),
                   "model.architecture \"trainyard\" has no Hugging Face model class");
}

}  // namespace
}  // namespace trainyard::engine
