//! Locks and semaphores (`queen_lock`, issue 24), as Queen MQ's `/api/v1/locks` has them: a
//! permit is one key/value row (kv.rs) in the namespace [`NAMESPACE`], key `name#slot`, value
//! `{owner, since}`, written with a lifetime. Its `version` is the **fencing token**: it only
//! rises (one sequence for every key), and changes at every renew. A lock is a semaphore of one
//! permit; a semaphore of `limit` permits has slots 0 .. limit-1, taken lowest first.
//!
//! - `acquire`: the holder's own permit again if `owner` already holds one (a call sent again
//!   after its answer was lost), else the first free slot (`putIfAbsent`); or `held` (every
//!   slot taken) / `contended` (a slot that looked free was taken meanwhile), with the holders.
//! - `renew`: the permit at `token` — or, sent again by its `owner` after the answer was lost,
//!   the owner's permit — rewritten with a new lifetime and a new token; else `lost`.
//! - `release`: the permit at `token` deleted; else `lost`.
//! - `get`: the live holders.
//!
//! A permit expires; nobody tells its holder. What makes a holder's work exclusive is its
//! `guard`, a key/value `check` of the permit's row at its token, `required`: put in the same
//! transaction as the work (queen_kv, or queen-gateway's `kv` rider), the work commits only while
//! the permit is still that holder's. Privileges: `kv_write` on the namespace to take, renew and
//! release, `kv_read` to look.

use crate::error::{QueenError, QueenResult};
use crate::kv::{self, Expiry, Op};
use crate::privilege::Privilege;
use crate::spi::types::TSTZ;
use crate::spi::{Query, Spi};
use crate::state::Micros;
use serde_json::{json, Map, Value};

const SQL: &str = include_str!("../sql/queries/permits.sql");
const CLOCK_TEXT: Query = Query { file: SQL, name: "permit_clock_text", args: &[TSTZ] };

/// The key/value namespace of every permit.
pub const NAMESPACE: &str = "queen-locks";
/// Bounds of a lock's name and a holder's owner (bytes), a semaphore's permits, and a call.
pub const MAX_NAME_BYTES: usize = 256;
pub const MAX_OWNER_BYTES: usize = 256;
pub const MAX_LIMIT: i64 = 1024;
pub const MAX_OPS: usize = 100;

#[derive(Debug, Clone, PartialEq)]
pub enum LockOp {
    Acquire { name: String, ttl: i64, owner: Option<String>, limit: i64 },
    Renew { name: String, token: i64, ttl: i64, slot: Option<i64>, owner: Option<String> },
    Release { name: String, token: i64, slot: Option<i64> },
    Get { name: String },
}

impl LockOp {
    pub fn name(&self) -> &str {
        match self {
            LockOp::Acquire { name, .. }
            | LockOp::Renew { name, .. }
            | LockOp::Release { name, .. }
            | LockOp::Get { name } => name,
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
            LockOp::Acquire { name, ttl: ttl()?, owner, limit }
        }
        "renew" => LockOp::Renew { name, token: token()?, ttl: ttl()?, slot: slot()?, owner },
        "release" => LockOp::Release { name, token: token()?, slot: slot()? },
        "get" => LockOp::Get { name },
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
}

impl Holder {
    fn to_json(&self) -> Value {
        json!({"slot": self.slot, "owner": self.owner, "token": self.token, "since": self.since,
               "expiresAt": self.expires_at, "renewedAt": self.renewed_at})
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
    })
}

/// The guard of a permit: the key/value check that holds while it is the holder's.
pub fn guard(name: &str, slot: i64, token: i64) -> Value {
    json!({"op": "check", "ns": NAMESPACE, "key": key(name, slot), "expect": token, "required": true})
}

/// Which permit a renew or release acts on: the one of `slot` when given, else the one at
/// `token`, else (a renew sent again) the one `owner` holds.
pub fn target<'h>(holders: &'h [Holder], slot: Option<i64>, token: i64, owner: Option<&str>) -> Option<&'h Holder> {
    match slot {
        Some(s) => holders.iter().find(|h| h.slot == s),
        None => holders
            .iter()
            .find(|h| h.token == token)
            .or_else(|| owner.and_then(|o| holders.iter().find(|h| h.owner == o))),
    }
}

