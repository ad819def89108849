//! The floor under kafka-to-bq's own work per message, pass by pass, on the seed's
//! message shape (`{"logStreamId":N,"message":"<962 characters>"}`, 998 bytes).
//!
//! Issue 29 asks, before a goal is called out of reach, for the tightest version of
//! the step in isolation. This prints, in CPU-ns per byte (= CPU-s per GB):
//! - each pass alone: reading every byte, UTF-8 validation (no longer on the usual path),
//!   one copy, the CRC-32C that exactly-once logs;
//! - a string's checks before (`memchr2` for its end, a fold for control characters) and
//!   now (`ascii_run`: one pass that also proves it ASCII, so UTF-8 needs no pass);
//! - `tight`: a hand-written path for this one shape only (one-pass scan, the row
//!   written straight into one request buffer, CRC of the row): the best this machine does;
//! - flexrun's path: `map_values` (the row encoding a shard runs: the shaped path once the
//!   first message's layout is learned, else the lean parser), then with each row's
//!   CRC taken as it is written, the digest over them; the same with the request framed
//!   as the writer sends it (what calibrate times: its head, and its rows as a slice of
//!   the batch's buffer); and the same copied into a `BytesMut` as tonic's codec did
//!   before, so the last two differ by the copy out alone.
//!
//! Each runs over a working set that stays in L2 (*hot*: 256 messages) and over one far
//! larger than the caches (*cold*: 512 MiB), as messages are when the job maps them:
//! librdkafka fetched them well before (`queued.min.messages`), and the bare consumer
//! never reads a payload's bytes at all.
//!
//! ```text
//! cargo run --release --example map_floor -- [ROUNDS]
//! ```
//! Prints a Markdown table: medians of ROUNDS (default 3) per step and set.

use flexrun::bigquery::framed::frame;
use flexrun::bigquery::rows::Rows;
use flexrun::kafka_to_bq::map::ascii_run::ascii_run;
use flexrun::kafka_to_bq::map::transform::{Mapper, DEFAULT_MAX_ROW_BYTES};
use flexrun::kafka_to_bq::run::batch::{crcs_digest, map_values, RowPool};
use flexrun::sizing::calibrate::Shape;
use flexrun::stats::StageSamples;
use std::hint::black_box;
use std::sync::Arc;

/// Messages per batch, as a shard's batches of this shape run.
const BATCH: usize = 1000;
/// Distinct messages; the cold set repeats them at new addresses.
const DISTINCT: usize = 256;
/// The cold set's size.
const COLD_BYTES: usize = 512 << 20;
/// Where the seed's string starts: after `{"logStreamId":`, seven digits and `,"message":"`.
const CONTENTS: usize = 34;

/// Messages laid out one after another, as librdkafka's buffers hold them.
struct Set {
    name: &'static str,
    arena: Vec<u8>,
    spans: Vec<(usize, usize)>,
}

impl Set {
    fn new(name: &'static str, distinct: &[Vec<u8>], bytes: usize) -> Set {
        let (mut arena, mut spans) = (Vec::with_capacity(bytes + 2048), Vec::new());
        for m in distinct.iter().cycle() {
            if arena.len() + m.len() > bytes.max(1) {
                break;
            }
            spans.push((arena.len(), arena.len() + m.len()));
            arena.extend_from_slice(m);
        }
        Set { name, arena, spans }
    }

    fn batches(&self) -> impl Iterator<Item = Vec<&[u8]>> + '_ {
        self.spans.chunks(BATCH).map(|c| c.iter().map(|(a, b)| &self.arena[*a..*b]).collect())
    }
}

/// One step: what it does to each batch.
type Step = fn(&Mapper, &[&[u8]], &mut Scratch) -> u64;

/// Buffers a step keeps between batches.
#[derive(Default)]
struct Scratch {
    buf: Vec<u8>,
    tonic: bytes::BytesMut,
    pool: RowPool,
    stages: StageSamples,
}

fn touch(_: &Mapper, batch: &[&[u8]], _: &mut Scratch) -> u64 {
    batch.iter().map(|m| m.iter().fold(0u8, |a, b| a ^ b) as u64).sum()
}

fn utf8(_: &Mapper, batch: &[&[u8]], _: &mut Scratch) -> u64 {
    batch.iter().filter(|m| simdutf8::basic::from_utf8(m).is_ok()).count() as u64
}

fn copy(_: &Mapper, batch: &[&[u8]], s: &mut Scratch) -> u64 {
    s.buf.clear();
    for m in batch {
        s.buf.extend_from_slice(m);
    }
    s.buf.len() as u64
}

