//! `flexrun estimate` prices the whole pipeline: Dataflow, BigQuery's Storage Write
//! ingestion and storage, and optionally Managed Kafka; with a two-term CPU model.

use std::process::{Command, Output};

fn flexrun(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flexrun")).args(args).output().expect("runs")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = flexrun(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn item<'a>(e: &'a serde_json::Value, line: &str) -> Vec<&'a serde_json::Value> {
    e["items"].as_array().unwrap().iter().filter(|i| i["line"] == line).collect()
}

#[test]
fn one_gib_per_second_bills_storage_write_ingestion_and_the_total_includes_it() {
    let e = json(&["estimate", "--throughput", "1GiB/s", "--format", "json"]);
    let ing = item(&e, "bigquery-ingestion");
    assert_eq!(ing.len(), 1, "{e}");
    let i = ing[0];
    // 1 GiB/s of 1 KiB messages (the baseline's), each a 995 B row as BigQuery counts it
    // (estimated: 24 B less than the message's JSON).
    let row = e["row_bytes"].as_f64().unwrap();
    assert!((row - 995.0).abs() < 1.0, "{row}");
    let rows_s = 1073741824.0 / 1024.0;
    let gib_h = 3600.0 * rows_s * row / 1073741824.0;
    assert!((i["quantity"].as_f64().unwrap() - gib_h).abs() < 0.01, "{i}");
    assert!((gib_h - 3600.0).abs() / 3600.0 < 0.05, "near 3,600 GiB/h: {gib_h}");
    assert_eq!(i["unit_price"].as_f64(), Some(0.025), "{i}");
    // Month 1: 730 hours, less the 2 TiB a month that each billing account gets free.
    let month = (gib_h * 730.0 - 2048.0) * 0.025;
    assert!((i["per_month"].as_f64().unwrap() - month).abs() < 0.01, "{i} vs {month}");
    assert!(e["row_bytes_basis"].as_str().unwrap().contains("estimated"), "{e}");
    // The total is every item's, and ingestion is its largest line.
    let sum: f64 = e["items"].as_array().unwrap().iter().map(|i| i["per_month"].as_f64().unwrap()).sum();
    assert!((e["per_month"].as_f64().unwrap() - sum).abs() < 1e-6 * sum, "{e}");
    assert!(e["per_month"].as_f64().unwrap() > month + 12_000.0, "Dataflow and storage come on top: {e}");
    assert_eq!(e["totals"]["dominant"], "bigquery-ingestion");
    // Storage grows: month 12 holds eleven more months of rows.
    let storage = &e["totals"]["lines"].as_array().unwrap().iter().find(|l| l["line"] == "bigquery-storage").unwrap();
    assert!(storage["month_12"].as_f64().unwrap() > 5.0 * storage["month_1"].as_f64().unwrap(), "{storage}");
    // Exactly-once and at-least-once pay the same for the bytes.
    let alo = json(&["estimate", "--throughput", "1GiB/s", "--mode", "at-least-once", "--format", "json"]);
    assert_eq!(item(&alo, "bigquery-ingestion")[0]["per_month"], i["per_month"]);
    // --lines dataflow leaves only the workers' bill, as before this line existed.
    let d = json(&["estimate", "--throughput", "1GiB/s", "--lines", "dataflow", "--format", "json"]);
    assert!(d["items"].as_array().unwrap().iter().all(|i| i["line"] == "dataflow"), "{d}");
}

#[test]
fn the_text_shows_the_same_lines_and_amounts_as_the_json() {
    let args = ["estimate", "--throughput", "100MiB/s", "--kafka", "managed", "--bq-retention", "30d"];
    let e = json(&[&args[..], &["--format", "json"]].concat());
    let out = flexrun(&args);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for i in e["items"].as_array().unwrap() {
        let (line, name) = (i["line"].as_str().unwrap(), i["item"].as_str().unwrap());
        let row = text
            .lines()
            .find(|l| l.starts_with(line) && l.contains(name))
            .unwrap_or_else(|| panic!("no row for {line} {name} in\n{text}"));
        let month_1 = format!("{:.2}", i["per_month"].as_f64().unwrap());
        assert!(row.contains(&month_1), "{row} lacks {month_1}");
    }
    for l in ["dataflow", "bigquery-ingestion", "bigquery-storage", "kafka"] {
        assert!(text.lines().any(|r| r.starts_with(l) && r.contains("(line total)")), "{l}\n{text}");
    }
    assert!(text.contains(e["totals"]["summary"].as_str().unwrap()), "{text}");
    assert!(text.contains("not priced: network egress, BigQuery queries"), "{text}");
}

