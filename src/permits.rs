//! Locks and semaphores (`queen_lock`), as Queen MQ's `/api/v1/locks` has them: a permit is one
//! key/value row (kv.rs), key `name#slot`, value `{owner, since, role, renewedFrom?}`, written
//! with a lifetime. Its `version` is the **fencing token**: it only rises (one sequence for
//! every key), and changes at every renew. A lock is a semaphore of one permit; a semaphore of
//! `limit` permits has slots 0 .. limit-1, taken lowest first.
//!
//! **Scoping.** A lock lives in a lock namespace (`ns`, default [`NAMESPACE`]), whose key/value
//! grants are its privileges: `kv_write` on it to take, renew and release, `kv_read` to look.
//! Its permits are kept in a key/value namespace of their own ([`kv_namespace`]) that queen_kv
//! reads under the lock namespace's grants and never writes: only an acquire makes a permit.
//! A permit belongs to the role that took it (`role`); the owner string is the holder's name
//! within that role, never a credential: renew and release act only on the caller's own permits
//! (`privilege::acts_for`), and an acquire sent again answers the existing permit only to them.
//!
//! - `acquire`: the caller's own permit again if `owner` already holds one (a call sent again
//!   after its answer was lost), else the first free slot (`putIfAbsent`); or `held` (every
//!   slot taken) / `contended` (a slot that looked free is being written, or was taken
//!   meanwhile), with the holders. It never waits.
//! - `renew`: the caller's permit at `token` — or, sent again after the answer was lost, the
//!   permit renewed from `token` (`renewedFrom`) — rewritten with a new lifetime and a new token;
//!   else `lost`.
//! - `release`: the caller's permit at `token` deleted; else `lost`.
//! - `get`: the live holders.
//!
//! **Waits.** Every write of a permit's row first takes the permit's lock of queen's own
//! (`Lock::Permit`): an acquire only when it is free, a renew or release waiting at most as long
//! as queen waits (55P03). A guard's `check` takes it shared (kv.rs). The row itself is then
//! locked without waiting (maintenance deleting it as expired holds it: that counts as taken).
//! So no call here waits for another transaction's row, nor without bound.
//!
//! A permit expires; nobody tells its holder. What makes a holder's work exclusive is its
//! `guard`, a key/value `check` of the permit's row at its token, `required`: put in the same
//! transaction as the work (queen_kv, or queen-gateway's `kv` rider), the work commits only while
//! the permit is still that holder's, and nobody writes the permit until that transaction ends.

use crate::error::{QueenError, QueenResult};
use crate::kv::{self, Expiry, Op, RowLock};
use crate::locks::{Lock, Mode};
use crate::privilege::Privilege;
use crate::spi::types::TSTZ;
use crate::spi::{Query, Spi};
use crate::state::Micros;
use serde_json::{json, Map, Value};

const SQL: &str = include_str!("../sql/queries/permits.sql");
const CLOCK_TEXT: Query = Query { file: SQL, name: "permit_clock_text", args: &[TSTZ] };

/// The lock namespace of a call that names none (Queen MQ's), and the key/value namespace that
/// keeps its permits.
pub const NAMESPACE: &str = "queen-locks";
/// The key/value namespace of every other lock namespace's permits is this and its name: no
/// namespace queen_kv writes has a '/'.
pub const PREFIX: &str = "queen-locks/";
/// Bounds of a lock's name and a holder's owner (bytes), a semaphore's permits, and a call.
pub const MAX_NAME_BYTES: usize = 256;
pub const MAX_OWNER_BYTES: usize = 256;
pub const MAX_LIMIT: i64 = 1024;
pub const MAX_OPS: usize = 100;
/// How many earlier tokens a permit keeps for renews sent again (`renewedFrom`).
pub const MAX_RENEWED_FROM: usize = 16;

/// The key/value namespace where lock namespace `ns` keeps its permits.
pub fn kv_namespace(ns: &str) -> String {
    match ns {
        NAMESPACE => NAMESPACE.to_string(),
        _ => format!("{PREFIX}{ns}"),
    }
}

