// Checkpoint files in process: a single-rank round trip (weights, AdamW moments and
// step, expert biases, RNG), the directory layout helpers (finder, pruning, attempts),
// and hostile checkpoints, each refused with a message that names the problem.
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "worker/engine/checkpoint/checkpoint_layout.h"
#include "worker/engine/checkpoint/checkpoint_loader.h"
#include "worker/engine/checkpoint/checkpoint_writer.h"
#include "worker/engine/checkpoint/train_state.h"
#include "worker/engine/config/engine_config.h"
#include "worker/engine/io/safetensors_file.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const CheckpointExpectations kExpect{4, "synthetic", 42};

// A tiny single-rank model with an optimizer whose state is not zero.
struct Rig {
  TransformerModel model{nullptr};
  std::unique_ptr<AdamW> optimizer;
  std::vector<StateTensor> state;

  Rig(uint64_t seed, int dim = 0) {
    EngineConfig c = TinyEngineConfig();
    if (dim > 0) c.model.dim = dim;
    model = TransformerModel(c.model, c.training.seq_len);
    model->InitWeights(seed);
    std::vector<torch::Tensor> params;
    for (const auto& p : model->named_parameters()) params.push_back(p.value());
    optimizer = std::make_unique<AdamW>(params, AdamWOptions{0.9, 0.95, 1e-8, 0.1});
    torch::NoGradGuard no_grad;
    auto gen = at::detail::createCPUGenerator(seed + 1);
    for (size_t i = 0; i < optimizer->size(); ++i) {
      optimizer->exp_avg(i).copy_(torch::randn(params[i].sizes(), gen));
      optimizer->exp_avg_sq(i).copy_(torch::rand(params[i].sizes(), gen));
    }
    for (const auto& b : model->named_buffers()) b.value().copy_(torch::randn(b.value().sizes(), gen));
    optimizer->set_steps(static_cast<int64_t>(seed));
    state = CollectTrainState(*model, *optimizer);
  }
};

std::string FreshRoot(const std::string& name) {
  const std::string root = ::testing::TempDir() + "ckfiles_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(root);
  return root;
}

// Writes rig's state as step 7 (attempt 1) under root; returns the checkpoint dir.
std::string Save(Rig& rig, const std::string& root, int64_t step = 7, int keep = 3) {
  CheckpointWriterOptions o;
  o.root = root;
  o.keep = keep;
  o.wait_for_ranks_s = 10;
  CheckpointWriter writer(o);
  writer.Save({step, rig.optimizer->steps(), kExpect.global_batch, kExpect.dataset, kExpect.seed}, rig.state);
  writer.Wait();
  return (fs::path(root) / CheckpointDirName(step, 1)).string();
}

