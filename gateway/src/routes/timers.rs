//! Timers, as Queen MQ's `/api/v1/timers` has them (queen's `queen_schedule`,
//! `queen_cancel_timer`, `queen_timers`):
//! - `POST /api/v1/timers` `{"operations": [...]}`: `schedule` / `reschedule` (the same upsert)
//!   and `cancel`, in one database transaction; `{"results": [...]}` index-aligned.
//! - `GET /api/v1/timers/{queue}/{*key}`: one pending timer (`found: false` when none).
//! - `GET /api/v1/timers/{queue}?after=&limit=`: a keyset page of a queue's pending timers.
//! - `DELETE /api/v1/timers/{queue}/{*key}?txn=`: cancel; `absent` (not ok) when none was
//!   pending, which may mean it fired already.
//!
//! A payload travels as base64 of its JSON text (Queen's wire); it becomes the message's JSON
//! payload. The delay is relative (`delayMs`, negative allowed: due now); the server's clock
//! decides. Bad input is 400 with `code: "timers_bad_request"`.

use std::collections::{HashMap, HashSet};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::Json;
use base64::Engine;
use deadpool_postgres::GenericClient;
use serde_json::{json, Map, Value};

use crate::auth::Caller;
use crate::db::{self, Use};
use crate::error::{ApiError, ApiResult};
use crate::routes::AppState;
use crate::{sql, wire};

/// Operations one call may carry.
pub const MAX_OPS: usize = 1000;
/// A page of the list, by default and at most (a larger `limit` is clamped, as Queen does).
const DEFAULT_PAGE: i64 = 100;
const MAX_PAGE: i64 = 1000;

/// Fields the server owns: present in an operation they are refused, never dropped.
const SERVER_OWNED: &[&str] = &[
    "producerSub",
    "producer_sub",
    "messageId",
    "message_id",
    "tenant",
    "tenantId",
    "tenant_id",
    "deliverAt",
    "deliver_at",
    "delaySeconds",
    "delay_seconds",
    "attempts",
    "claimToken",
    "claim_token",
    "claimedUntil",
];

/// One checked operation.
#[derive(Debug, Clone, PartialEq)]
pub enum TimerOp {
    Schedule {
        queue: String,
        key: String,
        payload: Value,
        delay_ms: i64,
        partition: Option<String>,
        txn: Option<String>,
        reschedule: bool,
    },
    Cancel {
        queue: String,
        key: String,
        txn: Option<String>,
    },
}

impl TimerOp {
    fn target(&self) -> (&str, &str) {
        match self {
            TimerOp::Schedule { queue, key, .. } | TimerOp::Cancel { queue, key, .. } => (queue, key),
        }
    }
}

/// A 400 of the timer surface carries Queen's code.
pub fn coded(mut e: ApiError) -> ApiError {
    if e.status == axum::http::StatusCode::BAD_REQUEST {
        e.extra.get_or_insert_with(Default::default).insert("code".into(), json!("timers_bad_request"));
    }
    e
}

fn field<'a>(m: &'a Map<String, Value>, k: &str, at: &str) -> ApiResult<Option<&'a str>> {
    wire::opt_str(m, k, &format!("{at}.{k}"))
}

/// Read operation `i`.
pub fn parse_op(i: usize, v: &Value) -> ApiResult<TimerOp> {
    let at = format!("operations[{i}]");
    let Value::Object(m) = v else {
        return Err(ApiError::bad_request(format!("{at} must be an object")));
    };
    if let Some(f) = m.keys().find(|k| SERVER_OWNED.contains(&k.as_str()) || k.starts_with('_')) {
        return Err(ApiError::bad_request(format!(
            "{at}.{f} is server-owned and cannot be supplied (the delivery time is now + delayMs, the message id is minted by the broker)"
        )));
    }
    let required = |k: &str| -> ApiResult<String> {
        match field(m, k, &at)? {
            Some(s) if !s.is_empty() => Ok(s.to_string()),
            _ => Err(ApiError::bad_request(format!("{at}.{k} is required (a non-empty string)"))),
        }
    };
    let queue = required("queue")?;
    let key = required("timerKey")?;
    let txn = field(m, "txn", &at)?.map(str::to_string);
    match field(m, "op", &at)? {
        Some(op @ ("schedule" | "reschedule")) => {
            if m.get("payloadZstd").and_then(Value::as_bool) == Some(true) {
                return Err(ApiError::bad_request(format!(
                    "{at}.payloadZstd: compressed timer payloads are not supported by this gateway; send the payload uncompressed"
                )));
            }
            let encoded = field(m, "payload", &at)?.ok_or_else(|| {
                ApiError::bad_request(format!("{at}.payload is required (base64 of the JSON payload)"))
            })?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| ApiError::bad_request(format!("{at}.payload is not base64: {e}")))?;
            let payload: Value = serde_json::from_slice(&bytes)
                .map_err(|e| ApiError::bad_request(format!("{at}.payload is not base64 of a JSON document: {e}")))?;
            let delay_ms = match m.get("delayMs") {
                Some(d) => d.as_i64().ok_or_else(|| {
                    ApiError::bad_request(format!("{at}.delayMs must be a whole number of milliseconds"))
                })?,
                None => return Err(ApiError::bad_request(format!("{at}.delayMs is required"))),
            };
            let partition = field(m, "partition", &at)?.map(str::to_string);
            Ok(TimerOp::Schedule { queue, key, payload, delay_ms, partition, txn, reschedule: op == "reschedule" })
        }
        Some("cancel") => Ok(TimerOp::Cancel { queue, key, txn }),
        _ => Err(ApiError::bad_request(format!("{at}.op must be \"schedule\", \"reschedule\" or \"cancel\""))),
    }
}

