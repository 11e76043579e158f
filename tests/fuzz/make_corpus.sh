#!/usr/bin/env bash
# Writes the seed corpus of each fuzz target into tests/fuzz/corpus/<target>/ (run from
# anywhere; needs protoc and Python: $TRAINYARD_PYTHON, else the tree's venv
# /opt/trainyard/venv, else python3). Seeds are valid inputs and near misses, so the
# fuzzers start past the parsers' first checks. Findings are added by hand, named
# after what they found.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
c=$here/corpus
python=${TRAINYARD_PYTHON:-/opt/trainyard/venv/bin/python3}
if [ ! -x "$python" ]; then python=python3; fi

# Job files: the examples, and a few edits of them.
d=$c/job_file_fuzz; mkdir -p "$d"
cp "$root/examples/debug.toml" "$d/debug.toml"
cp "$root/examples/tiny.toml" "$d/tiny.toml"
sed 's/^dp = .*/dp = 0/' "$root/examples/debug.toml" > "$d/debug-dp0.toml"
printf '[job]\nname = "x"\n[model]\npreset = "tiny"\n[training]\nsteps = 5\nlr = nan\n' > "$d/nan-lr.toml"
printf '[model]\npreset = "tiny"\n[parallelism]\ndp = 2\ntp = 2\n[training]\nsteps = 3\n' > "$d/tp2.toml"
printf '[model]\npreset = "tiny"\n[parallelism]\npp = 2\npp_schedule = "1f1b"\npp_microbatches = 2\n' > "$d/pp2.toml"
printf '{"model": {"preset": "tiny"}, "training": {"steps": 4}}' > "$d/json.json"
printf '[model]\ndimm = 3\n' > "$d/unknown-key.toml"

encode() {  # encode MESSAGE OUT < text
  protoc --encode="trainyard.v1.$1" -I "$root/proto" "$root/proto/trainyard/v1/job_service.proto" \
    "$root/proto/trainyard/v1/worker_service.proto" > "$2"
}

# SubmitJobRequest: what the CLI sends for small jobs, and near misses.
d=$c/submit_request_fuzz; mkdir -p "$d"
encode SubmitJobRequest "$d/tiny" <<< 'spec { job { name: "t" } model { preset: "tiny" } parallelism { dp: 2 } }'
encode SubmitJobRequest "$d/debug-tp" <<< 'spec { job { name: "d" priority: 3 } model { preset: "debug" } parallelism { dp: 2 tp: 2 } training { steps: 20 lr: 0.001 } restart { max_restarts: 2 } }'
encode SubmitJobRequest "$d/checkpoint" <<< 'spec { model { preset: "tiny" } checkpoint { interval: 5 keep: 2 dir: "/shared/ckpt" } training { steps: 10 } }'
encode SubmitJobRequest "$d/cuda" <<< 'spec { model { preset: "tiny" } resources { device: "cuda" } }'
encode SubmitJobRequest "$d/dataset" <<< 'spec { model { preset: "tiny" } training { dataset: "tokens" dataset_path: "/data/t.u16" } }'
encode SubmitJobRequest "$d/empty" <<< ''

# EventBatch from worker w1, which runs job-1 (attempt 1, ranks 0 and 1); job-2 is on w2.
d=$c/event_batch_fuzz; mkdir -p "$d"
ev() { encode EventBatch "$d/$1"; }
ev exited <<< 'batch_id: 7 events { job_id: "job-1" attempt: 1 rank: 0 source_seq: 2 rank_state { state: EXITED worker: "w1" } } events { job_id: "job-1" attempt: 1 rank: 1 source_seq: 2 rank_state { state: EXITED worker: "w1" } }'
ev failed <<< 'batch_id: 8 events { job_id: "job-1" attempt: 1 rank: 1 source_seq: 2 rank_state { state: FAILED exit_code: 3 worker: "w1" message: "boom" } }'
ev steps <<< 'batch_id: 9 events { job_id: "job-1" attempt: 1 rank: 0 source_seq: 2 step_metrics { step: 1 loss: 2.5 lr: 0.001 expert_load: [1, 2, 3] } } events { job_id: "job-1" attempt: 1 rank: 0 source_seq: 3 compile { region: "block" layers: [0, 1] reason: "guard" } } events { job_id: "job-1" attempt: 1 rank: 1 source_seq: 2 log { level: "warn" message: "hi" } }'
ev checkpoint <<< 'batch_id: 10 events { job_id: "job-1" attempt: 1 rank: 0 source_seq: 2 checkpoint { step: 10 path: "/ckpt/job-1/step-00000010-attempt-1" bytes: 1024 blocked_ms: 1 write_ms: 2 dp: 2 tp: 1 ep: 1 } }'
ev forged-job2 <<< 'batch_id: 11 events { job_id: "job-2" attempt: 1 rank: 0 source_seq: 1 rank_state { state: RUNNING worker: "w2" } } events { job_id: "job-2" attempt: 1 rank: 0 source_seq: 2 rank_state { state: EXITED worker: "w2" } }'
ev stall <<< 'batch_id: 12 events { job_id: "job-1" attempt: 1 rank: 1 source_seq: 2 stall { collective: "dp0:allreduce" collective_seq: 4 lagging_rank: 0 waited_s: 30 waiting_ranks: [1] step: 3 } }'
ev controller-only <<< 'batch_id: 13 events { job_id: "job-1" attempt: 1 rank: 0 source_seq: 2 job_state { state: SUCCEEDED reason: "forged" } } events { job_id: "job-1" attempt: 1 rank: 0 source_seq: 3 artifact { name: "t.json" kind: "trace" size_bytes: 3 } }'
ev old-attempt <<< 'batch_id: 14 events { job_id: "job-1" attempt: 2 rank: 0 source_seq: 1 rank_state { state: EXITED worker: "w1" } } events { job_id: "job-9" attempt: 1 rank: 0 source_seq: 1 log { level: "info" message: "x" } }'

