//! Key/value state (`queen_kv`, issue 24): keys in namespaces, written in the caller's
//! transaction like everything else of queen, so a key written with a push or an ack commits or
//! rolls back with them. The operations and their answers are those of Queen MQ's `/api/v1/kv`
//! (docs/api.md, "Key/value"), so queen-gateway passes them through.
//!
//! - A key has a value (any JSON, `null` included), a `version` that every write takes anew
//!   from one sequence (so a key deleted and written again never repeats a version an old
//!   holder may carry), and an expiry: `ttlSeconds` or `forever`, one of them on every write —
//!   a write never inherits the old expiry, except `incr`'s, which keeps a live row's (a
//!   fixed-window counter must close its window).
//! - A key past its expiry is gone for every read and write at once; maintenance deletes the
//!   row later. The predicate decides, not the row.
//! - Conditions: `expect` (0: the key must not exist; N: it must be live at version N) on
//!   put, delete and check; `putIfAbsent` is put with expect 0; `incr` with `min`/`max` refuses
//!   rather than saturates. A write that does not apply changes nothing and answers why
//!   (`exists`, `absent`, `version`, `limit`, `type`) with the key's current version and value.
//! - A write is decided on the row as it is now, locked (`FOR UPDATE`), or, for a key that has
//!   no row, by the insert itself: of concurrent writers of a new key exactly one inserts, and
//!   the others decide again on its row.
//! - `required`: an operation that must apply. One that does not raises (the caller's
//!   transaction rolls back), or, for queen-gateway, ends the batch there.
//! - The namespaces that keep locks' permits (permits.rs: `queen-locks`, `queen-locks/<ns>`)
//!   are read here under the grants of their lock namespace and never written: a permit is
//!   what an acquire granted, nothing else. A `check` there is a holder's guard: it takes the
//!   permit's lock of queen's own shared, so the permit's writers wait for the guarded work
//!   (bounded), and guards do not wait for each other.
//!
//! The rules ([`decide`]) are plain Rust, table-tested below; [`run`] reads and writes rows.

use crate::error::{shorten, QueenError, QueenResult};
use crate::privilege::Privilege;
use crate::spi::types::{BOOL, INT4, INT8, JSONB, TEXT, TEXTS, TSTZ};
use crate::spi::{Query, Row, Spi};
use crate::state::Micros;
use pgrx::datum::DatumWithOid;
use serde_json::{json, Map, Value};

const SQL: &str = include_str!("../sql/queries/kv.sql");
const KV_LOCK: Query = Query { file: SQL, name: "kv_lock", args: &[TEXT, TEXT, TSTZ] };
const KV_LOCK_SHARE: Query = Query { file: SQL, name: "kv_lock_share", args: &[TEXT, TEXT, TSTZ] };
const KV_LOCK_SKIP: Query = Query { file: SQL, name: "kv_lock_skip", args: &[TEXT, TEXT, TSTZ] };
const KV_EXISTS: Query = Query { file: SQL, name: "kv_exists", args: &[TEXT, TEXT] };
const KV_INSERT: Query = Query { file: SQL, name: "kv_insert", args: &[TEXT, TEXT, JSONB, TSTZ, TSTZ] };
const KV_UPDATE: Query = Query { file: SQL, name: "kv_update", args: &[TEXT, TEXT, JSONB, TSTZ, TSTZ] };
const KV_DELETE: Query = Query { file: SQL, name: "kv_delete", args: &[TEXT, TEXT] };
const KV_GET_MANY: Query = Query { file: SQL, name: "kv_get_many", args: &[TEXT, TEXTS, TSTZ] };
const KV_PREFIX: Query = Query { file: SQL, name: "kv_prefix", args: &[TEXT, TEXT, TSTZ, TEXT, INT8, BOOL] };
const KV_PREFIX_OPEN: Query = Query { file: SQL, name: "kv_prefix_open", args: &[TEXT, TEXT, TSTZ, INT8, BOOL] };
pub const KV_EXPIRE: Query = Query { file: SQL, name: "kv_expire", args: &[TSTZ, INT4] };

/// Bounds of one call.
pub const MAX_OPS: usize = 1000;
pub const MAX_NAMESPACE_CHARS: usize = 128;
pub const MAX_KEY_CHARS: usize = 1024;
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// The whole `operations` argument, as JSON text.
pub const MAX_CALL_BYTES: usize = 16 << 20;
pub const MAX_TTL_SECONDS: i64 = 100 * 365 * 86_400;
pub const MAX_KEYS: usize = 1000;
pub const DEFAULT_PAGE: i64 = 100;
pub const MAX_PAGE: i64 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    Ttl(i64),
    Forever,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Get { ns: String, key: String },
    GetMany { ns: String, keys: Vec<String> },
    GetPrefix { ns: String, prefix: String, after: Option<String>, limit: i64, keys_only: bool },
    Put { ns: String, key: String, value: Value, expiry: Expiry, expect: Option<i64>, if_absent: bool },
    Delete { ns: String, key: String, expect: Option<i64> },
    Incr { ns: String, key: String, delta: i64, min: Option<i64>, max: Option<i64>, expiry: Expiry },
    Check { ns: String, key: String, expect: i64 },
}

