//! The functions that operate on consumer state (SPEC §3.4): `queen_renew`, `queen_seek`,
//! `queen_delete_group`, `queen_delete_queue`. Each is one statement of
//! `sql/queries/admin.sql`.

use crate::error::{QueenError, QueenResult};
use crate::names;
use crate::names::group_key;
use crate::names::to_pg;
use crate::spi::types::{INT4, TEXT, TSTZ, UUID};
use crate::spi::{self, Query};
use pgrx::datum::{DatumWithOid, TimestampWithTimeZone};
use pgrx::Uuid;

const SQL: &str = include_str!("../sql/queries/admin.sql");
const LEASE_QUEUES: Query = Query { file: SQL, name: "lease_queues", args: &[UUID] };
const RENEW: Query = Query { file: SQL, name: "renew", args: &[UUID, INT4] };
const SEEK: Query = Query { file: SQL, name: "seek", args: &[UUID, TEXT, TSTZ] };
const DELETE_GROUP: Query = Query { file: SQL, name: "delete_group", args: &[TEXT, UUID] };
const DELETE_QUEUE: Query = Query { file: SQL, name: "delete_queue", args: &[UUID] };

/// Extend an active lease; None when it is no longer active.
pub fn renew(lease_id: Uuid, seconds: Option<i32>) -> QueenResult<Option<TimestampWithTimeZone>> {
    if let Some(s) = seconds.filter(|s| *s <= 0) {
        return Err(QueenError::invalid("argument \"seconds\"", format!("must be 1 or more, got {s}")));
    }
    let role = crate::privilege::caller();
    spi::connect(|s| {
        // The caller must hold `pop` on the queues the lease covers (none: nothing to renew).
        if !crate::privilege::is_admin(s, role) {
            let queues: Vec<Uuid> = LEASE_QUEUES.run(s, &[lease_id.into()]).map(|r| r.req("queue_id")).collect();
            crate::privilege::require_ids(s, role, &queues, crate::privilege::Privilege::Pop)?;
        }
        let args: [DatumWithOid; 2] = [lease_id.into(), seconds.into()];
        Ok(RENEW.run(s, &args).next().and_then(|r| r.get::<TimestampWithTimeZone>("expires_at")))
    })
}

pub fn seek(queue: &str, group: Option<&str>, to_time: Option<TimestampWithTimeZone>) -> i32 {
    let queue_id = to_pg(names::queue_id(queue));
    spi::connect(|s| {
        let args: [DatumWithOid; 3] = [queue_id.into(), group_key(group).into(), to_time.into()];
        crate::cache::changed();
        SEEK.run(s, &args).first().req::<i64>("partitions_set") as i32
    })
}

pub fn delete_group(group: Option<&str>, queue: Option<&str>) -> i32 {
    let queue_id = queue.map(|q| to_pg(names::queue_id(q)));
    spi::connect(|s| {
        let args: [DatumWithOid; 2] = [group_key(group).into(), queue_id.into()];
        crate::cache::changed();
        DELETE_GROUP.run(s, &args).first().req::<i64>("cursors_removed") as i32
    })
}

pub fn delete_queue(queue: &str) -> bool {
    let queue_id = to_pg(names::queue_id(queue));
    spi::connect(|s| {
        let args: [DatumWithOid; 1] = [queue_id.into()];
        crate::cache::changed();
        DELETE_QUEUE.run(s, &args).first().req::<bool>("existed")
    })
}
