//! queen's own locks (locks.rs) for queen's own SQL: a seek locks the pairs of every partition
//! of its queue in one statement. EXECUTE is revoked from PUBLIC (views.sql): queen's queries
//! run as the extension's owner.

#[pgrx::pg_schema]
mod queen {
    use crate::error::OrReport;
    use pgrx::prelude::*;

    /// Take the (partition, group) pair's lock for this transaction, waiting at most as long
    /// as locks.rs allows. Returns true (for `count()` in a query).
    #[pg_extern(volatile, parallel_unsafe)]
    fn lock_pair(partition: pgrx::Uuid, consumer_group: &str) -> bool {
        crate::state::lock_pair(partition, consumer_group).or_report("queen_seek");
        true
    }
}
