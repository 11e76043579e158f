// Import and export of Hugging Face model folders at a real model's shapes (default
// deepseek_v3_16b), with random weights generated on disk:
//   write-hf DIR     a bf16 save_pretrained-style folder of the model (config.json, shards
//                    of at most 5 GB, the index), random values;
//   import DIR       one rank of an expert-parallel layout (--ep, --rank) builds its model
//                    (its experts only) and loads the folder: seconds, bytes read, peak RSS
//                    before and after;
//   checkpoint DIR   a one-rank fp32 checkpoint of the model (its parameters only), for
//                    timing `trainyard export --names hf` on it.
// --layers N keeps the first N of the preset's layers (every tensor keeps its shape), so a
// run fits a small machine; the figures scale with the layers.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/spec/hf_config.h"
#include "common/spec/presets.h"
#include "worker/engine/checkpoint/checkpoint_writer.h"
#include "worker/engine/checkpoint/export_names.h"
#include "worker/engine/checkpoint/hf_checkpoint.h"
#include "worker/engine/checkpoint/train_state.h"
#include "worker/engine/io/safetensors_file.h"
#include "worker/engine/model/transformer_model.h"

namespace {

using namespace trainyard;
using namespace trainyard::engine;
namespace fs = std::filesystem;

double PeakRssGiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / (1024.0 * 1024.0);  // ru_maxrss is in KiB
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

struct Rank {
  spec::JobSpec spec;  // the real model
  TransformerModel model{nullptr};
  std::vector<StateTensor> state;  // this rank's tensors, under the real model's shapes
};

// The rank's model without a process group: a model of n_routed_experts / ep experts
// stands for this rank's share of the experts (the grouped tensors get the real global
// shape and this rank's offset), and the router and bias, whole on every rank, are
// allocated at the real expert count. The loader sees exactly the state a rank of the
// real layout has.
Rank Build(const std::string& preset, int layers, int ep, int rank) {
  Rank r;
  r.spec = spec::FromPreset(preset).value();
  if (layers > 0) r.spec.model.n_layers = layers;
  spec::ModelSpec local = r.spec.model;
  const int64_t experts = local.n_routed_experts;
  if (ep < 1 || experts % ep != 0) throw std::invalid_argument("--ep must divide the expert count");
  local.n_routed_experts = static_cast<int>(experts / ep);
  local.top_k = std::min(local.top_k, local.n_routed_experts);
  torch::NoGradGuard no_grad;
  r.model = TransformerModel(local, r.spec.training.seq_len);
  r.state = CollectModelState(*r.model);
  for (StateTensor& t : r.state) {
    if (IsGroupedExperts(t.name)) {
      t.global_shape[0] = experts;
      t.offsets[0] = rank * t.local.size(0);
    } else if (t.name.find("moe.router.gate.weight") != std::string::npos) {
      t.local = torch::empty({experts, t.local.size(1)});
      t.global_shape = {experts, t.local.size(1)};
    } else if (t.name.find("moe.expert_bias") != std::string::npos) {
      t.local = torch::zeros({experts});
      t.global_shape = {experts};
    }
  }
  return r;
}

int64_t Bytes(const std::vector<StateTensor>& state, int64_t item) {
  int64_t n = 0;
  for (const StateTensor& t : state) n += t.local.numel() * item;
  return n;
}

void WriteHf(Rank& r, const std::string& dir) {
  std::vector<StateTensor> state = std::move(r.state);
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << spec::HuggingFaceConfigJson(r.spec).value();
  // Every HF tensor of the whole model (all experts, whatever this rank holds).
  std::vector<std::pair<std::string, std::vector<int64_t>>> all;
  for (const StateTensor& t : state) {
    if (IsGroupedExperts(t.name)) {
      for (int64_t e = 0; e < t.global_shape[0]; ++e) {
        all.push_back({HuggingFaceName(t.name, e), {t.global_shape[1], t.global_shape[2]}});
      }
    } else {
      all.push_back({HuggingFaceName(t.name), t.global_shape});
    }
  }
  state.clear();
  r.model = TransformerModel(nullptr);  // only the names and shapes are needed now
  constexpr int64_t kShard = 5'000'000'000;
  std::vector<std::vector<size_t>> shards(1);
  int64_t in = 0, total = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    int64_t bytes = 2;
    for (int64_t d : all[i].second) bytes *= d;
    if (in > 0 && in + bytes > kShard) {
      shards.emplace_back();
      in = 0;
    }
    shards.back().push_back(i);
    in += bytes;
    total += bytes;
  }
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  const auto start = std::chrono::steady_clock::now();
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    for (size_t i : shards[s]) {
      tensors.push_back({all[i].first, torch::empty(all[i].second, torch::kBFloat16).uniform_(-0.02, 0.02)});
      map[all[i].first] = name;
    }
    WriteSafetensors(dir + "/" + name, tensors);
    std::printf("wrote %s (%zu tensors)\n", name, tensors.size());
  }
  std::ofstream(dir + "/model.safetensors.index.json")
      << nlohmann::ordered_json{{"metadata", {{"total_size", total}}}, {"weight_map", map}}.dump(2);
  std::printf("write-hf: %zu tensors, %.2f GB of bf16 in %zu shards, %.1f s\n", all.size(), total / 1e9, shards.size(),
              Seconds(start));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Hugging Face folder import/export figures at a real model's shapes (random weights)"};
  std::string mode, dir, preset = "deepseek_v3_16b";
  int layers = 0, ep = 1, rank = 0;
  app.add_option("mode", mode, "write-hf | import | checkpoint")
      ->required()
      ->check(CLI::IsMember({"write-hf", "import", "checkpoint"}));
  app.add_option("dir", dir, "The folder to write or read")->required();
  app.add_option("--preset", preset, "Model preset")->capture_default_str();
  app.add_option("--layers", layers, "Keep the first N layers (0: all)");
  app.add_option("--ep", ep, "Expert-parallel degree of the rank built")->capture_default_str();
  app.add_option("--rank", rank, "Which rank (its experts)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    auto start = std::chrono::steady_clock::now();
    Rank r = Build(preset, layers, ep, rank);
    std::vector<StateTensor>& state = r.state;
    std::printf(
        "model: %s, %d layers, rank %d of ep=%d: %zu tensors, %.2f GB fp32 held, built in %.1f s, peak RSS "
        "%.2f GiB\n",
        preset.c_str(), r.spec.model.n_layers, rank, ep, state.size(), Bytes(state, 4) / 1e9, Seconds(start),
        PeakRssGiB());
    if (mode == "write-hf") {
      WriteHf(r, dir);
    } else if (mode == "import") {
      const double before = PeakRssGiB();
      start = std::chrono::steady_clock::now();
      const std::string loaded = LoadHuggingFaceWeights(dir, r.spec.model, state);
      const double s = Seconds(start);
      std::printf(
          "import: %s\n  %.2f GB of bf16 read in %.1f s (%.2f GB/s); peak RSS %.2f GiB before the load, %.2f "
          "GiB after\n",
          loaded.c_str(), Bytes(state, 2) / 1e9, s, Bytes(state, 2) / 1e9 / s, before, PeakRssGiB());
    } else {
      for (StateTensor& t : state) t.owned = true;
      CheckpointWriterOptions o;
      o.root = dir;
      CheckpointWriter writer(o);
      start = std::chrono::steady_clock::now();
      CheckpointStep step;
      step.step = 1;
      step.optimizer_step = 1;
      step.global_batch = 1;
      step.dataset = "synthetic";
      writer.Save(step, state);
      writer.Wait();
      std::printf("checkpoint: %.2f GB fp32 written in %.1f s\n", Bytes(state, 4) / 1e9, Seconds(start));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainyard-hf-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
