//! `flexrun local ...`: set-up helpers for the local stack (topics, tables, sample
//! data, row counts).

use super::flags::usize_in;
use crate::bigquery::schema::Schema;
use crate::bigquery::{rest, Endpoints, TableRef};
use crate::{kafka, local, usage};
use anyhow::{anyhow, Context, Result};
use clap::Subcommand;

/// `flexrun local ...`
#[derive(Debug, Subcommand)]
pub enum LocalAction {
    /// Create a topic (idempotent).
    CreateTopic {
        /// host:port
        #[arg(long, env = "FLEXRUN_KAFKA")]
        bootstrap: String,
        /// Topic name.
        #[arg(long)]
        topic: String,
        /// Partition count.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(i32).range(1..=10_000))]
        partitions: i32,
    },
    /// Create a dataset and table (idempotent) with the demo schema or a schema file.
    CreateTable {
        /// project:dataset.table
        #[arg(long)]
        table: String,
        /// BigQuery JSON schema file (default: id INTEGER REQUIRED, logStreamId INTEGER, message STRING).
        #[arg(long)]
        schema_file: Option<String>,
        /// Drop the table first.
        #[arg(long)]
        recreate: bool,
        /// REST emulator host:port.
        #[arg(long)]
        bigquery_endpoint: Option<String>,
        /// gRPC emulator host:port.
        #[arg(long)]
        bigquery_grpc_endpoint: Option<String>,
    },
    /// Produce sample messages in the benchmark's shape (plus an `id`).
    Produce {
        /// host:port
        #[arg(long, env = "FLEXRUN_KAFKA")]
        bootstrap: String,
        /// Topic name.
        #[arg(long)]
        topic: String,
        /// How many messages.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        count: u64,
        /// First id.
        #[arg(long, default_value_t = 0)]
        start_id: u64,
        /// Make every k-th message a bad one (each bad-record class in turn).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        bad_every: Option<u64>,
        /// Characters in the `message` field (the benchmark uses 962).
        #[arg(long, default_value_t = 962, value_parser = usize_in::<0, 5_000_000>)]
        message_chars: usize,
        /// Exactly the benchmark's shape: no `id` field.
        #[arg(long)]
        seed_shape: bool,
        /// With --seed-shape: `logStreamId` as a quoted string, as Google's generator
        /// writes it from its template.
        #[arg(long, requires = "seed_shape")]
        quoted_id: bool,
    },
    /// A topic's traffic over time from its messages' own timestamps, as a CSV of
    /// timestamp,records_per_s,bytes_per_s that `flexrun simulate --profile-file` replays.
    TopicRates {
        /// host:port
        #[arg(long, env = "FLEXRUN_KAFKA")]
        bootstrap: String,
        /// Topic name.
        #[arg(long)]
        topic: String,
        /// Bucket length (e.g. 1m, 10s, 1h).
        #[arg(long, default_value = "1m", value_parser = flexrun_estimator::parse_duration)]
        bucket: std::time::Duration,
        /// Write the CSV here (default: standard output).
        #[arg(long)]
        output: Option<std::path::PathBuf>,
    },
    /// Count rows (and distinct ids) in a table.
    Count {
        /// project:dataset.table
        #[arg(long)]
        table: String,
        /// Also count distinct values of this column.
        #[arg(long)]
        distinct: Option<String>,
        /// REST emulator host:port.
        #[arg(long)]
        bigquery_endpoint: Option<String>,
        /// gRPC emulator host:port.
        #[arg(long)]
        bigquery_grpc_endpoint: Option<String>,
    },
}

fn endpoints(rest: Option<&str>, grpc: Option<&str>) -> Result<Endpoints> {
    Endpoints::resolve(rest, grpc).map_err(usage)
}

