use crate::gucs;
use pgrx::prelude::*;
use pgrx::JsonB;

/// `queen_maintain()`: run one maintenance pass now (SPEC §8) and report what it did. The
/// background worker runs the same pass.
#[pg_extern(volatile, parallel_unsafe)]
fn queen_maintain() -> JsonB {
    JsonB(crate::maintain::maintain(gucs::PARTITION_IDLE_SECONDS.get()))
}
