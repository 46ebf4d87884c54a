//! `POST /api/v1/push`: every item in one statement (queen_push's batch form), so a request's
//! messages become visible together or not at all. A retried request (Queen's clients retry 5xx
//! and timeouts) is made harmless by the transactionId, which the client generates: the second
//! copy comes back `duplicate`.

use std::borrow::Cow;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::auth::Caller;
use crate::db::{self, Use};
use crate::error::{ApiError, ApiResult};
use crate::routes::AppState;
use crate::sql;
use crate::wire::{self, Raw};

#[derive(Deserialize)]
struct PushBody<'a> {
    #[serde(borrow)]
    items: Raw<'a>,
}

/// One of Queen's push items, each field as it came.
#[derive(Deserialize)]
pub struct ItemIn<'a> {
    #[serde(borrow)]
    queue: Raw<'a>,
    #[serde(borrow)]
    partition: Raw<'a>,
    #[serde(borrow)]
    payload: Raw<'a>,
    #[serde(borrow, rename = "transactionId")]
    transaction_id: Raw<'a>,
    #[serde(borrow, rename = "traceId")]
    trace_id: Raw<'a>,
}

/// An item as queen's batch push takes it. Only the keys Queen's server reads are kept
/// (`producerSub` in a body is ignored, as Queen ignores it without auth).
#[derive(Serialize, Debug)]
pub struct QueenItem<'a> {
    queue: Cow<'a, str>,
    partition: Cow<'a, str>,
    /// The payload's JSON text as it came; a missing payload is null.
    payload: Option<&'a RawValue>,
    #[serde(rename = "transactionId", skip_serializing_if = "Option::is_none")]
    transaction_id: Option<Cow<'a, str>>,
    #[serde(rename = "traceId", skip_serializing_if = "Option::is_none")]
    trace_id: Option<Cow<'a, str>>,
}

/// A push result as Queen's server sends it (its keys are snake_case, but for queueName).
#[derive(Serialize)]
pub struct PushResult {
    pub index: i32,
    pub transaction_id: String,
    pub status: String,
    pub message_id: Uuid,
    pub partition_id: Uuid,
    pub trace_id: Option<String>,
    #[serde(rename = "queueName")]
    pub queue_name: String,
    pub partition: String,
}

pub async fn push(
    State(st): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Vec<PushResult>>)> {
    let b: PushBody = wire::body(&body)?;
    let Some(items) = wire::array(b.items) else {
        return Err(ApiError::bad_request("items array is required"));
    };
    if items.is_empty() {
        return Ok((StatusCode::CREATED, Json(vec![])));
    }
    let items = queen_items(&items, "items")?;
    let client = st.db.get(Use::Request, &caller).await?;
    let results = run(&client, &items).await?;
    st.metrics.pushed.inc_by(results.len() as u64);
    Ok((StatusCode::CREATED, Json(results)))
}

/// Push queen items (already checked) on `client`, in its transaction if it has one open; the
/// results in item order.
pub async fn run<C: deadpool_postgres::GenericClient>(
    client: &C,
    items: &[QueenItem<'_>],
) -> ApiResult<Vec<PushResult>> {
    let rows = db::query(client, sql::PUSH, &[&tokio_postgres::types::Json(items)]).await?;
    Ok(rows
        .iter()
        .map(|r| {
            let index: i32 = r.get("idx");
            PushResult {
                index,
                transaction_id: r.get("transaction_id"),
                status: r.get("status"),
                message_id: r.get("message_id"),
                partition_id: r.get("partition_id"),
                trace_id: items.get(index as usize).and_then(|i| i.trace_id.as_deref().map(str::to_string)),
                queue_name: r.get("queue"),
                partition: r.get("partition"),
            }
        })
        .collect())
}

/// Queen's push items as queen's batch form takes them: a missing partition is `Default`, a
/// missing payload null. Types are checked here so that the error names the item
/// (`items[3].queue must be a string`); `at` names the array.
pub fn queen_items<'a>(items: &[&'a RawValue], at: &str) -> ApiResult<Vec<QueenItem<'a>>> {
    items
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            let item: ItemIn = wire::element(raw, &format!("{at}[{i}]"))?;
            let field = |raw, what: &str| wire::text(raw, &format!("{at}[{i}].{what}"));
            let Some(queue) = field(item.queue, "queue")? else {
                return Err(ApiError::bad_request(format!("{at}[{i}].queue must be a string")));
            };
            Ok(QueenItem {
                queue,
                partition: field(item.partition, "partition")?.unwrap_or(Cow::Borrowed("Default")),
                payload: item.payload,
                transaction_id: field(item.transaction_id, "transactionId")?,
                trace_id: field(item.trace_id, "traceId")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(items: serde_json::Value) -> ApiResult<serde_json::Value> {
        let text = items.to_string();
        let raws: Vec<&RawValue> = serde_json::from_str(&text).unwrap();
        queen_items(&raws, "items").map(|v| serde_json::to_value(v).unwrap())
    }

    #[test]
    fn items_keep_what_queen_reads() {
        let items = check(json!([
            {"queue": "q", "payload": null, "transactionId": "t", "producerSub": "x"},
            {"queue": "q", "partition": "p", "payload": {"a": [1, 2.50]}, "traceId": "0190a5b4-0000-7000-8000-000000000000"},
            {"queue": "q\u{e9}\"", "data": 5},
        ]))
        .unwrap();
        assert_eq!(items[0], json!({"queue": "q", "partition": "Default", "payload": null, "transactionId": "t"}));
        assert_eq!(items[1]["partition"], "p");
        assert_eq!(items[1]["payload"], json!({"a": [1, 2.5]}));
        assert_eq!(items[1]["traceId"], "0190a5b4-0000-7000-8000-000000000000");
        assert_eq!(items[2], json!({"queue": "q\u{e9}\"", "partition": "Default", "payload": null}));
    }

    #[test]
    fn payloads_pass_through_as_written() {
        // A number beyond f64 and key order survive: the payload is never parsed into a tree.
        let text = r#"[{"queue": "q", "payload": {"b": 1, "a": 123456789012345678901234567890}}]"#;
        let raws: Vec<&RawValue> = serde_json::from_str(text).unwrap();
        let items = queen_items(&raws, "items").unwrap();
        assert_eq!(items[0].payload.unwrap().get(), r#"{"b": 1, "a": 123456789012345678901234567890}"#);
    }

    #[test]
    fn bad_items_are_400_and_named() {
        for (item, msg) in [
            (json!(5), "items[0] must be an object"),
            (json!({}), "items[0].queue must be a string"),
            (json!({"queue": 1}), "items[0].queue must be a string"),
            (json!({"queue": "q", "partition": 1}), "items[0].partition must be a string"),
            (json!({"queue": "q", "transactionId": 1}), "items[0].transactionId must be a string"),
        ] {
            let e = check(json!([item])).unwrap_err();
            assert_eq!((e.status.as_u16(), e.message.as_str()), (400, msg));
        }
    }
}
