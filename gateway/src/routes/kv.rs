//! `POST /api/v1/kv` `{"operations": [...]}`: queen_kv, every operation in one database
//! transaction, in order; `{"results": [...]}` index-aligned with the operations. A `required`
//! operation that does not apply rolls the whole batch back and answers Queen's
//! `{"success": false, "reason": "kv_precondition", "failedIndex", "kvReason", "version",
//! "value"}` (200: the expected outcome of a lost race, not an error a client should retry).
//! Bad input is 400 with `code: "kv_bad_request"`, the code Queen's clients branch on.

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use deadpool_postgres::GenericClient;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::db::{self, Use};
use crate::error::{ApiError, ApiResult};
use crate::routes::AppState;
use crate::sql;
use crate::wire::{self, Raw};

#[derive(Deserialize)]
struct KvBody<'a> {
    #[serde(borrow)]
    operations: Raw<'a>,
}

pub async fn kv(State(st): State<AppState>, caller: Caller, body: Bytes) -> ApiResult<Json<Value>> {
    let b: KvBody = wire::body(&body).map_err(coded)?;
    let Some(ops) = b.operations.filter(|o| o.get().trim_start().starts_with('[')) else {
        return Err(coded(ApiError::bad_request("operations array required")));
    };
    let mut client = st.db.get(Use::Request, &caller).await?;
    let tx = client.transaction().await?;
    match run(&tx, ops.get(), 0).await.map_err(coded)? {
        Applied::All(results) => {
            tx.commit().await?;
            Ok(Json(json!({"success": true, "results": results})))
        }
        // Dropping `tx` rolls the batch back.
        Applied::Refused(body) => Ok(Json(body)),
    }
}

/// What a kv part came to.
pub enum Applied {
    All(Vec<Value>),
    /// A required operation did not apply: Queen's refusal, to answer once rolled back.
    Refused(Value),
}

/// Run kv operations (JSON array text) in `client`'s transaction. `offset`: where they start
/// in the flat index space of the request (a transaction's pushes and acks come first).
pub async fn run<C: GenericClient>(client: &C, ops: &str, offset: usize) -> ApiResult<Applied> {
    let ops: Value = serde_json::from_str(ops).map_err(|e| ApiError::bad_request(format!("kv operations: {e}")))?;
    let rows = db::query(client, sql::KV, &[&ops]).await?;
    let results: Vec<Value> = rows.iter().map(|r| r.get::<_, Value>(0)).collect();
    // queen_kv ends its results at a required operation that did not apply.
    {
        if let Some(last) = results.last().filter(|r| r["required"] == json!(true) && r["applied"] == json!(false)) {
            let index = last["index"].as_u64().unwrap_or(0) as usize;
            return Ok(Applied::Refused(json!({
                "success": false,
                "reason": "kv_precondition",
                "failedIndex": offset + index,
                "kvReason": last["reason"],
                "version": last["version"],
                "value": last.get("value").cloned().unwrap_or(Value::Null),
                "error": format!("kv operation {} ({} of key {}) is required and did not apply: {}",
                                 offset + index, last["op"], last["key"], last["reason"]),
            })));
        }
    }
    Ok(Applied::All(results))
}

/// A 400 of the kv surface carries Queen's code.
pub fn coded(mut e: ApiError) -> ApiError {
    if e.status == axum::http::StatusCode::BAD_REQUEST {
        e.extra.get_or_insert_with(Default::default).insert("code".into(), json!("kv_bad_request"));
    }
    e
}
