//! `queen_pop` (semantics §3.2): claiming partitions for a consumer group, leases, and delivery.
//!
//! A pop looks at candidate partitions (hinted by discovery.rs, oldest hint first) without
//! locking anything, and locks a partition's cursor row (`FOR UPDATE SKIP LOCKED`, or a
//! try-lock of queen's own (locks.rs) to create it) only when it has messages to deliver there. Looking costs
//! no lock, so a pop inside a long transaction holds only the partitions it leased; and no
//! pop ever waits for another.

use crate::cursor::{Batch, Cursor, Key};
use crate::decide::{self, Action, Timing};
use crate::discovery;
use crate::error::{QueenError, QueenResult};
use crate::jsonb::Jsonb;
use crate::names;
use crate::options::QueueOptions;
use crate::pace;
use crate::spi::types::{INT4, INT8, INT8S, TEXT, TSTZ, UUID, UUIDS};
use crate::spi::{Query, Spi};
use crate::state::{self, CursorRow, Look, Micros};
use crate::subscription::{self, Subscription};

const SQL: &str = include_str!("../sql/queries/pop.sql");
use pgrx::datum::{DatumWithOid, TimestampWithTimeZone};
use pgrx::Uuid;

/// The most messages one pop may return.
pub const MAX_BATCH: i32 = 10_000;

const CANDIDATES: Query = Query { file: SQL, name: "candidates", args: &[UUID, TEXT, UUIDS, INT8, INT4, TSTZ] };
/// How many due partitions one candidate query returns.
const CANDIDATE_PAGE: i64 = 16;
const HINTS_SET: Query =
    Query { file: SQL, name: "hints_set", args: &[UUID, UUID, TEXT, TSTZ, INT8, INT8, INT8S, INT4, INT8, INT8] };
const HINTS_DELETE: Query =
    Query { file: SQL, name: "hints_delete", args: &[UUID, TEXT, INT8, INT8, INT8S, INT4, INT8] };
const NEXT_DUE: Query = Query { file: SQL, name: "next_due", args: &[UUID, TEXT, UUID, INT4] };

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
    pub mode: subscription::Mode,
    pub from: Option<TimestampWithTimeZone>,
    /// The lease id to give what this pop leases (None: a new one): on Citus, the coordinator's
    /// pop over several shards leases them under one id (route.rs).
    pub lease: Option<Uuid>,
    /// A partition a push has just made ready (the commit that woke a waiting pop told it:
    /// wait.rs): looked at first, and when it delivers, the pop returns without reading the
    /// queue's log — a woken consumer gets the message at once; the next pop discovers.
    pub first: Option<Uuid>,
}

/// One delivered message, in the shape of `queen.message`.
#[derive(Debug)]
pub struct Popped {
    pub message_id: Uuid,
    pub transaction_id: String,
    pub queue: String,
    pub partition: String,
    pub partition_id: Uuid,
    pub payload: Jsonb,
    pub trace_id: Option<Uuid>,
    pub created_at: TimestampWithTimeZone,
    pub consumer_group: Option<String>,
    pub lease_id: Option<Uuid>,
    pub lease_expires_at: Option<TimestampWithTimeZone>,
    pub attempt: i32,
}

/// Check a request's arguments (semantics §3.2, §7).
pub fn check(
    batch: Option<i32>,
    partitions: Option<i32>,
    wait_ms: Option<i32>,
    lease_seconds: Option<i32>,
    mode: Option<&str>,
    from: bool,
) -> QueenResult<subscription::Mode> {
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
        crate::options::check_lease("argument \"lease_seconds\"", s)?;
    }
    match (mode, from) {
        (_, true) => Ok(subscription::Mode::From),
        (None, false) | (Some("all"), false) => Ok(subscription::Mode::All),
        (Some("new"), false) => Ok(subscription::Mode::New),
        (Some(m), false) => Err(QueenError::invalid(
            "argument \"subscription_mode\"",
            format!("must be 'all' or 'new' (or give subscription_from), got \"{}\"", crate::error::shorten(m)),
        )),
    }
}

/// What one attempt at popping found.
pub struct Outcome {
    pub rows: Vec<Popped>,
    /// When the group's next hint comes due (a lease's end, a retry delay's, a delayed
    /// message's): a waiting pop sleeps no longer (asked for only when waiting).
    pub next_due: Option<Micros>,
    /// A partition with work was held by another transaction: it may be free any moment.
    pub contended: bool,
    /// Discovery stopped with more of the log to read and nothing delivered: try again at once.
    pub more: bool,
}

