//! Waiting pops (semantics §3.2 `wait_ms`) and the events that wake them.
//!
//! With the library in `shared_preload_libraries`, a table of waiting backends lives in shared
//! memory: a waiting pop registers its backend, its database and its queue, then sleeps on its
//! own latch (no lock held, no polling). What makes a message deliverable wakes the waiters of
//! its queue in its database, after it is visible to them, never before (hooks.rs hands these
//! events here):
//! - a transaction that pushed, or released a lease (an ack), at its commit;
//! - a transaction (or subtransaction) that leased messages, when it rolls back;
//! - `COMMIT PREPARED`, after it committed (every waiter of the database: which queues the
//!   prepared transaction touched died with its backend).
//!
//! The same commits count, per queue, the pushes that became visible (`pushes`): a pop whose
//! discovery found the queue's log read to its end looks at the count again before the next
//! scan, and reads no log while it has not moved (discovery.rs).
//!
//! A woken pop looks again with a new snapshot; if another got the message first, it sleeps
//! again. Messages that become deliverable by time (a retry delay, delayedProcessing,
//! windowBuffer, a lease expiring) have a hint due then: a waiting pop sleeps no later than
//! the earliest of its group's hints (pop.rs).
//!
//! Without preloading there is no shared memory: a waiting pop looks again every `POLL_MS`
//! (semantics §10: a committed message is returned within 100 ms).

use pgrx::lwlock::PgLwLock;
use pgrx::pg_guard;
use pgrx::pg_sys;
use pgrx::shmem::PGRXSharedMemory;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often a waiting pop looks again without preloading.
pub const POLL_MS: u64 = 25;

/// How many pops may wait at once with instant wake-ups; more wait by polling.
const SLOTS: usize = 256;

/// How many counters of pushes there are; queues (of every database) share them by hash, so
/// a push to one queue may make a pop of another read its log once more, never less.
const PUSH_COUNTERS: usize = 1024;

#[derive(Copy, Clone)]
pub struct Waiters {
    slots: [Slot; SLOTS],
    /// Commits that pushed, by (database, queue) hashed: raised after the commit is visible.
    pushes: [u64; PUSH_COUNTERS],
}

/// The longest queue name a slot keeps, in bytes (255 characters of up to 4 bytes).
const NAME_BYTES: usize = 1020;

#[derive(Copy, Clone)]
struct Slot {
    /// The waiting backend's PGPROC number + 1 and pid (0: free).
    procno: i32,
    pid: i32,
    /// Its database and queue: a queue's id is derived from its name alone, so the same name
    /// in two databases is two queues.
    db: u32,
    queue: u64,
    /// The queue's id, for the `queen.waiting_pops` view.
    queue_id: [u8; 16],
    /// And its name (`name_len` bytes of UTF-8): the queue may not exist yet.
    name: [u8; NAME_BYTES],
    name_len: u16,
    /// When the wait began (microseconds since the Postgres epoch), and how often a commit
    /// woke it.
    since: i64,
    wakeups: i64,
    /// A partition the commit that woke it pushed to (`hinted`): the woken pop looks there
    /// first (pop.rs), before it reads the queue's log.
    hint: [u8; 16],
    hinted: bool,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            procno: 0,
            pid: 0,
            db: 0,
            queue: 0,
            queue_id: [0; 16],
            name: [0; NAME_BYTES],
            name_len: 0,
            since: 0,
            wakeups: 0,
            hint: [0; 16],
            hinted: false,
        }
    }
}

impl Default for Waiters {
    fn default() -> Self {
        Waiters { slots: [Slot::default(); SLOTS], pushes: [0; PUSH_COUNTERS] }
    }
}

// SAFETY: Waiters is plain data (integers and byte arrays, Copy, no pointers or references
// into one process's memory), so every backend can read and write the same bytes in shared
// memory; access goes through the LWLock of WAITERS.
unsafe impl PGRXSharedMemory for Waiters {}

// SAFETY: "queen_waiters" names this extension's only shared memory and LWLock tranche, and no
// other library registers that name.
pub static WAITERS: PgLwLock<Waiters> = unsafe { PgLwLock::new(c"queen_waiters") };

