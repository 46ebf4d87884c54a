use crate::api::rows::SetOfIterator;
use crate::error::{OrReport, QueenError};
use crate::jsonb::Jsonb;
use crate::names;
use crate::privilege::{self, Privilege};
use crate::push::{self, Payloads, PushItem, PushResult};
use crate::route;
use pgrx::prelude::*;
use pgrx::Uuid;

/// `queen_push(queue, payload, partition, transaction_id, trace_id)`: semantics §3.1, one message;
/// `RETURNS queen.push_result`.
/// (Under queen's search_path without a SET clause, once SQL needs it: gucs::with_fixed_search_path.)
#[pg_extern(name = "queen_push", volatile, parallel_unsafe)]
fn queen_push_one(
    queue: Option<&str>,
    payload: Option<Jsonb>,
    partition: default!(Option<&str>, "'Default'"),
    transaction_id: default!(Option<&str>, "NULL"),
    trace_id: default!(Option<Uuid>, "NULL"),
) -> PushResult {
    const F: &str = "queen_push";
    crate::gucs::with_fixed_search_path(|| {
        let (item, payload) = checked_one(queue, payload, partition, transaction_id, trace_id);
        // On Citus, the layout first: the plans of what follows are made for it (shards.rs).
        let distributed = route::distributed();
        privilege::require(&[&item.queue], Privilege::Push).or_report(F);
        if let Some(layout) = distributed {
            return route::push_one(&layout, item, payload).or_report(F);
        }
        let mut results = push::push(vec![item], Payloads::One(payload), None).or_report(F);
        results.pop().expect("queen: one result per item")
    })
}

/// `queen_push(items)`: semantics §3.1, a batch in Queen's wire shape; one result per item, in
/// order; `RETURNS SETOF queen.push_result`. The items are read from the binary jsonb (the
/// payloads go to the table as they are), so any valid jsonb payload is accepted (semantics §10).
/// (Under queen's search_path without a SET clause: gucs::with_fixed_search_path.)
#[pg_extern(name = "queen_push", volatile, parallel_unsafe)]
fn queen_push_batch(items: Option<Jsonb>) -> SetOfIterator<'static, PushResult> {
    const F: &str = "queen_push";
    let results = crate::gucs::with_fixed_search_path(|| {
        let (parsed, items) = checked_items(items);
        let distributed = route::distributed();
        require_push(&parsed);
        match distributed {
            Some(layout) if !parsed.is_empty() => route::push_batch(&layout, parsed, items),
            _ => push::push(parsed, Payloads::Items(items), None),
        }
        .or_report(F)
    });
    SetOfIterator::new(results)
}

/// The arguments of the one-message form, checked (semantics §3.1, §7).
fn checked_one(
    queue: Option<&str>,
    payload: Option<Jsonb>,
    partition: Option<&str>,
    transaction_id: Option<&str>,
    trace_id: Option<Uuid>,
) -> (PushItem, Jsonb) {
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
    (item, payload)
}

/// The items argument of the batch form, read and checked.
fn checked_items(items: Option<Jsonb>) -> (Vec<PushItem>, Jsonb) {
    const F: &str = "queen_push";
    let items = items.ok_or(QueenError::NullValue { argument: "items" }).or_report(F);
    let elements = items.elements(push::ITEM_KEYS).map_err(push::not_an_array).or_report(F);
    (push::parse_items(&elements).or_report(F), items)
}

fn require_push(items: &[PushItem]) {
    let mut queues: Vec<&str> = items.iter().map(|i| i.queue.as_str()).collect();
    queues.sort_unstable();
    queues.dedup();
    privilege::require(&queues, Privilege::Push).or_report("queen_push");
}

/// The worker's side of a push on Citus (route.rs): internal, in schema `queen`, made
/// distributed functions by `queen_distribute()`. They check the caller's grants as
/// `queen_push` does (a role may call them by hand) and that every item belongs to `shard`.
#[pgrx::pg_schema]
mod queen {
    use super::{checked_items, checked_one};
    use crate::api::rows::SetOfIterator;
    use crate::error::OrReport;
    use crate::jsonb::Jsonb;
    use crate::push::PushResult;
    use crate::push::{self, Payloads};
    use pgrx::prelude::*;
    use pgrx::Uuid;

    /// `queen.shard_push_one(shard, queue, payload, partition, transaction_id, trace_id)`.
    #[pg_extern(volatile, parallel_unsafe)]
    #[search_path(pg_catalog, pg_temp)]
    fn shard_push_one(
        shard: i32,
        queue: Option<&str>,
        payload: Option<Jsonb>,
        partition: Option<&str>,
        transaction_id: Option<&str>,
        trace_id: Option<Uuid>,
    ) -> PushResult {
        const F: &str = "queen_push";
        let (item, payload) = checked_one(queue, payload, partition, transaction_id, trace_id);
        let items = vec![item];
        crate::session::connect(|s| crate::route::check_shard(s, shard, &items)).or_report(F);
        crate::privilege::require_internal("queen.shard_push_one").or_report(F);
        let mut results =
            crate::route::within_shard(shard, || push::push(items, Payloads::One(payload), Some(shard))).or_report(F);
        results.pop().expect("queen: one result per item")
    }

    /// `queen.shard_push(shard, items)`: items all of shard `shard`.
    #[pg_extern(volatile, parallel_unsafe)]
    fn shard_push(shard: i32, items: Option<Jsonb>) -> SetOfIterator<'static, PushResult> {
        const F: &str = "queen_push";
        let results = crate::gucs::with_fixed_search_path(|| {
            let (parsed, items) = checked_items(items);
            crate::session::connect(|s| crate::route::check_shard(s, shard, &parsed)).or_report(F);
            crate::privilege::require_internal("queen.shard_push").or_report(F);
            crate::route::within_shard(shard, || push::push(parsed, Payloads::Items(items), Some(shard))).or_report(F)
        });
        SetOfIterator::new(results)
    }
}
