//! The oids of queen's schema and of its relations by name, kept per backend until the
//! catalog says something changed.
//!
//! Every call of queen looked them up again (catalog cache lookups: a push 6 of the schema,
//! a pop 100 + `queen_ack_lease` cycle 57 of relations, ~40 k instructions), because an index
//! rebuilt (REINDEX CONCURRENTLY) or the extension made again has new ones. Postgres tells a
//! backend of such changes through invalidations, which it reads at the start of each
//! transaction and whenever a lock is taken: those of the catalog caches the lookups go
//! through (relations by name and schema, schemas; a row of `pg_class` or `pg_namespace`
//! changed, and a full reset) call [`forget`], so that what is kept is never older than what
//! the catalog cache itself would answer. (Catalog cache callbacks, not a relation cache one:
//! a backend has 10 slots for those, Citus takes 5 and PostgreSQL up to 3.)

use pgrx::pg_sys;
use std::cell::{Cell, RefCell};
use std::ffi::CStr;

/// The lookups kept: the schema's oid, and (name, oid in that schema) of relations. Names are
/// the callers' literals, compared by address first (a handful of them, each looked up at
/// every call).
#[derive(Default)]
struct Kept {
    /// The count of invalidations these were looked up under.
    epoch: u64,
    schema: Option<pg_sys::Oid>,
    relations: Vec<(&'static CStr, pg_sys::Oid, pg_sys::Oid)>,
}

thread_local! {
    static KEPT: RefCell<Kept> = RefCell::new(Kept::default());
    /// Counts invalidations: what was kept under an older count is forgotten, and a lookup made
    /// while one arrived is not kept.
    static EPOCH: Cell<u64> = const { Cell::new(0) };
    static REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// Bound of the relations kept (queen has about twenty; names come only from its code).
const MAX_RELATIONS: usize = 64;

/// `f` on what is kept under the current count of invalidations.
fn kept<R>(f: impl FnOnce(&mut Kept) -> R) -> R {
    KEPT.with(|k| {
        let mut k = k.borrow_mut();
        let now = EPOCH.get();
        if k.epoch != now {
            *k = Kept { epoch: now, ..Kept::default() };
        }
        f(&mut k)
    })
}

/// The oid of the schema `queen` (InvalidOid when there is none).
pub fn schema() -> pg_sys::Oid {
    if let Some(oid) = kept(|k| k.schema) {
        return oid;
    }
    let epoch = start();
    // SAFETY: the name is a NUL-terminated C string literal; with missing_ok the lookup
    // returns InvalidOid instead of raising when there is no schema `queen`. Callers run inside
    // a transaction (a queen function, or a session: session.rs), as the catalog cache lookup
    // needs.
    let oid = unsafe { pg_sys::get_namespace_oid(c"queen".as_ptr(), true) };
    if EPOCH.get() == epoch {
        kept(|k| k.schema = Some(oid));
    }
    oid
}

/// The oid of relation `name` in schema `schema` (InvalidOid when there is none).
pub fn relation(name: &'static CStr, schema: pg_sys::Oid) -> pg_sys::Oid {
    let found = kept(|k| {
        let same = |(n, s, _): &&(&'static CStr, pg_sys::Oid, pg_sys::Oid)| *s == schema && std::ptr::eq(*n, name);
        let equal = |(n, s, _): &&(&'static CStr, pg_sys::Oid, pg_sys::Oid)| *s == schema && *n == name;
        k.relations.iter().find(same).or_else(|| k.relations.iter().find(equal)).map(|(_, _, oid)| *oid)
    });
    if let Some(oid) = found {
        return oid;
    }
    let epoch = start();
    // SAFETY: a NUL-terminated name and a namespace oid; a catalog cache lookup inside a
    // transaction (callers), InvalidOid when there is no such relation.
    let oid = unsafe { pg_sys::get_relname_relid(name.as_ptr(), schema) };
    if EPOCH.get() == epoch {
        kept(|k| {
            if k.relations.len() >= MAX_RELATIONS {
                k.relations.clear();
            }
            k.relations.push((name, schema, oid));
        });
    }
    oid
}

/// Before a lookup that may be kept: the callbacks registered (once a backend), and the
/// current count of invalidations.
fn start() -> u64 {
    if !REGISTERED.get() {
        // SAFETY: registers plain functions for the rest of the backend's life, once; they only
        // clear this module's thread-locals.
        unsafe {
            for cache in [pg_sys::SysCacheIdentifier::RELNAMENSP, pg_sys::SysCacheIdentifier::NAMESPACENAME] {
                pg_sys::CacheRegisterSyscacheCallback(cache as i32, Some(changed), pg_sys::Datum::from(0));
            }
        }
        REGISTERED.set(true);
    }
    EPOCH.get()
}

/// Forget everything kept (an invalidation of any relation's or schema's name): the next
/// read finds it kept under an older count. (A count only: the callback borrows nothing.)
fn forget() {
    EPOCH.set(EPOCH.get().wrapping_add(1));
}

#[pgrx::pg_guard]
extern "C-unwind" fn changed(_arg: pg_sys::Datum, _cacheid: std::os::raw::c_int, _hash: u32) {
    forget();
}
