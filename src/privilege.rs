//! Who may do what on which queue (semantics §11), and running queen's own SQL as the extension's
//! owner.
//!
//! **The model.** queen's tables are closed: only the extension's owner (and superusers) can
//! read or write them. Every SQL function checks the calling role (`current_user`) against
//! `queen.privileges` — `push`, `pop` (with ack and renew), `configure` (configure, seek,
//! delete group, delete queue, dead-letter replay and purge) and `read` (the views), per queue
//! or for every queue (`'*'`), granted with `queen_grant` — and then runs its queries as the
//! extension's owner
//! ([`AsOwner`], entered by `spi::connect`). A role holding a granted role holds its grants too
//! (`has_privs_of_role`, as for table privileges). Superusers and members of the owner's role
//! hold every privilege.
//!
//! Why not SECURITY DEFINER functions: inside one, `current_user` is the owner, and Postgres
//! keeps the caller only in fmgr's stack frame; the role outside every security-definer
//! function (`GetOuterUserId`) is not the caller when queen is called from another role's
//! SECURITY DEFINER function. Switching in Rust after the check keeps the caller exact, and
//! Postgres itself restores the user when a transaction or subtransaction aborts. Why not
//! row-level security: the queries would still read the tables as the caller, so every role
//! would need table privileges and every query a policy; a pop also writes rows (cursors,
//! hints) that belong to no queue a policy could name.
//!
//! **The cost.** The grants of a queue are read once per backend and kept (cache.rs), retired
//! by `queen_grant` and `queen_revoke` in every backend when they commit; a check is then a
//! lookup and `has_privs_of_role` for each grant of that queue (Postgres caches role
//! membership itself). Superusers and the owner are never looked up.

use crate::error::{QueenError, QueenResult};
use crate::names;
use crate::spi::types::{TEXT, TEXTS, UUID};
use crate::spi::{Query, Spi};
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use std::cell::RefCell;

const SQL: &str = include_str!("../sql/queries/privilege.sql");
const GRANTS_OF: Query = Query { file: SQL, name: "grants_of", args: &[TEXT] };
const GRANTS_HELD: Query = Query { file: SQL, name: "grants_held", args: &[crate::spi::types::OID] };
const GRANT: Query = Query { file: SQL, name: "grant", args: &[TEXT, crate::spi::types::OID, TEXTS] };
const REVOKE: Query = Query { file: SQL, name: "revoke", args: &[TEXT, crate::spi::types::OID, TEXTS] };
const QUEUE_NAME: Query = Query { file: SQL, name: "queue_name", args: &[UUID] };

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privilege {
    Push,
    Pop,
    Configure,
    Read,
    /// Of a key/value namespace (src/kv.rs), which the grant's `queue` names.
    KvRead,
    KvWrite,
}

impl Privilege {
    /// The privileges on a queue.
    pub const ALL: [Privilege; 4] = [Privilege::Push, Privilege::Pop, Privilege::Configure, Privilege::Read];
    /// Every privilege a grant may name.
    pub const EVERY: [Privilege; 6] =
        [Privilege::Push, Privilege::Pop, Privilege::Configure, Privilege::Read, Privilege::KvRead, Privilege::KvWrite];

    pub fn name(self) -> &'static str {
        match self {
            Privilege::Push => "push",
            Privilege::Pop => "pop",
            Privilege::Configure => "configure",
            Privilege::Read => "read",
            Privilege::KvRead => "kv_read",
            Privilege::KvWrite => "kv_write",
        }
    }

    pub fn parse(what: &str, value: &str) -> QueenResult<Privilege> {
        Privilege::EVERY.into_iter().find(|p| p.name() == value).ok_or_else(|| {
            QueenError::invalid(
                what,
                format!(
                    "must be 'push', 'pop', 'configure', 'read', 'kv_read' or 'kv_write', got \"{}\"",
                    crate::error::shorten(value)
                ),
            )
        })
    }
}

/// What a worker's call on Citus checks grants against: the grants of the role that called
/// queen on the coordinator, as the coordinator read them there (`caller_grants`). The worker
/// cannot read them itself: `queen.privileges` is a reference table whose `regrole` values are
/// the coordinator's role oids, which name other roles (or none) on a worker.
#[derive(Clone, Debug)]
pub struct Holdings {
    admin: bool,
    /// (queue, privilege), the queue `'*'` for every queue.
    grants: Vec<(String, Privilege)>,
}

impl Holdings {
    /// Whether these grants give `privilege` on `queue`.
    pub fn allows(&self, queue: &str, privilege: Privilege) -> bool {
        self.admin || self.grants.iter().any(|(q, p)| *p == privilege && (q == queue || q == "*"))
    }
}

