use crate::gucs;
use pgrx::prelude::*;
use pgrx::JsonB;

/// `queen_maintain()`: run one maintenance pass now (semantics §8) and report what it did. The
/// background worker runs the same pass.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_maintain() -> JsonB {
    use crate::error::OrReport;
    crate::privilege::require_admin("queen_maintain", false).or_report("queen_maintain");
    JsonB(crate::maintain::maintain(gucs::PARTITION_IDLE_SECONDS.get()))
}

/// What the background worker of this database could not write into
/// `queen.maintenance_totals` since the server started (worker.rs): passes that failed when
/// recording the failure failed too, and passes skipped because another pass was running.
/// Read through `queen.maintenance_stats` (superusers, the owner and pg_monitor).
#[pg_extern(volatile, parallel_safe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_worker_unrecorded() -> TableIterator<'static, (name!(failed_passes, i64), name!(skipped_passes, i64))> {
    use crate::error::OrReport;
    crate::privilege::require_admin("queen_worker_unrecorded", true).or_report("queen_worker_unrecorded");
    TableIterator::once(crate::worker::unrecorded())
}
