//! Applying what the rules decide (semantics §5): a target's cursor row locked — or, for a group
//! that never popped the partition, started and created only if an entry applies — judged by
//! rule.rs, and written with its dead letters, hints and the lease it ended; and the rows of a
//! lease whose messages retention deleted, settled.

use super::find::{self, Locked, Target};
use super::parse::AckEntry;
use super::rule::{self, Outcome, Verdict};
use super::SQL;
use crate::cursor::Key;
use crate::error::QueenResult;
use crate::names::{from_pg, to_pg};
use crate::options::QueueOptions;
use crate::spi::types::{INT4, UUID};
use crate::spi::{Query, Spi};
use crate::state::{self, CursorRow, Micros};
use crate::subscription::Subscription;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::Uuid;

const ACK_LEASE_ROWS: Query = Query { file: SQL, name: "ack_lease_rows", args: &[UUID, INT4] };

/// Apply the entries of `t` (indexes into `entries`) to its row: their verdicts, by index.
pub(super) fn target(s: &mut Spi, entries: &[AckEntry], t: Target) -> QueenResult<Vec<(usize, Verdict)>> {
    let Target { partition, queue_id, group, named, locked, leases } = t;
    // Every way of finding names an entry in each target it makes (with none, judging would
    // change nothing and write nothing).
    let Some(first) = named.first() else {
        return Ok(Vec::new());
    };
    let message_id = first.message_id;
    let judged: Vec<rule::Entry> = named
        .iter()
        .map(|n| {
            let e = &entries[n.idx];
            let lease = e.lease_id.map(to_pg);
            let known = lease.and_then(|l| leases.get(&l).copied());
            rule::Entry { key: n.key, status: e.status, lease, known, error: e.error.as_deref() }
        })
        .collect();
    let mut g = Group { s, partition, queue_id, group: &group, message_id, locked };
    let verdicts = g.apply(&judged)?;
    Ok(named.iter().map(|n| n.idx).zip(verdicts).collect())
}

/// What [`Group::create`] came to.
enum Created {
    /// The row is created.
    Yes,
    /// Not created: a row exists now (committed by another transaction meanwhile), or the
    /// queue does not.
    Exists,
    /// Not created: a delete of the queue or the group committed while the ack waited for it.
    LookAgain,
}

/// The entries of one (partition, group).
struct Group<'a> {
    s: &'a mut Spi,
    partition: Uuid,
    queue_id: Uuid,
    group: &'a str,
    /// A message of the partition, by which `find::lock_row` finds the cursor row.
    message_id: Uuid,
    /// The row, already locked.
    locked: Option<Locked>,
}

