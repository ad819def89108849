//! Running a template (`flexrun run`, the no-subcommand form, and
//! `flexrun dataflow flex-template run`): parameters are validated before anything
//! connects, then the template's component runs and its summary is printed.

use super::flags::{ErrorFormat, JobFlags};
use super::ui::spawn_signal_handler;
use crate::bigquery::Endpoints;
use crate::control::{lock::JobLock, Control};
use crate::kafka_to_bq::setup::config::{KafkaToBqConfig, SinkKind};
use crate::{data_generator, invalid_parameters, kafka_to_bq, microbatch, usage};
use anyhow::{anyhow, Context, Result};
use flexrun_templates::typed::kafka_to_bq::{Name as BqName, Params as Bq};
use flexrun_templates::{parse_parameter_list, validate, ParameterViolation, ResolvedParams, Template};
use std::sync::Arc;
use tokio::sync::watch;

/// The engines flexrun runs templates on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// kafka-to-bq: shards, the exactly-once protocol, the live worker pool.
    KafkaToBq,
    /// streaming-data-generator.
    DataGenerator,
    /// rate-to-stats (a rate source into a stats sink).
    RateToStats,
    /// kafka-to-kafka (micro-batches between two topics).
    KafkaToKafka,
    /// kafka-to-gcs: windowed files, the parallel committer.
    KafkaToGcs,
}

impl Engine {
    /// The engine a built-in template runs on.
    pub fn of(template: &Template) -> Option<Engine> {
        match template.name.as_str() {
            "kafka-to-bq" => Some(Engine::KafkaToBq),
            "streaming-data-generator" => Some(Engine::DataGenerator),
            "rate-to-stats" => Some(Engine::RateToStats),
            "kafka-to-kafka" => Some(Engine::KafkaToKafka),
            "kafka-to-gcs" => Some(Engine::KafkaToGcs),
            _ => None,
        }
    }
}

/// Launch-rule errors (each names its parameter) as a usage error.
fn launch_rules(template: &str, errs: &flexrun_templates::ParamErrors, flags: &JobFlags) -> anyhow::Error {
    let template = flexrun_templates::find(template);
    let v: Vec<ParameterViolation> = errs
        .0
        .iter()
        .map(|e| match template {
            Some(t) => ParameterViolation::from_error(t, e),
            None => ParameterViolation { parameter: String::new(), description: e.to_string() },
        })
        .collect();
    invalid_parameters(&v, flags.format == ErrorFormat::Json)
}

/// Every `--parameters` value's pairs, in order (a later pair overrides an earlier one).
pub(crate) fn parse_pairs(parameters: &[String]) -> Result<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    for p in parameters {
        pairs.extend(parse_parameter_list(p).map_err(|e| usage(e.to_string()))?);
    }
    Ok(pairs)
}

/// Validate `pairs` against `template` (a violation is a usage error, exit 2).
pub(crate) fn resolve(template: &Template, pairs: &[(String, String)], flags: &JobFlags) -> Result<ResolvedParams> {
    validate(template, pairs).map_err(|e| {
        let v: Vec<ParameterViolation> =
            e.0.iter()
                .map(|p| ParameterViolation {
                    parameter: p.parameter().unwrap_or_default().to_string(),
                    description: p.to_string(),
                })
                .collect();
        invalid_parameters(&v, flags.format == ErrorFormat::Json)
    })
}

/// Validate the parameters and run `template` as job `job_name`.
pub async fn run_template(template: &Template, job_name: &str, parameters: &[String], flags: &JobFlags) -> Result<()> {
    if job_name.is_empty() || job_name.contains(['/', '\\']) || job_name.starts_with('.') {
        return Err(usage(format!("invalid job name {job_name:?}: expected letters, digits, '-' or '_'")));
    }
    let root = flags.checkpoint_root();
    let pairs =
        super::gcs_files::fetch(parse_pairs(parameters)?, &root, job_name, flags.storage_endpoint.as_deref()).await?;
    let resolved = resolve(template, &pairs, flags)?;
    for (k, v) in &resolved.pipeline_options {
        eprintln!("note: pipeline option {k}={v} passed in --parameters: recorded; not applied by a local run");
    }
    let engine = Engine::of(template)
        .ok_or_else(|| anyhow!("template {} has no engine in this build of flexrun", template.name))?;
    match engine {
        Engine::KafkaToBq => run_kafka_to_bq(&resolved, job_name, flags).await,
        Engine::DataGenerator => {
            refuse_stop_when_caught_up(flags, "streaming-data-generator")?;
            run_generator(&resolved, job_name, flags).await
        }
        Engine::RateToStats | Engine::KafkaToKafka => run_microbatch(engine, &resolved, job_name, flags).await,
        Engine::KafkaToGcs => run_kafka_to_gcs(&resolved, job_name, flags).await,
    }
}

