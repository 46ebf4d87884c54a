//! Loading and saving consumer state: a `queen.cursors` row <-> [`Cursor`] plus the lease and
//! retry timing that live beside it. Shared by pop and ack.

use crate::cursor::{Batch, Cursor, Key};
use crate::error::QueenResult;
use crate::jsonb::Jsonb;
use crate::spi::types::{BOOL, BYTEA, INT4, INT8, INT8S, TEXT, TSTZ, UUID};
use crate::spi::{Query, Row, Spi};
use pgrx::datum::{DatumWithOid, TimestampWithTimeZone};
use pgrx::Uuid;

const SQL: &str = include_str!("../sql/queries/state.sql");

/// The argument types of a query that takes a cursor row: `$pre`, then the row's columns as
/// [`row_columns`] gives them (`done_txid` to `lease_xip`, `lease_keys` before `lease_xip`), then
/// `$post`.
macro_rules! with_row_columns {
    ($($pre:expr),* ; $($post:expr),*) => {
        &[$($pre,)* INT8, INT8, INT8S, INT8S, INT8S, INT8S, INT8, INT8, INT4, TSTZ, UUID, TSTZ, BYTEA, INT8S, $($post),*]
    };
}
/// The argument types of a query that takes where a row starts: `$pre`, then [`start_columns`]
/// (`done_txid`, `done_seq`, `pending_txid`, `pending_seq`), then `$post`.
macro_rules! with_start_columns {
    ($($pre:expr),* ; $($post:expr),*) => {
        &[$($pre,)* INT8, INT8, INT8S, INT8S, $($post),*]
    };
}

const CURSOR_CREATE: Query =
    Query { file: SQL, name: "cursor_create", args: with_start_columns!(UUID, TEXT, UUID; INT4) };
const CURSOR_LOCK: Query = Query { file: SQL, name: "cursor_lock", args: &[UUID, TEXT, TEXT, INT4] };
const CURSOR_UPDATE: Query =
    Query { file: SQL, name: "cursor_update", args: with_row_columns!(UUID, TEXT; INT4, TSTZ) };
const CURSOR_SAVE: Query = Query {
    file: SQL,
    name: "cursor_save",
    args: with_row_columns!(UUID, TEXT; UUID, TSTZ, UUID, BOOL, INT4, TSTZ, INT8, BOOL),
};

const NOW: Query = Query { file: SQL, name: "now", args: &[] };

/// The clock (`clock_timestamp()`), for rules that read no row to get it with.
pub fn now(s: &mut Spi) -> Micros {
    micros(NOW.run(s, &[]).first().req(1))
}

pub use crate::clock::{micros, timestamp, Micros};

/// One (partition, group) row as stored.
#[derive(Debug, Clone)]
pub struct CursorRow {
    pub cursor: Cursor,
    pub retry_at: Option<Micros>,
    pub lease_id: Option<Uuid>,
    pub lease_expires_at: Option<Micros>,
    /// The row version (xmin), to tell whether it changed between two reads; None when the
    /// row does not exist (yet).
    pub version: Option<String>,
}

impl CursorRow {
    pub fn lease_active(&self, now: Micros) -> bool {
        self.lease_id.is_some() && self.lease_expires_at.is_some_and(|e| e > now)
    }
}

fn keys(t: Vec<i64>, s: Vec<i64>) -> Vec<Key> {
    t.into_iter().zip(s).collect()
}

/// The columns where a row starts (`done_txid`, `done_seq`, `pending_txid`, `pending_seq`): what
/// `cursor_create` writes and `look` takes for a row not stored yet.
fn start_columns(c: &Cursor) -> [DatumWithOid<'static>; 4] {
    let (pt, ps): (Vec<i64>, Vec<i64>) = c.pending.iter().copied().unzip();
    [c.done.0.into(), c.done.1.into(), pt.into(), ps.into()]
}

