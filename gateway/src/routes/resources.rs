//! Queues, dead letters and consumer groups: delete, list, seek (Queen's resource routes).

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::Json;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use tokio_postgres::Row;

use crate::auth::Caller;
use crate::db::{self, Use};
use crate::error::{ApiError, ApiResult};
use crate::routes::AppState;
use crate::{sql, wire};

/// `DELETE /api/v1/resources/queues/{queue}`: the queue with its messages, cursors, leases and
/// dead letters.
pub async fn delete_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(queue): Path<String>,
) -> ApiResult<Json<Value>> {
    let client = st.db.get(Use::Request, &caller).await?;
    let existed: bool = db::query_one(&client, sql::DELETE_QUEUE, &[&queue]).await?.get(0);
    Ok(Json(json!({"deleted": true, "queue": queue, "existed": existed})))
}

/// `GET /api/v1/resources/queues`: every queue the role may read, from queen.queue_stats.
pub async fn list_queues(State(st): State<AppState>, caller: Caller) -> ApiResult<Json<Value>> {
    let client = st.db.get(Use::Request, &caller).await?;
    let rows = db::query(&client, sql::QUEUES, &[&None::<String>]).await?;
    Ok(Json(json!({"queues": rows.iter().map(queue_row).collect::<Vec<_>>()})))
}

/// `GET /api/v1/resources/queues/{queue}`.
pub async fn get_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(queue): Path<String>,
) -> ApiResult<Json<Value>> {
    let client = st.db.get(Use::Request, &caller).await?;
    let rows = db::query(&client, sql::QUEUES, &[&Some(&queue)]).await?;
    match rows.first() {
        Some(r) => Ok(Json(queue_row(r))),
        None => Err(ApiError::not_found(format!("queue \"{}\" not found", wire::shorten(&queue)))),
    }
}

fn queue_row(r: &Row) -> Value {
    let t = |c: &str| r.get::<_, Option<DateTime<Utc>>>(c).map(wire::millis);
    json!({
        "name": r.get::<_, String>("queue"),
        "partitions": r.get::<_, i64>("partitions"),
        "messages": r.get::<_, i64>("messages"),
        "consumerGroups": r.get::<_, i64>("consumer_groups"),
        "deadLetters": r.get::<_, i64>("dead_letters"),
        "oldestMessage": t("oldest_message"),
        "newestMessage": t("newest_message"),
    })
}

/// `GET /api/v1/dlq?queue=&consumerGroup=&partition=&from=&to=&limit=&offset=`: dead letters,
/// newest first, with `total` (all that match) beside the page.
pub async fn dlq(
    State(st): State<AppState>,
    caller: Caller,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let s = |k: &str| q.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let num = |k: &str, default: i64| -> ApiResult<i64> {
        match s(k) {
            None => Ok(default),
            Some(v) => v.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                ApiError::bad_request(format!("{k} must be an integer of at least 0, got \"{}\"", wire::shorten(v)))
            }),
        }
    };
    let limit = num("limit", 100)?.max(1);
    let offset = num("offset", 0)?;
    let by_group = q.contains_key("consumerGroup");
    let group = wire::group(s("consumerGroup"));
    let partition = s("partition");
    let from = s("from").map(|v| wire::parse_time("from", v)).transpose()?;
    let to = s("to").map(|v| wire::parse_time("to", v)).transpose()?;
    let client = st.db.get(Use::Request, &caller).await?;
    let rows = db::query(&client, sql::DLQ, &[&s("queue"), &group, &by_group, &partition, &from, &to, &limit, &offset])
        .await?;
    let total: i64 = rows.first().map(|r| r.get("total")).unwrap_or(0);
    Ok(Json(json!({
        "messages": rows.iter().map(wire::dead_letter).collect::<Vec<_>>(),
        "total": total,
        "pagination": {"limit": limit, "offset": offset},
    })))
}

/// `GET /api/v1/consumer-groups`: each group on each queue, with its pending messages.
pub async fn list_groups(State(st): State<AppState>, caller: Caller) -> ApiResult<Json<Value>> {
    let client = st.db.get(Use::Request, &caller).await?;
    let rows = db::query(&client, sql::GROUPS, &[]).await?;
    Ok(Json(Value::Array(
        rows.iter()
            .map(|r| {
                json!({
                    "name": r.get::<_, String>("consumer_group"),
                    "queue": r.get::<_, String>("queue"),
                    "partitions": r.get::<_, i64>("partitions"),
                    "pending": r.get::<_, Option<i64>>("pending").unwrap_or(0),
                    "oldestPending": r.get::<_, Option<DateTime<Utc>>>("oldest_pending").map(wire::millis),
                    "leases": r.get::<_, i64>("leases"),
                })
            })
            .collect(),
    )))
}

/// `DELETE /api/v1/consumer-groups/{group}`: forget the group on every queue (cursors, leases,
/// subscription, dead letters); 200 also when it had none, so that clean-up code can call it
/// blindly. queen keeps no subscription apart from the cursors, so `deleteMetadata` changes
/// nothing: the group always starts afresh.
pub async fn delete_group(
    State(st): State<AppState>,
    caller: Caller,
    Path(group): Path<String>,
) -> ApiResult<Json<Value>> {
    delete_group_on(st, caller, group, None).await
}

/// `DELETE /api/v1/consumer-groups/{group}/queues/{queue}`: the same on one queue.
pub async fn delete_group_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path((group, queue)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    delete_group_on(st, caller, group, Some(queue)).await
}

async fn delete_group_on(st: AppState, caller: Caller, group: String, queue: Option<String>) -> ApiResult<Json<Value>> {
    let client = st.db.get(Use::Request, &caller).await?;
    let g = wire::group(Some(&group));
    let n: i32 = db::query_one(&client, sql::DELETE_GROUP, &[&g, &queue]).await?.get(0);
    Ok(Json(json!({"success": true, "consumerGroup": group, "queue": queue, "deletedPartitions": n,
                   "metadataDeleted": true})))
}

/// `POST /api/v1/consumer-groups/{group}/queues/{queue}/seek` with `{"timestamp": iso}` (replay
/// or skip to that time) or `{"toEnd": true}`.
pub async fn seek(
    State(st): State<AppState>,
    caller: Caller,
    Path((group, queue)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let body = wire::object(&body)?;
    let to: Option<DateTime<Utc>> = match (body.get("timestamp"), body.get("toEnd")) {
        (Some(Value::String(t)), _) => Some(wire::parse_time("timestamp", t)?),
        (None | Some(Value::Null), Some(Value::Bool(true))) => None,
        _ => return Err(ApiError::bad_request("Must specify either 'toEnd': true or 'timestamp'")),
    };
    let client = st.db.get(Use::Request, &caller).await?;
    let g = wire::group(Some(&group));
    let n: i32 = db::query_one(&client, sql::SEEK, &[&queue, &g, &to]).await?.get(0);
    Ok(Json(json!({"success": true, "consumerGroup": group, "queue": queue, "partitions": n,
                   "timestamp": to.map(wire::millis), "toEnd": to.is_none()})))
}
