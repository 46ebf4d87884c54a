//! The views' answers for the whole cluster on Citus (totals.rs): internal, in schema `queen`;
//! `queen_distribute()` makes `queue_stats`, `group_lag` and `dead_letters_view` read them.
//! Each returns only the rows of queues the caller may read.

#[pgrx::pg_schema]
mod queen {
    use crate::jsonb::Jsonb;
    use crate::totals;
    use pgrx::datum::TimestampWithTimeZone;
    use pgrx::prelude::*;
    use pgrx::Uuid;

    type Ts = Option<TimestampWithTimeZone>;

    /// `queen.queue_stats_everywhere()`: the rows of `queen.queue_stats`, over every shard.
    #[pg_extern(volatile, parallel_unsafe)]
    #[search_path(pg_catalog, pg_temp)]
    #[allow(clippy::type_complexity)]
    fn queue_stats_everywhere() -> TableIterator<
        'static,
        (
            name!(queue, String),
            name!(partitions, i64),
            name!(messages, i64),
            name!(consumer_groups, i64),
            name!(dead_letters, i64),
            name!(oldest_message, Ts),
            name!(newest_message, Ts),
        ),
    > {
        TableIterator::new(totals::queue_stats().into_iter().map(|q| {
            (q.queue, q.partitions, q.messages, q.consumer_groups, q.dead_letters, q.oldest_message, q.newest_message)
        }))
    }

    /// `queen.group_lag_everywhere()`: the rows of `queen.group_lag`, over every shard.
    #[pg_extern(volatile, parallel_unsafe)]
    #[search_path(pg_catalog, pg_temp)]
    #[allow(clippy::type_complexity)]
    fn group_lag_everywhere() -> TableIterator<
        'static,
        (
            name!(queue, String),
            name!(consumer_group, Option<String>),
            name!(partition, String),
            name!(pending, i64),
            name!(oldest_pending, Ts),
            name!(lease_id, Option<Uuid>),
            name!(lease_expires_at, Ts),
        ),
    > {
        TableIterator::new(totals::group_lag().into_iter().map(|l| {
            (l.queue, l.consumer_group, l.partition, l.pending, l.oldest_pending, l.lease_id, l.lease_expires_at)
        }))
    }

    /// `queen.dead_letters_everywhere()`: the rows of `queen.dead_letters_view`, over every
    /// shard.
    #[pg_extern(volatile, parallel_unsafe)]
    #[search_path(pg_catalog, pg_temp)]
    #[allow(clippy::type_complexity)]
    fn dead_letters_everywhere() -> TableIterator<
        'static,
        (
            name!(queue, String),
            name!(partition, Option<String>),
            name!(consumer_group, Option<String>),
            name!(message_id, Uuid),
            name!(transaction_id, String),
            name!(payload, Option<Jsonb>),
            name!(error, Option<String>),
            name!(attempts, i32),
            name!(created_at, Ts),
            name!(failed_at, TimestampWithTimeZone),
            name!(partition_id, Uuid),
            name!(trace_id, Option<Uuid>),
        ),
    > {
        TableIterator::new(totals::dead_letters().into_iter().map(|d| {
            (
                d.queue,
                d.partition,
                d.consumer_group,
                d.message_id,
                d.transaction_id,
                d.payload,
                d.error,
                d.attempts,
                d.created_at,
                d.failed_at,
                d.partition_id,
                d.trace_id,
            )
        }))
    }
}