/// The lock namespace whose permits the key/value namespace `kv_ns` keeps, if it keeps any.
pub fn lock_namespace(kv_ns: &str) -> Option<&str> {
    match kv_ns {
        NAMESPACE => Some(NAMESPACE),
        _ => kv_ns.strip_prefix(PREFIX),
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum LockOp {
    Acquire { ns: String, name: String, ttl: i64, owner: Option<String>, limit: i64 },
    Renew { ns: String, name: String, token: i64, ttl: i64, slot: Option<i64>, owner: Option<String> },
    Release { ns: String, name: String, token: i64, slot: Option<i64> },
    Get { ns: String, name: String },
}

impl LockOp {
    pub fn name(&self) -> &str {
        match self {
            LockOp::Acquire { name, .. }
            | LockOp::Renew { name, .. }
            | LockOp::Release { name, .. }
            | LockOp::Get { name, .. } => name,
        }
    }

    /// Its lock namespace.
    pub fn ns(&self) -> &str {
        match self {
            LockOp::Acquire { ns, .. }
            | LockOp::Renew { ns, .. }
            | LockOp::Release { ns, .. }
            | LockOp::Get { ns, .. } => ns,
        }
    }

    fn verb(&self) -> &'static str {
        match self {
            LockOp::Acquire { .. } => "acquire",
            LockOp::Renew { .. } => "renew",
            LockOp::Release { .. } => "release",
            LockOp::Get { .. } => "get",
        }
    }

    fn privilege(&self) -> Privilege {
        match self {
            LockOp::Get { .. } => Privilege::KvRead,
            _ => Privilege::KvWrite,
        }
    }
}

fn control(c: char) -> bool {
    (c as u32) < 0x20 || (0x7f..=0x9f).contains(&(c as u32))
}

fn text_field(m: &Map<String, Value>, field: &str, at: &dyn Fn(&str) -> String) -> QueenResult<Option<String>> {
    match m.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(QueenError::invalid(at(field), format!("must be a string, got {}", kv::kind(v)))),
    }
}

fn int_field(m: &Map<String, Value>, field: &str, at: &dyn Fn(&str) -> String) -> QueenResult<Option<i64>> {
    match m.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| QueenError::invalid(at(field), format!("must be a whole number, got {}", kv::kind(v)))),
    }
}

/// Read operation `i` of a call (`operations[i]`).
pub fn parse(i: usize, v: &Value) -> QueenResult<LockOp> {
    let at = |field: &str| format!("operations[{i}].{field}");
    let Value::Object(m) = v else {
        return Err(QueenError::invalid(format!("operations[{i}]"), format!("must be an object, got {}", kv::kind(v))));
    };
    let op = text_field(m, "op", &at)?.ok_or_else(|| QueenError::invalid(at("op"), "is required"))?;
    let ns = text_field(m, "ns", &at)?.unwrap_or_else(|| NAMESPACE.to_string());
    kv::check_namespace(&at("ns"), &ns)?;
    let name = text_field(m, "name", &at)?.ok_or_else(|| QueenError::invalid(at("name"), "is required"))?;
    if name.is_empty() || name.len() > MAX_NAME_BYTES || name.chars().any(|c| control(c) || c == '#') {
        return Err(QueenError::invalid(
            at("name"),
            format!("must be 1 to {MAX_NAME_BYTES} bytes, without control characters and without '#'"),
        ));
    }
    let owner = text_field(m, "owner", &at)?;
    if let Some(o) = &owner {
        if o.is_empty() || o.len() > MAX_OWNER_BYTES || o.chars().any(control) {
            return Err(QueenError::invalid(
                at("owner"),
                format!("must be 1 to {MAX_OWNER_BYTES} bytes, without control characters"),
            ));
        }
    }
    let ttl = || -> QueenResult<i64> {
        match int_field(m, "ttlSeconds", &at)? {
            Some(n) if (1..=kv::MAX_TTL_SECONDS).contains(&n) => Ok(n),
            Some(n) => Err(QueenError::invalid(
                at("ttlSeconds"),
                format!("must be from 1 to {}, got {n}", kv::MAX_TTL_SECONDS),
            )),
            None => Err(QueenError::invalid(
                at("ttlSeconds"),
                "is required: a permit has a lifetime, renewed by its holder",
            )),
        }
    };
    let token = || -> QueenResult<i64> {
        match int_field(m, "token", &at)? {
            Some(n) if n > 0 => Ok(n),
            Some(n) => Err(QueenError::invalid(at("token"), format!("must be above 0, got {n}"))),
            None => Err(QueenError::invalid(at("token"), "is required: the token the last acquire or renew answered")),
        }
    };
    let slot = || -> QueenResult<Option<i64>> {
        match int_field(m, "slot", &at)? {
            Some(n) if !(0..MAX_LIMIT).contains(&n) => {
                Err(QueenError::invalid(at("slot"), format!("must be from 0 to {}, got {n}", MAX_LIMIT - 1)))
            }
            s => Ok(s),
        }
    };
    Ok(match op.as_str() {
        "acquire" => {
            let limit = match int_field(m, "limit", &at)? {
                None => 1,
                Some(n) if (1..=MAX_LIMIT).contains(&n) => n,
                Some(n) => {
                    return Err(QueenError::invalid(at("limit"), format!("must be from 1 to {MAX_LIMIT}, got {n}")))
                }
            };
            LockOp::Acquire { ns, name, ttl: ttl()?, owner, limit }
        }
        "renew" => LockOp::Renew { ns, name, token: token()?, ttl: ttl()?, slot: slot()?, owner },
        "release" => LockOp::Release { ns, name, token: token()?, slot: slot()? },
        "get" => LockOp::Get { ns, name },
        other => {
            return Err(QueenError::invalid(
                at("op"),
                format!("must be 'acquire', 'renew', 'release' or 'get', got \"{}\"", crate::error::shorten(other)),
            ))
        }
    })
}

