//! What every autoscaled template shares: a worker's emulated CPU ([`WorkerSlot`],
//! whose busy time feeds the autoscaler), the autoscaling step itself
//! ([`step::Autoscaler`]: snapshot, decision, log and events), and how `gcloud dataflow
//! jobs update-options` reaches a job's [`Controller`] ([`apply_update`]), and the one
//! pool a job of several topics runs all its topics on ([`shared::SharedWorkers`]).
//!
//! kafka-to-bq runs shards on its workers ([`crate::kafka_to_bq`]'s pool);
//! kafka-to-gcs renders each window's file shards on them ([`crate::kafka_to_gcs`]).

pub mod shared;
pub mod step;
pub mod worker;

pub use shared::SharedWorkers;
pub use step::Autoscaler;
pub use worker::{Capacity, WorkerSlot};

use flexrun_autoscaler::Controller;

/// Apply `gcloud dataflow jobs update-options` to the controller: the next decision
/// uses the new bounds and hint. A refused combination is logged and recorded as a
/// NO_CHANGE event (the control socket already refuses min above max).
pub fn apply_update(
    c: &crate::control::Control,
    controller: &mut Controller,
    u: &crate::control::OptionsUpdate,
    workers: u32,
) {
    let l = *controller.limits();
    let hint = if u.unset_utilization_hint {
        flexrun_autoscaler::DEFAULT_UTILIZATION_HINT
    } else {
        u.utilization_hint.unwrap_or(l.utilization_hint)
    };
    let (min, max) = (u.min_workers.unwrap_or(l.min_workers), u.max_workers.unwrap_or(l.max_workers));
    let text = format!("options updated: workers {min}..{max}, utilization hint {hint}");
    match controller.set_limits(min, max, hint) {
        Ok(()) => {
            tracing::info!(min, max, hint, "update-options applied; deciding now");
            c.event("NO_CHANGE", workers, workers, format!("Autoscaling: {text}"));
        }
        Err(e) => {
            tracing::warn!(error = %e, "update-options refused");
            c.event("NO_CHANGE", workers, workers, format!("Autoscaling: {text} refused: {e}"));
        }
    }
}
