//! `GET /api/v1/pop/queue/{queue}[/partition/{partition}]`: queen_pop with Queen's query
//! parameters; 204 when nothing is deliverable (after waiting, with `wait=true`, up to
//! `timeout` ms for a push).

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::auth::Caller;
use crate::db::{CancelOnDrop, Use};
use crate::error::{ApiError, ApiResult};
use crate::routes::AppState;
use crate::wire::Message;
use crate::{sql, wire};

/// A pop request in queen's terms.
#[derive(Debug, PartialEq)]
pub struct PopArgs {
    pub group: Option<String>,
    pub batch: i32,
    pub partitions: i32,
    pub wait_ms: i32,
    pub auto_ack: bool,
    pub mode: Option<&'static str>,
    pub from: Option<DateTime<Utc>>,
    /// `leaseSeconds`: this pop's lease (None: the queue's leaseTime).
    pub lease_seconds: Option<i32>,
}

pub async fn pop_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(queue): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    pop(st, caller, queue, None, q).await
}

pub async fn pop_partition(
    State(st): State<AppState>,
    caller: Caller,
    Path((queue, partition)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    pop(st, caller, queue, Some(partition), q).await
}

/// `GET /api/v1/pop?namespace=…&task=…`: Queen's pop across the queues of a namespace or task.
/// queen has no namespaces; the answer says so rather than pretending the queue set is empty.
pub async fn pop_namespace() -> ApiError {
    ApiError::not_found(
        "pop by namespace or task is not supported: queen has no namespaces; pop a queue (/api/v1/pop/queue/{queue})",
    )
}

async fn pop(
    st: AppState,
    caller: Caller,
    queue: String,
    partition: Option<String>,
    q: HashMap<String, String>,
) -> ApiResult<Response> {
    let a = args(&q, st.max_wait_ms)?;
    let which = if a.wait_ms > 0 { Use::Wait } else { Use::Request };
    // A caller's waiting pops are bounded, so that a few idle long-polls of one caller cannot
    // fill the wait pool for everybody (its place is freed when the pop ends or the client
    // goes away). A request that is no one's in particular (no token, no client id) is bounded
    // by the wait pool only: keyed by its address, every client behind loopback would share one
    // bound, and one client's idle long-polls would turn everyone else's away.
    let _permit = match (which, &caller.key) {
        (Use::Wait, Some(key)) => Some(st.waits.enter(key, st.max_waits_per_caller).ok_or_else(|| {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "too many waiting pops for this caller (at most {} at once; --max-waits-per-caller)",
                    st.max_waits_per_caller
                ),
            )
        })?),
        _ => None,
    };
    let client = st.db.get(which, &caller).await?;
    let statement = client.prepare_cached(sql::POP).await?;
    let cancel = CancelOnDrop::arm(&client);
    let rows = client
        .query(
            &statement,
            &[
                &queue,
                &a.group,
                &a.batch,
                &partition,
                &a.partitions,
                &a.wait_ms,
                &a.auto_ack,
                &a.mode,
                &a.from,
                &a.lease_seconds,
            ],
        )
        .await;
    cancel.disarm();
    let rows = rows?;
    if rows.is_empty() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let messages: Vec<Message> = rows.iter().map(Message::from_row).collect();
    let first = &messages[0];
    let mut claimed: Vec<Uuid> = messages.iter().map(|m| m.partition_id).collect();
    claimed.dedup();
    let body = PopResponse {
        success: true,
        queue: first.queue.clone(),
        partition: first.partition.clone(),
        partition_id: first.partition_id,
        lease_id: first.lease_id,
        consumer_group: wire::show_group(a.group),
        partitions_claimed: claimed.len(),
        messages,
    };
    st.metrics.popped.inc_by(body.messages.len() as u64);
    Ok((StatusCode::OK, Json(body)).into_response())
}

/// A pop's answer as Queen's server sends it: the first partition's name, id and lease at the
/// top, every message below.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PopResponse {
    success: bool,
    queue: String,
    partition: String,
    partition_id: Uuid,
    lease_id: Option<Uuid>,
    consumer_group: String,
    partitions_claimed: usize,
    messages: Vec<Message>,
}