# safetensors files: what WriteSafetensors writes (header padded to 8 bytes), and near misses.
d=$c/safetensors_header_fuzz; mkdir -p "$d"
"$python" - "$d" <<'PY'
import json, struct, sys
d = sys.argv[1]
def write(name, header, data, pad=True, length=None):
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    n = len(text) if length is None else length
    open(f"{d}/{name}", "wb").write(struct.pack("<Q", n) + text + data)
meta = {"format": "pt"}
write("two-tensors", {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                      "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]},
                      "__metadata__": meta}, bytes(22))
write("all-dtypes", {f"t{i}": {"dtype": t, "shape": [1], "data_offsets": [o, o + s]}
                     for i, (t, s, o) in enumerate([("F64", 8, 0), ("F32", 4, 8), ("F16", 2, 12), ("BF16", 2, 14),
                                                    ("I64", 8, 16), ("I32", 4, 24), ("I16", 2, 28), ("I8", 1, 30),
                                                    ("U8", 1, 31), ("BOOL", 1, 32)])}, bytes(33))
write("scalar-and-empty", {"s": {"dtype": "I64", "shape": [], "data_offsets": [0, 8]},
                           "e": {"dtype": "F32", "shape": [0, 4], "data_offsets": [8, 8]}}, bytes(8))
write("gap", {"a": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}, bytes(3))
write("overlap", {"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                  "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}, bytes(3))
write("bad-length", {"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, bytes(1), length=1 << 40)
write("huge-shape", {"a": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}}, b"")
PY
printf 'short' > "$d/truncated"

# Checkpoint manifests: as ManifestToJson writes them, and near misses.
d=$c/checkpoint_manifest_fuzz; mkdir -p "$d"
"$python" - "$d" <<'PY'
import json, sys
d = sys.argv[1]
def manifest(dp=2, tp=1, step=10, gb=8, sizes=None, **over):
    world = dp * tp
    sizes = sizes or [1000 + r for r in range(world)]
    m = {"format": "trainyard-checkpoint-v1", "step": step, "attempt": 1, "layout": {"dp": dp, "tp": tp, "ep": 1},
         "optimizer_step": step, "global_batch": gb, "samples_consumed": step * gb, "dataset": "synthetic",
         "seed": 1234, "files": [{"name": "rank-%05d.safetensors" % r, "rank": r, "bytes": sizes[r]} for r in range(world)],
         "total_bytes": sum(sizes)}
    m.update(over)
    return m
def write(name, m):
    open(f"{d}/{name}", "w").write(json.dumps(m, indent=2) + "\n")
write("dp2", manifest())
write("dp2-tp2", manifest(dp=2, tp=2, step=40, gb=16))
write("one-rank", manifest(dp=1, step=1, gb=1, seed=18446744073709551615))
write("bad-total", manifest(total_bytes=5))
write("bad-samples", manifest(samples_consumed=3))
m = manifest(); m["files"][1]["name"] = "../rank-00001.safetensors"; write("traversal", m)
write("float-step", manifest(step=1.5))
PY

# Megatron .idx files: valid ones and near misses, from the data tests' own writer.
"$python" "$root/tests/common/data/write_indexed.py" --fuzz-seeds "$c/indexed_index_fuzz"