/// A row's columns, `done_txid` to `lease_xip`, in the order of `queen.cursors` (and of
/// [`with_row_columns`]): what `cursor_save` and `cursor_update` write, and [`parse`] reads back.
pub(crate) fn row_columns(row: &CursorRow) -> [DatumWithOid<'static>; 14] {
    let c = &row.cursor;
    let [done_txid, done_seq, pending_txid, pending_seq] = start_columns(c);
    let (at, aseq): (Vec<i64>, Vec<i64>) = c.ahead.iter().copied().unzip();
    let (lk, lx) = match &c.lease {
        Some(b) => (Some(crate::packed_keys::pack(&b.keys)), Some(b.xip.clone())),
        None => (None, None),
    };
    // A lease lives in the row only with its batch.
    let lease_id = c.lease.as_ref().and(row.lease_id);
    let lease_expires = c.lease.as_ref().and(row.lease_expires_at).map(timestamp);
    [
        done_txid,
        done_seq,
        pending_txid,
        pending_seq,
        at.into(),
        aseq.into(),
        c.fail.map(|f| f.0 .0).into(),
        c.fail.map(|f| f.0 .1).into(),
        c.fail.map_or(0, |f| f.1).into(),
        row.retry_at.map(timestamp).into(),
        lease_id.into(),
        lease_expires.into(),
        lk.into(),
        lx.into(),
    ]
}

/// Where a cursor row's columns are read from, by name: a row of an SPI query, or a row read
/// straight from the table (direct.rs).
pub trait Columns {
    fn col<T: pgrx::FromDatum>(&self, name: &str) -> Option<T>;
    /// The row version: its xmin as text (`version` in the queries).
    fn version(&self) -> Option<String>;
}

impl Columns for Row<'_> {
    fn col<T: pgrx::FromDatum>(&self, name: &str) -> Option<T> {
        self.get(name)
    }

    fn version(&self) -> Option<String> {
        self.get("version")
    }
}

/// Decode the cursor columns of a row, named as in `queen.cursors` (`done_txid` to `lease_xip`),
/// and the row version (`version`, its xmin as text). Any query that reads a cursor row for
/// pop, ack or maintenance selects them under these names.
pub fn parse(row: &impl Columns) -> CursorRow {
    let arr = |name: &str| row.col::<Vec<i64>>(name).unwrap_or_default();
    let ts = |name: &str| row.col::<TimestampWithTimeZone>(name).map(micros);
    let lease_id = row.col::<Uuid>("lease_id");
    let fail = match (row.col::<i64>("fail_txid"), row.col::<i64>("fail_seq")) {
        (Some(t), Some(s)) => Some(((t, s), row.col::<i32>("failures").unwrap_or(0))),
        _ => None,
    };
    // Only queen writes the column, always packed (packed_keys.rs).
    let lease_keys = || match row.col::<Vec<u8>>("lease_keys") {
        Some(bytes) => crate::packed_keys::unpack(&bytes).expect("queen: a lease's keys are stored packed"),
        None => Vec::new(),
    };
    let lease = lease_id.map(|_| Batch::new(lease_keys(), arr("lease_xip")));
    CursorRow {
        cursor: Cursor {
            done: (row.col("done_txid").unwrap_or(0), row.col("done_seq").unwrap_or(0)),
            pending: keys(arr("pending_txid"), arr("pending_seq")),
            ahead: keys(arr("ahead_txid"), arr("ahead_seq")),
            fail,
            lease,
        },
        retry_at: ts("retry_at"),
        lease_id,
        lease_expires_at: ts("lease_expires_at"),
        version: row.version(),
    }
}

/// Create the row of (partition, group) in state `c` (where the group's subscription starts
/// it: the row keeps that start, semantics §3.2); false when it exists already. The caller holds
/// the pair's lock (locks.rs).
pub fn create(s: &mut Spi, partition: Uuid, group: &str, queue_id: Uuid, c: &Cursor) -> bool {
    let [done_txid, done_seq, pending_txid, pending_seq] = start_columns(c);
    let args: [DatumWithOid; 8] = [
        partition.into(),
        group.into(),
        queue_id.into(),
        done_txid,
        done_seq,
        pending_txid,
        pending_seq,
        crate::shards::current().into(),
    ];
    CURSOR_CREATE.run(s, &args).next().is_some()
}