std::string LoadError(const std::string& dir, CheckpointExpectations expect = kExpect, int dim = 0) {
  Rig target(3, dim);
  try {
    LoadCheckpoint(dir, target.state, 0, expect);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(loaded)";
}

// Rewrites rank 0's file through `mutate` (tensors and the checkpoint metadata) and
// fixes the manifest's sizes, so only the mutation is wrong.
void RewriteRankFile(const std::string& dir,
                     const std::function<void(std::vector<std::pair<std::string, torch::Tensor>>&, json&)>& mutate) {
  const std::string path = (fs::path(dir) / RankFileName(0)).string();
  const SafetensorsHeader h = ReadSafetensorsHeader(path);
  json meta = json::parse(h.metadata.at("trainyard.checkpoint"));
  auto tensors = ReadSafetensors(path);
  mutate(tensors, meta);
  SafetensorsWriteOptions o;
  o.metadata["trainyard.checkpoint"] = meta.dump();
  WriteSafetensors(path, tensors, o);
  std::ifstream in((fs::path(dir) / kManifestName).string());
  std::stringstream text;
  text << in.rdbuf();
  CheckpointManifest m = ParseManifest(text.str(), "test");
  m.total_bytes += static_cast<int64_t>(fs::file_size(path)) - m.files[0].bytes;
  m.files[0].bytes = static_cast<int64_t>(fs::file_size(path));
  WriteManifestAtomically(dir, m);
}

void EditManifest(const std::string& dir, const std::function<void(json&)>& edit) {
  const std::string path = (fs::path(dir) / kManifestName).string();
  std::ifstream in(path);
  json m = json::parse(in);
  edit(m);
  std::ofstream(path, std::ios::trunc) << m.dump();
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "message: " << (haystack)

TEST(CheckpointFilesTest, RoundTripRestoresEveryTensorAndTheRng) {
  Rig source(11);
  const std::string dir = Save(source, FreshRoot("roundtrip"));
  const auto after_save = torch::rand({5});  // the default generator moves on
  Rig target(5);
  const CheckpointManifest m = LoadCheckpoint(dir, target.state, 0, kExpect);
  EXPECT_EQ(m.step, 7);
  EXPECT_EQ(m.optimizer_step, 11);
  ASSERT_EQ(target.state.size(), source.state.size());
  for (size_t i = 0; i < source.state.size(); ++i) {
    EXPECT_TRUE(torch::equal(target.state[i].local, source.state[i].local)) << source.state[i].name;
  }
  EXPECT_TRUE(torch::equal(torch::rand({5}), after_save)) << "RNG state restored to the save's";
  // The names a reader sees: parameters, moments and buffers under global names.
  const SafetensorsHeader h = ReadSafetensorsHeader((fs::path(dir) / RankFileName(0)).string());
  EXPECT_NE(h.Find("output.weight"), nullptr);
  EXPECT_NE(h.Find("optim.m.output.weight"), nullptr);
  EXPECT_NE(h.Find("optim.v.layers.1.moe.experts.w1"), nullptr);
  EXPECT_NE(h.Find("layers.1.moe.expert_bias"), nullptr);
  EXPECT_NE(h.Find("rng.cpu"), nullptr);
}

TEST(CheckpointFilesTest, IncompleteCheckpointIsRefusedAndSkippedByTheFinder) {
  const std::string root = FreshRoot("incomplete");
  Rig rig(2);
  const std::string old_dir = Save(rig, root, 5);
  const std::string new_dir = Save(rig, root, 10);
  fs::remove(fs::path(new_dir) / kManifestName);  // as if rank 0 died before the rename
  EXPECT_HAS(LoadError(new_dir), "incomplete: no manifest.json");
  EXPECT_EQ(FindLatestCheckpoint(root), old_dir);
  EXPECT_EQ(FindLatestCheckpoint(root + "/nowhere"), "");
  EXPECT_EQ(NextCheckpointAttempt(root), 2);
}

TEST(CheckpointFilesTest, PruningKeepsTheNewestCompleteOnesAndDropsOlderIncompleteDirs) {
  const std::string root = FreshRoot("prune");
  Rig rig(2);
  for (int step : {2, 4, 6}) Save(rig, root, step, /*keep=*/10);
  fs::create_directories(fs::path(root) / CheckpointDirName(5, 1));  // an interrupted write
  fs::create_directories(fs::path(root) / CheckpointDirName(9, 1));  // newer than all: kept
  Save(rig, root, 8, /*keep=*/2);
  std::vector<std::string> left;
  for (const auto& d : ListCheckpointDirs(root)) left.push_back(fs::path(d.path).filename().string());
  EXPECT_EQ(left, (std::vector<std::string>{CheckpointDirName(6, 1), CheckpointDirName(8, 1), CheckpointDirName(9, 1)}));
}

TEST(CheckpointFilesTest, RefusesToWriteIntoACompleteCheckpointOfAnEarlierRun) {
  const std::string root = FreshRoot("rewrite");
  Rig rig(2);
  Save(rig, root, 4);
  try {
    Save(rig, root, 4);
    FAIL() << "second write of step 4 attempt 1 succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_HAS(std::string(e.what()), "already holds a complete checkpoint");
  }
}

class HostileCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Rig rig(2);
    dir_ = Save(rig, FreshRoot(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    rank0_ = (fs::path(dir_) / RankFileName(0)).string();
    ASSERT_EQ(LoadError(dir_), "(loaded)");
  }
  std::string dir_, rank0_;
};

TEST_F(HostileCheckpointTest, MissingRankFile) {
  fs::remove(rank0_);
  EXPECT_HAS(LoadError(dir_), "rank-00000.safetensors: listed in the manifest but missing");
}

TEST_F(HostileCheckpointTest, TruncatedRankFile) {
  fs::resize_file(rank0_, fs::file_size(rank0_) - 100);
  EXPECT_HAS(LoadError(dir_), "(truncated)");
}

TEST_F(HostileCheckpointTest, MalformedManifest) {
  std::ofstream(fs::path(dir_) / kManifestName, std::ios::trunc) << "{\"format\": \"trainyard-checkpoint-v1\", ";
  EXPECT_HAS(LoadError(dir_), "manifest is not valid JSON");
}

TEST_F(HostileCheckpointTest, NanStep) {
  EditManifest(dir_, [](json& m) { m["step"] = "NaN"; });
  EXPECT_HAS(LoadError(dir_), "field \"step\" must be an integer, got \"NaN\"");
  EditManifest(dir_, [](json& m) { m["step"] = 7.5; });
  EXPECT_HAS(LoadError(dir_), "field \"step\" must be an integer, got 7.5");
}

TEST_F(HostileCheckpointTest, ManifestInconsistencies) {
  EditManifest(dir_, [](json& m) { m["samples_consumed"] = 29; });
  EXPECT_HAS(LoadError(dir_), "samples_consumed 29 is not step 7 x global_batch 4");
  EditManifest(dir_, [](json& m) {
    m["step"] = 8;
    m["samples_consumed"] = 32;
  });
  EXPECT_HAS(LoadError(dir_), "but its directory is named \"step-00000007-attempt-1\"");
}

TEST_F(HostileCheckpointTest, DataPositionOfAnotherBatchOrSeed) {
  EXPECT_HAS(LoadError(dir_, {8, "synthetic", 42}), "was written with 4 samples per step");
  EXPECT_HAS(LoadError(dir_, {4, "synthetic", 43}), "seed 42, this run reads dataset \"synthetic\" seed 43");
}

TEST_F(HostileCheckpointTest, TensorNotCoveredFully) {
  RewriteRankFile(dir_, [](auto& tensors, json&) {
    for (auto& [name, t] : tensors) {
      if (name == "output.weight") t = t.narrow(0, 0, t.size(0) / 2).clone();
    }
  });
  EXPECT_HAS(LoadError(dir_), "tensor \"output.weight\": the checkpoint's slices cover 8192 of the 16384 elements");
}

TEST_F(HostileCheckpointTest, SliceOutsideItsGlobalShape) {
  RewriteRankFile(dir_, [](auto&, json& meta) { meta["slices"]["norm.weight"]["offsets"] = {1}; });
  EXPECT_HAS(LoadError(dir_), "tensor \"norm.weight\": slice at offsets [1] with shape [64] lies outside global_shape [64]");
}

TEST_F(HostileCheckpointTest, ShapeMismatchWithTheModel) {
  EXPECT_HAS(LoadError(dir_, kExpect, /*dim=*/32), "tensor \"tok_embeddings.weight\": has global shape [256, 64]");
}

TEST_F(HostileCheckpointTest, NameMismatchWithTheModel) {
  RewriteRankFile(dir_, [](auto& tensors, json& meta) {
    for (auto& [name, t] : tensors) {
      if (name == "norm.weight") name = "norm.wieght";
    }
    meta["slices"]["norm.wieght"] = meta["slices"]["norm.weight"];
    meta["slices"]["norm.wieght"]["name"] = "norm.wieght";
    meta["slices"].erase("norm.weight");
  });
  EXPECT_HAS(LoadError(dir_), "tensor \"norm.wieght\" is not in the model");
}

TEST_F(HostileCheckpointTest, WrongDtype) {
  RewriteRankFile(dir_, [](auto& tensors, json&) {
    for (auto& [name, t] : tensors) {
      if (name == "optim.v.norm.weight") t = t.to(torch::kFloat64);
    }
  });
  EXPECT_HAS(LoadError(dir_), "tensor \"optim.v.norm.weight\": has dtype Double");
}

TEST_F(HostileCheckpointTest, MetadataOfAnotherStep) {
  RewriteRankFile(dir_, [](auto&, json& meta) { meta["step"] = 6; });
  EXPECT_HAS(LoadError(dir_), "metadata says step 6 attempt 1 rank 0, the manifest step 7");
}

TEST_F(HostileCheckpointTest, RankFileWithoutCheckpointMetadata) {
  WriteSafetensors(rank0_, {{"norm.weight", torch::ones({64})}});
  EditManifest(dir_, [&](json& m) {
    const auto size = static_cast<int64_t>(fs::file_size(rank0_));
    m["files"][0]["bytes"] = size;
    m["total_bytes"] = size;
  });
  EXPECT_HAS(LoadError(dir_), "no trainyard.checkpoint metadata");
}

}  // namespace
}  // namespace trainyard::engine
