//! Loading and saving consumer state: a `queen.cursors` row <-> [`Cursor`] plus the lease and
//! retry timing that live beside it. Shared by pop and ack.

use crate::cursor::{Batch, Cursor, Key};
use crate::jsonb::Jsonb;
use crate::spi::types::{BOOL, INT4, INT8, INT8S, TEXT, TSTZ, UUID};
use crate::spi::{Query, Row, Spi};
use pgrx::datum::{DatumWithOid, TimestampWithTimeZone};
use pgrx::Uuid;

const SQL: &str = include_str!("../sql/queries/state.sql");

const CURSOR_CREATE: Query =
    Query { file: SQL, name: "cursor_create", args: &[UUID, TEXT, UUID, INT8, INT8, INT8S, INT8S, INT8, INT8S] };
const CURSOR_LOCK: Query = Query { file: SQL, name: "cursor_lock", args: &[UUID, TEXT, TEXT] };
const CURSOR_UPDATE: Query = Query {
    file: SQL,
    name: "cursor_update",
    args: &[
        UUID, TEXT, INT8, INT8, INT8S, INT8S, INT8S, INT8S, INT8, INT8, INT4, TSTZ, UUID, TSTZ, INT8S, INT8S, INT8S,
        INT8, INT8S,
    ],
};
const CURSOR_SAVE: Query = Query {
    file: SQL,
    name: "cursor_save",
    args: &[
        UUID, TEXT, INT8, INT8, INT8S, INT8S, INT8S, INT8S, INT8, INT8, INT4, TSTZ, UUID, TSTZ, INT8S, INT8S, INT8S,
        INT8, INT8S, UUID, TSTZ, UUID, BOOL,
    ],
};

const NOW: Query = Query { file: SQL, name: "now", args: &[] };

/// The clock (`clock_timestamp()`), for rules that read no row to get it with.
pub fn now(s: &mut Spi) -> Micros {
    micros(NOW.run(s, &[]).first().req(1))
}

/// Microseconds since the Postgres epoch: timestamps compared and added in Rust.
pub type Micros = i64;

pub fn micros(t: TimestampWithTimeZone) -> Micros {
    pgrx::pg_sys::TimestampTz::from(t)
}

pub fn timestamp(m: Micros) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(m).expect("queen: timestamp in range")
}

/// One (partition, group) row as stored.
#[derive(Debug, Clone)]
pub struct CursorRow {
    pub cursor: Cursor,
    pub retry_at: Option<Micros>,
    pub lease_id: Option<Uuid>,
    pub lease_expires_at: Option<Micros>,
    /// The point of the 'new' subscription the row was derived from (`sub_xmax`, `sub_xip`).
    pub sub_point: Option<(i64, Vec<i64>)>,
    /// The row version (xmin), to tell whether it changed between two reads; None when the
    /// row does not exist (yet).
    pub version: Option<String>,
}

impl CursorRow {
    pub fn lease_active(&self, now: Micros) -> bool {
        self.lease_id.is_some() && self.lease_expires_at.is_some_and(|e| e > now)
    }

    pub fn lease_expired(&self, now: Micros) -> bool {
        self.lease_id.is_some() && !self.lease_active(now)
    }

    pub fn retry_pending(&self, now: Micros) -> Option<Micros> {
        self.retry_at.filter(|&at| at > now)
    }
}

fn keys(t: Vec<i64>, s: Vec<i64>) -> Vec<Key> {
    t.into_iter().zip(s).collect()
}

