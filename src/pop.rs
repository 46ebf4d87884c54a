//! `queen_pop` (SPEC §3.2): claiming partitions for a consumer group, leases, and delivery.
//!
//! A pop looks at candidate partitions (hinted by discovery.rs, oldest hint first) without
//! locking anything, and locks a partition's cursor row (`FOR UPDATE SKIP LOCKED`, or an
//! advisory try-lock to create it) only when it has messages to deliver there. Looking costs
//! no lock, so a pop inside a long transaction holds only the partitions it leased; and no
//! pop ever waits for another.

use crate::cursor::{Batch, Cursor, Key};
use crate::discovery::{self, Subscription};
use crate::error::{QueenError, QueenResult};
use crate::names::{self, QUEUE_MODE_GROUP};
use crate::options::QueueOptions;
use crate::spi::Query;
use crate::state::{self, CursorRow, Micros, INT4, INT8, INT8S, SQL, TEXT, TSTZ, UUID, UUIDS};
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{PgBuiltInOids as T, PgOid};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::{JsonB, Uuid};

/// The most messages one pop may return.
pub const MAX_BATCH: i32 = 10_000;
/// How many hinted partitions one candidate query returns.
const CANDIDATE_PAGE: i64 = 16;

const SUBSCRIBE: Query = Query { file: SQL, name: "subscribe", args: &[UUID, TEXT, TEXT, TSTZ] };
const PARTITION_FROM_POSITION: Query = Query { file: SQL, name: "partition_from_position", args: &[UUID, TSTZ] };
const CANDIDATES: Query = Query { file: SQL, name: "candidates", args: &[UUID, TEXT, UUIDS, INT8] };
const HINTS_SET: Query = Query { file: SQL, name: "hints_set", args: &[UUID, UUID, TEXT, TSTZ] };
const HINTS_DELETE: Query = Query { file: SQL, name: "hints_delete", args: &[UUID, TEXT] };
const TRY_LOCK_PAIR: Query = Query { file: SQL, name: "try_lock_pair", args: &[INT4, INT4] };
const CURSOR_CLAIM_NEW: Query =
    Query { file: SQL, name: "cursor_claim_new", args: &[UUID, TEXT, UUID, INT8, INT8, INT8S, INT8S] };
const READ_PARTITION: Query = Query {
    file: SQL,
    name: "read_partition",
    args: &[UUID, INT8, INT8, INT8S, INT8S, INT8S, INT8S, INT8, PgOid::BuiltIn(T::FLOAT8OID)],
};
const LEASE_INSERT: Query = Query { file: SQL, name: "lease_insert", args: &[UUID, UUID, TEXT, UUIDS, TSTZ] };
pub const DEAD_LETTER: Query = Query { file: SQL, name: "dead_letter", args: &[UUID, TEXT, INT8, INT8, TEXT, INT4] };

/// Namespace of the advisory locks queen takes ("QUEN").
const LOCK_SPACE: i32 = 0x5155_454E;

#[derive(Debug, Clone)]
pub struct PopRequest {
    pub queue: String,
    /// None: queue mode.
    pub group: Option<String>,
    pub batch: i32,
    pub partition: Option<String>,
    pub partitions: i32,
    pub wait_ms: i32,
    pub lease_seconds: Option<i32>,
    pub auto_ack: bool,
    pub mode: String,
    pub from: Option<TimestampWithTimeZone>,
}

/// One delivered message, in the shape of `queen.message`.
#[derive(Debug)]
pub struct Popped {
    pub message_id: Uuid,
    pub transaction_id: String,
    pub queue: String,
    pub partition: String,
    pub partition_id: Uuid,
    pub payload: JsonB,
    pub trace_id: Option<Uuid>,
    pub created_at: TimestampWithTimeZone,
    pub consumer_group: Option<String>,
    pub lease_id: Option<Uuid>,
    pub lease_expires_at: Option<TimestampWithTimeZone>,
    pub attempt: i32,
}

