//! Calls on a Citus coordinator, sent to the workers (docs/design.md, "Distributed on Citus"):
//! each call is split by shard key, and each part runs on the worker that holds its shard as a
//! force-delegated internal function (`queen.shard_…`), in the caller's distributed
//! transaction, with that worker's snapshot and transaction ids. The coordinator writes only
//! the reference tables (a queue's registry row), before it delegates.

use crate::ack::{AckEntry, AckResult};
use crate::error::{QueenError, QueenResult};
use crate::jsonb::Jsonb;
use crate::names::{self, to_pg};
use crate::pop::{Outcome, PopRequest, Popped};
use crate::push::{PushItem, PushResult, PushStatus};
use crate::shards::{
    self, Layout, COUNT_QUEUE_EVERYWHERE, DELEGATE_ACK, DELEGATE_ACK_LEASE, DELEGATE_ACK_ONE, DELEGATE_DELETE_GROUP,
    DELEGATE_DELETE_QUEUE, DELEGATE_POP, DELEGATE_PURGE_DEAD_LETTERS, DELEGATE_PUSH, DELEGATE_PUSH_ONE, DELEGATE_RENEW,
    DELEGATE_REPLAY_DEAD_LETTERS, DELEGATE_SEEK, DELEGATE_SUBSCRIBE, FORGET_OWED_SUBSCRIPTIONS, ITEMS_SUBSET,
    OWE_SUBSCRIPTION, QUEUES_REGISTERED, REGISTER_QUEUE, SUBSCRIPTIONS_OWED, SUBSCRIPTION_PAID,
};
use crate::spi::{Query, Row, Spi};
use pgrx::datum::{DatumWithOid, TimestampWithTimeZone};
use pgrx::Uuid;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};

thread_local! {
    /// (queue, group) pairs this backend has seen subscribed in every shard by a committed
    /// transaction, each with the cache generation (cache.rs) read before it subscribed them;
    /// and those its running transaction subscribed (kept only if it commits). An entry holds
    /// while the generation has not moved: `queen_delete_group` and `queen_delete_queue` move
    /// it when they commit (the rows they deleted in every shard are to be made again by the
    /// group's next first pop, in every shard).
    static SUBSCRIBED: RefCell<HashMap<(String, String), u64>> = RefCell::new(HashMap::new());
    static SUBSCRIBING: RefCell<HashMap<(String, String), Option<u64>>> = RefCell::new(HashMap::new());
}

/// At the end of a transaction: what it subscribed stays known if it committed.
pub fn at_end(committed: bool) {
    let done = SUBSCRIBING.with(|s| std::mem::take(&mut *s.borrow_mut()));
    if committed && !done.is_empty() {
        SUBSCRIBED.with(|s| s.borrow_mut().extend(done.into_iter().filter_map(|(k, g)| g.map(|g| (k, g)))));
    }
}

