//! `queen_ack` (SPEC §3.3, §5): what each answer does to a group's cursor, its lease, retries
//! and dead letters.
//!
//! - `completed`: the message is finished; the cursor moves over the finished prefix of the
//!   lease's batch, and the lease is released when all of the batch is finished.
//! - `failed`: one failure charged to the message; with retries left the lease is released and
//!   the message (with the rest of its partition) comes back after `retryDelay`; with none left
//!   it is filed as a dead letter and finished, and the lease is released all the same (the
//!   rest of the batch comes back at once, uncharged).
//! - `retry`: the lease is released and the message comes back at once; nothing is charged.
//! - `dlq`: filed as a dead letter now, and finished.
//!
//! In one call, the entries of one (partition, group) are applied in delivery order; at the
//! first that comes back (or a `failed` whose retries are spent), the lease is released and the
//! rest are `superseded`: not applied,
//! delivered again (reference/000: "In a batch, the cursor stops at the first message that
//! comes back"). A refused ack is a result, not an error, and changes nothing.

use crate::cursor::Key;
use crate::error::{shorten, QueenError, QueenResult};
use crate::jsonb::Element;
use crate::names;
use crate::names::{from_pg, to_pg};
use crate::options::QueueOptions;
use crate::spi::types::{INT4, TEXT, UUID, UUIDS};
use crate::spi::{self, Query, Row, Spi};
use crate::state::{self, CursorRow, Micros};
use crate::subscription::Subscription;
use pgrx::datum::{DatumWithOid, TimestampWithTimeZone};
use pgrx::Uuid;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckStatus {
    Completed,
    Failed,
    Retry,
    Dlq,
}

impl AckStatus {
    pub fn parse(what: &str, value: &str) -> QueenResult<AckStatus> {
        match value {
            "completed" | "true" => Ok(AckStatus::Completed),
            "failed" | "false" => Ok(AckStatus::Failed),
            "retry" => Ok(AckStatus::Retry),
            "dlq" => Ok(AckStatus::Dlq),
            other => Err(QueenError::invalid(
                what.to_string(),
                format!(
                    "must be 'completed', 'failed', 'retry' or 'dlq' (or true / false), got \"{}\"",
                    shorten(other)
                ),
            )),
        }
    }

    fn from_json(what: &str, v: &Value) -> QueenResult<AckStatus> {
        match v {
            Value::Bool(true) => Ok(AckStatus::Completed),
            Value::Bool(false) => Ok(AckStatus::Failed),
            Value::String(s) => AckStatus::parse(what, s),
            other => Err(QueenError::invalid(
                what.to_string(),
                format!("must be a status string or a boolean, got {}", shorten(&other.to_string())),
            )),
        }
    }
}

/// One acknowledgement, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct AckEntry {
    pub message_id: Option<uuid::Uuid>,
    pub transaction_id: Option<String>,
    pub partition_id: Option<uuid::Uuid>,
    pub lease_id: Option<uuid::Uuid>,
    /// None: queue mode.
    pub group: Option<String>,
    pub status: AckStatus,
    pub error: Option<String>,
}

/// The outcome of one entry, in the shape of `queen.ack_result`.
#[derive(Debug, Clone)]
pub struct AckResult {
    pub idx: i32,
    pub message_id: Option<Uuid>,
    pub success: bool,
    pub error: Option<String>,
    pub lease_released: bool,
    pub dead_lettered: bool,
}

impl AckResult {
    /// The result of entry `idx` before anything is decided: not applied, no reason yet.
    fn undecided(idx: usize, e: &AckEntry) -> AckResult {
        AckResult {
            idx: idx as i32,
            message_id: e.message_id.map(to_pg),
            success: false,
            error: None,
            lease_released: false,
            dead_lettered: false,
        }
    }
}

/// The entries of the batch form given as JSON text (the unit tests'; the SQL function reads
/// jsonb with `parse_acks_jsonb`): a JSON array of objects in Queen's shape (camelCase) or rows
/// of `queen_pop` turned into JSON (snake_case).
#[cfg(test)]
pub fn parse_acks(acks: &Value) -> QueenResult<Vec<AckEntry>> {
    let arr = acks.as_array().ok_or_else(|| {
        QueenError::invalid(
            "argument \"acks\"",
            format!("must be a JSON array of objects, got {}", shorten(&acks.to_string())),
        )
    })?;
    let elements: Vec<Element> = arr.iter().map(Element::of).collect();
    parse_elements(&elements)
}

/// Check the elements of a batch ack, each in its place.
pub fn parse_elements(elements: &[Element]) -> QueenResult<Vec<AckEntry>> {
    elements.iter().enumerate().map(|(i, e)| parse_ack(i, e)).collect()
}

fn parse_ack(i: usize, e: &Element) -> QueenResult<AckEntry> {
    let obj = match e {
        Element::Object(obj) => obj,
        Element::Other(kind) => {
            return Err(QueenError::invalid(format!("acks[{i}]"), format!("must be an object, got a JSON {kind}")))
        }
    };
    // The first of the names that is present (camelCase wins over snake_case).
    let field = |names: &[&'static str]| -> Option<(&'static str, &Value)> {
        names.iter().find_map(|n| obj.get(*n).filter(|v| !v.is_null()).map(|v| (*n, v)))
    };
    let string = |names: &[&'static str]| -> QueenResult<Option<String>> {
        match field(names) {
            None => Ok(None),
            Some((_, Value::String(s))) => Ok(Some(s.clone())),
            Some((n, other)) => Err(QueenError::invalid(
                format!("acks[{i}].{n}"),
                format!("must be a string, got {}", shorten(&other.to_string())),
            )),
        }
    };
    let uuid = |names: &[&'static str]| -> QueenResult<Option<uuid::Uuid>> {
        let Some((n, _)) = field(names) else {
            return Ok(None);
        };
        let s = string(&[n])?.expect("present");
        uuid::Uuid::parse_str(&s).map(Some).map_err(|_| QueenError::InvalidText {
            what: format!("acks[{i}].{n}"),
            value: s,
            kind: "uuid",
        })
    };
    let message_id = uuid(&["messageId", "message_id"])?;
    let partition_id = uuid(&["partitionId", "partition_id"])?;
    let transaction_id = string(&["transactionId", "transaction_id"])?;
    if message_id.is_none() && (transaction_id.is_none() || partition_id.is_none()) {
        return Err(QueenError::invalid(
            format!("acks[{i}]"),
            "names no message: give \"messageId\", or \"transactionId\" and \"partitionId\"",
        ));
    }
    let lease_id = uuid(&["leaseId", "lease_id"])?;
    let group = match field(&["consumerGroup", "consumer_group"]) {
        None => None,
        Some((_, Value::String(g))) => {
            names::check_group(&format!("acks[{i}].consumerGroup"), g)?;
            Some(g.clone())
        }
        Some((n, other)) => {
            return Err(QueenError::invalid(
                format!("acks[{i}].{n}"),
                format!("must be a string or null, got {}", shorten(&other.to_string())),
            ))
        }
    };
    let status = match field(&["_status", "status"]) {
        None => AckStatus::Completed,
        Some((n, v)) => AckStatus::from_json(&format!("acks[{i}].{n}"), v)?,
    };
    let error = match field(&["_error", "error"]) {
        None => None,
        Some((_, Value::String(s))) => Some(s.clone()),
        Some((_, other)) => Some(other.to_string()),
    };
    Ok(AckEntry { message_id, transaction_id, partition_id, lease_id, group, status, error })
}

