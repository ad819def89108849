#!/usr/bin/env bash
# Progress-tracking latency (issue 7), after Spark's figures 6–11 (seed 000): end-to-end
# p50/p99 for each progress configuration and input rate, for rate-to-stats and
# kafka-to-kafka.
#
#   scripts/bench-progress.sh [SECONDS] [RATE_RATES] [KAFKA_RATES]
#   (defaults: 10 s per run; rate-to-stats at 10000,50000,100000 records/s;
#    kafka-to-kafka at 10000,30000,50000 records/s)
#
# kafka-to-kafka runs against the bench stack's Apache Kafka broker (scripts/stack.sh
# start bench), with its durable default settings.
#
# Configurations: sync (offset and commit logs fsynced on every batch, purge inline),
# purge (async log purge only), progress (async progress tracking only, purge inline),
# both. kafka-to-kafka reads what streaming-data-generator writes at the rate (latency
# from each message's creation timestamp to the output topic's acknowledgement; "in-job"
# latency from the moment the job read the message, which leaves out the input broker).
# The first 2 s after each job's first record are left out of the latency (connections and
# the generator's producer start-up; with them, the first half second of input waits up to
# ~500 ms and alone sets a 10-s run's p99). Prints a table and writes bench-out/progress.svg.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SECS=${1:-10}
RATE_RATES=${2:-10000,50000,100000}
KAFKA_RATES=${3:-10000,30000,50000}
OUT=bench-out/progress
rm -rf "$OUT" && mkdir -p "$OUT"
bash scripts/build-deps.sh
cargo build --release --bin flexrun >&2
F=target/release/flexrun
bash scripts/stack.sh start bench >&2
eval "$(bash scripts/stack.sh env bench)"
export FLEXRUN_CHECKPOINT_DIR="$OUT/checkpoints"
cat > "$OUT/event.json" <<'JSON'
{"id": {{integer(1,1000000000)}}, "user": "{{username()}}", "score": {{integer(0,1000)}}, "ts": "{{timestamp()}}"}
JSON

flags() {
  case "$1" in
    sync) echo "--async-log-purge=false" ;;
    purge) echo "--async-log-purge=true" ;;
    progress) echo "--async-progress-tracking --async-log-purge=false" ;;
    both) echo "--async-progress-tracking --async-log-purge=true" ;;
  esac
}

