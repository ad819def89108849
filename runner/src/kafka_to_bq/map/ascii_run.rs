//! The one pass a plain string's contents get: how many bytes at the start of a slice
//! are printable ASCII other than a quote or a backslash. In the usual string the byte
//! it stops at is the closing quote, and the same pass has ruled out control characters
//! (which JSON forbids unescaped) and proved the contents ASCII, so UTF-8. Pure.
//!
//! 32 bytes at a time with AVX2 where the CPU has it (checked at run time, once per
//! call), else 16 at a time with SSE2 (part of x86_64 itself), then byte by byte; a
//! portable fold elsewhere. `map_floor` times it beside the passes it replaced.
//!
//! ```
//! use flexrun::kafka_to_bq::map::ascii_run::ascii_run;
//! assert_eq!(ascii_run(b"abc\"def"), 3);
//! assert_eq!(ascii_run("caf\u{e9}".as_bytes()), 3);
//! assert_eq!(ascii_run(&[b'x'; 40]), 40);
//! ```

/// Whether a string's reader must stop at `c`: a quote, a backslash, a control
/// character or a byte that is not ASCII. (As a signed byte, a control character and a
/// byte past ASCII are both below 0x20.)
#[inline(always)]
fn stops(c: u8) -> bool {
    (c == b'"') | (c == b'\\') | ((c as i8) < 0x20)
}

/// How many bytes at the start of `b` are printable ASCII other than a quote or a backslash.
pub fn ascii_run(b: &[u8]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if b.len() >= 32 && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { x86::run_avx2(b) };
    }
    run_from(b, 0)
}

/// [`ascii_run`] from `at` on, 16 bytes at a time, then byte by byte.
fn run_from(b: &[u8], mut at: usize) -> usize {
    while let Some(chunk) = b.get(at..at + 16) {
        let mask = chunk_mask(chunk.try_into().expect("16 bytes"));
        if mask != 0 {
            return at + mask.trailing_zeros() as usize;
        }
        at += 16;
    }
    at + b[at..].iter().position(|&c| stops(c)).unwrap_or(b.len() - at)
}

/// Bit i is set where byte i of `chunk` [`stops`] a string.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn chunk_mask(chunk: &[u8; 16]) -> u32 {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of x86_64 itself, so these instructions exist on every CPU
    // this code runs on; the load reads exactly the 16 bytes `chunk` borrows, and
    // `loadu` allows any alignment.
    unsafe {
        let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
        let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        let low_or_high = _mm_cmplt_epi8(v, _mm_set1_epi8(0x20));
        _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), low_or_high)) as u32
    }
}

/// Bit i is set where byte i of `chunk` [`stops`] a string.
#[cfg(not(target_arch = "x86_64"))]
fn chunk_mask(chunk: &[u8; 16]) -> u32 {
    chunk.iter().enumerate().fold(0, |m, (i, &c)| m | (u32::from(stops(c)) << i))
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// [`super::ascii_run`] 32 bytes at a time, then 16 at a time.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn run_avx2(b: &[u8]) -> usize {
        let (quote, backslash, space) =
            (_mm256_set1_epi8(b'"' as i8), _mm256_set1_epi8(b'\\' as i8), _mm256_set1_epi8(0x20));
        let mut at = 0;
        while let Some(chunk) = b.get(at..at + 32) {
            // SAFETY: the load reads exactly the 32 bytes `chunk` borrows, at any alignment.
            let v = unsafe { _mm256_loadu_si256(chunk.as_ptr().cast::<__m256i>()) };
            let hit = _mm256_or_si256(
                _mm256_or_si256(_mm256_cmpeq_epi8(v, quote), _mm256_cmpeq_epi8(v, backslash)),
                _mm256_cmpgt_epi8(space, v),
            );
            let mask = _mm256_movemask_epi8(hit) as u32;
            if mask != 0 {
                return at + mask.trailing_zeros() as usize;
            }
            at += 32;
        }
        super::run_from(b, at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-byte-at-a-time definition.
    fn slow(b: &[u8]) -> usize {
        b.iter().position(|&c| stops(c)).unwrap_or(b.len())
    }

    #[test]
    fn every_stopping_byte_is_found_at_every_position_by_every_width() {
        assert!((0..=255u8).filter(|&c| stops(c)).eq((0..0x20).chain([b'"', b'\\']).chain(0x80..=0xff)));
        for len in [0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100] {
            let clean = vec![b'a'; len];
            assert_eq!(ascii_run(&clean), len);
            assert_eq!(run_from(&clean, 0), len);
            for at in 0..len {
                for stop in [b'"', b'\\', 0x00, 0x1f, 0x80, 0xff] {
                    let mut b = clean.clone();
                    b[at] = stop;
                    assert_eq!(ascii_run(&b), slow(&b), "{stop} at {at} of {len}");
                    assert_eq!(run_from(&b, 0), slow(&b), "{stop} at {at} of {len}, 16 at a time");
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn matches_the_byte_at_a_time_definition(b in proptest::collection::vec(proptest::prop_oneof![20 => 0x20u8..0x7f, 1 => proptest::num::u8::ANY], 0..200)) {
            proptest::prop_assert_eq!(ascii_run(&b), slow(&b));
            proptest::prop_assert_eq!(run_from(&b, 0), slow(&b));
        }
    }
}
