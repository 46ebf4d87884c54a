//! `POST /api/v1/push`: every item in one statement (queen_push's batch form), so a request's
//! messages become visible together or not at all. A retried request (Queen's clients retry 5xx
//! and timeouts) is made harmless by the transactionId, which the client generates: the second
//! copy comes back `duplicate`.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::db::{self, Use};
use crate::error::{ApiError, ApiResult};
use crate::routes::AppState;
use crate::{sql, wire};

pub async fn push(State(st): State<AppState>, body: Bytes) -> ApiResult<(StatusCode, Json<Value>)> {
    let body = wire::object(&body)?;
    let Some(Value::Array(items)) = body.get("items") else {
        return Err(ApiError::bad_request("items array is required"));
    };
    if items.is_empty() {
        return Ok((StatusCode::CREATED, Json(json!([]))));
    }
    let items = queen_items(items)?;
    let client = st.db.get(Use::Request).await?;
    let results = run(&client, &items).await?;
    st.metrics.pushed.inc_by(results.len() as u64);
    Ok((StatusCode::CREATED, Json(Value::Array(results))))
}

/// Push queen items (already checked) on `client`, in its transaction if it has one open; the
/// results as Queen's push returns them, in item order.
pub async fn run<C: deadpool_postgres::GenericClient>(client: &C, items: &[Value]) -> ApiResult<Vec<Value>> {
    let rows = db::query(client, sql::PUSH, &[&tokio_postgres::types::Json(items)]).await?;
    Ok(rows
        .iter()
        .map(|r| {
            let idx: i32 = r.get("idx");
            let trace = items.get(idx as usize).and_then(|i| i.get("traceId")).cloned().unwrap_or(Value::Null);
            json!({
                "index": idx,
                "transaction_id": r.get::<_, String>("transaction_id"),
                "status": r.get::<_, String>("status"),
                "message_id": r.get::<_, Uuid>("message_id"),
                "partition_id": r.get::<_, Uuid>("partition_id"),
                "trace_id": trace,
                "queueName": r.get::<_, String>("queue"),
                "partition": r.get::<_, String>("partition"),
            })
        })
        .collect())
}

/// Queen's push items as queen's batch form takes them. Only the keys Queen's server reads are
/// kept (`producerSub` in a body is ignored, as Queen ignores it without auth); a missing
/// partition is `Default`, a missing payload null. Types are checked here so that the error
/// names the item the way Queen's does.
pub fn queen_items(items: &[Value]) -> ApiResult<Vec<Value>> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let Value::Object(item) = item else {
                return Err(ApiError::bad_request(format!("items[{i}] must be an object")));
            };
            let field = |key: &str, what: &str| wire::opt_str(item, key, &format!("items[{i}].{what}"));
            let Some(queue) = field("queue", "queue")? else {
                return Err(ApiError::bad_request(format!("items[{i}].queue must be a string")));
            };
            let mut out = Map::new();
            out.insert("queue".into(), json!(queue));
            out.insert("partition".into(), json!(field("partition", "partition")?.unwrap_or("Default")));
            out.insert("payload".into(), item.get("payload").cloned().unwrap_or(Value::Null));
            if let Some(t) = field("transactionId", "transactionId")? {
                out.insert("transactionId".into(), json!(t));
            }
            if let Some(t) = field("traceId", "traceId")? {
                out.insert("traceId".into(), json!(t));
            }
            Ok(Value::Object(out))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_keep_what_queen_reads() {
        let items = queen_items(&[
            json!({"queue": "q", "payload": null, "transactionId": "t", "producerSub": "x"}),
            json!({"queue": "q", "partition": "p", "payload": {"a": 1}, "traceId": "0190a5b4-0000-7000-8000-000000000000"}),
            json!({"queue": "q", "data": 5}),
        ])
        .unwrap();
        assert_eq!(items[0], json!({"queue": "q", "partition": "Default", "payload": null, "transactionId": "t"}));
        assert_eq!(items[1]["partition"], "p");
        assert_eq!(items[1]["traceId"], "0190a5b4-0000-7000-8000-000000000000");
        assert_eq!(items[2], json!({"queue": "q", "partition": "Default", "payload": null}));
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
            let e = queen_items(&[item]).unwrap_err();
            assert_eq!((e.status.as_u16(), e.message.as_str()), (400, msg));
        }
    }
}
