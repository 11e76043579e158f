"""Hugging Face checkpoints in and out, against transformers itself.

For deepseek_v3 and qwen3_moe: transformers builds a small model of the preset's keys,
draws its weights and saves it with save_pretrained (sharded, with the index). A job
file whose checkpoint.initial_load_path is that folder trains it with trainyard-train
for 11 steps on one fixed batch; its first loss must equal transformers' loss of the
saved model within 1e-5 (fp32). The step-10 checkpoint goes out with `trainyard export
--names hf` to a folder that transformers loads with from_pretrained; its loss on the
batch must equal the engine's step-11 loss (the same weights) within 1e-5, and the
engine loading its own export starts from that loss too. A bf16 folder (real
checkpoints are bf16) loads to the fp32 model of the rounded weights.

Environment: TRAINYARD_TRAIN (trainyard-train), TRAINYARD_CLI (trainyard), TRAINYARD_EXAMPLES.
"""

import json
import math
import os
import subprocess
import tempfile
import unittest

import numpy as np
import torch

import transformers

from architecture_hf_test import deepseek_v3_config, normalised_spec, qwen3_moe_config

TRAIN = os.environ["TRAINYARD_TRAIN"]
CLI = os.environ["TRAINYARD_CLI"]

BATCH, SEQ = 2, 128


def write_job(path, preset, data, load, ck=None, steps=11):
    lines = ["[model]", f'preset = "{preset}"', "[training]", f"steps = {steps}", "lr = 3e-3", "warmup_steps = 1",
             'dataset = "tokens"', f'dataset_path = "{data}"', f"batch_size = {BATCH}", f"seq_len = {SEQ}",
             "[checkpoint]", f'initial_load_path = "{load}"']
    if ck:
        lines += [f'dir = "{ck}"', "interval = 10"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def train(job):
    r = subprocess.run([TRAIN, job, "--json", "--threads", "2"], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError(f"trainyard-train failed ({r.returncode}):\n{r.stderr[-4000:]}")
    losses = {}
    for line in r.stdout.splitlines():
        e = json.loads(line)
        if "step_metrics" in e:
            losses[int(e["step_metrics"]["step"])] = float(e["step_metrics"]["loss"])
    return losses


def drawn_model(config, seed):
    """transformers' model of `config` with weights that make every part matter (its
    own init, std 0.02, leaves the loss at ln(vocab) whatever attention does)."""
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in sorted(model.state_dict().items()):
            if "rotary_emb" in name:
                continue
            if name.endswith("norm.weight"):
                t.copy_(0.8 + 0.4 * torch.rand(t.shape, generator=g))
            elif name.endswith("e_score_correction_bias"):
                t.copy_(0.1 * torch.randn(t.shape, generator=g))
            elif name == "model.embed_tokens.weight":
                t.copy_(torch.randn(t.shape, generator=g))
            else:
                t.copy_(torch.randn(t.shape, generator=g) / math.sqrt(t.shape[-1]))
    return model


def loss_of(model, inputs, targets):
    with torch.no_grad():
        logits = model(input_ids=inputs).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).double(),
                                             targets.reshape(-1)).item()


def fixed_batch(tmp, vocab):
    tokens = np.random.default_rng(7).integers(0, vocab, size=BATCH * SEQ + 1, dtype=np.uint32)
    data = os.path.join(tmp, "batch.u32")
    tokens.tofile(data)
    t = torch.from_numpy(tokens.astype(np.int64))
    inputs = torch.stack([t[i * SEQ:i * SEQ + SEQ] for i in range(BATCH)])
    targets = torch.stack([t[i * SEQ + 1:i * SEQ + SEQ + 1] for i in range(BATCH)])
    return data, inputs, targets


class HfCheckpointTest(unittest.TestCase):
    def close(self, what, ours, theirs):
        print(f"[figures] {what}: trainyard {ours:.8f} transformers {theirs:.8f} "
              f"(relative {abs(ours - theirs) / theirs:.2e})")
        self.assertTrue(math.isfinite(ours))
        self.assertLess(abs(ours - theirs) / theirs, 1e-5, what)

    def round_trip(self, preset, make_config):
        with tempfile.TemporaryDirectory() as tmp:
            m = normalised_spec([f'model.preset="{preset}"'])["model"]
            config = make_config(m, SEQ)
            data, inputs, targets = fixed_batch(tmp, m["vocab_size"])
            model = drawn_model(config, seed=11)
            src = os.path.join(tmp, "hf-in")
            model.save_pretrained(src, max_shard_size="200KB")
            self.assertTrue(os.path.exists(os.path.join(src, "model.safetensors.index.json")), "sharded")
            theirs_in = loss_of(model, inputs, targets)

            job, ck = os.path.join(tmp, "job.toml"), os.path.join(tmp, "ck")
            write_job(job, preset, data, src, ck=ck)
            losses = train(job)
            self.close(f"{preset} in (first loss)", losses[1], theirs_in)
            self.assertLess(losses[11], losses[1] - 0.1, "ten steps on one batch must lower its loss")

            out = os.path.join(tmp, "hf-out")
            r = subprocess.run([CLI, "export", "--checkpoint", ck, "--step", "10", "--job-file", job, "--names", "hf",
                                "-o", out], capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(os.path.exists(os.path.join(out, "model.safetensors.index.json")))
            exported = transformers.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager",
                                                                         dtype=torch.float32).eval()
            self.assertEqual(type(exported).__name__, type(model).__name__)
            self.close(f"{preset} out (step-11 loss of the step-10 weights)", losses[11],
                       loss_of(exported, inputs, targets))

            # The engine starts from its own export where it left off.
            again = os.path.join(tmp, "again.toml")
            write_job(again, preset, data, out, steps=1)
            self.close(f"{preset} export back in", train(again)[1], loss_of(exported, inputs, targets))
            return m, config, data, inputs, targets

    def test_deepseek_v3_in_train_out(self):
        self.round_trip("deepseek_v3_debug", deepseek_v3_config)

    def test_qwen3_moe_in_train_out_and_bf16_in(self):
        preset = "qwen3_moe_debug"
        m, config, _, inputs, targets = self.round_trip(preset, qwen3_moe_config)
        with tempfile.TemporaryDirectory() as tmp:
            data, _, _ = fixed_batch(tmp, m["vocab_size"])
            model = drawn_model(config, seed=5)
            src = os.path.join(tmp, "hf-bf16")
            model.to(torch.bfloat16).save_pretrained(src)
            rounded = model.float()  # the fp32 model of the bf16 weights
            job = os.path.join(tmp, "job.toml")
            write_job(job, preset, data, src, steps=1)
            self.close(f"{preset} bf16 folder in", train(job)[1], loss_of(rounded, inputs, targets))


if __name__ == "__main__":
    unittest.main()
