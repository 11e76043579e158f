#!/usr/bin/env bash
# deploy/gpu-check.sh: builds the engine alone (no gRPC) against the machine's own CUDA
# LibTorch (Python's torch 2.x) and checks it, printing one PASS/FAIL line per check:
#   a. CPU/Gloo loss parity on LibTorch 2.x: tiny preset, 20 steps, one rank against
#      tp=2 (2 ranks) and against dp=2 ep=2 (2 ranks; the reference holds the same global
#      batch), per-step loss within 1e-4 relative;
#   b. CUDA/NCCL: the same 20 steps on one rank with resources.device=cuda against the
#      CPU rank, per-step loss within 1e-4 relative (the real gap is printed either way;
#      TF32 is off), and the initial weights written by both (--save-init) identical;
#   b1. CUDA checkpoints (pinned staging): checkpoint every 10 steps, losses identical to
#      the run without; a resume from step 10 repeats steps 11-20 within 1e-5 relative;
#   b2. the SDPA kernel LibTorch picks on this GPU for the engine's two attention calls
#      (fp32 with K/V repeated, bf16 with enable_gqa): FAIL if either is the math path;
#   b3. CUDA bf16: the same 20 steps in training.mixed_precision=bf16 (attention through
#      LibTorch's flash or memory-efficient SDPA in bf16) against the fp32 CPU rank, per-step
#      loss within 2e-2 relative;
#   b4. the routed experts as one at::_grouped_mm per weight (bf16, empty experts
#      included) against a per-expert fp32 loop, forward and backward, within 2e-2
#      relative, naming CUTLASS or the fallback, with no host sync on sm90/sm100 (LibTorch's
#      sync debug mode), with both times;
#   b5. cudagraph: the same 20 steps with compile.backend=cudagraph (forward and backward
#      of each static-shape region captured per call site and replayed) against a jit
#      run, per-step loss within 1e-5 relative; again in bf16 with full activation
#      checkpointing, 2 micro-batches and validation (1e-3 against the same on jit); each
#      run's static regions all captured, only expert_ffn through jit, no eager
#      fallback or FALLBACK; then trainyard-bench --backend jit,cudagraph (debug preset);
#   FSDP on NCCL with 2+ GPUs: dp_shard=2 in fp32 (1e-4) and bf16 (2e-2) against the
#      CPU rank with the same global batch, printing the rank's gradient reduction line;
#   c. trainyard-bench --preset debug --set resources.device=cuda --steps 20 --warmup 5:
#      tokens/s, step time, MFU and the GPU's fp32 GEMM peak.
# NCCL refuses two ranks of one communicator on the same GPU, so on a one-GPU machine
# multi-rank NCCL cannot run: the script starts a dp=2 CUDA job anyway and reports how
# NCCL refused it (rendezvous and ProcessGroupNCCL reached), or its parity if it ran.
#
# Usage, from the repository root:
#   OUT=DIR bash deploy/gpu-check.sh            # build into build-gpu/, then check
#   OUT=DIR bash deploy/gpu-check.sh --bin DIR  # check binaries already built in DIR
# Logs: $OUT/gpu-check.log (everything), $OUT/build.log, $OUT/runs.tar.gz (each run's
# JSON lines and stderr). Exit status: 0 when every check passed.
#
# Build needs: python3 with a CUDA torch, cmake >= 3.22, ninja, a C++17 compiler, the
# CUDA toolkit that torch's CMake config looks for, nccl.h and libnccl (the nvidia-nccl
# wheel beside torch, found below), and the header-only nlohmann-json and CLI11 with
# their CMake configs: on a machine without them, copy them into .devdeps/ (include/,
# share/cmake/) from a Debian box, where .devdeps/gloo-debian/gloo/ may also hold
# libgloo-dev's headers for a torch wheel that ships none (see README, "CUDA").
set -uo pipefail

OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1

BIN=""
if [[ "${1:-}" == "--bin" ]]; then BIN=$(cd "$2" && pwd); fi
ROOT=$(pwd)
RUNS=$(mktemp -d /tmp/gpu-check-runs.XXXXXX)
RESULTS=()
FAILED=0

