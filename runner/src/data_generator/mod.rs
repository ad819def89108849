//! The streaming-data-generator template: JSON Data Generator schemas at a steady
//! rate into Kafka (or a file, stdout, or nowhere).
//!
//! The language itself (schema → documents) is the `flexrun-generator` crate.
//!
//! Layout:
//! - [`rate`]: the send schedule (pure); [`encode`]: JSON or Avro bytes; [`sink`]: the
//!   destinations.
//! - this module: [`GeneratorConfig`] (from template parameters) and [`run`].

pub mod encode;
pub mod rate;
pub mod sink;

use anyhow::{bail, Context, Result};
pub use flexrun_generator::Generator;
use flexrun_templates::typed::streaming_data_generator::{
    KafkaAvroEncoding, Name as GenName, OutputType, Params as Gen, SchemaTemplate, SinkType,
};
use flexrun_templates::{ParamErrors, Problems, ResolvedParams};
use std::time::{Duration, Instant};

/// Where generated messages go (`sinkType`).
#[derive(Debug, Clone, PartialEq)]
pub enum SinkSpec {
    /// Kafka `bootstrapServer` / `kafkaTopic`.
    Kafka {
        /// host:port
        bootstrap: String,
        /// Topic.
        topic: String,
    },
    /// A local file: `outputDirectory`/`outputFilenamePrefix`….json.
    File(std::path::PathBuf),
    /// Standard output.
    Stdout,
    /// Nowhere (measures the generator itself).
    Null,
}

/// A generator job's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratorConfig {
    /// Messages per second.
    pub qps: f64,
    /// The schema text.
    pub schema: String,
    /// Where it came from (for messages).
    pub schema_path: String,
    /// Stop after this many messages (None = run until stopped).
    pub limit: Option<u64>,
    /// Destination.
    pub sink: SinkSpec,
    /// Random seed.
    pub seed: u64,
    /// `outputType=AVRO`: encode each document as a record of this schema.
    pub avro: Option<AvroOutput>,
    /// `outputType=PROTO`: encode each document as this Protobuf message.
    pub proto: Option<prost_reflect::MessageDescriptor>,
    /// `compactJson`: JSON goes out without whitespace between tokens, as Google's does.
    pub compact: bool,
}

/// Google's built-in schemas (`schemaTemplate`), as its `StreamingDataGenerator.SchemaTemplate`
/// defines them.
pub fn builtin_schema(name: SchemaTemplate) -> &'static str {
    match name {
        SchemaTemplate::GameEvent => include_str!("schemas/GAME_EVENT.json"),
        SchemaTemplate::LogEntry => include_str!("schemas/LOG_ENTRY.json"),
    }
}

/// Avro output settings (`outputType=AVRO`).
#[derive(Debug, Clone, PartialEq)]
pub struct AvroOutput {
    /// The schema's text.
    pub schema: String,
    /// Where it came from (for messages).
    pub schema_path: String,
    /// Kafka framing: Confluent wire format (true) or the datum alone.
    pub confluent: bool,
    /// Register the schema here (Kafka, Confluent framing).
    pub registry: Option<String>,
}

