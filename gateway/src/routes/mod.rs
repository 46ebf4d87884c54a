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
        // A Host not served is refused on every route, /health and /metrics too (browser.rs).
        .layer(axum::middleware::from_fn_with_state(state.policy.clone(), crate::browser::host_check))
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
        app = app.layer(cors.allow_methods(Any).allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            crate::auth::CLIENT_ID,
        ]));
    }
    app.with_state(state)
}

/// The whole router over a database that cannot be reached: a request the checks let through
/// is answered 503 (no connection), one they refuse gets its refusal.
#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use clap::Parser;
    use serde_json::Value;
    use tower::ServiceExt;

    use crate::auth::{Policy, Verifier};
    use crate::browser::Hosts;

    pub const SECRET: &str = "a-test-secret-of-at-least-32-bytes!!";

    pub fn build(flags: &[&str]) -> Router {
        let mut argv = vec!["queen-gateway", "--database-url", "postgresql://nobody@127.0.0.1:1/none"];
        argv.extend(["--pool-timeout-ms", "2000"]);
        argv.extend(flags);
        let args = Args::parse_from(argv);
        let jwt = args.auth == Some(crate::config::AuthMode::Jwt);
        let verifier = jwt.then(|| Verifier::new(Some(SECRET), None, None, "role", None, None).unwrap());
        let hosts = Hosts::new(&args.allowed_host, args.listen, !jwt).unwrap();
        let policy = Arc::new(Policy { verifier, cors_origins: args.cors_origin.clone(), hosts });
        let state = AppState {
            db: Arc::new(Db::new(&args, jwt).unwrap()),
            metrics: Arc::new(Metrics::new()),
            max_wait_ms: args.max_wait_ms,
            policy,
            waits: Arc::new(Waits::default()),
            max_waits_per_caller: 2,
        };
        router(state, &args)
    }

    /// A request as a program sends it (Host localhost:6632) with `headers` on top; the status
    /// and the JSON body (Null when there is none).
    pub async fn call(app: &Router, method: &str, uri: &str, headers: &[(&str, &str)]) -> (StatusCode, Value) {
        let mut req = Request::builder().method(method).uri(uri);
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            req = req.header("host", "localhost:6632");
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let body = if method == "POST" { Body::from("{}") } else { Body::empty() };
        if method == "POST" {
            req = req.header("content-type", "application/json");
        }
        let response = app.clone().oneshot(req.body(body).unwrap()).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    const UNREACHED: StatusCode = StatusCode::SERVICE_UNAVAILABLE;

    #[tokio::test]
    async fn a_refusal_that_leaves_a_body_unread_closes_the_connection() {
        let app = build(&["--auth", "none"]);
        let send = |headers: &[(&str, &str)], body: &'static str| {
            let mut req = Request::builder().method("POST").uri("/api/v1/consumer-groups/g/queues/q/seek");
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            let req = req.header("content-length", body.len().to_string()).body(Body::from(body)).unwrap();
            app.clone().oneshot(req)
        };
        let json = ("content-type", "application/json");
        let local = ("host", "localhost:6632");
        for (headers, status) in [
            (vec![("host", "evil.example"), json], 421),
            (vec![local, json, ("sec-fetch-site", "cross-site")], 403),
            (vec![local, ("content-type", "text/plain")], 415),
            (vec![local, json, ("x-queen-client-id", "two words")], 400),
        ] {
            let r = send(&headers, "{\"toEnd\": true}").await.unwrap();
            assert_eq!(r.status().as_u16(), status, "{headers:?}");
            assert_eq!(r.headers().get("connection").map(|v| v.to_str().unwrap()), Some("close"), "{headers:?}");
            // Without a body, nothing is left unread: the connection is kept.
            let r = send(&headers, "").await.unwrap();
            assert!(r.headers().get("connection").is_none(), "{headers:?}");
        }
    }

    #[tokio::test]
    async fn without_auth_a_host_not_served_is_421_on_every_route() {
        let app = build(&["--auth", "none"]);
        for uri in ["/health", "/metrics", "/api/v1/dlq", "/api/v1/pop/queue/q?autoAck=true", "/api/v1/nowhere"] {
            for host in ["evil.example", "evil.example:6632", "127.0.0.1.evil.example:6632"] {
                let (status, body) = call(&app, "GET", uri, &[("host", host)]).await;
                assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{uri} {host}");
                assert!(body["error"].as_str().unwrap().contains("--allowed-host"), "{body}");
            }
        }
        let (status, _) = call(&app, "POST", "/api/v1/push", &[("host", "evil.example")]).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST);
        for host in ["localhost:6632", "127.0.0.1:6632", "[::1]:6632", "localhost"] {
            assert_eq!(call(&app, "GET", "/api/v1/dlq", &[("host", host)]).await.0, UNREACHED, "{host}");
        }
        assert_eq!(call(&app, "GET", "/metrics", &[]).await.0, StatusCode::OK);
        // Listed names are served as well.
        let app = build(&["--auth", "none", "--allowed-host", "queen.internal,proxy.example:8443"]);
        assert_eq!(call(&app, "GET", "/api/v1/dlq", &[("host", "queen.internal:6632")]).await.0, UNREACHED);
        assert_eq!(call(&app, "GET", "/api/v1/dlq", &[("host", "proxy.example:8443")]).await.0, UNREACHED);
        assert_eq!(call(&app, "GET", "/api/v1/dlq", &[("host", "proxy.example")]).await.0.as_u16(), 421);
    }

    #[tokio::test]
    async fn with_auth_any_host_unless_some_are_listed() {
        let open = build(&["--auth", "jwt", "--listen", "0.0.0.0:6632"]);
        assert_eq!(
            call(&open, "GET", "/api/v1/dlq", &[("host", "queen.example.com")]).await.0,
            StatusCode::UNAUTHORIZED
        );
        let listed = build(&["--auth", "jwt", "--listen", "0.0.0.0:6632", "--allowed-host", "queen.example.com"]);
        assert_eq!(
            call(&listed, "GET", "/api/v1/dlq", &[("host", "queen.example.com")]).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(call(&listed, "GET", "/api/v1/dlq", &[("host", "other.example")]).await.0.as_u16(), 421);
    }

    #[tokio::test]
    async fn a_page_cannot_pop_or_change_anything() {
        let app = build(&["--auth", "none"]);
        let pop = "/api/v1/pop/queue/q?autoAck=true";
        let browser_loads: [&[(&str, &str)]; 6] = [
            // <img src>, <script src>, a link: no Origin on these GETs.
            &[("sec-fetch-site", "cross-site"), ("sec-fetch-mode", "no-cors"), ("sec-fetch-dest", "image")],
            &[("sec-fetch-site", "cross-site"), ("sec-fetch-mode", "navigate"), ("sec-fetch-dest", "document")],
            // The address typed into the browser.
            &[("sec-fetch-site", "none"), ("sec-fetch-mode", "navigate"), ("sec-fetch-dest", "document")],
            &[("origin", "https://evil.example"), ("sec-fetch-site", "cross-site"), ("sec-fetch-mode", "cors")],
            // Browsers from before Sec-Fetch-*.
            &[("upgrade-insecure-requests", "1")],
            &[("referer", "https://evil.example/")],
        ];
        for headers in browser_loads {
            for uri in [pop, "/api/v1/pop/queue/q/partition/p?autoAck=true"] {
                let (status, body) = call(&app, "GET", uri, headers).await;
                assert_eq!(status, StatusCode::FORBIDDEN, "{uri} {headers:?}");
                assert!(body["error"].as_str().unwrap().contains("cross-site"), "{body}");
            }
            let (status, _) = call(&app, "POST", "/api/v1/push", headers).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{headers:?}");
        }
        // Reads: cross-site loads are refused; the address typed in is served.
        let (status, _) = call(&app, "GET", "/api/v1/dlq", browser_loads[0]).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(call(&app, "GET", "/api/v1/dlq", browser_loads[2]).await.0, UNREACHED);
        // What Queen's clients send.
        assert_eq!(call(&app, "GET", pop, &[("user-agent", "python-httpx/0.28.1")]).await.0, UNREACHED);
        // An allowed origin's fetch.
        let app = build(&["--auth", "none", "--cors-origin", "https://ops.example"]);
        let fetch = [("origin", "https://ops.example"), ("sec-fetch-site", "cross-site"), ("sec-fetch-mode", "cors")];
        assert_eq!(call(&app, "GET", pop, &fetch).await.0, UNREACHED);
    }
}
