"""The engine's architectures against Hugging Face transformers' own modeling code.

For deepseek_v3 and qwen3_moe: weights drawn here go into trainyard-train (--load) and
into the transformers model of the same keys (built from the job's normalised spec),
under the documented name map (docs/architecture.md, "Hugging Face names"); the two
first losses of a fixed batch must agree within 1e-5 (fp32), and changing one feature
on transformers' side must move its loss by more than 1e-4. Each preset's parameter
count, as `trainyard preflight` prints it, equals transformers' model's.

Environment: TRAINYARD_TRAIN (trainyard-train), TRAINYARD_CLI (trainyard), TRAINYARD_EXAMPLES
(examples/).
"""

import json
import math
import os
import subprocess
import tempfile
import unittest

import numpy as np
import torch
from safetensors.torch import load_file, save_file

import transformers

TRAIN = os.environ["TRAINYARD_TRAIN"]
CLI = os.environ["TRAINYARD_CLI"]
EXAMPLES = os.environ["TRAINYARD_EXAMPLES"]


def run_train(sets, extra=()):
    argv = [TRAIN, os.path.join(EXAMPLES, "debug.toml"), "--json", "--threads", "2"]
    for s in sets:
        argv += ["--set", s]
    argv += list(extra)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError(f"trainyard-train failed ({r.returncode}):\n{r.stderr[-4000:]}")
    return r.stdout


def normalised_spec(sets):
    return json.loads(run_train(sets, ["--print-config"]))


def step_losses(stdout):
    losses = {}
    for line in stdout.splitlines():
        e = json.loads(line)
        if "step_metrics" in e:
            m = e["step_metrics"]
            losses[int(m["step"])] = float(m["loss"])
    return losses


def deepseek_v3_config(m, seq_len):
    """transformers' DeepseekV3Config for the engine's model keys."""
    yarn = m["rope_factor"] > 1
    rope = {"rope_type": "default", "rope_theta": m["rope_theta"]}
    if yarn:
        # The engine's one mscale scales the softmax (HF's mscale_all_dim) and leaves the
        # cos/sin tables alone (HF's attention_factor = mscale / mscale_all_dim = 1).
        rope = {"rope_type": "yarn", "rope_theta": m["rope_theta"], "factor": m["rope_factor"],
                "original_max_position_embeddings": m["original_seq_len"], "beta_fast": m["beta_fast"],
                "beta_slow": m["beta_slow"], "mscale": m["mscale"], "mscale_all_dim": m["mscale"]}
    return transformers.DeepseekV3Config(
        vocab_size=m["vocab_size"], hidden_size=m["dim"], intermediate_size=m["ffn_hidden"],
        moe_intermediate_size=m["expert_hidden"], num_hidden_layers=m["n_layers"],
        first_k_dense_replace=m["n_dense_layers"], num_attention_heads=m["n_heads"],
        num_key_value_heads=m["n_heads"], n_shared_experts=m["n_shared_experts"],
        n_routed_experts=m["n_routed_experts"], num_experts_per_tok=m["top_k"],
        routed_scaling_factor=m["route_scale"], n_group=m["n_expert_groups"], topk_group=m["n_limited_groups"],
        norm_topk_prob=m["route_norm"], q_lora_rank=m["q_lora_rank"] or None, kv_lora_rank=m["kv_lora_rank"],
        qk_nope_head_dim=m["qk_nope_head_dim"], qk_rope_head_dim=m["qk_rope_head_dim"],
        v_head_dim=m["v_head_dim"], rms_norm_eps=m["norm_eps"],
        # YaRN's context (HF checks it against factor · original length); positions used: seq_len.
        max_position_embeddings=max(seq_len, int(m["original_seq_len"] * m["rope_factor"])),
        rope_parameters=rope, rope_interleave=True, tie_word_embeddings=False, attention_bias=False,
        attention_dropout=0.0)