/// Whether a renew by `token` (and `owner`, if given) may rewrite `h`: it is at that token, or
/// it is the owner's own (its earlier renew's answer was lost).
pub fn may_renew(h: &Holder, token: i64, owner: Option<&str>) -> bool {
    h.token == token || owner.is_some_and(|o| o == h.owner)
}

/// Run the operations in order, in the caller's transaction; one result per operation.
pub fn run(ops: &[LockOp]) -> QueenResult<Vec<Value>> {
    for privilege in [Privilege::KvRead, Privilege::KvWrite] {
        if ops.iter().any(|o| o.privilege() == privilege) {
            crate::privilege::require(&[NAMESPACE], privilege)?;
        }
    }
    // SAFETY: GetCurrentTimestamp only reads the clock.
    let now: Micros = unsafe { pgrx::pg_sys::GetCurrentTimestamp() };
    crate::session::connect(|s| {
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            let mut r = one(s, op, now)?;
            if let Value::Object(m) = &mut r {
                m.insert("op".into(), json!(op.verb()));
                m.insert("name".into(), json!(op.name()));
            }
            out.push(r);
        }
        Ok(out)
    })
}

fn holders(s: &mut Spi, name: &str, now: Micros) -> Vec<Holder> {
    let page = kv::prefix_page(s, NAMESPACE, &format!("{name}#"), None, MAX_LIMIT, false, now);
    let rows = page.get("rows").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut hs: Vec<Holder> = rows.iter().filter_map(|r| r.as_object().and_then(|m| holder(name, m))).collect();
    hs.sort_by_key(|h| h.slot);
    hs
}

fn holders_json(hs: &[Holder]) -> Value {
    Value::Array(hs.iter().map(Holder::to_json).collect())
}

/// Write the permit of `slot` (`expect`: 0 for a free slot, else the token it must be at).
#[allow(clippy::too_many_arguments)]
fn put(
    s: &mut Spi,
    name: &str,
    slot: i64,
    owner: &str,
    since: Value,
    ttl: i64,
    expect: i64,
    now: Micros,
) -> QueenResult<Value> {
    let op = Op::Put {
        ns: NAMESPACE.to_string(),
        key: key(name, slot),
        value: json!({"owner": owner, "since": since}),
        expiry: Expiry::Ttl(ttl),
        expect: Some(expect),
        if_absent: expect == 0,
    };
    kv::write(s, &op, now)
}

/// The new token of a permit written (`w`, kv.rs's answer), and its guard.
fn granted(name: &str, slot: i64, w: &Value) -> (i64, Value) {
    let token = w.get("version").and_then(Value::as_i64).unwrap_or(0);
    (token, guard(name, slot, token))
}

