//! The event loop: Kafka partitions with backlog, a pool of workers with a CPU
//! capacity, worker start-up, the autoscaler, Streaming Engine units and latency, in
//! virtual time.
//!
//! Flows, not messages: every step of `STEP_S` virtual seconds moves a number of
//! records (a real number) from each partition's backlog through its worker. Per step
//! the cost is one pass over the partitions, so a day at 1,000 partitions is about
//! 86 million small updates, whatever the message rate; a step with no backlog where
//! every worker keeps up costs one pass over the workers instead (see `serve`).
//!
//! Events on top of the steps: an autoscaler decision every `--autoscaling-interval`
//! (skipped while a resize is in progress, as the live pool blocks on a resize), new
//! workers becoming ready `startup_s` after a scale-up (they are billed while they
//! boot), and a series sample every `series_interval_s`.

use super::latency::{percentiles, quantile, LatencyRecorder, WindowConditions};
use super::report::{Bottleneck, SeriesPoint, SimReport, SimSummary};
use super::SimConfig;
use flexrun_autoscaler::{Controller, Snapshot, WorkerMetrics};
use flexrun_estimator::units::MIB;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

/// Virtual seconds per flow step.
pub const STEP_S: f64 = 1.0;
/// Virtual seconds per latency window.
pub const LATENCY_WINDOW_S: f64 = 10.0;
/// Latency samples drawn per latency window.
pub const LATENCY_SAMPLES_PER_WINDOW: u32 = 48;
/// Correlation time of the input-rate noise, seconds.
pub const NOISE_CORRELATION_S: f64 = 30.0;

/// Accumulates per-worker counters between autoscaler decisions.
struct Window {
    start_s: f64,
    records: Vec<f64>,
    input_records: f64,
}

impl Window {
    fn new(start_s: f64, workers: u32) -> Window {
        Window { start_s, records: vec![0.0; workers as usize], input_records: 0.0 }
    }
}

/// Run the simulation. `progress` is called with the virtual time reached, now and then.
pub fn run(cfg: &SimConfig, progress: &mut dyn FnMut(f64)) -> SimReport {
    run_until(cfg, progress, &std::sync::atomic::AtomicBool::new(false)).expect("never stopped")
}

/// [`run`], given up (None) as soon as `stop` is set: a caller that no longer wants the
/// answer (a web client that went away) frees the cores within one step.
pub fn run_until(
    cfg: &SimConfig,
    progress: &mut dyn FnMut(f64),
    stop: &std::sync::atomic::AtomicBool,
) -> Option<SimReport> {
    let mut sim = Sim::new(cfg);
    let steps = (cfg.workload.duration_s / STEP_S).ceil() as u64;
    let mut last_progress = 0.0;
    for step in 1..=steps {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        let t = step as f64 * STEP_S;
        sim.step(t);
        if t - last_progress >= 3600.0 {
            last_progress = t;
            progress(t);
        }
    }
    progress(cfg.workload.duration_s);
    Some(sim.finish())
}

/// Rates that stay fixed over a run.
struct Rates {
    parts: usize,
    mean_bytes: f64,
    vcpus: f64,
    /// Records one vCPU processes per second at 100% CPU.
    vcpu_rate: f64,
    /// Records one worker processes per second.
    worker_rate: f64,
    max_parallelism: u32,
}

/// The loop's state between steps.
struct Sim<'a> {
    cfg: &'a SimConfig,
    r: Rates,
    controller: Controller,
    rng: rand::rngs::StdRng,
    latency: LatencyRecorder,
    running: u32,
    billed: u32,
    /// Workers booting: when they are ready, and the count then.
    pending: Option<(f64, u32)>,
    backlog: Vec<f64>,
    backlog_empty: bool,
    noise: f64,
    noise_a: f64,
    window: Window,
    next_decision: f64,
    report: SimReport,
    /// Records, busy worker-seconds and worker-seconds in this latency window.
    lat_window: (f64, f64, f64),
    series_acc: SeriesAcc,
    post: PostWarmUp,
    worker_records: Vec<f64>,
    stalls: StallAcc,
    state: StateAcc,
    /// The Storage Write quota's bucket, when modelled.
    bucket: Option<crate::quota::Bucket>,
    /// The backlog left by the last step, records.
    last_backlog: f64,
}

