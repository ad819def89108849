//! The autoscaling loop of a live job: every interval the shared
//! [`crate::scaling::Autoscaler`] decides on the window that ended (per-worker busy
//! time, input rate from the topic's high watermarks, backlog from the checkpoint), and
//! its decision resizes the [`Pool`]. The
//! same loop discovers partitions added to the topic and publishes dashboard points.
//! In a job of several topics the job decides instead ([`crate::kafka_to_bq::fan_out`]):
//! each topic's loop reports its load to the job's [`SharedWorkers`] and follows its size.

use super::pool::{Pool, Workers};
use super::publish::{PoolView, Publisher};
use crate::kafka_to_bq::context::JobCtx;
use crate::kafka_to_bq::setup::positions;
use crate::scaling::shared::{SharedWorkers, TopicLoad};
use crate::scaling::step::{announce_decision, announce_resized, decision_view, Autoscaler};
use anyhow::{Context, Result};
use flexrun_autoscaler::Decision;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Who decides the pool's size: its own autoscaler (a job of one topic), or the job's,
/// which this topic's pipeline follows and reports its load to (a job of several topics).
enum Scaling {
    Own(Box<Autoscaler>),
    Member(Arc<SharedWorkers>),
}

impl Scaling {
    /// The limits in force and the latest target, for the dashboard.
    fn limits_and_target(&self, ctx: &JobCtx, pool: &Pool) -> (flexrun_autoscaler::Limits, u32) {
        match self {
            Scaling::Own(scaler) => (scaler.limits(), scaler.target(pool.workers())),
            Scaling::Member(shared) => (ctx.cfg.run.pool.limits(shared.shards()), shared.size()),
        }
    }
}

