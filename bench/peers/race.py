#!/usr/bin/env python3
"""The race: the engine against the same model in PyTorch eager and torch.compile.

  race.py --bench build/bin/trainyard-bench [--preset debug] [--precisions fp32,bf16]
          [--rounds 3] [--steps 10] [--warmup 3] [--json-out F] [--md-out F]

Contenders, each on the same cores, the same model, data (the engine's synthetic chain,
which train_peer.py draws bit for bit) and global batch:
  engine   `trainyard-bench --preset P --steps N --warmup W --precision X --json`
  eager    `train_peer.py --preset P --mode eager --precision X`
  compile  `train_peer.py --preset P --mode compile --precision X` (Inductor)

1. Selection (skipped with --engine-settings/--peer-threads of one value each): short
   runs (--select-steps after --select-warmup, --select-runs of each, alternating) of
   every thread setting of every contender and precision; the setting with the fastest
   run is kept and printed (a busy moment only slows a run down: one disturbed
   selection run once picked the engine's 2x1 for bf16 at 729 ms for 1x2, which runs
   265 ms). Engine
   settings "RxT" are R ranks of T threads with the global batch kept (R > 1: dp = R,
   training.batch_size = batch / R); the peer's are torch.set_num_threads values.
2. Rounds: every round runs each contender once per precision, alternating (the order
   reverses every other round), so drift in the machine's speed falls on all alike.
3. Figures per run and medians per (precision, contender): tokens/s (global tokens per
   step / median step time of the steps after warm-up: the engine bench's definition),
   step ms, MFU = FLOPs/token (the engine's formula, docs/architecture.md) x tokens/s /
   the machine's GEMM peak for that precision, which is the one the engine's bench
   reports (ranks x gemm_peak_gflops_per_rank, median over the engine's rounds), so the
   three MFUs share one denominator; and the ratios engine/compile and engine/eager of
   tokens/s. Printed as one JSON object and as a Markdown table.

The machine's load average is recorded before every run; --wait-quiet S waits up to S
seconds for the 1-minute load to fall under --quiet-load before starting.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import moe_peer  # noqa: E402

CONTENDERS = ("engine", "eager", "compile")
LABEL = {"engine": "engine (trainyard-bench)", "eager": "PyTorch eager", "compile": "PyTorch torch.compile"}


def machine_facts() -> Dict:
    facts: Dict = dict(cores=os.cpu_count(), platform=platform.platform())
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        for line in info.splitlines():
            if line.startswith("model name"):
                facts["cpu"] = line.split(":", 1)[1].strip()
                break
        flags = set()
        for line in info.splitlines():
            if line.startswith("flags"):
                flags.update(line.split(":", 1)[1].split())
        facts["avx512"] = sorted(f for f in flags if f.startswith("avx512"))
        facts["amx"] = sorted(f for f in flags if f.startswith("amx"))
    except OSError:
        pass
    try:
        import torch
        facts["torch"] = torch.__version__
        facts["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        if torch.cuda.is_available():
            facts["gpu"] = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001
        pass
    return facts


def load1() -> float:
    return os.getloadavg()[0]


def engine_run(args, precision: str, setting: str, steps: int, warmup: int) -> Dict:
    ranks, threads = (int(x) for x in setting.split("x"))
    cmd = [args.bench, "--preset", args.preset, "--steps", str(steps), "--warmup", str(warmup),
           "--precision", precision, "--threads", str(threads), "--backend", args.engine_backend, "--json"]
    if args.device == "cuda":
        cmd += ["--set", "resources.device=cuda"]
    if ranks > 1:
        batch = moe_peer.PRESETS[args.preset]["batch_size"]
        cmd += ["--nproc", str(ranks), "--set", f"parallelism.dp={ranks}",
                "--set", f"training.batch_size={batch // ranks}"]
    for s in args.engine_set or []:
        cmd += ["--set", s]
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=args.run_timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return dict(contender="engine", precision=precision, setting=setting, threads=threads, ranks=ranks,
                tokens_per_s=r["tokens_per_s"], step_ms=r["step_ms"], engine_mfu=r["mfu"],
                gemm_peak_gflops=r["gemm_peak_gflops_per_rank"] * r["nproc"],
                flops_per_token=r["flops_per_token"], gemm=r.get("gemm"), backend=r.get("backend"),
                wall_s=time.time() - t0, cmd=" ".join(cmd))


def peer_run(args, mode: str, precision: str, threads: int, steps: int, warmup: int) -> Dict:
    cmd = [args.python, os.path.join(HERE, "train_peer.py"), "--preset", args.preset, "--mode", mode,
           "--precision", precision, "--threads", str(threads), "--steps", str(steps + warmup),
           "--bench-warmup", str(warmup), "--device", args.device, "--quiet"]
    cmd += args.peer_arg or []
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                       timeout=args.run_timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return dict(contender=mode, precision=precision, setting=f"{threads} threads", threads=threads,
                tokens_per_s=r["tokens_per_s"], step_ms=r["step_ms"], flops_per_token=r["flops_per_token"],
                experts=r["experts"], attention=r["attention"], first_step_s=r["first_step_s"],
                wall_s=time.time() - t0, cmd=" ".join(cmd))


def run_one(args, contender: str, precision: str, setting, steps: int, warmup: int) -> Dict:
    before = load1()
    if contender == "engine":
        r = engine_run(args, precision, setting, steps, warmup)
    else:
        r = peer_run(args, contender, precision, int(setting), steps, warmup)
    r["load1_before"] = before
    return r


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fmt_run(r: Dict) -> str:
    return (f"{r['precision']:5} {r['contender']:8} {r['setting']:>12}: {r['tokens_per_s']:9.0f} tokens/s, "
            f"step {r['step_ms']:8.1f} ms (run {r['wall_s']:.0f} s, load {r['load1_before']:.2f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="path to trainyard-bench")
    ap.add_argument("--python", default=sys.executable, help="the Python that runs the peer")
    ap.add_argument("--preset", default="debug")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--contenders", default="engine,eager,compile")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10, help="measured steps per run")
    ap.add_argument("--warmup", type=int, default=3, help="steps before measuring (engine and eager)")
    ap.add_argument("--compile-warmup", type=int, default=3, help="steps before measuring under torch.compile")
    ap.add_argument("--select-steps", type=int, default=4)
    ap.add_argument("--select-warmup", type=int, default=2)
    ap.add_argument("--select-runs", type=int, default=2,
                    help="selection runs per setting, alternating; each setting's fastest counts")
    ap.add_argument("--engine-settings", default="1x2,1x1,2x1",
                    help="RANKSxTHREADS candidates for the engine (the global batch is kept)")
    ap.add_argument("--peer-threads", default="2,1", help="torch thread candidates for the peer")
    ap.add_argument("--engine-backend", default="eager", help="the engine's compile.backend (eager, jit)")
    ap.add_argument("--engine-set", action="append", help="extra --set for the engine (repeatable)")
    ap.add_argument("--peer-arg", action="append", help="extra argument for train_peer.py (repeatable)")
    ap.add_argument("--run-timeout", type=float, default=900)
    ap.add_argument("--wait-quiet", type=float, default=0, help="seconds to wait for a quiet machine first")
    ap.add_argument("--quiet-load", type=float, default=0.5)
    ap.add_argument("--json-out")
    ap.add_argument("--md-out")
    args = ap.parse_args()
    if args.device == "cuda":
        args.peer_threads = args.peer_threads.split(",")[0]
        args.engine_settings = "1x" + args.engine_settings.split(",")[0].split("x")[1]

    precisions = args.precisions.split(",")
    contenders = [c for c in args.contenders.split(",") if c]
    engine_settings = args.engine_settings.split(",")
    peer_threads = [int(x) for x in args.peer_threads.split(",")]
    batch = moe_peer.PRESETS[args.preset]["batch_size"]
    engine_settings = [s for s in engine_settings if batch % int(s.split("x")[0]) == 0]

    if args.wait_quiet > 0:
        deadline = time.time() + args.wait_quiet
        while load1() > args.quiet_load and time.time() < deadline:
            say(f"race: load {load1():.2f} > {args.quiet_load}: waiting for a quiet machine")
            time.sleep(15)
    t_start = time.time()
    facts = machine_facts()
    facts["load_at_start"] = list(os.getloadavg())
    say(f"race: {facts.get('cpu')}, {facts.get('cores')} cores, torch {facts.get('torch')}, "
        f"load {facts['load_at_start'][0]:.2f}")

    # 1. Selection.
    chosen: Dict[str, Dict[str, object]] = {p: {} for p in precisions}
    selection: List[Dict] = []
    for precision in precisions:
        for c in contenders:
            cands = engine_settings if c == "engine" else peer_threads
            if len(cands) == 1:
                chosen[precision][c] = cands[0]
                continue
            warm = args.select_warmup if c != "compile" else max(args.select_warmup, args.compile_warmup)
            best: Dict = {}
            for _ in range(args.select_runs):
                for s in cands:
                    r = run_one(args, c, precision, s, args.select_steps, warm)
                    say("select " + fmt_run(r))
                    selection.append(r)
                    # A disturbance only slows a run down: each setting's best run counts.
                    best[s] = max(best.get(s, 0.0), r["tokens_per_s"])
            chosen[precision][c] = max(cands, key=lambda s: best[s])
    for precision in precisions:
        say(f"race: chosen for {precision}: " + ", ".join(
            f"{c} {chosen[precision][c]}{'' if c == 'engine' else ' threads'}" for c in contenders))

    # 2. Rounds.
    runs: List[Dict] = []
    for rnd in range(args.rounds):
        order = contenders if rnd % 2 == 0 else list(reversed(contenders))
        for precision in precisions:
            for c in order:
                warm = args.compile_warmup if c == "compile" else args.warmup
                r = run_one(args, c, precision, chosen[precision][c], args.steps, warm)
                r["round"] = rnd + 1
                runs.append(r)
                say(f"round {rnd + 1}/{args.rounds} " + fmt_run(r))

    # 3. Medians.
    medians: Dict[str, Dict] = {}
    for precision in precisions:
        eng = [r for r in runs if r["precision"] == precision and r["contender"] == "engine"]
        peak = statistics.median(r["gemm_peak_gflops"] for r in eng) if eng else None
        m: Dict[str, object] = {"gemm_peak_gflops": peak}
        for c in contenders:
            rs = [r for r in runs if r["precision"] == precision and r["contender"] == c]
            if not rs:
                continue
            tps = statistics.median(r["tokens_per_s"] for r in rs)
            fpt = rs[0]["flops_per_token"]
            entry = dict(setting=rs[0]["setting"], runs=len(rs), tokens_per_s=tps,
                         step_ms=statistics.median(r["step_ms"] for r in rs),
                         tokens_per_s_runs=[round(r["tokens_per_s"], 1) for r in rs],
                         mfu=(fpt * tps / (peak * 1e9)) if peak else None, flops_per_token=fpt)
            if c == "engine":
                entry["engine_reported_mfu"] = statistics.median(r["engine_mfu"] for r in rs)
                entry["gemm"] = rs[0].get("gemm")
            else:
                entry["experts"] = rs[0]["experts"]
                entry["attention"] = rs[0]["attention"]
            m[c] = entry
        if "engine" in m:
            for c in ("compile", "eager"):
                if c in m:
                    m[f"engine_over_{c}"] = m["engine"]["tokens_per_s"] / m[c]["tokens_per_s"]
        medians[precision] = m

    facts["load_at_end"] = list(os.getloadavg())
    result = dict(preset=args.preset, device=args.device, rounds=args.rounds, steps=args.steps,
                  warmup=args.warmup, compile_warmup=args.compile_warmup, machine=facts,
                  chosen={p: {c: str(v) for c, v in chosen[p].items()} for p in precisions},
                  selection=selection, runs=runs, medians=medians, wall_s=time.time() - t_start)
    print(json.dumps(result))
    md = markdown(result, precisions, contenders)
    print(md)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=1)
    if args.md_out:
        with open(args.md_out, "w") as f:
            f.write(md + "\n")
    return 0


def markdown(result: Dict, precisions: List[str], contenders: List[str]) -> str:
    f = result["machine"]
    lines = [f"Preset `{result['preset']}` on {result['device']}: {f.get('cpu', '?')}, {f.get('cores')} cores, "
             f"torch {f.get('torch')}; medians of {result['rounds']} alternating rounds of {result['steps']} "
             f"measured steps; load average {f['load_at_start'][0]:.2f} at start, "
             f"{f['load_at_end'][0]:.2f} at end.", "",
             "| precision | contender | setting | tokens/s | step ms | MFU | engine ÷ this |",
             "|---|---|---|---:|---:|---:|---:|"]
    for p in precisions:
        m = result["medians"][p]
        for c in contenders:
            if c not in m:
                continue
            e = m[c]
            ratio = m["engine"]["tokens_per_s"] / e["tokens_per_s"] if "engine" in m else float("nan")
            setting = e["setting"] + (" (rank×threads)" if c == "engine" else "")
            mfu = f"{100 * e['mfu']:.1f} %" if e.get("mfu") is not None else "n/a"
            lines.append(f"| {p} | {LABEL[c]} | {setting} | {e['tokens_per_s']:,.0f} | {e['step_ms']:.1f} | "
                         f"{mfu} | {ratio:.2f}× |")
    lines.append("")
    for p in precisions:
        m = result["medians"][p]
        if m.get("gemm_peak_gflops"):
            lines.append(f"MFU ({p}) against the engine's measured {p} GEMM peak "
                         f"{m['gemm_peak_gflops']:.1f} GFLOP/s for the whole machine; FLOPs/token "
                         f"{m['engine']['flops_per_token']:.4g}.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
