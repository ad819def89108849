//! Debezium change events as CDC (`cdcFormat=DEBEZIUM`): the envelope's `op` is the
//! change, `after` (or, for a delete, `before`) is the row, and the `source` block's log
//! position is `_CHANGE_SEQUENCE_NUMBER`.
//!
//! Debezium's documentation (connectors/postgresql, "Data change events"): `op` is "`c`
//! create, `u` update, `d` delete, `r` read (applies to only snapshots), `t` truncate,
//! `m` message"; `before` is null for a create and `after` null for a delete. With the
//! JSON converter's `schemas.enable=true` the event is `{"schema": …, "payload": …}`;
//! without, it is the payload alone. Both are read.
//!
//! | op | written as |
//! |---|---|
//! | `c`, `r`, `u` | UPSERT of `after` |
//! | `d` | DELETE of `before` (its key columns name the row) |
//! | `t` | a dead letter: BigQuery's CDC has no truncate |
//! | `m` | skipped and counted (a logical decoding message, no row) |
//!
//! Records that are not changes are skipped and counted: the tombstone Debezium writes
//! after each delete ("a special tombstone event that has the same key but a null
//! value"), heartbeats (`{"ts_ms": …}` only), schema-change events (`ddl`,
//! `tableChanges`) and transaction markers (`status` BEGIN or END).
//!
//! # The sequence
//! BigQuery compares `_CHANGE_SEQUENCE_NUMBER` "by comparing the first section, then
//! comparing the next section only if the previous sections were equal", with up to four
//! sections of at most 16 hexadecimal digits. Each connector's log position fills the
//! first sections, and the Kafka offset the last (a tie-break inside one partition, for
//! snapshot reads that share one position):
//!
//! | `source.connector` | sections |
//! |---|---|
//! | `postgresql` | `sequence`'s last commit LSN, then its LSN (or `lsn` alone), offset |
//! | `mysql`, `mariadb` | the binlog `file`'s number, `pos`, `row`, offset |
//! | `sqlserver` | `commit_lsn`, `change_lsn` (10 bytes each) and `event_serial_no`, packed into three sections, offset |
//! | `oracle` | `commit_scn` (or `scn`), `scn`, offset |
//! | `mongodb` | `ts_ms`, `ord`, offset |
//! | any other | `source.ts_ms`, offset (weaker: changes in one millisecond tie) |
//!
//! These positions come from one database's log, so changes to one table read through
//! several topics (or partitions) still order correctly; two databases' positions are
//! not comparable, and one table should be fed by one source database.

use super::cdc::ChangeType;
use super::json_row::kind;
use crate::record::RecordError;
use serde_json::{Map, Value};

/// What a Debezium record is, once classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A change to one row: its type, which part of the envelope is the row, and its
    /// sequence number.
    Change {
        /// UPSERT (create, read, update) or DELETE.
        change: ChangeType,
        /// `after`, or `before` for a delete.
        part: Part,
        /// `_CHANGE_SEQUENCE_NUMBER`.
        sequence: String,
    },
    /// Not a change; skipped and counted.
    Skip(Skipped),
}

/// The envelope's field that holds the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `after`: the row as the change left it.
    After,
    /// `before`: the row a delete removed (at least its key columns).
    Before,
}

impl Part {
    /// The field's name.
    pub fn name(self) -> &'static str {
        match self {
            Part::After => "after",
            Part::Before => "before",
        }
    }

    /// Why the row could not be read when the part is `found` (null, absent, or
    /// another kind of value).
    pub fn missing(self, found: &str) -> RecordError {
        match self {
            Part::Before if found == "null" || found == "absent" => RecordError::Cdc(
                "a Debezium delete without before: the row to delete cannot be named (PostgreSQL: REPLICA IDENTITY must not be NOTHING)".into(),
            ),
            _ => RecordError::Cdc(format!("Debezium {} is {found}; expected the row as an object", self.name())),
        }
    }

    /// The row in a JSON event.
    pub fn of(self, event: &Map<String, Value>) -> Result<&Map<String, Value>, RecordError> {
        match event.get(self.name()) {
            Some(Value::Object(r)) => Ok(r),
            other => Err(self.missing(other.map_or("absent", kind))),
        }
    }
}