/// kafka-to-gcs: windows of files, committed exactly once, until drained.
async fn run_kafka_to_gcs(resolved: &ResolvedParams, job_name: &str, flags: &JobFlags) -> Result<()> {
    use crate::kafka_to_gcs::config::{GcsFlags, KafkaToGcsConfig};
    refuse_stop_when_caught_up(flags, "kafka-to-gcs")?;
    let f = GcsFlags {
        job_name: job_name.to_string(),
        max_workers: flags.scaling.max_workers,
        parallelism: flags.commit_parallelism,
        endpoint: flags.storage_endpoint.clone(),
        idle_timeout: flags.idle_timeout,
        pool: flags.pool().map_err(usage)?,
        capacity: flags.worker_capacity,
        backend: flags.state_backend,
        kind: flags.checkpoint_kind,
        interval: flags.checkpoint_interval,
        location: flags.checkpoint_location.clone(),
    };
    let cfg = KafkaToGcsConfig::from_params(resolved, f).map_err(|errs| launch_rules("kafka-to-gcs", &errs, flags))?;
    let web = serve_web(flags, job_name).await?;
    let (job, _) = Launcher::start(resolved, job_name, "kafka-to-gcs", flags);
    let result = crate::kafka_to_gcs::job::run(
        cfg.clone(),
        &flags.checkpoint_root(),
        job.cancel_tx.clone(),
        job.control.clone(),
        web,
    )
    .await;
    let r = job.finish(result, to_json)?;
    println!(
        "kafka-to-gcs job {job_name} finished: {} records in {} windows, {} files to {} ({} shards per window, commit parallelism {})",
        r.records, r.windows, r.files, cfg.output.url(), cfg.shards, cfg.parallelism
    );
    println!(
        "  skipped as already published: {} · late records (moved to the next open window): {} · values without a body: {} · rolled forward: {} · staging objects swept: {}",
        r.skipped_published, r.late_records, r.null_values, r.rolled_forward, r.swept
    );
    println!("  staging {:.2} s · publishing {:.2} s · elapsed {:.1} s", r.stage_s, r.publish_s, r.elapsed_s);
    print!("{}", render_state(&r.state, r.workers, &r.resizes));
    job.write_summary(&r)
}

/// With `--web`, serve the dashboard, the cost page and `/metrics`.
async fn serve_web(flags: &JobFlags, job_name: &str) -> Result<Option<flexrun_web::JobRegistry>> {
    let Some(addr) = &flags.web else { return Ok(None) };
    let jobs = flexrun_web::JobRegistry::default();
    let (bound, _) =
        flexrun_web::serve(addr, jobs.clone()).await.map_err(|e| usage(format!("--web {addr}: cannot listen: {e}")))?;
    eprintln!("dashboard: http://{bound}/jobs/{job_name}  (cost estimate: http://{bound}/estimate, metrics: http://{bound}/metrics)");
    Ok(Some(jobs))
}

/// kafka-to-gcs's state, checkpoint and worker lines of the summary.
fn render_state(
    s: &crate::kafka_to_gcs::checkpoints::StateReport,
    workers: u32,
    resizes: &[(f64, u32, u32)],
) -> String {
    use std::fmt::Write;
    let mib = |b: u64| b as f64 / 1048576.0;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "  state: {} backend, {} checkpoints to {} · peak state {:.1} MiB in {} keys · peak RSS {:.1} MiB · peak heap {:.1} MiB · CPU {:.1} s",
        s.backend,
        s.kind,
        s.location,
        mib(s.peak_state_bytes),
        s.peak_state_keys,
        mib(s.peak_rss_bytes),
        mib(s.peak_heap_bytes),
        s.cpu_s
    );
    if let Some(id) = s.restored_from {
        let _ = writeln!(o, "  restored from checkpoint {id} in {:.2} s", s.recovery_s);
    }
    for (id, why) in &s.skipped_checkpoints {
        let _ = writeln!(o, "  passed over checkpoint {id}: {why}");
    }
    let n = s.checkpoints.len();
    let sync_max = s.checkpoints.iter().map(|c| c.sync_s).fold(0.0, f64::max);
    let up_max = s.checkpoints.iter().map(|c| c.upload_s).fold(0.0, f64::max);
    let bytes_max = s.checkpoints.iter().map(|c| c.uploaded_bytes).max().unwrap_or(0);
    let _ = writeln!(
        o,
        "  checkpoints: {n} completed, {} failed · largest upload {:.1} MiB · longest synchronous part {:.3} s · longest upload {:.2} s",
        s.failed_checkpoints, mib(bytes_max), sync_max, up_max
    );
    let _ = writeln!(o, "  workers at the end: {workers}");
    for (t, from, to) in resizes {
        let _ = writeln!(o, "  autoscaling at {t:.1} s: {from} → {to} workers");
    }
    o
}