/// Lock the row of (partition, group) for this transaction if it is still in `version` (its
/// xmin as a look read it); false when it changed since, or another transaction holds it.
/// Never waits, and never locks a version other than `version` (but for a row updated by a
/// transaction that commits between this statement's snapshot and its lock: see cursor_lock).
pub fn lock(s: &mut Spi, partition: Uuid, group: &str, version: &str) -> bool {
    let args: [DatumWithOid; 4] = [partition.into(), group.into(), version.into(), crate::shards::current().into()];
    CURSOR_LOCK.run(s, &args).next().is_some()
}

/// What else to do when a row is saved.
pub struct SaveAlso {
    pub queue_id: Uuid,
    /// Move the partition's hints to this time (or add one).
    pub hint_at: Option<Micros>,
    /// This lease ended here: ran out (true) or was released (false). A late ack of it still
    /// finds its group, and hears 'lease expired' or 'lease not held'.
    pub ended_lease: Option<(Uuid, bool)>,
}

pub fn save(s: &mut Spi, partition: Uuid, group: &str, row: &CursorRow, also: SaveAlso) {
    let shard = crate::shards::current();
    // SAFETY: reads the clock.
    let now = timestamp(unsafe { pgrx::pg_sys::GetCurrentTimestamp() });
    let mut args: Vec<DatumWithOid> = vec![partition.into(), group.into()];
    args.extend(row_columns(row));
    if also.hint_at.is_none() && also.ended_lease.is_none() {
        args.extend([shard.into(), now.into()]);
        CURSOR_UPDATE.run(s, &args);
    } else {
        // The stored id of the hint's writer: this transaction (queen.txid()).
        let txid = also.hint_at.map(|_| crate::cluster::txid());
        args.extend([
            also.queue_id.into(),
            also.hint_at.map(timestamp).into(),
            also.ended_lease.map(|l| l.0).into(),
            also.ended_lease.is_some_and(|l| l.1).into(),
            shard.into(),
            now.into(),
            txid.into(),
            only_after_frontier(row, also.hint_at).into(),
        ]);
        CURSOR_SAVE.run(s, &args);
    }
}

/// Whether a hint due at `hint_at` for `row` stands only for messages after its frontier: the
/// row holds no lease, no pending transaction and no retry delay that the hint waits for. Then
/// cursor_save writes no hint when it sees no such message (state.sql).
pub(crate) fn only_after_frontier(row: &CursorRow, hint_at: Option<Micros>) -> bool {
    let Some(at) = hint_at else { return false };
    row.lease_id.is_none()
        && row.cursor.lease.is_none()
        && row.cursor.pending.is_empty()
        && row.retry_at.is_none_or(|r| r < at)
}

const LOOK: Query =
    Query { file: SQL, name: "look", args: with_start_columns!(UUID, TEXT; INT8, crate::spi::types::FLOAT8, INT4) };

/// A message as read from a partition.
pub(crate) struct Msg {
    pub(crate) key: Key,
    pub(crate) message_id: Uuid,
    pub(crate) transaction_id: String,
    pub(crate) partition: String,
    pub(crate) payload: Jsonb,
    pub(crate) trace_id: Option<Uuid>,
    pub(crate) created_at: TimestampWithTimeZone,
}

