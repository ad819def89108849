//! Mapping a batch's messages as the shard takes them (issue 29, step 3).
//!
//! A shard used to map a batch only once it was cut. By then the first messages'
//! payloads had left the cache: a batch of 8 shards' messages is larger than a core's
//! L2, and the profile of an exactly-once run put a third of the mapping's time in
//! its first read of each payload (`simdutf8`'s validation). A payload read right
//! after librdkafka put it in its fetch buffer costs less (BENCHMARKS.md, "Hot path").
//!
//! So when a row depends on nothing but the message's key and value
//! ([`Mapper::maps_alone`](super::transform::Mapper::maps_alone)), the shard maps
//! each burst of messages right after taking it ([`EarlyMapping::map`]), on its
//! worker's CPU ([`WorkerSlot::work`](crate::scaling::WorkerSlot::work)), and keeps
//! each row with its record ([`Records::set_early`]). When the batch is processed,
//! [`super::batch::map_batch`] uses the kept rows instead of mapping again, if the
//! batch is processed with the same [`Mapping`] ([`EarlyMapping::is_for`]; a schema
//! change in between discards them). A message that did not map is mapped again
//! there, and goes the usual way (a dead letter, a schema change). A row is the same
//! bytes either way: mapping is a function of the mapping and the message alone, which
//! the test `an_early_row_is_the_row_the_batch_would_map` checks.

use super::batch::RowPool;
use super::records::{EarlyRow, Records};
use super::{JobCtx, Mapping};
use crate::stats::{Stage, StageSamples};
use std::sync::Arc;
use std::time::Instant;

/// How one open batch maps its messages as they are taken.
pub(super) struct EarlyMapping {
    mapping: Arc<Mapping>,
    /// Whether each row's CRC32C is taken too (exactly-once into BigQuery).
    crcs: bool,
    /// The messages mapped so far, and their bytes: the batch's worker counted them
    /// as they were mapped, so its processing counts only the rest.
    pub(super) records: u64,
    /// See `records`.
    pub(super) bytes: u64,
}

impl EarlyMapping {
    /// The early mapping of a new batch, when the job's current mapping allows one.
    pub(super) fn for_batch(ctx: &JobCtx, crcs: bool) -> Option<EarlyMapping> {
        let mapping = ctx.current();
        mapping.mapper.maps_alone().then_some(EarlyMapping { mapping, crcs, records: 0, bytes: 0 })
    }

    /// Whether rows mapped early may stand for `mapping`'s.
    pub(super) fn is_for(&self, mapping: &Mapping) -> bool {
        std::ptr::eq(Arc::as_ptr(&self.mapping), mapping)
    }

    /// Map records `from..` of `msgs` (a burst just taken) and keep each row with its
    /// record. A record that does not map keeps no row. The burst is timed as one, as
    /// [`super::batch::map_values`] times a batch.
    pub(super) fn map(&mut self, msgs: &mut Records, from: usize, stages: &mut StageSamples, pool: &mut RowPool) {
        let t = Instant::now();
        for i in from..msgs.len() {
            let m = msgs.at(i);
            let value = m.payload().unwrap_or_default();
            let mut row = pool.take(value.len() + 16);
            match self.mapping.mapper.map_message(m.key(), value, None, &mut row) {
                Ok(()) => {
                    let crc = self.crcs.then(|| crc32c::crc32c(&row));
                    msgs.set_early(i, EarlyRow { row, crc });
                }
                Err(_) => pool.give(row),
            }
        }
        let n = msgs.len().saturating_sub(from) as u64;
        self.records += n;
        self.bytes += msgs.iter().skip(from).map(|m| m.payload().map_or(0, <[u8]>::len) as u64).sum::<u64>();
        if n > 0 {
            stages.record_n(Stage::Transform, (t.elapsed().as_nanos() as u64).div_ceil(1000 * n), n);
        }
    }
}