impl GeneratorConfig {
    /// Build from validated parameters; errors name the parameter and what it expects.
    pub fn from_params(p: &ResolvedParams, seed: Option<u64>) -> Result<GeneratorConfig, ParamErrors> {
        let mut errs = Problems::default();
        let qps: f64 =
            Gen(p).parsed(GenName::Qps, "a number of messages per second above 0").ok().flatten().unwrap_or(0.0);
        if !(qps > 0.0 && qps.is_finite()) {
            errs.push(format!("qps={}: expected a number of messages per second above 0", Gen(p).qps()));
        }
        let (schema, schema_path) = match (Gen(p).schema_location(), Gen(p).schema_template()) {
            (Some(loc), _) if loc.starts_with("gs://") => {
                errs.push(format!(
                    "schemaLocation={loc}: this command does not fetch gs:// files (a job run does, at start); give a local file path"
                ));
                (String::new(), loc.to_string())
            }
            (Some(loc), _) => match std::fs::read_to_string(loc) {
                Ok(s) => (s, loc.to_string()),
                Err(e) => {
                    errs.push(format!("schemaLocation={loc}: cannot read the schema file: {e}"));
                    (String::new(), loc.to_string())
                }
            },
            (None, Some(t)) => (builtin_schema(t).to_string(), format!("schemaTemplate={t}")),
            (None, None) => {
                errs.push(
                    "one of schemaLocation (a local JSON Data Generator schema file) or schemaTemplate is required",
                );
                (String::new(), String::new())
            }
        };
        let limit = match Gen(p).messages_limit().parse::<u64>() {
            Ok(0) => None,
            Ok(n) => Some(n),
            Err(_) => {
                errs.push("messagesLimit: expected a whole number (0 = unlimited)");
                None
            }
        };
        let avro = avro_output(p, &mut errs);
        let proto = proto_output(p, &mut errs);
        let sink = match Gen(p).sink_type() {
            SinkType::Kafka => match (Gen(p).bootstrap_server(), Gen(p).kafka_topic()) {
                (Some(b), Some(t)) => SinkSpec::Kafka { bootstrap: b.into(), topic: t.into() },
                _ => {
                    errs.push("sinkType=KAFKA needs bootstrapServer (host:port) and kafkaTopic");
                    SinkSpec::Null
                }
            },
            SinkType::File => match Gen(p).output_directory() {
                Some(d) if !d.starts_with("gs://") => SinkSpec::File(
                    std::path::Path::new(d).join(format!("{}generated.json", Gen(p).output_filename_prefix())),
                ),
                Some(d) => {
                    errs.push(format!(
                        "outputDirectory={d}: Cloud Storage is not reachable from here; give a local directory"
                    ));
                    SinkSpec::Null
                }
                None => {
                    errs.push("sinkType=FILE needs outputDirectory (a local directory)");
                    SinkSpec::Null
                }
            },
            SinkType::Stdout => SinkSpec::Stdout,
            SinkType::Null => SinkSpec::Null,
            other @ (SinkType::Pubsub | SinkType::Bigquery | SinkType::Gcs | SinkType::Jdbc | SinkType::Spanner) => {
                errs.push(format!("sinkType={other} is Google's but not reachable from flexrun; use KAFKA, FILE, STDOUT or NULL (Google's default is PUBSUB, so set sinkType explicitly)"));
                SinkSpec::Null
            }
        };
        errs.into_result()?;
        Ok(GeneratorConfig {
            qps,
            schema,
            schema_path,
            limit,
            sink,
            seed: seed.unwrap_or_else(|| rand::Rng::random(&mut rand::rng())),
            avro,
            proto,
            compact: Gen(p).compact_json(),
        })
    }
}

fn avro_output(p: &ResolvedParams, errs: &mut Problems) -> Option<AvroOutput> {
    match Gen(p).output_type() {
        OutputType::Json | OutputType::Proto => None,
        OutputType::Avro => {
            let Some(path) = Gen(p).avro_schema_location().filter(|s| !s.is_empty()) else {
                errs.push("outputType=AVRO needs avroSchemaLocation (a local .avsc file)");
                return None;
            };
            let schema = match std::fs::read_to_string(path) {
                Ok(s) => s,
                Err(e) => {
                    errs.push(format!("avroSchemaLocation={path}: cannot read the schema file: {e}"));
                    return None;
                }
            };
            if let Err(e) = crate::avro::WriterSchema::parse(&schema) {
                errs.push(format!("avroSchemaLocation={path}: {e}"));
            }
            Some(AvroOutput {
                schema,
                schema_path: path.to_string(),
                confluent: Gen(p).kafka_avro_encoding() != KafkaAvroEncoding::AvroBinaryEncoding,
                registry: Gen(p).schema_registry_connection_url().filter(|s| !s.is_empty()).map(str::to_string),
            })
        }
        OutputType::Parquet => {
            errs.push("outputType=PARQUET is not supported by flexrun yet; use JSON, AVRO or PROTO");
            None
        }
    }
}

/// `outputType=PROTO` (flexrun's): each document as the message `fullMessageName` of
/// `protoSchemaPath` (a descriptor set or a `.proto` file), to Kafka as the message alone,
/// as kafka-to-bq's `messageFormat=PROTO` reads it.
fn proto_output(p: &ResolvedParams, errs: &mut Problems) -> Option<prost_reflect::MessageDescriptor> {
    if Gen(p).output_type() != OutputType::Proto {
        return None;
    }
    if Gen(p).sink_type() != SinkType::Kafka {
        errs.push(
            "outputType=PROTO writes to Kafka only (sinkType=KAFKA): a file of bare messages could not be read back",
        );
    }
    let (Some(path), Some(message)) = (Gen(p).proto_schema_path(), Gen(p).full_message_name()) else {
        errs.push("outputType=PROTO needs protoSchemaPath (a descriptor set or a .proto file) and fullMessageName (package.Message)");
        return None;
    };
    crate::proto::decoder::load_message(path, message)
        .map_err(|e| errs.push(format!("protoSchemaPath={path}, fullMessageName={message}: {e}")))
        .ok()
}

