//! The views' answers for the whole cluster on Citus (docs/scale-out.md, "Views"):
//! `queue_stats`, `group_lag` and `dead_letters_view` read each shard with a statement of its
//! own, which Citus runs on that shard's worker alone (`sql/queries/totals.sql`), and the
//! coordinator adds the shards up. `queen_distribute()` makes the three views read these (a
//! view over distributed tables would have the workers check the caller's privileges on
//! queen's closed tables). Only the rows of queues the caller may `read` come back, as the
//! views filter them on one server.

use crate::jsonb::Jsonb;
use crate::privilege::{self, Privilege};
use crate::spi::types::INT4;
use crate::spi::{Query, Row, Spi};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::{pg_sys, Uuid};
use std::collections::{BTreeMap, BTreeSet, HashMap};

const SQL: &str = include_str!("../sql/queries/totals.sql");
const QUEUE_NAMES: Query = Query { file: SQL, name: "queue_names", args: &[] };
const QUEUE_STATS: Query = Query { file: SQL, name: "per_shard_queue_stats", args: &[INT4] };
const GROUP_LAG: Query = Query { file: SQL, name: "per_shard_group_lag", args: &[INT4] };
const DEAD_LETTERS: Query = Query { file: SQL, name: "per_shard_dead_letters", args: &[INT4] };

/// A row of `queen.queue_stats`.
pub struct QueueStats {
    pub queue: String,
    pub partitions: i64,
    pub messages: i64,
    pub consumer_groups: i64,
    pub dead_letters: i64,
    pub oldest_message: Option<TimestampWithTimeZone>,
    pub newest_message: Option<TimestampWithTimeZone>,
}

/// A row of `queen.group_lag`.
pub struct Lag {
    pub queue: String,
    pub consumer_group: Option<String>,
    pub partition: String,
    pub pending: i64,
    pub oldest_pending: Option<TimestampWithTimeZone>,
    pub lease_id: Option<Uuid>,
    pub lease_expires_at: Option<TimestampWithTimeZone>,
}

/// A row of `queen.dead_letters_view`.
pub struct DeadLetter {
    pub queue: String,
    pub partition: Option<String>,
    pub consumer_group: Option<String>,
    pub message_id: Uuid,
    pub transaction_id: String,
    pub payload: Option<Jsonb>,
    pub error: Option<String>,
    pub attempts: i32,
    pub created_at: Option<TimestampWithTimeZone>,
    pub failed_at: TimestampWithTimeZone,
    pub partition_id: Uuid,
    pub trace_id: Option<Uuid>,
}

/// The queues the caller may read, by id, with their names (its grants read once).
fn readable(s: &mut Spi, role: pg_sys::Oid) -> HashMap<Uuid, String> {
    let held = privilege::holdings(s, role);
    let names: Vec<(Uuid, String)> = QUEUE_NAMES.run(s, &[]).map(|r| (r.req("queue_id"), r.req("name"))).collect();
    names.into_iter().filter(|(_, name)| held.allows(name, Privilege::Read)).collect()
}

/// Each shard's rows of `query`, the shard keys in order.
fn per_shard(s: &mut Spi, query: &Query, mut each: impl FnMut(&Row)) {
    for k in crate::shards::layout(s).keys {
        for row in query.run(s, &[k.into()]) {
            each(&row);
        }
    }
}

fn micros(t: TimestampWithTimeZone) -> i64 {
    pg_sys::TimestampTz::from(t)
}

/// `queue_stats` over every shard: a queue's partitions, messages and dead letters summed, its
/// groups counted once however many shards they are subscribed in, its oldest and newest
/// message the earliest and latest of the shards'. Queues without a row in any shard (a
/// registry row alone) count zero, as on one server.
pub fn queue_stats() -> Vec<QueueStats> {
    let role = privilege::caller();
    crate::session::connect(|s| {
        let names = readable(s, role);
        let mut by_queue: BTreeMap<String, (QueueStats, BTreeSet<String>)> = names
            .values()
            .map(|n| {
                let empty = QueueStats {
                    queue: n.clone(),
                    partitions: 0,
                    messages: 0,
                    consumer_groups: 0,
                    dead_letters: 0,
                    oldest_message: None,
                    newest_message: None,
                };
                (n.clone(), (empty, BTreeSet::new()))
            })
            .collect();
        per_shard(s, &QUEUE_STATS, |r| {
            let Some(name) = names.get(&r.req::<Uuid>("queue_id")) else { return };
            let (q, groups) = by_queue.get_mut(name).expect("queen: every readable queue has an entry");
            q.partitions += r.req::<i64>("partitions");
            q.messages += r.req::<i64>("messages");
            q.dead_letters += r.req::<i64>("dead_letters");
            groups.extend(r.get::<Vec<String>>("groups").unwrap_or_default());
            if let Some(t) = r.get::<TimestampWithTimeZone>("oldest_message") {
                if q.oldest_message.is_none_or(|o| micros(t) < micros(o)) {
                    q.oldest_message = Some(t);
                }
            }
            if let Some(t) = r.get::<TimestampWithTimeZone>("newest_message") {
                if q.newest_message.is_none_or(|n| micros(t) > micros(n)) {
                    q.newest_message = Some(t);
                }
            }
        });
        by_queue
            .into_values()
            .map(|(mut q, groups)| {
                q.consumer_groups = groups.len() as i64;
                q
            })
            .collect()
    })
}

/// `group_lag` over every shard: each partition's rows are its shard's.
pub fn group_lag() -> Vec<Lag> {
    let role = privilege::caller();
    crate::session::connect(|s| {
        let names = readable(s, role);
        let mut out = Vec::new();
        per_shard(s, &GROUP_LAG, |r| {
            let Some(name) = names.get(&r.req::<Uuid>("queue_id")) else { return };
            out.push(Lag {
                queue: name.clone(),
                consumer_group: r.get("consumer_group"),
                partition: r.req("partition"),
                pending: r.req("pending"),
                oldest_pending: r.get("oldest_pending"),
                lease_id: r.get("lease_id"),
                lease_expires_at: r.get("lease_expires_at"),
            });
        });
        out
    })
}

/// `dead_letters_view` over every shard.
pub fn dead_letters() -> Vec<DeadLetter> {
    let role = privilege::caller();
    crate::session::connect(|s| {
        let names = readable(s, role);
        let mut out = Vec::new();
        per_shard(s, &DEAD_LETTERS, |r| {
            let Some(name) = names.get(&r.req::<Uuid>("queue_id")) else { return };
            out.push(DeadLetter {
                queue: name.clone(),
                partition: r.get("partition"),
                consumer_group: r.get("consumer_group"),
                message_id: r.req("message_id"),
                transaction_id: r.req("transaction_id"),
                payload: r.transfer("payload", -1).map(Jsonb),
                error: r.get("error"),
                attempts: r.req("attempts"),
                created_at: r.get("created_at"),
                failed_at: r.req("failed_at"),
                partition_id: r.req("partition_id"),
                trace_id: r.get("trace_id"),
            });
        });
        out
    })
}
