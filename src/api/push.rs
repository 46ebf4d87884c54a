use crate::error::{OrReport, QueenError};
use crate::jsonb::Jsonb;
use crate::names;
use crate::push::{self, Payloads, PushItem, PushResult};
use pgrx::prelude::*;
use pgrx::Uuid;

type Rows = TableIterator<
    'static,
    (
        name!(idx, i32),
        name!(message_id, Uuid),
        name!(transaction_id, String),
        name!(queue, String),
        name!(partition, String),
        name!(partition_id, Uuid),
        name!(status, String),
    ),
>;

fn rows(results: Vec<PushResult>) -> Rows {
    TableIterator::new(results.into_iter().map(|r| {
        (r.idx, r.message_id, r.transaction_id, r.queue, r.partition, r.partition_id, r.status.as_str().to_string())
    }))
}

/// `queen_push(queue, payload, partition, transaction_id, trace_id)`: SPEC §3.1, one message.
// The result columns are spelled out in each signature: pgrx generates the SQL `RETURNS TABLE`
// from the signature itself and cannot see through a type alias.
#[pg_extern(name = "queen_push", volatile, parallel_unsafe)]
fn queen_push_one(
    queue: Option<&str>,
    payload: Option<Jsonb>,
    partition: default!(Option<&str>, "'Default'"),
    transaction_id: default!(Option<&str>, "NULL"),
    trace_id: default!(Option<Uuid>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(idx, i32),
        name!(message_id, Uuid),
        name!(transaction_id, String),
        name!(queue, String),
        name!(partition, String),
        name!(partition_id, Uuid),
        name!(status, String),
    ),
> {
    const F: &str = "queen_push";
    let queue = names::check_name("queue", "argument \"queue\"", queue).or_report(F);
    // JSON null is a payload; SQL NULL is not.
    let payload = payload.ok_or(QueenError::NullValue { argument: "payload" }).or_report(F);
    let partition = names::check_name("partition", "argument \"partition\"", partition).or_report(F);
    if let Some(t) = transaction_id {
        push::check_transaction_id("argument \"transaction_id\"", t).or_report(F);
    }
    let item = PushItem {
        queue: queue.to_string(),
        partition: partition.to_string(),
        transaction_id: transaction_id.map(str::to_string),
        trace_id: trace_id.map(names::from_pg),
    };
    rows(push::push(vec![item], Payloads::One(payload)).or_report(F))
}

/// `queen_push(items)`: SPEC §3.1, a batch in Queen's wire shape; one result per item, in order.
#[pg_extern(name = "queen_push", volatile, parallel_unsafe)]
fn queen_push_batch(
    items: Option<Jsonb>,
) -> TableIterator<
    'static,
    (
        name!(idx, i32),
        name!(message_id, Uuid),
        name!(transaction_id, String),
        name!(queue, String),
        name!(partition, String),
        name!(partition_id, Uuid),
        name!(status, String),
    ),
> {
    const F: &str = "queen_push";
    let items = items.ok_or(QueenError::NullValue { argument: "items" }).or_report(F);
    let parsed = push::parse_items(&items.to_value()).or_report(F);
    rows(push::push(parsed, Payloads::Items(items)).or_report(F))
}
