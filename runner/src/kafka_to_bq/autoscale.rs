//! The autoscaling loop of a live job: every interval a [`Snapshot`] of the window
//! (per-worker busy time, input rate from the topic's high watermarks, backlog from the
//! checkpoint) goes to the [`Controller`], and its decision resizes the [`Pool`]. The
//! same loop discovers partitions added to the topic and publishes dashboard points.

use super::job::JobCtx;
use super::pool::Pool;
use super::positions;
use super::publish::Publisher;
use anyhow::{Context, Result};
use flexrun_autoscaler::{Algorithm, Controller, Decision, Snapshot};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

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
    let mut pool = Pool::new(ctx.clone(), shard_list, shard_count, ctx.cfg.run.worker_capacity);
    let mut controller = Controller::new(&pc, pool.max_parallelism());
    let initial = pc.initial_workers(pool.max_parallelism());
    if initial < pc.num_workers {
        tracing::warn!(
            asked = pc.num_workers,
            running = initial,
            shards = pool.max_parallelism(),
            "more workers than shards: each shard runs on one worker at a time"
        );
    }
    pool.resize(initial).await?;
    let mut cancel = cancel_tx.subscribe();
    let mut next_decision = Instant::now() + pc.interval;
    let mut last_window = Instant::now();
    let mut last_hw: Option<i64> = None;
    let mut publisher = web.map(|w| Publisher::new(w, ctx.cfg.job_name.clone(), pc.vcpus_per_worker));
    let mut last_utilization = 0.0;
    let mut partitions = partitions.to_vec();
    let mut next_discovery = Instant::now();
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
        }
        if let Some(p) = publisher.as_mut() {
            p.maybe_publish(
                ctx,
                &partitions,
                started,
                super::publish::PoolView {
                    workers: pool.workers(),
                    target: controller.decisions().last().map_or(pool.workers(), |d| d.to),
                    utilization: last_utilization,
                    limits: controller.limits(),
                },
            )
            .await;
        }
        if let Some(c) = &ctx.control {
            if let Some(u) = c.take_update() {
                crate::scaling::apply_update(c, &mut controller, &u, pool.workers());
                next_decision = Instant::now();
            }
            let l = controller.limits();
            let target = controller.decisions().last().map_or(pool.workers(), |d| d.to);
            c.publish(pool.workers(), target, l.min_workers, l.max_workers, l.utilization_hint);
        }
        if Instant::now() < next_decision || pc.algorithm == Algorithm::None {
            continue;
        }
        next_decision = Instant::now() + pc.interval;
        let hw = match ctx.metadata.high_watermarks(&partitions).await {
            Ok(hw) => hw,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the topic's high watermarks; skipping this autoscaling window");
                continue;
            }
        };
        let window_s = last_window.elapsed().as_secs_f64();
        last_window = Instant::now();
        let total_hw: i64 = hw.values().sum();
        let input_records_per_s = last_hw.map_or(0.0, |l| (total_hw - l).max(0) as f64 / window_s);
        last_hw = Some(total_hw);
        let backlog_records = ctx.backlog(&hw);
        let s = ctx.stats.summary();
        let avg = if s.messages_read > 0 { s.bytes_read as f64 / s.messages_read as f64 } else { 1000.0 };
        let snap = Snapshot {
            time_s: started.elapsed().as_secs_f64(),
            window_s,
            workers: pool.window(),
            input_records_per_s,
            input_bytes_per_s: input_records_per_s * avg,
            backlog_records: backlog_records as u64,
            backlog_bytes: (backlog_records as f64 * avg) as u64,
        };
        last_utilization = snap.utilization();
        let recorded = controller.decisions().len();
        let d = controller.decide(&snap);
        tracing::info!(
            time_s = format!("{:.1}", d.time_s), from = d.from, to = d.to, rationale = d.rationale.as_str(), detail = %d.detail,
            utilization = format!("{:.2}", snap.utilization()), input_per_s = input_records_per_s as u64, backlog = backlog_records,
            "autoscaler decision"
        );
        if controller.decisions().len() > recorded {
            if let Some(p) = &publisher {
                p.jobs.push_decision(
                    &ctx.cfg.job_name,
                    flexrun_web::DecisionView {
                        t_s: d.time_s,
                        from: d.from,
                        to: d.to,
                        rationale: d.rationale.as_str().into(),
                        detail: d.detail.clone(),
                        description: d.job_log_text(),
                    },
                );
            }
        }
        if d.is_change() {
            if let Some(c) = &ctx.control {
                c.event(d.event_type(), d.from, d.to, d.job_log_text());
            }
            if let Err(e) = pool.resize(d.to).await {
                cancel_tx.send_replace(true);
                break Err(e);
            }
            if let Some(c) = &ctx.control {
                c.event(
                    "CURRENT_NUM_WORKERS_CHANGED",
                    d.from,
                    pool.workers(),
                    format!("Autoscaling: Resizing worker pool from {} to {}.", d.from, pool.workers()),
                );
            }
        }
    };
    let workers = pool.workers();
    let stopped = pool.stop_all().await;
    result.and(stopped)?;
    Ok((controller.into_decisions(), workers))
}

/// How often a running job looks for partitions added to its topic.
pub const PARTITION_DISCOVERY_INTERVAL: Duration = Duration::from_secs(5);

/// Look for new partitions; each starts at its earliest offset on the shard
/// `p % shards`, which is restarted (after its open batch commits) to take it.
async fn discover_partitions(ctx: &Arc<JobCtx>, partitions: &mut Vec<i32>, pool: &mut Pool) -> Result<()> {
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
    let lows = ctx.metadata.low_watermarks(&new).await?;
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