def deepseek_v3_state(ours, m):
    """The engine's tensors under transformers' DeepseekV3ForCausalLM names."""
    hf = {"model.embed_tokens.weight": ours["tok_embeddings.weight"], "model.norm.weight": ours["norm.weight"],
          "lm_head.weight": ours["output.weight"]}
    attention = {"wq": "q_proj", "wq_a": "q_a_proj", "q_norm": "q_a_layernorm", "wq_b": "q_b_proj",
                 "wkv_a": "kv_a_proj_with_mqa", "kv_norm": "kv_a_layernorm", "wkv_b": "kv_b_proj", "wo": "o_proj"}
    ffn = {"w1": "gate_proj", "w2": "down_proj", "w3": "up_proj"}
    for i in range(m["n_layers"]):
        src, dst = f"layers.{i}.", f"model.layers.{i}."
        hf[dst + "input_layernorm.weight"] = ours[src + "attention_norm.weight"]
        hf[dst + "post_attention_layernorm.weight"] = ours[src + "ffn_norm.weight"]
        for a, b in attention.items():
            if src + f"attention.{a}.weight" in ours:
                hf[dst + f"self_attn.{b}.weight"] = ours[src + f"attention.{a}.weight"]
        if i < m["n_dense_layers"]:
            for a, b in ffn.items():
                hf[dst + f"mlp.{b}.weight"] = ours[src + f"feed_forward.{a}.weight"]
            continue
        hf[dst + "mlp.gate.weight"] = ours[src + "moe.router.gate.weight"]
        hf[dst + "mlp.gate.e_score_correction_bias"] = ours[src + "moe.expert_bias"]
        # transformers keeps the routed experts fused: gate and up stacked per expert.
        hf[dst + "mlp.experts.gate_up_proj"] = torch.cat([ours[src + "moe.experts.w1"],
                                                        ours[src + "moe.experts.w3"]], dim=1)
        hf[dst + "mlp.experts.down_proj"] = ours[src + "moe.experts.w2"]
        for a, b in ffn.items():
            hf[dst + f"mlp.shared_experts.{b}.weight"] = ours[src + f"moe.shared_experts.{a}.weight"]
    return hf


def qwen3_moe_config(m, seq_len):
    """transformers' Qwen3MoeConfig for the engine's model keys."""
    return transformers.Qwen3MoeConfig(
        vocab_size=m["vocab_size"], hidden_size=m["dim"], intermediate_size=m["ffn_hidden"],
        moe_intermediate_size=m["expert_hidden"], num_hidden_layers=m["n_layers"],
        mlp_only_layers=list(range(m["n_dense_layers"])), decoder_sparse_step=1,
        num_attention_heads=m["n_heads"], num_key_value_heads=m["n_kv_heads"], head_dim=m["head_dim"] or None,
        num_experts=m["n_routed_experts"], num_experts_per_tok=m["top_k"], norm_topk_prob=m["route_norm"],
        rms_norm_eps=m["norm_eps"], max_position_embeddings=seq_len,
        rope_parameters={"rope_type": "default", "rope_theta": m["rope_theta"]}, tie_word_embeddings=False,
        attention_bias=False, attention_dropout=0.0)


def rotate_half_rows(w, heads, head_dim):
    """w's rows per head from the engine's RoPE layout (pairs 2i, 2i+1 rotate together)
    to rotate-half's (i, i + head_dim/2), which Qwen's and Llama's HF code uses."""
    perm = torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])
    if w.dim() == 1:
        return w[perm]
    return w.view(heads, head_dim, -1)[:, perm, :].reshape(w.shape)


def qwen3_moe_state(ours, m, permute=True):
    """The engine's tensors under transformers' Qwen3MoeForCausalLM names."""
    hd = m["head_dim"] or m["dim"] // m["n_heads"]
    rope = (lambda w, heads: rotate_half_rows(w, heads, hd)) if permute else (lambda w, heads: w)
    hf = {"model.embed_tokens.weight": ours["tok_embeddings.weight"], "model.norm.weight": ours["norm.weight"],
          "lm_head.weight": ours["output.weight"]}
    ffn = {"w1": "gate_proj", "w2": "down_proj", "w3": "up_proj"}
    for i in range(m["n_layers"]):
        src, dst = f"layers.{i}.", f"model.layers.{i}."
        a = src + "attention."
        hf[dst + "input_layernorm.weight"] = ours[src + "attention_norm.weight"]
        hf[dst + "post_attention_layernorm.weight"] = ours[src + "ffn_norm.weight"]
        hf[dst + "self_attn.q_proj.weight"] = rope(ours[a + "wq.weight"], m["n_heads"])
        hf[dst + "self_attn.k_proj.weight"] = rope(ours[a + "wk.weight"], m["n_kv_heads"])
        hf[dst + "self_attn.v_proj.weight"] = ours[a + "wv.weight"]
        hf[dst + "self_attn.o_proj.weight"] = ours[a + "wo.weight"]
        hf[dst + "self_attn.q_norm.weight"] = rope(ours[a + "q_norm.weight"], 1)
        hf[dst + "self_attn.k_norm.weight"] = rope(ours[a + "k_norm.weight"], 1)
        if i < m["n_dense_layers"]:
            for x, y in ffn.items():
                hf[dst + f"mlp.{y}.weight"] = ours[src + f"feed_forward.{x}.weight"]
            continue
        hf[dst + "mlp.gate.weight"] = ours[src + "moe.router.gate.weight"]
        hf[dst + "mlp.experts.gate_up_proj"] = torch.cat([ours[src + "moe.experts.w1"],
                                                        ours[src + "moe.experts.w3"]], dim=1)
        hf[dst + "mlp.experts.down_proj"] = ours[src + "moe.experts.w2"]
    return hf


