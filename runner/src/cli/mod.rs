//! The `flexrun` command line.
//!
//! ```text
//! flexrun --template kafka-to-bq --parameters k=v,k=v [run flags]
//! flexrun run --template kafka-to-bq --parameters ...            (same thing)
//! flexrun dataflow flex-template run JOB --template-file-gcs-location=gs://dataflow-templates-REGION/latest/flex/Kafka_to_BigQuery_Flex --parameters ...
//! flexrun dataflow jobs list | describe | show | drain | cancel | update-options JOB
//! flexrun templates list | describe NAME
//! flexrun estimate --throughput 100MiB/s [--baseline FILE]
//! flexrun simulate --qps 1000000 --max-workers 120 [--series F.csv] [--plot F.svg] [--sweep K=V1,V2]
//! flexrun export --template kafka-to-bq --parameters ... [--throughput 200MiB/s]
//! flexrun calibrate [--output baseline.yaml]
//! flexrun capacity --bootstrap-server HOST:PORT --sizes 100,1KiB,4KiB
//! flexrun web --addr 127.0.0.1:8080
//! flexrun dlq replay --job JOB [--parameters k=v] [--where SQL] [--dry-run]
//! flexrun local create-topic | create-table | produce | count      (local stack helpers)
//! ```
//! Bad flags and bad parameters exit with status 2 before anything connects.
//!
//! # Layout
//! One file per subcommand ([`run`], [`jobs`], [`templates`], [`estimate`], [`export`], [`simulate`]
//! and its [`sweep`],
//! [`sizing`] for calibrate and capacity, [`web`], [`local`], [`dlq`]); [`flags`] holds the flags
//! the run forms share and the value parsers; [`ui`] the progress bars and signals;
//! [`gcs_files`] fetches the `gs://` file parameters before a run or a replay reads them.
//! [`dispatch`] maps a parsed command line to its subcommand.

pub mod bill_flags;
pub mod dlq;
pub mod estimate;
pub mod export;
pub mod flags;
pub mod gcs_files;
pub mod gcs_model;
pub mod jobs;
pub mod local;
pub mod run;
pub mod simulate;
pub mod sizing;
pub mod sweep;
pub mod templates;
pub mod ui;
pub mod web;

pub use flags::{Format, JobFlags, ScalingFlags};

use crate::usage;
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

/// Runs Google's Dataflow templates for real on this machine.
#[derive(Debug, Parser)]
#[command(name = "flexrun", version, args_conflicts_with_subcommands = true, disable_help_subcommand = true)]
pub struct Cli {
    /// A subcommand; without one, flexrun runs `--template`.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Run flags for the no-subcommand form.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a template (the same as giving --template without a subcommand).
    Run(Box<RunArgs>),
    /// gcloud-compatible entry point: `flexrun dataflow flex-template run JOB ...`.
    Dataflow {
        /// `flex-template run` or `jobs ...`.
        #[command(subcommand)]
        group: DataflowGroup,
    },
    /// List or describe the built-in templates.
    Templates {
        /// What to show.
        #[command(subcommand)]
        action: templates::TemplatesAction,
    },
    /// Workers, Streaming Engine compute units and cost for a throughput, from a baseline.
    Estimate(Box<estimate::EstimateArgs>),
    /// The same job at cloud scale in virtual time, with the real autoscaler in the loop.
    Simulate(Box<crate::cli::simulate::SimulateArgs>),
    /// Print the gcloud command and REST body that run the same job on Dataflow.
    Export(Box<export::ExportArgs>),
    /// Measure what one core of this machine carries through kafka-to-bq's processing path; write a baseline.
    Calibrate(crate::cli::sizing::CalibrateArgs),
    /// Find where a Kafka setup saturates: binary search on the offered rate per message size.
    Capacity(crate::cli::sizing::CapacityArgs),
    /// Serve the cost-estimate page, job pages and /metrics.
    Web(web::WebArgs),
    /// Dead letters: `replay` sends them back through the job's mapping, exactly once.
    Dlq {
        /// What to do.
        #[command(subcommand)]
        action: dlq::DlqAction,
    },
    /// Helpers for the local stack (topics, tables, sample data, counts).
    Local {
        /// What to do.
        #[command(subcommand)]
        action: local::LocalAction,
    },
}

/// `flexrun dataflow ...`
#[derive(Debug, Subcommand)]
pub enum DataflowGroup {
    /// `flexrun dataflow jobs list|describe|show|drain|cancel|update-options` (local jobs).
    Jobs {
        /// What to do.
        #[command(subcommand)]
        action: jobs::JobsAction,
    },
    /// `flexrun dataflow flex-template ...`
    #[command(name = "flex-template")]
    FlexTemplate {
        /// Only `run` exists.
        #[command(subcommand)]
        action: FlexTemplateAction,
    },
}

