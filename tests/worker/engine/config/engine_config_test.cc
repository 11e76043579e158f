#include <stdexcept>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/version.h>

#include "worker/engine/config/engine_config.h"
#include "worker/engine/parallel/mesh/device_placement.h"

namespace trainyard::engine {
namespace {

const char* kSpec = R"({"job":{"name":"demo","priority":0},"model":{"preset":"debug","vocab_size":2048,"dim":256,"n_layers":4,"n_dense_layers":1,"n_heads":8,"n_kv_heads":4,"ffn_hidden":768,"n_routed_experts":8,"top_k":2,"n_shared_experts":1,"expert_hidden":256,"score_func":"sigmoid","route_norm":true,"route_scale":1,"rope_theta":10000,"norm_eps":1e-05,"load_balance_coeff":0.001},"training":{"steps":20,"batch_size":8,"seq_len":256,"lr":0.0008,"warmup_steps":2,"max_norm":1,"seed":"42","dataset":"synthetic","dataset_path":"","log_freq":1},"parallelism":{"dp":2,"tp":1,"ep":1,"collective_timeout_s":300},"compile":{"backend":"eager"},"activation_checkpoint":{"mode":"none"}})";

std::string ErrorOf(const nlohmann::json& spec) {
  try {
    ParseEngineConfig(spec.dump());
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(EngineConfigTest, ParsesNormalisedJobSpec) {
  EngineConfig c = ParseEngineConfig(kSpec);
  EXPECT_EQ(c.model.preset, "debug");
  EXPECT_EQ(c.model.vocab_size, 2048);
  EXPECT_EQ(c.model.n_kv_heads, 4);
  EXPECT_EQ(c.model.head_dim(), 32);
  EXPECT_DOUBLE_EQ(c.model.norm_eps, 1e-5);
  EXPECT_EQ(c.training.seed, 42u);
  EXPECT_DOUBLE_EQ(c.training.lr, 0.0008);
  EXPECT_EQ(c.parallelism.dp, 2);
  EXPECT_DOUBLE_EQ(c.parallelism.collective_timeout_s, 300);
}

TEST(EngineConfigTest, SeedAcceptsNumberAndLargeString) {
  auto spec = nlohmann::json::parse(kSpec);
  spec["training"]["seed"] = 7;
  EXPECT_EQ(ParseEngineConfig(spec.dump()).training.seed, 7u);
  spec["training"]["seed"] = "18446744073709551615";
  EXPECT_EQ(ParseEngineConfig(spec.dump()).training.seed, 18446744073709551615ull);
  spec["training"]["seed"] = "x1";
  EXPECT_NE(ErrorOf(spec).find("training.seed"), std::string::npos);
}

TEST(EngineConfigTest, KeysNotGivenGetThePresetAndDefaults) {
  // A rank applies the same presets and defaults as the controller (the spec core).
  auto spec = nlohmann::json::parse(kSpec);
  spec["training"].erase("steps");
  spec["model"] = {{"preset", "tiny"}};
  const EngineConfig c = ParseEngineConfig(spec.dump());
  EXPECT_EQ(c.training.steps, 100);
  EXPECT_EQ(c.model.dim, 64);
  EXPECT_EQ(c.model.vocab_size, 256);
}

TEST(EngineConfigTest, UnknownSectionsAndKeysAreRefused) {
  auto spec = nlohmann::json::parse(kSpec);
  spec["unknown_section"] = {{"x", 1}};
  EXPECT_EQ(ErrorOf(spec).rfind("config: unknown section [unknown_section]", 0), 0u) << ErrorOf(spec);
  spec = nlohmann::json::parse(kSpec);
  spec["model"]["dimm"] = 3;
  EXPECT_EQ(ErrorOf(spec), "config: unknown key model.dimm (did you mean model.dim?)");
}

TEST(EngineConfigTest, TinyEngineConfigIsTheTinyPresetWithTestSchedule) {
  const EngineConfig c = TinyEngineConfig();
  EXPECT_EQ(c.model.preset, "tiny");
  EXPECT_EQ(c.model.dim, 64);
  EXPECT_EQ(c.model.n_routed_experts, 4);
  EXPECT_EQ(c.training.seq_len, 32);
  EXPECT_EQ(c.training.batch_size, 4);
  EXPECT_EQ(c.training.steps, 10);
  EXPECT_DOUBLE_EQ(c.training.lr, 3e-3);
  EXPECT_EQ(c.training.warmup_steps, 2);
}

TEST(EngineConfigTest, AcceptsTensorAndExpertParallelismThatDivides) {
  auto spec = nlohmann::json::parse(kSpec);
  spec["parallelism"]["tp"] = 2;
  spec["parallelism"]["ep"] = 4;
  const EngineConfig c = ParseEngineConfig(spec.dump());
  EXPECT_EQ(c.parallelism.world_size(), 4);  // EP is carved from dp·tp
  spec["parallelism"]["tp"] = 3;
  EXPECT_EQ(ErrorOf(spec), "config: parallelism.tp=3 must divide model.n_heads=8 and model.n_kv_heads=4");
  spec["parallelism"]["tp"] = 1;
  spec["parallelism"]["ep"] = 4;  // dp·tp = 2
  EXPECT_EQ(ErrorOf(spec), "config: parallelism.ep=4 must divide dp*tp=2");
  spec["parallelism"]["ep"] = 3;
  EXPECT_EQ(ErrorOf(spec), "config: parallelism.ep=3 must divide model.n_routed_experts=8");
}

TEST(EngineConfigTest, RejectsBadValues) {
  auto spec = nlohmann::json::parse(kSpec);
  spec = nlohmann::json::parse(kSpec);
  spec["model"]["top_k"] = 9;
  EXPECT_EQ(ErrorOf(spec), "config: model.top_k must be in [1, model.n_routed_experts=8], got 9");
  spec = nlohmann::json::parse(kSpec);
  spec["model"]["n_kv_heads"] = 3;
  EXPECT_NE(ErrorOf(spec).find("n_kv_heads"), std::string::npos);
  spec = nlohmann::json::parse(kSpec);
  spec["training"]["dataset"] = "imagenet";
  EXPECT_EQ(ErrorOf(spec), "config: training.dataset: unknown value \"imagenet\" (known: synthetic, text, tokens)");
  spec = nlohmann::json::parse(kSpec);
  spec["training"]["lr"] = 20;
  EXPECT_EQ(ErrorOf(spec), "config: training.lr must be in (0, 10], got 20");
}

TEST(EngineConfigTest, DeviceDefaultsToCpuAndReadsResourcesDevice) {
  auto spec = nlohmann::json::parse(kSpec);
  EXPECT_EQ(ParseEngineConfig(spec.dump()).resources.device, "cpu");  // no [resources]
  spec["resources"] = {{"device", "cuda"}, {"ranks_per_worker", 0}};
  EXPECT_EQ(ParseEngineConfig(spec.dump()).resources.device, "cuda");
  spec["resources"]["device"] = "cpu";
  EXPECT_EQ(ParseEngineConfig(spec.dump()).resources.device, "cpu");
  spec["resources"]["device"] = nullptr;  // proto3 JSON: unset
  EXPECT_EQ(ParseEngineConfig(spec.dump()).resources.device, "cpu");
}

TEST(EngineConfigTest, RejectsAnUnknownDevice) {
  auto spec = nlohmann::json::parse(kSpec);
  spec["resources"] = {{"device", "tpu"}};
  EXPECT_EQ(ErrorOf(spec), "config: resources.device: unknown value \"tpu\" (known: cpu, cuda)");
  spec["resources"]["device"] = 1;
  EXPECT_EQ(ErrorOf(spec), "config: resources.device: expected string, got integer");
}

std::string DeviceError(const std::string& device) {
  ResourcesConfig resources;
  resources.device = device;
  try {
    DevicePlacement::RequireUsable(resources);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(DevicePlacementTest, CpuIsAlwaysUsable) {
  EXPECT_EQ(DeviceError("cpu"), "");
  ResourcesConfig cpu;
  EXPECT_EQ(DevicePlacement::ForLocalRank(cpu, 3), c10::Device(c10::DeviceType::CPU));
}

TEST(DevicePlacementTest, CudaIsRefusedWithTheReasonWhereThereIsNone) {
#if !defined(TRAINYARD_TORCH_CUDA)
  // A LibTorch built without CUDA (not the pinned wheel, which has it).
  EXPECT_EQ(DeviceError("cuda"), std::string("config: resources.device=cuda: this engine was built against LibTorch ") +
                                     TORCH_VERSION + " without CUDA");
  ResourcesConfig cuda;
  cuda.device = "cuda";
  EXPECT_THROW(DevicePlacement::ForLocalRank(cuda, 0), std::invalid_argument);
#else
  if (torch::cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is visible";
  EXPECT_NE(DeviceError("cuda").find("no CUDA device is visible (torch::cuda::device_count()=0"), std::string::npos)
      << DeviceError("cuda");
#endif
  EXPECT_NE(DeviceError("gpu").find("resources.device=\"gpu\""), std::string::npos);
}

}  // namespace
}  // namespace trainyard::engine