const SQL: &str = include_str!("../sql/queries/ack.sql");
const ACK_FIND: Query =
    Query { file: SQL, name: "ack_find", args: &[UUIDS, UUIDS, crate::spi::types::TEXTS, UUIDS, INT4] };
const ACK_FIND_IDS: Query = Query { file: SQL, name: "ack_find_ids", args: &[UUIDS, INT4] };
const ACK_MESSAGE_LOCK: Query = Query { file: SQL, name: "ack_message_lock", args: &[UUID, TEXT, UUID, INT4] };
const ACK_LEASES: Query = Query { file: SQL, name: "ack_leases", args: &[UUIDS, UUIDS, INT4] };
const ACK_LEASE_ROWS: Query = Query { file: SQL, name: "ack_lease_rows", args: &[UUID, INT4] };
const ACK_BATCH_LOCK: Query = Query { file: SQL, name: "ack_batch_lock", args: &[UUIDS, UUID, TEXT, INT4] };
const ACK_LEASE_QUEUES: Query = Query { file: SQL, name: "ack_lease_queues", args: &[UUID, INT4] };
const ACK_LEASE_LOCK: Query = Query { file: SQL, name: "ack_lease_lock", args: &[UUID, INT4] };

/// The queue's options as a row of ack.sql carries them (its `-- [one server]` columns); None
/// on Citus, where the statement cannot join them (the caller loads them: [`options_or_load`]).
fn options_in_row(r: &Row<'_>) -> Option<QueueOptions> {
    (!crate::shards::planning_for_citus()).then(|| crate::configure::stored_options(r).effective())
}

fn options_or_load(s: &mut Spi, stored: Option<QueueOptions>, queue_id: Uuid) -> QueueOptions {
    stored.unwrap_or_else(|| crate::configure::load(s, queue_id).effective())
}
/// The fields of an ack batch's elements that queen reads.
const ACK_KEYS: &[&str] = &[
    "messageId",
    "message_id",
    "partitionId",
    "partition_id",
    "transactionId",
    "transaction_id",
    "leaseId",
    "lease_id",
    "consumerGroup",
    "consumer_group",
    "_status",
    "status",
    "_error",
    "error",
];

/// The entries of a batch ack given as jsonb: the fields queen reads are taken out of the
/// binary jsonb (`Jsonb::elements`), so a popped row's payload is never turned into text,
/// then checked by `parse_elements`.
pub fn parse_acks_jsonb(acks: crate::jsonb::Jsonb) -> QueenResult<Vec<AckEntry>> {
    let elements = acks.elements(ACK_KEYS).map_err(|kind| {
        QueenError::invalid("argument \"acks\"", format!("must be a JSON array of objects, got a JSON {kind}"))
    })?;
    parse_elements(&elements)
}

/// A message an entry names, as found.
#[derive(Clone, Copy)]
struct Found {
    partition_id: Uuid,
    key: Key,
    queue_id: Uuid,
    message_id: Uuid,
}

impl Found {
    /// The message columns of a row of `ack_find`, `ack_find_ids` or `ack_message_lock`.
    fn from_row(r: &Row<'_>) -> Found {
        Found {
            partition_id: r.req("partition_id"),
            key: (r.req("txid"), r.req("seq")),
            queue_id: r.req("queue_id"),
            message_id: r.req("message_id"),
        }
    }
}

/// A lease an entry names, as stored: its group, its expiry, and whether it was released.
#[derive(Clone, Debug)]
struct LeaseRow {
    group: String,
    expires_at: Micros,
    released: bool,
}

/// The leases acks name, as the cursor row of each acked partition knows them, by (lease,
/// partition): a lease over two partitions may have been released in one and run out in the
/// other, and an entry hears its own partition's reason, as a single ack would (item 14).
#[derive(Default)]
struct Leases(HashMap<(Uuid, Uuid), LeaseRow>);

impl Leases {
    fn at(&self, lease: Option<uuid::Uuid>, partition: Uuid) -> Option<&LeaseRow> {
        lease.and_then(|l| self.0.get(&(to_pg(l), partition)))
    }
}

impl LeaseRow {
    /// The lease columns of a row of `ack_leases` or `ack_message_lock` (`consumer_group`,
    /// `expires_at`, `released`); None when the row names no lease (a NULL group: no row of
    /// the partition knows the lease).
    fn from_row(r: &Row<'_>) -> Option<LeaseRow> {
        r.get::<String>("consumer_group").map(|group| LeaseRow {
            group,
            expires_at: state::micros(r.req::<TimestampWithTimeZone>("expires_at")),
            released: r.req("released"),
        })
    }
}

