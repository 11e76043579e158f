// The torch-free export (worker/engine/checkpoint/checkpoint_export.h) on checkpoints
// written by hand (synthetic_checkpoint.h): every exported tensor equals the full
// tensor computed independently from its definition, whatever the split (rows,
// columns, experts, a run longer than the copy buffer); optimizer moments and RNG
// states are left out; Hugging Face names split the experts; and hostile inputs (no
// checkpoint, an absent --step, a truncated shard, a manifest naming a missing file,
// overlapping or missing slices, an output folder that does not exist, an output that
// exists) are refused with a message naming the problem, leaving nothing half-written.
#include "worker/engine/checkpoint/checkpoint_export.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/worker/engine/checkpoint/synthetic_checkpoint.h"
#include "worker/engine/checkpoint/export_names.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;
using testing::ExpectedBytes;
using testing::ReadRawSafetensors;
using testing::SyntheticSlice;
using testing::WriteSyntheticCheckpoint;

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

constexpr int64_t kBig = 1100000;  // a row of 4.4 MB: longer than the 4 MiB copy buffer

// Two ranks of a dp=2 ep=2 job: rows, columns and experts split between them.
std::vector<std::vector<SyntheticSlice>> TwoRanks(bool big = false) {
  std::vector<SyntheticSlice> r0 = {
      {"tok_embeddings.weight", {6, 4}, {0, 0}, {6, 4}},
      {"layers.0.attention.wq.weight", {8, 4}, {0, 0}, {4, 4}},
      {"layers.0.attention.wo.weight", {4, 8}, {0, 0}, {4, 4}},
      {"layers.1.moe.experts.w1", {4, 3, 4}, {0, 0, 0}, {2, 3, 4}},
      {"layers.1.moe.experts.w2", {4, 4, 3}, {0, 0, 0}, {2, 4, 3}},
      {"norm.weight", {4}, {0}, {4}},
      {"output.weight", {6, 4}, {0, 0}, {6, 4}},
      {"optim.m.tok_embeddings.weight", {6, 4}, {0, 0}, {6, 4}},
      {"layers.1.moe.expert_bias", {4}, {0}, {4}},
  };
  std::vector<SyntheticSlice> r1 = {
      {"layers.0.attention.wq.weight", {8, 4}, {4, 0}, {4, 4}},
      {"layers.0.attention.wo.weight", {4, 8}, {0, 4}, {4, 4}},
      {"layers.1.moe.experts.w1", {4, 3, 4}, {2, 0, 0}, {2, 3, 4}},
      {"layers.1.moe.experts.w2", {4, 4, 3}, {2, 0, 0}, {2, 4, 3}},
  };
  if (big) {
    r0.push_back({"layers.0.feed_forward.w1.weight", {2, kBig}, {0, 0}, {1, kBig}});
    r1.push_back({"layers.0.feed_forward.w1.weight", {2, kBig}, {1, 0}, {1, kBig}});
  }
  return {r0, r1};
}

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "ckexport_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(root_ + "/out");
  }
  void TearDown() override { fs::remove_all(root_); }

  absl::StatusOr<ExportResult> Export(const std::string& checkpoint, const std::string& out,
                                      ExportNames names = ExportNames::kTorchtitan, std::optional<int64_t> step = {},
                                      bool force = false) {
    ExportOptions o;
    o.checkpoint = checkpoint;
    o.output = out;
    o.names = names;
    o.step = step;
    o.force = force;
    o.metadata["trainyard.job_id"] = "job-7";
    return ExportCheckpoint(o);
  }
  // Every entry of the output folder (a temporary file left behind shows up here).
  std::vector<std::string> OutFiles() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(root_ + "/out")) names.push_back(e.path().filename().string());
    return names;
  }

  std::string root_;
};

