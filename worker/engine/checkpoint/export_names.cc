#include "worker/engine/checkpoint/export_names.h"

#include <cctype>
#include <map>

#include "common/base/text.h"

namespace trainyard::engine {
namespace {

// torchtitan suffix after "layers.<i>." -> the Hugging Face suffix after
// "model.layers.<i>.". The attention is GQA with separate q, k, v projections (not
// DeepSeek-V3's MLA), so it takes the q/k/v/o_proj names HF uses for such attention.
const std::map<std::string, std::string>& LayerMap() {
  static const auto* map = new std::map<std::string, std::string>{
      {"attention.wq.weight", "self_attn.q_proj.weight"},
      {"attention.wk.weight", "self_attn.k_proj.weight"},
      {"attention.wv.weight", "self_attn.v_proj.weight"},
      {"attention.wo.weight", "self_attn.o_proj.weight"},
      {"attention_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
      {"feed_forward.w3.weight", "mlp.up_proj.weight"},
      {"feed_forward.w2.weight", "mlp.down_proj.weight"},
      {"moe.router.gate.weight", "mlp.gate.weight"},
      {"moe.expert_bias", "mlp.gate.e_score_correction_bias"},
      {"moe.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},
      {"moe.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"},
      {"moe.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"},
  };
  return *map;
}

// Grouped experts: "moe.experts.w1" -> "mlp.experts.<j>." + this.
const std::map<std::string, std::string>& ExpertMap() {
  static const auto* map = new std::map<std::string, std::string>{
      {"moe.experts.w1", "gate_proj.weight"},
      {"moe.experts.w3", "up_proj.weight"},
      {"moe.experts.w2", "down_proj.weight"},
  };
  return *map;
}

// "layers.<digits>.<rest>": sets *layer and *rest.
bool SplitLayer(const std::string& name, std::string* layer, std::string* rest) {
  constexpr std::string_view kPrefix = "layers.";
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  size_t i = kPrefix.size();
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == kPrefix.size() || i >= name.size() || name[i] != '.') return false;
  *layer = name.substr(kPrefix.size(), i - kPrefix.size());
  *rest = name.substr(i + 1);
  return true;
}

bool IsGroupedExperts(const std::string& name) {
  std::string layer, rest;
  return SplitLayer(name, &layer, &rest) && ExpertMap().count(rest) > 0;
}

}  // namespace

bool ParseExportNames(std::string_view text, ExportNames* out) {
  if (text == "torchtitan") {
    *out = ExportNames::kTorchtitan;
  } else if (text == "hf") {
    *out = ExportNames::kHuggingFace;
  } else {
    return false;
  }
  return true;
}

const char* ExportNamesText(ExportNames names) { return names == ExportNames::kTorchtitan ? "torchtitan" : "hf"; }

bool IsTrainingOnlyTensor(const std::string& name) {
  return name.compare(0, 6, "optim.") == 0 || name.compare(0, 4, "rng.") == 0;
}

std::string HuggingFaceName(const std::string& name, int64_t expert) {
  if (expert < 0) {
    if (name == "tok_embeddings.weight") return "model.embed_tokens.weight";
    if (name == "norm.weight") return "model.norm.weight";
    if (name == "output.weight") return "lm_head.weight";
  }
  std::string layer, rest;
  if (!SplitLayer(name, &layer, &rest)) return "";
  const auto& map = expert >= 0 ? ExpertMap() : LayerMap();
  auto it = map.find(rest);
  if (it == map.end()) return "";
  const std::string prefix = "model.layers." + layer + ".";
  return expert >= 0 ? prefix + "mlp.experts." + std::to_string(expert) + "." + it->second : prefix + it->second;
}

std::vector<ExportTensor> PlanExport(const CheckpointIndex& index, ExportNames names) {
  std::vector<ExportTensor> plan;
  for (const std::string& source : index.names) {
    if (IsTrainingOnlyTensor(source)) continue;
    const CheckpointSlice& first = index.slices.at(source).front();
    ExportTensor whole{source, source, first.dtype, first.global_shape,
                       std::vector<int64_t>(first.global_shape.size(), 0), first.global_shape};
    if (names == ExportNames::kTorchtitan) {
      plan.push_back(std::move(whole));
      continue;
    }
    const std::string where = index.dir + " tensor \"" + Quote(source) + "\"";
    if (!IsGroupedExperts(source)) {
      whole.name = HuggingFaceName(source);
      if (whole.name.empty()) FailCheckpoint(where, "has no Hugging Face DeepSeek-V3 name (export it with --names torchtitan)");
      plan.push_back(std::move(whole));
      continue;
    }
    if (first.global_shape.size() != 3) {
      FailCheckpoint(where, "is a grouped expert tensor but has shape " + ShapeText(first.global_shape) +
                                ", not [experts, out, in]");
    }
    for (int64_t e = 0; e < first.global_shape[0]; ++e) {
      ExportTensor t;
      t.name = HuggingFaceName(source, e);
      t.source = source;
      t.dtype = first.dtype;
      t.shape = {first.global_shape[1], first.global_shape[2]};
      t.window_offsets = {e, 0, 0};
      t.window_shape = {1, first.global_shape[1], first.global_shape[2]};
      plan.push_back(std::move(t));
    }
  }
  return plan;
}

}  // namespace trainyard::engine
