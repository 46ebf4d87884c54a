//! How a consumer group finds the partitions that have new messages for it, without looking
//! at the partitions that have none (semantics §3.2: a pop costs O(batch + log n)).
//!
//! The messages themselves, indexed by (queue, txid, seq), are the queue's activity log. A
//! group keeps a *discovery point* in that log plus the transactions that were still running
//! when the point passed them (the same pending-xid rule as the cursor: a transaction that
//! commits late is found when it commits). Each pop reads the log after the point (bounded),
//! leaves a *hint* for every partition it finds (`queen.ready`), and records the new point.
//! Points and hints are insert-only, so concurrent pops, even in long transactions, never
//! wait on each other; a point a long transaction has not committed yet only means that
//! other pops read the same stretch of log again.
//!
//! **Progress that a rollback does not take back.** A consumer that rolls back its empty pops
//! (`BEGIN; pop; ROLLBACK` in a worker loop) would take its discovery point back each time, and
//! re-read the same stretch of log for ever: after a long finished stretch, a pop reads a
//! bounded amount and gives up, and a message in a new partition further on was never reached
//! (issue 20). So the backend *carries* what its discovery reached — the point, and the
//! partitions it hinted since the last point it saw committed — out of a transaction that
//! rolls back: its next scan starts from the carried point when that is ahead of the stored
//! one, and hints those partitions again (their hints went with the rollback). A point so
//! carried is as valid as a stored one, once its hints are written again: it was read from
//! committed messages, with the transactions running then kept pending. What is carried is
//! dropped when a committed point of another transaction passes it, when the subscription
//! changes (`sub_key`), and when a transaction that discovered the group commits (the table
//! holds it then) — not at other commits: the application's own work, or a driver's prepare
//! outside a transaction block, committed between rolled-back pops made each pop start again
//! from the stored point. A backend carries one point per group: a carry must hold every
//! partition hinted since the committed point, so a scan that starts from a point its own
//! transaction stored, with no carry for it, carries nothing (after a rollback the group reads
//! on from the committed point).
//!
//! **No scan when nothing was pushed.** A scan that found the log read to its end — no entry
//! after the point, no partition to hint — leaves the count of the queue's pushes
//! it read before its snapshot (wait.rs: raised after each pushing commit is visible), the
//! subscription and the cache's ticket (cache.rs: a seek, a restore's rows, a subscription
//! changed). Once its transaction has committed, the backend's next pops of that group skip
//! the scan while all three are unchanged: it would read nothing. (Read committed and
//! preloaded only, as the cache; a transaction or subtransaction that rolls back leaves
//! nothing, so a rolled-back point's partitions are hinted again as above. An idle consumer
//! polling an empty queue ran the scan at every pop.)

use crate::cursor::Key;
use crate::spi::types::{BOOL, INT4, INT8, INT8S, TEXT, TSTZ, UUID, UUIDS};
use crate::spi::{Query, Row, Spi};
use crate::subscription::Subscription;
use pgrx::datum::DatumWithOid;
use pgrx::Uuid;

/// How many log entries one pop reads: twice what it may deliver (`batch`, the total cap),
/// between these bounds. Each message is read once per group, so the cost is spread over the
/// pops, and discovery outpaces consumption twice over: a backlog is found in half the pops
/// that consume it. The bound keeps any single pop short while a backlog is discovered (a
/// partition deep in the backlog is reached after at most backlog / MIN_SCAN pops, so none
/// starves). (Reading four times, or batch × partitions, made discovery a third of a pop's
/// cost in a backlog: docs/benchmarks.md, "Measurements behind the design".)
const MIN_SCAN: i64 = 64;
pub const MAX_SCAN: i64 = 1000;
/// The most entries one statement reads: a later round of a pop that found nothing
/// (round_limit), or a scan that reads what pops the hints filled owe (pace.rs). A scan's
/// cost is mostly a probe per partition found, not per entry: in a backlog whose partitions
/// repeat in the log, four scans' worth costs not much more than one (1 000 partitions in
/// turn: 4.0 ms a scan of 4 000 entries against 2.3 ms for 1 000).
pub const MAX_LONG_SCAN: i64 = 4 * MAX_SCAN;

