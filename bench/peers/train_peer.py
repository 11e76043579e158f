#!/usr/bin/env python3
"""Trains bench/peers/moe_peer.py's model as the engine trains it, in plain PyTorch.

One JSON line per step on stdout: {"step", "loss", "grad_norm", "lr", "step_ms",
"tokens_per_s", "data_ms", "expert_load", "imbalance"}, then one summary line
{"summary": true, ...} with the median step time over the steps after --bench-warmup,
tokens/s, model TFLOP/s (the engine's FLOPs/token) and, with --peak-gflops, MFU.

The job is resolved as the engine resolves it (common/spec/presets.cc): the preset
(--preset, else the job file's model.preset, else "debug"), then the job file's keys
(--job: the engine's TOML job file, or the JSON of `trainyard-train JOB --print-config`),
then --set section.key=value, then the flags below; training.warmup_steps, when nobody
gave it, is min(10, steps).

Each piece of the step is the engine's (worker/engine/train/trainer.cc):
  data        the `tokens` dataset (docs/data.md): files concatenated in dataset_path
              order, sample i = tokens [i*T, i*T+T], N = (n-1)//T samples, global sample
              g of step k micro m = ((k*1 + 0)*A + m)*B + j, mapped by SampleOrder (file
              order, or the engine's Feistel shuffle per epoch with training.shuffle);
              or `synthetic`, the engine's seeded Markov chain, bit for bit.
  loss        mean cross-entropy; with grad_accum_steps A, each micro loss / A.
  clip        global L2 norm of all gradients in float64, coef = max_norm/(norm+1e-6)
              clamped to 1 (torch.nn.utils.clip_grad_norm_'s rule), grads scaled by it.
  AdamW       betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on EVERY parameter (norms
              and embeddings included), torch.optim.AdamW (fused where it runs).
  lr          1-based step s: lr*s/warmup for s <= warmup, then cosine from lr to
              0.1*lr at s = steps (optim/lr_schedule.cc).
  expert bias after the optimizer step: bias += coeff*sign(mean(c)-c), re-centred,
              c = the step's tokens per expert (all micro-batches).
  timing      from before the batch is read to after the bias update (and a device
              synchronize on CUDA), as the engine's step_ms.

  --precision fp32 | bf16 | bf16_autocast   (bf16 = the engine's policy, explicit casts;
                                             bf16_autocast = torch.autocast, NOT the
                                             engine's computation: see moe_peer.py)
  --mode eager | compile                    (torch.compile, Inductor)
"""

from __future__ import annotations

import argparse
import glob as globlib
import json
import math
import os
import statistics
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_peer  # noqa: E402

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15

# --------------------------------------------------------------------------------------
# Sample order: common/data/sample_order.cc.


def _mix(z: int) -> int:
    z = (z + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


class SampleOrder:
    ROUNDS = 6

    def __init__(self, n: int, shuffle: bool, seed: int):
        assert n >= 1
        self.n, self.shuffle, self.seed = n, shuffle, seed & MASK64
        bits = 0
        while bits < 62 and (1 << bits) < n:
            bits += 1
        self.half_bits = (bits + 1) // 2
        self._keys: Dict[int, List[int]] = {}

    def permute(self, epoch: int, i: int) -> int:
        if not self.shuffle or self.n == 1:
            return i
        keys = self._keys.get(epoch)
        if keys is None:
            epoch_key = _mix(self.seed ^ _mix(epoch ^ 0x6A09E667F3BCC908))
            keys = [_mix((epoch_key + r) & MASK64) for r in range(self.ROUNDS)]
            self._keys = {epoch: keys}
        hb = self.half_bits
        mask = (1 << hb) - 1
        x = i
        while True:
            left, right = x >> hb, x & mask
            for r in range(self.ROUNDS):
                left, right = right, left ^ (_mix(right ^ keys[r]) & mask)
            x = (left << hb) | right
            if x < self.n:
                return x

    def sample_of(self, g: int) -> int:
        epoch = g // self.n
        return self.permute(epoch, g - epoch * self.n)

    def epoch_of(self, g: int) -> int:
        return g // self.n + 1


# --------------------------------------------------------------------------------------
# Token files: common/data/corpus_paths.cc, token_corpus.cc (docs/data.md, "Formats").

_IDX_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
               8: np.uint16}


