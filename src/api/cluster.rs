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

    /// Whether a row version whose xmin is `xmin` (as `xmin::text::bigint`) was written by this
    /// transaction or one of its subtransactions: state a rollback may take back.
    #[pg_extern(volatile, parallel_unsafe)]
    fn written_here(xmin: i64) -> bool {
        crate::cluster::written_here(xmin)
    }

    /// The trigger on queen's tables that hold transaction ids (sql/restore.sql): rows that
    /// arrive from outside queen — a restore — unsettle the mapping of stored ids
    /// (cluster.rs). A statement trigger: one call per INSERT or COPY statement, which returns
    /// at once for queen's own.
    #[pg_trigger]
    fn rows_arrived<'a>(
        _trigger: &'a pgrx::PgTrigger<'a>,
    ) -> Result<Option<pgrx::heap_tuple::PgHeapTuple<'a, pgrx::AllocatedByPostgres>>, std::convert::Infallible> {
        crate::cluster::rows_arrived();
        Ok(None)
    }

    /// The offset from this cluster's xid8 values to stored ids, added to a snapshot's.
    #[pg_extern(stable, parallel_safe)]
    fn xid_offset() -> i64 {
        crate::cluster::offset()
    }
}