for rate in ${RATE_RATES//,/ }; do
  for cfg in sync purge progress both; do
    $F --template rate-to-stats --job-name "rate-$cfg-$rate" --batch-rows 100000 --latency-warm-up 2s $(flags $cfg) \
      --summary-json "$OUT/rate-to-stats_${cfg}_${rate}.json" \
      --parameters "rowsPerSecond=$rate,messagesLimit=$((rate * SECS))" > /dev/null 2>&1
    echo "rate-to-stats $cfg $rate done" >&2
  done
done

for rate in ${KAFKA_RATES//,/ }; do
  for cfg in sync purge progress both; do
    in="k2k_in_${cfg}_${rate}_$$"; out="k2k_out_${cfg}_${rate}_$$"
    $F local create-topic --topic "$in" --partitions 4 >&2
    $F local create-topic --topic "$out" --partitions 4 >&2
    $F --template kafka-to-kafka --job-name "k2k-$cfg-$rate" --idle-timeout 8s --latency-warm-up 2s $(flags $cfg) \
      --summary-json "$OUT/kafka-to-kafka_${cfg}_${rate}.json" \
      --parameters "readBootstrapServerAndTopic=$FLEXRUN_KAFKA;$in,writeBootstrapServerAndTopic=$FLEXRUN_KAFKA;$out,kafkaReadOffset=earliest" > /dev/null 2>"$OUT/k2k_${cfg}_${rate}.log" &
    job=$!
    sleep 2
    $F --template streaming-data-generator --seed 1 \
      --parameters "qps=$rate,schemaLocation=$OUT/event.json,sinkType=KAFKA,bootstrapServer=$FLEXRUN_KAFKA,kafkaTopic=$in,messagesLimit=$((rate * SECS))" > /dev/null 2>&1
    wait $job
    echo "kafka-to-kafka $cfg $rate done" >&2
  done
done

python3 - "$OUT" "$SECS" <<'PY'
import glob, json, os, sys
out, secs = sys.argv[1], sys.argv[2]
rows = []
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    name = os.path.basename(path)[:-5]
    if name == "event":
        continue
    template, cfg, rate = name.split("_")
    r = json.load(open(path))
    rows.append((template, int(rate), cfg, r))
order = {"sync": 0, "purge": 1, "progress": 2, "both": 3}
rows.sort(key=lambda x: (x[0], x[1], order[x[2]]))
print(f"end-to-end latency, {secs} s per run, this machine ({os.cpu_count()} cores); kafka-to-kafka on Apache Kafka (one broker)")
print(f"{'template':<15} {'rate/s':>7} {'config':<9} {'records':>9} {'batches':>8} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} {'in-job p50':>10} {'in-job p99':>10} {'segments':>8}")
for t, rate, cfg, r in rows:
    p50, p99, p999, mx = r["latency_ms"]
    j50, j99 = r["in_job_latency_ms"][0], r["in_job_latency_ms"][1]
    print(f"{t:<15} {rate:>7} {cfg:<9} {r['records']:>9} {r['batches']:>8} {p50:>8.2f} {p99:>8.2f} {p999:>9.2f} {j50:>10.2f} {j99:>10.2f} {r['log_segments']:>8}")

# A grouped bar chart per template: groups = rates, bars = configs, p50 solid and p99 light.
import math
colors = {"sync": "#d62728", "purge": "#ff7f0e", "progress": "#2ca02c", "both": "#1f77b4"}
templates = sorted({t for t, *_ in rows})
W, H, top, left, panel = 980, 300 * len(templates) + 40, 40, 70, 300
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">', '<rect width="100%" height="100%" fill="white"/>']
for i, t in enumerate(templates):
    data = [(rate, cfg, r) for tt, rate, cfg, r in rows if tt == t]
    rates = sorted({d[0] for d in data})
    y0 = top + i * panel
    vals = [max(r["latency_ms"][k], 0.01) for _, _, r in data for k in (0, 1)]
    lo, hi = math.floor(math.log10(min(vals + [1]))), math.ceil(math.log10(max(vals)))
    hi = max(hi, lo + 1)
    ph = panel - 80
    y = lambda v: y0 + 20 + ph - (math.log10(max(v, 10 ** lo)) - lo) / (hi - lo) * ph
    svg.append(f'<text x="{W/2}" y="{y0 + 10}" text-anchor="middle" font-size="15">{t}: end-to-end latency by progress configuration (bars p99, dark = p50; log scale)</text>')
    for e in range(lo, hi + 1):
        svg.append(f'<line x1="{left}" x2="{W-20}" y1="{y(10**e)}" y2="{y(10**e)}" stroke="#ddd"/><text x="{left-6}" y="{y(10**e)+4}" text-anchor="end">{10**e:g} ms</text>')
    gw = (W - left - 40) / len(rates)
    for gi, rate in enumerate(rates):
        gx = left + 10 + gi * gw
        svg.append(f'<text x="{gx + gw/2 - 10}" y="{y0 + 20 + ph + 18}" text-anchor="middle">{rate} records/s</text>')
        for ci, cfg in enumerate(["sync", "purge", "progress", "both"]):
            rr = [r for rt, c, r in data if rt == rate and c == cfg]
            if not rr:
                continue
            p50, p99 = rr[0]["latency_ms"][0], rr[0]["latency_ms"][1]
            bw = (gw - 30) / 4
            x = gx + ci * bw
            base = y(10 ** lo)
            svg.append(f'<rect x="{x:.1f}" y="{y(p99):.1f}" width="{bw-4:.1f}" height="{base - y(p99):.1f}" fill="{colors[cfg]}" opacity="0.45"/>')
            svg.append(f'<rect x="{x:.1f}" y="{y(p50):.1f}" width="{bw-4:.1f}" height="{base - y(p50):.1f}" fill="{colors[cfg]}"/>')
            svg.append(f'<text x="{x + (bw-4)/2:.1f}" y="{y(p99) - 3:.1f}" text-anchor="middle" font-size="10">{p99:.1f}</text>')
lx = left
for cfg, c in colors.items():
    svg.append(f'<rect x="{lx}" y="{H-22}" width="12" height="12" fill="{c}"/><text x="{lx+16}" y="{H-12}">{cfg}</text>')
    lx += 110
svg.append("</svg>")
open("bench-out/progress.svg", "w").write("\n".join(svg))
print("chart: bench-out/progress.svg")
PY
