use crate::names::to_pg;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use pgrx::Uuid;

/// The pops waiting for messages now (with the library preloaded): backend pid, queue id and
/// name (also of a queue that does not exist yet), since when, and how many commits woke it.
/// Read through the view `queen.waiting_pops`.
#[pg_extern(volatile, parallel_safe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_waiting_pops() -> TableIterator<
    'static,
    (
        name!(pid, i32),
        name!(queue_id, Uuid),
        name!(queue, String),
        name!(since, TimestampWithTimeZone),
        name!(wakeups, i64),
    ),
> {
    use crate::error::OrReport;
    crate::privilege::require_admin("queen_waiting_pops", true).or_report("queen_waiting_pops");
    TableIterator::new(
        crate::wait::waiting()
            .into_iter()
            .map(|w| (w.pid, to_pg(w.queue_id), w.queue, crate::state::timestamp(w.since), w.wakeups)),
    )
}

::pgrx::extension_sql!(
    r#"
-- Pops waiting for messages now (needs the library in shared_preload_libraries).
CREATE VIEW queen.waiting_pops WITH (security_barrier) AS
SELECT w.pid, w.queue, w.since, w.wakeups FROM queen_waiting_pops() w;
"#,
    name = "waiting_pops_view",
    requires = [queen_waiting_pops]
);