/// Whether the shared memory exists (the library was preloaded).
static READY: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Queues this transaction made work in, to wake at commit, with the last partition it
    /// pushed to in each (None: it released work, as an ack does).
    static TOUCHED: RefCell<HashMap<u64, Option<[u8; 16]>>> = RefCell::new(HashMap::new());
    /// Queues this transaction took work from (leased), to wake if it rolls back.
    static TAKEN: RefCell<HashSet<u64>> = RefCell::new(HashSet::new());
}

/// Called from `_PG_init` when preloading: ask for the shared memory.
pub fn init_shared() {
    pgrx::pg_shmem_init!(WAITERS);
    READY.store(true, Ordering::Relaxed);
}

/// The key of a queue in the table.
pub fn queue_key(queue_id: &uuid::Uuid) -> u64 {
    let b = queue_id.as_bytes();
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
        ^ u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]])
}

/// Remember that this transaction gave waiters of `queue` something to pop (at its commit).
pub fn touched(queue: u64) {
    if READY.load(Ordering::Relaxed) {
        TOUCHED.with(|t| {
            t.borrow_mut().entry(queue).or_insert(None);
        });
    }
}

/// Remember that this transaction pushed to `partition` of `queue`: its waiters are woken at
/// commit, and told where to look first.
pub fn pushed(queue: u64, partition: &uuid::Uuid) {
    if READY.load(Ordering::Relaxed) {
        TOUCHED.with(|t| t.borrow_mut().insert(queue, Some(*partition.as_bytes())));
    }
}

/// Remember that this transaction leased messages of `queue`: if it rolls back, they are
/// deliverable again.
pub fn taken(queue: u64) {
    if READY.load(Ordering::Relaxed) {
        TAKEN.with(|t| t.borrow_mut().insert(queue));
    }
}

/// The counter of `queue` in this database.
fn push_counter(queue: u64) -> usize {
    let h = (queue ^ u64::from(my_database()).wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 32) as usize % PUSH_COUNTERS
}

/// How many commits have pushed to `queue` (or to a queue sharing its counter) so far; None
/// without the shared memory. Read before a statement takes its snapshot, a count that has not
/// moved since says that no push became visible in between: every push raises it once its
/// commit is visible (`COMMIT PREPARED` raises them all).
pub fn pushes(queue: u64) -> Option<u64> {
    if !READY.load(Ordering::Relaxed) {
        return None;
    }
    Some(WAITERS.share().pushes[push_counter(queue)])
}

fn drain(set: &'static std::thread::LocalKey<RefCell<HashSet<u64>>>) -> Vec<u64> {
    set.with(|t| t.borrow_mut().drain().collect())
}

/// The transaction committed (hooks.rs): wake the waiters of the queues it gave work to, after
/// its commit is visible.
pub fn at_commit() {
    drain(&TAKEN);
    let touched: Vec<(u64, Option<[u8; 16]>)> = TOUCHED.with(|t| t.borrow_mut().drain().collect());
    wake_hinting(&touched);
}

/// The transaction rolled back (hooks.rs): what it leased is deliverable again.
pub fn at_abort() {
    TOUCHED.with(|t| t.borrow_mut().clear());
    wake(&drain(&TAKEN));
}

/// The transaction was prepared (hooks.rs): whoever runs COMMIT PREPARED wakes the database.
pub fn at_prepare() {
    TOUCHED.with(|t| t.borrow_mut().clear());
    drain(&TAKEN);
}

/// A subtransaction rolled back (hooks.rs): what the transaction leased may be deliverable
/// again.
pub fn at_subabort() {
    let queues: Vec<u64> = TAKEN.with(|t| t.borrow().iter().copied().collect());
    wake(&queues);
}

/// A prepared transaction committed (hooks.rs): wake every waiter of this database, and count
/// a push to every queue (which queues it pushed to died with its backend).
#[cfg(not(feature = "pg13"))]
pub fn at_commit_prepared() {
    wake_database();
}

fn my_database() -> u32 {
    // SAFETY: a plain read of a backend global, which only this (single-threaded) process
    // writes, when it connects to its database.
    unsafe { pg_sys::MyDatabaseId.to_u32() }
}