pub fn scan_limit(batch: i64) -> i64 {
    batch.saturating_mul(2).clamp(MIN_SCAN, MAX_SCAN)
}

/// How many pops' shares (scan_limit) a scan that reads what pops the hints filled owe
/// (pace.rs) may read at most: a partition that gets its first message behind a backlog is
/// found within this many pops of a backend.
const OWED_POPS: i64 = 16;

/// The most a scan that reads what is owed may read, for pops whose share is `share`: sixteen
/// shares, between one scan's worth and MAX_LONG_SCAN.
pub fn owed_scan_limit(share: i64) -> i64 {
    share.saturating_mul(OWED_POPS).clamp(MAX_SCAN, MAX_LONG_SCAN)
}

const SQL: &str = include_str!("../sql/queries/discovery.sql");
const DISCOVERY_SCAN: Query = Query {
    file: SQL,
    name: "discovery_scan",
    args: &[UUID, TEXT, INT8, INT8, INT8S, INT8, TEXT, INT8, INT8, INT8S, INT4],
};
const CITUS_HINTS_NEEDED: Query = Query { file: SQL, name: "citus_hints_needed", args: &[TEXT, UUIDS, INT8S, INT4] };
const CITUS_HINTS_UPDATE: Query =
    Query { file: SQL, name: "citus_hints_update", args: &[TEXT, UUIDS, INT8, INT4, INT8, TSTZ] };
const CITUS_HINTS_INSERT: Query =
    Query { file: SQL, name: "citus_hints_insert", args: &[UUID, TEXT, UUIDS, INT8, INT4, INT8, TSTZ] };
const CITUS_DISCOVERY_PRUNE: Query =
    Query { file: SQL, name: "citus_discovery_prune", args: &[UUID, TEXT, INT8, INT8, TEXT, INT4] };
const CITUS_DISCOVERY_POINT: Query =
    Query { file: SQL, name: "citus_discovery_point", args: &[UUID, TEXT, INT8, INT8, INT8S, TEXT, INT4] };
const DISCOVERY_RECORD: Query = Query {
    file: SQL,
    name: "discovery_record",
    args: &[UUID, TEXT, UUIDS, BOOL, INT8, INT8, INT8S, TEXT, INT8S, INT8, INT4, INT8, TSTZ],
};

/// A position in a log plus the transactions still running behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    pub upto: Key,
    pub pending: Vec<i64>,
}

#[derive(Debug, PartialEq, Eq)]
struct Scan {
    point: Point,
    /// The point was read from the table (`own`: one this transaction wrote) or carried.
    stored: bool,
    own: bool,
    carried: bool,
    xip: Vec<i64>,
    visible: Vec<bool>,
    last: Option<Key>,
    /// The partitions found, each once, in the order found, and the newest transaction found
    /// in each.
    partitions: Vec<Uuid>,
    newest: Vec<i64>,
    /// The scan's snapshot's xmin (the caller's own transaction counted as running).
    xmin: i64,
    /// How many log entries it read.
    read: i64,
}

