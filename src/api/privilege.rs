use crate::error::{OrReport, QueenError};
use crate::names;
use crate::privilege;
use pgrx::callconv::{Arg, ArgAbi};
use pgrx::datum::FromDatum;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::prelude::*;

/// A `regrole` argument: a role, given by name (or oid) in SQL, as an oid here.
pub struct RegRole(pg_sys::Oid);

impl FromDatum for RegRole {
    /// # Safety
    ///
    /// Unless `is_null`, `datum` is a regrole datum: an oid, passed by value.
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, _: pg_sys::Oid) -> Option<Self> {
        // SAFETY: an oid datum by value (caller); nothing is dereferenced.
        (!is_null).then(|| RegRole(unsafe { pg_sys::Oid::from_datum(datum, false) }.unwrap_or(pg_sys::Oid::INVALID)))
    }
}

// SAFETY: a RegRole argument is declared `regrole` in SQL (SqlTranslatable below), whose datums
// are oids passed by value; NULL arrives as None (the arguments are Option<RegRole>).
unsafe impl<'fcx> ArgAbi<'fcx> for RegRole {
    /// # Safety
    ///
    /// `arg` must be an argument of the function call now running, of SQL type regrole.
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        // SAFETY: a regrole datum (caller), which FromDatum for RegRole takes.
        unsafe { arg.unbox_arg_using_from_datum().unwrap_or_else(|| panic!("argument {index} must not be null")) }
    }
}

// SAFETY: RegRole is only an argument, declared `regrole`; it is never returned.
unsafe impl SqlTranslatable for RegRole {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(RegRole);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("regrole"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> = Ok(ReturnsRef::One(SqlMappingRef::literal("regrole")));
}

/// The queue argument of a grant: a queue's name, or `'*'` for every queue.
fn queue_or_all<'a>(function: &'static str, queue: Option<&'a str>) -> &'a str {
    match queue {
        Some("*") => "*",
        q => names::check_name("queue", "argument \"queue\"", q).or_report(function),
    }
}

fn privileges(function: &'static str, privileges: Option<Vec<Option<String>>>) -> Vec<String> {
    let list = privileges.ok_or(QueenError::NullValue { argument: "privileges" }).or_report(function);
    list.into_iter().map(|p| p.ok_or(QueenError::NullValue { argument: "privileges" }).or_report(function)).collect()
}

/// `queen_grant(queue, role, privileges)`: semantics §11. Let `role` (and the roles that have its
/// privileges) use `queue` (`'*'`: every queue, present and future) as `privileges` say:
/// `push`, `pop` (with ack and renew), `configure` (configure, seek, delete group, delete
/// queue), `read` (its rows in the views). For superusers and the extension's owner. Returns
/// how many grants were new.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_grant(queue: Option<&str>, role: Option<RegRole>, privileges: Option<Vec<Option<String>>>) -> i64 {
    change("queen_grant", queue, role, privileges, true)
}

/// `queen_revoke(queue, role, privileges)`: take back what `queen_grant` gave (the same queue
/// argument: a grant on `'*'` is revoked on `'*'`). Returns how many grants there were.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_revoke(queue: Option<&str>, role: Option<RegRole>, privileges: Option<Vec<Option<String>>>) -> i64 {
    change("queen_revoke", queue, role, privileges, false)
}

/// The body of both: check the arguments, then the caller, then change the grants.
fn change(
    f: &'static str,
    queue: Option<&str>,
    role: Option<RegRole>,
    privileges: Option<Vec<Option<String>>>,
    grant: bool,
) -> i64 {
    let queue = queue_or_all(f, queue);
    let role = role.ok_or(QueenError::NullValue { argument: "role" }).or_report(f).0;
    let list = self::privileges(f, privileges);
    privilege::require_admin(f, false).or_report(f);
    privilege::change(queue, role, &list, grant).or_report(f)
}

#[pgrx::pg_schema]
mod queen {
    use crate::error::OrReport;
    use crate::privilege::{self, Privilege};
    use pgrx::prelude::*;

    /// Whether the calling role holds `privilege` on `queue`: the filter of queen's views.
    #[pg_extern(stable, parallel_safe)]
    #[search_path(pg_catalog, pg_temp)]
    fn allowed(queue: Option<&str>, privilege: &str) -> bool {
        let p = Privilege::parse("argument \"privilege\"", privilege).or_report("queen.allowed");
        let Some(queue) = queue else {
            return privilege::admin_now();
        };
        privilege::allowed_now(queue, p)
    }

    /// Whether the calling role is a superuser or has the extension owner's privileges.
    #[pg_extern(stable, parallel_safe)]
    #[search_path(pg_catalog, pg_temp)]
    fn is_admin() -> bool {
        privilege::admin_now()
    }
}