/// Before a group's pop: its subscription in every shard, as its first pop on one server
/// makes it for the whole queue (semantics §3.2): a group that consumes one partition at a time
/// would otherwise subscribe in a shard only at its first pop there, and `'new'` would skip what
/// that shard received since the group's first pop. Once per (queue, group) per backend (after
/// a commit); each shard's call makes the row only if the group has none there.
///
/// A shard whose worker cannot be reached is owed its subscription (`queen.subscriptions_owed`,
/// on this node): the mode of this first pop, and for `'new'` this pop's time as the start
/// (what reaches that shard after it is new). The next pop of the group from any backend makes
/// it there once the worker is back, before it reads; until then this backend tries again at
/// each pop.
fn subscribe_everywhere(layout: &Layout, req: &PopRequest) {
    let Some(group) = &req.group else {
        return; // queue mode reads every shard from its start: nothing to fix in advance
    };
    let key = (req.queue.clone(), group.clone());
    let generation = crate::cache::generation_now();
    let known = SUBSCRIBED.with(|x| x.borrow().get(&key).is_some_and(|g| Some(*g) == generation));
    if known || SUBSCRIBING.with(|x| x.borrow().contains_key(&key)) {
        return;
    }
    let queue_id = to_pg(names::queue_id(&req.queue));
    let owed: HashMap<i32, (String, Option<TimestampWithTimeZone>)> = crate::session::connect(|s| {
        let args: [DatumWithOid; 2] = [queue_id.into(), group.as_str().into()];
        SUBSCRIPTIONS_OWED.run(s, &args).map(|r| (r.req::<i32>("shard"), (r.req("mode"), r.get("from_at")))).collect()
    });
    let mut missed = Vec::new();
    for k in &layout.keys {
        let (mode, from) = owed.get(k).cloned().unwrap_or_else(|| (req.mode.as_str().to_string(), req.from));
        let made = crate::subxact::attempt_caught(|| {
            crate::session::connect(|s| {
                let args: [DatumWithOid; 5] =
                    [(*k).into(), req.queue.as_str().into(), group.as_str().into(), mode.as_str().into(), from.into()];
                DELEGATE_SUBSCRIBE.run(s, &args);
                if owed.contains_key(k) {
                    let args: [DatumWithOid; 3] = [queue_id.into(), group.as_str().into(), (*k).into()];
                    SUBSCRIPTION_PAID.run(s, &args);
                }
            });
            Ok(())
        });
        match made {
            Ok(()) => {}
            Err(f) if f.node_unreachable() => missed.push(*k),
            Err(f) => f.raise(),
        }
    }
    if missed.is_empty() {
        SUBSCRIBING.with(|x| x.borrow_mut().insert(key, generation));
        return;
    }
    crate::session::connect(|s| {
        for k in missed.iter().filter(|k| !owed.contains_key(k)) {
            // (owe_subscription turns 'new' into a start at this time.)
            let args: [DatumWithOid; 5] =
                [queue_id.into(), group.as_str().into(), (*k).into(), req.mode.as_str().into(), req.from.into()];
            OWE_SUBSCRIPTION.run(s, &args);
        }
    });
}

/// The layout when queen is distributed; None on one server (or inside a worker's call, where
/// the engine runs on its shard).
pub fn distributed() -> Option<Layout> {
    if let Some(known) = shards::known() {
        return known;
    }
    let l = crate::session::connect(shards::layout);
    l.distributed.then_some(l)
}

fn result(row: &Row, idx: i32) -> PushResult {
    PushResult {
        idx,
        message_id: row.req("message_id"),
        transaction_id: row.req("transaction_id"),
        queue: row.req("queue"),
        partition: row.req("partition"),
        partition_id: row.req("partition_id"),
        status: if row.req::<String>("status") == "duplicate" { PushStatus::Duplicate } else { PushStatus::Queued },
    }
}

/// The queues of a push that have a maxSize: (id, name, cap).
type Caps = Vec<(Uuid, String, i64)>;

/// A registry row for each queue of the push that has none (reference table, coordinator),
/// under the queue's shared lock on the coordinator: a `queen_delete_queue` open there is
/// waited for (else this push's rows would land after the delete, beside no registry row).
/// Returns the push's queues that have a maxSize.
fn register_queues(s: &mut Spi, items: &[PushItem]) -> QueenResult<Caps> {
    let mut queues: BTreeMap<[u8; 16], &str> = BTreeMap::new();
    for it in items {
        queues.entry(*names::queue_id(&it.queue).as_bytes()).or_insert(&it.queue);
    }
    for (b, name) in &queues {
        crate::locks::writing(Uuid::from_bytes(*b), Some(name), None)?;
    }
    let ids: Vec<Uuid> = queues.keys().map(|b| Uuid::from_bytes(*b)).collect();
    let args: [DatumWithOid; 1] = [ids.clone().into()];
    let row = QUEUES_REGISTERED.run(s, &args).first();
    let known: Vec<Uuid> = row.get("registered").unwrap_or_default();
    let capped: Vec<Uuid> = row.get("capped").unwrap_or_default();
    let caps: Vec<i64> = row.get("caps").unwrap_or_default();
    for (b, name) in &queues {
        let id = Uuid::from_bytes(*b);
        if !known.contains(&id) {
            let args: [DatumWithOid; 2] = [id.into(), (*name).into()];
            REGISTER_QUEUE.run(s, &args);
        }
    }
    Ok(capped.into_iter().zip(caps).map(|(id, max)| (id, queues[id.as_bytes()].to_string(), max)).collect())
}

