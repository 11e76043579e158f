"""The engine's default model (model.architecture = "trainyard") in plain PyTorch.

The same decoder as worker/engine/model/ (docs/architecture.md, "Model and numerical
conventions"), written as a PyTorch user would write it (torch.nn, F.linear,
F.scaled_dot_product_attention), with the engine's parameter names (torchtitan's), so
the engine's safetensors export (`trainyard-train JOB --save-init W.safetensors`) loads
with `model.load_state_dict(safetensors.torch.load_file(W), strict=True)`.

  tok_embeddings -> layers (first n_dense_layers dense, the rest MoE) -> norm -> output
  block: h = x + attention(attention_norm(x)); out = h + ffn(ffn_norm(h))

Conventions, each checked against the engine's source (the file that decides it):
  - RMSNorm x * rsqrt(mean(x^2) + eps) * weight (model/layers/rms_norm.cc).
  - RoPE on consecutive pairs (2i, 2i+1) of each head, freq_i = theta^(-2i/head_dim),
    angles in float64 and then float32 tables (model/layers/rotary_embedding.cc).
  - Causal grouped-query attention: query head h uses KV head h / (n_heads/n_kv_heads),
    scale 1/sqrt(head_dim) (model/layers/attention_layer.cc).
  - Dense FFN and shared experts: w2(silu(w1 x) * w3 x), no biases (dense_ffn.cc); the
    shared experts are ONE FFN of hidden expert_hidden * n_shared_experts (moe_layer.cc).
  - Router (moe/moe_router.cc): logits = gate(x) (fp32 before the score function),
    scores = sigmoid or softmax; experts = top-k of scores.detach() + expert_bias; gates =
    the unbiased scores of those experts, divided by (their sum + 1e-20) when route_norm
    and top_k > 1 (for softmax too, not only sigmoid), times route_scale when != 1.
  - Routed experts w1, w3: [E, H, D], w2: [E, D, H]; expert e: w2[e](silu(w1[e] x) *
    w3[e] x) (moe/grouped_experts.h). Token rows are stably sorted by expert.
  - Combine: out[t] = sum over t's slots of gate * expert output (index_add in slot
    order), then + shared experts (moe_layer.cc).
  - Loss: mean cross-entropy over every batch*seq next-token target, fp32 logits
    (transformer_model.cc, regions::Loss).
  - Init (TransformerModelImpl::InitWeights): in named_parameters order, from one CPU
    generator seeded with training.seed: normal(0, 0.02), normal(0, 0.02/sqrt(2*n_layers))
    for wo, w2 (dense, shared and routed) and output; every *norm.weight = 1; expert_bias
    = 0. Same torch version, same generator: the same bits as the engine's --save-init.
  - Aux-loss-free balancing after each optimizer step (MoEImpl::UpdateExpertBias):
    c = tokens per expert of the step as float32; bias += coeff * sign(mean(c) - c);
    bias -= mean(bias).

Mixed precision ("bf16", docs/mixed_precision.md, model/regions/projection.h): fp32
parameters; the embedding output is cast to bf16 and the residual stream stays bf16;
each weight is cast to bf16 where it is used; RMSNorm normalizes in fp32 and multiplies
the bf16 result by the bf16 weight; RoPE rotates in fp32; attention softmax in fp32;
router logits, scores and gates in fp32; the combine multiplies bf16 rows by fp32 gates,
casts the products to bf16 and sums in bf16; logits go to fp32 for the loss. That is
torchtitan's FSDP2 MixedPrecisionPolicy(param_dtype=bf16), not torch.autocast:
autocast keeps the residual stream, the norms and the adds in fp32 (a different
computation), so the peer casts explicitly (`compute_dtype`). `autocast=True` on the
model is offered as the other thing a PyTorch user might do (precision
"bf16_autocast" in train_peer.py); it does not compute what the engine computes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

# --------------------------------------------------------------------------------------
# Presets: common/spec/presets.cc (model keys plus training.seq_len and batch_size).

_DEBUG = dict(vocab_size=2048, dim=256, n_layers=4, n_dense_layers=1, n_heads=8, n_kv_heads=4,
              ffn_hidden=768, n_routed_experts=8, top_k=2, n_shared_experts=1, expert_hidden=256,
              score_func="sigmoid", route_norm=True, route_scale=1.0, rope_theta=10000.0,
              norm_eps=1e-5, load_balance_coeff=1e-3)

PRESETS: Dict[str, Dict] = {
    "debug": dict(model=dict(_DEBUG), seq_len=256, batch_size=8),
    "tiny": dict(model=dict(_DEBUG, vocab_size=256, dim=64, n_layers=2, n_dense_layers=1, n_heads=4,
                            n_kv_heads=2, ffn_hidden=128, n_routed_experts=4, top_k=2,
                            n_shared_experts=1, expert_hidden=32),
                 seq_len=32, batch_size=4),
    "gpu_small": dict(model=dict(_DEBUG, vocab_size=32768, dim=1024, n_layers=8, n_dense_layers=1,
                                 n_heads=16, n_kv_heads=8, ffn_hidden=2816, n_routed_experts=16,
                                 top_k=2, n_shared_experts=1, expert_hidden=512),
                      seq_len=2048, batch_size=8),
}


@dataclasses.dataclass
class ModelConfig:
    vocab_size: int
    dim: int
    n_layers: int
    n_dense_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_hidden: int
    n_routed_experts: int
    top_k: int
    n_shared_experts: int
    expert_hidden: int
    score_func: str = "sigmoid"
    route_norm: bool = True
    route_scale: float = 1.0
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    load_balance_coeff: float = 1e-3

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers

    @staticmethod
    def preset(name: str, **overrides) -> "ModelConfig":
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
        return ModelConfig(**dict(PRESETS[name]["model"], **overrides))


def parameter_counts(c: ModelConfig) -> Dict[str, int]:
    """common/spec/memory_estimate.cc CountAs."""
    d, hd = c.dim, c.head_dim
    attention = d * (c.n_heads * hd) * 2 + d * (c.n_kv_heads * hd) * 2
    layer_norms = 2 * d
    dense_ffn = 3 * d * c.ffn_hidden
    expert = 3 * d * c.expert_hidden
    router = d * c.n_routed_experts
    shared = expert * c.n_shared_experts
    dense_layer = attention + layer_norms + dense_ffn
    moe_layer_all = attention + layer_norms + router + shared + expert * c.n_routed_experts
    moe_layer_active = attention + layer_norms + router + shared + expert * c.top_k
    embedding = output = c.vocab_size * d
    total = embedding + output + d + c.n_dense_layers * dense_layer + c.n_moe_layers * moe_layer_all
    active = output + d + c.n_dense_layers * dense_layer + c.n_moe_layers * moe_layer_active
    return dict(total=total, embedding=embedding, active_non_embedding=active)


def flops_per_token(c: ModelConfig, seq_len: int) -> float:
    """worker/engine/train/flops_model.cc: 6*(active non-embedding params incl. output) +
    12*n_layers*n_heads*head_dim*seq_len."""
    return 6.0 * parameter_counts(c)["active_non_embedding"] + 12.0 * c.n_layers * c.n_heads * c.head_dim * seq_len


# --------------------------------------------------------------------------------------
# Layers.


def _cast(w: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The weight in the activations' dtype (regions::AsComputeType): itself in fp32."""
    return w if w.dtype == like.dtype else w.to(like.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        # bf16: normalize in fp32, then scale by the weight in bf16 (Llama's reference
        # form, the engine's regions::Normalize).
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * _cast(self.weight, x)


def rope_tables(head_dim: int, max_seq_len: int, theta: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: [max_seq_len, head_dim/2] float32, from float64 angles."""
    i = torch.arange(0, head_dim // 2, dtype=torch.float64)
    freqs = torch.pow(torch.tensor(theta, dtype=torch.float64), -2.0 * i / head_dim)
    angles = torch.outer(torch.arange(0, max_seq_len, dtype=torch.float64), freqs)
    return torch.cos(angles).float(), torch.sin(angles).float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [b, t, heads, hd]; rotates pairs (2i, 2i+1) in fp32, returns x's dtype."""
    xf = x.float().unflatten(-1, (-1, 2))
    x0, x1 = xf[..., 0], xf[..., 1]
    c = cos[: x.shape[1]].unsqueeze(1)  # [t, 1, hd/2]
    s = sin[: x.shape[1]].unsqueeze(1)
    out = torch.stack((x0 * c - x1 * s, x1 * c + x0 * s), dim=-1).flatten(-2)
    return out.to(x.dtype)


class Attention(nn.Module):
    """`impl`: "sdpa" (F.scaled_dot_product_attention, causal; what a user writes) or
    "math" (scores, fp32 softmax, as the engine's composite region computes them).
    `gqa`: "repeat" (repeat_interleave K/V to n_heads, torchtitan's repeat_kv) or
    "native" (SDPA's enable_gqa)."""

    def __init__(self, c: ModelConfig, impl: str = "sdpa", gqa: str = "repeat"):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = c.n_heads, c.n_kv_heads, c.head_dim
        self.impl, self.gqa = impl, gqa
        self.wq = nn.Linear(c.dim, c.n_heads * c.head_dim, bias=False)
        self.wk = nn.Linear(c.dim, c.n_kv_heads * c.head_dim, bias=False)
        self.wv = nn.Linear(c.dim, c.n_kv_heads * c.head_dim, bias=False)
        self.wo = nn.Linear(c.n_heads * c.head_dim, c.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        hd = self.head_dim
        q = F.linear(x, _cast(self.wq.weight, x)).view(b, t, self.n_heads, hd)
        k = F.linear(x, _cast(self.wk.weight, x)).view(b, t, self.n_kv_heads, hd)
        v = F.linear(x, _cast(self.wv.weight, x)).view(b, t, self.n_kv_heads, hd)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [b, heads, t, hd]
        rep = self.n_heads // self.n_kv_heads
        scale = 1.0 / math.sqrt(hd)
        if self.impl == "math":
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
            mask = torch.full((t, t), float("-inf"), device=x.device).triu(1).to(x.dtype)
            scores = torch.baddbmm(mask, q.reshape(b * self.n_heads, t, hd),
                                   k.reshape(b * self.n_heads, t, hd).transpose(1, 2), beta=1.0, alpha=scale)
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(x.dtype)
            out = torch.bmm(probs, v.reshape(b * self.n_heads, t, hd)).view(b, self.n_heads, t, hd)
        else:
            if rep > 1 and self.gqa == "repeat":
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale,
                                                 enable_gqa=rep > 1 and self.gqa == "native")
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * hd)
        return F.linear(out, _cast(self.wo.weight, out))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.silu(F.linear(x, _cast(self.w1.weight, x))) * F.linear(x, _cast(self.w3.weight, x)),
                        _cast(self.w2.weight, x))