pass() { RESULTS+=("PASS  $*"); echo "PASS  $*"; }
fail() { RESULTS+=("FAIL  $*"); echo "FAIL  $*"; FAILED=1; }
info() { RESULTS+=("INFO  $*"); echo "INFO  $*"; }
finish() {
  tar -C "$RUNS" -czf "$OUT/runs.tar.gz" . 2>/dev/null
  echo
  echo "== summary"
  printf '%s\n' "${RESULTS[@]}"
}
trap finish EXIT

echo "== machine"
nvidia-smi -L 2>&1 | head -4
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -2
echo "cores: $(nproc)"
cmake --version 2>&1 | head -1
echo "ninja $(ninja --version 2>&1)"
c++ --version 2>&1 | head -1
nvcc --version 2>&1 | tail -1
python3 - <<'PY' 2>&1
import torch
print("python torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      "devices", torch.cuda.device_count(), "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else "-")
PY
TORCH_DIR=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
SITE=$(dirname "$TORCH_DIR")
echo "torch dir: $TORCH_DIR"
echo "torch cmake prefix: $TORCH_PREFIX"
echo "torch include/: $(ls "$TORCH_DIR/include" 2>/dev/null | tr '\n' ' ')"

if [[ -z "$BIN" ]]; then
  echo
  echo "== configure (engine only, against $TORCH_PREFIX)"
  # The machine's own Python and its torch (TRAINYARD_PYTHON); another LibTorch minor than
  # the pinned one is tried anyway, and the build line below names it.
  CMAKE_ARGS=(-S . -B build-gpu -G Ninja -DTRAINYARD_ENGINE_ONLY=ON -DTRAINYARD_BUILD_TESTS=OFF
              -DCMAKE_BUILD_TYPE=Release "-DTRAINYARD_PYTHON=$(command -v python3)" -DTRAINYARD_TORCH_ANY_VERSION=ON
              "-DCMAKE_PREFIX_PATH=$TORCH_PREFIX;$ROOT/.devdeps")
  if [[ -f "$TORCH_DIR/include/gloo/algorithm.h" ]]; then
    echo "gloo: the torch wheel ships its own headers ($TORCH_DIR/include/gloo)"
  elif [[ -f "$ROOT/.devdeps/gloo-debian/gloo/algorithm.h" ]]; then
    echo "gloo: the torch wheel ships no gloo headers; using the carried Debian libgloo-dev ones"
    CMAKE_ARGS+=("-DGLOO_INCLUDE_DIR=$ROOT/.devdeps/gloo-debian")
  else
    echo "gloo: no headers in the wheel and none carried in .devdeps/gloo-debian"
  fi
  NCCL_H=$(find "$SITE/nvidia" /usr/include /usr/local/cuda/include -name nccl.h 2>/dev/null | head -1)
  NCCL_SO=$(find "$SITE/nvidia" /usr/lib /usr/local/cuda/lib64 -name 'libnccl.so*' 2>/dev/null | sort | head -1)
  echo "nccl.h: ${NCCL_H:-none}; libnccl: ${NCCL_SO:-none}"
  if [[ -n "$NCCL_H" ]]; then CMAKE_ARGS+=("-DNCCL_ROOT=$(dirname "$(dirname "$NCCL_H")")"); fi
  if command -v nvcc >/dev/null; then CMAKE_ARGS+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)"); fi
  echo "cmake ${CMAKE_ARGS[*]}"
  if ! cmake "${CMAKE_ARGS[@]}" > "$OUT/build.log" 2>&1; then
    grep -v "^--" "$OUT/build.log" | head -80
    fail "configure: cmake failed (build.log)"
    exit 1
  fi
  grep -E "Gloo headers|NCCL|CUDA|Torch|Caffe2|WARNING" "$OUT/build.log" | head -20
  echo
  echo "== build (ninja -k 0: every compile error in one run)"
  START=$(date +%s)
  cmake --build build-gpu -j "$(nproc)" --target trainyard-rank trainyard-train trainyard-bench -- -k 0 \
    >> "$OUT/build.log" 2>&1
  BUILD_RC=$?
  echo "build: exit $BUILD_RC after $(( $(date +%s) - START )) s"
  if [[ $BUILD_RC -ne 0 ]]; then
    echo "-- errors (first 120 lines; all in build.log):"
    grep -E "error|Error|undefined reference|FAILED" "$OUT/build.log" | head -120
    fail "build: engine against LibTorch $(python3 -c 'import torch; print(torch.__version__)') failed"
    exit 1
  fi
  grep -c "warning:" "$OUT/build.log" | sed 's/^/compiler warnings: /'
  pass "build: trainyard-rank, trainyard-train, trainyard-bench against LibTorch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  BIN=$ROOT/build-gpu/bin