/// The records a Debezium job skips (neither a row nor a dead letter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    /// A null value: the tombstone after a delete.
    Tombstone,
    /// A heartbeat (`{"ts_ms": …}`).
    Heartbeat,
    /// A schema-change event (`ddl`, `tableChanges`).
    SchemaChange,
    /// A transaction marker (`status` BEGIN or END).
    Transaction,
    /// A logical decoding message (`op` = `m`).
    Message,
}

impl Skipped {
    /// Its name in logs and the summary.
    pub fn as_str(self) -> &'static str {
        match self {
            Skipped::Tombstone => "tombstone",
            Skipped::Heartbeat => "heartbeat",
            Skipped::SchemaChange => "schema change",
            Skipped::Transaction => "transaction marker",
            Skipped::Message => "logical decoding message",
        }
    }
}

/// The event inside a JSON record: the `payload` of `{"schema", "payload"}`, or the
/// record itself. None: a null payload (a tombstone written by the schema-wrapped
/// converter).
pub fn unwrap_payload(v: &Value) -> Result<Option<&Map<String, Value>>, RecordError> {
    let Value::Object(o) = v else {
        return Err(RecordError::Cdc(format!("a Debezium event is a JSON object; found {}", kind(v))));
    };
    let inner = match (o.get("schema"), o.get("payload")) {
        (Some(_), Some(p)) => p,
        _ => v,
    };
    match inner {
        Value::Null => Ok(None),
        Value::Object(p) => Ok(Some(p)),
        other => Err(RecordError::Cdc(format!("the Debezium payload is {}; expected an object", kind(other)))),
    }
}

/// Classify one event (the payload). `offset` is the record's Kafka offset (the last
/// section of the sequence).
pub fn classify(event: &Map<String, Value>, offset: i64) -> Result<Event, RecordError> {
    let Some(op) = event.get("op") else {
        return not_a_change(event).map(Event::Skip);
    };
    let op = op.as_str().ok_or_else(|| RecordError::Cdc(format!("Debezium op is {}; expected a string", kind(op))))?;
    let (change, part) = match op {
        "c" | "r" | "u" => (ChangeType::Upsert, Part::After),
        "d" => (ChangeType::Delete, Part::Before),
        "m" => return Ok(Event::Skip(Skipped::Message)),
        "t" => {
            return Err(RecordError::Cdc(
                "a Debezium truncate (op t): BigQuery's change data capture takes only UPSERT and DELETE by key, so a truncate cannot be applied; truncate the table by hand, or set the connector's skipped.operations=t".into(),
            ))
        }
        other => {
            return Err(RecordError::Cdc(format!("Debezium op is {other:?}; expected c, r, u, d, t or m")));
        }
    };
    let source = match event.get("source") {
        Some(Value::Object(s)) => s,
        _ => {
            return Err(RecordError::Cdc("a Debezium change without a source block; its log position orders it".into()))
        }
    };
    Ok(Event::Change { change, part, sequence: sequence(source, offset)? })
}

/// What an event without `op` is: a heartbeat, a schema change or a transaction marker.
fn not_a_change(event: &Map<String, Value>) -> Result<Skipped, RecordError> {
    if event.contains_key("ddl") || event.contains_key("tableChanges") {
        return Ok(Skipped::SchemaChange);
    }
    if matches!(event.get("status").and_then(Value::as_str), Some("BEGIN" | "END")) {
        return Ok(Skipped::Transaction);
    }
    if event.len() == 1 && event.contains_key("ts_ms") {
        return Ok(Skipped::Heartbeat);
    }
    let keys: Vec<&str> = event.keys().map(String::as_str).take(6).collect();
    Err(RecordError::Cdc(format!(
        "not a Debezium change event: no op field (keys: {}); expected before, after, source and op",
        keys.join(", ")
    )))
}

