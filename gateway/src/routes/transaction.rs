//! `POST /api/v1/transaction`: pushes and acks, then key/value operations and timers (Queen's
//! `kv` and `timers` riders), in one database transaction, all or nothing.
//!
//! Queen's clients send the acks of a transaction without their lease ids and list the leases
//! apart, in `requiredLeases`. Queen's server ignores that list, so an ack whose lease ran out
//! (another worker may hold the partition by then) still applies and the work is done twice.
//! Here each ack is applied under the lease of its message among `requiredLeases`: an ack whose
//! lease is no longer held refuses the whole transaction (409), and nothing of it happens. With
//! no `requiredLeases` the acks are not checked, as an ack without a lease never is.

use std::borrow::Cow;
use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::auth::Caller;
use crate::db::Use;
use crate::error::{ApiError, ApiResult};
use crate::routes::ack::{self, AckIn, AckResult, QueenAck};
use crate::routes::kv;
use crate::routes::push::{self, QueenItem};
use crate::routes::timers;
use crate::routes::AppState;
use crate::wire::{self, Raw};

#[derive(Deserialize)]
struct TxBody<'a> {
    #[serde(borrow)]
    operations: Raw<'a>,
    #[serde(borrow, rename = "requiredLeases")]
    required_leases: Raw<'a>,
    /// Queen's key/value and timer riders (queen-mq 1.3+), applied after the pushes and acks.
    #[serde(borrow)]
    kv: Raw<'a>,
    #[serde(borrow)]
    timers: Raw<'a>,
}

/// An operation's type and, for a push, its items (an ack's fields are read as an `AckIn`).
#[derive(Deserialize)]
struct OpHead<'a> {
    #[serde(borrow, rename = "type")]
    kind: Raw<'a>,
    #[serde(borrow)]
    items: Raw<'a>,
}

enum Op<'a> {
    Push(Vec<QueenItem<'a>>),
    Ack(QueenAck<'a>),
}

pub async fn transaction(State(st): State<AppState>, caller: Caller, body: Bytes) -> ApiResult<Json<Value>> {
    let b: TxBody = wire::body(&body)?;
    // The timers part, applied last in the same database transaction.
    let timer_ops = match b.timers.map(|p| p.get().trim()).filter(|p| *p != "null" && *p != "[]") {
        None => Vec::new(),
        Some(text) => {
            let v: Value = serde_json::from_str(text)
                .map_err(|_| timers::coded(ApiError::bad_request("timers must be an array of operations")))?;
            timers::parse_ops(&v).map_err(timers::coded)?
        }
    };
    // The key/value part, applied after the pushes and acks in the same database transaction.
    let kv = match b.kv.map(|p| p.get().trim()).filter(|p| *p != "null" && *p != "[]") {
        None => None,
        Some(text) if text.starts_with('[') => {
            if serde_json::from_str::<Vec<serde_json::Map<String, Value>>>(text)
                .map_err(|_| ApiError::bad_request("kv must be an array of operations"))?
                .iter()
                .any(|op| op.get("op").and_then(Value::as_str) == Some("getPrefix"))
            {
                // Read work the caller does not bound, inside the transaction's locks.
                return Err(kv::coded(ApiError::bad_request("getPrefix is not allowed in a transaction")));
            }
            Some(text)
        }
        Some(_) => return Err(kv::coded(ApiError::bad_request("kv must be an array of operations"))),
    };
    let ops = match wire::array(b.operations) {
        Some(ops) if !ops.is_empty() => ops,
        // A bundle of key/value or timer operations alone.
        None | Some(_) if kv.is_some() || !timer_ops.is_empty() => Vec::new(),
        None => return Err(ApiError::bad_request("operations array required")),
        Some(_) => return Err(ApiError::bad_request("operations array cannot be empty")),
    };
    let ops = ops.iter().enumerate().map(|(i, op)| parse(i, op)).collect::<ApiResult<Vec<Op>>>()?;
    let leases: Vec<String> = match b.required_leases {
        None => vec![],
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|_| ApiError::bad_request("requiredLeases must be an array of strings"))?,
    };

    let mut client = st.db.get(Use::Request, &caller).await?;
    let tx = client.transaction().await?;
    let id = uuid::Uuid::now_v7();
    let mut results = Vec::with_capacity(ops.len());
    let mut pushed = 0;
    // partitionId → the lease that matched there, tried first for the next ack of that partition.
    let mut matched: HashMap<String, String> = HashMap::new();
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            Op::Push(items) => {
                let rows = push::run(&tx, &items).await?;
                pushed += rows.len() as u64;
                for r in rows {
                    results.push(json!({"index": i, "type": "push", "success": true,
                        "transactionId": r.transaction_id, "messageId": r.message_id,
                        "partitionId": r.partition_id, "queueName": r.queue_name, "status": r.status}));
                }
            }
            Op::Ack(entry) => {
                let r = ack_under_lease(&tx, entry, &leases, &mut matched).await?;
                results.push(json!({"index": i, "type": "ack", "success": r.success,
                    "transactionId": r.transaction_id, "error": r.error, "dlq": r.dlq}));
                if !r.success {
                    // Dropping `tx` rolls back everything done so far.
                    let mut e = ApiError::new(
                        StatusCode::CONFLICT,
                        format!(
                            "transaction rolled back: ACK operation failed: transactionId {} in partition {}: {}",
                            r.transaction_id,
                            r.partition_id,
                            r.error.as_deref().unwrap_or("refused")
                        ),
                    );
                    let mut extra = Map::new();
                    extra.insert("transactionId".into(), json!(id));
                    extra.insert("success".into(), json!(false));
                    extra.insert("results".into(), Value::Array(results));
                    e.extra = Some(extra);
                    return Err(e);
                }
            }
        }
    }
    if let Some(text) = kv {
        match kv::run(&tx, text, results.len()).await.map_err(kv::coded)? {
            kv::Applied::All(rows) => results.extend(rows.into_iter().map(|mut r| {
                r["type"] = json!("kv");
                r
            })),
            // Dropping `tx` rolls back the pushes and acks too: the gate held nothing back.
            kv::Applied::Refused(mut refusal) => {
                refusal["transactionId"] = json!(id);
                return Ok(Json(refusal));
            }
        }
    }
    if !timer_ops.is_empty() {
        for mut r in timers::run(&tx, &timer_ops).await.map_err(timers::coded)? {
            r["type"] = json!("timer");
            results.push(r);
        }
    }
    tx.commit().await?;
    st.metrics.pushed.inc_by(pushed);
    Ok(Json(json!({"transactionId": id, "success": true, "results": results})))
}