fi

TRAIN=$BIN/trainyard-train
BENCH=$BIN/trainyard-bench
JOB=$RUNS/tiny.json
echo '{"model": {"preset": "tiny"}, "training": {"steps": 20}}' > "$JOB"
THREADS=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))

# run NAME [trainyard-train args...]: stdout (JSON lines) and stderr into $RUNS/NAME.*
run() {
  local name=$1
  shift
  local start=$SECONDS
  timeout "${RUN_TIMEOUT:-150}" "$TRAIN" "$JOB" --json "$@" > "$RUNS/$name.jsonl" 2> "$RUNS/$name.err"
  local rc=$?
  echo "run $name: exit $rc in $(( SECONDS - start )) s ($*)"
  if [[ $rc -ne 0 ]]; then tail -5 "$RUNS/$name.err" | sed 's/^/    /'; fi
  grep -h '"engine start' "$RUNS/$name.jsonl" | python3 -c \
    'import json,sys; [print("    " + json.loads(l)["log"]["message"]) for l in sys.stdin]' 2>/dev/null
  return $rc
}

# compare LABEL REF GOT TOL: per-step losses of two runs' JSON lines.
compare() {
  python3 - "$@" <<'PY'
import json, sys
label, ref_path, got_path, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def losses(path):
    out = []
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if "step_metrics" in e:
            out.append(e["step_metrics"]["loss"])
    return out
ref, got = losses(ref_path), losses(got_path)
if len(ref) != 20 or len(got) != 20:
    print(f"FAIL  {label}: {len(ref)} reference and {len(got)} compared steps, expected 20 each")
    sys.exit(1)
rel = [abs(g - r) / abs(r) for r, g in zip(ref, got)]
worst = max(range(20), key=lambda i: rel[i])
verdict = "PASS" if rel[worst] <= tol else "FAIL"
print(f"{verdict}  {label}: max relative loss gap {rel[worst]:.3e} at step {worst + 1} "
      f"(tolerance {tol:g}); step 1 {ref[0]:.6f} vs {got[0]:.6f}, step 20 {ref[-1]:.6f} vs {got[-1]:.6f}")
sys.exit(0 if verdict == "PASS" else 1)
PY
}

# verdict LINE: a check's own "PASS  ..."/"FAIL  ..." line (anything else, such as a
# Python traceback, is a FAIL) into the log and the summary.
verdict() {
  if [[ "$1" == PASS* ]]; then pass "${1#PASS  }"; else fail "${1#FAIL  }"; fi
}

# record: a compare's verdict line into the summary.
record() {
  local line
  line=$(compare "$@")
  local rc=$?
  echo "$line"
  RESULTS+=("$line")
  [[ $rc -eq 0 ]] || FAILED=1
}

echo
echo "== a. CPU/Gloo loss parity on LibTorch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)"
run cpu_1 --threads "$THREADS" --save-init "$RUNS/init_cpu.safetensors"
run cpu_tp2 --threads "$(( THREADS / 2 > 0 ? THREADS / 2 : 1 ))" --set parallelism.tp=2
record "CPU/Gloo tp=2 vs 1 rank (tiny, 20 steps)" "$RUNS/cpu_1.jsonl" "$RUNS/cpu_tp2.jsonl" 1e-4
run cpu_1_b8 --threads "$THREADS" --set training.batch_size=8
run cpu_dp2_ep2 --threads "$(( THREADS / 2 > 0 ? THREADS / 2 : 1 ))" --set parallelism.dp=2 --set parallelism.ep=2
record "CPU/Gloo dp=2 ep=2 vs 1 rank with the same global batch (tiny, 20 steps)" \
  "$RUNS/cpu_1_b8.jsonl" "$RUNS/cpu_dp2_ep2.jsonl" 1e-4

