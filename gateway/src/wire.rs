//! Queen MQ's JSON shapes, and the conversions between them and queen's SQL results.
//!
//! Queen's wire format mixes cases (a push result says `transaction_id`, a popped message
//! `transactionId`); each shape here is the one Queen's server sends and its clients read.

use std::borrow::Cow;
use std::sync::LazyLock;

use axum::body::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio_postgres::types::Json;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};

/// Queen's name for queue mode (no consumer group); queen's is NULL.
pub const QUEUE_MODE: &str = "__QUEUE_MODE__";

/// A request body as a JSON object. An empty body is `{}`: Queen's clients send none where
/// their body would be empty (a lease extend, a seek to the end).
pub fn object(b: &Bytes) -> ApiResult<Map<String, Value>> {
    body(b)
}

/// An optional string field: absent or null is None; another type is bad input.
pub fn opt_str<'a>(m: &'a Map<String, Value>, key: &str, what: &str) -> ApiResult<Option<&'a str>> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::bad_request(format!("{what} must be a string"))),
    }
}

/// A consumer group as queen takes it: Queen's queue-mode name (or none) is NULL.
pub fn group(g: Option<&str>) -> Option<&str> {
    g.filter(|g| !g.is_empty() && *g != QUEUE_MODE)
}

/// A consumer group as Queen shows it.
pub fn show_group(g: Option<String>) -> String {
    g.unwrap_or_else(|| QUEUE_MODE.to_string())
}

/// `2026-12-01T10:11:12.123456Z`: a message's createdAt, to the microsecond as Queen sends it
/// (its clients order by it).
pub fn micros(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// `2026-12-01T10:11:12.123Z`: Queen's other timestamps.
pub fn millis(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A timestamp argument (`subscriptionFrom`, a seek's `timestamp`, the DLQ's `from`/`to`):
/// RFC 3339, or a date alone (midnight UTC).
pub fn parse_time(what: &str, s: &str) -> ApiResult<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc());
    }
    Err(ApiError::bad_request(format!("{what} must be an ISO 8601 timestamp, got \"{}\"", shorten(s))))
}

/// A uuid argument in a path or field.
pub fn parse_uuid(what: &str, s: &str) -> ApiResult<Uuid> {
    Uuid::parse_str(s).map_err(|_| ApiError::bad_request(format!("{what} must be a uuid, got \"{}\"", shorten(s))))
}

/// User text quoted in an error: at most 100 characters of it.
pub fn shorten(s: &str) -> String {
    match s.char_indices().nth(100) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// A field of a request body as it came, parsed further only where it is used: the hot routes
/// (push, pop, ack) read their bodies into borrowed fields and pass payloads through as raw
/// JSON text, never building a tree of them (that cost 4–5 µs a message).
pub type Raw<'a> = Option<&'a RawValue>;

/// A request body read into `T` (whose fields are `Raw`); an empty body is `{}`.
pub fn body<'a, T: Deserialize<'a>>(body: &'a Bytes) -> ApiResult<T> {
    let text: &'a [u8] = if body.iter().all(u8::is_ascii_whitespace) { b"{}" } else { body };
    if nested_deeper_than(text, MAX_DEPTH) {
        // Payloads pass through unparsed (RawValue) to PostgreSQL, whose parser would run out
        // of stack on them: refused here, as bad input.
        return Err(ApiError::bad_request(format!("the request body nests JSON deeper than {MAX_DEPTH} levels")));
    }
    from_object(text, "the request body", "must be a JSON object")
}

/// How deep a request's JSON (a payload included) may nest.
pub const MAX_DEPTH: usize = 512;

/// Whether JSON `text` opens more than `max` arrays and objects inside one another (strings
/// skipped; malformed text is left to the parser).
pub fn nested_deeper_than(text: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// `text` read into `T` if it is a JSON object, else `{what} {not_object}`: serde reads a
/// struct from an array too (its fields in order), which no body or item may be. Bad JSON, or
/// an object serde refuses (a duplicate field), is bad input that says why.
fn from_object<'a, T: Deserialize<'a>>(text: &'a [u8], what: &str, not_object: &str) -> ApiResult<T> {
    let object = text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    match serde_json::from_slice(text) {
        Err(e) if e.is_syntax() || e.is_eof() => Err(ApiError::bad_request(format!("{what} is not valid JSON: {e}"))),
        Ok(t) if object => Ok(t),
        Err(e) if object => Err(ApiError::bad_request(format!("{what} is not valid: {e}"))),
        _ => Err(ApiError::bad_request(format!("{what} {not_object}"))),
    }
}

/// A string field; absent or null is None, another type is bad input (`{what} must be a string`).
pub fn text<'a>(raw: Raw<'a>, what: &str) -> ApiResult<Option<Cow<'a, str>>> {
    let Some(raw) = raw else { return Ok(None) };
    if let Ok(s) = serde_json::from_str::<&'a str>(raw.get()) {
        return Ok(Some(Cow::Borrowed(s)));
    }
    // A string with escapes cannot be borrowed.
    match serde_json::from_str::<Option<String>>(raw.get()) {
        Ok(s) => Ok(s.map(Cow::Owned)),
        Err(_) => Err(ApiError::bad_request(format!("{what} must be a string"))),
    }
}

