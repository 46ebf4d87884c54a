//! A cursor row saved by hand on one server: cursor_save and cursor_update of state.sql (which
//! see, part by part) written through index_write.rs instead of started as statements.
//!
//! A pop and an ack each save a row, and the statement that did it — a CTE of a delete, an
//! insert and an update, with the snapshot's ids and a probe of the partition — cost more to
//! start than to run: a fifth of a pop 100 + `queen_ack_lease` cycle, two thirds of it the
//! executor's start and finish (issue 23, docs/benchmarks.md). The rules stay the statement's,
//! and the statement stays the save on Citus, for a row this transaction does not hold, and
//! wherever a relation is not as this code writes it.

use crate::direct;
use crate::index_read::{Index, Key as ScanKey, Scan, Snapshot, Table};
use crate::index_write::{Lock, Writer};
use crate::spi::Spi;
use crate::state::{self, timestamp, CursorRow, Micros, SaveAlso};
use pgrx::{pg_sys, IntoDatum, Uuid};

/// `state::save`, by hand where it can be.
pub(crate) fn save(s: &mut Spi, partition: Uuid, group: &str, row: &CursorRow, also: SaveAlso) {
    if direct::available(s) && save_direct(partition, group, row, &also).is_some() {
        return;
    }
    state::save(s, partition, group, row, also);
}

/// `state::lock` (cursor_lock of state.sql, which see), by hand where it can be: the row as a
/// new snapshot sees it, in `version`, locked as FOR UPDATE SKIP LOCKED locks it. A version
/// committed since the snapshot, which the lock follows, is locked and not taken (the
/// statement re-checks `version` on it).
pub(crate) fn lock(s: &mut Spi, partition: Uuid, group: &str, version: &str) -> bool {
    if direct::available(s) {
        if let Some(locked) = lock_direct(partition, group, version) {
            return locked;
        }
    }
    state::lock(s, partition, group, version)
}

fn lock_direct(partition: Uuid, group: &str, version: &str) -> Option<bool> {
    let l = direct::layout()?;
    let snap = Snapshot::take();
    let pid = *partition.as_bytes();
    let (cursors, cursors_pkey) = (Table::open(l.cursors)?, Index::open(l.cursors_pkey)?);
    let group_datum = group.into_datum()?;
    let shard = crate::shards::current();
    let mut scan = direct::cursor_scan(&l, (&cursors, &cursors_pkey), &snap, &pid, group_datum, shard);
    let Some(t) = scan.next() else { return Some(false) };
    if t.xmin() != version {
        return Some(false);
    }
    let tid = t.tid();
    let mut writer = Writer::open(l.cursors, snap.snap)?;
    Some(writer.lock_skip(tid) == Lock::Current)
}

/// A row holding a lease, locked by [`lock_found`]: whose it is, and the row as locked.
pub(crate) struct LeaseHeld {
    pub partition: Uuid,
    pub group: String,
    pub queue_id: Uuid,
    pub row: CursorRow,
}

/// A row of this shard holding a lease as a snapshot sees it ([`find_lease`]), not locked.
pub(crate) struct LeaseFound {
    pub partition: Uuid,
    pub group: String,
    pub queue_id: Uuid,
    /// The row as the snapshot sees it, when asked for.
    pub row: Option<CursorRow>,
    tid: pg_sys::ItemPointerData,
}

/// The rows of this shard holding `lease` as a new snapshot sees them, found through
/// `cursors_lease`, in the order `ack_lease_lock_rows` locks them (partition order); and the
/// snapshot; with each row as that snapshot sees it when `rows`. Nothing is locked. None when
/// the relations are not as this code reads them.
pub(crate) fn find_lease(lease: Uuid, rows: bool) -> Option<(Vec<LeaseFound>, Snapshot)> {
    let l = direct::layout()?;
    if l.cursors_lease == pg_sys::InvalidOid {
        return None;
    }
    let snap = Snapshot::take();
    let shard = crate::shards::current();
    let lid = *lease.as_bytes();
    let (cursors, by_lease) = (Table::open(l.cursors)?, Index::open(l.cursors_lease)?);
    let mut found: Vec<LeaseFound> = Vec::new();
    let mut scan = Scan::new(
        &cursors,
        &by_lease,
        snap.snap,
        &[ScanKey::eq(1, pg_sys::F_UUID_EQ, pg_sys::Datum::from(lid.as_ptr()))],
        false,
    );
    while let Some(t) = scan.next() {
        if t.get::<i32>(l.c[direct::C_SHARD]) == Some(shard) {
            found.push(LeaseFound {
                partition: t.get(l.ck[0]).expect("queen: a cursor's partition is not NULL"),
                group: t.get(l.ck[1]).expect("queen: a cursor's group is not NULL"),
                queue_id: t.get(l.ck[2]).expect("queen: a cursor's queue is not NULL"),
                row: rows.then(|| direct::cursor_row(&l, &t)),
                tid: t.tid(),
            });
        }
    }
    drop(scan);
    // ORDER BY c.partition_id::text COLLATE "C", c.consumer_group: a uuid's text orders as its
    // bytes under "C". (The rows of a lease are one pop's, of one group: the group never
    // decides the order.)
    found.sort_by(|a, b| a.partition.as_bytes().cmp(b.partition.as_bytes()).then_with(|| a.group.cmp(&b.group)));
    Some((found, snap))
}