/// kafka-to-bq's typed configuration, and the BigQuery endpoints when it writes there
/// (a launch-rule violation is a usage error, exit 2).
pub(crate) fn kafka_to_bq_config(
    resolved: &ResolvedParams,
    job_name: &str,
    flags: &JobFlags,
) -> Result<(KafkaToBqConfig, Option<Endpoints>)> {
    let run_flags = flags.run_flags(job_name).map_err(usage)?;
    let sink = run_flags.sink.clone();
    let cfg =
        KafkaToBqConfig::from_params(resolved, run_flags).map_err(|errs| launch_rules("kafka-to-bq", &errs, flags))?;
    let endpoints = match sink {
        SinkKind::BigQuery => Some(
            Endpoints::resolve(flags.bigquery_endpoint.as_deref(), flags.bigquery_grpc_endpoint.as_deref())
                .map_err(usage)?,
        ),
        SinkKind::Stats { .. } => None,
    };
    Ok((cfg, endpoints))
}

/// kafka-to-bq: build the job's configuration, serve the dashboard if asked, run until
/// drained, and print the summary and the autoscaling decisions.
async fn run_kafka_to_bq(resolved: &ResolvedParams, job_name: &str, flags: &JobFlags) -> Result<()> {
    let (cfg, endpoints) = kafka_to_bq_config(resolved, job_name, flags)?;
    for n in flags.notes() {
        eprintln!("note: {n}");
    }
    if !Bq(resolved).was_given(BqName::UseStorageWriteApiAtLeastOnce) && flags.at_least_once_experiment() {
        eprintln!("note: --additional-experiments=streaming_mode_at_least_once: at-least-once delivery (the _default stream), as Google's template does");
    }
    let web = serve_web(flags, job_name).await?;
    let (job, _) = Launcher::start(resolved, job_name, "kafka-to-bq", flags);
    if cfg.topics.is_several() {
        return run_kafka_to_bq_topics(cfg, endpoints, web, job).await;
    }
    let result = kafka_to_bq::job::run(
        cfg.clone(),
        &flags.checkpoint_root(),
        endpoints,
        job.cancel_tx.clone(),
        web,
        Some(job.control.clone()),
    )
    .await;
    let report = job.finish(result, |report| {
        Ok(serde_json::json!({
            "job_name": job_name,
            "delivery": cfg.delivery.as_str(),
            "shards": report.shards,
            "elapsed_s": report.elapsed.as_secs_f64(),
            "workers": report.workers,
            "decisions": report.decisions,
            "summary": report.summary,
        }))
    })?;
    println!(
        "kafka-to-bq job {} ({}, {} shards, {} worker(s) at the end) finished",
        job_name,
        cfg.delivery.as_str(),
        report.shards,
        report.workers
    );
    print!("{}", report.summary.render(report.elapsed.as_secs_f64()));
    if report.decisions.iter().any(|d| d.is_change()) {
        println!("autoscaling ({} policy):", flags.scaling.autoscaling_policy);
        println!("{:>9}  {:>7}  {:<40} detail", "time s", "workers", "rationale");
        for d in &report.decisions {
            println!("{:>9.1}  {:>3} → {:<3}  {:<40} {}", d.time_s, d.from, d.to, d.rationale.as_str(), d.detail);
        }
    }
    job.write_recorded_summary()
}