class TokenChoiceRouter(nn.Module):
    def __init__(self, dim: int, n_experts: int):
        super().__init__()
        self.gate = nn.Linear(dim, n_experts, bias=False)


def _grouped_mm_fn():
    return getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


@torch.compiler.disable
def _experts_loop(x: torch.Tensor, counts: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
                  w3: torch.Tensor) -> torch.Tensor:
    """One SwiGLU per expert on its slice of rows (torchtitan's for-loop experts). The
    slice sizes are data (a host read), so under torch.compile this runs eagerly."""
    sizes = counts.tolist()
    outs = []
    for e, xs in enumerate(torch.split(x, sizes, dim=0)):
        if sizes[e] == 0:
            continue
        h = F.silu(F.linear(xs, _cast(w1[e], xs))) * F.linear(xs, _cast(w3[e], xs))
        outs.append(F.linear(h, _cast(w2[e], xs)))
    if not outs:
        return x[:0] * 0
    return torch.cat(outs, dim=0)


def _experts_grouped_mm(x: torch.Tensor, counts: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
                        w3: torch.Tensor) -> torch.Tensor:
    """All experts in three grouped GEMMs (torch grouped_mm with group end offsets): no
    host read, so it compiles as one graph. Inductor's grouped_mm needs bf16."""
    gmm = _grouped_mm_fn()
    offs = torch.cumsum(counts, dim=0).to(torch.int32)
    h = F.silu(gmm(x, _cast(w1, x).transpose(-2, -1), offs=offs)) * gmm(x, _cast(w3, x).transpose(-2, -1), offs=offs)
    return gmm(h, _cast(w2, x).transpose(-2, -1), offs=offs)


