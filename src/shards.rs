//! Where a partition lives when queen is distributed on Citus (docs/design.md, "Distributed on
//! Citus"): the shard keys `queen_distribute()` picked, one per Citus shard, and the key of a
//! partition. On one server there is one key, 0, and nothing is routed.
//!
//! The layout is read once per backend and read again after any relation-cache invalidation of
//! `queen.messages`: `create_distributed_table` sends one to every backend when it commits, so
//! a backend that started before `queen_distribute()` routes from its next call on.

use crate::spi::types::{BOOL, INT4, INT4S, INT8, JSONB, TEXT, TEXTS, TSTZ, UUID, UUIDS};
use crate::spi::{Query, Spi};
use pgrx::{pg_guard, pg_sys};
use std::cell::{Cell, RefCell};

const SQL: &str = include_str!("../sql/queries/shards.sql");
const SHARD_KEYS: Query = Query { file: SQL, name: "shard_keys", args: &[] };
const CITUS_INSTALLED: Query = Query { file: SQL, name: "citus_installed", args: &[] };
const QUEEN_DISTRIBUTED: Query = Query { file: SQL, name: "queen_distributed", args: &[] };
pub const DELEGATE_PUSH_ONE: Query =
    Query { file: SQL, name: "delegate_push_one", args: &[INT4, TEXT, JSONB, TEXT, TEXT, UUID] };
pub const DELEGATE_PUSH: Query = Query { file: SQL, name: "delegate_push", args: &[INT4, JSONB] };
pub const DELEGATE_ACK_ONE: Query =
    Query { file: SQL, name: "delegate_ack_one", args: &[INT4, UUID, UUID, TEXT, TEXT, TEXT, TEXTS] };
pub const DELEGATE_ACK: Query = Query { file: SQL, name: "delegate_ack", args: &[INT4, JSONB, TEXTS] };
pub const DELEGATE_ACK_LEASE: Query =
    Query { file: SQL, name: "delegate_ack_lease", args: &[INT4, UUID, TEXT, TEXT, TEXTS] };
pub const DELEGATE_SUBSCRIBE: Query =
    Query { file: SQL, name: "delegate_subscribe", args: &[INT4, TEXT, TEXT, TEXT, TSTZ] };
pub const DELEGATE_POP: Query = Query {
    file: SQL,
    name: "delegate_pop",
    args: &[INT4, TEXT, TEXT, INT4, TEXT, INT4, INT4, BOOL, TEXT, TSTZ, UUID],
};
pub const ITEMS_SUBSET: Query = Query { file: SQL, name: "items_subset", args: &[JSONB, INT4S] };
pub const QUEUES_REGISTERED: Query = Query { file: SQL, name: "queues_registered", args: &[UUIDS] };
const LOCAL_SHARD_KEYS: Query = Query { file: SQL, name: "local_shard_keys", args: &[] };
const IS_COORDINATOR: Query = Query { file: SQL, name: "is_coordinator", args: &[] };
const LOCAL_SHARD_TABLES: Query = Query { file: SQL, name: "local_shard_tables", args: &[INT4] };
const SHARD_HERE: Query = Query { file: SQL, name: "shard_here", args: &[INT8] };
pub const COUNT_QUEUE_EVERYWHERE: Query = Query { file: SQL, name: "count_queue_everywhere", args: &[UUID, INT8] };
pub const REGISTER_QUEUE: Query = Query { file: SQL, name: "register_queue", args: &[UUID, TEXT] };
pub const DELEGATE_RENEW: Query = Query { file: SQL, name: "delegate_renew", args: &[INT4, UUID, INT4, TEXTS] };
pub const DELEGATE_SEEK: Query = Query { file: SQL, name: "delegate_seek", args: &[INT4, TEXT, TEXT, TSTZ] };
pub const DELEGATE_REPLAY_DEAD_LETTERS: Query =
    Query { file: SQL, name: "delegate_replay_dead_letters", args: &[INT4, TEXT, TEXT, UUID] };
pub const DELEGATE_PURGE_DEAD_LETTERS: Query =
    Query { file: SQL, name: "delegate_purge_dead_letters", args: &[INT4, TEXT, TEXT, UUID, TSTZ] };
pub const DELEGATE_DELETE_GROUP: Query = Query { file: SQL, name: "delegate_delete_group", args: &[INT4, TEXT, TEXT] };
pub const SUBSCRIPTIONS_OWED: Query = Query { file: SQL, name: "subscriptions_owed", args: &[UUID, TEXT] };
pub const OWE_SUBSCRIPTION: Query =
    Query { file: SQL, name: "owe_subscription", args: &[UUID, TEXT, INT4, TEXT, TSTZ] };