/// Check a request's arguments (SPEC §3.2, §7).
pub fn check(
    batch: Option<i32>,
    partitions: Option<i32>,
    wait_ms: Option<i32>,
    lease_seconds: Option<i32>,
    mode: Option<&str>,
    from: bool,
) -> QueenResult<String> {
    let batch = batch.ok_or(QueenError::NullValue { argument: "batch" })?;
    if !(1..=MAX_BATCH).contains(&batch) {
        return Err(QueenError::invalid("argument \"batch\"", format!("must be from 1 to {MAX_BATCH}, got {batch}")));
    }
    let partitions = partitions.ok_or(QueenError::NullValue { argument: "partitions" })?;
    if !(1..=MAX_BATCH).contains(&partitions) {
        return Err(QueenError::invalid(
            "argument \"partitions\"",
            format!("must be from 1 to {MAX_BATCH}, got {partitions}"),
        ));
    }
    let wait_ms = wait_ms.ok_or(QueenError::NullValue { argument: "wait_ms" })?;
    if wait_ms < 0 {
        return Err(QueenError::invalid("argument \"wait_ms\"", format!("must be 0 or more, got {wait_ms}")));
    }
    if let Some(s) = lease_seconds {
        if s <= 0 {
            return Err(QueenError::invalid("argument \"lease_seconds\"", format!("must be 1 or more, got {s}")));
        }
    }
    let mode = match (mode, from) {
        (_, true) => "from",
        (None, false) | (Some("all"), false) => "all",
        (Some("new"), false) => "new",
        (Some(m), false) => {
            return Err(QueenError::invalid(
                "argument \"subscription_mode\"",
                format!("must be 'all' or 'new' (or give subscription_from), got \"{}\"", crate::error::shorten(m)),
            ))
        }
    };
    Ok(mode.to_string())
}

/// The stored name of a group: queue mode is kept under a reserved name.
pub fn group_key(group: Option<&str>) -> &str {
    group.unwrap_or(QUEUE_MODE_GROUP)
}

/// One attempt at popping: what is deliverable now, in the caller's transaction.
pub fn pop_once(req: &PopRequest) -> Vec<Popped> {
    let queue_id = names::queue_id(&req.queue);
    let queue_id = crate::push::to_pg(queue_id);
    let group = group_key(req.group.as_deref()).to_string();
    Spi::connect_mut(|client| {
        // Queue mode always reads from the oldest retained message.
        let mode = if req.group.is_none() { "all" } else { req.mode.as_str() };
        let from = if req.group.is_none() { None } else { req.from };
        let Some(sub) = subscribe(client, queue_id, &group, mode, from) else {
            return Vec::new(); // no such queue
        };
        let opts = crate::configure::load(client, queue_id).effective();
        let mut pop = Pop {
            req,
            queue_id,
            group,
            sub,
            lease_seconds: req.lease_seconds.unwrap_or(opts.lease_time),
            opts,
            lease_id: if req.auto_ack { None } else { Some(Uuid::from_bytes(*uuid::Uuid::now_v7().as_bytes())) },
            lease_expires_at: None,
            out: Vec::new(),
            claimed: Vec::new(),
        };
        pop.run(client);
        if let (Some(id), Some(exp)) = (pop.lease_id, pop.lease_expires_at) {
            if !pop.claimed.is_empty() {
                let args: [DatumWithOid; 5] = [
                    id.into(),
                    queue_id.into(),
                    pop.group.as_str().into(),
                    pop.claimed.clone().into(),
                    state::timestamp(exp).into(),
                ];
                LEASE_INSERT.execute(client, &args).expect("queen: lease_insert");
            }
        }
        pop.out
    })
}

