//! The functions that operate on consumer state (semantics §3.4): `queen_renew`, `queen_seek`,
//! `queen_delete_group`, `queen_delete_queue`. Each is one statement of
//! `sql/queries/admin.sql`, on the rows of one shard key (`shards::current()`: on Citus, a
//! worker's call for its shard, route.rs; 0 on one server).

use crate::error::QueenResult;
use crate::locks::{Lock, Mode};
use crate::names;
use crate::names::group_key;
use crate::names::to_pg;
use crate::spi::types::{INT4, INT8, TEXT, TSTZ, UUID};
use crate::spi::Query;
use pgrx::datum::{DatumWithOid, TimestampWithTimeZone};
use pgrx::Uuid;

const SQL: &str = include_str!("../sql/queries/admin.sql");
const LEASE_QUEUES: Query = Query { file: SQL, name: "lease_queues", args: &[UUID, INT4] };
const RENEW: Query = Query { file: SQL, name: "renew", args: &[UUID, INT4, INT4, INT4, TSTZ, INT8, INT4] };
const SEEK: Query = Query { file: SQL, name: "seek", args: &[UUID, TEXT, TSTZ, INT4, TSTZ] };
const SEEK_LOCK: Query = Query { file: SQL, name: "seek_lock", args: &[UUID, TEXT, INT4] };
const SEEK_POINT: Query = Query { file: SQL, name: "seek_point", args: &[UUID, TEXT, INT4] };
const DELETE_GROUP_LOCK: Query = Query { file: SQL, name: "delete_group_lock", args: &[TEXT, UUID, INT4] };
const DELETE_GROUP: Query = Query { file: SQL, name: "delete_group", args: &[TEXT, UUID, INT4] };
const DELETE_QUEUE_LOCK: Query = Query { file: SQL, name: "delete_queue_lock", args: &[UUID, INT4] };
const DELETE_QUEUE: Query = Query { file: SQL, name: "delete_queue", args: &[UUID, INT4] };
pub const DELETE_QUEUE_REGISTRY: Query = Query { file: SQL, name: "delete_queue_registry", args: &[UUID] };

/// Extend an active lease; None when it is no longer active.
pub fn renew(lease_id: Uuid, seconds: Option<i32>) -> QueenResult<Option<TimestampWithTimeZone>> {
    if let Some(s) = seconds {
        crate::options::check_lease("argument \"seconds\"", s)?;
    }
    let role = crate::privilege::caller();
    let shard = crate::shards::current();
    let citus = crate::shards::planning_for_citus();
    crate::session::connect(|s| {
        // The caller must hold `pop` on the queues the lease covers (none: nothing to renew);
        // a lease of a queue it holds no privilege on is, to it, no lease (privilege.rs
        // unknown_to): NULL, as for an unknown one.
        let args: [DatumWithOid; 2] = [lease_id.into(), shard.into()];
        let scope: Vec<(Uuid, String)> =
            LEASE_QUEUES.run(s, &args).map(|r| (r.req("queue_id"), r.req("consumer_group"))).collect();
        let queues: Vec<Uuid> = scope.iter().map(|(q, _)| *q).collect();
        if !crate::privilege::is_admin(s, role)
            && !crate::privilege::unknown_to(s, role, &queues, crate::privilege::Privilege::Pop)?.is_empty()
        {
            return Ok(None);
        }
        if scope.is_empty() {
            return Ok(None); // no row holds the lease (a lease's rows never come back)
        }
        // The rows are locked below: their queues' and group's locks first (locks.rs).
        for (queue, group) in &scope {
            crate::locks::writing(*queue, None, Some(group))?;
        }
        // On Citus the queue's options (a reference table) are read apart from the shard's rows.
        let lease_time: Option<i32> =
            if citus { queues.first().map(|q| crate::configure::load(s, *q).effective().lease_time) } else { None };
        let now = crate::state::timestamp(crate::state::now(s));
        let args: [DatumWithOid; 7] = [
            lease_id.into(),
            seconds.into(),
            crate::gucs::MAX_LEASE_SECONDS.get().into(),
            shard.into(),
            now.into(),
            // The caller's stored id, taken (an xid assigned) only when there is a lease to renew.
            Some(crate::cluster::txid()).into(),
            lease_time.into(),
        ];
        let r = RENEW.run(s, &args).first();
        let expires_at = r.get::<TimestampWithTimeZone>("expires_at");
        if expires_at.is_none() && r.req::<bool>("active") {
            // The queue's leaseTime, set under a higher bound: refused, nothing changed.
            crate::options::check_lease("option \"leaseTime\" of the lease's queue", r.req::<i32>("seconds"))?;
        }
        Ok(expires_at)
    })
}

