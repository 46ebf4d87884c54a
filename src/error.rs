//! The one error type of the extension, and its mapping to the SQLSTATEs of semantics §7.
//!
//! Core modules return `Result<_, QueenError>` and know nothing of Postgres error reporting;
//! the SQL-facing wrappers in `api/` turn an error into an `ERROR` with [`QueenError::report`].
//! Three places below them report for every call alike, before or after its own work: the
//! session (owner.rs: the extension not installed, or in another version), the mapping's check
//! (cluster.rs: the stored ids rebased under the transaction, a restore not committed yet) and
//! the transaction hooks (hooks.rs, at commit).
//! Normal outcomes (nothing to pop, a refused ack, a duplicate push) are results, never errors.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueenError {
    /// 22023: a bad or missing argument or JSON field. `what` names it, `detail` says why.
    InvalidParameter { what: String, detail: String },
    /// 22004: an SQL NULL where a value is required.
    NullValue { argument: &'static str },
    /// 22P02: malformed uuid or JSON text, also inside a JSON field.
    InvalidText { what: String, value: String, kind: &'static str },
    /// 54000: the queue is at its `maxSize`.
    QueueFull { queue: String, max_size: i64 },
    /// 0A000: a waiting pop outside READ COMMITTED.
    WaitNotSupported { isolation: String },
    /// 42501: the calling role lacks a privilege on a queue (semantics §11).
    PermissionDenied { queue: String, privilege: &'static str },
    /// 42501: the same, on a Citus worker, where no grant is read (shards.rs `roles_here`).
    PermissionDeniedOnWorker { queue: String, privilege: &'static str },
    /// 42501: a function for superusers and the extension's owner (and, for diagnostics,
    /// members of pg_monitor).
    AdminOnly { function: &'static str, monitor: bool },
    /// 55000: the installed schema is not the version this library was built for.
    SchemaVersion { installed: String, library: &'static str },
    /// 55000: the library is loaded but the extension is not installed in this database.
    NotInstalled,
    /// 40001: the database's stored transaction ids were rebased (after a restore) while this
    /// transaction used the mapping it read before: it must not commit, and may be retried.
    Rebased,
    /// 55000: this transaction wrote queen's tables from outside queen (a restore): the
    /// mapping of its ids is decided once it commits.
    RestoreUncommitted,
    /// 53400: the rebase after a restore could not run (no background worker slot, say).
    RebaseFailed { detail: String },
    /// 55P03: queen waited for one of its own locks (locks.rs) as long as it may.
    LockWait { what: String, ms: i32 },
    /// 40001: a REPEATABLE READ or SERIALIZABLE transaction waited for a delete (or a
    /// maintenance pass) to commit: its snapshot is older than what it would act on.
    SnapshotTooOld,
    /// 23514: a key/value operation marked `required` did not apply (kv.rs).
    KvRequired { index: usize, op: String, key: String, reason: String },
}

pub type QueenResult<T> = Result<T, QueenError>;

impl QueenError {
    pub fn invalid(what: impl Into<String>, detail: impl Into<String>) -> Self {
        QueenError::InvalidParameter { what: what.into(), detail: detail.into() }
    }

    pub fn sqlstate(&self) -> PgSqlErrorCode {
        match self {
            QueenError::InvalidParameter { .. } => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            QueenError::NullValue { .. } => PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            QueenError::InvalidText { .. } => PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
            QueenError::QueueFull { .. } => PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            QueenError::WaitNotSupported { .. } => PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            QueenError::PermissionDenied { .. }
            | QueenError::PermissionDeniedOnWorker { .. }
            | QueenError::AdminOnly { .. } => PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            QueenError::SchemaVersion { .. } | QueenError::NotInstalled | QueenError::RestoreUncommitted => {
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE
            }
            QueenError::Rebased | QueenError::SnapshotTooOld => PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
            QueenError::RebaseFailed { .. } => PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            QueenError::LockWait { .. } => PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
            QueenError::KvRequired { .. } => PgSqlErrorCode::ERRCODE_CHECK_VIOLATION,
        }
    }

    /// Raise this error as a Postgres `ERROR`; the transaction's changes are rolled back by
    /// Postgres as for any other error.
    pub fn report(self, function: &'static str) -> ! {
        ErrorReport::new(self.sqlstate(), self.to_string(), function).report(PgLogLevel::ERROR);
        unreachable!("an ERROR report does not return")
    }
}

impl fmt::Display for QueenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueenError::InvalidParameter { what, detail } => write!(f, "queen: {what}: {detail}"),
            QueenError::NullValue { argument } => {
                write!(f, "queen: argument \"{argument}\" must not be NULL")
            }
            QueenError::InvalidText { what, value, kind } => {
                write!(f, "queen: {what}: invalid {kind}: \"{}\"", shorten(value))
            }
            QueenError::QueueFull { queue, max_size } => {
                write!(f, "queen: queue \"{}\" is full (maxSize {max_size})", shorten(queue))
            }
            QueenError::WaitNotSupported { isolation } => write!(
                f,
                "queen: queen_pop with wait_ms > 0 needs READ COMMITTED, not {isolation}: \
                 a stricter isolation level keeps one snapshot and could never see the message it waits for"
            ),
            QueenError::PermissionDeniedOnWorker { queue, privilege } => write!(
                f,
                "queen: permission denied for queue \"{}\" on this Citus worker: privilege \"{privilege}\" is \
                 granted on the coordinator, whose grants name its own roles; call queen through the coordinator",
                shorten(queue)
            ),
            QueenError::PermissionDenied { queue, privilege } if queue == "*" => {
                write!(f, "queen: permission denied: privilege \"{privilege}\" on every queue ('*') is needed")
            }
            QueenError::PermissionDenied { queue, privilege } if privilege.starts_with("kv_") => write!(
                f,
                "queen: permission denied for key/value namespace \"{}\": privilege \"{privilege}\" is needed \
                 (queen_grant(namespace, role, ARRAY['{privilege}']))",
                shorten(queue)
            ),
            QueenError::PermissionDenied { queue, privilege } => write!(
                f,
                "queen: permission denied for queue \"{}\": privilege \"{privilege}\" is needed \
                 (queen_grant(queue, role, ARRAY['{privilege}']))",
                shorten(queue)
            ),
            QueenError::SchemaVersion { installed, library } => write!(
                f,
                "queen: the installed schema is version {installed}, this library is version {library}: \
                 run ALTER EXTENSION queen UPDATE"
            ),
            QueenError::NotInstalled => write!(f, "queen: the extension is not installed in this database"),
            QueenError::AdminOnly { function, monitor } => write!(
                f,
                "queen: permission denied for {function}: only superusers and the extension's owner{} may call it",
                if *monitor { " (and members of pg_monitor)" } else { "" }
            ),
            QueenError::Rebased => write!(
                f,
                "queen: this database's transaction ids were rebased after a restore while this transaction \
                 used them: retry the transaction"
            ),
            QueenError::RestoreUncommitted => {
                write!(f, "queen: this transaction restored rows into queen's tables: use queen once it has committed")
            }
            QueenError::RebaseFailed { detail } => {
                write!(f, "queen: could not rebase this database's transaction ids after a restore: {detail}")
            }
            QueenError::KvRequired { index, op, key, reason } => write!(
                f,
                "queen: key/value operation {index} ({op} of key \"{}\") is required and did not apply: {reason}",
                shorten(key)
            ),
            QueenError::SnapshotTooOld => write!(
                f,
                "queen: this transaction waited for another that deleted or changed what it uses, and its \
                 snapshot is older than that: retry the transaction"
            ),
            QueenError::LockWait { what, ms: 0 } => write!(
                f,
                "queen: {what} was locked by another transaction, and a call that locks many of \
                 queen's rows at once (a delete, a seek, a replay or purge of dead letters) does not \
                 wait in a transaction that has written queen's rows (it would hold those rows while \
                 it waits): make it in a transaction of its own"
            ),
            QueenError::LockWait { what, ms } => write!(
                f,
                "queen: {what} was locked by another transaction for {ms} ms \
                 (lock_timeout, or queen.lock_wait_seconds when it is not set)"
            ),
        }
    }
}

/// Called from `_PG_init`: errors reach users without a Rust backtrace (semantics §11). pgrx's
/// panic hook captures one into every error's DETAIL when the server's environment has
/// RUST_BACKTRACE set (a developer's shell often does); RUST_LIB_BACKTRACE=0 turns capturing
/// off for this process, unless it is set already (to debug queen, start the server with
/// RUST_LIB_BACKTRACE=1).
pub fn init() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // Before any thread of ours exists: _PG_init runs in the backend's only thread.
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
}

/// Values quoted in messages are cut so that a hostile megabyte-long argument does not become
/// a megabyte-long log line.
pub fn shorten(value: &str) -> String {
    const MAX: usize = 120;
    if value.chars().count() <= MAX {
        value.to_string()
    } else {
        let head: String = value.chars().take(MAX).collect();
        format!("{head}…")
    }
}

/// Unwrap a core result in a SQL-facing function, raising the error if there is one.
pub trait OrReport<T> {
    fn or_report(self, function: &'static str) -> T;
}

impl<T> OrReport<T> for QueenResult<T> {
    fn or_report(self, function: &'static str) -> T {
        match self {
            Ok(v) => v,
            Err(e) => e.report(function),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_argument_and_value() {
        let e = QueenError::invalid("option \"leaseTime\"", "must be an integer from 1 to 2147483647, got \"abc\"");
        assert_eq!(e.to_string(), "queen: option \"leaseTime\": must be an integer from 1 to 2147483647, got \"abc\"");
        assert_eq!(e.sqlstate(), PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE);
        assert_eq!(
            QueenError::NullValue { argument: "queue" }.to_string(),
            "queen: argument \"queue\" must not be NULL"
        );
    }

    #[test]
    fn long_values_are_shortened() {
        let long = "x".repeat(10_000);
        let s = shorten(&long);
        assert_eq!(s.chars().count(), 121);
    }
}