fn scan(
    s: &mut Spi,
    queue_id: Uuid,
    group: &str,
    sub_key: &str,
    initial: &Point,
    carried: Option<&Point>,
    limit: i64,
) -> Scan {
    let args: [DatumWithOid; 11] = [
        queue_id.into(),
        group.into(),
        initial.upto.0.into(),
        initial.upto.1.into(),
        initial.pending.clone().into(),
        limit.into(),
        sub_key.into(),
        carried.map(|p| p.upto.0).into(),
        carried.map(|p| p.upto.1).into(),
        carried.map(|p| p.pending.clone()).into(),
        crate::shards::current().into(),
    ];
    if crate::direct::available(s) {
        let by_hand = crate::direct_discovery::Args {
            queue_id,
            group,
            initial: (&initial.upto, &initial.pending),
            sub_key,
            limit,
            carried: carried.map(|p| (&p.upto, p.pending.as_slice())),
        };
        if let Some((read, snap)) = crate::direct_discovery::scan(&by_hand) {
            let sc = Scan::from_read(read);
            if cfg!(debug_assertions) {
                // The statement under the same snapshot must read the same.
                let sql = Scan::from_row(&DISCOVERY_SCAN.run_at(s, &args, snap.snap).first());
                assert_eq!(sc, sql, "queen: a discovery scan read otherwise than discovery_scan reads it");
            }
            return sc;
        }
    }
    Scan::from_row(&DISCOVERY_SCAN.run(s, &args).first())
}

impl Scan {
    /// What the scan by hand read (direct_discovery.rs).
    fn from_read(r: crate::direct_discovery::LogRead) -> Scan {
        Scan {
            xip: r.xip,
            visible: r.pending_visible,
            last: r.last,
            partitions: r.found_partitions,
            newest: r.found_txids,
            point: Point { upto: r.point.0, pending: r.point.1 },
            stored: r.stored,
            own: r.own,
            carried: r.carried,
            xmin: r.xmin,
            read: r.log_read,
        }
    }

    /// The row of `discovery_scan`.
    fn from_row(row: &Row<'_>) -> Scan {
        Scan {
            xip: row.get::<Vec<i64>>("xip").unwrap_or_default(),
            visible: row.get::<Vec<bool>>("pending_visible").unwrap_or_default(),
            last: match (row.get::<i64>("last_txid"), row.get::<i64>("last_seq")) {
                (Some(t), Some(q)) => Some((t, q)),
                _ => None,
            },
            partitions: row.get::<Vec<Uuid>>("found_partitions").unwrap_or_default(),
            newest: row.get::<Vec<i64>>("found_txids").unwrap_or_default(),
            point: Point {
                upto: (row.req("upto_txid"), row.req("upto_seq")),
                pending: row.get::<Vec<i64>>("pending_txid").unwrap_or_default(),
            },
            stored: row.req("stored"),
            own: row.req("own"),
            carried: row.req("carried"),
            xmin: row.req("xmin"),
            read: row.req("log_read"),
        }
    }
}

