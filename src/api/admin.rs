use crate::admin;
use crate::error::{OrReport, QueenError};
use crate::names;
use crate::privilege::{self, Privilege};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use pgrx::Uuid;

/// `queen_renew(lease_id, seconds)`: extend an active lease to now + seconds (default: the
/// queue's leaseTime), never shortening it. NULL when the lease is no longer active.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_renew(lease_id: Option<Uuid>, seconds: default!(Option<i32>, "NULL")) -> Option<TimestampWithTimeZone> {
    const F: &str = "queen_renew";
    not_on_citus(F);
    let lease_id = lease_id.ok_or(QueenError::NullValue { argument: "lease_id" }).or_report(F);
    admin::renew(lease_id, seconds).or_report(F)
}

/// `queen_seek(queue, consumer_group, to_time)`: move the group's cursor in every partition
/// of the queue to just before the first message created at or after `to_time` (NULL: the
/// end). Returns the number of partitions set.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_seek(
    queue: Option<&str>,
    consumer_group: Option<&str>,
    to_time: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> i32 {
    const F: &str = "queen_seek";
    not_on_citus(F);
    let queue = names::check_name("queue", "argument \"queue\"", queue).or_report(F);
    if let Some(g) = consumer_group {
        names::check_group("argument \"consumer_group\"", g).or_report(F);
    }
    privilege::require(&[queue], Privilege::Configure).or_report(F);
    admin::seek(queue, consumer_group, to_time).or_report(F)
}

/// `queen_delete_group(consumer_group, queue)`: forget a group (NULL: queue mode) on one queue
/// or all. Returns the number of cursors removed.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_delete_group(consumer_group: Option<&str>, queue: default!(Option<&str>, "NULL")) -> i32 {
    const F: &str = "queen_delete_group";
    not_on_citus(F);
    if let Some(g) = consumer_group {
        names::check_group("argument \"consumer_group\"", g).or_report(F);
    }
    if queue.is_some() {
        names::check_name("queue", "argument \"queue\"", queue).or_report(F);
    }
    match queue {
        Some(q) => privilege::require(&[q], Privilege::Configure),
        None => privilege::require_everywhere(Privilege::Configure),
    }
    .or_report(F);
    admin::delete_group(consumer_group, queue).or_report(F)
}

/// `queen_delete_queue(queue)`: drop a queue with everything in it; false if there was none.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_delete_queue(queue: Option<&str>) -> bool {
    const F: &str = "queen_delete_queue";
    not_on_citus(F);
    let queue = names::check_name("queue", "argument \"queue\"", queue).or_report(F);
    privilege::require(&[queue], Privilege::Configure).or_report(F);
    admin::delete_queue(queue).or_report(F)
}

/// Refuse (0A000) a call that is not routed to the workers yet on a distributed queen (issue 22,
/// docs/scale-out.md): run on the coordinator, it would read and write shards with the
/// coordinator's transaction ids.
fn not_on_citus(function: &'static str) {
    if crate::route::distributed().is_some() {
        crate::error::QueenError::NotOnCitus { what: function }.report(function);
    }
}
