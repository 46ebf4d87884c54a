//! queen's own locks, which no other role can take, watch for or hold against it.
//!
//! queen serialises a few things with locks that are not row locks: the right to create a
//! (partition, group) pair's cursor row, one `queen_configure` at a time per queue, one
//! maintenance pass at a time per database, and the marks of which pop is visiting what
//! (visit.rs). They were advisory locks; advisory locks need no privilege, and their keys were
//! fixed numbers or hashes anyone can compute, so any role that could connect could hold them
//! and stop maintenance, make pops return nothing, or make `queen_configure` wait for ever.
//!
//! These are taken through the lock manager directly, in the user lock method as advisory
//! locks are, with a tag no SQL function builds: `pg_advisory_lock` and its kin always set the
//! tag's fourth field to 1 (one bigint key) or 2 (two int keys); queen's carry [`QUEEN_FIELD`].
//! So no SQL — by any role — can take or wait for one of them; only C code loaded into the
//! server could, and loading that needs a superuser. They show in `pg_locks` as locktype
//! `advisory` with `objsubid` 81, which only tells an onlooker that queen is busy.
//!
//! A lock queen waits for is held only by another queen call (in an open transaction of a role
//! with a grant): the wait is bounded by `lock_timeout` when the caller set one, and otherwise
//! by `queen.lock_wait_seconds`, then the call fails with 55P03 naming what it waited for.

use crate::error::{QueenError, QueenResult};
use pgrx::pg_sys;
use pgrx::Uuid;

/// The fourth field of queen's lock tags (no SQL advisory function uses it: they use 1 and 2).
pub const QUEEN_FIELD: u16 = 81;

/// First keys, one per kind of lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// The right to create a (partition, group) pair's cursor row.
    Pair = 1_364_542_798,
    /// One maintenance pass at a time per database.
    Maintenance = 1_364_542_799,
    /// A pop visiting a (partition, group) pair (visit.rs).
    Visit = 1_364_542_800,
    /// A pop discovering a group's queue log (visit.rs).
    Discovery = 1_364_542_801,
    /// One `queen_configure` (or seek) at a time per queue.
    Queue = 1_902_474_318,
    /// A transaction that writes rows of a queue (a push, pop, ack, seek, configure), shared;
    /// `queen_delete_queue`, exclusive: the delete waits for every writer that is open, so
    /// that no row of the queue it cannot see is committed after it (issue 21, items 8, 9).
    QueueWrite = 1_364_542_802,
    /// A transaction that writes rows of a group (a pop, ack, seek), shared;
    /// `queen_delete_group`, exclusive (item 11). Keyed by the group's name alone: a delete of
    /// a group on every queue must also wait for a first pop on a queue it cannot see yet.
    GroupWrite = 1_364_542_803,
    /// A transaction that subscribes a group to a queue (a first pop, a seek), shared; a pass
    /// of completed retention, exclusive, never waiting: while a subscription of the queue is
    /// not committed, completed retention leaves the queue alone (semantics §4, item 7).
    Subscribe = 1_364_542_804,
}

/// How a lock is held: shared by many, or by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Shared,
    Exclusive,
}

impl Mode {
    fn lockmode(self) -> i32 {
        match self {
            Mode::Shared => pg_sys::ShareLock as i32,
            Mode::Exclusive => pg_sys::ExclusiveLock as i32,
        }
    }
}

