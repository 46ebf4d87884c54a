use crate::api::rows::SetOfIterator;
use crate::error::OrReport;
use crate::names;
use crate::pop::{self, PopRequest, Popped};
use crate::privilege::{self, Privilege};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;

/// `queen_pop(...)`: semantics §3.2. Claims partitions for the group and returns their next messages;
/// `RETURNS SETOF queen.message`. (Under queen's search_path without a SET clause:
/// gucs::with_fixed_search_path.)
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe)]
fn queen_pop(
    queue: Option<&str>,
    consumer_group: default!(Option<&str>, "NULL"),
    batch: default!(Option<i32>, "1"),
    partition: default!(Option<&str>, "NULL"),
    partitions: default!(Option<i32>, "1"),
    wait_ms: default!(Option<i32>, "0"),
    lease_seconds: default!(Option<i32>, "NULL"),
    auto_ack: default!(Option<bool>, "false"),
    subscription_mode: default!(Option<&str>, "NULL"),
    subscription_from: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> SetOfIterator<'static, Popped> {
    const F: &str = "queen_pop";
    let rows = crate::gucs::with_fixed_search_path(|| {
        let req = checked_request(
            queue,
            consumer_group,
            batch,
            partition,
            partitions,
            wait_ms,
            lease_seconds,
            auto_ack,
            subscription_mode,
            subscription_from,
        );
        let distributed = crate::route::distributed();
        privilege::require(&[&req.queue], Privilege::Pop).or_report(F);
        match distributed {
            Some(layout) => pop::pop_with(&req, |r| crate::route::pop_on_workers(&layout, r)),
            None => pop::pop(&req),
        }
        .or_report(F)
    });
    SetOfIterator::new(rows)
}

/// The arguments of a pop, checked (semantics §3.2, §7).
#[allow(clippy::too_many_arguments)]
fn checked_request(
    queue: Option<&str>,
    consumer_group: Option<&str>,
    batch: Option<i32>,
    partition: Option<&str>,
    partitions: Option<i32>,
    wait_ms: Option<i32>,
    lease_seconds: Option<i32>,
    auto_ack: Option<bool>,
    subscription_mode: Option<&str>,
    subscription_from: Option<TimestampWithTimeZone>,
) -> PopRequest {
    const F: &str = "queen_pop";
    let queue = names::check_name("queue", "argument \"queue\"", queue).or_report(F);
    if let Some(g) = consumer_group {
        names::check_group("argument \"consumer_group\"", g).or_report(F);
    }
    if partition.is_some() {
        names::check_name("partition", "argument \"partition\"", partition).or_report(F);
    }
    let mode = pop::check(batch, partitions, wait_ms, lease_seconds, subscription_mode, subscription_from.is_some())
        .or_report(F);
    PopRequest {
        queue: queue.to_string(),
        group: consumer_group.map(str::to_string),
        batch: batch.unwrap_or(1),
        partition: partition.map(str::to_string),
        partitions: partitions.unwrap_or(1),
        wait_ms: wait_ms.unwrap_or(0),
        lease_seconds,
        auto_ack: auto_ack.unwrap_or(false),
        mode,
        from: subscription_from,
        lease: None,
        first: None,
    }
}

/// The worker's side of a pop on Citus (route.rs): internal, in schema `queen`, made a
/// distributed function by `queen_distribute()`. One attempt, without waiting (the
/// coordinator waits), in shard `shard`: of the partition named, which must belong to it, or of
/// the shard's partitions with work (discovery and hints are per shard); the caller's grant is
/// checked as `queen_pop` checks it.
#[pgrx::pg_schema]
mod queen {
    use super::checked_request;
    use crate::api::rows::SetOfIterator;
    use crate::error::{OrReport, QueenError};
    use crate::names;
    use crate::pop;
    use crate::pop::Popped;
    use crate::privilege;
    use pgrx::datum::TimestampWithTimeZone;
    use pgrx::prelude::*;

    #[allow(clippy::too_many_arguments)]
    #[pg_extern(volatile, parallel_unsafe)]
    fn shard_pop(
        shard: i32,
        queue: Option<&str>,
        consumer_group: Option<&str>,
        batch: Option<i32>,
        partition: Option<&str>,
        partitions: Option<i32>,
        lease_seconds: Option<i32>,
        auto_ack: Option<bool>,
        subscription_mode: Option<&str>,
        subscription_from: Option<TimestampWithTimeZone>,
        lease_id: Option<pgrx::Uuid>,
    ) -> SetOfIterator<'static, Popped> {
        // Checking the arguments runs no SQL; the rest runs under queen's search_path.
        let mut req = checked_request(
            queue,
            consumer_group,
            batch,
            partition,
            partitions,
            Some(0),
            lease_seconds,
            auto_ack,
            subscription_mode,
            subscription_from,
        );
        req.lease = lease_id;
        let rows = crate::gucs::with_fixed_search_path(|| shard_pop_rows(shard, &req));
        SetOfIterator::new(rows)
    }

    /// The rows of `shard_pop`, under the fixed search_path.
    fn shard_pop_rows(shard: i32, req: &crate::pop::PopRequest) -> Vec<crate::pop::Popped> {
        const F: &str = "queen_pop";
        crate::route::enter_shard(shard).or_report(F);
        if let Some(partition) = &req.partition {
            let layout = crate::session::connect(crate::shards::layout);
            let want = layout.key_of(names::partition_id(&names::queue_id(&req.queue), partition).as_bytes());
            if want != shard {
                QueenError::invalid(
                    "argument \"shard\"",
                    format!("is {shard}, but the partition has shard key {want}"),
                )
                .report(F);
            }
        }
        privilege::require_internal("queen.shard_pop").or_report(F);
        crate::route::within_shard(shard, || pop::pop_once(req)).or_report(F).rows
    }

    /// `queen.shard_subscribe(shard, queue, consumer_group, subscription_mode,
    /// subscription_from)`: the group's subscription in shard `shard`, made (with this worker's
    /// snapshot for `'new'`) if it has none there; false when the queue does not exist. The
    /// coordinator calls it for every shard before a group's first pop (route.rs).
    #[pg_extern(volatile, parallel_unsafe)]
    #[search_path(pg_catalog, pg_temp)]
    fn shard_subscribe(
        shard: i32,
        queue: Option<&str>,
        consumer_group: Option<&str>,
        subscription_mode: Option<&str>,
        subscription_from: Option<TimestampWithTimeZone>,
    ) -> bool {
        const F: &str = "queen_pop";
        let queue = names::check_name("queue", "argument \"queue\"", queue).or_report(F);
        let group = consumer_group.ok_or(QueenError::NullValue { argument: "consumer_group" }).or_report(F);
        names::check_group("argument \"consumer_group\"", group).or_report(F);
        let mode =
            pop::check(Some(1), Some(1), Some(0), None, subscription_mode, subscription_from.is_some()).or_report(F);
        crate::route::enter_shard(shard).or_report(F);
        privilege::require_internal("queen.shard_subscribe").or_report(F);
        let queue_id = crate::names::to_pg(names::queue_id(queue));
        crate::locks::writing(queue_id, Some(queue), Some(group)).or_report(F);
        crate::route::within_shard(shard, || {
            crate::session::connect(|s| crate::subscription::subscribe(s, queue_id, group, mode, subscription_from))
        })
        .or_report(F)
        .is_some()
    }
}
