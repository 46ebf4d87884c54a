//! Maintenance (semantics §8): one pass over every queue of the database. `queen_maintain()` runs
//! it on demand; the background worker (worker.rs) runs it every `queen.maintenance_interval`.
//!
//! A pass, per queue: bring the message count of `queue_stats` up to date; delete messages
//! past `retentionSeconds`, and past `completedRetentionSeconds` once every subscribed group
//! has finished them; file messages unfinished after `maxWaitTimeSeconds` as dead letters.
//! Then, for the database: fold duplicate registry rows, remove
//! partitions that have been empty and idle for `queen.partition_idle_seconds`.

use crate::cursor::{Batch, Key};
use crate::discovery::{next_point, Point};
use crate::locks::{self, Lock, Mode};
use crate::max_wait;
use crate::spi::types::{FLOAT8, INT4, INT4S, INT8, INT8S, TEXT, TEXTS, TSTZ, UUID, UUIDS};
use crate::spi::{Query, Row, Spi};
use crate::state::{self};
use pgrx::datum::{DatumWithOid, TimestampWithTimeZone};
use pgrx::Uuid;
use serde_json::{json, Value};

const SQL: &str = include_str!("../sql/queries/maintain.sql");
const MAINTAIN_QUEUES: Query = Query { file: SQL, name: "maintain_queues", args: &[] };
const COUNT_SCAN: Query = Query { file: SQL, name: "count_scan", args: &[UUID, INT8, INT4] };
const COUNT_SAVE: Query = Query { file: SQL, name: "count_save", args: &[UUID, INT8, INT8, INT8S, INT8, INT4, TSTZ] };
const RETENTION: Query = Query { file: SQL, name: "retention", args: &[UUID, TSTZ, INT8, INT4, TSTZ] };
const COMPLETED_SUBSCRIPTIONS: Query = Query { file: SQL, name: "completed_subscriptions", args: &[UUID, INT4] };
pub const CITUS_COMPLETED_SUBSCRIPTIONS: Query =
    Query { file: SQL, name: "citus_completed_subscriptions", args: &[UUID, INT4] };
const COMPLETED_RETENTION: Query = Query {
    file: SQL,
    name: "completed_retention",
    args: &[UUID, TSTZ, INT8, INT4, TEXTS, TEXTS, INT8S, INT4S, INT8S],
};
const SUBTRACT_COUNTED: Query = Query { file: SQL, name: "subtract_counted", args: &[UUID, INT8, INT4] };
const RECORD_POINT: Query = Query { file: SQL, name: "record_point", args: &[FLOAT8] };
const MAX_WAIT_POINT: Query = Query { file: SQL, name: "max_wait_point", args: &[FLOAT8] };
const MAX_WAIT_CANDIDATES: Query =
    Query { file: SQL, name: "max_wait_candidates", args: &[UUID, INT8, INT8S, INT4, TSTZ] };
const REPLAYED_SINCE: Query = Query { file: SQL, name: "replayed_since", args: &[UUID, TEXT, INT4, TSTZ] };
const FOLD_PARTITIONS: Query = Query { file: SQL, name: "fold_partitions", args: &[INT4, UUIDS] };
const FOLD_SUBSCRIPTIONS: Query = Query { file: SQL, name: "fold_subscriptions", args: &[INT4, UUIDS, TEXTS] };
const FOLD_QUEUES: Query = Query { file: SQL, name: "fold_queues", args: &[UUIDS] };
const FOLDED_PARTITIONS: Query = Query { file: SQL, name: "folded_partitions", args: &[INT4] };
const FOLDED_SUBSCRIPTIONS: Query = Query { file: SQL, name: "folded_subscriptions", args: &[INT4] };
const FOLDED_REGISTRY: Query = Query { file: SQL, name: "folded_registry", args: &[] };
const IDLE_QUEUES: Query = Query { file: SQL, name: "idle_queues", args: &[FLOAT8, INT4, TSTZ] };
const IDLE_PARTITIONS: Query = Query { file: SQL, name: "idle_partitions", args: &[FLOAT8, UUIDS, INT4, TSTZ, UUIDS] };
const STALE_STATISTICS: Query = Query { file: SQL, name: "stale_statistics", args: &[] };
/// The tables `stale_statistics` looks at, and the statement that analyzes each.
const ANALYZE: [(&str, Query); 6] = [
    ("messages", Query { file: SQL, name: "analyze_messages", args: &[] }),
    ("partitions", Query { file: SQL, name: "analyze_partitions", args: &[] }),
    ("subscriptions", Query { file: SQL, name: "analyze_subscriptions", args: &[] }),
    ("cursors", Query { file: SQL, name: "analyze_cursors", args: &[] }),
    ("ready", Query { file: SQL, name: "analyze_ready", args: &[] }),
    ("discovery", Query { file: SQL, name: "analyze_discovery", args: &[] }),
];
const FORGETTABLE_QUEUES: Query = Query { file: SQL, name: "forgettable_queues", args: &[INT4] };
/// The report goes as text (serde_json writes it; the query casts it to jsonb and adds up its
/// counts).
const RECORD_PASS: Query = Query { file: SQL, name: "record_pass", args: &[TEXT, FLOAT8] };
const RECORD_FAILURE: Query = Query { file: SQL, name: "record_failure", args: &[TEXT] };
const RECORD_CANCELLED: Query = Query { file: SQL, name: "record_cancelled", args: &[INT8] };