fn subscribe(
    client: &mut SpiClient<'_>,
    queue_id: Uuid,
    group: &str,
    mode: &str,
    from: Option<TimestampWithTimeZone>,
) -> Option<Subscription> {
    let args: [DatumWithOid; 4] = [queue_id.into(), group.into(), mode.into(), from.into()];
    SUBSCRIBE.execute(client, &args).expect("queen: subscribe").next().map(|r| Subscription {
        mode: r.get::<String>(1).unwrap().unwrap(),
        from_ts: r.get::<TimestampWithTimeZone>(2).unwrap(),
        start_xmax: r.get::<i64>(3).unwrap().unwrap_or(0),
        start_xip: r.get::<Vec<i64>>(4).unwrap().unwrap_or_default(),
    })
}

/// A message as read from a partition.
struct Msg {
    key: Key,
    message_id: Uuid,
    transaction_id: String,
    partition: String,
    payload: JsonB,
    trace_id: Option<Uuid>,
    created_at: TimestampWithTimeZone,
}

/// What one read of a partition saw.
struct Read {
    xmin: i64,
    xip: Vec<i64>,
    pending_visible: Vec<bool>,
    pending_left: Vec<bool>,
    newest_at: Option<Micros>,
    now: Micros,
    lease_expires_at: Micros,
    msgs: Vec<Msg>,
}

struct Pop<'a> {
    req: &'a PopRequest,
    queue_id: Uuid,
    group: String,
    sub: Subscription,
    opts: QueueOptions,
    lease_seconds: i32,
    lease_id: Option<Uuid>,
    /// Fixed by the first partition claimed: all partitions of one pop share the lease.
    lease_expires_at: Option<Micros>,
    out: Vec<Popped>,
    claimed: Vec<Uuid>,
}

enum Visit {
    Delivered,
    Skipped,
}