def _expand_entries(path_list: str) -> List[str]:
    files: List[str] = []
    for entry in path_list.split(","):
        if any(ch in entry for ch in "*?["):
            matches = sorted(globlib.glob(entry), key=lambda s: s.encode())
            if not matches:
                raise FileNotFoundError(f"training.dataset_path: entry {entry!r}: the pattern matches no file")
            taken = set()
            for m in matches:
                # A glob matching PREFIX.bin and PREFIX.idx of one indexed dataset takes it once.
                if m.endswith(".bin") and os.path.exists(m[:-4] + ".idx"):
                    key = m[:-4]
                elif m.endswith(".idx"):
                    key = m[:-4]
                else:
                    key = m
                if key in taken:
                    continue
                taken.add(key)
                files.append(m)
        else:
            files.append(entry)
    return files


def _open_token_file(path: str) -> np.ndarray:
    if path.endswith(".u16"):
        return np.memmap(path, dtype="<u2", mode="r")
    if path.endswith(".u32"):
        return np.memmap(path, dtype="<u4", mode="r")
    if path.endswith(".idx") or (path.endswith(".bin") and os.path.exists(path[:-4] + ".idx")):
        prefix = path[:-4]
        with open(prefix + ".idx", "rb") as f:
            head = f.read(18)
        if head[:9] != b"MMIDIDX\x00\x00":
            raise ValueError(f"{prefix}.idx: bad magic: not a Megatron indexed dataset")
        dtype = _IDX_DTYPES[head[17]]
        # After the .idx's checks (the engine's) the tokens are the .bin in order.
        return np.memmap(prefix + ".bin", dtype=np.dtype(dtype).newbyteorder("<"), mode="r")
    if path.endswith(".bin"):
        return np.memmap(path, dtype="<u2", mode="r")  # nanoGPT's flat uint16
    raise ValueError(f"training.dataset_path: {path} does not end in .u16, .u32, .bin or .idx")


class TokenDataset:
    """Samples packed causally over the concatenated token files."""

    def __init__(self, path_list: str, seq_len: int, vocab_size: int, shuffle: bool, seed: int):
        self.files = [_open_token_file(p) for p in _expand_entries(path_list)]
        self.starts = np.cumsum([0] + [len(f) for f in self.files])
        self.total = int(self.starts[-1])
        self.seq_len, self.vocab_size = seq_len, vocab_size
        n = (self.total - 1) // seq_len
        if n < 1:
            raise ValueError(f"training.dataset_path: the corpus holds {self.total} tokens, fewer than one sample")
        self.order = SampleOrder(n, shuffle, seed)

    def num_samples(self) -> int:
        return self.order.n

    def read(self, offset: int, count: int) -> np.ndarray:
        out = np.empty(count, dtype=np.int64)
        done = 0
        f = int(np.searchsorted(self.starts, offset, side="right")) - 1
        while done < count:
            local = offset + done - int(self.starts[f])
            take = min(count - done, len(self.files[f]) - local)
            out[done:done + take] = self.files[f][local:local + take]
            done += take
            f += 1
        if out.min() < 0 or out.max() >= self.vocab_size:
            raise ValueError(f"training.dataset_path: a token at corpus offset >= {offset} is not in [0, "
                             f"model.vocab_size {self.vocab_size})")
        return out

    def sample(self, index: int) -> np.ndarray:
        return self.read(index * self.seq_len, self.seq_len + 1)

    def batch(self, first_global: int, batch_size: int) -> np.ndarray:
        return np.stack([self.sample(self.order.sample_of(first_global + j)) for j in range(batch_size)])


# --------------------------------------------------------------------------------------
# Synthetic data: worker/engine/data/synthetic_dataset.cc, vectorised with numpy (every
# SplitMix64 draw k of a stream started at s is mix(s + k*golden), so all draws of a
# stream can be computed at once).