/// Add timers a firing of the worker's (between passes) cancelled to the totals, in its
/// transaction.
pub fn record_cancelled(cancelled: i64) {
    crate::session::connect(|s| RECORD_CANCELLED.run(s, &[cancelled.into()]).first().req::<i64>("timers_cancelled"));
}

/// How many new messages of a queue one pass counts (the count catches up over passes).
const COUNT_CHUNK: i64 = 1_000_000;
/// How many messages one retention statement looks at.
const RETENTION_CHUNK: i64 = 10_000;
/// How many chunks completed retention deletes in one pass (the next pass goes on): each chunk
/// works out every partition's finished prefix again, a probe per partition and group, so a
/// large backlog on a queue of many partitions is spread over passes rather than held in one
/// long transaction.
const COMPLETED_RETENTION_CHUNKS: usize = 20;
/// How many unfinished messages of one (partition, group) a pass files for max wait.
const MAX_WAIT_BATCH: i64 = 1000;

/// How many expired key/value rows one unit deletes.
const KV_EXPIRE_CHUNK: i32 = 10_000;

#[derive(Default)]
struct Report {
    queues: i64,
    retention_deleted: i64,
    completed_retention_deleted: i64,
    max_wait_dead_lettered: i64,
    registry_rows_folded: i64,
    partitions_removed: i64,
    partitions_restored: i64,
    /// Queues whose completed retention waits for a subscription not committed yet.
    completed_retention_deferred: i64,
    /// Tables whose statistics the pass took again (`refresh_statistics`).
    statistics_refreshed: Vec<String>,
    /// Key/value rows past their expiry, deleted (kv.rs).
    kv_expired: i64,
    /// Timers whose message was pushed, and timers whose push failed (tried again later).
    timers_fired: i64,
    timers_retried: i64,
    /// Queues whose due timers waited for the next firing: a delete of the queue held it.
    timers_deferred_queues: i64,
    /// Timers removed unfired: their scheduler may no longer push to their queue.
    timers_cancelled: i64,
    /// Units left to the next pass: a lock they needed was held by a client's transaction
    /// (the worker waits for one only briefly: worker.rs).
    units_deferred: i64,
}

/// How a pass runs its units of work: `queen_maintain()` runs them all in the caller's
/// transaction; the background worker runs each in a transaction of its own (worker.rs), so
/// that what a unit locks — cursor rows max-wait files dead letters on, a retention chunk's
/// rows — is held for milliseconds, not for the whole pass.
pub trait Units {
    /// Run `unit`; false when it was left to the next pass, rolled back (it waited too long
    /// for a lock a client's transaction holds).
    fn run(&mut self, unit: &mut dyn FnMut(&mut Spi)) -> bool;
    /// How many units were left to the next pass so far.
    fn deferred(&self) -> i64 {
        0
    }
}

/// Every unit in the caller's transaction.
pub struct InCallersTransaction;

impl Units for InCallersTransaction {
    fn run(&mut self, unit: &mut dyn FnMut(&mut Spi)) -> bool {
        crate::session::connect(|s| unit(s));
        true
    }
}

/// Another pass holds the database's maintenance lock.
struct Skipped;