/// Apply acknowledgements in the caller's transaction; one result per entry, in order.
/// Raises 42501 (changing nothing) when the caller lacks `pop` on an acked message's queue.
pub fn ack(entries: &[AckEntry]) -> QueenResult<Vec<AckResult>> {
    let role = crate::privilege::caller();
    let may_ack = |s: &mut Spi, queues: &mut Vec<Uuid>| {
        queues.sort_unstable_by_key(|q| *q.as_bytes());
        queues.dedup();
        crate::privilege::require_ids(s, role, queues, crate::privilege::Privilege::Pop)
    };
    let mut results: Vec<AckResult> = entries.iter().enumerate().map(|(i, e)| AckResult::undecided(i, e)).collect();
    spi::connect(|s| -> QueenResult<()> {
        // A role that may not pop every queue: before anything is locked, the messages of
        // queues it holds no privilege on are taken for unknown ones, and a queue it knows of
        // but may not pop refuses the call (privilege.rs unknown_to).
        let screened;
        let entries = match screen(s, role, entries)? {
            None => entries,
            Some(e) => {
                screened = e;
                &screened[..]
            }
        };
        // One ack by message id (the common case): the message, its lease and, locked, the
        // cursor row of the lease's group (or of the group named) in one statement.
        if let [e @ AckEntry { message_id: Some(id), .. }] = entries {
            if let Some((f, locked, lease)) = lock_by_message(s, to_pg(*id), e.group.as_deref(), e.lease_id.map(to_pg))
            {
                may_ack(s, &mut vec![f.queue_id])?;
                results[0].message_id = Some(f.message_id);
                let leases =
                    Leases(lease.into_iter().map(|l| ((to_pg(e.lease_id.unwrap()), f.partition_id), l)).collect());
                if let Some(group) = group_of(e, leases.at(e.lease_id, f.partition_id)) {
                    let mut g = Group::new(s, &f, &group, Some(locked));
                    g.apply(entries, &[Some(f)], &[0], &leases, &mut results)?;
                    return Ok(());
                }
            }
        }
        if batch_of_one_lease(s, entries, &mut results, &may_ack)? {
            return Ok(());
        }
        let found = find(s, entries);
        may_ack(s, &mut found.iter().flatten().map(|f| f.queue_id).collect())?;
        let leases = leases_of(s, entries, &found);
        // Entries by (partition, group), locked in that order so that two calls acking the
        // same partitions cannot deadlock.
        let mut groups: BTreeMap<(uuid::Uuid, String), Vec<usize>> = BTreeMap::new();
        for (i, f) in found.iter().enumerate() {
            match f {
                None => results[i].error = Some("message not found".into()),
                Some(f) => {
                    results[i].message_id = Some(f.message_id);
                    match group_of(&entries[i], leases.at(entries[i].lease_id, f.partition_id)) {
                        Some(g) => groups.entry((from_pg(f.partition_id), g)).or_default().push(i),
                        None => results[i].error = Some("lease not held".into()),
                    }
                }
            }
        }
        for ((_, group), idxs) in groups {
            let f = found[idxs[0]].expect("grouped entries were found");
            let mut g = Group::new(s, &f, &group, None);
            g.apply(entries, &found, &idxs, &leases, &mut results)?;
        }
        // Entries whose message retention deleted under their lease: the rest of the batch
        // may be gone too, and the lease then has nothing left to finish.
        let mut gone: Vec<Uuid> =
            (0..entries.len()).filter(|&i| found[i].is_none()).filter_map(|i| entries[i].lease_id.map(to_pg)).collect();
        gone.sort_unstable_by_key(|l| *l.as_bytes());
        gone.dedup();
        for lease in gone {
            sweep_vanished(s, lease, entries, &mut results);
        }
        Ok(())
    })?;
    Ok(results)
}

/// `queen_ack_lease` (SPEC §3.4): every message lease `lease` delivered and not finished yet,
/// acknowledged with `status` (and `error`) as a batch of one entry per message would be —
/// another way to find the entries; the rules are [`decide`]'s. The rows that hold the lease
/// are found through `cursors_lease` and locked in partition order, with their batches' message
/// ids, in one statement; then one write per partition. Results in delivery order (partition
/// by partition, in the order the rows are locked), `idx` counting from 0. A lease no row holds
/// any more (released, or taken over by a pop after it ran out) no longer knows its batch: no
/// rows, as for an unknown lease. To a role that holds no privilege on the lease's queue, the
/// lease is unknown (nothing locked); one that knows the queue but may not pop is refused (42501).
pub fn ack_lease(lease: uuid::Uuid, status: AckStatus, error: Option<&str>) -> QueenResult<Vec<AckResult>> {
    let role = crate::privilege::caller();
    let lease = to_pg(lease);
    spi::connect(|s| -> QueenResult<Vec<AckResult>> {
        let shard = crate::shards::current();
        if !crate::privilege::allowed_everywhere(s, role, crate::privilege::Privilege::Pop) {
            let queues: Vec<Uuid> =
                ACK_LEASE_QUEUES.run(s, &[lease.into(), shard.into()]).map(|r| r.req("queue_id")).collect();
            if !crate::privilege::unknown_to(s, role, &queues, crate::privilege::Privilege::Pop)?.is_empty() {
                return Ok(vec![]);
            }
        }
        let rows: Vec<LeaseBatch> = ACK_LEASE_LOCK
            .run(s, &[lease.into(), shard.into()])
            .map(|r| LeaseBatch {
                partition: r.req("partition_id"),
                group: r.req("consumer_group"),
                queue_id: r.req("queue_id"),
                ids: r.get::<Vec<Option<Uuid>>>("batch_ids").unwrap_or_default(),
                locked: (state::parse(&r), state::micros(r.req::<TimestampWithTimeZone>("now")), options_in_row(&r)),
            })
            .collect();
        let mut queues: Vec<Uuid> = rows.iter().map(|b| b.queue_id).collect();
        queues.sort_unstable_by_key(|q| *q.as_bytes());
        queues.dedup();
        crate::privilege::require_ids(s, role, &queues, crate::privilege::Privilege::Pop)?;
        let mut results: Vec<AckResult> = Vec::new();
        for b in rows {
            let (mut row, now, opts) = b.locked;
            let opts = options_or_load(s, opts, b.queue_id);
            let targets = lease_targets(&mut row.cursor, &b.ids, opts.retention_seconds > 0);
            let entries: Vec<AckEntry> = targets
                .iter()
                .map(|(_, id)| AckEntry {
                    message_id: Some(from_pg(*id)),
                    transaction_id: None,
                    partition_id: None,
                    lease_id: Some(from_pg(lease)),
                    group: None,
                    status,
                    error: error.map(str::to_string),
                })
                .collect();
            let found: Vec<Option<Found>> = targets
                .iter()
                .map(|&(key, message_id)| {
                    Some(Found { partition_id: b.partition, key, queue_id: b.queue_id, message_id })
                })
                .collect();
            if entries.is_empty() {
                // Nothing left to ack here: every unfinished message of the batch is gone.
                release_vanished(s, lease, b.partition, &b.group, b.queue_id, row, now);
                continue;
            }
            let base = results.len();
            let mut these: Vec<AckResult> =
                entries.iter().enumerate().map(|(i, e)| AckResult::undecided(base + i, e)).collect();
            let idxs: Vec<usize> = (0..entries.len()).collect();
            let first = found[0].expect("found");
            // The row holds the lease: decide judges it by the row (lease_refusal).
            let mut g = Group::new(s, &first, &b.group, Some((row, now, opts)));
            g.apply(&entries, &found, &idxs, &Leases::default(), &mut these)?;
            results.extend(these);
        }
        Ok(results)
    })
}

