//! Stored transaction ids and the transaction counter they belong to (semantics §12).
//!
//! queen orders messages and keeps cursors by transaction ids (xid8): `queen.messages.txid`,
//! the pending lists, subscription points, hints. They mean something only next to the counter
//! that assigned them. A dump restored into another cluster, a clone (base backup, PITR,
//! promoted standby) later loaded with a newer dump, and on Citus a shard moved to another
//! node all bring ids of a foreign counter: when that counter is ahead of the one here, new
//! pushes would sort before restored messages, and cursors that passed those would never
//! deliver them.
//!
//! So stored ids are "this cluster's xid8 + an offset", kept in `queen.cluster`. The rules:
//!
//! - **Detected from the counter, not from a name.** Rows that reach queen's tables from
//!   outside queen (a restore's COPY: a statement trigger on every table that holds ids, see
//!   sql/restore.sql) mark the mapping unverified, and a restore of `queen.cluster` adds a
//!   second row beside the one `CREATE EXTENSION` inserted: anything but one verified row is
//!   an unsettled mapping. Settling it reads every stored id and puts this counter above them
//!   (`cluster_rebase`): the offset moves only when the counter is behind, whichever system
//!   identifier the rows name.
//! - **Decided once, committed on its own.** The rebase runs in a background worker of its own
//!   (`queen_rebase_worker_main`, worker.rs), in a transaction of its own, under an EXCLUSIVE
//!   lock on `queen.cluster`; the caller waits for it (milliseconds), and a caller that rolls
//!   back takes nothing back. No backend ever keeps an offset that was not committed, and no
//!   user transaction holds a lock that others wait for (0.2.0 rebased in the first caller's
//!   transaction: a rollback left that backend with an offset the table never got, and every
//!   push waited on its table lock while it stayed open).
//! - **Checked by every call, cheaply.** A backend keeps the offset it read with the cache's
//!   generation (cache.rs), which every commit that changes the mapping moves (a rebase, a
//!   restore): with the library preloaded, checking is two atomic reads; without, the mapping
//!   is read once per transaction. Long-lived backends — the maintenance worker, pooled
//!   connections — so never act on an offset a later commit replaced.
//! - **No transaction commits across a rebase.** A transaction that used the mapping checks at
//!   pre-commit, holding ROW SHARE on `queen.cluster` until its commit ends (the rebase's
//!   EXCLUSIVE lock waits for those commits, and its reading snapshot then sees them), that it
//!   is still the committed one; if not, it fails with 40001 (retry) instead of committing ids
//!   of the old mapping next to the new.
//!
//! Every query turns this cluster's ids into stored ones the same way: `queen.txid()` for the
//! caller's transaction, `queen.own_txid()` for it if it has one, and `queen.xid_offset()`
//! added to a snapshot's xmin, xmax and running transactions.

use crate::error::QueenError;
use crate::spi::types::{INT4, INT8};
use crate::spi::{Query, Spi};
use pgrx::pg_sys;
use std::cell::Cell;

const SQL: &str = include_str!("../sql/queries/cluster.sql");
const CLUSTER_STATE: Query = Query { file: SQL, name: "cluster_state", args: &[] };
const CLUSTER_UNVERIFY: Query = Query { file: SQL, name: "cluster_unverify", args: &[] };
const CLUSTER_LOCK: Query = Query { file: SQL, name: "cluster_lock", args: &[] };
const CLUSTER_HI: Query = Query { file: SQL, name: "cluster_hi", args: &[INT4] };
const CLUSTER_REBASE: Query = Query { file: SQL, name: "cluster_rebase", args: &[INT8, INT8] };
const CITUS_SHARDS_ARRIVED: Query = Query { file: SQL, name: "citus_shards_arrived", args: &[] };
const CITUS_SETTLE_SHARDS: Query = Query { file: SQL, name: "citus_settle_shards", args: &[] };

/// A mapping as read: for which `queen` schema, its offset, and the cache generation it was
/// read under (None: unknown — not preloaded, or a change was in flight).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loaded {
    schema: pg_sys::Oid,
    offset: i64,
    generation: Option<u64>,
}

thread_local! {
    /// The committed mapping this backend read last.
    static LOADED: Cell<Option<Loaded>> = const { Cell::new(None) };
    /// The mapping this transaction uses (from its first queen call to its end).
    static USED: Cell<Option<Loaded>> = const { Cell::new(None) };
    /// This transaction wrote rows into queen's tables from outside queen (a restore).
    static ARRIVED: Cell<bool> = const { Cell::new(false) };
}

use crate::names::schema_oid;

fn system_identifier() -> i64 {
    // SAFETY: GetSystemIdentifier reads the control file data in shared memory, which every
    // backend has from its start; it takes no argument.
    unsafe { pg_sys::GetSystemIdentifier() as i64 }
}

