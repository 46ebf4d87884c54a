//! The consume path's reads that lock nothing, made straight through the indexes
//! (index_read.rs) on one server: the look at a partition (state.sql `look`), a lease's batch
//! ids (ack.sql `ack_lease_lock`) and a page of candidates (pop.sql `candidates`). Each reads what
//! its statement reads, row for row, under a snapshot taken as a statement takes its own,
//! without starting a statement: the look's plan has some fifty nodes, most for cases a look
//! rarely meets (pending transactions, finished keys ahead, no row yet), and building them at
//! every pop cost more than reading the messages (issue 23, docs/benchmarks.md).
//!
//! The statements stay the reads on Citus, where the rows live in shards, and are the
//! reference: every rule here says which part of its statement it reads the same way, and debug
//! builds run the statement too, under the same snapshot, and panic when the two differ.

use crate::cursor::{Cursor, Key};
use crate::index_read::{Index, Key as ScanKey, Scan, Snapshot, Table, Tuple};
use crate::jsonb::Jsonb;
use crate::state::{micros, Columns, CursorRow, Look, Micros, Msg};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::{pg_sys, IntoDatum, Uuid};
use std::cell::RefCell;

/// The relations read, and where their columns are, as found in this backend's catalog.
#[derive(Clone)]
pub(crate) struct Layout {
    schema: pg_sys::Oid,
    pub(crate) messages: pg_sys::Oid,
    messages_pkey: pg_sys::Oid,
    pub(crate) cursors: pg_sys::Oid,
    pub(crate) cursors_pkey: pg_sys::Oid,
    /// `cursors_lease` (lease_id), InvalidOid when it is not as this code reads it: a lease's
    /// rows are then locked by the statement.
    pub(crate) cursors_lease: pg_sys::Oid,
    /// The oid of the relation named `cursors_lease`, whatever it is.
    lease_relid: pg_sys::Oid,
    pub(crate) ready: pg_sys::Oid,
    ready_next: pg_sys::Oid,
    pub(crate) ready_partition: pg_sys::Oid,
    /// Attribute numbers of READY_COLUMNS in `queen.ready`.
    r: [i16; READY_COLUMNS.len()],
    /// Attribute numbers of READY_ROW (every column a hint is written with) in `queen.ready`.
    pub(crate) rw: [i16; READY_ROW.len()],
    /// The collation `ready_next` orders consumer_group by.
    ready_group_collation: pg_sys::Oid,
    /// The collation `ready_partition` orders consumer_group by.
    pub(crate) hint_group_collation: pg_sys::Oid,
    /// Attribute numbers of MESSAGE_COLUMNS in `queen.messages`.
    m: [i16; MESSAGE_COLUMNS.len()],
    /// Attribute numbers of CURSOR_COLUMNS in `queen.cursors`.
    pub(crate) c: [i16; CURSOR_COLUMNS.len()],
    /// Attribute numbers of CURSOR_KEYS in `queen.cursors`.
    pub(crate) ck: [i16; CURSOR_KEYS.len()],
    /// The collation `cursors_pkey` orders consumer_group by.
    pub(crate) group_collation: pg_sys::Oid,
}

const MESSAGE_COLUMNS: [&str; 9] =
    ["txid", "seq", "message_id", "transaction_id", "partition", "payload", "trace_id", "created_at", "shard"];
const M_TXID: usize = 0;
const M_SEQ: usize = 1;
const M_ID: usize = 2;
const M_TRANSACTION: usize = 3;
const M_PARTITION: usize = 4;
const M_PAYLOAD: usize = 5;
const M_TRACE: usize = 6;
const M_CREATED: usize = 7;
const M_SHARD: usize = 8;

/// The columns of `queen.ready` a page of candidates reads.
const READY_COLUMNS: [&str; 3] = ["partition_id", "ready_at", "shard"];

/// The columns of `queen.ready` (all of them), as a hint is written (direct_save.rs).
pub(crate) const READY_ROW: [&str; 7] =
    ["queue_id", "consumer_group", "partition_id", "ready_at", "txid", "seen_xmin", "shard"];

/// Positions in CURSOR_COLUMNS.
pub(crate) const C_LEASE_ID: usize = 10;
pub(crate) const C_SHARD: usize = 14;

/// The columns that say whose a cursor row is: its partition, group and queue.
pub(crate) const CURSOR_KEYS: [&str; 3] = ["partition_id", "consumer_group", "queue_id"];

