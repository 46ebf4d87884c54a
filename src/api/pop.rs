use crate::error::OrReport;
use crate::jsonb::Jsonb;
use crate::names;
use crate::pop::{self, PopRequest};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use pgrx::Uuid;

/// `queen_pop(...)`: SPEC §3.2. Claims partitions for the group and returns their next messages.
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
) -> TableIterator<
    'static,
    (
        name!(message_id, Uuid),
        name!(transaction_id, String),
        name!(queue, String),
        name!(partition, String),
        name!(partition_id, Uuid),
        name!(payload, Jsonb),
        name!(trace_id, Option<Uuid>),
        name!(created_at, TimestampWithTimeZone),
        name!(consumer_group, Option<String>),
        name!(lease_id, Option<Uuid>),
        name!(lease_expires_at, Option<TimestampWithTimeZone>),
        name!(attempt, i32),
    ),
> {
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
    TableIterator::new(rows.into_iter().map(|m| {
        (
            m.message_id,
            m.transaction_id,
            m.queue,
            m.partition,
            m.partition_id,
            m.payload,
            m.trace_id,
            m.created_at,
            m.consumer_group,
            m.lease_id,
            m.lease_expires_at,
            m.attempt,
        )
    }))
}