impl Group<'_> {
    /// The (partition, group) row locked, if it exists.
    fn lock(&mut self) -> Option<Locked> {
        if let Some(locked) = self.locked.take() {
            return Some(locked);
        }
        find::lock_row(self.s, self.message_id, self.queue_id, self.group)
    }

    /// The row a group that never popped the partition starts with there (its subscription's
    /// start, or 'all' if it has none: an ack without a lease subscribes its group, as a pop
    /// would), not stored: it is created only if an entry applies (semantics §10, a refused ack
    /// leaves no trace).
    fn virtual_row(&mut self) -> (Locked, Option<Subscription>) {
        let (sub, opts) = match crate::subscription::subscription(self.s, self.queue_id, self.group) {
            Some((sub, opts)) => (Some(sub), opts),
            None => (None, crate::configure::load(self.s, self.queue_id).effective()),
        };
        let cursor = match &sub {
            Some(sub) => crate::subscription::initial_cursor(self.s, sub, self.partition),
            None => Default::default(),
        };
        let row = CursorRow { cursor, retry_at: None, lease_id: None, lease_expires_at: None, version: None };
        ((row, state::now(self.s), opts), sub)
    }

    /// Create the row decided on, if nobody created it since: under the pair's lock
    /// (locks.rs), which pops take with a try-lock, so that no pop waits on the insert.
    fn create(&mut self, row: &CursorRow, sub: Option<Subscription>) -> QueenResult<Created> {
        // Rows of the queue and the group are created: their shared locks (locks.rs), as a
        // pop's. Having waited, a delete committed meanwhile: look again.
        if crate::locks::writing(self.queue_id, None, Some(self.group))? {
            return Ok(Created::LookAgain);
        }
        if sub.is_none() && crate::subscription::subscribe_all(self.s, self.queue_id, self.group)?.is_none() {
            return Ok(Created::Exists);
        }
        state::lock_pair(self.partition, self.group)?;
        Ok(match state::create(self.s, self.partition, self.group, self.queue_id, &row.cursor) {
            true => Created::Yes,
            false => Created::Exists,
        })
    }

    /// Judge the entries against the row and write what the rules decided: one verdict per
    /// entry, in their order.
    fn apply(&mut self, entries: &[rule::Entry<'_>]) -> QueenResult<Vec<Verdict>> {
        if let Some((mut row, now, opts)) = self.lock() {
            self.forget_vanished(&mut row, now, &opts, entries);
            let (verdicts, out) = rule::judge(&mut row, now, &opts, entries);
            self.write(&row, &opts, out);
            return Ok(verdicts);
        }
        let ((mut row, now, opts), sub) = self.virtual_row();
        let (verdicts, out) = rule::judge(&mut row, now, &opts, entries);
        if !out.changed {
            return Ok(verdicts); // refused, or nothing to do: nothing is written
        }
        match self.create(&row, sub)? {
            Created::Yes => {
                self.write(&row, &opts, out);
                return Ok(verdicts);
            }
            Created::LookAgain => {
                // The locks are held now: the second look waits for nothing.
                return self.apply(entries);
            }
            Created::Exists => {}
        }
        // Created meanwhile by another transaction: apply to what it committed. Or gone with
        // its queue: the message is no more.
        let Some((mut row, now, opts)) = self.lock() else {
            return Ok(vec![Verdict::refused("message not found"); entries.len()]);
        };
        let (verdicts, out) = rule::judge(&mut row, now, &opts, entries);
        self.write(&row, &opts, out);
        Ok(verdicts)
    }

    /// Messages of the row's active lease that retention deleted meanwhile (it leaves those
    /// of committed leases alone, but not a lease whose pop had not committed when it looked)
    /// count as finished: else the batch would never be finished, and the lease — and the
    /// partition — would stall until it ran out (issue 21, item 12). Only for queues with
    /// retention, and only when an entry acks under that lease: one probe of the batch's
    /// unfinished keys.
    fn forget_vanished(&mut self, row: &mut CursorRow, now: Micros, opts: &QueueOptions, entries: &[rule::Entry<'_>]) {
        if opts.retention_seconds <= 0 || !row.lease_active(now) {
            return;
        }
        let lease = row.lease_id;
        if !entries.iter().any(|e| e.lease == lease) {
            return;
        }
        let acked: Vec<Key> = entries.iter().map(|e| e.key).collect();
        let others: Vec<Key> = row.cursor.unfinished().into_iter().filter(|k| !acked.contains(k)).collect();
        if others.is_empty() {
            return;
        }
        for k in state::missing(self.s, self.partition, &others) {
            row.cursor.vanished(k);
        }
    }

    /// Write what the rules decided: dead letters, the row, hints, the lease.
    fn write(&mut self, row: &CursorRow, opts: &QueueOptions, out: Outcome) {
        if !out.changed {
            return;
        }
        if opts.dead_letter_queue {
            for (k, error, attempts) in &out.dead_letters {
                state::dead_letter(self.s, self.partition, self.group, *k, error.as_deref(), *attempts);
            }
        }
        if out.hint_at.is_some() {
            // Messages may be deliverable again: wake waiting pops of the queue at commit.
            crate::wait::touched(crate::wait::queue_key(&from_pg(self.queue_id)));
        }
        let also = state::SaveAlso {
            queue_id: self.queue_id,
            hint_at: out.hint_at,
            ended_lease: out.released.map(|l| (l, false)),
        };
        crate::direct_save::save(self.s, self.partition, self.group, row, also);
    }
}

/// The active rows of `lease` whose unfinished messages retention deleted, all of them: the
/// batch is finished, and the lease released (on the result of the entry that named it, as
/// `lease_released`), so that the partition does not stall until the lease runs out (issue
/// 21, item 12). Only queues with retention; nothing is written otherwise. True when a row
/// was released.
pub(super) fn sweep_vanished(s: &mut Spi, lease: Uuid) -> QueenResult<bool> {
    // The rows are locked below: their queues' and group's locks first (locks.rs).
    let scope = find::lease_scope(s, lease);
    if scope.is_empty() {
        return Ok(false);
    }
    find::hold(scope)?;
    let rows: Vec<(Uuid, String, Uuid, CursorRow, Micros, Option<QueueOptions>)> = ACK_LEASE_ROWS
        .run(s, &[lease.into(), crate::shards::current().into()])
        .map(|r| {
            (
                r.req::<Uuid>("partition_id"),
                r.req::<String>("consumer_group"),
                r.req::<Uuid>("queue_id"),
                state::parse(&r),
                state::micros(r.req::<TimestampWithTimeZone>("now")),
                find::options_in_row(&r),
            )
        })
        .collect();
    let rows: Vec<(Uuid, String, Uuid, CursorRow, Micros, QueueOptions)> = rows
        .into_iter()
        .map(|(p, g, q, row, now, opts)| (p, g, q, row, now, find::options_or_load(s, opts, q)))
        .collect();
    let mut released = false;
    for (partition, group, queue_id, mut row, now, opts) in rows {
        if opts.retention_seconds <= 0 {
            continue;
        }
        let unfinished = row.cursor.unfinished();
        if unfinished.is_empty() || state::missing(s, partition, &unfinished).len() != unfinished.len() {
            continue;
        }
        for k in unfinished {
            row.cursor.vanished(k);
        }
        released |= release_vanished(s, lease, partition, &group, queue_id, row, now);
    }
    Ok(released)
}

/// Settle a row of `lease` whose unfinished messages are all gone (counted as vanished by the
/// caller): the batch is finished and the lease released, written with a hint so that pops
/// look at the partition again now, as after a released lease. False when the batch is not
/// finished after all (nothing written).
pub(super) fn release_vanished(
    s: &mut Spi,
    lease: Uuid,
    partition: Uuid,
    group: &str,
    queue_id: Uuid,
    mut row: CursorRow,
    now: Micros,
) -> bool {
    if !row.cursor.settle() {
        return false;
    }
    row.lease_id = None;
    row.lease_expires_at = None;
    let hint_at = Some(row.retry_at.filter(|&t| t > now).unwrap_or(now));
    let also = state::SaveAlso { queue_id, hint_at, ended_lease: Some((lease, false)) };
    crate::direct_save::save(s, partition, group, &row, also);
    crate::wait::touched(crate::wait::queue_key(&from_pg(queue_id)));
    true
}