/// Read the log after the group's point, hint the partitions found, and move the point. The
/// pop then takes its candidates from the hints (pop.sql candidates). Returns whether the scan
/// read all `limit` entries it could: more of the log may follow.
pub fn discover(s: &mut Spi, queue_id: Uuid, group: &str, sub: &Subscription, limit: i64) -> bool {
    // Before the scan's snapshot (see "No scan when nothing was pushed").
    let ticket = crate::cache::ticket();
    let pushes = ticket.and_then(|_| crate::wait::pushes(crate::wait::queue_key(&crate::names::from_pg(queue_id))));
    let now = match (ticket, pushes) {
        (Some(ticket), Some(pushes)) => Some(CaughtUp { sub_key: sub.key.clone(), ticket, pushes }),
        _ => None,
    };
    let key = (*queue_id.as_bytes(), group.to_string());
    if now.is_some() && CAUGHT_UP.with(|c| c.borrow().get(&key) == now.as_ref()) {
        return false;
    }
    // Scanning: what was kept for the group no longer holds (or there was none).
    CAUGHT_UP.with(|c| c.borrow_mut().remove(&key));
    // Where the group starts, when no point is stored ('from': read below, when needed).
    let known = sub.start.point();
    let initial = match &known {
        Some((upto, pending)) => Point { upto: *upto, pending: pending.clone() },
        None => Point { upto: (0, 0), pending: vec![] },
    };
    let carry = carried(queue_id, group, &sub.key);
    let mut sc = scan(s, queue_id, group, &sub.key, &initial, carry.as_ref().map(|c| &c.point), limit);
    if let (false, false, crate::subscription::Start::From(from)) = (sc.stored, sc.carried, &sub.start) {
        // First discovery of a 'from' subscription: start just before its time.
        let (upto, pending) = crate::subscription::queue_start(s, queue_id, *from);
        let from = Point { upto, pending };
        sc = scan(s, queue_id, group, &sub.key, &from, None, limit);
    }
    crate::gucs::debug_discovery_delay();
    let next = next_point(&sc.point, &sc.visible, &sc.xip, sc.last);
    let save = next != sc.point || !sc.stored;
    // A point another transaction committed has passed what was carried: its hints cover it.
    let carry = carry.filter(|_| sc.carried || sc.own);
    let mut hint = Hinted { partitions: std::mem::take(&mut sc.partitions), newest: std::mem::take(&mut sc.newest) };
    let mut xmin = sc.xmin;
    if let (true, Some(c)) = (sc.carried, &carry) {
        // Their hints went with the rollback that carried the point out.
        hint.add(&c.hinted);
        xmin = xmin.min(c.xmin);
    }
    if save || !hint.partitions.is_empty() {
        if crate::shards::planning_for_citus() {
            record_in_steps(s, queue_id, group, sub, &hint, save, &next, xmin);
        } else {
            // SAFETY: reads the clock.
            let now = crate::state::timestamp(unsafe { pgrx::pg_sys::GetCurrentTimestamp() });
            let args: [DatumWithOid; 13] = [
                queue_id.into(),
                group.into(),
                hint.partitions.clone().into(),
                save.into(),
                next.upto.0.into(),
                next.upto.1.into(),
                next.pending.clone().into(),
                sub.key.as_str().into(),
                hint.newest.clone().into(),
                xmin.into(),
                crate::shards::current().into(),
                crate::cluster::txid().into(),
                now.into(),
            ];
            DISCOVERY_RECORD.run(s, &args);
        }
    }
    // What to carry out of this transaction if it rolls back: the new point, and every
    // partition hinted since the last point seen committed.
    // (Transactions pending behind the point do not count: one that pushed to the queue
    // raises its count when it commits, and one that did not leaves nothing to find.)
    let read_to_end = sc.read == 0 && !sc.carried && hint.partitions.is_empty();
    let reached = carry_on(carry.map(|c| c.hinted), sc.own, &hint).map(|all| (next, all, xmin));
    remember(queue_id, group, &sub.key, reached);
    CAUGHT_UP_NOW.with(|c| {
        let mut c = c.borrow_mut();
        c.retain(|(k, _)| *k != key);
        if let Some(now) = now.filter(|_| read_to_end) {
            c.push((key, now));
        }
    });
    sc.read >= limit
}

/// A scan that read nothing: the log had nothing after the group's point when the queue's
/// pushes counted `pushes`, under `ticket`.
#[derive(Clone, PartialEq)]
struct CaughtUp {
    sub_key: String,
    ticket: crate::cache::Ticket,
    pushes: u64,
}

/// Which (queue, group) a [`CaughtUp`] is of.
type GroupKey = ([u8; 16], String);

/// The most groups a backend keeps; past it, it starts again.
const CAUGHT_UP_MAX: usize = 1024;

