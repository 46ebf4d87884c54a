//! Settings (`queen.*`), registered in `_PG_init`. See docs/operations.md.

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::CString;

/// Seconds between two maintenance passes of the background worker.
pub static MAINTENANCE_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(10);

/// Comma-separated databases the background worker maintains (one worker each).
pub static DATABASES: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"postgres"));

/// The role the background worker connects as (empty: the bootstrap superuser, the role
/// `initdb` created). Its queries run as each database's extension owner (privilege.rs)
/// whatever the role, so the role only needs to be allowed to connect; it must exist in every
/// database of queen.databases' cluster, as roles do.
pub static WORKER_ROLE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// Seconds a partition must be empty and idle before maintenance removes it.
pub static PARTITION_IDLE_SECONDS: GucSetting<i32> = GucSetting::<i32>::new(3600);

/// The longest lease a pop, a queue's `leaseTime` or a renewal may give (semantics §3.2): a role
/// that may pop a queue must not be able to hold a partition for decades. Only superusers (or
/// postgresql.conf, ALTER DATABASE/ROLE by a superuser) change it.
pub static MAX_LEASE_SECONDS: GucSetting<i32> = GucSetting::<i32>::new(86_400);

/// Seconds a queen call waits for one of queen's own locks (locks.rs) when the caller has no
/// `lock_timeout` (or a longer one).
pub static LOCK_WAIT_SECONDS: GucSetting<i32> = GucSetting::<i32>::new(60);

/// Milliseconds a pop sleeps between looking at a partition and claiming it: for tests that
/// replay what happens when another transaction commits in between (superusers only).
pub static DEBUG_CLAIM_DELAY_MS: GucSetting<i32> = GucSetting::<i32>::new(0);

/// Sleep `queen.debug_claim_delay_ms`, if set (as pg_sleep does: pg_stat_activity shows the
/// wait event PgSleep, which a test can wait for).
pub fn debug_claim_delay() {
    crate::clock::sleep_ms(DEBUG_CLAIM_DELAY_MS.get());
}

/// Milliseconds a committing transaction that changed cached state (cache.rs) sleeps after its
/// commit is visible and before the cache's generation moves: for tests of that window
/// (superusers only).
pub static DEBUG_COMMIT_DELAY_MS: GucSetting<i32> = GucSetting::<i32>::new(0);

/// Milliseconds every committing transaction sleeps once its commit is durable, before queen's
/// commit hooks and those of extensions loaded before queen (on a Citus coordinator: before
/// the workers' `COMMIT PREPARED`): for tests of a node lost in that window (superusers only).
pub static DEBUG_AFTER_COMMIT_MS: GucSetting<i32> = GucSetting::<i32>::new(0);

/// Sleep `queen.debug_after_commit_ms`, if set.
pub fn debug_after_commit() {
    crate::clock::sleep_ms(DEBUG_AFTER_COMMIT_MS.get());
}

/// The most queue-log entries one discovery round reads (0: discovery.rs's own bounds): for the
/// explorer, which makes stretches of the log longer than a pop reads out of a few messages.
pub static DEBUG_SCAN_LIMIT: GucSetting<i32> = GucSetting::<i32>::new(0);

/// Milliseconds a pop that reads the queue log sleeps after its scan, before it records what it
/// found, holding the group's discovery mark (visit.rs): for tests of pops that come meanwhile
/// (superusers only).
pub static DEBUG_DISCOVERY_DELAY_MS: GucSetting<i32> = GucSetting::<i32>::new(0);

/// Sleep `queen.debug_discovery_delay_ms`, if set (wait event PgSleep, as pg_sleep).
pub fn debug_discovery_delay() {
    crate::clock::sleep_ms(DEBUG_DISCOVERY_DELAY_MS.get());
}

/// Sleep `queen.debug_commit_delay_ms`, if set (wait event PgSleep, as pg_sleep).
pub fn debug_commit_delay() {
    crate::clock::sleep_ms(DEBUG_COMMIT_DELAY_MS.get());
}