/// maxSize on Citus, as push.rs check_cap on one server: after the push's calls, each capped
/// queue counted over every shard (a query of all its shards, made only for capped queues),
/// the push refused (54000, and rolled back with its transaction) when it is over.
fn check_caps(s: &mut Spi, caps: &Caps) -> QueenResult<()> {
    for (id, queue, max) in caps {
        let args: [DatumWithOid; 2] = [(*id).into(), max.saturating_add(1).into()];
        let n = COUNT_QUEUE_EVERYWHERE.run(s, &args).first().get::<i64>("messages").unwrap_or(0);
        if n > *max {
            return Err(QueenError::QueueFull { queue: queue.clone(), max_size: *max });
        }
    }
    Ok(())
}

fn key_of(layout: &Layout, it: &PushItem) -> i32 {
    let q = names::queue_id(&it.queue);
    layout.key_of(names::partition_id(&q, &it.partition).as_bytes())
}

fn wake_at_commit(items: &[PushItem]) {
    for it in items {
        crate::wait::touched(crate::wait::queue_key(&names::queue_id(&it.queue)));
    }
}

/// `queen_push`'s one message, on its shard's worker.
pub fn push_one(layout: &Layout, it: PushItem, payload: Jsonb) -> QueenResult<PushResult> {
    crate::locks::wrote_through_a_worker();
    let k = key_of(layout, &it);
    let r = crate::session::connect(|s| -> QueenResult<PushResult> {
        let caps = register_queues(s, std::slice::from_ref(&it))?;
        let args: [DatumWithOid; 6] = [
            k.into(),
            it.queue.as_str().into(),
            payload.into(),
            it.partition.as_str().into(),
            it.transaction_id.as_deref().into(),
            it.trace_id.map(to_pg).into(),
        ];
        let rows = DELEGATE_PUSH_ONE.run(s, &args);
        let r = result(&rows.first(), 0);
        check_caps(s, &caps)?;
        Ok(r)
    })?;
    wake_at_commit(std::slice::from_ref(&it));
    Ok(r)
}

/// `queen_push`'s batch: one call per shard, results in the items' order.
pub fn push_batch(layout: &Layout, items: Vec<PushItem>, all: Jsonb) -> QueenResult<Vec<PushResult>> {
    crate::locks::wrote_through_a_worker();
    let mut by_shard: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for (i, it) in items.iter().enumerate() {
        by_shard.entry(key_of(layout, it)).or_default().push(i as i32);
    }
    let mut out: Vec<Option<PushResult>> = vec![None; items.len()];
    crate::session::connect(|s| -> QueenResult<()> {
        let caps = register_queues(s, &items)?;
        for (k, idxs) in &by_shard {
            let args: [DatumWithOid; 2] = [all.into(), idxs.clone().into()];
            let subset: Jsonb = ITEMS_SUBSET.run(s, &args).first().req("items");
            let args: [DatumWithOid; 2] = [(*k).into(), subset.into()];
            for row in DELEGATE_PUSH.run(s, &args) {
                let local: i32 = row.req("idx");
                let idx = idxs[local as usize];
                out[idx as usize] = Some(result(&row, idx));
            }
        }
        check_caps(s, &caps)
    })?;
    wake_at_commit(&items);
    out.into_iter()
        .enumerate()
        .map(|(i, r)| r.ok_or_else(|| QueenError::invalid(format!("items[{i}]"), "no result came back from its shard")))
        .collect()
}

/// A worker's side of a call on Citus, on shard key `k`: `f` run as a call of that shard
/// (`shards::within`), on the shard's local tables when it is placed on this node and no move
/// is switching it (`shards::enter_local`: plain statements with kept plans, as on one server),
/// else through Citus's planning.
pub fn within_shard<R>(k: i32, f: impl FnOnce() -> R) -> R {
    shards::within(k, || {
        if !shards::planning_for_citus() {
            return f();
        }
        match crate::session::connect(|s| shards::enter_local(s, k)) {
            Some(local) => crate::spi::with_local_shard(local, f),
            None => f(),
        }
    })
}

/// The start of a worker's call for shard `k` (`queen.shard_…`): the layout learned, and `k`
/// one of the shard keys. A call made by hand with another value would write rows of a shard
/// that does not exist (on one server, where the only key is 0, too), which no call reads and
/// which would count as a group's subscription in maintenance.
pub fn enter_shard(k: i32) -> QueenResult<()> {
    let layout = crate::session::connect(shards::layout);
    if layout.keys.contains(&k) {
        return Ok(());
    }
    Err(QueenError::invalid("argument \"shard\"", format!("is {k}, which is not one of queen's shard keys")))
}