/// The columns state::parse reads (but `version`, the row's xmin), `shard`, and the columns
/// a save writes besides those (direct_save.rs).
pub(crate) const CURSOR_COLUMNS: [&str; 18] = [
    "done_txid",
    "done_seq",
    "pending_txid",
    "pending_seq",
    "ahead_txid",
    "ahead_seq",
    "fail_txid",
    "fail_seq",
    "failures",
    "retry_at",
    "lease_id",
    "lease_expires_at",
    "lease_keys",
    "lease_xip",
    "shard",
    "updated_at",
    "last_lease_id",
    "last_lease_expired",
];

thread_local! {
    static LAYOUT: RefCell<Option<Layout>> = const { RefCell::new(None) };
}

/// A relation's oid by name (kept per backend until an invalidation: oids.rs).
pub(crate) fn relid(name: &'static std::ffi::CStr, schema: pg_sys::Oid) -> pg_sys::Oid {
    crate::oids::relation(name, schema)
}

/// The layout of the relations, found again when the schema or a relation is not the one
/// found before (the extension dropped and created again). None when a table or a primary key
/// is not as this code reads it: the caller uses the statement.
pub(crate) fn layout() -> Option<Layout> {
    let schema = crate::names::schema_oid();
    let messages = relid(c"messages", schema);
    let cursors = relid(c"cursors", schema);
    let ready = relid(c"ready", schema);
    let (messages_pkey, cursors_pkey) = (relid(c"messages_pkey", schema), relid(c"cursors_pkey", schema));
    let (ready_next, ready_partition) = (relid(c"ready_next", schema), relid(c"ready_partition", schema));
    let cursors_lease = relid(c"cursors_lease", schema);
    // Every oid is looked up again at each call (oids.rs keeps them until an invalidation): an
    // index rebuilt (REINDEX CONCURRENTLY) or the extension made again has new ones.
    if let Some(l) = LAYOUT.with(|l| l.borrow().clone()) {
        let now = [
            l.schema,
            l.messages,
            l.cursors,
            l.ready,
            l.messages_pkey,
            l.cursors_pkey,
            l.ready_next,
            l.ready_partition,
            l.lease_relid,
        ];
        if now
            == [
                schema,
                messages,
                cursors,
                ready,
                messages_pkey,
                cursors_pkey,
                ready_next,
                ready_partition,
                cursors_lease,
            ]
        {
            return Some(l);
        }
    }
    if [messages, cursors, ready, messages_pkey, cursors_pkey, ready_next, ready_partition]
        .contains(&pg_sys::InvalidOid)
    {
        return None;
    }
    let (mt, ct, rt) = (Table::open(messages)?, Table::open(cursors)?, Table::open(ready)?);
    let m = MESSAGE_COLUMNS.map(|c| mt.attnum(c).unwrap_or(0));
    let c = CURSOR_COLUMNS.map(|n| ct.attnum(n).unwrap_or(0));
    let ck = CURSOR_KEYS.map(|n| ct.attnum(n).unwrap_or(0));
    let r = READY_COLUMNS.map(|n| rt.attnum(n).unwrap_or(0));
    let rw = READY_ROW.map(|n| rt.attnum(n).unwrap_or(0));
    let (mi, ci, ri) = (Index::open(messages_pkey)?, Index::open(cursors_pkey)?, Index::open(ready_next)?);
    let rp = Index::open(ready_partition)?;
    let m_key = [mt.attnum("partition_id"), Some(m[M_TXID]), Some(m[M_SEQ])];
    let c_key = [ct.attnum("partition_id"), ct.attnum("consumer_group"), Some(c[C_SHARD])];
    let r_key = [rt.attnum("queue_id"), rt.attnum("consumer_group"), Some(r[1]), Some(r[0])];
    let p_key = [Some(rw[2]), Some(rw[1])];
    // cursors_lease as ack_lease_lock_rows reads it: lease_id alone (its predicate, lease_id IS
    // NOT NULL, holds for every row an equality finds).
    let lease_index = (cursors_lease != pg_sys::InvalidOid)
        .then(|| Index::open(cursors_lease))
        .flatten()
        .filter(|i| i.columns() == [c[C_LEASE_ID]])
        .map_or(pg_sys::InvalidOid, |_| cursors_lease);
    let as_read = m.iter().chain(&c).chain(&ck).chain(&r).chain(&rw).all(|&a| a > 0)
        && rt.natts() == READY_ROW.len()
        && mi.columns().iter().map(|&a| Some(a)).eq(m_key)
        && ci.columns().iter().map(|&a| Some(a)).eq(c_key)
        && ri.columns().iter().map(|&a| Some(a)).eq(r_key)
        && rp.columns().iter().map(|&a| Some(a)).eq(p_key);
    if !as_read {
        return None;
    }
    let l = Layout {
        schema,
        messages,
        messages_pkey,
        cursors,
        cursors_pkey,
        cursors_lease: lease_index,
        lease_relid: cursors_lease,
        ready,
        ready_next,
        ready_partition,
        r,
        rw,
        ready_group_collation: ri.collation(1),
        hint_group_collation: rp.collation(1),
        m,
        c,
        ck,
        group_collation: ci.collation(1),
    };
    LAYOUT.with(|c| *c.borrow_mut() = Some(l.clone()));
    Some(l)
}