/// One operation of a call, and whether it must apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub op: Op,
    pub required: bool,
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Get { .. } => "get",
            Op::GetMany { .. } => "getMany",
            Op::GetPrefix { .. } => "getPrefix",
            Op::Put { if_absent: false, .. } => "put",
            Op::Put { if_absent: true, .. } => "putIfAbsent",
            Op::Delete { .. } => "delete",
            Op::Incr { .. } => "incr",
            Op::Check { .. } => "check",
        }
    }

    pub fn namespace(&self) -> &str {
        match self {
            Op::Get { ns, .. }
            | Op::GetMany { ns, .. }
            | Op::GetPrefix { ns, .. }
            | Op::Put { ns, .. }
            | Op::Delete { ns, .. }
            | Op::Incr { ns, .. }
            | Op::Check { ns, .. } => ns,
        }
    }

    /// The namespace whose grants it needs: its own, or, for the namespace of a lock
    /// namespace's permits, that lock namespace's (permits.rs).
    pub fn grant_namespace(&self) -> &str {
        let ns = self.namespace();
        crate::permits::lock_namespace(ns).unwrap_or(ns)
    }

    /// The privilege it needs on its namespace.
    pub fn privilege(&self) -> Privilege {
        match self {
            Op::Put { .. } | Op::Delete { .. } | Op::Incr { .. } => Privilege::KvWrite,
            _ => Privilege::KvRead,
        }
    }
}

/// Read operation `i` of a call (`operations[i]`).
pub fn parse(i: usize, v: &Value) -> QueenResult<Parsed> {
    let at = |field: &str| format!("operations[{i}].{field}");
    let Value::Object(m) = v else {
        return Err(QueenError::invalid(format!("operations[{i}]"), format!("must be an object, got {}", kind(v))));
    };
    let op = text(m, "op", &at("op"))?.ok_or_else(|| QueenError::invalid(at("op"), "is required"))?;
    let ns = namespace(m, &at("ns"))?;
    let key = || -> QueenResult<String> {
        let k = text(m, "key", &at("key"))?.ok_or_else(|| QueenError::invalid(at("key"), "is required"))?;
        check_key(&at("key"), &k)?;
        Ok(k)
    };
    let expect = |required: bool| -> QueenResult<Option<i64>> {
        match m.get("expect") {
            None if !required => Ok(None),
            None | Some(Value::Null) => {
                Err(QueenError::invalid(at("expect"), "is required: a version, or 0 for a key that must not exist"))
            }
            Some(v) => match v.as_i64() {
                Some(n) if n >= 0 => Ok(Some(n)),
                _ => Err(QueenError::invalid(at("expect"), format!("must be a version (0 or more), got {v}"))),
            },
        }
    };
    let value = || -> QueenResult<Value> {
        let v = m.get("value").ok_or_else(|| QueenError::invalid(at("value"), "is required (null is a value)"))?;
        let size = v.to_string().len();
        if size > MAX_VALUE_BYTES {
            return Err(QueenError::invalid(
                at("value"),
                format!("is {size} bytes as JSON, the limit is {MAX_VALUE_BYTES}"),
            ));
        }
        Ok(v.clone())
    };
    let expiry = || expiry(m, &at(""));
    let no_expiry = || -> QueenResult<()> {
        for f in ["ttlSeconds", "forever"] {
            if m.contains_key(f) {
                return Err(QueenError::invalid(at(f), format!("does not apply to {op}")));
            }
        }
        Ok(())
    };
    let op = match op.as_str() {
        "get" => Op::Get { ns, key: key()? },
        "getMany" => {
            let keys = match m.get("keys") {
                Some(Value::Array(a)) if !a.is_empty() && a.len() <= MAX_KEYS => a,
                _ => return Err(QueenError::invalid(at("keys"), format!("must be an array of 1 to {MAX_KEYS} keys"))),
            };
            let mut out = Vec::with_capacity(keys.len());
            for (j, k) in keys.iter().enumerate() {
                let what = format!("operations[{i}].keys[{j}]");
                let Value::String(k) = k else {
                    return Err(QueenError::invalid(what, format!("must be a string, got {}", kind(k))));
                };
                check_key(&what, k)?;
                out.push(k.clone());
            }
            Op::GetMany { ns, keys: out }
        }
        "getPrefix" => {
            let prefix = text(m, "prefix", &at("prefix"))?.unwrap_or_default();
            if prefix.is_empty() {
                return Err(QueenError::invalid(
                    at("prefix"),
                    "is required and must not be empty: a namespace is not a table to enumerate",
                ));
            }
            check_key(&at("prefix"), &prefix)?;
            let after = text(m, "after", &at("after"))?;
            if let Some(a) = &after {
                check_key(&at("after"), a)?;
            }
            // Clamped, never refused: the caller cannot know the server's ceiling.
            let limit = match m.get("limit") {
                None | Some(Value::Null) => DEFAULT_PAGE,
                Some(v) => v
                    .as_i64()
                    .ok_or_else(|| QueenError::invalid(at("limit"), format!("must be an integer, got {v}")))?
                    .clamp(1, MAX_PAGE),
            };
            let keys_only = flag(m, "keysOnly", &at("keysOnly"))?;
            Op::GetPrefix { ns, prefix, after, limit, keys_only }
        }
        "put" => {
            Op::Put { ns, key: key()?, value: value()?, expiry: expiry()?, expect: expect(false)?, if_absent: false }
        }
        "putIfAbsent" => {
            if m.contains_key("expect") {
                return Err(QueenError::invalid(at("expect"), "does not apply to putIfAbsent (it is expect 0)"));
            }
            Op::Put { ns, key: key()?, value: value()?, expiry: expiry()?, expect: Some(0), if_absent: true }
        }
        "delete" => {
            no_expiry()?;
            let expect = expect(false)?;
            if expect == Some(0) {
                return Err(QueenError::invalid(at("expect"), "must be a version (1 or more) for delete"));
            }
            Op::Delete { ns, key: key()?, expect }
        }
        "check" => {
            no_expiry()?;
            Op::Check { ns, key: key()?, expect: expect(true)?.expect("required above") }
        }
        "incr" => {
            if m.contains_key("expect") {
                return Err(QueenError::invalid(at("expect"), "does not apply to incr (min and max bound it)"));
            }
            let int = |f: &str| -> QueenResult<Option<i64>> {
                match m.get(f) {
                    None | Some(Value::Null) => Ok(None),
                    Some(v) => v
                        .as_i64()
                        .map(Some)
                        .ok_or_else(|| QueenError::invalid(at(f), format!("must be an integer, got {v}"))),
                }
            };
            let (min, max) = (int("min")?, int("max")?);
            if let (Some(lo), Some(hi)) = (min, max) {
                if lo > hi {
                    return Err(QueenError::invalid(at("min"), format!("{lo} is above max {hi}")));
                }
            }
            Op::Incr { ns, key: key()?, delta: int("delta")?.unwrap_or(1), min, max, expiry: expiry()? }
        }
        other => {
            return Err(QueenError::invalid(
                at("op"),
                format!(
                    "must be get, getMany, getPrefix, put, putIfAbsent, delete, incr or check, got \"{}\"",
                    shorten(other)
                ),
            ))
        }
    };
    if let (Privilege::KvWrite, Some(lock_ns)) = (op.privilege(), crate::permits::lock_namespace(op.namespace())) {
        // Whatever the caller's grants: a permit written here would be one no acquire granted
        // (a forged holder, a lifetime without end).
        return Err(QueenError::invalid(
            at("ns"),
            format!(
                "\"{}\" holds the permits of lock namespace \"{lock_ns}\": they are written only by queen_lock \
                 (acquire, renew, release), not by {}",
                op.namespace(),
                op.name()
            ),
        ));
    }
    Ok(Parsed { op, required: flag(m, "required", &at("required"))? })
}

pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn text(m: &Map<String, Value>, field: &str, what: &str) -> QueenResult<Option<String>> {
    match m.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(QueenError::invalid(what, format!("must be a string, got {}", kind(v)))),
    }
}

fn flag(m: &Map<String, Value>, field: &str, what: &str) -> QueenResult<bool> {
    match m.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(QueenError::invalid(what, format!("must be a boolean, got {}", kind(v)))),
    }
}

/// A namespace: 1 to 128 letters, digits, `_`, `-`, `.` and `:`; or `queen-locks/` and a lock
/// namespace, where that lock namespace keeps its permits (permits.rs; read-only here).
fn namespace(m: &Map<String, Value>, what: &str) -> QueenResult<String> {
    let ns = text(m, "ns", what)?.ok_or_else(|| QueenError::invalid(what, "is required"))?;
    if let Some(lock_ns) = ns.strip_prefix(crate::permits::PREFIX) {
        check_namespace(what, lock_ns)?;
        if lock_ns == crate::permits::NAMESPACE {
            return Err(QueenError::invalid(
                what,
                format!("\"{ns}\" is no namespace: lock namespace \"{lock_ns}\" keeps its permits in \"{lock_ns}\""),
            ));
        }
        return Ok(ns);
    }
    check_namespace(what, &ns)?;
    Ok(ns)
}

/// A namespace's name (of key/value keys, or of locks): 1 to 128 letters, digits, `_`, `-`, `.`
/// and `:`.
pub fn check_namespace(what: &str, ns: &str) -> QueenResult<()> {
    let n = ns.chars().count();
    if n == 0 || n > MAX_NAMESPACE_CHARS {
        return Err(QueenError::invalid(what, format!("must be 1 to {MAX_NAMESPACE_CHARS} characters, got {n}")));
    }
    if let Some(c) = ns.chars().find(|c| !(c.is_ascii_alphanumeric() || "_-.:".contains(*c))) {
        return Err(QueenError::invalid(
            what,
            format!("may hold letters, digits, '_', '-', '.' and ':' only, got {c:?} in \"{}\"", shorten(ns)),
        ));
    }
    Ok(())
}

fn check_key(what: &str, k: &str) -> QueenResult<()> {
    let n = k.chars().count();
    if n == 0 || n > MAX_KEY_CHARS {
        return Err(QueenError::invalid(what, format!("must be 1 to {MAX_KEY_CHARS} characters, got {n}")));
    }
    if k.contains('\0') {
        return Err(QueenError::invalid(what, "must not contain NUL"));
    }
    Ok(())
}

/// `ttlSeconds` (1 to 100 years) or `forever: true`, exactly one.
fn expiry(m: &Map<String, Value>, at: &str) -> QueenResult<Expiry> {
    let ttl = m.get("ttlSeconds").filter(|v| !v.is_null());
    let forever = m.get("forever").filter(|v| !v.is_null());
    match (ttl, forever) {
        (Some(_), Some(_)) => Err(QueenError::invalid(format!("{at}ttlSeconds"), "and forever: give one, not both")),
        (None, None) => Err(QueenError::invalid(
            format!("{at}ttlSeconds"),
            "or forever: true is required: every write says when the key expires (it never inherits the old expiry)",
        )),
        (None, Some(Value::Bool(true))) => Ok(Expiry::Forever),
        (None, Some(v)) => {
            Err(QueenError::invalid(format!("{at}forever"), format!("must be true when given, got {v}")))
        }
        (Some(v), None) => match v.as_i64() {
            Some(s) if (1..=MAX_TTL_SECONDS).contains(&s) => Ok(Expiry::Ttl(s)),
            _ => Err(QueenError::invalid(
                format!("{at}ttlSeconds"),
                format!("must be a whole number of seconds from 1 to {MAX_TTL_SECONDS}, got {v}"),
            )),
        },
    }
}