TEST_F(ExportTest, EveryModelTensorEqualsTheFullTensorAndTrainingStateIsLeftOut) {
  WriteSyntheticCheckpoint(root_ + "/ck", 5, TwoRanks(), /*ep=*/2);
  const std::string dir10 = WriteSyntheticCheckpoint(root_ + "/ck", 10, TwoRanks(/*big=*/true), /*ep=*/2);
  const std::string out = root_ + "/out/model.safetensors";
  absl::StatusOr<ExportResult> r = Export(root_ + "/ck", out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->checkpoint_dir, dir10);  // the newest complete checkpoint
  EXPECT_EQ(r->step, 10);
  const auto file = ReadRawSafetensors(out);
  // The writer's order (rank 0's data order, then what only rank 1 holds), without
  // optim.* and rng.*.
  EXPECT_EQ(file.names, (std::vector<std::string>{"tok_embeddings.weight", "layers.0.attention.wq.weight",
                                                  "layers.0.attention.wo.weight", "layers.1.moe.experts.w1",
                                                  "layers.1.moe.experts.w2", "norm.weight", "output.weight",
                                                  "layers.1.moe.expert_bias", "layers.0.feed_forward.w1.weight"}));
  EXPECT_EQ(r->tensors, file.names.size());
  EXPECT_EQ(r->bytes, fs::file_size(out));
  for (const auto& name : file.names) {
    const auto& t = file.tensors.at(name);
    EXPECT_EQ(t.dtype, "F32") << name;
    EXPECT_TRUE(t.bytes == ExpectedBytes(name, t.shape)) << name << " differs from the full tensor";
  }
  EXPECT_EQ(file.tensors.at("layers.0.attention.wo.weight").shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(file.tensors.at("layers.0.feed_forward.w1.weight").shape, (std::vector<int64_t>{2, kBig}));
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(file.metadata.at("trainyard.step"), "10");
  EXPECT_EQ(file.metadata.at("trainyard.job_id"), "job-7");
  EXPECT_EQ(file.metadata.at("trainyard.source"), dir10);
  EXPECT_EQ(file.metadata.at("trainyard.names"), "torchtitan");
  EXPECT_EQ(file.metadata.count("trainyard.checkpoint"), 0u) << "an export must not pass for a rank file";
  EXPECT_EQ(OutFiles(), std::vector<std::string>{"model.safetensors"});
}

TEST_F(ExportTest, StepPicksThatCheckpointAndAnAbsentStepListsTheStepsPresent) {
  WriteSyntheticCheckpoint(root_ + "/ck", 5, TwoRanks(), 2);
  WriteSyntheticCheckpoint(root_ + "/ck", 10, TwoRanks(), 2);
  fs::create_directories(root_ + "/ck/" + CheckpointDirName(15, 1));  // incomplete
  absl::StatusOr<ExportResult> r = Export(root_ + "/ck", root_ + "/out/m5.safetensors", ExportNames::kTorchtitan, 5);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step, 5);
  r = Export(root_ + "/ck", root_ + "/out/m7.safetensors", ExportNames::kTorchtitan, 7);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_HAS(r.status().message(), "no complete checkpoint of step 7");
  EXPECT_HAS(r.status().message(), "steps present: 5, 10; incomplete (no manifest.json): step-00000015-attempt-1");
  // Without --step the incomplete newest directory is passed over.
  r = Export(root_ + "/ck", root_ + "/out/m.safetensors");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step, 10);
  // A checkpoint directory given directly, and a --step it is not.
  r = Export(root_ + "/ck/" + CheckpointDirName(10, 1), root_ + "/out/m5.safetensors", ExportNames::kTorchtitan, 5,
             /*force=*/true);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_HAS(r.status().message(), "is the checkpoint of step 10, not 5");
}

