//! Which pop is looking at which (partition, group) right now: a session-level advisory lock
//! held for the length of one visit (look, claim, deliver or pass by), never for the rest of the
//! transaction.
//!
//! Concurrent pops of a group read the same page of due partitions. Without a mark they all
//! look at the same few, and all but one fail to claim: at 16 clients, pops of `partitions =>
//! 10` looked 63 times per pop and spent 1.2 s at p99. A row lock on the hint would be a mark,
//! but it lasts until the transaction ends, and a pop inside a long business transaction would
//! hide every partition it merely looked at. This lock goes when the visit ends, and a pop that
//! finds it taken moves on to the next candidate: it never waits.
//!
//! The lock is taken and released through the lock manager directly (no SQL): first key
//! 1364542800 (queen's advisory keys are 1364542798 for pairs, 1364542799 for maintenance,
//! 1902474318 for configuration), second key a hash of the pair. Two pairs with the same hash
//! only make one pop skip a candidate another is visiting. The guard releases the lock when
//! dropped, also when an error unwinds the pop (session locks outlive the transaction, so they
//! must not be left to it).

use pgrx::pg_sys;
use pgrx::Uuid;

const VISIT_KEY: u32 = 1_364_542_800;

/// A visit in progress; the lock is released on drop.
pub struct Visit {
    tag: pg_sys::LOCKTAG,
}

/// 32-bit FNV-1a of the partition id and the group: the lock's second key.
fn pair_hash(partition: Uuid, group: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in partition.as_bytes().iter().chain(group.as_bytes()) {
        h ^= *b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

impl Visit {
    /// Start visiting the pair, unless another backend is visiting it now. Never waits.
    pub fn try_start(partition: Uuid, group: &str) -> Option<Visit> {
        // SAFETY: MyDatabaseId is set at backend start; the tag is a plain value the lock
        // manager copies.
        let tag = pg_sys::LOCKTAG {
            locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
            locktag_field2: VISIT_KEY,
            locktag_field3: pair_hash(partition, group),
            locktag_field4: 2,
            locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
            locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
        };
        // SAFETY: an advisory tag in the user lock method, as pg_try_advisory_lock builds it;
        // dontWait, so this returns at once.
        let got = unsafe { pg_sys::LockAcquire(&tag, pg_sys::ExclusiveLock as i32, true, true) };
        match got {
            pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL => None,
            _ => Some(Visit { tag }),
        }
    }
}

impl Drop for Visit {
    fn drop(&mut self) {
        // SAFETY: the lock was acquired with this tag and mode as a session lock by this
        // backend; releasing it touches only the lock manager.
        unsafe {
            pg_sys::LockRelease(&self.tag, pg_sys::ExclusiveLock as i32, true);
        }
    }
}
