//! What the entries of an ack name, found (semantics §3.3, §3.4): per (partition, group), one
//! [`Target`] — the entries acked there with their messages, the leases they name as the
//! partition knows them, and the cursor row when the way of finding locked it already —
//! whichever way they were found:
//!
//! - one message by id ([`lookup`]'s first way): message, lease and locked row in one statement;
//! - a batch of one lease (`batch_of_one_lease`): the lease's rows of the messages' partitions,
//!   locked, in one statement;
//! - the general lookup (`find`, `leases_of`, and the entries grouped by (partition, group));
//! - a whole lease (`queen_ack_lease`: [`lease_rows`] and [`lease_target`]): the rows that hold it,
//!   locked, with their batches' messages, in one statement.
//!
//! Rows are locked in partition order, whatever the way, so that two calls acking the same
//! partitions cannot deadlock; and only once the shared locks of their queue and group are
//! held ([`hold`], locks.rs): every way finds what it will lock without locking it first. A role that may not pop every queue is screened first
//! ([`screen`]): a queue it holds no privilege on is unknown to it.

use super::parse::{AckEntry, AckStatus};
use super::rule::Known;
use super::SQL;
use crate::cursor::{Cursor, Key};
use crate::error::QueenResult;
use crate::names;
use crate::names::{from_pg, to_pg};
use crate::options::QueueOptions;
use crate::privilege::Privilege;
use crate::spi::types::{INT4, TEXT, TEXTS, UUID, UUIDS};
use crate::spi::{Query, Row, Spi};
use crate::state::{self, CursorRow, Micros};
use pgrx::datum::{DatumWithOid, TimestampWithTimeZone};
use pgrx::pg_sys::Oid;
use pgrx::Uuid;
use std::collections::{BTreeMap, HashMap};

const ACK_FIND: Query = Query { file: SQL, name: "ack_find", args: &[UUIDS, UUIDS, TEXTS, UUIDS, INT4] };
const ACK_FIND_IDS: Query = Query { file: SQL, name: "ack_find_ids", args: &[UUIDS, INT4] };
const ACK_SCOPE: Query = Query { file: SQL, name: "ack_scope", args: &[UUIDS, UUIDS, INT4] };
const ACK_MESSAGE_LOCK: Query =
    Query { file: SQL, name: "ack_message_lock", args: &[UUID, TEXT, UUID, INT4, TEXTS, UUIDS] };
const ACK_LEASES: Query = Query { file: SQL, name: "ack_leases", args: &[UUIDS, UUIDS, INT4] };
const ACK_BATCH_LOCK: Query = Query { file: SQL, name: "ack_batch_lock", args: &[UUIDS, UUID, TEXT, INT4] };
const ACK_LEASE_QUEUES: Query = Query { file: SQL, name: "ack_lease_queues", args: &[UUID, INT4] };
const ACK_LEASE_LOCK: Query = Query { file: SQL, name: "ack_lease_lock", args: &[UUID, INT4] };
const ACK_LEASE_LOCK_ROWS: Query = Query { file: SQL, name: "ack_lease_lock_rows", args: &[UUID, INT4] };

/// A cursor row as an ack reads it, the clock, and the queue's options.
pub(super) type Locked = (CursorRow, Micros, QueueOptions);

/// A cursor row as a statement of ack.sql read it, locked: the row, the clock (read after the
/// lock), and the queue's options when the statement could join them ([`options_in_row`]).
type Read = (CursorRow, Micros, Option<QueueOptions>);

fn read(r: &Row<'_>) -> Read {
    (state::parse(r), state::micros(r.req::<TimestampWithTimeZone>("now")), options_in_row(r))
}

/// The queue's options as a row of ack.sql carries them (its `-- [one server]` columns); None
/// on Citus, where the statement cannot join them (the caller loads them: [`options_or_load`]).
pub(super) fn options_in_row(r: &Row<'_>) -> Option<QueueOptions> {
    (!crate::shards::planning_for_citus()).then(|| crate::configure::stored_options(r).effective())
}

pub(super) fn options_or_load(s: &mut Spi, stored: Option<QueueOptions>, queue_id: Uuid) -> QueueOptions {
    stored.unwrap_or_else(|| crate::configure::load(s, queue_id).effective())
}

/// An entry as found: its index among the entries, and the message it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Named {
    pub idx: usize,
    pub key: Key,
    pub message_id: Uuid,
}

/// The entries of one (partition, group), however they were found: what apply.rs locks,
/// judges by the rules (rule.rs) and writes.
pub(super) struct Target {
    pub partition: Uuid,
    pub queue_id: Uuid,
    pub group: String,
    /// The entries acked here, in the order they were given (for `queen_ack_lease`, delivery
    /// order). The row is locked by the first one's message when the finding did not lock it.
    pub named: Vec<Named>,
    /// The row, already locked, with the clock and the queue's options.
    pub locked: Option<Locked>,
    /// The leases the entries name, as the partition's rows know them, by lease (a lease over
    /// two partitions may have been released in one and run out in the other, and an entry
    /// hears its own partition's reason, as a single ack would: item 14).
    pub leases: HashMap<Uuid, Known>,
}

impl Target {
    /// The target of `found` (entry index and message, all of one partition), acked for
    /// `group`, with the leases of `leases` its entries name.
    fn of(
        partition: Uuid,
        queue_id: Uuid,
        group: String,
        found: impl Iterator<Item = (usize, Message)>,
        locked: Option<Locked>,
        leases: &Leases,
        entries: &[AckEntry],
    ) -> Target {
        let named: Vec<Named> = found.map(|(idx, m)| Named { idx, key: m.key, message_id: m.message_id }).collect();
        let known = named
            .iter()
            .filter_map(|n| entries[n.idx].lease_id)
            .filter_map(|l| leases.at(Some(l), partition).map(|row| (to_pg(l), row.known)))
            .collect();
        Target { partition, queue_id, group, named, locked, leases: known }
    }
}