TEST_F(ExportTest, HuggingFaceNamesSplitTheExperts) {
  WriteSyntheticCheckpoint(root_ + "/ck", 10, TwoRanks(), 2);
  const std::string out = root_ + "/out/hf.safetensors";
  absl::StatusOr<ExportResult> r = Export(root_ + "/ck", out, ExportNames::kHuggingFace);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto file = ReadRawSafetensors(out);
  EXPECT_EQ(file.metadata.at("trainyard.names"), "hf");
  std::vector<std::string> want = {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                                   "model.layers.0.self_attn.o_proj.weight"};
  for (int e = 0; e < 4; ++e) want.push_back("model.layers.1.mlp.experts." + std::to_string(e) + ".gate_proj.weight");
  for (int e = 0; e < 4; ++e) want.push_back("model.layers.1.mlp.experts." + std::to_string(e) + ".down_proj.weight");
  for (const char* n : {"model.norm.weight", "lm_head.weight", "model.layers.1.mlp.gate.e_score_correction_bias"}) {
    want.push_back(n);
  }
  EXPECT_EQ(file.names, want);
  const std::string w1 = ExpectedBytes("layers.1.moe.experts.w1", {4, 3, 4});
  const std::string w2 = ExpectedBytes("layers.1.moe.experts.w2", {4, 4, 3});
  for (int e = 0; e < 4; ++e) {
    const auto& gate = file.tensors.at("model.layers.1.mlp.experts." + std::to_string(e) + ".gate_proj.weight");
    EXPECT_EQ(gate.shape, (std::vector<int64_t>{3, 4}));  // [out=hidden, in=dim]: HF Linear's orientation
    EXPECT_TRUE(gate.bytes == w1.substr(e * 12 * 4, 12 * 4)) << "expert " << e;
    const auto& down = file.tensors.at("model.layers.1.mlp.experts." + std::to_string(e) + ".down_proj.weight");
    EXPECT_EQ(down.shape, (std::vector<int64_t>{4, 3}));
    EXPECT_TRUE(down.bytes == w2.substr(e * 12 * 4, 12 * 4)) << "expert " << e;
  }
  EXPECT_TRUE(file.tensors.at("lm_head.weight").bytes == ExpectedBytes("output.weight", {6, 4}));
  EXPECT_EQ(HuggingFaceName("layers.3.moe.shared_experts.w2.weight"),
            "model.layers.3.mlp.shared_experts.down_proj.weight");
  EXPECT_EQ(HuggingFaceName("layers.0.ffn_norm.weight"), "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(HuggingFaceName("layers.2.moe.router.gate.weight"), "model.layers.2.mlp.gate.weight");
  EXPECT_EQ(HuggingFaceName("layers.x.attention.wq.weight"), "");
}

// A Qwen3-MoE checkpoint (its key norm marks it): q and k rows split over two ranks,
// exported to a Hugging Face folder of several shards.
std::vector<std::vector<SyntheticSlice>> QwenRanks(bool bias_trained) {
  // Heads of 4 rows: wq has 2 heads (8 rows), wk 1 head; q_norm/k_norm one head.
  std::vector<SyntheticSlice> r0 = {
      {"tok_embeddings.weight", {6, 4}, {0, 0}, {6, 4}},
      {"layers.0.attention.wq.weight", {8, 4}, {0, 0}, {4, 4}},
      {"layers.0.attention.wk.weight", {4, 4}, {0, 0}, {4, 4}},
      {"layers.0.attention.q_norm.weight", {4}, {0}, {4}},
      {"layers.0.attention.k_norm.weight", {4}, {0}, {4}},
      {"layers.0.moe.experts.w1", {2, 3, 4}, {0, 0, 0}, {1, 3, 4}},
      {"norm.weight", {4}, {0}, {4}},
      {"output.weight", {6, 4}, {0, 0}, {6, 4}},
  };
  std::vector<SyntheticSlice> r1 = {
      {"layers.0.attention.wq.weight", {8, 4}, {4, 0}, {4, 4}},
      {"layers.0.moe.experts.w1", {2, 3, 4}, {1, 0, 0}, {1, 3, 4}},
  };
  if (bias_trained) r0.push_back({"layers.0.moe.expert_bias", {2}, {0}, {2}});
  return {r0, r1};
}

// The rows of `name`'s full tensor [rows, cols] in rotate-half order within heads of
// `head` rows: 0, 2, ..., then 1, 3, ... (computed here, not with the code's table).
std::string RotateHalfBytes(const std::string& name, int64_t rows, int64_t cols, int64_t head) {
  const std::string full = ExpectedBytes(name, {rows, cols});
  std::string out;
  for (int64_t h = 0; h < rows; h += head) {
    for (int parity = 0; parity < 2; ++parity) {
      for (int64_t k = parity; k < head; k += 2) out += full.substr(static_cast<size_t>((h + k) * cols * 4), cols * 4);
    }
  }
  return out;
}

TEST_F(ExportTest, AQwenFolderHasConfigShardsAnIndexAndRotateHalfRows) {
  WriteSyntheticCheckpoint(root_ + "/ck", 10, QwenRanks(false), 2);
  ExportOptions o;
  o.checkpoint = root_ + "/ck";
  o.output = root_ + "/out/qwen";
  o.names = ExportNames::kHuggingFace;
  o.hf_config_json = "{\"model_type\": \"qwen3_moe\"}\n";
  o.max_shard_bytes = 100;  // several shards: the 96-byte embedding fills one
  absl::StatusOr<ExportResult> r = ExportCheckpoint(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(OutFiles(), std::vector<std::string>{"qwen"}) << "no temporary folder left";
  std::ifstream config(o.output + "/config.json");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(config), {}), o.hf_config_json);
  std::ifstream index_file(o.output + "/model.safetensors.index.json");
  const nlohmann::json index = nlohmann::json::parse(index_file);
  std::map<std::string, testing::RawTensor> all;
  int64_t total = 0;
  std::set<std::string> shards;
  for (const auto& [name, file] : index.at("weight_map").items()) {
    shards.insert(file.get<std::string>());
    const auto raw = ReadRawSafetensors(o.output + "/" + file.get<std::string>());
    ASSERT_EQ(raw.tensors.count(name), 1u) << name << " is not in " << file;
    all[name] = raw.tensors.at(name);
    total += static_cast<int64_t>(raw.tensors.at(name).bytes.size());
  }
  EXPECT_GT(shards.size(), 2u);
  EXPECT_EQ(*shards.begin(), "model-00001-of-0000" + std::to_string(shards.size()) + ".safetensors");
  EXPECT_EQ(index.at("metadata").at("total_size").get<int64_t>(), total);
  EXPECT_EQ(all.size(), 9u);  // 8 tensors, the grouped experts as 2; no router bias
  EXPECT_TRUE(all.at("model.layers.0.self_attn.q_proj.weight").bytes ==
              RotateHalfBytes("layers.0.attention.wq.weight", 8, 4, 4));
  EXPECT_TRUE(all.at("model.layers.0.self_attn.k_proj.weight").bytes ==
              RotateHalfBytes("layers.0.attention.wk.weight", 4, 4, 4));
  EXPECT_TRUE(all.at("model.layers.0.self_attn.q_norm.weight").bytes ==
              RotateHalfBytes("layers.0.attention.q_norm.weight", 4, 1, 4));
  EXPECT_TRUE(all.at("model.layers.0.self_attn.k_norm.weight").bytes ==
              RotateHalfBytes("layers.0.attention.k_norm.weight", 4, 1, 4));
  EXPECT_TRUE(all.at("model.layers.0.mlp.experts.1.gate_proj.weight").bytes ==
              ExpectedBytes("layers.0.moe.experts.w1", {2, 3, 4}).substr(48, 48));
  EXPECT_TRUE(all.at("lm_head.weight").bytes == ExpectedBytes("output.weight", {6, 4}));

  // Again over it: refused without --force, replaced with it.
  r = ExportCheckpoint(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  o.force = true;
  o.max_shard_bytes = 1 << 20;
  r = ExportCheckpoint(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(fs::exists(o.output + "/model-00001-of-00001.safetensors"));
  EXPECT_FALSE(fs::exists(o.output + "/model-00002-of-00003.safetensors")) << "the old folder's shards are gone";
  EXPECT_EQ(OutFiles(), std::vector<std::string>{"qwen"});
}

TEST_F(ExportTest, AFolderNeedsHfNamesAndAConfigAndATrainedQwenRouterBiasIsRefused) {
  WriteSyntheticCheckpoint(root_ + "/ck", 10, QwenRanks(true), 2);
  ExportOptions o;
  o.checkpoint = root_ + "/ck";
  o.output = root_ + "/out/qwen";
  absl::StatusOr<ExportResult> r = ExportCheckpoint(o);  // torchtitan names into a folder
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_HAS(r.status().message(), "a folder export is a Hugging Face model (--names hf)");
  o.names = ExportNames::kHuggingFace;
  r = ExportCheckpoint(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_HAS(r.status().message(), "needs the model's config.json");
  o.hf_config_json = "{}";
  r = ExportCheckpoint(o);  // SyntheticValue makes the bias non-zero
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_HAS(r.status().message(), "is a router bias the job trained (model.load_balance_coeff > 0)");
  EXPECT_TRUE(OutFiles().empty()) << "nothing half-written";
}

TEST_F(ExportTest, ATensorWithoutAHuggingFaceNameIsRefused) {
  auto ranks = TwoRanks();
  ranks[0].push_back({"layers.1.moe.tokens_per_expert", {4}, {0}, {4}});
  WriteSyntheticCheckpoint(root_ + "/ck", 10, ranks, 2);
  absl::StatusOr<ExportResult> r = Export(root_ + "/ck", root_ + "/out/hf.safetensors", ExportNames::kHuggingFace);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_HAS(r.status().message(),
             "tensor \"layers.1.moe.tokens_per_expert\": has no Hugging Face name (export it with --names torchtitan)");
  EXPECT_TRUE(OutFiles().empty());
}

TEST_F(ExportTest, NoCheckpointAtAll) {
  fs::create_directories(root_ + "/empty/" + CheckpointDirName(5, 1));  // incomplete only
  absl::StatusOr<ExportResult> r = Export(root_ + "/empty", root_ + "/out/m.safetensors");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_HAS(r.status().message(), "no complete checkpoint under");
  EXPECT_HAS(r.status().message(), "incomplete (no manifest.json): step-00000005-attempt-1");
  r = Export(root_ + "/empty/" + CheckpointDirName(5, 1), root_ + "/out/m.safetensors");
  EXPECT_HAS(r.status().message(), "is incomplete: no manifest.json");
  r = Export(root_ + "/nowhere", root_ + "/out/m.safetensors");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_HAS(r.status().message(), "checkpoint folder '" + root_ + "/nowhere' does not exist");
  EXPECT_TRUE(OutFiles().empty());
}

TEST_F(ExportTest, TruncatedShardAndMissingFileAreRefusedAndNothingIsWritten) {
  const std::string dir = WriteSyntheticCheckpoint(root_ + "/ck", 10, TwoRanks(), 2);
  const std::string rank1 = dir + "/" + RankFileName(1);
  const auto size = fs::file_size(rank1);
  fs::resize_file(rank1, size - 7);
  absl::StatusOr<ExportResult> r = Export(root_ + "/ck", root_ + "/out/m.safetensors");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_HAS(r.status().message(), rank1 + ": is " + std::to_string(size - 7) + " bytes, the manifest lists " +
                                       std::to_string(size) + " (truncated)");
  fs::remove(rank1);
  r = Export(root_ + "/ck", root_ + "/out/m.safetensors");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_HAS(r.status().message(), rank1 + ": listed in the manifest but missing");
  EXPECT_TRUE(OutFiles().empty());
}

TEST_F(ExportTest, OverlappingOrMissingSlicesAreRefused) {
  auto overlap = TwoRanks();
  overlap[1][0].offsets = {3, 0};  // rows 3..6 of wq: row 3 twice, row 7 never
  WriteSyntheticCheckpoint(root_ + "/a", 10, overlap, 2);
  absl::StatusOr<ExportResult> r = Export(root_ + "/a", root_ + "/out/m.safetensors");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_HAS(r.status().message(),
             "tensor \"layers.0.attention.wq.weight\": slices overlap: offsets [3, 0] shape [4, 4]");
  auto gap = TwoRanks();
  gap[1].erase(gap[1].begin() + 1);  // rank 1's half of wo
  WriteSyntheticCheckpoint(root_ + "/b", 10, gap, 2);
  r = Export(root_ + "/b", root_ + "/out/m.safetensors");
  EXPECT_HAS(r.status().message(),
             "tensor \"layers.0.attention.wo.weight\": the checkpoint's slices cover 16 of its 32 elements");
  EXPECT_TRUE(OutFiles().empty());
}

TEST_F(ExportTest, OutputFolderMissingOrOutputExisting) {
  WriteSyntheticCheckpoint(root_ + "/ck", 10, TwoRanks(), 2);
  absl::StatusOr<ExportResult> r = Export(root_ + "/ck", root_ + "/out/no/such/m.safetensors");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_HAS(r.status().message(), "output folder '" + root_ + "/out/no/such' does not exist");
  EXPECT_FALSE(fs::exists(root_ + "/out/no"));
  const std::string out = root_ + "/out/m.safetensors";
  std::ofstream(out) << "precious";
  r = Export(root_ + "/ck", out);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_HAS(r.status().message(), "exists (give --force to replace it)");
  EXPECT_EQ(fs::file_size(out), 8u) << "left untouched";
  r = Export(root_ + "/ck", out, ExportNames::kTorchtitan, std::nullopt, /*force=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(ReadRawSafetensors(out).names.size(), 8u);
  r = Export(root_ + "/ck", root_ + "/out");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_HAS(r.status().message(), "is a folder (no .safetensors suffix)");
  fs::create_directories(root_ + "/out/dir.safetensors");
  r = Export(root_ + "/ck", root_ + "/out/dir.safetensors");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_HAS(r.status().message(), "is a directory");
  fs::remove(root_ + "/out/dir.safetensors");
  r = Export(root_ + "/ck", root_ + "/ck/" + CheckpointDirName(10, 1) + "/m.safetensors");
  EXPECT_HAS(r.status().message(), "is inside the checkpoint it exports");
  EXPECT_EQ(OutFiles(), std::vector<std::string>{"m.safetensors"});
}

}  // namespace
}  // namespace trainyard::engine
