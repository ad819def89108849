//! `flexrun dlq replay`: a kafka-to-bq job's dead letters back into its table, exactly
//! once (see [`crate::kafka_to_bq::replay`]).
//!
//! The job's recorded parameters say where the table, the dead-letter table, the
//! format and the UDF are; `--parameters` overrides some of them (a fixed UDF, most
//! often) or gives them all for a job this machine never ran.

use super::flags::JobFlags;
use super::run::{kafka_to_bq_config, parse_pairs, resolve};
use crate::kafka_to_bq::replay::{self, ReplayOptions, ReplayReport};
use crate::kafka_to_bq::setup::config::KafkaToBqConfig;
use crate::kafka_to_bq::setup::topics::Topics;
use crate::usage;
use anyhow::Result;
use clap::{Args, Subcommand};

/// `flexrun dlq ...`
#[derive(Debug, Subcommand)]
pub enum DlqAction {
    /// Replay dead-letter rows through the job's mapping into its table, exactly once;
    /// replayed rows are recorded in `<dead-letter table>_replayed` and skipped next time.
    Replay(Box<ReplayArgs>),
}

/// `flexrun dlq replay` arguments.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The kafka-to-bq job (name or id) whose dead letters to replay; its recorded
    /// parameters are used, and its checkpoint directory keeps the replay's progress.
    #[arg(long)]
    pub job: String,
    /// Parameters that override the recorded ones (k=v,k=v), e.g. a fixed
    /// javascriptTextTransformGcsPath; for a job not run here, all of them.
    #[arg(long)]
    pub parameters: Vec<String>,
    /// Replay only the dead-letter rows this SQL condition selects (on the columns
    /// timestamp, payloadString, payloadBytes, errorMessage, stacktrace).
    #[arg(long = "where", value_name = "SQL")]
    pub where_sql: Option<String>,
    /// Map every row and report what a replay would do; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also replay the dead-letter rows that name no job (written by Google's template or
    /// an older flexrun) whose record came from this topic. A replay takes only its own
    /// job's rows; those that name none are left alone without this.
    #[arg(long, value_name = "TOPIC")]
    pub topic: Option<String>,
    /// Shared flags (checkpoint directory, BigQuery endpoints, --batch-rows).
    #[command(flatten)]
    pub flags: JobFlags,
}

/// Run `flexrun dlq ...`.
pub async fn run(action: DlqAction) -> Result<()> {
    match action {
        DlqAction::Replay(a) => replay_cmd(&a).await,
    }
}

/// The recorded parameters with `overrides` in place of the same names.
fn merged(recorded: Vec<(String, String)>, overrides: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> =
        recorded.into_iter().filter(|(k, _)| !overrides.iter().any(|(o, _)| o == k)).collect();
    out.extend(overrides);
    out
}

async fn replay_cmd(a: &ReplayArgs) -> Result<()> {
    let root = a.flags.checkpoint_root();
    let overrides = parse_pairs(&a.parameters)?;
    let (job, recorded) = match crate::control::record::find(&root, &a.job) {
        Some(r) if r.template != "kafka-to-bq" => {
            return Err(usage(format!("job {} runs {}; dlq replay is for kafka-to-bq jobs", r.name, r.template)))
        }
        Some(r) => (r.name, r.parameters),
        None if !overrides.is_empty() => (a.job.clone(), Vec::new()),
        None => {
            return Err(usage(format!(
                "no job {:?} under {}: expected a kafka-to-bq job that `flexrun dataflow jobs list` shows, or its parameters in --parameters",
                a.job,
                root.display()
            )))
        }
    };
    if recorded.iter().any(|(_, v)| v == crate::control::record::REDACTED) {
        eprintln!("note: the job's credentials were recorded as [redacted]; the replay reads only BigQuery, so they are not needed");
    }
    let template = flexrun_templates::find("kafka-to-bq").expect("kafka-to-bq is built in");
    let endpoint = a.flags.storage_endpoint.as_deref();
    let pairs = super::gcs_files::fetch(merged(recorded, overrides), &root, &job, endpoint).await?;
    let resolved = resolve(template, &pairs, &a.flags)?;
    let (cfg, endpoints) = kafka_to_bq_config(&resolved, &job, &a.flags)?;
    let ep = endpoints.ok_or_else(|| usage("dlq replay writes to BigQuery: drop --sink stats"))?;
    let several = cfg.topics.is_several();
    for (name, cfg) in replays(cfg, &root)? {
        let opts = options_for(a, &cfg, several);
        let r = match replay::run(cfg, &root, ep.clone(), opts).await {
            Err(e) if e.downcast_ref::<replay::BadWhere>().is_some() => return Err(usage(e.to_string())),
            r => r?,
        };
        print!("{}", render(&name, a.dry_run, &r));
    }
    Ok(())
}