/// `flexrun dataflow flex-template ...`
#[derive(Debug, Subcommand)]
pub enum FlexTemplateAction {
    /// Run a flex template, as `gcloud dataflow flex-template run` does.
    Run(Box<GcloudRunArgs>),
}

/// The arguments of `gcloud dataflow flex-template run`.
#[derive(Debug, Args)]
pub struct GcloudRunArgs {
    /// The job name (checkpoints are kept under it; a restart resumes).
    pub job_name: String,
    /// The template spec path, e.g. gs://dataflow-templates-us-central1/latest/flex/Kafka_to_BigQuery_Flex.
    #[arg(long)]
    pub template_file_gcs_location: String,
    /// Template parameters as gcloud takes them: k=v,k=v (or ^;^k=v;k=v).
    #[arg(long)]
    pub parameters: Vec<String>,
    /// gcloud and flexrun flags shared with `flexrun run`.
    #[command(flatten)]
    pub flags: JobFlags,
}

/// `flexrun run` / no-subcommand arguments.
#[derive(Debug, Args, Default)]
pub struct RunArgs {
    /// The template to run (see `flexrun templates list`).
    #[arg(long)]
    pub template: Option<String>,
    /// Template parameters: k=v,k=v (or ^;^k=v;k=v); may be repeated.
    #[arg(long)]
    pub parameters: Vec<String>,
    /// The job name (default: the template name). A restart with the same name resumes.
    #[arg(long)]
    pub job_name: Option<String>,
    /// Shared flags.
    #[command(flatten)]
    pub flags: JobFlags,
}

/// Run `cli` to completion on a new multi-threaded runtime. It lives in the library, not
/// the binary, so that the futures of every command are compiled once, here: a binary
/// that polled [`dispatch`] itself compiled its whole call tree again, about 80 s of a
/// fresh demo's build (BENCHMARKS.md, "A fresh demo").
pub fn run(cli: Cli) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the tokio runtime")?;
    rt.block_on(dispatch(cli))
}

/// Run the subcommand `cli` names.
pub async fn dispatch(cli: Cli) -> Result<()> {
    match cli.command {
        None => {
            let t = cli.run.template.as_deref().ok_or_else(|| usage("nothing to do: give --template NAME --parameters k=v,... (see `flexrun templates list`) or a subcommand (see --help)"))?;
            let template = flexrun_templates::find(t).ok_or_else(|| templates::unknown_template(t))?;
            let job = cli.run.job_name.clone().unwrap_or_else(|| template.name.clone());
            run::run_template(template, &job, &cli.run.parameters, &cli.run.flags).await
        }
        Some(Command::Run(args)) => {
            let t = args
                .template
                .as_deref()
                .ok_or_else(|| usage("flexrun run needs --template NAME (see `flexrun templates list`)"))?;
            let template = flexrun_templates::find(t).ok_or_else(|| templates::unknown_template(t))?;
            let job = args.job_name.clone().unwrap_or_else(|| template.name.clone());
            run::run_template(template, &job, &args.parameters, &args.flags).await
        }
        Some(Command::Dataflow { group: DataflowGroup::FlexTemplate { action: FlexTemplateAction::Run(a) } }) => {
            let template = flexrun_templates::find_by_gcs_path(&a.template_file_gcs_location).ok_or_else(|| {
                usage(format!(
                    "--template-file-gcs-location={}: not a template flexrun has built in; expected gs://dataflow-templates-REGION/VERSION/flex/ID with ID one of: {}",
                    a.template_file_gcs_location,
                    flexrun_templates::builtin().iter().filter_map(|t| t.google_template_id.clone()).collect::<Vec<_>>().join(", ")
                ))
            })?;
            run::run_template(template, &a.job_name, &a.parameters, &a.flags).await
        }
        Some(Command::Dataflow { group: DataflowGroup::Jobs { action } }) => jobs::run(action).await,
        Some(Command::Templates { action }) => templates::run(action),
        Some(Command::Local { action }) => local::run(action).await,
        Some(Command::Dlq { action }) => dlq::run(action).await,
        Some(Command::Estimate(a)) => estimate::run(*a),
        Some(Command::Export(a)) => export::run(&a),
        Some(Command::Simulate(a)) if !a.sweep.is_empty() => sweep::run(&a),
        Some(Command::Simulate(a)) => simulate::run(&a),
        Some(Command::Calibrate(a)) => sizing::calibrate_cmd(&a),
        Some(Command::Capacity(a)) => sizing::capacity_cmd(&a).await,
        Some(Command::Web(a)) => web::run(&a).await,
    }
}

