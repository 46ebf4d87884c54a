//! `POST /api/v1/lease/{leaseId}/extend`: queen_renew. Queen's Python client sends no body and
//! reads `newExpiresAt` from an object, so the answer is an object (Queen's server answers an
//! array, and that client then reports every renewal as failed). A lease that is not active
//! answers 200 with `success: false, renewed: 0`, as Queen 2.x does.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::Json;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::db::{self, Use};
use crate::error::{ApiError, ApiResult};
use crate::routes::AppState;
use crate::{sql, wire};

pub async fn extend(
    State(st): State<AppState>,
    caller: Caller,
    Path(lease): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let lease_id = wire::parse_uuid("leaseId", &lease)?;
    let body = wire::object(&body)?;
    // Without `seconds` the lease is extended by its queue's leaseTime (queen's rule).
    let seconds: Option<i32> = match body.get("seconds") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_i64()
                .filter(|s| (1..=i32::MAX as i64).contains(s))
                .ok_or_else(|| ApiError::bad_request(format!("seconds must be a positive integer, got {v}")))?
                as i32,
        ),
    };
    let client = st.db.get(Use::Request, &caller).await?;
    let row = db::query_one(&client, sql::RENEW, &[&lease_id, &seconds]).await?;
    // Queen's 2.x shape: 200 either way, `success` and `renewed` (the leases extended, 1 or 0)
    // say whether anything was.
    match row.get::<_, Option<DateTime<Utc>>>(0) {
        Some(t) => Ok(Json(json!({
            "leaseId": lease_id,
            "success": true,
            "renewed": 1,
            "newExpiresAt": wire::millis(t),
            "expiresAt": wire::millis(t),
        }))),
        None => Ok(Json(json!({
            "leaseId": lease_id,
            "success": false,
            "renewed": 0,
            "newExpiresAt": null,
            "expiresAt": null,
            "error": format!("lease {lease_id} is not active (it expired, was released, or never existed)"),
        }))),
    }
}
