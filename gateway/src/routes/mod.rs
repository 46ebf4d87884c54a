//! The HTTP surface: Queen MQ's routes, each a few lines that parse Queen's shape, call one
//! queen function and answer in Queen's shape.

pub mod ack;
pub mod configure;
pub mod kv;
pub mod lease;
pub mod locks;
pub mod messages;
pub mod ops;
pub mod pop;
pub mod push;
pub mod resources;
pub mod timers;
pub mod transaction;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderValue};
use tower_http::cors::{AllowOrigin, Any, CorsLayer};
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::auth::{Policy, Waits};
use crate::config::Args;
use axum::routing::{delete, get, post};
use axum::Router;

use crate::db::Db;
use crate::metrics::Metrics;

#[derive(Clone)]
pub struct AppState {
    pub db: Arc<Db>,
    pub metrics: Arc<Metrics>,
    pub max_wait_ms: u64,
    pub policy: Arc<Policy>,
    pub waits: Arc<Waits>,
    pub max_waits_per_caller: usize,
}

pub fn router(state: AppState, args: &Args) -> Router {
    // The API: cross-site requests, bodies that are not JSON and (with --auth jwt) requests
    // without a valid token are refused before any handler runs (auth.rs).
    let api = Router::new()
        .route("/api/v1/push", post(push::push))
        .route("/api/v1/pop", get(pop::pop_namespace))
        .route("/api/v1/pop/queue/{queue}", get(pop::pop_queue))
        .route("/api/v1/pop/queue/{queue}/partition/{partition}", get(pop::pop_partition))
        .route("/api/v1/ack", post(ack::ack_one))
        .route("/api/v1/ack/batch", post(ack::ack_batch))
        .route("/api/v1/transaction", post(transaction::transaction))
        .route("/api/v1/kv", post(kv::kv))
        .route("/api/v1/timers", post(timers::batch))
        .route("/api/v1/timers/{queue}", get(timers::list))
        .route("/api/v1/timers/{queue}/{*key}", get(timers::peek).delete(timers::cancel))
        .route("/api/v1/locks", post(locks::locks))
        .route("/api/v1/messages/{partition}/{transaction}", get(messages::message))
        .route("/api/v1/fetch", post(ops::offset_reads))
        .route("/api/v1/partitions/changed", post(ops::offset_reads))
        .route("/api/v1/lease/{lease}/extend", post(lease::extend))
        .route("/api/v1/configure", post(configure::configure))
        .route("/api/v1/resources/queues", get(resources::list_queues))
        .route("/api/v1/resources/queues/{queue}", get(resources::get_queue).delete(resources::delete_queue))
        .route("/api/v1/dlq", get(resources::dlq))
        .route("/api/v1/consumer-groups", get(resources::list_groups))
        .route("/api/v1/consumer-groups/{group}", delete(resources::delete_group))
        .route("/api/v1/consumer-groups/{group}/queues/{queue}", delete(resources::delete_group_queue))
        .route("/api/v1/consumer-groups/{group}/queues/{queue}/seek", post(resources::seek))
        .route("/api/v1/traces", post(ops::trace))
        .route_layer(axum::middleware::from_fn_with_state(state.policy.clone(), crate::auth::guard));
    let mut app = Router::new()
        .route("/health", get(ops::health))
        .route("/metrics", get(ops::metrics))
        .merge(api)
        .fallback(|| async { crate::error::ApiError::not_found("no such route") })
        .layer(axum::middleware::from_fn_with_state(state.metrics.clone(), crate::metrics::track))
        .layer(DefaultBodyLimit::max(args.max_body_bytes))
        // A body must arrive within its timeout (a client that trickles one ties up nothing).
        .layer(RequestBodyTimeoutLayer::new(Duration::from_millis(args.body_timeout_ms)));
    if !args.cors_origin.is_empty() {
        // The origins allowed get CORS answers (their preflights too); any other origin is
        // refused by auth::guard.
        let origins: Vec<HeaderValue> = args.cors_origin.iter().filter_map(|o| o.parse().ok()).collect();
        let cors = if args.cors_origin.iter().any(|o| o == "*") {
            CorsLayer::new().allow_origin(Any)
        } else {
            CorsLayer::new().allow_origin(AllowOrigin::list(origins))
        };
        app = app.layer(cors.allow_methods(Any).allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE]));
    }
    app.with_state(state)
}