thread_local! {
    /// The last such scan of each group in a committed transaction of this backend.
    static CAUGHT_UP: std::cell::RefCell<std::collections::HashMap<GroupKey, CaughtUp>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
    /// This transaction's, until it commits.
    static CAUGHT_UP_NOW: std::cell::RefCell<Vec<(GroupKey, CaughtUp)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A subtransaction rolled back: what its scans read may have started from a point it wrote,
/// gone now. What it reached stays carried.
pub fn at_subabort() {
    CAUGHT_UP_NOW.with(|c| c.borrow_mut().clear());
}

/// The transaction rolled back (or was prepared): as a subtransaction's, and no commit of it
/// will store what its discovery reached.
pub fn at_abort() {
    at_subabort();
    CARRIED.with(|c| c.borrow_mut().rolled_back());
}

/// Partitions hinted, each once, with the newest transaction found in each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hinted {
    pub partitions: Vec<Uuid>,
    pub newest: Vec<i64>,
}

impl Hinted {
    /// Add `other`'s partitions, keeping the newest transaction of each.
    pub fn add(&mut self, other: &Hinted) {
        for (p, t) in other.partitions.iter().zip(&other.newest) {
            match self.partitions.iter().position(|q| q == p) {
                Some(i) => self.newest[i] = self.newest[i].max(*t),
                None => {
                    self.partitions.push(*p);
                    self.newest.push(*t);
                }
            }
        }
    }
}

/// What discovery reached in a transaction that may roll back (see the module's comment).
#[derive(Debug, Clone, PartialEq)]
struct Carry {
    schema: pgrx::pg_sys::Oid,
    queue_id: Uuid,
    group: String,
    sub_key: String,
    point: Point,
    hinted: Hinted,
    /// The least xmin of the scans that found `hinted`: what their hints account for.
    xmin: i64,
    /// Found by the open transaction: once it commits, the table holds it. A commit of a
    /// transaction that did not discover the group (a driver's prepare outside a transaction
    /// block, the application's own work between rolled-back pops) leaves the carry as it was:
    /// it is as valid after that commit as before.
    this_tx: bool,
}

impl Carry {
    fn of(&self, schema: pgrx::pg_sys::Oid, queue_id: Uuid, group: &str) -> bool {
        self.schema == schema && self.queue_id == queue_id && self.group == group
    }
}

/// The most partitions a carried point may owe hints to; past it nothing is carried (the next
/// pop reads the stretch again).
const CARRY_MAX_PARTITIONS: usize = 4096;
/// The most groups a backend carries points for; past it the oldest carry goes (its group's
/// next pop reads from the stored point again).
const CARRY_MAX_GROUPS: usize = 64;

/// The carries of one backend, one per group at most. Kept per group: a worker that pops
/// several groups in one transaction must not lose one group's carry to another's (a single
/// carry did: the first group's later scan started from the point its transaction stored,
/// carried only what that scan hinted, and a rollback lost the hints of the earlier scan for
/// good — a message of a new partition was never found again).
#[derive(Debug, Default)]
struct Carries(Vec<Carry>);

impl Carries {
    /// What is carried for the group under subscription `sub_key`, if anything.
    fn get(&self, schema: pgrx::pg_sys::Oid, queue_id: Uuid, group: &str, sub_key: &str) -> Option<Carry> {
        self.0.iter().find(|c| c.of(schema, queue_id, group) && c.sub_key == sub_key).cloned()
    }

    /// After a scan of `carry`'s group: what it carries now, or nothing (`None` for the group).
    fn set(&mut self, schema: pgrx::pg_sys::Oid, queue_id: Uuid, group: &str, carry: Option<Carry>) {
        self.0.retain(|c| !c.of(schema, queue_id, group));
        if let Some(c) = carry {
            if self.0.len() >= CARRY_MAX_GROUPS {
                self.0.remove(0);
            }
            self.0.push(c);
        }
    }

    /// The transaction committed: the table holds what it reached.
    fn committed(&mut self) {
        self.0.retain(|c| !c.this_tx);
    }

    /// The transaction rolled back (or was prepared): what it reached stays carried.
    fn rolled_back(&mut self) {
        for c in &mut self.0 {
            c.this_tx = false;
        }
    }
}

thread_local! {
    static CARRIED: std::cell::RefCell<Carries> = std::cell::RefCell::new(Carries::default());
}

