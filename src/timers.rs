//! Timers (issue 24): a message scheduled for a time, kept by key until then, that can be
//! rescheduled or cancelled by that key — what pg-boss and River users schedule jobs with,
//! and what Queen MQ's `/api/v1/timers` offers.
//!
//! - `queen_schedule` writes a row of `queen.timers` in the caller's transaction: it commits or
//!   rolls back with the caller's other writes (a timer scheduled with an ack exists only if
//!   the ack committed). Scheduling a key that is pending replaces it whole (a rescheduled
//!   timer is a new timer under an old name: new message id, attempts from zero).
//! - When it is due, the timer *fires*: its row is removed and its message pushed, in one
//!   transaction — the maintenance worker does it (worker.rs wakes at the earliest due time,
//!   and a commit that schedules an earlier one wakes it), and so does every maintenance pass
//!   (`queen_maintain()`, for servers without the worker). The message is an ordinary push:
//!   it takes its place in its partition when it fires, not when it was scheduled, and a
//!   transaction id already in the partition makes it a duplicate (nothing stored).
//! - A timer that the transaction changing it holds (an open reschedule or cancel) is left for
//!   the next firing: a cancel that commits wins, one that rolls back leaves it to fire.
//!   `cancel` answers false when no timer of the key is pending — it may have fired already.
//! - A timer whose message cannot be pushed (its queue at `maxSize`) stays pending, tried
//!   again after a backoff ([`backoff`]), with its attempts and the error kept; the other
//!   timers of the same firing are not held back.
//!
//! The rules are plain Rust, table-tested below; [`fire_due`] and the calls read and write rows.

use crate::error::{shorten, QueenError, QueenResult};
use crate::jsonb::Jsonb;
use crate::names::{self, from_pg, to_pg};
use crate::privilege::{self, Privilege};
use crate::push::{self, Payloads};
use crate::spi::types::{INT8, INT8S, JSONB, OID, TEXT, TSTZ, UUID, UUIDS};
use crate::spi::{Query, Row};
use crate::state::{self, Micros};
use pgrx::datum::{DatumWithOid, TimestampWithTimeZone};
use pgrx::Uuid;

const SQL: &str = include_str!("../sql/queries/timers.sql");
const UPSERT: Query =
    Query { file: SQL, name: "timer_upsert", args: &[UUID, TEXT, TEXT, TEXT, JSONB, TEXT, UUID, UUID, TSTZ, OID] };
const CANCEL: Query = Query { file: SQL, name: "timer_cancel", args: &[UUID, TEXT] };
const GET: Query = Query { file: SQL, name: "timer_get", args: &[UUID, TEXT] };
const PAGE: Query = Query { file: SQL, name: "timer_page", args: &[UUID, TEXT, INT8] };
const DUE_QUEUES: Query = Query { file: SQL, name: "timers_due_queues", args: &[TSTZ, INT8, UUIDS] };
const REFUSED: Query = Query { file: SQL, name: "timers_refused", args: &[TSTZ, UUIDS, INT8S] };
const TAKE: Query = Query { file: SQL, name: "timers_take", args: &[TSTZ, INT8, UUIDS] };
const TAKE_ONE: Query = Query { file: SQL, name: "timer_take_one", args: &[UUID, TEXT, UUID] };
const FAILED: Query = Query { file: SQL, name: "timer_failed", args: &[UUID, TEXT, UUID, TEXT, TSTZ] };
const NEXT: Query = Query { file: SQL, name: "timers_next", args: &[] };

/// The longest timer key, in characters.
pub const MAX_KEY_CHARS: usize = 1024;
/// The largest payload a timer keeps until it fires, in bytes (stored form).
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;
/// How far from now a timer may be due, either way (100 years).
pub const MAX_DISTANCE_SECONDS: i64 = 100 * 365 * 86_400;
/// Timers listed per call by default, and at most.
pub const DEFAULT_PAGE: i64 = 100;
pub const MAX_PAGE: i64 = 1000;
/// Timers one firing takes at once.
pub const FIRE_CHUNK: i64 = 1000;
/// The longest wait before a timer whose push failed is tried again.
pub const MAX_BACKOFF_SECONDS: i64 = 300;
/// The longest a firing's push waits for anything a client's transaction holds (a message of
/// the same transaction id that transaction pushed, say), in milliseconds: then the timer is
/// tried again after its backoff, and the others fire.
pub const FIRE_WAIT_MS: i32 = 100;