impl<'a> Sim<'a> {
    fn new(cfg: &'a SimConfig) -> Sim<'a> {
        let w = &cfg.workload;
        let parts = w.partitions.max(1) as usize;
        let mean_bytes = w.message.mean();
        let vcpus = cfg.pool.vcpus_per_worker;
        let vcpu_rate = 1.0 / cfg.cost.vcpu_s_per_message(mean_bytes);
        let max_parallelism = ((parts as f64) / vcpus).ceil().max(1.0) as u32;
        let r = Rates { parts, mean_bytes, vcpus, vcpu_rate, worker_rate: vcpu_rate * vcpus, max_parallelism };
        let controller = Controller::new(&cfg.pool, max_parallelism);
        let limits = *controller.limits();
        let running = cfg.pool.num_workers.clamp(limits.min_workers, limits.max_workers);
        Sim {
            cfg,
            r,
            controller,
            rng: rand::rngs::StdRng::seed_from_u64(cfg.seed),
            latency: LatencyRecorder::new(cfg.latency.clone(), LATENCY_SAMPLES_PER_WINDOW),
            running,
            billed: running,
            pending: None,
            backlog: vec![0.0f64; parts],
            backlog_empty: true,
            noise: 0.0,
            noise_a: (-STEP_S / NOISE_CORRELATION_S).exp(),
            window: Window::new(0.0, running),
            next_decision: cfg.pool.interval.as_secs_f64(),
            report: SimReport::default(),
            lat_window: (0.0, 0.0, 0.0),
            series_acc: SeriesAcc::default(),
            post: PostWarmUp::default(),
            worker_records: vec![0.0f64; running as usize],
            stalls: StallAcc::default(),
            state: StateAcc::default(),
            bucket: cfg.write_quota.as_ref().map(crate::quota::Bucket::new),
            last_backlog: 0.0,
        }
    }

    /// One step ending at virtual time `t`.
    fn step(&mut self, t: f64) {
        let backlog_records = self.flow(t);
        if (t / LATENCY_WINDOW_S).fract() == 0.0 {
            self.latency_window(t, backlog_records);
        }
        self.join_booted(t);
        if t >= self.next_decision {
            self.next_decision += self.cfg.pool.interval.as_secs_f64();
            self.decide(t, backlog_records);
        }
        if (t / self.cfg.series_interval_s).fract() == 0.0 {
            let acc = &mut self.series_acc;
            let secu = self.cfg.secu_per_hour_per_mib_s * acc.totals.processed / (acc.totals.steps.max(1.0) * STEP_S)
                * self.r.mean_bytes
                / MIB;
            self.report.series.push(acc.point(t, self.r.mean_bytes, secu));
            self.series_acc = SeriesAcc::default();
        }
    }

    /// Input arrives, the workers read what their capacity allows; the backlog left.
    fn flow(&mut self, t: f64) -> f64 {
        let (cfg, w) = (self.cfg, &self.cfg.workload);
        // Input: the profile times (1 + noise), spread evenly over the partitions.
        let a = self.noise_a;
        self.noise = a * self.noise + (1.0 - a * a).sqrt() * w.noise * self.rng.sample::<f64, _>(StandardNormal);
        // The rate in effect at the step's start carries the step: a profile step at
        // time T changes the flow from (T, T + STEP_S] on.
        let input = (w.records_per_s(t - STEP_S) * (1.0 + self.noise)).max(0.0) * STEP_S;
        let per_partition = input / self.r.parts as f64;
        // Partitions are dealt round-robin: worker k owns partitions k, k+W, k+2W, ...
        let n = self.running as usize;
        // A window commit in progress leaves this step's remainder for reading.
        let warm = t > cfg.warm_up_s;
        let reading = self.stalls.step(cfg.file_commit.as_ref(), t, self.running, warm);
        let reading = reading * self.state.step(cfg.file_commit.as_ref(), t, self.running, warm);
        let reading = reading * self.quota_share(input, warm);
        let caps =
            Caps { worker: self.r.worker_rate * STEP_S * reading, partition: self.r.vcpu_rate * STEP_S * reading };
        serve(&mut self.backlog, per_partition, caps, &mut self.worker_records[..n], &mut self.backlog_empty);
        let processed: f64 = self.worker_records.iter().sum();
        if let Some(b) = self.bucket.as_mut() {
            b.spend(processed * self.r.mean_bytes);
        }
        self.state.add(processed * self.r.mean_bytes);
        for (acc, r) in self.window.records.iter_mut().zip(&self.worker_records) {
            *acc += r;
        }
        self.window.input_records += input;
        let busy_worker_s: f64 = processed / self.r.worker_rate;
        self.lat_window.0 += processed;
        self.lat_window.1 += busy_worker_s;
        self.lat_window.2 += self.running as f64 * STEP_S;
        let backlog_records: f64 = if self.backlog_empty { 0.0 } else { self.backlog.iter().sum() };
        self.last_backlog = backlog_records;
        let figures = StepFigures {
            input,
            processed,
            running: self.running,
            billed: self.billed,
            busy: busy_worker_s,
            backlog: backlog_records,
        };
        self.series_acc.add(&figures);
        if warm {
            self.post.add(t, &figures);
        }
        backlog_records
    }

    /// The share of the workers' capacity the Storage Write quota leaves them this step:
    /// they want what there is to read (`input` and the backlog), within their capacity.
    fn quota_share(&mut self, input: f64, warm: bool) -> f64 {
        let Some(b) = self.bucket.as_mut() else { return 1.0 };
        let capacity = self.r.worker_rate * STEP_S * self.running as f64;
        let want = capacity.min(input + self.last_backlog);
        b.allow(want * self.r.mean_bytes, capacity * self.r.mean_bytes, STEP_S, warm)
    }

    /// Latency, once per latency window.
    fn latency_window(&mut self, t: f64, backlog_records: f64) {
        let lw = self.lat_window;
        let u = if lw.2 > 0.0 { lw.1 / lw.2 } else { 0.0 };
        let throughput = lw.0 / LATENCY_WINDOW_S;
        let cond = WindowConditions {
            utilization: u,
            throughput_bytes_s: throughput * self.r.mean_bytes,
            exactly_once: self.cfg.exactly_once(),
            streams: self.cfg.streams,
            triggering_s: self.cfg.triggering_s,
        };
        let kafka_wait = if throughput > 0.0 { backlog_records / throughput } else { 0.0 };
        let warm = t > self.cfg.warm_up_s;
        self.latency.add_window(&cond, lw.0, kafka_wait, warm, &mut self.rng, &mut self.series_acc.samples);
        self.series_acc.kafka_wait = kafka_wait;
        self.lat_window = (0.0, 0.0, 0.0);
    }

    /// Workers that finished booting join; the window starts over.
    fn join_booted(&mut self, t: f64) {
        if let Some((ready_at, to)) = self.pending {
            if t >= ready_at {
                self.running = to;
                self.pending = None;
                self.window = Window::new(t, self.running);
                self.worker_records = vec![0.0; self.running as usize];
            }
        }
    }

    /// The autoscaler. A decision due just as new workers joined (the window restarted
    /// this step) would see a zero-length window: it is skipped, and the next one sees
    /// a full interval.
    fn decide(&mut self, t: f64, backlog_records: f64) {
        let window_s = t - self.window.start_s;
        if self.pending.is_some() || window_s <= 0.0 {
            return;
        }
        let (mean_bytes, worker_rate) = (self.r.mean_bytes, self.r.worker_rate);
        let snap = Snapshot {
            time_s: t,
            window_s,
            workers: self
                .window
                .records
                .iter()
                .map(|&r| WorkerMetrics { busy_s: r / worker_rate, records: r as u64, bytes: (r * mean_bytes) as u64 })
                .collect(),
            input_records_per_s: self.window.input_records / window_s,
            input_bytes_per_s: self.window.input_records / window_s * mean_bytes,
            backlog_records: backlog_records as u64,
            backlog_bytes: (backlog_records * mean_bytes) as u64,
        };
        let d = self.controller.decide(&snap);
        if self.cfg.record_snapshots {
            self.report.snapshots.push((snap, d.clone()));
        }
        if d.to > self.running {
            self.billed = d.to;
            self.pending = Some((t + self.cfg.startup_s, d.to));
        } else if d.to < self.running {
            self.running = d.to;
            self.billed = d.to;
            self.worker_records = vec![0.0; self.running as usize];
        }
        self.window = Window::new(t, self.running);
    }

    /// The summary after warm-up, and the report.
    fn finish(self) -> SimReport {
        let Sim { cfg, r, controller, latency, post, stalls, state, backlog, running, mut report, bucket, .. } = self;
        let limits = *controller.limits();
        report.decisions = controller.into_decisions();
        let steps_post = post.totals.steps.max(1.0);
        let processed_mib_s = post.totals.processed / (steps_post * STEP_S) * r.mean_bytes / MIB;
        let workers_mean = post.totals.running / steps_post;
        let billed_mean = post.totals.billed / steps_post;
        let secu = cfg.secu_per_hour_per_mib_s * processed_mib_s;
        let machine = flexrun_estimator::Pricing::us_central1()
            .machine_types
            .get(&cfg.machine_type)
            .copied()
            .unwrap_or(flexrun_estimator::MachineType { vcpus: r.vcpus, memory_gb: 4.0 * r.vcpus });
        let records_s = post.totals.processed / (steps_post * STEP_S);
        let items = bill(cfg, billed_mean, &machine, secu, records_s, r.mean_bytes);
        let per_hour = items.iter().map(|i| i.per_hour).sum();
        let input_mib_s = post.totals.input / (steps_post * STEP_S) * r.mean_bytes / MIB;
        report.summary = SimSummary {
            input_mib_s,
            throughput_mib_s: processed_mib_s,
            throughput_records_per_s: records_s,
            throughput_per_worker_mb_s: if workers_mean > 0.0 {
                processed_mib_s * MIB / 1e6 / workers_mean
            } else {
                0.0
            },
            mean_cpu: post.totals.cpu(),
            workers_mean,
            workers_billed_mean: billed_mean,
            workers_min: post.min_running,
            workers_max: post.max_running,
            workers_final: running,
            secu_per_hour: secu,
            latency_ms: percentiles(&latency.stage_ms),
            end_to_end_ms: percentiles(&latency.end_to_end_ms),
            cost_totals: flexrun_estimator::pipeline::totals(&items),
            cost_items: items,
            cost_per_hour: per_hour,
            backlog_final_mib: backlog.iter().sum::<f64>() * r.mean_bytes / MIB,
            backlog_peak_mib: post.peak_backlog * r.mean_bytes / MIB,
            bottleneck: bottleneck(cfg, &r, &post, input_mib_s, limits.max_workers, bucket.as_ref()),
            write_quota_throttled_s: bucket.as_ref().map_or(0.0, |b| b.throttled_s),
            limits: crossed(cfg, input_mib_s * MIB, post.max_running as f64, r.vcpus),
            decisions: report.decisions.iter().filter(|d| d.is_change()).count(),
            vcpu_capacity_mib_s: r.vcpu_rate * r.mean_bytes / MIB,
            max_parallelism: r.max_parallelism,
            window_commit: cfg.file_commit.map(|_| stalls.summary(post.totals.steps * STEP_S)),
            checkpoints: cfg.file_commit.and_then(|f| f.state).map(|_| state.summary()),
        };
        report
    }
}

/// What held the run back, if the backlog grew after warm-up: the partitions (each
/// read by at most one vCPU) or the worker ceiling, whichever caps throughput first.
fn bottleneck(
    cfg: &SimConfig,
    r: &Rates,
    post: &PostWarmUp,
    input_mib_s: f64,
    max_workers: u32,
    bucket: Option<&crate::quota::Bucket>,
) -> Bottleneck {
    let growth_mib_s =
        (post.last_backlog - post.first_backlog) * r.mean_bytes / MIB / (post.last_t - post.first_t).max(1.0);
    let partition_cap_mib_s = r.parts as f64 * r.vcpu_rate * r.mean_bytes / MIB;
    let workers_cap_mib_s = max_workers as f64 * r.worker_rate * r.mean_bytes / MIB;
    if growth_mib_s <= 0.01 * input_mib_s.max(1e-9) {
        return Bottleneck::None;
    }
    if let (Some(q), Some(b)) = (&cfg.write_quota, bucket) {
        if b.throttled_s > 0.0 && q.bytes_s / MIB < partition_cap_mib_s.min(workers_cap_mib_s) {
            let quota_mib_s = q.bytes_s / MIB;
            return Bottleneck::WriteQuota {
                location: q.location.clone(),
                quota_mib_s,
                backlog_growth_mib_s: growth_mib_s,
            };
        }
    }
    if partition_cap_mib_s <= workers_cap_mib_s {
        Bottleneck::Partitions {
            partitions: cfg.workload.partitions,
            max_mib_s: partition_cap_mib_s,
            backlog_growth_mib_s: growth_mib_s,
        }
    } else {
        Bottleneck::MaxWorkers { max_workers, max_mib_s: workers_cap_mib_s, backlog_growth_mib_s: growth_mib_s }
    }
}

/// Google's limits the run crosses: Storage Write's (when the job writes to BigQuery)
/// and Dataflow's worker limits.
fn crossed(cfg: &SimConfig, input_bytes_s: f64, workers: f64, vcpus: f64) -> Vec<flexrun_estimator::limits::Crossed> {
    use flexrun_estimator::limits::{Limits, Sized};
    let sized = match &cfg.write_quota {
        Some(q) => Sized::pipeline(cfg.mode, input_bytes_s, workers, vcpus, &q.location),
        None => Sized { throughput_bytes_s: 0.0, workers, connections: 0.0, location: "US".into() },
    };
    flexrun_estimator::limits::crossed(&sized, &Limits::google())
}

/// Window-commit stalls: when a window ends, every worker stops reading for its
/// share of the publish ([`flexrun_estimator::files::WindowCommit::stall_s`]).
#[derive(Default)]
struct StallAcc {
    left_s: f64,
    windows: u64,
    stall_s: f64,
    max_stall_s: f64,
}

impl StallAcc {
    /// The fraction of step `t` left for reading.
    fn step(&mut self, fc: Option<&crate::FileCommit>, t: f64, running: u32, counted: bool) -> f64 {
        let Some(fc) = fc else { return 1.0 };
        if ((t - STEP_S) / fc.window_s).floor() < (t / fc.window_s).floor() {
            let s = fc.commit.stall_s(running as f64);
            self.left_s += s;
            if counted {
                self.windows += 1;
                self.stall_s += s;
                self.max_stall_s = self.max_stall_s.max(s);
            }
        }
        let used = self.left_s.min(STEP_S);
        self.left_s -= used;
        1.0 - used / STEP_S
    }

