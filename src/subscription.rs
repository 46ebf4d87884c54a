//! A consumer group's subscription to a queue (semantics §3.2): fixed at its first pop (or seek),
//! several rows when first pops ran at once (`queen.effective_subscriptions` adds them up), and
//! where a group that never popped a partition starts there. Read by pop, ack and maintenance;
//! created by a group's first pop, or by an ack without a lease that applies.

use crate::cursor::{Cursor, Key};
use crate::error::QueenResult;
use crate::locks::Lock;
use crate::options::QueueOptions;
use crate::spi::types::{INT4, INT8, INT8S, TEXT, TSTZ, UUID};
use crate::spi::{Query, Spi};
use pgrx::datum::{DatumWithOid, TimestampWithTimeZone};
use pgrx::Uuid;

const SQL: &str = include_str!("../sql/queries/subscription.sql");
const SUBSCRIPTION_GET: Query = Query { file: SQL, name: "subscription_get", args: &[UUID, TEXT, INT4] };
const SUBSCRIBE: Query = Query { file: SQL, name: "subscribe", args: &[UUID, TEXT, TEXT, TSTZ, INT4] };
const QUEUE_FROM_POSITION: Query = Query { file: SQL, name: "queue_from_position", args: &[UUID, TSTZ, INT4] };
const PARTITION_FROM_POSITION: Query = Query { file: SQL, name: "partition_from_position", args: &[UUID, TSTZ, INT4] };
const CITUS_SUBSCRIPTION_GET: Query = Query { file: SQL, name: "citus_subscription_get", args: &[UUID, TEXT, INT4] };
const CITUS_QUEUE_EXISTS: Query = Query { file: SQL, name: "citus_queue_exists", args: &[UUID] };
const CITUS_SUBSCRIBED: Query = Query { file: SQL, name: "citus_subscribed", args: &[UUID, TEXT, INT4] };
const CITUS_SUBSCRIPTION_POINT: Query = Query { file: SQL, name: "citus_subscription_point", args: &[] };
const CITUS_SUBSCRIBE: Query =
    Query { file: SQL, name: "citus_subscribe", args: &[UUID, TEXT, TEXT, TSTZ, INT8, INT8S, INT4] };

/// How a group asks to subscribe at its first pop (semantics §3.2): `subscription_mode`, or
/// `subscription_from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    All,
    New,
    From,
}

impl Mode {
    /// As `queen.subscriptions.mode` stores it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::All => "all",
            Mode::New => "new",
            Mode::From => "from",
        }
    }
}

/// Where a subscribed group starts reading (semantics §3.2).
#[derive(Debug, Clone, PartialEq)]
pub enum Start {
    /// Every message retained ('all').
    All,
    /// What its first pop (or seek) could not see yet ('new'): that snapshot's xmax and the
    /// transactions it saw running.
    New { xmax: i64, xip: Vec<i64> },
    /// What was pushed from this time on ('from').
    From(Option<TimestampWithTimeZone>),
}

impl Start {
    /// The state the group starts with on a partition it has no cursor row for, when that needs
    /// no read; None for 'from', whose start is the partition's position before its time
    /// ([`initial_cursor`]). A cursor row created in this state keeps it (semantics §3.2).
    pub fn cursor(&self) -> Option<Cursor> {
        match self {
            Start::All => Some(Cursor::default()),
            Start::New { xmax, xip } => Some(Cursor::subscribed_new(*xmax, xip)),
            Start::From(_) => None,
        }
    }

    /// Where the group's discovery starts in the queue log (a position and the transactions
    /// running below it), when that needs no read; None for 'from' ([`queue_start`]).
    pub fn point(&self) -> Option<(Key, Vec<i64>)> {
        match self {
            Start::All => Some(((0, 0), Vec::new())),
            Start::New { xmax, xip } => Some(((*xmax, 0), xip.clone())),
            Start::From(_) => None,
        }
    }
}

