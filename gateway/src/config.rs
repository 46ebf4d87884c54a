//! The command line (every flag also an environment variable, for containers and systemd units).

use std::net::SocketAddr;

use clap::{Parser, ValueEnum};

#[derive(Parser, Debug, Clone)]
#[command(name = "queen-gateway", version, about = "Queen MQ's HTTP API over the queen PostgreSQL extension")]
pub struct Args {
    /// PostgreSQL connection URL (postgresql://user:password@host:port/database) of a database
    /// with the queen extension. Connect as a role granted the queues it serves (queen_grant).
    #[arg(long, env = "QUEEN_GATEWAY_DATABASE_URL")]
    pub database_url: String,

    /// Address to listen on (6632 is Queen's port, which its clients default to in examples).
    /// A non-loopback address needs `--auth jwt`.
    #[arg(long, env = "QUEEN_GATEWAY_LISTEN", default_value = "127.0.0.1:6632")]
    pub listen: SocketAddr,

    /// `jwt`: every /api/v1 request carries a bearer JWT whose role claim names the PostgreSQL
    /// role it runs as. `none`: every request acts as the login role, whoever sends it —
    /// accepted on a loopback address only. Default: `jwt` when a key is given, else `none`.
    #[arg(long, env = "QUEEN_GATEWAY_AUTH", value_enum)]
    pub auth: Option<AuthMode>,

    /// The shared secret of HS256/HS384/HS512 tokens (at least 32 bytes).
    #[arg(long, env = "QUEEN_GATEWAY_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,

    /// A JWK Set file with the public keys of RS*/PS*/ES256/ES384/EdDSA tokens.
    #[arg(long, env = "QUEEN_GATEWAY_JWKS_FILE")]
    pub jwks_file: Option<String>,

    /// A JWK Set URL (an identity provider's jwks_uri), read at start and every 10 minutes.
    #[arg(long, env = "QUEEN_GATEWAY_JWKS_URL")]
    pub jwks_url: Option<String>,

    /// The claim that names the PostgreSQL role a token acts as.
    #[arg(long, env = "QUEEN_GATEWAY_JWT_ROLE_CLAIM", default_value = "role")]
    pub jwt_role_claim: String,

    /// When given, a token's `aud` must be this.
    #[arg(long, env = "QUEEN_GATEWAY_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,

    /// When given, a token's `iss` must be this.
    #[arg(long, env = "QUEEN_GATEWAY_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,

    /// Origins whose cross-site requests are served (and answered with CORS headers); any
    /// other request a browser marks as cross-site is refused. Repeat, or separate with commas.
    #[arg(long, env = "QUEEN_GATEWAY_CORS_ORIGIN", value_delimiter = ',')]
    pub cors_origin: Vec<String>,

    /// Host names (`Host` header values) requests are served for: `name` (any port) or
    /// `name:port`; `*`: any. The loopback names (localhost, 127.0.0.1, [::1]) are always
    /// served. With `--auth none` only those by default, so that a page whose name is made to
    /// resolve to this address (DNS rebinding) is refused; with `--auth jwt` any host unless
    /// some are listed. Repeat, or separate with commas.
    #[arg(long, env = "QUEEN_GATEWAY_ALLOWED_HOST", value_delimiter = ',')]
    pub allowed_host: Vec<String>,

    /// How long a client may take to send a request's head (a connection that sends half a
    /// head is closed then).
    #[arg(long, env = "QUEEN_GATEWAY_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,

    /// How long a client may take to send a request's body.
    #[arg(long, env = "QUEEN_GATEWAY_BODY_TIMEOUT_MS", default_value_t = 30_000)]
    pub body_timeout_ms: u64,

    /// Waiting pops one caller may have open at once; 0: a quarter of the wait pool. A caller is
    /// a token's subject, or without authentication the `X-Queen-Client-Id` a request sends;
    /// requests without one are bounded by the wait pool only.
    #[arg(long, env = "QUEEN_GATEWAY_MAX_WAITS_PER_CALLER", default_value_t = 0)]
    pub max_waits_per_caller: usize,

    /// Connections for every request except waiting pops.
    #[arg(long, env = "QUEEN_GATEWAY_POOL_SIZE", default_value_t = 16)]
    pub pool_size: usize,

    /// Connections for waiting pops (wait=true): each holds one for up to its timeout, so they
    /// get a pool of their own and can never starve the pushes that would wake them.
    #[arg(long, env = "QUEEN_GATEWAY_WAIT_POOL_SIZE", default_value_t = 32)]
    pub wait_pool_size: usize,

    /// How long a request waits for a free connection before it is answered 503.
    #[arg(long, env = "QUEEN_GATEWAY_POOL_TIMEOUT_MS", default_value_t = 10_000)]
    pub pool_timeout_ms: u64,

    /// statement_timeout of the gateway's statements (a waiting pop gets its wait on top).
    #[arg(long, env = "QUEEN_GATEWAY_STATEMENT_TIMEOUT_MS", default_value_t = 30_000)]
    pub statement_timeout_ms: u64,

    /// The longest a pop may wait (its `timeout` is cut to this).
    #[arg(long, env = "QUEEN_GATEWAY_MAX_WAIT_MS", default_value_t = 60_000)]
    pub max_wait_ms: u64,

    /// The largest request body accepted (a push of many or large messages).
    #[arg(long, env = "QUEEN_GATEWAY_MAX_BODY_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// After SIGTERM or SIGINT the gateway stops accepting connections and lets requests in
    /// flight finish (a waiting pop runs to its timeout); past this it exits anyway. Work cut
    /// short is rolled back by the database: nothing is lost.
    #[arg(long, env = "QUEEN_GATEWAY_SHUTDOWN_TIMEOUT_MS", default_value_t = 65_000)]
    pub shutdown_timeout_ms: u64,

    /// Log lines as JSON objects (default) or as text.
    #[arg(long, env = "QUEEN_GATEWAY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    Jwt,
    None,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}
