//! A per-backend cache of what a pop reads before it looks at any partition: the group's
//! subscription to the queue and the queue's options (subscription.rs). They change rarely
//! (a group's first pop, `queen_configure`, `queen_seek`, deletes, maintenance folding
//! subscription rows) and are read by every pop.
//!
//! **Invalidation across sessions.** Shared memory holds one generation counter. A
//! transaction that writes subscriptions or options calls [`changed`]; when it commits, the
//! transaction callback bumps the counter — after the commit is visible to others (Postgres
//! calls XACT_EVENT_COMMIT after ProcArrayEndTransaction), and `COMMIT PREPARED` bumps it
//! too (wait.rs's utility hook). A reader takes the counter *before* it reads the rows, and
//! files what it read under that value; an entry is used only while the counter is unchanged.
//! So a reader that read before a change committed holds an entry filed under the old value,
//! which the bump retires; a reader that took the counter after the bump reads after the
//! commit. What remains is the instant between a commit becoming visible and its bump: a pop
//! then may use the state it would have read a moment earlier, as if it had run a moment
//! earlier.
//!
//! The cache is bypassed where it could give another answer than a read: without shared
//! memory (the library not preloaded), in REPEATABLE READ and SERIALIZABLE (the transaction's
//! snapshot may be older than an entry), and in a transaction that changed them itself (until
//! it ends). Entries also record the `queen` schema's oid, so a dropped and re-created
//! extension never meets its predecessor's entries.

use crate::options::QueueOptions;
use crate::subscription::Subscription;
use pgrx::{pg_guard, pg_sys};
use pgrx::{PgAtomic, Uuid};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub static GENERATION: PgAtomic<AtomicU64> =
    // SAFETY: the name is queen's own; no other shared memory of this library uses it.
    unsafe { PgAtomic::new(c"queen_cache_generation") };

/// Whether the shared counter exists (the library was preloaded).
static READY: AtomicBool = AtomicBool::new(false);

/// The most entries a map keeps; past it, it starts again (a backend using more than this many
/// keys in turn gains little from caching them anyway).
const MAX_ENTRIES: usize = 4096;

thread_local! {
    /// This transaction wrote what is cached (subscriptions, options, grants).
    static DIRTY: Cell<bool> = const { Cell::new(false) };
}

/// Called from `_PG_init` when preloading.
pub fn init_shared() {
    pgrx::pg_shmem_init!(GENERATION);
    READY.store(true, Ordering::Relaxed);
}

/// What a read is filed under: the generation and the `queen` schema when it began.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    generation: u64,
    schema: pg_sys::Oid,
}

/// A ticket to read under, when the cache may be used at all (None: read, do not cache).
pub fn ticket() -> Option<Ticket> {
    if !READY.load(Ordering::Relaxed) || DIRTY.get() {
        return None;
    }
    // SAFETY: XactIsoLevel is a backend global, set for the current transaction.
    if unsafe { pg_sys::XactIsoLevel } > pg_sys::XACT_READ_COMMITTED as i32 {
        return None;
    }
    Some(Ticket { generation: GENERATION.get().load(Ordering::Acquire), schema: crate::cluster::schema_oid() })
}

/// A backend's map of cached reads, each filed under the ticket it was read with.
pub struct Map<K, V> {
    entries: HashMap<K, (Ticket, V)>,
}

impl<K: std::hash::Hash + Eq, V: Clone> Map<K, V> {
    pub fn new() -> Self {
        Map { entries: HashMap::new() }
    }

    /// The value read under a ticket still current (`now`).
    pub fn get(&self, key: &K, now: &Ticket) -> Option<V> {
        self.entries.get(key).filter(|(t, _)| t == now).map(|(_, v)| v.clone())
    }

    /// File what was read under `ticket` (unless this transaction changed things since).
    pub fn put(&mut self, key: K, ticket: Ticket, value: V) {
        if DIRTY.get() {
            return;
        }
        if self.entries.len() >= MAX_ENTRIES {
            self.entries.clear();
        }
        self.entries.insert(key, (ticket, value));
    }
}

impl<K: std::hash::Hash + Eq, V: Clone> Default for Map<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

type SubscriptionMap = Map<(Uuid, String), (Subscription, QueueOptions)>;

thread_local! {
    static SUBSCRIPTIONS: RefCell<SubscriptionMap> = RefCell::new(Map::new());
}

/// The cached subscription and options of (queue, group), or a ticket to file a fresh read
/// under (`Err(None)`: do not cache).
pub fn get(queue_id: Uuid, group: &str) -> Result<(Subscription, QueueOptions), Option<Ticket>> {
    let Some(ticket) = ticket() else {
        return Err(None);
    };
    SUBSCRIPTIONS.with(|m| m.borrow().get(&(queue_id, group.to_string()), &ticket)).ok_or(Some(ticket))
}

/// File what was read under `ticket`.
pub fn put(ticket: Ticket, queue_id: Uuid, group: &str, value: &(Subscription, QueueOptions)) {
    SUBSCRIPTIONS.with(|m| m.borrow_mut().put((queue_id, group.to_string()), ticket, value.clone()));
}

/// This transaction wrote subscriptions or queue options: bypass the cache until it ends,
/// and retire every backend's entries when it commits.
pub fn changed() {
    DIRTY.set(true);
}

/// At commit (after the commit is visible): retire every backend's entries if this
/// transaction changed anything.
pub fn at_commit() {
    if DIRTY.replace(false) && READY.load(Ordering::Relaxed) {
        GENERATION.get().fetch_add(1, Ordering::AcqRel);
    }
}

/// At abort (or PREPARE, whose COMMIT PREPARED calls [`bump`]).
pub fn at_abort() {
    DIRTY.set(false);
}

/// Retire every backend's entries (after `COMMIT PREPARED`: the prepared transaction may
/// have changed them).
pub fn bump() {
    if READY.load(Ordering::Relaxed) {
        GENERATION.get().fetch_add(1, Ordering::AcqRel);
    }
}