class GroupedExperts(nn.Module):
    def __init__(self, dim: int, hidden: int, n_experts: int, impl: str = "loop"):
        super().__init__()
        self.impl = impl
        self.w1 = nn.Parameter(torch.empty(n_experts, hidden, dim))
        self.w2 = nn.Parameter(torch.empty(n_experts, dim, hidden))
        self.w3 = nn.Parameter(torch.empty(n_experts, hidden, dim))

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        if self.impl == "grouped_mm":
            return _experts_grouped_mm(x, counts, self.w1, self.w2, self.w3)
        return _experts_loop(x, counts, self.w1, self.w2, self.w3)


class MoE(nn.Module):
    def __init__(self, c: ModelConfig, experts_impl: str = "loop"):
        super().__init__()
        self.n_experts, self.top_k = c.n_routed_experts, c.top_k
        self.score_func, self.route_norm, self.route_scale = c.score_func, c.route_norm, c.route_scale
        self.router = TokenChoiceRouter(c.dim, c.n_routed_experts)
        self.experts = GroupedExperts(c.dim, c.expert_hidden, c.n_routed_experts, experts_impl)
        self.shared_experts = (FeedForward(c.dim, c.expert_hidden * c.n_shared_experts)
                               if c.n_shared_experts > 0 else None)
        self.register_buffer("expert_bias", torch.zeros(c.n_routed_experts))

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        logits = F.linear(x, _cast(self.router.gate.weight, x)).float()
        scores = torch.softmax(logits, dim=-1) if self.score_func == "softmax" else torch.sigmoid(logits)
        selected = torch.topk(scores.detach() + self.expert_bias, self.top_k, dim=-1).indices
        gates = scores.gather(1, selected)
        if self.route_norm and self.top_k > 1:
            gates = gates / (gates.sum(-1, keepdim=True) + 1e-20)
        if self.route_scale != 1.0:
            gates = gates * self.route_scale
        flat = selected.reshape(-1)
        # bincount with minlength, as a fixed-size scatter (no data-dependent shape).
        counts = torch.zeros(self.n_experts, dtype=torch.int64, device=x.device).scatter_add_(
            0, flat, torch.ones_like(flat))
        order = torch.sort(flat, stable=True).indices
        token_ids = order // self.top_k
        rows = x.index_select(0, token_ids)
        row_gates = gates.reshape(-1).index_select(0, order).unsqueeze(1)
        y = self.experts(rows, counts)
        weighted = (y * row_gates).to(x.dtype)  # bf16: fp32 product, bf16 sum
        out = torch.zeros_like(x).index_add(0, token_ids, weighted)
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return out.view(shape), counts

    @torch.no_grad()
    def update_expert_bias(self, counts: torch.Tensor, coeff: float) -> None:
        c = counts.to(self.expert_bias.dtype)
        self.expert_bias.add_(torch.sign(c.mean() - c), alpha=coeff)
        self.expert_bias.sub_(self.expert_bias.mean())


