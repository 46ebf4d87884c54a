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
    let lease_id = checked_renew(lease_id, seconds);
    if let Some(layout) = crate::route::distributed() {
        return crate::route::renew(&layout, lease_id, seconds);
    }
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
    let queue = checked_seek(queue, consumer_group);
    let held = || crate::locks::cursor_rows_of(consumer_group);
    if let Some(layout) = crate::route::distributed() {
        let each_shard = || crate::route::seek(&layout, queue, consumer_group, to_time);
        return crate::locks::all_or_none(held, each_shard).or_report(F);
    }
    crate::locks::all_or_none(held, || admin::seek(queue, consumer_group, to_time)).or_report(F)
}

/// `queen_delete_group(consumer_group, queue)`: forget a group (NULL: queue mode) on one queue
/// or all. Returns the number of cursors removed.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_delete_group(consumer_group: Option<&str>, queue: default!(Option<&str>, "NULL")) -> i32 {
    const F: &str = "queen_delete_group";
    checked_delete_group(consumer_group, queue);
    if let Some(layout) = crate::route::distributed() {
        return crate::route::delete_group(&layout, consumer_group, queue).or_report(F);
    }
    admin::delete_group(consumer_group, queue).or_report(F)
}

/// `queen_delete_queue(queue)`: drop a queue with everything in it; false if there was none.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_delete_queue(queue: Option<&str>) -> bool {
    const F: &str = "queen_delete_queue";
    let queue = checked_delete_queue(queue);
    if let Some(layout) = crate::route::distributed() {
        return crate::route::delete_queue(&layout, queue).or_report(F);
    }
    admin::delete_queue(queue).or_report(F)
}

/// `queen_renew`'s arguments checked (the caller's grant is checked with the lease's rows).
fn checked_renew(lease_id: Option<Uuid>, seconds: Option<i32>) -> Uuid {
    const F: &str = "queen_renew";
    let lease_id = lease_id.ok_or(QueenError::NullValue { argument: "lease_id" }).or_report(F);
    if let Some(s) = seconds {
        crate::options::check_lease("argument \"seconds\"", s).or_report(F);
    }
    lease_id
}

/// `queen_seek`'s arguments and the caller's `configure` grant.
fn checked_seek<'a>(queue: Option<&'a str>, consumer_group: Option<&str>) -> &'a str {
    const F: &str = "queen_seek";
    let queue = names::check_name("queue", "argument \"queue\"", queue).or_report(F);
    if let Some(g) = consumer_group {
        names::check_group("argument \"consumer_group\"", g).or_report(F);
    }
    privilege::require(&[queue], Privilege::Configure).or_report(F);
    queue
}

/// `queen_delete_group`'s arguments and the caller's `configure` grant (on every queue when
/// none is named).
fn checked_delete_group(consumer_group: Option<&str>, queue: Option<&str>) {
    const F: &str = "queen_delete_group";
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
}

/// `queen_delete_queue`'s argument and the caller's `configure` grant.
fn checked_delete_queue(queue: Option<&str>) -> &str {
    const F: &str = "queen_delete_queue";
    let queue = names::check_name("queue", "argument \"queue\"", queue).or_report(F);
    privilege::require(&[queue], Privilege::Configure).or_report(F);
    queue
}

/// The workers' side of these calls on Citus (route.rs): internal, in schema `queen`, made
/// distributed functions by `queen_distribute()`. Each runs the one-server rule on the rows of
/// shard `shard`, with the arguments and grant checked as the public function checks them.
#[pgrx::pg_schema]
mod queen {
    use super::{checked_delete_group, checked_delete_queue, checked_renew, checked_seek};
    use crate::admin;
    use crate::error::OrReport;
    use crate::route::enter_shard;
    use pgrx::datum::TimestampWithTimeZone;
    use pgrx::prelude::*;
    use pgrx::Uuid;

    /// `queen.shard_renew(shard, lease_id, seconds, grants)`: `grants` those of the
    /// coordinator's caller, which the renew is checked against (privilege.rs acting_for).
    #[pg_extern(volatile, parallel_unsafe)]
    #[search_path(pg_catalog, pg_temp)]
    fn shard_renew(
        shard: i32,
        lease_id: Option<Uuid>,
        seconds: Option<i32>,
        grants: Option<Vec<String>>,
    ) -> Option<TimestampWithTimeZone> {
        const F: &str = "queen_renew";
        let lease_id = checked_renew(lease_id, seconds);
        enter_shard(shard).or_report(F);
        let renewed = crate::privilege::acting_for("queen.shard_renew", grants, || {
            crate::route::within_shard(shard, || admin::renew(lease_id, seconds))
        });
        renewed.and_then(|r| r).or_report(F)
    }

    /// `queen.shard_seek(shard, queue, consumer_group, to_time)`: the partitions set in the shard.
    #[pg_extern(volatile, parallel_unsafe)]
    #[search_path(pg_catalog, pg_temp)]
    fn shard_seek(
        shard: i32,
        queue: Option<&str>,
        consumer_group: Option<&str>,
        to_time: Option<TimestampWithTimeZone>,
    ) -> i32 {
        const F: &str = "queen_seek";
        let queue = checked_seek(queue, consumer_group);
        enter_shard(shard).or_report(F);
        crate::privilege::require_internal("queen.shard_seek").or_report(F);
        crate::route::within_shard(shard, || admin::seek(queue, consumer_group, to_time)).or_report(F)
    }

    /// `queen.shard_delete_group(shard, consumer_group, queue)`: the cursors removed in the shard.
    #[pg_extern(volatile, parallel_unsafe)]
    #[search_path(pg_catalog, pg_temp)]
    fn shard_delete_group(shard: i32, consumer_group: Option<&str>, queue: Option<&str>) -> i32 {
        const F: &str = "queen_delete_group";
        checked_delete_group(consumer_group, queue);
        enter_shard(shard).or_report(F);
        crate::privilege::require_internal("queen.shard_delete_group").or_report(F);
        crate::route::within_shard(shard, || admin::delete_group(consumer_group, queue)).or_report(F)
    }

    /// `queen.shard_delete_queue(shard, queue)`: the queue's rows of the shard deleted (the
    /// registry row is the coordinator's); whether there were any.
    #[pg_extern(volatile, parallel_unsafe)]
    #[search_path(pg_catalog, pg_temp)]
    fn shard_delete_queue(shard: i32, queue: Option<&str>) -> bool {
        const F: &str = "queen_delete_queue";
        let queue = checked_delete_queue(queue);
        enter_shard(shard).or_report(F);
        crate::privilege::require_internal("queen.shard_delete_queue").or_report(F);
        crate::route::within_shard(shard, || admin::delete_queue(queue)).or_report(F)
    }
}

/// `queen_message(partition_id, transaction_id)`: one message and each consumer group's state
/// of it (message.rs; Queen's message detail), or NULL when there is none the caller may read.
/// `RETURNS jsonb`.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_message(partition_id: Option<Uuid>, transaction_id: Option<&str>) -> Option<crate::jsonb::Jsonb> {
    const F: &str = "queen_message";
    let partition_id = partition_id.ok_or(QueenError::NullValue { argument: "partition_id" }).or_report(F);
    let transaction_id = transaction_id.ok_or(QueenError::NullValue { argument: "transaction_id" }).or_report(F);
    crate::message::detail(partition_id, transaction_id).or_report(F)
}
