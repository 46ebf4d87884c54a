//! queen's own locks: which key each takes, in which order, and how long anyone waits for one
//! (docs/design.md, "Locks").
//!
//! queen serialises a few things with locks that are not row locks: writers of a queue or a
//! group against its delete, the right to create a (partition, group) pair's cursor row, one
//! `queen_configure` at a time per queue, one maintenance pass at a time per database, the
//! marks of which pop is visiting what (visit.rs), and the writers of a lock's permit against
//! each other and against the guards of its holder's work (permits.rs).
//!
//! **No role can take, watch for or hold one.** They are taken through the lock manager
//! directly, in the user lock method as advisory locks are, with a tag no SQL function builds:
//! `pg_advisory_lock` and its kin set the tag's fourth field to 1 (one bigint key) or 2 (two int
//! keys); queen's carry [`QUEEN_FIELD`]. Loading C code that could build one needs a superuser.
//!
//! **No two keys share a tag.** The other three fields (96 bits) are a SHA-256 digest of the
//! database, the kind of lock and the full ids it stands for (a queue's id, a partition's id,
//! the group's whole name): no truncated hash of a name that another tenant could compute a
//! collision with (a 32-bit one took under a second), and no lock keyed by a group's name
//! alone, which every queue would share. Ids are UUIDv5 digests of names already; a 96-bit
//! digest of them is as collision-free as the ids are. `pg_locks` shows them as locktype
//! `advisory` with `objsubid` 81 (its `database`, `classid` and `objid` columns hold the digest).
//!
//! **One order.** Every call takes the locks it needs in the order of [`Lock`]'s variants —
//! the queue's, then the group's, then the queue's subscription lock, then a pair's — and row
//! locks only after them. Writers take theirs in shared mode. The holders of exclusive modes
//! that wait (the deletes, [`take_all`]) take all of theirs at once or none: a delete never
//! holds one of its locks while it waits for another, so no circle of waits can pass through it.
//!
//! A lock queen waits for is held only by another queen call (in an open transaction of a role
//! with a grant): the wait is bounded by `lock_timeout` when the caller set one, and otherwise
//! by `queen.lock_wait_seconds`, then the call fails with 55P03 naming what it waited for.

use crate::error::{QueenError, QueenResult};
use pgrx::pg_sys;
use pgrx::Uuid;
use sha2::{Digest, Sha256};

/// The fourth field of queen's lock tags (no SQL advisory function uses it: they use 1 and 2).
pub const QUEEN_FIELD: u16 = 81;