/// A key's row as a write finds it (locked).
#[derive(Debug, Clone, PartialEq)]
pub struct Current {
    pub value: Value,
    pub version: i64,
    /// Not expired.
    pub live: bool,
    pub expires_at: Option<Micros>,
}

/// What a write does, decided on the key's row as it is.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Write `value` expiring at `expires_at` (None: never).
    Write {
        value: Value,
        expires_at: Option<Micros>,
    },
    Delete,
    /// The condition holds and nothing is written (`check`).
    Holds,
    Refuse(&'static str),
}

fn expires(expiry: Expiry, now: Micros) -> Option<Micros> {
    match expiry {
        Expiry::Forever => None,
        Expiry::Ttl(s) => Some(now + s * 1_000_000),
    }
}

/// The rule of a write (not of a read: reads only see live rows). `row`: the key's row, live or
/// expired, or None.
pub fn decide(op: &Op, row: Option<&Current>, now: Micros) -> Decision {
    let live = row.filter(|r| r.live);
    // `expect`: 0 — must not exist; N — must be live at version N.
    let expect_holds = |expect: Option<i64>| -> Result<(), &'static str> {
        match (expect, live) {
            (None, _) | (Some(0), None) => Ok(()),
            (Some(0), Some(_)) => Err("exists"),
            (Some(_), None) => Err("absent"),
            (Some(n), Some(r)) if r.version != n => Err("version"),
            (Some(_), Some(_)) => Ok(()),
        }
    };
    match op {
        Op::Put { value, expiry, expect, .. } => match expect_holds(*expect) {
            Ok(()) => Decision::Write { value: value.clone(), expires_at: expires(*expiry, now) },
            Err(reason) => Decision::Refuse(reason),
        },
        Op::Delete { expect, .. } => match (live, expect_holds(*expect)) {
            (None, _) => Decision::Refuse("absent"),
            (Some(_), Err(reason)) => Decision::Refuse(reason),
            (Some(_), Ok(())) => Decision::Delete,
        },
        Op::Check { expect, .. } => match expect_holds(Some(*expect)) {
            Ok(()) => Decision::Holds,
            Err(reason) => Decision::Refuse(reason),
        },
        Op::Incr { delta, min, max, expiry, .. } => {
            // An expired row counts as nothing, whatever it held; a live one keeps its expiry.
            let (base, expires_at) = match live {
                None => (0, expires(*expiry, now)),
                Some(r) => match r.value.as_i64() {
                    Some(n) => (n, r.expires_at),
                    None => return Decision::Refuse("type"),
                },
            };
            match base.checked_add(*delta) {
                Some(n) if min.is_none_or(|lo| n >= lo) && max.is_none_or(|hi| n <= hi) => {
                    Decision::Write { value: json!(n), expires_at }
                }
                _ => Decision::Refuse("limit"),
            }
        }
        Op::Get { .. } | Op::GetMany { .. } | Op::GetPrefix { .. } => Decision::Holds,
    }
}