/// Run the shards on the worker pool until a drain, autoscaling every interval.
pub async fn run_pool(
    ctx: &Arc<JobCtx>,
    shard_list: Vec<(usize, Vec<i32>)>,
    shard_count: usize,
    partitions: &[i32],
    started: Instant,
    cancel_tx: watch::Sender<bool>,
    web: Option<flexrun_web::JobRegistry>,
) -> Result<(Vec<Decision>, u32)> {
    let pc = ctx.cfg.run.pool.clone();
    let (mut pool, mut scaling, initial) = start(ctx, shard_list, shard_count, started);
    pool.resize(initial).await?;
    let mut cancel = cancel_tx.subscribe();
    let mut publisher = web.map(|w| Publisher::new(w, ctx.cfg.job_name.clone(), pc.vcpus_per_worker));
    let mut last_utilization = 0.0;
    let mut partitions = partitions.to_vec();
    let mut next_discovery = Instant::now();
    let mut next_report = Instant::now();
    let result: Result<()> = loop {
        // A signal during start-up was sent before this receiver existed.
        if *cancel.borrow() {
            break Ok(());
        }
        tokio::select! {
            _ = cancel.changed() => break Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        if let Some(e) = pool.reap().await {
            tracing::error!(error = format!("{e:#}"), "a shard failed; draining the others");
            cancel_tx.send_replace(true);
            break Err(e);
        }
        if next_discovery.elapsed() >= PARTITION_DISCOVERY_INTERVAL {
            next_discovery = Instant::now();
            if let Err(e) = discover_partitions(ctx, &mut partitions, &mut pool).await {
                cancel_tx.send_replace(true);
                break Err(e);
            }
            match &mut scaling {
                Scaling::Own(scaler) => scaler.set_parallelism(pool.max_parallelism()),
                Scaling::Member(shared) => {
                    shared.join(&ctx.cfg.source.topic, pool.max_parallelism());
                }
            }
        }
        let point = match publisher.as_mut() {
            Some(p) => {
                let (limits, target) = scaling.limits_and_target(ctx, &pool);
                let view = PoolView { workers: pool.workers(), target, utilization: last_utilization, limits: &limits };
                p.maybe_publish(ctx, &partitions, started, view).await
            }
            None => None,
        };
        let step = match &mut scaling {
            Scaling::Own(scaler) => {
                if let Some(c) = &ctx.control {
                    scaler.sync_control(c, pool.workers());
                }
                if !scaler.take_due() {
                    continue;
                }
                decide_and_resize(ctx, scaler, &mut pool, &partitions, publisher.as_ref()).await
            }
            Scaling::Member(shared) => follow(ctx, shared, &mut pool, &partitions, &mut next_report, point).await,
        };
        match step {
            Ok(Some(u)) => last_utilization = u,
            Ok(None) => {}
            Err(e) => {
                cancel_tx.send_replace(true);
                break Err(e);
            }
        }
    };
    let workers = pool.workers();
    let stopped = pool.stop_all().await;
    result.and(stopped)?;
    let decisions = match scaling {
        Scaling::Own(scaler) => scaler.into_decisions(),
        Scaling::Member(_) => Vec::new(),
    };
    Ok((decisions, workers))
}

/// The pool and who sizes it: the job's workers for a topic of a job of several, else
/// the pool's own with its own autoscaler. Also the worker count to start with.
fn start(
    ctx: &Arc<JobCtx>,
    shard_list: Vec<(usize, Vec<i32>)>,
    shard_count: usize,
    started: Instant,
) -> (Pool, Scaling, u32) {
    let pc = &ctx.cfg.run.pool;
    match ctx.cfg.shared.clone() {
        Some(shared) => {
            let offset = shared.join(&ctx.cfg.source.topic, shard_list.len() as u32);
            let size = shared.size();
            let workers = Workers::Shared { pool: shared.clone(), offset };
            (Pool::new(ctx.clone(), shard_list, shard_count, workers), Scaling::Member(shared), size)
        }
        None => {
            let pool = Pool::new(ctx.clone(), shard_list, shard_count, Workers::Own(ctx.cfg.run.worker_capacity));
            let scaler = Autoscaler::new(pc, pool.max_parallelism(), started);
            let initial = pc.initial_workers(pool.max_parallelism());
            if initial < pc.num_workers {
                tracing::warn!(
                    asked = pc.num_workers,
                    running = initial,
                    shards = pool.max_parallelism(),
                    "more workers than shards: each shard runs on one worker at a time"
                );
            }
            (pool, Scaling::Own(Box::new(scaler)), initial)
        }
    }
}

/// A topic's pipeline on the job's pool: report the topic's load about once a second
/// (with its latest dashboard point), and take the job's worker count when it changed.
async fn follow(
    ctx: &Arc<JobCtx>,
    shared: &SharedWorkers,
    pool: &mut Pool,
    partitions: &[i32],
    next_report: &mut Instant,
    point: Option<flexrun_web::TopicPoint>,
) -> Result<Option<f64>> {
    if point.is_some() || Instant::now() >= *next_report {
        *next_report = Instant::now() + Duration::from_secs(1);
        match ctx.metadata.high_watermarks(partitions).await {
            Ok(hw) => {
                let s = ctx.stats.summary();
                shared.report(
                    &ctx.cfg.source.topic,
                    TopicLoad {
                        high_watermarks: hw.values().sum(),
                        backlog: ctx.backlog(&hw),
                        messages_read: s.messages_read,
                        bytes_read: s.bytes_read,
                        point,
                    },
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the topic's high watermarks; the job's pool sees its last report")
            }
        }
    }
    if shared.size() != pool.workers() {
        tracing::info!(job = %ctx.cfg.job_name, from = pool.workers(), to = shared.size(), "following the job's pool");
        pool.resize(shared.size()).await?;
    }
    Ok(None)
}

/// One autoscaling window: the decision on it, shown on the dashboard and the control
/// plane, and the resize. The window's utilization, or `None` when the topic's high
/// watermarks could not be read (the window is skipped).
async fn decide_and_resize(
    ctx: &Arc<JobCtx>,
    scaler: &mut Autoscaler,
    pool: &mut Pool,
    partitions: &[i32],
    publisher: Option<&Publisher>,
) -> Result<Option<f64>> {
    let hw = match ctx.metadata.high_watermarks(partitions).await {
        Ok(hw) => hw,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the topic's high watermarks; skipping this autoscaling window");
            return Ok(None);
        }
    };
    let s = ctx.stats.summary();
    let avg = if s.messages_read > 0 { s.bytes_read as f64 / s.messages_read as f64 } else { 1000.0 };
    let step = scaler.decide(&hw, ctx.backlog(&hw), avg, pool.window());
    let d = &step.decision;
    if let (true, Some(p)) = (step.recorded, publisher) {
        p.jobs.push_decision(&ctx.cfg.job_name, decision_view(d));
    }
    if d.is_change() {
        announce_decision(ctx.control.as_deref(), d);
        pool.resize(d.to).await?;
        announce_resized(ctx.control.as_deref(), d, pool.workers());
    }
    Ok(Some(step.utilization))
}

pub use crate::kafka::metadata::PARTITION_DISCOVERY_INTERVAL;

/// Stop the job when its topic's id is no longer the one it started with: the topic
/// was deleted and created again while the job ran, and its positions mean nothing in
/// the new log. The next start applies `offsetGapPolicy` to it (FAIL stops naming it;
/// SKIP reads the new log from its earliest offset). A topic missing for a moment
/// (deleted, not yet created again) is asked again at the next interval.
async fn check_topic_id(ctx: &Arc<JobCtx>) -> Result<()> {
    let Some(started) = &ctx.log.topic_id else { return Ok(()) };
    match ctx.metadata.topic_id().await {
        Ok(Some(now)) if &now != started => {
            note_read_from_the_new_log(ctx, &now);
            anyhow::bail!(
                "job {}: topic {} was deleted and created again while the job ran (topic id {started} at start, {now} now); the job stops so that no position of the old log is used in the new one. Start it again: offsetGapPolicy=FAIL stops there naming the topic, offsetGapPolicy=SKIP reads the new topic from its earliest offset",
                ctx.cfg.job_name,
                ctx.cfg.source.topic
            )
        }
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::warn!(topic = %ctx.cfg.source.topic, error = %e, "cannot read the topic's id; will ask again");
            Ok(())
        }
    }
}