def draw_weights(init, seed):
    """Weights of the names and shapes in `init` drawn so that every part of the model
    matters to the loss: unit-gain matrices (1/sqrt(fan_in)), norms around 1, a unit
    embedding and an expert bias that moves the routing. The engine's own init (std
    0.02) leaves the loss within 1e-5 of ln(vocab) whatever the attention does."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in sorted(init.items()):
        if name.endswith("norm.weight"):
            out[name] = 0.8 + 0.4 * torch.rand(t.shape, generator=g)
        elif name.endswith("expert_bias"):
            out[name] = 0.1 * torch.randn(t.shape, generator=g)
        elif name == "tok_embeddings.weight":
            out[name] = torch.randn(t.shape, generator=g)
        else:
            out[name] = torch.randn(t.shape, generator=g) / math.sqrt(t.shape[-1])
    return out


def hf_loss(config, state, inputs, targets):
    """Mean cross-entropy of transformers' model of `config` with `state` on the batch."""
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert unexpected == [], f"engine tensors transformers has no place for: {unexpected}"
    missing = [k for k in missing if "rotary_emb" not in k]
    assert missing == [], f"transformers tensors left unset: {missing}"
    with torch.no_grad():
        logits = model(input_ids=inputs).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).double(),
                                             targets.reshape(-1)).item()


def engine_first_loss(tmp, preset, batch, seq, zero_bias=False):
    """The engine's first loss on a fixed batch from drawn weights; also the spec's model
    keys, the weights and the batch."""
    m = normalised_spec([f"model.preset=\"{preset}\""])["model"]
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, m["vocab_size"], size=batch * seq + 1, dtype=np.uint32)
    data = os.path.join(tmp, "batch.u32")
    tokens.tofile(data)
    sets = [f"model.preset=\"{preset}\"", "training.steps=1", "training.dataset=\"tokens\"",
            f"training.dataset_path=\"{data}\"", f"training.batch_size={batch}", f"training.seq_len={seq}"]
    init = os.path.join(tmp, "init.safetensors")
    run_train(sets, ["--save-init", init])
    weights = draw_weights(load_file(init), seed=11)
    if zero_bias:
        weights = {k: (torch.zeros_like(v) if k.endswith("expert_bias") else v) for k, v in weights.items()}
    drawn = os.path.join(tmp, "drawn.safetensors")
    save_file(weights, drawn)
    ours = step_losses(run_train(sets, ["--load", drawn]))[1]
    t = torch.from_numpy(tokens.astype(np.int64))
    # Sample i covers tokens [i·seq, i·seq + seq]: inputs, then targets shifted by one.
    inputs = torch.stack([t[i * seq:i * seq + seq] for i in range(batch)])
    targets = torch.stack([t[i * seq + 1:i * seq + seq + 1] for i in range(batch)])
    return ours, m, weights, inputs, targets


