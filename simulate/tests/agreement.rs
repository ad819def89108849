//! `estimate` and `simulate` size the same pipeline alike: over a grid of rates,
//! message sizes and both delivery modes, the pool a simulation settles at is the
//! estimate's worker count within 1 %, and so are the Streaming Engine units.
//!
//! Both take the CPU a message costs from the same baseline and size the pool with the
//! one rule, `flexrun_autoscaler::pool_for`, at the baseline's measured utilization
//! (`estimate` directly, `simulate` through the Dataflow policy's scale-down target).
//! The input is steady and noiseless here, and under the US multi-region's Storage Write
//! quota (3 GiB/s), so the comparison is of the sizing alone.

use flexrun_autoscaler::ScalingConfig;
use flexrun_estimator::{Commitment, Mode, Pricing, Request};
use flexrun_simulate::{MessageSize, Profile, SimConfig, Workload};

const MIB: f64 = 1024.0 * 1024.0;

fn estimated(bytes_s: f64, size: f64, mode: Mode) -> (u32, f64) {
    let req = Request::new(bytes_s, size, mode, "e2-standard-2", Commitment::None);
    let file = flexrun_estimator::google_kafka_to_bq();
    let e = flexrun_estimator::estimate(&req, "google", &file, &Pricing::us_central1()).expect("an estimate");
    (e.workers, e.secu_per_hour)
}

fn simulated(bytes_s: f64, size: f64, mode: Mode) -> (f64, f64) {
    let workload = Workload {
        base_records_per_s: bytes_s / size,
        message: MessageSize::Fixed(size),
        partitions: 8000,
        duration_s: 8.0 * 3600.0,
        profile: Profile::Constant,
        noise: 0.0,
    };
    let pool = ScalingConfig { max_workers: 4000, ..Default::default() };
    let cfg = SimConfig::google(workload, mode, pool, "e2-standard-2", 0.0);
    let s = flexrun_simulate::run(&cfg, &mut |_| {}).summary;
    (s.workers_mean, s.secu_per_hour)
}

#[test]
fn estimate_and_simulate_agree_within_one_percent_over_a_grid() {
    let mut rows = Vec::new();
    for mib_s in [10.0, 100.0, 1024.0, 2048.0] {
        for size in [130.0, 1024.0, 10240.0] {
            for mode in [Mode::ExactlyOnce, Mode::AtLeastOnce] {
                let (ew, es) = estimated(mib_s * MIB, size, mode);
                let (sw, ss) = simulated(mib_s * MIB, size, mode);
                let off = (sw - ew as f64).abs() / ew as f64;
                let secu_off = if es == 0.0 { ss.abs() } else { (ss - es).abs() / es };
                rows.push(format!(
                    "{mib_s:>6} MiB/s {size:>6} B {:>13}: estimate {ew:>4} workers {es:>7.2} SECU · simulate {sw:>7.2} {ss:>7.2}",
                    mode.as_str()
                ));
                assert!(off <= 0.01 && secu_off <= 0.01, "disagree:\n{}", rows.join("\n"));
            }
        }
    }
    eprintln!("{}", rows.join("\n"));
}

#[test]
fn the_seed_is_sized_at_googles_published_pools() {
    let (eo, _) = simulated(1024.0 * MIB, 1024.0, Mode::ExactlyOnce);
    let (alo, _) = simulated(1024.0 * MIB, 1024.0, Mode::AtLeastOnce);
    assert_eq!((eo.round(), alo.round()), (63.0, 53.0), "seed 001 publishes 63 and 53 workers");
}