/// Lock `found` (rows of [`find_lease`] under `snap`, in its order) as `FOR UPDATE` locks them:
/// a row another transaction holds is waited for; a version committed since the snapshot,
/// which the lock follows, is taken when it still holds `lease` in this shard (the statement
/// re-checks its WHERE on it), and stays locked either way. The rows held, in that order, and
/// the clock read after the locks; None, having locked nothing, when the table cannot be
/// written here.
pub(crate) fn lock_found(lease: Uuid, found: Vec<LeaseFound>, snap: &Snapshot) -> Option<(Vec<LeaseHeld>, Micros)> {
    let l = direct::layout()?;
    let shard = crate::shards::current();
    let mut writer = Writer::open(l.cursors, snap.snap)?;
    let mut held = Vec::with_capacity(found.len());
    for LeaseFound { partition, group, tid, queue_id, .. } in found {
        match writer.lock_wait(tid) {
            Lock::Skipped => continue,
            Lock::Current => {}
            Lock::Newer => {
                let t = writer.locked();
                if t.get::<Uuid>(l.c[direct::C_LEASE_ID]) != Some(lease)
                    || t.get::<i32>(l.c[direct::C_SHARD]) != Some(shard)
                {
                    continue;
                }
            }
        }
        let t = writer.locked();
        held.push(LeaseHeld { partition, group, queue_id, row: direct::cursor_row(&l, &t) });
    }
    drop(writer);
    // SAFETY: reads the clock (clock_timestamp()).
    let now: Micros = unsafe { pg_sys::GetCurrentTimestamp() };
    Some((held, now))
}