pub const SUBSCRIPTION_PAID: Query = Query { file: SQL, name: "subscription_paid", args: &[UUID, TEXT, INT4] };
pub const FORGET_OWED_SUBSCRIPTIONS: Query =
    Query { file: SQL, name: "forget_owed_subscriptions", args: &[TEXT, UUID] };
pub const DELEGATE_DELETE_QUEUE: Query = Query { file: SQL, name: "delegate_delete_queue", args: &[INT4, TEXT] };

/// The shard keys and whether queen's tables are distributed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub distributed: bool,
    pub keys: Vec<i32>,
}

impl Layout {
    /// One server: one key, 0.
    pub fn single() -> Layout {
        Layout { distributed: false, keys: vec![0] }
    }

    /// The shard key of a partition (its position: [`index`]).
    pub fn key_of(&self, partition_id: &[u8; 16]) -> i32 {
        self.keys[index(partition_id, self.keys.len())]
    }
}

/// Which of `keys` shard keys a partition has: the id's first four bytes as an unsigned
/// number, modulo `keys` (`queen.shard_index` in sql/distribute.sql is the same).
pub fn index(partition_id: &[u8; 16], keys: usize) -> usize {
    let h = u32::from_be_bytes([partition_id[0], partition_id[1], partition_id[2], partition_id[3]]);
    (h as usize) % keys.max(1)
}

thread_local! {
    static LAYOUT: RefCell<Option<Layout>> = const { RefCell::new(None) };
    /// The oid of queen.messages the layout was read for (invalidations name it).
    static MESSAGES: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
    static REGISTERED: Cell<bool> = const { Cell::new(false) };
    /// The shard key the running call works in: set by a worker's call on Citus for its
    /// duration (Citus pins the call to that key), 0 otherwise.
    static CURRENT: Cell<i32> = const { Cell::new(0) };
}

/// The shard key queen's queries filter by in this call.
pub fn current() -> i32 {
    CURRENT.with(Cell::get)
}

/// Run `f` as a call of shard `k` (a worker's side of a call on Citus): every query of queen
/// filters by it; back to 0 when `f` returns or raises.
pub fn within<R>(k: i32, f: impl FnOnce() -> R) -> R {
    struct Reset(i32);
    impl Drop for Reset {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(CURRENT.with(|c| c.replace(k)));
    f()
}

#[pg_guard]
extern "C-unwind" fn relcache_changed(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    if relid == pg_sys::InvalidOid || relid == MESSAGES.with(Cell::get) {
        LAYOUT.with(|l| l.borrow_mut().take());
        ROLES_HERE.set(None);
    }
}

thread_local! {
    /// Whether queen's grants name this node's roles ([`roles_here`]), as last read.
    static ROLES_HERE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// [`roles_here`] as last read, without reading it.
pub fn roles_here_known() -> Option<bool> {
    ROLES_HERE.get()
}

/// Whether the roles `queen.privileges` names (by oid) are this node's: on one server and on
/// a Citus coordinator, yes; on a Citus worker, no — the rows are the coordinator's, copied as
/// they are, and a worker's roles have other oids (a role created after the cluster was, or
/// on another node first, may have the oid another role has there). On a worker no grant is
/// read: only admins' calls pass (the coordinator delegates as the extension's owner).
pub fn roles_here(s: &mut Spi) -> bool {
    if let Some(v) = ROLES_HERE.get() {
        return v;
    }
    let v = !layout(s).distributed || IS_COORDINATOR.run(s, &[]).first().req::<bool>("coordinator");
    ROLES_HERE.set(Some(v));
    v
}

/// The layout, read if this backend has none that is still good.
pub fn layout(s: &mut Spi) -> Layout {
    if let Some(l) = LAYOUT.with(|l| l.borrow().clone()) {
        return l;
    }
    if !REGISTERED.with(Cell::get) {
        // SAFETY: registers a plain function for the rest of the backend's life, once.
        unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(relcache_changed), pg_sys::Datum::from(0)) };
        REGISTERED.with(|r| r.set(true));
    }
    let (installed, messages) = {
        let row = CITUS_INSTALLED.run(s, &[]).first();
        (row.req::<bool>("installed"), row.req::<pg_sys::Oid>("messages"))
    };
    MESSAGES.with(|m| m.set(messages));
    let distributed = installed && QUEEN_DISTRIBUTED.run(s, &[]).first().req::<bool>("distributed");
    let l = if distributed {
        Layout { distributed, keys: SHARD_KEYS.run(s, &[]).map(|r| r.req::<i32>("shard")).collect() }
    } else {
        Layout::single()
    };
    if l.distributed {
        // Plans prepared for one server force generic plans, which Citus cannot route.
        crate::spi::forget_plans();
        // Read again after an invalidation, which Citus sends when placements change: a
        // shard may have reached this node, and its ids are to be covered before use (the
        // mapping's next check reads it again: cluster.rs).
        PLACEMENTS_CHANGED.set(true);
        LOCAL_TABLES.with(|t| t.borrow_mut().clear());
    }
    LAYOUT.with(|c| *c.borrow_mut() = Some(l.clone()));
    crate::spi::plan_for_citus(l.distributed);
    l
}