/// The replays a job's dead letters need: one for a job of one topic; for a job of
/// several, one per topic (each topic's rows into that topic's table, with the topic's
/// own replay directory), in the topics the job has started. Every row names its job and
/// topic, so one dead-letter table may serve them all (and other jobs too).
fn replays(cfg: KafkaToBqConfig, root: &std::path::Path) -> Result<Vec<(String, KafkaToBqConfig)>> {
    if !cfg.topics.is_several() {
        return Ok(vec![(cfg.job_name.clone(), cfg)]);
    }
    let known = crate::kafka_to_bq::setup::layout::read_known(root, &cfg.job_name)?.unwrap_or_default();
    let topics: Vec<String> = match &cfg.topics {
        Topics::List(ts) => ts.clone(),
        _ => known.keys().cloned().collect(),
    };
    Ok(topics.iter().map(|t| cfg.for_topic(t)).map(|c| (c.job_name.clone(), c)).collect())
}

/// The options of one topic's replay: `--topic` takes the rows that name no job into
/// the replay of that topic only (a job of one topic: its one replay).
fn options_for(a: &ReplayArgs, cfg: &KafkaToBqConfig, several: bool) -> ReplayOptions {
    let unnamed_topic = a.topic.clone().filter(|t| !several || *t == cfg.source.topic);
    ReplayOptions { where_sql: a.where_sql.clone(), dry_run: a.dry_run, unnamed_topic }
}

/// The report, as printed.
pub fn render(job: &str, dry_run: bool, r: &ReplayReport) -> String {
    let verb = if dry_run { "would replay" } else { "replayed" };
    let mut s = format!("dlq replay of job {job}{}\n", if dry_run { " (dry run: nothing written)" } else { "" });
    if r.resumed {
        s.push_str("  finished the replay an earlier run left unfinished\n");
    }
    if let Some(b) = r.replayed_batch {
        s.push_str(&format!(
            "  batch {b} was logged before a crash and sent again ({} request(s) answered ALREADY_EXISTS)\n",
            r.already_existed
        ));
    }
    s.push_str(&format!("  dead-letter rows selected: {}\n", r.selected));
    if r.other_jobs + r.other_topics > 0 {
        s.push_str(&format!(
            "  rows of other jobs left alone: {}; of this job's other topics: {}\n",
            r.other_jobs, r.other_topics
        ));
    }
    if r.unnamed > 0 {
        s.push_str(&format!(
            "  rows that name no job, left alone: {} (--topic TOPIC replays those of one topic)\n",
            r.unnamed
        ));
    }
    s.push_str(&format!("  already replayed (skipped): {}\n", r.already_replayed));
    s.push_str(&format!("  {verb} into the table: {}\n", r.written));
    s.push_str(&format!("  dropped by the UDF (marked replayed): {}\n", r.dropped));
    s.push_str(&format!("  still failing (left in the dead-letter table): {}\n", r.failing.len()));
    for (k, why) in r.failing.iter().take(5) {
        s.push_str(&format!("    {k}: {why}\n"));
    }
    if r.failing.len() > 5 {
        s.push_str(&format!("    ... and {} more\n", r.failing.len() - 5));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_replace_recorded_parameters_of_the_same_name() {
        let rec = vec![("a".to_string(), "1".to_string()), ("b".to_string(), "2".to_string())];
        let got = merged(rec, vec![("b".into(), "3".into()), ("c".into(), "4".into())]);
        assert_eq!(got, vec![("a".into(), "1".into()), ("b".into(), "3".into()), ("c".into(), "4".into())]);
    }

    #[test]
    fn the_report_names_every_count_and_the_first_failures() {
        let r = ReplayReport {
            selected: 9,
            already_replayed: 2,
            written: 3,
            dropped: 1,
            failing: (0..7).map(|i| (format!("kafka:t:0:{i}"), "bad".to_string())).collect(),
            replayed_batch: Some(4),
            already_existed: 1,
            ..Default::default()
        };
        let s = render("j", false, &r);
        for want in [
            "selected: 9",
            "already replayed (skipped): 2",
            "replayed into the table: 3",
            "dropped by the UDF (marked replayed): 1",
            "still failing (left in the dead-letter table): 7",
            "kafka:t:0:4: bad",
            "and 2 more",
            "batch 4 was logged before a crash",
        ] {
            assert!(s.contains(want), "{want:?} missing from\n{s}");
        }
    }
}
