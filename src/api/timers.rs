//! Timers (timers.rs, docs/api.md "Timers"): `queen_schedule`, `queen_cancel_timer`,
//! `queen_timers`.

use crate::api::rows::{TimerResultRow, TimerRow};
use crate::error::{OrReport, QueenError};
use crate::jsonb::Jsonb;
use crate::names;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use pgrx::Uuid;

/// `queen_schedule(queue, timer_key, payload, deliver_at, partition, transaction_id,
/// trace_id)`: a message pushed at `deliver_at`, kept by `timer_key` until then (scheduling
/// a pending key again replaces it), in the caller's transaction. `RETURNS queen.timer_result`;
/// `status` `'scheduled'` or `'rescheduled'`. Needs `push` on the queue.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_schedule(
    queue: Option<&str>,
    timer_key: Option<&str>,
    payload: Option<Jsonb>,
    deliver_at: Option<TimestampWithTimeZone>,
    partition: default!(Option<&str>, "'Default'"),
    transaction_id: default!(Option<&str>, "NULL"),
    trace_id: default!(Option<Uuid>, "NULL"),
) -> TimerResultRow {
    const F: &str = "queen_schedule";
    let queue = names::check_name("queue", "argument \"queue\"", queue).or_report(F);
    let key = timer_key.ok_or(QueenError::NullValue { argument: "timer_key" }).or_report(F);
    let payload = payload.ok_or(QueenError::NullValue { argument: "payload" }).or_report(F);
    let due = deliver_at.ok_or(QueenError::NullValue { argument: "deliver_at" }).or_report(F);
    let partition = names::check_name("partition", "argument \"partition\"", partition).or_report(F);
    let done = crate::timers::schedule(crate::timers::Schedule {
        queue,
        key,
        partition,
        payload,
        deliver_at: crate::state::micros(due),
        transaction_id,
        trace_id,
    })
    .or_report(F);
    TimerResultRow {
        queue: queue.to_string(),
        timer_key: key.to_string(),
        partition: partition.to_string(),
        message_id: done.message_id,
        transaction_id: done.transaction_id,
        deliver_at: done.deliver_at,
        status: if done.rescheduled { "rescheduled" } else { "scheduled" },
    }
}

/// `queen_cancel_timer(queue, timer_key)`: remove the pending timer of the key, in the
/// caller's transaction; false when none is pending (never scheduled, cancelled, or fired
/// already). Needs `push` on the queue.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_cancel_timer(queue: Option<&str>, timer_key: Option<&str>) -> bool {
    const F: &str = "queen_cancel_timer";
    let queue = names::check_name("queue", "argument \"queue\"", queue).or_report(F);
    let key = timer_key.ok_or(QueenError::NullValue { argument: "timer_key" }).or_report(F);
    crate::timers::cancel(queue, key).or_report(F).is_some()
}

/// `queen_timers(queue, timer_key, after_key, page)`: the pending timers of a queue — the one
/// of `timer_key`, or a page of `page` (default 100, at most 1000) in key order after
/// `after_key`. `RETURNS SETOF queen.timer`. Needs `read` on the queue.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_timers(
    queue: Option<&str>,
    timer_key: default!(Option<&str>, "NULL"),
    after_key: default!(Option<&str>, "NULL"),
    page: default!(Option<i32>, "NULL"),
) -> SetOfIterator<'static, TimerRow> {
    const F: &str = "queen_timers";
    let queue = names::check_name("queue", "argument \"queue\"", queue).or_report(F);
    let page = crate::timers::page_size("argument \"page\"", page.map(i64::from)).or_report(F);
    let rows = crate::timers::pending(queue, timer_key, after_key, page).or_report(F);
    SetOfIterator::new(rows.into_iter().map(|p| TimerRow {
        queue: p.queue,
        timer_key: p.key,
        partition: p.partition,
        payload: p.payload,
        transaction_id: p.transaction_id,
        // On Citus the message's id is minted when it fires.
        message_id: (!crate::shards::planning_for_citus()).then_some(p.message_id),
        trace_id: p.trace_id,
        deliver_at: p.deliver_at,
        scheduled_at: p.scheduled_at,
        attempts: p.attempts,
        last_error: p.last_error,
    }))
}
