//! The Storage Write throughput quota, simulated as Google enforces it: a token bucket
//! refilled at the quota for the dataset's location.

use flexrun_autoscaler::{Algorithm, ScalingConfig};
use flexrun_estimator::Mode;
use flexrun_simulate::{MessageSize, Profile, SimConfig, SimSummary, Workload, WriteQuota};

const MIB: f64 = 1024.0 * 1024.0;

fn workload(bytes_s: f64, hours: f64) -> Workload {
    Workload {
        base_records_per_s: bytes_s / 1024.0,
        message: MessageSize::Fixed(1024.0),
        partitions: 2000,
        duration_s: hours * 3600.0,
        profile: Profile::Constant,
        noise: 0.02,
    }
}

fn seed_into(location: &str) -> SimSummary {
    let pool = ScalingConfig { max_workers: 1000, ..Default::default() };
    let cfg = SimConfig {
        write_quota: Some(WriteQuota::google(location).unwrap()),
        ..SimConfig::google(workload(1024.0 * MIB, 6.0), Mode::ExactlyOnce, pool, "e2-standard-2", 0.0)
    };
    flexrun_simulate::run(&cfg, &mut |_| {}).summary
}

#[test]
fn a_gib_per_second_into_a_region_is_held_to_its_quota_and_named() {
    let s = seed_into("us-central1");
    assert_eq!(s.bottleneck.short(), "write-quota", "{}", s.bottleneck.describe());
    // After warm-up the bucket is long spent: the job writes at the quota, 300 MiB/s.
    assert!((s.throughput_mib_s - 300.0).abs() < 3.0, "{} MiB/s", s.throughput_mib_s);
    assert!(s.write_quota_throttled_s > 0.9 * 4.0 * 3600.0, "{} s", s.write_quota_throttled_s);
    assert!(s.limits.iter().any(|l| l.limit == "storage-write-throughput"), "{:?}", s.limits);
    assert!(s.backlog_final_mib > 1000.0, "the rest waits in Kafka: {} MiB", s.backlog_final_mib);
}

#[test]
fn the_same_into_the_us_multi_region_is_not() {
    let s = seed_into("US");
    assert_eq!(s.bottleneck.short(), "none", "{}", s.bottleneck.describe());
    assert_eq!(s.write_quota_throttled_s, 0.0);
    assert!(s.limits.iter().all(|l| !l.limit.starts_with("storage-write")), "{:?}", s.limits);
    assert!((s.throughput_mib_s - 1024.0).abs() < 15.0, "{} MiB/s", s.throughput_mib_s);
}

/// Held out: github:johanesalxd/dataflow-pubsub-perf-test, round 2. Three jobs in
/// asia-southeast1 (a 300 MiB/s region) asked ~1.8x the quota; over 39 minutes they
/// averaged ~360 MB/s. Only the burst's length (5-7 minutes at 1.8x) was used to set the
/// bucket's depth; the 39-minute average was not.
#[test]
fn johanesalxd_round_2_average_is_predicted_within_ten_percent() {
    let quota = WriteQuota::google("asia-southeast1").unwrap();
    let pool = ScalingConfig { num_workers: 60, max_workers: 60, algorithm: Algorithm::None, ..Default::default() };
    let mut w = workload(1.8 * quota.bytes_s, 39.0 / 60.0);
    w.noise = 0.0;
    let cfg = SimConfig {
        write_quota: Some(quota),
        warm_up_s: 0.0,
        ..SimConfig::google(w, Mode::AtLeastOnce, pool, "e2-standard-2", 0.0)
    };
    let s = flexrun_simulate::run(&cfg, &mut |_| {}).summary;
    let mb_s = s.throughput_mib_s * MIB / 1e6;
    eprintln!("predicted {mb_s:.0} MB/s against a published ~360 MB/s");
    assert!((mb_s - 360.0).abs() / 360.0 < 0.10, "{mb_s:.0} MB/s");
}