fn wake(queues: &[u64]) {
    if !queues.is_empty() {
        wake_where(|s| queues.contains(&s.queue));
    }
}

/// Wake the waiters of the queues a commit touched, telling each where a push of it went.
fn wake_hinting(touched: &[(u64, Option<[u8; 16]>)]) {
    if touched.is_empty() || !READY.load(Ordering::Relaxed) {
        return;
    }
    let db = my_database();
    let mut w = WAITERS.exclusive();
    for (q, _) in touched.iter().filter(|(_, pushed)| pushed.is_some()) {
        let c = push_counter(*q);
        w.pushes[c] = w.pushes[c].wrapping_add(1);
    }
    for slot in w.slots.iter_mut().filter(|s| s.procno > 0 && s.db == db) {
        let Some((_, hint)) = touched.iter().find(|(q, _)| *q == slot.queue) else {
            continue;
        };
        if let Some(p) = hint {
            (slot.hint, slot.hinted) = (*p, true);
        }
        set_latch(slot);
    }
}

/// Wake every waiter of this database, and count a push to every queue (a prepared
/// transaction's commit: which queues it pushed to died with its backend).
#[cfg(not(feature = "pg13"))]
fn wake_database() {
    if READY.load(Ordering::Relaxed) {
        let mut w = WAITERS.exclusive();
        for c in w.pushes.iter_mut() {
            *c = c.wrapping_add(1);
        }
    }
    wake_where(|_| true);
}

/// Set the latch of this database's waiters that `which` picks.
fn wake_where(which: impl Fn(&Slot) -> bool) {
    if !READY.load(Ordering::Relaxed) {
        return;
    }
    let db = my_database();
    let mut w = WAITERS.exclusive();
    for slot in w.slots.iter_mut().filter(|s| s.procno > 0 && s.db == db && which(s)) {
        set_latch(slot);
    }
}

/// Count a wake-up of the slot's backend and set its latch.
fn set_latch(slot: &mut Slot) {
    slot.wakeups += 1;
    // SAFETY: ProcGlobal is set up in shared memory at server start and never moves; a slot's
    // procno is its backend's PGPROC number + 1, below allProcCount, so the pointer is to a
    // PGPROC of that array, which lasts as long as the server. Its procLatch is a shared latch
    // that any process may set (if that backend exited, whoever owns the PGPROC now gets a
    // spurious wake-up, which waiters tolerate).
    unsafe {
        let proc_ = (*pg_sys::ProcGlobal).allProcs.add((slot.procno - 1) as usize);
        pg_sys::SetLatch(&mut (*proc_).procLatch);
    }
}

/// A registration in the table; leaving it (also by an error unwinding) frees the slot.
pub struct Registration {
    slot: Option<usize>,
}

impl Registration {
    /// The partition the commit that woke this wait pushed to, if one did since the last
    /// call (and forget it).
    pub fn take_hint(&self) -> Option<uuid::Uuid> {
        let i = self.slot?;
        let mut w = WAITERS.exclusive();
        // SAFETY: MyProcPid is set at process start and never changes after.
        if w.slots[i].pid != unsafe { pg_sys::MyProcPid } || !w.slots[i].hinted {
            return None;
        }
        w.slots[i].hinted = false;
        Some(uuid::Uuid::from_bytes(w.slots[i].hint))
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            let mut w = WAITERS.exclusive();
            // SAFETY: MyProcPid is set at process start and never changes after.
            if w.slots[i].pid == unsafe { pg_sys::MyProcPid } {
                w.slots[i] = Slot::default();
            }
        }
    }
}

