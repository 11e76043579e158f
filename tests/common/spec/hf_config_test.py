"""The config.json the engine writes and reads, against transformers itself.

For each real preset: the config.json Trainyard writes (HuggingFaceConfigJson, printed by
the test-only hf_config_print) loads with transformers.AutoConfig.from_pretrained, and a
model built from it on the meta device has the parameter count `trainyard preflight
--json` prints; transformers' own save of that config reads back to the same keys. A
config.json transformers saves from DeepseekV3Config / Qwen3MoeConfig arguments reads
(ReadHuggingFaceConfig) to the model keys those arguments mean.

Environment: TRAINYARD_HF_CONFIG_PRINT (hf_config_print), TRAINYARD_CLI (trainyard),
TRAINYARD_EXAMPLES (examples/).
"""

import json
import os
import subprocess
import tempfile
import unittest

import torch
import transformers

PRINT = os.environ["TRAINYARD_HF_CONFIG_PRINT"]
CLI = os.environ["TRAINYARD_CLI"]
EXAMPLES = os.environ["TRAINYARD_EXAMPLES"]

PRESETS = ["deepseek_v3_debug", "deepseek_v3_16b", "deepseek_v3_671b", "qwen3_moe_debug", "qwen3_30b_a3b",
           "qwen3_235b_a22b"]


def run(argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"{argv} failed ({r.returncode}):\n{r.stderr[-4000:]}")
    return r.stdout


def read_keys(path):
    """The model keys ReadHuggingFaceConfig finds in `path`."""
    return json.loads(run([PRINT, "--read", path]))


def preflight_params(preset):
    """total_params of `trainyard preflight --json`'s memory estimate (printed first, even
    when the runner is then refused as too big for this machine)."""
    argv = [CLI, "preflight", os.path.join(EXAMPLES, "debug.toml"), "--json", "--set", f"model.preset=\"{preset}\""]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    for line in r.stderr.splitlines():
        if line.startswith("{") and "memory_estimate" in line:
            return int(json.loads(line)["memory_estimate"]["total_params"])
    raise AssertionError(f"no memory estimate from preflight:\n{r.stderr[-2000:]}")


class HfConfigTest(unittest.TestCase):
    def test_written_config_loads_and_counts_the_preflight_parameters(self):
        for preset in PRESETS:
            with self.subTest(preset=preset), tempfile.TemporaryDirectory() as tmp:
                with open(os.path.join(tmp, "config.json"), "w") as f:
                    f.write(run([PRINT, preset]))
                config = transformers.AutoConfig.from_pretrained(tmp)
                self.assertEqual(config.model_type, "deepseek_v3" if preset.startswith("deepseek") else "qwen3_moe")
                with torch.device("meta"):
                    model = transformers.AutoModelForCausalLM.from_config(config)
                theirs = sum(p.numel() for p in model.parameters())
                ours = preflight_params(preset)
                print(f"[figures] {preset}: preflight {ours:,} parameters, transformers {theirs:,}")
                self.assertEqual(ours, theirs)
                # transformers' own save of what it loaded means the same model keys.
                saved = os.path.join(tmp, "saved")
                config.save_pretrained(saved)
                self.assertEqual(read_keys(os.path.join(saved, "config.json")),
                                 read_keys(os.path.join(tmp, "config.json")))

    def test_transformers_saved_deepseek_v3_config_reads_to_its_keys(self):
        config = transformers.DeepseekV3Config(
            vocab_size=1000, hidden_size=320, intermediate_size=640, moe_intermediate_size=96,
            num_hidden_layers=5, first_k_dense_replace=2, num_attention_heads=10, num_key_value_heads=10,
            n_shared_experts=2, n_routed_experts=12, num_experts_per_tok=3, routed_scaling_factor=1.5, n_group=3,
            topk_group=2, norm_topk_prob=False, q_lora_rank=None, kv_lora_rank=48, qk_nope_head_dim=24,
            qk_rope_head_dim=8, v_head_dim=20, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "yarn", "rope_theta": 50000.0, "factor": 8.0,
                             "original_max_position_embeddings": 512, "beta_fast": 16.0, "beta_slow": 2.0,
                             "mscale": 0.75, "mscale_all_dim": 0.75},
            max_position_embeddings=4096)
        with tempfile.TemporaryDirectory() as tmp:
            config.save_pretrained(tmp)
            keys = read_keys(os.path.join(tmp, "config.json"))
        self.assertEqual(keys, {
            "vocab_size": 1000, "dim": 320, "n_layers": 5, "n_dense_layers": 2, "n_heads": 10, "n_kv_heads": 10,
            "ffn_hidden": 640, "n_routed_experts": 12, "top_k": 3, "n_shared_experts": 2, "expert_hidden": 96,
            "score_func": "sigmoid", "route_norm": False, "route_scale": 1.5, "rope_theta": 50000.0,
            "norm_eps": 1e-6, "architecture": "deepseek_v3", "q_lora_rank": 0, "kv_lora_rank": 48,
            "qk_nope_head_dim": 24, "qk_rope_head_dim": 8, "v_head_dim": 20, "rope_factor": 8.0,
            "original_seq_len": 512, "beta_fast": 16.0, "beta_slow": 2.0, "mscale": 0.75, "n_expert_groups": 3,
            "n_limited_groups": 2})

    def test_transformers_saved_qwen3_moe_config_reads_to_its_keys(self):
        config = transformers.Qwen3MoeConfig(
            vocab_size=1000, hidden_size=320, intermediate_size=640, moe_intermediate_size=96,
            num_hidden_layers=6, mlp_only_layers=[0, 1], decoder_sparse_step=1, num_attention_heads=8,
            num_key_value_heads=2, head_dim=64, num_experts=16, num_experts_per_tok=4, norm_topk_prob=True,
            rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
        with tempfile.TemporaryDirectory() as tmp:
            config.save_pretrained(tmp)
            keys = read_keys(os.path.join(tmp, "config.json"))
        self.assertEqual(keys, {
            "vocab_size": 1000, "dim": 320, "n_layers": 6, "n_dense_layers": 2, "n_heads": 8, "n_kv_heads": 2,
            "ffn_hidden": 640, "n_routed_experts": 16, "top_k": 4, "n_shared_experts": 0, "expert_hidden": 96,
            "score_func": "softmax", "route_norm": True, "route_scale": 1.0, "rope_theta": 1000000.0,
            "norm_eps": 1e-5, "architecture": "qwen3_moe", "rope_factor": 1.0, "n_expert_groups": 1,
            "n_limited_groups": 1, "head_dim": 64})

    def test_transformers_saved_unsupported_configs_are_refused(self):
        cases = {"tie_word_embeddings": transformers.Qwen3MoeConfig(tie_word_embeddings=True),
                 "use_sliding_window": transformers.Qwen3MoeConfig(use_sliding_window=True),
                 "rope_interleave": transformers.DeepseekV3Config(rope_interleave=False)}
        for field, config in cases.items():
            with self.subTest(field=field), tempfile.TemporaryDirectory() as tmp:
                config.save_pretrained(tmp)
                r = subprocess.run([PRINT, "--read", os.path.join(tmp, "config.json")], capture_output=True,
                                   text=True, timeout=60)
                self.assertEqual(r.returncode, 1)
                self.assertIn(field, r.stderr)


if __name__ == "__main__":
    unittest.main()