/// What `queen_ack_lease` acks in one row: the messages of the lease's batch not finished yet,
/// in delivery order, with their ids (`ids`, aligned with the batch's keys). One whose message
/// no longer exists (None) is counted finished when the queue has retention, which deleted it
/// under the lease (as `forget_vanished`), and is left out either way.
fn lease_targets(cursor: &mut crate::cursor::Cursor, ids: &[Option<Uuid>], retention: bool) -> Vec<(Key, Uuid)> {
    let keys = cursor.lease.as_ref().map(|l| l.keys.clone()).unwrap_or_default();
    let mut targets = Vec::new();
    for (k, id) in keys.into_iter().zip(ids) {
        match id {
            _ if cursor.is_finished(k) => {}
            Some(id) => targets.push((k, *id)),
            None if retention => cursor.vanished(k),
            None => {}
        }
    }
    targets
}

/// A row holding the lease `queen_ack_lease` acks, as `ack_lease_lock` read it.
struct LeaseBatch {
    partition: Uuid,
    group: String,
    queue_id: Uuid,
    /// The ids of the batch's messages, in delivery order; None where one no longer exists.
    ids: Vec<Option<Uuid>>,
    locked: (CursorRow, Micros, Option<QueueOptions>),
}

/// The entries as the caller may see them, when it may not pop every queue: an entry naming a
/// message of a queue it holds no privilege on names no message (the nil id) and is answered
/// 'message not found', as an unknown id is. None: every entry as given. 42501 for a message
/// of a queue it knows of but may not pop. Reads without locking anything.
fn screen(s: &mut Spi, role: pgrx::pg_sys::Oid, entries: &[AckEntry]) -> QueenResult<Option<Vec<AckEntry>>> {
    if crate::privilege::allowed_everywhere(s, role, crate::privilege::Privilege::Pop) {
        return Ok(None);
    }
    let found = find(s, entries);
    let mut queues: Vec<Uuid> = found.iter().flatten().map(|f| f.queue_id).collect();
    queues.sort_unstable_by_key(|q| *q.as_bytes());
    queues.dedup();
    let unknown = crate::privilege::unknown_to(s, role, &queues, crate::privilege::Privilege::Pop)?;
    if unknown.is_empty() {
        return Ok(None);
    }
    let screened = entries
        .iter()
        .zip(&found)
        .map(|(e, f)| match f {
            Some(f) if unknown.contains(&f.queue_id) => {
                AckEntry { message_id: Some(uuid::Uuid::nil()), transaction_id: None, partition_id: None, ..e.clone() }
            }
            _ => e.clone(),
        })
        .collect();
    Ok(Some(screened))
}

/// A batch whose entries all name their message by id and one lease, with one group given or
/// none (what a worker acking what it popped sends): the lease and its group's rows of the
/// messages' partitions, locked, in one statement (`ack_batch_lock`), then one write per
/// partition. False, with nothing applied, when the batch is not of that shape, the lease is
/// not known to those rows (or another group was given), or a message or a partition's row
/// was not found: the general path then decides, as it would have.
fn batch_of_one_lease(
    s: &mut Spi,
    entries: &[AckEntry],
    results: &mut [AckResult],
    may_ack: &dyn Fn(&mut Spi, &mut Vec<Uuid>) -> QueenResult<()>,
) -> QueenResult<bool> {
    let Some(first) = entries.first() else {
        return Ok(false);
    };
    let (Some(lease), group) = (first.lease_id, first.group.as_deref()) else {
        return Ok(false);
    };
    if entries.len() < 2
        || !entries.iter().all(|e| e.message_id.is_some() && e.lease_id == Some(lease) && e.group.as_deref() == group)
    {
        return Ok(false);
    }
    let mut ids: Vec<Uuid> = entries.iter().filter_map(|e| e.message_id.map(to_pg)).collect();
    let args: [DatumWithOid; 4] = [
        ids.clone().into(),
        to_pg(lease).into(),
        group.map(|g| names::group_key(Some(g)).to_string()).into(),
        crate::shards::current().into(),
    ];
    // Decoded before any other statement runs (the rows live in SPI's tuple table).
    let mut rows: Vec<(Vec<Found>, (CursorRow, Micros, Option<QueueOptions>), LeaseRow)> = Vec::new();
    let (mut messages_found, mut partitions_found) = (0, 0);
    for r in ACK_BATCH_LOCK.run(s, &args) {
        messages_found = r.req::<i64>("messages_found") as usize;
        partitions_found = r.req::<i64>("partitions_found") as usize;
        let (partition_id, queue_id) = (r.req::<Uuid>("partition_id"), r.req::<Uuid>("queue_id"));
        let found: Vec<Found> = r
            .req::<Vec<Uuid>>("found_ids")
            .into_iter()
            .zip(r.req::<Vec<i64>>("found_txids"))
            .zip(r.req::<Vec<i64>>("found_seqs"))
            .map(|((message_id, txid), seq)| Found { partition_id, key: (txid, seq), queue_id, message_id })
            .collect();
        let locked = (state::parse(&r), state::micros(r.req::<TimestampWithTimeZone>("now")), options_in_row(&r));
        rows.push((found, locked, LeaseRow::from_row(&r).expect("queen: ack_batch_lock returns the lease's group")));
    }
    let rows: Vec<(Vec<Found>, Locked, LeaseRow)> = rows
        .into_iter()
        .map(|(f, (row, now, opts), l)| {
            let opts = options_or_load(s, opts, f[0].queue_id);
            (f, (row, now, opts), l)
        })
        .collect();
    ids.sort_unstable_by_key(|id| *id.as_bytes());
    ids.dedup();
    if rows.is_empty() || messages_found != ids.len() || rows.len() != partitions_found {
        return Ok(false);
    }
    may_ack(s, &mut rows.iter().map(|(f, _, _)| f[0].queue_id).collect())?;
    let leases = Leases(rows.iter().map(|(f, _, l)| ((to_pg(lease), f[0].partition_id), l.clone())).collect());
    let group = rows[0].2.group.clone();
    let by_id: HashMap<Uuid, Found> = rows.iter().flat_map(|(f, _, _)| f.iter().map(|f| (f.message_id, *f))).collect();
    let found: Vec<Option<Found>> =
        entries.iter().map(|e| e.message_id.and_then(|id| by_id.get(&to_pg(id)).copied())).collect();
    for (i, f) in found.iter().enumerate() {
        results[i].message_id = f.map(|f| f.message_id);
    }
    for (partition_found, locked, _) in rows {
        let p = partition_found[0].partition_id;
        let idxs: Vec<usize> = (0..entries.len()).filter(|&i| found[i].is_some_and(|f| f.partition_id == p)).collect();
        let mut g = Group::new(s, &partition_found[0], &group, Some(locked));
        g.apply(entries, &found, &idxs, &leases, results)?;
    }
    Ok(true)
}