#[test]
fn small_messages_pay_the_per_message_term() {
    let at = |size: &str| json(&["estimate", "--throughput", "100MiB/s", "--message-size", size, "--format", "json"]);
    let (small, large) = (at("100B"), at("1000B"));
    let (us, ns) =
        (small["cpu"]["vcpu_us_per_message"].as_f64().unwrap(), small["cpu"]["vcpu_ns_per_byte"].as_f64().unwrap());
    assert!(us > 0.0 && ns > 0.0, "{small}");
    let workers = |msg: f64| 104857600.0 / msg * (us * 1e-6 + ns * 1e-9 * msg) / (2.0 * 0.7);
    for (e, msg) in [(&small, 100.0), (&large, 1000.0)] {
        let got = e["workers_exact"].as_f64().unwrap();
        assert!((got - workers(msg)).abs() < 1e-6 * got, "{msg} B: {got} vs {}", workers(msg));
    }
    // A per-byte model would price both alike; ten times the messages cost over 5x the CPU.
    let ratio = small["workers_exact"].as_f64().unwrap() / large["workers_exact"].as_f64().unwrap();
    assert!(ratio > 5.0, "{ratio}");
}

#[test]
fn bad_input_exits_2_naming_the_field() {
    let base = ["estimate", "--throughput", "1GiB/s"];
    for (extra, needle) in [
        (&["--message-size", "-5"][..], "--message-size"),
        (&["--region", "europe-west1"], "--region"),
        (&["--commitment", "5y"], "--commitment"),
        (&["--bq-retention", "-1d"], "--bq-retention"),
        (&["--kafka-retention", "-1h"], "--kafka-retention"),
        (&["--lines", "dataflow,snowflake"], "--lines"),
        (&["--kafka", "hosted"], "--kafka"),
        (&["--bq-partitioning", "hourly"], "--bq-partitioning"),
        (&["--row-bytes", "-3"], "--row-bytes"),
        (&["--table-schema", "/nonexistent/schema.json"], "--table-schema"),
    ] {
        let out = flexrun(&[&base[..], extra].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
    let out = flexrun(&["simulate", "--region", "europe-west1", "--qps", "1000", "--duration", "1h"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--region") && err.contains("us-central1"), "{err}");
}

#[test]
fn a_cdc_table_prices_its_apply_jobs_and_its_size_instead_of_the_stream() {
    let base = ["estimate", "--throughput", "100MiB/s", "--format", "json"];
    let cdc = json(&[&base[..], &["--cdc-table-size", "500GiB", "--cdc-max-staleness", "15m"]].concat());
    let apply = item(&cdc, "bigquery-cdc");
    assert_eq!(apply.len(), 1, "{cdc}");
    // One job per 15 minutes, each reading the 500 GiB table: 1,426 TiB a month at $6.25.
    let tib = 730.0 * 4.0 * 500.0 / 1024.0;
    assert!((apply[0]["quantity"].as_f64().unwrap() - tib).abs() < 1e-6, "{}", apply[0]);
    assert!((apply[0]["per_month"].as_f64().unwrap() - tib * 6.25).abs() < 1e-3, "{}", apply[0]);
    // Storage is the table's 500 GiB (less the free 10), the same in month 12.
    let storage = item(&cdc, "bigquery-storage");
    assert_eq!(storage.len(), 1, "{cdc}");
    assert!((storage[0]["per_month"].as_f64().unwrap() - 490.0 * 0.02).abs() < 1e-9, "{}", storage[0]);
    assert_eq!(storage[0]["per_month"], storage[0]["per_month_12"]);
    // Without CDC there is no such line; a longer staleness costs less.
    assert!(item(&json(&base), "bigquery-cdc").is_empty());
    let slow = json(&[&base[..], &["--cdc-table-size", "500GiB", "--cdc-max-staleness", "1h"]].concat());
    assert!((item(&slow, "bigquery-cdc")[0]["per_month"].as_f64().unwrap() * 4.0 - tib * 6.25).abs() < 1e-3);
    for (extra, needle) in [
        (&["--cdc-table-size", "500GiB"][..], "go together"),
        (&["--cdc-table-size", "500GiB", "--cdc-max-staleness", "soon"][..], "--cdc-max-staleness"),
        (&["--cdc-table-size", "huge", "--cdc-max-staleness", "15m"][..], "--cdc-table-size"),
    ] {
        let out = flexrun(&[&base[..], extra].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
}

/// `flexrun estimate ... | head`: a reader that has gone away ends the process quietly,
/// with the status a shell gives SIGPIPE (141), not with a panic's backtrace.
#[test]
fn a_closed_stdout_ends_quietly_with_the_broken_pipe_status() {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader); // every write to stdout now fails with EPIPE
    let out = Command::new(env!("CARGO_BIN_EXE_flexrun"))
        .args(["estimate", "--throughput", "100MiB/s"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
