//! `flexrun dataflow jobs ...`: gcloud's job commands against the local control plane
//! (`crate::control`): list, describe, show, drain, cancel and update-options.
//!
//! A job is named by its id or its name. An unknown job, a finished job for a command
//! that needs a running one, and a refused option change exit with status 2.

use super::flags::{hint_in_range, ErrorFormat, JobFlags};
use crate::control::record::{self, JobRecord};
use crate::control::{request, OptionsUpdate, Request, Response};
use crate::usage;
use anyhow::Result;
use clap::{Args, Subcommand};
use std::path::PathBuf;

/// Where the jobs are, and how to print.
#[derive(Debug, Args, Clone)]
pub struct Where {
    /// Where job checkpoints live [env: FLEXRUN_CHECKPOINT_DIR; default ~/.local/state/flexrun/jobs].
    #[arg(long, env = "FLEXRUN_CHECKPOINT_DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// gcloud: the region (recorded; every local job is listed).
    #[arg(long)]
    pub region: Option<String>,
    /// text (gcloud's table) or json.
    #[arg(long, value_enum, default_value_t = ErrorFormat::Text)]
    pub format: ErrorFormat,
}

impl Where {
    fn root(&self) -> PathBuf {
        JobFlags { checkpoint_dir: self.checkpoint_dir.clone(), ..Default::default() }.checkpoint_root()
    }
}

/// A job named by id or name.
#[derive(Debug, Args)]
pub struct JobRef {
    /// The job id (YYYY-MM-DD_HH_MM_SS-N) or the job name.
    pub job: String,
    #[command(flatten)]
    pub at: Where,
}

/// Which jobs `list` shows.
#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
pub enum StatusFilter {
    /// Running or draining.
    Active,
    /// Finished, cancelled or failed.
    Terminated,
    /// Every job.
    All,
}

/// `flexrun dataflow jobs ...`
#[derive(Debug, Subcommand)]
pub enum JobsAction {
    /// List jobs (gcloud's columns).
    List {
        /// active, terminated or all.
        #[arg(long, value_enum, default_value_t = StatusFilter::All)]
        status: StatusFilter,
        /// Only jobs whose name contains this.
        #[arg(long)]
        filter: Option<String>,
        #[command(flatten)]
        at: Where,
    },
    /// Everything about a job: its record, and for a running job its workers and autoscaling events.
    Describe(JobRef),
    /// A short summary of a job.
    Show(JobRef),
    /// Finish in-flight data, then stop (exit 0), as SIGTERM does.
    Drain(JobRef),
    /// Stop at once; exactly-once holds on the next start.
    Cancel(JobRef),
    /// Change worker bounds or the utilization hint of a running job.
    UpdateOptions {
        #[command(flatten)]
        job: JobRef,
        /// New floor.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
        min_num_workers: Option<u32>,
        /// New ceiling.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
        max_num_workers: Option<u32>,
        /// New target CPU, 0.1 to 0.9.
        #[arg(long, value_parser = hint_in_range, conflicts_with = "unset_worker_utilization_hint")]
        worker_utilization_hint: Option<f64>,
        /// Back to the default hint (0.8).
        #[arg(long)]
        unset_worker_utilization_hint: bool,
    },
}

fn find(r: &JobRef) -> Result<JobRecord> {
    let root = r.at.root();
    record::find(&root, &r.job).ok_or_else(|| {
        usage(format!(
            "no job {:?} under {}: expected a job id or name that `flexrun dataflow jobs list` shows",
            r.job,
            root.display()
        ))
    })
}

async fn running(r: &JobRef, req: Request) -> Result<Response> {
    let rec = find(r)?;
    if !rec.state.is_active() {
        return Err(usage(format!("job {} ({}) is {}: it is no longer running", rec.id, rec.name, rec.state.as_str())));
    }
    let resp = request(&rec.socket, &req).await?;
    match &resp.error {
        Some(e) => Err(usage(format!("job {}: {e}", rec.id))),
        None => Ok(resp),
    }
}

/// Run a `flexrun dataflow jobs` command.
pub async fn run(action: JobsAction) -> Result<()> {
    match action {
        JobsAction::List { status, filter, at } => list(status, filter.as_deref(), &at),
        JobsAction::Describe(r) => {
            let rec = find(&r)?;
            let status = if rec.state.is_active() {
                request(&rec.socket, &Request::Describe).await.ok().and_then(|x| x.status)
            } else {
                None
            };
            let out = serde_json::json!({ "job": rec, "status": status });
            match r.at.format {
                ErrorFormat::Json => println!("{}", serde_json::to_string_pretty(&out)?),
                ErrorFormat::Text => print!("{}", serde_yaml::to_string(&out)?),
            }
            Ok(())
        }
        JobsAction::Show(r) => {
            let rec = find(&r)?;
            println!(
                "id: {}\nname: {}\ntype: Streaming\ntemplate: {}\nstate: {}\ncreateTime: {}",
                rec.id,
                rec.name,
                rec.template,
                rec.state.as_str(),
                rec.create_time
            );
            if let Some(why) = &rec.reason {
                println!("reason: {why}");
            }
            Ok(())
        }
        JobsAction::Drain(r) => {
            let resp = running(&r, Request::Drain).await?;
            println!("Started draining job [{}]", resp.record.map(|x| x.id).unwrap_or_default());
            Ok(())
        }
        JobsAction::Cancel(r) => {
            let resp = running(&r, Request::Cancel).await?;
            println!("Cancelled job [{}]", resp.record.map(|x| x.id).unwrap_or_default());
            Ok(())
        }
        JobsAction::UpdateOptions {
            job,
            min_num_workers,
            max_num_workers,
            worker_utilization_hint,
            unset_worker_utilization_hint,
        } => {
            let u = OptionsUpdate {
                min_workers: min_num_workers,
                max_workers: max_num_workers,
                utilization_hint: worker_utilization_hint,
                unset_utilization_hint: unset_worker_utilization_hint,
            };
            if u == OptionsUpdate::default() {
                return Err(usage("update-options needs --min-num-workers, --max-num-workers, --worker-utilization-hint or --unset-worker-utilization-hint"));
            }
            let resp = running(&job, Request::UpdateOptions(u)).await?;
            println!(
                "Updated options of job [{}]; the autoscaler applies them at its next decision",
                resp.record.map(|x| x.id).unwrap_or_default()
            );
            Ok(())
        }
    }
}

fn list(status: StatusFilter, filter: Option<&str>, at: &Where) -> Result<()> {
    let jobs: Vec<JobRecord> = record::list(&at.root())
        .into_iter()
        .filter(|r| match status {
            StatusFilter::Active => r.state.is_active(),
            StatusFilter::Terminated => !r.state.is_active(),
            StatusFilter::All => true,
        })
        .filter(|r| filter.is_none_or(|f| r.name.contains(f)))
        .collect();
    if at.format == ErrorFormat::Json {
        println!("{}", serde_json::to_string_pretty(&jobs)?);
        return Ok(());
    }
    println!("{:<28} {:<24} {:<10} {:<20} {:<10} REGION", "JOB_ID", "NAME", "TYPE", "CREATION_TIME", "STATE");
    for r in jobs {
        let created = r.create_time.replace('T', " ").trim_end_matches('Z').to_string();
        println!(
            "{:<28} {:<24} {:<10} {:<20} {:<10} {}",
            r.id,
            r.name,
            "Streaming",
            created,
            r.state.short(),
            r.region
        );
    }
    Ok(())
}