/// The group an entry acks for (SPEC §3.3): its lease's group when the lease is known, which
/// `consumerGroup`, if given, must name (None: it names another, and the ack is refused with
/// 'lease not held'); otherwise the group given (queue mode without one).
fn group_of(e: &AckEntry, lease: Option<&LeaseRow>) -> Option<String> {
    let given = names::group_key(e.group.as_deref());
    match lease {
        Some(lease) if e.group.is_some() && lease.group != given => None,
        Some(lease) => Some(lease.group.clone()),
        None => Some(given.to_string()),
    }
}

/// The leases the entries name, as the cursor rows of their messages' partitions know them
/// (a lease lives in its rows; a released one is in none).
fn leases_of(s: &mut Spi, entries: &[AckEntry], found: &[Option<Found>]) -> Leases {
    let ids: Vec<Uuid> = entries.iter().filter_map(|e| e.lease_id.map(to_pg)).collect();
    if ids.is_empty() {
        return Leases::default();
    }
    let mut partitions: Vec<Uuid> = found.iter().flatten().map(|f| f.partition_id).collect();
    partitions.sort_unstable_by_key(|p| *p.as_bytes());
    partitions.dedup();
    let args: [DatumWithOid; 3] = [ids.into(), partitions.into(), crate::shards::current().into()];
    Leases(
        ACK_LEASES
            .run(s, &args)
            .map(|r| {
                let lease = LeaseRow::from_row(&r).expect("queen: ack_leases returns the lease's group");
                ((r.req::<Uuid>("lease_id"), r.req::<Uuid>("partition_id")), lease)
            })
            .collect(),
    )
}

/// Look up the messages the entries name.
fn find(s: &mut Spi, entries: &[AckEntry]) -> Vec<Option<Found>> {
    if entries.iter().all(|e| e.message_id.is_some()) {
        let ids: Vec<Uuid> = entries.iter().filter_map(|e| e.message_id.map(to_pg)).collect();
        let args: [DatumWithOid; 2] = [ids.into(), crate::shards::current().into()];
        let by_id: HashMap<Uuid, Found> = ACK_FIND_IDS
            .run(s, &args)
            .map(|r| {
                let f = Found::from_row(&r);
                (f.message_id, f)
            })
            .collect();
        return entries.iter().map(|e| e.message_id.and_then(|id| by_id.get(&to_pg(id)).copied())).collect();
    }
    let mids: Vec<Option<Uuid>> = entries.iter().map(|e| e.message_id.map(to_pg)).collect();
    let pids: Vec<Option<Uuid>> = entries.iter().map(|e| e.partition_id.map(to_pg)).collect();
    let tids: Vec<Option<String>> = entries.iter().map(|e| e.transaction_id.clone()).collect();
    let tid_uuids: Vec<Option<Uuid>> = entries
        .iter()
        .map(|e| e.transaction_id.as_deref().and_then(|t| uuid::Uuid::parse_str(t).ok()).map(to_pg))
        .collect();
    let args: [DatumWithOid; 5] =
        [mids.into(), pids.into(), tids.into(), tid_uuids.into(), crate::shards::current().into()];
    let mut found = vec![None; entries.len()];
    for r in ACK_FIND.run(s, &args) {
        let ord = r.req::<i64>("ord") as usize - 1;
        found[ord] = Some(Found::from_row(&r));
    }
    found
}

/// A cursor row as an ack reads it, the clock, and the queue's options.
type Locked = (CursorRow, Micros, QueueOptions);

/// The message `message_id` and, locked, its partition's cursor row for the group of `lease`
/// (if that lease has a row) or else `group` (None: queue mode), with that lease's row; None
/// when the message or the cursor row does not exist, or `group` is not the lease's.
fn lock_by_message(
    s: &mut Spi,
    message_id: Uuid,
    group: Option<&str>,
    lease: Option<Uuid>,
) -> Option<(Found, Locked, Option<LeaseRow>)> {
    let args: [DatumWithOid; 4] = [message_id.into(), group.into(), lease.into(), crate::shards::current().into()];
    let (found, row, now, opts, lease) = {
        let r = ACK_MESSAGE_LOCK.run(s, &args).next()?;
        let now = state::micros(r.req::<TimestampWithTimeZone>("now"));
        (Found::from_row(&r), state::parse(&r), now, options_in_row(&r), LeaseRow::from_row(&r))
    };
    let opts = options_or_load(s, opts, found.queue_id);
    Some((found, (row, now, opts), lease))
}

/// What applying a group's entries to its row decided: the row after them, and what else to
/// write.
#[derive(Default)]
struct Outcome {
    changed: bool,
    hint_at: Option<Micros>,
    /// The lease an entry released.
    released: Option<Uuid>,
    /// Dead letters to file: key, reason, attempt.
    dead_letters: Vec<(Key, Option<String>, i32)>,
}