fn one(s: &mut Spi, op: &LockOp, now: Micros) -> QueenResult<Value> {
    match op {
        LockOp::Get { name } => {
            let hs = holders(s, name, now);
            Ok(json!({"held": !hs.is_empty(), "holders": holders_json(&hs)}))
        }
        LockOp::Acquire { name, ttl, owner, limit } => {
            let hs = holders(s, name, now);
            if let Some(h) = owner.as_deref().and_then(|o| hs.iter().find(|h| h.owner == o && h.slot < *limit)) {
                return Ok(json!({"acquired": true, "already": true, "slot": h.slot, "token": h.token,
                                 "owner": h.owner, "guard": guard(name, h.slot, h.token),
                                 "expiresAt": h.expires_at}));
            }
            let owner = owner.clone().unwrap_or_else(|| format!("queen:{}", uuid::Uuid::now_v7().simple()));
            let since: String = CLOCK_TEXT.run(s, &[crate::state::timestamp(now).into()]).first().req("t");
            let mut contended = false;
            for slot in (0..*limit).filter(|k| hs.iter().all(|h| h.slot != *k)) {
                let w = put(s, name, slot, &owner, json!(since), *ttl, 0, now)?;
                if w.get("applied").and_then(Value::as_bool) == Some(true) {
                    let (token, guard) = granted(name, slot, &w);
                    return Ok(json!({"acquired": true, "slot": slot, "token": token, "owner": owner,
                                     "guard": guard, "expiresAt": w.get("expiresAt")}));
                }
                contended = true;
            }
            let hs = holders(s, name, now);
            Ok(json!({"acquired": false, "reason": if contended { "contended" } else { "held" },
                      "holders": holders_json(&hs)}))
        }
        LockOp::Renew { name, token, ttl, slot, owner } => {
            let hs = holders(s, name, now);
            if let Some(h) =
                target(&hs, *slot, *token, owner.as_deref()).filter(|h| may_renew(h, *token, owner.as_deref()))
            {
                let w = put(s, name, h.slot, &h.owner, h.since.clone(), *ttl, h.token, now)?;
                if w.get("applied").and_then(Value::as_bool) == Some(true) {
                    let (token, guard) = granted(name, h.slot, &w);
                    return Ok(json!({"renewed": true, "slot": h.slot, "token": token, "owner": h.owner,
                                     "guard": guard, "expiresAt": w.get("expiresAt")}));
                }
            }
            let hs = holders(s, name, now);
            Ok(json!({"renewed": false, "reason": "lost", "holders": holders_json(&hs)}))
        }
        LockOp::Release { name, token, slot } => {
            let hs = holders(s, name, now);
            if let Some(h) = target(&hs, *slot, *token, None).filter(|h| h.token == *token) {
                let op = Op::Delete { ns: NAMESPACE.to_string(), key: key(name, h.slot), expect: Some(*token) };
                let w = kv::write(s, &op, now)?;
                if w.get("applied").and_then(Value::as_bool) == Some(true) {
                    return Ok(json!({"released": true, "slot": h.slot}));
                }
            }
            Ok(json!({"released": false, "reason": "lost"}))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(slot: i64, owner: &str, token: i64) -> Holder {
        Holder {
            slot,
            owner: owner.into(),
            token,
            since: Value::Null,
            expires_at: Value::Null,
            renewed_at: Value::Null,
        }
    }

    #[test]
    fn operations_are_checked() {
        let ok = parse(0, &json!({"op": "acquire", "name": "n", "ttlSeconds": 5, "limit": 3})).unwrap();
        assert_eq!(ok, LockOp::Acquire { name: "n".into(), ttl: 5, owner: None, limit: 3 });
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
    fn holders_are_read_from_their_rows() {
        let row = json!({"key": "job#2", "value": {"owner": "me", "since": "t"}, "version": 9, "expiresAt": "e", "updatedAt": "u"});
        let got = holder("job", row.as_object().unwrap()).unwrap();
        assert_eq!((got.slot, got.owner.as_str(), got.token), (2, "me", 9));
        // Another lock's row, or not a slot.
        assert!(holder("jo", row.as_object().unwrap()).is_none());
        let odd = json!({"key": "job#x", "value": {}, "version": 1});
        assert!(holder("job", odd.as_object().unwrap()).is_none());
    }

    #[test]
    fn renew_and_release_find_their_permit() {
        let hs = [h(0, "a", 10), h(1, "b", 12)];
        // By slot, by token, and by owner when the token is stale (a renew sent again).
        assert_eq!(target(&hs, Some(1), 0, None).map(|h| h.slot), Some(1));
        assert_eq!(target(&hs, None, 12, None).map(|h| h.slot), Some(1));
        assert_eq!(target(&hs, None, 7, Some("a")).map(|h| h.slot), Some(0));
        assert_eq!(target(&hs, None, 7, Some("c")), None);
        assert!(may_renew(&hs[0], 10, None));
        assert!(may_renew(&hs[0], 7, Some("a")));
        assert!(!may_renew(&hs[0], 7, Some("b")));
        assert!(!may_renew(&hs[0], 7, None));
    }

    #[test]
    fn a_guard_checks_the_permits_row_at_its_token() {
        assert_eq!(
            guard("job", 1, 42),
            json!({"op": "check", "ns": "queen-locks", "key": "job#1", "expect": 42, "required": true})
        );
    }
}