class TransformerBlock(nn.Module):
    def __init__(self, c: ModelConfig, use_moe: bool, attn_impl: str, gqa: str, experts_impl: str):
        super().__init__()
        self.attention_norm = RMSNorm(c.dim, c.norm_eps)
        self.attention = Attention(c, attn_impl, gqa)
        self.ffn_norm = RMSNorm(c.dim, c.norm_eps)
        if use_moe:
            self.moe = MoE(c, experts_impl)
        else:
            self.feed_forward = FeedForward(c.dim, c.ffn_hidden)
        self.use_moe = use_moe

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        if self.use_moe:
            out, counts = self.moe(self.ffn_norm(h))
            return h + out, counts
        return h + self.feed_forward(self.ffn_norm(h)), None


class Transformer(nn.Module):
    """forward(tokens, targets) -> (loss, tokens_per_expert [n_moe_layers, E] int64)."""

    def __init__(self, c: ModelConfig, max_seq_len: int, compute_dtype: torch.dtype = torch.float32,
                 attn_impl: str = "sdpa", gqa: str = "repeat", experts_impl: str = "loop"):
        super().__init__()
        assert compute_dtype in (torch.float32, torch.bfloat16)
        self.config = c
        self.compute_dtype = compute_dtype
        self.tok_embeddings = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList(
            TransformerBlock(c, i >= c.n_dense_layers, attn_impl, gqa, experts_impl) for i in range(c.n_layers))
        self.norm = RMSNorm(c.dim, c.norm_eps)
        self.output = nn.Linear(c.dim, c.vocab_size, bias=False)
        cos, sin = rope_tables(c.head_dim, max_seq_len, c.rope_theta)
        # Not persistent: the engine's export holds parameters and expert_bias only.
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor):
        h = self.tok_embeddings(tokens).to(self.compute_dtype)
        counts: List[torch.Tensor] = []
        for layer in self.layers:
            h, c = layer(h, self.rope_cos, self.rope_sin)
            if c is not None:
                counts.append(c)
        h = self.norm(h)
        logits = F.linear(h, _cast(self.output.weight, h)).float()
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        tokens_per_expert = (torch.stack(counts) if counts else
                             torch.zeros(0, self.config.n_routed_experts, dtype=torch.int64, device=tokens.device))
        return loss, tokens_per_expert

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """TransformerModelImpl::InitWeights, draw for draw."""
        gen = torch.Generator(device="cpu")
        gen.manual_seed(seed)
        std = 0.02
        out_std = std / math.sqrt(2.0 * self.config.n_layers)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
                continue
            full = torch.empty(p.shape, dtype=torch.float32)
            small = (name.endswith(".wo.weight") or name.endswith(".w2.weight") or name.endswith(".experts.w2")
                     or name == "output.weight")
            full.normal_(0.0, out_std if small else std, generator=gen)
            p.copy_(full)
        for layer in self.layers:
            if layer.use_moe:
                layer.moe.expert_bias.zero_()

    def moe_layers(self) -> List[MoE]:
        return [layer.moe for layer in self.layers if layer.use_moe]

    @torch.no_grad()
    def update_expert_biases(self, counts: torch.Tensor, coeff: float) -> None:
        """counts: [n_moe_layers, E], the step's tokens per expert (any dtype)."""
        for row, moe in enumerate(self.moe_layers()):
            moe.update_expert_bias(counts[row], coeff)


def grouped_mm_works(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether grouped_mm runs forward and backward here, for this dtype (a CUDA build
    may lack it for the GPU's architecture; CPU runs it in fp32 and bf16)."""
    gmm = _grouped_mm_fn()
    if gmm is None:
        return False
    try:
        x = torch.randn(24, 32, device=device, dtype=dtype, requires_grad=True)
        w = torch.randn(3, 16, 32, device=device, dtype=dtype, requires_grad=True)
        offs = torch.tensor([5, 5, 24], device=device, dtype=torch.int32)
        y = gmm(x, w.transpose(-2, -1), offs=offs)
        y.backward(torch.ones_like(y))
        ref = torch.cat([x[:5] @ w[0].T, x[5:] @ w[2].T]).float()
        return bool(torch.allclose(y.float(), ref, rtol=2e-2, atol=2e-2))
    except Exception:  # noqa: BLE001 - any failure means "not here"
        return False
