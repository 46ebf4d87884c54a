//! Stored transaction ids and the cluster they belong to (SPEC §12).
//!
//! queen orders messages and keeps cursors by transaction ids (xid8): `queen.messages.txid`,
//! the pending lists, subscription points, hints. A dump restored into *another* cluster brings
//! them along, but that cluster's transaction counter is unrelated and usually far lower: its
//! new pushes would sort before every restored message, and cursors would pass them by.
//!
//! So stored ids are "this cluster's xid8 + an offset", the offset kept in `queen.cluster` with
//! the system identifier of the cluster it applies to (0 until a restore elsewhere). The first
//! queen call of a backend checks the row (`ensure`); if it names another cluster, the data was
//! restored from there, and the database is rebased once, under a lock: the new offset puts
//! every id this cluster assigns from now on above every stored one. Stored ids are never
//! rewritten: an id from the old cluster is, to every snapshot of the new one, a transaction
//! that ended long ago, which is what it is (a dump holds only committed rows).
//!
//! Every query turns this cluster's ids into stored ones the same way: `queen.txid()` for the
//! caller's transaction, `queen.own_txid()` for it if it has one, and `queen.xid_offset()`
//! added to a snapshot's xmin, xmax and running transactions.

use crate::spi::types::INT8;
use crate::spi::{Query, Spi};
use pgrx::pg_sys;
use std::cell::Cell;

const SQL: &str = include_str!("../sql/queries/cluster.sql");
const CLUSTER_ROWS: Query = Query { file: SQL, name: "cluster_rows", args: &[INT8] };
const CLUSTER_CLAIM: Query = Query { file: SQL, name: "cluster_claim", args: &[INT8] };
const CLUSTER_LOCK: Query = Query { file: SQL, name: "cluster_lock", args: &[] };
const CLUSTER_REBASE: Query = Query { file: SQL, name: "cluster_rebase", args: &[INT8] };

thread_local! {
    /// The offset of this backend's database, and the oid of the `queen` schema it was read
    /// for (a dropped and re-created extension is read again).
    static LOADED: Cell<Option<(pg_sys::Oid, i64)>> = const { Cell::new(None) };
}

pub fn schema_oid() -> pg_sys::Oid {
    // SAFETY: the name is a NUL-terminated C string literal; with missing_ok the lookup
    // returns InvalidOid instead of raising when there is no schema `queen`. Callers run inside
    // a transaction (a queen function, or spi::connect), as the catalog cache lookup needs.
    unsafe { pg_sys::get_namespace_oid(c"queen".as_ptr(), true) }
}

fn system_identifier() -> i64 {
    // SAFETY: GetSystemIdentifier reads the control file data in shared memory, which every
    // backend has from its start; it takes no argument.
    unsafe { pg_sys::GetSystemIdentifier() as i64 }
}

/// Make sure the stored ids of this database belong to this cluster (rebasing them once after
/// a restore from another cluster), and load the offset. Called before every use of SPI;
/// after the first call of a backend it costs a catalog cache lookup.
pub fn ensure(s: &mut Spi) {
    let schema = schema_oid();
    if LOADED.with(|l| l.get()).is_some_and(|(oid, _)| oid == schema) {
        return;
    }
    let me = system_identifier();
    // (foreign rows, this cluster's offset)
    let read = |s: &mut Spi| {
        let row = CLUSTER_ROWS.run(s, &[me.into()]).first();
        (row.req::<i64>("foreign_rows"), row.get::<i64>("xid_offset"))
    };
    let (mut foreign, mut offset) = read(s);
    if foreign > 0 {
        // Restored from another cluster: rebase, once. Other backends' first calls wait here
        // for the one that does it, then read its result.
        CLUSTER_LOCK.run(s, &[]);
        (foreign, offset) = read(s);
        if foreign > 0 {
            offset = CLUSTER_REBASE.run(s, &[me.into()]).first().get::<i64>("xid_offset");
        }
    } else if offset.is_none() {
        CLUSTER_CLAIM.run(s, &[me.into()]);
    }
    LOADED.with(|l| l.set(Some((schema, offset.unwrap_or(0)))));
}

/// The offset from this cluster's transaction ids to stored ones.
pub fn offset() -> i64 {
    if let Some((oid, off)) = LOADED.with(|l| l.get()) {
        if oid == schema_oid() {
            return off;
        }
    }
    // A query run outside queen's functions (a test PREPAREs one): load it now.
    crate::spi::connect(|_| ());
    LOADED.with(|l| l.get()).map_or(0, |(_, off)| off)
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