/// What a generator run did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GeneratorReport {
    /// Messages generated and handed to the sink.
    pub sent: u64,
    /// Messages the broker acknowledged (Kafka only).
    pub delivered: Option<u64>,
    /// Acknowledged messages per second, including the final flush (Kafka only).
    pub delivered_qps: Option<f64>,
    /// Seconds from the first message to the last send.
    pub elapsed_s: f64,
    /// Target rate.
    pub target_qps: f64,
    /// Achieved rate (sent / elapsed).
    pub achieved_qps: f64,
    /// Whether the sender fell behind the schedule by more than a second at some point.
    pub fell_behind: bool,
    /// The seed used.
    pub seed: u64,
    /// This process's user + system CPU seconds at the end (getrusage).
    pub cpu_s: f64,
}

/// The destination `cfg` names, opened (a file's directory is created).
async fn open_sink(cfg: &GeneratorConfig) -> Result<sink::Sink> {
    Ok(match &cfg.sink {
        SinkSpec::Kafka { bootstrap, topic } => sink::Sink::kafka(bootstrap, topic).await?,
        SinkSpec::File(path) => {
            if let Some(d) = path.parent() {
                std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            }
            let path = match &cfg.avro {
                Some(_) => path.with_extension("avro"),
                None => path.clone(),
            };
            let file = std::io::BufWriter::new(
                std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
            );
            match &cfg.avro {
                Some(a) => sink::Sink::avro_file(&a.schema, file)?,
                None => sink::Sink::File(file),
            }
        }
        SinkSpec::Stdout => sink::Sink::Stdout(std::io::BufWriter::new(std::io::stdout())),
        SinkSpec::Null => sink::Sink::Null,
    })
}

/// A bar to `limit` messages (a spinner without one), or a hidden one.
fn progress_bar(show: bool, limit: Option<u64>) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let b = match limit {
        Some(l) => indicatif::ProgressBar::new(l),
        None => indicatif::ProgressBar::new_spinner(),
    };
    b.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {pos}/{len} messages [{elapsed_precise}] {per_sec} {msg}")
            .expect("template"),
    );
    b
}

/// Run a generator until its limit, or until `cancel` becomes true.
pub async fn run(
    cfg: GeneratorConfig,
    cancel: tokio::sync::watch::Receiver<bool>,
    progress: bool,
) -> Result<GeneratorReport> {
    let generator = Generator::new(&cfg.schema, cfg.seed).map_err(|e| anyhow::anyhow!("{}: {e}", cfg.schema_path))?;
    let sink = open_sink(&cfg).await?;
    let topic = match &cfg.sink {
        SinkSpec::Kafka { topic, .. } => Some(topic.as_str()),
        _ => None,
    };
    let encoder = match &cfg.proto {
        Some(desc) => encode::Encoder::Proto(desc.clone()),
        None => encode::Encoder::new(cfg.avro.as_ref(), topic, cfg.compact).await?,
    };
    let sender = Sender {
        generator,
        sink,
        encoder,
        schedule: rate::Schedule::new(cfg.qps, cfg.limit),
        bar: progress_bar(progress, cfg.limit),
        qps: cfg.qps,
        seed: cfg.seed,
        schema_path: cfg.schema_path,
        buf: String::with_capacity(2048),
        bytes: Vec::with_capacity(2048),
    };
    let t0 = Instant::now();
    // The generate loop is CPU-bound and blocking; run it on its own thread.
    let (report, sink) =
        tokio::task::spawn_blocking(move || sender.run(&cancel)).await.context("generator thread")??;
    settle(report, sink, &cfg.sink, t0)
}

/// The generate loop's state: documents from the generator, encoded, into the sink on
/// the schedule.
struct Sender {
    generator: Generator,
    sink: sink::Sink,
    encoder: encode::Encoder,
    schedule: rate::Schedule,
    bar: indicatif::ProgressBar,
    /// Target messages per second.
    qps: f64,
    /// For the report.
    seed: u64,
    /// For messages.
    schema_path: String,
    /// The document being sent, and its encoded bytes.
    buf: String,
    bytes: Vec<u8>,
}