/// `queen_seek`: the group's shared locks first (locks.rs: an open delete is waited for), and
/// the queue's Subscribe lock (its seek row is a subscription: completed retention leaves the
/// queue alone until it commits).
pub fn seek(queue: &str, group: Option<&str>, to_time: Option<TimestampWithTimeZone>) -> QueenResult<i32> {
    let queue_id = to_pg(names::queue_id(queue));
    let key = group_key(group);
    crate::locks::writing(queue_id, Some(queue), Some(key))?;
    crate::locks::take_fresh(Lock::Subscribe(queue_id), Mode::Shared, || {
        format!("queue \"{}\" (completed retention)", crate::error::shorten(queue))
    })?;
    crate::session::connect(|s| {
        let now = crate::state::timestamp(crate::state::now(s));
        let args: [DatumWithOid; 5] =
            [queue_id.into(), key.into(), to_time.into(), crate::shards::current().into(), now.into()];
        // The group's cursor rows of the queue, all or none (locks.rs all_or_none): the
        // statement below then waits for none of them.
        let lock_args: [DatumWithOid; 3] = [queue_id.into(), key.into(), crate::shards::current().into()];
        SEEK_LOCK.run(s, &lock_args);
        crate::cache::changed();
        let set = SEEK.run(s, &args).first().req::<i64>("partitions_set") as i32;
        // Discovery reads on from the seek's snapshot (admin.sql seek_point). On Citus, where a
        // worker's statement may not join a shard with the subscriptions view, it reads the
        // log again from the seek's position, as it did before.
        if !crate::shards::planning_for_citus() {
            let args: [DatumWithOid; 3] = [queue_id.into(), key.into(), crate::shards::current().into()];
            SEEK_POINT.run(s, &args);
        }
        Ok(set)
    })
}

/// `queen_delete_group`: the group's exclusive lock (locks.rs), which waits for every open
/// transaction that pops or creates rows of the group; then the rows an open ack holds are
/// waited for (locked), and everything is deleted by a statement that sees what they
/// committed (a dead letter an open `dlq` ack filed, item 11).
pub fn delete_group(group: Option<&str>, queue: Option<&str>) -> QueenResult<i32> {
    let queue_id = queue.map(|q| to_pg(names::queue_id(q)));
    let key = group_key(group);
    crate::locks::deleting_group(queue_id.zip(queue), key)?;
    Ok(crate::session::connect(|s| {
        let args: [DatumWithOid; 3] = [key.into(), queue_id.into(), crate::shards::current().into()];
        crate::cache::changed();
        DELETE_GROUP_LOCK.run(s, &args);
        DELETE_GROUP.run(s, &args).first().req::<i64>("cursors_removed") as i32
    }))
}

/// `queen_delete_queue`: the queue's exclusive lock (locks.rs), which waits for every open
/// transaction that pushed, popped or otherwise wrote rows of the queue (its rows go with the
/// queue: items 8, 9); then the rows open acks hold, as for a group; then everything,
/// maintenance's count included (item 10).
pub fn delete_queue(queue: &str) -> QueenResult<bool> {
    let queue_id = to_pg(names::queue_id(queue));
    crate::locks::deleting_queue(queue_id, queue)?;
    Ok(crate::session::connect(|s| {
        let args: [DatumWithOid; 2] = [queue_id.into(), crate::shards::current().into()];
        crate::cache::changed();
        DELETE_QUEUE_LOCK.run(s, &args);
        DELETE_QUEUE.run(s, &args).first().req::<bool>("existed")
    }))
}
