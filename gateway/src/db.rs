//! Connections: two pools (requests, and waiting pops), each connection set up once (its
//! search_path) and its statements prepared once and kept (`prepare_cached`).

use std::time::Duration;

use deadpool_postgres::{
    GenericClient, Hook, HookError, Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime,
};
use tokio_postgres::types::ToSql;
use tokio_postgres::{CancelToken, NoTls, Row};

use axum::http::StatusCode;

use crate::auth::Caller;
use crate::config::Args;
use crate::error::{ApiError, ApiResult};
use crate::sql;

pub struct Db {
    /// Every request except waiting pops.
    pub pool: Pool,
    /// Waiting pops only: a full pool of them delays other waiting pops, never a push.
    pub wait_pool: Pool,
    /// Requests run as their token's role (auth.rs): every connection handed out is switched
    /// to the caller's role first (or back to the login role), whatever it ran as before.
    switch_roles: bool,
}

/// Switch the session back to the login role (the gateway's own statements).
const RESET_ROLE: &str = "SELECT pg_catalog.set_config('role', 'none', false)";

/// Which pool a statement runs on.
#[derive(Copy, Clone, PartialEq, Eq)]
pub enum Use {
    Request,
    Wait,
}

impl Db {
    pub fn new(args: &Args, switch_roles: bool) -> Result<Db, String> {
        let pool = build(args, args.pool_size, args.statement_timeout_ms)?;
        // A waiting pop's statement lasts up to its wait, then does its work.
        let wait_pool = build(args, args.wait_pool_size, args.statement_timeout_ms + args.max_wait_ms)?;
        Ok(Db { pool, wait_pool, switch_roles })
    }

    /// A connection that acts as `caller`.
    pub async fn get(&self, which: Use, caller: &Caller) -> ApiResult<Object> {
        let client = self.connection(which).await?;
        if self.switch_roles {
            match caller.role.as_deref() {
                None => {
                    let statement = client.prepare_cached(RESET_ROLE).await?;
                    client.query(&statement, &[]).await?;
                }
                Some(role) => {
                    let statement = client.prepare_cached(sql::SWITCH_ROLE).await?;
                    let refused = || ApiError::new(StatusCode::FORBIDDEN, crate::auth::not_a_role_to_act_as(role));
                    let row = client.query_one(&statement, &[&role]).await.map_err(|e| match e.as_db_error() {
                        // Where SET ROLE needs more than membership (a grant's SET option,
                        // from PostgreSQL 16 on), PostgreSQL refuses with 42501.
                        Some(db) if db.code().code() == "42501" => refused(),
                        _ => ApiError::from_db(&e),
                    })?;
                    if !row.get::<_, bool>(0) {
                        return Err(refused());
                    }
                }
            }
        }
        Ok(client)
    }

    /// The role the gateway logs in as (`session_user`), and whether it is a superuser.
    pub async fn login_role(&self) -> ApiResult<(String, bool)> {
        let client = self.connection(Use::Request).await?;
        let row = query_one(
            &client,
            "SELECT session_user::text, r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user",
            &[],
        )
        .await?;
        Ok((row.get(0), row.get(1)))
    }

    async fn connection(&self, which: Use) -> ApiResult<Object> {
        let pool = if which == Use::Wait { &self.wait_pool } else { &self.pool };
        pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => ApiError::from_db(&e),
            deadpool_postgres::PoolError::PostCreateHook(HookError::Backend(e)) => ApiError::from_db(&e),
            deadpool_postgres::PoolError::PostCreateHook(HookError::Message(m)) => ApiError::unavailable(m.to_string()),
            other => ApiError::unavailable(format!("no database connection available: {other}")),
        })
    }
}

fn build(args: &Args, size: usize, statement_timeout_ms: u64) -> Result<Pool, String> {
    let mut pg: tokio_postgres::Config = args.database_url.parse().map_err(|e| format!("--database-url: {e}"))?;
    if pg.get_application_name().is_none() {
        pg.application_name("queen-gateway");
    }
    pg.options(format!("-c statement_timeout={statement_timeout_ms}"));
    pg.connect_timeout(Duration::from_millis(args.pool_timeout_ms));
    // Fast recycling: a connection is checked only for being closed. A statement cut short by a
    // client that went away was cancelled (CancelOnDrop) and its transaction, if any, rolled back
    // by tokio-postgres before the connection is handed out again.
    let manager = Manager::from_config(pg, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager)
        .max_size(size)
        .wait_timeout(Some(Duration::from_millis(args.pool_timeout_ms)))
        .create_timeout(Some(Duration::from_millis(args.pool_timeout_ms)))
        .runtime(Runtime::Tokio1)
        .post_create(Hook::async_fn(|client, _| {
            Box::pin(async move {
                let rows = client.query(sql::SETUP, &[]).await.map_err(HookError::Backend)?;
                if rows.is_empty() {
                    return Err(HookError::message(
                        "the queen extension is not installed in this database (CREATE EXTENSION queen)",
                    ));
                }
                Ok(())
            })
        }))
        .build()
        .map_err(|e| format!("connection pool: {e}"))
}

/// Run one kept statement.
pub async fn query<C: GenericClient>(client: &C, sql: &str, params: &[&(dyn ToSql + Sync)]) -> ApiResult<Vec<Row>> {
    let statement = client.prepare_cached(sql).await?;
    Ok(client.query(&statement, params).await?)
}

/// Run one kept statement that returns one row.
pub async fn query_one<C: GenericClient>(client: &C, sql: &str, params: &[&(dyn ToSql + Sync)]) -> ApiResult<Row> {
    let statement = client.prepare_cached(sql).await?;
    Ok(client.query_one(&statement, params).await?)
}

/// Cancels the statement in flight when dropped armed: when a client goes away during a waiting
/// pop, axum drops the handler, and without a cancel the pop would go on, take a lease and hand
/// its messages to nobody until the lease ran out. Cancelled, it rolls back: no lease, nothing
/// delivered.
pub struct CancelOnDrop(Option<CancelToken>);

impl CancelOnDrop {
    pub fn arm(client: &Object) -> CancelOnDrop {
        CancelOnDrop(Some(client.cancel_token()))
    }

    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(token) = self.0.take() {
            tracing::info!("client went away during a statement: cancelling it");
            tokio::spawn(async move {
                let _ = token.cancel_query(NoTls).await;
            });
        }
    }
}