/// Run a local-stack helper.
pub async fn run(action: LocalAction) -> Result<()> {
    match action {
        LocalAction::CreateTopic { bootstrap, topic, partitions } => {
            kafka::create_topic(&bootstrap, &topic, partitions).await?;
            println!("topic {topic} ready ({partitions} partitions) on {bootstrap}");
        }
        LocalAction::CreateTable { table, schema_file, recreate, bigquery_endpoint, bigquery_grpc_endpoint } => {
            let t = TableRef::parse(&table).map_err(|e| usage(e.to_string()))?;
            let ep = endpoints(bigquery_endpoint.as_deref(), bigquery_grpc_endpoint.as_deref())?;
            let schema = match schema_file {
                Some(f) => {
                    let text = std::fs::read_to_string(&f).with_context(|| format!("reading {f}"))?;
                    let json: serde_json::Value =
                        serde_json::from_str(&text).map_err(|e| usage(format!("{f}: not JSON: {e}")))?;
                    Schema::from_json(&json).map_err(|e| usage(format!("{f}: {e}")))?
                }
                None => local::demo_schema(),
            };
            let c = rest::client(&ep).await?;
            if recreate {
                rest::drop_table(&c, &t).await;
            }
            let s = rest::ensure_table(&c, &ep, &t, &schema).await?;
            println!("table {t} ready ({} columns)", s.columns.len());
        }
        LocalAction::Produce { bootstrap, topic, count, start_id, bad_every, message_chars, seed_shape, quoted_id } => {
            let parts = kafka::Metadata::new(&kafka::Connection::plaintext(&bootstrap), &topic)?.partitions().await?;
            let t = std::time::Instant::now();
            let p = local::produce_shaped(
                &bootstrap,
                &topic,
                parts.len() as i32,
                start_id,
                count,
                bad_every,
                message_chars,
                match (seed_shape, quoted_id) {
                    (false, _) => local::MessageShape::Demo,
                    (true, false) => local::MessageShape::Seed,
                    (true, true) => local::MessageShape::SeedQuoted,
                },
            )
            .await?;
            println!(
                "produced {} good and {} bad messages to {topic} in {:.1} s",
                p.good,
                p.bad,
                t.elapsed().as_secs_f64()
            );
        }
        LocalAction::TopicRates { bootstrap, topic, bucket, output } => {
            topic_rates(&bootstrap, &topic, bucket, output).await?
        }
        LocalAction::Count { table, distinct, bigquery_endpoint, bigquery_grpc_endpoint } => {
            let t = TableRef::parse(&table).map_err(|e| usage(e.to_string()))?;
            let ep = endpoints(bigquery_endpoint.as_deref(), bigquery_grpc_endpoint.as_deref())?;
            let (n, d) = local::count_rows(&ep, &t, distinct.as_deref()).await.map_err(|e| anyhow!("{e:#}"))?;
            match d {
                Some(d) => println!("{t}: {n} rows, {d} distinct {}", distinct.unwrap_or_default()),
                None => println!("{t}: {n} rows"),
            }
        }
    }
    Ok(())
}

/// `flexrun local topic-rates`: bucket the topic's message timestamps into rates.
async fn topic_rates(
    bootstrap: &str,
    topic: &str,
    bucket: std::time::Duration,
    output: Option<std::path::PathBuf>,
) -> Result<()> {
    use flexrun_simulate::traffic::Buckets;
    use std::sync::{Arc, Mutex};
    let bucket_ms = bucket.as_millis() as i64;
    if bucket_ms < 1000 {
        return Err(usage(format!("--bucket {bucket:?} is too short: expected at least 1s")));
    }
    let buckets = Arc::new(Mutex::new(Buckets::new(bucket_ms)));
    let sink = buckets.clone();
    let bar = super::ui::progress_bar(0, "reading {bar:40} {pos}/{len} messages ({elapsed})");
    let b2 = bar.clone();
    let stats = kafka::history::read_topic(
        &kafka::Connection::plaintext(bootstrap),
        topic,
        move |ts, bytes| sink.lock().expect("buckets").add(ts, bytes),
        move |read, total| {
            b2.set_length(total);
            b2.set_position(read);
        },
    )
    .await?;
    bar.finish_and_clear();
    let csv = buckets.lock().expect("buckets").to_csv();
    let rows = csv.lines().count().saturating_sub(1);
    match &output {
        Some(p) => std::fs::write(p, &csv).with_context(|| format!("cannot write --output {}", p.display()))?,
        None => print!("{csv}"),
    }
    let mean = flexrun_simulate::traffic::Recorded::parse(topic, &csv).ok().and_then(|r| r.mean_message_bytes());
    eprintln!(
        "{topic}: {} messages in {rows} buckets of {bucket:?}{}{}",
        stats.messages,
        mean.map(|m| format!("; mean message {m:.0} B (give it to simulate as --message-size {m:.0})"))
            .unwrap_or_default(),
        if stats.without_timestamp > 0 {
            format!("; {} without a timestamp were left out", stats.without_timestamp)
        } else {
            String::new()
        }
    );
    Ok(())
}
