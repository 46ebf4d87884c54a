//! Who queen's queries run as: the extension's owner, entered for the length of each
//! connection to SPI (the caller's privileges were checked before, in privilege.rs, and queen's
//! tables are closed to other roles), and the installed schema's version, which must be the one
//! this library was built for (semantics §12).
//!
//! [`connect`] is the raw session: SPI (spi.rs), as the owner, inside queen's own SQL. Every
//! call of queen enters it through session.rs, which adds the mapping's check (cluster.rs);
//! cluster.rs itself, which that check is, connects here.

use crate::error::{QueenError, QueenResult};
use crate::spi::{Query, Spi};
use pgrx::pg_sys;
use std::cell::{Cell, RefCell};

const SQL: &str = include_str!("../sql/queries/owner.sql");
const OWNER: Query = Query { file: SQL, name: "owner", args: &[] };

/// The schema version this library was built for (queen.control's default_version).
pub const LIBRARY_VERSION: &str = env!("CARGO_PKG_VERSION");

thread_local! {
    /// The extension's owner, per `queen` schema (its oid changes when the extension is
    /// created again).
    static OWNER_OF: RefCell<Option<(pg_sys::Oid, pg_sys::Oid)>> = const { RefCell::new(None) };
    /// How deep this backend is in queen's own SQL, whose inserts are no restore (cluster.rs).
    static INSIDE: Cell<u32> = const { Cell::new(0) };
}

/// The extension's owner: every query of queen runs as this role. Read once per backend (and
/// again after the extension was re-created: the schema's oid changes).
///
/// The installed schema must be the version this library was built for: a library installed
/// over an older schema refuses every call, telling to run `ALTER EXTENSION queen UPDATE`,
/// rather than run queries against tables that are not what it expects. Only a matching
/// version is remembered, so the first call after the update goes through.
pub fn owner(s: &mut Spi) -> QueenResult<pg_sys::Oid> {
    let schema = crate::names::schema_oid();
    if let Some((for_schema, owner)) = OWNER_OF.with(|o| *o.borrow()) {
        if for_schema == schema {
            return Ok(owner);
        }
    }
    let row = OWNER.run(s, &[]).next().ok_or(QueenError::NotInstalled)?;
    let (owner, version) = (row.req::<pg_sys::Oid>("owner"), row.req::<String>("version"));
    if version != LIBRARY_VERSION {
        return Err(QueenError::SchemaVersion { installed: version, library: LIBRARY_VERSION });
    }
    OWNER_OF.with(|o| *o.borrow_mut() = Some((schema, owner)));
    Ok(owner)
}

/// While alive, this backend runs as the extension's owner (restored on drop; an error that
/// aborts the transaction or a subtransaction restores it too, in Postgres's own clean-up).
struct AsOwner {
    user: pg_sys::Oid,
    context: i32,
}

impl AsOwner {
    fn enter(owner: pg_sys::Oid) -> AsOwner {
        let (mut user, mut context) = (pg_sys::Oid::INVALID, 0);
        // SAFETY: reads and sets the backend's user id and security context, as
        // SECURITY DEFINER functions do (fmgr_security_definer); SECURITY_LOCAL_USERID_CHANGE
        // marks the change as local, so SET ROLE and SET SESSION AUTHORIZATION are refused
        // while it lasts. `owner` is an existing role (the extension's owner).
        unsafe {
            pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
            pg_sys::SetUserIdAndSecContext(owner, context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32);
        }
        AsOwner { user, context }
    }
}

impl Drop for AsOwner {
    fn drop(&mut self) {
        // SAFETY: puts back what `enter` read.
        unsafe { pg_sys::SetUserIdAndSecContext(self.user, self.context) };
    }
}

/// Run `f` as queen's own SQL: what it inserts into queen's tables is no restore.
pub fn inside<R>(f: impl FnOnce() -> R) -> R {
    struct Out;
    impl Drop for Out {
        fn drop(&mut self) {
            INSIDE.set(INSIDE.get() - 1);
        }
    }
    INSIDE.set(INSIDE.get() + 1);
    let _out = Out;
    f()
}

/// Whether queen's own SQL is running (rows it inserts are no restore).
pub fn is_inside() -> bool {
    INSIDE.get() > 0
}

/// Run `f` connected to SPI, as the extension's owner, inside queen's own SQL. An extension
/// not installed, or installed in another version, is refused here, before any query of the
/// call (55000): the one error raised below the SQL surface for every call alike.
pub fn connect<R>(f: impl FnOnce(&mut Spi) -> R) -> R {
    crate::spi::with_connection(|s| {
        let owner = owner(s).unwrap_or_else(|e| e.report("queen"));
        let _as_owner = AsOwner::enter(owner);
        inside(|| f(s))
    })
}
