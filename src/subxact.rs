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
    attempt_caught(f).map_err(|e| match e {
        Failed::Returned(e) => e.to_string(),
        Failed::Raised(e) => report(&e).message().to_string(),
    })
}

/// Why [`attempt_caught`]'s work failed.
pub enum Failed {
    /// It returned this error.
    Returned(crate::error::QueenError),
    /// It raised this error: [`Failed::raise`] raises it again.
    Raised(CaughtError),
}

/// The report a raised error carries, whatever raised it.
fn report(e: &CaughtError) -> &pgrx::pg_sys::panic::ErrorReportWithLevel {
    match e {
        CaughtError::PostgresError(r) | CaughtError::ErrorReport(r) | CaughtError::RustPanic { ereport: r, .. } => r,
    }
}

impl Failed {
    /// The error's SQLSTATE.
    pub fn code(&self) -> pgrx::PgSqlErrorCode {
        match self {
            Failed::Returned(e) => e.sqlstate(),
            Failed::Raised(e) => report(e).sql_error_code(),
        }
    }

    /// Whether it says a node of the cluster could not be reached or went away (SQLSTATE class
    /// 08, or the node shutting down or starting: 57P01–57P03): on Citus, a worker down.
    pub fn node_unreachable(&self) -> bool {
        use pgrx::PgSqlErrorCode as C;
        let code = self.code();
        matches!(code, C::ERRCODE_ADMIN_SHUTDOWN | C::ERRCODE_CRASH_SHUTDOWN | C::ERRCODE_CANNOT_CONNECT_NOW)
            || code_class(code) == code_class(C::ERRCODE_CONNECTION_EXCEPTION)
    }

    /// Raise the error again, with its SQLSTATE and message, nothing of the work left: the
    /// subtransaction has ended.
    pub fn raise(self) -> ! {
        match self {
            Failed::Raised(e) => e.rethrow(),
            Failed::Returned(e) => e.report("queen"),
        }
    }
}

/// The class of a SQLSTATE (its first two characters, as PostgreSQL packs them: the low 12
/// bits of the code).
fn code_class(code: pgrx::PgSqlErrorCode) -> i32 {
    (code as i32) & 0xFFF
}

/// Run `f` in a subtransaction: its result, or how it failed, with nothing of it left.
pub fn attempt_caught<R>(f: impl FnOnce() -> QueenResult<R>) -> Result<R, Failed> {
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
    let out = PgTryBuilder::new(std::panic::AssertUnwindSafe(|| f().map_err(Failed::Returned)))
        .catch_others(|e| Err(Failed::Raised(e)))
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

#[cfg(test)]
mod tests {
    use pgrx::PgSqlErrorCode as C;

    #[test]
    fn a_sqlstates_class_is_its_first_two_characters() {
        // (code, same class as 08000)
        let cases = [
            (C::ERRCODE_CONNECTION_FAILURE, true),
            (C::ERRCODE_CONNECTION_DOES_NOT_EXIST, true),
            (C::ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION, true),
            (C::ERRCODE_INSUFFICIENT_PRIVILEGE, false),
            (C::ERRCODE_LOCK_NOT_AVAILABLE, false),
            (C::ERRCODE_INTERNAL_ERROR, false),
        ];
        for (code, same) in cases {
            assert_eq!(super::code_class(code) == super::code_class(C::ERRCODE_CONNECTION_EXCEPTION), same, "{code:?}");
        }
    }
}
