#!/usr/bin/env python3
"""Seed 003's experiment on the local stack (see scripts/bench-state.sh).

For each configuration and rate: a kafka-to-gcs job with --web, a generator at the
rate, the job's /metrics sampled every second (state bytes, RSS, heap, CPU), its
"checkpoint completed" log lines collected (state bytes, uploaded bytes, synchronous
and upload time), then SIGKILL, a restart whose summary gives the recovery time, and
an exactly-once check over the files. Standard library only.
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

CONFIGS = [("heap", "full"), ("lsm", "full"), ("lsm", "incremental")]
WINDOW, INTERVAL, SHARDS, PARTITIONS = "30s", "9s", 2000, 4
SCHEMA = (
    '{"id": {{index(0)}}, "key": "k{{integer(1,2000)}}", "ts": "{{timestamp()}}", '
    '"user": "{{firstName()}} {{lastName()}}", "city": "{{city()}}", "amount": {{double(0,1000)}}, '
    '"session": "{{uuid()}}", "text": "{{lorem(84,"words")}}"}'
)
CK_LINE = re.compile(r"checkpoint completed .*?state_bytes=(\d+) uploaded_bytes=(\d+) sync_ms=(\d+) upload_ms=(\d+)")
WEB_PORT = 39180


def metrics(port):
    """The job's gauges by name (first sample of each)."""
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return {}
    out = {}
    for line in body.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.split("{")[0].split(" ")[0], line.rsplit(" ", 1)[1]
        try:
            out.setdefault(name, float(value))
        except ValueError:
            pass
    return out


def job_cmd(a, name, topic, out, ck, backend, kind, extra):
    params = (
        f"readBootstrapServerAndTopic={os.environ['FLEXRUN_KAFKA']};{topic},kafkaReadAuthenticationMode=NONE,"
        f"kafkaReadOffset=earliest,messageFormat=JSON,outputDirectory={out}/,windowDuration={WINDOW},numShards={SHARDS}"
    )
    bucket = os.environ.get("FLEXRUN_GCS_BUCKET", "flexrun")
    return [
        a.flexrun, "--template", "kafka-to-gcs", "--job-name", name, "--checkpoint-dir", ck,
        "--state-backend", backend, "--checkpoint-kind", kind, "--checkpoint-interval", INTERVAL,
        "--checkpoint-location", f"gs://{bucket}/bench-state/{topic}/", "--autoscaling-algorithm", "NONE",
        "--commit-parallelism", "64", *extra, "--parameters", params,
    ]


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def read_stderr(proc, lines):
    for raw in proc.stderr:
        lines.append(ANSI.sub("", raw.decode(errors="replace")))