/// In a worker's call for shard `k`: every item's partition must have that key (a call made by
/// hand with another key would file messages where no call looks for them).
pub fn check_shard(s: &mut Spi, k: i32, items: &[PushItem]) -> QueenResult<()> {
    let layout = shards::layout(s);
    for (i, it) in items.iter().enumerate() {
        let want = key_of(&layout, it);
        if want != k {
            return Err(QueenError::invalid(
                "argument \"shard\"",
                format!("is {k}, but the partition of item {i} has shard key {want}"),
            ));
        }
    }
    Ok(())
}

thread_local! {
    /// Where the next pop without a partition starts its round of the shards.
    static NEXT_SHARD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// One attempt of `queen_pop` on the workers (which do not wait: the coordinator waits,
/// pop.rs). With a partition, one call of its shard's worker. Without, the shards one at a
/// time, starting where this backend's last such pop stopped: a pop of one partition stops at
/// the first shard that delivers (a round trip when most shards have work, one per shard when
/// none has); a pop of several (`partitions` > 1) goes on to the next shards with what is left
/// of its batch and partitions, its leases under one id stamped as spanning shards
/// (shards::MANY_SHARDS: `queen_renew` then goes to every shard). A waiting pop looks again at
/// least every 50 ms: a push's commit can wake it before the worker's part of that commit is
/// visible (the coordinator's commit hooks run before Citus's second phase).
pub fn pop_on_workers(layout: &Layout, req: &PopRequest) -> QueenResult<Outcome> {
    writing_through_workers(&req.queue, req.group.as_deref())?;
    let keys: Vec<i32> = match &req.partition {
        Some(p) => vec![layout.key_of(names::partition_id(&names::queue_id(&req.queue), p).as_bytes())],
        None => {
            let n = layout.keys.len();
            let start = NEXT_SHARD.with(|c| c.get()) % n;
            (0..n).map(|i| layout.keys[(start + i) % n]).collect()
        }
    };
    let several = req.partition.is_none() && req.partitions > 1;
    let lease: Option<Uuid> = (several && !req.auto_ack)
        .then(|| Uuid::from_bytes(*shards::stamp(uuid::Uuid::now_v7(), shards::MANY_SHARDS).as_bytes()));
    subscribe_everywhere(layout, req);
    // A pop of any partition takes what the reachable shards hold when a worker is down. It is
    // tried whole in a subtransaction (one savepoint for the whole pop); when a node cannot be
    // reached, it is tried again shard by shard, each shard's part in a subtransaction of its
    // own, and an unreachable shard is passed.
    let (rows, first) = if req.partition.is_some() || keys.len() < 2 {
        pop_shards(req, &keys, lease, false)?
    } else {
        let whole = crate::subxact::attempt_caught(|| pop_shards(req, &keys, lease, false));
        match whole {
            Ok(done) => done,
            Err(f) if f.node_unreachable() => pop_shards(req, &keys, lease, true)?,
            Err(f) => f.raise(),
        }
    };
    after(first, req);
    Ok(Outcome { rows, next_due: None, contended: true, more: false })
}

/// After a pop of any partition that delivered: the next starts after the shard that
/// delivered first.
fn after(first: Option<usize>, req: &PopRequest) {
    if let (Some(i), None) = (first, &req.partition) {
        NEXT_SHARD.with(|c| c.set(c.get().wrapping_add(i + 1)));
    }
}

/// One attempt of a pop in `keys`' shards, one after another until it has what it wants:
/// what it delivered, and the position of the first shard that delivered. `passing`: each
/// shard's part in a subtransaction of its own, a shard whose node cannot be reached passed
/// (an error when none answers: the pop cannot say the queue is empty).
fn pop_shards(
    req: &PopRequest,
    keys: &[i32],
    lease: Option<Uuid>,
    passing: bool,
) -> QueenResult<(Vec<Popped>, Option<usize>)> {
    let several = req.partition.is_none() && req.partitions > 1;
    let mut unreachable: Option<crate::subxact::Failed> = None;
    let mut passed = 0;
    let mut out: Vec<Popped> = Vec::new();
    let mut partitions: HashSet<[u8; 16]> = HashSet::new();
    let mut first = None;
    for (i, k) in keys.iter().enumerate() {
        let args: [DatumWithOid; 11] = [
            (*k).into(),
            req.queue.as_str().into(),
            req.group.as_deref().into(),
            (req.batch - out.len() as i32).into(),
            req.partition.as_deref().into(),
            (req.partitions - partitions.len() as i32).into(),
            req.lease_seconds.into(),
            req.auto_ack.into(),
            req.mode.as_str().into(),
            req.from.into(),
            lease.into(),
        ];
        let before = out.len();
        let read = || -> Vec<Popped> {
            crate::session::connect(|s| {
                DELEGATE_POP
                    .run(s, &args)
                    .map(|r| Popped {
                        message_id: r.req("message_id"),
                        transaction_id: r.req("transaction_id"),
                        queue: r.req("queue"),
                        partition: r.req("partition"),
                        partition_id: r.req("partition_id"),
                        payload: Jsonb(r.transfer("payload", -1).expect("queen: payload is not NULL")),
                        trace_id: r.get("trace_id"),
                        created_at: r.req("created_at"),
                        consumer_group: r.get("consumer_group"),
                        lease_id: r.get("lease_id"),
                        lease_expires_at: r.get("lease_expires_at"),
                        attempt: r.req("attempt"),
                    })
                    .collect()
            })
        };
        if !passing {
            out.extend(read());
        } else {
            match crate::subxact::attempt_caught(|| Ok(read())) {
                Ok(got) => out.extend(got),
                Err(f) if f.node_unreachable() => {
                    passed += 1;
                    unreachable = Some(f);
                    continue;
                }
                Err(f) => f.raise(),
            }
        }
        if out.len() > before {
            first.get_or_insert(i);
            partitions.extend(out[before..].iter().map(|m| *m.partition_id.as_bytes()));
            if !several || out.len() as i32 >= req.batch || partitions.len() as i32 >= req.partitions {
                break;
            }
        }
    }
    if let Some(f) = unreachable.filter(|_| passed == keys.len()) {
        f.raise();
    }
    Ok((out, first))
}

fn ack_result(row: &Row, idx: i32) -> AckResult {
    AckResult {
        idx,
        message_id: row.get("message_id"),
        success: row.req("success"),
        error: row.get("error"),
        lease_released: row.req("lease_released"),
        dead_lettered: row.req("dead_lettered"),
    }
}

/// The shard of an ack entry: its partition's, or the one its message id carries.
fn ack_shard(layout: &Layout, e: &AckEntry) -> i32 {
    match (e.partition_id, e.message_id) {
        (Some(p), _) => layout.key_of(p.as_bytes()),
        (None, Some(m)) => layout.keys[shards::stamped_index(m.as_bytes(), layout.keys.len())],
        (None, None) => layout.keys[0],
    }
}

/// `queen_ack`'s one message, on the worker of the shard its id carries.
pub fn ack_one(
    layout: &Layout,
    message_id: Uuid,
    lease_id: Option<Uuid>,
    status: &str,
    error: Option<&str>,
    group: Option<&str>,
) -> AckResult {
    crate::locks::wrote_through_a_worker();
    let k = layout.keys[shards::stamped_index(message_id.as_bytes(), layout.keys.len())];
    let grants = crate::privilege::caller_grants();
    crate::session::connect(|s| {
        let args: [DatumWithOid; 7] = [
            k.into(),
            message_id.into(),
            lease_id.into(),
            status.into(),
            error.into(),
            group.into(),
            grants.clone().into(),
        ];
        let rows = DELEGATE_ACK_ONE.run(s, &args);
        ack_result(&rows.first(), 0)
    })
}

/// `queen_ack`'s batch: the entries of each shard in one call of its worker; results in the
/// entries' order. (A lease is one pop's, and a routed pop takes one partition: a batch of one
/// lease is one shard's.)
pub fn ack_batch(layout: &Layout, entries: &[AckEntry], all: Jsonb) -> Vec<AckResult> {
    crate::locks::wrote_through_a_worker();
    let mut by_shard: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        by_shard.entry(ack_shard(layout, e)).or_default().push(i as i32);
    }
    let mut out: Vec<Option<AckResult>> = vec![None; entries.len()];
    let grants = crate::privilege::caller_grants();
    crate::session::connect(|s| {
        for (k, idxs) in &by_shard {
            let args: [DatumWithOid; 2] = [all.into(), idxs.clone().into()];
            let subset: Jsonb = ITEMS_SUBSET.run(s, &args).first().req("items");
            let args: [DatumWithOid; 3] = [(*k).into(), subset.into(), grants.clone().into()];
            for row in DELEGATE_ACK.run(s, &args) {
                let idx = idxs[row.req::<i32>("idx") as usize];
                out[idx as usize] = Some(ack_result(&row, idx));
            }
        }
    });
    out.into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.unwrap_or(AckResult {
                idx: i as i32,
                message_id: None,
                success: false,
                error: Some("message not found".into()),
                lease_released: false,
                dead_lettered: false,
            })
        })
        .collect()
}

