//! `POST /api/v1/configure`: Queen's options mapped onto queen_configure.
//!
//! Queen's configure replaces a queue's settings: an option not given goes back to its
//! default. So every option queen has is sent, with Queen's default where the request has none.
//! Options queen has no use for (`priority`, `ttl`, `encryptionEnabled`, `dlqAfterMaxRetries`,
//! namespace and task) are accepted and echoed, so Queen's clients keep working; docs/gateway.md
//! says what each does here.

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Map, Value};

use crate::auth::Caller;
use crate::db::{self, Use};
use crate::error::{ApiError, ApiResult};
use crate::routes::AppState;
use crate::{sql, wire};

/// queen's options, each with the value a Queen configure without it leaves.
const QUEEN_OPTIONS: &[(&str, i64)] = &[
    ("leaseTime", 300),
    ("retryLimit", 3),
    ("retryDelay", 1000),
    ("delayedProcessing", 0),
    ("windowBuffer", 0),
    ("maxSize", 0),
    ("retentionSeconds", 0),
    ("completedRetentionSeconds", 0),
    ("maxWaitTimeSeconds", 0),
];

/// Queen's options that queen has no use for, with Queen's defaults (echoed).
fn echoed_defaults() -> Vec<(&'static str, Value)> {
    vec![
        ("priority", json!(0)),
        ("ttl", json!(3600)),
        ("dlqAfterMaxRetries", json!(false)),
        ("encryptionEnabled", json!(false)),
        ("retentionEnabled", json!(false)),
    ]
}

pub async fn configure(State(st): State<AppState>, caller: Caller, body: Bytes) -> ApiResult<Json<Value>> {
    let body = wire::object(&body)?;
    let Some(queue) = wire::opt_str(&body, "queue", "queue")? else {
        return Err(ApiError::bad_request("queue is required"));
    };
    let given = match body.get("options") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(_) => return Err(ApiError::bad_request("options must be an object")),
    };
    let options = queen_options(&given);
    let client = st.db.get(Use::Request, &caller).await?;
    let row = db::query_one(&client, sql::CONFIGURE, &[&queue, &tokio_postgres::types::Json(&options)]).await?;
    let result: Value = row.get::<_, tokio_postgres::types::Json<Value>>(0).0;
    let mut echo = result.get("options").and_then(Value::as_object).cloned().unwrap_or_default();
    for (k, default) in echoed_defaults() {
        echo.insert(k.into(), given.get(k).cloned().unwrap_or(default));
    }
    // Anything else the request carried is echoed as given.
    for (k, v) in &given {
        echo.entry(k.clone()).or_insert_with(|| v.clone());
    }
    Ok(Json(json!({
        "configured": true,
        "queue": queue,
        "namespace": body.get("namespace").cloned().unwrap_or(Value::Null),
        "task": body.get("task").cloned().unwrap_or(Value::Null),
        "options": echo,
    })))
}

/// The options sent to queen_configure: every one of queen's, the given value or Queen's
/// default. `retentionSeconds` counts only with `retentionEnabled: true`, as in Queen (a Queen
/// user who set it without enabling retention does not expect messages to be deleted).
/// `deadLetterQueue` passes through when given (queen files dead letters by default, and Queen
/// always does).
pub fn queen_options(given: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, default) in QUEEN_OPTIONS {
        out.insert((*k).into(), given.get(*k).filter(|v| !v.is_null()).cloned().unwrap_or(json!(default)));
    }
    if given.get("retentionEnabled") != Some(&json!(true)) {
        out.insert("retentionSeconds".into(), json!(0));
    }
    if let Some(v) = given.get("deadLetterQueue").filter(|v| !v.is_null()) {
        out.insert("deadLetterQueue".into(), v.clone());
    } else {
        out.insert("deadLetterQueue".into(), json!(true));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_with_queens_default() {
        let o = queen_options(
            json!({"leaseTime": 60, "retryLimit": 5, "priority": 7, "maxSize": 5000,
                                     "encryptionEnabled": true})
            .as_object()
            .unwrap(),
        );
        assert_eq!(
            Value::Object(o),
            json!({"leaseTime": 60, "retryLimit": 5, "retryDelay": 1000, "delayedProcessing": 0,
                   "windowBuffer": 0, "maxSize": 5000, "retentionSeconds": 0,
                   "completedRetentionSeconds": 0, "maxWaitTimeSeconds": 0, "deadLetterQueue": true})
        );
    }

    #[test]
    fn retention_needs_enabling() {
        let o = queen_options(json!({"retentionSeconds": 60}).as_object().unwrap());
        assert_eq!(o["retentionSeconds"], 0);
        let o = queen_options(json!({"retentionSeconds": 60, "retentionEnabled": true}).as_object().unwrap());
        assert_eq!(o["retentionSeconds"], 60);
        let o = queen_options(json!({"deadLetterQueue": false}).as_object().unwrap());
        assert_eq!(o["deadLetterQueue"], false);
    }
}