pub fn init() {
    GucRegistry::define_int_guc(
        c"queen.maintenance_interval",
        c"Seconds between two maintenance passes of queen's background worker.",
        c"Retention, max wait and the clean-up of idle partitions run this often in every database of queen.databases.",
        &MAINTENANCE_INTERVAL,
        1,
        86_400,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    // A PGC_POSTMASTER setting can only be defined while the server starts: without
    // preloading there is no worker to configure.
    // SAFETY: a plain read of a Postgres global bool, which only this process writes (the
    // postmaster sets it while it loads shared_preload_libraries); init runs from _PG_init, on
    // the process's only thread.
    if unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        GucRegistry::define_string_guc(
        c"queen.databases",
        c"Databases queen's background worker maintains (comma-separated).",
        c"One maintenance worker is started per database when queen is in shared_preload_libraries; a database without the extension is skipped.",
        &DATABASES,
        GucContext::Postmaster,
        GucFlags::default(),
        );
        GucRegistry::define_string_guc(
            c"queen.worker_role",
            c"The role queen's background worker connects as (empty: the bootstrap superuser).",
            c"The worker runs queen's maintenance as each database's extension owner whatever this role is.",
            &WORKER_ROLE,
            GucContext::Postmaster,
            GucFlags::default(),
        );
    }
    GucRegistry::define_int_guc(
        c"queen.debug_claim_delay_ms",
        c"For tests: milliseconds a pop sleeps between looking at a partition and claiming it.",
        c"Lets a test commit another transaction in between. Never set it in production.",
        &DEBUG_CLAIM_DELAY_MS,
        0,
        60_000,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"queen.debug_commit_delay_ms",
        c"For tests: milliseconds a commit that changes cached state sleeps once it is visible.",
        c"Lets a test run another session in that window. Never set it in production.",
        &DEBUG_COMMIT_DELAY_MS,
        0,
        60_000,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"queen.debug_after_commit_ms",
        c"For tests: milliseconds every commit sleeps once durable, before the commit hooks run.",
        c"On a Citus coordinator, before the workers' COMMIT PREPARED. Never set it in production.",
        &DEBUG_AFTER_COMMIT_MS,
        0,
        60_000,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"queen.debug_discovery_delay_ms",
        c"For tests: milliseconds a pop that reads the queue log sleeps before recording what it found.",
        c"Lets a test run other pops while one reads the log. Never set it in production.",
        &DEBUG_DISCOVERY_DELAY_MS,
        0,
        60_000,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"queen.debug_scan_limit",
        c"For tests: the most queue-log entries one discovery round reads (0: the built-in bounds).",
        c"Lets a test make stretches of the log longer than one pop reads. Never set it in production.",
        &DEBUG_SCAN_LIMIT,
        0,
        1_000_000,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"queen.max_lease_seconds",
        c"The longest lease queen gives: lease_seconds, a queue's leaseTime and renewals.",
        c"A longer one is refused with 22023.",
        &MAX_LEASE_SECONDS,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"queen.lock_wait_seconds",
        c"Seconds a queen call waits for one of queen's own locks when lock_timeout is not shorter.",
        c"Then the call fails with 55P03.",
        &LOCK_WAIT_SECONDS,
        1,
        86_400,
        GucContext::Userset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"queen.partition_idle_seconds",
        c"Seconds a partition must be empty and idle before maintenance removes it.",
        c"",
        &PARTITION_IDLE_SECONDS,
        0,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_S,
    );
}

/// The configured databases, trimmed, without empty entries.
pub fn databases() -> Vec<String> {
    DATABASES
        .get()
        .map(|c| c.to_string_lossy().split(',').map(|d| d.trim().to_string()).filter(|d| !d.is_empty()).collect())
        .unwrap_or_default()
}

/// Run `f` with settings changed as a function's `SET` clause changes them (fmgr does the
/// same: a GUC nest level, `set_config_option` with GUC_ACTION_SAVE, then `AtEOXact_GUC`):
/// the caller's values come back when `f` returns, and an error's abort (of the transaction or
/// of the subtransaction that catches it) restores them too.
pub fn with_settings<R>(settings: &[(&std::ffi::CStr, &std::ffi::CStr)], f: impl FnOnce() -> R) -> R {
    // A level of ours ends every level above it: a search_path still to be fixed is fixed
    // first, so that its level is below this one and outlives it.
    fix_search_path();
    // SAFETY: as in `push_level`; AtEOXact_GUC ends the level made there, after `f`.
    unsafe {
        let level = push_level(settings);
        let r = f();
        pgrx::pg_sys::AtEOXact_GUC(true, level);
        r
    }
}

