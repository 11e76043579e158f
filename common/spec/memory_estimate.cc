#include "common/spec/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace trainyard::spec {

namespace {

// The parameter counts in N (int64_t for the engine's exact count, double for the
// estimate of a spec no rule has checked: dim 2^30 must not overflow).
template <class C, class N>
C CountAs(const ModelSpec& m) {
  const N d = m.dim, hd = m.head_dim();
  C c{};
  c.embedding = N(m.vocab_size) * d;
  c.output = N(m.vocab_size) * d;
  c.final_norm = d;
  if (m.mla()) {
    // Latent attention: the query (low-rank with its norm, or one projection), the KV
    // latent with the shared RoPE key and its norm, the heads' keys and values, wo.
    const N h = m.n_heads, qk = m.qk_head_dim(), ql = m.q_lora_rank, kvr = m.kv_lora_rank;
    const N q = ql == 0 ? d * h * qk : d * ql + ql + ql * h * qk;
    c.attention = q + d * (kvr + N(m.qk_rope_head_dim)) + kvr + kvr * h * (N(m.qk_nope_head_dim) + m.v_head_dim) +
                  h * N(m.v_head_dim) * d;
  } else {
    c.attention = d * (N(m.n_heads) * hd) * 2 + d * (N(m.n_kv_heads) * hd) * 2;
    if (m.qk_norm()) c.attention += 2 * hd;  // Qwen3's per-head q and k norm weights
  }
  c.layer_norms = 2 * d;
  c.dense_ffn = 3 * d * N(m.ffn_hidden);
  c.expert = 3 * d * N(m.expert_hidden);
  c.router = d * N(m.n_routed_experts);
  c.shared = c.expert * N(m.n_shared_experts);
  c.total =
      c.embedding + c.output + c.final_norm + N(m.n_dense_layers) * (c.attention + c.layer_norms + c.dense_ffn) +
      N(m.n_moe_layers()) * (c.attention + c.layer_norms + c.router + c.shared + c.expert * N(m.n_routed_experts));
  return c;
}

}  // namespace

ParameterCounts CountParameters(const ModelSpec& m) { return CountAs<ParameterCounts, int64_t>(m); }

FlopCounts CountFlops(const ModelSpec& m, int64_t seq_len) {
  const ParameterCounts c = CountParameters(m);
  FlopCounts f;
  f.active_params = c.output + c.final_norm + int64_t{m.n_dense_layers} * c.dense_layer() +
                    int64_t{m.n_moe_layers()} * c.moe_layer(m.top_k);
  f.attention =
      6.0 * m.n_heads * static_cast<double>(m.qk_head_dim() + m.value_head_dim()) * static_cast<double>(seq_len);
  f.head = 6.0 * static_cast<double>(c.output + c.final_norm);
  f.dense_layer = 6.0 * static_cast<double>(c.dense_layer()) + f.attention;
  f.moe_layer = 6.0 * static_cast<double>(c.moe_layer(m.top_k)) + f.attention;
  f.per_token = 6.0 * static_cast<double>(f.active_params) + m.n_layers * f.attention;
  return f;
}