/// An array field's elements, still raw; None when absent or not an array.
pub fn array<'a>(raw: Raw<'a>) -> Option<Vec<&'a RawValue>> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
}

/// One element of an array field read into `T`, or `{what} must be an object`.
pub fn element<'a, T: Deserialize<'a>>(raw: &'a RawValue, what: &str) -> ApiResult<T> {
    from_object(raw.get().as_bytes(), what, "must be an object")
}

/// `"completed"`, an ack's status when it gives none.
pub static COMPLETED: LazyLock<Box<RawValue>> =
    LazyLock::new(|| RawValue::from_string("\"completed\"".into()).expect("valid JSON"));

/// A popped message (queen.message) as Queen's pop returns it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    id: Uuid,
    pub transaction_id: String,
    trace_id: Option<Uuid>,
    /// The payload, as the database's text of it.
    data: Box<RawValue>,
    producer_sub: Option<()>,
    created_at: String,
    pub queue: String,
    pub partition: String,
    pub partition_id: Uuid,
    pub lease_id: Option<Uuid>,
    lease_expires_at: Option<String>,
    consumer_group: String,
    /// Queen counts retries; queen counts attempts (the first delivery is attempt 1).
    retry_count: i32,
    attempt: i32,
}

impl Message {
    pub fn from_row(r: &Row) -> Message {
        let attempt: i32 = r.get("attempt");
        Message {
            id: r.get("message_id"),
            transaction_id: r.get("transaction_id"),
            trace_id: r.get("trace_id"),
            data: r.get::<_, Json<Box<RawValue>>>("payload").0,
            producer_sub: None,
            created_at: micros(r.get("created_at")),
            queue: r.get("queue"),
            partition: r.get("partition"),
            partition_id: r.get("partition_id"),
            lease_id: r.get("lease_id"),
            lease_expires_at: r.get::<_, Option<DateTime<Utc>>>("lease_expires_at").map(millis),
            consumer_group: show_group(r.get("consumer_group")),
            retry_count: attempt - 1,
            attempt,
        }
    }
}