thread_local! {
    static ACTING: std::cell::RefCell<Option<Holdings>> = const { std::cell::RefCell::new(None) };
}

/// The role `caller()` answers inside `acting_for` (no role's oid): the checks below then
/// decide by the grants the coordinator sent.
const ACTING_ROLE: pg_sys::Oid = pg_sys::InvalidOid;

fn acting() -> Option<Holdings> {
    ACTING.with(|a| a.borrow().clone())
}

/// The role calling: `current_user`, as `SET ROLE` and SECURITY DEFINER functions make it
/// (inside `acting_for`, on a Citus worker: the coordinator's caller, whose grants were sent).
pub fn caller() -> pg_sys::Oid {
    if ACTING.with(|a| a.borrow().is_some()) {
        return ACTING_ROLE;
    }
    // SAFETY: GetUserId reads the backend's current user id, set in every backend.
    unsafe { pg_sys::GetUserId() }
}

/// On a Citus coordinator: the grants of the role calling, for a worker's call to check
/// against (`acting_for`): None for an admin, else `privilege:queue` for each grant it holds
/// the privileges of.
pub fn caller_grants() -> Option<Vec<String>> {
    for_caller(None, |s, role| {
        let held = holdings(s, role);
        (!held.admin).then(|| held.grants.iter().map(|(q, p)| format!("{}:{q}", p.name())).collect())
    })
}

/// The grants whose privileges `role` holds (all of them for an admin), read once: for checks
/// of many queues at a time (the views over every shard, a worker's call on Citus).
pub fn holdings(s: &mut Spi, role: pg_sys::Oid) -> Holdings {
    if is_admin(s, role) {
        return Holdings { admin: true, grants: Vec::new() };
    }
    if !crate::shards::roles_here(s) {
        return Holdings { admin: false, grants: Vec::new() }; // (as grants_of)
    }
    let args: [DatumWithOid; 1] = [role.into()];
    let grants = GRANTS_HELD
        .run(s, &args)
        .map(|r| {
            let p = Privilege::parse("privilege", &r.req::<String>("privilege"))
                .expect("queen: stored privileges are checked");
            (r.req::<String>("queue"), p)
        })
        .collect();
    Holdings { admin: false, grants }
}

/// Run `f` as a worker's side of a call on Citus: refused (42501) unless the role calling is an
/// admin — the coordinator delegates as the extension's owner; no other role's grants can be
/// checked on a worker — and then with the checks of the call made against `grants`
/// (`caller_grants` of the coordinator's caller; None: an admin's call).
pub fn acting_for<R>(function: &'static str, grants: Option<Vec<String>>, f: impl FnOnce() -> R) -> QueenResult<R> {
    if !admin_now() {
        return Err(QueenError::AdminOnly { function, monitor: false });
    }
    let held = match grants {
        None => Holdings { admin: true, grants: Vec::new() },
        Some(list) => {
            let mut grants = Vec::with_capacity(list.len());
            for g in list {
                let (p, q) = g.split_once(':').ok_or_else(|| {
                    QueenError::invalid(
                        "argument \"grants\"",
                        format!("\"{}\" is not privilege:queue", crate::error::shorten(&g)),
                    )
                })?;
                grants.push((q.to_string(), Privilege::parse("argument \"grants\"", p)?));
            }
            Holdings { admin: false, grants }
        }
    };
    struct Reset(Option<Holdings>);
    impl Drop for Reset {
        fn drop(&mut self) {
            ACTING.with(|a| *a.borrow_mut() = self.0.take());
        }
    }
    let _reset = Reset(ACTING.with(|a| a.borrow_mut().replace(held)));
    Ok(f())
}

/// A worker's side of a call on Citus that the coordinator checked already (push, pop, seek,
/// deletes): refused (42501) unless the role calling is an admin (Holdings says why).
pub fn require_internal(function: &'static str) -> QueenResult<()> {
    match admin_now() {
        true => Ok(()),
        false => Err(QueenError::AdminOnly { function, monitor: false }),
    }
}

fn has_privs_of_role(member: pg_sys::Oid, role: pg_sys::Oid) -> bool {
    // SAFETY: a catalog lookup by oid (through Postgres's membership cache); called inside a
    // transaction, as every queen function runs.
    unsafe { pg_sys::has_privs_of_role(member, role) }
}

/// A superuser, or a role with the privileges of the extension's owner.
pub fn is_admin(s: &mut Spi, role: pg_sys::Oid) -> bool {
    if role == ACTING_ROLE {
        if let Some(held) = acting() {
            return held.admin;
        }
    }
    // (The owner was read when the call entered its session: session.rs.)
    superuser(role) || crate::owner::owner(s).is_ok_and(|owner| has_privs_of_role(role, owner))
}