#[cfg(test)]
mod tests {
    use super::flags::*;
    use super::*;
    use clap::CommandFactory;
    use flexrun_estimator::parse_duration;
    use std::time::Duration;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn gcloud_form_parses() {
        let cli = Cli::try_parse_from([
            "flexrun",
            "dataflow",
            "flex-template",
            "run",
            "my-job",
            "--template-file-gcs-location=gs://dataflow-templates-us-central1/latest/flex/Kafka_to_BigQuery_Flex",
            "--parameters",
            "readBootstrapServerAndTopic=h:1;t,messageFormat=JSON",
            "--enable-streaming-engine",
            "--additional-experiments=streaming_mode_at_least_once",
            "--num-workers=2",
            "--max-workers=10",
            "--worker-machine-type=e2-standard-2",
            "--project=p",
            "--region=us-central1",
        ])
        .unwrap();
        let Some(Command::Dataflow { group: DataflowGroup::FlexTemplate { action: FlexTemplateAction::Run(a) } }) =
            cli.command
        else {
            panic!()
        };
        assert_eq!(a.job_name, "my-job");
        assert!(a.flags.at_least_once_experiment());
        let notes = a.flags.notes().join("\n");
        assert_eq!(a.flags.pool().unwrap().num_workers, 2);
        assert_eq!(a.flags.pool().unwrap().max_workers, 10);
        for f in ["--worker-machine-type", "--project", "--region", "--enable-streaming-engine"] {
            assert!(notes.contains(f), "{f} not reported: {notes}");
        }
    }

    #[test]
    fn top_level_form_parses_and_bad_flags_fail() {
        let cli = Cli::try_parse_from([
            "flexrun",
            "--template",
            "kafka-to-bq",
            "--parameters",
            "a=b",
            "--idle-timeout",
            "500ms",
        ])
        .unwrap();
        assert_eq!(cli.run.template.as_deref(), Some("kafka-to-bq"));
        assert_eq!(cli.run.flags.idle_timeout, Some(Duration::from_millis(500)));
        let e = Cli::try_parse_from(["flexrun", "--template", "x", "--idle-timeout", "soon"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("invalid duration"), "{e}");
        for bad in ["0", "99999", "10000001", "ten"] {
            let e = Cli::try_parse_from(["flexrun", "--template", "x", "--append-request-bytes", bad]).unwrap_err();
            assert_eq!(e.exit_code(), 2, "--append-request-bytes {bad}");
            assert!(e.to_string().contains("append-request-bytes"), "{e}");
        }
        let e = Cli::try_parse_from(["flexrun", "--template", "x", "--batch-rows", "0"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let e = Cli::try_parse_from(["flexrun", "--no-such-flag"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn pool_flags_are_checked() {
        let p = |args: &[&str]| {
            let mut v = vec!["flexrun", "--template", "x"];
            v.extend_from_slice(args);
            Cli::try_parse_from(v)
        };
        assert_eq!(p(&["--worker-utilization-hint", "0.95"]).unwrap_err().exit_code(), 2);
        assert_eq!(p(&["--autoscaling-algorithm", "FAST"]).unwrap_err().exit_code(), 2);
        assert_eq!(p(&["--autoscaling-policy", "ds3"]).unwrap_err().exit_code(), 2);
        assert!(p(&["--worker-capacity", "lots"])
            .unwrap_err()
            .to_string()
            .contains("expected a positive number with a unit"));
        assert_eq!(p(&["--num-workers", "0"]).unwrap_err().exit_code(), 2);
        let cli = p(&["--num-workers", "9", "--max-workers", "4"]).unwrap();
        assert!(cli.run.flags.pool().unwrap_err().contains("outside"));
        let cli =
            p(&["--worker-capacity", "2MB/s", "--autoscaling-policy", "ds2", "--autoscaling-interval", "3s"]).unwrap();
        let pool = cli.run.flags.pool().unwrap();
        assert_eq!(pool.policy, flexrun_autoscaler::PolicyKind::Ds2);
        assert_eq!(pool.interval, Duration::from_secs(3));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn sink_flags_must_agree() {
        let f = JobFlags { sink: SinkArg::Stats, ..Default::default() };
        assert!(f.sink().unwrap_err().contains("--schema-file"));
        let f = JobFlags { schema_file: Some("x".into()), ..Default::default() };
        assert!(f.sink().is_err());
    }
}
