//! `queen_configure` (semantics §3.4, §4): create a queue if needed and change the options a patch
//! names. Validation is `options::StoredOptions::patched`; this module reads and writes rows.

use crate::error::QueenResult;
use crate::names;
use crate::options::StoredOptions;
use crate::spi::types::{BOOL, INT4, INT8, TEXT, TSTZ, UUID};
use crate::spi::{self, Query, Spi};
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::PgOid;
use serde_json::{json, Value};

const SQL: &str = include_str!("../sql/queries/configure.sql");

const LOAD_OPTIONS: Query = Query { file: SQL, name: "load_options", args: &[UUID] };
const OPTION_ARGS: &[PgOid] = &[UUID, INT4, INT4, INT4, BOOL, INT4, INT4, INT8, INT4, INT4, INT4, TEXT, TSTZ];
const UPDATE_OPTIONS: Query = Query { file: SQL, name: "update_options", args: OPTION_ARGS };
const INSERT_QUEUE: Query = Query { file: SQL, name: "insert_queue", args: OPTION_ARGS };

/// The stored options of a queue; all `None` (defaults) for a queue never configured or
/// not existing.
pub fn load(s: &mut Spi, queue_id: pgrx::Uuid) -> StoredOptions {
    let mut rows = LOAD_OPTIONS.run(s, &[queue_id.into()]);
    rows.next().map_or_else(StoredOptions::default, |row| stored_options(&row))
}

thread_local! {
    /// What `load_cached` read, kept under the cache's ticket (cache.rs).
    static CACHED: std::cell::RefCell<crate::cache::Map<pgrx::Uuid, StoredOptions>> =
        std::cell::RefCell::new(crate::cache::Map::new());
}

/// `load`, from this backend's cache (cache.rs) while nothing changed the queue's options.
pub fn load_cached(s: &mut Spi, queue_id: pgrx::Uuid) -> StoredOptions {
    crate::cache::read_through(&CACHED, queue_id, || load(s, queue_id))
}

/// The option columns of a row, named as `queen.queues` and `load_options` name them
/// (`lease_time` to `max_wait_time_seconds`): any query that reads a queue's options with
/// other columns selects them under these names.
pub fn stored_options(row: &spi::Row<'_>) -> StoredOptions {
    let int = |name: &str| row.get::<i32>(name);
    StoredOptions {
        lease_time: int("lease_time"),
        retry_limit: int("retry_limit"),
        retry_delay: int("retry_delay"),
        dead_letter_queue: row.get::<bool>("dead_letter_queue"),
        delayed_processing: int("delayed_processing"),
        window_buffer: int("window_buffer"),
        max_size: row.get::<i64>("max_size"),
        retention_seconds: int("retention_seconds"),
        completed_retention_seconds: int("completed_retention_seconds"),
        max_wait_time_seconds: int("max_wait_time_seconds"),
    }
}

/// Apply `patch` to `queue` and return `{"queue": name, "options": {every option}}`.
pub fn configure(queue: &str, patch: &Value) -> QueenResult<Value> {
    let queue_id = pgrx::Uuid::from_bytes(*names::queue_id(queue).as_bytes());
    // The queue's rows may be created: its shared lock (locks.rs), as a push's.
    crate::locks::writing(queue_id, Some(queue), None)?;
    crate::session::connect(|s| {
        crate::locks::wait_xact(crate::locks::Lock::Configure(queue_id), || {
            format!("the configuration of queue \"{}\"", crate::error::shorten(queue))
        })?;
        crate::cache::changed();
        let stored = load(s, queue_id).patched(patch)?;
        if let Some(l) = patch.get("leaseTime").and(stored.lease_time) {
            crate::options::check_lease("option \"leaseTime\"", l)?;
        }
        let o = &stored;
        // SAFETY: reads the clock.
        let now = crate::state::timestamp(unsafe { pgrx::pg_sys::GetCurrentTimestamp() });
        let args: [DatumWithOid; 13] = [
            queue_id.into(),
            o.lease_time.into(),
            o.retry_limit.into(),
            o.retry_delay.into(),
            o.dead_letter_queue.into(),
            o.delayed_processing.into(),
            o.window_buffer.into(),
            o.max_size.into(),
            o.retention_seconds.into(),
            o.completed_retention_seconds.into(),
            o.max_wait_time_seconds.into(),
            queue.into(),
            now.into(),
        ];
        let updated = UPDATE_OPTIONS.run(s, &args).len();
        if updated == 0 {
            INSERT_QUEUE.run(s, &args);
        }
        Ok(json!({"queue": queue, "options": stored.effective().to_json()}))
    })
}