/// Run one unit: under the database's maintenance lock (one pass at a time; taken again by
/// every unit, which in one transaction is a no-op), or not at all when another pass holds it.
/// A unit left to the next pass (`Units::run`) did nothing: its result is `R`'s default, which
/// every unit's caller reads as "nothing done".
///
/// On Citus, a unit of a shard this node holds runs on the shard's local tables
/// (`shards::enter_local`): its statements are plain statements of this node, in its own
/// transaction, that Citus neither plans nor sends anywhere; a shard that is moving or has
/// moved away is left alone (by the next pass of the node that holds it).
fn unit<R: Default>(units: &mut dyn Units, f: impl FnOnce(&mut Spi) -> R) -> Result<R, Skipped> {
    let mut f = Some(f);
    let mut out = None;
    let mut skipped = false;
    let shard = LOCAL_SHARD.get();
    units.run(&mut |s| {
        if crate::locks::try_xact(Lock::Maintenance) {
            match shard {
                None => out = f.take().map(|f| f(s)),
                Some(k) => {
                    if let Some(local) = crate::shards::enter_local(s, k) {
                        out = crate::spi::with_local_shard(local, || f.take().map(|f| f(s)));
                    }
                }
            }
        } else {
            skipped = true;
        }
    });
    match skipped {
        true => Err(Skipped),
        false => Ok(out.unwrap_or_default()),
    }
}

thread_local! {
    /// The shard key whose local tables the pass's units work on (Citus), if any.
    static LOCAL_SHARD: std::cell::Cell<Option<i32>> = const { std::cell::Cell::new(None) };
}

/// While it lives, the pass's units run on shard key `k`'s local tables.
struct LocalShardUnits(Option<i32>);

impl LocalShardUnits {
    fn enter(k: i32) -> LocalShardUnits {
        LocalShardUnits(LOCAL_SHARD.replace(Some(k)))
    }
}

impl Drop for LocalShardUnits {
    fn drop(&mut self) {
        LOCAL_SHARD.set(self.0);
    }
}

/// One maintenance pass in the caller's transaction (`queen_maintain()`).
pub fn maintain(partition_idle_seconds: i32) -> Value {
    pass(&mut InCallersTransaction, partition_idle_seconds)
}

/// One maintenance pass, unit by unit. Returns what it did, or `{"skipped": ...}` when another
/// pass holds the database's maintenance lock (a pass that meets one midway stops there).
/// On Citus a pass works in the shards its node holds (each node's maintenance worker runs
/// its own, with that node's transaction ids), and the coordinator's folds the queues' registry.
pub fn pass(units: &mut dyn Units, partition_idle_seconds: i32) -> Value {
    let started = std::time::Instant::now();
    let done = pass_units(units, partition_idle_seconds).and_then(|mut r| {
        r.units_deferred = units.deferred();
        let report = r.to_json();
        record(units, &report, started.elapsed().as_secs_f64())?;
        Ok(report)
    });
    done.unwrap_or_else(|Skipped| json!({"skipped": "another maintenance pass is running"}))
}

impl Report {
    fn to_json(&self) -> Value {
        json!({
            "queues": self.queues,
            "retention_deleted": self.retention_deleted,
            "completed_retention_deleted": self.completed_retention_deleted,
            "max_wait_dead_lettered": self.max_wait_dead_lettered,
            "registry_rows_folded": self.registry_rows_folded,
            "partitions_removed": self.partitions_removed,
            "partitions_restored": self.partitions_restored,
            "completed_retention_deferred": self.completed_retention_deferred,
            "statistics_refreshed": self.statistics_refreshed,
            "kv_expired": self.kv_expired,
            "timers_fired": self.timers_fired,
            "timers_retried": self.timers_retried,
            "timers_deferred_queues": self.timers_deferred_queues,
            "timers_cancelled": self.timers_cancelled,
            "units_deferred": self.units_deferred,
        })
    }
}

/// The pass's last unit: add its report to the database's totals (queen.maintenance_stats),
/// so that monitoring sees what maintenance does without reading the server log. One row,
/// updated once a pass.
fn record(units: &mut dyn Units, report: &Value, seconds: f64) -> Result<(), Skipped> {
    unit(units, |s| RECORD_PASS.run(s, &[report.to_string().into(), seconds.into()]).first().req::<i64>("passes"))
        .map(|_| ())
}