/// A page of candidates: `candidates` of pop.sql (which see), read from `ready_next` — the
/// group's hints due by the clock (read after `snap` was taken) from `from` on, in due time
/// and then partition order (the index's), but those of `tried`, at most `limit`. Returns the
/// clock with them. None when the relations are not as this code reads them.
pub(crate) fn candidates(
    snap: &Snapshot,
    queue_id: Uuid,
    group: &str,
    tried: &[Uuid],
    limit: usize,
    from: Micros,
) -> Option<(Vec<(Uuid, Micros)>, Micros)> {
    let l = layout()?;
    // SAFETY: reads the clock (clock_timestamp()).
    let now: Micros = unsafe { pg_sys::GetCurrentTimestamp() };
    let (table, index) = (Table::open(l.ready)?, Index::open(l.ready_next)?);
    let q = *queue_id.as_bytes();
    let group_datum = group.into_datum().expect("queen: a group name is a datum");
    let mut scan = Scan::new(
        &table,
        &index,
        snap.snap,
        &[
            ScanKey::eq(1, pg_sys::F_UUID_EQ, pg_sys::Datum::from(q.as_ptr())),
            ScanKey::eq(2, pg_sys::F_TEXTEQ, group_datum).collated(l.ready_group_collation),
            ScanKey::ge(3, pg_sys::F_TIMESTAMPTZ_GE, from.into()),
            ScanKey::le(3, pg_sys::F_TIMESTAMPTZ_LE, now.into()),
        ],
        false,
    );
    let shard = crate::shards::current();
    let hints = std::iter::from_fn(|| {
        let t = scan.next()?;
        let partition: Uuid = t.get(l.r[0]).expect("queen: a hint's partition is not NULL");
        let at = micros(t.get::<TimestampWithTimeZone>(l.r[1]).expect("queen: a hint's time is not NULL"));
        Some((partition, at, t.get::<i32>(l.r[2]) == Some(shard)))
    });
    Some((candidate_page(hints, tried, limit), now))
}

/// The page of `hints` (partition, due time, of this shard; in the index's order, due time
/// then partition) that `candidates` of pop.sql returns: those of this shard but the `tried`,
/// at most `limit`, reading no further.
fn candidate_page(
    hints: impl Iterator<Item = (Uuid, Micros, bool)>,
    tried: &[Uuid],
    limit: usize,
) -> Vec<(Uuid, Micros)> {
    hints.filter(|(p, _, here)| *here && !tried.contains(p)).map(|(p, at, _)| (p, at)).take(limit).collect()
}

/// A row of `queen.cursors` as state::parse reads it.
struct CursorTuple<'t, 'a> {
    t: &'t Tuple<'a>,
    c: &'t [i16; CURSOR_COLUMNS.len()],
}

impl Columns for CursorTuple<'_, '_> {
    fn col<T: pgrx::FromDatum>(&self, name: &str) -> Option<T> {
        let i =
            CURSOR_COLUMNS.iter().position(|c| *c == name).unwrap_or_else(|| panic!("queen: no cursor column {name}"));
        self.t.get(self.c[i])
    }

    fn version(&self) -> Option<String> {
        Some(self.t.xmin())
    }
}

/// A cursor row read from `t` (a row of `queen.cursors`) as state::parse reads one.
pub(crate) fn cursor_row(l: &Layout, t: &Tuple<'_>) -> CursorRow {
    crate::state::parse(&CursorTuple { t, c: &l.c })
}

/// Whether direct reads may be used here: one server (not distributed, no shard's call).
pub fn available(s: &mut crate::spi::Spi) -> bool {
    crate::shards::current() == 0 && !crate::shards::planning_for_citus() && !crate::shards::layout(s).distributed
}

