"""Checks Trainyard's TensorBoard event files with TensorBoard's own reader.

Usage: tensorboard_check.py EVENTS.jsonl JOB.json TB_DIR JOB_ID

EVENTS.jsonl is the job's stored events as `trainyard watch JOB --output json` printed
them, JOB.json its `trainyard get JOB --output json`: the values are compared against
those, read from the controller's store, never against what the writer was given. Every
run folder must be TB_DIR/JOB_ID/attempt-A for exactly the attempts with events; every
scalar TensorBoard reads must equal (as a float32) the stored value at its step, once;
the text record must be the job's resolved spec. Prints one summary line per run;
exits non-zero with the first mismatch.
"""
import datetime
import json
import math
import os
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator as ea


def f32(x):
    return struct.unpack("f", struct.pack("f", float(x)))[0]


def num(v):
    if isinstance(v, str):  # proto3 JSON: 64-bit integers and NaN/Infinity as strings
        return float(v)
    return float(v)


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def main():
    events_path, job_path, tb_dir, job_id = sys.argv[1:5]
    events = [json.loads(line) for line in open(events_path) if line.startswith("{")]
    job = json.load(open(job_path))
    attempts = sorted({e.get("attempt", 0) for e in events if e.get("attempt", 0) >= 1})
    job_dir = os.path.join(tb_dir, job_id)
    runs = sorted(d for d in os.listdir(job_dir) if not d.startswith("."))
    want_runs = ["attempt-%d" % a for a in attempts]
    if runs != want_runs:
        sys.exit("run folders %s, want %s" % (runs, want_runs))
    for attempt in attempts:
        run = os.path.join(job_dir, "attempt-%d" % attempt)
        files = os.listdir(run)
        if len(files) != 1 or not files[0].startswith("events.out.tfevents.") or not files[0].endswith(".trainyard"):
            sys.exit("%s: files %s" % (run, files))
        acc = ea.EventAccumulator(run, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
        acc.Reload()
        mine = [e for e in events if e.get("attempt") == attempt]
        # tag -> {step: (value, wall_time)} as stored
        want = {}

        def put(tag, step, value, e):
            want.setdefault(tag, []).append((int(step), f32(num(value)), e["time"]))

        stalls = 0
        counts = {"COMPILE": 0, "RECOMPILE": 0, "GRAPH_BREAK": 0}
        count_tags = {"COMPILE": "compile/compiles", "RECOMPILE": "compile/recompiles",
                      "GRAPH_BREAK": "compile/graph_breaks"}
        last_step = 0
        for e in mine:
            if "step_metrics" in e:
                m = e["step_metrics"]
                step = m["step"]
                last_step = max(last_step, int(step))
                for tag, key in (("train/loss", "loss"), ("train/grad_norm", "grad_norm"), ("train/lr", "lr"),
                                 ("train/tokens", "tokens"), ("perf/tokens_per_s", "tokens_per_s"),
                                 ("perf/model_tflops", "model_tflops"), ("perf/step_ms", "step_ms"),
                                 ("perf/data_ms", "data_ms"), ("memory/peak_rss_mb", "peak_rss_mb")):
                    put(tag, step, m[key], e)
                if num(m["mfu"]) != 0:
                    put("perf/mfu", step, m["mfu"], e)
                if num(m["epoch"]) > 0:
                    put("train/epoch", step, m["epoch"], e)
                if num(m["peak_tensor_bytes"]) > 0:
                    put("memory/peak_tensor_bytes", step, m["peak_tensor_bytes"], e)
                if m["expert_load"]:
                    put("experts/imbalance", step, m["imbalance"], e)
                    put("experts/dropped_tokens", step, m["dropped_tokens"], e)
                    for i, load in enumerate(m["expert_load"]):
                        put("experts/load/expert%d" % i, step, load, e)
            elif "validation" in e:
                v = e["validation"]
                put("val/loss", v["step"], v["loss"], e)
                put("val/tokens", v["step"], v["tokens"], e)
                put("val/ms", v["step"], v["ms"], e)
            elif "compile" in e:
                c = e["compile"]
                if c["kind"] in counts:
                    counts[c["kind"]] += 1
                    put(count_tags[c["kind"]], last_step, counts[c["kind"]], e)
                if c["kind"] in ("COMPILE", "RECOMPILE") and num(c["compile_ms"]) > 0:
                    put("compile/compile_ms", last_step, c["compile_ms"], e)
            elif "stall" in e:
                stalls += 1
                put("faults/stalls", e["stall"]["step"], stalls, e)
                put("faults/stall_waited_s", e["stall"]["step"], e["stall"]["waited_s"], e)
            elif "checkpoint" in e:
                c = e["checkpoint"]
                put("checkpoint/bytes", c["step"], c["bytes"], e)
                put("checkpoint/blocked_ms", c["step"], c["blocked_ms"], e)
                put("checkpoint/write_ms", c["step"], c["write_ms"], e)
                if c.get("metric_name"):
                    put("checkpoint/metric", c["step"], c["metric"], e)
            elif "checkpoints_pruned" in e:
                p = e["checkpoints_pruned"]
                put("checkpoint/bytes_freed", p["step"], p["bytes_freed"], e)
                put("checkpoint/bytes_kept", p["step"], p["bytes_kept"], e)
                put("checkpoint/kept", p["step"], p["kept"], e)
        tags = set(acc.Tags()["scalars"])
        if tags != set(want):
            sys.exit("%s: scalar tags %s, want %s" % (run, sorted(tags), sorted(want)))
        if "train/loss" not in want or "val/loss" not in want:
            sys.exit("%s: the job reported no loss or no validation: %s" % (run, sorted(want)))
        for tag, points in want.items():
            got = [(s.step, s.value) for s in acc.Scalars(tag)]
            expect = [(step, value) for step, value, _ in points]
            if len(got) != len(expect) or not all(g[0] == w[0] and same(g[1], w[1]) for g, w in zip(got, expect)):
                sys.exit("%s %s: TensorBoard read %s, the store holds %s" % (run, tag, got, expect))
        loss_walls = [s.wall_time for s in acc.Scalars("train/loss")]
        for wall, (_, _, stored) in zip(loss_walls, want["train/loss"]):
            # RFC 3339 from the store, e.g. 2026-12-06T17:50:01.123456Z; compare seconds.
            t = datetime.datetime.strptime(stored[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
            if int(wall) != int(t.timestamp()):
                sys.exit("%s: wall time %s, stored %s" % (run, wall, stored))
        if acc.Tags()["tensors"] != ["spec"]:
            sys.exit("%s: tensors %s" % (run, acc.Tags()["tensors"]))
        if acc.SummaryMetadata("spec").plugin_data.plugin_name != "text":
            sys.exit("%s: spec plugin %s" % (run, acc.SummaryMetadata("spec").plugin_data.plugin_name))
        text = acc.Tensors("spec")[0].tensor_proto.string_val[0].decode("utf-8")
        if not text.startswith("```json\n") or not text.endswith("\n```"):
            sys.exit("%s: spec text not a json fence: %r" % (run, text[:80]))
        if json.loads(text[len("```json\n"):-len("\n```")]) != job["spec"]:
            sys.exit("%s: spec text differs from the job's spec" % run)
        print("%s: %d tags, %d losses (steps %s..%s), %d stalls, spec ok" % (
            run, len(tags), len(want["train/loss"]), want["train/loss"][0][0], want["train/loss"][-1][0], stalls))


if __name__ == "__main__":
    main()