/// How long after its `attempts`-th failed push a timer is tried again: 1 s, doubled per
/// failure, at most [`MAX_BACKOFF_SECONDS`].
pub fn backoff(attempts: i32) -> Micros {
    let exp = attempts.clamp(0, 16) as u32;
    (1i64 << exp).min(MAX_BACKOFF_SECONDS) * 1_000_000
}

/// Check a timer key (`what` names the argument).
pub fn check_key(what: &str, key: &str) -> QueenResult<()> {
    if key.is_empty() {
        return Err(QueenError::invalid(what, "must not be empty"));
    }
    let n = key.chars().count();
    if n > MAX_KEY_CHARS {
        return Err(QueenError::invalid(
            what,
            format!("is {n} characters long, the limit is {MAX_KEY_CHARS}: \"{}\"", shorten(key)),
        ));
    }
    Ok(())
}

/// Check a due time against the clock `now`.
pub fn check_due(what: &str, due: Micros, now: Micros) -> QueenResult<()> {
    if (due - now).abs() > MAX_DISTANCE_SECONDS * 1_000_000 {
        return Err(QueenError::invalid(what, format!("must be within {MAX_DISTANCE_SECONDS} seconds of now")));
    }
    Ok(())
}

/// The page size asked for, checked (None: the default).
pub fn page_size(what: &str, page: Option<i64>) -> QueenResult<i64> {
    match page {
        None => Ok(DEFAULT_PAGE),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(n) => Err(QueenError::invalid(what, format!("must be from 1 to {MAX_PAGE}, got {n}"))),
    }
}

/// A timer to schedule, its arguments checked by [`schedule`].
pub struct Schedule<'a> {
    pub queue: &'a str,
    pub key: &'a str,
    pub partition: &'a str,
    pub payload: Jsonb,
    pub deliver_at: Micros,
    pub transaction_id: Option<&'a str>,
    pub trace_id: Option<Uuid>,
}

/// What `schedule` did.
pub struct Scheduled {
    /// A timer of that key was pending and is replaced.
    pub rescheduled: bool,
    /// The id its message will have (None on Citus: the worker that stores it mints one).
    pub message_id: Option<Uuid>,
    pub transaction_id: String,
    pub deliver_at: TimestampWithTimeZone,
}

/// Schedule (or reschedule) a timer in the caller's transaction. Needs `push` on the queue.
pub fn schedule(t: Schedule<'_>) -> QueenResult<Scheduled> {
    check_key("argument \"timer_key\"", t.key)?;
    if let Some(id) = t.transaction_id {
        push::check_transaction_id("argument \"transaction_id\"", id)?;
    }
    let size = t.payload.size();
    if size > MAX_PAYLOAD_BYTES {
        return Err(QueenError::invalid(
            "argument \"payload\"",
            format!("is {size} bytes stored, the limit for a timer is {MAX_PAYLOAD_BYTES}"),
        ));
    }
    privilege::require(&[t.queue], Privilege::Push)?;
    let queue_id = to_pg(names::queue_id(t.queue));
    // As a push: a queen_delete_queue that is open is waited for, and one that comes later
    // waits for this transaction (and then removes the timer with the queue).
    crate::locks::writing(queue_id, Some(t.queue), None)?;
    let message_id = to_pg(crate::shards::new_message_id(None));
    // The role that schedules (read before connecting: queen's SQL runs as the owner), whose
    // `push` the firing checks.
    let role = privilege::caller();
    let done = crate::session::connect(|s| -> QueenResult<Scheduled> {
        check_due("argument \"deliver_at\"", t.deliver_at, state::now(s))?;
        let args: [DatumWithOid; 10] = [
            queue_id.into(),
            t.queue.into(),
            t.key.into(),
            t.partition.into(),
            t.payload.into(),
            t.transaction_id.into(),
            message_id.into(),
            t.trace_id.into(),
            state::timestamp(t.deliver_at).into(),
            role.into(),
        ];
        let r = UPSERT.run(s, &args).first();
        Ok(Scheduled {
            rescheduled: !r.req::<bool>("inserted"),
            message_id: (!crate::shards::planning_for_citus()).then_some(message_id),
            transaction_id: r.req("transaction_id"),
            deliver_at: r.req("deliver_at"),
        })
    })?;
    crate::timer_wake::scheduled(t.deliver_at);
    Ok(done)
}