/// Where a scan of a partition's messages starts, in key order.
enum Bound {
    /// (txid = x, seq > s), or with no seq (txid > x); from the start for x = i64::MIN.
    After(i64, Option<i64>),
    /// (txid = x, seq >= s).
    AtOrAfter(i64, i64),
    /// (txid = x, seq = s).
    At(i64, i64),
}

/// One partition's rows of `queen.messages`, read through `messages_pkey`.
struct Messages<'l> {
    l: &'l Layout,
    table: Table,
    pkey: Index,
    snapshot: pg_sys::Snapshot,
    /// The partition id, which the scans' first key points to.
    pid: Box<[u8; 16]>,
    shard: i32,
}

impl<'l> Messages<'l> {
    fn open(l: &'l Layout, snap: &Snapshot, partition: Uuid) -> Option<Messages<'l>> {
        Some(Messages {
            l,
            table: Table::open(l.messages)?,
            pkey: Index::open(l.messages_pkey)?,
            snapshot: snap.snap,
            pid: Box::new(*partition.as_bytes()),
            shard: crate::shards::current(),
        })
    }

    fn scan(&self, from: Bound, backward: bool) -> Scan {
        let mut keys = vec![ScanKey::eq(1, pg_sys::F_UUID_EQ, pg_sys::Datum::from(self.pid.as_ptr()))];
        match from {
            Bound::After(x, Some(s)) => {
                keys.push(ScanKey::eq(2, pg_sys::F_INT8EQ, x.into()));
                keys.push(ScanKey::gt(3, pg_sys::F_INT8GT, s.into()));
            }
            Bound::After(x, None) if x > i64::MIN => keys.push(ScanKey::gt(2, pg_sys::F_INT8GT, x.into())),
            Bound::After(_, None) => {}
            Bound::AtOrAfter(x, s) => {
                keys.push(ScanKey::eq(2, pg_sys::F_INT8EQ, x.into()));
                keys.push(ScanKey::ge(3, pg_sys::F_INT8GE, s.into()));
            }
            Bound::At(x, s) => {
                keys.push(ScanKey::eq(2, pg_sys::F_INT8EQ, x.into()));
                keys.push(ScanKey::eq(3, pg_sys::F_INT8EQ, s.into()));
            }
        }
        Scan::new(&self.table, &self.pkey, self.snapshot, &keys, backward)
    }

    fn key(&self, t: &Tuple<'_>) -> Key {
        (t.get::<i64>(self.l.m[M_TXID]).unwrap_or_default(), t.get::<i64>(self.l.m[M_SEQ]).unwrap_or_default())
    }

    /// The row is of the call's shard (`m.shard = $n` in the statements).
    fn in_shard(&self, t: &Tuple<'_>) -> bool {
        t.get::<i32>(self.l.m[M_SHARD]) == Some(self.shard)
    }

    fn id(&self, t: &Tuple<'_>) -> Uuid {
        t.get(self.l.m[M_ID]).expect("queen: message_id is not NULL")
    }
}

/// A message of a lease's batch as `batch_messages` reads it.
pub(crate) struct BatchMessage {
    pub id: Uuid,
    /// Its transaction id; None for a keyless message (its id is its key).
    pub transaction_id: Option<String>,
}

/// The ids of a lease's batch (`keys`, in delivery order) of `partition`, None where a message
/// no longer exists: `batch_ids` of ack_lease_lock (which see).
pub(crate) fn batch_ids(snap: &Snapshot, partition: Uuid, keys: &[Key]) -> Option<Vec<Option<Uuid>>> {
    batch_read(snap, partition, keys, |part, _, t| part.id(t))
}

/// The messages of a lease's batch as `batch_ids` reads them, with their transaction ids.
pub(crate) fn batch_messages(snap: &Snapshot, partition: Uuid, keys: &[Key]) -> Option<Vec<Option<BatchMessage>>> {
    batch_read(snap, partition, keys, |part, l, t| BatchMessage {
        id: part.id(t),
        transaction_id: t.get::<String>(l.m[M_TRANSACTION]),
    })
}

/// What `read` takes of each message of a lease's batch (`keys`, in delivery order) of
/// `partition`, None where a message no longer exists: read from messages_pkey — the span
/// from the batch's first key, no more rows than the batch has keys, then a probe for each key
/// the span did not reach. None when the relations are not as this code reads them.
fn batch_read<T>(
    snap: &Snapshot,
    partition: Uuid,
    keys: &[Key],
    read_one: impl Fn(&Messages<'_>, &Layout, &Tuple<'_>) -> T,
) -> Option<Vec<Option<T>>> {
    let l = layout()?;
    let mut found: Vec<Option<T>> = keys.iter().map(|_| None).collect();
    let Some(&first) = keys.first() else { return Some(found) };
    let part = Messages::open(&l, snap, partition)?;
    let at: std::collections::HashMap<Key, usize> = keys.iter().enumerate().map(|(i, k)| (*k, i)).collect();
    let mut read = 0;
    for from in [Bound::AtOrAfter(first.0, first.1), Bound::After(first.0, None)] {
        let mut scan = part.scan(from, false);
        while read < keys.len() {
            let Some(t) = scan.next() else { break };
            if !part.in_shard(&t) {
                continue;
            }
            read += 1;
            if let Some(&i) = at.get(&part.key(&t)) {
                found[i] = Some(read_one(&part, &l, &t));
            }
        }
    }
    for (i, k) in keys.iter().enumerate() {
        if found[i].is_some() {
            continue;
        }
        let mut scan = part.scan(Bound::At(k.0, k.1), false);
        while let Some(t) = scan.next() {
            if part.in_shard(&t) {
                found[i] = Some(read_one(&part, &l, &t));
                break;
            }
        }
    }
    Some(found)
}

/// Whether a message of `partition` (of the call's shard) that `snap` sees holds one of
/// `transaction_ids` as its transaction id: probes of `messages_transaction_id`, as ack_find's
/// second branch finds a message. A partition none of whose messages the snapshot sees holds
/// a transaction id (no producer named one there: Queen's clients' acks of keyless messages)
/// answers with one probe of the partition, not one per transaction id. None when that index
/// is not as this code reads it.
pub(crate) fn transaction_id_held(snap: &Snapshot, partition: Uuid, transaction_ids: &[&str]) -> Option<bool> {
    let l = layout()?;
    let index = relid(c"messages_transaction_id", l.schema);
    if index == pg_sys::InvalidOid {
        return None;
    }
    let (table, index) = (Table::open(l.messages)?, Index::open(index)?);
    let columns = [table.attnum("partition_id")?, l.m[M_TRANSACTION], l.m[M_SHARD]];
    if index.columns() != columns {
        return None;
    }
    let pid = Box::new(*partition.as_bytes());
    let shard = crate::shards::current();
    let partition_keys = [
        ScanKey::eq(1, pg_sys::F_UUID_EQ, pg_sys::Datum::from(pid.as_ptr())),
        ScanKey::eq(3, pg_sys::F_INT4EQ, shard.into()),
    ];
    if Scan::new(&table, &index, snap.snap, &partition_keys, false).next().is_none() {
        return Some(false);
    }
    let collation = index.collation(1);
    let mut scan: Option<Scan> = None;
    for tid in transaction_ids {
        // A text datum of its own, freed with the call's memory: the scan reads it until its
        // next rescan.
        let text = tid.into_datum().expect("queen: a text datum");
        let keys = [
            ScanKey::eq(1, pg_sys::F_UUID_EQ, pg_sys::Datum::from(pid.as_ptr())),
            ScanKey::eq(2, pg_sys::F_TEXTEQ, text).collated(collation),
            ScanKey::eq(3, pg_sys::F_INT4EQ, shard.into()),
        ];
        if Scan::again(&mut scan, (&table, &index), snap.snap, &keys).next().is_some() {
            return Some(true);
        }
    }
    Some(false)
}

/// Look at a partition for a group (no lock): its cursor row (or `initial` when it has none)
/// and up to `limit` next messages, with what the reading snapshot says. On one server read
/// straight from the indexes; debug builds read it with the `look` statement too, under the
/// same snapshot, and check that both read the same. Elsewhere, the statement.
pub(crate) fn look(
    s: &mut crate::spi::Spi,
    partition: Uuid,
    group: &str,
    initial: &Cursor,
    limit: i64,
    lease_seconds: i32,
) -> Look {
    if available(s) {
        let snap = Snapshot::take();
        if let Some(direct) = look_direct(&snap, partition, group, initial, limit, lease_seconds) {
            if cfg!(debug_assertions) {
                let sql = crate::state::look_sql(s, partition, group, initial, limit, lease_seconds, snap.snap);
                check_same(&direct, &sql);
            }
            return direct;
        }
    }
    crate::state::look_sql(s, partition, group, initial, limit, lease_seconds, std::ptr::null_mut())
}

/// The look of state.sql's `look` (which see, part by part), read from the indexes. None when
/// the relations are not as this code reads them.
fn look_direct(
    snap: &Snapshot,
    partition: Uuid,
    group: &str,
    initial: &Cursor,
    limit: i64,
    lease_seconds: i32,
) -> Option<Look> {
    let l = layout()?;
    let limit = limit.max(0) as usize;
    // snap: `snap` (taken as a statement takes its own) as queen stores ids, the caller's own
    // transaction counted as running (fragments.sql, stored_snapshot), and the clock read
    // after it.
    let (own, offset) = (crate::cluster::own_txid(), crate::cluster::offset());
    let (xmin, xmax, running) = snap.full_ids();
    let xmin = own.map_or(xmin + offset, |o| (xmin + offset).min(o));
    let xmax = xmax + offset;
    let mut xip: Vec<i64> = running.into_iter().map(|x| x + offset).collect();
    xip.extend(own);
    // SAFETY: reads the clock (clock_timestamp()).
    let now: Micros = unsafe { pg_sys::GetCurrentTimestamp() };

    let (cursors, cursors_pkey) = (Table::open(l.cursors)?, Index::open(l.cursors_pkey)?);
    let shard = crate::shards::current();
    let pid = *partition.as_bytes();

    // c: the row as the snapshot sees it, or where a group starts (`initial`'s start columns).
    let group_datum = group.into_datum().expect("queen: a group name is a datum");
    let mut scan = cursor_scan(&l, (&cursors, &cursors_pkey), snap, &pid, group_datum, shard);
    let (row, stored) = match scan.next() {
        Some(t) => (crate::state::parse(&CursorTuple { t: &t, c: &l.c }), true),
        None => (
            CursorRow {
                cursor: Cursor { done: initial.done, pending: initial.pending.clone(), ..Cursor::default() },
                retry_at: None,
                lease_id: None,
                lease_expires_at: None,
                version: None,
            },
            false,
        ),
    };
    drop(scan);
    let c = &row.cursor;
    // busy: a lease, or a retry delay not over.
    let busy = row.lease_id.is_some() || row.retry_at.is_some_and(|r| r > now);
    // pend: visible = committed (or rolled back) for the snapshot.
    let visible = |x: i64| x < xmin || (x < xmax && !xip.contains(&x));
    let pending_visible: Vec<bool> = c.pending.iter().map(|&(x, _)| visible(x)).collect();
    // ahead: finished keys, left out of what is read.
    let ahead = |k: Key| c.ahead.binary_search(&k).is_ok();
    let part = Messages::open(&l, snap, partition)?;
    let shard_of = |t: &Tuple<'_>| part.in_shard(t);
    let key_of = |t: &Tuple<'_>| part.key(t);
    let after = |x: i64, seq: Option<i64>, backward: bool| part.scan(Bound::After(x, seq), backward);
    let mut msgs: Vec<Msg> = Vec::with_capacity(limit.min(1000));
    let read = |t: &Tuple<'_>, k: Key| -> Msg {
        let message_id: Uuid = t.get(l.m[M_ID]).expect("queen: message_id is not NULL");
        Msg {
            key: k,
            message_id,
            // COALESCE(m.transaction_id, m.message_id::text), as uuid_out writes it (through the
            // uuid crate's encoder: pgrx's Display wrote it a byte at a time through
            // core::fmt, 7% of a pop 100 + queen_ack_lease cycle).
            transaction_id: t
                .get::<String>(l.m[M_TRANSACTION])
                .unwrap_or_else(|| uuid::Uuid::from_bytes(*message_id.as_bytes()).hyphenated().to_string()),
            partition: t.get(l.m[M_PARTITION]).expect("queen: partition is not NULL"),
            payload: Jsonb(t.transfer(l.m[M_PAYLOAD]).expect("queen: payload is not NULL")),
            trace_id: t.get(l.m[M_TRACE]),
            created_at: t.get(l.m[M_CREATED]).expect("queen: created_at is not NULL"),
        }
    };
    if !busy {
        // msgs, first branch: the committed pending transactions' messages after their
        // positions, in pending order, each in seq order.
        for (&(x, ps), _) in c.pending.iter().zip(&pending_visible).filter(|(_, v)| **v) {
            let mut scan = after(x, Some(ps), false);
            while msgs.len() < limit {
                let Some(t) = scan.next() else { break };
                let k = key_of(&t);
                if shard_of(&t) && !ahead(k) {
                    msgs.push(read(&t, k));
                }
            }
        }
        // Second branch: after the frontier in key order, the caller's own messages left out.
        for seq in [Some(c.done.1), None] {
            let mut scan = after(c.done.0, seq, false);
            while msgs.len() < limit {
                let Some(t) = scan.next() else { break };
                let k = key_of(&t);
                if shard_of(&t) && Some(k.0) != own && !ahead(k) {
                    msgs.push(read(&t, k));
                }
            }
        }
    }
    // pending_left: whether each pending transaction still has unfinished messages here.
    let pending_left: Vec<bool> = c
        .pending
        .iter()
        .map(|&(x, ps)| {
            let mut scan = after(x, Some(ps), false);
            while let Some(t) = scan.next() {
                if shard_of(&t) && !ahead(key_of(&t)) {
                    return true;
                }
            }
            false
        })
        .collect();
    // newest_at: the partition's newest message but the caller's own.
    let newest_at = {
        let mut scan = after(i64::MIN, None, true);
        let mut newest = None;
        while let Some(t) = scan.next() {
            if shard_of(&t) && Some(key_of(&t).0) != own {
                newest = t.get::<TimestampWithTimeZone>(l.m[M_CREATED]).map(micros);
                break;
            }
        }
        newest
    };
    let created = msgs.iter().map(|m| micros(m.created_at)).collect();
    Some(Look {
        row,
        stored,
        changed: false,
        xmin,
        xmax,
        xip,
        pending_visible,
        pending_left,
        newest_at,
        now,
        // snap.now + make_interval(secs => lease seconds)
        lease_expires_at: now + lease_seconds as i64 * 1_000_000,
        msgs,
        created,
    })
}