echo
echo "== b. CUDA: one rank, resources.device=cuda, against the CPU rank"
if run cuda_1 --set resources.device=cuda --save-init "$RUNS/init_cuda.safetensors"; then
  record "CUDA 1 rank vs CPU 1 rank (tiny, 20 steps, fp32, TF32 off)" "$RUNS/cpu_1.jsonl" "$RUNS/cuda_1.jsonl" 1e-4
  if cmp -s "$RUNS/init_cpu.safetensors" "$RUNS/init_cuda.safetensors"; then
    pass "initial weights (--save-init, gathered from the GPU) identical to the CPU rank's"
  else
    fail "initial weights written by the CUDA rank differ from the CPU rank's"
  fi
else
  fail "CUDA 1 rank did not run (see above)"
fi

echo
echo "== b1. CUDA checkpoints: staged through pinned host buffers, then an exact resume"
if run cuda_ck --set resources.device=cuda --set checkpoint.interval=10 --set "checkpoint.dir=\"$RUNS/ck\"" &&
   run cuda_resume --set resources.device=cuda --set "checkpoint.dir=\"$RUNS/ck2\"" \
     --resume "$RUNS/ck/step-00000010-attempt-1"; then
  line=$(python3 - "$RUNS/cuda_1.jsonl" "$RUNS/cuda_ck.jsonl" "$RUNS/cuda_resume.jsonl" <<'PY'
import json, sys
def losses(path):
    out = {}
    for line in open(path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if "step_metrics" in e:
            out[int(e["step_metrics"]["step"])] = e["step_metrics"]["loss"]
    return out
plain, ck, resumed = (losses(p) for p in sys.argv[1:4])
same = all(plain.get(i) == ck.get(i) for i in range(1, 21))
gap = max((abs(resumed[i] - ck[i]) / abs(ck[i]) for i in range(11, 21) if i in resumed and i in ck), default=float("inf"))
ok = same and len(resumed) >= 10 and gap <= 1e-5
print(("PASS" if ok else "FAIL") + f"  CUDA checkpoint every 10 steps: losses {'identical to' if same else 'DIFFER from'} "
      f"the run without; resumed from step 10, steps 11-20 within {gap:.2e} relative (tolerance 1e-5)")
PY
)
  verdict "$line"
else
  fail "CUDA checkpoint or resume run did not run (see above)"
fi

echo
echo "== b2. the SDPA kernel LibTorch picks for the engine's attention calls on this GPU"
# The engine's calls (worker/engine/kernels/reference_ops.cc, CausalSdpa): fp32
# with K and V repeated per query head, bf16 with enable_gqa. Math (0) would keep every
# head's score matrix: a FAIL, as is an error.
SDPA_LINE=$(python3 - <<'PY' 2>&1
import torch
names = {0: "math", 1: "flash", 2: "memory-efficient", 3: "cudnn"}
b, h, g, t, d = 2, 8, 4, 1024, 64
def choice(dtype, gqa):
    q = torch.randn(b, h, t, d, device="cuda", dtype=dtype)
    k = torch.randn(b, g if gqa else h, t, d, device="cuda", dtype=dtype)
    return int(torch._fused_sdp_choice(q, k, k, None, 0.0, True, enable_gqa=gqa))
fp32, bf16 = choice(torch.float32, False), choice(torch.bfloat16, True)
raw = choice(torch.float32, True)
ok = fp32 != 0 and bf16 != 0
print(("PASS" if ok else "FAIL") + f"  SDPA kernels: fp32 repeated K/V {names.get(fp32, fp32)}, bf16 enable_gqa "
      f"{names.get(bf16, bf16)} (fp32 enable_gqa without the repeat would be {names.get(raw, raw)})")
PY
)
verdict "$SDPA_LINE"

echo
echo "== b3. CUDA bf16: attention through scaled_dot_product_attention (flash/memory-efficient) in bf16"
if run cuda_1_bf16 --set resources.device=cuda --set training.mixed_precision=bf16; then
  # The bf16 bound of the CPU tests (bf16 against fp32, whole model): 2e-2 relative.
  record "CUDA bf16 1 rank vs CPU fp32 1 rank (tiny, 20 steps, SDPA in bf16)" "$RUNS/cpu_1.jsonl" \
    "$RUNS/cuda_1_bf16.jsonl" 2e-2
else
  fail "CUDA bf16 1 rank did not run (see above)"
fi

echo
echo "== b4. CUDA grouped GEMM: the routed experts as at::_grouped_mm (trainyard::grouped_experts' reference)"
# The engine's expert math (worker/engine/kernels/reference_ops.cc, GroupedExperts) in
# bf16 on this GPU against a per-expert loop of plain GEMMs in fp32, forward and
# backward, with empty experts; and the time of each. CUTLASS runs it on sm90 and sm100 in bf16,
# LibTorch's per-group fallback elsewhere (the line names which).
GMM_LINE=$(python3 - <<'PY' 2>&1
import time, torch
F = torch.nn.functional
torch.manual_seed(0)
E, dim, hidden = 8, 512, 1024
counts = [0, 700, 33, 0, 1200, 91, 0, 24]
rows = sum(counts)
dev = "cuda"
x0 = torch.randn(rows, dim, device=dev)
w0 = [torch.randn(E, hidden, dim, device=dev) * 0.02, torch.randn(E, dim, hidden, device=dev) * 0.02,
      torch.randn(E, hidden, dim, device=dev) * 0.02]
proj = torch.randn(rows, dim, device=dev)
ends = torch.tensor(counts, device=dev).cumsum(0).to(torch.int32)
def grouped(x, w):
    xb = x.bfloat16()
    g = lambda a, m: torch._grouped_mm(a, m.bfloat16().transpose(-2, -1), ends)
    return g(F.silu(g(xb, w[0])) * g(xb, w[2]), w[1]).float()
def loop(x, w):
    outs, o = [], 0
    for e, c in enumerate(counts):
        xs = x[o:o + c]; o += c
        outs.append(F.linear(F.silu(F.linear(xs, w[0][e])) * F.linear(xs, w[2][e]), w[1][e]))
    return torch.cat(outs)
def run(fn):
    x = x0.clone().requires_grad_(True); w = [t.clone().requires_grad_(True) for t in w0]
    out = fn(x, w); (out * proj).sum().backward()
    return [out.detach(), x.grad] + [t.grad for t in w]
def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()
def timed(fn, n=20):
    run(fn); torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): run(fn)
    torch.cuda.synchronize(); return (time.perf_counter() - t) / n * 1e3
g, l = run(grouped), run(loop)
gap = max(rel(a, b) for a, b in zip(g, l))
cap = torch.cuda.get_device_capability()
cutlass = cap[0] in (9, 10)
kind = "CUTLASS (sm90/sm100, bf16)" if cutlass else "LibTorch's per-group fallback"
# Host synchronisations of one grouped forward and backward (LibTorch's sync debug mode
# warns on each): none on sm90/sm100, where the offsets stay on the device.
import warnings
torch.cuda.synchronize()
torch.cuda.set_sync_debug_mode("warn")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    run(grouped)
torch.cuda.set_sync_debug_mode(0)
syncs = len(caught)
ok = gap <= 2e-2 and (syncs == 0 or not cutlass)
print(("PASS" if ok else "FAIL") + f"  grouped GEMM bf16 vs fp32 per-expert loop: max gap {gap:.2e} relative "
      f"(bf16 bound 2e-2) over out, dx, dw1, dw2, dw3; {kind} on sm{cap[0]}{cap[1]}, {syncs} host syncs; "
      f"fwd+bwd {timed(grouped):.2f} ms grouped bf16 vs {timed(loop):.2f} ms fp32 loop")
PY
)
verdict "$GMM_LINE"

