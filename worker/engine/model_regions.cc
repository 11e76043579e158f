#include "worker/engine/model_regions.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "worker/engine/compile/compiled_region.h"
#include "worker/engine/fused_cpu_kernels.h"
#include "worker/engine/rotary_embedding.h"

namespace trainyard::engine {
namespace {

using compile::RegionFn;
using compile::RegionKey;
using torch::Tensor;
namespace F = torch::nn::functional;

class Eager final : public RegionFactory {
 public:
  RegionCall Make(const RegionKey&, RegionFn fn, int, DynamicDims) override { return fn; }
  void GraphBreak(const RegionKey&, const std::string&) override {}
  bool RunsEager() const override { return true; }
};

class Compiled final : public RegionFactory {
 public:
  Compiled(compile::CompileContext& ctx, std::shared_ptr<const compile::WatchedTensors> watched)
      : ctx_(ctx), watched_(std::move(watched)) {}

  RegionCall Make(const RegionKey& key, RegionFn fn, int layer, DynamicDims dynamic) override {
    auto region = std::make_shared<compile::CompiledRegion>(ctx_, key, std::move(fn), layer, watched_);
    for (const auto& [input, dim] : dynamic) region->SetDynamicDim(input, dim);
    return [region](const std::vector<Tensor>& inputs, const std::vector<Tensor>& params) {
      return (*region)(inputs, params);
    };
  }

  void GraphBreak(const RegionKey& adjacent, const std::string& cause) override {
    ctx_.ReportGraphBreak(adjacent, cause);
  }

  bool RunsEager() const override { return ctx_.options().backend == compile::CompileBackend::kEager; }