/// Queen's query parameters → queen_pop's arguments.
pub fn args(q: &HashMap<String, String>, max_wait_ms: u64) -> ApiResult<PopArgs> {
    let int = |key: &str, default: i64, min: i64| -> ApiResult<i64> {
        match q.get(key).map(String::as_str) {
            None | Some("") => Ok(default),
            Some(s) => match s.parse::<i64>() {
                Ok(n) if n >= min => Ok(n),
                _ => Err(ApiError::bad_request(format!(
                    "{key} must be an integer of at least {min}, got \"{}\"",
                    wire::shorten(s)
                ))),
            },
        }
    };
    let flag = |key: &str| -> ApiResult<bool> {
        match q.get(key).map(String::as_str) {
            None | Some("") | Some("false") | Some("0") => Ok(false),
            Some("true") | Some("1") => Ok(true),
            Some(s) => Err(ApiError::bad_request(format!("{key} must be true or false, got \"{}\"", wire::shorten(s)))),
        }
    };
    // queen_pop checks the upper bounds (batch and partitions up to 10 000) and says so.
    let clamp = |n: i64| n.min(i32::MAX as i64) as i32;
    let batch = clamp(int("batch", 1, 1)?);
    let partitions = clamp(int("partitions", 1, 1)?);
    let wait = flag("wait")?;
    let timeout = int("timeout", 30_000, 0)?;
    let wait_ms = if wait { clamp(timeout.min(max_wait_ms as i64)) } else { 0 };
    let auto_ack = flag("autoAck")?;
    let group = wire::group(q.get("consumerGroup").map(String::as_str)).map(str::to_string);
    // Queen's modes: `new` (and `new-only`, its docs' name) start at the group's first pop;
    // anything that means "from the beginning" is queen's `all`, the default.
    let mut mode = match q.get("subscriptionMode").map(String::as_str) {
        None | Some("") | Some("all") | Some("from_beginning") | Some("from-beginning") => None,
        Some("new") | Some("new-only") | Some("new_only") => Some("new"),
        Some(m) => {
            return Err(ApiError::bad_request(format!(
                "subscriptionMode must be all, from_beginning, new or new-only, got \"{}\"",
                wire::shorten(m)
            )))
        }
    };
    let from = match q.get("subscriptionFrom").map(String::as_str) {
        None | Some("") => None,
        Some("now") => {
            mode = Some("new");
            None
        }
        Some(s) => Some(wire::parse_time("subscriptionFrom", s)?),
    };
    if from.is_some() {
        mode = None;
    }
    // queen_pop checks the upper bound (queen.max_lease_seconds) and says so.
    let lease_seconds = match q.get("leaseSeconds").map(String::as_str) {
        None | Some("") => None,
        Some(_) => Some(clamp(int("leaseSeconds", 0, 1)?)),
    };
    Ok(PopArgs { group, batch, partitions, wait_ms, auto_ack, mode, from, lease_seconds })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn lease_seconds() {
        assert_eq!(args(&q(&[("leaseSeconds", "1")]), 1).unwrap().lease_seconds, Some(1));
        assert_eq!(args(&q(&[("leaseSeconds", "")]), 1).unwrap().lease_seconds, None);
        assert_eq!(args(&q(&[]), 1).unwrap().lease_seconds, None);
        for bad in ["0", "-5", "x"] {
            assert_eq!(args(&q(&[("leaseSeconds", bad)]), 1).unwrap_err().status, 400, "{bad}");
        }
    }

    #[test]
    fn what_the_client_sends() {
        let a = args(&q(&[("batch", "10"), ("wait", "true"), ("timeout", "30000")]), 60_000).unwrap();
        assert_eq!(
            a,
            PopArgs {
                group: None,
                batch: 10,
                partitions: 1,
                wait_ms: 30_000,
                auto_ack: false,
                mode: None,
                from: None,
                lease_seconds: None
            }
        );
        let a =
            args(&q(&[("wait", "false"), ("timeout", "30000"), ("consumerGroup", "g"), ("partitions", "3")]), 60_000)
                .unwrap();
        assert_eq!((a.wait_ms, a.group.as_deref(), a.partitions, a.batch), (0, Some("g"), 3, 1));
        assert_eq!(args(&q(&[("consumerGroup", "__QUEUE_MODE__")]), 1).unwrap().group, None);
        assert!(args(&q(&[("autoAck", "true")]), 1).unwrap().auto_ack);
    }

    #[test]
    fn the_wait_is_capped() {
        assert_eq!(args(&q(&[("wait", "true"), ("timeout", "600000")]), 60_000).unwrap().wait_ms, 60_000);
        assert_eq!(args(&q(&[("wait", "true")]), 60_000).unwrap().wait_ms, 30_000);
    }

    #[test]
    fn subscription_modes() {
        let mode = |m: &str| args(&q(&[("subscriptionMode", m)]), 1).map(|a| a.mode);
        assert_eq!(mode("all").unwrap(), None);
        assert_eq!(mode("from_beginning").unwrap(), None);
        assert_eq!(mode("new").unwrap(), Some("new"));
        assert_eq!(mode("new-only").unwrap(), Some("new"));
        assert_eq!(mode("sometimes").unwrap_err().status, 400);
        let now = args(&q(&[("subscriptionFrom", "now")]), 1).unwrap();
        assert_eq!((now.mode, now.from), (Some("new"), None));
        let from =
            args(&q(&[("subscriptionFrom", "2025-01-01T00:00:00.123456Z"), ("subscriptionMode", "new")]), 1).unwrap();
        assert_eq!(from.mode, None);
        assert_eq!(from.from.map(wire::micros).as_deref(), Some("2025-01-01T00:00:00.123456Z"));
    }

    #[test]
    fn bad_numbers_are_400() {
        for (k, v) in [("batch", "0"), ("batch", "x"), ("partitions", "-1"), ("timeout", "soon"), ("wait", "maybe")] {
            let e = args(&q(&[(k, v)]), 1).unwrap_err();
            assert_eq!(e.status, 400, "{k}={v}");
            assert!(e.message.starts_with(k), "{}", e.message);
        }
    }
}