/// A group's effective subscription to a queue (semantics §3.2): what its subscription rows add up
/// to (`queen.effective_subscriptions`).
#[derive(Debug, Clone)]
pub struct Subscription {
    pub start: Start,
    /// Names this subscription: state derived from another one is out of date.
    pub key: String,
}

/// The state a group starts with on a partition it has no cursor row for, by its subscription.
pub fn initial_cursor(s: &mut Spi, sub: &Subscription, partition: Uuid) -> Cursor {
    match &sub.start {
        Start::From(from) => {
            let args: [DatumWithOid; 3] = [partition.into(), (*from).into(), crate::shards::current().into()];
            let row = PARTITION_FROM_POSITION.run(s, &args).first();
            let mut c = Cursor::subscribed_new(0, &row.get::<Vec<i64>>("xip").unwrap_or_default());
            c.done = (row.req("txid"), row.req("seq"));
            c
        }
        start => start.cursor().unwrap_or_default(),
    }
}

thread_local! {
    /// What `subscription` read, kept under the cache's ticket (cache.rs).
    static CACHED: std::cell::RefCell<crate::cache::Map<(Uuid, String), (Subscription, QueueOptions)>> =
        std::cell::RefCell::new(crate::cache::Map::new());
}

/// The group's subscription and the queue's options, if it has one.
/// From this backend's cache (cache.rs) while nothing changed them.
pub fn subscription(s: &mut Spi, queue_id: Uuid, group: &str) -> Option<(Subscription, QueueOptions)> {
    let ticket = crate::cache::ticket();
    let key = (queue_id, group.to_string());
    if let Some(cached) = ticket.as_ref().and_then(|t| CACHED.with(|m| m.borrow().get(&key, t))) {
        return Some(cached);
    }
    let shard = crate::shards::current();
    let args: [DatumWithOid; 3] = [queue_id.into(), group.into(), shard.into()];
    let found = if crate::shards::planning_for_citus() {
        // On Citus the shard's rows and the queue's options (a reference table) are read apart.
        let sub = CITUS_SUBSCRIPTION_GET.run(s, &args).next().map(|row| read_sub(&row));
        sub.map(|sub| (sub, crate::configure::load(s, queue_id).effective()))
    } else {
        SUBSCRIPTION_GET.run(s, &args).next().map(|row| read_subscription(&row))
    };
    if let (Some(ticket), Some(found)) = (ticket, &found) {
        CACHED.with(|m| m.borrow_mut().put(key, ticket, found.clone()));
    }
    found
}

/// For an ack without a lease that applies: the group's subscription, mode 'all' if it has
/// none yet (it subscribes its group, as a pop would). None when the queue does not exist.
pub fn subscribe_all(s: &mut Spi, queue_id: Uuid, group: &str) -> QueenResult<Option<(Subscription, QueueOptions)>> {
    subscribe(s, queue_id, group, Mode::All, None)
}

/// The group's subscription (created now if it has none) and the queue's options; None when
/// the queue does not exist.
pub fn subscribe(
    s: &mut Spi,
    queue_id: Uuid,
    group: &str,
    mode: Mode,
    from: Option<TimestampWithTimeZone>,
) -> QueenResult<Option<(Subscription, QueueOptions)>> {
    // The common case, a group already subscribed, is a plain read; creating the
    // subscription is a statement of its own.
    let existing = subscription(s, queue_id, group);
    if existing.is_some() {
        return Ok(existing);
    }
    // A subscription not committed yet holds completed retention off the queue (locks.rs
    // Subscribe): nothing it will be owed once it commits is deleted meanwhile (semantics §4).
    let waited = crate::locks::take_fresh(Lock::Subscribe(queue_id), crate::locks::Mode::Shared, || {
        "the queue's completed retention".to_string()
    })?;
    if waited {
        // Completed retention committed meanwhile: read what is there now.
        if let Some(sub) = subscription(s, queue_id, group) {
            return Ok(Some(sub));
        }
    }
    // Inserts nothing when the queue does not exist (then there is none to read back), or when
    // another transaction's subscription committed meanwhile (then that one is read).
    let shard = crate::shards::current();
    if crate::shards::planning_for_citus() {
        subscribe_in_shard(s, queue_id, group, mode, from, shard);
        return Ok(subscription(s, queue_id, group));
    }
    let create: [DatumWithOid; 5] = [queue_id.into(), group.into(), mode.as_str().into(), from.into(), shard.into()];
    if SUBSCRIBE.run(s, &create).len() > 0 {
        crate::cache::changed();
    }
    Ok(subscription(s, queue_id, group))
}