/// The entries of one (partition, group).
struct Group<'a> {
    s: &'a mut Spi,
    partition: Uuid,
    queue_id: Uuid,
    group: &'a str,
    /// A message of the partition, by which `lock_by_message` finds the cursor row.
    message_id: Uuid,
    /// The row, already locked.
    locked: Option<Locked>,
}

impl<'a> Group<'a> {
    fn new(s: &'a mut Spi, f: &Found, group: &'a str, locked: Option<Locked>) -> Group<'a> {
        Group { s, partition: f.partition_id, queue_id: f.queue_id, group, message_id: f.message_id, locked }
    }

    /// The (partition, group) row locked, if it exists.
    fn lock(&mut self) -> Option<Locked> {
        if let Some(locked) = self.locked.take() {
            return Some(locked);
        }
        lock_by_message(self.s, self.message_id, Some(self.group), None).map(|(_, locked, _)| locked)
    }

    /// The row a group that never popped the partition starts with there (its subscription's
    /// start, or 'all' if it has none: an ack without a lease subscribes its group, as a pop
    /// would), not stored: it is created only if an entry applies (SPEC §10, a refused ack
    /// leaves no trace).
    fn virtual_row(&mut self) -> (Locked, Option<Subscription>) {
        let (sub, opts) = match crate::subscription::subscription(self.s, self.queue_id, self.group) {
            Some((sub, opts)) => (Some(sub), opts),
            None => (None, crate::configure::load(self.s, self.queue_id).effective()),
        };
        let cursor = match &sub {
            Some(sub) => crate::subscription::initial_cursor(self.s, sub, self.partition),
            None => Default::default(),
        };
        let row = CursorRow { cursor, retry_at: None, lease_id: None, lease_expires_at: None, version: None };
        ((row, state::now(self.s), opts), sub)
    }

    /// Create the row decided on, if nobody created it since: under the pair's lock
    /// (locks.rs), which pops take with a try-lock, so that no pop waits on the insert.
    fn create(&mut self, row: &CursorRow, sub: Option<Subscription>) -> QueenResult<Created> {
        // Rows of the queue and the group are created: their shared locks (locks.rs), as a
        // pop's. Having waited, a delete committed meanwhile: look again.
        if crate::locks::writing(self.queue_id, None, Some(self.group))? {
            return Ok(Created::LookAgain);
        }
        if sub.is_none() && crate::subscription::subscribe_all(self.s, self.queue_id, self.group)?.is_none() {
            return Ok(Created::Exists);
        }
        state::lock_pair(self.partition, self.group)?;
        Ok(match state::create(self.s, self.partition, self.group, self.queue_id, &row.cursor) {
            true => Created::Yes,
            false => Created::Exists,
        })
    }

    fn apply(
        &mut self,
        entries: &[AckEntry],
        found: &[Option<Found>],
        idxs: &[usize],
        leases: &Leases,
        results: &mut [AckResult],
    ) -> QueenResult<()> {
        let key_of = |i: usize| found[i].expect("found").key;
        if let Some((mut row, now, opts)) = self.lock() {
            self.forget_vanished(&mut row, now, &opts, entries, idxs, &key_of);
            let out = decide(entries, idxs, &key_of, leases, self.partition, &mut row, now, &opts, results);
            self.write(&row, &opts, out);
            return Ok(());
        }
        let ((mut row, now, opts), sub) = self.virtual_row();
        let out = decide(entries, idxs, &key_of, leases, self.partition, &mut row, now, &opts, results);
        if !out.changed {
            return Ok(()); // refused, or nothing to do: nothing is written
        }
        let reset = |results: &mut [AckResult], error: Option<&str>| {
            for &i in idxs {
                let r = &mut results[i];
                (r.success, r.error, r.lease_released, r.dead_lettered) = (false, error.map(Into::into), false, false);
            }
        };
        match self.create(&row, sub)? {
            Created::Yes => {
                self.write(&row, &opts, out);
                return Ok(());
            }
            Created::LookAgain => {
                // The locks are held now: the second look waits for nothing.
                reset(results, None);
                return self.apply(entries, found, idxs, leases, results);
            }
            Created::Exists => {}
        }
        // Created meanwhile by another transaction: apply to what it committed. Or gone with
        // its queue: the message is no more.
        let Some((mut row, now, opts)) = self.lock() else {
            reset(results, Some("message not found"));
            return Ok(());
        };
        reset(results, None);
        let out = decide(entries, idxs, &key_of, leases, self.partition, &mut row, now, &opts, results);
        self.write(&row, &opts, out);
        Ok(())
    }

    /// Messages of the row's active lease that retention deleted meanwhile (it leaves those
    /// of committed leases alone, but not a lease whose pop had not committed when it looked)
    /// count as finished: else the batch would never be finished, and the lease — and the
    /// partition — would stall until it ran out (issue 21, item 12). Only for queues with
    /// retention, and only when an entry acks under that lease: one probe of the batch's
    /// unfinished keys.
    fn forget_vanished(
        &mut self,
        row: &mut CursorRow,
        now: Micros,
        opts: &QueueOptions,
        entries: &[AckEntry],
        idxs: &[usize],
        key_of: &dyn Fn(usize) -> Key,
    ) {
        if opts.retention_seconds <= 0 || !row.lease_active(now) {
            return;
        }
        let lease = row.lease_id;
        if !idxs.iter().any(|&i| entries[i].lease_id.map(to_pg) == lease) {
            return;
        }
        let acked: Vec<Key> = idxs.iter().map(|&i| key_of(i)).collect();
        let others: Vec<Key> = row.cursor.unfinished().into_iter().filter(|k| !acked.contains(k)).collect();
        if others.is_empty() {
            return;
        }
        for k in state::missing(self.s, self.partition, &others) {
            row.cursor.vanished(k);
        }
    }

    /// Write what `decide` decided: dead letters, the row, hints, the lease.
    fn write(&mut self, row: &CursorRow, opts: &QueueOptions, out: Outcome) {
        if !out.changed {
            return;
        }
        if opts.dead_letter_queue {
            for (k, error, attempts) in &out.dead_letters {
                state::dead_letter(self.s, self.partition, self.group, *k, error.as_deref(), *attempts);
            }
        }
        if out.hint_at.is_some() {
            // Messages may be deliverable again: wake waiting pops of the queue at commit.
            crate::wait::touched(crate::wait::queue_key(&from_pg(self.queue_id)));
        }
        let also = state::SaveAlso {
            queue_id: self.queue_id,
            hint_at: out.hint_at,
            ended_lease: out.released.map(|l| (l, false)),
        };
        state::save(self.s, self.partition, self.group, row, also);
    }
}

