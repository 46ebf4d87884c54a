//! A piece of work that may fail without failing its transaction: run in a subtransaction,
//! which is released when the work succeeds and rolled back (everything it wrote, every lock
//! it took, every SPI connection it opened) when it returns an error or raises one. PL/pgSQL's
//! `BEGIN ... EXCEPTION` does the same. Used where one item's failure must not undo the others:
//! a timer whose queue is full (timers.rs) is tried again later while the rest fire.

use crate::error::QueenResult;
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::PgTryBuilder;

/// Run `f` in a subtransaction: its result, or why it failed (an error it returned or raised),
/// with nothing of it left.
pub fn attempt<R>(f: impl FnOnce() -> QueenResult<R>) -> Result<R, String> {
    // The search_path fixed outside the subtransaction, whose rollback would end its level.
    crate::gucs::fix_search_path();
    // SAFETY: called inside a transaction (every caller is a SQL function or a worker unit);
    // BeginInternalSubTransaction switches to the subtransaction's memory context and resource
    // owner, which are put back below once it has ended, either way, as PL/pgSQL does.
    let (context, owner) = unsafe {
        let saved = (pg_sys::CurrentMemoryContext, pg_sys::CurrentResourceOwner);
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(saved.0);
        saved
    };
    let out = PgTryBuilder::new(std::panic::AssertUnwindSafe(|| f().map_err(|e| e.to_string())))
        .catch_others(|e| {
            Err(match e {
                CaughtError::PostgresError(r)
                | CaughtError::ErrorReport(r)
                | CaughtError::RustPanic { ereport: r, .. } => r.message().to_string(),
            })
        })
        .execute();
    // SAFETY: the subtransaction begun above is the current one: `f` ran to its end or its
    // error was caught (and its error state flushed) by PgTryBuilder; SPI connections `f`
    // opened were closed by its own frames or are cleaned up by the subtransaction's end.
    unsafe {
        match out {
            Ok(_) => pg_sys::ReleaseCurrentSubTransaction(),
            Err(_) => pg_sys::RollbackAndReleaseCurrentSubTransaction(),
        }
        pg_sys::MemoryContextSwitchTo(context);
        pg_sys::CurrentResourceOwner = owner;
    }
    out
}