/// One attempt at popping: what is deliverable now, in the caller's transaction.
pub fn pop_once(req: &PopRequest) -> QueenResult<Outcome> {
    let queue_id = crate::names::to_pg(names::queue_id(&req.queue));
    let group = names::group_key(req.group.as_deref()).to_string();
    // Shared locks of the queue and the group (locks.rs): an open delete of either is waited
    // for, and a later one waits for this transaction. Before anything is read.
    crate::locks::writing(queue_id, Some(&req.queue), Some(&group))?;
    crate::session::connect(|s| {
        // Queue mode always reads from the oldest retained message.
        let mode = if req.group.is_none() { subscription::Mode::All } else { req.mode };
        let from = if req.group.is_none() { None } else { req.from };
        let Some((sub, opts)) = subscription::subscribe(s, queue_id, &group, mode, from)? else {
            // No such queue (yet): a push that creates it wakes a waiting pop.
            return Ok(Outcome { rows: Vec::new(), next_due: None, contended: false, more: false });
        };
        if req.lease_seconds.is_none() && !req.auto_ack {
            // The queue's leaseTime, set under a higher bound than today's.
            crate::options::check_lease("option \"leaseTime\"", opts.lease_time)?;
        }
        let mut pop = Pop {
            req,
            queue_id,
            group,
            sub,
            lease_seconds: req.lease_seconds.unwrap_or(opts.lease_time),
            opts,
            lease_id: if req.auto_ack {
                None
            } else {
                Some(req.lease.unwrap_or_else(|| Uuid::from_bytes(*crate::shards::new_id().as_bytes())))
            },
            lease_expires_at: None,
            out: Vec::new(),
            claimed: Vec::new(),
            contended: false,
            more: false,
            passed: Vec::new(),
        };
        pop.run(s);
        let next_due = (pop.out.is_empty() && req.wait_ms > 0).then(|| pop.next_due(s)).flatten();
        Ok(Outcome { rows: pop.out, next_due, contended: pop.contended, more: pop.more })
    })
}

/// What a claim of a cursor row came to.
enum Claim {
    /// The pop holds the row, as it looked at it (or created it so).
    Held,
    /// The row is not as the pop looked at it (or another transaction holds it).
    Changed,
    /// Another transaction is creating it.
    Busy,
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
    /// A claim failed: another transaction holds the partition's row.
    contended: bool,
    /// Discovery stopped with more of the log to read, and nothing was delivered.
    more: bool,
    /// The marks of the partitions this attempt passed by, kept until it ends (visit.rs): what
    /// it wrote of their hints is not visible to other pops before it commits.
    passed: Vec<crate::visit::Visit>,
}