/// A GUC nest level with `settings` in it, as fmgr applies a SET clause.
///
/// # Safety
///
/// Inside a transaction; the caller ends the level returned (AtEOXact_GUC) when it is done, or
/// the (sub)transaction's abort does.
unsafe fn push_level(settings: &[(&std::ffi::CStr, &std::ffi::CStr)]) -> i32 {
    // SAFETY: NewGUCNestLevel / set_config_option are how fmgr applies a SET clause (caller:
    // inside a transaction); the names and values are C strings that outlive the calls.
    unsafe {
        let level = pgrx::pg_sys::NewGUCNestLevel();
        for (name, value) in settings {
            pgrx::pg_sys::set_config_option(
                name.as_ptr(),
                value.as_ptr(),
                pgrx::pg_sys::GucContext::PGC_USERSET,
                pgrx::pg_sys::GucSource::PGC_S_SESSION,
                pgrx::pg_sys::GucAction::GUC_ACTION_SAVE,
                true,
                0,
                false,
            );
        }
        level
    }
}

/// queen's fixed `search_path` (docs/security.md).
const FIXED_PATH: [(&std::ffi::CStr, &std::ffi::CStr); 1] = [(c"search_path", c"pg_catalog, pg_temp")];

/// Where the running call stands with its fixed `search_path`.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Path {
    /// Not inside [`with_fixed_search_path`]: a SET clause (or the worker's own SET) fixes it.
    Outside,
    /// Inside one inside another that had fixed it already.
    Inherited,
    /// Inside, and nothing has needed it yet: the caller's path is still in force.
    Pending,
    /// Inside, fixed at this GUC nest level, which the scope ends.
    Fixed(i32),
}

thread_local! {
    static PATH: std::cell::Cell<Path> = const { std::cell::Cell::new(Path::Outside) };
}

/// Run `f` under queen's fixed `search_path` (`pg_catalog, pg_temp`: docs/security.md),
/// without a SET clause, as the function's `SET` would, but only once something needs it.
///
/// Only SQL reads the path: queen's statements (spi.rs, which calls [`fix_search_path`] before
/// it prepares or runs one; a kept plan is analysed again under the path in force when it
/// differs from the one it was made under). What queen does by hand (direct*.rs) names
/// relations by oid and runs no SQL, and a call that only does that — a single push into a
/// known partition, most pops and acks — pays nothing for the path: a SET clause cost a push
/// 12 k instructions of its 243 k (callgrind, 2026-12-06), a GUC nest level's end being a pass
/// over every setting.
///
/// And a SET clause would save and restore the setting at every call of a set-returning
/// function, which Postgres calls once per row it returns (100 times for a pop of 100); their
/// work is all done at the first call, inside `f`.
///
/// What could end the level early is made to come after it: [`with_settings`] and
/// subxact.rs fix the path before they make a level or a subtransaction of their own.
pub fn with_fixed_search_path<R>(f: impl FnOnce() -> R) -> R {
    let outer = PATH.get();
    PATH.set(match outer {
        Path::Fixed(_) | Path::Inherited => Path::Inherited,
        Path::Outside | Path::Pending => Path::Pending,
    });
    // Put back when `f` returns or unwinds (an error: the abort of whatever catches it ends
    // the level).
    let _restore = RestorePath(outer);
    let r = f();
    if let Path::Fixed(level) = PATH.get() {
        // SAFETY: the level fix_search_path made in this scope; every level above it was
        // made after it and ended by its maker.
        unsafe { pgrx::pg_sys::AtEOXact_GUC(true, level) };
    }
    r
}

struct RestorePath(Path);

impl Drop for RestorePath {
    fn drop(&mut self) {
        PATH.set(self.0);
    }
}

/// Fix queen's `search_path` now if the running scope has not yet: before any SQL runs, and
/// before a GUC nest level or a subtransaction is made that could end the level.
pub fn fix_search_path() {
    if PATH.get() == Path::Pending {
        // SAFETY: inside a transaction (a queen call's scope); the level is ended by the
        // scope (with_fixed_search_path) or by the abort of an error.
        let level = unsafe { push_level(&FIXED_PATH) };
        PATH.set(Path::Fixed(level));
    }
}