/// The operations of a call: a JSON array of at most MAX_OPS objects.
pub fn parse_all(v: &Value) -> QueenResult<Vec<LockOp>> {
    let Value::Array(items) = v else {
        return Err(QueenError::invalid(
            "argument \"operations\"",
            format!("must be a JSON array, got {}", kv::kind(v)),
        ));
    };
    if items.len() > MAX_OPS {
        return Err(QueenError::invalid(
            "argument \"operations\"",
            format!("holds {} operations, the limit is {MAX_OPS}", items.len()),
        ));
    }
    items.iter().enumerate().map(|(i, v)| parse(i, v)).collect()
}

/// One live permit of a lock.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    pub slot: i64,
    pub owner: String,
    pub token: i64,
    pub since: Value,
    pub expires_at: Value,
    pub renewed_at: Value,
    /// The role that took it (None: unknown, a permit from before queen kept it).
    pub role: Option<String>,
    /// Tokens it was renewed from that a renew sent again may still present.
    pub renewed_from: Vec<i64>,
}

impl Holder {
    fn to_json(&self) -> Value {
        json!({"slot": self.slot, "owner": self.owner, "token": self.token, "since": self.since,
               "expiresAt": self.expires_at, "renewedAt": self.renewed_at})
    }

    /// The row's value, renewed from `renewed_from`.
    fn value(&self, renewed_from: &[i64]) -> Value {
        let mut v = json!({"owner": self.owner, "since": self.since, "role": self.role});
        if !renewed_from.is_empty() {
            v["renewedFrom"] = json!(renewed_from);
        }
        v
    }
}

/// The row key of a lock's slot.
pub fn key(name: &str, slot: i64) -> String {
    format!("{name}#{slot}")
}

/// A holder from a key/value row of the lock `name` (None: not one of its slots).
pub fn holder(name: &str, row: &Map<String, Value>) -> Option<Holder> {
    let slot = row.get("key")?.as_str()?.strip_prefix(name)?.strip_prefix('#')?.parse::<i64>().ok()?;
    let value = row.get("value")?;
    Some(Holder {
        slot,
        owner: value.get("owner").and_then(Value::as_str).unwrap_or("").to_string(),
        token: row.get("version")?.as_i64()?,
        since: value.get("since").cloned().unwrap_or(Value::Null),
        expires_at: row.get("expiresAt").cloned().unwrap_or(Value::Null),
        renewed_at: row.get("updatedAt").cloned().unwrap_or(Value::Null),
        role: value.get("role").and_then(Value::as_str).map(str::to_string),
        renewed_from: value
            .get("renewedFrom")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_i64).collect())
            .unwrap_or_default(),
    })
}