def run_one(a, backend, kind, rate, tmp):
    topic = f"st_{backend}_{kind}_{rate}_{int(time.time())}"
    subprocess.run([a.flexrun, "local", "create-topic", "--topic", topic, "--partitions", str(PARTITIONS)], check=True,
                   stdout=subprocess.DEVNULL)
    out, ck = os.path.join(tmp, topic, "out"), os.path.join(tmp, topic, "ck")
    os.makedirs(out)
    env = dict(os.environ, FLEXRUN_LOG="info,rdkafka=warn", NO_COLOR="1")
    job = subprocess.Popen(job_cmd(a, "st", topic, out, ck, backend, kind, ["--web", f"127.0.0.1:{WEB_PORT}"]),
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lines = []
    threading.Thread(target=read_stderr, args=(job, lines), daemon=True).start()
    n = rate * a.seconds
    gen = subprocess.Popen(
        [a.flexrun, "--template", "streaming-data-generator", "--parameters",
         f"sinkType=KAFKA,bootstrapServer={os.environ['FLEXRUN_KAFKA']},kafkaTopic={topic},qps={rate},"
         f"messagesLimit={n},schemaLocation={a.schema}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples, t0 = [], time.time()
    while time.time() - t0 < a.seconds + 3:
        m = metrics(WEB_PORT)
        if m:
            samples.append(m)
        time.sleep(1)
    gen.wait()
    last = metrics(WEB_PORT)
    if last:
        samples.append(last)
    job.send_signal(signal.SIGKILL)
    job.wait()
    cks = [tuple(int(x) for x in m.groups()) for m in map(CK_LINE.search, lines) if m]
    # Restart: recovery from the latest checkpoint, then drain and finish.
    summary = os.path.join(tmp, topic, "restart.json")
    r = subprocess.run(job_cmd(a, "st", topic, out, ck, backend, kind, ["--idle-timeout", "5s", "--summary-json", summary]),
                       env=dict(os.environ, FLEXRUN_LOG="warn"), capture_output=True, timeout=900)
    if r.returncode != 0:
        sys.exit(f"the restart failed: {r.stderr.decode()[-2000:]}")
    s = json.load(open(summary))
    ids, dup = count_ids(out)
    if dup or len(ids) != n:
        sys.exit(f"{backend}/{kind} at {rate}/s: {len(ids)} distinct ids of {n}, {dup} duplicates")
    g = lambda k: max((x.get(k, 0) for x in samples), default=0)
    steady = [c for c in cks if c[0] > 0][1:] or cks
    cpu = last.get("process_cpu_seconds_total", 0)
    return {
        "backend": backend, "kind": kind, "rate": rate, "records": n,
        "state_bytes": g("job_state_bytes"), "rss_bytes": g("process_resident_memory_bytes"),
        "heap_bytes": g("process_heap_bytes"), "cpu_s": cpu, "cores": cpu / a.seconds,
        "cpu_us_per_record": cpu / n * 1e6,
        "checkpoints": [{"state_bytes": c[0], "uploaded_bytes": c[1], "sync_s": c[2] / 1e3, "upload_s": c[3] / 1e3} for c in cks],
        "ck_bytes_median": statistics.median([c[1] for c in steady]) if steady else 0,
        "ck_s_median": statistics.median([(c[2] + c[3]) / 1e3 for c in steady]) if steady else 0,
        "ck_sync_s_max": max([c[2] / 1e3 for c in cks], default=0),
        "recovery_s": s["state"]["recovery_s"], "restored_from": s["state"]["restored_from"],
        "exactly_once": True,
    }


def count_ids(out):
    seen, dup = set(), 0
    for root, _, files in os.walk(out):
        if "_temporary" in root:
            continue
        for f in files:
            for line in open(os.path.join(root, f)):
                i = json.loads(line)["id"]
                dup += i in seen
                seen.add(i)
    return seen, dup


def svg(rows, path):
    """Checkpoint duration against state size, one series per configuration."""
    pts = {f"{r['backend']}/{r['kind']}": [] for r in rows}
    for r in rows:
        for c in r["checkpoints"]:
            if c["state_bytes"] > 0:
                pts[f"{r['backend']}/{r['kind']}"].append((c["state_bytes"] / 2**20, c["sync_s"] + c["upload_s"]))
    xs = [p[0] for v in pts.values() for p in v] or [1]
    ys = [p[1] for v in pts.values() for p in v] or [1]
    W, H, L, B = 640, 400, 60, 50
    x1, y1 = max(xs) * 1.05, max(ys) * 1.1
    px = lambda x: L + x / x1 * (W - L - 20)
    py = lambda y: H - B - y / y1 * (H - B - 20)
    colors = ["#2a6fdb", "#e07b00", "#2e7d32"]
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-size="12" font-family="sans-serif">',
         f'<line x1="{L}" y1="{H-B}" x2="{W-10}" y2="{H-B}" stroke="#333"/><line x1="{L}" y1="10" x2="{L}" y2="{H-B}" stroke="#333"/>',
         f'<text x="{W/2}" y="{H-10}" text-anchor="middle">state size at the checkpoint (MiB)</text>',
         f'<text x="14" y="{H/2}" transform="rotate(-90 14 {H/2})" text-anchor="middle">checkpoint duration (s)</text>']
    for k in range(6):
        s.append(f'<text x="{px(x1*k/5):.0f}" y="{H-B+16}" text-anchor="middle">{x1*k/5:.0f}</text>')
        s.append(f'<text x="{L-6}" y="{py(y1*k/5)+4:.0f}" text-anchor="end">{y1*k/5:.2f}</text>')
    for i, (name, v) in enumerate(pts.items()):
        c = colors[i % 3]
        for x, y in v:
            s.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{c}"/>')
        s.append(f'<rect x="{L+12}" y="{16+i*18}" width="10" height="10" fill="{c}"/><text x="{L+28}" y="{25+i*18}">{name}</text>')
    s.append("</svg>")
    open(path, "w").write("\n".join(s))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flexrun", required=True)
    ap.add_argument("--rates", default="2500 5000 7500")
    ap.add_argument("--seconds", type=int, default=90)
    ap.add_argument("--json", required=True)
    ap.add_argument("--svg", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-state-")
    a.schema = os.path.join(tmp, "schema.json")
    open(a.schema, "w").write(SCHEMA)
    rows = []
    for rate in [int(r) for r in a.rates.split()]:
        for backend, kind in CONFIGS:
            print(f"[bench-state] {backend}/{kind} at {rate} records/s for {a.seconds} s", file=sys.stderr)
            rows.append(run_one(a, backend, kind, rate, tmp))
    json.dump(rows, open(a.json, "w"), indent=1)
    svg(rows, a.svg)
    mib = lambda b: b / 2**20
    print("| rate (records/s) | configuration | state MiB | RSS MiB | heap MiB | CPU cores | CPU µs/record | checkpoint MiB (median) | checkpoint s (median) | longest sync part s | recovery s |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['rate']:,} | {r['backend']}/{r['kind']} | {mib(r['state_bytes']):.0f} | {mib(r['rss_bytes']):.0f} | "
              f"{mib(r['heap_bytes']):.0f} | {r['cores']:.2f} | {r['cpu_us_per_record']:.1f} | {mib(r['ck_bytes_median']):.1f} | "
              f"{r['ck_s_median']:.2f} | {r['ck_sync_s_max']:.3f} | {r['recovery_s']:.2f} |")
    top = max(int(r) for r in a.rates.split())
    by = {(r["backend"], r["kind"]): r for r in rows if r["rate"] == top}
    h, i = by[("heap", "full")], by[("lsm", "incremental")]
    print(f"\nat {top:,}/s, heap/full over lsm/incremental: checkpoint size {h['ck_bytes_median'] / max(i['ck_bytes_median'], 1):.1f}x, "
          f"duration {h['ck_s_median'] / max(i['ck_s_median'], 1e-9):.1f}x; CPU per record heap {h['cpu_us_per_record']:.1f} µs, "
          f"lsm {i['cpu_us_per_record']:.1f} µs")


if __name__ == "__main__":
    main()
