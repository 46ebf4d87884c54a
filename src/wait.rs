//! Waiting pops (SPEC §3.2 `wait_ms`) and the commits that wake them.
//!
//! With the library in `shared_preload_libraries`, a table of waiting backends lives in shared
//! memory: a waiting pop registers its backend and its queue, then sleeps on its own latch
//! (no lock held, no polling). A transaction that pushed to a queue (or released a lease with
//! `failed`/`retry`) remembers the queue, and at commit — after the commit is visible to
//! others, never at insert — sets the latch of every backend waiting on that queue. A rolled
//! back transaction wakes nobody. A woken pop looks again with a new snapshot; if another got
//! the message first, it sleeps again until its deadline.
//!
//! Without preloading there is no shared memory: a waiting pop looks again every `POLL_MS`
//! (SPEC §10: a committed message is returned within 100 ms).

use pgrx::lwlock::PgLwLock;
use pgrx::pg_guard;
use pgrx::pg_sys;
use pgrx::shmem::PGRXSharedMemory;
use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often a waiting pop looks again without preloading.
pub const POLL_MS: u64 = 25;

/// How many pops may wait at once with instant wake-ups; more wait by polling.
const SLOTS: usize = 256;

#[derive(Copy, Clone)]
pub struct Waiters {
    slots: [Slot; SLOTS],
}

#[derive(Copy, Clone, Default)]
struct Slot {
    /// The waiting backend's PGPROC number + 1 and pid (0: free).
    procno: i32,
    pid: i32,
    queue: u64,
    /// The queue's id, for the `queen.waiting_pops` view.
    queue_id: [u8; 16],
    /// When the wait began (microseconds since the Postgres epoch), and how often a commit
    /// woke it.
    since: i64,
    wakeups: i64,
}

impl Default for Waiters {
    fn default() -> Self {
        Waiters { slots: [Slot::default(); SLOTS] }
    }
}

unsafe impl PGRXSharedMemory for Waiters {}

pub static WAITERS: PgLwLock<Waiters> = unsafe { PgLwLock::new(c"queen_waiters") };

/// Whether the shared memory exists (the library was preloaded).
static READY: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Queues this transaction made work in, to wake at commit.
    static TOUCHED: RefCell<HashSet<u64>> = RefCell::new(HashSet::new());
}

/// Called from `_PG_init` when preloading: ask for the shared memory and watch commits.
pub fn init_shared() {
    pgrx::pg_shmem_init!(WAITERS);
    READY.store(true, Ordering::Relaxed);
}

/// Called from `_PG_init` in every backend that loads the library.
pub fn init_backend() {
    unsafe { pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut()) };
}

/// The key of a queue in the table.
pub fn queue_key(queue_id: &uuid::Uuid) -> u64 {
    let b = queue_id.as_bytes();
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
        ^ u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]])
}

/// Remember that this transaction gave waiters of `queue` something to pop.
pub fn touched(queue: u64) {
    if READY.load(Ordering::Relaxed) {
        TOUCHED.with(|t| t.borrow_mut().insert(queue));
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_xact(event: pg_sys::XactEvent::Type, _arg: *mut std::os::raw::c_void) {
    match event {
        pg_sys::XactEvent::XACT_EVENT_COMMIT | pg_sys::XactEvent::XACT_EVENT_PARALLEL_COMMIT => {
            let queues: Vec<u64> = TOUCHED.with(|t| t.borrow_mut().drain().collect());
            if !queues.is_empty() {
                wake(&queues);
            }
        }
        pg_sys::XactEvent::XACT_EVENT_ABORT | pg_sys::XactEvent::XACT_EVENT_PARALLEL_ABORT => {
            TOUCHED.with(|t| t.borrow_mut().clear());
        }
        _ => {}
    }
}

fn wake(queues: &[u64]) {
    if !READY.load(Ordering::Relaxed) {
        return;
    }
    let mut w = WAITERS.exclusive();
    for slot in w.slots.iter_mut().filter(|s| s.procno > 0 && queues.contains(&s.queue)) {
        slot.wakeups += 1;
        unsafe {
            let proc_ = (*pg_sys::ProcGlobal).allProcs.add((slot.procno - 1) as usize);
            pg_sys::SetLatch(&mut (*proc_).procLatch);
        }
    }
}

/// A registration in the table; leaving it (also by an error unwinding) frees the slot.
pub struct Registration {
    slot: Option<usize>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            let mut w = WAITERS.exclusive();
            if w.slots[i].pid == unsafe { pg_sys::MyProcPid } {
                w.slots[i] = Slot::default();
            }
        }
    }
}

/// Register this backend as waiting on `queue`. Without shared memory, or with every slot
/// taken, the registration is empty and the wait polls.
pub fn register(queue_id: &uuid::Uuid) -> Registration {
    let queue = queue_key(queue_id);
    if !READY.load(Ordering::Relaxed) {
        return Registration { slot: None };
    }
    let me = unsafe { pg_sys::MyProcPid };
    let procno = unsafe { (*pg_sys::MyProc).pgprocno } + 1;
    let mut w = WAITERS.exclusive();
    // A slot left by a backend that died without unregistering is reclaimed.
    let free = w.slots.iter().position(|s| s.procno == 0 || s.pid == me || unsafe { libc_kill0(s.pid) });
    match free {
        Some(i) => {
            let since = unsafe { pg_sys::GetCurrentTimestamp() };
            w.slots[i] = Slot { procno, pid: me, queue, queue_id: *queue_id.as_bytes(), since, wakeups: 0 };
            Registration { slot: Some(i) }
        }
        None => Registration { slot: None },
    }
}

/// The waiting pops: pid, queue id, since when, how often woken.
pub fn waiting() -> Vec<(i32, uuid::Uuid, i64, i64)> {
    if !READY.load(Ordering::Relaxed) {
        return Vec::new();
    }
    let w = WAITERS.share();
    w.slots
        .iter()
        .filter(|s| s.procno > 0)
        .map(|s| (s.pid, uuid::Uuid::from_bytes(s.queue_id), s.since, s.wakeups))
        .collect()
}

/// Whether process `pid` is gone.
unsafe fn libc_kill0(pid: i32) -> bool {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    pid > 0 && unsafe { kill(pid, 0) } != 0
}

/// Clear the latch before looking, so that a commit between the look and the sleep wakes
/// the sleep at once.
pub fn reset_latch() {
    unsafe { pg_sys::ResetLatch(pg_sys::MyLatch) };
}

/// Sleep until woken, an interrupt, or `max`, whichever comes first; without a registration,
/// at most `POLL_MS`.
pub fn sleep(reg: &Registration, max: Duration) {
    let cap = if reg.slot.is_some() { max.as_millis() } else { max.as_millis().min(POLL_MS as u128) };
    let ms = cap.max(1) as std::os::raw::c_long;
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
