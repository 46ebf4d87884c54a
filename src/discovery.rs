//! How a consumer group finds the partitions that have new messages for it, without looking
//! at the partitions that have none (SPEC §3.2: a pop costs O(batch + log n)).
//!
//! The messages themselves, indexed by (queue, txid, seq), are the queue's activity log. A
//! group keeps a *discovery point* in that log plus the transactions that were still running
//! when the point passed them (the same pending-xid rule as the cursor: a transaction that
//! commits late is found when it commits). Each pop reads the log after the point (bounded),
//! leaves a *hint* for every partition it finds (`queen.ready`), and records the new point.
//! Points and hints are insert-only, so concurrent pops, even in long transactions, never
//! wait on each other; a point a long transaction has not committed yet only means that
//! other pops read the same stretch of log again.

use crate::cursor::Key;
use crate::spi::Query;
use crate::state::{INT8, INT8S, SQL, TEXT, TSTZ, UUID, UUIDS};
use pgrx::datum::DatumWithOid;
use pgrx::spi::SpiClient;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::Uuid;

/// How many log entries one pop reads at most. Each message is read once per group, so the
/// cost is spread over the pops; the bound keeps any single pop short.
pub const SCAN_LIMIT: i64 = 1000;

const DISCOVERY_POINT: Query = Query { file: SQL, name: "discovery_point", args: &[UUID, TEXT] };
const QUEUE_FROM_POSITION: Query = Query { file: SQL, name: "queue_from_position", args: &[UUID, TSTZ] };
const DISCOVERY_SCAN: Query = Query { file: SQL, name: "discovery_scan", args: &[UUID, INT8, INT8, INT8S, INT8] };
const DISCOVERY_SAVE: Query = Query { file: SQL, name: "discovery_save", args: &[UUID, TEXT, INT8, INT8, INT8S] };
const HINTS_ADD: Query = Query { file: SQL, name: "hints_add", args: &[UUID, TEXT, UUIDS] };

/// A subscription of a group to a queue (SPEC §3.2), as stored.
#[derive(Debug, Clone)]
pub struct Subscription {
    pub mode: String,
    pub from_ts: Option<TimestampWithTimeZone>,
    pub start_xmax: i64,
    pub start_xip: Vec<i64>,
}

/// A position in a log plus the transactions still running behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    pub upto: Key,
    pub pending: Vec<i64>,
}

/// The point a group starts discovering from when it has none yet.
fn initial_point(client: &mut SpiClient<'_>, queue_id: Uuid, sub: &Subscription) -> Point {
    match sub.mode.as_str() {
        "new" => Point { upto: (sub.start_xmax, 0), pending: sub.start_xip.clone() },
        "from" => {
            let args: [DatumWithOid; 2] = [queue_id.into(), sub.from_ts.into()];
            let row = QUEUE_FROM_POSITION.execute(client, &args).expect("queen: queue_from_position").first();
            let (t, s, x) = row.get_three::<i64, i64, Vec<i64>>().expect("queen: position");
            Point { upto: (t.unwrap_or(0), s.unwrap_or(0)), pending: x.unwrap_or_default() }
        }
        _ => Point { upto: (0, 0), pending: vec![] },
    }
}

/// Read the log after the group's point, hint the partitions found, and move the point.
pub fn discover(client: &mut SpiClient<'_>, queue_id: Uuid, group: &str, sub: &Subscription) {
    let args: [DatumWithOid; 2] = [queue_id.into(), group.into()];
    let point = DISCOVERY_POINT
        .execute(client, &args)
        .expect("queen: discovery_point")
        .next()
        .map(|r| Point {
            upto: (r.get::<i64>(1).unwrap().unwrap(), r.get::<i64>(2).unwrap().unwrap()),
            pending: r.get::<Vec<i64>>(3).unwrap().unwrap_or_default(),
        });
    let stored = point.is_some();
    let point = point.unwrap_or_else(|| initial_point(client, queue_id, sub));

    let args: [DatumWithOid; 5] =
        [queue_id.into(), point.upto.0.into(), point.upto.1.into(), point.pending.clone().into(), SCAN_LIMIT.into()];
    let row = DISCOVERY_SCAN.execute(client, &args).expect("queen: discovery_scan").first();
    let col = |i: usize| row.get::<Vec<i64>>(i).expect("queen: discovery column").unwrap_or_default();
    let xmin = row.get::<i64>(1).expect("queen: xmin").unwrap_or(0);
    let xip = col(2);
    let visible = row.get::<Vec<bool>>(3).expect("queen: visible").unwrap_or_default();
    let last = match (row.get::<i64>(4).expect("queen: last"), row.get::<i64>(5).expect("queen: last")) {
        (Some(t), Some(s)) => Some((t, s)),
        _ => None,
    };
    let partitions = row.get::<Vec<Uuid>>(6).expect("queen: partitions").unwrap_or_default();

    let next = next_point(&point, &visible, xmin, &xip, last);
    if !partitions.is_empty() {
        let args: [DatumWithOid; 3] = [queue_id.into(), group.into(), partitions.into()];
        HINTS_ADD.execute(client, &args).expect("queen: hints_add");
    }
    if next != point || !stored {
        let args: [DatumWithOid; 5] =
            [queue_id.into(), group.into(), next.upto.0.into(), next.upto.1.into(), next.pending.into()];
        DISCOVERY_SAVE.execute(client, &args).expect("queen: discovery_save");
    }
}

/// The point after a scan: pending transactions that committed (their partitions were
/// hinted) or aborted (invisible and below `xmin`) are dropped; transactions the scan passed
/// while they were running (in `xip`, between the old point and the last entry read) are added.
pub fn next_point(point: &Point, visible: &[bool], xmin: i64, xip: &[i64], last: Option<Key>) -> Point {
    let mut pending: Vec<i64> = point
        .pending
        .iter()
        .zip(visible.iter().chain(std::iter::repeat(&false)))
        .filter(|(x, vis)| !**vis && **x >= xmin)
        .map(|(x, _)| *x)
        .collect();
    let upto = match last {
        Some(k) => {
            pending.extend(xip.iter().copied().filter(|&x| x > point.upto.0 && x < k.0));
            k
        }
        None => point.upto,
    };
    pending.sort_unstable();
    pending.dedup();
    Point { upto, pending }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_point_keeps_running_transactions_it_passed() {
        let p = Point { upto: (10, 1), pending: vec![] };
        // Read up to (20,3); 12 and 15 were running, 25 is beyond what was read.
        let n = next_point(&p, &[], 9, &[12, 15, 25], Some((20, 3)));
        assert_eq!(n, Point { upto: (20, 3), pending: vec![12, 15] });
        // 12 committed (its partitions were hinted), 15 is still running, nothing new.
        let n2 = next_point(&n, &[true, false], 11, &[15], None);
        assert_eq!(n2, Point { upto: (20, 3), pending: vec![15] });
        // 15 aborted: invisible and below xmin.
        let n3 = next_point(&n2, &[false], 16, &[], None);
        assert!(n3.pending.is_empty());
    }
}
