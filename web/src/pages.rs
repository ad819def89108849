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
.charts { display: flex; flex-wrap: wrap; gap: 1rem; }
h2 { margin-top: 1.6rem; }
"##;

fn layout(title: &str, body: &str, script: &str) -> Html<String> {
    Html(format!(
        r##"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title} · flexrun</title>
<link rel="stylesheet" href="/assets/uplot.css"><style>{STYLE}</style><script src="/assets/uplot.js"></script></head>
<body><nav><a href="/estimate">Cost estimate</a><a href="/jobs">Jobs</a><a href="/metrics">Prometheus metrics</a></nav>
<h1>{title}</h1>{body}<script>{script}</script></body></html>"##
    ))
}

/// `/estimate`: the form, the itemised result and a chart of cost and workers.
pub async fn estimate_page() -> Html<String> {
    layout(
        "Price a Kafka → BigQuery pipeline",
        r##"<p class="note">Linear extrapolation from Google's published kafka-to-bq benchmark (e2-standard-2), us-central1 prices.</p>
<form id="f">
<label for="throughput">Throughput</label><span><input id="throughput" name="throughput" value="100" size="8" required>
<select id="unit" name="unit"><option>MiB/s</option><option>MB/s</option><option>GiB/s</option><option>GB/s</option><option>msg/s</option></select></span>
<label for="message_size">Message size (for msg/s)</label><input id="message_size" name="message_size" placeholder="1KiB">
<label for="mode">Mode</label><select id="mode" name="mode"><option>exactly-once</option><option>at-least-once</option></select>
<label for="machine_type">Machine type</label><select id="machine_type" name="machine_type"><option>e2-standard-2</option><option>e2-standard-4</option><option>e2-standard-8</option><option>n1-standard-1</option><option>n1-standard-2</option><option>n1-standard-4</option><option>n2-standard-2</option><option>n2-standard-4</option></select>
<label for="commitment">Commitment</label><select id="commitment" name="commitment"><option value="none">none</option><option value="1y">1 year</option><option value="3y">3 years</option></select>
<label for="baseline">Baseline</label><select id="baseline" name="baseline"><option value="google">Google, kafka-to-bq, e2-standard-2</option></select>
<span></span><button id="go" type="submit">Estimate</button>
</form>
<div id="error" class="error" role="alert"></div>
<div id="result"></div>
<h2>Cost and workers against throughput</h2><div id="chart"></div>"##,
        r##"
const $ = id => document.getElementById(id);
const params = new URLSearchParams(location.search);
for (const k of ["throughput","unit","message_size","mode","machine_type","commitment","baseline"]) if (params.has(k)) $(k).value = params.get(k);
let chart;
async function run(ev) {
  if (ev) ev.preventDefault();
  $("error").textContent = "";
  const q = new URLSearchParams({throughput: $("throughput").value.trim() + $("unit").value, mode: $("mode").value,
    machine_type: $("machine_type").value, commitment: $("commitment").value, baseline: $("baseline").value});
  if ($("message_size").value.trim()) q.set("message_size", $("message_size").value.trim());
  const r = await fetch("/api/estimate?" + q);
  const j = await r.json();
  if (!r.ok) { $("error").textContent = j.field + ": " + j.error; $("result").innerHTML = ""; document.body.dataset.result = "error"; return; }
  const e = j.estimate, f = (x, d) => Number(x).toFixed(d);
  let h = `<p id="summary"><b>${f(e.workers_exact,2)}</b> workers → <b id="workers">${e.workers}</b> billed, <b>${f(e.secu_per_hour,2)}</b> SECU/h,
    <b id="per_hour">$${f(e.per_hour,2)}</b> per hour, <b id="per_month">$${f(e.per_month,0)}</b> per month</p>
    <table><tr><th>item</th><th>quantity</th><th>unit</th><th>$/unit-hour</th><th>$/hour</th><th>$/month</th></tr>`;
  for (const i of e.items) h += `<tr><td>${i.item}</td><td>${f(i.quantity,2)}</td><td>${i.unit}</td><td>${f(i.unit_price,6)}</td><td>${f(i.per_hour,2)}</td><td>${f(i.per_month,2)}</td></tr>`;
  h += `<tr><th>total</th><td></td><td></td><td></td><th>${f(e.per_hour,2)}</th><th>${f(e.per_month,2)}</th></tr></table>`;
  for (const n of e.notes) h += `<p class="note">${n}</p>`;
  $("result").innerHTML = h;
  document.body.dataset.result = "ok";
  const xs = j.curve.map(c => c.throughput_mib_s), cost = j.curve.map(c => c.per_hour), workers = j.curve.map(c => c.workers);
  if (chart) chart.destroy();
  chart = new uPlot({width: 720, height: 300, scales: {x: {time: false}},
    axes: [{label: "MiB/s"}, {label: "$/hour", scale: "$"}, {label: "workers", scale: "w", side: 1, grid: {show: false}}],
    series: [{label: "MiB/s"}, {label: "$/hour", scale: "$", stroke: "#2a6fdb", width: 2}, {label: "workers", scale: "w", stroke: "#e07b00", width: 2, paths: uPlot.paths.stepped({align: 1})}]},
    [xs, cost, workers], $("chart"));
  document.body.dataset.chartDrawn = $("chart").querySelector("canvas") ? "1" : "0";
}
$("f").addEventListener("submit", run);
if (params.get("submit") === "1") $("f").requestSubmit();
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
  const opts = {{title, width: 460, height: 220, scales: {{x: {{time: false}}}}, axes: [{{label: "s since start"}}, {{}}],
    series: [{{label: "t"}}].concat(labels.map((l, i) => ({{label: l, stroke: ["#2a6fdb", "#e07b00", "#b00020", "#2e7d32"][i % 4], width: 2}})))}};
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
  plot("workers", "workers", ["running", "target"], [t, j.points.map(p => p.workers), j.points.map(p => p.target_workers)], document.getElementById("ops"));
  plot("throughput", "throughput (msg/s)", ["msg/s"], [t, j.points.map(p => p.throughput_msgs)], document.getElementById("ops"));
  plot("backlog", "backlog (messages)", ["backlog"], [t, j.points.map(p => p.backlog_elements)], document.getElementById("ops"));
  plot("utilization", "worker utilization", ["busy fraction"], [t, j.points.map(p => p.utilization)], document.getElementById("ops"));
  const d = document.getElementById("decisions");
  d.querySelectorAll("tr.d").forEach(r => r.remove());
  for (const x of j.decisions) {{ const r = d.insertRow(); r.className = "d"; r.innerHTML = `<td>${{x.t_s.toFixed(1)}}</td><td>${{x.from}} → ${{x.to}}</td><td>${{x.rationale}}</td><td>${{x.detail}}</td>`; }}
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
<h2>Autoscaling decisions</h2><table id="decisions"><tr><th>time s</th><th>workers</th><th>rationale</th><th>detail</th></tr></table>"##,
        &script,
    )
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