/// The scan of a (partition, group)'s row in `cursors_pkey` (`pid` the partition's bytes,
/// `group` a text datum, both outliving the scan).
pub(crate) fn cursor_scan(
    l: &Layout,
    (cursors, pkey): (&Table, &Index),
    snap: &Snapshot,
    pid: &[u8; 16],
    group: pg_sys::Datum,
    shard: i32,
) -> Scan {
    Scan::new(cursors, pkey, snap.snap, &cursor_keys(l, pid, group, shard), false)
}

/// The keys of [`cursor_scan`].
pub(crate) fn cursor_keys(l: &Layout, pid: &[u8; 16], group: pg_sys::Datum, shard: i32) -> [ScanKey; 3] {
    [
        ScanKey::eq(1, pg_sys::F_UUID_EQ, pg_sys::Datum::from(pid.as_ptr())),
        ScanKey::eq(2, pg_sys::F_TEXTEQ, group).collated(l.group_collation),
        ScanKey::eq(3, pg_sys::F_INT4EQ, shard.into()),
    ]
}

/// Whether a message of `partition` after `done` is visible to `snap`, but `own`'s (the caller's
/// stored id): `NOT EXISTS` of cursor_save's `snap` (state.sql), read from messages_pkey (`l`
/// the caller's layout). None when a relation is gone since.
pub(crate) fn any_after(l: &Layout, snap: &Snapshot, partition: Uuid, done: Key, own: i64) -> Option<bool> {
    let part = Messages::open(l, snap, partition)?;
    for seq in [Some(done.1), None] {
        let mut scan = part.scan(Bound::After(done.0, seq), false);
        while let Some(t) = scan.next() {
            if part.in_shard(&t) && part.key(&t).0 != own {
                return Some(true);
            }
        }
    }
    Some(false)
}