/// 32-bit FNV-1a of an id and a name: the lock's second key. Two keys with the same hash only
/// make one caller wait for, or pass by, what another is doing.
pub fn hash(id: Uuid, name: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in id.as_bytes().iter().chain([b'/'].iter()).chain(name.as_bytes()) {
        h ^= *b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The tag of lock (`kind`, `key`) in this database.
pub fn tag(kind: Kind, key: u32) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        // SAFETY: MyDatabaseId is set at backend start and never changes afterwards.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: kind as u32,
        locktag_field3: key,
        locktag_field4: QUEEN_FIELD,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// Take the lock without waiting; true if taken. `session`: held until released (or the
/// backend exits), else until the transaction — or the subtransaction that took it, if it
/// rolls back — ends.
pub fn try_take(tag: &pg_sys::LOCKTAG, session: bool) -> bool {
    try_mode(tag, Mode::Exclusive, session)
}

fn try_mode(tag: &pg_sys::LOCKTAG, mode: Mode, session: bool) -> bool {
    // SAFETY: a tag of the user lock method, built by `tag`; dontWait, so this returns at once.
    let got = unsafe { pg_sys::LockAcquire(tag, mode.lockmode(), session, true) };
    got != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
}

/// Whether another transaction holds (`kind`, `key`) in a mode that conflicts with `mode`,
/// without taking anything (so nobody waits for the look).
pub fn held_by_others(kind: Kind, key: u32, mode: Mode) -> bool {
    let tag = tag(kind, key);
    let mut count: std::ffi::c_int = 0;
    // SAFETY: a tag of the user lock method; the lock manager fills a palloc'd array (freed
    // with the memory context) and its length; this backend's own locks are not counted.
    unsafe {
        pg_sys::GetLockConflicts(&tag, mode.lockmode(), &mut count);
    }
    count > 0
}

/// Release a session lock taken by [`try_take`].
pub fn release_session(tag: &pg_sys::LOCKTAG) {
    // SAFETY: the lock was taken with this tag and mode as a session lock by this backend;
    // releasing it touches only the lock manager (a lock no longer held, after the user's
    // pg_advisory_unlock_all(), only draws a WARNING).
    unsafe {
        pg_sys::LockRelease(tag, pg_sys::ExclusiveLock as i32, true);
    }
}

/// Take (`kind`, `key`) exclusively for this transaction, never waiting.
pub fn try_xact(kind: Kind, key: u32) -> bool {
    try_mode(&tag(kind, key), Mode::Exclusive, false)
}

/// Take (`kind`, `key`) exclusively for this transaction, waiting for whoever holds it at most
/// as long as the caller's `lock_timeout` (when set) or `queen.lock_wait_seconds`; then 55P03
/// naming `what`.
pub fn wait_xact(kind: Kind, key: u32, what: impl FnOnce() -> String) -> QueenResult<()> {
    take(kind, key, Mode::Exclusive, what).map(|_waited| ())
}

/// Take (`kind`, `key`) in `mode` for this transaction, waiting as [`wait_xact`] does. True when
/// it had to wait: what the caller read before may have changed meanwhile.
pub fn take(kind: Kind, key: u32, mode: Mode, what: impl FnOnce() -> String) -> QueenResult<bool> {
    let tag = tag(kind, key);
    if try_mode(&tag, mode, false) {
        return Ok(false);
    }
    let bound_ms = bound_ms();
    let timed_out = with_lock_timeout(bound_ms, || {
        pgrx::PgTryBuilder::new(|| {
            // SAFETY: as in try_mode; waiting, which lock_timeout (set just now) bounds.
            unsafe { pg_sys::LockAcquire(&tag, mode.lockmode(), false, false) };
            false
        })
        .catch_when(pgrx::PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, |_| true)
        .execute()
    });
    match timed_out {
        false => Ok(true),
        true => Err(QueenError::LockWait { what: what(), ms: bound_ms }),
    }
}

/// Take (`kind`, `key`) in `mode` for this transaction, waiting as [`take`] does; a
/// transaction whose snapshot is older than what it waited for (REPEATABLE READ or
/// SERIALIZABLE) fails with 40001, to be retried, instead of acting on rows that are gone.
pub fn take_fresh(kind: Kind, key: u32, mode: Mode, what: impl FnOnce() -> String) -> QueenResult<bool> {
    let waited = take(kind, key, mode, what)?;
    // SAFETY: a backend global, set for the running transaction; read only.
    if waited && unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32 {
        return Err(QueenError::SnapshotTooOld);
    }
    Ok(waited)
}

/// Take (`kind`, `key`) in `mode` for this transaction, never waiting; true if taken.
pub fn try_in(kind: Kind, key: u32, mode: Mode) -> bool {
    try_mode(&tag(kind, key), mode, false)
}

/// The key of a queue's locks.
pub fn queue_key(queue_id: Uuid) -> u32 {
    hash(queue_id, "")
}

/// The key of a group's locks (queue mode included), on every queue.
pub fn group_key(group: &str) -> u32 {
    hash(Uuid::from_bytes([0; 16]), group)
}

/// Shared locks of a transaction that writes rows of queue `queue_id` (named `queue`, when the
/// caller knows its name) for `group` (None: a push, no group): a delete of either waits for
/// it, and it waits for a delete that is open.
pub fn writing(queue_id: Uuid, queue: Option<&str>, group: Option<&str>) -> QueenResult<bool> {
    let mut waited = take_fresh(Kind::QueueWrite, queue_key(queue_id), Mode::Shared, || match queue {
        Some(q) => format!("queue \"{}\" (being deleted)", crate::error::shorten(q)),
        None => "the message's queue (being deleted)".to_string(),
    })?;
    if let Some(g) = group {
        waited |= take_fresh(Kind::GroupWrite, group_key(g), Mode::Shared, || {
            format!("group \"{}\" (being deleted)", crate::error::shorten(g))
        })?;
    }
    Ok(waited)
}

/// A queue's exclusive lock, for its delete (`queen_delete_queue`; on Citus the coordinator's
/// too): waits for every open transaction that holds it shared (`writing`).
pub fn deleting_queue(queue_id: Uuid, queue: &str) -> QueenResult<bool> {
    take_fresh(Kind::QueueWrite, queue_key(queue_id), Mode::Exclusive, || {
        format!("queue \"{}\" (in use by an open transaction)", crate::error::shorten(queue))
    })
}

/// How long a wait may last: the caller's `lock_timeout` when set and shorter, else
/// `queen.lock_wait_seconds`.
fn bound_ms() -> i32 {
    let ours = crate::gucs::LOCK_WAIT_SECONDS.get().saturating_mul(1000);
    // SAFETY: a plain read of the backend's own setting.
    let theirs = unsafe { pg_sys::LockTimeout };
    if theirs > 0 && theirs < ours {
        theirs
    } else {
        ours
    }
}

/// Run `f` with `lock_timeout` set to `ms`, as a function's SET clause does: the caller's value
/// comes back when `f` returns (and an error's abort restores it too).
fn with_lock_timeout<R>(ms: i32, f: impl FnOnce() -> R) -> R {
    let value = std::ffi::CString::new(ms.to_string()).expect("a number has no NUL");
    crate::gucs::with_settings(&[(c"lock_timeout", value.as_c_str())], f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pair_hash_spreads_names_and_ids() {
        let a = Uuid::from_bytes([1; 16]);
        let b = Uuid::from_bytes([2; 16]);
        assert_ne!(hash(a, "g"), hash(b, "g"));
        assert_ne!(hash(a, "g"), hash(a, "h"));
        assert_eq!(hash(a, "g"), hash(a, "g"));
    }

    #[test]
    fn queens_tags_are_none_an_sql_advisory_function_builds() {
        // pg_advisory_lock(bigint) sets 1, pg_advisory_lock(int, int) sets 2.
        assert!(QUEEN_FIELD != 1 && QUEEN_FIELD != 2);
    }
}
