#!/usr/bin/env bash
# How well `flexrun simulate` predicts published figures it was not fitted to.
#
#   scripts/fidelity.sh
#
# Runs the simulator on each setup and prints predicted against published, with the
# error. Calibration rows (figures the model was fitted to) are printed first and
# marked; they agree by construction and are not evidence. Sources are in BENCHMARKS.md
# ("Simulator fidelity"). Takes a few seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/build-deps.sh
cargo build --release --bin flexrun >&2
BIN=target/release/flexrun
SEED=(--qps 1000000 --message-size 1KiB --partitions 1000 --max-workers 120 --parameters numStorageWriteApiStreams=400)
ALO=(--additional-experiments streaming_mode_at_least_once)
BLOG=(--rate 1GB/s --message-size 1KiB --partitions 10000 --max-workers 200 --worker-machine-type n2d-standard-4
      --parameters numStorageWriteApiStreams=400)
STEP=(--qps 200000 --partitions 1000 --duration 6h --profile steps:0=1,2h=2,4h=1 --noise 0)
sim() { "$BIN" simulate "$@" --format json 2>/dev/null; }
sim "${SEED[@]}" > /tmp/fid-seed-eo.json
sim "${SEED[@]}" "${ALO[@]}" > /tmp/fid-seed-alo.json
# At-least-once predicted from exactly-once: the exactly-once capacity per vCPU
# (976.6 MiB/s / (63 x 0.70 x 2) = 11.07 MiB/s) times the Beam blog's at-least-once /
# exactly-once MB/s per core (6.4 / 6.0), instead of the published at-least-once row.
sim "${SEED[@]}" "${ALO[@]}" --vcpu-capacity "$(python3 -c 'print(round(976.5625/(63*0.7*2)*6.4/6.0, 3))')MiB/s" > /tmp/fid-alo-pred.json
sim "${BLOG[@]}" > /tmp/fid-blog-eo.json
sim "${BLOG[@]}" "${ALO[@]}" > /tmp/fid-blog-alo.json
sim "${STEP[@]}" > /tmp/fid-step.json
python3 - <<'PY'
import json
L = lambda f: json.load(open(f"/tmp/fid-{f}.json"))
S = lambda f: L(f)["summary"]
rows = []
num = lambda x: f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"
def row(kind, what, pred, pub, unit=""):
    err = (pred - pub) / pub * 100 if pub else float("nan")
    rows.append((kind, what, num(pred) + unit, num(pub) + unit, f"{err:+.0f}%"))
eo, alo = S("seed-eo"), S("seed-alo")
row("calibrated", "seed 001 exactly-once workers", eo["workers_mean"], 63)
row("calibrated", "seed 001 exactly-once CPU", eo["mean_cpu"] * 100, 70, "%")
row("calibrated", "seed 001 exactly-once latency P99 (ms)", eo["latency_ms"][2], 5400)
row("calibrated", "seed 001 at-least-once workers", alo["workers_mean"], 53)
p = S("alo-pred")
row("held out", "seed 001 at-least-once workers, from exactly-once x blog ratio", p["workers_mean"], 53)
row("held out", "seed 001 at-least-once CPU, same", p["mean_cpu"] * 100, 75, "%")
be, ba = S("blog-eo"), S("blog-alo")
per_core = lambda s: s["throughput_mib_s"] * 1.048576 / (s["workers_mean"] * 4)
row("held out", "Beam blog exactly-once workers (n2d-standard-4, 1 GB/s)", be["workers_mean"], 42)
row("held out", "Beam blog at-least-once workers", ba["workers_mean"], 40)
row("held out", "Beam blog exactly-once MB/s per core", per_core(be), 6.0)
row("held out", "Beam blog at-least-once MB/s per core", per_core(ba), 6.4)
row("held out", "Beam blog exactly-once / at-least-once workers", be["workers_mean"] / ba["workers_mean"], 42 / 40)
d = [x for x in L("step")["decisions"] if x["from"] != x["to"]]
down = next(x["time_s"] for x in d if x["time_s"] > 4 * 3600 and x["to"] < x["from"])
up = next(x["time_s"] for x in d if x["time_s"] > 2 * 3600 and x["to"] > x["from"])
row("policy (from the docs)", "s from a load drop to the first scale-down (docs: >= 120 s of low backlog)", down - 4 * 3600, 120, " s")
rows.append(("policy (no figure)", "s from a 2x step to the first scale-up (utilization-driven)", f"{up - 2 * 3600:.0f} s", "-", "-"))
w = [max(len(r[i]) for r in rows) for i in range(5)]
hdr = ("kind", "figure", "predicted", "published", "error")
print("  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)))
for r in rows:
    print("  ".join(c.ljust(w[i]) for i, c in enumerate(r)))
PY
