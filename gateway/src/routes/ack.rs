//! `POST /api/v1/ack` and `POST /api/v1/ack/batch`: queen_ack's batch form, messages addressed
//! by Queen's (transactionId, partitionId), one probe each of the unique index on
//! `messages (partition_id, transaction_id)`.
//!
//! A refused ack (the lease ran out, the message was already acked) is not an HTTP error: it is
//! an entry with `success: false` and the reason, as Queen answers.

use std::borrow::Cow;

use axum::body::Bytes;
use axum::extract::State;
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

/// One of Queen's acks (a body of /api/v1/ack, an element of a batch, a transaction's ack
/// operation), each field as it came.
#[derive(Deserialize)]
pub struct AckIn<'a> {
    #[serde(borrow, rename = "transactionId")]
    pub transaction_id: Raw<'a>,
    #[serde(borrow, rename = "partitionId")]
    pub partition_id: Raw<'a>,
    #[serde(borrow, rename = "leaseId")]
    pub lease_id: Raw<'a>,
    #[serde(borrow)]
    pub status: Raw<'a>,
    #[serde(borrow)]
    pub error: Raw<'a>,
    #[serde(borrow, rename = "consumerGroup")]
    pub consumer_group: Raw<'a>,
}

#[derive(Deserialize)]
struct BatchBody<'a> {
    #[serde(borrow)]
    acknowledgments: Raw<'a>,
    #[serde(borrow, rename = "consumerGroup")]
    consumer_group: Raw<'a>,
}

/// An ack as queen's batch form takes it.
#[derive(Serialize, Clone, Debug)]
pub struct QueenAck<'a> {
    #[serde(rename = "transactionId")]
    pub transaction_id: Cow<'a, str>,
    #[serde(rename = "partitionId")]
    pub partition_id: Cow<'a, str>,
    #[serde(rename = "consumerGroup")]
    pub consumer_group: Option<Cow<'a, str>>,
    /// A JSON string or boolean, as it came (queen reads true as completed, false as failed).
    pub status: &'a RawValue,
    pub error: Option<Cow<'a, str>>,
    #[serde(rename = "leaseId", skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<Cow<'a, str>>,
}

/// An ack's outcome as Queen's server reports it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AckResult {
    pub index: i32,
    pub transaction_id: String,
    pub partition_id: String,
    pub message_id: Option<Uuid>,
    pub success: bool,
    pub error: Option<String>,
    pub lease_released: bool,
    pub dlq: bool,
    /// A completed ack of a message already finished for the group: a success that changed
    /// nothing, as Queen flags a re-ack.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub noop: bool,
}

/// queen's refusal of a message already finished for the group.
const ALREADY: &str = "already acknowledged";
/// queen's refusal of a message it does not have.
const NOT_FOUND: &str = "message not found";

/// queen's outcome in Queen's shape: Queen answers a completed re-ack of a finished message as
/// a success flagged `noop`, a failure or retry of one as refused ("already committed"), and an
/// ack of a transaction it does not have as "unresolvable". Only the wording and the flag
/// differ: queen changed nothing in any of these cases.
pub fn queen_shape(completed: bool, success: bool, error: Option<String>) -> (bool, Option<String>, bool) {
    match error.as_deref() {
        Some(ALREADY) if completed => (true, None, true),
        Some(ALREADY) => {
            (false, Some("already committed: the message is finished for this group; nothing changed".into()), false)
        }
        Some(NOT_FOUND) => {
            (false, Some("unresolvable: no message with this transactionId in this partition".into()), false)
        }
        _ => (success, error, false),
    }
}

pub async fn ack_one(State(st): State<AppState>, caller: Caller, body: Bytes) -> ApiResult<Json<Vec<AckResult>>> {
    let a: AckIn = wire::body(&body)?;
    let entry = entry(&a, None, "")?;
    let client = st.db.get(Use::Request, &caller).await?;
    Ok(Json(run(&client, &[entry]).await?))
}

pub async fn ack_batch(State(st): State<AppState>, caller: Caller, body: Bytes) -> ApiResult<Json<Vec<AckResult>>> {
    let b: BatchBody = wire::body(&body)?;
    let Some(acks) = wire::array(b.acknowledgments) else {
        return Err(ApiError::bad_request("acknowledgments array is required"));
    };
    // Queen's clients put the group once, at the top; an entry's own wins.
    let group = wire::text(b.consumer_group, "consumerGroup")?;
    let entries = acks
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            let at = format!("acknowledgments[{i}]");
            entry(&wire::element(raw, &at)?, group.clone(), &format!("{at}."))
        })
        .collect::<ApiResult<Vec<QueenAck>>>()?;
    if entries.is_empty() {
        return Ok(Json(vec![]));
    }
    let client = st.db.get(Use::Request, &caller).await?;
    Ok(Json(run(&client, &entries).await?))
}