/// The save by hand; None, having written nothing, when the statement is to do it: no row, a
/// row this transaction does not hold, relations not as this code writes them.
fn save_direct(partition: Uuid, group: &str, row: &CursorRow, also: &SaveAlso) -> Option<()> {
    let l = direct::layout()?;
    // The statement's snapshot: the command counter advanced (what this transaction wrote so
    // far is seen), then the transaction's snapshot.
    let snap = Snapshot::take();
    let shard = crate::shards::current();
    let pid = *partition.as_bytes();
    let group_datum = group.into_datum()?;
    let (cursors, cursors_pkey) = (Table::open(l.cursors)?, Index::open(l.cursors_pkey)?);
    let mut scan = direct::cursor_scan(&l, (&cursors, &cursors_pkey), &snap, &pid, group_datum, shard);
    let old = scan.next()?;
    if !old.held_here() {
        return None;
    }
    let mut writer = Writer::open(l.cursors, snap.snap)?;
    let mut hints = match also.hint_at {
        Some(_) => {
            let shape: [(i16, pg_sys::Oid); direct::READY_ROW.len()] =
                std::array::from_fn(|i| (l.rw[i], READY_ROW_TYPES[i]));
            let w = Writer::open(l.ready, snap.snap)?.of_shape(&shape)?;
            Some((w, Table::open(l.ready)?, Index::open(l.ready_partition)?))
        }
        None => None,
    };
    // SAFETY: reads the clock ($22).
    let now: Micros = unsafe { pg_sys::GetCurrentTimestamp() };
    let (queue, ended) = (*also.queue_id.as_bytes(), also.ended_lease.map(|(l, _)| *l.as_bytes()));

    if let (Some(at), Some((hints_writer, ready, ready_partition))) = (also.hint_at, hints.as_mut()) {
        // $23: the caller's stored id (its transaction id assigned, as queen.txid() assigns it).
        let own = crate::cluster::txid();
        // snap: pg_current_snapshot() (this snapshot's, the caller's own transaction not among
        // the running) as queen stores ids.
        let offset = crate::cluster::offset();
        let (xmin, xmax, running) = snap.full_ids();
        let (xmin, xmax) = (xmin + offset, xmax + offset);
        let xip: Vec<i64> = running.into_iter().map(|x| x + offset).collect();
        // snap.empty: $24, and no message after the frontier visible but the caller's own.
        let empty = state::only_after_frontier(row, also.hint_at)
            && !direct::any_after(&l, &snap, partition, row.cursor.done, own)?;
        // folded: the pair's hints as the snapshot sees them ({{hints_of}}, the shard), all of
        // them, or when `empty` those written by transactions the snapshot sees or by this one;
        // each deleted unless another transaction holds it (FOR UPDATE SKIP LOCKED), in the
        // version the snapshot saw (the DELETE reaches its rows by that snapshot: a version
        // committed since, which the lock follows, is not among them).
        let mut scan = Scan::new(
            ready,
            ready_partition,
            snap.snap,
            &[
                ScanKey::eq(1, pg_sys::F_UUID_EQ, pg_sys::Datum::from(pid.as_ptr())),
                ScanKey::eq(2, pg_sys::F_TEXTEQ, group_datum).collated(l.hint_group_collation),
            ],
            false,
        );
        let mut folded = Vec::new();
        while let Some(t) = scan.next() {
            if t.get::<i32>(l.rw[HINT_SHARD]) != Some(shard) {
                continue;
            }
            let txid: i64 = t.get(l.rw[HINT_TXID]).expect("queen: a hint's txid is not NULL");
            if !empty || txid < xmin || (txid < xmax && !xip.contains(&txid)) || txid == own {
                folded.push(t.tid());
            }
        }
        drop(scan);
        for tid in folded {
            hints_writer.delete_skip(tid);
        }
        // hinted: one hint due at $18 that accounts for every message the snapshot sees,
        // unless `empty`.
        if !empty {
            let mut values: Vec<Option<pg_sys::Datum>> = vec![None; direct::READY_ROW.len()];
            let hint: [Option<pg_sys::Datum>; direct::READY_ROW.len()] = [
                Some(pg_sys::Datum::from(queue.as_ptr())),
                Some(group_datum),
                Some(pg_sys::Datum::from(pid.as_ptr())),
                timestamp(at).into_datum(),
                Some(own.into()),
                Some(xmin.min(own).into()),
                Some(shard.into()),
            ];
            for (i, v) in hint.into_iter().enumerate() {
                values[l.rw[i] as usize - 1] = v;
            }
            // SAFETY: a full row of `queen.ready` (layout checked its width), each value of its
            // column's type: uuids pointing at `queue` and `pid`, which outlive the insert.
            unsafe { hints_writer.insert(&values) };
        }
    }

    // The UPDATE: the row's columns, updated_at, and the lease that ended here.
    let mut values = old.values();
    let columns = state::row_columns(row);
    for (i, c) in columns.iter().enumerate() {
        debug_assert_eq!(writer.type_of(l.c[i]), c.oid(), "queen: {} written as its type", direct::CURSOR_COLUMNS[i]);
        values[l.c[i] as usize - 1] = c.datum().map(|d| d.sans_lifetime());
    }
    values[l.c[UPDATED_AT] as usize - 1] = timestamp(now).into_datum();
    if let (Some(lease), Some((_, expired))) = (ended.as_ref(), also.ended_lease) {
        values[l.c[LAST_LEASE_ID] as usize - 1] = Some(pg_sys::Datum::from(lease.as_ptr()));
        values[l.c[LAST_LEASE_EXPIRED] as usize - 1] = Some(expired.into());
    }
    // SAFETY: the row as read, its columns replaced by datums of their types (checked in
    // debug builds), valid to the end of the call; `old` holds the version this transaction
    // holds (held_here).
    unsafe { writer.update(old.slot(), &values) };
    drop(scan);
    drop(writer);
    drop(hints);
    // What comes next in this call sees the writes, as it saw a statement's: a read-only
    // statement does not advance the command counter itself.
    // SAFETY: inside a transaction.
    unsafe { pg_sys::CommandCounterIncrement() };
    Some(())
}

/// Positions in direct::READY_ROW.
const HINT_TXID: usize = 4;
const HINT_SHARD: usize = 6;
/// Positions in direct::CURSOR_COLUMNS.
const UPDATED_AT: usize = 15;
const LAST_LEASE_ID: usize = 16;
const LAST_LEASE_EXPIRED: usize = 17;

/// The types of `direct::READY_ROW`'s columns, in its order: a hint's row.
const READY_ROW_TYPES: [pg_sys::Oid; direct::READY_ROW.len()] = [
    pg_sys::UUIDOID,
    pg_sys::TEXTOID,
    pg_sys::UUIDOID,
    pg_sys::TIMESTAMPTZOID,
    pg_sys::INT8OID,
    pg_sys::INT8OID,
    pg_sys::INT4OID,
];

/// A message a push writes by hand (push.rs, keyless): the values of `push_known_keyless`'s
/// and `insert_messages_keyless`'s INSERT.
pub(crate) struct NewMessage<'a> {
    pub partition_id: Uuid,
    pub seq: i64,
    pub queue_id: Uuid,
    pub message_id: Uuid,
    pub partition: &'a str,
    pub payload: crate::jsonb::Jsonb,
    pub trace_id: Option<Uuid>,
}