/// The mapping as committed (read with the latest snapshot, whatever the isolation level).
struct State {
    rows: i64,
    verified: bool,
    offset: i64,
    /// On Citus: this node holds a shard the mapping does not cover yet.
    arrived: bool,
}

impl State {
    /// One verified row, covering every shard the node holds: nothing to decide.
    fn settled(&self) -> bool {
        self.rows == 1 && self.verified && !self.arrived
    }
}

fn read(s: &mut Spi) -> State {
    let row = CLUSTER_STATE.run_latest(s, &[]).first();
    let (rows, verified, offset) = (row.req("rows"), row.req("verified"), row.req("xid_offset"));
    let arrived =
        crate::shards::layout(s).distributed && CITUS_SHARDS_ARRIVED.run_latest(s, &[]).first().req::<bool>("arrived");
    State { rows, verified, offset, arrived }
}

/// Before a session's first query (session.rs): whether queen is distributed, known before any
/// of its plans is made (shards.rs: plans for Citus are made otherwise) and read again after
/// Citus moved shards, before the mapping is checked (a shard that reached this node is
/// settled first); then the mapping, taken or checked ([`ensure`]).
pub fn enter(s: &mut Spi) {
    if crate::shards::known().is_none() {
        crate::shards::layout(s);
    }
    ensure(s);
}

/// Make sure this transaction uses the committed mapping of this database's stored ids
/// (settling it first after a restore), and that a mapping it used already still is the
/// committed one. Called before every use of SPI (session.rs); with the library preloaded,
/// and nothing changed, it costs two atomic reads.
pub fn ensure(s: &mut Spi) {
    let schema = schema_oid();
    let placements_changed = crate::shards::take_placements_changed();
    if placements_changed {
        LOADED.set(None);
    }
    if let Some(used) = USED.get().filter(|u| u.schema == schema) {
        let now = crate::cache::generation_now();
        if placements_changed {
            // A shard may have reached this node since this transaction took its mapping:
            // settled now if so, and then this transaction's ids are of the old mapping.
            let state = read(s);
            if !state.settled() {
                rebase_elsewhere();
                QueenError::Rebased.report("queen");
            }
        }
        if now.is_some() && now == used.generation || !crate::cache::shared() {
            // (Without shared memory the pre-commit check is the only one.)
            return;
        }
        let state = read(s);
        if state.settled() && state.offset == used.offset {
            USED.set(Some(Loaded { generation: now, ..used }));
            return;
        }
        QueenError::Rebased.report("queen");
    }
    let loaded = current(s, schema);
    USED.set(Some(loaded));
}

/// The committed mapping: the one this backend read, while no commit changed it since, or read
/// now — and settled first if a restore left it unsettled.
fn current(s: &mut Spi, schema: pg_sys::Oid) -> Loaded {
    let now = crate::cache::generation_now();
    if let Some(l) = LOADED.get().filter(|l| l.schema == schema && now.is_some() && l.generation == now) {
        return l;
    }
    for attempt in 0..3 {
        // The generation before the read: a change committed after it moves it.
        let generation = crate::cache::generation_now();
        let state = read(s);
        if state.settled() {
            let l = Loaded { schema, offset: state.offset, generation };
            LOADED.set(Some(l));
            return l;
        }
        if ARRIVED.get() {
            QueenError::RestoreUncommitted.report("queen");
        }
        if attempt < 2 {
            rebase_elsewhere();
        }
    }
    QueenError::RebaseFailed { detail: "the mapping is still unsettled after two rebases".into() }.report("queen")
}

/// Settle the mapping in a transaction of its own: a background worker does it, and this
/// backend waits for it to end.
fn rebase_elsewhere() {
    use pgrx::bgworkers::BackgroundWorkerBuilder;
    use pgrx::IntoDatum;
    // SAFETY: plain reads of backend globals set at connection start.
    let (db, me) = unsafe { (pg_sys::MyDatabaseId, pg_sys::MyProcPid) };
    let started = BackgroundWorkerBuilder::new("queen rebase")
        .set_type("queen rebase")
        .set_library("queen")
        .set_function("queen_rebase_worker_main")
        .set_argument(db.into_datum())
        .enable_spi_access()
        .set_notify_pid(me)
        .load_dynamic();
    match started {
        // How it went shows in the mapping, read again by the caller.
        Ok(worker) => {
            let _ = worker.wait_for_shutdown();
        }
        Err(e) => QueenError::RebaseFailed {
            detail: format!("no background worker could start ({e:?}): is max_worker_processes reached?"),
        }
        .report("queen"),
    }
}

