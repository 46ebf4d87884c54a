//! Prometheus metrics: requests by route and status, their latencies, messages pushed and
//! popped, and the use of both connection pools.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::db::Db;

pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    pub pushed: IntCounter,
    pub popped: IntCounter,
    pool: IntGaugeVec,
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new("queen_gateway_requests_total", "HTTP requests answered, by route, method and status"),
            &["route", "method", "status"],
        )
        .expect("valid metric");
        // Buckets from 0.5 ms (a push) to 60 s (a waiting pop).
        let latency = HistogramVec::new(
            HistogramOpts::new("queen_gateway_request_duration_seconds", "Time to answer a request, by route").buckets(
                vec![0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0],
            ),
            &["route", "method"],
        )
        .expect("valid metric");
        let pushed = IntCounter::new("queen_gateway_messages_pushed_total", "Messages pushed (queued or duplicate)")
            .expect("valid metric");
        let popped =
            IntCounter::new("queen_gateway_messages_popped_total", "Messages returned by pops").expect("valid metric");
        let pool = IntGaugeVec::new(
            Opts::new(
                "queen_gateway_pool_connections",
                "Database connections by pool and state (max, open, idle, waiting requests)",
            ),
            &["pool", "state"],
        )
        .expect("valid metric");
        for c in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(latency.clone()),
            Box::new(pushed.clone()),
            Box::new(popped.clone()),
            Box::new(pool.clone()),
        ] {
            registry.register(c).expect("metric names are unique");
        }
        Metrics { registry, requests, latency, pushed, popped, pool }
    }

    pub fn observe_pools(&self, db: &Db) {
        for (name, pool) in [("requests", &db.pool), ("wait", &db.wait_pool)] {
            let s = pool.status();
            self.pool.with_label_values(&[name, "max"]).set(s.max_size as i64);
            self.pool.with_label_values(&[name, "open"]).set(s.size as i64);
            self.pool.with_label_values(&[name, "idle"]).set(s.available as i64);
            self.pool.with_label_values(&[name, "waiting"]).set(s.waiting as i64);
        }
    }

    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("text encoding cannot fail");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

/// Count and time every request, and log it (debug; warn for a 5xx).
pub async fn track(State(metrics): State<Arc<Metrics>>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let route =
        req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string()).unwrap_or_else(|| "unmatched".into());
    let method = req.method().to_string();
    let response = next.run(req).await;
    let seconds = start.elapsed().as_secs_f64();
    let status = response.status();
    metrics.requests.with_label_values(&[&route, &method, status.as_str()]).inc();
    metrics.latency.with_label_values(&[&route, &method]).observe(seconds);
    if status.is_server_error() {
        tracing::warn!(%method, %route, status = status.as_u16(), ms = seconds * 1e3, "request failed");
    } else {
        tracing::debug!(%method, %route, status = status.as_u16(), ms = seconds * 1e3, "request");
    }
    response
}
