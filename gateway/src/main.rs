//! queen-gateway: Queen MQ's HTTP API (the routes its clients use) over the queen extension's
//! SQL functions, so that Queen's clients work unchanged against PostgreSQL with queen.
//! docs/gateway.md describes the routes and what each maps to.

mod config;
mod db;
mod error;
mod metrics;
mod routes;
mod sql;
mod wire;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use clap::Parser;
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

use crate::config::{Args, LogFormat};

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let filter = EnvFilter::try_from_env("QUEEN_GATEWAY_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only on a terminal: a log file or journald gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    match args.log_format {
        LogFormat::Json => tracing_subscriber::fmt().json().with_env_filter(filter).init(),
        LogFormat::Text => tracing_subscriber::fmt().with_ansi(ansi).with_env_filter(filter).init(),
    }
    match serve(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "queen-gateway stopped");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), String> {
    let db = Arc::new(db::Db::new(&args)?);
    // One connection now, so a wrong URL or a database without queen fails at start, not at the
    // first request.
    drop(db.get(db::Use::Request).await.map_err(|e| format!("database: {}", e.message))?);
    let state = routes::AppState { db, metrics: Arc::new(metrics::Metrics::new()), max_wait_ms: args.max_wait_ms };
    let app = routes::router(state, args.max_body_bytes);
    // TCP_NODELAY on every connection: a response goes out as soon as it is written, not after
    // the client's delayed ACK of the previous segment (up to 40 ms on Linux).
    let listener =
        TcpListener::bind(args.listen).await.map_err(|e| format!("listen on {}: {e}", args.listen))?.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
    tracing::info!(listen = %args.listen, pool_size = args.pool_size, wait_pool_size = args.wait_pool_size, "queen-gateway listening");
    let grace = Duration::from_millis(args.shutdown_timeout_ms);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown_signal().await;
            tracing::info!(grace_ms = grace.as_millis() as u64, "shutting down: finishing requests in flight");
            // Past the grace period, exit anyway: what was cut short rolls back in the database.
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                tracing::warn!("requests still in flight after the grace period: exiting");
                std::process::exit(1);
            });
        })
        .await
        .map_err(|e| format!("serve: {e}"))?;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