/// Parse the cursor columns of a row, in `queen.cursors` order from `done_txid` to
/// `sub_xip`, then the row version, starting at column `at`.
pub fn parse(row: &Row<'_>, at: usize) -> CursorRow {
    let c = |i: usize| at + i - 1;
    let i8 = |i: usize| row.get::<i64>(c(i));
    let arr = |i: usize| row.get::<Vec<i64>>(c(i)).unwrap_or_default();
    let ts = |i: usize| row.get::<TimestampWithTimeZone>(c(i)).map(micros);
    let lease_id = row.get::<Uuid>(c(11));
    let fail = match (i8(7), i8(8)) {
        (Some(t), Some(s)) => Some(((t, s), row.get::<i32>(c(9)).unwrap_or(0))),
        _ => None,
    };
    let lease = lease_id.map(|_| Batch { keys: keys(arr(13), arr(14)), xip: arr(15) });
    CursorRow {
        cursor: Cursor {
            done: (i8(1).unwrap_or(0), i8(2).unwrap_or(0)),
            pending: keys(arr(3), arr(4)),
            ahead: keys(arr(5), arr(6)),
            fail,
            lease,
        },
        retry_at: ts(10),
        lease_id,
        lease_expires_at: ts(12),
        sub_point: i8(16).map(|x| (x, arr(17))),
        version: row.get::<String>(c(18)),
    }
}

/// Create the row of (partition, group) in state `c`, derived from the 'new' subscription
/// point `sub` if any; false when it exists already. The caller holds the pair's advisory lock.
pub fn create(
    s: &mut Spi,
    partition: Uuid,
    group: &str,
    queue_id: Uuid,
    c: &Cursor,
    sub: Option<(i64, &[i64])>,
) -> bool {
    let (pt, ps): (Vec<i64>, Vec<i64>) = c.pending.iter().copied().unzip();
    let args: [DatumWithOid; 9] = [
        partition.into(),
        group.into(),
        queue_id.into(),
        c.done.0.into(),
        c.done.1.into(),
        pt.into(),
        ps.into(),
        sub.map(|p| p.0).into(),
        sub.map(|p| p.1.to_vec()).into(),
    ];
    CURSOR_CREATE.run(s, &args).next().is_some()
}

/// Lock the row of (partition, group) for this transaction if it is still in `version` (its
/// xmin as a look read it); false when it changed since, or another transaction holds it.
/// Never waits, and never locks a version other than `version` (but for a row updated by a
/// transaction that commits between this statement's snapshot and its lock: see cursor_lock).
pub fn lock(s: &mut Spi, partition: Uuid, group: &str, version: &str) -> bool {
    let args: [DatumWithOid; 3] = [partition.into(), group.into(), version.into()];
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
    let c = &row.cursor;
    let (pt, ps): (Vec<i64>, Vec<i64>) = c.pending.iter().copied().unzip();
    let (at, aseq): (Vec<i64>, Vec<i64>) = c.ahead.iter().copied().unzip();
    let (lt, ls, lx) = match &c.lease {
        Some(b) => {
            let (t, s): (Vec<i64>, Vec<i64>) = b.keys.iter().copied().unzip();
            (Some(t), Some(s), Some(b.xip.clone()))
        }
        None => (None, None, None),
    };
    let lease_id = c.lease.as_ref().and(row.lease_id);
    let lease_expires = c.lease.as_ref().and(row.lease_expires_at).map(timestamp);
    let args: [DatumWithOid; 23] = [
        partition.into(),
        group.into(),
        c.done.0.into(),
        c.done.1.into(),
        pt.into(),
        ps.into(),
        at.into(),
        aseq.into(),
        c.fail.map(|f| f.0 .0).into(),
        c.fail.map(|f| f.0 .1).into(),
        c.fail.map_or(0, |f| f.1).into(),
        row.retry_at.map(timestamp).into(),
        lease_id.into(),
        lease_expires.into(),
        lt.into(),
        ls.into(),
        lx.into(),
        row.sub_point.as_ref().map(|p| p.0).into(),
        row.sub_point.as_ref().map(|p| p.1.clone()).into(),
        also.queue_id.into(),
        also.hint_at.map(timestamp).into(),
        also.ended_lease.map(|l| l.0).into(),
        also.ended_lease.is_some_and(|l| l.1).into(),
    ];
    if also.hint_at.is_none() && also.ended_lease.is_none() {
        CURSOR_UPDATE.run(s, &args[..19]);
    } else {
        CURSOR_SAVE.run(s, &args);
    }
}