/// What one look at a partition saw: the row, and the messages and snapshot facts of `look`.
pub(crate) struct Look {
    pub(crate) row: CursorRow,
    pub(crate) stored: bool,
    /// `row` differs from the stored row — pending transactions resolved — so a pop that holds
    /// the row saves it even if it delivers nothing.
    pub(crate) changed: bool,
    /// The reading snapshot, as queen reads it (the caller's own transaction among the
    /// running ones): its xmin, xmax and running transactions.
    pub(crate) xmin: i64,
    pub(crate) xmax: i64,
    pub(crate) xip: Vec<i64>,
    pub(crate) pending_visible: Vec<bool>,
    pub(crate) pending_left: Vec<bool>,
    pub(crate) newest_at: Option<Micros>,
    pub(crate) now: Micros,
    pub(crate) lease_expires_at: Micros,
    pub(crate) msgs: Vec<Msg>,
    /// `created_at` of `msgs`, for the rules.
    pub(crate) created: Vec<Micros>,
}

impl Look {
    /// What the look saw, as the rules of decide.rs read it.
    pub(crate) fn seen(&self, held: bool) -> crate::decide::Seen<'_> {
        crate::decide::Seen {
            now: self.now,
            lease: self.row.lease_id.map(|_| self.row.lease_expires_at.unwrap_or(Micros::MIN)),
            retry_at: self.row.retry_at,
            created: &self.created,
            newest_at: self.newest_at,
            held,
        }
    }

    /// Drop the pending transactions that the look saw finished with nothing left (for a pop
    /// that holds the row: it saves what changed).
    pub(crate) fn resolve_pending(&mut self) {
        self.changed |= self.row.cursor.resolve_pending(&self.pending_visible, &self.pending_left);
    }
}

/// A look at a partition for a group by the `look` statement, with `snapshot` when not null
/// (direct.rs `look` reads it straight from the indexes on one server, and checks itself
/// against this).
pub(crate) fn look_sql(
    s: &mut Spi,
    partition: Uuid,
    group: &str,
    initial: &Cursor,
    limit: i64,
    lease_seconds: i32,
    snapshot: pgrx::pg_sys::Snapshot,
) -> Look {
    // (An array, not a Vec: every pop looks, and a look allocates nothing for its arguments.)
    let [done_txid, done_seq, pending_txid, pending_seq] = start_columns(initial);
    let args: [DatumWithOid; 9] = [
        partition.into(),
        group.into(),
        done_txid,
        done_seq,
        pending_txid,
        pending_seq,
        limit.into(),
        (lease_seconds as f64).into(),
        crate::shards::current().into(),
    ];
    let mut rows = if snapshot.is_null() { LOOK.run(s, &args) } else { LOOK.run_at(s, &args, snapshot) };
    let r = rows.next().expect("queen: look returns its meta row");
    let mut look = Look {
        row: parse(&r),
        stored: r.req("stored"),
        changed: false,
        xip: r.get("xip").unwrap_or_default(),
        pending_visible: r.get("pending_visible").unwrap_or_default(),
        pending_left: r.get("pending_left").unwrap_or_default(),
        newest_at: r.get::<TimestampWithTimeZone>("newest_at").map(micros),
        now: micros(r.req("now")),
        lease_expires_at: micros(r.req("new_lease_expires_at")),
        xmin: r.req("xmin"),
        xmax: r.req("xmax"),
        msgs: Vec::with_capacity(rows.len().saturating_sub(1)),
        created: Vec::with_capacity(rows.len().saturating_sub(1)),
    };
    for r in rows {
        let created_at: TimestampWithTimeZone = r.req("created_at");
        look.created.push(micros(created_at));
        look.msgs.push(Msg {
            key: (r.req("txid"), r.req("seq")),
            message_id: r.req("message_id"),
            transaction_id: r.req("transaction_id"),
            partition: r.req("partition"),
            payload: Jsonb(r.transfer("payload", -1).expect("queen: payload is not NULL")),
            trace_id: r.get("trace_id"),
            created_at,
        });
    }
    look
}

/// Take the (partition, group) pair's lock (locks.rs) for this transaction, never waiting: the
/// right to create its cursor row. False when another transaction holds it.
pub fn try_lock_pair(partition: Uuid, group: &str) -> bool {
    crate::locks::try_xact(crate::locks::Lock::Pair(partition, group))
}

