//! The hooks queen registers with PostgreSQL, and who hears of each event. One place answers
//! "what happens when a transaction commits?":
//!
//! | event | in order |
//! | --- | --- |
//! | pre-commit | the id mapping's check (cluster.rs), then caches counted in flight (cache.rs) |
//! | pre-prepare | the id mapping's check |
//! | commit | visit marks released (visit.rs), the mapping's transaction state, the debug pause after a commit (gucs.rs), Citus routing (route.rs), caches retired (cache.rs), discovery's state (discovery.rs), the timer worker woken (worker.rs), waiting pops woken (wait.rs) |
//! | abort | visit marks released, the mapping's transaction state, Citus routing, caches and discovery's state dropped, scheduled timers forgotten, waiting pops woken for what the transaction leased |
//! | prepare | as abort, but waiting pops are left to `COMMIT PREPARED` |
//! | subtransaction abort | its visit marks released, discovery's state of it dropped, waiting pops woken for what the transaction leased |
//! | `COMMIT PREPARED` (utility hook, preloaded only) | caches in flight around it; then every waiter of the database woken and the timer worker poked |
//!
//! The transaction and subtransaction callbacks are registered in every backend that loads the
//! library; the utility hook only when it is preloaded (PostgreSQL 13's hook has another
//! signature: there, waiters of a prepared push wake at their deadline).

use pgrx::pg_guard;
use pgrx::pg_sys;

/// Called from `_PG_init` in every backend that loads the library.
pub fn init_backend() {
    // SAFETY: the callbacks are `'static` functions with the signatures Postgres expects, and
    // they ignore their `arg`, so a null one is fine; _PG_init runs once per process, so each
    // is registered once.
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(on_subxact), std::ptr::null_mut());
    }
}

/// Called from `_PG_init` when preloading: watch `COMMIT PREPARED`.
pub fn init_shared() {
    // SAFETY: called once, from _PG_init in the postmaster while it loads
    // shared_preload_libraries: single-threaded, before any backend exists to run the hook,
    // and PREV_UTILITY is written only here. The previous hook is kept and chained.
    #[cfg(not(feature = "pg13"))]
    unsafe {
        PREV_UTILITY = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(on_utility);
    }
}

/// # Safety
///
/// Only Postgres calls it, as the transaction callback `init_backend` registers. It reads no
/// argument pointer, so nothing more is required; it is `unsafe` to have the callback's type.
#[pg_guard]
unsafe extern "C-unwind" fn on_xact(event: pg_sys::XactEvent::Type, _arg: *mut std::os::raw::c_void) {
    use pg_sys::XactEvent::*;
    if matches!(
        event,
        XACT_EVENT_COMMIT
            | XACT_EVENT_PARALLEL_COMMIT
            | XACT_EVENT_ABORT
            | XACT_EVENT_PARALLEL_ABORT
            | XACT_EVENT_PREPARE
    ) {
        crate::visit::release_all();
        crate::cluster::at_end();
        crate::locks::at_end();
    }
    match event {
        XACT_EVENT_PRE_COMMIT | XACT_EVENT_PARALLEL_PRE_COMMIT => {
            // First: its check may read (cache.rs counts this commit in flight after).
            crate::cluster::at_pre_commit();
            crate::cache::at_pre_commit();
        }
        XACT_EVENT_PRE_PREPARE => crate::cluster::at_pre_commit(),
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT => {
            crate::gucs::debug_after_commit();
            crate::route::at_end(true);
            crate::cache::at_commit();
            crate::discovery::at_commit();
            crate::timer_wake::at_end(true);
            crate::wait::at_commit();
        }
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT => {
            crate::route::at_end(false);
            crate::cache::at_abort();
            crate::discovery::at_abort();
            crate::timer_wake::at_end(false);
            crate::wait::at_abort();
        }
        XACT_EVENT_PREPARE => {
            // Whoever runs COMMIT PREPARED wakes the database's waiters and retires cached
            // subscriptions (on_utility).
            crate::route::at_end(false);
            crate::cache::at_abort();
            crate::discovery::at_abort();
            crate::timer_wake::at_end(false);
            crate::wait::at_prepare();
        }
        _ => {}
    }
}

/// A subtransaction that leased messages rolled back: they are deliverable again (and the
/// visit marks it held go).
///
/// # Safety
///
/// Only Postgres calls it, as the subtransaction callback `init_backend` registers. It reads
/// no argument pointer, so nothing more is required; it is `unsafe` to have the callback's
/// type.
#[pg_guard]
unsafe extern "C-unwind" fn on_subxact(
    event: pg_sys::SubXactEvent::Type,
    sub: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::os::raw::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        crate::visit::release_from(sub);
        crate::discovery::at_subabort();
        crate::wait::at_subabort();
    }
}

#[cfg(not(feature = "pg13"))]
static mut PREV_UTILITY: pg_sys::ProcessUtility_hook_type = None;

/// After `COMMIT PREPARED`: wake every waiter of this database (the prepared transaction may
/// have pushed to any queue) and the timer worker (it may have scheduled a timer).
///
/// # Safety
///
/// Only Postgres calls it, as `ProcessUtility_hook` (installed by `init_shared`), with the
/// arguments of `ProcessUtility`: `pstmt` a valid PlannedStmt, the others as that function
/// takes them (they are passed on unchanged).
#[cfg(not(feature = "pg13"))]
#[pg_guard]
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn on_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query: *const std::os::raw::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: `pstmt` is valid (caller); `utilityStmt` is checked for null and cast to a
    // TransactionStmt only when its node tag says it is one. PREV_UTILITY was set once in
    // _PG_init before this hook could run, and is only read here; the arguments go on to the
    // previous hook, or to standard_ProcessUtility, as they came.
    unsafe {
        let node = (*pstmt).utilityStmt;
        let commit_prepared = !node.is_null()
            && (*node).type_ == pg_sys::NodeTag::T_TransactionStmt
            && (*(node as *mut pg_sys::TransactionStmt)).kind
                == pg_sys::TransactionStmtKind::TRANS_STMT_COMMIT_PREPARED;
        // The prepared transaction may have changed cached state: in flight from before its
        // commit is visible until after (cache.rs), also when the commit fails.
        let in_flight = commit_prepared.then(crate::cache::in_flight);
        match PREV_UTILITY {
            Some(prev) => prev(pstmt, query, read_only_tree, context, params, env, dest, qc),
            None => pg_sys::standard_ProcessUtility(pstmt, query, read_only_tree, context, params, env, dest, qc),
        }
        drop(in_flight);
        if commit_prepared {
            crate::wait::at_commit_prepared();
            crate::timer_wake::poke();
        }
    }
}
