//! `GET /api/v1/messages/{partitionId}/{transactionId}`: one message and each consumer group's
//! state of it (`consumed`, `leaseExpiresAt`), from queen's `queen_message`. 404 when there is
//! none the role may read.

use axum::extract::{Path, State};
use axum::Json;
use serde_json::Value;

use crate::auth::Caller;
use crate::db::{self, Use};
use crate::error::{ApiError, ApiResult};
use crate::routes::AppState;
use crate::{sql, wire};

pub async fn message(
    State(st): State<AppState>,
    caller: Caller,
    Path((partition, transaction)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let partition_id = wire::parse_uuid("partitionId", &partition)?;
    let client = st.db.get(Use::Request, &caller).await?;
    let found: Option<Value> = db::query_one(&client, sql::MESSAGE, &[&partition_id, &transaction]).await?.get(0);
    found.map(Json).ok_or_else(|| ApiError::not_found(format!("message \"{}\" not found", wire::shorten(&transaction))))
}
