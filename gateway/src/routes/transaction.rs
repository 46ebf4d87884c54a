//! `POST /api/v1/transaction`: pushes and acks in one database transaction, all or nothing.
//!
//! Queen's clients send the acks of a transaction without their lease ids and list the leases
//! apart, in `requiredLeases`. Queen's server ignores that list, so an ack whose lease ran out
//! (another worker may hold the partition by then) still applies and the work is done twice.
//! Here each ack is applied under the lease of its message among `requiredLeases`: an ack whose
//! lease is no longer held refuses the whole transaction (409), and nothing of it happens. With
//! no `requiredLeases` the acks are not checked, as an ack without a lease never is.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Map, Value};

use crate::db::Use;
use crate::error::{ApiError, ApiResult};
use crate::routes::{ack, push, AppState};
use crate::wire;

enum Op {
    Push(Vec<Value>),
    Ack(Value),
}

pub async fn transaction(State(st): State<AppState>, body: Bytes) -> ApiResult<Json<Value>> {
    let body = wire::object(&body)?;
    let Some(Value::Array(ops)) = body.get("operations") else {
        return Err(ApiError::bad_request("operations array required"));
    };
    if ops.is_empty() {
        return Err(ApiError::bad_request("operations array cannot be empty"));
    }
    let ops = ops.iter().enumerate().map(|(i, op)| parse(i, op)).collect::<ApiResult<Vec<Op>>>()?;
    let leases: Vec<String> = match body.get("requiredLeases") {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(l)) => l
            .iter()
            .map(|l| l.as_str().map(str::to_string).ok_or_else(|| ApiError::bad_request("requiredLeases must hold strings")))
            .collect::<ApiResult<_>>()?,
        Some(_) => return Err(ApiError::bad_request("requiredLeases must be an array")),
    };

    let mut client = st.db.get(Use::Request).await?;
    let tx = client.transaction().await?;
    let id = uuid::Uuid::now_v7();
    let mut results = Vec::with_capacity(ops.len());
    // partitionId → the lease that matched there, tried first for the next ack of that partition.
    let mut matched: HashMap<String, String> = HashMap::new();
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            Op::Push(items) => {
                for r in push::run(&tx, &items).await? {
                    results.push(json!({"index": i, "type": "push", "success": true,
                        "transactionId": r["transaction_id"], "messageId": r["message_id"],
                        "partitionId": r["partition_id"], "queueName": r["queueName"], "status": r["status"]}));
                }
            }
            Op::Ack(entry) => {
                let r = ack_under_lease(&tx, entry, &leases, &mut matched).await?;
                let ok = r["success"] == json!(true);
                results.push(json!({"index": i, "type": "ack", "success": ok,
                    "transactionId": r["transactionId"], "error": r["error"], "dlq": r["dlq"]}));
                if !ok {
                    // Dropping `tx` rolls back everything done so far.
                    let mut e = ApiError::new(
                        StatusCode::CONFLICT,
                        format!(
                            "ACK operation failed: transactionId {} in partition {}: {}",
                            r["transactionId"],
                            r["partitionId"],
                            r["error"].as_str().unwrap_or("refused")
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
    tx.commit().await?;
    Ok(Json(json!({"transactionId": id, "success": true, "results": results})))
}

/// Apply one ack under the first lease of `leases` that holds its message (the one that matched
/// its partition before first). queen refuses an ack naming another lease and changes nothing,
/// so trying the next is safe. With no leases, the ack goes in unchecked.
async fn ack_under_lease<C: deadpool_postgres::GenericClient>(
    client: &C,
    entry: Value,
    leases: &[String],
    matched: &mut HashMap<String, String>,
) -> ApiResult<Value> {
    let partition = entry["partitionId"].as_str().unwrap_or_default().to_string();
    let mut order: Vec<&String> = matched.get(&partition).into_iter().collect();
    order.extend(leases.iter().filter(|l| Some(*l) != matched.get(&partition)));
    if order.is_empty() {
        return Ok(ack::run(client, &[entry]).await?.remove(0));
    }
    let mut refusal = None;
    for lease in order {
        let mut e = entry.clone();
        e["leaseId"] = json!(lease);
        // The lease decides the group; the op's own group (if any) must match it.
        let r = ack::run(client, &[e]).await?.remove(0);
        if r["success"] == json!(true) {
            matched.insert(partition, lease.clone());
            return Ok(r);
        }
        // 'lease not held' means this lease is not the message's: try the next. Any other
        // refusal (expired, already acknowledged, not found) is the answer.
        if r["error"] != json!("lease not held") {
            return Ok(r);
        }
        refusal = Some(r);
    }
    Ok(refusal.expect("at least one lease was tried"))
}

fn parse(i: usize, op: &Value) -> ApiResult<Op> {
    let Value::Object(op) = op else {
        return Err(ApiError::bad_request(format!("operations[{i}] must be an object")));
    };
    match op.get("type").and_then(Value::as_str) {
        Some("push") => {
            let Some(Value::Array(items)) = op.get("items") else {
                return Err(ApiError::bad_request(format!("operations[{i}].items array is required")));
            };
            Ok(Op::Push(push::queen_items(items)?))
        }
        Some("ack") => {
            // Queen's transaction ack names its group under consumerGroup; none is queue mode.
            let group = wire::opt_str(op, "consumerGroup", &format!("operations[{i}].consumerGroup"))?;
            Ok(Op::Ack(ack::entry(op, group, &format!("operations[{i}]."))?))
        }
        _ => Err(ApiError::bad_request(format!("operations[{i}].type must be \"push\" or \"ack\""))),
    }
}