/// Where a maintenance pass on this node works: the shard keys of the shards it holds, and
/// whether it keeps the queues' registry (a reference table, folded once, by the coordinator).
/// On one server: key 0, and the registry.
pub fn local(s: &mut Spi) -> (Vec<i32>, bool) {
    if !layout(s).distributed {
        return (vec![0], true);
    }
    let keys = LOCAL_SHARD_KEYS.run(s, &[]).map(|r| r.req::<i32>("shard")).collect();
    (keys, IS_COORDINATOR.run(s, &[]).first().req::<bool>("coordinator"))
}

/// The layout this backend holds, if it holds one (no SPI): None when it must be read. The
/// outer Option says whether it is known, the inner whether queen is distributed.
pub fn known() -> Option<Option<Layout>> {
    LAYOUT.with(|l| l.borrow().as_ref().map(|l| l.distributed.then(|| l.clone())))
}

/// Where a message id keeps its shard: the position of its shard key among the keys, in its last
/// two bytes (random bits of a UUIDv7, which it stays), so that an ack naming a message by id
/// alone is routed to its shard. (Ids of messages pushed before `queen_distribute()` carry
/// none: acks of those need their partition.)
pub fn stamp(id: uuid::Uuid, index: usize) -> uuid::Uuid {
    let mut b = *id.as_bytes();
    b[14..16].copy_from_slice(&(index as u16).to_be_bytes());
    uuid::Uuid::from_bytes(b)
}

/// The stamp of a lease that spans several shards (a coordinator's pop of several partitions):
/// no shard's position, as there are at most 1024 keys.
pub const MANY_SHARDS: usize = 0xFFFF;

/// Whether an id carries [`MANY_SHARDS`].
pub fn spans_shards(id: &[u8; 16]) -> bool {
    id[14] == 0xFF && id[15] == 0xFF
}

/// The shard key position a message id carries ([`stamp`]), among `keys` keys.
pub fn stamped_index(id: &[u8; 16], keys: usize) -> usize {
    usize::from(u16::from_be_bytes([id[14], id[15]])) % keys.max(1)
}

/// A new message id for shard key `shard` (None: one server, a plain UUIDv7).
pub fn new_message_id(shard: Option<i32>) -> uuid::Uuid {
    let id = uuid::Uuid::now_v7();
    match shard {
        None => id,
        Some(k) => {
            let index = LAYOUT.with(|l| l.borrow().as_ref().and_then(|l| l.keys.iter().position(|x| *x == k)));
            stamp(id, index.unwrap_or(0))
        }
    }
}

/// A new id (a lease's) for the running call: on Citus stamped with its shard ([`stamp`]), so that
/// a call naming it alone (`queen_renew`) is routed there; a plain UUIDv7 on one server.
pub fn new_id() -> uuid::Uuid {
    new_message_id(planning_for_citus().then(current))
}

thread_local! {
    /// The tables of each shard key on this node's shards, as read ([`enter_local`]); read
    /// again after queen's layout is (a relation-cache invalidation of queen.messages).
    static LOCAL_TABLES: RefCell<std::collections::HashMap<i32, std::rc::Rc<crate::spi::LocalShard>>> =
        RefCell::new(std::collections::HashMap::new());
}