/// A kafka-to-bq job of several topics ([`kafka_to_bq::fan_out::run_topics`]): the job holds its
/// own lock and control socket, each topic's pipeline runs as `<job>.<topic>`; the summary
/// adds the topics up and lists each.
async fn run_kafka_to_bq_topics(
    cfg: KafkaToBqConfig,
    endpoints: Option<Endpoints>,
    web: Option<flexrun_web::JobRegistry>,
    job: Launcher<'_>,
) -> Result<()> {
    let (job_name, flags) = (job.job_name, job.flags);
    let _lock = job.register_pooled()?;
    let control = Some(job.control.clone());
    let root = flags.checkpoint_root();
    let result =
        kafka_to_bq::fan_out::run_topics(cfg.clone(), &root, endpoints, job.cancel_tx.clone(), web, control).await;
    let merged = result
        .as_ref()
        .ok()
        .and_then(|r| crate::stats::Summary::merged(&r.topics.values().map(|t| t.summary.clone()).collect::<Vec<_>>()));
    let report = job.finish(result, |r| {
        let topics: serde_json::Map<String, serde_json::Value> = r
            .topics
            .iter()
            .map(|(t, rep)| {
                let c = cfg.for_topic(t);
                let table = c.table.to_string();
                (t.clone(), serde_json::json!({"table": table, "dlq": c.dlq.map(|d| d.to_string()), "shards": rep.shards, "summary": rep.summary}))
            })
            .collect();
        Ok(serde_json::json!({
            "job_name": job_name,
            "delivery": cfg.delivery.as_str(),
            "elapsed_s": r.elapsed.as_secs_f64(),
            "topics": topics,
            "summary": merged,
            "workers": r.workers,
            "decisions": r.decisions,
        }))
    })?;
    println!("kafka-to-bq job {job_name} ({}, {} topics) finished", cfg.delivery.as_str(), report.topics.len());
    for (t, r) in &report.topics {
        let s = &r.summary;
        println!(
            "  topic {t} → {}: read {}, written {}, dead-lettered {}",
            cfg.for_topic(t).table,
            s.messages_read,
            s.rows_written,
            s.dead_lettered
        );
    }
    if let Some(m) = &merged {
        print!("{}", m.render(report.elapsed.as_secs_f64()));
    }
    job.write_recorded_summary()
}

/// One job's lifecycle around its engine, the same for every template: a cancel channel
/// that Ctrl-C and SIGTERM drain, the job's record on the local control plane, and at
/// the end the summary kept in the record, the outcome recorded and `--summary-json`
/// written.
struct Launcher<'a> {
    job_name: &'a str,
    flags: &'a JobFlags,
    /// Drains the job (a signal, or `flexrun dataflow jobs drain`).
    cancel_tx: watch::Sender<bool>,
    /// The job's handle on the control plane (registered once the job holds its lock).
    control: Arc<Control>,
}

impl<'a> Launcher<'a> {
    /// Open the cancel channel, hand the signals to it and make the job's control; the
    /// channel's first receiver is returned beside it.
    fn start(
        resolved: &ResolvedParams,
        job_name: &'a str,
        template: &str,
        flags: &'a JobFlags,
    ) -> (Launcher<'a>, watch::Receiver<bool>) {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        spawn_signal_handler(cancel_tx.clone());
        let given: Vec<(String, String)> =
            resolved.given.iter().map(|k| (k.clone(), resolved.values.get(k).cloned().unwrap_or_default())).collect();
        let region = flags.scaling.region.as_deref().unwrap_or("us-central1");
        let control = Control::new(cancel_tx.clone(), job_name, template, given, region);
        (Launcher { job_name, flags, cancel_tx, control }, cancel_rx)
    }

    /// For the engines without the worker pool: take the job's lock in its checkpoint
    /// directory and register it there with one fixed worker.
    fn register_fixed(&self) -> Result<JobLock> {
        self.control.register_fixed(&self.flags.checkpoint_root().join(self.job_name), 1)
    }

    /// Register a job whose pool autoscales and takes `update-options` (a job of several
    /// topics; a one-topic job registers itself once it holds its lock).
    fn register_pooled(&self) -> Result<JobLock> {
        let job_dir = self.flags.checkpoint_root().join(self.job_name);
        let lock = JobLock::acquire(&job_dir, self.job_name)?;
        self.control.start(&job_dir)?;
        Ok(lock)
    }

    /// The engine returned: keep `summary` of its report in the record when it succeeded,
    /// record how the job ended, and pass the result on.
    fn finish<R>(&self, result: Result<R>, summary: impl FnOnce(&R) -> Result<serde_json::Value>) -> Result<R> {
        if let Ok(r) = &result {
            self.control.set_summary(summary(r)?);
        }
        self.control.finish(&result.as_ref().map(|_| ()).map_err(|e| anyhow!("{e:#}")));
        result
    }

    /// With `--summary-json`, write `summary` there.
    fn write_summary(&self, summary: &impl serde::Serialize) -> Result<()> {
        let Some(path) = &self.flags.summary_json else { return Ok(()) };
        std::fs::write(path, serde_json::to_vec_pretty(summary)?).with_context(|| format!("writing {}", path.display()))
    }

    /// With `--summary-json`, write the summary kept in the record (if any) there.
    fn write_recorded_summary(&self) -> Result<()> {
        match self.control.summary() {
            Some(j) => self.write_summary(&j),
            None => Ok(()),
        }
    }
}

