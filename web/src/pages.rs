//! The HTML pages. Each is a small static document whose script calls the JSON API
//! and draws with uPlot. Pages mark `data-*` attributes on `<body>` once their charts
//! have drawn, which the browser test checks.

use axum::extract::Path;
use axum::response::Html;

/// uPlot's script, shipped in the binary.
pub const UPLOT_JS: &str = include_str!("../assets/uplot/uPlot.iife.min.js");
/// uPlot's stylesheet.
pub const UPLOT_CSS: &str = include_str!("../assets/uplot/uPlot.min.css");

const STYLE: &str = r##"
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #1d2433; }
nav a { margin-right: 1rem; }
form { display: grid; grid-template-columns: max-content 16rem; gap: .4rem .8rem; margin: 1rem 0; }
table { border-collapse: collapse; margin: .8rem 0; }
td, th { border-bottom: 1px solid #dde; padding: .25rem .6rem; text-align: right; }
td:first-child, th:first-child { text-align: left; }
.error { color: #b00020; font-weight: 600; }
.note { color: #555; font-size: .9rem; }
.limit { color: #8a1f11; background: #fdecea; padding: .3rem .5rem; }
.charts { display: flex; flex-wrap: wrap; gap: 1rem; }
h2 { margin-top: 1.6rem; }
"##;

fn layout(title: &str, body: &str, script: &str) -> Html<String> {
    Html(format!(
        r##"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title} · flexrun</title>
<link rel="stylesheet" href="/assets/uplot.css"><style>{STYLE}</style><script src="/assets/uplot.js"></script></head>
<body><nav><a href="/estimate">Cost estimate</a><a href="/simulate">Simulate</a><a href="/jobs">Jobs</a><a href="/metrics">Prometheus metrics</a></nav>
<h1>{title}</h1>{body}<script>{script}</script></body></html>"##
    ))
}

/// `/estimate`: the form, the itemised whole-pipeline bill, a stacked chart of each
/// line's share for both delivery modes in month 1 and month 12, and a chart of cost and
/// workers against throughput.
pub async fn estimate_page() -> Html<String> {
    layout("Price a Kafka → BigQuery pipeline", ESTIMATE_BODY, ESTIMATE_SCRIPT)
}

const ESTIMATE_BODY: &str = r##"<p class="note">The whole pipeline, us-central1 prices: Dataflow workers and Streaming Engine (CPU calibrated to Google's published kafka-to-bq benchmark and a small-message run), BigQuery Storage Write ingestion and storage (for a CDC table, its size and the background jobs that apply the changes, one per max staleness, each reading the whole table at the on-demand price), and optionally Google Cloud Managed Service for Apache Kafka. Each price's source and date are in <code>estimator/data/pricing-us-central1.yaml</code>. Not priced: network egress, BigQuery queries, Kafka's networking.</p>
<form id="f">
<label for="throughput">Throughput</label><span><input id="throughput" name="throughput" value="100" size="8" required>
<select id="unit" name="unit"><option>MiB/s</option><option>MB/s</option><option>GiB/s</option><option>GB/s</option><option>msg/s</option></select></span>
<label for="message_size">Message size</label><input id="message_size" name="message_size" placeholder="1000B">
<label for="mode">Mode</label><select id="mode" name="mode"><option>exactly-once</option><option>at-least-once</option></select>
<label for="machine_type">Machine type</label><select id="machine_type" name="machine_type"><option>e2-standard-2</option><option>e2-standard-4</option><option>e2-standard-8</option><option>n1-standard-1</option><option>n1-standard-2</option><option>n1-standard-4</option><option>n2-standard-2</option><option>n2-standard-4</option></select>
<label for="commitment">Commitment</label><select id="commitment" name="commitment"><option value="none">none</option><option value="1y">1 year</option><option value="3y">3 years</option></select>
<label for="dataset_location">Dataset location</label><input id="dataset_location" name="dataset_location" value="US" title="US or EU (multi-regions), or a region such as us-central1: it picks the Storage Write quotas">
<label for="baseline">Baseline</label><select id="baseline" name="baseline"><option value="google">Google, kafka-to-bq, e2-standard-2</option></select>
<label for="lines">Lines</label><input id="lines" name="lines" value="dataflow,bigquery-ingestion,bigquery-storage,bigquery-cdc,kafka">
<label for="kafka">Kafka</label><select id="kafka" name="kafka"><option value="own">your own (not priced)</option><option value="managed">Managed Service for Apache Kafka</option></select>
<label for="kafka_retention">Kafka retention</label><input id="kafka_retention" name="kafka_retention" value="7d">
<label for="kafka_reads">Kafka reads from</label><select id="kafka_reads" name="kafka_reads" title="Managed Kafka's inter-zone transfer: the job reads from each partition's leader, or from a follower in its own zone (client.rack)"><option value="leader">the leader (2/3 cross zones)</option><option value="local-follower">a follower in its zone</option></select>
<label for="bq_retention">BigQuery expiration</label><input id="bq_retention" name="bq_retention" placeholder="none (rows kept)">
<label for="bq_partitioning">BigQuery partitioning</label><select id="bq_partitioning" name="bq_partitioning"><option>day</option><option>none</option></select>
<label for="cdc_table_size">CDC table size</label><input id="cdc_table_size" name="cdc_table_size" placeholder="not CDC (e.g. 500GiB)">
<label for="cdc_max_staleness">CDC max staleness</label><input id="cdc_max_staleness" name="cdc_max_staleness" placeholder="e.g. 15m">
<label for="row_bytes">Billed bytes per row</label><input id="row_bytes" name="row_bytes" placeholder="estimated from the table">
<span></span><button id="go" type="submit">Estimate</button>
</form>
<div id="error" class="error" role="alert"></div>
<div id="result"></div>
<p><a id="simulate-link" href="/simulate">Simulate this pipeline: cost against p99 for machine types, utilization hints and policies →</a></p>
<h2>Where the money goes: each line, both modes, month 1 and month 12</h2><div id="stack"></div>
<h2>Cost and workers against throughput</h2><div id="chart"></div>"##;

const ESTIMATE_SCRIPT: &str = r##"
const $ = id => document.getElementById(id);
const FIELDS = ["throughput","unit","message_size","mode","machine_type","commitment","baseline","lines","kafka","kafka_retention","kafka_reads","bq_retention","bq_partitioning","cdc_table_size","cdc_max_staleness","row_bytes","dataset_location"];
const COLORS = {"dataflow": "#2a6fdb", "bigquery-ingestion": "#e07b00", "bigquery-storage": "#1a9e3a", "bigquery-cdc": "#c0392b", "kafka": "#8e44ad"};
const params = new URLSearchParams(location.search);
for (const k of FIELDS) if (params.has(k)) $(k).value = params.get(k);
const f = (x, d) => Number(x).toLocaleString("en-US", {minimumFractionDigits: d, maximumFractionDigits: d});
let chart;
function query() {
  const q = new URLSearchParams({throughput: $("throughput").value.trim() + $("unit").value});
  for (const k of FIELDS.slice(2)) if ($(k).value.trim()) q.set(k, $(k).value.trim());
  return q;
}
function table(e) {
  let h = `<p id="summary"><b>${f(e.workers_exact,2)}</b> workers → <b id="workers">${e.workers}</b> billed, <b>${f(e.secu_per_hour,2)}</b> SECU/h;
    whole pipeline <b id="per_hour">$${f(e.per_hour,2)}</b> per hour, <b id="per_month">$${f(e.per_month,0)}</b> in month 1, <b id="per_month_12">$${f(e.per_month_12,0)}</b> in month 12</p>
    <p id="rule" class="note">The publication's rule of thumb: factor ${f(e.rule_of_thumb.factor,2)} → <b>${f(e.rule_of_thumb.workers,1)}</b> workers, <b>${f(e.rule_of_thumb.secu_per_hour,1)}</b> SECU/h (the figures above use the exact factor, ${f(e.scaling_factor,4)}, and the two-term CPU model).</p>
    <p id="dominant">${e.totals.summary}</p>
    <table id="items"><tr><th>line</th><th>item</th><th>quantity</th><th>unit</th><th>$/unit</th><th>$/hour</th><th>month 1</th><th>month 12</th></tr>`;
  for (const i of e.items) h += `<tr data-line="${i.line}"><td>${i.line}</td><td>${i.item}</td><td>${f(i.quantity,2)}</td><td>${i.unit}</td><td>${Number(i.unit_price).toPrecision(3)}</td><td>${f(i.per_hour,2)}</td><td>${f(i.per_month,0)}</td><td>${f(i.per_month_12,0)}</td></tr>`;
  for (const l of e.totals.lines) h += `<tr class="line-total"><th>${l.line}</th><td colspan="4"></td><th>${f(l.per_hour,2)}</th><th>${f(l.month_1,0)}</th><th>${f(l.month_12,0)}</th></tr>`;
  h += `<tr><th>total</th><td colspan="4"></td><th>${f(e.per_hour,2)}</th><th>${f(e.per_month,0)}</th><th>${f(e.per_month_12,0)}</th></tr></table>`;
  h += `<p class="note">Row size: ${e.row_bytes_basis}.</p>`;
  for (const l of (e.limits || [])) h += `<p class="limit" data-limit="${l.limit}"><b>Limit:</b> ${l.message} <small>(${l.source})</small></p>`;
  for (const n of e.notes) h += `<p class="note">${n}</p>`;
  return h;
}
// One bar per mode and month, stacked by line.
function stack(modes) {
  const bars = [];
  for (const m of modes) for (const [label, key] of [["month 1", "month_1"], ["month 12", "month_12"]])
    bars.push({label: `${m.mode}, ${label}`, parts: m.totals.lines.map(l => [l.line, l[key]]), total: m.totals[key]});
  const W = 720, H = 320, L = 80, B = 50, bw = 90, top = Math.max(...bars.map(b => b.total), 1) * 1.1;
  const py = y => H - B - y / top * (H - B - 10);
  let s = `<svg id="stack-chart" width="${W}" height="${H}" xmlns="http://www.w3.org/2000/svg" font-size="12">`;
  s += `<line x1="${L}" y1="${H-B}" x2="${W-150}" y2="${H-B}" stroke="#333"/><line x1="${L}" y1="10" x2="${L}" y2="${H-B}" stroke="#333"/>`;
  s += `<text x="14" y="${H/2}" transform="rotate(-90 14 ${H/2})" text-anchor="middle">USD per month</text>`;
  for (let k = 0; k <= 4; k++) s += `<text x="${L-4}" y="${py(top*k/5)+4}" text-anchor="end">${f(top*k/5,0)}</text>`;
  bars.forEach((b, i) => {
    const x = L + 20 + i * (bw + 20);
    let y = 0;
    for (const [line, v] of b.parts) {
      s += `<rect class="part" data-line="${line}" x="${x}" y="${py(y + v)}" width="${bw}" height="${py(y) - py(y + v)}" fill="${COLORS[line] || "#999"}"><title>${line}: $${f(v,0)}</title></rect>`;
      y += v;
    }
    s += `<text x="${x + bw/2}" y="${py(b.total) - 4}" text-anchor="middle">$${f(b.total,0)}</text>`;
    s += `<text x="${x + bw/2}" y="${H-B+14}" text-anchor="middle">${b.label.split(", ")[0]}</text><text x="${x + bw/2}" y="${H-B+28}" text-anchor="middle">${b.label.split(", ")[1]}</text>`;
  });
  Object.entries(COLORS).forEach(([line, c], i) => s += `<rect x="${W-140}" y="${20+i*18}" width="12" height="12" fill="${c}"/><text x="${W-122}" y="${30+i*18}">${line}</text>`);
  return s + "</svg>";
}
function curve(points) {
  const xs = points.map(c => c.throughput_mib_s), cost = points.map(c => c.per_hour), df = points.map(c => c.dataflow_per_hour), workers = points.map(c => c.workers);
  if (chart) chart.destroy();
  chart = new uPlot({width: 720, height: 300, scales: {x: {time: false}},
    axes: [{label: "MiB/s"}, {label: "$/hour", scale: "$"}, {label: "workers", scale: "w", side: 1, grid: {show: false}}],
    series: [{label: "MiB/s"}, {label: "whole pipeline $/hour", scale: "$", stroke: "#2a6fdb", width: 2}, {label: "Dataflow $/hour", scale: "$", stroke: "#7aa6ef", dash: [6, 4], width: 2},
      {label: "workers", scale: "w", stroke: "#e07b00", width: 2, paths: uPlot.paths.stepped({align: 1})}]},
    [xs, cost, df, workers], $("chart"));
}
async function run(ev) {
  if (ev) ev.preventDefault();
  $("error").textContent = "";
  const r = await fetch("/api/estimate?" + query());
  const j = await r.json();
  if (!r.ok) { $("error").textContent = j.field + ": " + j.error; $("result").innerHTML = ""; document.body.dataset.result = "error"; return; }
  $("result").innerHTML = table(j.estimate);
  document.body.dataset.result = "ok";
  $("stack").innerHTML = stack(j.modes);
  document.body.dataset.stackDrawn = String($("stack").querySelectorAll("rect.part").length);
  const sq = new URLSearchParams({throughput: $("throughput").value.trim() + $("unit").value, mode: $("mode").value});
  if ($("message_size").value.trim()) sq.set("message_size", $("message_size").value.trim());
  $("simulate-link").href = "/simulate?" + sq;
  // Keep the form in the URL, so an estimate can be shared by link.
  const state = new URLSearchParams();
  for (const k of FIELDS) if ($(k).value.trim()) state.set(k, $(k).value.trim());
  history.replaceState(null, "", "?" + state);
  curve(j.curve);
  document.body.dataset.chartDrawn = $("chart").querySelector("canvas") ? "1" : "0";
}
$("f").addEventListener("submit", run);
// The default estimate and its charts show on first load.
run();
"##;

/// `/simulate`: a small what-if sweep for a throughput (machine types × utilization
/// hints × policies, simulated in virtual time), as a table and a chart of cost against
/// p99 with the Pareto front and the cheapest configuration within the p99 limit.
pub async fn simulate_page() -> Html<String> {
    layout(
        "Simulate: cost against p99",
        r##"<p class="note">Each configuration runs the kafka-to-bq job in virtual time with the real autoscaler in the loop (capacity calibrated to Google's published benchmark; see docs/guide/simulate.md for what is calibrated and what is predicted). p99 includes the wait in Kafka. $/month is the whole pipeline's month-1 bill: Dataflow, BigQuery ingestion and storage.</p>
<form id="f">
<label for="throughput">Throughput</label><input id="throughput" name="throughput" value="100MiB/s" size="12" required>
<label for="message_size">Message size</label><input id="message_size" name="message_size" value="1KiB">
<label for="mode">Mode</label><select id="mode" name="mode"><option>exactly-once</option><option>at-least-once</option></select>
<label for="partitions">Kafka partitions</label><input id="partitions" name="partitions" value="1000">
<label for="streams">Storage Write streams</label><input id="streams" name="streams" value="400">
<label for="p99_limit">p99 limit</label><input id="p99_limit" name="p99_limit" value="10s">
<label for="profile">Load profile</label><input id="profile" name="profile" value="sine:amplitude=0.3,period=6h">
<label for="hours">Virtual hours</label><input id="hours" name="hours" value="6">
<label for="dataset_location">Dataset location</label><input id="dataset_location" name="dataset_location" value="US" title="US or EU (multi-regions), or a region such as us-central1: its Storage Write throughput quota is simulated">
<span></span><button id="go" type="submit">Simulate</button>
</form>
<div id="error" class="error" role="alert"></div>
<p id="summary"></p>
<div id="limits"></div>
<div id="front"></div>
<table id="rows"></table>"##,
        r##"
const $ = id => document.getElementById(id);
const params = new URLSearchParams(location.search);
const fields = ["throughput","message_size","mode","partitions","streams","p99_limit","profile","hours","dataset_location"];
for (const k of fields) if (params.has(k)) $(k).value = params.get(k);
function chart(rows, limit, chosen) {
  const W = 720, H = 360, L = 70, B = 40, xs = rows.map(r => Math.log10(Math.max(r.p99_ms, 1))), ys = rows.map(r => r.cost_per_month);
  // Zoomed to the points (and the limit): costs that differ by a few percent must not
  // sit in one dot, as they did with the axis from 0.
  const x0 = Math.min(...xs, Math.log10(limit)) - 0.1, x1 = Math.max(...xs, Math.log10(limit)) + 0.1;
  const ylo = Math.min(...ys), yhi = Math.max(...ys), pad = Math.max((yhi - ylo) * 0.08, yhi * 0.01, 1);
  const y0 = Math.max(ylo - pad, 0), y1 = yhi + pad;
  const px = x => L + (x - x0) / (x1 - x0) * (W - L - 10), py = y => H - B - (y - y0) / (y1 - y0) * (H - B - 10);
  let s = `<svg id="front-chart" data-y-min="${Math.round(y0)}" data-y-max="${Math.round(y1)}" width="${W}" height="${H}" xmlns="http://www.w3.org/2000/svg" font-size="12">`;
  s += `<line x1="${L}" y1="${H-B}" x2="${W-10}" y2="${H-B}" stroke="#333"/><line x1="${L}" y1="10" x2="${L}" y2="${H-B}" stroke="#333"/>`;
  s += `<text x="${W/2}" y="${H-8}" text-anchor="middle">p99 latency incl. Kafka wait (ms, log scale)</text>`;
  s += `<text x="14" y="${H/2}" transform="rotate(-90 14 ${H/2})" text-anchor="middle">USD per month</text>`;
  for (let e = Math.ceil(x0); e <= x1; e++) s += `<text x="${px(e)}" y="${H-B+14}" text-anchor="middle">${10**e}</text>`;
  for (let k = 0; k <= 4; k++) { const y = y0 + (y1 - y0) * k / 4; s += `<text x="${L-4}" y="${py(y)+4}" text-anchor="end">${Math.round(y)}</text>`; }
  s += `<line class="limit" x1="${px(Math.log10(limit))}" y1="10" x2="${px(Math.log10(limit))}" y2="${H-B}" stroke="#888" stroke-dasharray="4"/>`;
  const front = rows.map((r, i) => [xs[i], ys[i], r.pareto]).filter(p => p[2]).sort((a, b) => a[0] - b[0]);
  s += `<polyline fill="none" stroke="#d33" stroke-width="2" points="${front.map(p => px(p[0]) + "," + py(p[1])).join(" ")}"/>`;
  rows.forEach((r, i) => {
    const c = i === chosen ? "#1a9e3a" : r.pareto ? "#d33" : "#2a6fdb";
    s += `<circle class="${r.pareto ? "pareto" : "point"}" cx="${px(xs[i])}" cy="${py(ys[i])}" r="${i === chosen ? 8 : 5}" fill="${c}"><title>${r.settings.map(x => x.key + "=" + x.value).join(" ")}: $${Math.round(r.cost_per_month)}/month, p99 ${Math.round(r.p99_ms)} ms${r.pareto ? " (Pareto front)" : ""}</title></circle>`;
  });
  return s + "</svg>";
}
async function run(ev) {
  if (ev) ev.preventDefault();
  $("error").textContent = ""; $("summary").textContent = "simulating…";
  const q = new URLSearchParams();
  for (const k of fields) if ($(k).value.trim()) q.set(k, $(k).value.trim());
  const r = await fetch("/api/simulate?" + q);
  const j = await r.json();
  if (!r.ok) { $("error").textContent = j.field + ": " + j.error; $("summary").textContent = ""; document.body.dataset.result = "error"; return; }
  const rows = j.configurations, f = (x, d) => Number(x).toFixed(d);
  const c = j.chosen === null ? null : rows[j.chosen];
  $("summary").innerHTML = c
    ? `Cheapest with p99 ≤ ${f(j.p99_limit_ms,0)} ms: <b id="chosen">${c.settings.map(x => x.value).join(", ")}</b> at <b>$${f(c.cost_per_month,0)}</b> per month (${rows.length} configurations × ${j.hours} h).`
    : `No configuration has p99 ≤ ${f(j.p99_limit_ms,0)} ms (${rows.length} configurations × ${j.hours} h).`;
  const limits = [...new Set(rows.flatMap(r => r.limits))];
  $("limits").innerHTML = limits.map(l => `<p class="limit"><b>Limit:</b> ${l}</p>`).join("");
  $("front").innerHTML = chart(rows, j.p99_limit_ms, j.chosen);
  let h = `<tr><th>front</th>${rows[0].settings.map(x => `<th>${x.key}</th>`).join("")}<th>$/month</th><th>workers</th><th>CPU</th><th>p50 ms</th><th>p99 ms</th><th>backlog peak MiB</th><th>bottleneck</th></tr>`;
  rows.forEach((r, i) => h += `<tr class="${r.pareto ? "pareto" : ""}"><td>${i === j.chosen ? "→" : r.pareto ? "*" : ""}</td>${r.settings.map(x => `<td>${x.value}</td>`).join("")}<td>${f(r.cost_per_month,0)}</td><td>${f(r.workers_mean,1)}</td><td>${f(r.mean_cpu*100,0)}%</td><td>${f(r.p50_ms,0)}</td><td>${f(r.p99_ms,0)}</td><td>${f(r.backlog_peak_mib,1)}</td><td>${r.bottleneck}</td></tr>`);
  $("rows").innerHTML = h;
  document.body.dataset.result = "ok";
  document.body.dataset.frontDrawn = document.querySelectorAll("#front-chart circle.pareto").length > 0 ? "1" : "0";
}
$("f").addEventListener("submit", run);
// The default sweep runs on first load, as the cost page's estimate does.
run();
"##,
    )
}

/// `/jobs`: every job this process runs or ran.
pub async fn jobs_page() -> Html<String> {
    layout(
        "Jobs",
        r##"<table id="jobs"><tr><th>job</th><th>template</th><th>delivery</th><th>status</th><th>workers</th><th>msg/s</th><th>backlog</th><th>end-to-end p99 ms</th></tr></table>"##,
        r##"
async function load() {
  const js = await (await fetch("/api/jobs")).json();
  const t = document.getElementById("jobs");
  t.querySelectorAll("tr.job").forEach(r => r.remove());
  for (const j of js) {
    const p = j.latest || {}, e2e = (p.stages || {}).end_to_end || {};
    const r = t.insertRow(); r.className = "job";
    r.innerHTML = `<td><a href="/jobs/${encodeURIComponent(j.id)}">${j.id}</a></td><td>${j.template}</td><td>${j.delivery}</td><td>${j.status}</td>
      <td>${p.workers ?? ""}</td><td>${p.throughput_msgs != null ? p.throughput_msgs.toFixed(0) : ""}</td><td>${p.backlog_elements ?? ""}</td><td>${e2e.p99_ms != null ? e2e.p99_ms.toFixed(1) : ""}</td>`;
  }
  document.body.dataset.jobs = js.length;
}
load(); setInterval(load, 2000);
"##,
    )
}

/// `/jobs/{id}`: live per-stage latency, workers with decisions, throughput, backlog, utilization.
pub async fn job_page(Path(id): Path<String>) -> Html<String> {
    let id_json = serde_json::to_string(&id).expect("a string serializes");
    let script = format!(
        r##"
const JOB = {id_json};
const stages = ["read", "transform", "write", "end_to_end"];
const charts = {{}};
function plot(key, title, labels, data, el) {{
  // Wide y axes so 10,000 does not clip to "0,000"; gaps in a series are spanned; the
  // legend shows each series' value under the cursor.
  const opts = {{title, width: 460, height: 220, scales: {{x: {{time: false}}}}, axes: [{{label: "s since start"}}, {{size: 72}}],
    legend: {{live: true}},
    series: [{{label: "t"}}].concat(labels.map((l, i) => ({{label: l, spanGaps: true, stroke: ["#2a6fdb", "#e07b00", "#b00020", "#2e7d32"][i % 4], width: 2, dash: i >= 2 && key === "workers" ? [6, 4] : undefined}})))}};
  if (charts[key]) charts[key].setData(data); else charts[key] = new uPlot(opts, data, el);
}}
async function load() {{
  const r = await fetch("/api/jobs/" + encodeURIComponent(JOB) + "/metrics");
  if (!r.ok) {{ document.getElementById("status").textContent = "no such job"; return; }}
  const j = await r.json();
  document.getElementById("status").textContent = `${{j.template}}, ${{j.delivery}}, ${{j.status}}, ${{j.points.length}} points`;
  const t = j.points.map(p => p.t_s);
  for (const s of stages) {{
    const q = k => j.points.map(p => (p.stages[s] || {{}})[k] ?? null);
    plot(s, s + " latency (ms)", ["p50", "p95", "p99"], [t, q("p50_ms"), q("p95_ms"), q("p99_ms")], document.getElementById("lat"));
  }}
  plot("workers", "workers", ["current", "target", "min", "max"], [t, j.points.map(p => p.workers), j.points.map(p => p.target_workers), j.points.map(p => p.min_workers || null), j.points.map(p => p.max_workers || null)], document.getElementById("ops"));
  plot("throughput", "throughput (msg/s)", ["msg/s"], [t, j.points.map(p => p.throughput_msgs)], document.getElementById("ops"));
  plot("backlog", "backlog (messages)", ["backlog"], [t, j.points.map(p => p.backlog_elements)], document.getElementById("ops"));
  plot("utilization", "worker utilization", ["busy fraction"], [t, j.points.map(p => p.utilization)], document.getElementById("ops"));
  const d = document.getElementById("decisions");
  d.querySelectorAll("tr.d").forEach(r => r.remove());
  for (const x of j.decisions) {{
    const r = d.insertRow(); r.className = "d";
    const type = x.from !== x.to ? "TARGET_NUM_WORKERS_CHANGED" : "NO_CHANGE";
    r.innerHTML = `<td>${{x.t_s.toFixed(1)}}</td><td>${{type}}</td><td>${{x.from}} → ${{x.to}}</td><td>${{x.rationale}}</td><td>${{x.description || ""}}</td><td>${{x.detail}}</td>`;
  }}
  const last = j.points[j.points.length - 1] || {{}};
  const pb = document.getElementById("partitions");
  pb.querySelectorAll("tr.p").forEach(r => r.remove());
  const meanBytes = last.backlog_elements > 0 ? last.backlog_bytes / last.backlog_elements : 0;
  for (const [part, n] of Object.entries(last.partition_backlog || {{}})) {{ const r = pb.insertRow(); r.className = "p"; r.innerHTML = `<td>${{part}}</td><td>${{n.toLocaleString()}}</td><td>${{Math.round(n * meanBytes).toLocaleString()}}</td>`; }}
  document.getElementById("drain").textContent = last.estimated_backlog_processing_s !== undefined ? `estimated backlog processing time: ${{last.estimated_backlog_processing_s.toFixed(1)}} s · data watermark age: ${{(last.data_watermark_age_s || 0).toFixed(1)}} s · system latency: ${{(last.system_lag_s || 0).toFixed(1)}} s` + (last.memory_budget_bytes ? ` · memory: peak RSS ${{((last.peak_rss_bytes || 0) / 1048576).toFixed(0)}} MiB of a ${{(last.memory_budget_bytes / 1048576).toFixed(0)}} MiB budget` : "") : "";
  const tt = document.getElementById("topics");
  tt.querySelectorAll("tr.t").forEach(r => r.remove());
  const topics = Object.entries(last.topics || {{}});
  document.getElementById("topics-section").hidden = topics.length === 0;
  const ms = (x, s) => ((x.stages[s] || {{}}).p99_ms ?? null) === null ? "" : x.stages[s].p99_ms.toFixed(1);
  for (const [name, x] of topics) {{
    const r = tt.insertRow(); r.className = "t"; r.dataset.topic = name;
    r.innerHTML = `<td><a href="/jobs/${{encodeURIComponent(x.job)}}">${{name}}</a></td><td>${{x.throughput_msgs.toFixed(0)}}</td><td>${{x.backlog_elements.toLocaleString()}}</td><td>${{x.rows_written.toLocaleString()}}</td><td>${{x.dead_lettered.toLocaleString()}}</td>` + stages.map(s => `<td>${{ms(x, s)}}</td>`).join("");
  }}
  document.body.dataset.topics = topics.length;
  const st = j.points.filter(p => p.state);
  if (st.length) {{
    const ts = st.map(p => p.t_s), mib = b => b / 1048576;
    document.getElementById("state-section").hidden = false;
    plot("state", "window state (MiB)", ["state", "RSS", "heap"], [ts, st.map(p => mib(p.state.state_bytes)), st.map(p => mib(p.state.rss_bytes)), st.map(p => mib(p.state.heap_bytes))], document.getElementById("state"));
    plot("checkpoint", "latest checkpoint", ["uploaded MiB", "duration s", "sync s"], [ts, st.map(p => mib(p.state.last_checkpoint_bytes)), st.map(p => p.state.last_checkpoint_s), st.map(p => p.state.last_checkpoint_sync_s)], document.getElementById("state"));
    const s = st[st.length - 1].state;
    document.getElementById("state-now").textContent = `${{s.backend}} backend, ${{s.kind}} checkpoints · ${{s.state_records.toLocaleString()}} records in ${{s.state_keys}} keys · ${{s.checkpoints}} checkpoints · last checkpoint ${{s.last_checkpoint_age_s == null ? "none yet" : s.last_checkpoint_age_s.toFixed(0) + " s ago"}} · recovery ${{s.recovery_s.toFixed(2)}} s · CPU ${{s.cpu_s.toFixed(1)}} s`;
  }}
  document.body.dataset.chartsDrawn = document.querySelectorAll(".uplot canvas").length;
  document.body.dataset.points = j.points.length;
}}
load(); setInterval(load, 2000);
"##
    );
    let title = format!("Job {}", html_escape(&id));
    layout(
        &title,
        r##"<p id="status"></p><h2>Per-stage latency</h2><div id="lat" class="charts"></div>
<h2>Workers, throughput, backlog, utilization</h2><div id="ops" class="charts"></div>
<section id="topics-section" hidden><h2>Topics on the job's pool (latest)</h2><p class="note">Each topic is its own exactly-once pipeline on the job's one pool of workers; the charts above are the whole job's (the slowest topic's latency per stage).</p><table id="topics"><tr><th>topic</th><th>msg/s</th><th>backlog</th><th>rows written</th><th>dead letters</th><th>read p99 ms</th><th>transform p99 ms</th><th>write p99 ms</th><th>end-to-end p99 ms</th></tr></table></section>
<h2>Backlog by partition (latest)</h2><p id="drain" class="note"></p><table id="partitions"><tr><th>partition</th><th>messages waiting</th><th>bytes waiting</th></tr></table>
<section id="state-section" hidden><h2>Window state and checkpoints</h2><p id="state-now" class="note"></p><div id="state" class="charts"></div></section>
<h2>Autoscaling history</h2><table id="decisions"><tr><th>time s</th><th>event</th><th>workers</th><th>rationale</th><th>description</th><th>detail</th></tr></table>"##,
        &script,
    )
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