/// What this backend carries for (queue, group) under subscription `sub_key`, if anything.
fn carried(queue_id: Uuid, group: &str, sub_key: &str) -> Option<Carry> {
    let schema = crate::names::schema_oid();
    CARRIED.with(|c| c.borrow().get(schema, queue_id, group, sub_key))
}

/// Carry `point` and `hinted` for the group, or nothing (`None`).
fn remember(queue_id: Uuid, group: &str, sub_key: &str, reached: Option<(Point, Hinted, i64)>) {
    let schema = crate::names::schema_oid();
    let carry = reached.filter(|(_, hinted, _)| hinted.partitions.len() <= CARRY_MAX_PARTITIONS).map(
        |(point, hinted, xmin)| Carry {
            schema,
            queue_id,
            group: group.to_string(),
            sub_key: sub_key.to_string(),
            point,
            hinted,
            xmin,
            this_tx: true,
        },
    );
    CARRIED.with(|c| c.borrow_mut().set(schema, queue_id, group, carry));
}

/// What a scan carries out of its transaction, should it roll back: every partition hinted
/// since the committed point — what was carried (`carried`) and what the scan hinted now. A
/// scan that started from a point its own transaction stored (`own`) with nothing carried for
/// it (the carry held more than CARRY_MAX_PARTITIONS, or went past CARRY_MAX_GROUPS) does not
/// know what its transaction's earlier scans hinted: it carries nothing, and after a rollback
/// the group reads on from its committed point.
fn carry_on(carried: Option<Hinted>, own: bool, hint: &Hinted) -> Option<Hinted> {
    if carried.is_none() && own {
        return None;
    }
    let mut all = carried.unwrap_or_default();
    all.add(hint);
    Some(all)
}

/// At commit: what this transaction's discovery reached is in the table now.
pub fn at_commit() {
    CARRIED.with(|c| c.borrow_mut().committed());
    let now: Vec<(GroupKey, CaughtUp)> = CAUGHT_UP_NOW.with(|c| c.borrow_mut().drain(..).collect());
    if !now.is_empty() {
        CAUGHT_UP.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() + now.len() > CAUGHT_UP_MAX {
                c.clear();
            }
            c.extend(now);
        });
    }
}

/// How many times one pop that found nothing to deliver reads on in the log, and the most
/// entries a round reads: each round reads twice what the last did. A group's point can lag
/// far behind what it consumed — a pop of 10 000 from a few partitions found early in a
/// backlog — and the stretch after it then holds only finished messages; reading it 200
/// entries a pop returned nothing for 20 pops in a row while a partition further on had
/// messages. Eight rounds read up to ~18 000 entries (batch 100) before giving up for this
/// pop, which then says so (`Outcome::more`): a waiting pop goes on at once.
pub const ROUNDS: u32 = 8;
/// `first`: the first round's limit (a pop's share of the log, scan_limit, or more when the
/// backend owes the log what pops the hints filled did not read: pace.rs).
pub fn round_limit(first: i64, round: u32) -> i64 {
    let limit = first.saturating_mul(1 << round.min(16)).min(MAX_LONG_SCAN);
    match crate::gucs::DEBUG_SCAN_LIMIT.get() {
        0 => limit,
        cap => limit.min(cap as i64),
    }
}