echo
echo "== b5. cudagraph: regions captured as CUDA graphs (forward and backward) and replayed"
# graph_regions FILE: the regions captured, those through jit, and the eager fallbacks.
graph_regions() {
  python3 - "$1" <<'PY'
import json, sys, re
captured, jit, fallbacks, fallback_events = set(), set(), 0, []
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    c = e.get("compile")
    if not c:
        continue
    reason, kind = c.get("reason", ""), c.get("region", "?").split("{")[0]
    if c.get("kind") == "COMPILE":
        (captured if "backend=cudagraph" in reason else jit).add(kind)
    if c.get("kind") == "FALLBACK":
        fallback_events.append(kind + ": " + reason[:120])
    if c.get("kind") == "SUMMARY":
        m = re.search(r"eager_fallbacks=(\d+)", reason)
        fallbacks = max(fallbacks, int(m.group(1)) if m else 0)
# Only the routed experts (dynamic rows) go through jit; the static kinds the tiny
# preset has must all be captured.
want = {"rms_norm", "attention", "ffn", "router", "combine", "shared_expert", "loss"}
ok = want <= captured and jit <= {"expert_ffn"} and fallbacks == 0 and not fallback_events
print(("PASS" if ok else "FAIL") + f"  {sys.argv[1].split('/')[-1]}: captured {sorted(captured)}, through jit "
      f"{sorted(jit)} (want at least {sorted(want)} captured, only expert_ffn through jit); largest eager_fallbacks "
      f"{fallbacks}; FALLBACK events {fallback_events or 'none'}")
PY
}
GRAPH_MIX=(--set training.mixed_precision=bf16 --set activation_checkpoint.mode=full
  --set training.grad_accum_steps=2 --set validation.dataset=synthetic --set validation.freq=5)
