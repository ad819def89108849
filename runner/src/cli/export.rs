//! `flexrun export`: print the command (and the REST body) that runs the same job on
//! Dataflow with Google's template, for when it outgrows one machine.
//!
//! Takes the same arguments as a run. Template parameters are checked as for a run;
//! values that point at this machine become placeholders (`flexrun_templates::export`);
//! flexrun-only flags are named as left out. Without `--max-workers`, `--throughput`
//! sizes the ceiling from the estimator.

use super::flags::{ErrorFormat, JobFlags, SinkArg};
use crate::usage;
use anyhow::Result;
use clap::Args;
use flexrun_estimator as est;
use flexrun_templates::export::{localize, Launch};
use flexrun_templates::typed::kafka_source::{MessageFormat, Params as Src, SchemaFormat};

/// `flexrun export JOB | --template kafka-to-bq --parameters ... [run flags]`
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// A registered job (id or name, as `flexrun dataflow jobs list` shows): its template,
    /// parameters and region are exported.
    #[arg(conflicts_with_all = ["template", "parameters"], required_unless_present = "template")]
    pub job: Option<String>,
    /// The template (see `flexrun templates list`).
    #[arg(long)]
    pub template: Option<String>,
    /// Template parameters, as for a run.
    #[arg(long)]
    pub parameters: Vec<String>,
    /// The Dataflow job name (default: the template name).
    #[arg(long)]
    pub job_name: Option<String>,
    /// Size --max-workers for this input (e.g. 200MiB/s, 50000msg/s) when it is not given:
    /// twice the estimator's workers, so the job can take a doubling.
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| est::Rate::parse(s).map_err(|e| e.to_string()))]
    pub throughput: Option<est::Rate>,
    /// Run flags, as for `flexrun run` (gcloud's are carried over; flexrun's are left out
    /// and named). `--format json` prints one JSON document.
    #[command(flatten)]
    pub flags: JobFlags,
}

/// Headroom over the estimate when sizing `--max-workers` from `--throughput`.
pub const MAX_WORKERS_HEADROOM: f64 = 2.0;