/// The guard of a permit: the key/value check that holds while it is the holder's.
pub fn guard(kv_ns: &str, name: &str, slot: i64, token: i64) -> Value {
    json!({"op": "check", "ns": kv_ns, "key": key(name, slot), "expect": token, "required": true})
}

/// Whether a renew by `token` (and `owner`, if given) is for `h`: it is at that token, or it was
/// renewed from that token (a renew whose answer was lost, sent again) and, when the renew
/// names an owner, it is that owner's.
pub fn renews(h: &Holder, token: i64, owner: Option<&str>) -> bool {
    h.token == token || (h.renewed_from.contains(&token) && owner.is_none_or(|o| o == h.owner))
}

/// The tokens that the permit a renew by `token` writes over `h` keeps for renews sent again:
/// `token` alone when it was `h`'s current one; else (a renew sent again) `h`'s, and `h`'s own
/// token, whose answer may be the one that was lost. At most [`MAX_RENEWED_FROM`], newest kept.
pub fn renewed_from(h: &Holder, token: i64) -> Vec<i64> {
    if h.token == token {
        return vec![token];
    }
    let mut from = h.renewed_from.clone();
    from.push(h.token);
    let extra = from.len().saturating_sub(MAX_RENEWED_FROM);
    from.drain(..extra);
    from
}

/// Which permit a renew or release acts on: the one of `slot` when given, else the one at
/// `token`, else (a renew sent again) the one renewed from `token`.
pub fn target<'h>(holders: &'h [Holder], slot: Option<i64>, token: i64, owner: Option<&str>) -> Option<&'h Holder> {
    match slot {
        Some(s) => holders.iter().find(|h| h.slot == s),
        None => holders.iter().find(|h| h.token == token).or_else(|| holders.iter().find(|h| renews(h, token, owner))),
    }
}

/// Run the operations in order, in the caller's transaction; one result per operation.
pub fn run(ops: &[LockOp]) -> QueenResult<Vec<Value>> {
    for privilege in [Privilege::KvRead, Privilege::KvWrite] {
        let mut namespaces: Vec<&str> = ops.iter().filter(|o| o.privilege() == privilege).map(LockOp::ns).collect();
        namespaces.sort_unstable();
        namespaces.dedup();
        if !namespaces.is_empty() {
            crate::privilege::require(&namespaces, privilege)?;
        }
    }
    // The role calling, read before the connection runs as the extension's owner.
    let caller = crate::privilege::caller();
    let caller_name = crate::privilege::role_name(caller);
    // SAFETY: GetCurrentTimestamp only reads the clock.
    let now: Micros = unsafe { pgrx::pg_sys::GetCurrentTimestamp() };
    crate::session::connect(|s| {
        let mut whose = Whose { caller, name: caller_name, admin: None };
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            let mut r = one(s, op, &mut whose, now)?;
            if let Value::Object(m) = &mut r {
                m.insert("op".into(), json!(op.verb()));
                m.insert("name".into(), json!(op.name()));
            }
            out.push(r);
        }
        Ok(out)
    })
}

/// The caller, and which permits are its own.
struct Whose {
    caller: pgrx::pg_sys::Oid,
    name: Option<String>,
    admin: Option<bool>,
}

impl Whose {
    /// Whether the caller may act on `h`: taken by its role, or by one whose privileges it has.
    fn mine(&mut self, s: &mut Spi, h: &Holder) -> bool {
        if h.role.is_some() && h.role == self.name {
            return true;
        }
        let admin = *self.admin.get_or_insert_with(|| crate::privilege::is_admin(s, self.caller));
        admin || crate::privilege::acts_for(s, self.caller, h.role.as_deref())
    }
}

fn holders(s: &mut Spi, kv_ns: &str, name: &str, now: Micros) -> Vec<Holder> {
    let page = kv::prefix_page(s, kv_ns, &format!("{name}#"), None, MAX_LIMIT, false, now);
    let rows = page.get("rows").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut hs: Vec<Holder> = rows.iter().filter_map(|r| r.as_object().and_then(|m| holder(name, m))).collect();
    hs.sort_by_key(|h| h.slot);
    hs
}