    fn summary(&self, counted_s: f64) -> crate::report::WindowCommitSummary {
        crate::report::WindowCommitSummary {
            windows: self.windows,
            mean_stall_s: if self.windows > 0 { self.stall_s / self.windows as f64 } else { 0.0 },
            max_stall_s: self.max_stall_s,
            stalled_fraction: if counted_s > 0.0 { self.stall_s / counted_s } else { 0.0 },
        }
    }
}

/// Window state and checkpoints: the open window's bytes grow with what is read and
/// drop when it closes; every interval a checkpoint of the state (or of what is new,
/// incrementally) costs [`flexrun_estimator::state::StateModel::checkpoint`], and its
/// synchronous part pauses reading as a window commit does.
#[derive(Default)]
struct StateAcc {
    window_bytes: f64,
    new_bytes: f64,
    pause_left_s: f64,
    peak_state: f64,
    peak_memory: f64,
    costs: Vec<flexrun_estimator::state::CheckpointCost>,
}

impl StateAcc {
    fn add(&mut self, bytes: f64) {
        self.window_bytes += bytes;
        self.new_bytes += bytes;
    }

    /// The fraction of step `t` left for reading after a checkpoint's synchronous part.
    fn step(&mut self, fc: Option<&crate::FileCommit>, t: f64, running: u32, counted: bool) -> f64 {
        let Some((fc, m)) = fc.and_then(|f| f.state.map(|m| (f, m))) else { return 1.0 };
        let crossed = |every: f64| ((t - STEP_S) / every).floor() < (t / every).floor();
        if crossed(fc.window_s) {
            self.window_bytes = 0.0;
        }
        if crossed(m.interval_s) {
            let c = m.checkpoint(self.window_bytes, self.new_bytes.min(self.window_bytes), running as f64);
            self.new_bytes = 0.0;
            self.pause_left_s += c.sync_s;
            if counted {
                self.costs.push(c);
            }
        }
        if counted {
            self.peak_state = self.peak_state.max(self.window_bytes);
            self.peak_memory = self.peak_memory.max(m.memory_bytes(self.window_bytes, running as f64));
        }
        let used = self.pause_left_s.min(STEP_S);
        self.pause_left_s -= used;
        1.0 - used / STEP_S
    }