/// Read a call's operations: at most MAX_OPS, each key once (the order of locks is total).
pub fn parse_ops(v: &Value) -> ApiResult<Vec<TimerOp>> {
    let Value::Array(items) = v else {
        return Err(ApiError::bad_request("operations must be an array"));
    };
    if items.len() > MAX_OPS {
        return Err(ApiError::bad_request(format!("operations holds {} entries, the limit is {MAX_OPS}", items.len())));
    }
    let ops = items.iter().enumerate().map(|(i, v)| parse_op(i, v)).collect::<ApiResult<Vec<_>>>()?;
    let mut seen = HashSet::new();
    for (i, op) in ops.iter().enumerate() {
        if !seen.insert(op.target()) {
            let (q, k) = op.target();
            return Err(ApiError::bad_request(format!(
                "operations[{i}]: timer \"{}\" of queue \"{}\" appears twice in one call",
                wire::shorten(k),
                wire::shorten(q)
            )));
        }
    }
    Ok(ops)
}

/// Apply the operations in `client`'s transaction, in order; one result each.
pub async fn run<C: GenericClient>(client: &C, ops: &[TimerOp]) -> ApiResult<Vec<Value>> {
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        out.push(match op {
            TimerOp::Schedule { queue, key, payload, delay_ms, partition, txn, .. } => {
                let txn = txn.clone().unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
                let r = db::query_one(client, sql::TIMER_SCHEDULE, &[queue, key, payload, delay_ms, partition, &txn])
                    .await?;
                json!({"ok": true, "status": r.get::<_, String>("status"), "queue": queue, "timerKey": key,
                       "txn": r.get::<_, String>("transaction_id"),
                       "messageId": r.get::<_, Option<uuid::Uuid>>("message_id"),
                       "deliverAt": r.get::<_, String>("deliver_at")})
            }
            TimerOp::Cancel { queue, key, txn } => cancel_one(client, queue, key, txn.as_deref()).await?,
        });
    }
    Ok(out)
}

async fn cancel_one<C: GenericClient>(client: &C, queue: &str, key: &str, txn: Option<&str>) -> ApiResult<Value> {
    let cancelled: bool = db::query_one(client, sql::TIMER_CANCEL, &[&queue, &key]).await?.get(0);
    Ok(json!({"ok": cancelled, "status": if cancelled { "cancelled" } else { "absent" },
              "queue": queue, "timerKey": key, "txn": txn}))
}

/// `POST /api/v1/timers`.
pub async fn batch(State(st): State<AppState>, caller: Caller, body: Bytes) -> ApiResult<Json<Value>> {
    let m = wire::object(&body).map_err(coded)?;
    let ops = parse_ops(m.get("operations").unwrap_or(&Value::Null)).map_err(coded)?;
    let mut client = st.db.get(Use::Request, &caller).await?;
    let tx = client.transaction().await?;
    let results = run(&tx, &ops).await.map_err(coded)?;
    tx.commit().await?;
    Ok(Json(json!({"results": results})))
}