impl Sender {
    /// Send on the schedule until its limit or `cancel`; returns the report (without
    /// the sink's deliveries and the CPU time) and the sink, still to be finished.
    fn run(mut self, cancel: &tokio::sync::watch::Receiver<bool>) -> Result<(GeneratorReport, sink::Sink)> {
        let start = Instant::now();
        let mut sent = 0u64;
        let mut fell_behind = false;
        let mut last_warn = Instant::now() - Duration::from_secs(60);
        let mut last_ui = Instant::now();
        loop {
            if *cancel.borrow() || self.schedule.done(sent) {
                break;
            }
            let elapsed = start.elapsed().as_secs_f64();
            let due = self.schedule.due(elapsed);
            if sent >= due {
                let wait = self.schedule.due_at(sent) - elapsed;
                std::thread::sleep(Duration::from_secs_f64(wait.clamp(0.0, 0.05)));
                continue;
            }
            // Send everything due now (at most a few ms worth per round).
            let burst_end = due.min(sent + (self.qps / 200.0).max(1.0) as u64);
            while sent < burst_end {
                self.send_one()?;
                sent += 1;
            }
            fell_behind |= self.check_pace(sent, start, &mut last_warn);
            if last_ui.elapsed() > Duration::from_millis(200) {
                self.bar.set_position(sent);
                if let Some(d) = self.sink.delivered() {
                    self.bar.set_message(format!("acked {d}"));
                }
                last_ui = Instant::now();
            }
        }
        let elapsed_s = start.elapsed().as_secs_f64();
        // Over a run of more than a second, less than 98% of the target rate is falling behind.
        if elapsed_s > 1.0 && (sent as f64 / elapsed_s) < 0.98 * self.qps && !*cancel.borrow() {
            fell_behind = true;
        }
        self.bar.set_position(sent);
        self.bar.finish();
        let report = GeneratorReport {
            sent,
            delivered: None,
            delivered_qps: None,
            elapsed_s,
            target_qps: self.qps,
            achieved_qps: if elapsed_s > 0.0 { sent as f64 / elapsed_s } else { 0.0 },
            fell_behind,
            seed: self.seed,
            cpu_s: 0.0,
        };
        Ok((report, self.sink))
    }

    /// Generate one document and hand it to the sink (an Avro file takes the record,
    /// every other sink the encoded bytes).
    fn send_one(&mut self) -> Result<()> {
        self.generator.next_into(&mut self.buf).map_err(|e| anyhow::anyhow!("{}: {e}", self.schema_path))?;
        let ts = chrono::Utc::now().timestamp_millis();
        match (&mut self.sink, self.encoder.record(&self.buf)?) {
            (sink::Sink::AvroFile(w), Some(v)) => sink::append_avro(w, v)?,
            _ => self.sink.send(self.encoder.encode(&self.buf, &mut self.bytes)?, ts)?,
        }
        Ok(())
    }

    /// Whether the sender is more than [`rate::BEHIND_LIMIT_S`] behind the schedule
    /// after `sent` messages; warns at most every 5 s while it is.
    fn check_pace(&self, sent: u64, start: Instant, last_warn: &mut Instant) -> bool {
        let behind = self.schedule.behind_s(sent, start.elapsed().as_secs_f64());
        if behind <= rate::BEHIND_LIMIT_S {
            return false;
        }
        if last_warn.elapsed() > Duration::from_secs(5) {
            let rate = sent as f64 / start.elapsed().as_secs_f64();
            tracing::warn!(
                target_qps = self.qps,
                achieved_qps = rate as u64,
                behind_s = behind,
                "cannot keep up: this machine or the broker produces less than the target rate"
            );
            *last_warn = Instant::now();
        }
        true
    }
}

/// Flush the sink and complete the report: the CPU time, and for Kafka what the broker
/// acknowledged (an error when any message was not delivered).
fn settle(mut report: GeneratorReport, mut sink: sink::Sink, to: &SinkSpec, t0: Instant) -> Result<GeneratorReport> {
    let (ok, failed) = sink.finish()?;
    let (user, sys) = crate::stats::process_cpu_seconds();
    report.cpu_s = user + sys;
    if matches!(to, SinkSpec::Kafka { .. }) {
        report.delivered = Some(ok);
        report.delivered_qps = Some(ok as f64 / t0.elapsed().as_secs_f64());
        if failed > 0 || ok != report.sent {
            bail!(
                "{} of {} messages were not delivered to Kafka (first error: {})",
                report.sent - ok,
                report.sent,
                sink.first_error().unwrap_or_else(|| "none reported".into())
            );
        }
    }
    Ok(report)
}