/// Between the topic's recreation and this check, shards may have read and committed
/// records of the new log at the old log's positions; a restart under SKIP reads the new
/// log from its start and would write them again. Each partition's range up to its
/// committed position is named as possibly duplicated.
fn note_read_from_the_new_log(ctx: &JobCtx, new_id: &str) {
    let committed = ctx.positions.lock().expect("positions lock").clone();
    let topic = ctx.cfg.source.topic.clone();
    ctx.stats.note(|r| {
        for (p, pos) in committed.iter().filter(|(_, pos)| **pos > 0) {
            r.note_possibly_duplicated(crate::stats::LostRange {
                topic: topic.clone(),
                topic_id: Some(new_id.to_string()),
                partition: *p,
                from: 0,
                to: Some(*pos),
                why: "the topic was recreated while the job ran: read from the new log before it was seen".into(),
                replaced_by: None,
            });
        }
    });
}

/// Look for new partitions; each starts at its earliest offset on the shard
/// `p % shards`, which is restarted (after its open batch commits) to take it.
async fn discover_partitions(ctx: &Arc<JobCtx>, partitions: &mut Vec<i32>, pool: &mut Pool) -> Result<()> {
    check_topic_id(ctx).await?;
    let now = match ctx.metadata.partitions().await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the topic's partitions; will try again");
            return Ok(());
        }
    };
    let new: Vec<i32> = now.iter().copied().filter(|p| !partitions.contains(p)).collect();
    if new.is_empty() {
        return Ok(());
    }
    if let Some(why) = ctx
        .cfg
        .cdc
        .as_ref()
        .and_then(|c| c.offset_order_broken(&ctx.cfg.source.topic, &format!("partitions {new:?} were added")))
    {
        anyhow::bail!(why);
    }
    let marks = ctx.metadata.watermarks(&new).await?;
    let lows: std::collections::BTreeMap<i32, i64> = marks.iter().map(|(p, (low, _))| (*p, *low)).collect();
    // A new partition is read from its first record: what retention deleted before the
    // job found it is a gap (FAIL stops naming it; SKIP counts and names it).
    let mut from: std::collections::BTreeMap<i32, i64> = new.iter().map(|p| (*p, 0)).collect();
    let found = crate::kafka::gaps::check(&from, &marks);
    let (job, topic) = (&ctx.cfg.job_name, &ctx.cfg.source.topic);
    let skipped = crate::kafka::gaps::apply(ctx.cfg.source.gap_policy, &found, &mut from, job, topic)
        .map_err(anyhow::Error::msg)?;
    positions::note_skipped(&ctx.stats, skipped, (topic, ctx.log.topic_id.as_deref()), &found);
    // Saved before any shard reads them: a shard that dies before its first commit
    // must resume here after a restart, not at the partition's latest offset.
    crate::kafka::starts::record(&ctx.job_dir, &lows).with_context(|| format!("writing {}", ctx.job_dir.display()))?;
    ctx.add_partitions(&lows);
    partitions.extend(&new);
    positions::write_known(&ctx.job_dir, &partitions.iter().copied().collect())
        .with_context(|| format!("writing {}", ctx.job_dir.display()))?;
    ctx.stats.note(|r| r.partitions_discovered += new.len() as u64);
    tracing::info!(job = %ctx.cfg.job_name, partitions = ?new, "new partitions found: they start at their earliest offset");
    pool.add_partitions(&new).await
}