namespace {

constexpr double kQueryBlock = 64;  // worker/engine AttentionImpl::kQueryBlock
constexpr double kF32 = 4;

// Probabilities of one head over one sequence of t positions: query block j (len_j
// rows) scores the keys up to its last position, Σ_j len_j·(j·qb + len_j).
double ProbElements(double t) {
  const double full = std::floor(t / kQueryBlock), rest = t - full * kQueryBlock;
  return kQueryBlock * kQueryBlock * full * (full + 1) / 2 + rest * t;
}

// One half of a layer (attention, or FFN/MoE) as its backward sees it, in bytes.
struct Half {
  double act = 0;          // saved for backward, nothing recomputed
  double internal = 0;     // of which the attention's own tensors (selective drops them)
  double copies = 0;       // compute weights
  double attn_copies = 0;  // of which the attention's (selective drops them)
  double grads = 0;
  double transient = 0;  // its backward's buffers
  double comm = 0;       // EP all-to-all rows
  // A MoE half's backward runs its shared experts first: what that step adds, and what
  // of the half it frees (activations, copies) or produces (gradients) for the rest.
  double first_act = 0, first_copies = 0, first_grads = 0, first_transient = 0;
};

// Shapes of one rank, as doubles.
struct Shapes {
  double d, hd, hl, kl, fl, fs, fe, e, e_local, k, v, b, t, n, ns, r;
  double a;  // bytes of an activation element: 4 (fp32) or 2 (bf16)
  bool fused, bf16, ep_split;
  bool grouped_gemm;  // experts as at::_grouped_mm (bf16 CUDA, dims multiples of 8)
  bool expand_kv;     // attention repeats K and V per query head (worker: SdpaExpandsKv)
  // Attention runs the fused CPU kernel: in fp32, and for bf16 on its upcast fp32 copy
  // of the q|k|v projection (the kernel's output goes back to bf16).
  bool fused_attention;
};

// What one RMSNorm over n rows saves, its output aside: the fused kernel its input and
// 1/rms; the composite fp32 form its input, x² (mean's backward keeps its input), 1/rms
// and x/rms; the bf16 form the fp32 copy of its input, its square, 1/rms and the
// normalized rows in bf16 (not the bf16 input).
double NormSaved(const Shapes& s, double n) {
  if (s.fused) return n * s.d * kF32 + n * kF32;
  if (s.bf16) return n * s.d * (2 * kF32 + 2) + n * kF32;
  return 3 * n * s.d * kF32 + n * kF32;
}

Half AttentionHalf(const Shapes& s, double params) {
  Half h;
  if (s.fused) {  // qkv, RoPE'd q and k, probabilities, output by group, output by head
    h.internal = s.n * (4 * s.hl + 3 * s.kl) * s.hd * kF32 + s.b * s.hl * ProbElements(s.t) * kF32;
  } else if (s.fused_attention) {
    // bf16 on the fused kernel: its fp32 qkv copy, q and k, probabilities and output by
    // group; the fp32 output by head is freed once cast, the bf16 copy is kept.
    h.internal =
        s.n * (3 * s.hl + 3 * s.kl) * s.hd * kF32 + s.b * s.hl * ProbElements(s.t) * kF32 + s.n * s.hl * s.hd * s.a;
  } else if (s.expand_kv) {
    // fp32 GQA on CUDA: K and V repeated to every query head for the memory-efficient
    // kernel. Kept: q and k after RoPE, the repeated K and V, the output, the fp32
    // log-sum-exp (the q|k|v projection itself is freed).
    h.internal = s.n * (4 * s.hl + s.kl) * s.hd * s.a + s.n * s.hl * kF32;
  } else {
    // scaled_dot_product_attention (flash or memory-efficient: no score matrix) keeps
    // q and k after RoPE, v (a view that keeps the whole q|k|v projection), its output
    // and one fp32 log-sum-exp per query row and head.
    h.internal = s.n * (3 * s.hl + 3 * s.kl) * s.hd * s.a + s.n * s.hl * kF32;
  }
  h.act = NormSaved(s, s.n) + s.n * s.d * s.a + h.internal;
  if (s.bf16) {
    h.attn_copies = 2 * params;
    h.copies = h.attn_copies + 2 * s.d;
  } else if (!s.fused) {
    h.attn_copies = h.copies = kF32 * s.d * (s.hl + 2 * s.kl) * s.hd;  // the q|k|v concatenation
  }
  h.grads = kF32 * (params + s.d);
  // Backward buffers: the fused kernel's per-group gradients; SDPA's q, k, v gradients,
  // the output's and the projection's.
  const double grads =
      s.fused_attention ? s.n * (4 * s.hl + 3 * s.kl) * s.hd * kF32 : s.n * (3 * s.hl + 4 * s.kl) * s.hd * s.a;
  h.transient = 2 * s.n * s.d * s.a + grads;
  return h;
}

Half DenseHalf(const Shapes& s, double params) {
  Half h;
  h.act = NormSaved(s, s.n) + s.n * s.d * s.a + s.n * 4 * s.fl * s.a;
  if (s.bf16) h.copies = 2 * (params + s.d);
  h.grads = kF32 * (params + s.d);
  h.transient = 2 * s.n * s.d * s.a + s.n * 3 * s.fl * s.a;
  return h;
}

Half MoeHalf(const Shapes& s, double params, double shared_params) {
  Half h;
  // Router: fp32 scores, top-k ids, gates and the sort order; experts: their input and
  // output rows and four hidden-wide tensors a row (the composite combine's index_add
  // keeps its gate-weighted rows too); shared experts as a dense FFN.
  const double router = s.ns * (kF32 * s.e + 32 * s.k + kF32);
  const double experts = s.r * ((s.fused ? 2 : 3) * s.d + 4 * s.fe) * s.a + (s.ep_split ? 16 * s.r : 0);
  h.first_act = s.n * 4 * s.fs * s.a;
  h.act = NormSaved(s, s.n) + s.n * s.d * s.a + router + experts + h.first_act;
  if (s.bf16) {
    h.copies = 2 * (params + s.d);
    h.first_copies = 2 * shared_params;
  }
  h.grads = kF32 * (params + s.d);
  h.first_grads = kF32 * shared_params;
  h.first_transient = 2 * s.n * s.d * s.a + s.n * 3 * s.fs * s.a;
  // The fused kernel and the grouped GEMM run every local expert's backward at once; the
  // per-expert loop one expert's rows at a time, after the combine's gradient rows.
  const double rows = s.fused || s.grouped_gemm ? s.r * (2 * s.d + 3 * s.fe)
                                                : 2 * s.r * s.d + s.r / std::max(1.0, s.e_local) * (s.d + 3 * s.fe);
  h.transient = 2 * s.n * s.d * s.a + rows * s.a;
  if (s.ep_split) h.comm = 2 * s.r * s.d * s.a;  // rows sent and received
  return h;
}

// A moment of the step: what is held then, and where it is (layer -1: none).
// The largest GEMM operands worker/engine/train/gemm_peak_probe.cc allocates when it
// measures the MFU peak (at start-up and again between steps): CPU shapes up to 1024³,
// CUDA shapes up to 16384·1024·4096; bf16 operands are drawn in fp32 first.
double ProbeBytes(bool cuda, bool bf16) {
  const double cpu[][3] = {{1024, 1024, 1024}, {2048, 256, 1024}, {1024, 2048, 256}};
  const double gpu[][3] = {{4096, 4096, 4096}, {16384, 1024, 4096}, {4096, 16384, 1024}};
  double most = 0;
  for (const auto& g : cuda ? gpu : cpu) {
    const double mk = g[0] * g[1], kn = g[1] * g[2], mn = g[0] * g[2];
    most = std::max(most, bf16 ? 2 * (mk + kn + mn) + kF32 * std::max(mk, kn) : kF32 * (mk + kn + mn));
  }
  return most;
}

// CountParameters in doubles: a spec the rules never saw (dim 2^30) must not overflow.
struct Counts {
  double embedding, output, final_norm, attention, layer_norms, dense_ffn, expert, router, shared, total;
};

Counts CountInDoubles(const ModelSpec& m) { return CountAs<Counts, double>(m); }

struct Phase {
  MemoryBreakdown b;
  double buckets = 0;  // the gradient buckets in b.communication
  int layer = -1;
  const char* what = "";
};

}  // namespace