if run cuda_jit --set resources.device=cuda --set compile.backend=jit &&
   run cuda_graph --set resources.device=cuda --set compile.backend=cudagraph; then
  record "CUDA cudagraph vs jit, 1 rank (tiny, 20 steps, fp32)" "$RUNS/cuda_jit.jsonl" "$RUNS/cuda_graph.jsonl" 1e-5
  verdict "$(graph_regions "$RUNS/cuda_graph.jsonl")"
else
  fail "CUDA cudagraph or its jit reference did not run (see above)"
fi
# bf16, full activation checkpointing (capture of the recompute), two micro-batches and
# validation (grad-mode forwards with no backward) against the same settings on jit.
if run cuda_jit_mix --set resources.device=cuda --set compile.backend=jit "${GRAPH_MIX[@]}" &&
   run cuda_graph_mix --set resources.device=cuda --set compile.backend=cudagraph "${GRAPH_MIX[@]}"; then
  record "CUDA cudagraph vs jit, bf16 + full AC + grad_accum 2 + validation (tiny, 20 steps)" \
    "$RUNS/cuda_jit_mix.jsonl" "$RUNS/cuda_graph_mix.jsonl" 1e-3
  verdict "$(graph_regions "$RUNS/cuda_graph_mix.jsonl")"
else
  fail "CUDA cudagraph bf16/AC/accumulation/validation run or its jit reference did not run (see above)"
fi
if timeout 300 "$BENCH" --preset debug --set resources.device=cuda --backend jit,cudagraph --steps 20 --warmup 5 \
     > "$RUNS/bench_graph.txt" 2> "$RUNS/bench_graph.err"; then
  info "trainyard-bench --backend jit,cudagraph: $(tail -3 "$RUNS/bench_graph.txt" | tr '\n' ' ')"
else
  fail "trainyard-bench --backend jit,cudagraph on CUDA failed: $(tail -2 "$RUNS/bench_graph.err" | tr '\n' ' ')"
fi

