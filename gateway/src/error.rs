//! One error type for every route: `{"error": "..."}` with a status that tells Queen's clients
//! whether to retry. They retry 5xx (three attempts) and never 4xx, so bad input must be 4xx
//! and only faults that a retry can cure may be 5xx.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use tokio_postgres::error::SqlState;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Extra keys for the body (a transaction's per-operation results).
    pub extra: Option<serde_json::Map<String, serde_json::Value>>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), extra: None }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// The status for an error from the database, by SQLSTATE (queen's are listed in semantics §7).
    pub fn from_db(e: &tokio_postgres::Error) -> ApiError {
        let Some(db) = e.as_db_error() else {
            // No SQLSTATE: the connection broke or the server went away; a retry may succeed.
            return ApiError::unavailable(format!("database unavailable: {e}"));
        };
        let code = db.code();
        let status = status_for(code);
        if status.is_server_error() {
            tracing::warn!(sqlstate = code.code(), error = db.message(), "database error");
        }
        ApiError::new(status, db.message().to_string())
    }
}

/// SQLSTATE → HTTP status.
pub fn status_for(code: &SqlState) -> StatusCode {
    let c = code.code();
    if *code == SqlState::INSUFFICIENT_PRIVILEGE {
        StatusCode::FORBIDDEN
    } else if *code == SqlState::PROGRAM_LIMIT_EXCEEDED {
        // maxSize: the queue is full. Not a fault of the server, and a retry right away would
        // only fail again: 409, which clients do not retry.
        StatusCode::CONFLICT
    } else if c.starts_with("22") || *code == SqlState::FEATURE_NOT_SUPPORTED {
        // Data exceptions: a bad argument or JSON field, a malformed uuid, a NULL (semantics §7).
        StatusCode::BAD_REQUEST
    } else if c.starts_with("08")
        || c.starts_with("40")
        || c.starts_with("53")
        || c.starts_with("57")
        || *code == SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
        || *code == SqlState::UNDEFINED_FUNCTION
    {
        // Connection lost, serialization failure or deadlock, out of resources, shutdown or
        // statement timeout, a library awaiting ALTER EXTENSION UPDATE, queen not installed:
        // worth a retry, perhaps after an operator's fix.
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

impl From<tokio_postgres::Error> for ApiError {
    fn from(e: tokio_postgres::Error) -> ApiError {
        ApiError::from_db(&e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = self.extra.unwrap_or_default();
        body.insert("error".into(), json!(self.message));
        (self.status, Json(serde_json::Value::Object(body))).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_by_sqlstate() {
        let cases = [
            ("22023", 400),
            ("22P02", 400),
            ("22004", 400),
            ("0A000", 400),
            ("42501", 403),
            ("54000", 409),
            ("55000", 503),
            ("57014", 503),
            ("40001", 503),
            ("40P01", 503),
            ("08006", 503),
            ("42883", 503),
            ("XX000", 500),
            ("23505", 500),
        ];
        for (code, status) in cases {
            assert_eq!(status_for(&SqlState::from_code(code)).as_u16(), status, "{code}");
        }
    }
}
