//! The transaction ids queen's queries store and compare (cluster.rs): used inside queen's
//! own SQL only, in schema `queen`. They run no SQL, so they need no fixed `search_path` (a SET
//! clause would cost a GUC save and restore on every row that calls them).

#[pgrx::pg_schema]
mod queen {
    use pgrx::prelude::*;

    /// The caller's transaction id as stored (assigning one): what a push writes.
    #[pg_extern(volatile, parallel_unsafe)]
    fn txid() -> i64 {
        crate::cluster::txid()
    }

    /// The caller's transaction id as stored, if it has one.
    #[pg_extern(volatile, parallel_unsafe)]
    fn own_txid() -> Option<i64> {
        crate::cluster::own_txid()
    }

    /// The offset from this cluster's xid8 values to stored ids, added to a snapshot's.
    #[pg_extern(stable, parallel_safe)]
    fn xid_offset() -> i64 {
        crate::cluster::offset()
    }
}