/// The shard keys a lease's rows may be in: the one its id carries, or every shard for a lease
/// that spans shards (pop_on_workers).
fn lease_keys(layout: &Layout, lease_id: Uuid) -> Vec<i32> {
    if shards::spans_shards(lease_id.as_bytes()) {
        layout.keys.clone()
    } else {
        vec![layout.keys[shards::stamped_index(lease_id.as_bytes(), layout.keys.len())]]
    }
}

/// `queen_ack_lease` on the worker of each shard the lease may hold rows in: the results of
/// each shard in turn, `idx` numbered on across them.
pub fn ack_lease(layout: &Layout, lease_id: Uuid, status: &str, error: Option<&str>) -> Vec<AckResult> {
    crate::locks::wrote_through_a_worker();
    let grants = crate::privilege::caller_grants();
    crate::session::connect(|s| {
        let mut out: Vec<AckResult> = Vec::new();
        for k in lease_keys(layout, lease_id) {
            let args: [DatumWithOid; 5] =
                [k.into(), lease_id.into(), status.into(), error.into(), grants.clone().into()];
            let rows: Vec<AckResult> = DELEGATE_ACK_LEASE.run(s, &args).map(|r| ack_result(&r, 0)).collect();
            for mut r in rows {
                r.idx = out.len() as i32;
                out.push(r);
            }
        }
        out
    })
}