/// Panics unless `direct` read what `sql` (the statement, under the same snapshot) read: debug
/// builds check every look so (state.rs), in every test and explorer run. The clock is read
/// apart by each, so `now` and the new lease's expiry may differ, and a retry delay ending
/// between the two reads may leave one busy and the other not.
fn check_same(direct: &Look, sql: &Look) {
    let (d, q) = (&direct.row, &sql.row);
    let same_row = d.cursor == q.cursor
        && d.retry_at == q.retry_at
        && d.lease_id == q.lease_id
        && d.lease_expires_at == q.lease_expires_at
        && d.version == q.version;
    assert!(
        same_row && direct.stored == sql.stored,
        "queen: look read the row {:?} ({}), the statement {:?} ({})",
        d,
        direct.stored,
        q,
        sql.stored
    );
    assert_eq!(
        (direct.xmin, direct.xmax, &direct.xip, &direct.pending_visible, &direct.pending_left, direct.newest_at),
        (sql.xmin, sql.xmax, &sql.xip, &sql.pending_visible, &sql.pending_left, sql.newest_at),
        "queen: look read another snapshot or pending state than the statement"
    );
    if d.retry_at.is_some_and(|r| r > direct.now.min(sql.now) && r <= direct.now.max(sql.now)) {
        return;
    }
    let keys = |l: &Look| l.msgs.iter().map(|m| m.key).collect::<Vec<Key>>();
    assert_eq!(keys(direct), keys(sql), "queen: look read other messages than the statement");
    for (a, b) in direct.msgs.iter().zip(&sql.msgs) {
        // SAFETY: two jsonb datums (varlena), valid for the call, detoasted to compare.
        let bytes = |d: pg_sys::Datum| unsafe {
            pgrx::varlena::varlena_to_byte_slice(pg_sys::pg_detoast_datum_packed(d.cast_mut_ptr())).to_vec()
        };
        let same_payload = bytes(a.payload.0) == bytes(b.payload.0);
        assert!(
            a.message_id == b.message_id
                && a.transaction_id == b.transaction_id
                && a.partition == b.partition
                && a.trace_id == b.trace_id
                && a.created_at == b.created_at
                && same_payload,
            "queen: look read message {:?} otherwise than the statement",
            a.key
        );
    }
    assert_eq!(direct.created, sql.created);
}