/// Citus's lock of the placement metadata of a shard of a colocation group (resource_lock.h,
/// `SET_LOCKTAG_COLOCATED_SHARDS_METADATA_RESOURCE`: the database, the shard's index in hash
/// order, the colocation group, class 8): the lock every shard of that index in the group
/// shares. A shard move takes it EXCLUSIVE on every node while it switches the shards'
/// placement; Citus's own writes to a shard take it SHARE. Held SHARE, the shards stay where
/// they are until the transaction ends.
fn shard_metadata_tag(colocation: u32, index: u32) -> pg_sys::LOCKTAG {
    // SAFETY: MyDatabaseId is set at backend start and never changes afterwards.
    let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
    pg_sys::LOCKTAG {
        locktag_field1: db,
        locktag_field2: index,
        locktag_field3: colocation,
        locktag_field4: 8,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// Work on shard key `k`'s shard through its local tables, in this transaction: Citus's
/// metadata lock of the shard taken SHARE (without waiting: a move switching it holds it), and
/// the shard still placed on this node once it is held. Returns the shard's tables for
/// [`crate::spi::with_local_shard`]; None when the shard is not here (moved, or moving): the
/// work is left to the node that holds it.
pub fn enter_local(s: &mut Spi, k: i32) -> Option<std::rc::Rc<crate::spi::LocalShard>> {
    let local = match LOCAL_TABLES.with(|t| t.borrow().get(&k).cloned()) {
        Some(l) => l,
        None => {
            let mut tables = Vec::new();
            let mut elsewhere = Vec::new();
            let mut anchor = None;
            for r in LOCAL_SHARD_TABLES.run(s, &[k.into()]) {
                let name: String = r.req("name");
                match r.get::<String>("shard_name") {
                    Some(shard) => {
                        anchor.get_or_insert((
                            r.req::<i64>("shardid"),
                            r.req::<i64>("colocationid") as u32,
                            r.req::<i64>("shard_index") as u32,
                        ));
                        tables.push((name, shard));
                    }
                    None => elsewhere.push(name),
                }
            }
            let (anchor, colocation, index) = anchor?;
            let l = std::rc::Rc::new(crate::spi::LocalShard { anchor, colocation, index, tables, elsewhere });
            LOCAL_TABLES.with(|t| t.borrow_mut().insert(k, l.clone()));
            l
        }
    };
    let tag = shard_metadata_tag(local.colocation, local.index);
    // SAFETY: a tag of the user lock method; dontWait, so this returns at once; held to the
    // end of the transaction.
    let got = unsafe { pg_sys::LockAcquire(&tag, pg_sys::ShareLock as pg_sys::LOCKMODE, false, true) };
    if got == pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL {
        return None;
    }
    let (here, settled) = {
        let r = SHARD_HERE.run_latest(s, &[local.anchor.into()]).first();
        (r.req::<bool>("here"), r.req::<bool>("settled"))
    };
    if here && !settled {
        // The shard has just reached this node, and this backend has not noticed yet (its
        // invalidation may come later than the placement it reads): settled first, as a
        // noticed arrival is (cluster.rs); a transaction that already used the old mapping
        // fails with 40001, to be retried.
        PLACEMENTS_CHANGED.set(true);
        crate::cluster::ensure(s);
    }
    here.then_some(local)
}

thread_local! {
    /// The placements of queen's shards may have changed since the mapping's last check
    /// (cluster.rs takes it): a shard may have reached this node.
    static PLACEMENTS_CHANGED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the placements of queen's shards may have changed since this was last asked.
pub fn take_placements_changed() -> bool {
    PLACEMENTS_CHANGED.replace(false)
}

/// Whether plans are to be made for Citus (set once the layout says distributed).
pub fn planning_for_citus() -> bool {
    crate::spi::planning_for_citus()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> [u8; 16] {
        *uuid::Uuid::parse_str(s).unwrap().as_bytes()
    }

    #[test]
    fn a_partitions_index_is_its_first_four_bytes_modulo_the_keys() {
        // (uuid, keys, index)
        let cases: [(&str, usize, u64); 7] = [
            ("00000000-0000-0000-0000-000000000000", 4, 0),
            ("00000003-ffff-ffff-ffff-ffffffffffff", 4, 3),
            ("ffffffff-0000-0000-0000-000000000000", 4, 3),
            ("ffffffff-0000-0000-0000-000000000000", 7, 4294967295 % 7),
            ("80000000-0000-0000-0000-000000000000", 32, 0),
            ("12345678-9abc-def0-1234-56789abcdef0", 1, 0),
            ("12345678-9abc-def0-1234-56789abcdef0", 1000, 0x12345678 % 1000),
        ];
        for (u, keys, want) in cases {
            assert_eq!(index(&id(u), keys) as u64, want, "{u} over {keys}");
        }
    }

    #[test]
    fn a_message_id_carries_its_shard_and_stays_a_uuid_v7() {
        for index in [0usize, 1, 7, 31, 1023] {
            let id = stamp(uuid::Uuid::now_v7(), index);
            assert_eq!(id.get_version_num(), 7);
            assert_eq!(stamped_index(id.as_bytes(), 1024), index);
            assert_eq!(stamped_index(id.as_bytes(), 32), index % 32);
        }
    }

    #[test]
    fn one_server_has_one_key() {
        let l = Layout::single();
        assert_eq!(l.key_of(&id("ffffffff-0000-0000-0000-000000000000")), 0);
        assert!(!l.distributed);
    }

    #[test]
    fn a_partition_gets_the_key_at_its_index() {
        let l = Layout { distributed: true, keys: vec![1, 5, 4, 0] };
        assert_eq!(l.key_of(&id("00000002-0000-0000-0000-000000000000")), 4);
        assert_eq!(l.key_of(&id("00000007-0000-0000-0000-000000000000")), 0);
    }
}
