//! `queen_ack` (semantics §3.3, §5): what each answer does to a group's cursor, its lease, retries
//! and dead letters.
//!
//! - `completed`: the message is finished; the cursor moves over the finished prefix of the
//!   lease's batch, and the lease is released when all of the batch is finished.
//! - `failed`: one failure charged to the message; with retries left the lease is released and
//!   the message (with the rest of its partition) comes back after `retryDelay`; with none left
//!   it is filed as a dead letter and finished, and the lease is released all the same (the
//!   rest of the batch comes back at once, uncharged).
//! - `retry`: the lease is released and the message comes back at once; nothing is charged.
//! - `dlq`: filed as a dead letter now, and finished.
//!
//! In one call, the entries of one (partition, group) are applied in delivery order; at the
//! first that comes back (or a `failed` whose retries are spent), the lease is released and the
//! rest are `superseded`: not applied,
//! delivered again (semantics §5, the batch rule: "In a batch, the cursor stops at the first message that
//! comes back"). A refused ack is a result, not an error, and changes nothing.
//!
//! An ack is built as a pop is: **parse → find → judge → apply**. parse.rs checks the wire
//! forms; find.rs finds what the entries name, one [`find::Target`] per (partition, group),
//! whichever way (one message by id, a batch of one lease, the general lookup, a whole lease);
//! rule.rs judges a target's entries against its cursor row, in plain Rust; apply.rs locks or
//! creates the row and writes what was decided. The results are made here, from the verdicts.

mod apply;
mod find;
mod parse;
mod rule;

pub use parse::{parse_acks_jsonb, AckEntry, AckStatus};

use crate::error::QueenResult;
use crate::names::to_pg;

use pgrx::Uuid;
use rule::Verdict;

const SQL: &str = include_str!("../../sql/queries/ack.sql");

/// The outcome of one entry, in the shape of `queen.ack_result`.
#[derive(Debug, Clone)]
pub struct AckResult {
    pub idx: i32,
    pub message_id: Option<Uuid>,
    pub success: bool,
    pub error: Option<String>,
    pub lease_released: bool,
    pub dead_lettered: bool,
}

/// Apply acknowledgements in the caller's transaction; one result per entry, in order.
/// Raises 42501 (changing nothing) when the caller lacks `pop` on an acked message's queue.
pub fn ack(entries: &[AckEntry]) -> QueenResult<Vec<AckResult>> {
    let role = crate::privilege::caller();
    crate::session::connect(|s| {
        // A role that may not pop every queue: before anything is locked, the messages of
        // queues it holds no privilege on are taken for unknown ones, and a queue it knows of
        // but may not pop refuses the call (privilege.rs unknown_to).
        let screened = find::screen(s, role, entries)?;
        let named = screened.as_deref().unwrap_or(entries);
        let found = find::lookup(s, role, named)?;
        let mut verdicts = vec![Verdict::default(); named.len()];
        for &(i, why) in &found.refused {
            verdicts[i] = Verdict::refused(why);
        }
        for t in found.targets {
            for (i, v) in apply::target(s, named, t)? {
                verdicts[i] = v;
            }
        }
        // Entries whose message retention deleted under their lease: the rest of the batch
        // may be gone too, and the lease then has nothing left to finish.
        let mut swept: Vec<Uuid> = Vec::new();
        for lease in find::gone(named, &found.ids) {
            if apply::sweep_vanished(s, lease)? {
                swept.push(lease);
            }
        }
        Ok(results(entries, &found.ids, verdicts, &swept))
    })
}

/// `queen_ack_lease` (semantics §3.4): every message lease `lease` delivered and not finished yet,
/// acknowledged with `status` (and `error`) as a batch of one entry per message would be —
/// another way to find the entries; the rules are rule.rs's. The rows that hold the lease are
/// found through `cursors_lease` and locked in partition order, with their batches' message
/// ids, in one statement; then one write per partition. Results in delivery order (partition
/// by partition, in the order the rows are locked), `idx` counting from 0. A lease no row holds
/// any more (released, or taken over by a pop after it ran out) no longer knows its batch: no
/// rows, as for an unknown lease. To a role that holds no privilege on the lease's queue, the
/// lease is unknown (nothing locked); one that knows the queue but may not pop is refused (42501).
pub fn ack_lease(lease: uuid::Uuid, status: AckStatus, error: Option<&str>) -> QueenResult<Vec<AckResult>> {
    let role = crate::privilege::caller();
    let lease = to_pg(lease);
    crate::session::connect(|s| {
        let mut entries: Vec<AckEntry> = Vec::new();
        let mut verdicts: Vec<Verdict> = Vec::new();
        for rows in find::lease_rows(s, role, lease)? {
            let t = find::lease_target(s, lease, rows, status, error, &mut entries);
            if t.named.is_empty() {
                // Nothing left to ack here: every unfinished message of the batch is gone.
                let (row, now, _) = t.locked.expect("queen: a lease's rows are locked as found");
                apply::release_vanished(s, lease, t.partition, &t.group, t.queue_id, row, now);
                continue;
            }
            verdicts.resize(entries.len(), Verdict::default());
            for (i, v) in apply::target(s, &entries, t)? {
                verdicts[i] = v;
            }
        }
        let ids: Vec<Option<Uuid>> = entries.iter().map(|e| e.message_id.map(to_pg)).collect();
        Ok(results(&entries, &ids, verdicts, &[]))
    })
}

/// The results of `entries`, one per entry in order, from their verdicts: with the id of the
/// message each names as found (`ids`; the id given when not found), and `lease_released` also
/// on the first entry of each lease of `swept` that found no message (its rows released as all
/// their messages were gone: apply.rs `sweep_vanished`).
fn results(entries: &[AckEntry], ids: &[Option<Uuid>], verdicts: Vec<Verdict>, swept: &[Uuid]) -> Vec<AckResult> {
    let first_gone = |lease: Uuid| {
        (0..entries.len())
            .find(|&i| entries[i].lease_id.map(to_pg) == Some(lease) && verdicts[i].error == Some("message not found"))
    };
    let sweeping: Vec<usize> = swept.iter().filter_map(|&lease| first_gone(lease)).collect();
    verdicts
        .into_iter()
        .enumerate()
        .map(|(i, v)| AckResult {
            idx: i as i32,
            message_id: ids[i].or(entries[i].message_id.map(to_pg)),
            success: v.success,
            error: v.error.map(str::to_string),
            lease_released: v.lease_released || sweeping.contains(&i),
            dead_lettered: v.dead_lettered,
        })
        .collect()
}
