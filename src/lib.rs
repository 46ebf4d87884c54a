//! queen: a partitioned message broker inside PostgreSQL.
//!
//! Where things are: `api/` is the SQL surface (thin wrappers); the broker's rules live in the
//! modules named for them; `sql/schema.sql` is the schema and `sql/queries/` the queries.

::pgrx::pg_module_magic!(name, version);

mod accounted;
mod ack;
mod admin;
mod api;
mod cache;
mod clock;
mod cluster;
mod configure;
mod cursor;
mod dead_letters;
mod decide;
mod direct;
mod direct_discovery;
mod direct_save;
mod discovery;
mod error;
mod gucs;
mod hooks;
mod index_read;
mod index_write;
mod jsonb;
mod kv;
mod locks;
mod maintain;
mod max_wait;
mod message;
mod names;
mod oids;
mod options;
mod owner;
mod pace;
mod packed_keys;
mod permits;
mod pop;
mod privilege;
mod push;
mod route;
mod session;
mod shards;
mod spi;
mod state;
mod subscription;
mod subxact;
mod timer_wake;
mod timers;
mod totals;
mod visit;
mod wait;
mod worker;

/// Called when the library is loaded (at server start when it is in
/// `shared_preload_libraries`): settings, and with preloading the shared memory of waiting
/// pops and the maintenance workers.
#[pgrx::pg_guard]
pub extern "C-unwind" fn _PG_init() {
    error::init();
    gucs::init();
    hooks::init_backend();
    // SAFETY: a plain read of a Postgres global bool, which only this process writes (the
    // postmaster sets it while it loads shared_preload_libraries); _PG_init runs on the
    // process's only thread.
    if unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        wait::init_shared();
        hooks::init_shared();
        cache::init_shared();
        worker::init_shared();
        worker::register();
    }
}

// The schema comes first: every function's SQL is created after it.
::pgrx::extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
// The triggers that notice a restore need their function (src/api/cluster.rs).
::pgrx::extension_sql_file!("../sql/restore.sql", name = "restore", requires = [api::cluster::queen::rows_arrived]);
// queen on Citus: the setup call and the shard of a partition (docs/scale-out.md).
::pgrx::extension_sql_file!("../sql/distribute.sql", name = "distribute", requires = ["schema"]);
// The views and grants come last: the views call functions of schema `queen`.
::pgrx::extension_sql_file!("../sql/views.sql", name = "views", finalize);

#[cfg(any(test, feature = "pg_test"))]
mod pg_tests;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