/// Apply acks on `client`, in its transaction if one is open; Queen's result entries, in input
/// order.
pub async fn run<C: deadpool_postgres::GenericClient>(
    client: &C,
    entries: &[QueenAck<'_>],
) -> ApiResult<Vec<AckResult>> {
    let rows = db::query(client, sql::ACK, &[&tokio_postgres::types::Json(entries)]).await?;
    Ok(rows
        .iter()
        .map(|r| {
            let index: i32 = r.get("idx");
            let e = &entries[index as usize];
            let completed = matches!(e.status.get(), "\"completed\"" | "true");
            let (success, error, noop) = queen_shape(completed, r.get("success"), r.get("error"));
            AckResult {
                index,
                transaction_id: e.transaction_id.to_string(),
                partition_id: e.partition_id.to_string(),
                message_id: r.get("message_id"),
                success,
                error,
                lease_released: r.get("lease_released"),
                dlq: r.get("dead_lettered"),
                noop,
            }
        })
        .collect())
}

/// One of Queen's acks as a queen batch entry. `group` is the request's consumerGroup, used
/// when the ack names none; Queen's queue-mode name becomes NULL. With a lease, queen takes the
/// group from the lease. `at` prefixes the names in errors.
pub fn entry<'a>(a: &AckIn<'a>, group: Option<Cow<'a, str>>, at: &str) -> ApiResult<QueenAck<'a>> {
    let field = |raw, key: &str| wire::text(raw, &format!("{at}{key}"));
    let Some(transaction_id) = field(a.transaction_id, "transactionId")? else {
        return Err(ApiError::bad_request(format!("{at}transactionId is required")));
    };
    let Some(partition_id) = field(a.partition_id, "partitionId")? else {
        return Err(ApiError::bad_request(format!("{at}partitionId is required to ensure message uniqueness")));
    };
    let consumer_group =
        field(a.consumer_group, "consumerGroup")?.or(group).filter(|g| wire::group(Some(g.as_ref())).is_some());
    let status = match a.status {
        None => &**wire::COMPLETED,
        Some(s) if s.get().starts_with('"') || s.get() == "true" || s.get() == "false" => s,
        Some(_) => return Err(ApiError::bad_request(format!("{at}status must be a string"))),
    };
    Ok(QueenAck {
        transaction_id,
        partition_id,
        consumer_group,
        status,
        error: field(a.error, "error")?,
        lease_id: field(a.lease_id, "leaseId")?.filter(|l| !l.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn entry_of(v: Value, group: Option<&str>) -> ApiResult<Value> {
        let text = v.to_string();
        let a: AckIn = serde_json::from_str(&text).unwrap();
        entry(&a, group.map(Cow::Borrowed), "").map(|e| serde_json::to_value(e).unwrap())
    }

    #[test]
    fn entries() {
        let e = entry_of(
            json!({"transactionId": "t", "partitionId": "p", "status": "failed", "error": "boom",
                   "consumerGroup": null, "leaseId": "l"}),
            None,
        )
        .unwrap();
        assert_eq!(
            e,
            json!({"transactionId": "t", "partitionId": "p", "consumerGroup": null, "status": "failed",
                   "error": "boom", "leaseId": "l"})
        );
        // The batch's group applies unless the entry names its own; queue mode is NULL.
        let e = entry_of(json!({"transactionId": "t", "partitionId": "p"}), Some("g")).unwrap();
        assert_eq!((e["consumerGroup"].clone(), e["status"].clone()), (json!("g"), json!("completed")));
        assert!(e.get("leaseId").is_none());
        let e =
            entry_of(json!({"transactionId": "t", "partitionId": "p", "consumerGroup": "__QUEUE_MODE__"}), Some("g"))
                .unwrap();
        assert_eq!(e["consumerGroup"], Value::Null);
        let e = entry_of(json!({"transactionId": "t", "partitionId": "p", "leaseId": ""}), None).unwrap();
        assert!(e.get("leaseId").is_none());
        let e = entry_of(json!({"transactionId": "t", "partitionId": "p", "status": false}), None).unwrap();
        assert_eq!(e["status"], false);
    }

    #[test]
    fn queen_shapes() {
        let cases = [
            ((true, false, Some(ALREADY)), (true, None, true)),
            ((false, false, Some(ALREADY)), (false, Some("already committed"), false)),
            ((true, false, Some(NOT_FOUND)), (false, Some("unresolvable"), false)),
            ((false, false, Some(NOT_FOUND)), (false, Some("unresolvable"), false)),
            ((true, false, Some("lease expired")), (false, Some("lease expired"), false)),
            ((true, true, None), (true, None, false)),
        ];
        for ((completed, success, error), (s, e, noop)) in cases {
            let got = queen_shape(completed, success, error.map(str::to_string));
            assert_eq!((got.0, got.2), (s, noop), "{completed} {error:?}");
            match e {
                None => assert_eq!(got.1, None),
                Some(e) => assert!(got.1.as_deref().unwrap().starts_with(e), "{got:?}"),
            }
        }
    }

    #[test]
    fn missing_keys_are_400() {
        let a: AckIn = serde_json::from_str(r#"{"partitionId": "p"}"#).unwrap();
        let e = entry(&a, None, "acknowledgments[3].").unwrap_err();
        assert_eq!((e.status.as_u16(), e.message.as_str()), (400, "acknowledgments[3].transactionId is required"));
        let e = entry_of(json!({"transactionId": "t"}), None).unwrap_err();
        assert_eq!(e.message, "partitionId is required to ensure message uniqueness");
        let e = entry_of(json!({"transactionId": 5, "partitionId": "p"}), None).unwrap_err();
        assert_eq!(e.message, "transactionId must be a string");
        let e = entry_of(json!({"transactionId": "t", "partitionId": "p", "status": 3}), None).unwrap_err();
        assert_eq!(e.message, "status must be a string");
    }
}
