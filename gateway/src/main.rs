//! queen-gateway: Queen MQ's HTTP API (the routes its clients use) over the queen extension's
//! SQL functions, so that Queen's clients work unchanged against PostgreSQL with queen.
//! docs/gateway.md describes the routes and what each maps to.

mod auth;
mod browser;
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

use clap::Parser;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tower::ServiceExt;
use tracing_subscriber::EnvFilter;

use crate::config::{Args, AuthMode, LogFormat};

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
    let mut verifier = match auth_mode(&args)? {
        AuthMode::Jwt => Some(auth::Verifier::new(
            args.jwt_secret.as_deref(),
            args.jwks_file.as_deref(),
            args.jwks_url.as_deref(),
            &args.jwt_role_claim,
            args.jwt_audience.as_deref(),
            args.jwt_issuer.as_deref(),
        )?),
        AuthMode::None => {
            tracing::warn!(
                listen = %args.listen,
                "NO AUTHENTICATION (--auth none): every request acts as the gateway's login role, \
                 whoever sends it. Only for a loopback-only setup; use --auth jwt otherwise."
            );
            None
        }
    };
    let jwt = verifier.is_some();
    let db = Arc::new(db::Db::new(&args, jwt)?);
    // One connection now, so a wrong URL or a database without queen fails at start, not at the
    // first request.
    drop(db.get(db::Use::Request, &auth::Caller::gateway()).await.map_err(|e| format!("database: {}", e.message))?);
    let (login_role, superuser) = db.login_role().await.map_err(|e| format!("database: {}", e.message))?;
    if let Some(v) = verifier.as_mut() {
        v.set_login_role(&login_role);
        if superuser {
            tracing::warn!(
                login_role,
                "the gateway logs in as a superuser: a token may then name any role that is not a superuser; \
                 log in as a role granted only the roles tokens may name"
            );
        }
    }
    let hosts = browser::Hosts::new(&args.allowed_host, args.listen, !jwt)?;
    if !jwt && !hosts.restricted() {
        tracing::warn!("--allowed-host '*' without authentication: a web page can reach the gateway by DNS rebinding");
    }
    let policy = Arc::new(auth::Policy { verifier, cors_origins: args.cors_origin.clone(), hosts });
    if args.jwks_url.is_some() {
        let p = policy.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(60)).await;
                let p = p.clone();
                let _ = tokio::task::spawn_blocking(move || p.verifier.as_ref().map(|v| v.refresh_keys())).await;
            }
        });
    }
    let max_waits = match args.max_waits_per_caller {
        0 => (args.wait_pool_size / 4).max(1),
        n => n,
    };
    let state = routes::AppState {
        db,
        metrics: Arc::new(metrics::Metrics::new()),
        max_wait_ms: args.max_wait_ms,
        policy,
        waits: Arc::new(auth::Waits::default()),
        max_waits_per_caller: max_waits,
    };
    let app = routes::router(state, &args);
    let listener = TcpListener::bind(args.listen).await.map_err(|e| format!("listen on {}: {e}", args.listen))?;
    tracing::info!(listen = %args.listen, auth = if jwt { "jwt" } else { "none" }, pool_size = args.pool_size,
                   wait_pool_size = args.wait_pool_size, "queen-gateway listening");
    // HTTP/1.1, as Queen's clients speak it. A request head must arrive within the timeout (a
    // client that sends half a head and stalls is cut off, not kept for ever).
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(Duration::from_millis(args.header_timeout_ms));
    let graceful = GracefulShutdown::new();
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors, say: wait a little rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        // TCP_NODELAY on every connection: a response goes out as soon as it is written, not
        // after the client's delayed ACK of the previous segment (up to 40 ms on Linux).
        let _ = tcp.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            app.clone().oneshot(req.map(axum::body::Body::new))
        });
        let conn = graceful.watch(http.serve_connection(TokioIo::new(tcp), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
        });
    }
    let grace = Duration::from_millis(args.shutdown_timeout_ms);
    tracing::info!(grace_ms = grace.as_millis() as u64, "shutting down: finishing requests in flight");
    // Past the grace period, exit anyway: what was cut short rolls back in the database.
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        tracing::warn!("requests still in flight after the grace period: exiting");
        std::process::exit(1);
    }
    tracing::info!("stopped");
    Ok(())
}

/// The authentication to use: as given, or `jwt` when a key is given and `none` otherwise.
/// Without authentication the gateway listens on a loopback address only: anyone who reaches
/// the port would act as its login role.
fn auth_mode(args: &Args) -> Result<AuthMode, String> {
    let keyed = args.jwt_secret.is_some() || args.jwks_file.is_some() || args.jwks_url.is_some();
    let mode = args.auth.unwrap_or(if keyed { AuthMode::Jwt } else { AuthMode::None });
    if mode == AuthMode::None && !args.listen.ip().is_loopback() {
        return Err(format!(
            "refusing to listen on {} without authentication: give --auth jwt with --jwt-secret, \
             --jwks-file or --jwks-url, or listen on a loopback address (127.0.0.1) behind a proxy \
             that authenticates",
            args.listen
        ));
    }
    if mode == AuthMode::None && keyed {
        return Err("--auth none with a JWT key: say --auth jwt, or drop the key".into());
    }
    Ok(mode)
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