/// Note a pass that failed with `error` (the worker, after rolling the failed unit back), for
/// queen.maintenance_stats. Skipped when another pass holds the maintenance lock.
pub fn record_failure(units: &mut dyn Units, error: &str) {
    // Skipped or not, there is nothing more to do: the failure is in the server log either way.
    let _noted = unit(units, |s| RECORD_FAILURE.run(s, &[error.into()]).first().req::<i64>("failed_passes"));
}

/// A queue as `maintain_queues` reads it: the options maintenance applies.
struct QueueRow {
    queue_id: Uuid,
    retention: Option<i32>,
    completed: Option<i32>,
    max_wait: Option<i32>,
    /// Dead letter queue on (the default when not set).
    dlq: bool,
    /// retryLimit (for a lease the max-wait pass finds expired).
    retry_limit: i32,
}

impl QueueRow {
    fn from_row(q: &Row<'_>) -> QueueRow {
        QueueRow {
            queue_id: q.req("queue_id"),
            retention: q.get("retention_seconds"),
            completed: q.get("completed_retention_seconds"),
            max_wait: q.get("max_wait_time_seconds"),
            dlq: q.get::<bool>("dead_letter_queue").unwrap_or(true),
            retry_limit: q.get("retry_limit").unwrap_or(crate::options::QueueOptions::default().retry_limit),
        }
    }
}

fn pass_units(units: &mut dyn Units, partition_idle_seconds: i32) -> Result<Report, Skipped> {
    let mut r = Report::default();
    let queues: Vec<QueueRow> = unit(units, |s| MAINTAIN_QUEUES.run(s, &[]).map(|q| QueueRow::from_row(&q)).collect())?;
    let (shards, registry) = unit(units, crate::shards::local)?;
    // First, what this pass's snapshot sees: the points max wait counts from (src/max_wait.rs),
    // kept as long as the longest max wait needs them.
    let longest = queues.iter().filter_map(|q| q.max_wait).max().unwrap_or(0).max(0);
    unit(units, |s| RECORD_POINT.run(s, &[(longest as f64).into()]).first().req::<i64>("thinned"))?;
    r.queues = queues.len() as i64;
    let citus = crate::shards::planning_for_citus();
    for k in shards {
        let _local = citus.then(|| LocalShardUnits::enter(k));
        crate::shards::within(k, || shard_units(units, &queues, partition_idle_seconds, &mut r))?;
    }
    if registry {
        r.registry_rows_folded += unit(units, |s| {
            let queues = writable(FOLDED_REGISTRY.run(s, &[]).map(|r| r.req::<Uuid>("queue_id")).collect());
            FOLD_QUEUES.run(s, &[queues.into()]).first().req::<i64>("folded")
        })?;
        // Key/value rows past their expiry (already gone for every read and write), a chunk
        // a unit, on the node that holds them.
        // SAFETY: GetCurrentTimestamp only reads the clock.
        let now = unsafe { pgrx::pg_sys::GetCurrentTimestamp() };
        loop {
            let deleted = unit(units, |s| crate::kv::expire(s, now, KV_EXPIRE_CHUNK))?;
            r.kv_expired += deleted;
            if deleted < KV_EXPIRE_CHUNK as i64 {
                break;
            }
        }
        // Timers that are due (timers.rs; the worker fires them at their time, a pass catches
        // what it has not), a chunk a unit.
        let mut shut = Vec::new();
        loop {
            let fired = unit(units, |_| crate::timers::fire_due(now, crate::timers::FIRE_CHUNK, &mut shut))?;
            r.timers_fired += fired.fired;
            r.timers_retried += fired.retried;
            r.timers_deferred_queues += fired.deferred_queues;
            r.timers_cancelled += fired.cancelled;
            if !fired.more {
                break;
            }
        }
    }
    // (On Citus each node's tables are shards, which its ANALYZE of the distributed table
    // does not reach from here: left to autovacuum.)
    if !crate::shards::planning_for_citus() {
        r.statistics_refreshed = unit(units, refresh_statistics)?;
    }
    Ok(r)
}