/// A lock of queen's, by what it stands for. Listed in the order a call takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock<'a> {
    /// A transaction that writes rows of queue `.0` (a push, pop, ack, renew, seek, configure,
    /// schedule, replay, purge, a timer's firing, a maintenance unit), shared;
    /// `queen_delete_queue`, exclusive: the delete waits for every writer that is open, so that
    /// no row of the queue it cannot see is committed after it.
    QueueWrite(Uuid),
    /// One `queen_configure` at a time per queue.
    Configure(Uuid),
    /// `queen_delete_queue`, shared; `queen_delete_group` on every queue, exclusive: the two
    /// delete rows of the same (queue, group) under locks of their own, never at once.
    Deletes,
    /// A transaction that writes rows of group `.0` on any queue, shared; `queen_delete_group`
    /// on every queue (which needs `configure` on every queue), exclusive.
    GroupEverywhere(&'a str),
    /// A transaction that writes rows of group `.1` on queue `.0` (a pop, ack, renew, seek,
    /// replay, purge, max wait), shared; `queen_delete_group` of that queue, exclusive.
    GroupWrite(Uuid, &'a str),
    /// A transaction that subscribes a group to queue `.0` (a first pop, a seek), shared; a
    /// chunk of completed retention, exclusive, never waiting: while a subscription of the queue
    /// is not committed, completed retention leaves the queue alone (semantics §4).
    Subscribe(Uuid),
    /// The right to create the cursor row of (partition `.0`, group `.1`).
    Pair(Uuid, &'a str),
    /// A pop visiting (partition `.0`, group `.1`) (visit.rs), a session lock, never waited for.
    Visit(Uuid, &'a str),
    /// A pop discovering group `.1`'s log of queue `.0` (visit.rs), likewise.
    Discovery(Uuid, &'a str),
    /// One maintenance pass at a time per database, never waited for.
    Maintenance,
    /// The row of a lock's permit (permits.rs): key `.1` of the key/value namespace `.0` that
    /// keeps a lock namespace's permits. Exclusive for `queen_lock`'s acquire (never waiting:
    /// a slot another transaction is writing is taken), renew and release; shared for a
    /// guard's `check` (queen_kv), which keeps the permit as it is until its work commits. A
    /// call that takes it takes none of the locks above, so it stands outside their order: no
    /// lock above is ever waited for while holding it, and no holder of one waits for it.
    Permit(&'a str, &'a str),
    /// `queen_grant` and `queen_revoke`, exclusive, one at a time per database until the
    /// transaction ends: a revoke that found nothing to remove and a grant that commits after
    /// it are ordered by their commits (whichever commits last decides, as with PostgreSQL's
    /// own GRANT). Admins' calls, which take none of the locks above: outside their order.
    Grants,
}

impl Lock<'_> {
    fn kind(&self) -> u8 {
        match self {
            Lock::QueueWrite(_) => 1,
            Lock::Configure(_) => 2,
            Lock::Deletes => 3,
            Lock::GroupEverywhere(_) => 4,
            Lock::GroupWrite(..) => 5,
            Lock::Subscribe(_) => 6,
            Lock::Pair(..) => 7,
            Lock::Visit(..) => 8,
            Lock::Discovery(..) => 9,
            Lock::Maintenance => 10,
            Lock::Permit(..) => 11,
            Lock::Grants => 12,
        }
    }

    /// The lock's tag in this database.
    pub fn tag(&self) -> pg_sys::LOCKTAG {
        // SAFETY: MyDatabaseId is set at backend start and never changes afterwards.
        let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
        let [f1, f2, f3] = cached_digest(db, self);
        pg_sys::LOCKTAG {
            locktag_field1: f1,
            locktag_field2: f2,
            locktag_field3: f3,
            locktag_field4: QUEEN_FIELD,
            locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
            locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
        }
    }
}

/// The three fields of lock `lock`'s tag in database `db`: 96 bits of SHA-256 over the
/// database, the kind and the ids, each of fixed length or with its length, so that no two
/// locks read as the same input.
fn digest(db: u32, lock: &Lock<'_>) -> [u32; 3] {
    let mut h = Sha256::new();
    h.update(b"queen lock\0");
    h.update(db.to_le_bytes());
    h.update([lock.kind()]);
    let (id, names): (Option<&Uuid>, [Option<&str>; 2]) = match lock {
        Lock::QueueWrite(q) | Lock::Configure(q) | Lock::Subscribe(q) => (Some(q), [None, None]),
        Lock::GroupEverywhere(g) => (None, [Some(g), None]),
        Lock::GroupWrite(id, g) | Lock::Pair(id, g) | Lock::Visit(id, g) | Lock::Discovery(id, g) => {
            (Some(id), [Some(g), None])
        }
        Lock::Permit(ns, key) => (None, [Some(ns), Some(key)]),
        Lock::Deletes | Lock::Maintenance | Lock::Grants => (None, [None, None]),
    };
    if let Some(id) = id {
        h.update(id.as_bytes());
    }
    for name in names.into_iter().flatten() {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
    }
    let d = h.finalize();
    let word = |i: usize| u32::from_le_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
    [word(0), word(4), word(8)]
}

/// A lock of one queue's (`QueueWrite`, `Configure`, `Subscribe`): its kind and the queue.
type QueueKey = (u8, [u8; 16]);

thread_local! {
    /// The digests of the queue locks this backend took last (every push, pop and ack takes
    /// one), so that a call reuses one rather than hashing again. Bounded: cleared when full.
    static QUEUE_TAGS: std::cell::RefCell<std::collections::HashMap<QueueKey, [u32; 3]>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// How many queue locks' digests a backend keeps.
const QUEUE_TAGS_KEPT: usize = 1024;

/// `digest`, kept for the locks of one queue (the database never changes in a backend).
fn cached_digest(db: u32, lock: &Lock<'_>) -> [u32; 3] {
    let (Lock::QueueWrite(q) | Lock::Configure(q) | Lock::Subscribe(q)) = lock else {
        return digest(db, lock);
    };
    let key = (lock.kind(), *q.as_bytes());
    if let Some(d) = QUEUE_TAGS.with(|t| t.borrow().get(&key).copied()) {
        return d;
    }
    let d = digest(db, lock);
    QUEUE_TAGS.with(|t| {
        let mut t = t.borrow_mut();
        if t.len() >= QUEUE_TAGS_KEPT {
            t.clear();
        }
        t.insert(key, d);
    });
    d
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

/// Take the lock of `tag` exclusively without waiting; true if taken. `session`: held until
/// released (or the backend exits), else until the transaction — or the subtransaction that
/// took it, if it rolls back — ends.
pub fn try_take(tag: &pg_sys::LOCKTAG, session: bool) -> bool {
    try_mode(tag, Mode::Exclusive, session)
}

fn try_mode(tag: &pg_sys::LOCKTAG, mode: Mode, session: bool) -> bool {
    // SAFETY: a tag of the user lock method, built by `Lock::tag`; dontWait, so this returns at
    // once (also when a request that conflicts is waiting: the lock manager's queue is fair).
    let got = unsafe { pg_sys::LockAcquire(tag, mode.lockmode(), session, true) };
    got != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
}

/// Whether another transaction holds `lock` in a mode that conflicts with `mode`, without
/// taking anything (so nobody waits for the look).
pub fn held_by_others(lock: Lock<'_>, mode: Mode) -> bool {
    let tag = lock.tag();
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

/// Give back one hold of a transaction lock this call took (by `try_mode` or `wait_for`): a
/// hold the transaction had before stays (the lock manager counts them).
fn release_xact(tag: &pg_sys::LOCKTAG, mode: Mode) {
    // SAFETY: the lock was taken with this tag and mode for the transaction by this backend,
    // under the same resource owner (within one call of `take_all`).
    unsafe {
        pg_sys::LockRelease(tag, mode.lockmode(), false);
    }
}

/// Take `lock` exclusively for this transaction, never waiting.
pub fn try_xact(lock: Lock<'_>) -> bool {
    try_mode(&lock.tag(), Mode::Exclusive, false)
}

/// Take `lock` in `mode` for this transaction, never waiting; true if taken.
pub fn try_in(lock: Lock<'_>, mode: Mode) -> bool {
    try_mode(&lock.tag(), mode, false)
}

/// Take `lock` exclusively for this transaction, waiting for whoever holds it at most as long
/// as the caller's `lock_timeout` (when set) or `queen.lock_wait_seconds`; then 55P03 naming
/// `what`.
pub fn wait_xact(lock: Lock<'_>, what: impl FnOnce() -> String) -> QueenResult<()> {
    take(lock, Mode::Exclusive, what).map(|_waited| ())
}

/// Take `lock` in `mode` for this transaction, waiting as [`wait_xact`] does. True when it had
/// to wait: what the caller read before may have changed meanwhile.
pub fn take(lock: Lock<'_>, mode: Mode, what: impl FnOnce() -> String) -> QueenResult<bool> {
    let tag = lock.tag();
    if try_mode(&tag, mode, false) {
        return Ok(false);
    }
    let bound_ms = bound_ms();
    match wait_for(&tag, mode, bound_ms) {
        true => Ok(true),
        false => Err(QueenError::LockWait { what: what(), ms: bound_ms }),
    }
}

/// Wait for `tag` in `mode` for this transaction, at most `ms` milliseconds: true when taken.
fn wait_for(tag: &pg_sys::LOCKTAG, mode: Mode, ms: i32) -> bool {
    let timed_out = with_lock_timeout(ms.max(1), || {
        pgrx::PgTryBuilder::new(|| {
            // SAFETY: as in try_mode; waiting, which lock_timeout (set just now) bounds.
            unsafe { pg_sys::LockAcquire(tag, mode.lockmode(), false, false) };
            false
        })
        .catch_when(pgrx::PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, |_| true)
        .execute()
    });
    !timed_out
}

/// A transaction whose snapshot is older than what it waited for (REPEATABLE READ or
/// SERIALIZABLE) fails with 40001, to be retried, instead of acting on rows that are gone.
fn fresh(waited: bool) -> QueenResult<bool> {
    // SAFETY: a backend global, set for the running transaction; read only.
    if waited && unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32 {
        return Err(QueenError::SnapshotTooOld);
    }
    Ok(waited)
}

/// Take `lock` in `mode` for this transaction, waiting as [`take`] does; see [`fresh`].
pub fn take_fresh(lock: Lock<'_>, mode: Mode, what: impl FnOnce() -> String) -> QueenResult<bool> {
    fresh(take(lock, mode, what)?)
}

/// Take every lock of `wanted` for this transaction, all or none: each is tried without
/// waiting; when one is taken by others, the ones this call took go back and the call waits
/// for that one alone (bounded as [`take`] is, over the whole call), then tries again. So the
/// caller never holds one of them while it waits for another: what it waits for can never be
/// waiting for it. The deletes take their locks so. 55P03 names what it last waited for
/// (`what`, given the index of that lock in `wanted`); see [`fresh`].
///
/// In a transaction that has written queen's rows (it holds [`writing`]'s locks of some queue,
/// and row locks with them), nothing is waited for: 55P03 at once when a lock is held. Waiting
/// there, the delete would hold those rows while it waits, and a transaction it waits for (one
/// that writes the queue being deleted) could be waiting for them: a circle.
pub fn take_all(wanted: &[(Lock<'_>, Mode)], what: impl Fn(usize) -> String) -> QueenResult<bool> {
    let tags: Vec<(pg_sys::LOCKTAG, Mode)> = wanted.iter().map(|(l, m)| (l.tag(), *m)).collect();
    let bound_ms = if WROTE.get() { 0 } else { bound_ms() };
    let started = std::time::Instant::now();
    let mut waited = false;
    // The lock last waited for, held (taken at once by the next try).
    let mut first: Option<usize> = None;
    loop {
        let order = first.into_iter().chain((0..tags.len()).filter(|i| Some(*i) != first));
        let mut held: Vec<usize> = Vec::with_capacity(tags.len());
        let mut blocked = None;
        for i in order {
            let (tag, mode) = &tags[i];
            if try_mode(tag, *mode, false) {
                held.push(i);
            } else {
                blocked = Some(i);
                break;
            }
        }
        let Some(b) = blocked else {
            // Holds taken twice (the lock waited for, then tried again) go back to one.
            if let Some(f) = first {
                release_xact(&tags[f].0, tags[f].1);
            }
            return fresh(waited);
        };
        for &i in &held {
            release_xact(&tags[i].0, tags[i].1);
        }
        if let Some(f) = first.take() {
            release_xact(&tags[f].0, tags[f].1);
        }
        let left = bound_ms.saturating_sub(started.elapsed().as_millis().min(i32::MAX as u128) as i32);
        if bound_ms == 0 || left <= 0 || !wait_for(&tags[b].0, tags[b].1, left) {
            return Err(QueenError::LockWait { what: what(b), ms: bound_ms });
        }
        waited = true;
        first = Some(b);
    }
}

/// A call that locks many rows of queen's at once (a seek, a replay or purge of dead letters:
/// a group's cursor rows in several partitions) takes them all or none, as [`take_all`] takes
/// queen's locks: `f` locks its rows without waiting (`FOR UPDATE NOWAIT`), failing with 55P03
/// when one of them is another transaction's. Each try runs
/// in a subtransaction, rolled back when it fails — every row it locked goes back — and the
/// call pauses, holding none of them, before it tries again (1 ms, doubling up to 20 ms), for
/// as long as [`take`] would wait; then 55P03. So it never holds one of those rows while it
/// waits for another: a transaction that acks a row it wants, having acked another first, is
/// not waiting for it. On Citus the coordinator runs the whole call, every shard's part, as
/// one try (a worker's part fails rather than wait, route.rs). In a transaction that has
/// written queen's rows it does not try again (they are held while it would wait): 55P03 at
/// once, as for a delete.
pub fn all_or_none<T>(what: impl Fn() -> String, mut f: impl FnMut() -> QueenResult<T>) -> QueenResult<T> {
    let bound_ms = if WROTE.get() { 0 } else { bound_ms() };
    let started = std::time::Instant::now();
    let mut pause = 1;
    loop {
        let failed = match crate::subxact::attempt_caught(&mut f) {
            Ok(t) => return Ok(t),
            Err(e) if e.code() == pgrx::PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE => e,
            Err(e) => e.raise(),
        };
        let left = bound_ms.saturating_sub(started.elapsed().as_millis().min(i32::MAX as u128) as i32);
        if left <= 0 {
            // (A lock of queen's that `f` waited for as long as it may says so itself.)
            return match failed {
                crate::subxact::Failed::Returned(e) => Err(e),
                crate::subxact::Failed::Raised(_) => Err(QueenError::LockWait { what: what(), ms: bound_ms }),
            };
        }
        crate::clock::sleep_ms(pause.min(left));
        pgrx::check_for_interrupts!();
        pause = (pause * 2).min(20);
    }
}

/// What [`all_or_none`] names: the cursor rows of `group` (None: the queue mode).
pub fn cursor_rows_of(group: Option<&str>) -> String {
    match group {
        Some(g) => format!("a cursor row of group \"{}\"", crate::error::shorten(g)),
        None => "a cursor row of the queue mode".to_string(),
    }
}

/// Shared locks of a transaction that writes rows of queue `queue_id` (named `queue`, when the
/// caller knows its name) for `group` (None: a push, no group): a delete of either waits for
/// it, and it waits for a delete that is open. True when it waited.
pub fn writing(queue_id: Uuid, queue: Option<&str>, group: Option<&str>) -> QueenResult<bool> {
    WROTE.set(true);
    let mut waited = take_fresh(Lock::QueueWrite(queue_id), Mode::Shared, || match queue {
        Some(q) => format!("queue \"{}\" (being deleted)", crate::error::shorten(q)),
        None => "the message's queue (being deleted)".to_string(),
    })?;
    if let Some(g) = group {
        let what = || format!("group \"{}\" (being deleted)", crate::error::shorten(g));
        waited |= take_fresh(Lock::GroupEverywhere(g), Mode::Shared, what)?;
        waited |= take_fresh(Lock::GroupWrite(queue_id, g), Mode::Shared, what)?;
    }
    Ok(waited)
}

/// [`writing`]'s locks, never waiting (maintenance, a timer's firing: the worker never waits
/// for a client). False when one is held by a delete (or a delete waits for it): nothing of
/// the queue or group is to be written now; the locks taken stay until the transaction ends.
pub fn try_writing(queue_id: Uuid, group: Option<&str>) -> bool {
    WROTE.set(true);
    try_in(Lock::QueueWrite(queue_id), Mode::Shared)
        && group.is_none_or(|g| {
            try_in(Lock::GroupEverywhere(g), Mode::Shared) && try_in(Lock::GroupWrite(queue_id, g), Mode::Shared)
        })
}

/// On Citus's coordinator, a call routed to a worker that writes queen's rows there whose
/// queue the coordinator does not know (an ack, `queen_ack_lease`, a renew; a push, pop, seek,
/// replay or purge takes [`writing`]'s locks there as well): the transaction holds rows that a
/// delete could wait for through the workers, so its deletes do not wait, as after [`writing`]
/// on one server.
pub fn wrote_through_a_worker() {
    WROTE.set(true);
}

thread_local! {
    /// This transaction took [`writing`]'s locks (it may hold rows of queen's): its deletes do
    /// not wait ([`take_all`]). Until the transaction ends (a subtransaction rolled back
    /// leaves it set: its deletes stay the more careful).
    static WROTE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// At the end of a transaction (committed, rolled back, prepared).
pub fn at_end() {
    WROTE.set(false);
}

/// `queen_delete_queue`'s locks (on Citus the coordinator's too): the queue's, exclusive, which
/// waits for every open transaction that holds it shared ([`writing`]), and `Deletes`, shared.
pub fn deleting_queue(queue_id: Uuid, queue: &str) -> QueenResult<bool> {
    take_all(&[(Lock::QueueWrite(queue_id), Mode::Exclusive), (Lock::Deletes, Mode::Shared)], |i| match i {
        0 => format!("queue \"{}\" (in use by an open transaction)", crate::error::shorten(queue)),
        _ => "a delete of a group on every queue".to_string(),
    })
}

/// `queen_delete_group`'s locks: on one queue (`queue`: its id and name), the queue's shared
/// (no delete of the queue at once), the group's everywhere shared and the group's on the
/// queue exclusive, which waits for every open transaction that writes rows of the group
/// there; on every queue (None), `Deletes` and the group's everywhere, exclusive.
pub fn deleting_group(queue: Option<(Uuid, &str)>, group: &str) -> QueenResult<bool> {
    let shown = |g: &str| match g {
        crate::names::QUEUE_MODE_GROUP => "(queue mode)".to_string(),
        g => format!("\"{}\"", crate::error::shorten(g)),
    };
    match queue {
        Some((queue_id, name)) => take_all(
            &[
                (Lock::QueueWrite(queue_id), Mode::Shared),
                (Lock::GroupEverywhere(group), Mode::Shared),
                (Lock::GroupWrite(queue_id, group), Mode::Exclusive),
            ],
            |i| match i {
                0 => format!("queue \"{}\" (being deleted)", crate::error::shorten(name)),
                1 => format!("group {} (being deleted on every queue)", shown(group)),
                _ => format!("group {} (in use by an open transaction)", shown(group)),
            },
        ),
        None => {
            take_all(
                &[(Lock::Deletes, Mode::Exclusive), (Lock::GroupEverywhere(group), Mode::Exclusive)],
                |i| match i {
                    0 => "a delete of a queue".to_string(),
                    _ => format!("group {} (in use by an open transaction)", shown(group)),
                },
            )
        }
    }
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
    fn every_kind_and_id_has_a_tag_of_its_own() {
        let (a, b) = (Uuid::from_bytes([1; 16]), Uuid::from_bytes([2; 16]));
        let locks = [
            Lock::QueueWrite(a),
            Lock::QueueWrite(b),
            Lock::Configure(a),
            Lock::Subscribe(a),
            Lock::Deletes,
            Lock::Maintenance,
            Lock::GroupEverywhere("g"),
            Lock::GroupEverywhere("h"),
            Lock::GroupEverywhere(""),
            Lock::GroupWrite(a, "g"),
            Lock::GroupWrite(b, "g"),
            Lock::GroupWrite(a, "h"),
            Lock::GroupWrite(a, ""),
            Lock::Pair(a, "g"),
            Lock::Visit(a, "g"),
            Lock::Discovery(a, "g"),
            Lock::Permit("queen-locks", "g"),
            Lock::Permit("queen-locks/x", "g"),
            Lock::Permit("queen-locks", "h"),
            Lock::Permit("", "g"),
            Lock::Grants,
        ];
        let tags: Vec<[u32; 3]> = locks.iter().map(|l| digest(7, l)).collect();
        for i in 0..tags.len() {
            for j in 0..i {
                assert_ne!(tags[i], tags[j], "{:?} and {:?}", locks[i], locks[j]);
            }
        }
        assert_eq!(digest(7, &Lock::GroupWrite(a, "g")), digest(7, &Lock::GroupWrite(a, "g")));
        assert_ne!(digest(7, &Lock::GroupWrite(a, "g")), digest(8, &Lock::GroupWrite(a, "g")), "databases apart");
    }

    #[test]
    fn a_group_is_keyed_by_its_whole_name() {
        // Names that a 32-bit FNV-1a hash of (id, name) would make collide are apart: the
        // digest reads every byte, and the length.
        let q = Uuid::from_bytes([3; 16]);
        let long = "x".repeat(255);
        let longer = format!("{long}y");
        assert_ne!(digest(1, &Lock::GroupWrite(q, &long)), digest(1, &Lock::GroupWrite(q, &longer)));
        assert_ne!(digest(1, &Lock::GroupWrite(q, "ab")), digest(1, &Lock::GroupWrite(q, "ab\0")));
        // A permit's two strings each with its length: no split of one text reads as another.
        assert_ne!(digest(1, &Lock::Permit("ab", "c")), digest(1, &Lock::Permit("a", "bc")));
        assert_ne!(digest(1, &Lock::Permit("", "abc")), digest(1, &Lock::Permit("abc", "")));
        assert_eq!(digest(1, &Lock::Permit("n", "k#0")), digest(1, &Lock::Permit("n", "k#0")));
    }

    #[test]
    fn queens_tags_are_none_an_sql_advisory_function_builds() {
        // pg_advisory_lock(bigint) sets 1, pg_advisory_lock(int, int) sets 2.
        assert!(QUEEN_FIELD != 1 && QUEEN_FIELD != 2);
    }
}