/// Cancel the pending timer of `key` in `queue`: its transaction id, or None when none is
/// pending (never scheduled, cancelled, or fired already). Needs `push` on the queue.
pub fn cancel(queue: &str, key: &str) -> QueenResult<Option<String>> {
    check_key("argument \"timer_key\"", key)?;
    privilege::require(&[queue], Privilege::Push)?;
    let queue_id = to_pg(names::queue_id(queue));
    crate::locks::writing(queue_id, Some(queue), None)?;
    Ok(crate::session::connect(|s| {
        CANCEL.run(s, &[queue_id.into(), key.into()]).next().map(|r| r.req("transaction_id"))
    }))
}

/// A pending timer as listed.
pub struct Pending {
    pub queue: String,
    pub key: String,
    pub partition: String,
    /// The payload as stored (never parsed: any jsonb comes back as it went in).
    pub payload: Jsonb,
    pub transaction_id: String,
    pub message_id: Uuid,
    pub trace_id: Option<Uuid>,
    pub deliver_at: TimestampWithTimeZone,
    pub scheduled_at: TimestampWithTimeZone,
    pub attempts: i32,
    pub last_error: Option<String>,
}

impl Pending {
    fn from_row(r: &Row<'_>) -> Pending {
        Pending {
            queue: r.req("queue"),
            key: r.req("timer_key"),
            partition: r.req("partition"),
            payload: Jsonb(r.transfer("payload", -1).expect("queen: a timer's payload is not NULL")),
            transaction_id: r.req("transaction_id"),
            message_id: r.req("message_id"),
            trace_id: r.get("trace_id"),
            deliver_at: r.req("deliver_at"),
            scheduled_at: r.req("scheduled_at"),
            attempts: r.req("attempts"),
            last_error: r.get("last_error"),
        }
    }
}

/// The pending timers of `queue`: the one of `key`, or a page of `page` in key order after
/// `after` (exclusive). Needs `read` on the queue.
pub fn pending(queue: &str, key: Option<&str>, after: Option<&str>, page: i64) -> QueenResult<Vec<Pending>> {
    if let Some(k) = key {
        check_key("argument \"timer_key\"", k)?;
    }
    if let Some(a) = after {
        check_key("argument \"after_key\"", a)?;
    }
    privilege::require(&[queue], Privilege::Read)?;
    let queue_id = to_pg(names::queue_id(queue));
    Ok(crate::session::connect(|s| match key {
        Some(k) => GET.run(s, &[queue_id.into(), k.into()]).map(|r| Pending::from_row(&r)).collect(),
        None => {
            let args: [DatumWithOid; 3] = [queue_id.into(), after.unwrap_or("").into(), page.into()];
            PAGE.run(s, &args).map(|r| Pending::from_row(&r)).collect()
        }
    }))
}

/// What a firing did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fired {
    /// Timers whose message was pushed (or was a duplicate of one in its partition).
    pub fired: i64,
    /// Timers whose push failed: tried again after their backoff.
    pub retried: i64,
    /// Timers were due past the chunk: call again.
    pub more: bool,
    /// Queues whose due timers were left for later: a delete of the queue held its lock.
    pub deferred_queues: i64,
    /// Timers removed unfired: the role that scheduled them may no longer push to their queue.
    pub cancelled: i64,
}

