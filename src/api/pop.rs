use crate::api::rows::MessageRow;
use crate::error::OrReport;
use crate::names;
use crate::pop::{self, PopRequest};
use crate::privilege::{self, Privilege};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;

/// `queen_pop(...)`: SPEC §3.2. Claims partitions for the group and returns their next messages;
/// `RETURNS SETOF queen.message`.
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
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
) -> SetOfIterator<'static, MessageRow> {
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
    privilege::require(&[queue], Privilege::Pop).or_report(F);
    let req = PopRequest {
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
    };
    let rows = pop::pop(&req).or_report(F);
    SetOfIterator::new(rows.into_iter().map(|m| MessageRow {
        message_id: m.message_id,
        transaction_id: m.transaction_id,
        queue: m.queue,
        partition: m.partition,
        partition_id: m.partition_id,
        payload: m.payload,
        trace_id: m.trace_id,
        created_at: m.created_at,
        consumer_group: m.consumer_group,
        lease_id: m.lease_id,
        lease_expires_at: m.lease_expires_at,
        attempt: m.attempt,
    }))
}