/// The rebase, in the rebase worker's own transaction: under the EXCLUSIVE lock (after every
/// commit that used the old mapping), read the state again and settle it if it still is not.
/// Returns the offset.
pub fn rebase_now(s: &mut Spi) -> i64 {
    CLUSTER_LOCK.run(s, &[]);
    let state = read(s);
    if state.settled() {
        return state.offset;
    }
    // The highest stored id: in the one shard of one server, or in every shard this node
    // holds on Citus (each read in its shard), which the mapping then covers.
    let (shards, _) = crate::shards::local(s);
    let hi = shards.iter().map(|k| CLUSTER_HI.run(s, &[(*k).into()]).first().req::<i64>("h")).max().unwrap_or(0);
    let args: [pgrx::datum::DatumWithOid; 2] = [system_identifier().into(), hi.into()];
    let offset = crate::owner::inside(|| CLUSTER_REBASE.run(s, &args).first().req::<i64>("xid_offset"));
    if state.arrived || crate::shards::layout(s).distributed {
        crate::owner::inside(|| CITUS_SETTLE_SHARDS.run(s, &[]));
    }
    crate::cache::changed();
    offset
}

/// The trigger of queen's tables (sql/restore.sql): rows arrived from outside queen — a
/// restore's COPY, or someone's INSERT — so the mapping is to be settled again once this
/// transaction commits (and every backend re-reads it then: cache.rs).
pub fn rows_arrived() {
    if crate::owner::is_inside() || ARRIVED.get() {
        return;
    }
    ARRIVED.set(true);
    crate::owner::connect(|s| {
        CLUSTER_UNVERIFY.run(s, &[]);
    });
    crate::cache::changed();
}

/// At pre-commit (and pre-prepare) of a transaction: if it used the mapping, it must still be
/// the committed one. ROW SHARE on `queen.cluster` from here to the end of the commit makes a
/// rebase wait for this commit (and see it).
pub fn at_pre_commit() {
    let Some(used) = USED.get() else { return };
    let schema = schema_oid();
    if used.schema != schema {
        return; // the extension was dropped (and maybe created again) in this transaction
    }
    let rel = crate::oids::relation(c"cluster", schema);
    if rel != pg_sys::InvalidOid {
        // SAFETY: inside the committing transaction; the oid of an existing table (InvalidOid,
        // when there is none, is not locked).
        unsafe { pg_sys::LockRelationOid(rel, pg_sys::RowShareLock as pg_sys::LOCKMODE) };
    }
    let now = crate::cache::generation_now();
    if now.is_some() && now == used.generation {
        return;
    }
    // After the call that used it returned: its own scope for the path (gucs.rs).
    let same = crate::gucs::with_fixed_search_path(|| {
        crate::spi::with_snapshot(|| {
            crate::owner::connect(|s| {
                let state = read(s);
                state.settled() && state.offset == used.offset
            })
        })
    });
    if !same {
        QueenError::Rebased.report("queen");
    }
}

/// At the end of a transaction (committed, rolled back, prepared).
pub fn at_end() {
    USED.set(None);
    ARRIVED.set(false);
}

/// The offset from this cluster's transaction ids to stored ones, as this transaction uses it.
pub fn offset() -> i64 {
    let schema = schema_oid();
    if let Some(u) = USED.get().filter(|u| u.schema == schema) {
        return u.offset;
    }
    // A query run outside queen's functions (a test PREPAREs one): resolve it now.
    crate::owner::connect(enter);
    USED.get().map_or(0, |u| u.offset)
}

/// The caller's transaction id as stored (assigning one if it has none).
pub fn txid() -> i64 {
    // SAFETY: called by the SQL function queen.txid(), i.e. inside a transaction, where
    // GetTopFullTransactionId may assign the top-level xid (it raises an SQL error, not UB,
    // where none can be assigned, as on a standby).
    unsafe { pg_sys::GetTopFullTransactionId().value as i64 + offset() }
}

/// The caller's transaction id as stored, if it has one.
pub fn own_txid() -> Option<i64> {
    // SAFETY: only reads this backend's transaction state (0 when no xid is assigned).
    let id = unsafe { pg_sys::GetTopFullTransactionIdIfAny().value };
    (id != 0).then(|| id as i64 + offset())
}

/// Whether a row version with this xmin (32 bits, as SQL's `xmin::text::bigint`) was written by
/// the caller's transaction or one of its subtransactions.
pub fn written_here(xmin: i64) -> bool {
    let xid = pg_sys::TransactionId::from(xmin as u32);
    // SAFETY: only reads this backend's transaction state; any value is accepted (an invalid
    // or frozen xid is never the current transaction's).
    unsafe { pg_sys::TransactionIdIsCurrentTransactionId(xid) }
}