/// Take the statistics again of queen's tables that have outgrown them (maintain.sql
/// `stale_statistics` says what a plan made on a table's old size cost), so that the kept
/// plans are made again: a table that grows from empty is analyzed a few times (at 3, 7, 15,
/// ... pages), one that shrinks is left to autovacuum (plans for a larger table stay good).
/// Returns the tables analyzed.
fn refresh_statistics(s: &mut Spi) -> Vec<String> {
    let stale: Vec<String> = STALE_STATISTICS.run(s, &[]).map(|r| r.req::<String>("name")).collect();
    for name in &stale {
        if let Some((_, analyze)) = ANALYZE.iter().find(|(t, _)| t == name) {
            analyze.run(s, &[]);
        }
    }
    stale
}

/// A pass's work in one shard (`shards::current()`): each queue's count, retention, completed
/// retention and max wait, then the registry's duplicate rows and idle partitions.
fn shard_units(
    units: &mut dyn Units,
    queues: &[QueueRow],
    partition_idle_seconds: i32,
    r: &mut Report,
) -> Result<(), Skipped> {
    let shard = crate::shards::current();
    for &QueueRow { queue_id, retention, completed, max_wait, dlq, retry_limit } in queues {
        unit(units, |s| refresh_count(s, queue_id))?;
        if let Some(secs) = retention.filter(|s| *s > 0) {
            r.retention_deleted += retain_in_chunks(units, queue_id, secs, Retention::All, usize::MAX)?.unwrap_or(0);
        }
        if let Some(secs) = completed.filter(|s| *s > 0) {
            match retain_in_chunks(units, queue_id, secs, Retention::Completed, COMPLETED_RETENTION_CHUNKS)? {
                Some(deleted) => r.completed_retention_deleted += deleted,
                None => r.completed_retention_deferred += 1,
            }
        }
        if let Some(secs) = max_wait.filter(|s| *s > 0) {
            r.max_wait_dead_lettered += max_wait_pass(units, queue_id, secs, dlq, retry_limit)?;
        }
    }
    r.registry_rows_folded += unit(units, |s| {
        let queues = writable(FOLDED_PARTITIONS.run(s, &[shard.into()]).map(|r| r.req::<Uuid>("queue_id")).collect());
        let mut folded = FOLD_PARTITIONS.run(s, &[shard.into(), queues.into()]).len() as i64;
        // On Citus a group's rows in a shard stay (the view that folds them is routed to no one
        // shard); effective_subscriptions adds them up as it does before a fold.
        if !crate::shards::planning_for_citus() {
            let pairs: Vec<(Uuid, String)> = FOLDED_SUBSCRIPTIONS
                .run(s, &[shard.into()])
                .map(|r| (r.req::<Uuid>("queue_id"), r.req::<String>("consumer_group")))
                .collect();
            let (queues, groups): (Vec<Uuid>, Vec<String>) =
                pairs.into_iter().filter(|(q, g)| locks::try_writing(*q, Some(g))).unzip();
            let subs =
                FOLD_SUBSCRIPTIONS.run(s, &[shard.into(), queues.into(), groups.into()]).first().req::<i64>("folded");
            if subs > 0 {
                crate::cache::changed(); // subscription rows merged: their sub_key may read otherwise
            }
            folded += subs;
        }
        folded
    })?;
    let (removed, restored) = unit(units, |s| {
        // Retired partitions are remembered while a push that saw their registry row may be
        // open: forgotten (after a day) only for queues no push holds open now (its shared
        // lock, locks.rs, taken before it reads the registry).
        let open: Vec<Uuid> = FORGETTABLE_QUEUES
            .run(s, &[shard.into()])
            .map(|r| r.req::<Uuid>("queue_id"))
            .filter(|q| !locks::held_by_others(Lock::QueueWrite(*q), Mode::Exclusive))
            .collect();
        let forgettable = writable(open);
        let now = state::timestamp(state::now(s));
        let idle_args: [DatumWithOid; 3] = [(partition_idle_seconds as f64).into(), shard.into(), now.into()];
        let queues = writable(IDLE_QUEUES.run(s, &idle_args).map(|r| r.req::<Uuid>("queue_id")).collect());
        let args: [DatumWithOid; 5] =
            [(partition_idle_seconds as f64).into(), forgettable.into(), shard.into(), now.into(), queues.into()];
        let idle = IDLE_PARTITIONS.run(s, &args).first();
        let (removed, restored) = (idle.req::<i64>("removed"), idle.req::<i64>("restored"));
        if removed > 0 {
            // Registry rows gone: pushes keep which partitions are registered (push.rs).
            crate::cache::changed();
        }
        (removed, restored)
    })?;
    r.partitions_removed += removed;
    r.partitions_restored += restored;
    Ok(())
}