fn holders_json(hs: &[Holder]) -> Value {
    Value::Array(hs.iter().map(Holder::to_json).collect())
}

/// Write the permit of `slot` (`expect`: 0 for a free slot, else the token it must be at),
/// never waiting for the row: the caller holds the permit's lock of queen's own.
#[allow(clippy::too_many_arguments)]
fn put(
    s: &mut Spi,
    kv_ns: &str,
    name: &str,
    slot: i64,
    value: Value,
    ttl: i64,
    expect: i64,
    now: Micros,
) -> QueenResult<Value> {
    let op = Op::Put {
        ns: kv_ns.to_string(),
        key: key(name, slot),
        value,
        expiry: Expiry::Ttl(ttl),
        expect: Some(expect),
        if_absent: expect == 0,
    };
    kv::write(s, &op, now, RowLock::NoWait)
}

fn applied(w: &Value) -> bool {
    w.get("applied").and_then(Value::as_bool) == Some(true)
}

/// Take the lock of queen's own of a permit that a renew or release writes, waiting at most as
/// long as queen waits (55P03).
fn writing(kv_ns: &str, name: &str, slot: i64) -> QueenResult<()> {
    let key = key(name, slot);
    crate::locks::take_fresh(Lock::Permit(kv_ns, &key), Mode::Exclusive, || {
        format!(
            "lock \"{}\" (its permit in slot {slot} is written, or guarded, by an open transaction)",
            crate::error::shorten(name)
        )
    })?;
    Ok(())
}