fn crc(_: &Mapper, batch: &[&[u8]], _: &mut Scratch) -> u64 {
    batch.iter().fold(0u32, |c, m| c ^ flexrun::checksum::crc32c(m)) as u64
}

/// The CRC as taken before, with the `crc32c` crate (SSE 4.2's `crc32` instruction).
fn crc_crate(_: &Mapper, batch: &[&[u8]], _: &mut Scratch) -> u64 {
    batch.iter().fold(0u32, |c, m| c ^ crc32c::crc32c(m)) as u64
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The string checks before `ascii_run`: the end by `memchr2`, then a fold for control
/// characters (UTF-8 was a pass of its own over the whole message).
fn string_before(_: &Mapper, batch: &[&[u8]], _: &mut Scratch) -> u64 {
    let mut n = 0;
    for m in batch {
        let end = memchr::memchr2(b'"', b'\\', &m[CONTENTS..]).expect("a closing quote");
        // A fold, not `any`: without the early exit the check compiles to SIMD compares.
        n += u64::from(m[CONTENTS..CONTENTS + end].iter().fold(false, |a, b| a | (*b < 0x20))) + end as u64;
    }
    n
}

/// The string check now: one pass that finds the end, rules out control characters
/// and proves the contents ASCII (so UTF-8).
fn string_now(_: &Mapper, batch: &[&[u8]], _: &mut Scratch) -> u64 {
    batch.iter().map(|m| ascii_run(&m[CONTENTS..]) as u64).sum()
}

/// This shape only: find the number and the string (checked as the lean parser checks
/// it, in one pass), write the row (field 1 a varint, field 2 the bytes) framed in the
/// request buffer, and take its CRC.
fn tight_one(m: &[u8], out: &mut Vec<u8>, crc: u32) -> Option<u32> {
    let rest = m.strip_prefix(br#"{"logStreamId":"#)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let n = rest[..digits].iter().fold(0u64, |a, d| a * 10 + (d - b'0') as u64);
    let text = rest[digits..].strip_prefix(br#","message":""#)?;
    let end = ascii_run(text);
    if &text[end..] != b"\"}" {
        return None;
    }
    let row_len = 1 + 3 + 1 + 2 + end;
    out.push(0x0a);
    varint(row_len as u64, out);
    let start = out.len();
    out.push(0x08);
    varint(n, out);
    out.push(0x12);
    varint(end as u64, out);
    out.extend_from_slice(&text[..end]);
    Some(crc ^ flexrun::checksum::crc32c(&out[start..]))
}

fn tight(_: &Mapper, batch: &[&[u8]], s: &mut Scratch) -> u64 {
    s.buf.clear();
    let mut c = 0;
    for m in batch {
        c = tight_one(m, &mut s.buf, c).expect("the seed's shape");
    }
    c as u64
}

fn flexrun_map(mapper: &Mapper, batch: &[&[u8]], s: &mut Scratch) -> u64 {
    let out = map_values(mapper, batch.iter().map(|v| (None, *v, None)), &mut s.stages, &mut s.pool, false);
    let n = out.rows.len() as u64;
    s.pool.give(out.rows);
    s.stages = StageSamples::default();
    n
}

/// The rows of `batch` mapped into the pooled wire-form buffer with their CRCs, and
/// the digest taken over them: the part `flexrun_rows`, `flexrun_batch` and
/// `flexrun_tonic` share.
fn rows_and_digest(mapper: &Mapper, batch: &[&[u8]], s: &mut Scratch) -> (Rows, u32) {
    let out = map_values(mapper, batch.iter().map(|v| (None, *v, None)), &mut s.stages, &mut s.pool, true);
    let digest = crcs_digest(&out.rows, &out.row_crcs);
    (out.rows, digest)
}

/// The rows handed back to the pool for the next batch.
fn recycle(s: &mut Scratch, rows: Rows) {
    s.pool.give(rows);
    s.stages = StageSamples::default();
}

/// The writer's path: rows mapped into the batch's wire-form buffer with their CRCs,
/// the digest, and the request framed (its head written; its rows a slice of the
/// batch's buffer, which HTTP/2 sends as it is).
fn flexrun_batch(mapper: &Mapper, batch: &[&[u8]], s: &mut Scratch) -> u64 {
    let (rows, digest) = rows_and_digest(mapper, batch, s);
    let rows = Arc::new(rows);
    let req = frame("projects/p/datasets/d/tables/t/streams/s", Some(0), None, &rows, 0..rows.len());
    let (head, body) = req.pieces();
    let sent = black_box(head).len() as u64 + black_box(body).len() as u64;
    drop(req);
    recycle(s, Arc::try_unwrap(rows).expect("the request was dropped"));
    digest as u64 + sent
}

/// `flexrun_batch` up to the digest: the rows mapped and checksummed, nothing framed.
fn flexrun_rows(mapper: &Mapper, batch: &[&[u8]], s: &mut Scratch) -> u64 {
    let (rows, digest) = rows_and_digest(mapper, batch, s);
    recycle(s, rows);
    digest as u64
}

/// `flexrun_batch` with the request copied as tonic's codec did before (its
/// `EncodedBytes`): into a `BytesMut` that gets the gRPC header and the request, is
/// split and frozen into the chunk HTTP/2 sends, and is reclaimed for the next one once
/// that chunk is dropped. The difference from `flexrun_batch` is the copy out the
/// writer no longer makes.
fn flexrun_tonic(mapper: &Mapper, batch: &[&[u8]], s: &mut Scratch) -> u64 {
    use bytes::BufMut;
    let (rows, digest) = rows_and_digest(mapper, batch, s);
    let rows = Arc::new(rows);
    let req = frame("projects/p/datasets/d/tables/t/streams/s", Some(0), None, &rows, 0..rows.len());
    let (head, body) = req.pieces();
    s.tonic.reserve(head.len() + body.len());
    s.tonic.put_slice(head);
    s.tonic.put_slice(body);
    let chunk = s.tonic.split_to(s.tonic.len()).freeze();
    let sent = black_box(chunk).len() as u64;
    drop(req);
    recycle(s, Arc::try_unwrap(rows).expect("the request was dropped"));
    digest as u64 + sent
}

fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes into the struct we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// CPU-ns per byte of `step` over `set`, passing over it until 0.3 s of CPU.
fn measure(step: Step, mapper: &Mapper, set: &Set) -> f64 {
    let mut s = Scratch::default();
    let (t0, mut bytes, mut sink) = (thread_cpu_s(), 0usize, 0u64);
    while thread_cpu_s() - t0 < 0.3 {
        for b in set.batches() {
            sink = sink.wrapping_add(step(mapper, &b, &mut s));
            bytes += b.iter().map(|m| m.len()).sum::<usize>();
        }
    }
    black_box(sink);
    (thread_cpu_s() - t0) * 1e9 / bytes as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // As the binary does at start-up, so buffers are reused as they are in the job.
    let _ = flexrun::malloc::tune();
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3).max(1);
    let shape = Shape::seed(962);
    let mapper = Mapper::new(shape.schema.clone(), DEFAULT_MAX_ROW_BYTES);
    let distinct: Vec<Vec<u8>> = (0..DISTINCT as u64).map(|i| flexrun::local::seed_shape_message(i, 7, 962)).collect();
    let mean = distinct.iter().map(Vec::len).sum::<usize>() / DISTINCT;
    assert!(distinct.iter().all(|m| m[..CONTENTS].ends_with(br#","message":""#)), "the seed's layout");
    let sets = [Set::new("hot", &distinct, DISTINCT * mean), Set::new("cold", &distinct, COLD_BYTES)];
    let steps: [(&str, Step); 12] = [
        ("read every byte", touch),
        ("UTF-8 validation (simdutf8)", utf8),
        ("a string's end + control characters (memchr2, fold: before)", string_before),
        ("a string's end + control characters + ASCII (ascii_run: now)", string_now),
        ("one copy into a reused buffer", copy),
        ("CRC-32C of each message (checksum: crc-fast)", crc),
        ("CRC-32C of each message (the crc32c crate, before)", crc_crate),
        ("tight: this shape only, one-pass scan + framed row + CRC", tight),
        ("flexrun map_values (shaped path, row encoding)", flexrun_map),
        ("flexrun map_values + row CRCs + digest (nothing framed)", flexrun_rows),
        ("the same + framed as the writer sends it (head + a slice of the rows)", flexrun_batch),
        ("the same + copied as tonic's codec did (BytesMut, split, frozen, reclaimed)", flexrun_tonic),
    ];
    println!("messages of {mean} bytes; CPU-ns per byte, medians of {rounds} rounds\n");
    println!("| step | hot (L2) | cold ({} MiB) |", COLD_BYTES >> 20);
    println!("|---|---:|---:|");
    for (name, step) in steps {
        let cell = |set: &Set| median((0..rounds).map(|_| measure(step, &mapper, set)).collect());
        println!("| {name} | {:.3} | {:.3} |", cell(&sets[0]), cell(&sets[1]));
        eprintln!("[map_floor] {name}: done ({}, {})", sets[0].name, sets[1].name);
    }
}