/// A dead letter (queen.dead_letters_view) as Queen's DLQ route returns it.
pub fn dead_letter(r: &Row) -> Value {
    let attempts: i32 = r.get("attempts");
    json!({
        "id": r.get::<_, Uuid>("message_id"),
        "transactionId": r.get::<_, String>("transaction_id"),
        "partitionId": r.get::<_, Uuid>("partition_id"),
        "queue": r.get::<_, Option<String>>("queue"),
        "partition": r.get::<_, Option<String>>("partition"),
        "consumerGroup": show_group(r.get("consumer_group")),
        "errorMessage": r.get::<_, Option<String>>("error"),
        "retryCount": attempts,
        "data": r.get::<_, Option<Value>>("payload"),
        "traceId": r.get::<_, Option<Uuid>>("trace_id"),
        "producerSub": null,
        "createdAt": r.get::<_, Option<DateTime<Utc>>>("created_at").map(millis),
        "failedAt": millis(r.get("failed_at")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_depth() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(!nested_deeper_than(deep(3).as_bytes(), 3));
        assert!(nested_deeper_than(deep(4).as_bytes(), 3));
        assert!(!nested_deeper_than(br#"{"a": "[[[[[[", "b": "\\\"[[[[["}"#, 1));
        assert!(nested_deeper_than(br#"{"a": "x\\", "b": [[1]]}"#, 2));
        assert!(!nested_deeper_than(br#"[1, [2], {"a": [3]}]"#, 3));
    }

    #[test]
    fn bodies() {
        assert!(object(&Bytes::from_static(b"")).unwrap().is_empty());
        assert!(object(&Bytes::from_static(b" \n")).unwrap().is_empty());
        assert_eq!(object(&Bytes::from_static(b"{\"a\":1}")).unwrap()["a"], 1);
        assert_eq!(object(&Bytes::from_static(b"[1]")).unwrap_err().status, 400);
        assert!(object(&Bytes::from_static(b"{")).unwrap_err().message.contains("not valid JSON"));
    }

    /// serde reads a struct from an array (its fields in order): a body or an item that is an
    /// array is still refused.
    #[test]
    fn a_struct_is_read_from_an_object_only() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct Two<'a> {
            #[serde(borrow)]
            a: Raw<'a>,
            b: Raw<'a>,
        }
        let e = body::<Two>(&Bytes::from_static(b" [1, 2]")).unwrap_err();
        assert_eq!(e.status, 400);
        assert_eq!(e.message, "the request body must be a JSON object");
        let raw: Box<RawValue> = serde_json::from_str("[1, 2]").unwrap();
        assert_eq!(element::<Two>(&raw, "items[0]").unwrap_err().message, "items[0] must be an object");
        let e = body::<Two>(&Bytes::from_static(b"{\"a\": 1, \"a\": 2}")).unwrap_err();
        assert!(e.message.starts_with("the request body is not valid: duplicate field"), "{}", e.message);
        assert!(body::<Two>(&Bytes::from_static(b"{\"a\": [1]}")).unwrap().a.is_some());
        assert!(body::<Two>(&Bytes::from_static(b"[1,")).unwrap_err().message.contains("not valid JSON"));
    }

    #[test]
    fn groups() {
        assert_eq!(group(None), None);
        assert_eq!(group(Some(QUEUE_MODE)), None);
        assert_eq!(group(Some("")), None);
        assert_eq!(group(Some("g")), Some("g"));
        assert_eq!(show_group(None), QUEUE_MODE);
    }

    #[test]
    fn times() {
        let t = parse_time("t", "2025-01-01T00:00:00.123456Z").unwrap();
        assert_eq!(micros(t), "2025-01-01T00:00:00.123456Z");
        assert_eq!(millis(t), "2025-01-01T00:00:00.123Z");
        assert_eq!(micros(parse_time("t", "2025-01-01T01:00:00+01:00").unwrap()), "2025-01-01T00:00:00.000000Z");
        assert_eq!(micros(parse_time("t", "2025-02-01").unwrap()), "2025-02-01T00:00:00.000000Z");
        let e = parse_time("subscriptionFrom", "yesterday").unwrap_err();
        assert_eq!(e.message, "subscriptionFrom must be an ISO 8601 timestamp, got \"yesterday\"");
        assert_eq!(shorten(&"x".repeat(150)).chars().count(), 101);
    }
}