/// Register this backend as waiting on `queue`. Without shared memory, or with every slot
/// taken, the registration is empty and the wait polls.
pub fn register(queue_id: &uuid::Uuid, name: &str) -> Registration {
    let queue = queue_key(queue_id);
    if !READY.load(Ordering::Relaxed) {
        return Registration { slot: None };
    }
    // SAFETY: MyProcPid is set at process start and never changes after.
    let me = unsafe { pg_sys::MyProcPid };
    // SAFETY: a pop runs in a regular backend, whose MyProc points to its PGPROC in shared
    // memory from InitProcess on (non-null for the rest of the process).
    let procno = unsafe { (*pg_sys::MyProc).pgprocno } + 1;
    let mut w = WAITERS.exclusive();
    // A slot left by a backend that died without unregistering is reclaimed.
    // SAFETY: libc_kill0 has no precondition (signal 0 only checks that the process exists).
    let free = w.slots.iter().position(|s| s.procno == 0 || s.pid == me || unsafe { libc_kill0(s.pid) });
    match free {
        Some(i) => {
            // SAFETY: GetCurrentTimestamp only reads the system clock.
            let since = unsafe { pg_sys::GetCurrentTimestamp() };
            let db = my_database();
            let mut slot =
                Slot { procno, pid: me, db, queue, queue_id: *queue_id.as_bytes(), since, ..Slot::default() };
            let n = name.len().min(NAME_BYTES);
            slot.name[..n].copy_from_slice(&name.as_bytes()[..n]);
            slot.name_len = n as u16;
            w.slots[i] = slot;
            Registration { slot: Some(i) }
        }
        None => Registration { slot: None },
    }
}

/// A waiting pop of this database, as the table holds it.
pub struct Waiting {
    pub pid: i32,
    pub queue_id: uuid::Uuid,
    pub queue: String,
    pub since: i64,
    pub wakeups: i64,
}

/// The waiting pops of this database: pid, queue id and name, since when, how often woken.
pub fn waiting() -> Vec<Waiting> {
    if !READY.load(Ordering::Relaxed) {
        return Vec::new();
    }
    let db = my_database();
    let w = WAITERS.share();
    w.slots
        .iter()
        .filter(|s| s.procno > 0 && s.db == db)
        .map(|s| Waiting {
            pid: s.pid,
            queue_id: uuid::Uuid::from_bytes(s.queue_id),
            queue: String::from_utf8_lossy(&s.name[..s.name_len as usize]).into_owned(),
            since: s.since,
            wakeups: s.wakeups,
        })
        .collect()
}

/// Whether process `pid` is gone.
///
/// # Safety
///
/// Nothing is required of the caller: any `pid` is fine. Signal 0 sends nothing, and a pid of
/// 0 or less (a process group, or every process) never reaches `kill`. It is `unsafe` only
/// because it calls C's `kill`.
unsafe fn libc_kill0(pid: i32) -> bool {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: `kill` is declared with its C signature (pid_t and int are i32 on the platforms
    // Postgres runs on); with signal 0 and a positive pid it only checks that the process
    // exists, and touches no memory of ours.
    pid > 0 && unsafe { kill(pid, 0) } != 0
}

/// Clear the latch before looking, so that a commit between the look and the sleep wakes
/// the sleep at once.
pub fn reset_latch() {
    // SAFETY: MyLatch points to this process's own latch from process start on (its PGPROC's
    // procLatch in a backend), and only the owner may reset it: this is the owner.
    unsafe { pg_sys::ResetLatch(pg_sys::MyLatch) };
}

/// Sleep until woken, an interrupt, or `max`, whichever comes first; without a registration,
/// at most `POLL_MS`.
pub fn sleep(reg: &Registration, max: Duration) {
    let cap = if reg.slot.is_some() { max.as_millis() } else { max.as_millis().min(POLL_MS as u128) };
    let ms = cap.max(1) as std::os::raw::c_long;
    // SAFETY: MyLatch is this process's own latch (see reset_latch), which a process may wait
    // on; no lock is held while it sleeps, and interrupts are checked right after.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            ms,
            pg_sys::PG_WAIT_EXTENSION,
        );
    }
    pgrx::check_for_interrupts!();
}

#[cfg(test)]
mod tests {
    use super::queue_key;

    #[test]
    fn queue_keys_differ() {
        let a = crate::names::queue_id("a");
        let b = crate::names::queue_id("b");
        assert_ne!(queue_key(&a), queue_key(&b));
        assert_eq!(queue_key(&a), queue_key(&crate::names::queue_id("a")));
    }
}