/// The first string past every string that starts with `prefix`, in byte (code point) order:
/// its last character that can be raised, raised; None when every character is U+10FFFF.
pub fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(c) = chars.pop() {
        let mut next = c as u32 + 1;
        if (0xD800..0xE000).contains(&next) {
            next = 0xE000;
        }
        if let Some(n) = char::from_u32(next) {
            chars.push(n);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// The operations of a call, from its JSON text (an array of at most MAX_OPS objects).
pub fn parse_all(text: &str) -> QueenResult<Vec<Parsed>> {
    if text.len() > MAX_CALL_BYTES {
        return Err(QueenError::invalid(
            "argument \"operations\"",
            format!("is {} bytes as JSON, the limit is {MAX_CALL_BYTES}", text.len()),
        ));
    }
    let v: Value = serde_json::from_str(text).map_err(|e| {
        QueenError::invalid(
            "argument \"operations\"",
            format!("cannot be read ({e}): values may nest 100 levels at most"),
        )
    })?;
    let Value::Array(items) = v else {
        return Err(QueenError::invalid("argument \"operations\"", format!("must be a JSON array, got {}", kind(&v))));
    };
    if items.len() > MAX_OPS {
        return Err(QueenError::invalid(
            "argument \"operations\"",
            format!("holds {} operations, the limit is {MAX_OPS}", items.len()),
        ));
    }
    items.iter().enumerate().map(|(i, v)| parse(i, v)).collect()
}

/// The error of a `required` operation that did not apply (its result `r`).
pub fn required_failed(index: usize, r: &Value) -> QueenError {
    let field = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    QueenError::KvRequired { index, op: field("op"), key: field("key"), reason: field("reason") }
}

/// What one call did: the results in order, and the index of a `required` operation that did
/// not apply (the call stopped there).
pub struct Outcome {
    pub results: Vec<Value>,
    pub failed_required: Option<usize>,
}

/// Run the operations in order, in the caller's transaction. Privileges are checked for all of
/// them before anything is read or written.
pub fn run(ops: &[Parsed]) -> QueenResult<Outcome> {
    for privilege in [Privilege::KvRead, Privilege::KvWrite] {
        let mut namespaces: Vec<&str> =
            ops.iter().filter(|p| p.op.privilege() == privilege).map(|p| p.op.grant_namespace()).collect();
        namespaces.sort_unstable();
        namespaces.dedup();
        if !namespaces.is_empty() {
            crate::privilege::require(&namespaces, privilege)?;
        }
    }
    // SAFETY: GetCurrentTimestamp only reads the clock.
    let now: Micros = unsafe { pgrx::pg_sys::GetCurrentTimestamp() };
    crate::session::connect(|s| {
        let mut results = Vec::with_capacity(ops.len());
        for (i, p) in ops.iter().enumerate() {
            let mut r = match &p.op {
                Op::Get { ns, key } => get_many(s, ns, std::slice::from_ref(key), now).pop().map_or_else(
                    || json!({"found": false, "key": key}),
                    |mut row| {
                        row.insert("found".into(), json!(true));
                        Value::Object(row)
                    },
                ),
                Op::GetMany { ns, keys } => {
                    let rows = get_many(s, ns, keys, now);
                    let found: std::collections::HashSet<&str> =
                        rows.iter().filter_map(|r| r.get("key").and_then(Value::as_str)).collect();
                    let missing: Vec<&String> = keys.iter().filter(|k| !found.contains(k.as_str())).collect();
                    json!({"rows": rows, "missing": missing, "truncated": false})
                }
                Op::GetPrefix { ns, prefix, after, limit, keys_only } => {
                    prefix_page(s, ns, prefix, after.as_deref(), *limit, *keys_only, now)
                }
                Op::Check { ns, key, .. } if crate::permits::lock_namespace(ns).is_some() => {
                    // A guard: its permit stays as it is until this transaction ends. Writers of
                    // the permit hold its lock while they are open (a guard waits for them, as
                    // long as queen waits), and wait for it in turn; guards share it.
                    crate::locks::take_fresh(crate::locks::Lock::Permit(ns, key), crate::locks::Mode::Shared, || {
                        format!("lock permit \"{}\" of \"{ns}\" (written by an open transaction)", shorten(key))
                    })?;
                    write(s, &p.op, now, RowLock::Share)?
                }
                _ => write(s, &p.op, now, RowLock::Wait)?,
            };
            let applied = r.get("applied").and_then(Value::as_bool);
            if let Value::Object(m) = &mut r {
                m.insert("index".into(), json!(i));
                m.insert("op".into(), json!(p.op.name()));
                if p.required {
                    m.insert("required".into(), json!(true));
                }
            }
            results.push(r);
            if p.required && applied == Some(false) {
                return Ok(Outcome { results, failed_required: Some(i) });
            }
        }
        Ok(Outcome { results, failed_required: None })
    })
}

fn row_object(r: &Row<'_>, keys_only: bool) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("key".into(), json!(r.req::<String>("key")));
    if !keys_only {
        m.insert("value".into(), stored_value(r.get::<String>("value_text")));
    }
    m.insert("version".into(), json!(r.req::<i64>("version")));
    m.insert("expiresAt".into(), json!(r.get::<String>("expires_text")));
    m.insert("updatedAt".into(), json!(r.get::<String>("updated_text")));
    m
}

/// A stored value read back (written through queen, so it parses; null otherwise).
fn stored_value(text: Option<String>) -> Value {
    text.and_then(|t| serde_json::from_str(&t).ok()).unwrap_or(Value::Null)
}

fn get_many(s: &mut Spi, ns: &str, keys: &[String], now: Micros) -> Vec<Map<String, Value>> {
    let args: [DatumWithOid; 3] = [ns.into(), keys.to_vec().into(), crate::state::timestamp(now).into()];
    let mut rows: Vec<Map<String, Value>> = KV_GET_MANY.run(s, &args).map(|r| row_object(&r, false)).collect();
    // In the order asked for.
    let order: std::collections::HashMap<&str, usize> = keys.iter().enumerate().map(|(i, k)| (k.as_str(), i)).collect();
    rows.sort_by_key(|r| r.get("key").and_then(Value::as_str).and_then(|k| order.get(k).copied()));
    rows
}

pub fn prefix_page(
    s: &mut Spi,
    ns: &str,
    prefix: &str,
    after: Option<&str>,
    limit: i64,
    keys_only: bool,
    now: Micros,
) -> Value {
    // From the prefix, or after the page's last key when that is past the prefix's start.
    let (from, exclusive) = match after {
        Some(a) if a >= prefix => (a, true),
        _ => (prefix, false),
    };
    let at = crate::state::timestamp(now);
    let mut rows: Vec<Map<String, Value>> = match prefix_end(prefix) {
        Some(end) => {
            let args: [DatumWithOid; 6] =
                [ns.into(), from.into(), at.into(), end.into(), (limit + 1).into(), exclusive.into()];
            KV_PREFIX.run(s, &args).map(|r| row_object(&r, keys_only)).collect()
        }
        None => {
            let args: [DatumWithOid; 5] = [ns.into(), from.into(), at.into(), (limit + 1).into(), exclusive.into()];
            KV_PREFIX_OPEN.run(s, &args).map(|r| row_object(&r, keys_only)).collect()
        }
    };
    let truncated = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = if truncated { rows.last().and_then(|r| r.get("key").cloned()) } else { None };
    json!({"rows": rows, "truncated": truncated, "nextAfter": next})
}

/// How a write locks the key's row before it decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowLock {
    /// `FOR UPDATE`: a concurrent writer of the key waits for this transaction, and this one
    /// for it.
    Wait,
    /// `FOR SHARE`, for a `check` only: writers wait, other checks do not.
    Share,
    /// `FOR UPDATE SKIP LOCKED`: a row another transaction holds is not waited for; the write
    /// answers `applied: false, reason: "busy"` (permits.rs; no queen_kv call writes so). The
    /// caller must keep every other writer of a new key out (an insert waits for another
    /// transaction's insert of the same key).
    NoWait,
}

/// A write: decide on the key's row, locked (`how`), and apply. A new key whose insert finds
/// the key created meanwhile (by a transaction that committed since the lock found nothing)
/// is decided again on that row.
pub fn write(s: &mut Spi, op: &Op, now: Micros, how: RowLock) -> QueenResult<Value> {
    let (ns, key) = match op {
        Op::Put { ns, key, .. } | Op::Delete { ns, key, .. } | Op::Incr { ns, key, .. } | Op::Check { ns, key, .. } => {
            (ns.as_str(), key.as_str())
        }
        _ => unreachable!("reads are not writes"),
    };
    let at = crate::state::timestamp(now);
    for _ in 0..5 {
        let args: [DatumWithOid; 3] = [ns.into(), key.into(), at.into()];
        let lock = match how {
            RowLock::Wait => &KV_LOCK,
            RowLock::Share => &KV_LOCK_SHARE,
            RowLock::NoWait => &KV_LOCK_SKIP,
        };
        let row = lock.run(s, &args).next().map(|r| Current {
            value: stored_value(r.get::<String>("value_text")),
            version: r.req::<i64>("version"),
            live: r.req::<bool>("live"),
            expires_at: r.get::<pgrx::datum::TimestampWithTimeZone>("expires_at").map(crate::state::micros),
        });
        if row.is_none() && how == RowLock::NoWait && KV_EXISTS.run(s, &[ns.into(), key.into()]).first().req("found") {
            // Held by another transaction (one that deletes it as expired, say): not waited for.
            return Ok(json!({"key": key, "applied": false, "reason": "busy", "version": 0}));
        }
        fn current(r: &Option<Current>) -> (i64, Option<&Value>) {
            match r.as_ref().filter(|r| r.live) {
                Some(r) => (r.version, Some(&r.value)),
                None => (0, None),
            }
        }
        let mut out = Map::new();
        out.insert("key".into(), json!(key));
        match decide(op, row.as_ref(), now) {
            Decision::Refuse(reason) => {
                let (version, value) = current(&row);
                out.insert("applied".into(), json!(false));
                out.insert("reason".into(), json!(reason));
                out.insert("version".into(), json!(version));
                match (value, op) {
                    (Some(v), _) => out.insert("value".into(), v.clone()),
                    (None, Op::Incr { .. }) => out.insert("value".into(), json!(0)),
                    (None, _) => None,
                };
                return Ok(Value::Object(out));
            }
            Decision::Holds => {
                let (version, value) = current(&row);
                out.insert("applied".into(), json!(true));
                out.insert("version".into(), json!(version));
                if let Some(v) = value {
                    out.insert("value".into(), v.clone());
                }
                return Ok(Value::Object(out));
            }
            Decision::Delete => {
                let (version, _) = current(&row);
                KV_DELETE.run(s, &[ns.into(), key.into()]);
                out.insert("applied".into(), json!(true));
                out.insert("version".into(), json!(version));
                return Ok(Value::Object(out));
            }
            Decision::Write { value, expires_at } => {
                let args: [DatumWithOid; 5] = [
                    ns.into(),
                    key.into(),
                    pgrx::JsonB(value.clone()).into(),
                    expires_at.map(crate::state::timestamp).into(),
                    at.into(),
                ];
                let q = if row.is_some() { &KV_UPDATE } else { &KV_INSERT };
                let Some(w) = q.run(s, &args).next() else {
                    continue; // created meanwhile: decide again on its row
                };
                out.insert("applied".into(), json!(true));
                out.insert("version".into(), json!(w.req::<i64>("version")));
                out.insert("value".into(), value);
                out.insert("expiresAt".into(), json!(w.get::<String>("expires_text")));
                return Ok(Value::Object(out));
            }
        }
    }
    Err(QueenError::invalid(
        "key",
        format!("\"{}\" of namespace \"{ns}\" kept changing under the write: try again", shorten(key)),
    ))
}

/// Maintenance: delete up to `limit` rows whose expiry passed; how many.
pub fn expire(s: &mut Spi, now: Micros, limit: i32) -> i64 {
    let args: [DatumWithOid; 2] = [crate::state::timestamp(now).into(), limit.into()];
    KV_EXPIRE.run(s, &args).first().req::<i64>("deleted")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: Value) -> QueenResult<Parsed> {
        parse(0, &v)
    }

    fn row(value: Value, version: i64, live: bool) -> Current {
        Current { value, version, live, expires_at: Some(5_000_000) }
    }

    #[test]
    fn parsing() {
        let put = p(json!({"op": "put", "ns": "app", "key": "k", "value": null, "ttlSeconds": 60})).unwrap();
        assert_eq!(
            put.op,
            Op::Put {
                ns: "app".into(),
                key: "k".into(),
                value: Value::Null,
                expiry: Expiry::Ttl(60),
                expect: None,
                if_absent: false
            }
        );
        let pia = p(json!({"op": "putIfAbsent", "ns": "a", "key": "k", "value": 1, "forever": true, "required": true}))
            .unwrap();
        assert!(pia.required);
        assert!(matches!(pia.op, Op::Put { expect: Some(0), if_absent: true, expiry: Expiry::Forever, .. }));
        let page = p(json!({"op": "getPrefix", "ns": "a", "prefix": "x:", "limit": 100000})).unwrap();
        assert!(matches!(page.op, Op::GetPrefix { limit: MAX_PAGE, keys_only: false, .. }));
        let incr = p(json!({"op": "incr", "ns": "a", "key": "c", "max": 3, "ttlSeconds": 1})).unwrap();
        assert!(matches!(incr.op, Op::Incr { delta: 1, max: Some(3), min: None, .. }));

        let refused = [
            (json!([1]), "operations[0]"),
            (json!({"ns": "a", "key": "k"}), "op"),
            (json!({"op": "fly", "ns": "a", "key": "k"}), "must be get"),
            (json!({"op": "get", "ns": "NOT A NAMESPACE", "key": "k"}), "' '"),
            (json!({"op": "get", "ns": "", "key": "k"}), "1 to 128"),
            (json!({"op": "get", "ns": "a"}), "key"),
            (json!({"op": "get", "ns": "a", "key": ""}), "1 to 1024"),
            (json!({"op": "get", "ns": "a", "key": "x".repeat(1025)}), "1 to 1024"),
            (json!({"op": "put", "ns": "a", "key": "k", "value": 1}), "expires"),
            (json!({"op": "put", "ns": "a", "key": "k", "value": 1, "ttlSeconds": 1, "forever": true}), "not both"),
            (json!({"op": "put", "ns": "a", "key": "k", "value": 1, "ttlSeconds": 0}), "from 1"),
            (json!({"op": "put", "ns": "a", "key": "k", "value": 1, "forever": false}), "must be true"),
            (json!({"op": "put", "ns": "a", "key": "k", "ttlSeconds": 1}), "null is a value"),
            (json!({"op": "put", "ns": "a", "key": "k", "value": 1, "ttlSeconds": 1, "expect": -1}), "expect"),
            (json!({"op": "putIfAbsent", "ns": "a", "key": "k", "value": 1, "ttlSeconds": 1, "expect": 3}), "expect"),
            (json!({"op": "check", "ns": "a", "key": "k"}), "expect"),
            (json!({"op": "delete", "ns": "a", "key": "k", "ttlSeconds": 1}), "does not apply"),
            (json!({"op": "delete", "ns": "a", "key": "k", "expect": 0}), "1 or more"),
            (json!({"op": "incr", "ns": "a", "key": "k", "ttlSeconds": 1, "delta": 1.5}), "integer"),
            (json!({"op": "incr", "ns": "a", "key": "k", "ttlSeconds": 1, "min": 5, "max": 1}), "above max"),
            (json!({"op": "incr", "ns": "a", "key": "k", "ttlSeconds": 1, "expect": 1}), "incr"),
            (json!({"op": "getMany", "ns": "a", "keys": []}), "1 to 1000"),
            (json!({"op": "getMany", "ns": "a", "keys": [1]}), "keys[0]"),
            (json!({"op": "getPrefix", "ns": "a", "prefix": ""}), "not a table"),
            (json!({"op": "get", "ns": "a", "key": "k", "required": "yes"}), "boolean"),
            (
                json!({"op": "put", "ns": "a", "key": "k", "value": "x".repeat(MAX_VALUE_BYTES), "ttlSeconds": 1}),
                "bytes",
            ),
        ];
        for (v, why) in refused {
            let e = p(v.clone()).expect_err(&v.to_string()[..v.to_string().len().min(80)]).to_string();
            assert!(e.contains(why), "{e} should say {why}");
        }
    }

    #[test]
    fn the_permits_of_locks_are_read_here_and_written_by_queen_lock_only() {
        // Read under the grants of their lock namespace.
        for (ns, grant) in [("queen-locks", "queen-locks"), ("queen-locks/billing", "billing")] {
            for op in [
                json!({"op": "get", "ns": ns, "key": "job#0"}),
                json!({"op": "getMany", "ns": ns, "keys": ["job#0"]}),
                json!({"op": "getPrefix", "ns": ns, "prefix": "job#"}),
                json!({"op": "check", "ns": ns, "key": "job#0", "expect": 4, "required": true}),
            ] {
                let parsed = p(op).unwrap();
                assert_eq!((parsed.op.grant_namespace(), parsed.op.privilege()), (grant, Privilege::KvRead));
            }
            // Never written here, whatever the grants.
            for op in [
                json!({"op": "put", "ns": ns, "key": "job#0", "value": {"owner": "me"}, "forever": true}),
                json!({"op": "putIfAbsent", "ns": ns, "key": "job#0", "value": 1, "ttlSeconds": 60}),
                json!({"op": "delete", "ns": ns, "key": "job#0"}),
                json!({"op": "incr", "ns": ns, "key": "n", "ttlSeconds": 60}),
            ] {
                let e = p(op.clone()).unwrap_err().to_string();
                assert!(
                    e.contains("operations[0].ns") && e.contains("only by queen_lock") && e.contains(ns),
                    "{op}: {e}"
                );
            }
        }
        // Other namespaces are as they were; a '/' names lock namespaces only.
        assert_eq!(p(json!({"op": "get", "ns": "billing", "key": "k"})).unwrap().op.grant_namespace(), "billing");
        for (ns, why) in [
            ("queen-locks/", "1 to 128"),
            ("queen-locks/a b", "' '"),
            ("queen-locks/queen-locks", "no namespace"),
            ("a/b", "'/'"),
        ] {
            let e = p(json!({"op": "get", "ns": ns, "key": "k"})).unwrap_err().to_string();
            assert!(e.contains(why), "{ns}: {e}");
        }
    }

    #[test]
    fn writes() {
        let now = 1_000_000;
        let put = |expect| Op::Put {
            ns: "a".into(),
            key: "k".into(),
            value: json!(2),
            expiry: Expiry::Ttl(10),
            expect,
            if_absent: false,
        };
        let write2 = Decision::Write { value: json!(2), expires_at: Some(11_000_000) };
        let live = row(json!(1), 7, true);
        let dead = row(json!({"count": 0}), 7, false);
        let cases: Vec<(Op, Option<&Current>, Decision)> = vec![
            (put(None), None, write2.clone()),
            (put(None), Some(&live), write2.clone()),
            (put(Some(0)), None, write2.clone()),
            (put(Some(0)), Some(&dead), write2.clone()), // an expired row does not exist
            (put(Some(0)), Some(&live), Decision::Refuse("exists")),
            (put(Some(7)), Some(&live), write2.clone()),
            (put(Some(6)), Some(&live), Decision::Refuse("version")),
            (put(Some(7)), None, Decision::Refuse("absent")), // creates nothing
            (put(Some(7)), Some(&dead), Decision::Refuse("absent")),
            (Op::Delete { ns: "a".into(), key: "k".into(), expect: None }, Some(&live), Decision::Delete),
            (Op::Delete { ns: "a".into(), key: "k".into(), expect: None }, Some(&dead), Decision::Refuse("absent")),
            (Op::Delete { ns: "a".into(), key: "k".into(), expect: None }, None, Decision::Refuse("absent")),
            (Op::Delete { ns: "a".into(), key: "k".into(), expect: Some(3) }, Some(&live), Decision::Refuse("version")),
            (Op::Check { ns: "a".into(), key: "k".into(), expect: 7 }, Some(&live), Decision::Holds),
            (Op::Check { ns: "a".into(), key: "k".into(), expect: 0 }, Some(&dead), Decision::Holds),
            (Op::Check { ns: "a".into(), key: "k".into(), expect: 0 }, Some(&live), Decision::Refuse("exists")),
            (Op::Check { ns: "a".into(), key: "k".into(), expect: 8 }, Some(&live), Decision::Refuse("version")),
        ];
        for (op, r, want) in cases {
            assert_eq!(decide(&op, r, now), want, "{op:?} on {r:?}");
        }
    }

    #[test]
    fn increments() {
        let now = 1_000_000;
        let incr =
            |delta, min, max| Op::Incr { ns: "a".into(), key: "c".into(), delta, min, max, expiry: Expiry::Ttl(3600) };
        let at = |n: i64, exp| Decision::Write { value: json!(n), expires_at: exp };
        let two = row(json!(2), 1, true);
        let three = row(json!(3), 1, true);
        let object = row(json!({"count": 0}), 1, true);
        let dead_object = row(json!({"count": 0}), 1, false);
        let top = row(json!(i64::MAX), 1, true);
        let cases: Vec<(Op, Option<&Current>, Decision)> = vec![
            // A live row keeps its expiry; a new or expired one takes the ttl.
            (incr(1, None, Some(3)), Some(&two), at(3, Some(5_000_000))),
            (incr(1, None, None), None, at(1, Some(3_601_000_000))),
            (incr(1, None, Some(3)), Some(&three), Decision::Refuse("limit")),
            // The first increment of a window is bounded too.
            (incr(10, None, Some(5)), None, Decision::Refuse("limit")),
            (incr(-5, Some(0), None), Some(&two), Decision::Refuse("limit")),
            (incr(-2, Some(0), None), Some(&two), at(0, Some(5_000_000))),
            (incr(1, None, None), Some(&object), Decision::Refuse("type")),
            // An expired value of another type counts as nothing.
            (incr(1, None, None), Some(&dead_object), at(1, Some(3_601_000_000))),
            (incr(1, None, None), Some(&top), Decision::Refuse("limit")),
        ];
        for (op, r, want) in cases {
            assert_eq!(decide(&op, r, now), want, "{op:?} on {r:?}");
        }
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end("walk:").as_deref(), Some("walk;"));
        assert_eq!(prefix_end("a%_").as_deref(), Some("a%`"));
        assert_eq!(prefix_end("x\u{D7FF}").as_deref(), Some("x\u{E000}"));
        assert_eq!(prefix_end("x\u{10FFFF}").as_deref(), Some("y"));
        assert_eq!(prefix_end("\u{10FFFF}\u{10FFFF}"), None);
        // Every string with the prefix sorts below the end, byte for byte.
        for p in ["walk:", "é", "x\u{10FFFF}"] {
            let end = prefix_end(p).unwrap();
            for s in [p.to_string(), format!("{p}\u{10FFFF}\u{10FFFF}"), format!("{p}zzz")] {
                assert!(s.as_bytes() < end.as_bytes(), "{s:?} < {end:?}");
            }
        }
    }
}