MemoryEstimate EstimateRankMemory(const JobSpec& spec) {
  const ModelSpec& m = spec.model;
  const Counts c = CountInDoubles(m);
  const double tp = std::max(1, spec.parallelism.tp), ep = std::max(1, spec.parallelism.ep);
  const int n_layers = std::max(0, m.n_layers), n_dense = std::clamp(m.n_dense_layers, 0, n_layers);

  Shapes s{};
  s.bf16 = spec.training.mixed_precision == "bf16";
  s.fused = !s.bf16 && spec.resources.device == "cpu";
  s.fused_attention = spec.resources.device == "cpu";
  s.grouped_gemm =
      s.bf16 && spec.resources.device == "cuda" && spec.model.dim % 8 == 0 && spec.model.expert_hidden % 8 == 0;
  s.a = s.bf16 ? 2 : kF32;
  s.d = m.dim;
  // Latent attention's heads, as the estimate counts them: every query head with its own
  // expanded key and value, qk_head_dim wide (the value's width is close to it).
  s.hd = m.qk_head_dim();
  s.hl = m.n_heads / tp;
  s.kl = m.n_kv_heads / tp;
  s.expand_kv = !s.fused && !s.bf16 && s.hl != s.kl;
  s.fl = m.ffn_hidden / tp;
  s.fe = m.expert_hidden;
  s.fs = static_cast<double>(m.expert_hidden) * m.n_shared_experts / tp;
  s.e = m.n_routed_experts;
  s.e_local = s.e / ep;
  s.k = m.top_k;
  s.v = m.vocab_size;
  s.b = std::max(0, spec.training.batch_size);
  s.t = std::max(0, spec.training.seq_len);
  s.n = s.b * s.t;
  s.ns = s.n / tp;   // each TP rank routes its slice of the tokens
  s.r = s.ns * s.k;  // rows an expert shard receives, routing balanced
  s.ep_split = ep > 1;

  const double attn_params = c.attention / tp;
  const double dense_params = c.dense_ffn / tp;
  const double moe_params = c.router + c.shared / tp + c.expert * s.e_local;
  const double head_params = c.output + c.final_norm;

  MemoryEstimate e;
  e.total_params = c.total;
  // Embedding, head, norms and router whole; attention, dense FFN and shared experts
  // split by TP; n_routed_experts / ep routed experts a rank.
  e.rank_params = c.embedding + head_params + n_dense * (attn_params + dense_params + c.layer_norms) +
                  (n_layers - n_dense) * (attn_params + moe_params + c.layer_norms);
  // FSDP: the routed experts over dp_shard·tp/ep ranks when ep divides dp_shard·tp (else
  // unsharded), every other parameter over dp_shard; a sharded parameter is gathered
  // whole for the step, an unsharded one (a group of one) is used as it is.
  const int64_t dp_shard = std::max(1, spec.parallelism.dp_shard);
  const int64_t replica = dp_shard * std::max(1, spec.parallelism.tp), ep_int = std::max(1, spec.parallelism.ep);
  e.shard_degree = static_cast<int>(dp_shard);
  e.expert_shard_degree = dp_shard > 1 && replica % ep_int == 0 ? static_cast<int>(replica / ep_int) : 1;
  const double expert_params = (n_layers - n_dense) * c.expert * s.e_local;
  const double other_params = e.rank_params - expert_params;
  const bool sharded = e.shard_degree > 1;
  e.shard_params = sharded ? other_params / e.shard_degree + expert_params / e.expert_shard_degree : e.rank_params;
  e.gathered_bytes = sharded ? kF32 * (other_params + (e.expert_shard_degree > 1 ? expert_params : 0)) : 0;
  e.state_bytes = e.shard_params * 16;
  e.all_gradients = e.rank_params * kF32;
  e.bucket_bytes = e.rank_params * kF32;
  e.fused_cpu = s.fused;

  const Half attn = AttentionHalf(s, attn_params), dense = DenseHalf(s, dense_params);
  const Half moe = MoeHalf(s, moe_params, c.shared / tp);
  Half loss;
  loss.act = NormSaved(s, s.n) + s.n * s.d * s.a + s.n * s.v * kF32;  // + fp32 log-probabilities
  loss.copies = s.bf16 ? 2 * head_params : 0;
  loss.transient = 2 * s.n * s.v * kF32;  // their gradient and the logits' (fp32)
  loss.grads = kF32 * head_params;

  const std::string& mode = spec.activation_checkpoint.mode;
  const bool full = mode == "full", selective = mode == "selective";
  // What a layer keeps from its forward until its backward.
  auto kept_act = [&](const Half& f) {
    if (full) return s.n * s.d * s.a;  // the checkpoint's input
    return (selective ? attn.act - attn.internal : attn.act) + f.act;
  };
  auto kept_copies = [&](const Half& f) {
    if (full) return 0.0;
    return (selective ? attn.copies - attn.attn_copies : attn.copies) + f.copies;
  };
  // Under full checkpointing a bf16 layer's input is held by the checkpoint only (the
  // fp32 norms save it themselves, so attn.act already has it).
  const double checkpoint_input = full && !s.fused && s.bf16 ? s.n * s.d * s.a : 0;
  const bool accumulating = spec.training.grad_accum_steps > 1;

  MemoryBreakdown base;
  base.parameters = e.shard_params * kF32 + e.gathered_bytes;  // during the step
  base.optimizer = e.shard_params * 2 * kF32;
  // Sharded, a bucket exists from its launch in backward to the end of the reduction
  // (phase's `launched`); replicated, every bucket from start-up.
  base.communication = sharded ? 0 : e.bucket_bytes;
  base.other = 3 * s.t * s.hd * kF32 + 8 * s.b * (s.t + 1);

  // What layers 0..i-1 keep (dense layers come first).
  auto prefix = [&](int i, auto kept) {
    return std::min(i, n_dense) * kept(dense) + std::max(0, i - n_dense) * kept(moe);
  };
  // The largest moment so far; no list, as the layout search estimates many specs.
  Phase peak_phase{base, 0, -1, ""};
  bool any = false;
  // Sharded, the gradients of the dense, router, head and embedding parameters go into
  // their buckets as backward finishes each layer (`launched` bytes so far): the full
  // gradient and the gathered parameter of each are gone then, the bucket holds the sum.
  // Routed experts launch after backward, so theirs stay to its end.
  auto phase = [&](double act, double copies, double grads, double comm, int layer, const char* what,
                   double launched = 0) {
    Phase p{base, sharded ? launched : e.bucket_bytes, layer, what};
    p.b.activations = act;
    p.b.compute_weights = copies;
    p.b.gradients = grads - launched;
    p.b.parameters -= launched;
    p.b.communication += comm + launched;
    if (!any || p.b.total() > peak_phase.b.total()) peak_phase = p;
    any = true;
    return p;
  };
  phase(prefix(n_layers, kept_act) + loss.act + loss.transient, prefix(n_layers, kept_copies) + loss.copies,
        accumulating ? e.all_gradients : 0, 0, -1, "the loss's backward");
  double done = loss.grads;  // gradients that exist once the loss's backward ran
  auto grads = [&](double produced, double now) { return accumulating ? e.all_gradients + now : produced; };
  // The routed experts' gradient bytes of one MoE layer, and what has launched (sharded).
  const double expert_layer_grads = n_layers > n_dense ? kF32 * expert_params / (n_layers - n_dense) : 0;
  double launched = sharded ? loss.grads : 0;
  for (int i = n_layers - 1; i >= 0; --i) {
    const bool is_moe = i >= n_dense;
    const Half& f = is_moe ? moe : dense;
    const double held = prefix(i, kept_act), held_copies = prefix(i, kept_copies);
    // The FFN/MoE half first: selective has not recomputed the attention yet.
    const double attn_held = selective ? attn.act - attn.internal : attn.act;
    const double attn_copies = selective ? attn.copies - attn.attn_copies : attn.copies;
    const double before = held + checkpoint_input + attn_held;
    if (f.first_act > 0) {
      phase(before + f.act + f.first_transient, held_copies + attn_copies + f.copies,
            grads(done + f.first_grads, f.first_grads), 0, i, "shared experts", launched);
    }
    phase(before + f.act - f.first_act + f.transient, held_copies + attn_copies + f.copies - f.first_copies,
          grads(done + f.grads, f.grads - f.first_grads), f.comm, i, is_moe ? "MoE" : "FFN", launched);
    phase(held + checkpoint_input + attn.act + attn.transient, held_copies + attn.copies,
          grads(done + f.grads + attn.grads, attn.grads), 0, i, "attention", launched);
    done += f.grads + attn.grads;
    if (sharded) launched += f.grads + attn.grads - (is_moe ? expert_layer_grads : 0);
  }
  // The embedding's gradient last, with the residual stream's gradient (fp32); sharded,
  // the reduction's shard gradients too.
  const double shard_grads = sharded ? e.shard_params * kF32 : 0;
  phase(s.n * s.d * kF32, 0, e.all_gradients + shard_grads, 0, -1, "the end of backward",
        sharded ? e.all_gradients - kF32 * expert_params : 0);
  // The MFU probe between steps, while the last step's gradients still exist (sharded:
  // only the shards, of the gradients and of the parameters).
  base.other += ProbeBytes(spec.resources.device == "cuda", s.bf16);
  base.parameters = e.shard_params * kF32;
  phase(0, 0, sharded ? shard_grads : e.all_gradients, 0, -1, "the GEMM peak probe between steps");

  const Phase* peak = &peak_phase;
  e.peak = peak->b;
  e.bucket_bytes = peak->buckets;
  e.peak_at =
      peak->layer < 0 ? peak->what : "the backward of layer " + std::to_string(peak->layer) + "'s " + peak->what;
  e.activation_bytes = e.peak.activations;
  return e;
}