/// Of `queues`, those whose shared lock (locks.rs `QueueWrite`) this unit takes now, without
/// waiting: a unit that changes rows of a queue holds it first, as every call does, so that a
/// delete of the queue waits for the unit rather than the unit's transaction (in
/// `queen_maintain()`, the caller's, which may go on to write the queue) for the delete. A
/// queue being deleted is left to a later pass.
fn writable(queues: Vec<Uuid>) -> Vec<Uuid> {
    queues.into_iter().filter(|q| locks::try_writing(*q, None)).collect()
}

/// The time `secs` seconds ago, by the server's clock.
fn cutoff(s: &mut Spi, secs: i32) -> TimestampWithTimeZone {
    const AGO: Query = Query { file: SQL, name: "ago", args: &[crate::spi::types::FLOAT8] };
    AGO.run(s, &[(secs as f64).into()]).first().req("cutoff")
}

fn subtract(s: &mut Spi, queue_id: Uuid, counted: i64) {
    if counted > 0 {
        SUBTRACT_COUNTED.run(s, &[queue_id.into(), counted.into(), crate::shards::current().into()]);
    }
}

/// The row of `count_scan`: the queue's count point and what came after it.
struct CountScan {
    point: Point,
    /// Messages counted up to the point.
    counted: i64,
    /// Messages after the point (at most `COUNT_CHUNK`), and the last of them.
    tail: i64,
    last: Option<Key>,
    /// Messages of the point's pending transactions that committed since.
    committed: i64,
    /// Per pending transaction, whether it ended; the scan's running transactions.
    visible: Vec<bool>,
    xip: Vec<i64>,
}

impl CountScan {
    fn from_row(row: &Row<'_>) -> CountScan {
        CountScan {
            point: Point {
                upto: (row.req("upto_txid"), row.req("upto_seq")),
                pending: row.get::<Vec<i64>>("pending_txid").unwrap_or_default(),
            },
            counted: row.req("counted"),
            tail: row.req("tail_count"),
            last: match (row.get::<i64>("last_txid"), row.get::<i64>("last_seq")) {
                (Some(t), Some(q)) => Some((t, q)),
                _ => None,
            },
            committed: row.req("committed"),
            visible: row.get::<Vec<bool>>("pending_visible").unwrap_or_default(),
            xip: row.get::<Vec<i64>>("xip").unwrap_or_default(),
        }
    }
}

/// Bring the queue's count up to its log's end (same pending-transaction rule as discovery).
/// Not while the queue is being deleted (its count row would outlive it).
fn refresh_count(s: &mut Spi, queue_id: Uuid) {
    if !locks::try_writing(queue_id, None) {
        return;
    }
    let shard = crate::shards::current();
    let c = CountScan::from_row(&COUNT_SCAN.run(s, &[queue_id.into(), COUNT_CHUNK.into(), shard.into()]).first());
    let next = next_point(&c.point, &c.visible, &c.xip, c.last);
    if next == c.point && c.tail == 0 && c.committed == 0 {
        return;
    }
    let args: [DatumWithOid; 7] = [
        queue_id.into(),
        next.upto.0.into(),
        next.upto.1.into(),
        next.pending.into(),
        (c.counted + c.tail + c.committed).into(),
        shard.into(),
        state::timestamp(state::now(s)).into(),
    ];
    COUNT_SAVE.run(s, &args);
}

/// Which retention a chunk runs.
#[derive(Clone, Copy, PartialEq)]
enum Retention {
    /// `retention`: every message older than the cutoff.
    All,
    /// `completed_retention`: those every subscribed group has finished.
    Completed,
}