/// Apply one ack under the first lease of `leases` that holds its message (the one that matched
/// its partition before first). queen refuses an ack naming another lease and changes nothing,
/// so trying the next is safe. With no leases, the ack goes in unchecked.
async fn ack_under_lease<C: deadpool_postgres::GenericClient>(
    client: &C,
    entry: QueenAck<'_>,
    leases: &[String],
    matched: &mut HashMap<String, String>,
) -> ApiResult<AckResult> {
    let partition = entry.partition_id.to_string();
    let mut order: Vec<&String> = matched.get(&partition).into_iter().collect();
    order.extend(leases.iter().filter(|l| Some(*l) != matched.get(&partition)));
    if order.is_empty() {
        return Ok(ack::run(client, &[entry]).await?.remove(0));
    }
    let mut refusal = None;
    for lease in order {
        let mut e = entry.clone();
        // The lease decides the group; the op's own group (if any) must match it.
        e.lease_id = Some(Cow::Owned(lease.clone()));
        let r = ack::run(client, &[e]).await?.remove(0);
        if r.success {
            matched.insert(partition, lease.clone());
            return Ok(r);
        }
        // 'lease not held' means this lease is not the message's: try the next. Any other
        // refusal (expired, already acknowledged, not found) is the answer.
        if r.error.as_deref() != Some("lease not held") {
            return Ok(r);
        }
        refusal = Some(r);
    }
    Ok(refusal.expect("at least one lease was tried"))
}

fn parse<'a>(i: usize, raw: &'a serde_json::value::RawValue) -> ApiResult<Op<'a>> {
    let op: OpHead = wire::element(raw, &format!("operations[{i}]"))?;
    match wire::text(op.kind, &format!("operations[{i}].type"))?.as_deref() {
        Some("push") => {
            let Some(items) = wire::array(op.items) else {
                return Err(ApiError::bad_request(format!("operations[{i}].items array is required")));
            };
            Ok(Op::Push(push::queen_items(&items, &format!("operations[{i}].items"))?))
        }
        Some("ack") => {
            // Queen's transaction ack names its group under consumerGroup; none is queue mode.
            let a: AckIn = wire::element(raw, &format!("operations[{i}]"))?;
            Ok(Op::Ack(ack::entry(&a, None, &format!("operations[{i}]."))?))
        }
        _ => Err(ApiError::bad_request(format!("operations[{i}].type must be \"push\" or \"ack\""))),
    }
}
