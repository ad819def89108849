//! A job of several topics (`readBootstrapServerAndTopic=host:port;a|b|c` or
//! `host:port;/regex/`): one kafka-to-bq pipeline per topic, side by side in this process.
//!
//! Each topic's pipeline is a whole job of its own ([`super::job::run`]) under the name
//! `<job>.<topic>`: its own checkpoint directory, offset and commit logs, write streams
//! and table ([`super::topics::TopicRoutes`]), so exactly-once holds per topic-partition
//! exactly as for one topic, and a restart resumes every topic where its logs leave it.
//! With a pattern, the broker's topics are listed every
//! [`crate::kafka::metadata::PARTITION_DISCOVERY_INTERVAL`] and a topic that starts to match gets
//! its pipeline while the job runs. A drain or cancel reaches every pipeline; when one
//! fails, the others are drained and the job fails naming the topic.

use super::config::KafkaToBqConfig;
use super::job::{run, RunReport};
use super::topics::Topics;
use crate::bigquery::Endpoints;
use anyhow::{anyhow, Result};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What a job of several topics did: each topic's report.
pub struct TopicsReport {
    /// By topic.
    pub topics: BTreeMap<String, RunReport>,
    /// Wall time of the whole run.
    pub elapsed: Duration,
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
) -> Result<TopicsReport> {
    let started = Instant::now();
    let listing = cfg.source.metadata()?;
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
            let existing = if pattern { listing.topics().await? } else { Vec::new() };
            for t in cfg.topics.select(&existing) {
                if !running.contains_key(&t) && !done.contains_key(&t) {
                    tracing::info!(job = %cfg.job_name, topic = %t, "starting the topic's pipeline");
                    running.insert(t.clone(), spawn(cfg.for_topic(&t), root, endpoints.clone(), web.clone()));
                }
            }
            if pattern && running.is_empty() && done.is_empty() {
                if bounded {
                    return Err(anyhow!("readBootstrapServerAndTopic: no topic matches {}", cfg.source.topic));
                }
                tracing::warn!(job = %cfg.job_name, pattern = %cfg.source.topic, "no topic matches yet; waiting for one");
            }
        }
        for t in running.iter().filter(|(_, r)| r.task.is_finished()).map(|(t, _)| t.clone()).collect::<Vec<_>>() {
            let r = running.remove(&t).expect("listed above").task.await.map_err(|e| anyhow!("{e}"))?;
            match r {
                Ok(report) => {
                    done.insert(t, report);
                }
                Err(e) if failed.is_none() => {
                    tracing::error!(job = %cfg.job_name, topic = %t, error = %format!("{e:#}"), "a topic's pipeline failed: draining the others");
                    running.values().for_each(|r| {
                        r.stop.send_replace(true);
                    });
                    failed = Some(e.context(format!("topic {t}")));
                }
                Err(e) => {
                    tracing::error!(job = %cfg.job_name, topic = %t, error = %format!("{e:#}"), "a topic's pipeline failed")
                }
            }
        }
        let ended = running.is_empty() && (failed.is_some() || *stop.borrow() || !pattern || bounded);
        if ended && (!done.is_empty() || failed.is_some() || *stop.borrow()) {
            break;
        }
        tokio::select! {
            _ = stop.changed() => running.values().for_each(|r| { r.stop.send_replace(true); }),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(TopicsReport { topics: done, elapsed: started.elapsed() }),
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
