//! The send path's floor (issue 63): seed-shape rows encoded once, before the clock
//! starts, then sent to a BigQuery table through flexrun's own Storage Write client
//! (one COMMITTED stream, requests cut under `--append-request-bytes` as the job cuts
//! them, each at its offset and awaited), with nothing else in the process: no Kafka,
//! no mapping, no progress log. `scripts/bench-hot-path.sh` prints it beside bare-batch
//! and eo-bq: eo-bq's send path costs what is over bare-batch + bare_writer.
//!
//! ```text
//! BIGQUERY_EMULATOR_HOST=... BIGQUERY_STORAGE_EMULATOR_HOST=... \
//!   cargo run --release --example bare_writer -- TABLE ROWS [MESSAGE_CHARS] [BATCH_ROWS]
//! ```
//! TABLE (`project:dataset.table`) must exist with `scripts/bench/seed-schema.json`'s
//! columns. Prints one JSON line: rows (`messages`), the bytes of the messages they
//! were mapped from (`bytes`, the denominator of the jobs' CPU per GB) and of the rows,
//! seconds, and CPU user and system seconds of the sending alone (getrusage before and
//! after).

use flexrun::bigquery::errors::AppendOutcome;
use flexrun::bigquery::framed::SharedRows;
use flexrun::bigquery::rows::Rows;
use flexrun::bigquery::schema::Schema;
use flexrun::bigquery::write::{request_row_budget, split_requests, WriteClient, MAX_REQUEST_BYTES};
use flexrun::bigquery::{Endpoints, TableRef};
use flexrun::kafka_to_bq::map::transform::Mapper;
use std::sync::Arc;
use std::time::Instant;

fn arg<T: std::str::FromStr>(i: usize, default: Option<T>) -> T {
    match std::env::args().nth(i).map(|s| s.parse::<T>()) {
        Some(Ok(v)) => v,
        None if default.is_some() => default.unwrap(),
        _ => {
            eprintln!("usage: bare_writer TABLE ROWS [MESSAGE_CHARS] [BATCH_ROWS]");
            std::process::exit(2)
        }
    }
}

/// `n` seed-shape rows encoded as kafka-to-bq encodes them, in batches of `batch`, and
/// the bytes of the messages they come from.
fn encode(schema: &Schema, n: u64, chars: usize, batch: usize) -> (Vec<SharedRows>, usize) {
    let mapper = Mapper::new(schema.clone(), 10_000_000);
    let (mut out, mut message_bytes) = (Vec::new(), 0);
    let mut rows = Rows::new();
    for id in 0..n {
        let message = flexrun::local::seed_shape_message(id, 1, chars);
        message_bytes += message.len();
        rows.push(&mapper.map(&message).expect("a seed-shape row"));
        if rows.len() == batch {
            out.push(Arc::new(std::mem::take(&mut rows)));
        }
    }
    if !rows.is_empty() {
        out.push(Arc::new(rows));
    }
    (out, message_bytes)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let table = TableRef::parse(&arg::<String>(1, None)).expect("TABLE as project:dataset.table");
    let (n, chars, batch) = (arg::<u64>(2, None), arg::<usize>(3, Some(962)), arg::<usize>(4, Some(10_000)));
    let schema_text =
        std::fs::read_to_string("scripts/bench/seed-schema.json").expect("scripts/bench/seed-schema.json");
    let schema = Schema::from_json(&serde_json::from_str(&schema_text).expect("JSON")).expect("a schema");
    let (batches, message_bytes) = encode(&schema, n, chars, batch);
    let row_bytes: usize = batches.iter().map(|b| b.iter().map(<[u8]>::len).sum::<usize>()).sum();
    let endpoints = Endpoints::resolve(None, None).expect("BigQuery endpoints");
    let client = WriteClient::connect(&endpoints).await.expect("connect");
    let stream = client.create_committed_stream(&table).await.expect("a COMMITTED stream");
    let descriptor = flexrun::bigquery::proto::descriptor(&schema, "Row");
    let mut conn = client.open(&stream, descriptor).await.expect("AppendRows");
    let (cpu0, t0) = (flexrun::stats::process_cpu_seconds(), Instant::now());
    let mut offset = 0i64;
    for rows in &batches {
        for range in split_requests(rows.iter(), request_row_budget(MAX_REQUEST_BYTES)) {
            let count = range.len() as i64;
            match conn.append_shared(rows, range, Some(offset)).await.expect("append") {
                AppendOutcome::Appended => offset += count,
                other => panic!("append at {offset}: {other:?}"),
            }
        }
    }
    let (cpu1, secs) = (flexrun::stats::process_cpu_seconds(), t0.elapsed().as_secs_f64());
    let (user, sys) = (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1);
    println!(
        "{}",
        serde_json::json!({"way": "bare_writer", "messages": offset, "bytes": message_bytes, "row_bytes": row_bytes,
            "elapsed_s": secs, "cpu_user_s": user, "cpu_sys_s": sys,
            "cpu_s_per_gb": (user + sys) / (message_bytes as f64 / 1e9)})
    );
}