/// `_CHANGE_SEQUENCE_NUMBER` from a `source` block and the Kafka offset (see the table
/// in the module's documentation).
///
/// ```
/// use flexrun::kafka_to_bq::map::debezium::sequence;
/// let pg = serde_json::json!({"connector": "postgresql", "lsn": 24023128, "sequence": "[\"24023119\",\"24023128\"]"});
/// assert_eq!(sequence(pg.as_object().unwrap(), 7).unwrap(), "16E904F/16E9058/7");
/// ```
pub fn sequence(source: &Map<String, Value>, offset: i64) -> Result<String, RecordError> {
    let connector = source.get("connector").and_then(Value::as_str).unwrap_or("");
    let mut sections: Vec<u64> = match connector {
        "postgresql" => postgres(source)?,
        "mysql" | "mariadb" => vec![binlog_number(source)?, int(source, "pos")?, opt_int(source, "row")?.unwrap_or(0)],
        "sqlserver" => sqlserver(source)?,
        "oracle" => {
            let scn = decimal(source, "scn")?;
            vec![opt_decimal(source, "commit_scn")?.unwrap_or(scn), scn]
        }
        "mongodb" => vec![int(source, "ts_ms")?, opt_int(source, "ord")?.unwrap_or(0)],
        _ => vec![int(source, "ts_ms")?],
    };
    sections.push(offset.max(0) as u64);
    Ok(sections.iter().map(|s| format!("{s:X}")).collect::<Vec<_>>().join("/"))
}

/// PostgreSQL: `sequence` is "Stringified JSON array … The first value is always the
/// last committed LSN, the second value is always the current LSN. Either value may be
/// null." Without it, `lsn` alone (behind a zero commit LSN).
fn postgres(source: &Map<String, Value>) -> Result<Vec<u64>, RecordError> {
    if let Some(Value::String(text)) = source.get("sequence") {
        let parts: Vec<Value> = serde_json::from_str(text).map_err(|_| {
            RecordError::Cdc(format!("Debezium source.sequence is {text:?}; expected a JSON array of two LSNs"))
        })?;
        let lsn = |i: usize| -> Result<u64, RecordError> {
            match parts.get(i) {
                None | Some(Value::Null) => Ok(0),
                Some(Value::String(s)) => s.parse().map_err(|_| bad("sequence", s)),
                Some(Value::Number(n)) => n.as_u64().ok_or_else(|| bad("sequence", &n.to_string())),
                Some(v) => Err(bad("sequence", &v.to_string())),
            }
        };
        if parts.len() == 2 {
            return Ok(vec![lsn(0)?, lsn(1)?]);
        }
        return Err(bad("sequence", text));
    }
    Ok(vec![0, int(source, "lsn")?])
}

/// MySQL's binlog file name ends in its number (`mysql-bin.000003`).
fn binlog_number(source: &Map<String, Value>) -> Result<u64, RecordError> {
    let file = source.get("file").and_then(Value::as_str).ok_or_else(|| missing("file"))?;
    file.rsplit('.').next().and_then(|n| n.parse().ok()).ok_or_else(|| bad("file", file))
}

/// SQL Server: `commit_lsn` and `change_lsn` are 10-byte LSNs written `8:8:4` hex
/// (`00000027:00000758:0003`, or null in a snapshot), and `event_serial_no` tells apart
/// events with the same two. Their 20 + 20 + 8 hex digits fill three sections.
fn sqlserver(source: &Map<String, Value>) -> Result<Vec<u64>, RecordError> {
    let lsn = |name: &str| -> Result<String, RecordError> {
        match source.get(name) {
            None | Some(Value::Null) => Ok("0".repeat(20)),
            Some(Value::String(s)) if s == "NULL" => Ok("0".repeat(20)),
            Some(Value::String(s)) => {
                let hex: String = s.chars().filter(|c| *c != ':').collect();
                if hex.len() == 20 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    Ok(hex)
                } else {
                    Err(bad(name, s))
                }
            }
            Some(v) => Err(bad(name, &v.to_string())),
        }
    };
    let serial = opt_int(source, "event_serial_no")?.unwrap_or(0).min(u32::MAX as u64);
    let all = format!("{}{}{serial:08x}", lsn("commit_lsn")?, lsn("change_lsn")?);
    Ok((0..3).map(|i| u64::from_str_radix(&all[i * 16..i * 16 + 16], 16).expect("hex digits")).collect())
}

