//! How the maintenance worker (worker.rs) fires a timer at its due time (timers.rs): each
//! worker keeps, in shared memory, when its database's earliest timer is due and where its latch
//! is; a commit that scheduled an earlier timer sets that latch, and a `reading` flag closes the
//! window between the worker's read of the table and its sleep. One slot per worker.

use pgrx::lwlock::PgLwLock;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;
use std::sync::atomic::{AtomicBool, Ordering};

/// The slots of the first workers (worker.rs counts its own by the same number); a worker past
/// them fires timers at its maintenance passes only.
pub const SLOTS: usize = 64;

/// Whether the slots exist (the library was preloaded).
static READY: AtomicBool = AtomicBool::new(false);

/// What a worker knows of its database's timers (timers.rs): when the earliest is due, and
/// where a commit that schedules an earlier one finds the worker's latch. One slot per worker.
#[derive(Clone, Copy)]
pub struct TimerSlot {
    pub db: u32,
    /// The worker's PGPROC number + 1 (0: no worker).
    pub procno: i32,
    /// When the earliest pending timer is due (microseconds; i64::MAX: none), as the worker
    /// last read it, or earlier as a commit that scheduled one told it.
    pub next_due: i64,
    /// The worker is reading `next_due` from the table: every commit that schedules sets its
    /// latch, so that it reads again rather than keep what it read before that commit.
    pub reading: bool,
}

impl Default for TimerSlot {
    fn default() -> Self {
        TimerSlot { db: 0, procno: 0, next_due: i64::MAX, reading: false }
    }
}

#[derive(Clone, Copy)]
pub struct TimerSlots([TimerSlot; SLOTS]);

impl Default for TimerSlots {
    fn default() -> Self {
        TimerSlots([TimerSlot::default(); SLOTS])
    }
}

// SAFETY: plain integers, no pointers: valid in any process that maps the segment.
unsafe impl PGRXSharedMemory for TimerSlots {}

// SAFETY: the name is queen's own; no other shared memory of this library uses it.
static TIMER_SLOTS: PgLwLock<TimerSlots> = unsafe { PgLwLock::new(c"queen_timer_slots") };

thread_local! {
    /// The earliest due time this transaction scheduled a timer for, to tell the worker at
    /// commit.
    static SCHEDULED: std::cell::Cell<Option<i64>> = const { std::cell::Cell::new(None) };
}

/// Called from `_PG_init` when preloading (worker.rs).
pub fn init_shared() {
    pgrx::pg_shmem_init!(TIMER_SLOTS);
    READY.store(true, Ordering::Relaxed);
}

/// Remember that this transaction scheduled a timer due at `due` (timers.rs).
pub fn scheduled(due: i64) {
    if READY.load(Ordering::Relaxed) {
        SCHEDULED.with(|s| s.set(Some(s.get().map_or(due, |d| d.min(due)))));
    }
}

/// At commit (hooks.rs): a timer this transaction scheduled is due before the time the
/// database's worker sleeps until: wake it. At abort: forget.
pub fn at_end(committed: bool) {
    let Some(due) = SCHEDULED.with(|s| s.take()) else {
        return;
    };
    if !committed || !READY.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: a plain read of a backend global set when the backend connected.
    let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let mut slots = TIMER_SLOTS.exclusive();
    for slot in slots.0.iter_mut().filter(|t| t.db == db && t.procno > 0) {
        if slot.reading || due < slot.next_due {
            slot.next_due = slot.next_due.min(due);
            // SAFETY: ProcGlobal lives in shared memory for the server's life; procno - 1 is a
            // PGPROC number the worker stored (below allProcCount), and any process may set
            // another's latch (a worker that exited leaves a spurious wake-up to whoever owns
            // that PGPROC now, which every latch user tolerates).
            unsafe {
                let proc_ = (*pg_sys::ProcGlobal).allProcs.add((slot.procno - 1) as usize);
                pg_sys::SetLatch(&mut (*proc_).procLatch);
            }
        }
    }
}

/// The worker's timer slot (`index` < SLOTS), changed by `f`.
pub fn slot<R>(index: usize, f: impl FnOnce(&mut TimerSlot) -> R) -> Option<R> {
    if index >= SLOTS || !READY.load(Ordering::Relaxed) {
        return None;
    }
    let mut slots = TIMER_SLOTS.exclusive();
    Some(f(&mut slots.0[index]))
}

/// Wake the database's worker to fire and read its timers again (after `COMMIT PREPARED`,
/// whose transaction's timers nobody remembers).
pub fn poke() {
    SCHEDULED.with(|s| s.set(Some(i64::MIN)));
    at_end(true);
}