impl Pop<'_> {
    /// When the group's earliest hint that is not due yet comes due (of the one partition
    /// asked for, if any).
    fn next_due(&self, s: &mut Spi) -> Option<Micros> {
        let partition = self
            .req
            .partition
            .as_ref()
            .map(|name| crate::names::to_pg(names::partition_id(&crate::names::from_pg(self.queue_id), name)));
        let args: [DatumWithOid; 4] =
            [self.queue_id.into(), self.group.as_str().into(), partition.into(), crate::shards::current().into()];
        NEXT_DUE.run(s, &args).first().get::<TimestampWithTimeZone>(1).map(state::micros)
    }

    fn remaining(&self) -> i32 {
        self.req.batch - self.out.len() as i32
    }

    fn done(&self) -> bool {
        self.remaining() <= 0 || self.claimed.len() as i32 >= self.req.partitions
    }

    fn run(&mut self, s: &mut Spi) {
        if let Some(name) = &self.req.partition {
            let p = crate::names::to_pg(names::partition_id(&crate::names::from_pg(self.queue_id), name));
            self.visit(s, p);
            return;
        }
        let mut tried: Vec<Uuid> = Vec::new();
        if let Some(p) = self.req.first {
            // Not counted as tried: when it delivers nothing (its message delayed, say), the
            // hint discovery writes for it next is looked at as any other, and moved to when
            // the partition has something; passed over, it stayed due now, which next_due does
            // not count, and a waiting pop slept out its wait (wakeups.rs
            // delayed_processing_and_window_buffer_ending_end_the_wait, now and then).
            if let Some(visiting) = crate::visit::Visit::try_start(p, &self.group) {
                self.visit(s, p);
                if !self.claimed.is_empty() {
                    crate::visit::hold_until_end(visiting);
                    return;
                }
                self.passed.push(visiting);
            }
        }
        // In a backlog the hints may fill the pop without a read of the log (pace.rs).
        let share = discovery::scan_limit(self.req.batch as i64);
        let key = pace::key(self.queue_id, &self.group);
        let account = pace::account(&key);
        let first = match pace::decide(account, share, discovery::owed_scan_limit(share)) {
            pace::Plan::HintsFirst { limit } => {
                self.take_candidates(s, &mut tried);
                if self.done() {
                    // Owed only when no other pop of the group is reading the log now (a
                    // pop that finds it taken leaves the log to that one, below).
                    let elsewhere = crate::visit::Visit::discovering_elsewhere(self.queue_id, &self.group);
                    let owe = if elsewhere { 0 } else { share };
                    pace::keep(key, pace::after(account, owe, true, false));
                    return;
                }
                limit
            }
            pace::Plan::Scan { limit } => limit,
        };
        let mut scanned = false;
        for round in 0..discovery::ROUNDS {
            // One pop of the group at a time reads the log (visit.rs); the others use the
            // hints there are, unless those give them nothing (below).
            let limit = discovery::round_limit(first, round);
            let mut more = match crate::visit::Visit::try_discover(self.queue_id, &self.group) {
                Some(_discovering) => {
                    scanned = true;
                    discovery::discover(s, self.queue_id, &self.group, &self.sub, limit)
                }
                None => false,
            };
            self.take_candidates(s, &mut tried);
            if !scanned && self.out.is_empty() {
                // The hints gave nothing, and another pop is reading the log: the hints it
                // writes are not visible before it commits. Read the log too (points and hints
                // are insert-only: concurrent discoveries never wait on each other), rather
                // than answer empty while the log holds work: a waiting pop would then sleep
                // while messages are deliverable (semantics §3.2), and at 16 clients draining a
                // backlog a group had never read, 54 of 2 400 pops came back empty.
                scanned = true;
                more = discovery::discover(s, self.queue_id, &self.group, &self.sub, limit);
                self.take_candidates(s, &mut tried);
            }
            self.more = more && self.out.is_empty();
            if !self.more {
                break;
            }
        }
        pace::keep(key, pace::after(account, 0, self.done(), scanned));
    }

    /// A page of due partitions from `from` on, but those of `tried` (`candidates` of pop.sql):
    /// on one server read straight from `ready_next` (direct.rs), which debug builds check
    /// against the statement under the same snapshot.
    fn candidates(&self, s: &mut Spi, tried: &[Uuid], from: Micros) -> Vec<(Uuid, Micros)> {
        let args = |tried: &[Uuid]| -> [DatumWithOid<'static>; 6] {
            [
                self.queue_id.into(),
                self.group.clone().into(),
                tried.to_vec().into(),
                CANDIDATE_PAGE.into(),
                crate::shards::current().into(),
                state::timestamp(from).into(),
            ]
        };
        let read_row = |r: crate::spi::Row<'_>| (r.req::<Uuid>(1), state::micros(r.req::<TimestampWithTimeZone>(2)));
        if crate::direct::available(s) {
            let snap = crate::index_read::Snapshot::take();
            let read =
                crate::direct::candidates(&snap, self.queue_id, &self.group, tried, CANDIDATE_PAGE as usize, from);
            // None: a relation gone since it was found (an index rebuilt): the statement reads.
            if let Some((page, now)) = read {
                if cfg!(debug_assertions) {
                    let sql: Vec<(Uuid, Micros)> =
                        CANDIDATES.run_at(s, &args(tried), snap.snap).map(read_row).collect();
                    crate::direct::check_candidates(&page, now, &sql, CANDIDATE_PAGE as usize);
                }
                return page;
            }
        }
        CANDIDATES.run(s, &args(tried)).map(read_row).collect()
    }

    /// Visit due partitions from the hints, oldest first, until the pop is done or none is
    /// left that it has not tried.
    fn take_candidates(&mut self, s: &mut Spi, tried: &mut Vec<Uuid>) {
        // Each page reads on from the due time where the one before ended (ties at it are
        // read again, and left out as tried): at 16 clients, pops that went through many pages
        // re-read every earlier one (407 hints filtered out by one call, 19 ms a call on
        // average in a drain).
        let mut from = Micros::MIN;
        while !self.done() {
            let page = self.candidates(s, tried, from);
            let Some(&(_, last)) = page.last() else {
                break;
            };
            from = last;
            // Concurrent pops read the same page: each starts at a place of its own in it, so
            // that they do not all look at the oldest partition, and all but one fail to claim
            // it (docs/benchmarks.md, "Measurements behind the design"). Oldest first still
            // holds within a few pops, so none starves.
            let start = spread(page.len());
            for i in 0..page.len() {
                let (p, _) = page[(start + i) % page.len()];
                if tried.contains(&p) {
                    continue; // a second hint of a partition already looked at
                }
                tried.push(p);
                // Another pop is looking at it right now (visit.rs): the next one.
                let Some(visiting) = crate::visit::Visit::try_start(p, &self.group) else {
                    self.contended = true;
                    continue;
                };
                let claimed = self.claimed.len();
                self.visit(s, p);
                if self.claimed.len() > claimed {
                    // Delivered from: its row is this transaction's now, so the mark stays until
                    // the transaction ends (visit.rs).
                    crate::visit::hold_until_end(visiting);
                } else {
                    // Passed by: free when this attempt ends (visit.rs).
                    self.passed.push(visiting);
                }
                if self.done() {
                    break;
                }
            }
        }
    }

    /// Move the partition's hints to `at` (those `look`'s snapshot accounts for; see
    /// hints_set in pop.sql), or add one.
    fn hints_set(&self, s: &mut Spi, partition: Uuid, look: &Look, at: Micros) {
        // The writer's stored id (queen.txid()), which is also its own from then on.
        let txid = crate::cluster::txid();
        let args: [DatumWithOid; 10] = [
            self.queue_id.into(),
            partition.into(),
            self.group.as_str().into(),
            state::timestamp(at).into(),
            look.xmin.into(),
            look.xmax.into(),
            look.xip.clone().into(),
            crate::shards::current().into(),
            txid.into(),
            txid.into(),
        ];
        HINTS_SET.run(s, &args);
    }

    /// The partition had no work as of `look`: delete the hints its snapshot accounts for.
    fn hints_delete(&self, s: &mut Spi, partition: Uuid, look: &Look) {
        let args: [DatumWithOid; 7] = [
            partition.into(),
            self.group.as_str().into(),
            look.xmin.into(),
            look.xmax.into(),
            look.xip.clone().into(),
            crate::shards::current().into(),
            crate::cluster::own_txid().into(),
        ];
        HINTS_DELETE.run(s, &args);
    }

    /// Look at a partition (no lock). `initial` is the state the group starts with there if
    /// it has no cursor row yet.
    fn look(&self, s: &mut Spi, partition: Uuid, initial: &Cursor) -> Look {
        crate::direct::look(s, partition, &self.group, initial, self.remaining() as i64, self.lease_seconds)
    }

    /// Look at a partition, starting a group that has no cursor row there where its
    /// subscription says.
    fn look_fresh(&self, s: &mut Spi, partition: Uuid) -> Look {
        let known = self.sub.start.cursor();
        let look = self.look(s, partition, known.as_ref().unwrap_or(&Cursor::default()));
        if look.stored || known.is_some() {
            return look;
        }
        // A 'from' subscriber's first look at this partition: start before its time.
        let start = subscription::initial_cursor(s, &self.sub, partition);
        self.look(s, partition, &start)
    }

    /// Visit one partition: look, decide, apply, until an action ends the visit.
    fn visit(&mut self, s: &mut Spi, partition: Uuid) {
        let timing =
            Timing { delayed_processing: self.opts.delayed_processing, window_buffer: self.opts.window_buffer };
        let mut look = self.look_fresh(s, partition);
        let mut held = false;
        let mut claims = 0;
        loop {
            match decide::decide(&look.seen(held), timing) {
                Action::Claim => {
                    // A claim takes the row only in the version looked at (a row changed since is
                    // looked at again, holding nothing), so the pop never holds a row it then
                    // delivers nothing from, which would block the holder's acks and other pops
                    // until its transaction ends.
                    crate::gucs::debug_claim_delay();
                    claims += 1;
                    match self.claim(s, partition, &look) {
                        Claim::Held => {
                            held = true;
                            look.resolve_pending();
                        }
                        Claim::Changed if claims < 4 => {
                            let version = look.row.version.clone();
                            look = self.look_fresh(s, partition);
                            if look.stored && look.row.version == version {
                                // Not changed: held by another transaction.
                                self.contended = true;
                                return;
                            }
                        }
                        Claim::Changed | Claim::Busy => {
                            self.contended = true;
                            return;
                        }
                    }
                }
                Action::Expire => {
                    let mut row = look.row.clone();
                    let ended = row.lease_id;
                    self.expire(s, partition, &mut row);
                    // Write the settled state, then read again from it (the dead letter, if any,
                    // is finished now).
                    let also = state::SaveAlso {
                        queue_id: self.queue_id,
                        hint_at: None,
                        ended_lease: ended.map(|l| (l, true)),
                    };
                    state::save(s, partition, &self.group, &row, also);
                    look = self.look_fresh(s, partition);
                    look.resolve_pending();
                }
                Action::Deliver(n) => return self.deliver(s, partition, look, n),
                Action::Later(at) => return self.pass_by(s, partition, &look, held, Some(at)),
                Action::Idle => return self.pass_by(s, partition, &look, held, None),
            }
        }
    }

    /// Nothing to deliver from this partition now (as `look` saw it). A row this pop holds is
    /// saved if the look brought it up to date; the partition's hints move to when there may
    /// be something (`later`), or go.
    fn pass_by(&self, s: &mut Spi, partition: Uuid, look: &Look, held: bool, later: Option<Micros>) {
        if held && look.changed {
            let also = state::SaveAlso { queue_id: self.queue_id, hint_at: None, ended_lease: None };
            crate::direct_save::save(s, partition, &self.group, &look.row, also);
        }
        match later {
            Some(at) => self.hints_set(s, partition, look, at),
            None => self.hints_delete(s, partition, look),
        }
    }

    /// Take the cursor row of `partition` for this transaction as `look` saw it: lock it in
    /// that version, or create it if the look found none. Never waits.
    fn claim(&self, s: &mut Spi, partition: Uuid, look: &Look) -> Claim {
        if let Some(version) = look.row.version.as_deref().filter(|_| look.stored) {
            return match crate::direct_save::lock(s, partition, &self.group, version) {
                true => Claim::Held,
                false => Claim::Changed, // or held by another: the caller looks again to tell
            };
        }
        if !state::try_lock_pair(partition, &self.group) {
            return Claim::Busy;
        }
        if state::create(s, partition, &self.group, self.queue_id, &look.row.cursor) {
            Claim::Held
        } else {
            Claim::Changed // created and committed by someone else since we looked
        }
    }

    /// Settle an expired lease: a failure of its first unfinished message (semantics §5).
    fn expire(&self, s: &mut Spi, partition: Uuid, row: &mut CursorRow) {
        if let Some(charge) = row.cursor.expire(self.opts.retry_limit) {
            if charge.spent && self.opts.dead_letter_queue {
                state::dead_letter(s, partition, &self.group, charge.key, Some("lease expired"), charge.attempt);
            }
        }
        row.lease_id = None;
        row.lease_expires_at = None;
    }

    fn deliver(&mut self, s: &mut Spi, partition: Uuid, look: Look, n: usize) {
        // An auto_ack pop that takes every message the look read, when the look read fewer
        // than it asked for, leaves the partition with nothing to deliver as of the look's
        // snapshot: its hints go now, by the rule of a look that finds nothing (hints_delete),
        // instead of one due now that the next pop looks at only to delete. (In a drain,
        // every partition emptied cost a later pop a look and a delete: 5 a pop at 4 clients
        // over 10 000 partitions, 8 at 16.)
        let drained = self.req.auto_ack && n == look.msgs.len() && n < self.remaining().max(0) as usize;
        if drained {
            self.hints_delete(s, partition, &look);
        }
        let mut row = look.row;
        let keys: Vec<Key> = look.msgs[..n].iter().map(|m| m.key).collect();
        // Transactions running between the frontier and the last key delivered: they become
        // pending when the frontier passes them.
        let last =
            keys.iter().copied().filter(|k| row.cursor.pending.binary_search_by_key(&k.0, |p| p.0).is_err()).max();
        let xip: Vec<i64> = match last {
            Some(l) => crate::cursor::running_between(&look.xip, row.cursor.done, l).collect(),
            None => Vec::new(),
        };
        let attempts: Vec<i32> = keys.iter().map(|k| row.cursor.attempt_of(*k)).collect();
        let expires = *self.lease_expires_at.get_or_insert(look.lease_expires_at);
        row.cursor.lease = Some(Batch::new(keys.clone(), xip));
        let also = if self.req.auto_ack {
            row.cursor.finish_all();
            row.lease_id = None;
            row.lease_expires_at = None;
            // Unless drained (above), there may be more: the partition stays due now.
            state::SaveAlso { queue_id: self.queue_id, hint_at: (!drained).then_some(look.now), ended_lease: None }
        } else {
            // The lease is the row's: every partition this pop claims carries the same id and
            // expiry, and nothing else records it.
            row.lease_id = self.lease_id;
            row.lease_expires_at = Some(expires);
            state::SaveAlso { queue_id: self.queue_id, hint_at: Some(expires), ended_lease: None }
        };
        crate::direct_save::save(s, partition, &self.group, &row, also);
        // Should this transaction roll back, the messages are deliverable again.
        crate::wait::taken(crate::wait::queue_key(&crate::names::from_pg(self.queue_id)));
        self.claimed.push(partition);
        let consumer_group = self.req.group.clone();
        for (m, attempt) in look.msgs.into_iter().take(n).zip(attempts) {
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

/// Where in a page of `len` candidates this pop starts: the backend's own place, moved on by
/// one at each pop.
fn spread(len: usize) -> usize {
    thread_local!(static POPS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) });
    let n = POPS.with(|c| {
        let n = c.get();
        c.set(n.wrapping_add(1));
        n
    });
    // SAFETY: MyProcPid is set once at backend start and only read afterwards.
    let pid = unsafe { pgrx::pg_sys::MyProcPid } as usize;
    (pid.wrapping_mul(7919).wrapping_add(n)) % len.max(1)
}