/// One chunk of a retention: the row of `retention` or `completed_retention` in this shard.
fn retention_chunk<'a>(s: &'a mut Spi, which: Retention, queue_id: Uuid, cutoff: TimestampWithTimeZone) -> Row<'a> {
    let shard = crate::shards::current();
    match which {
        Retention::All => {
            let now = state::timestamp(state::now(s));
            let args: [DatumWithOid; 5] =
                [queue_id.into(), cutoff.into(), RETENTION_CHUNK.into(), shard.into(), now.into()];
            RETENTION.run(s, &args).first()
        }
        Retention::Completed => {
            // The queue's subscriptions in the shard, read first (completed_retention says why),
            // passed as parallel arrays.
            let (mut groups, mut modes, mut xmaxs, mut xip_of, mut xips) = (vec![], vec![], vec![], vec![], vec![]);
            let read = if crate::shards::planning_for_citus() {
                &CITUS_COMPLETED_SUBSCRIPTIONS
            } else {
                &COMPLETED_SUBSCRIPTIONS
            };
            let subs: Vec<(String, String, Option<i64>, Vec<i64>)> = read
                .run(s, &[queue_id.into(), shard.into()])
                .map(|r| {
                    (
                        r.req("consumer_group"),
                        r.req("mode"),
                        r.get("start_xmax"),
                        r.get("start_xip").unwrap_or_default(),
                    )
                })
                .collect();
            for (i, (group, mode, xmax, xip)) in subs.into_iter().enumerate() {
                groups.push(group);
                modes.push(mode);
                xmaxs.push(xmax);
                for x in xip {
                    xip_of.push(i as i32 + 1);
                    xips.push(x);
                }
            }
            let args: [DatumWithOid; 9] = [
                queue_id.into(),
                cutoff.into(),
                RETENTION_CHUNK.into(),
                shard.into(),
                groups.into(),
                modes.into(),
                xmaxs.into(),
                xip_of.into(),
                xips.into(),
            ];
            COMPLETED_RETENTION.run(s, &args).first()
        }
    }
}

/// Run a retention (messages older than `secs`) chunk after chunk, each a unit, until a chunk
/// deletes nothing, at most `chunks` times; how many it deleted in all. Completed retention runs
/// only while no subscription of the queue is open (locks.rs Subscribe; semantics §4: a group whose
/// first pop has not committed counts): None when one is, and the queue is left to the next pass.
fn retain_in_chunks(
    units: &mut dyn Units,
    queue_id: Uuid,
    secs: i32,
    which: Retention,
    chunks: usize,
) -> Result<Option<i64>, Skipped> {
    let Some(cutoff) = unit(units, |s| Some(cutoff(s, secs)))? else {
        return Ok(Some(0));
    };
    let mut total = 0;
    for _ in 0..chunks {
        let deleted = unit(units, |s| {
            // Never while the queue is being deleted (its rows are the delete's), and
            // completed retention never while a subscription of the queue is open.
            if !locks::try_writing(queue_id, None)
                || which == Retention::Completed && !locks::try_in(Lock::Subscribe(queue_id), Mode::Exclusive)
            {
                return None;
            }
            let row = retention_chunk(s, which, queue_id, cutoff);
            let (deleted, counted) = (row.req::<i64>("deleted"), row.req::<i64>("counted"));
            subtract(s, queue_id, counted);
            Some(deleted)
        })?;
        let Some(deleted) = deleted else {
            return Ok(if total > 0 { Some(total) } else { None });
        };
        total += deleted;
        if deleted == 0 {
            break;
        }
    }
    Ok(Some(total))
}

/// File the messages of queue `queue_id` that have waited `secs` seconds since their push
/// committed (src/max_wait.rs) and are unfinished as dead letters of each group (reason 'max
/// wait time exceeded'), leaving partitions under an active lease to their holder; each
/// (partition, group) is a unit. Returns how many were filed (or skipped, without a dead
/// letter queue).
fn max_wait_pass(
    units: &mut dyn Units,
    queue_id: Uuid,
    secs: i32,
    dlq: bool,
    retry_limit: i32,
) -> Result<i64, Skipped> {
    let (point, pairs) = unit(units, |s| {
        let Some(row) = MAX_WAIT_POINT.run(s, &[(secs as f64).into()]).next() else {
            return (None, vec![]);
        };
        let point = max_wait::Point { xmax: row.req("seen_xmax"), xip: row.req("seen_xip") };
        let taken_at: TimestampWithTimeZone = row.req("taken_at");
        let args: [DatumWithOid; 5] = [
            queue_id.into(),
            point.xmax.into(),
            point.xip.clone().into(),
            crate::shards::current().into(),
            taken_at.into(),
        ];
        let pairs: Vec<(Uuid, String)> =
            MAX_WAIT_CANDIDATES.run(s, &args).map(|r| (r.req("partition_id"), r.req("consumer_group"))).collect();
        (Some((point, taken_at)), pairs)
    })?;
    let Some((point, taken_at)) = point else { return Ok(0) };
    let mut filed = 0;
    for (partition, group) in pairs {
        filed +=
            unit(units, |s| max_wait_file(s, queue_id, partition, &group, (&point, taken_at), (dlq, retry_limit)))?;
    }
    Ok(filed)
}