/// A report as the record's summary: its own JSON.
fn to_json<R: serde::Serialize>(report: &R) -> Result<serde_json::Value> {
    Ok(serde_json::to_value(report)?)
}

/// streaming-data-generator: compile the schema, send at the rate, print the report.
async fn run_generator(resolved: &ResolvedParams, job_name: &str, flags: &JobFlags) -> Result<()> {
    let cfg = data_generator::GeneratorConfig::from_params(resolved, flags.seed)
        .map_err(|errs| launch_rules("streaming-data-generator", &errs, flags))?;
    // Compile the schema before anything connects, so schema errors exit with status 2.
    data_generator::Generator::new(&cfg.schema, 0).map_err(|e| usage(format!("{}: {e}", cfg.schema_path)))?;
    let (job, cancel_rx) = Launcher::start(resolved, job_name, "streaming-data-generator", flags);
    let _lock = job.register_fixed()?;
    let to_stdout = cfg.sink == data_generator::SinkSpec::Stdout;
    let r = job.finish(data_generator::run(cfg, cancel_rx, !to_stdout).await, to_json)?;
    let line = format!(
        "streaming-data-generator: {} messages in {:.2} s: {:.0} msg/s achieved, {:.0} msg/s target{}{} (seed {})",
        r.sent,
        r.elapsed_s,
        r.achieved_qps,
        r.target_qps,
        r.delivered
            .map(|d| format!(
                ", {d} acknowledged by Kafka ({:.0} msg/s including the final flush)",
                r.delivered_qps.unwrap_or(0.0)
            ))
            .unwrap_or_default(),
        if r.fell_behind {
            "; FELL BEHIND: this machine or the broker could not keep up with the target rate"
        } else {
            ""
        },
        r.seed
    );
    if to_stdout {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
    job.write_summary(&r)
}

/// rate-to-stats and kafka-to-kafka: the micro-batch engine with its source and sink.
async fn run_microbatch(
    engine: Engine,
    p: &flexrun_templates::ResolvedParams,
    job_name: &str,
    flags: &JobFlags,
) -> Result<()> {
    use crate::microbatch::{
        kafka::{KafkaSink, KafkaSource, KafkaToKafkaConfig},
        rate::{RateConfig, RateSource, StatsSink},
        MicroBatchConfig, Sink, Source,
    };
    refuse_stop_when_caught_up(flags, "rate-to-stats and kafka-to-kafka")?;
    let cfg = MicroBatchConfig {
        checkpoint_dir: flags.checkpoint_root().join(job_name),
        progress: flags.progress(),
        max_batch: flags.batch_rows,
        idle_timeout: flags.idle_timeout,
        latency_warm_up: flags.latency_warm_up,
    };
    let (mut source, mut sink): (Box<dyn Source + Send>, Box<dyn Sink + Send>) = match engine {
        Engine::RateToStats => {
            let c = RateConfig::from_params(p).map_err(usage)?;
            (Box::new(RateSource::new(c.rows_per_second, c.message_bytes, c.limit)), Box::new(StatsSink::default()))
        }
        _ => {
            let c = KafkaToKafkaConfig::from_params(p).map_err(usage)?;
            let (source, sink) = tokio::task::spawn_blocking(move || -> Result<(KafkaSource, KafkaSink)> {
                Ok((KafkaSource::new(&c.read, c.start_earliest)?, KafkaSink::new(&c.write, c.json)?))
            })
            .await??;
            (Box::new(source), Box::new(sink))
        }
    };
    let name = if engine == Engine::RateToStats { "rate-to-stats" } else { "kafka-to-kafka" };
    let (job, mut cancel_rx) = Launcher::start(p, job_name, name, flags);
    let _lock = job.register_fixed()?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    tokio::spawn(async move {
        if cancel_rx.changed().await.is_ok() {
            s2.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let result =
        tokio::task::spawn_blocking(move || microbatch::run(source.as_mut(), sink.as_mut(), &cfg, &stop)).await?;
    let report = job.finish(result, to_json)?;
    println!("{name} job {job_name} finished");
    print!("{}", report.render());
    job.write_summary(&report)
}

/// `--stop-when-caught-up` is kafka-to-bq's: other templates say so (exit 2) instead of
/// running until an idle timeout the user did not ask for.
fn refuse_stop_when_caught_up(flags: &JobFlags, templates: &str) -> Result<()> {
    if flags.stop_when_caught_up {
        return Err(usage(format!(
            "--stop-when-caught-up is supported by kafka-to-bq only, not by {templates}; use --idle-timeout to stop after a quiet period"
        )));
    }
    Ok(())
}