/// `queen_renew` on the worker of the shard its lease id carries (a pop's lease is one shard's:
/// shards::new_id), or in every shard for a lease that spans shards (pop_on_workers): the
/// latest expiry any shard set. A lease made before `queen_distribute()` carries no shard and
/// is not found.
pub fn renew(layout: &Layout, lease_id: Uuid, seconds: Option<i32>) -> Option<TimestampWithTimeZone> {
    crate::locks::wrote_through_a_worker();
    let keys = lease_keys(layout, lease_id);
    let grants = crate::privilege::caller_grants();
    crate::session::connect(|s| {
        let mut latest: Option<TimestampWithTimeZone> = None;
        for k in keys {
            let args: [DatumWithOid; 4] = [k.into(), lease_id.into(), seconds.into(), grants.clone().into()];
            if let Some(t) = DELEGATE_RENEW.run(s, &args).first().get::<TimestampWithTimeZone>(1) {
                if latest.is_none_or(|l| pgrx::pg_sys::TimestampTz::from(t) > pgrx::pg_sys::TimestampTz::from(l)) {
                    latest = Some(t);
                }
            }
        }
        latest
    })
}

/// `delegate`, a call of a `queen.shard_…` function that answers a count, in every shard of
/// `layout` (its first argument the shard key, then what `args` gives): the counts, summed.
fn sum_in_every_shard<'a>(
    s: &mut Spi,
    layout: &Layout,
    delegate: &Query,
    args: impl Fn() -> Vec<DatumWithOid<'a>>,
) -> i32 {
    let mut sum = 0;
    for k in &layout.keys {
        let mut with_key: Vec<DatumWithOid> = vec![(*k).into()];
        with_key.extend(args());
        sum += delegate.run(s, &with_key).first().req::<i32>(1);
    }
    sum
}