echo
echo "== NCCL with 2 ranks on this machine's GPUs"
GPUS=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if RUN_TIMEOUT=60 run cuda_dp2 --set resources.device=cuda --set parallelism.dp=2 --set training.batch_size=4 \
     --set parallelism.collective_timeout_s=30; then
  record "CUDA/NCCL dp=2 vs CPU 1 rank with the same global batch ($GPUS GPU(s))" \
    "$RUNS/cpu_1_b8.jsonl" "$RUNS/cuda_dp2.jsonl" 1e-4
elif [[ "$GPUS" -lt 2 ]] && grep -qiE "duplicate GPU|both on CUDA device|ncclInvalidUsage|invalid usage" \
       "$RUNS/cuda_dp2.err"; then
  info "multi-rank NCCL not runnable here: $GPUS GPU, and NCCL refuses two ranks on one GPU (rendezvous and ProcessGroupNCCL reached; its refusal is in runs.tar.gz cuda_dp2.err)"
else
  info "dp=2 on CUDA failed with $GPUS GPU(s); the ranks' error is above (NCCL needs one GPU per rank)"
fi

echo
echo "== FSDP on NCCL (dp_shard=2: reduce-scatter of fp32 gradients, bf16 all-gather in bf16)"
if [[ "$GPUS" -ge 2 ]]; then
  if RUN_TIMEOUT=60 run cuda_fsdp2 --set resources.device=cuda --set parallelism.dp=2 --set parallelism.dp_shard=2 \
       --set training.batch_size=4 --set parallelism.collective_timeout_s=30; then
    record "CUDA/NCCL FSDP dp_shard=2 vs CPU 1 rank with the same global batch" \
      "$RUNS/cpu_1_b8.jsonl" "$RUNS/cuda_fsdp2.jsonl" 1e-4
    # The rank's "gradient reduction:" line names reduce-scatter or the all-reduce fallback.
    grep -h '"gradient reduction:' "$RUNS/cuda_fsdp2.jsonl" | python3 -c \
      'import json,sys; [print("    " + json.loads(l)["log"]["message"]) for l in sys.stdin]' 2>/dev/null
  else
    fail "CUDA/NCCL FSDP dp_shard=2 did not run (see above)"
  fi
  if RUN_TIMEOUT=60 run cuda_fsdp2_bf16 --set resources.device=cuda --set parallelism.dp=2 \
       --set parallelism.dp_shard=2 --set training.batch_size=4 --set training.mixed_precision=bf16 \
       --set parallelism.collective_timeout_s=30; then
    record "CUDA/NCCL FSDP dp_shard=2 bf16 vs CPU 1 rank fp32 (bf16 bound)" \
      "$RUNS/cpu_1_b8.jsonl" "$RUNS/cuda_fsdp2_bf16.jsonl" 2e-2
  else
    fail "CUDA/NCCL FSDP dp_shard=2 bf16 did not run (see above)"
  fi
else
  info "FSDP on NCCL not runnable here: $GPUS GPU (NCCL needs one GPU per rank)"
fi

echo
echo "== c. trainyard-bench --preset debug --set resources.device=cuda --steps 20 --warmup 5"
START=$SECONDS
timeout 200 "$BENCH" --preset debug --set resources.device=cuda --steps 20 --warmup 5 --json \
  > "$RUNS/bench_cuda.json" 2> "$RUNS/bench_cuda.err"
BENCH_RC=$?
echo "bench: exit $BENCH_RC in $(( SECONDS - START )) s"
if [[ $BENCH_RC -eq 0 ]]; then
  cat "$RUNS/bench_cuda.json"
  line=$(python3 - "$RUNS/bench_cuda.json" <<'PY'
import json, sys
b = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(f"bench debug on {b['device']}: {b['tokens_per_s']:.0f} tokens/s, step {b['step_ms']:.2f} ms (median), "
      f"{b['model_tflops']:.3f} model TFLOP/s, MFU {100 * b['mfu']:.2f}% of "
      f"{b['gemm_peak_gflops_per_rank'] / 1000:.1f} TFLOP/s fp32 GEMM peak")
PY
)
  pass "$line"
else
  tail -5 "$RUNS/bench_cuda.err"
  fail "trainyard-bench on CUDA exited $BENCH_RC"
fi
exit $FAILED