/// Fire up to `limit` timers due at `now`, in the caller's transaction: each chunk's pushes in
/// a subtransaction; when that fails, timer by timer, so that one that cannot be pushed is
/// tried again later and the others fire.
///
/// Never waits for a client: the shared lock of each timer's queue (locks.rs) is taken first,
/// as every call that writes a queue takes it, and without waiting — a queue whose delete
/// holds it is added to `shut` and left out (of this and of the caller's next firings, which
/// pass `shut` again), so that one queue's delete never holds back another queue's timers;
/// and a push waits at most [`FIRE_WAIT_MS`] for a row a client holds.
pub fn fire_due(now: Micros, limit: i64, shut: &mut Vec<Uuid>) -> Fired {
    let at = state::timestamp(now);
    let deferred_before = shut.len();
    // The queues of the next chunk whose locks are taken (held until the caller's transaction
    // ends: taken outside the subtransactions below, whose rollback would release them), with
    // the roles that scheduled their due timers.
    let (open, due) = loop {
        let args: [DatumWithOid; 3] = [at.into(), limit.into(), shut.clone().into()];
        let due: Vec<(Uuid, String, pgrx::pg_sys::Oid)> = crate::session::connect(|s| {
            DUE_QUEUES.run(s, &args).map(|r| (r.req("queue_id"), r.req("queue"), r.req("scheduled_by"))).collect()
        });
        if due.is_empty() {
            return Fired { deferred_queues: (shut.len() - deferred_before) as i64, ..Fired::default() };
        }
        let mut queues: Vec<Uuid> = due.iter().map(|d| d.0).collect();
        queues.sort_unstable_by_key(|q| *q.as_bytes());
        queues.dedup();
        let (open, closed): (Vec<Uuid>, Vec<Uuid>) =
            queues.into_iter().partition(|q| crate::locks::try_writing(*q, None));
        shut.extend(closed);
        if !open.is_empty() {
            break (open, due);
        }
    };
    let deferred_queues = (shut.len() - deferred_before) as i64;
    let cancelled = cancel_refused(at, &open, &due);
    // The timers taken: queue, key, message id, attempts so far.
    let mut taken: Vec<(Uuid, String, Uuid, i32)> = Vec::new();
    let whole = crate::subxact::attempt(|| {
        crate::session::connect(|s| -> QueenResult<i64> {
            let args: [DatumWithOid; 3] = [at.into(), limit.into(), open.clone().into()];
            let r = TAKE.run(s, &args).first();
            let n = r.req::<i64>("taken");
            if n == 0 {
                return Ok(0);
            }
            let ids: Vec<Uuid> = r.req("message_ids");
            let queues: Vec<Uuid> = r.req("queue_ids");
            let keys: Vec<String> = r.req("timer_keys");
            let attempts: Vec<i32> = r.req("attempts");
            taken = queues
                .into_iter()
                .zip(keys)
                .zip(ids.iter().copied())
                .zip(attempts)
                .map(|(((q, k), m), a)| (q, k, m, a))
                .collect();
            push_items(r.req::<Jsonb>("items"), ids)?;
            Ok(n)
        })
    });
    match whole {
        Ok(n) => Fired { fired: n, retried: 0, more: n >= limit || cancelled > 0, deferred_queues, cancelled },
        Err(_) => {
            let mut out = Fired { more: taken.len() as i64 >= limit, deferred_queues, cancelled, ..Fired::default() };
            for (queue_id, key, message_id, attempts) in &taken {
                let one = crate::subxact::attempt(|| {
                    crate::session::connect(|s| -> QueenResult<bool> {
                        let args: [DatumWithOid; 3] = [(*queue_id).into(), key.as_str().into(), (*message_id).into()];
                        let Some(r) = TAKE_ONE.run(s, &args).next() else {
                            return Ok(false); // changed or gone meanwhile
                        };
                        push_items(r.req::<Jsonb>("items"), vec![*message_id])?;
                        Ok(true)
                    })
                });
                match one {
                    Ok(true) => out.fired += 1,
                    Ok(false) => {}
                    Err(why) => {
                        out.retried += 1;
                        // (A timer rescheduled meanwhile has another message id: left as it is.)
                        crate::session::connect(|s| {
                            let args: [DatumWithOid; 5] = [
                                (*queue_id).into(),
                                key.as_str().into(),
                                (*message_id).into(),
                                shorten(&why).into(),
                                state::timestamp(now + backoff(*attempts)).into(),
                            ];
                            FAILED.run(s, &args);
                        });
                    }
                }
            }
            out
        }
    }
}

/// Remove, unfired, the due timers of the `open` queues (of `due`: queue, name, the role that
/// scheduled) whose role may no longer push to their queue (semantics §3.4: a timer pushes
/// what its scheduler may push, when it fires); each is named in the server's log. How many.
fn cancel_refused(at: TimestampWithTimeZone, open: &[Uuid], due: &[(Uuid, String, pgrx::pg_sys::Oid)]) -> i64 {
    crate::session::connect(|s| {
        let (mut queues, mut roles): (Vec<Uuid>, Vec<i64>) = (Vec::new(), Vec::new());
        for (q, name, role) in due {
            // (0: scheduled before the role was kept, fired as it was.)
            if open.contains(q)
                && *role != pgrx::pg_sys::Oid::INVALID
                && !privilege::allowed(s, *role, name, Privilege::Push)
            {
                queues.push(*q);
                roles.push(role.to_u32() as i64);
            }
        }
        if queues.is_empty() {
            return 0;
        }
        let args: [DatumWithOid; 3] = [at.into(), queues.into(), roles.into()];
        let gone: Vec<String> = REFUSED.run(s, &args).map(|r| r.req("what")).collect();
        for what in &gone {
            pgrx::log!(
                "queen: timer {what} cancelled unfired: the role that scheduled it may no longer push to its queue"
            );
        }
        gone.len() as i64
    })
}

