//! `POST /api/v1/ack` and `POST /api/v1/ack/batch`: queen_ack's batch form, messages addressed
//! by Queen's (transactionId, partitionId), one probe each of the unique index on
//! `messages (partition_id, transaction_id)`.
//!
//! A refused ack (the lease ran out, the message was already acked) is not an HTTP error: it is
//! an entry with `success: false` and the reason, as Queen answers.

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::db::{self, Use};
use crate::error::{ApiError, ApiResult};
use crate::routes::AppState;
use crate::{sql, wire};

pub async fn ack_one(State(st): State<AppState>, body: Bytes) -> ApiResult<Json<Value>> {
    let body = wire::object(&body)?;
    let group = wire::opt_str(&body, "consumerGroup", "consumerGroup")?;
    let entry = entry(&body, group, "")?;
    let client = st.db.get(Use::Request).await?;
    Ok(Json(Value::Array(run(&client, &[entry]).await?)))
}

pub async fn ack_batch(State(st): State<AppState>, body: Bytes) -> ApiResult<Json<Value>> {
    let body = wire::object(&body)?;
    let Some(Value::Array(acks)) = body.get("acknowledgments") else {
        return Err(ApiError::bad_request("acknowledgments array is required"));
    };
    // Queen's clients put the group once, at the top; an entry's own wins.
    let group = wire::opt_str(&body, "consumerGroup", "consumerGroup")?;
    let entries = acks
        .iter()
        .enumerate()
        .map(|(i, a)| match a {
            Value::Object(a) => entry(a, group, &format!("acknowledgments[{i}].")),
            _ => Err(ApiError::bad_request(format!("acknowledgments[{i}] must be an object"))),
        })
        .collect::<ApiResult<Vec<Value>>>()?;
    if entries.is_empty() {
        return Ok(Json(json!([])));
    }
    let client = st.db.get(Use::Request).await?;
    Ok(Json(Value::Array(run(&client, &entries).await?)))
}

/// Apply acks (queen entries) on `client`, in its transaction if one is open; Queen's result
/// entries, in input order.
pub async fn run<C: deadpool_postgres::GenericClient>(client: &C, entries: &[Value]) -> ApiResult<Vec<Value>> {
    let rows = db::query(client, sql::ACK, &[&tokio_postgres::types::Json(entries)]).await?;
    Ok(rows
        .iter()
        .map(|r| {
            let idx: i32 = r.get("idx");
            let e = &entries[idx as usize];
            json!({
                "index": idx,
                "transactionId": e["transactionId"],
                "partitionId": e["partitionId"],
                "messageId": r.get::<_, Option<Uuid>>("message_id"),
                "success": r.get::<_, bool>("success"),
                "error": r.get::<_, Option<String>>("error"),
                "leaseReleased": r.get::<_, bool>("lease_released"),
                "dlq": r.get::<_, bool>("dead_lettered"),
            })
        })
        .collect())
}

/// One of Queen's acks as a queen batch entry. `group` is the request's consumerGroup, used
/// when the ack names none; Queen's queue-mode name becomes NULL. With a lease, queen takes the
/// group from the lease.
pub fn entry(a: &Map<String, Value>, group: Option<&str>, at: &str) -> ApiResult<Value> {
    let field = |key: &str| wire::opt_str(a, key, &format!("{at}{key}"));
    let Some(transaction_id) = field("transactionId")? else {
        return Err(ApiError::bad_request(format!("{at}transactionId is required")));
    };
    let Some(partition_id) = field("partitionId")? else {
        return Err(ApiError::bad_request(format!("{at}partitionId is required to ensure message uniqueness")));
    };
    let group = wire::group(field("consumerGroup")?.or(group));
    let status = match a.get("status") {
        None | Some(Value::Null) => json!("completed"),
        Some(s @ (Value::String(_) | Value::Bool(_))) => s.clone(),
        Some(_) => return Err(ApiError::bad_request(format!("{at}status must be a string"))),
    };
    let mut e = Map::new();
    e.insert("transactionId".into(), json!(transaction_id));
    e.insert("partitionId".into(), json!(partition_id));
    e.insert("consumerGroup".into(), json!(group));
    e.insert("status".into(), status);
    e.insert("error".into(), json!(field("error")?));
    if let Some(lease) = field("leaseId")?.filter(|l| !l.is_empty()) {
        e.insert("leaseId".into(), json!(lease));
    }
    Ok(Value::Object(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn entries() {
        let e = entry(
            &obj(json!({"transactionId": "t", "partitionId": "p", "status": "failed", "error": "boom",
                        "consumerGroup": null, "leaseId": "l"})),
            None,
            "",
        )
        .unwrap();
        assert_eq!(
            e,
            json!({"transactionId": "t", "partitionId": "p", "consumerGroup": null, "status": "failed",
                   "error": "boom", "leaseId": "l"})
        );
        // The batch's group applies unless the entry names its own; queue mode is NULL.
        let e = entry(&obj(json!({"transactionId": "t", "partitionId": "p"})), Some("g"), "").unwrap();
        assert_eq!((e["consumerGroup"].clone(), e["status"].clone()), (json!("g"), json!("completed")));
        assert!(e.get("leaseId").is_none());
        let e = entry(&obj(json!({"transactionId": "t", "partitionId": "p", "consumerGroup": "__QUEUE_MODE__"})), Some("g"), "")
            .unwrap();
        assert_eq!(e["consumerGroup"], Value::Null);
        let e = entry(&obj(json!({"transactionId": "t", "partitionId": "p", "leaseId": ""})), None, "").unwrap();
        assert!(e.get("leaseId").is_none());
    }

    #[test]
    fn missing_keys_are_400() {
        let e = entry(&obj(json!({"partitionId": "p"})), None, "acknowledgments[3].").unwrap_err();
        assert_eq!((e.status.as_u16(), e.message.as_str()), (400, "acknowledgments[3].transactionId is required"));
        let e = entry(&obj(json!({"transactionId": "t"})), None, "").unwrap_err();
        assert_eq!(e.message, "partitionId is required to ensure message uniqueness");
        let e = entry(&obj(json!({"transactionId": 5, "partitionId": "p"})), None, "").unwrap_err();
        assert_eq!(e.message, "transactionId must be a string");
    }
}
