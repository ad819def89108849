"""Make tansu 0.6.0's Fetch answer as Kafka documents it, for flexrun's local stack.

Kafka's protocol (error code 1, OFFSET_OUT_OF_RANGE): "The requested offset is not
within the range of offsets maintained by the server." A fetch at an offset past a
partition's high watermark, or before its log start, gets that error with the
partition's watermarks. tansu 0.6.0 answers such a fetch with no records and no error,
so a client cannot tell "past the end" from "nothing new", and librdkafka's
`auto.offset.reset` never fires. flexrun's consumers run with `auto.offset.reset=error`
and rely on the error (runner/src/kafka/gaps.rs).

Usage: python3 tansu_patch.py <dir holding tansu-storage/>. The patch checks that the
code it changes is still there, so another tansu version fails loudly.
"""

import pathlib
import sys

ANCHOR = """        let mut offset = fetch_partition.fetch_offset;

        loop {"""

CHECK = """        let mut offset = fetch_partition.fetch_offset;

        // flexrun's local stack (scripts/tansu_patch.py): Kafka answers a fetch outside
        // [log start, high watermark] with OFFSET_OUT_OF_RANGE ("The requested offset is
        // not within the range of offsets maintained by the server").
        {
            let stage = ctx
                .state()
                .offset_stage(&tp)
                .await
                .inspect_err(|error| error!(?error, ?tp))?;
            if offset > stage.high_watermark() || offset < stage.log_start() {
                return Ok(PartitionData::default()
                    .partition_index(partition_index)
                    .error_code(ErrorCode::OffsetOutOfRange.into())
                    .high_watermark(stage.high_watermark())
                    .last_stable_offset(Some(stage.last_stable()))
                    .log_start_offset(Some(stage.log_start()))
                    .diverging_epoch(None)
                    .current_leader(None)
                    .snapshot_id(None)
                    .aborted_transactions(Some([].into()))
                    .preferred_read_replica(Some(-1))
                    .records(None));
            }
        }

        loop {"""


def main() -> None:
    root = pathlib.Path(sys.argv[1])
    fetch = root / "tansu-storage" / "src" / "service" / "fetch.rs"
    text = fetch.read_text()
    if "scripts/tansu_patch.py" in text:
        return
    if text.count(ANCHOR) != 1:
        sys.exit(f"tansu_patch.py: {fetch} does not have the code this patch expects (another tansu version?)")
    fetch.write_text(text.replace(ANCHOR, CHECK))
    manifest = root / "tansu" / "Cargo.toml"
    m = manifest.read_text()
    if "[patch.crates-io]" not in m:
        m += '\n[patch.crates-io]\ntansu-storage = { path = "../tansu-storage" }\n'
        manifest.write_text(m)


if __name__ == "__main__":
    main()
