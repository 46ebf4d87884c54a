use crate::gucs;
use pgrx::prelude::*;
use pgrx::JsonB;

/// `queen_maintain()`: run one maintenance pass now (SPEC §8) and report what it did. The
/// background worker runs the same pass.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_maintain() -> JsonB {
    use crate::error::OrReport;
    crate::privilege::require_admin("queen_maintain", false).or_report("queen_maintain");
    JsonB(crate::maintain::maintain(gucs::PARTITION_IDLE_SECONDS.get()))
}