class ArchitectureTest(unittest.TestCase):
    def check_close(self, name, ours, theirs, m):
        print(f"[figures] {name} first loss: trainyard {ours:.8f} transformers {theirs:.8f} "
              f"(relative {abs(ours - theirs) / theirs:.2e}; ln(vocab) {math.log(m['vocab_size']):.4f})")
        self.assertTrue(math.isfinite(ours))
        self.assertLess(abs(ours - theirs) / theirs, 1e-5)

    def check_apart(self, what, other, theirs):
        self.assertGreater(abs(other - theirs) / theirs, 1e-4, f"{what}: the comparison cannot tell it apart")

    def test_deepseek_v3_first_loss_equals_transformers(self):
        batch, seq = 2, 256
        with tempfile.TemporaryDirectory() as tmp:
            ours, m, weights, inputs, targets = engine_first_loss(tmp, "deepseek_v3_debug", batch, seq)
            self.assertEqual(m["architecture"], "deepseek_v3")
            theirs = hf_loss(deepseek_v3_config(m, seq), deepseek_v3_state(weights, m), inputs, targets)
            self.check_close("deepseek_v3_debug", ours, theirs, m)
            # The comparison tells the parts apart: transformers' model without YaRN,
            # without the group limit or without the expert bias ends more than 1e-4 away.
            for what, changed in {"no YaRN": dict(m, rope_factor=1.0),
                                  "no group limit": dict(m, n_expert_groups=1, n_limited_groups=1)}.items():
                self.check_apart(what, hf_loss(deepseek_v3_config(changed, seq), deepseek_v3_state(weights, m),
                                               inputs, targets), theirs)
            unbiased = {k: (torch.zeros_like(v) if k.endswith("expert_bias") else v) for k, v in weights.items()}
            self.check_apart("no expert bias", hf_loss(deepseek_v3_config(m, seq), deepseek_v3_state(unbiased, m),
                                                       inputs, targets), theirs)

    def test_qwen3_moe_first_loss_equals_transformers(self):
        batch, seq = 2, 256
        with tempfile.TemporaryDirectory() as tmp:
            # Qwen3's router has no bias: the engine's (aux-free balancing) starts at zero.
            ours, m, weights, inputs, targets = engine_first_loss(tmp, "qwen3_moe_debug", batch, seq,
                                                                  zero_bias=True)
            self.assertEqual(m["architecture"], "qwen3_moe")
            self.assertNotEqual(m["head_dim"] * m["n_heads"], m["dim"], "the case has heads wider than dim/heads")
            theirs = hf_loss(qwen3_moe_config(m, seq), qwen3_moe_state(weights, m), inputs, targets)
            self.check_close("qwen3_moe_debug", ours, theirs, m)
            # Apart: the RoPE rows left in the engine's layout, and rope_theta 1e4.
            self.check_apart("RoPE layout", hf_loss(qwen3_moe_config(m, seq), qwen3_moe_state(weights, m, False),
                                                    inputs, targets), theirs)
            changed = dict(m, rope_theta=1e4)
            self.check_apart("rope_theta", hf_loss(qwen3_moe_config(changed, seq), qwen3_moe_state(weights, m),
                                                   inputs, targets), theirs)

    def test_preset_parameter_counts_equal_transformers(self):
        # The count `trainyard preflight` prints (the spec core's, which the FLOPs model and
        # the memory estimate use) against transformers' model of the same keys, built on
        # the meta device (no memory).
        presets = {"deepseek_v3_debug": deepseek_v3_config, "deepseek_v3_16b": deepseek_v3_config,
                   "deepseek_v3_671b": deepseek_v3_config, "qwen3_moe_debug": qwen3_moe_config,
                   "qwen3_30b_a3b": qwen3_moe_config, "qwen3_235b_a22b": qwen3_moe_config}
        for preset, make_config in presets.items():
            with self.subTest(preset=preset):
                sets = [f"model.preset=\"{preset}\""]
                m = normalised_spec(sets)["model"]
                argv = [CLI, "preflight", os.path.join(EXAMPLES, "debug.toml"), "--json"]
                for s in sets:
                    argv += ["--set", s]
                # The memory estimate comes first, whatever follows (the 16B and 671B models'
                # runners are refused as too big for this machine, exit 2).
                r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
                estimate = None
                for line in r.stderr.splitlines():
                    if line.startswith("{") and "memory_estimate" in line:
                        estimate = json.loads(line)["memory_estimate"]
                self.assertIsNotNone(estimate, r.stderr[-2000:])
                ours = int(estimate["total_params"])
                with torch.device("meta"):
                    model = transformers.AutoModelForCausalLM.from_config(make_config(m, 4096))
                theirs = sum(p.numel() for p in model.parameters())
                print(f"[figures] {preset}: trainyard {ours:,} parameters, transformers {theirs:,}")
                self.assertEqual(ours, theirs)


if __name__ == "__main__":
    unittest.main()
