//! A job of several topics (`readBootstrapServerAndTopic=host:port;a|b|c` or
//! `host:port;/regex/`): one kafka-to-bq pipeline per topic, side by side in this process.
//!
//! Each topic's pipeline is a whole job of its own ([`super::job::run`]) under the name
//! `<job>.<topic>`: its own checkpoint directory, offset and commit logs, write streams
//! and table ([`super::setup::topics::TopicRoutes`]), so exactly-once holds per topic-partition
//! exactly as for one topic, and a restart resumes every topic where its logs leave it.
//! With a pattern, the broker's topics are listed every
//! [`crate::kafka::metadata::PARTITION_DISCOVERY_INTERVAL`] and a topic that starts to match gets
//! its pipeline while the job runs; a failed listing is tried again while the running
//! pipelines go on. A topic that joins a job already started (found by the pattern,
//! created while the job was down, added to the list) begins at its earliest offset
//! ([`super::setup::layout`]). A drain or cancel reaches every pipeline; when one fails, the
//! others are drained and the job fails naming the topic.
//!
//! Every pipeline runs on the job's one pool of workers ([`super::job_pool`]): the job
//! autoscales as a whole, and its page shows each topic's stages and backlog.

use super::job::{run, RunReport};
use super::job_pool::JobPool;
use super::setup::config::KafkaToBqConfig;
use super::setup::layout;
use super::setup::topics::Topics;
use crate::bigquery::Endpoints;
use anyhow::{anyhow, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What a job of several topics did: each topic's report, and the job's pool.
pub struct TopicsReport {
    /// By topic.
    pub topics: BTreeMap<String, RunReport>,
    /// Wall time of the whole run.
    pub elapsed: Duration,
    /// The job's autoscaling decisions that changed the count or the rationale.
    pub decisions: Vec<flexrun_autoscaler::Decision>,
    /// The job's workers at the end.
    pub workers: u32,
}

/// One topic's running pipeline.
struct Running {
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<RunReport>>,
}

/// Run one pipeline per topic until every one has ended (a run bounded by
/// `--stop-when-caught-up` or `--idle-timeout`, or a fixed list of topics), or until the
/// job is drained or cancelled.
pub async fn run_topics(
    cfg: KafkaToBqConfig,
    root: &Path,
    endpoints: Option<Endpoints>,
    cancel: watch::Sender<bool>,
    web: Option<flexrun_web::JobRegistry>,
    control: Option<std::sync::Arc<crate::control::Control>>,
) -> Result<TopicsReport> {
    let started = Instant::now();
    let listing = cfg.source.metadata()?;
    let mut pool = JobPool::new(&cfg, started, web.clone(), control);
    let mut known = Joined::open(root, &cfg.job_name, pool.shared())?;
    let pattern = matches!(cfg.topics, Topics::Pattern(_));
    let bounded = cfg.run.stop_when_caught_up || cfg.run.idle_timeout.is_some();
    let mut stop = cancel.subscribe();
    let (mut running, mut done) = (BTreeMap::<String, Running>::new(), BTreeMap::new());
    let mut failed: Option<anyhow::Error> = None;
    let mut listed: Option<Instant> = None;
    loop {
        let due = listed.is_none_or(|at| at.elapsed() >= crate::kafka::metadata::PARTITION_DISCOVERY_INTERVAL);
        if !*stop.borrow() && failed.is_none() && due {
            listed = Some(Instant::now());
            let existing = match list(&listing, pattern, &cfg, &mut known).await {
                Ok(Some(t)) => t,
                Ok(None) => continue,
                Err(e) => {
                    // The broker cannot list topics: drain what runs, then fail (issue 62,
                    // item 11: returning here left the pipelines running unreaped).
                    tracing::error!(job = %cfg.job_name, error = %e, "the broker's topics cannot be listed: draining the running topics, then the job ends");
                    running.values().for_each(|r| {
                        r.stop.send_replace(true);
                    });
                    failed = Some(e);
                    continue;
                }
            };
            let new: Vec<String> = cfg
                .topics
                .select(&existing)
                .into_iter()
                .filter(|t| !running.contains_key(t) && !done.contains_key(t))
                .collect();
            let configs: Vec<KafkaToBqConfig> = new.iter().map(|t| known.start(&cfg, t)).collect();
            known.first_dispositions(&cfg, endpoints.as_ref(), &configs).await?;
            // Durable before any of them reads.
            known.listed(root, &cfg.job_name)?;
            for (t, c) in new.into_iter().zip(configs) {
                running.insert(t, spawn(c, root, endpoints.clone(), web.clone()));
            }
            if pattern && running.is_empty() && done.is_empty() {
                if bounded {
                    return Err(anyhow!("readBootstrapServerAndTopic: no topic matches {}", cfg.source.topic));
                }
                tracing::warn!(job = %cfg.job_name, pattern = %cfg.source.topic, "no topic matches yet; waiting for one");
            }
        }
        reap(&mut running, &mut done, &mut failed, &cfg.job_name).await?;
        pool.tick();
        let ended = running.is_empty() && (failed.is_some() || *stop.borrow() || !pattern || bounded);
        if ended && (!done.is_empty() || failed.is_some() || *stop.borrow()) {
            break;
        }
        tokio::select! {
            _ = stop.changed() => running.values().for_each(|r| { r.stop.send_replace(true); }),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
    let (decisions, workers) = pool.finish(failed.is_none());
    match failed {
        Some(e) => Err(e),
        None => Ok(TopicsReport { topics: done, elapsed: started.elapsed(), decisions, workers }),
    }
}

/// How many listings in a row may fail before a pattern job gives up (its running
/// pipelines are drained first): a broker that cannot list topics for this long is down.
const LISTING_ATTEMPTS: u32 = 12;

/// The broker's topics (a pattern job only; a list needs none). A failed listing is
/// retried at the next interval while the running pipelines go on; only
/// [`LISTING_ATTEMPTS`] failures in a row end the job. None: this interval's listing failed.
async fn list(
    listing: &crate::kafka::Metadata,
    pattern: bool,
    cfg: &KafkaToBqConfig,
    known: &mut Joined,
) -> Result<Option<Vec<String>>> {
    if !pattern {
        return Ok(Some(Vec::new()));
    }
    // The failpoint stands in for a broker that cannot answer a listing for a while.
    #[cfg(feature = "failpoints")]
    let injected = ::fail::eval("fan_out::list", |_| ()).is_some();
    #[cfg(not(feature = "failpoints"))]
    let injected = false;
    let listed = match injected {
        true => Err(crate::kafka::KafkaError::Config("the listing failed (failpoint fan_out::list)".into())),
        false => listing.topics().await,
    };
    match listed {
        Ok(t) => {
            known.failed_listings = 0;
            Ok(Some(t))
        }
        Err(e) if known.failed_listings + 1 < LISTING_ATTEMPTS => {
            known.failed_listings += 1;
            tracing::warn!(job = %cfg.job_name, error = %e, attempt = known.failed_listings, "listing the broker's topics failed; the running topics go on and the listing is tried again");
            Ok(None)
        }
        Err(e) => Err(anyhow!("listing the broker's topics failed {LISTING_ATTEMPTS} times in a row: {e}")),
    }
}

/// Collect the pipelines that ended; the first failure drains the others.
async fn reap(
    running: &mut BTreeMap<String, Running>,
    done: &mut BTreeMap<String, RunReport>,
    failed: &mut Option<anyhow::Error>,
    job: &str,
) -> Result<()> {
    for t in running.iter().filter(|(_, r)| r.task.is_finished()).map(|(t, _)| t.clone()).collect::<Vec<_>>() {
        let r = running.remove(&t).expect("listed above").task.await.map_err(|e| anyhow!("{e}"))?;
        match r {
            Ok(report) => {
                done.insert(t, report);
            }
            Err(e) if failed.is_none() => {
                tracing::error!(job, topic = %t, error = %format!("{e:#}"), "a topic's pipeline failed: draining the others");
                running.values().for_each(|r| {
                    r.stop.send_replace(true);
                });
                *failed = Some(e.context(format!("topic {t}")));
            }
            Err(e) => tracing::error!(job, topic = %t, error = %format!("{e:#}"), "a topic's pipeline failed"),
        }
    }
    Ok(())
}

/// The topics the job has started, with each one's start rule ([`layout`]).
struct Joined {
    known: Option<layout::Known>,
    failed_listings: u32,
    workers: std::sync::Arc<crate::scaling::SharedWorkers>,
    /// This is the job's first start, and its first pipelines have not started yet:
    /// `writeDisposition` is still to be applied.
    dispose: bool,
}

impl Joined {
    /// Read the job's known topics, first moving a one-topic checkpoint into the list
    /// layout (the job's lock is held by the caller).
    fn open(root: &Path, job: &str, workers: std::sync::Arc<crate::scaling::SharedWorkers>) -> Result<Joined> {
        let moved = layout::to_list(root, job).with_context(|| format!("moving job {job}'s checkpoint"))?;
        let mut known = layout::read_known(root, job).with_context(|| format!("reading job {job}'s known topics"))?;
        if let Some(t) = moved {
            known.get_or_insert_with(layout::Known::new).entry(t).or_insert(layout::StartRule::Initial);
            layout::write_known(root, job, known.as_ref().expect("set")).context("writing the known topics")?;
        }
        let dispose = known.is_none();
        Ok(Joined { known, failed_listings: 0, workers, dispose })
    }

    /// The configuration of `topic`'s pipeline, its start rule recorded durably first.
    /// A topic that joins a started job begins at its earliest offset, whatever its
    /// consumer group has committed (issue 62, item 11), and appends to its table.
    fn start(&mut self, cfg: &KafkaToBqConfig, topic: &str) -> KafkaToBqConfig {
        let rule = layout::rule_for(self.known.as_ref(), topic);
        let mut c = cfg.for_topic(topic);
        c.shared = Some(self.workers.clone());
        if rule == layout::StartRule::Earliest {
            c.source.start_earliest = true;
            c.source.group_offsets = false;
        }
        let own_table_at_first_start = self.dispose && c.dynamic.is_some() && rule == layout::StartRule::Initial;
        if !own_table_at_first_start {
            // Applied by the job, once per table ([`Joined::first_dispositions`]), or not
            // at all: a restart, or a topic that joins later, appends.
            c.dispositions.write = super::setup::format::WriteDisposition::Append;
        }
        let fresh = self.known.as_ref().is_none_or(|k| !k.contains_key(topic));
        tracing::info!(job = %cfg.job_name, topic, ?rule, fresh, "starting the topic's pipeline");
        self.known.get_or_insert_with(layout::Known::new).insert(topic.to_string(), rule);
        c
    }

    /// At the job's first start, before its first pipelines: `writeDisposition` on each
    /// of their tables once (per-record tables excepted: each topic's pipeline applies it
    /// to its own).
    async fn first_dispositions(
        &mut self,
        cfg: &KafkaToBqConfig,
        endpoints: Option<&Endpoints>,
        configs: &[KafkaToBqConfig],
    ) -> Result<()> {
        if !std::mem::take(&mut self.dispose) || cfg.dynamic.is_some() {
            return Ok(());
        }
        let Some(ep) = endpoints else { return Ok(()) };
        let tables: BTreeMap<String, &crate::bigquery::TableRef> =
            configs.iter().map(|c| (c.table.to_string(), &c.table)).collect();
        for t in tables.values() {
            super::setup::table::apply_write_disposition_once(cfg, ep, t).await?;
        }
        Ok(())
    }

    /// After a listing: make the known topics durable. From now on a topic the job has
    /// not seen joins a job that has started, and begins at its earliest offset.
    fn listed(&mut self, root: &Path, job: &str) -> Result<()> {
        let k = self.known.get_or_insert_with(layout::Known::new);
        layout::write_known(root, job, k).with_context(|| format!("writing job {job}'s known topics"))
    }
}

fn spawn(
    cfg: KafkaToBqConfig,
    root: &Path,
    endpoints: Option<Endpoints>,
    web: Option<flexrun_web::JobRegistry>,
) -> Running {
    let (stop, _) = watch::channel(false);
    let (tx, root) = (stop.clone(), root.to_path_buf());
    let task = tokio::spawn(async move { run(cfg, &root, endpoints, tx, web, None).await });
    Running { stop, task }
}