/// The max-wait unit of one (partition, group).
fn max_wait_file(
    s: &mut Spi,
    queue_id: Uuid,
    partition: Uuid,
    group: &str,
    (point, taken_at): (&max_wait::Point, TimestampWithTimeZone),
    (dlq, retry_limit): (bool, i32),
) -> i64 {
    // Rows of the queue and the group may be created: never while either is being deleted
    // (locks.rs); the next pass comes back.
    if !locks::try_writing(queue_id, Some(group)) {
        return 0;
    }
    let Some((sub, _)) = crate::subscription::subscription(s, queue_id, group) else {
        return 0;
    };
    let initial = crate::subscription::initial_cursor(s, &sub, partition);
    let look = crate::direct::look(s, partition, group, &initial, MAX_WAIT_BATCH, 1);
    // Take the row as looked at, never waiting (a pop or an ack holding it has the
    // partition's next moves; the next pass comes back): lock it in that version, or create
    // it under the pair's lock (locks.rs), as pops do, so that no pop waits on the uncommitted
    // insert.
    let held = match look.row.version.as_deref().filter(|_| look.stored) {
        Some(version) => state::lock(s, partition, group, version),
        None => state::try_lock_pair(partition, group) && state::create(s, partition, group, queue_id, &initial),
    };
    if !held || look.row.lease_active(look.now) {
        return 0;
    }
    // Dead letters replayed here after the point was taken wait afresh (dead_letters.rs).
    let args: [DatumWithOid; 4] = [partition.into(), group.into(), crate::shards::current().into(), taken_at.into()];
    if REPLAYED_SINCE.run(s, &args).first().req::<bool>("replayed") {
        return 0;
    }
    // An expired lease (an active one was left alone above) ends as a pop ends it (semantics §5): a
    // failure of its first unfinished message, counted in that message's attempts (filed as
    // 'lease expired' if that spent them); a late ack of it hears 'lease expired'. Then the
    // partition is read again from the settled row. (0.3.0 left any row with a lease alone:
    // with no consumer popping, a message under an expired lease waited past max wait for ever.)
    let mut look = look;
    if let Some(ended) = look.row.lease_id {
        let mut row = look.row.clone();
        if let Some(charge) = row.cursor.expire(retry_limit) {
            if charge.spent && dlq {
                state::dead_letter(s, partition, group, charge.key, Some("lease expired"), charge.attempt);
            }
        }
        row.lease_id = None;
        row.lease_expires_at = None;
        state::save(
            s,
            partition,
            group,
            &row,
            state::SaveAlso { queue_id, hint_at: None, ended_lease: Some((ended, true)) },
        );
        look = crate::direct::look(s, partition, group, &initial, MAX_WAIT_BATCH, 1);
    }
    let mut row = look.row;
    let keys: Vec<_> = look.msgs.iter().map(|m| m.key).collect();
    let old: Vec<_> = look.msgs.iter().filter(|m| point.saw(m.key.0)).map(|m| m.key).collect();
    if old.is_empty() {
        return 0;
    }
    // The read messages as a batch, so the frontier moves over the filed prefix.
    let last = keys.iter().copied().max();
    let xip = match last {
        Some(l) => crate::cursor::running_between(&look.xip, row.cursor.done, l).collect(),
        None => vec![],
    };
    row.cursor.lease = Some(Batch::new(keys, xip));
    let filed = old.len() as i64;
    for k in old {
        if dlq {
            let attempts = row.cursor.attempt_of(k);
            state::dead_letter(s, partition, group, k, Some("max wait time exceeded"), attempts);
        }
        row.cursor.finish(k);
    }
    row.cursor.release();
    row.lease_id = None;
    row.lease_expires_at = None;
    let also = state::SaveAlso { queue_id, hint_at: Some(look.now), ended_lease: None };
    state::save(s, partition, group, &row, also);
    filed
}