std::string FormatBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char out[64];
  std::snprintf(out, sizeof out, "%.3g %s", b, units[u]);
  return out;
}

double PersistentStateBytes(const JobSpec& spec) { return EstimateRankMemory(spec).state_bytes; }

std::string DescribeLayout(const JobSpec& s) {
  return "dp=" + std::to_string(s.parallelism.dp) + " dp_shard=" + std::to_string(s.parallelism.dp_shard) +
         " tp=" + std::to_string(s.parallelism.tp) + " ep=" + std::to_string(s.parallelism.ep) +
         " activation_checkpoint.mode=" + s.activation_checkpoint.mode +
         " training.mixed_precision=" + s.training.mixed_precision;
}

std::string DescribeBreakdown(const MemoryEstimate& e) {
  const MemoryBreakdown& p = e.peak;
  std::string out;
  auto part = [&](const char* name, double bytes, bool always = false) {
    if (bytes <= 0 && !always) return;
    out += (out.empty() ? "" : ", ") + std::string(name) + " " + FormatBytes(bytes);
  };
  part("parameters", p.parameters);
  // Sharded, the step's gathered copy is most of it: say how much.
  const double gathered = p.parameters - e.shard_params * kF32;
  if (gathered > 0) out += " (" + FormatBytes(gathered) + " of them gathered for the step)";
  part("gradients", p.gradients, true);
  part("optimizer", p.optimizer);
  part("weight copies", p.compute_weights);
  part("activations", p.activations);
  part("communication", p.communication);
  part("other", p.other);
  return out;
}

}  // namespace trainyard::spec