def _mix_np(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _draws(state0: np.ndarray, first: int, count: int) -> np.ndarray:
    """SplitMix64 draws first..first+count-1 (1-based) of streams starting at state0."""
    k = np.arange(first, first + count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return _mix_np(state0[..., None] + k * np.uint64(GOLDEN))


def _uniform01(z: np.ndarray) -> np.ndarray:
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


class SyntheticDataset:
    SUCCESSORS = 4

    def __init__(self, seed: int, vocab_size: int, seq_len: int, first_index: int = 0):
        self.seed, self.vocab, self.seq_len, self.first = seed & MASK64, vocab_size, seq_len, first_index
        s0 = np.array([(seed ^ 0x5EED5EED5EED5EED) & MASK64], dtype=np.uint64)
        draws = _draws(s0, 1, vocab_size * 2 * self.SUCCESSORS)[0].reshape(vocab_size, self.SUCCESSORS, 2)
        self.successors = (draws[:, :, 0] % np.uint64(vocab_size)).astype(np.int64)
        w = 0.05 + _uniform01(draws[:, :, 1])
        total = np.zeros(vocab_size)
        for j in range(self.SUCCESSORS):
            total = total + w[:, j]
        cum = np.empty_like(w)
        acc = np.zeros(vocab_size)
        for j in range(self.SUCCESSORS):
            acc = acc + w[:, j] / total
            cum[:, j] = acc
        cum[:, -1] = 1.0
        self.cumulative = cum

    def batch(self, first_global: int, batch_size: int) -> np.ndarray:
        idx = np.arange(first_global, first_global + batch_size, dtype=np.uint64) + np.uint64(self.first)
        with np.errstate(over="ignore"):
            s0 = np.uint64(self.seed) * np.uint64(0xD1342543DE82EF95) + idx
        draws = _draws(s0, 2, self.seq_len + 1)  # draw 1 decorrelates, draw 2 the first token
        out = np.empty((batch_size, self.seq_len + 1), dtype=np.int64)
        tok = (draws[:, 0] % np.uint64(self.vocab)).astype(np.int64)
        out[:, 0] = tok
        u = _uniform01(draws[:, 1:])
        for t in range(1, self.seq_len + 1):
            cum = self.cumulative[tok]
            j = (u[:, t - 1:t] >= cum[:, : self.SUCCESSORS - 1]).sum(axis=1)
            tok = self.successors[tok, j]
            out[:, t] = tok
        return out


# --------------------------------------------------------------------------------------
# The job: presets, job files, --set, flags.

MODEL_KEYS = {f.name for f in moe_peer.dataclasses.fields(moe_peer.ModelConfig)}
TRAINING_DEFAULTS = dict(steps=100, batch_size=0, seq_len=0, lr=8e-4, warmup_steps=None, max_norm=1.0, seed=42,
                         dataset="synthetic", dataset_path="", log_freq=1, grad_accum_steps=1, shuffle=False,
                         mixed_precision="fp32")


def _parse_value(text: str):
    t = text.strip()
    if t in ("true", "false"):
        return t == "true"
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "\"'":
        return t[1:-1]
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return t


def _read_job_file(path: str) -> Dict[str, Dict]:
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".json") or data.lstrip()[:1] == b"{":
        return json.loads(data)
    import tomllib
    return tomllib.loads(data.decode())


def resolve_job(args) -> Tuple[moe_peer.ModelConfig, Dict]:
    given: Dict[Tuple[str, str], object] = {}
    if args.job:
        for section, keys in _read_job_file(args.job).items():
            if isinstance(keys, dict):
                for k, v in keys.items():
                    if v is not None:
                        given[(section, k)] = v
    for s in args.set or []:
        key, _, value = s.partition("=")
        section, _, k = key.strip().partition(".")
        given[(section, k)] = _parse_value(value)
    flag_map = {"steps": ("training", "steps"), "batch_size": ("training", "batch_size"),
                "seq_len": ("training", "seq_len"), "lr": ("training", "lr"),
                "warmup": ("training", "warmup_steps"), "max_norm": ("training", "max_norm"),
                "seed": ("training", "seed"), "grad_accum": ("training", "grad_accum_steps"),
                "precision": ("training", "mixed_precision"), "log_freq": ("training", "log_freq")}
    for flag, key in flag_map.items():
        v = getattr(args, flag, None)
        if v is not None:
            given[key] = v
    if args.shuffle:
        given[("training", "shuffle")] = True
    if args.tokens:
        given[("training", "dataset")] = "tokens"
        given[("training", "dataset_path")] = args.tokens
    if args.device:
        given[("resources", "device")] = args.device

    preset = args.preset or given.get(("model", "preset")) or "debug"
    p = moe_peer.PRESETS.get(preset)
    if p is None:
        raise SystemExit(f"train_peer: unknown preset {preset!r} (known: {', '.join(moe_peer.PRESETS)})")
    model = dict(p["model"])
    training = dict(TRAINING_DEFAULTS, seq_len=p["seq_len"], batch_size=p["batch_size"])
    device = "cpu"
    for (section, k), v in given.items():
        if section == "model" and k in MODEL_KEYS:
            model[k] = v
        elif section == "training" and k in training:
            training[k] = v
        elif section == "resources" and k == "device":
            device = v
        elif section == "parallelism" and k in ("dp", "tp", "ep", "dp_shard") and int(v) != 1:
            raise SystemExit(f"train_peer: parallelism.{k}={v}: the peer trains on one device (dp=tp=ep=1)")
    if training["warmup_steps"] is None:
        training["warmup_steps"] = max(0, min(10, int(training["steps"])))
    for k in ("steps", "batch_size", "seq_len", "warmup_steps", "grad_accum_steps", "seed", "log_freq"):
        training[k] = int(training[k])
    training["device"] = device
    training["preset"] = preset
    return moe_peer.ModelConfig(**model), training


def lr_at(step: int, lr: float, warmup: int, total: int) -> float:
    """worker/engine/optim/lr_schedule.cc, 1-based step."""
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    decay_steps = total - warmup
    if decay_steps <= 0:
        return lr * 0.1
    progress = min(max((step - warmup) / decay_steps, 0.0), 1.0)
    min_lr = lr * 0.1
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


# --------------------------------------------------------------------------------------


def build_args(argv: Optional[Sequence[str]] = None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", help="debug, tiny, gpu_small (default: the job's, else debug)")
    ap.add_argument("--job", help="the engine's job file (TOML) or `trainyard-train JOB --print-config` JSON")
    ap.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a job key (repeatable)")
    ap.add_argument("--steps", type=int, help="training.steps")
    ap.add_argument("--batch-size", type=int, help="training.batch_size")
    ap.add_argument("--seq-len", type=int, help="training.seq_len")
    ap.add_argument("--lr", type=float, help="training.lr")
    ap.add_argument("--warmup", type=int, help="training.warmup_steps (default min(10, steps))")
    ap.add_argument("--max-norm", type=float, help="training.max_norm")
    ap.add_argument("--seed", type=int, help="training.seed (weights, shuffle, synthetic data)")
    ap.add_argument("--grad-accum", type=int, help="training.grad_accum_steps")
    ap.add_argument("--log-freq", type=int, help="training.log_freq (steps between step lines)")
    ap.add_argument("--shuffle", action="store_true", help="training.shuffle = true")
    ap.add_argument("--tokens", help="training.dataset = tokens on this dataset_path (e.g. a flat .u16 file)")
    ap.add_argument("--precision", choices=["fp32", "bf16", "bf16_autocast"], help="training.mixed_precision")
    ap.add_argument("--device", choices=["cpu", "cuda"], help="resources.device")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--compile-scope", choices=["model", "blocks"], default="model",
                    help="torch.compile the whole model (default) or each block (embedding and head eager)")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--init", help="initial weights: the engine's --save-init safetensors (default: the "
                                   "engine's init from training.seed, drawn here)")
    ap.add_argument("--save-init", help="write the initial weights (safetensors, the engine's names)")
    ap.add_argument("--save-final", help="write the weights after the last step (safetensors)")
    ap.add_argument("--attention", choices=["sdpa", "math"], default="sdpa")
    ap.add_argument("--gqa", choices=["auto", "repeat", "native"], default="auto",
                    help="K/V heads for SDPA: repeated (repeat) or enable_gqa (native); auto: native on CPU "
                         "(faster there), repeat on CUDA (every fused SDPA kernel takes it)")
    ap.add_argument("--experts", choices=["auto", "loop", "grouped_mm"], default="auto",
                    help="routed experts: per-expert loop, or grouped_mm (auto: grouped_mm where it runs and, "
                         "under compile, where Inductor takes it (bf16); else the loop)")
    ap.add_argument("--adamw", choices=["fused", "foreach", "forloop"], default="fused")
    ap.add_argument("--tf32", action="store_true", help="CUDA fp32: allow TF32 (the engine keeps it off)")
    ap.add_argument("--bench-warmup", type=int, help="steps left out of the summary's median (default "
                                                      "min(3, steps-1))")
    ap.add_argument("--peak-gflops", type=float, help="GEMM peak for the summary's MFU (e.g. the engine bench's "
                                                      "gemm_peak_gflops_per_rank)")
    ap.add_argument("--quiet", action="store_true", help="print only the summary line")
    return ap.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_args(argv)
    cfg, t = resolve_job(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(t["device"])
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = bool(args.tf32)
        torch.backends.cudnn.allow_tf32 = bool(args.tf32)
    precision = t["mixed_precision"]
    compute_dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    autocast = precision == "bf16_autocast"
    experts = args.experts
    if experts == "auto":
        gmm_dtype = torch.bfloat16 if precision != "fp32" else torch.float32
        ok = moe_peer.grouped_mm_works(device, gmm_dtype)
        experts = "grouped_mm" if ok and (args.mode == "eager" or gmm_dtype == torch.bfloat16) else "loop"
    if experts == "grouped_mm" and precision == "bf16_autocast":
        experts = "loop"  # autocast leaves the rows fp32 in and grouped_mm does not autocast

    if args.gqa == "auto":
        args.gqa = "native" if device.type == "cpu" else "repeat"
    model = moe_peer.Transformer(cfg, t["seq_len"], compute_dtype, args.attention, args.gqa, experts)
    if args.init:
        from safetensors.torch import load_file
        model.load_state_dict(load_file(args.init), strict=True)
    else:
        model.init_weights(t["seed"])
    if args.save_init:
        _save(model, args.save_init)
    if t["steps"] == 0:  # --steps 0: only the initial weights (--save-init)
        return 0
    model.to(device)

    params = [p for p in model.parameters()]
    adamw_kw = dict(lr=t["lr"], betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    if args.adamw == "fused":
        adamw_kw["fused"] = True
    elif args.adamw == "foreach":
        adamw_kw["foreach"] = True
    else:
        adamw_kw["foreach"] = False
    opt = torch.optim.AdamW(params, **adamw_kw)

    step_fn = model
    if args.mode == "compile":
        if args.compile_scope == "model":
            step_fn = torch.compile(model)
        else:
            for layer in model.layers:
                layer.compile()
    if t["dataset"] == "tokens":
        data = TokenDataset(t["dataset_path"], t["seq_len"], cfg.vocab_size, t["shuffle"], t["seed"])
    elif t["dataset"] == "synthetic":
        data = SyntheticDataset(t["seed"], cfg.vocab_size, t["seq_len"])
    else:
        raise SystemExit(f"train_peer: training.dataset={t['dataset']!r} is not supported (tokens, synthetic)")

    B, T, A = t["batch_size"], t["seq_len"], t["grad_accum_steps"]
    steps = t["steps"]
    # The synthetic chain is sequential over positions (a numpy loop of seq_len
    # iterations per batch: ~10 ms a step at seq 2048, where the engine's C++ takes
    # microseconds), so its batches are drawn before the loop, as a DataLoader would
    # have them ready; token files are read in the step, as the engine reads them.
    prefetched: Dict[int, np.ndarray] = {}
    if t["dataset"] == "synthetic" and steps * A * B * (T + 1) * 8 <= (1 << 30):
        for k in range(steps * A):
            prefetched[k] = data.batch(k * B, B)
    fpt = moe_peer.flops_per_token(cfg, T)
    step_ms: List[float] = []
    losses: List[float] = []
    bench_warmup = args.bench_warmup if args.bench_warmup is not None else min(3, steps - 1)
    compile_start = time.perf_counter()
    for step in range(1, steps + 1):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = None
        counts_sum = None
        data_ms = 0.0
        for micro in range(A):
            d0 = time.perf_counter()
            first = ((step - 1) * A + micro) * B  # chunk (k*dp + r)*A + m, dp=1, r=0
            rows = prefetched.pop(first // B) if prefetched else data.batch(first, B)
            batch = torch.from_numpy(rows).to(device, non_blocking=True)
            data_ms += (time.perf_counter() - d0) * 1000
            inputs, targets = batch[:, :T], batch[:, 1:T + 1]
            if autocast:
                with torch.autocast(device.type, dtype=torch.bfloat16):
                    loss, counts = step_fn(inputs, targets)
            else:
                loss, counts = step_fn(inputs, targets)
            (loss if A == 1 else loss / A).backward()
            detached = (loss if A == 1 else loss / A).detach().double()
            c = counts.double()
            loss_sum = detached if loss_sum is None else loss_sum + detached
            counts_sum = c if counts_sum is None else counts_sum + c
        with torch.no_grad():
            for p in params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            grads = [p.grad for p in params]
            norm = torch.stack(torch._foreach_norm(grads, 2.0, dtype=torch.float64)).square().sum().sqrt()
            if t["max_norm"] > 0:
                coef = torch.clamp(t["max_norm"] / (norm + 1e-6), max=1.0).float()
                torch._foreach_mul_(grads, coef)
        lr = lr_at(step, t["lr"], t["warmup_steps"], steps)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        if cfg.n_moe_layers > 0:
            model.update_expert_biases(counts_sum, cfg.load_balance_coeff)
        if device.type == "cuda":
            torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 1000
        if step == 1:
            first_step_s = time.perf_counter() - compile_start
        step_ms.append(ms)
        loss_v = loss_sum.item()
        losses.append(loss_v)
        if not args.quiet and (step % t["log_freq"] == 0 or step == steps):
            load = counts_sum.sum(0).round().long().cpu().tolist() if counts_sum.numel() else []
            mean = sum(load) / len(load) if load else 0
            print(json.dumps(dict(step=step, loss=loss_v, grad_norm=norm.item(), lr=lr, step_ms=ms,
                                  tokens_per_s=B * T * A / (ms / 1000), data_ms=data_ms, expert_load=load,
                                  imbalance=max(load) / mean if mean > 0 else 0.0)), flush=True)
    if args.save_final:
        _save(model, args.save_final)
    measured = step_ms[bench_warmup:] or step_ms
    med = statistics.median(measured)
    tps = B * T * A / (med / 1000)
    summary = dict(summary=True, peer="pytorch", preset=t["preset"], mode=args.mode, compile_scope=(
        args.compile_scope if args.mode == "compile" else None), precision=precision, device=str(device),
                   threads=torch.get_num_threads(), torch=torch.__version__, attention=args.attention, gqa=args.gqa,
                   experts=experts, adamw=args.adamw, steps=steps, bench_warmup=bench_warmup,
                   measured_steps=len(measured), step_ms=med, tokens_per_s=tps, flops_per_token=fpt,
                   model_tflops=fpt * tps / 1e12, first_step_s=first_step_s, final_loss=losses[-1],
                   data_prefetched=t["dataset"] == "synthetic" and B * (T + 1) * 8 * steps * A <= (1 << 30),
                   params_total=moe_peer.parameter_counts(cfg)["total"])
    if args.peak_gflops:
        summary["gemm_peak_gflops"] = args.peak_gflops
        summary["mfu"] = fpt * tps / (args.peak_gflops * 1e9)
    print(json.dumps(summary), flush=True)
    return 0


def _save(model: torch.nn.Module, path: str) -> None:
    from safetensors.torch import save_file
    save_file({k: v.detach().float().contiguous().cpu() for k, v in model.state_dict().items()}, path)


if __name__ == "__main__":
    sys.exit(main())