/// The active rows of `lease` whose unfinished messages retention deleted, all of them: the
/// batch is finished, and the lease released (on the result of the entry that named it, as
/// `lease_released`), so that the partition does not stall until the lease runs out (issue
/// 21, item 12). Only queues with retention; nothing is written otherwise.
fn sweep_vanished(s: &mut Spi, lease: Uuid, entries: &[AckEntry], results: &mut [AckResult]) {
    let rows: Vec<(Uuid, String, Uuid, CursorRow, Micros, Option<QueueOptions>)> = ACK_LEASE_ROWS
        .run(s, &[lease.into(), crate::shards::current().into()])
        .map(|r| {
            (
                r.req::<Uuid>("partition_id"),
                r.req::<String>("consumer_group"),
                r.req::<Uuid>("queue_id"),
                state::parse(&r),
                state::micros(r.req::<TimestampWithTimeZone>("now")),
                options_in_row(&r),
            )
        })
        .collect();
    let rows: Vec<(Uuid, String, Uuid, CursorRow, Micros, QueueOptions)> =
        rows.into_iter().map(|(p, g, q, row, now, opts)| (p, g, q, row, now, options_or_load(s, opts, q))).collect();
    for (partition, group, queue_id, mut row, now, opts) in rows {
        if opts.retention_seconds <= 0 {
            continue;
        }
        let unfinished = row.cursor.unfinished();
        if unfinished.is_empty() || state::missing(s, partition, &unfinished).len() != unfinished.len() {
            continue;
        }
        for k in unfinished {
            row.cursor.vanished(k);
        }
        if !release_vanished(s, lease, partition, &group, queue_id, row, now) {
            continue;
        }
        // On the first entry that named the lease and found its message gone.
        let named = |i: &usize| {
            entries[*i].lease_id.map(to_pg) == Some(lease) && results[*i].error.as_deref() == Some("message not found")
        };
        if let Some(i) = (0..entries.len()).find(named) {
            results[i].lease_released = true;
        }
    }
}

/// Settle a row of `lease` whose unfinished messages are all gone (counted as vanished by the
/// caller): the batch is finished and the lease released, written with a hint so that pops
/// look at the partition again now, as after a released lease. False when the batch is not
/// finished after all (nothing written).
fn release_vanished(
    s: &mut Spi,
    lease: Uuid,
    partition: Uuid,
    group: &str,
    queue_id: Uuid,
    mut row: CursorRow,
    now: Micros,
) -> bool {
    if !row.cursor.settle() {
        return false;
    }
    row.lease_id = None;
    row.lease_expires_at = None;
    let hint_at = Some(row.retry_at.filter(|&t| t > now).unwrap_or(now));
    let also = state::SaveAlso { queue_id, hint_at, ended_lease: Some((lease, false)) };
    state::save(s, partition, group, &row, also);
    crate::wait::touched(crate::wait::queue_key(&from_pg(queue_id)));
    true
}

/// What [`Group::create`] came to.
enum Created {
    /// The row is created.
    Yes,
    /// Not created: a row exists now (committed by another transaction meanwhile), or the
    /// queue does not.
    Exists,
    /// Not created: a delete of the queue or the group committed while the ack waited for it.
    LookAgain,
}

/// Why an entry with a lease is refused, if it is: the row's own lease, or the lease's row.
fn lease_refusal(
    row: &CursorRow,
    now: Micros,
    lease: Uuid,
    k: Key,
    leases: &Leases,
    partition: Uuid,
) -> Option<&'static str> {
    if row.lease_id == Some(lease) {
        if !row.lease_active(now) {
            return Some("lease expired");
        }
        if !row.cursor.lease.as_ref().is_some_and(|b| b.keys.contains(&k)) {
            return Some("lease not held");
        }
        return None;
    }
    match leases.0.get(&(lease, partition)) {
        Some(l) if !l.released && l.expires_at <= now => Some("lease expired"),
        _ => Some("lease not held"),
    }
}

