//! `queen_replay_dead_letters` and `queen_purge_dead_letters` (docs/semantics.md §3.4;
//! the rules: dead_letters.rs).

use crate::dead_letters;
use crate::error::OrReport;
use crate::locks::all_or_none;
use crate::names;
use crate::privilege::{self, Privilege};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use pgrx::Uuid;

/// `queen_replay_dead_letters(queue, consumer_group, message_id)`: the group's dead letters on
/// the queue (NULL group: queue mode; every one, or that of `message_id`) are delivered to it
/// again. Returns how many.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_replay_dead_letters(
    queue: Option<&str>,
    consumer_group: default!(Option<&str>, "NULL"),
    message_id: default!(Option<Uuid>, "NULL"),
) -> i32 {
    const F: &str = "queen_replay_dead_letters";
    let queue = checked(F, queue, consumer_group);
    let held = || crate::locks::cursor_rows_of(consumer_group);
    if let Some(layout) = crate::route::distributed() {
        let each_shard = || crate::route::replay_dead_letters(&layout, queue, consumer_group, message_id);
        return all_or_none(held, each_shard).or_report(F);
    }
    all_or_none(held, || dead_letters::replay(queue, consumer_group, message_id)).or_report(F) as i32
}

/// `queen_purge_dead_letters(queue, consumer_group, message_id, failed_before)`: the group's
/// dead letters on the queue (every one, that of `message_id`, those filed before
/// `failed_before`) deleted; the messages stay. Returns how many.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_purge_dead_letters(
    queue: Option<&str>,
    consumer_group: default!(Option<&str>, "NULL"),
    message_id: default!(Option<Uuid>, "NULL"),
    failed_before: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> i32 {
    const F: &str = "queen_purge_dead_letters";
    let queue = checked(F, queue, consumer_group);
    let held = || crate::locks::cursor_rows_of(consumer_group);
    if let Some(layout) = crate::route::distributed() {
        let each_shard = || crate::route::purge_dead_letters(&layout, queue, consumer_group, message_id, failed_before);
        return all_or_none(held, each_shard).or_report(F);
    }
    all_or_none(held, || dead_letters::purge(queue, consumer_group, message_id, failed_before)).or_report(F) as i32
}

/// The arguments and the caller's `configure` grant on the queue (a replay moves the group's
/// cursor, as a seek does; a purge forgets what the group gave up on).
fn checked<'a>(f: &'static str, queue: Option<&'a str>, consumer_group: Option<&str>) -> &'a str {
    let queue = names::check_name("queue", "argument \"queue\"", queue).or_report(f);
    if let Some(g) = consumer_group {
        names::check_group("argument \"consumer_group\"", g).or_report(f);
    }
    privilege::require(&[queue], Privilege::Configure).or_report(f);
    queue
}

/// The workers' side on Citus (route.rs), as for seek (api/admin.rs).
#[pgrx::pg_schema]
mod queen {
    use super::checked;
    use crate::dead_letters;
    use crate::error::OrReport;
    use crate::route::enter_shard;
    use pgrx::datum::TimestampWithTimeZone;
    use pgrx::prelude::*;
    use pgrx::Uuid;

    /// `queen.shard_replay_dead_letters(shard, queue, consumer_group, message_id)`: how many
    /// the shard replayed.
    #[pg_extern(volatile, parallel_unsafe)]
    #[search_path(pg_catalog, pg_temp)]
    fn shard_replay_dead_letters(
        shard: i32,
        queue: Option<&str>,
        consumer_group: Option<&str>,
        message_id: Option<Uuid>,
    ) -> i32 {
        const F: &str = "queen_replay_dead_letters";
        let queue = checked(F, queue, consumer_group);
        enter_shard(shard).or_report(F);
        crate::privilege::require_internal("queen.shard_replay_dead_letters").or_report(F);
        crate::route::within_shard(shard, || dead_letters::replay(queue, consumer_group, message_id)).or_report(F)
            as i32
    }

    /// `queen.shard_purge_dead_letters(shard, queue, consumer_group, message_id,
    /// failed_before)`: how many the shard deleted.
    #[pg_extern(volatile, parallel_unsafe)]
    #[search_path(pg_catalog, pg_temp)]
    fn shard_purge_dead_letters(
        shard: i32,
        queue: Option<&str>,
        consumer_group: Option<&str>,
        message_id: Option<Uuid>,
        failed_before: Option<TimestampWithTimeZone>,
    ) -> i32 {
        const F: &str = "queen_purge_dead_letters";
        let queue = checked(F, queue, consumer_group);
        enter_shard(shard).or_report(F);
        crate::privilege::require_internal("queen.shard_purge_dead_letters").or_report(F);
        crate::route::within_shard(shard, || dead_letters::purge(queue, consumer_group, message_id, failed_before))
            .or_report(F) as i32
    }
}
