//! Loading and saving consumer state: a `queen.cursors` row <-> [`Cursor`] plus the lease and
//! retry timing that live beside it. Shared by pop and ack.

use crate::cursor::{Batch, Cursor, Key};
use crate::spi::Query;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{PgBuiltInOids as T, PgOid};
use pgrx::spi::{SpiClient, SpiHeapTupleData};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::Uuid;

pub const SQL: &str = include_str!("../sql/queries/pop.sql");
pub const UUID: PgOid = PgOid::BuiltIn(T::UUIDOID);
pub const UUIDS: PgOid = PgOid::BuiltIn(T::UUIDARRAYOID);
pub const TEXT: PgOid = PgOid::BuiltIn(T::TEXTOID);
pub const INT4: PgOid = PgOid::BuiltIn(T::INT4OID);
pub const INT8: PgOid = PgOid::BuiltIn(T::INT8OID);
pub const INT8S: PgOid = PgOid::BuiltIn(T::INT8ARRAYOID);
pub const TSTZ: PgOid = PgOid::BuiltIn(T::TIMESTAMPTZOID);

const CURSOR_GET: Query = Query { file: SQL, name: "cursor_get", args: &[UUID, TEXT] };
const CURSOR_LOCK: Query = Query { file: SQL, name: "cursor_lock", args: &[UUID, TEXT] };
const CURSOR_SAVE: Query = Query {
    file: SQL,
    name: "cursor_save",
    args: &[
        UUID, TEXT, INT8, INT8, INT8S, INT8S, INT8S, INT8S, INT8, INT8, INT4, TSTZ, UUID, TSTZ, INT8S,
        INT8S, INT8S,
    ],
};

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
    /// The row version (xmin), to tell whether it changed between two reads.
    pub version: String,
    /// The server's clock when the row was read.
    pub now: Micros,
}

impl CursorRow {
    pub fn lease_active(&self, now: Micros) -> bool {
        self.lease_id.is_some() && self.lease_expires_at.is_some_and(|e| e > now)
    }

    pub fn lease_expired(&self, now: Micros) -> bool {
        self.lease_id.is_some() && !self.lease_active(now)
    }
}

fn keys(t: Vec<i64>, s: Vec<i64>) -> Vec<Key> {
    t.into_iter().zip(s).collect()
}

fn parse(row: SpiHeapTupleData<'_>) -> CursorRow {
    let i8 = |i: usize| row.get::<i64>(i).expect("queen: cursor column");
    let arr = |i: usize| row.get::<Vec<i64>>(i).expect("queen: cursor column").unwrap_or_default();
    let ts = |i: usize| row.get::<TimestampWithTimeZone>(i).expect("queen: cursor column").map(micros);
    let pending_t = arr(3);
    let pending_s = arr(4);
    let lease_id = row.get::<Uuid>(11).expect("queen: cursor column");
    let fail = match (i8(7), i8(8)) {
        (Some(t), Some(s)) => Some(((t, s), row.get::<i32>(9).expect("queen: failures").unwrap_or(0))),
        _ => None,
    };
    let lease = lease_id.map(|_| Batch { keys: keys(arr(13), arr(14)), xip: arr(15) });
    CursorRow {
        cursor: Cursor {
            done: (i8(1).unwrap_or(0), i8(2).unwrap_or(0)),
            pending: pending_t.into_iter().zip(pending_s).collect(),
            ahead: keys(arr(5), arr(6)),
            fail,
            lease,
        },
        retry_at: ts(10),
        lease_id,
        lease_expires_at: ts(12),
        version: row.get::<String>(16).expect("queen: cursor version").unwrap_or_default(),
        now: ts(17).expect("queen: clock"),
    }
}

/// The committed row of (partition, group), without locking it.
pub fn get(client: &mut SpiClient<'_>, partition: Uuid, group: &str) -> Option<CursorRow> {
    let args: [DatumWithOid; 2] = [partition.into(), group.into()];
    CURSOR_GET.execute(client, &args).expect("queen: cursor_get").next().map(parse)
}

/// The row of (partition, group), locked for this transaction; None when it does not exist
/// or another transaction holds it (never waits).
pub fn lock(client: &mut SpiClient<'_>, partition: Uuid, group: &str) -> Option<CursorRow> {
    let args: [DatumWithOid; 2] = [partition.into(), group.into()];
    CURSOR_LOCK.execute(client, &args).expect("queen: cursor_lock").next().map(parse)
}

pub fn save(client: &mut SpiClient<'_>, partition: Uuid, group: &str, row: &CursorRow) {
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
    let args: [DatumWithOid; 17] = [
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
    ];
    CURSOR_SAVE.execute(client, &args).expect("queen: cursor_save");
}