impl Pop<'_> {
    fn remaining(&self) -> i32 {
        self.req.batch - self.out.len() as i32
    }

    fn done(&self) -> bool {
        self.remaining() <= 0 || self.claimed.len() as i32 >= self.req.partitions
    }

    fn run(&mut self, client: &mut SpiClient<'_>) {
        if let Some(name) = &self.req.partition {
            let p = crate::push::to_pg(names::partition_id(&crate::push::from_pg(self.queue_id), name));
            self.visit(client, p);
            return;
        }
        discovery::discover(client, self.queue_id, &self.group, &self.sub);
        let mut tried: Vec<Uuid> = Vec::new();
        while !self.done() {
            let args: [DatumWithOid; 4] =
                [self.queue_id.into(), self.group.as_str().into(), tried.clone().into(), CANDIDATE_PAGE.into()];
            let page: Vec<Uuid> = CANDIDATES
                .execute(client, &args)
                .expect("queen: candidates")
                .map(|r| r.get::<Uuid>(1).unwrap().unwrap())
                .collect();
            if page.is_empty() {
                break;
            }
            for p in page {
                if tried.contains(&p) {
                    continue;
                }
                tried.push(p);
                self.visit(client, p);
                if self.done() {
                    break;
                }
            }
        }
    }

    /// The state a group starts with on a partition it has no cursor row for.
    fn initial(&self, client: &mut SpiClient<'_>, partition: Uuid) -> Cursor {
        match self.sub.mode.as_str() {
            "new" => Cursor::subscribed_new(self.sub.start_xmax, &self.sub.start_xip),
            "from" => {
                let args: [DatumWithOid; 2] = [partition.into(), self.sub.from_ts.into()];
                let row = PARTITION_FROM_POSITION.execute(client, &args).expect("queen: position").first();
                let (t, s, x) = row.get_three::<i64, i64, Vec<i64>>().expect("queen: position");
                let mut c = Cursor::subscribed_new(0, &x.unwrap_or_default());
                c.done = (t.unwrap_or(0), s.unwrap_or(0));
                c
            }
            _ => Cursor::default(),
        }
    }

    fn hints_set(&self, client: &mut SpiClient<'_>, partition: Uuid, at: Micros) {
        let args: [DatumWithOid; 4] =
            [self.queue_id.into(), partition.into(), self.group.as_str().into(), state::timestamp(at).into()];
        HINTS_SET.execute(client, &args).expect("queen: hints_set");
    }

    fn hints_delete(&self, client: &mut SpiClient<'_>, partition: Uuid) {
        let args: [DatumWithOid; 2] = [partition.into(), self.group.as_str().into()];
        HINTS_DELETE.execute(client, &args).expect("queen: hints_delete");
    }

    fn read(&self, client: &mut SpiClient<'_>, partition: Uuid, c: &Cursor) -> Read {
        let (pt, ps): (Vec<i64>, Vec<i64>) = c.pending.iter().copied().unzip();
        let (at, aseq): (Vec<i64>, Vec<i64>) = c.ahead.iter().copied().unzip();
        let args: [DatumWithOid; 9] = [
            partition.into(),
            c.done.0.into(),
            c.done.1.into(),
            pt.into(),
            ps.into(),
            at.into(),
            aseq.into(),
            (self.remaining() as i64).into(),
            (self.lease_seconds as f64).into(),
        ];
        let mut read: Option<Read> = None;
        for r in READ_PARTITION.execute(client, &args).expect("queen: read_partition") {
            let rd = read.get_or_insert_with(|| Read {
                xmin: r.get::<i64>(1).unwrap().unwrap_or(0),
                xip: r.get::<Vec<i64>>(2).unwrap().unwrap_or_default(),
                pending_visible: r.get::<Vec<bool>>(3).unwrap().unwrap_or_default(),
                pending_left: r.get::<Vec<bool>>(4).unwrap().unwrap_or_default(),
                newest_at: r.get::<TimestampWithTimeZone>(5).unwrap().map(state::micros),
                now: state::micros(r.get::<TimestampWithTimeZone>(6).unwrap().unwrap()),
                lease_expires_at: state::micros(r.get::<TimestampWithTimeZone>(7).unwrap().unwrap()),
                msgs: Vec::new(),
            });
            if let Some(txid) = r.get::<i64>(9).unwrap() {
                rd.msgs.push(Msg {
                    key: (txid, r.get::<i64>(10).unwrap().unwrap()),
                    message_id: r.get::<Uuid>(11).unwrap().unwrap(),
                    transaction_id: r.get::<String>(12).unwrap().unwrap(),
                    partition: r.get::<String>(13).unwrap().unwrap(),
                    payload: r.get::<JsonB>(14).unwrap().unwrap(),
                    trace_id: r.get::<Uuid>(15).unwrap(),
                    created_at: r.get::<TimestampWithTimeZone>(16).unwrap().unwrap(),
                });
            }
        }
        read.expect("queen: read_partition returns its meta row")
    }

    /// How many of the read messages may be delivered now (a prefix: order holds), and when
    /// the first one held back becomes deliverable.
    fn deliverable(&self, read: &Read) -> (usize, Option<Micros>) {
        const SEC: i64 = 1_000_000;
        if self.opts.window_buffer > 0 {
            if let Some(newest) = read.newest_at {
                let quiet_at = newest + self.opts.window_buffer as i64 * SEC;
                if quiet_at > read.now && !read.msgs.is_empty() {
                    return (0, Some(quiet_at));
                }
            }
        }
        if self.opts.delayed_processing > 0 {
            let delay = self.opts.delayed_processing as i64 * SEC;
            for (i, m) in read.msgs.iter().enumerate() {
                let at = state::micros(m.created_at) + delay;
                if at > read.now {
                    return (i, Some(at));
                }
            }
        }
        (read.msgs.len(), None)
    }

    /// Look at one partition and deliver from it if the group may.
    fn visit(&mut self, client: &mut SpiClient<'_>, partition: Uuid) -> Visit {
        let seen = state::get(client, partition, &self.group);
        if let Some(row) = &seen {
            if row.lease_active(row.now) {
                self.hints_set(client, partition, row.lease_expires_at.unwrap());
                return Visit::Skipped;
            }
            if let Some(at) = row.retry_at.filter(|&at| at > row.now) {
                self.hints_set(client, partition, at);
                return Visit::Skipped;
            }
        }
        let expired = seen.as_ref().is_some_and(|r| r.lease_expired(r.now));
        let cursor = match &seen {
            Some(r) => r.cursor.clone(),
            None => self.initial(client, partition),
        };
        let mut first_read = None;
        if !expired {
            // Lock-free look: is there anything to deliver?
            let read = self.read(client, partition, &cursor);
            let (n, later) = self.deliverable(&read);
            if n == 0 {
                match later {
                    Some(at) => self.hints_set(client, partition, at),
                    None => self.hints_delete(client, partition),
                }
                return Visit::Skipped;
            }
            first_read = Some(read);
        }
        // Worth claiming: lock the row (or create it), never waiting.
        let Some(mut row) = self.claim(client, partition, seen.as_ref(), cursor) else {
            return Visit::Skipped;
        };
        if row.lease_active(row.now) {
            self.hints_set(client, partition, row.lease_expires_at.unwrap());
            return Visit::Skipped;
        }
        if let Some(at) = row.retry_at.filter(|&at| at > row.now) {
            self.hints_set(client, partition, at);
            return Visit::Skipped;
        }
        let mut changed = false;
        if row.lease_expired(row.now) {
            self.expire(client, partition, &mut row);
            changed = true;
            first_read = None;
        }
        // The look is still valid if nobody changed the row since (or we just created it
        // from the same initial state): the same cursor read by an older snapshot.
        let unchanged = seen.as_ref().map_or(true, |s| s.version == row.version);
        let read = match first_read {
            Some(r) if unchanged => r,
            _ => self.read(client, partition, &row.cursor),
        };
        changed |= row.cursor.resolve_pending(&read.pending_visible, &read.pending_left, read.xmin);
        let (n, later) = self.deliverable(&read);
        if n == 0 {
            if changed {
                state::save(client, partition, &self.group, &row);
            }
            match later {
                Some(at) => self.hints_set(client, partition, at),
                None => self.hints_delete(client, partition),
            }
            return Visit::Skipped;
        }
        self.deliver(client, partition, row, read, n);
        Visit::Delivered
    }

    /// Lock the cursor row of `partition` for this transaction, or create it. None when
    /// another transaction holds it.
    fn claim(
        &self,
        client: &mut SpiClient<'_>,
        partition: Uuid,
        seen: Option<&CursorRow>,
        initial: Cursor,
    ) -> Option<CursorRow> {
        if seen.is_some() {
            return state::lock(client, partition, &self.group);
        }
        let key = pair_lock_key(partition, &self.group);
        let args: [DatumWithOid; 2] = [LOCK_SPACE.into(), key.into()];
        let got = TRY_LOCK_PAIR
            .execute(client, &args)
            .expect("queen: try_lock_pair")
            .first()
            .get_one::<bool>()
            .expect("queen: try lock")
            .unwrap_or(false);
        if !got {
            return None;
        }
        let (pt, ps): (Vec<i64>, Vec<i64>) = initial.pending.iter().copied().unzip();
        let args: [DatumWithOid; 7] = [
            partition.into(),
            self.group.as_str().into(),
            self.queue_id.into(),
            initial.done.0.into(),
            initial.done.1.into(),
            pt.into(),
            ps.into(),
        ];
        let created = CURSOR_CLAIM_NEW.execute(client, &args).expect("queen: cursor_claim_new").len();
        if created == 0 {
            // Created and committed by someone else since we looked.
            return state::lock(client, partition, &self.group);
        }
        state::lock(client, partition, &self.group)
    }

    /// Settle an expired lease: a failure of its first unfinished message (SPEC §5).
    fn expire(&self, client: &mut SpiClient<'_>, partition: Uuid, row: &mut CursorRow) {
        if let Some(charge) = row.cursor.expire(self.opts.retry_limit) {
            if charge.spent && self.opts.dead_letter_queue {
                let args: [DatumWithOid; 6] = [
                    partition.into(),
                    self.group.as_str().into(),
                    charge.key.0.into(),
                    charge.key.1.into(),
                    "lease expired".into(),
                    charge.attempt.into(),
                ];
                DEAD_LETTER.execute(client, &args).expect("queen: dead_letter");
            }
        }
        row.lease_id = None;
        row.lease_expires_at = None;
    }

    fn deliver(&mut self, client: &mut SpiClient<'_>, partition: Uuid, mut row: CursorRow, read: Read, n: usize) {
        let msgs = &read.msgs[..n];
        let keys: Vec<Key> = msgs.iter().map(|m| m.key).collect();
        // Transactions running between the frontier and the last key delivered: they become
        // pending when the frontier passes them.
        let last = keys.iter().copied().filter(|k| row.cursor.pending.binary_search_by_key(&k.0, |p| p.0).is_err()).max();
        let xip: Vec<i64> = match last {
            Some(l) => read.xip.iter().copied().filter(|&x| x > row.cursor.done.0 && x < l.0).collect(),
            None => Vec::new(),
        };
        let attempts: Vec<i32> = keys.iter().map(|k| row.cursor.attempt_of(*k)).collect();
        let expires = *self.lease_expires_at.get_or_insert(read.lease_expires_at);
        row.cursor.lease = Some(Batch { keys: keys.clone(), xip });
        if self.req.auto_ack {
            for k in &keys {
                row.cursor.finish(*k);
            }
            row.cursor.lease = None;
            row.lease_id = None;
            row.lease_expires_at = None;
            // There may be more: leave the partition due now; the next look deletes the hint
            // if it is empty.
            self.hints_set(client, partition, read.now);
        } else {
            row.lease_id = self.lease_id;
            row.lease_expires_at = Some(expires);
            self.hints_set(client, partition, expires);
        }
        state::save(client, partition, &self.group, &row);
        self.claimed.push(partition);
        let consumer_group = self.req.group.clone();
        for (m, attempt) in read.msgs.into_iter().take(n).zip(attempts) {
            self.out.push(Popped {
                message_id: m.message_id,
                transaction_id: m.transaction_id,
                queue: self.req.queue.clone(),
                partition: m.partition,
                partition_id: partition,
                payload: m.payload,
                trace_id: m.trace_id,
                created_at: m.created_at,
                consumer_group: consumer_group.clone(),
                lease_id: self.lease_id,
                lease_expires_at: self.lease_id.map(|_| state::timestamp(expires)),
                attempt,
            });
        }
    }
}

