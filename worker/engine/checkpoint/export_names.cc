#include "worker/engine/checkpoint/export_names.h"

#include <cctype>
#include <map>

#include "common/base/text.h"

namespace trainyard::engine {
namespace {

// torchtitan suffix after "layers.<i>." -> the Hugging Face suffix after
// "model.layers.<i>.". GQA's q/k/v/o projections take the names HF uses for such
// attention (Qwen3-MoE's, Llama's); MLA's take DeepseekV3's.
const std::map<std::string, std::string>& LayerMap() {
  static const auto* map = new std::map<std::string, std::string>{
      {"attention.wq_a.weight", "self_attn.q_a_proj.weight"},
      {"attention.q_norm.weight", "self_attn.q_a_layernorm.weight"},
      {"attention.wq_b.weight", "self_attn.q_b_proj.weight"},
      {"attention.wkv_a.weight", "self_attn.kv_a_proj_with_mqa.weight"},
      {"attention.kv_norm.weight", "self_attn.kv_a_layernorm.weight"},
      {"attention.wkv_b.weight", "self_attn.kv_b_proj.weight"},
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

// Qwen3-MoE's per-head norms, where the DeepSeek-V3 table has its low-rank query norm.
const std::map<std::string, std::string>& QwenLayerMap() {
  static const auto* map = new std::map<std::string, std::string>{
      {"attention.q_norm.weight", "self_attn.q_norm.weight"},
      {"attention.k_norm.weight", "self_attn.k_norm.weight"},
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

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool IsGroupedExperts(const std::string& name) {
  std::string layer, rest;
  return SplitLayer(name, &layer, &rest) && ExpertMap().count(rest) > 0;
}

bool HasRotateHalfRows(const std::string& name, HfFlavour flavour) {
  if (flavour != HfFlavour::kQwen3Moe) return false;
  std::string layer, rest;
  if (!SplitLayer(name, &layer, &rest)) return false;
  return rest == "attention.wq.weight" || rest == "attention.wk.weight" || rest == "attention.q_norm.weight" ||
         rest == "attention.k_norm.weight";
}

std::vector<int64_t> RotateHalfRowOrder(int64_t rows, int64_t head_dim) {
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(rows));
  for (int64_t h = 0; h + head_dim <= rows; h += head_dim) {
    for (int64_t k = 0; k < head_dim; k += 2) order.push_back(h + k);
    for (int64_t k = 1; k < head_dim; k += 2) order.push_back(h + k);
  }
  return order;
}

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

std::string HuggingFaceName(const std::string& name, int64_t expert, HfFlavour flavour) {
  if (expert < 0) {
    if (name == "tok_embeddings.weight") return "model.embed_tokens.weight";
    if (name == "norm.weight") return "model.norm.weight";
    if (name == "output.weight") return "lm_head.weight";
  }
  std::string layer, rest;
  if (!SplitLayer(name, &layer, &rest)) return "";
  if (expert < 0 && flavour == HfFlavour::kQwen3Moe) {
    if (auto q = QwenLayerMap().find(rest); q != QwenLayerMap().end()) return "model.layers." + layer + "." + q->second;
  }
  const auto& map = expert >= 0 ? ExpertMap() : LayerMap();
  auto it = map.find(rest);
  if (it == map.end()) return "";
  const std::string prefix = "model.layers." + layer + ".";
  return expert >= 0 ? prefix + "mlp.experts." + std::to_string(expert) + "." + it->second : prefix + it->second;
}

std::vector<ExportTensor> PlanExport(const CheckpointIndex& index, ExportNames names) {
  std::vector<ExportTensor> plan;
  // Qwen3-MoE: its key norm's length is the head width the RoPE rows are permuted in.
  HfFlavour flavour = HfFlavour::kDeepseekV3;
  int64_t head_dim = 0;
  for (const std::string& source : index.names) {
    if (EndsWith(source, ".attention.k_norm.weight")) {
      flavour = HfFlavour::kQwen3Moe;
      head_dim = index.slices.at(source).front().global_shape.at(0);
    }
  }
  for (const std::string& source : index.names) {
    if (IsTrainingOnlyTensor(source)) continue;
    const CheckpointSlice& first = index.slices.at(source).front();
    ExportTensor whole{source,
                       source,
                       first.dtype,
                       first.global_shape,
                       std::vector<int64_t>(first.global_shape.size(), 0),
                       first.global_shape,
                       {}};
    if (names == ExportNames::kTorchtitan) {
      plan.push_back(std::move(whole));
      continue;
    }
    const std::string where = index.dir + " tensor \"" + Quote(source) + "\"";
    if (!IsGroupedExperts(source)) {
      whole.name = HuggingFaceName(source, -1, flavour);
      if (whole.name.empty()) FailCheckpoint(where, "has no Hugging Face name (export it with --names torchtitan)");
      if (HasRotateHalfRows(source, flavour)) {
        if (head_dim <= 0 || head_dim % 2 != 0 || whole.shape.empty() || whole.shape[0] % head_dim != 0) {
          FailCheckpoint(where, "has shape " + ShapeText(whole.shape) + ", not whole heads of the key norm's width " +
                                    std::to_string(head_dim));
        }
        whole.row_order = RotateHalfRowOrder(whole.shape[0], head_dim);
      }
      plan.push_back(std::move(whole));
      continue;
    }
    if (first.global_shape.size() != 3) {
      FailCheckpoint(where, "is a grouped expert tensor but has shape " + ShapeText(first.global_shape) +
                                ", not [experts, out, in]");
    }
    for (int64_t e = 0; e < first.global_shape[0]; ++e) {
      ExportTensor t;
      t.name = HuggingFaceName(source, e, flavour);
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