/// What the entries of a `queen_ack` name, as found.
pub(super) struct Lookup {
    /// Per entry, the id of the message found; None: not found.
    pub ids: Vec<Option<Uuid>>,
    /// Entries refused as they were found ('message not found', 'lease not held').
    pub refused: Vec<(usize, &'static str)>,
    /// The (partition, group)s acked, in the order their rows are locked.
    pub targets: Vec<Target>,
}

/// A message an entry names, as found.
#[derive(Clone, Copy)]
struct Message {
    partition_id: Uuid,
    key: Key,
    queue_id: Uuid,
    message_id: Uuid,
}

impl Message {
    /// The message columns of a row of `ack_find`, `ack_find_ids` or `ack_message_lock`.
    fn from_row(r: &Row<'_>) -> Message {
        Message {
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
    known: Known,
}

/// The leases acks name, as the cursor row of each acked partition knows them, by (lease,
/// partition).
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
            known: Known {
                expires_at: state::micros(r.req::<TimestampWithTimeZone>("expires_at")),
                released: r.req("released"),
            },
        })
    }
}

/// Take the shared locks (locks.rs `writing`) of every (queue, group) of `scope`, before any of
/// their rows is locked: the order every call keeps, so that no delete waits for a row this
/// transaction holds while this transaction waits for the delete. Taken again, a lock is a
/// hit in the backend's own table.
pub(super) fn hold(scope: impl IntoIterator<Item = (Uuid, String)>) -> QueenResult<()> {
    let mut scope: Vec<(Uuid, String)> = scope.into_iter().collect();
    scope.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()).then_with(|| a.1.cmp(&b.1)));
    scope.dedup();
    for (queue, group) in scope {
        crate::locks::writing(queue, None, Some(&group))?;
    }
    Ok(())
}

/// What an ack of `messages` under `leases` may lock (`ack_scope`, read without locking): the
/// messages' queues and the leases' groups.
fn scope(s: &mut Spi, messages: Vec<Uuid>, leases: Vec<Uuid>) -> (Vec<Uuid>, Vec<String>) {
    let args: [DatumWithOid; 3] = [messages.into(), leases.into(), crate::shards::current().into()];
    let r = ACK_SCOPE.run(s, &args).first();
    (r.get("queue_ids").unwrap_or_default(), r.get("lease_groups").unwrap_or_default())
}

/// The queues and the group of the rows holding `lease` (`ack_lease_queues`), read without
/// locking anything.
pub(super) fn lease_scope(s: &mut Spi, lease: Uuid) -> Vec<(Uuid, String)> {
    let args: [DatumWithOid; 2] = [lease.into(), crate::shards::current().into()];
    ACK_LEASE_QUEUES.run(s, &args).map(|r| (r.req::<Uuid>("queue_id"), r.req::<String>("consumer_group"))).collect()
}

/// The queues and the group of the rows holding `lease`, read by hand through `cursors_lease`
/// (direct_save.rs find_lease) without locking anything; None where the statement is to read.
fn lease_rows_by_hand(s: &mut Spi, lease: Uuid) -> Option<Vec<(Uuid, String)>> {
    if !crate::direct::available(s) {
        return None;
    }
    let (found, _) = crate::direct_save::find_lease(lease, false)?;
    Some(found.into_iter().map(|f| (f.queue_id, f.group)).collect())
}

/// Raises 42501 (changing nothing) unless the caller may pop every queue of `queues`.
fn may_ack(s: &mut Spi, role: Oid, mut queues: Vec<Uuid>) -> QueenResult<()> {
    queues.sort_unstable_by_key(|q| *q.as_bytes());
    queues.dedup();
    crate::privilege::require_ids(s, role, &queues, Privilege::Pop)
}