/// The advisory-lock key of a (partition, group) pair.
fn pair_lock_key(partition: Uuid, group: &str) -> i32 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    partition.as_bytes().hash(&mut h);
    group.hash(&mut h);
    h.finish() as i32
}

/// Pop with `wait_ms`: try, and while nothing is deliverable and time remains, sleep on the
/// backend's latch and try again. (Each try is a new statement with a new snapshot, so in
/// READ COMMITTED it sees what committed meanwhile.)
pub fn pop(req: &PopRequest) -> QueenResult<Vec<Popped>> {
    if req.wait_ms > 0 {
        let iso = unsafe { pgrx::pg_sys::XactIsoLevel };
        if iso > pgrx::pg_sys::XACT_READ_COMMITTED as i32 {
            let name = if iso == pgrx::pg_sys::XACT_REPEATABLE_READ as i32 { "REPEATABLE READ" } else { "SERIALIZABLE" };
            return Err(QueenError::WaitNotSupported { isolation: name.to_string() });
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(req.wait_ms.max(0) as u64);
    loop {
        let rows = pop_once(req);
        let now = std::time::Instant::now();
        if !rows.is_empty() || now >= deadline {
            return Ok(rows);
        }
        crate::wait::sleep_until_woken(&req.queue, deadline - now);
    }
}
