//! `POST /api/v1/locks` `{"operations": [...]}`: locks and semaphores (queen's `queen_lock`):
//! `acquire`, `renew`, `release`, `get`, one result each, in order, as Queen MQ answers them. A
//! permit is a key/value row (of the namespace `queen-locks` for the default lock namespace)
//! whose version is the fencing token, and belongs to the role the request runs as; a
//! transaction commits only while the permit is its holder's with the `guard` an acquire or
//! renew answers (a `check` in the transaction's `kv` part). The HTTP status says how the call
//! went, never what an operation answered: a lock held by another is 200 `acquired: false`.

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::db::{self, Use};
use crate::error::{ApiError, ApiResult};
use crate::routes::AppState;
use crate::{sql, wire};

pub async fn locks(State(st): State<AppState>, caller: Caller, body: Bytes) -> ApiResult<Json<Value>> {
    let m = wire::object(&body)?;
    let ops = match m.get("operations") {
        Some(v @ Value::Array(a)) if !a.is_empty() => v.clone(),
        _ => return Err(ApiError::bad_request("operations must be a non-empty array")),
    };
    let mut client = st.db.get(Use::Request, &caller).await?;
    let tx = client.transaction().await?;
    let rows = db::query(&tx, sql::LOCK, &[&ops]).await?;
    tx.commit().await?;
    Ok(Json(json!({"results": rows.iter().map(|r| r.get::<_, Value>(0)).collect::<Vec<_>>()})))
}
