//! Which pop is looking at which (partition, group) right now: a session-level lock of queen's own
//! taken for a visit (look, claim, deliver or pass by). A partition the pop delivered from keeps
//! its mark until the transaction (or the subtransaction that popped) ends: its row is the
//! transaction's until then, and others would only look and fail to claim it (most of a pop's
//! looks were, at 16 clients). A partition passed by keeps its mark until the pop's attempt
//! ends (pop.rs, `Pop::passed`): passing by deleted or moved its hints, which other pops see only
//! once the pop commits — freed at once, the partition was looked at again and again by the
//! others while the pop went on (20 726 looks and 19 326 hint deletes for 1 400 deliveries as 16
//! clients drained a backlog; 3 122 and 1 722 with the mark kept).
//!
//! Concurrent pops of a group read the same page of due partitions. Without a mark they all
//! look at the same few, and all but one fail to claim (docs/benchmarks.md, "Measurements
//! behind the design"). A row lock on the hint would be a mark,
//! but it lasts until the transaction ends, and a pop inside a long business transaction would
//! hide every partition it merely looked at. This lock goes when the visit ends, and a pop that
//! finds it taken moves on to the next candidate: it never waits.
//!
//! The lock is one of queen's own (locks.rs), which no SQL can take: no other role can hide a
//! partition from pops by holding its mark, and its tag is the pair's own (locks.rs: no other
//! (partition, group) shares it, so no pop of another queue can hide it). The guard releases
//! the lock when dropped, also when an error unwinds the pop (session locks outlive the
//! transaction, so they must not be left to it).

use crate::locks::{self, Lock};
use pgrx::pg_sys;
use pgrx::Uuid;
use std::cell::RefCell;

thread_local! {
    /// Marks of the partitions delivered from, with the subtransaction that took them, until
    /// the transaction ends (wait.rs's transaction callbacks call `release_all`, `release_from`).
    static HELD: RefCell<Vec<(pg_sys::SubTransactionId, Visit)>> = const { RefCell::new(Vec::new()) };
}

/// Keep `v` until the current transaction ends, or the current subtransaction rolls back.
pub fn hold_until_end(v: Visit) {
    // SAFETY: reads the current subtransaction's id; inside a transaction, as every pop is.
    let sub = unsafe { pg_sys::GetCurrentSubTransactionId() };
    HELD.with(|h| h.borrow_mut().push((sub, v)));
}

/// The transaction ended: every held mark goes (each released as it is dropped).
pub fn release_all() {
    let held = HELD.with(|h| std::mem::take(&mut *h.borrow_mut()));
    drop(held);
}

/// Subtransaction `sub` rolled back, and with it the row locks its pops took: the marks it
/// and its own subtransactions (later ids) took go.
pub fn release_from(sub: pg_sys::SubTransactionId) {
    let gone: Vec<_> = HELD.with(|h| {
        let mut h = h.borrow_mut();
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut *h).into_iter().partition(|(s, _)| *s >= sub);
        *h = kept;
        gone
    });
    drop(gone);
}

/// A visit in progress; the lock is released on drop.
pub struct Visit {
    tag: pg_sys::LOCKTAG,
}

impl Visit {
    /// Start visiting the pair, unless another backend is visiting it now. Never waits.
    pub fn try_start(partition: Uuid, group: &str) -> Option<Visit> {
        Visit::try_mark(Lock::Visit(partition, group))
    }

    /// Start a discovery of the group's queue log (`queue`, `group`), unless another backend
    /// is discovering it now: concurrent pops would read the same stretch of log and each write
    /// the hints the others are writing (eight times the hints needed, at 16 clients).
    /// Never waits; the pop that finds it taken uses the hints there are.
    pub fn try_discover(queue: Uuid, group: &str) -> Option<Visit> {
        Visit::try_mark(Lock::Discovery(queue, group))
    }

    /// Whether another backend is discovering the group's queue log now, without taking the
    /// mark (a pop that took it for a look would turn away one that came to read the log).
    pub fn discovering_elsewhere(queue: Uuid, group: &str) -> bool {
        locks::held_by_others(Lock::Discovery(queue, group), locks::Mode::Exclusive)
    }

    fn try_mark(lock: Lock<'_>) -> Option<Visit> {
        let tag = lock.tag();
        // `then`, not `then_some`: a guard built for a lock not taken would release, when
        // dropped, a lock this backend does not hold (a WARNING to the client at every pop that
        // found a mark taken).
        locks::try_take(&tag, true).then(|| Visit { tag })
    }
}

impl Drop for Visit {
    fn drop(&mut self) {
        locks::release_session(&self.tag);
    }
}