/// The entries as the caller may see them, when it may not pop every queue: an entry naming a
/// message of a queue it holds no privilege on names no message (the nil id) and is answered
/// 'message not found', as an unknown id is. None: every entry as given. 42501 for a message
/// of a queue it knows of but may not pop. Reads without locking anything.
pub(super) fn screen(s: &mut Spi, role: Oid, entries: &[AckEntry]) -> QueenResult<Option<Vec<AckEntry>>> {
    if crate::privilege::allowed_everywhere(s, role, Privilege::Pop) {
        return Ok(None);
    }
    let found = find(s, entries);
    let mut queues: Vec<Uuid> = found.iter().flatten().map(|f| f.queue_id).collect();
    queues.sort_unstable_by_key(|q| *q.as_bytes());
    queues.dedup();
    let unknown = crate::privilege::unknown_to(s, role, &queues, Privilege::Pop)?;
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

/// Find what the entries of a `queen_ack` name, each way tried when the one before does not
/// apply: one message by id, a batch of one lease, the general lookup. The first two lock the
/// rows as they find them; the general one leaves that to apply.rs. Raises 42501 (changing
/// nothing) when the caller lacks `pop` on a found message's queue.
pub(super) fn lookup(s: &mut Spi, role: Oid, entries: &[AckEntry]) -> QueenResult<Lookup> {
    if let Some(found) = one_by_id(s, role, entries)? {
        return Ok(found);
    }
    if let Some(found) = batch_of_one_lease(s, role, entries)? {
        return Ok(found);
    }
    general(s, role, entries)
}

/// One ack by message id (the common case): the message, its lease and, locked, the cursor row
/// of the lease's group (or of the group named) in one statement. None when there is not one
/// entry by id, or its message or row was not found: the next way then looks.
fn one_by_id(s: &mut Spi, role: Oid, entries: &[AckEntry]) -> QueenResult<Option<Lookup>> {
    let [e @ AckEntry { message_id: Some(id), .. }] = entries else {
        return Ok(None);
    };
    // The message's queue and the lease's group, read first, and their locks taken: the
    // statement below locks the row of the lease's group, or of the group given. The common
    // ack, under the lease that holds the message's partition, finds them through the
    // lease's rows by hand; otherwise (or when the statement finds the message elsewhere:
    // then it locks nothing) one statement reads them.
    let lease = e.lease_id.map(to_pg);
    let given = names::group_key(e.group.as_deref()).to_string();
    let mut found = None;
    if let Some(held) = lease.and_then(|l| lease_rows_by_hand(s, l)).filter(|h| !h.is_empty()) {
        let queues: Vec<Uuid> = held.iter().map(|(q, _)| *q).collect();
        let groups: Vec<String> = held.into_iter().map(|(_, g)| g).chain([given.clone()]).collect();
        hold(queues.iter().flat_map(|q| groups.iter().map(move |g| (*q, g.clone()))))?;
        found = lock_by_message(s, to_pg(*id), e.group.as_deref(), lease, &groups, &queues);
    }
    if found.is_none() {
        let (queues, mut groups) = scope(s, vec![to_pg(*id)], lease.into_iter().collect());
        let [queue] = queues[..] else {
            return Ok(None);
        };
        groups.push(given);
        hold(groups.iter().map(|g| (queue, g.clone())))?;
        found = lock_by_message(s, to_pg(*id), e.group.as_deref(), lease, &groups, &[queue]);
    }
    let Some((m, locked, lease)) = found else {
        return Ok(None);
    };
    may_ack(s, role, vec![m.queue_id])?;
    let leases = Leases(lease.into_iter().map(|l| ((to_pg(e.lease_id.unwrap()), m.partition_id), l)).collect());
    let Some(group) = group_of(e, leases.at(e.lease_id, m.partition_id)) else {
        return Ok(None);
    };
    let target = Target::of(m.partition_id, m.queue_id, group, [(0, m)].into_iter(), Some(locked), &leases, entries);
    Ok(Some(Lookup { ids: vec![Some(m.message_id)], refused: Vec::new(), targets: vec![target] }))
}

/// A row of `ack_batch_lock`: the messages found in its partition, the row, and the lease as
/// the row knows it.
struct BatchRow {
    found: Vec<Message>,
    read: Read,
    lease: LeaseRow,
}

/// A batch whose entries all name their message by id and one lease, with one group given or
/// none (what a worker acking what it popped sends): the lease and its group's rows of the
/// messages' partitions, locked, in one statement (`ack_batch_lock`), one target per
/// partition. None, with nothing applied, when the batch is not of that shape, the lease is
/// not known to those rows (or another group was given), or a message or a partition's row
/// was not found: the general lookup then finds, as it would have.
fn batch_of_one_lease(s: &mut Spi, role: Oid, entries: &[AckEntry]) -> QueenResult<Option<Lookup>> {
    let Some(first) = entries.first() else {
        return Ok(None);
    };
    let (Some(lease), group) = (first.lease_id, first.group.as_deref()) else {
        return Ok(None);
    };
    if entries.len() < 2 || !entries.iter().all(|e| e.lease_id == Some(lease) && e.group.as_deref() == group) {
        return Ok(None);
    }
    if let Some(found) = batch_by_key(s, role, entries, to_pg(lease), group)? {
        return Ok(Some(found));
    }
    // Entries by transaction id (Queen's clients' and the gateway's) that the lease's batches
    // do not answer are found by the general lookup; the statement takes message ids.
    if entries.iter().any(|e| e.message_id.is_none()) {
        return Ok(None);
    }
    let mut ids: Vec<Uuid> = entries.iter().filter_map(|e| e.message_id.map(to_pg)).collect();
    // What the statement will lock, read first, and its locks taken: the rows of the lease's
    // group in the messages' partitions (a lease is one group's: a group read now is the
    // statement's). A lease no row knows yet is left to the general path.
    let (queues, groups) = scope(s, ids.clone(), vec![to_pg(lease)]);
    if groups.is_empty() {
        return Ok(None);
    }
    hold(queues.iter().flat_map(|q| groups.iter().map(move |g| (*q, g.clone()))))?;
    let args: [DatumWithOid; 4] = [
        ids.clone().into(),
        to_pg(lease).into(),
        group.map(|g| names::group_key(Some(g)).to_string()).into(),
        crate::shards::current().into(),
    ];
    // Decoded before any other statement runs (the rows live in SPI's tuple table).
    let mut rows: Vec<BatchRow> = Vec::new();
    let (mut messages_found, mut partitions_found) = (0, 0);
    for r in ACK_BATCH_LOCK.run(s, &args) {
        messages_found = r.req::<i64>("messages_found") as usize;
        partitions_found = r.req::<i64>("partitions_found") as usize;
        let (partition_id, queue_id) = (r.req::<Uuid>("partition_id"), r.req::<Uuid>("queue_id"));
        let found: Vec<Message> = r
            .req::<Vec<Uuid>>("found_ids")
            .into_iter()
            .zip(r.req::<Vec<i64>>("found_txids"))
            .zip(r.req::<Vec<i64>>("found_seqs"))
            .map(|((message_id, txid), seq)| Message { partition_id, key: (txid, seq), queue_id, message_id })
            .collect();
        let lease = LeaseRow::from_row(&r).expect("queen: ack_batch_lock returns the lease's group");
        rows.push(BatchRow { found, read: read(&r), lease });
    }
    let rows: Vec<(Vec<Message>, LeaseRow, Locked)> = rows
        .into_iter()
        .map(|BatchRow { found, read: (row, now, opts), lease }| {
            let opts = options_or_load(s, opts, found[0].queue_id);
            (found, lease, (row, now, opts))
        })
        .collect();
    ids.sort_unstable_by_key(|id| *id.as_bytes());
    ids.dedup();
    if rows.is_empty() || messages_found != ids.len() || rows.len() != partitions_found {
        return Ok(None);
    }
    may_ack(s, role, rows.iter().map(|(f, _, _)| f[0].queue_id).collect())?;
    let leases = Leases(rows.iter().map(|(f, l, _)| ((to_pg(lease), f[0].partition_id), l.clone())).collect());
    let group = rows[0].1.group.clone();
    let by_id: HashMap<Uuid, Message> =
        rows.iter().flat_map(|(f, _, _)| f.iter().map(|m| (m.message_id, *m))).collect();
    let found: Vec<Option<Message>> =
        entries.iter().map(|e| e.message_id.and_then(|id| by_id.get(&to_pg(id)).copied())).collect();
    let targets = rows
        .into_iter()
        .map(|(partition_found, _, locked)| {
            let (p, q) = (partition_found[0].partition_id, partition_found[0].queue_id);
            let here = found.iter().enumerate().filter_map(|(i, f)| f.filter(|m| m.partition_id == p).map(|m| (i, m)));
            Target::of(p, q, group.clone(), here, Some(locked), &leases, entries)
        })
        .collect();
    Ok(Some(Lookup { ids: found.iter().map(|f| f.map(|m| m.message_id)).collect(), refused: Vec::new(), targets }))
}

/// A batch of one lease (`batch_of_one_lease`'s shape) whose messages are all in the lease's
/// own batches, found by key on one server (issue 23, acks by key): the rows that hold the lease
/// through `cursors_lease` and their batches' ids through `messages_pkey`, as the snapshot of a
/// statement sees them, then the rows of the partitions named locked in partition order, as
/// `ack_batch_lock` locks them (direct_save.rs `find_lease`, `lock_found`). The statement
/// probed `messages_message_id` once a message and started a plan of four CTEs: 2.6 M of a pop
/// 100 + jsonb ack cycle's 14.7 M instructions.
///
/// None when anything is otherwise — a message not in a batch of the rows holding the lease
/// (an ack late or wrong), another group given, a row that no longer holds the lease once
/// locked — and `ack_batch_lock` finds as before. Nothing is locked before every message is
/// found; a fallback after a lock locks the same rows again, in the same order.
fn batch_by_key(
    s: &mut Spi,
    role: Oid,
    entries: &[AckEntry],
    lease: Uuid,
    group: Option<&str>,
) -> QueenResult<Option<Lookup>> {
    if !crate::direct::available(s) {
        return Ok(None);
    }
    let Some((found, snap)) = crate::direct_save::find_lease(lease, true) else {
        return Ok(None);
    };
    let Some(first) = found.first() else {
        return Ok(None);
    };
    let of_group = group.is_none_or(|g| names::group_key(Some(g)) == first.group);
    if !of_group || found.iter().any(|f| f.group != first.group) {
        return Ok(None);
    }
    let Some(named) = named_in_batches(entries, &found, &snap) else {
        return Ok(None);
    };
    let mut rows: Vec<usize> = named.iter().map(|(at, _)| *at).collect();
    rows.sort_unstable();
    rows.dedup();
    let wanted: Vec<crate::direct_save::LeaseFound> =
        found.into_iter().enumerate().filter(|(at, _)| rows.binary_search(at).is_ok()).map(|(_, f)| f).collect();
    hold(wanted.iter().map(|f| (f.queue_id, f.group.clone())))?;
    let Some((held, now)) = crate::direct_save::lock_found(lease, wanted, &snap) else {
        return Ok(None);
    };
    if held.len() != rows.len() {
        return Ok(None);
    }
    may_ack(s, role, held.iter().map(|h| h.queue_id).collect())?;
    let ids = named.iter().map(|(_, n)| Some(n.message_id)).collect();
    let targets: Vec<Target> = held
        .into_iter()
        .zip(rows)
        .map(|(h, at)| {
            let known = Known {
                expires_at: h.row.lease_expires_at.expect("queen: a lease held has an expiry"),
                released: false,
            };
            let opts = crate::configure::load_cached(s, h.queue_id).effective();
            Target {
                partition: h.partition,
                queue_id: h.queue_id,
                group: h.group,
                named: named.iter().filter(|(a, _)| *a == at).map(|(_, n)| *n).collect(),
                locked: Some((h.row, now, opts)),
                leases: HashMap::from([(lease, known)]),
            }
        })
        .collect();
    if cfg!(debug_assertions) {
        check_found_as_the_statement(s, entries, lease, group, &snap, &targets);
    }
    Ok(Some(Lookup { ids, refused: Vec::new(), targets }))
}

/// The message each entry names, found in the batches of the rows that hold the lease
/// (`found`), with the row's place in `found`; None unless every one is there. An entry names
/// its message by id, or by partition and transaction id as ack_find finds it: the message of
/// the partition that holds that transaction id, else the keyless message whose id the
/// transaction id reads as. A keyless match counts only once a probe of
/// `messages_transaction_id` shows that no message of the partition holds the transaction id
/// (the statement would take that one, in the batch or not).
fn named_in_batches(
    entries: &[AckEntry],
    found: &[crate::direct_save::LeaseFound],
    snap: &crate::index_read::Snapshot,
) -> Option<Vec<(usize, Named)>> {
    let by_transaction = entries.iter().any(|e| e.message_id.is_none());
    // Each message of the batches by id (the row, its place in `found`, its key, and whether it
    // is keyless: read only when an entry names a transaction id), and by transaction id then.
    let mut by_id: HashMap<Uuid, (usize, Key, bool)> = HashMap::new();
    let mut by_tid: HashMap<String, Vec<(Uuid, usize, Key, Uuid)>> = HashMap::new();
    for (at, f) in found.iter().enumerate() {
        let keys = f.row.as_ref().and_then(|r| r.cursor.lease.as_ref()).map(|b| b.keys.clone()).unwrap_or_default();
        if !by_transaction {
            let ids = crate::direct::batch_ids(snap, f.partition, &keys)?;
            by_id.extend(keys.into_iter().zip(ids).filter_map(|(k, id)| id.map(|id| (id, (at, k, false)))));
            continue;
        }
        let messages = crate::direct::batch_messages(snap, f.partition, &keys)?;
        for (k, m) in keys.into_iter().zip(messages) {
            let Some(m) = m else { continue };
            by_id.insert(m.id, (at, k, m.transaction_id.is_none()));
            if let Some(tid) = m.transaction_id {
                by_tid.entry(tid).or_default().push((f.partition, at, k, m.id));
            }
        }
    }
    let mut named: Vec<(usize, Named)> = Vec::with_capacity(entries.len());
    // The transaction ids of keyless matches, by partition, probed below.
    let mut keyless: BTreeMap<[u8; 16], Vec<&str>> = BTreeMap::new();
    for (idx, e) in entries.iter().enumerate() {
        if let Some(id) = e.message_id.map(to_pg) {
            let &(at, key, _) = by_id.get(&id)?;
            named.push((at, Named { idx, key, message_id: id }));
            continue;
        }
        let (tid, pid) = (e.transaction_id.as_deref()?, to_pg(e.partition_id?));
        let holder = by_tid.get(tid).and_then(|ms| ms.iter().find(|m| m.0 == pid));
        if let Some(&(_, at, key, message_id)) = holder {
            named.push((at, Named { idx, key, message_id }));
            continue;
        }
        let id = to_pg(uuid::Uuid::parse_str(tid).ok()?);
        let &(at, key, is_keyless) = by_id.get(&id)?;
        if !is_keyless || found[at].partition != pid {
            return None;
        }
        named.push((at, Named { idx, key, message_id: id }));
        keyless.entry(*pid.as_bytes()).or_default().push(tid);
    }
    for (pid, tids) in keyless {
        if crate::direct::transaction_id_held(snap, Uuid::from_bytes(pid), &tids)? {
            return None;
        }
    }
    Some(named)
}

/// Panics unless `ack_batch_lock`, run under the snapshot `batch_by_key` read by (its rows are
/// locked already, by this transaction), finds the targets it found: the same partitions, in
/// order, each with the same messages, row, lease and options. Debug builds check every batch
/// found by key so, in every test and explorer run.
fn check_found_as_the_statement(
    s: &mut Spi,
    entries: &[AckEntry],
    lease: Uuid,
    group: Option<&str>,
    snap: &crate::index_read::Snapshot,
    targets: &[Target],
) {
    // The messages found by key, by entry, then as ack_find finds them under the snapshot.
    let mut ids: Vec<Option<Uuid>> = vec![None; entries.len()];
    for n in targets.iter().flat_map(|t| &t.named) {
        ids[n.idx] = Some(n.message_id);
    }
    assert_eq!(ids, find_at(s, entries, snap.snap), "queen: a batch found by key names other messages than ack_find");
    let ids: Vec<Uuid> = ids.into_iter().flatten().collect();
    let args: [DatumWithOid; 4] = [
        ids.into(),
        lease.into(),
        group.map(|g| names::group_key(Some(g)).to_string()).into(),
        crate::shards::current().into(),
    ];
    let sql: Vec<String> = ACK_BATCH_LOCK
        .run_at(s, &args, snap.snap)
        .map(|r| {
            let mut found: Vec<Uuid> = r.req("found_ids");
            found.sort_unstable_by_key(|u| *u.as_bytes());
            let (row, _, opts) = read(&r);
            let lease = LeaseRow::from_row(&r).expect("queen: ack_batch_lock returns the lease's group");
            format!("{} {} {found:?} {row:?} {:?} {:?}", r.req::<Uuid>("partition_id"), lease.group, lease.known, opts)
        })
        .collect();
    let by_key: Vec<String> = targets
        .iter()
        .map(|t| {
            let mut found: Vec<Uuid> = t.named.iter().map(|n| n.message_id).collect();
            found.sort_unstable_by_key(|u| *u.as_bytes());
            found.dedup();
            let (row, _, opts) = t.locked.as_ref().expect("queen: found by key, locked");
            format!("{} {} {found:?} {row:?} {:?} {:?}", t.partition, t.group, t.leases[&lease], Some(opts))
        })
        .collect();
    assert_eq!(by_key, sql, "queen: a batch found by key otherwise than ack_batch_lock finds it");
}

/// The general lookup: the messages the entries name, the leases they name as those messages'
/// partitions know them, and the entries grouped by (partition, group) in partition order,
/// locked in that order by apply.rs so that two calls acking the same partitions cannot
/// deadlock.
fn general(s: &mut Spi, role: Oid, entries: &[AckEntry]) -> QueenResult<Lookup> {
    let found = find(s, entries);
    may_ack(s, role, found.iter().flatten().map(|f| f.queue_id).collect())?;
    let leases = leases_of(s, entries, &found);
    let mut groups: BTreeMap<(uuid::Uuid, String), Vec<usize>> = BTreeMap::new();
    let mut refused = Vec::new();
    for (i, f) in found.iter().enumerate() {
        match f {
            None => refused.push((i, "message not found")),
            Some(f) => match group_of(&entries[i], leases.at(entries[i].lease_id, f.partition_id)) {
                Some(g) => groups.entry((from_pg(f.partition_id), g)).or_default().push(i),
                None => refused.push((i, "lease not held")),
            },
        }
    }
    // Each target's row is locked by apply.rs: its queue's and group's locks first.
    hold(
        groups
            .iter()
            .map(|((_, group), idxs)| (found[idxs[0]].expect("grouped entries were found").queue_id, group.clone())),
    )?;
    let targets = groups
        .into_iter()
        .map(|((_, group), idxs)| {
            let first = found[idxs[0]].expect("grouped entries were found");
            let here = idxs.into_iter().map(|i| (i, found[i].expect("grouped entries were found")));
            Target::of(first.partition_id, first.queue_id, group, here, None, &leases, entries)
        })
        .collect();
    Ok(Lookup { ids: found.iter().map(|f| f.map(|m| m.message_id)).collect(), refused, targets })
}

/// The leases of entries whose message was not found (retention may have deleted it under
/// the lease: the rest of the batch may be gone too), each once.
pub(super) fn gone(entries: &[AckEntry], ids: &[Option<Uuid>]) -> Vec<Uuid> {
    let mut gone: Vec<Uuid> =
        (0..entries.len()).filter(|&i| ids[i].is_none()).filter_map(|i| entries[i].lease_id.map(to_pg)).collect();
    gone.sort_unstable_by_key(|l| *l.as_bytes());
    gone.dedup();
    gone
}

/// The group an entry acks for (semantics §3.3): its lease's group when the lease is known, which
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
fn leases_of(s: &mut Spi, entries: &[AckEntry], found: &[Option<Message>]) -> Leases {
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

/// The ids of the messages the entries name as `find` finds them, under `snapshot`.
fn find_at(s: &mut Spi, entries: &[AckEntry], snapshot: pgrx::pg_sys::Snapshot) -> Vec<Option<Uuid>> {
    let mut found = vec![None; entries.len()];
    for r in ACK_FIND.run_at(s, &find_args(entries), snapshot) {
        found[r.req::<i64>("ord") as usize - 1] = Some(r.req::<Uuid>("message_id"));
    }
    found
}

/// ack_find's arguments for `entries`.
fn find_args(entries: &[AckEntry]) -> [DatumWithOid<'static>; 5] {
    let mids: Vec<Option<Uuid>> = entries.iter().map(|e| e.message_id.map(to_pg)).collect();
    let pids: Vec<Option<Uuid>> = entries.iter().map(|e| e.partition_id.map(to_pg)).collect();
    let tids: Vec<Option<String>> = entries.iter().map(|e| e.transaction_id.clone()).collect();
    let tid_uuids: Vec<Option<Uuid>> = entries
        .iter()
        .map(|e| e.transaction_id.as_deref().and_then(|t| uuid::Uuid::parse_str(t).ok()).map(to_pg))
        .collect();
    [mids.into(), pids.into(), tids.into(), tid_uuids.into(), crate::shards::current().into()]
}

/// Look up the messages the entries name.
fn find(s: &mut Spi, entries: &[AckEntry]) -> Vec<Option<Message>> {
    if entries.iter().all(|e| e.message_id.is_some()) {
        let ids: Vec<Uuid> = entries.iter().filter_map(|e| e.message_id.map(to_pg)).collect();
        let args: [DatumWithOid; 2] = [ids.into(), crate::shards::current().into()];
        let by_id: HashMap<Uuid, Message> = ACK_FIND_IDS
            .run(s, &args)
            .map(|r| {
                let f = Message::from_row(&r);
                (f.message_id, f)
            })
            .collect();
        return entries.iter().map(|e| e.message_id.and_then(|id| by_id.get(&to_pg(id)).copied())).collect();
    }
    let mut found = vec![None; entries.len()];
    for r in ACK_FIND.run(s, &find_args(entries)) {
        let ord = r.req::<i64>("ord") as usize - 1;
        found[ord] = Some(Message::from_row(&r));
    }
    found
}

/// The message `message_id` and, locked, its partition's cursor row for the group of `lease`
/// (if that lease has a row) or else `group` (None: queue mode), with that lease's row; None
/// when the message or the cursor row does not exist, `group` is not the lease's, or the group
/// is none of `held` or the message's queue none of `queues` (those whose locks the caller
/// holds: locks.rs).
fn lock_by_message(
    s: &mut Spi,
    message_id: Uuid,
    group: Option<&str>,
    lease: Option<Uuid>,
    held: &[String],
    queues: &[Uuid],
) -> Option<(Message, Locked, Option<LeaseRow>)> {
    let args: [DatumWithOid; 6] = [
        message_id.into(),
        group.into(),
        lease.into(),
        crate::shards::current().into(),
        held.to_vec().into(),
        queues.to_vec().into(),
    ];
    let (found, (row, now, opts), lease) = {
        let r = ACK_MESSAGE_LOCK.run(s, &args).next()?;
        (Message::from_row(&r), read(&r), LeaseRow::from_row(&r))
    };
    let opts = options_or_load(s, opts, found.queue_id);
    Some((found, (row, now, opts), lease))
}

/// The cursor row of `group` on the partition of message `message_id` of queue `queue`,
/// locked, if it exists (and the message does). The caller holds the locks of `queue` and
/// `group`.
pub(super) fn lock_row(s: &mut Spi, message_id: Uuid, queue: Uuid, group: &str) -> Option<Locked> {
    lock_by_message(s, message_id, Some(group), None, &[group.to_string()], &[queue]).map(|(_, locked, _)| locked)
}

/// A row holding the lease `queen_ack_lease` acks, as `ack_lease_lock` read it.
pub(super) struct LeaseBatch {
    partition: Uuid,
    group: String,
    queue_id: Uuid,
    /// The ids of the batch's messages, in delivery order; None where one no longer exists.
    ids: Vec<Option<Uuid>>,
    read: Read,
}

impl LeaseBatch {
    /// A row of ack_lease_lock (`with_ids`: its batch ids read) or ack_lease_lock_rows.
    fn of_row(r: &Row<'_>, with_ids: bool) -> LeaseBatch {
        LeaseBatch {
            partition: r.req("partition_id"),
            group: r.req("consumer_group"),
            queue_id: r.req("queue_id"),
            ids: if with_ids { r.get::<Vec<Option<Uuid>>>("batch_ids").unwrap_or_default() } else { Vec::new() },
            read: read(r),
        }
    }
}

/// The rows holding `lease` (`queen_ack_lease`, semantics §3.4), found through `cursors_lease` and
/// locked in partition order, with their batches' message ids, in one statement. A lease no
/// row holds any more (released, or taken over by a pop after it ran out) no longer knows its
/// batch: no rows, as for an unknown lease. To a role that holds no privilege on the lease's
/// queue, the lease is unknown (no rows, nothing locked); one that knows the queue but may not
/// pop is refused (42501).
pub(super) fn lease_rows(s: &mut Spi, role: Oid, lease: Uuid) -> QueenResult<Vec<LeaseBatch>> {
    let shard = crate::shards::current();
    // The lease's queues and group, read without locking (for a role that may not pop every
    // queue, and for the statements below, which lock the rows after their locks are taken).
    let mut scope: Option<Vec<(Uuid, String)>> = None;
    if !crate::privilege::allowed_everywhere(s, role, Privilege::Pop) {
        let found = lease_scope(s, lease);
        let queues: Vec<Uuid> = found.iter().map(|(q, _)| *q).collect();
        if !crate::privilege::unknown_to(s, role, &queues, Privilege::Pop)?.is_empty() {
            return Ok(Vec::new());
        }
        scope = Some(found);
    }
    // On one server the batches' ids are read straight from messages_pkey after the lock
    // (direct.rs batch_ids), by a statement that only locks: ack_lease_lock's reads of them cost
    // more to start than to run.
    let direct = crate::direct::available(s);
    let args: [DatumWithOid; 2] = [lease.into(), shard.into()];
    // On one server the rows are found and locked by hand (direct_save.rs find_lease, lock_found), as
    // ack_lease_lock_rows locks them, and the queue's options come from the backend's cache.
    let by_hand = match direct.then(|| crate::direct_save::find_lease(lease, false)).flatten() {
        Some((found, snap)) => {
            hold(found.iter().map(|f| (f.queue_id, f.group.clone())))?;
            crate::direct_save::lock_found(lease, found, &snap).map(|(held, now)| (held, now, snap))
        }
        None => None,
    };
    if by_hand.is_none() {
        // The statements lock the rows that hold the lease: theirs as read now (a lease's rows
        // only go, never come, once its pop has committed; none yet: an unknown lease).
        let scope = match scope.take() {
            Some(found) => found,
            None => lease_scope(s, lease),
        };
        if scope.is_empty() {
            return Ok(Vec::new());
        }
        hold(scope)?;
    }
    let mut rows: Vec<LeaseBatch> = match by_hand {
        Some((held, now, snap)) => {
            let rows: Vec<LeaseBatch> = held
                .into_iter()
                .map(|h| LeaseBatch {
                    read: (h.row, now, Some(crate::configure::load_cached(s, h.queue_id).effective())),
                    partition: h.partition,
                    group: h.group,
                    queue_id: h.queue_id,
                    ids: Vec::new(),
                })
                .collect();
            if cfg!(debug_assertions) {
                check_locked_as_the_statement(s, &args, &snap, &rows);
            }
            rows
        }
        None => if direct { ACK_LEASE_LOCK_ROWS.run(s, &args) } else { ACK_LEASE_LOCK.run(s, &args) }
            .map(|r| LeaseBatch::of_row(&r, !direct))
            .collect(),
    };
    if direct {
        let snap = crate::index_read::Snapshot::take();
        for b in &mut rows {
            let keys = b.read.0.cursor.lease.as_ref().map(|l| l.keys.clone()).unwrap_or_default();
            match crate::direct::batch_ids(&snap, b.partition, &keys) {
                Some(ids) => b.ids = ids,
                None => {
                    // A relation gone since it was found (an index rebuilt): the statement
                    // reads the ids (the rows are locked already, by this transaction).
                    let ids: HashMap<Uuid, Vec<Option<Uuid>>> = ACK_LEASE_LOCK
                        .run(s, &args)
                        .map(|r| (r.req("partition_id"), r.get("batch_ids").unwrap_or_default()))
                        .collect();
                    for b in &mut rows {
                        b.ids = ids.get(&b.partition).cloned().unwrap_or_default();
                    }
                    return finish(s, role, rows);
                }
            }
        }
        if cfg!(debug_assertions) {
            // The statement's ids under the same snapshot (the rows are locked already): the
            // direct read must read them all, as direct.rs check_same does for the look.
            let sql: Vec<(Uuid, Vec<Option<Uuid>>)> = ACK_LEASE_LOCK
                .run_at(s, &args, snap.snap)
                .map(|r| (r.req("partition_id"), r.get("batch_ids").unwrap_or_default()))
                .collect();
            let read: Vec<(Uuid, Vec<Option<Uuid>>)> = rows.iter().map(|b| (b.partition, b.ids.clone())).collect();
            assert_eq!(read, sql, "queen: a lease's batch ids read otherwise than ack_lease_lock reads them");
        }
    }
    finish(s, role, rows)
}

/// Panics unless ack_lease_lock_rows, run under the snapshot the lock by hand took (the rows are
/// locked already, by this transaction), returns the rows `locked` holds, in the same order and
/// versions, with the same options: debug builds check every lock so, in every test and
/// explorer run.
fn check_locked_as_the_statement(
    s: &mut Spi,
    args: &[DatumWithOid],
    snap: &crate::index_read::Snapshot,
    locked: &[LeaseBatch],
) {
    let shown = |b: &LeaseBatch| format!("{} {} {} {:?} {:?}", b.partition, b.group, b.queue_id, b.read.0, b.read.2);
    let sql: Vec<String> =
        ACK_LEASE_LOCK_ROWS.run_at(s, args, snap.snap).map(|r| shown(&LeaseBatch::of_row(&r, false))).collect();
    let by_hand: Vec<String> = locked.iter().map(shown).collect();
    assert_eq!(by_hand, sql, "queen: a lease's rows locked otherwise than ack_lease_lock_rows locks them");
}

/// The rows of lease_rows, once the caller may ack them all.
fn finish(s: &mut Spi, role: Oid, rows: Vec<LeaseBatch>) -> QueenResult<Vec<LeaseBatch>> {
    may_ack(s, role, rows.iter().map(|b| b.queue_id).collect())?;
    Ok(rows)
}

/// The target of one row of `lease` ([`lease_rows`]): the messages of its batch not finished yet,
/// in delivery order, each acked by an entry of `lease` with `status` and `error` appended to
/// `entries` — as a batch of one entry per message would be. The row holds the lease: the
/// rules judge it by the row (no other lease is known). Names nothing when every unfinished
/// message of the batch is gone.
pub(super) fn lease_target(
    s: &mut Spi,
    lease: Uuid,
    b: LeaseBatch,
    status: AckStatus,
    error: Option<&str>,
    entries: &mut Vec<AckEntry>,
) -> Target {
    let (mut row, now, opts) = b.read;
    let opts = options_or_load(s, opts, b.queue_id);
    let messages = lease_messages(&mut row.cursor, &b.ids, opts.retention_seconds > 0);
    let named = messages
        .into_iter()
        .map(|(key, message_id)| {
            entries.push(AckEntry {
                message_id: Some(from_pg(message_id)),
                transaction_id: None,
                partition_id: None,
                lease_id: Some(from_pg(lease)),
                group: None,
                status,
                error: error.map(str::to_string),
            });
            Named { idx: entries.len() - 1, key, message_id }
        })
        .collect();
    Target {
        partition: b.partition,
        queue_id: b.queue_id,
        group: b.group,
        named,
        locked: Some((row, now, opts)),
        leases: HashMap::new(),
    }
}

/// What `queen_ack_lease` acks in one row: the messages of the lease's batch not finished yet,
/// in delivery order, with their ids (`ids`, aligned with the batch's keys). One whose message
/// no longer exists (None) is counted finished when the queue has retention, which deleted it
/// under the lease (as apply.rs `forget_vanished`), and is left out either way.
fn lease_messages(cursor: &mut Cursor, ids: &[Option<Uuid>], retention: bool) -> Vec<(Key, Uuid)> {
    let keys = cursor.lease.as_ref().map(|l| l.keys.clone()).unwrap_or_default();
    let mut messages = Vec::new();
    for (k, id) in keys.into_iter().zip(ids) {
        match id {
            _ if cursor.is_finished(k) => {}
            Some(id) => messages.push((k, *id)),
            None if retention => cursor.vanished(k),
            None => {}
        }
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_acks_its_unfinished_messages_in_delivery_order() {
        use crate::cursor::{Batch, Cursor};
        let id = |n: u8| Uuid::from_bytes([n; 16]);
        // Delivered in this order: (7,2) before (5,1) (a transaction's order), then (7,3), (8,0).
        let batch = Batch::new(vec![(7, 2), (5, 1), (7, 3), (8, 0)], vec![]);
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
            let got = lease_messages(&mut c, &ids, retention);
            let want: Vec<(Key, Uuid)> = want.into_iter().map(|(k, n)| (k, id(n))).collect();
            assert_eq!(got, want, "ids {ids:?}, ahead {ahead:?}");
            for k in [(5, 1), (7, 2), (7, 3), (8, 0)] {
                let expected = ahead.contains(&k) || vanished.contains(&k);
                assert_eq!(c.is_finished(k), expected, "{k:?} finished");
            }
        }
    }
}