/// A non-negative integer field, written as a number or a decimal string.
fn int(source: &Map<String, Value>, name: &str) -> Result<u64, RecordError> {
    opt_int(source, name)?.ok_or_else(|| missing(name))
}

fn opt_int(source: &Map<String, Value>, name: &str) -> Result<Option<u64>, RecordError> {
    match source.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| bad(name, &n.to_string())),
        Some(Value::String(s)) => s.parse().map(Some).map_err(|_| bad(name, s)),
        Some(v) => Err(bad(name, &v.to_string())),
    }
}

/// Oracle's SCNs are decimal strings.
fn decimal(source: &Map<String, Value>, name: &str) -> Result<u64, RecordError> {
    opt_decimal(source, name)?.ok_or_else(|| missing(name))
}

fn opt_decimal(source: &Map<String, Value>, name: &str) -> Result<Option<u64>, RecordError> {
    opt_int(source, name)
}

fn missing(name: &str) -> RecordError {
    RecordError::Cdc(format!("Debezium source.{name} is missing; the change's log position orders it"))
}

fn bad(name: &str, v: &str) -> RecordError {
    RecordError::Cdc(format!("Debezium source.{name} is {v:?}; expected a log position"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Debezium's PostgreSQL create event, as its documentation shows it (schema trimmed).
    fn pg_create() -> Value {
        json!({"schema": {"type": "struct", "name": "PostgreSQL_server.inventory.customers.Envelope"},
        "payload": {
            "before": null,
            "after": {"id": 1, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"},
            "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "PostgreSQL_server",
                "ts_ms": 1559033904863_i64, "snapshot": true, "db": "postgres",
                "sequence": "[\"24023119\",\"24023128\"]", "schema": "public", "table": "customers",
                "txId": 555, "lsn": 24023128, "xmin": null},
            "op": "c", "ts_ms": 1559033904863_i64}})
    }

    #[test]
    fn a_postgres_create_is_an_upsert_of_after_ordered_by_its_lsns() {
        let v = pg_create();
        let e = unwrap_payload(&v).unwrap().unwrap();
        let Event::Change { change, part, sequence } = classify(e, 12).unwrap() else { panic!() };
        assert_eq!(change, ChangeType::Upsert);
        assert_eq!(part.of(e).unwrap()["first_name"], "Anne");
        assert_eq!(sequence, format!("{:X}/{:X}/C", 24023119, 24023128));
    }

    #[test]
    fn a_delete_names_its_row_by_before_and_has_no_after() {
        let v = json!({"before": {"id": 1}, "after": null, "op": "d",
            "source": {"connector": "postgresql", "lsn": 46523128, "txId": 556}, "ts_ms": 1465581902461_i64});
        let e = v.as_object().unwrap();
        let Event::Change { change, part, sequence } = classify(e, 0).unwrap() else { panic!() };
        assert_eq!((change, part.of(e).unwrap().len()), (ChangeType::Delete, 1));
        assert_eq!(sequence, format!("0/{:X}/0", 46523128));
        let no_before =
            json!({"before": null, "after": null, "op": "d", "source": {"connector": "postgresql", "lsn": 1}});
        let e = no_before.as_object().unwrap();
        let Event::Change { part, .. } = classify(e, 0).unwrap() else { panic!() };
        assert!(part.of(e).unwrap_err().to_string().contains("REPLICA IDENTITY"));
        let text_after = json!({"after": "x"});
        assert!(Part::After.of(text_after.as_object().unwrap()).unwrap_err().to_string().contains("after is a string"));
    }

    #[test]
    fn later_changes_sort_after_earlier_ones_for_each_connector() {
        // BigQuery compares section by section, as unsigned numbers.
        fn key(s: &str) -> Vec<u64> {
            s.split('/').map(|x| u64::from_str_radix(x, 16).unwrap()).collect()
        }
        let seq = |v: Value, off| key(&sequence(v.as_object().unwrap(), off).unwrap());
        let my = |file: &str, pos: u64, row: u64| json!({"connector": "mysql", "file": file, "pos": pos, "row": row});
        assert!(seq(my("mysql-bin.000003", 154, 0), 9) < seq(my("mysql-bin.000003", 154, 1), 0));
        assert!(seq(my("mysql-bin.000003", 9999, 0), 9) < seq(my("mysql-bin.000004", 4, 0), 0));
        let ss = |commit: &str, change: &str, n: u64| json!({"connector": "sqlserver", "commit_lsn": commit, "change_lsn": change, "event_serial_no": n});
        let a = seq(ss("00000027:00000758:0005", "00000027:00000758:0003", 1), 5);
        let b = seq(ss("00000027:00000758:0005", "00000027:00000758:0003", 2), 0);
        let c = seq(ss("00000027:00000760:0001", "00000027:00000759:0001", 1), 0);
        assert!(a < b && b < c, "{a:?} {b:?} {c:?}");
        assert_eq!(a.len(), 4, "BigQuery allows four sections");
        let pg = |commit: &str, lsn: &str| json!({"connector": "postgresql", "sequence": format!("[\"{commit}\",\"{lsn}\"]")});
        // Transactions' LSNs interleave; the last commit LSN orders them first.
        assert!(seq(pg("100", "500"), 0) < seq(pg("200", "150"), 0));
        let ora = |scn: &str| json!({"connector": "oracle", "scn": scn, "commit_scn": null});
        assert!(seq(ora("289"), 0) < seq(ora("1000"), 0));
        let mongo = |ts: u64, ord: u64| json!({"connector": "mongodb", "ts_ms": ts, "ord": ord});
        assert!(seq(mongo(1000, 2), 0) < seq(mongo(1000, 3), 0));
        let most = seq(ss("FFFFFFFF:FFFFFFFF:FFFF", "FFFFFFFF:FFFFFFFF:FFFF", u64::MAX), i64::MAX);
        assert_eq!(most.len(), 4, "the widest SQL Server position still fits four sections");
    }

    #[test]
    fn records_that_are_not_changes_are_skipped_or_named() {
        let skip = |v: Value| classify(v.as_object().unwrap(), 0).unwrap();
        assert_eq!(skip(json!({"ts_ms": 1})), Event::Skip(Skipped::Heartbeat));
        assert_eq!(
            skip(
                json!({"source": {}, "databaseName": "inventory", "ddl": "ALTER TABLE t ADD c int", "tableChanges": []})
            ),
            Event::Skip(Skipped::SchemaChange)
        );
        assert_eq!(skip(json!({"status": "BEGIN", "id": "571:53195829"})), Event::Skip(Skipped::Transaction));
        assert_eq!(skip(json!({"op": "m", "message": {"prefix": "p"}})), Event::Skip(Skipped::Message));
        let err = |v: Value| classify(v.as_object().unwrap(), 0).unwrap_err().to_string();
        assert!(err(json!({"op": "t", "source": {}})).contains("truncate"));
        assert!(err(json!({"op": "x"})).contains("expected c, r, u, d, t or m"));
        assert!(err(json!({"id": 1})).contains("no op field"));
        assert!(err(json!({"op": "c", "after": {"id": 1}})).contains("without a source"));
        assert!(err(json!({"op": 5})).contains("expected a string"));
        assert!(err(json!({"op": "c", "after": {"id": 1}, "source": {"connector": "mysql", "pos": 4}}))
            .contains("source.file"));
        assert!(err(json!({"op": "c", "after": {"id": 1}, "source": {"connector": "postgresql", "lsn": -1}}))
            .contains("source.lsn"));
        assert_eq!(unwrap_payload(&json!({"schema": {}, "payload": null})).unwrap(), None);
        assert!(unwrap_payload(&json!([1])).unwrap_err().to_string().contains("JSON object"));
    }
}