/// The point after a scan: pending transactions that ended (visible to the scan's snapshot:
/// committed, and their partitions were hinted, or aborted) are dropped; transactions the scan
/// passed while they were running (in `xip`, between the old point and the last entry read)
/// are added.
pub fn next_point(point: &Point, visible: &[bool], xip: &[i64], last: Option<Key>) -> Point {
    let mut pending: Vec<i64> =
        point.pending.iter().enumerate().filter(|(i, _)| !visible[*i]).map(|(_, x)| *x).collect();
    let upto = match last {
        Some(k) => {
            pending.extend(crate::cursor::running_between(xip, point.upto, k));
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
    fn hinted_partitions_add_up_once_each_with_their_newest_transaction() {
        let (a, b, c) = (Uuid::from_bytes([1; 16]), Uuid::from_bytes([2; 16]), Uuid::from_bytes([3; 16]));
        let mut h = Hinted { partitions: vec![a, b], newest: vec![10, 20] };
        h.add(&Hinted { partitions: vec![b, c], newest: vec![15, 30] });
        assert_eq!(h, Hinted { partitions: vec![a, b, c], newest: vec![10, 20, 30] });
        h.add(&Hinted { partitions: vec![a], newest: vec![40] });
        assert_eq!(h.newest, vec![40, 20, 30]);
    }

    fn carry(group: &str, upto: i64, hinted: &[u8], this_tx: bool) -> Carry {
        Carry {
            schema: pgrx::pg_sys::Oid::from(1u32),
            queue_id: Uuid::from_bytes([9; 16]),
            group: group.into(),
            sub_key: "all".into(),
            point: Point { upto: (upto, 0), pending: vec![] },
            hinted: Hinted {
                partitions: hinted.iter().map(|b| Uuid::from_bytes([*b; 16])).collect(),
                newest: hinted.iter().map(|b| *b as i64).collect(),
            },
            xmin: 1,
            this_tx,
        }
    }

    #[test]
    fn a_backend_carries_a_point_per_group_until_a_commit_stores_it() {
        let (schema, q) = (pgrx::pg_sys::Oid::from(1u32), Uuid::from_bytes([9; 16]));
        let mut cs = Carries::default();
        cs.set(schema, q, "a", Some(carry("a", 10, &[1], true)));
        // Another group's scan in the same transaction keeps the first group's carry (one carry
        // for the backend lost group a's hints: tests/integration/schedules/
        // lost-after-rolled-back-empty-pops.schedule).
        cs.set(schema, q, "b", Some(carry("b", 12, &[2], true)));
        assert_eq!(cs.get(schema, q, "a", "all"), Some(carry("a", 10, &[1], true)));
        assert_eq!(cs.get(schema, q, "a", "new::5"), None, "another subscription's carry");
        // Rolled back: both stay carried, and survive a commit that discovered neither.
        cs.rolled_back();
        cs.committed();
        assert_eq!(cs.get(schema, q, "b", "all"), Some(carry("b", 12, &[2], false)));
        // A scan that carries nothing for a group drops what the group carried.
        cs.set(schema, q, "a", None);
        assert_eq!(cs.get(schema, q, "a", "all"), None);
        // A commit that discovered the group: the table holds it.
        cs.set(schema, q, "b", Some(carry("b", 14, &[2, 3], true)));
        cs.committed();
        assert_eq!(cs.get(schema, q, "b", "all"), None);
    }

    #[test]
    fn a_scan_from_its_own_point_with_nothing_carried_carries_nothing() {
        let p = |b: u8| Uuid::from_bytes([b; 16]);
        let now = Hinted { partitions: vec![p(2)], newest: vec![20] };
        // From a committed point: what it hinted now.
        assert_eq!(carry_on(None, false, &now), Some(now.clone()));
        // From a point its transaction stored, with the carry of that transaction: both.
        let before = Hinted { partitions: vec![p(1)], newest: vec![10] };
        let both = Hinted { partitions: vec![p(1), p(2)], newest: vec![10, 20] };
        assert_eq!(carry_on(Some(before), true, &now), Some(both));
        // From a point its transaction stored, with no carry: the earlier scans' hints are
        // unknown; carrying only `now` would lose them at a rollback.
        assert_eq!(carry_on(None, true, &now), None);
    }

    #[test]
    fn a_backend_carries_points_for_a_bounded_number_of_groups() {
        let (schema, q) = (pgrx::pg_sys::Oid::from(1u32), Uuid::from_bytes([9; 16]));
        let mut cs = Carries::default();
        for g in 0..CARRY_MAX_GROUPS + 3 {
            cs.set(schema, q, &format!("g{g}"), Some(carry(&format!("g{g}"), g as i64, &[1], false)));
        }
        assert_eq!(cs.0.len(), CARRY_MAX_GROUPS);
        assert_eq!(cs.get(schema, q, "g0", "all"), None, "the oldest went");
        assert!(cs.get(schema, q, &format!("g{}", CARRY_MAX_GROUPS + 2), "all").is_some());
    }

    #[test]
    fn the_point_keeps_running_transactions_it_passed() {
        let p = Point { upto: (10, 1), pending: vec![] };
        // Read up to (20,3); 12 and 15 were running, 25 is beyond what was read.
        let n = next_point(&p, &[], &[12, 15, 25], Some((20, 3)));
        assert_eq!(n, Point { upto: (20, 3), pending: vec![12, 15] });
        // 12 committed (its partitions were hinted), 15 is still running, nothing new.
        let n2 = next_point(&n, &[true, false], &[15], None);
        assert_eq!(n2, Point { upto: (20, 3), pending: vec![15] });
        // 15 ended.
        let n3 = next_point(&n2, &[true], &[], None);
        assert!(n3.pending.is_empty());
        // A 'new' start (xmax, 0) whose xid a running transaction got: passed, it is pending.
        let n4 = next_point(&Point { upto: (30, 0), pending: vec![] }, &[], &[30], Some((31, 1)));
        assert_eq!(n4.pending, vec![30]);
    }
}

/// discovery_record on Citus, a statement for each of its steps (discovery.sql).
#[allow(clippy::too_many_arguments)]
fn record_in_steps(
    s: &mut Spi,
    queue_id: Uuid,
    group: &str,
    sub: &Subscription,
    hint: &Hinted,
    save: bool,
    next: &Point,
    xmin: i64,
) {
    let shard = crate::shards::current();
    if !hint.partitions.is_empty() {
        let args: [DatumWithOid; 4] =
            [group.into(), hint.partitions.clone().into(), hint.newest.clone().into(), shard.into()];
        let needed: Vec<Uuid> = CITUS_HINTS_NEEDED.run(s, &args).map(|r| r.req::<Uuid>("partition_id")).collect();
        if !needed.is_empty() {
            // SAFETY: reads the clock.
            let now = crate::state::timestamp(unsafe { pgrx::pg_sys::GetCurrentTimestamp() });
            let txid = crate::cluster::txid();
            let args: [DatumWithOid; 6] =
                [group.into(), needed.clone().into(), xmin.into(), shard.into(), txid.into(), now.into()];
            let updated: Vec<Uuid> = CITUS_HINTS_UPDATE.run(s, &args).map(|r| r.req::<Uuid>("partition_id")).collect();
            let rest: Vec<Uuid> = needed.into_iter().filter(|p| !updated.contains(p)).collect();
            if !rest.is_empty() {
                let args: [DatumWithOid; 7] =
                    [queue_id.into(), group.into(), rest.into(), xmin.into(), shard.into(), txid.into(), now.into()];
                CITUS_HINTS_INSERT.run(s, &args);
            }
        }
    }
    if save {
        let args: [DatumWithOid; 6] = [
            queue_id.into(),
            group.into(),
            next.upto.0.into(),
            next.upto.1.into(),
            sub.key.as_str().into(),
            shard.into(),
        ];
        CITUS_DISCOVERY_PRUNE.run(s, &args);
        let args: [DatumWithOid; 7] = [
            queue_id.into(),
            group.into(),
            next.upto.0.into(),
            next.upto.1.into(),
            next.pending.clone().into(),
            sub.key.as_str().into(),
            shard.into(),
        ];
        CITUS_DISCOVERY_POINT.run(s, &args);
    }
}