/// Apply the entries `idxs` of one (partition, group) to its row (SPEC §5), in delivery
/// order, filling in their results: the rules, without writing anything.
#[allow(clippy::too_many_arguments)]
fn decide(
    entries: &[AckEntry],
    idxs: &[usize],
    key_of: &dyn Fn(usize) -> Key,
    leases: &Leases,
    partition: Uuid,
    row: &mut CursorRow,
    now: Micros,
    opts: &QueueOptions,
    results: &mut [AckResult],
) -> Outcome {
    // Delivery order: the lease's batch order for its messages, key order otherwise.
    let mut order: Vec<usize> = idxs.to_vec();
    let batch_pos = |k: Key| row.cursor.lease.as_ref().and_then(|b| b.keys.iter().position(|x| *x == k));
    order.sort_by_key(|&i| (batch_pos(key_of(i)).map_or(1, |_| 0), batch_pos(key_of(i)).unwrap_or(0), key_of(i)));

    let held_lease = row.lease_id.filter(|_| row.lease_active(now));
    let mut out = Outcome::default();
    let mut came_back = false;
    for i in order {
        let e = &entries[i];
        let k = key_of(i);
        let r = &mut results[i];
        if came_back {
            r.error = Some("superseded".into());
            continue;
        }
        if row.cursor.is_finished(k) {
            r.error = Some("already acknowledged".into());
            continue;
        }
        if let Some(lease) = e.lease_id.map(to_pg) {
            if let Some(why) = lease_refusal(row, now, lease, k, leases, partition) {
                r.error = Some(why.into());
                continue;
            }
        }
        out.changed = true;
        r.success = true;
        let mut dead_letter = |attempts: i32, r: &mut AckResult| {
            r.dead_lettered = opts.dead_letter_queue;
            out.dead_letters.push((k, e.error.clone(), attempts));
        };
        let released = match e.status {
            AckStatus::Completed => row.cursor.finish(k),
            AckStatus::Dlq => {
                dead_letter(row.cursor.attempt_of(k), r);
                row.cursor.finish(k)
            }
            AckStatus::Failed => {
                let charge = row.cursor.charge(k, opts.retry_limit);
                if charge.spent {
                    // Filed, and the lease released all the same (SPEC §5): a worker that gives
                    // up on its batch after a failure leaves nothing leased until expiry; the
                    // messages after it come back at the next pop, uncharged.
                    dead_letter(charge.attempt, r);
                    row.cursor.finish(k);
                    came_back = true;
                    row.cursor.release();
                    true
                } else {
                    came_back = true;
                    row.cursor.release();
                    if opts.retry_delay > 0 {
                        row.retry_at = Some(now + opts.retry_delay as i64 * 1000);
                    }
                    true
                }
            }
            AckStatus::Retry => {
                came_back = true;
                row.cursor.release();
                true
            }
        };
        if released && row.lease_id.is_some() {
            r.lease_released = held_lease.is_some();
            out.released = row.lease_id.take();
            row.lease_expires_at = None;
        }
        if released || came_back {
            // The partition may have work again: now, or when the retry delay ends.
            out.hint_at = Some(row.retry_at.filter(|&t| t > now).unwrap_or(now));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const M: &str = "0190a5b4-0000-7000-8000-000000000001";
    const L: &str = "0190a5b4-0000-7000-8000-0000000000aa";

    #[test]
    fn statuses() {
        for (s, want) in [
            ("completed", AckStatus::Completed),
            ("true", AckStatus::Completed),
            ("failed", AckStatus::Failed),
            ("false", AckStatus::Failed),
            ("retry", AckStatus::Retry),
            ("dlq", AckStatus::Dlq),
        ] {
            assert_eq!(AckStatus::parse("status", s).unwrap(), want);
        }
        assert!(AckStatus::parse("argument \"status\"", "done").unwrap_err().to_string().contains("\"done\""));
    }

    #[test]
    fn queens_shape_and_popped_rows_are_accepted() {
        let a = parse_acks(&json!([
            {"messageId": M, "leaseId": L, "consumerGroup": "g", "_status": "failed", "_error": "boom", "status": "completed"},
            {"message_id": M, "lease_id": L, "consumer_group": null, "payload": {"x": 1}, "attempt": 1},
            {"transactionId": "t1", "partitionId": M, "status": false, "error": "e"},
        ]))
        .unwrap();
        assert_eq!(a[0].status, AckStatus::Failed, "_status wins over status");
        assert_eq!(a[0].error.as_deref(), Some("boom"));
        assert_eq!(a[0].group.as_deref(), Some("g"));
        assert_eq!(a[1].status, AckStatus::Completed, "completed by default");
        assert_eq!(a[1].group, None, "null consumer_group is queue mode");
        assert_eq!(a[1].lease_id, Some(uuid::Uuid::parse_str(L).unwrap()));
        assert_eq!(a[2].transaction_id.as_deref(), Some("t1"));
        assert_eq!(a[2].status, AckStatus::Failed);
    }

    #[test]
    fn a_lease_acks_its_unfinished_messages_in_delivery_order() {
        use crate::cursor::{Batch, Cursor};
        let id = |n: u8| Uuid::from_bytes([n; 16]);
        // Delivered in this order: (7,2) before (5,1) (a transaction's order), then (7,3), (8,0).
        let batch = Batch { keys: vec![(7, 2), (5, 1), (7, 3), (8, 0)], xip: vec![] };
        let fresh = || Cursor { done: (5, 0), lease: Some(batch.clone()), ..Default::default() };
        for (ids, ahead, retention, want, vanished) in [
            // every message there, none finished: all of them, in delivery order
            (
                vec![Some(1), Some(2), Some(3), Some(4)],
                vec![],
                false,
                vec![((7, 2), 1), ((5, 1), 2), ((7, 3), 3), ((8, 0), 4)],
                vec![],
            ),
            // (7,3) was acked before: left out
            (
                vec![Some(1), Some(2), Some(3), Some(4)],
                vec![(7, 3)],
                false,
                vec![((7, 2), 1), ((5, 1), 2), ((8, 0), 4)],
                vec![],
            ),
            // (5,1) deleted by retention under the lease: counted finished, left out
            (
                vec![Some(1), None, Some(3), Some(4)],
                vec![],
                true,
                vec![((7, 2), 1), ((7, 3), 3), ((8, 0), 4)],
                vec![(5, 1)],
            ),
            // gone without retention: left out, not counted finished
            (vec![Some(1), None, Some(3), Some(4)], vec![], false, vec![((7, 2), 1), ((7, 3), 3), ((8, 0), 4)], vec![]),
        ] {
            let mut c = fresh();
            c.ahead = ahead.clone();
            let ids: Vec<Option<Uuid>> = ids.into_iter().map(|n| n.map(id)).collect();
            let got = lease_targets(&mut c, &ids, retention);
            let want: Vec<(Key, Uuid)> = want.into_iter().map(|(k, n)| (k, id(n))).collect();
            assert_eq!(got, want, "ids {ids:?}, ahead {ahead:?}");
            for k in [(5, 1), (7, 2), (7, 3), (8, 0)] {
                let expected = ahead.contains(&k) || vanished.contains(&k);
                assert_eq!(c.is_finished(k), expected, "{k:?} finished");
            }
        }
    }

    #[test]
    fn malformed_acks_are_errors() {
        let err = |v: Value| parse_acks(&v).unwrap_err();
        assert!(err(json!({})).to_string().contains("argument \"acks\""));
        assert!(err(json!([3])).to_string().contains("acks[0]: must be an object"));
        assert!(err(json!([{"leaseId": L}])).to_string().contains("names no message"));
        assert!(err(json!([{"transactionId": "t"}])).to_string().contains("names no message"));
        assert!(matches!(err(json!([{"messageId": "nope"}])), QueenError::InvalidText { .. }));
        assert!(matches!(err(json!([{"messageId": M, "leaseId": "x"}])), QueenError::InvalidText { .. }));
        assert!(err(json!([{"messageId": M, "consumerGroup": 5}])).to_string().contains("acks[0].consumerGroup"));
        assert!(err(json!([{"messageId": M, "_status": "nope"}])).to_string().contains("acks[0]._status"));
        assert!(err(json!([{"messageId": 7}])).to_string().contains("must be a string"));
    }
}
