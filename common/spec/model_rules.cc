// The [model] section's rules (rules_internal::Model): the model's sizes, routing and
// expert groups, RoPE scaling, and each architecture's attention. A file of their own
// beside rules.cc, which runs them in spec::Validate's order of sections.
#include <cstdint>
#include <string>
#include <utility>

#include "common/base/text.h"
#include "common/spec/rule_checks.h"
#include "common/spec/rules.h"

namespace trainyard::spec::rules_internal {
namespace {

// deepseek_v3's attention: every width given, RoPE on an even width, one latent KV
// per query head.
Check MultiHeadLatentAttention(const ModelSpec& m) {
  TY_SPEC_CHECK(IntRange("model.q_lora_rank", m.q_lora_rank, 0, 1 << 16));
  TY_SPEC_CHECK(IntRange("model.kv_lora_rank", m.kv_lora_rank, 1, 1 << 16));
  TY_SPEC_CHECK(IntRange("model.qk_nope_head_dim", m.qk_nope_head_dim, 1, 1 << 12));
  TY_SPEC_CHECK(IntRange("model.qk_rope_head_dim", m.qk_rope_head_dim, 2, 1 << 12));
  TY_SPEC_CHECK(IntRange("model.v_head_dim", m.v_head_dim, 1, 1 << 12));
  if (m.qk_rope_head_dim % 2 != 0) {
    return Invalid(
        "model.qk_rope_head_dim", "divides",
        "model.qk_rope_head_dim=" + std::to_string(m.qk_rope_head_dim) + " must be even: RoPE rotates pairs");
  }
  if (m.n_kv_heads != m.n_heads) {
    return Invalid("model.n_kv_heads", "requires",
                   "model.n_kv_heads=" + std::to_string(m.n_kv_heads) +
                       " must equal model.n_heads=" + std::to_string(m.n_heads) +
                       " under model.architecture=\"deepseek_v3\": its latent attention expands one key and value "
                       "per query head");
  }
  return std::nullopt;
}

}  // namespace

Check Model(const ModelSpec& m) {
  TY_SPEC_CHECK(IntRange("model.vocab_size", m.vocab_size, 2, 1 << 24));
  TY_SPEC_CHECK(IntRange("model.dim", m.dim, 2, 1 << 16));
  TY_SPEC_CHECK(IntRange("model.n_layers", m.n_layers, 1, kMaxLayers));
  TY_SPEC_CHECK(IntRange("model.n_dense_layers", m.n_dense_layers, 0, m.n_layers, "", "model.n_layers"));
  TY_SPEC_CHECK(IntRange("model.n_heads", m.n_heads, 1, m.dim, "", "model.dim"));
  TY_SPEC_CHECK(IntRange("model.n_kv_heads", m.n_kv_heads, 1, m.n_heads, "", "model.n_heads"));
  TY_SPEC_CHECK(IntRange("model.ffn_hidden", m.ffn_hidden, 1, 1 << 20));
  TY_SPEC_CHECK(IntRange("model.n_routed_experts", m.n_routed_experts, 1, 4096));
  TY_SPEC_CHECK(IntRange("model.top_k", m.top_k, 1, m.n_routed_experts, "", "model.n_routed_experts"));
  TY_SPEC_CHECK(IntRange("model.n_shared_experts", m.n_shared_experts, 0, 64));
  TY_SPEC_CHECK(IntRange("model.expert_hidden", m.expert_hidden, 1, 1 << 20));
  TY_SPEC_CHECK(OneOf("model.score_func", m.score_func, ScoreFuncs()));
  TY_SPEC_CHECK(InRange("model.route_scale", m.route_scale, 0, 1e6, /*lo_open=*/true));
  TY_SPEC_CHECK(InRange("model.rope_theta", m.rope_theta, 1, 1e12));
  TY_SPEC_CHECK(InRange("model.norm_eps", m.norm_eps, 0, 1, /*lo_open=*/true));
  TY_SPEC_CHECK(InRange("model.load_balance_coeff", m.load_balance_coeff, 0, 1));
  // 0 is "dropless"; every positive factor is a capacity (at least one row per expert).
  TY_SPEC_CHECK(InRange("model.capacity_factor", m.capacity_factor, 0, 1e6));
  TY_SPEC_CHECK(OneOf("model.architecture", m.architecture, Architectures()));
  TY_SPEC_CHECK(
      IntRange("model.n_expert_groups", m.n_expert_groups, 1, m.n_routed_experts, "", "model.n_routed_experts"));
  TY_SPEC_CHECK(
      IntRange("model.n_limited_groups", m.n_limited_groups, 1, m.n_expert_groups, "", "model.n_expert_groups"));
  if (m.n_routed_experts % m.n_expert_groups != 0) {
    return Invalid("model.n_expert_groups", "divides",
                   "model.n_expert_groups=" + std::to_string(m.n_expert_groups) +
                       " must divide model.n_routed_experts=" + std::to_string(m.n_routed_experts));
  }
  if (m.n_expert_groups > 1) {
    const int per_group = m.n_routed_experts / m.n_expert_groups;
    // A group scores by the sum of its two best experts (DeepSeek-V3's rule).
    if (per_group < 2) {
      return Invalid("model.n_expert_groups", "range",
                     "model.n_expert_groups=" + std::to_string(m.n_expert_groups) +
                         " leaves fewer than 2 experts a group (a group scores by its two best experts)");
    }
    if (m.top_k > m.n_limited_groups * per_group) {
      return Invalid("model.top_k", "range",
                     "model.top_k=" + std::to_string(m.top_k) + " exceeds the " +
                         std::to_string(m.n_limited_groups * per_group) +
                         " experts of model.n_limited_groups=" + std::to_string(m.n_limited_groups) + " groups");
    }
  }
  TY_SPEC_CHECK(InRange("model.rope_factor", m.rope_factor, 1, 1e6));
  TY_SPEC_CHECK(IntRange("model.original_seq_len", m.original_seq_len, 1, 1 << 24));
  TY_SPEC_CHECK(InRange("model.beta_fast", m.beta_fast, 0, 1e6, /*lo_open=*/true));
  TY_SPEC_CHECK(InRange("model.beta_slow", m.beta_slow, 0, m.beta_fast, /*lo_open=*/true));
  TY_SPEC_CHECK(InRange("model.mscale", m.mscale, 0, 1e3));
  TY_SPEC_CHECK(IntRange("model.head_dim", m.head_dim_override, 0, 1 << 12));
  if (m.mla()) {
    if (m.head_dim_override != 0) {
      return Invalid("model.head_dim", "requires",
                     "model.head_dim=" + std::to_string(m.head_dim_override) +
                         " is grouped-query attention's head width; model.architecture=\"deepseek_v3\" sizes its "
                         "heads with model.qk_nope_head_dim, model.qk_rope_head_dim and model.v_head_dim");
    }
    return MultiHeadLatentAttention(m);
  }
  // The MLA widths belong to deepseek_v3 alone: one given elsewhere is a mistake.
  for (const auto& [key, value] : {std::pair{"q_lora_rank", m.q_lora_rank},
                                   {"kv_lora_rank", m.kv_lora_rank},
                                   {"qk_nope_head_dim", m.qk_nope_head_dim},
                                   {"qk_rope_head_dim", m.qk_rope_head_dim},
                                   {"v_head_dim", m.v_head_dim}}) {
    if (value != 0) {
      return Invalid(std::string("model.") + key, "requires",
                     std::string("model.") + key + "=" + std::to_string(value) +
                         " is a multi-head latent attention width: it needs model.architecture=\"deepseek_v3\" (this "
                         "job's is \"" +
                         Quote(m.architecture) + "\")");
    }
  }
  // Shape (an explicit head_dim need not divide dim: Qwen3's heads are wider).
  if (m.head_dim_override == 0 && m.dim % m.n_heads != 0) {
    return Invalid(
        "model.dim", "divides",
        "model.dim=" + std::to_string(m.dim) + " must be divisible by model.n_heads=" + std::to_string(m.n_heads));
  }
  if (m.n_heads % m.n_kv_heads != 0) {
    return Invalid("model.n_heads", "divides",
                   "model.n_heads=" + std::to_string(m.n_heads) + " must be divisible by model.n_kv_heads=" +
                       std::to_string(m.n_kv_heads) + " (grouped-query attention)");
  }
  if (m.head_dim() % 2 != 0) {
    if (m.head_dim_override != 0) {
      return Invalid("model.head_dim", "divides",
                     "model.head_dim=" + std::to_string(m.head_dim()) + " must be even: RoPE rotates pairs");
    }
    return Invalid("model.dim", "divides",
                   "model.dim=" + std::to_string(m.dim) + " / model.n_heads=" + std::to_string(m.n_heads) + " = " +
                       std::to_string(m.head_dim()) + " (head_dim) must be even: RoPE rotates pairs");
  }
  return std::nullopt;
}

}  // namespace trainyard::spec::rules_internal
