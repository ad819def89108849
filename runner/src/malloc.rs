//! glibc malloc settings applied once at start-up ([`tune`]).
//!
//! With glibc's defaults every batch frees its buffers back to the kernel (the heap
//! top is trimmed past 128 KiB, and blocks of 128 KiB or more are separate `mmap`s)
//! and faults them in again for the next batch. `flexrun calibrate` at 998-byte
//! messages (2026-12-04, medians of 3 alternated rounds) measured 624k minor page
//! faults in a 2 s run with the defaults and 13.5k with these settings, and 1.44× the
//! throughput per core; mimalloc gave 1.40× and jemalloc 1.30× (BENCHMARKS.md,
//! "Allocator"; `scripts/bench-allocators.sh` reproduces it). These settings need no
//! other allocator in the build, and a user's `GLIBC_TUNABLES` still wins.

/// Keep up to 1 GiB of freed heap instead of trimming it.
pub const TRIM_THRESHOLD: i32 = 1 << 30;
/// Serve blocks below 32 MiB from the heap rather than from their own `mmap`.
pub const MMAP_THRESHOLD: i32 = 32 << 20;
/// Grow the heap 64 MiB at a time.
pub const TOP_PAD: i32 = 64 << 20;

/// Why [`tune`] left malloc as it was, if it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    /// `GLIBC_TUNABLES` sets malloc tunables: the user's choice stands.
    UserTunables,
    /// `FLEXRUN_MALLOPT=0` (benchmarks of the defaults).
    Disabled,
}

/// Apply [`TRIM_THRESHOLD`], [`MMAP_THRESHOLD`] and [`TOP_PAD`], unless the
/// environment says otherwise (see [`Skipped`]).
pub fn tune() -> Result<(), Skipped> {
    if std::env::var("FLEXRUN_MALLOPT").is_ok_and(|v| v == "0") {
        return Err(Skipped::Disabled);
    }
    if std::env::var("GLIBC_TUNABLES").is_ok_and(|v| v.contains("glibc.malloc.")) {
        return Err(Skipped::UserTunables);
    }
    // SAFETY: mallopt only changes allocator parameters; it is called before any
    // other thread exists.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TOP_PAD, TOP_PAD);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each test runs in its own process under cargo-nextest, so setting the
    // environment here does not leak into other tests.
    #[test]
    fn the_users_settings_win_over_flexruns() {
        std::env::set_var("FLEXRUN_MALLOPT", "0");
        assert_eq!(tune(), Err(Skipped::Disabled));
        std::env::remove_var("FLEXRUN_MALLOPT");
        std::env::set_var("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1");
        assert_eq!(tune(), Err(Skipped::UserTunables));
        std::env::set_var("GLIBC_TUNABLES", "glibc.pthread.rseq=0");
        assert_eq!(tune(), Ok(()), "tunables of other kinds leave malloc to flexrun");
        std::env::remove_var("GLIBC_TUNABLES");
    }
}
