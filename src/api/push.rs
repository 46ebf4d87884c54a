use crate::api::rows::PushRow;
use crate::error::{OrReport, QueenError};
use crate::jsonb::Jsonb;
use crate::names;
use crate::privilege::{self, Privilege};
use crate::push::{self, Payloads, PushItem, PushResult};
use pgrx::prelude::*;
use pgrx::Uuid;

fn row(r: PushResult) -> PushRow {
    PushRow {
        idx: r.idx,
        message_id: r.message_id,
        transaction_id: r.transaction_id,
        queue: r.queue,
        partition: r.partition,
        partition_id: r.partition_id,
        status: r.status.as_str(),
    }
}

/// `queen_push(queue, payload, partition, transaction_id, trace_id)`: SPEC §3.1, one message;
/// `RETURNS queen.push_result`.
#[pg_extern(name = "queen_push", volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_push_one(
    queue: Option<&str>,
    payload: Option<Jsonb>,
    partition: default!(Option<&str>, "'Default'"),
    transaction_id: default!(Option<&str>, "NULL"),
    trace_id: default!(Option<Uuid>, "NULL"),
) -> PushRow {
    const F: &str = "queen_push";
    let queue = names::check_name("queue", "argument \"queue\"", queue).or_report(F);
    // JSON null is a payload; SQL NULL is not.
    let payload = payload.ok_or(QueenError::NullValue { argument: "payload" }).or_report(F);
    let partition = names::check_name("partition", "argument \"partition\"", partition).or_report(F);
    if let Some(t) = transaction_id {
        push::check_transaction_id("argument \"transaction_id\"", t).or_report(F);
    }
    privilege::require(&[queue], Privilege::Push).or_report(F);
    let item = PushItem {
        queue: queue.to_string(),
        partition: partition.to_string(),
        transaction_id: transaction_id.map(str::to_string),
        trace_id: trace_id.map(names::from_pg),
    };
    let mut results = push::push(vec![item], Payloads::One(payload)).or_report(F);
    row(results.pop().expect("queen: one result per item"))
}

/// `queen_push(items)`: SPEC §3.1, a batch in Queen's wire shape; one result per item, in
/// order; `RETURNS SETOF queen.push_result`. The items are read from the binary jsonb (the
/// payloads go to the table as they are), so any valid jsonb payload is accepted (SPEC §10).
#[pg_extern(name = "queen_push", volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_push_batch(items: Option<Jsonb>) -> SetOfIterator<'static, PushRow> {
    const F: &str = "queen_push";
    let items = items.ok_or(QueenError::NullValue { argument: "items" }).or_report(F);
    let elements = items.elements(push::ITEM_KEYS).map_err(push::not_an_array).or_report(F);
    let parsed = push::parse_items(&elements).or_report(F);
    let mut queues: Vec<&str> = parsed.iter().map(|i| i.queue.as_str()).collect();
    queues.sort_unstable();
    queues.dedup();
    privilege::require(&queues, Privilege::Push).or_report(F);
    SetOfIterator::new(push::push(parsed, Payloads::Items(items)).or_report(F).into_iter().map(row))
}