/// Panics unless `direct` (read with the clock at `now`) is the page `sql` (the statement, under
/// the same snapshot, with a clock read later) read: the same hints in the same order, but for
/// hints that came due between the two clocks, which only the statement may have read (at
/// the page's end: the page is in due order), where the direct read did not fill the page.
pub(crate) fn check_candidates(direct: &[(Uuid, Micros)], now: Micros, sql: &[(Uuid, Micros)], limit: usize) {
    let n = direct.len().min(sql.len());
    let later = |page: &[(Uuid, Micros)]| page.iter().all(|&(_, at)| at > now);
    let same = direct[..n] == sql[..n]
        && (direct.len() == sql.len() || (direct.len() < sql.len() && direct.len() < limit && later(&sql[n..])));
    assert!(same, "queen: a page of candidates read {direct:?} at {now}, the statement {sql:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `candidates` of pop.sql over `hints`: due time then partition order, from `from` on,
    /// but `tried`, at most `limit`.
    fn statement(hints: &[(Uuid, Micros)], tried: &[Uuid], limit: usize, from: Micros) -> Vec<(Uuid, Micros)> {
        let mut all: Vec<(Uuid, Micros)> =
            hints.iter().copied().filter(|(p, at)| *at >= from && !tried.contains(p)).collect();
        all.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.as_bytes().cmp(b.0.as_bytes())));
        all.truncate(limit);
        all
    }

    #[test]
    fn a_page_ending_among_equal_due_times_is_the_statements_and_pages_lose_and_repeat_nothing() {
        let p = |i: u8| Uuid::from_bytes([i; 16]);
        // Index order: by due time, then partition; a group of seven equal due times that
        // every page size below cuts.
        let index: Vec<(Uuid, Micros)> = vec![
            (p(9), 10),
            (p(1), 20),
            (p(2), 20),
            (p(3), 20),
            (p(5), 20),
            (p(6), 20),
            (p(7), 20),
            (p(8), 20),
            (p(0), 30),
            (p(4), 30),
        ];
        for limit in 1..=10 {
            let mut tried: Vec<Uuid> = Vec::new();
            let mut delivered: Vec<Uuid> = Vec::new();
            let mut from = Micros::MIN;
            loop {
                let hints = index.iter().filter(|h| h.1 >= from).map(|&(q, at)| (q, at, true));
                let page = candidate_page(hints, &tried, limit);
                assert_eq!(page, statement(&index, &tried, limit, from), "limit {limit}, from {from}");
                let Some(&(_, last)) = page.last() else { break };
                from = last;
                for (q, _) in page {
                    tried.push(q);
                    delivered.push(q);
                }
            }
            let mut sorted = delivered.clone();
            sorted.sort_by_key(|q| *q.as_bytes());
            sorted.dedup();
            assert_eq!((delivered.len(), sorted.len()), (index.len(), index.len()), "limit {limit}: {delivered:?}");
        }
    }

    #[test]
    fn hints_of_other_shards_and_tried_partitions_are_left_out() {
        let p = |i: u8| Uuid::from_bytes([i; 16]);
        let hints = vec![(p(1), 5, false), (p(2), 5, true), (p(3), 5, true), (p(4), 6, true)];
        assert_eq!(candidate_page(hints.into_iter(), &[p(3)], 2), vec![(p(2), 5), (p(4), 6)]);
    }
}
