//! `GET /health`, `GET /metrics` and `POST /api/v1/traces`.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::db::{self, Use};
use crate::error::{ApiError, ApiResult};
use crate::routes::AppState;
use crate::{sql, wire};

/// 200 when a connection answers and queen is installed, else 503 (load balancers take the
/// gateway out of rotation).
pub async fn health(State(st): State<AppState>) -> Response {
    let version = async {
        let client = st.db.get(Use::Request, &Caller::gateway()).await?;
        let rows = db::query(&client, sql::HEALTH, &[]).await?;
        rows.first()
            .map(|r| r.get::<_, String>(0))
            .ok_or_else(|| ApiError::unavailable("the queen extension is not installed in this database"))
    }
    .await;
    match version {
        Ok(v) => Json(json!({"status": "healthy", "database": "connected", "server": "queen-gateway",
                             "version": env!("CARGO_PKG_VERSION"), "queen": v}))
        .into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unhealthy", "database": "disconnected", "error": e.message})),
        )
            .into_response(),
    }
}

/// Prometheus text format: requests, latencies, messages, pool use.
pub async fn metrics(State(st): State<AppState>) -> Response {
    st.metrics.observe_pools(&st.db);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], st.metrics.render()).into_response()
}

/// Queen's message traces. queen stores none: a trace event goes to the gateway's log as one
/// structured line (`target: queen_gateway::trace`), where a log pipeline can keep it.
pub async fn trace(body: Bytes) -> ApiResult<(StatusCode, Json<Value>)> {
    let body = wire::object(&body)?;
    let tid = wire::opt_str(&body, "transactionId", "transactionId")?;
    let pid = wire::opt_str(&body, "partitionId", "partitionId")?;
    let (Some(tid), Some(pid)) = (tid, pid) else {
        return Err(ApiError::bad_request("transactionId and partitionId are required"));
    };
    let Some(data) = body.get("data").filter(|d| !d.is_null()) else {
        return Err(ApiError::bad_request("data is required"));
    };
    tracing::info!(
        target: "queen_gateway::trace",
        transaction_id = tid,
        partition_id = pid,
        consumer_group = body.get("consumerGroup").and_then(|v| v.as_str()),
        trace_names = %body.get("traceNames").cloned().unwrap_or_default(),
        event_type = body.get("eventType").and_then(|v| v.as_str()).unwrap_or("info"),
        data = %data,
        "trace"
    );
    Ok((StatusCode::CREATED, Json(json!({"success": true, "stored": false, "logged": true}))))
}

/// `POST /api/v1/fetch` and `POST /api/v1/partitions/changed` (Queen's reads by offset):
/// refused, 400 with `code: "offset_reads_unsupported"`. queen orders a partition by its
/// messages' transactions (semantics §6.1): a transaction that began earlier may commit after later
/// ones, so a position handed out when a message is written is not the order messages become
/// visible in, and a reader that went on from offset N could skip a message that appears below
/// N afterwards. Consumer groups (or a group per reader, with `seek`) give the same reads with
/// nothing skipped (docs/gateway.md, "Offset reads").
pub async fn offset_reads() -> ApiError {
    let mut e = ApiError::bad_request(
        "reads by offset (fetch, partitions/changed) are not supported by queen: a partition's order is its \
         messages' commit order, which offsets fixed at write time cannot follow without skipping messages; \
         read with a consumer group instead (docs/gateway.md, \"Offset reads\")",
    );
    e.extra.get_or_insert_with(Default::default).insert("code".into(), json!("offset_reads_unsupported"));
    e
}