/// How long a waiting pop sleeps at most when a partition with work was held by another
/// transaction (which may commit a lease, or release the row, any moment).
const CONTENDED_SLEEP_MS: u64 = 50;

/// Pop with `wait_ms`: try, and while nothing is deliverable and time remains, sleep on the
/// backend's latch — until woken (wait.rs), the group's next hint comes due, or the deadline —
/// and try again. (Each try is a new statement with a new snapshot, so in READ COMMITTED it
/// sees what committed meanwhile.)
pub fn pop(req: &PopRequest) -> QueenResult<Vec<Popped>> {
    pop_with(req, pop_once)
}

/// [`pop`] with `once` as one attempt (on a Citus coordinator, one call of the worker:
/// route.rs); waiting is the same.
pub fn pop_with(
    req: &PopRequest,
    mut once: impl FnMut(&PopRequest) -> QueenResult<Outcome>,
) -> QueenResult<Vec<Popped>> {
    if req.wait_ms > 0 {
        // SAFETY: a backend global, set for the running transaction; read only.
        let iso = unsafe { pgrx::pg_sys::XactIsoLevel };
        if iso > pgrx::pg_sys::XACT_READ_COMMITTED as i32 {
            let name =
                if iso == pgrx::pg_sys::XACT_REPEATABLE_READ as i32 { "REPEATABLE READ" } else { "SERIALIZABLE" };
            return Err(QueenError::WaitNotSupported { isolation: name.to_string() });
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(req.wait_ms.max(0) as u64);
    let waiting = (req.wait_ms > 0).then(|| crate::wait::register(&names::queue_id(&req.queue), &req.queue));
    let mut req = req.clone();
    loop {
        if waiting.is_some() {
            // Before looking: a commit between the look and the sleep then wakes the sleep.
            crate::wait::reset_latch();
        }
        let found = once(&req)?;
        // A hint is looked at once: a retry without a sleep (more log to read) takes none.
        req.first = None;
        let now = std::time::Instant::now();
        match &waiting {
            // More of the log to read: look again at once, without sleeping.
            Some(_) if found.rows.is_empty() && found.more && now < deadline => continue,
            Some(reg) if found.rows.is_empty() && now < deadline => {
                let mut sleep = deadline - now;
                if let Some(due) = found.next_due {
                    // The clock the hints use (microseconds), and a millisecond past it.
                    // SAFETY: GetCurrentTimestamp only reads the clock.
                    let until = due - unsafe { pgrx::pg_sys::GetCurrentTimestamp() } + 1000;
                    sleep = sleep.min(std::time::Duration::from_micros(until.max(0) as u64));
                }
                if found.contended {
                    sleep = sleep.min(std::time::Duration::from_millis(CONTENDED_SLEEP_MS));
                }
                crate::wait::sleep(reg, sleep);
                // Where the push that woke it went, if one did: looked at first (Pop::run).
                req.first = reg.take_hint().map(crate::names::to_pg);
            }
            _ => return Ok(found.rows),
        }
    }
}