/// The name of role `role` (None: no such role, or the coordinator's caller inside
/// `acting_for`).
pub fn role_name(role: pg_sys::Oid) -> Option<String> {
    if role == ACTING_ROLE {
        return None;
    }
    // SAFETY: a catalog cache lookup by oid inside a transaction; with noerr a missing role is
    // NULL, and a name found is a palloc'd NUL-terminated string, copied here.
    unsafe {
        let name = pg_sys::GetUserNameFromId(role, true);
        (!name.is_null()).then(|| std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned())
    }
}

/// Whether `role` may act for the role named `name` (something that role owns: a lock's
/// permit): it is that role or has its privileges, as grants are held, or it is an admin. A
/// name that no role has now (None: unknown), admins only.
pub fn acts_for(s: &mut Spi, role: pg_sys::Oid, name: Option<&str>) -> bool {
    if is_admin(s, role) {
        return true;
    }
    let Some(c) = name.and_then(|n| std::ffi::CString::new(n).ok()) else {
        return false;
    };
    // SAFETY: a catalog cache lookup by name inside a transaction; missing_ok, so an unknown
    // name is InvalidOid rather than an error.
    let owner = unsafe { pg_sys::get_role_oid(c.as_ptr(), true) };
    owner != pg_sys::InvalidOid && role != ACTING_ROLE && has_privs_of_role(role, owner)
}

fn superuser(role: pg_sys::Oid) -> bool {
    // SAFETY: superuser_arg looks the role up in the catalog cache; inside a transaction.
    unsafe { pg_sys::superuser_arg(role) }
}

/// A grant as the checks read it: a role, a queue (None: every queue), a privilege.
#[derive(Clone, Debug)]
struct Grant {
    role: pg_sys::Oid,
    queue_id: Option<uuid::Uuid>,
    privilege: Privilege,
}

thread_local! {
    static GRANTS: RefCell<crate::cache::Map<String, Vec<Grant>>> = RefCell::new(crate::cache::Map::new());
}

/// The grants on `queue` and on every queue (`'*'`).
fn grants_of(s: &mut Spi, queue: &str) -> Vec<Grant> {
    if !crate::shards::roles_here(s) {
        return Vec::new(); // a Citus worker: the grants name the coordinator's roles
    }
    crate::cache::read_through(&GRANTS, queue.to_string(), || {
        let args: [DatumWithOid; 1] = [queue.into()];
        GRANTS_OF
            .run(s, &args)
            .map(|r| {
                let q = r.req::<String>("queue");
                Grant {
                    role: r.req("role"),
                    queue_id: (q != "*").then(|| names::queue_id(&q)),
                    privilege: Privilege::parse("privilege", &r.req::<String>("privilege"))
                        .expect("queen: stored privileges are checked"),
                }
            })
            .collect()
    })
}

/// Whether `role` holds `privilege` on `queue`.
pub fn allowed(s: &mut Spi, role: pg_sys::Oid, queue: &str, privilege: Privilege) -> bool {
    if role == ACTING_ROLE {
        if let Some(held) = acting() {
            return held.allows(queue, privilege);
        }
    }
    is_admin(s, role) || grants_of(s, queue).iter().any(|g| g.privilege == privilege && has_privs_of_role(role, g.role))
}

/// Whether `role` holds `privilege` on every queue (`'*'`).
pub fn allowed_everywhere(s: &mut Spi, role: pg_sys::Oid, privilege: Privilege) -> bool {
    if role == ACTING_ROLE {
        if let Some(held) = acting() {
            return held.allows("*", privilege);
        }
    }
    is_admin(s, role)
        || grants_of(s, "*")
            .iter()
            .any(|g| g.queue_id.is_none() && g.privilege == privilege && has_privs_of_role(role, g.role))
}

fn denied(queue: &str, privilege: Privilege) -> QueenError {
    if crate::shards::roles_here_known() == Some(false) {
        return QueenError::PermissionDeniedOnWorker { queue: queue.to_string(), privilege: privilege.name() };
    }
    QueenError::PermissionDenied { queue: queue.to_string(), privilege: privilege.name() }
}

/// Run `check` for the caller in an SPI connection, unless the caller is a superuser, who holds
/// every privilege: every push and pop checks, and a superuser's call (make bench's) then opens
/// no connection for it.
fn for_caller<T>(superuser_answer: T, check: impl FnOnce(&mut Spi, pg_sys::Oid) -> T) -> T {
    let role = caller();
    if superuser(role) {
        return superuser_answer;
    }
    crate::session::connect(|s| check(s, role))
}

/// Whether the caller is an admin (for the views).
pub fn admin_now() -> bool {
    for_caller(true, is_admin)
}