    fn summary(&self) -> crate::report::CheckpointSummary {
        let n = self.costs.len().max(1) as f64;
        let mib = |b: f64| b / MIB;
        crate::report::CheckpointSummary {
            checkpoints: self.costs.len() as u64,
            peak_state_mib: mib(self.peak_state),
            peak_memory_mib: mib(self.peak_memory),
            mean_checkpoint_mib: mib(self.costs.iter().map(|c| c.bytes).sum::<f64>() / n),
            max_checkpoint_mib: mib(self.costs.iter().map(|c| c.bytes).fold(0.0, f64::max)),
            mean_duration_s: self.costs.iter().map(|c| c.duration_s()).sum::<f64>() / n,
            max_duration_s: self.costs.iter().map(|c| c.duration_s()).fold(0.0, f64::max),
            max_sync_s: self.costs.iter().map(|c| c.sync_s).fold(0.0, f64::max),
        }
    }
}

/// What a worker and a partition can process in one step, in records.
#[derive(Clone, Copy)]
struct Caps {
    worker: f64,
    partition: f64,
}

/// One flow step: each partition's backlog plus its new input is served by its worker
/// (partitions are dealt round-robin: worker k owns partitions k, k+W, k+2W, ...). A
/// worker short of capacity serves its partitions in proportion to their demand, and no
/// partition gets more than one vCPU. `done[k]` receives worker k's records.
///
/// When no partition has a backlog and every worker keeps up, the step is the same for
/// each partition and costs one pass over the workers instead of the partitions: a
/// steady state, the common case, runs several times faster. `empty` says whether the
/// backlog is all zero, before and after.
fn serve(backlog: &mut [f64], per_partition: f64, caps: Caps, done: &mut [f64], empty: &mut bool) {
    let (parts, n) = (backlog.len(), done.len());
    let most_owned = parts.div_ceil(n) as f64;
    if *empty && per_partition <= caps.partition && most_owned * per_partition <= caps.worker {
        for (k, d) in done.iter_mut().enumerate() {
            *d = parts.saturating_sub(k).div_ceil(n) as f64 * per_partition;
        }
        return;
    }
    let mut left = 0.0;
    for (k, done) in done.iter_mut().enumerate() {
        let demand: f64 = (k..parts).step_by(n).map(|p| backlog[p] + per_partition).sum();
        let scale = if demand > caps.worker { caps.worker / demand } else { 1.0 };
        *done = 0.0;
        for p in (k..parts).step_by(n) {
            let d = backlog[p] + per_partition;
            let served = (d * scale).min(caps.partition);
            backlog[p] = d - served;
            left += backlog[p];
            *done += served;
        }
    }
    *empty = left == 0.0;
}

/// One flow step's figures.
#[derive(Clone, Copy)]
struct StepFigures {
    input: f64,
    processed: f64,
    running: u32,
    billed: u32,
    busy: f64,
    backlog: f64,
}

/// Sums of step figures over a span.
#[derive(Default)]
struct Totals {
    steps: f64,
    input: f64,
    processed: f64,
    running: f64,
    billed: f64,
    busy: f64,
}

impl Totals {
    fn add(&mut self, f: &StepFigures) {
        self.steps += 1.0;
        self.input += f.input;
        self.processed += f.processed;
        self.running += f.running as f64;
        self.billed += f.billed as f64;
        self.busy += f.busy;
    }