/// `queen_seek` in every shard, each with its worker's snapshot (a seek's position is a
/// partition's, and each shard's subscription row its own): the partitions set, summed.
pub fn seek(
    layout: &Layout,
    queue: &str,
    group: Option<&str>,
    to_time: Option<TimestampWithTimeZone>,
) -> QueenResult<i32> {
    writing_through_workers(queue, group)?;
    Ok(crate::session::connect(|s| {
        sum_in_every_shard(s, layout, &DELEGATE_SEEK, || vec![queue.into(), group.into(), to_time.into()])
    }))
}

/// `queen_replay_dead_letters` in every shard (dead_letters.rs): how many, summed.
pub fn replay_dead_letters(
    layout: &Layout,
    queue: &str,
    group: Option<&str>,
    message: Option<Uuid>,
) -> QueenResult<i32> {
    writing_through_workers(queue, group)?;
    Ok(crate::session::connect(|s| {
        let args = || vec![queue.into(), group.into(), message.into()];
        let replayed = sum_in_every_shard(s, layout, &DELEGATE_REPLAY_DEAD_LETTERS, args);
        if replayed > 0 {
            // Waiting pops wait on the coordinator: woken when this commits.
            crate::wait::touched(crate::wait::queue_key(&names::queue_id(queue)));
        }
        replayed
    }))
}

/// `queen_purge_dead_letters` in every shard: how many, summed.
pub fn purge_dead_letters(
    layout: &Layout,
    queue: &str,
    group: Option<&str>,
    message: Option<Uuid>,
    before: Option<TimestampWithTimeZone>,
) -> QueenResult<i32> {
    writing_through_workers(queue, group)?;
    Ok(crate::session::connect(|s| {
        let args = || vec![queue.into(), group.into(), message.into(), before.into()];
        sum_in_every_shard(s, layout, &DELEGATE_PURGE_DEAD_LETTERS, args)
    }))
}

/// On the coordinator, a call that writes rows of `queue` for `group` through the workers
/// takes the coordinator's shared locks of them ([`crate::locks::writing`]), as on one server:
/// a delete of either, which takes the coordinator's exclusive lock before any worker's,
/// waits for it (or it for the delete) there, before either touches a worker.
fn writing_through_workers(queue: &str, group: Option<&str>) -> QueenResult<()> {
    crate::locks::writing(to_pg(names::queue_id(queue)), Some(queue), Some(names::group_key(group)))?;
    Ok(())
}

/// `queen_delete_group` in every shard: the cursors removed, summed. Its commit moves the cache
/// generation: every backend subscribes the group everywhere again at its next first pop.
pub fn delete_group(layout: &Layout, group: Option<&str>, queue: Option<&str>) -> QueenResult<i32> {
    // The coordinator's locks first, as delete_queue's (writing_through_workers).
    crate::locks::deleting_group(queue.map(|q| (to_pg(names::queue_id(q)), q)), names::group_key(group))?;
    crate::cache::changed();
    Ok(crate::session::connect(|s| {
        let n = sum_in_every_shard(s, layout, &DELEGATE_DELETE_GROUP, || vec![group.into(), queue.into()]);
        let args: [DatumWithOid; 2] = [group.into(), queue.map(|q| to_pg(names::queue_id(q))).into()];
        FORGET_OWED_SUBSCRIPTIONS.run(s, &args);
        n
    }))
}

/// `queen_delete_queue`: the coordinator's lock of the queue first (pushes take it shared before
/// they look at the registry, register_queues), then every shard's rows, then the registry
/// rows; whether any of it existed.
pub fn delete_queue(layout: &Layout, queue: &str) -> QueenResult<bool> {
    let queue_id = to_pg(names::queue_id(queue));
    crate::locks::deleting_queue(queue_id, queue)?;
    crate::cache::changed(); // (as for a group: subscribe_everywhere)
    Ok(crate::session::connect(|s| {
        let mut existed = false;
        for k in &layout.keys {
            let args: [DatumWithOid; 2] = [(*k).into(), queue.into()];
            existed |= DELEGATE_DELETE_QUEUE.run(s, &args).first().req::<bool>(1);
        }
        let args: [DatumWithOid; 2] = [Option::<&str>::None.into(), queue_id.into()];
        FORGET_OWED_SUBSCRIPTIONS.run(s, &args);
        let args: [DatumWithOid; 1] = [queue_id.into()];
        existed |= crate::admin::DELETE_QUEUE_REGISTRY.run(s, &args).first().req::<bool>("existed");
        existed
    }))
}