/// Take the pair's lock for this transaction, waiting (bounded, locks.rs) for whoever holds
/// it: for an ack or maintenance that creates a cursor row where no pop is waiting to.
pub fn lock_pair(partition: Uuid, group: &str) -> QueenResult<()> {
    crate::locks::wait_xact(crate::locks::Lock::Pair(partition, group), || {
        format!("the cursor of group \"{}\" on a partition", crate::error::shorten(group))
    })
}

const MISSING: Query = Query { file: SQL, name: "missing", args: &[UUID, INT8S, INT8S, INT4] };

/// Which of `keys` of `partition` no longer exist (retention deleted them).
pub fn missing(s: &mut Spi, partition: Uuid, keys: &[Key]) -> Vec<Key> {
    let (t, q): (Vec<i64>, Vec<i64>) = keys.iter().copied().unzip();
    let args: [DatumWithOid; 4] = [partition.into(), t.into(), q.into(), crate::shards::current().into()];
    MISSING.run(s, &args).map(|r| (r.req::<i64>("txid"), r.req::<i64>("seq"))).collect()
}

const DEAD_LETTER: Query = Query { file: SQL, name: "dead_letter", args: &[UUID, TEXT, INT8, INT8, TEXT, INT4, INT4] };
const DEAD_LETTER_AGAIN: Query =
    Query { file: SQL, name: "dead_letter_again", args: &[UUID, TEXT, INT8, INT8, TEXT, INT4, INT4, TSTZ] };

/// File message `k` of `partition` as a dead letter of `group` (the message itself stays).
pub fn dead_letter(s: &mut Spi, partition: Uuid, group: &str, k: Key, error: Option<&str>, attempts: i32) {
    // SAFETY: reads the clock (clock_timestamp()).
    let now = timestamp(unsafe { pgrx::pg_sys::GetCurrentTimestamp() });
    let args: [DatumWithOid; 8] = [
        partition.into(),
        group.into(),
        k.0.into(),
        k.1.into(),
        error.into(),
        attempts.into(),
        crate::shards::current().into(),
        now.into(),
    ];
    if DEAD_LETTER_AGAIN.run(s, &args).len() == 0 {
        DEAD_LETTER.run(s, &args[..7]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cursor::{Batch, Cursor};

    fn row() -> CursorRow {
        CursorRow { cursor: Cursor::default(), retry_at: None, lease_id: None, lease_expires_at: None, version: None }
    }

    #[test]
    fn a_hint_stands_only_for_messages_after_the_frontier_when_nothing_else_waits() {
        let now: Micros = 1_000_000;
        let leased = CursorRow { lease_id: Some(Uuid::from_bytes([1; 16])), lease_expires_at: Some(now + 30), ..row() };
        let batch = CursorRow {
            cursor: Cursor { lease: Some(Batch::new(vec![(5, 1)], vec![])), ..Cursor::default() },
            ..row()
        };
        let pending = CursorRow { cursor: Cursor { pending: vec![(4, 0)], ..Cursor::default() }, ..row() };
        let delayed = CursorRow { retry_at: Some(now + 5), ..row() };
        let delay_over = CursorRow { retry_at: Some(now - 5), ..row() };
        let cases: [(&str, &CursorRow, Option<Micros>, bool); 7] = [
            ("a settled row, hint due now", &row(), Some(now), true),
            ("no hint to write", &row(), None, false),
            ("a lease: the hint waits for its expiry", &leased, Some(now + 30), false),
            ("a batch still in the row", &batch, Some(now), false),
            ("a pending transaction behind the frontier", &pending, Some(now), false),
            ("a retry delay the hint waits for", &delayed, Some(now + 5), false),
            ("a retry delay already over", &delay_over, Some(now), true),
        ];
        for (what, r, at, want) in cases {
            assert_eq!(only_after_frontier(r, at), want, "{what}");
        }
    }
}