    /// Mean CPU of the running workers over the span.
    fn cpu(&self) -> f64 {
        if self.running > 0.0 {
            self.busy / (self.running * STEP_S)
        } else {
            0.0
        }
    }
}

/// Sums between series samples.
#[derive(Default)]
struct SeriesAcc {
    totals: Totals,
    backlog: f64,
    /// Stage latency samples of the span, seconds.
    samples: Vec<f64>,
    kafka_wait: f64,
}

impl SeriesAcc {
    fn add(&mut self, f: &StepFigures) {
        self.totals.add(f);
        self.backlog = f.backlog;
    }

    fn point(&mut self, t: f64, mean_bytes: f64, secu: f64) -> SeriesPoint {
        let n = self.totals.steps.max(1.0);
        let s = n * STEP_S;
        SeriesPoint {
            time_s: t,
            input_records_per_s: self.totals.input / s,
            input_mib_s: self.totals.input / s * mean_bytes / MIB,
            throughput_mib_s: self.totals.processed / s * mean_bytes / MIB,
            workers: self.totals.running / n,
            workers_billed: self.totals.billed / n,
            cpu: self.totals.cpu(),
            backlog_mib: self.backlog * mean_bytes / MIB,
            kafka_wait_s: self.kafka_wait,
            latency_p50_ms: quantile(&mut self.samples, 0.5) * 1000.0,
            latency_p99_ms: quantile(&mut self.samples, 0.99) * 1000.0,
            secu_per_hour: secu,
        }
    }
}

/// Sums after the warm-up.
#[derive(Default)]
struct PostWarmUp {
    totals: Totals,
    min_running: u32,
    max_running: u32,
    first_t: f64,
    last_t: f64,
    first_backlog: f64,
    last_backlog: f64,
    peak_backlog: f64,
}

impl PostWarmUp {
    fn add(&mut self, t: f64, f: &StepFigures) {
        if self.totals.steps == 0.0 {
            self.first_t = t;
            self.first_backlog = f.backlog;
            self.min_running = f.running;
        }
        self.totals.add(f);
        self.min_running = self.min_running.min(f.running);
        self.max_running = self.max_running.max(f.running);
        self.last_t = t;
        self.last_backlog = f.backlog;
        self.peak_backlog = self.peak_backlog.max(f.backlog);
    }
}

/// The whole pipeline's bill at the simulated rates: Dataflow for the time-averaged
/// billed pool, and the lines `cfg.pipeline` asks for at `records_s` of `mean_bytes`.
fn bill(
    cfg: &SimConfig,
    workers: f64,
    machine: &flexrun_estimator::MachineType,
    secu: f64,
    records_s: f64,
    mean_bytes: f64,
) -> Vec<flexrun_estimator::CostItem> {
    use flexrun_estimator::{pipeline, rowsize, Commitment, Line, Pricing};
    let pricing = Pricing::us_central1();
    let mut items = if cfg.pipeline.has(Line::Dataflow) {
        flexrun_estimator::bill(workers, machine, secu, Commitment::None, &pricing).0
    } else {
        Vec::new()
    };
    let row = cfg
        .row_bytes
        .or_else(|| rowsize::estimate_row_bytes(&rowsize::seed_table(), mean_bytes).ok())
        .unwrap_or(mean_bytes);
    items.extend(pipeline::items(records_s, row, records_s * mean_bytes, &cfg.pipeline, &pricing));
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slow path of [`serve`] on the same inputs (by claiming a backlog).
    fn slow(parts: usize, per_partition: f64, caps: Caps, workers: usize) -> (Vec<f64>, Vec<f64>, bool) {
        let (mut backlog, mut done, mut empty) = (vec![0.0; parts], vec![0.0; workers], false);
        serve(&mut backlog, per_partition, caps, &mut done, &mut empty);
        (backlog, done, empty)
    }

    #[test]
    fn the_steady_state_shortcut_serves_what_the_full_pass_serves() {
        for (parts, workers, per_partition, worker_cap, partition_cap) in [
            (1000, 63, 1000.0, 40_000.0, 20_000.0),
            (7, 3, 5.0, 15.0, 5.0),
            (5, 8, 1.0, 10.0, 10.0),
            (1000, 63, 1000.0, 10_000.0, 20_000.0),
            (10, 2, 300.0, 10_000.0, 100.0),
        ] {
            let caps = Caps { worker: worker_cap, partition: partition_cap };
            let (want_backlog, want_done, want_empty) = slow(parts, per_partition, caps, workers);
            let (mut backlog, mut done, mut empty) = (vec![0.0; parts], vec![0.0; workers], true);
            serve(&mut backlog, per_partition, caps, &mut done, &mut empty);
            assert_eq!(empty, want_empty, "{parts} partitions, {workers} workers");
            assert_eq!(backlog, want_backlog);
            for (a, b) in done.iter().zip(&want_done) {
                assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{a} vs {b}");
            }
        }
    }

    #[test]
    fn a_backlog_is_drained_by_the_full_pass_and_the_shortcut_resumes() {
        let caps = Caps { worker: 100.0, partition: 60.0 };
        // 40 per partition plus 50 queued on partition 0: worker 0 is short.
        let (mut backlog, mut done, mut empty) = (vec![50.0, 0.0, 0.0, 0.0], vec![0.0; 2], false);
        serve(&mut backlog, 40.0, caps, &mut done, &mut empty);
        assert!(!empty && backlog[0] > 0.0, "{backlog:?}");
        serve(&mut backlog, 10.0, caps, &mut done, &mut empty);
        assert!(empty, "a light step drains it: {backlog:?}");
        serve(&mut backlog, 10.0, caps, &mut done, &mut empty);
        assert_eq!(done, [20.0, 20.0]);
    }
}