/// `subscribe`'s insert on Citus, in the worker of shard `shard`: a statement for each table
/// (Citus routes no statement that joins a shard with a reference table).
fn subscribe_in_shard(
    s: &mut Spi,
    queue_id: Uuid,
    group: &str,
    mode: Mode,
    from: Option<TimestampWithTimeZone>,
    shard: i32,
) {
    if !CITUS_QUEUE_EXISTS.run(s, &[queue_id.into()]).first().req::<bool>("exists") {
        return;
    }
    let key: [DatumWithOid; 3] = [queue_id.into(), group.into(), shard.into()];
    if CITUS_SUBSCRIBED.run(s, &key).first().req::<bool>("subscribed") {
        return;
    }
    let (xmax, xip) = {
        let p = CITUS_SUBSCRIPTION_POINT.run(s, &[]).first();
        (p.req::<i64>("xmax"), p.get::<Vec<i64>>("xip").unwrap_or_default())
    };
    let row: [DatumWithOid; 7] =
        [queue_id.into(), group.into(), mode.as_str().into(), from.into(), xmax.into(), xip.into(), shard.into()];
    CITUS_SUBSCRIBE.run(s, &row);
    crate::cache::changed();
}

/// A row of `subscription_get`.
fn read_sub(row: &crate::spi::Row<'_>) -> Subscription {
    let start = match row.req::<String>("mode").as_str() {
        "new" => Start::New {
            xmax: row.get::<i64>("start_xmax").unwrap_or(0),
            xip: row.get::<Vec<i64>>("start_xip").unwrap_or_default(),
        },
        "from" => Start::From(row.get::<TimestampWithTimeZone>("from_ts")),
        _ => Start::All, // 'all': the table's CHECK allows no other
    };
    Subscription { start, key: row.req::<String>("sub_key") }
}

fn read_subscription(row: &crate::spi::Row<'_>) -> (Subscription, QueueOptions) {
    (read_sub(row), crate::configure::stored_options(row).effective())
}

/// Where a 'from' subscription starts reading the queue log: the position just before its
/// time, and the transactions running below it.
pub fn queue_start(s: &mut Spi, queue_id: Uuid, from: Option<TimestampWithTimeZone>) -> (Key, Vec<i64>) {
    let args: [DatumWithOid; 3] = [queue_id.into(), from.into(), crate::shards::current().into()];
    let row = QUEUE_FROM_POSITION.run(s, &args).first();
    ((row.req("txid"), row.req("seq")), row.get::<Vec<i64>>("xip").unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 'new' starts a partition and the queue log at the same place: what its first pop's
    /// snapshot could not see (the two were computed apart in pop and discovery before).
    #[test]
    fn a_subscription_starts_a_partition_and_the_log_alike() {
        let new = Start::New { xmax: 100, xip: vec![97, 95] };
        let c = new.cursor().unwrap();
        let (upto, pending) = new.point().unwrap();
        assert_eq!(c.done, upto);
        let mut pending = pending;
        pending.sort_unstable();
        assert_eq!(c.pending, pending.iter().map(|&x| (x, 0)).collect::<Vec<_>>());
        assert_eq!(Start::All.cursor(), Some(Cursor::default()));
        assert_eq!(Start::All.point(), Some(((0, 0), vec![])));
        // 'from' needs a read of where its time lies.
        assert_eq!(Start::From(None).cursor(), None);
        assert_eq!(Start::From(None).point(), None);
        assert_eq!([Mode::All, Mode::New, Mode::From].map(Mode::as_str), ["all", "new", "from"]);
    }
}