/// Whether the caller holds `privilege` on `queue` (for the views, called once a row).
pub fn allowed_now(queue: &str, privilege: Privilege) -> bool {
    for_caller(true, |s, role| allowed(s, role, queue, privilege))
}

/// 42501 unless the caller holds `privilege` on each of `queues`. Checked before anything is
/// written, so a refused call changes nothing.
pub fn require(queues: &[&str], privilege: Privilege) -> QueenResult<()> {
    for_caller(Ok(()), |s, role| {
        for q in queues {
            if !allowed(s, role, q, privilege) {
                return Err(denied(q, privilege));
            }
        }
        Ok(())
    })
}

/// The name of queue `id` (its id's text when the queue has no row: grants name queues).
fn queue_name(s: &mut Spi, id: pgrx::Uuid) -> String {
    let args: [DatumWithOid; 1] = [id.into()];
    let name = QUEUE_NAME.run(s, &args).next().and_then(|r| r.get::<String>("name"));
    name.unwrap_or_else(|| names::from_pg(id).to_string())
}

/// The same for queues known by id (an ack finds its messages' queues), inside a connection.
/// `role` is the caller, read before the connection switched to the owner.
pub fn require_ids(s: &mut Spi, role: pg_sys::Oid, queue_ids: &[pgrx::Uuid], privilege: Privilege) -> QueenResult<()> {
    if is_admin(s, role) {
        return Ok(());
    }
    for id in queue_ids {
        let name = queue_name(s, *id);
        if !allowed(s, role, &name, privilege) {
            return Err(denied(&name, privilege));
        }
    }
    Ok(())
}

/// For calls that name something of a queue by id (an ack its message, a renewal its lease):
/// the queues among `queue_ids` that the caller may not know of — it holds no privilege at all
/// there — which the call treats as if they did not exist (an ack answers 'message not found',
/// as for an unknown id, so that no role learns another queue's messages or name by probing).
/// 42501 for a queue the caller knows of but lacks `privilege` on. Nothing is locked before.
pub fn unknown_to(
    s: &mut Spi,
    role: pg_sys::Oid,
    queue_ids: &[pgrx::Uuid],
    privilege: Privilege,
) -> QueenResult<Vec<pgrx::Uuid>> {
    if is_admin(s, role) {
        return Ok(Vec::new());
    }
    let mut unknown = Vec::new();
    for id in queue_ids {
        let name = queue_name(s, *id);
        if allowed(s, role, &name, privilege) {
            continue;
        }
        match Privilege::ALL.into_iter().any(|p| allowed(s, role, &name, p)) {
            true => return Err(denied(&name, privilege)),
            false => unknown.push(*id),
        }
    }
    Ok(unknown)
}

/// 42501 unless the caller holds `privilege` on every queue (`'*'`): for calls that reach every
/// queue (`queen_delete_group` without a queue).
pub fn require_everywhere(privilege: Privilege) -> QueenResult<()> {
    for_caller(Ok(()), |s, role| match allowed_everywhere(s, role, privilege) {
        true => Ok(()),
        false => Err(denied("*", privilege)),
    })
}

/// 42501 unless the caller is a superuser or has the owner's privileges (or, with `monitor`,
/// is a member of `pg_monitor`): for grants, maintenance and the diagnostics that show pids.
pub fn require_admin(function: &'static str, monitor: bool) -> QueenResult<()> {
    let ok = for_caller(true, |s, role| {
        is_admin(s, role) || (monitor && has_privs_of_role(role, pg_sys::Oid::from(pg_sys::ROLE_PG_MONITOR)))
    });
    match ok {
        true => Ok(()),
        false => Err(QueenError::AdminOnly { function, monitor }),
    }
}

/// `queen_grant` / `queen_revoke`: add or remove `privileges` of `role` on `queue` (`'*'`: every
/// queue, present and future). Returns how many grants were added or removed.
pub fn change(queue: &str, role: pg_sys::Oid, privileges: &[String], grant: bool) -> QueenResult<i64> {
    for p in privileges {
        Privilege::parse("argument \"privileges\"", p)?;
    }
    // One grant or revoke at a time (locks.rs `Grants`): a revoke open while a grant of the
    // same privilege commits would commit last having removed nothing.
    crate::locks::take_fresh(crate::locks::Lock::Grants, crate::locks::Mode::Exclusive, || {
        "the grants (another queen_grant or queen_revoke is open)".to_string()
    })?;
    crate::cache::changed();
    let args: [DatumWithOid; 3] = [queue.into(), role.into(), privileges.to_vec().into()];
    Ok(crate::session::connect(|s| {
        let q = if grant { &GRANT } else { &REVOKE };
        q.run(s, &args).first().req::<i64>("changed")
    }))
}