/// Push a firing's items (Queen's wire shape) with the message ids their timers promised (on
/// Citus, where a worker mints a message's id, with new ones), waiting at most
/// [`FIRE_WAIT_MS`] (or the caller's shorter `lock_timeout`) for a lock a client holds.
fn push_items(items: Jsonb, ids: Vec<Uuid>) -> QueenResult<()> {
    let elements = items.elements(push::ITEM_KEYS).map_err(push::not_an_array)?;
    let parsed = push::parse_items(&elements)?;
    // SAFETY: a plain read of the backend's own setting.
    let theirs = unsafe { pgrx::pg_sys::LockTimeout };
    let bound = if theirs > 0 { theirs.min(FIRE_WAIT_MS) } else { FIRE_WAIT_MS };
    let ms = std::ffi::CString::new(bound.to_string()).expect("a number has no NUL");
    // Ok(Err(e)): the push failed; Err(()): it waited for a lock as long as it may.
    let pushed: Result<QueenResult<()>, ()> = crate::gucs::with_settings(&[(c"lock_timeout", ms.as_c_str())], || {
        pgrx::PgTryBuilder::new(std::panic::AssertUnwindSafe(|| {
            Ok(match crate::route::distributed() {
                Some(layout) => crate::route::push_batch(&layout, parsed, items).map(|_| ()),
                None => push::push_with_ids(parsed, Payloads::Items(items), ids.into_iter().map(from_pg).collect())
                    .map(|_| ()),
            })
        }))
        // (Nothing runs between the catch and the caller's rollback of the subtransaction.)
        .catch_when(pgrx::PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, |_| Err(()))
        .execute()
    });
    pushed.unwrap_or_else(|()| {
        Err(QueenError::LockWait {
            what: "what an open transaction holds (a message of the same transaction id in the partition, say)"
                .to_string(),
            ms: bound,
        })
    })
}

/// When the earliest pending timer is due (None: none is).
pub fn next_due() -> Option<Micros> {
    crate::session::connect(|s| NEXT.run(s, &[]).first().get::<TimestampWithTimeZone>("next_due").map(state::micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_bound() {
        let table = [(0, 1), (1, 2), (2, 4), (5, 32), (8, 256), (9, 300), (40, 300), (-3, 1)];
        for (attempts, seconds) in table {
            assert_eq!(backoff(attempts), seconds * 1_000_000, "attempts {attempts}");
        }
    }

    #[test]
    fn keys_are_bounded() {
        assert!(check_key("k", "a").is_ok());
        assert!(check_key("k", &"é".repeat(MAX_KEY_CHARS)).is_ok());
        let long = check_key("k", &"x".repeat(MAX_KEY_CHARS + 1)).unwrap_err().to_string();
        assert!(long.contains("1025 characters") && long.contains("limit is 1024"), "{long}");
        assert!(check_key("k", "").unwrap_err().to_string().contains("must not be empty"));
    }

    #[test]
    fn due_times_are_bounded_both_ways() {
        let now = 1_000_000_000_000;
        let year = 365 * 86_400 * 1_000_000i64;
        for (due, ok) in [
            (now, true),
            (now - 1, true),
            (now + 99 * year, true),
            (now + 101 * year, false),
            (now - 101 * year, false),
        ] {
            assert_eq!(check_due("d", due, now).is_ok(), ok, "due {due}");
        }
    }

    #[test]
    fn pages_are_bounded() {
        assert_eq!(page_size("p", None).unwrap(), DEFAULT_PAGE);
        assert_eq!(page_size("p", Some(1)).unwrap(), 1);
        assert_eq!(page_size("p", Some(MAX_PAGE)).unwrap(), MAX_PAGE);
        assert!(page_size("p", Some(0)).is_err());
        assert!(page_size("p", Some(MAX_PAGE + 1)).is_err());
    }
}