/// `DELETE /api/v1/timers/{queue}/{*key}?txn=`.
pub async fn cancel(
    State(st): State<AppState>,
    caller: Caller,
    Path((queue, key)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let client = st.db.get(Use::Request, &caller).await?;
    Ok(Json(cancel_one(&client, &queue, &key, q.get("txn").map(String::as_str)).await.map_err(coded)?))
}

fn timer_json(r: &tokio_postgres::Row) -> Value {
    let payload: String = r.get("payload");
    json!({
        "timerKey": r.get::<_, String>("timer_key"),
        "partition": r.get::<_, String>("partition"),
        "payload": base64::engine::general_purpose::STANDARD.encode(payload.as_bytes()),
        "encrypted": false,
        "txn": r.get::<_, String>("transaction_id"),
        "messageId": r.get::<_, Option<uuid::Uuid>>("message_id"),
        "deliverAt": r.get::<_, String>("deliver_at"),
        "scheduledAt": r.get::<_, String>("scheduled_at"),
        "attempts": r.get::<_, i32>("attempts"),
        "lastError": r.get::<_, Option<String>>("last_error"),
    })
}

/// `GET /api/v1/timers/{queue}/{*key}`.
pub async fn peek(
    State(st): State<AppState>,
    caller: Caller,
    Path((queue, key)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let client = st.db.get(Use::Request, &caller).await?;
    let rows =
        db::query(&client, sql::TIMERS, &[&queue, &Some(&key), &None::<String>, &None::<i32>]).await.map_err(coded)?;
    Ok(Json(match rows.first() {
        Some(r) => {
            let mut v = timer_json(r);
            v["found"] = json!(true);
            v["queue"] = json!(queue);
            v
        }
        None => json!({"found": false, "queue": queue, "timerKey": key}),
    }))
}

/// `GET /api/v1/timers/{queue}?after=&limit=`.
pub async fn list(
    State(st): State<AppState>,
    caller: Caller,
    Path(queue): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let limit = match q.get("limit").filter(|v| !v.is_empty()) {
        None => DEFAULT_PAGE,
        Some(v) => v
            .parse::<i64>()
            .map_err(|_| {
                coded(ApiError::bad_request(format!("limit must be a whole number, got \"{}\"", wire::shorten(v))))
            })?
            .clamp(1, MAX_PAGE),
    };
    let after = q.get("after").filter(|v| !v.is_empty());
    let client = st.db.get(Use::Request, &caller).await?;
    let page = (limit + 1) as i32;
    let rows = db::query(&client, sql::TIMERS, &[&queue, &None::<String>, &after, &Some(page.min(MAX_PAGE as i32))])
        .await
        .map_err(coded)?;
    let mut out: Vec<Value> = rows.iter().map(timer_json).collect();
    let truncated = out.len() as i64 > limit;
    out.truncate(limit as usize);
    let next = if truncated { out.last().map(|r| r["timerKey"].clone()) } else { None };
    Ok(Json(json!({"queue": queue, "rows": out, "truncated": truncated, "nextAfter": next})))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(v: Value) -> ApiResult<TimerOp> {
        parse_op(0, &v)
    }

    #[test]
    fn operations_are_read_as_queen_sends_them() {
        let payload = base64::engine::general_purpose::STANDARD.encode(br#"{"a":1}"#);
        let got =
            op(json!({"op": "schedule", "queue": "q", "timerKey": "k", "payload": payload, "delayMs": -5, "txn": "t"}))
                .unwrap();
        assert_eq!(
            got,
            TimerOp::Schedule {
                queue: "q".into(),
                key: "k".into(),
                payload: json!({"a": 1}),
                delay_ms: -5,
                partition: None,
                txn: Some("t".into()),
                reschedule: false
            }
        );
        assert_eq!(
            op(json!({"op": "cancel", "queue": "q", "timerKey": "k"})).unwrap(),
            TimerOp::Cancel { queue: "q".into(), key: "k".into(), txn: None }
        );
    }

    #[test]
    fn bad_operations_are_refused_with_the_reason() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
        let table = [
            (
                json!({"op": "schedule", "queue": "q", "timerKey": "k", "payload": b64("1"), "delayMs": 1, "producerSub": "x"}),
                "server-owned",
            ),
            (
                json!({"op": "schedule", "queue": "q", "timerKey": "k", "payload": b64("1"), "deliverAt": 5}),
                "server-owned",
            ),
            (json!({"op": "schedule", "queue": "q", "timerKey": "k", "payload": "%%", "delayMs": 1}), "not base64"),
            (
                json!({"op": "schedule", "queue": "q", "timerKey": "k", "payload": b64("{x"), "delayMs": 1}),
                "JSON document",
            ),
            (json!({"op": "schedule", "queue": "q", "timerKey": "k", "payload": b64("1")}), "delayMs is required"),
            (
                json!({"op": "schedule", "queue": "q", "timerKey": "k", "payload": b64("1"), "delayMs": 1.5}),
                "whole number",
            ),
            (
                json!({"op": "schedule", "queue": "q", "timerKey": "k", "payload": b64("1"), "delayMs": 1, "payloadZstd": true}),
                "not supported",
            ),
            (json!({"op": "schedule", "queue": "", "timerKey": "k"}), "queue is required"),
            (json!({"op": "fire", "queue": "q", "timerKey": "k"}), "op must be"),
            (json!([]), "must be an object"),
        ];
        for (v, want) in table {
            let e = op(v.clone()).unwrap_err();
            assert!(e.message.contains(want), "{v}: {}", e.message);
        }
    }

    #[test]
    fn a_key_appears_once_a_call() {
        let c = json!({"op": "cancel", "queue": "q", "timerKey": "k"});
        let e = parse_ops(&json!([c, c])).unwrap_err();
        assert!(e.message.contains("appears twice"), "{}", e.message);
        assert!(parse_ops(&json!([c, {"op": "cancel", "queue": "q2", "timerKey": "k"}])).is_ok());
        assert!(parse_ops(&json!({})).is_err());
    }
}