/// The columns of `queen.messages` a push writes, every one of the table's, with their types.
const PUSH_COLUMNS: [(&str, pg_sys::Oid); 11] = [
    ("partition_id", pg_sys::UUIDOID),
    ("txid", pg_sys::INT8OID),
    ("seq", pg_sys::INT8OID),
    ("queue_id", pg_sys::UUIDOID),
    ("message_id", pg_sys::UUIDOID),
    ("transaction_id", pg_sys::TEXTOID),
    ("partition", pg_sys::TEXTOID),
    ("payload", pg_sys::JSONBOID),
    ("trace_id", pg_sys::UUIDOID),
    ("created_at", pg_sys::TIMESTAMPTZOID),
    ("shard", pg_sys::INT4OID),
];

thread_local! {
    static PUSH_LAYOUT: std::cell::Cell<Option<(pg_sys::Oid, [i16; 11])>> = const { std::cell::Cell::new(None) };
}

/// Messages written by hand on one server: `push_known_keyless` (a single push) or
/// `insert_messages_keyless` (a batch without transaction ids), each row inserted as the
/// statement inserts it (its transaction's stored id, the clock, shard 0), its index entries
/// made, the command counter advanced first as SPI advances it before a statement.
///
/// A single push through its statement started an executor for one row: callgrind counted
/// (issue 23, docs/benchmarks.md) more instructions in the INSERT's start than in the write. A
/// batch's statement evaluated `$7 -> idx -> 'payload'` and the projection a row.
pub(crate) struct Messages {
    // (Dropped before the snapshot its state points at.)
    w: Writer,
    cols: [i16; 11],
    txid: i64,
    _snap: Snapshot,
}

impl Messages {
    /// The table opened for messages by hand; None when it is not as this code writes it (a
    /// column more or less, a row trigger), or not on one server: the statement writes them.
    pub(crate) fn open(s: &mut Spi) -> Option<Messages> {
        if !direct::available(s) {
            return None;
        }
        let relid = direct::relid(c"messages", crate::names::schema_oid());
        let snap = Snapshot::take();
        // The attribute numbers found once a backend; the table as opened checked at every
        // call.
        let cols = match PUSH_LAYOUT.with(std::cell::Cell::get) {
            Some((r, cols)) if r == relid => cols,
            _ => {
                let t = Table::open(relid)?;
                let cols = PUSH_COLUMNS.map(|(c, _)| t.attnum(c).unwrap_or(0));
                if cols.contains(&0) {
                    return None;
                }
                PUSH_LAYOUT.with(|l| l.set(Some((relid, cols))));
                cols
            }
        };
        let shape: [(i16, pg_sys::Oid); 11] = std::array::from_fn(|i| (cols[i], PUSH_COLUMNS[i].1));
        let w = Writer::open(relid, snap.snap)?.of_shape(&shape)?;
        Some(Messages { w, cols, txid: crate::cluster::txid(), _snap: snap })
    }

    /// Insert `m`, without a transaction id.
    pub(crate) fn insert(&mut self, m: &NewMessage<'_>) {
        let (pid, qid, mid) = (*m.partition_id.as_bytes(), *m.queue_id.as_bytes(), *m.message_id.as_bytes());
        let trace = m.trace_id.map(|t| *t.as_bytes());
        // SAFETY: reads the clock (clock_timestamp(), a row).
        let now = unsafe { pg_sys::GetCurrentTimestamp() };
        let mut values = [None; 11];
        let by_column = [
            Some(pg_sys::Datum::from(pid.as_ptr())),
            Some(pg_sys::Datum::from(self.txid)),
            Some(pg_sys::Datum::from(m.seq)),
            Some(pg_sys::Datum::from(qid.as_ptr())),
            Some(pg_sys::Datum::from(mid.as_ptr())),
            None,
            m.partition.into_datum(),
            Some(m.payload.0),
            trace.as_ref().map(|t| pg_sys::Datum::from(t.as_ptr())),
            Some(pg_sys::Datum::from(now)),
            Some(pg_sys::Datum::from(0i32)),
        ];
        for (attnum, v) in self.cols.iter().zip(by_column) {
            values[*attnum as usize - 1] = v;
        }
        // SAFETY: each value a datum of its column's type (checked by `of_shape`; uuids point
        // at the 16 bytes above, alive to the end of the insert), one per column of the table.
        unsafe { self.w.insert(&values) };
    }
}

/// A single push by hand ([`Messages`]); None, having written nothing, when the statement is
/// to write it.
pub(crate) fn insert_message(s: &mut Spi, m: &NewMessage<'_>) -> Option<()> {
    Messages::open(s)?.insert(m);
    Some(())
}