const TRY_LOCK_PAIR: Query = Query { file: SQL, name: "try_lock_pair", args: &[UUID, TEXT] };
const LOOK: Query = Query {
    file: SQL,
    name: "look",
    args: &[UUID, TEXT, INT8, INT8, INT8S, INT8S, INT8, crate::spi::types::FLOAT8, INT8, INT8S],
};

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
    /// The stored row was derived from an older subscription point: `row` is brought up to
    /// date and must be saved.
    pub(crate) stale: bool,
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
}

/// Look at a partition for a group (no lock): its cursor row (or `initial` when it has none)
/// and up to `limit` next messages, with what the reading snapshot says. `sub` is the point
/// of the group's 'new' subscription, which a row derived from an older point is brought up
/// to (`Look::stale`).
pub(crate) fn look(
    s: &mut Spi,
    partition: Uuid,
    group: &str,
    initial: &Cursor,
    sub: Option<(i64, &[i64])>,
    limit: i64,
    lease_seconds: i32,
) -> Look {
    let (pt, ps): (Vec<i64>, Vec<i64>) = initial.pending.iter().copied().unzip();
    let args: [DatumWithOid; 10] = [
        partition.into(),
        group.into(),
        initial.done.0.into(),
        initial.done.1.into(),
        pt.into(),
        ps.into(),
        limit.into(),
        (lease_seconds as f64).into(),
        sub.map(|p| p.0).into(),
        sub.map(|p| p.1.to_vec()).into(),
    ];
    let mut rows = LOOK.run(s, &args);
    let r = rows.next().expect("queen: look returns its meta row");
    let mut look = Look {
        row: parse(&r, 9),
        stored: r.req::<bool>(27),
        stale: r.req::<bool>(28),
        xip: r.get::<Vec<i64>>(29).unwrap_or_default(),
        pending_visible: r.get::<Vec<bool>>(30).unwrap_or_default(),
        pending_left: r.get::<Vec<bool>>(31).unwrap_or_default(),
        newest_at: r.get::<TimestampWithTimeZone>(32).map(micros),
        now: micros(r.req(33)),
        lease_expires_at: micros(r.req(34)),
        xmin: r.req(35),
        xmax: r.req(36),
        msgs: Vec::with_capacity(rows.len().saturating_sub(1)),
    };
    for r in rows {
        look.msgs.push(Msg {
            key: (r.req(1), r.req(2)),
            message_id: r.req(3),
            transaction_id: r.req(4),
            partition: r.req(5),
            payload: Jsonb(r.transfer(6, -1).expect("queen: payload is not NULL")),
            trace_id: r.get(7),
            created_at: r.req(8),
        });
    }
    look
}

/// Take the (partition, group) pair's advisory lock for this transaction, never waiting: the
/// right to create its cursor row. False when another transaction holds it.
pub fn try_lock_pair(s: &mut Spi, partition: Uuid, group: &str) -> bool {
    let args: [DatumWithOid; 2] = [partition.into(), group.into()];
    TRY_LOCK_PAIR.run(s, &args).first().req::<bool>(1)
}

const DEAD_LETTER: Query = Query { file: SQL, name: "dead_letter", args: &[UUID, TEXT, INT8, INT8, TEXT, INT4] };

/// File message `k` of `partition` as a dead letter of `group` (the message itself stays).
pub fn dead_letter(s: &mut Spi, partition: Uuid, group: &str, k: Key, error: Option<&str>, attempts: i32) {
    let args: [DatumWithOid; 6] =
        [partition.into(), group.into(), k.0.into(), k.1.into(), error.into(), attempts.into()];
    DEAD_LETTER.run(s, &args);
}