/// The flexrun-only flags that are set, to name them as left out.
fn local_only(f: &JobFlags) -> Vec<&'static str> {
    let s = &f.scaling;
    [
        (f.checkpoint_dir.is_some(), "--checkpoint-dir"),
        (f.bigquery_endpoint.is_some() || f.bigquery_grpc_endpoint.is_some(), "the BigQuery emulator endpoints"),
        (f.idle_timeout.is_some(), "--idle-timeout"),
        (f.worker_capacity.is_some(), "--worker-capacity"),
        (f.sink != SinkArg::Bigquery, "--sink"),
        (f.web.is_some(), "--web"),
        (f.async_progress_tracking, "--async-progress-tracking"),
        (s.autoscaling_policy != "dataflow", "--autoscaling-policy (Dataflow runs its own)"),
        (s.autoscaling_time_scale != 1.0, "--autoscaling-time-scale"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect()
}

/// Build the launch `a` describes (every problem is a usage error).
pub fn launch(a: &ExportArgs) -> Result<Launch> {
    let (template, mut pairs, job_name, region) = match &a.job {
        Some(job) => {
            let root = a.flags.checkpoint_root();
            let r = crate::control::record::find(&root, job).ok_or_else(|| {
                usage(format!(
                    "no job {job:?} under {}: expected a job id or name that `flexrun dataflow jobs list` shows",
                    root.display()
                ))
            })?;
            (r.template, r.parameters, Some(r.name), Some(r.region))
        }
        None => (a.template.clone().unwrap_or_default(), Vec::new(), None, None),
    };
    let t = flexrun_templates::find(&template).ok_or_else(|| super::templates::unknown_template(&template))?;
    if t.google_template_id.is_none() {
        return Err(usage(format!("{} is flexrun's own template: Dataflow has no template to export it to", t.name)));
    }
    for p in &a.parameters {
        pairs.extend(flexrun_templates::parse_parameter_list(p).map_err(|e| usage(format!("--parameters: {e}")))?);
    }
    let region = a.flags.scaling.region.clone().or(region).unwrap_or_else(|| "us-central1".into());
    let job_name = a.job_name.clone().or(job_name).unwrap_or_else(|| t.name.clone());
    let resolved = flexrun_templates::validate(t, &pairs).map_err(|e| usage(e.to_string()))?;
    let pool = a.flags.pool().map_err(usage)?;
    refuse_several_topics(&resolved)?;
    let (pairs, mut notes) = localize(t, &pairs);
    let s = &a.flags.scaling;
    let mut l = Launch::new(t, &job_name, pairs, Vec::new(), &region);
    if let Some(p) = &s.project {
        l.project = p.clone();
    }
    l.machine_type = Some(s.worker_machine_type.clone().unwrap_or_else(|| "e2-standard-2".into()));
    l.num_workers = s.num_workers;
    l.max_workers = s.max_workers;
    l.experiments = s.additional_experiments.clone();
    l.min_workers = s.min_num_workers;
    l.utilization_hint = s.worker_utilization_hint;
    if s.autoscaling_algorithm == "NONE" {
        let n = pool.num_workers;
        (l.num_workers, l.max_workers) = (Some(n), Some(n));
        notes.push(format!(
            "--autoscaling-algorithm NONE: the pool is fixed at {n} workers by --num-workers = --max-workers"
        ));
    }
    if l.max_workers.is_none() {
        match a.throughput {
            Some(rate) => {
                let mode =
                    crate::kafka_to_bq::setup::config::Delivery::of(&resolved, s.at_least_once_experiment()).mode();
                let machine = l.machine_type.clone().unwrap_or_default();
                let baseline = est::google_kafka_to_bq();
                let req = est::Request::for_rate(rate, None, &baseline, mode, &machine, est::Commitment::None);
                let e = est::estimate(&req, est::GOOGLE_KAFKA_TO_BQ_NAME, &baseline, &est::Pricing::us_central1())
                    .map_err(|e| usage(format!("--throughput: {e}")))?;
                let max = ((e.workers_exact * MAX_WORKERS_HEADROOM).ceil() as u32).clamp(pool.num_workers.max(1), 1000);
                l.max_workers = Some(max);
                notes.push(format!(
                    "--max-workers={max}: {MAX_WORKERS_HEADROOM}x the {:.1} workers `flexrun estimate` gives for {:.1} MiB/s {}",
                    e.workers_exact,
                    e.throughput_mib_s,
                    mode.as_str()
                ));
            }
            None => notes.push("no --max-workers or --throughput: Dataflow's default ceiling (100) applies".into()),
        }
    }
    let left_out = local_only(&a.flags);
    if !left_out.is_empty() {
        notes.push(format!("flexrun-only, left out: {}", left_out.join(", ")));
    }
    notes.extend(avro_mapping_note(t, &resolved));
    l.notes = notes;
    Ok(l)
}

/// A job of several topics (flexrun's extension) has no Dataflow form: Google's template
/// reads one topic per job.
fn refuse_several_topics(p: &flexrun_templates::ResolvedParams) -> Result<()> {
    let topic = Src(p).read_bootstrap_server_and_topic().split_once(';').map(|(_, t)| t);
    match topic {
        Some(t) if t.contains('|') || t.starts_with('/') => Err(usage(format!(
            "readBootstrapServerAndTopic: {t} reads several topics, and Google's template reads one per job: export each topic as its own job (host:port;topic), with its table"
        ))),
        _ => refuse_protobuf(p),
    }
}

/// Protobuf input (flexrun's extension) has no Dataflow form: Google's Kafka template
/// reads JSON and Avro only.
fn refuse_protobuf(p: &flexrun_templates::ResolvedParams) -> Result<()> {
    match Src(p).message_format() {
        f @ (MessageFormat::Proto | MessageFormat::ProtoConfluentWireFormat) => Err(usage(format!(
            "messageFormat={f}: Google's Kafka_to_BigQuery_Flex reads JSON and Avro only (its YAML template, Kafka_to_BigQuery_Yaml, reads PROTO); there is no Dataflow form of this job"
        ))),
        _ => Ok(()),
    }
}

/// For an Avro kafka-to-bq job, where flexrun's Avro → BigQuery mapping and Google's
/// differ: the columns by name when the schema is a local file, else in general.
fn avro_mapping_note(t: &flexrun_templates::Template, p: &flexrun_templates::ResolvedParams) -> Option<String> {
    let format = Src(p).message_format();
    let avro = matches!(format, MessageFormat::AvroConfluentWireFormat | MessageFormat::AvroBinaryEncoding);
    if t.name != "kafka-to-bq" || !avro {
        return None;
    }
    let why = "flexrun gives Avro logical types their BigQuery types, where Google's template makes date a TIMESTAMP column (whose values then fail), reads timestamp-millis as microseconds and makes timestamp-micros and time-* INTEGER columns";
    let path = match (format, Src(p).schema_format()) {
        (MessageFormat::AvroBinaryEncoding, _) => Src(p).binary_avro_schema_path(),
        (_, SchemaFormat::SchemaRegistry) => None,
        _ => Src(p).confluent_avro_schema_path(),
    };
    let Some(path) = path else {
        return Some(format!("Avro mapping: {why}. With a Schema Registry the columns are not known here: before Google's template writes to a table flexrun created, check its DATE, TIME, TIMESTAMP and DATETIME columns"));
    };
    let cols = std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|text| crate::avro::WriterSchema::parse(&text).map_err(|e| e.to_string()))
        .and_then(|w| crate::avro::table::google_mapping_differences(&w).map_err(|e| e.to_string()));
    match cols {
        Ok(c) if c.is_empty() => None,
        Ok(c) => Some(format!("Avro mapping: {why}. A table flexrun created from {path} has {}: Google's template cannot write those columns as it writes them; let it create a new table (another outputTableSpec), or keep the job on flexrun", c.join(", "))),
        Err(e) => Some(format!("Avro mapping: {why}; {path} could not be read to name the columns ({e})")),
    }
}

/// Run `flexrun export`.
pub fn run(a: &ExportArgs) -> Result<()> {
    let l = launch(a)?;
    let update = l.update_options_command();
    match a.flags.format {
        ErrorFormat::Json => {
            let out = serde_json::json!({
                "gcloud": l.gcloud_command(),
                "update_options": update,
                "rest": { "method": "POST", "url": l.rest_url(), "body": l.rest_body() },
                "notes": l.notes,
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        ErrorFormat::Text => {
            println!("# Run the same job on Dataflow with Google's template:");
            println!("{}", l.gcloud_command());
            if let Some(u) = update {
                println!("\n# Then, with the JOB_ID gcloud printed (Dataflow takes these on a running job):\n{u}");
            }
            println!("\n# Or the REST launch: POST {}", l.rest_url());
            println!("{}", serde_json::to_string_pretty(&l.rest_body())?);
            for n in &l.notes {
                println!("# note: {n}");
            }
        }
    }
    Ok(())
}
