//! Queen MQ's JSON shapes, and the conversions between them and queen's SQL results.
//!
//! Queen's wire format mixes cases (a push result says `transaction_id`, a popped message
//! `transactionId`); each shape here is the one Queen's server sends and its clients read.

use axum::body::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};
use tokio_postgres::Row;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};

/// Queen's name for queue mode (no consumer group); queen's is NULL.
pub const QUEUE_MODE: &str = "__QUEUE_MODE__";

/// A request body as a JSON object. An empty body is `{}`: Queen's clients send none where
/// their body would be empty (a lease extend, a seek to the end).
pub fn object(body: &Bytes) -> ApiResult<Map<String, Value>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::bad_request("the request body must be a JSON object")),
        Err(e) => Err(ApiError::bad_request(format!("the request body is not valid JSON: {e}"))),
    }
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

/// A popped message (queen.message) as Queen's pop returns it.
pub fn message(r: &Row) -> Value {
    let group: Option<String> = r.get("consumer_group");
    let lease: Option<Uuid> = r.get("lease_id");
    let expires: Option<DateTime<Utc>> = r.get("lease_expires_at");
    let attempt: i32 = r.get("attempt");
    json!({
        "id": r.get::<_, Uuid>("message_id"),
        "transactionId": r.get::<_, String>("transaction_id"),
        "traceId": r.get::<_, Option<Uuid>>("trace_id"),
        "data": r.get::<_, Value>("payload"),
        "producerSub": null,
        "createdAt": micros(r.get("created_at")),
        "queue": r.get::<_, String>("queue"),
        "partition": r.get::<_, String>("partition"),
        "partitionId": r.get::<_, Uuid>("partition_id"),
        "leaseId": lease,
        "leaseExpiresAt": expires.map(millis),
        "consumerGroup": show_group(group),
        // Queen counts retries; queen counts attempts (the first delivery is attempt 1).
        "retryCount": attempt - 1,
        "attempt": attempt,
    })
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
    fn bodies() {
        assert!(object(&Bytes::from_static(b"")).unwrap().is_empty());
        assert!(object(&Bytes::from_static(b" \n")).unwrap().is_empty());
        assert_eq!(object(&Bytes::from_static(b"{\"a\":1}")).unwrap()["a"], 1);
        assert_eq!(object(&Bytes::from_static(b"[1]")).unwrap_err().status, 400);
        assert!(object(&Bytes::from_static(b"{")).unwrap_err().message.contains("not valid JSON"));
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