fn one(s: &mut Spi, op: &LockOp, whose: &mut Whose, now: Micros) -> QueenResult<Value> {
    let kv_ns = kv_namespace(op.ns());
    let kv_ns = kv_ns.as_str();
    match op {
        LockOp::Get { name, .. } => {
            let hs = holders(s, kv_ns, name, now);
            Ok(json!({"held": !hs.is_empty(), "holders": holders_json(&hs)}))
        }
        LockOp::Acquire { name, ttl, owner, limit, .. } => {
            let hs = holders(s, kv_ns, name, now);
            if let Some(o) = owner.as_deref() {
                for h in hs.iter().filter(|h| h.owner == o && h.slot < *limit) {
                    if whose.mine(s, h) {
                        return Ok(json!({"acquired": true, "already": true, "slot": h.slot, "token": h.token,
                                         "owner": h.owner, "guard": guard(kv_ns, name, h.slot, h.token),
                                         "expiresAt": h.expires_at}));
                    }
                }
            }
            let owner = owner.clone().unwrap_or_else(|| format!("queen:{}", uuid::Uuid::now_v7().simple()));
            let since: String = CLOCK_TEXT.run(s, &[crate::state::timestamp(now).into()]).first().req("t");
            let permit = Holder {
                slot: 0,
                owner: owner.clone(),
                token: 0,
                since: json!(since),
                expires_at: Value::Null,
                renewed_at: Value::Null,
                role: whose.name.clone(),
                renewed_from: Vec::new(),
            };
            let mut contended = false;
            for slot in (0..*limit).filter(|k| hs.iter().all(|h| h.slot != *k)) {
                // A slot whose permit another transaction is writing (or guarding) is taken:
                // an acquire never waits.
                if !crate::locks::try_xact(Lock::Permit(kv_ns, &key(name, slot))) {
                    contended = true;
                    continue;
                }
                let w = put(s, kv_ns, name, slot, permit.value(&[]), *ttl, 0, now)?;
                if applied(&w) {
                    let token = w.get("version").and_then(Value::as_i64).unwrap_or(0);
                    return Ok(json!({"acquired": true, "slot": slot, "token": token, "owner": owner,
                                     "guard": guard(kv_ns, name, slot, token), "expiresAt": w.get("expiresAt")}));
                }
                contended = true;
            }
            let hs = holders(s, kv_ns, name, now);
            Ok(json!({"acquired": false, "reason": if contended { "contended" } else { "held" },
                      "holders": holders_json(&hs)}))
        }
        LockOp::Renew { name, token, ttl, slot, owner, .. } => {
            let hs = holders(s, kv_ns, name, now);
            if let Some(h) =
                target(&hs, *slot, *token, owner.as_deref()).filter(|h| renews(h, *token, owner.as_deref()))
            {
                if whose.mine(s, h) {
                    writing(kv_ns, name, h.slot)?;
                    // Written only if the row is still `h` (its token): what was read holds.
                    let w = put(s, kv_ns, name, h.slot, h.value(&renewed_from(h, *token)), *ttl, h.token, now)?;
                    if applied(&w) {
                        let token = w.get("version").and_then(Value::as_i64).unwrap_or(0);
                        return Ok(json!({"renewed": true, "slot": h.slot, "token": token, "owner": h.owner,
                                         "guard": guard(kv_ns, name, h.slot, token),
                                         "expiresAt": w.get("expiresAt")}));
                    }
                }
            }
            let hs = holders(s, kv_ns, name, now);
            Ok(json!({"renewed": false, "reason": "lost", "holders": holders_json(&hs)}))
        }
        LockOp::Release { name, token, slot, .. } => {
            let hs = holders(s, kv_ns, name, now);
            if let Some(h) = target(&hs, *slot, *token, None).filter(|h| h.token == *token) {
                if whose.mine(s, h) {
                    writing(kv_ns, name, h.slot)?;
                    let op = Op::Delete { ns: kv_ns.to_string(), key: key(name, h.slot), expect: Some(*token) };
                    if applied(&kv::write(s, &op, now, RowLock::NoWait)?) {
                        return Ok(json!({"released": true, "slot": h.slot}));
                    }
                }
            }
            Ok(json!({"released": false, "reason": "lost"}))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(slot: i64, owner: &str, token: i64, renewed_from: &[i64]) -> Holder {
        Holder {
            slot,
            owner: owner.into(),
            token,
            since: Value::Null,
            expires_at: Value::Null,
            renewed_at: Value::Null,
            role: Some("app".into()),
            renewed_from: renewed_from.to_vec(),
        }
    }

    #[test]
    fn operations_are_checked() {
        let ok = parse(0, &json!({"op": "acquire", "name": "n", "ttlSeconds": 5, "limit": 3})).unwrap();
        assert_eq!(ok, LockOp::Acquire { ns: "queen-locks".into(), name: "n".into(), ttl: 5, owner: None, limit: 3 });
        let ns = parse(0, &json!({"op": "get", "ns": "billing", "name": "n"})).unwrap();
        assert_eq!(ns, LockOp::Get { ns: "billing".into(), name: "n".into() });
        let table = [
            (json!({"op": "acquire", "name": "a#b", "ttlSeconds": 5}), "without '#'"),
            (json!({"op": "acquire", "name": "", "ttlSeconds": 5}), "1 to 256 bytes"),
            (json!({"op": "acquire", "name": "x".repeat(257), "ttlSeconds": 5}), "1 to 256 bytes"),
            (json!({"op": "acquire", "name": "a\u{7}", "ttlSeconds": 5}), "control"),
            (json!({"op": "acquire", "name": "a"}), "lifetime"),
            (json!({"op": "acquire", "name": "a", "ttlSeconds": 0}), "from 1"),
            (json!({"op": "acquire", "name": "a", "ttlSeconds": 5, "limit": 1025}), "from 1 to 1024"),
            (json!({"op": "renew", "name": "a", "ttlSeconds": 5}), "token"),
            (json!({"op": "release", "name": "a", "token": 0}), "above 0"),
            (json!({"op": "release", "name": "a", "token": 3, "slot": -1}), "from 0"),
            (json!({"op": "steal", "name": "a"}), "'acquire', 'renew'"),
            (json!({"op": "get", "name": "a", "owner": ""}), "owner"),
            (json!({"op": "get", "name": "a", "ns": "queen-locks/x"}), "'/'"),
            (json!({"op": "get", "name": "a", "ns": ""}), "1 to 128"),
            (json!({"op": "get", "name": "a", "ns": 3}), "must be a string"),
            (json!("get"), "must be an object"),
        ];
        for (v, want) in table {
            let e = parse(0, &v).unwrap_err().to_string();
            assert!(e.contains(want), "{v}: {e}");
        }
        let many = Value::Array(vec![json!({"op": "get", "name": "a"}); 101]);
        assert!(parse_all(&many).unwrap_err().to_string().contains("limit is 100"));
    }

    #[test]
    fn each_lock_namespace_keeps_its_permits_apart() {
        assert_eq!(kv_namespace("queen-locks"), "queen-locks");
        assert_eq!(kv_namespace("billing"), "queen-locks/billing");
        for ns in ["queen-locks", "billing", "a.b:c"] {
            assert_eq!(lock_namespace(&kv_namespace(ns)), Some(ns));
        }
        assert_eq!(lock_namespace("billing"), None);
        assert_eq!(lock_namespace("queen-locks-2"), None);
    }

    #[test]
    fn holders_are_read_from_their_rows() {
        let row = json!({"key": "job#2", "value": {"owner": "me", "since": "t", "role": "app", "renewedFrom": [4, 7]},
                         "version": 9, "expiresAt": "e", "updatedAt": "u"});
        let got = holder("job", row.as_object().unwrap()).unwrap();
        assert_eq!((got.slot, got.owner.as_str(), got.token), (2, "me", 9));
        assert_eq!((got.role.as_deref(), got.renewed_from.as_slice()), (Some("app"), &[4, 7][..]));
        // Written back as it was read.
        assert_eq!(got.value(&[4, 7]), row["value"]);
        // Another lock's row, or not a slot.
        assert!(holder("jo", row.as_object().unwrap()).is_none());
        let odd = json!({"key": "job#x", "value": {}, "version": 1});
        assert!(holder("job", odd.as_object().unwrap()).is_none());
        // A permit that records no role.
        let old = json!({"key": "job#0", "value": {"owner": "me"}, "version": 3});
        assert_eq!(holder("job", old.as_object().unwrap()).unwrap().role, None);
    }

    #[test]
    fn renew_and_release_find_their_permit() {
        // Slot 0 renewed from 7 (its answer lost), slot 1 never renewed.
        let hs = [h(0, "a", 10, &[7]), h(1, "b", 12, &[])];
        // By slot, by token, and by a token it was renewed from (a renew sent again).
        assert_eq!(target(&hs, Some(1), 0, None).map(|h| h.slot), Some(1));
        assert_eq!(target(&hs, None, 12, None).map(|h| h.slot), Some(1));
        assert_eq!(target(&hs, None, 7, None).map(|h| h.slot), Some(0));
        assert_eq!(target(&hs, None, 7, Some("a")).map(|h| h.slot), Some(0));
        // Naming another owner, or a token it never had: not this permit.
        assert_eq!(target(&hs, None, 7, Some("b")), None);
        assert_eq!(target(&hs, None, 6, None), None);
        assert!(renews(&hs[0], 10, None) && renews(&hs[0], 10, Some("b")));
        assert!(renews(&hs[0], 7, None) && renews(&hs[0], 7, Some("a")));
        assert!(!renews(&hs[0], 7, Some("b")));
        assert!(!renews(&hs[1], 7, None));
    }

    #[test]
    fn a_permit_remembers_the_tokens_a_renew_sent_again_may_carry() {
        // Renewed at its token: that token alone.
        assert_eq!(renewed_from(&h(0, "a", 10, &[7]), 10), vec![10]);
        // Sent again with an older one: the older ones, and the token whose answer was lost.
        assert_eq!(renewed_from(&h(0, "a", 10, &[7]), 7), vec![7, 10]);
        // Bounded, newest kept.
        let many: Vec<i64> = (1..=MAX_RENEWED_FROM as i64).collect();
        let next = renewed_from(&h(0, "a", 100, &many), 1);
        assert_eq!(next.len(), MAX_RENEWED_FROM);
        assert_eq!((next[0], *next.last().unwrap()), (2, 100));
    }

    #[test]
    fn a_guard_checks_the_permits_row_at_its_token() {
        assert_eq!(
            guard("queen-locks/billing", "job", 1, 42),
            json!({"op": "check", "ns": "queen-locks/billing", "key": "job#1", "expect": 42, "required": true})
        );
    }
}