 private:
  compile::CompileContext& ctx_;
  std::shared_ptr<const compile::WatchedTensors> watched_;
};

}  // namespace

RegionFactory& EagerRegionFactory() {
  static Eager* eager = new Eager();
  return *eager;
}

std::unique_ptr<RegionFactory> MakeCompiledRegionFactory(compile::CompileContext& ctx,
                                                         std::shared_ptr<const compile::WatchedTensors> watched) {
  return std::make_unique<Compiled>(ctx, std::move(watched));
}

namespace regions {

RegionKey RmsNormKey(int64_t dim, double eps) { return RegionKey("rms_norm", {{"dim", dim}, {"eps", eps}}); }

namespace {

// x·[ws...]ᵀ: the fused kernel where it applies (no weight concatenation, GEMMs split
// by rows), else one linear over the concatenated weights.
Tensor Project(const Tensor& x, std::initializer_list<Tensor> ws) {
  if (fused::Applies(x)) return fused::Linear(x, ws);
  return F::linear(x, ws.size() == 1 ? *ws.begin() : torch::cat(ws, 0));
}

Tensor Normalize(const Tensor& x, const Tensor& weight, double eps) {
  if (fused::Applies(x)) return fused::RmsNorm(x, weight, eps);
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
}

}  // namespace

RegionFn RmsNorm(double eps) {
  return [eps](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    return {Normalize(in[0], p[0], eps)};
  };
}

RegionKey AttentionKey(int64_t dim, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block,
                       int tp) {
  return RegionKey("attention", {{"dim", dim}, {"n_heads", n_heads}, {"n_kv_heads", n_kv_heads},
                                 {"head_dim", head_dim}, {"query_block", query_block}, {"tp", tp}});
}

std::vector<Tensor> CausalBlockMasks(int64_t t, int64_t rep, int64_t query_block,
                                     const torch::TensorOptions& options) {
  std::vector<Tensor> masks;
  for (int64_t begin = 0; begin < t; begin += query_block) {
    const int64_t len = std::min(query_block, t - begin);
    auto rows = torch::arange(begin, begin + len, torch::kInt64).unsqueeze(1);
    auto cols = torch::arange(0, begin + len, torch::kInt64).unsqueeze(0);
    masks.push_back(torch::zeros({len, begin + len}, options)
                        .masked_fill(cols > rows, -std::numeric_limits<float>::infinity())
                        .repeat_interleave(rep, 0));
  }
  return masks;
}

RegionFn Attention(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block) {
  return [=](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    const Tensor& x = in[0];
    const int64_t b = x.size(0), t = x.size(1), hd = head_dim;
    const int64_t rep = n_heads / n_kv_heads;
    // One GEMM for q, k and v (three torchtitan-named parameters), and one RoPE pass
    // over the q and k heads together.
    auto qkv = Project(x, {p[0], p[1], p[2]});
    const size_t n_blocks = in.size() - 3;
    TORCH_CHECK(static_cast<int64_t>(n_blocks) == (t + query_block - 1) / query_block, "attention: ", n_blocks,
                " masks for ", t, " positions in blocks of ", query_block);
    if (fused::Applies(qkv)) {
      // The same computation in one kernel (RoPE, masks and softmax included).
      return {Project(fused::CausalAttention(qkv, in[1], in[2], n_heads, n_kv_heads, head_dim, query_block), {p[3]})};
    }
    auto qk = RotaryEmbedding::Rotate(
        qkv.narrow(-1, 0, (n_heads + n_kv_heads) * hd).view({b, t, n_heads + n_kv_heads, hd}), in[1], in[2]);
    auto v = qkv.narrow(-1, (n_heads + n_kv_heads) * hd, n_kv_heads * hd).view({b, t, n_kv_heads, hd});
    // Group query heads by their KV head: query head h = g*rep + r uses KV head g. Rows
    // of a group are (position, r), so q as [b*n_kv, t*rep, hd] multiplies K/V of shape
    // [b*n_kv, t, hd] with no repeat, and a block of positions is a block of rows.
    const int64_t groups = b * n_kv_heads;
    auto q = qk.narrow(2, 0, n_heads).reshape({b, t, n_kv_heads, rep, hd}).permute({0, 2, 1, 3, 4})
                 .reshape({groups, t * rep, hd});
    auto k = qk.narrow(2, n_heads, n_kv_heads).permute({0, 2, 1, 3}).reshape({groups, t, hd});
    auto vg = v.permute({0, 2, 1, 3}).reshape({groups, t, hd});
    // Block j scores only the keys up to its last position, skipping most of the masked
    // upper triangle (5/8 of the t×t work for 4 blocks) with the same result. split,
    // not narrow: narrow's backward would allocate a zero gradient of q per block.
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    const auto q_blocks = q.split(query_block * rep, 1);
    std::vector<Tensor> blocks;
    blocks.reserve(n_blocks);
    for (size_t j = 0; j < n_blocks; ++j) {
      const Tensor& mask = in[3 + j];
      const int64_t keys = mask.size(1);
      auto scores = torch::baddbmm(mask, q_blocks[j], k.narrow(1, 0, keys).transpose(1, 2), /*beta=*/1,
                                   /*alpha=*/scale);
      blocks.push_back(torch::bmm(torch::softmax(scores, -1), vg.narrow(1, 0, keys)));
    }
    auto out = blocks.size() == 1 ? blocks[0] : torch::cat(blocks, 1);  // [b*n_kv, t*rep, hd]
    out = out.view({b, n_kv_heads, t, rep, hd}).permute({0, 2, 1, 3, 4}).reshape({b, t, n_heads * hd});
    return {F::linear(out, p[3])};
  };
}

RegionKey FfnKey(const char* kind, int64_t dim, int64_t hidden, int tp) {
  return RegionKey(kind, {{"dim", dim}, {"hidden", hidden}, {"tp", tp}});
}

RegionFn Ffn() {
  return [](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    const Tensor& x = in[0];
    if (fused::Applies(x)) {
      // One GEMM for w1 and w3, then the activation in one pass each way.
      return {Project(fused::SwiGlu(Project(x, {p[0], p[2]})), {p[1]})};
    }
    return {F::linear(torch::silu(F::linear(x, p[0])) * F::linear(x, p[2]), p[1])};
  };
}

RegionKey RouterKey(int64_t dim, int64_t n_experts, int64_t top_k, const std::string& score_func, bool route_norm,
                    double route_scale) {
  return RegionKey("router", {{"dim", dim}, {"n_experts", n_experts}, {"top_k", top_k},
                              {"score_func", score_func}, {"route_norm", route_norm},
                              {"route_scale", route_scale}});
}

RegionFn Router(int64_t top_k, std::string score_func, bool route_norm, double route_scale, Tensor plant_into) {
  return [=](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    const Tensor& x = in[0];
    const Tensor& expert_bias = in[1];
    auto logits = Project(x, {p[0]});
    auto scores = score_func == "softmax" ? torch::softmax(logits, -1) : torch::sigmoid(logits);
    // Selection is discrete: the bias steers it but gets no gradient.
    auto selected = std::get<1>(torch::topk(scores.detach() + expert_bias, top_k, /*dim=*/-1));
    auto gates = scores.gather(1, selected);
    if (route_norm && top_k > 1) gates = gates / (gates.sum(-1, /*keepdim=*/true) + 1e-20);
    if (route_scale != 1.0) gates = gates * route_scale;
    auto counts = torch::bincount(selected.reshape({-1}), /*weights=*/{}, /*minlength=*/expert_bias.size(0));
    if (plant_into.defined()) plant_into.copy_(counts);  // test-only planted side effect
    // Sort the (token, slot) pairs by expert so each expert sees one contiguous slice.
    // A stable sort keeps token order within an expert, so results are reproducible.
    auto order = std::get<1>(selected.reshape({-1}).sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
    auto token_ids = order.div(top_k, "floor");
    return {x.index_select(0, token_ids), gates.reshape({-1}).index_select(0, order).unsqueeze(1), token_ids,
            counts};
  };
}

RegionKey CombineKey(int64_t dim, int64_t top_k) { return RegionKey("combine", {{"dim", dim}, {"top_k", top_k}}); }

RegionFn Combine() {
  return [](const std::vector<Tensor>& in, const std::vector<Tensor>&) -> std::vector<Tensor> {
    if (fused::Applies(in[0])) return {fused::Combine(in[0], in[1], in[2], in[3].size(0))};
    return {torch::zeros_like(in[3]).index_add(0, in[2], in[0] * in[1])};
  };
}

namespace {

std::vector<RegionKey::Field> AttentionFields(const ModelConfig& c, int64_t query_block) {
  return {{"dim", c.dim},           {"n_heads", c.n_heads},         {"n_kv_heads", c.n_kv_heads},
          {"head_dim", c.head_dim()}, {"query_block", query_block}, {"eps", c.norm_eps}};
}

}  // namespace

RegionKey DenseBlockKey(const ModelConfig& c, int64_t query_block) {
  auto f = AttentionFields(c, query_block);
  f.emplace_back("ffn_hidden", c.ffn_hidden);
  return RegionKey("dense_block", f);
}

RegionKey MoeBlockEntryKey(const ModelConfig& c, int64_t query_block) {
  auto f = AttentionFields(c, query_block);
  f.insert(f.end(), {{"n_experts", c.n_routed_experts}, {"top_k", c.top_k}, {"score_func", c.score_func},
                     {"route_norm", c.route_norm}, {"route_scale", c.route_scale}});
  return RegionKey("moe_block_entry", f);
}

RegionKey MoeBlockExitKey(const ModelConfig& c) {
  return RegionKey("moe_block_exit", {{"dim", c.dim}, {"top_k", c.top_k},
                                      {"shared_hidden", int64_t{c.expert_hidden} * c.n_shared_experts}});
}

namespace {

// The attention half of a block: x → (h = x + attn(norm(x)), norm2(h)). inputs: x, cos,
// sin, masks...; params from `p[first]`: attention_norm, wq, wk, wv, wo, ffn_norm.
std::pair<Tensor, Tensor> AttentionHalf(const RegionFn& norm, const RegionFn& attention,
                                        const std::vector<Tensor>& in, size_t n_attention_inputs,
                                        const std::vector<Tensor>& p) {
  std::vector<Tensor> attn_in(in.begin(), in.begin() + n_attention_inputs);
  attn_in[0] = norm({in[0]}, {p[0]})[0];
  auto h = in[0] + attention(attn_in, {p[1], p[2], p[3], p[4]})[0];
  return {h, norm({h}, {p[5]})[0]};
}

}  // namespace

RegionFn DenseBlock(double eps, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block) {
  RegionFn norm = RmsNorm(eps), attention = Attention(n_heads, n_kv_heads, head_dim, query_block), ffn = Ffn();
  return [=](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    auto [h, normed] = AttentionHalf(norm, attention, in, in.size(), p);
    return {h + ffn({normed}, {p[6], p[7], p[8]})[0]};
  };
}

RegionFn MoeBlockEntry(double eps, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block,
                       RegionFn router) {
  RegionFn norm = RmsNorm(eps), attention = Attention(n_heads, n_kv_heads, head_dim, query_block);
  return [=](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    auto [h, normed] = AttentionHalf(norm, attention, in, in.size() - 1, p);
    auto flat = normed.reshape({-1, normed.size(-1)});
    auto routed = router({flat, in.back()}, {p[6]});
    return {h, flat, routed[0], routed[1], routed[2], routed[3]};
  };
}

RegionFn MoeBlockExit(bool has_shared) {
  RegionFn combine = Combine(), ffn = Ffn();
  return [=](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    const Tensor& h = in[0];
    const Tensor& normed = in[4];
    auto out = combine({in[1], in[2], in[3], normed}, {})[0];
    if (has_shared) out = out + ffn({normed}, p)[0];
    return {h + out.view(h.sizes())};
  };
}

RegionKey LossKey(int64_t dim, int64_t vocab, double eps) {
  return RegionKey("loss", {{"dim", dim}, {"vocab", vocab}, {"eps", eps}});
}

RegionFn Loss(double eps) {
  return [eps](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    const Tensor& h = in[0];
    auto normed = Normalize(h, p[0], eps);
    auto logits = Project(normed, {p[1]});
    return {F::cross_entropy(logits.reshape({-1, logits.size(-1)}), in[1].reshape({-1}))};
  };
}

}  // namespace regions
}  // namespace trainyard::engine
