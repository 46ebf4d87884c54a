//! A per-backend cache of what a pop reads before it looks at any partition: the group's
//! subscription to the queue and the queue's options (subscription.rs), and the grants of a
//! queue (privilege.rs). They change rarely (a group's first pop, `queen_configure`,
//! `queen_seek`, deletes, grants, maintenance folding subscription rows) and are read by every
//! call.
//!
//! **Invalidation across sessions.** Shared memory holds a generation counter and a count of
//! the commits *in flight* that change cached state. A transaction that writes such rows calls
//! [`changed`]; at pre-commit (before its commit is visible to anyone) it raises the in-flight
//! count, and once the commit is visible (XACT_EVENT_COMMIT comes after
//! ProcArrayEndTransaction) it bumps the generation and lowers the count; an abort after
//! pre-commit does the same. `COMMIT PREPARED` does both around the commit (wait.rs's utility
//! hook). A reader takes a [`ticket`]: the in-flight count first — if a change is in flight,
//! it neither uses nor files an entry — then the generation, and files what it read under it;
//! an entry is used only while the generation is the one it was read under and nothing is in
//! flight.
//!
//! Why both: a bump at XACT_EVENT_COMMIT alone left a window between the commit becoming
//! visible and the bump, in which a backend used its old entry next to rows it read that the
//! commit had changed (after `queen_delete_group` committed, a pop used the cached `'all'`
//! subscription of the deleted group; after `queen_revoke`, a revoked role's push went
//! through). A bump at pre-commit alone lets a reader cache the old rows under the new
//! generation, before the commit is visible. With the count, an entry filed under generation
//! g was read by a snapshot taken after every commit that bumped to g was visible, and is not
//! used once a later such commit is visible (its count is raised before, its bump done
//! before the count is lowered). The reads are ordered (count, then generation) so that a
//! commit finished between the two shows as a new generation.
//!
//! The cache is bypassed where it could give another answer than a read: without shared
//! memory (the library not preloaded), in REPEATABLE READ and SERIALIZABLE (the transaction's
//! snapshot may be older than an entry), and in a transaction that changed them itself (until
//! it ends). Entries also record the `queen` schema's oid, so a dropped and re-created
//! extension never meets its predecessor's entries.

use pgrx::PgAtomic;
use pgrx::{pg_guard, pg_sys};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub static GENERATION: PgAtomic<AtomicU64> =
    // SAFETY: the name is queen's own; no other shared memory of this library uses it.
    unsafe { PgAtomic::new(c"queen_cache_generation") };

/// Commits that change cached state and are between their pre-commit and their bump.
pub static IN_FLIGHT: PgAtomic<AtomicU64> =
    // SAFETY: the name is queen's own; no other shared memory of this library uses it.
    unsafe { PgAtomic::new(c"queen_cache_in_flight") };

/// Whether the shared counter exists (the library was preloaded).
static READY: AtomicBool = AtomicBool::new(false);

/// The most entries a map keeps; past it, it starts again (a backend using more than this many
/// keys in turn gains little from caching them anyway).
const MAX_ENTRIES: usize = 4096;

thread_local! {
    /// This transaction wrote what is cached (subscriptions, options, grants).
    static DIRTY: Cell<bool> = const { Cell::new(false) };
    /// This transaction raised the in-flight count at its pre-commit.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

/// Called from `_PG_init` when preloading.
pub fn init_shared() {
    pgrx::pg_shmem_init!(GENERATION);
    pgrx::pg_shmem_init!(IN_FLIGHT);
    READY.store(true, Ordering::Relaxed);
}

/// Whether the shared counters exist (the library was preloaded).
pub fn shared() -> bool {
    READY.load(Ordering::Relaxed)
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
    // On Citus what is cached also changes through other nodes' transactions (the reference
    // tables; two-phase commits, whose commit runs none of queen's hooks on a worker): not
    // cached there yet (issue 22).
    if crate::shards::planning_for_citus() {
        return None;
    }
    // SAFETY: XactIsoLevel is a backend global, set for the current transaction.
    if unsafe { pg_sys::XactIsoLevel } > pg_sys::XACT_READ_COMMITTED as i32 {
        return None;
    }
    // The count first, then the generation (see the module's comment).
    if IN_FLIGHT.get().load(Ordering::SeqCst) > 0 {
        return None;
    }
    Some(Ticket { generation: GENERATION.get().load(Ordering::SeqCst), schema: crate::names::schema_oid() })
}

/// The generation now, if the cache may be trusted at all at this moment (preloaded, nothing
/// in flight): for state kept outside [`Map`]s (cluster.rs).
pub fn generation_now() -> Option<u64> {
    if !READY.load(Ordering::Relaxed) || IN_FLIGHT.get().load(Ordering::SeqCst) > 0 {
        return None;
    }
    Some(GENERATION.get().load(Ordering::SeqCst))
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

/// The value of `key` in the backend's map `map`: as kept under the current ticket, or read by
/// `read` (and kept, when the cache may be used: [`ticket`]).
pub fn read_through<K, V>(
    map: &'static std::thread::LocalKey<RefCell<Map<K, V>>>,
    key: K,
    read: impl FnOnce() -> V,
) -> V
where
    K: std::hash::Hash + Eq,
    V: Clone,
{
    let ticket = ticket();
    if let Some(v) = ticket.as_ref().and_then(|t| map.with(|m| m.borrow().get(&key, t))) {
        return v;
    }
    let v = read();
    if let Some(t) = ticket {
        map.with(|m| m.borrow_mut().put(key, t, v.clone()));
    }
    v
}

/// This transaction wrote subscriptions or queue options: bypass the cache until it ends,
/// and retire every backend's entries when it commits.
pub fn changed() {
    DIRTY.set(true);
}

/// At pre-commit (before the commit is visible): a commit that changes cached state is in
/// flight until [`at_commit`] or [`at_abort`].
pub fn at_pre_commit() {
    if DIRTY.get() && READY.load(Ordering::Relaxed) && !COUNTED.replace(true) {
        IN_FLIGHT.get().fetch_add(1, Ordering::SeqCst);
    }
}

/// At commit (after the commit is visible): retire every backend's entries if this
/// transaction changed anything.
pub fn at_commit() {
    if DIRTY.replace(false) && READY.load(Ordering::Relaxed) {
        crate::gucs::debug_commit_delay();
        GENERATION.get().fetch_add(1, Ordering::SeqCst);
    }
    land();
}

/// At abort (or PREPARE, whose COMMIT PREPARED is in flight through [`in_flight`]). An abort after pre-commit
/// retires entries too: whatever happened, nothing read meanwhile is kept.
pub fn at_abort() {
    if DIRTY.replace(false) && COUNTED.get() {
        GENERATION.get().fetch_add(1, Ordering::SeqCst);
    }
    land();
}

/// Lower the in-flight count this transaction raised.
fn land() {
    if COUNTED.replace(false) {
        IN_FLIGHT.get().fetch_sub(1, Ordering::SeqCst);
    }
}

/// A commit of another transaction (`COMMIT PREPARED`) that may change cached state: in
/// flight while the guard lives, then every backend's entries are retired.
pub struct InFlight(bool);

pub fn in_flight() -> InFlight {
    let on = READY.load(Ordering::Relaxed);
    if on {
        IN_FLIGHT.get().fetch_add(1, Ordering::SeqCst);
    }
    InFlight(on)
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0 {
            GENERATION.get().fetch_add(1, Ordering::SeqCst);
            IN_FLIGHT.get().fetch_sub(1, Ordering::SeqCst);
        }
    }
}
