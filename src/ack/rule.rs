//! What acknowledgements do to one (partition, group) (semantics §5), in plain Rust.
//!
//! An ack is **find → judge → apply**: find.rs finds what the entries name and gathers them by
//! (partition, group); apply.rs locks (or starts) that pair's cursor row and hands it, with the
//! entries, to [`judge`]; then writes what it decided. Every rule about *whether* an entry
//! applies and what it does to the cursor, the lease, retries and dead letters is here, with a
//! table of cases below; how the cursor itself moves is cursor.rs.

use super::parse::AckStatus;
use crate::cursor::Key;
use crate::options::QueueOptions;
use crate::state::{CursorRow, Micros};
use pgrx::Uuid;

/// A lease an entry names that is not its row's own, as a cursor row of the partition knows
/// it (the lease it holds or the last one that ended there): when it ends (`Micros::MIN` once
/// it ended), and whether it was released rather than run out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    pub expires_at: Micros,
    pub released: bool,
}

/// One entry of the (partition, group), as the rules read it.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// The message the entry names.
    pub key: Key,
    pub status: AckStatus,
    /// The lease the entry names, if any.
    pub lease: Option<Uuid>,
    /// That lease as the partition's rows know it, when they do.
    pub known: Option<Known>,
    /// The reason given, filed with a dead letter.
    pub error: Option<&'a str>,
}

/// What became of one entry, in the shape of `queen.ack_result`'s flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    pub success: bool,
    /// Why it was not applied.
    pub error: Option<&'static str>,
    pub lease_released: bool,
    pub dead_lettered: bool,
}

impl Verdict {
    /// Not applied, for `why`.
    pub fn refused(why: &'static str) -> Verdict {
        Verdict { error: Some(why), ..Verdict::default() }
    }
}

/// What judging a group's entries decided beyond their verdicts (the row is changed in place):
/// what else to write.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// An entry applied: the row is to be saved.
    pub changed: bool,
    /// The partition may have work again: now, or when the retry delay ends.
    pub hint_at: Option<Micros>,
    /// The lease an entry released.
    pub released: Option<Uuid>,
    /// Dead letters to file: key, reason, attempt.
    pub dead_letters: Vec<(Key, Option<String>, i32)>,
}

/// Why an entry naming `lease` is refused, if it is: by the row's own lease, or by the lease as
/// the partition's rows know it.
/// `in_batch`: the entry's message is one of the row's lease batch.
fn lease_refusal(row: &CursorRow, now: Micros, lease: Uuid, e: &Entry<'_>, in_batch: bool) -> Option<&'static str> {
    if row.lease_id == Some(lease) {
        if !row.lease_active(now) {
            return Some("lease expired");
        }
        if !(in_batch && row.cursor.lease.is_some()) {
            return Some("lease not held");
        }
        return None;
    }
    match e.known {
        Some(l) if !l.released && l.expires_at <= now => Some("lease expired"),
        _ => Some("lease not held"),
    }
}

/// Judge the entries of one (partition, group) against its row (semantics §5), in delivery order,
/// changing the row as they apply: one verdict per entry, in the order given, and what else
/// is to be written. Writes nothing.
pub fn judge(row: &mut CursorRow, now: Micros, opts: &QueueOptions, entries: &[Entry<'_>]) -> (Vec<Verdict>, Outcome) {
    // Delivery order: the lease's batch order for its messages, key order otherwise.
    // Each entry's place in the batch, found in the batch's keys sorted once: a search of
    // the batch for each entry, at each comparison of the sort, made judging a batch of 100
    // quadratic.
    let batch_at: Vec<Option<usize>> = {
        let keys = row.cursor.lease.as_ref().map_or(&[][..], |b| &b.keys[..]);
        let mut sorted: Vec<(Key, usize)> = keys.iter().copied().zip(0..).collect();
        sorted.sort_unstable();
        let at = |k: Key| sorted.binary_search_by_key(&k, |&(x, _)| x).ok().map(|j| sorted[j].1);
        entries.iter().map(|e| at(e.key)).collect()
    };
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by_key(|&i| (batch_at[i].is_none(), batch_at[i].unwrap_or(0), entries[i].key));

    let held_lease = row.lease_id.filter(|_| row.lease_active(now));
    let mut verdicts = vec![Verdict::default(); entries.len()];
    let mut out = Outcome::default();
    let mut came_back = false;
    for i in order {
        let e = &entries[i];
        let k = e.key;
        let v = &mut verdicts[i];
        if came_back {
            v.error = Some("superseded");
            continue;
        }
        if row.cursor.is_finished(k) {
            v.error = Some("already acknowledged");
            continue;
        }
        if let Some(lease) = e.lease {
            if let Some(why) = lease_refusal(row, now, lease, e, batch_at[i].is_some()) {
                v.error = Some(why);
                continue;
            }
        }
        out.changed = true;
        v.success = true;
        let mut dead_letter = |attempts: i32, v: &mut Verdict| {
            v.dead_lettered = opts.dead_letter_queue;
            out.dead_letters.push((k, e.error.map(str::to_string), attempts));
        };
        let released = match e.status {
            AckStatus::Completed => row.cursor.finish(k),
            AckStatus::Dlq => {
                dead_letter(row.cursor.attempt_of(k), v);
                row.cursor.finish(k)
            }
            AckStatus::Failed => {
                let charge = row.cursor.charge(k, opts.retry_limit);
                if charge.spent {
                    // Filed, and the lease released all the same (semantics §5): a worker that gives
                    // up on its batch after a failure leaves nothing leased until expiry; the
                    // messages after it come back at the next pop, uncharged.
                    dead_letter(charge.attempt, v);
                    row.cursor.finish(k);
                    came_back = true;
                    row.cursor.release();
                    true
                } else {
                    came_back = true;
                    row.cursor.release();
                    if opts.retry_delay > 0 {
                        row.retry_at = Some(now + opts.retry_delay as i64 * 1000);
                    }
                    true
                }
            }
            AckStatus::Retry => {
                came_back = true;
                row.cursor.release();
                true
            }
        };
        if released && row.lease_id.is_some() {
            v.lease_released = held_lease.is_some();
            out.released = row.lease_id.take();
            row.lease_expires_at = None;
        }
        if released || came_back {
            // The partition may have work again: now, or when the retry delay ends.
            out.hint_at = Some(row.retry_at.filter(|&t| t > now).unwrap_or(now));
        }
    }
    (verdicts, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cursor::{Batch, Cursor};
    use AckStatus::*;

    const SEC: Micros = 1_000_000;
    const NOW: Micros = 1_000 * SEC;
    const BOOM: &str = "boom";

    fn id(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    /// The lease the row holds.
    fn held() -> Uuid {
        id(1)
    }

    /// The lease an entry names.
    #[derive(Debug, Clone, Copy)]
    enum Names {
        /// None (a queue-mode ack without its lease).
        Nothing,
        /// The row's own.
        Held,
        /// Another one that no row of the partition knows.
        Unknown,
        /// Another one, released there.
        Released,
        /// Another one, run out there.
        RanOut,
    }

    struct Case {
        name: &'static str,
        /// The row: its frontier, its pending transactions, its lease's batch in delivery order
        /// (empty: it holds no lease), ending `lease_ends` seconds from now.
        done: Key,
        pending: &'static [(i64, i64)],
        batch: &'static [Key],
        lease_ends: i64,
        retry_limit: i32,
        retry_delay_ms: i32,
        dead_letter_queue: bool,
        /// The entries in the order given: message, status, lease named (every one says "boom").
        acks: &'static [(Key, AckStatus, Names)],
        /// Per entry, in the order given: "ok" (and " released", " dead" for its flags), or
        /// why it was refused.
        want: &'static [&'static str],
        /// The row after: its frontier, whether it still holds the lease, the failure charged,
        /// the end of its retry delay (seconds from now).
        done_after: Key,
        holds: bool,
        charged: Option<(Key, i32)>,
        retry_in: Option<i64>,
        /// What else to write: the hint (seconds from now), the dead letters (message, attempt).
        hint_in: Option<i64>,
        dead: &'static [(Key, i32)],
    }

    const BATCH: &[Key] = &[(1, 1), (1, 2), (1, 3)];

    /// A row leasing BATCH for 30 more seconds, nothing finished; after the acks, unchanged.
    fn case(name: &'static str) -> Case {
        Case {
            name,
            done: (0, 0),
            pending: &[],
            batch: BATCH,
            lease_ends: 30,
            retry_limit: 3,
            retry_delay_ms: 1000,
            dead_letter_queue: true,
            acks: &[],
            want: &[],
            done_after: (0, 0),
            holds: true,
            charged: None,
            retry_in: None,
            hint_in: None,
            dead: &[],
        }
    }

    fn row_of(c: &Case) -> CursorRow {
        let leased = !c.batch.is_empty();
        CursorRow {
            cursor: Cursor {
                done: c.done,
                pending: c.pending.to_vec(),
                lease: leased.then(|| Batch::new(c.batch.to_vec(), vec![])),
                ..Cursor::default()
            },
            retry_at: None,
            lease_id: leased.then(held),
            lease_expires_at: leased.then_some(NOW + c.lease_ends * SEC),
            version: Some("1".into()),
        }
    }

    fn entry_of(&(key, status, names): &(Key, AckStatus, Names)) -> Entry<'static> {
        let (lease, known) = match names {
            Names::Nothing => (None, None),
            Names::Held => (Some(held()), None),
            Names::Unknown => (Some(id(2)), None),
            Names::Released => (Some(id(2)), Some(Known { expires_at: Micros::MIN, released: true })),
            Names::RanOut => (Some(id(2)), Some(Known { expires_at: Micros::MIN, released: false })),
        };
        Entry { key, status, lease, known, error: Some(BOOM) }
    }

    fn show(v: &Verdict) -> String {
        match (v.success, v.error) {
            (true, None) => {
                let flag = |on: bool, name: &str| if on { format!(" {name}") } else { String::new() };
                format!("ok{}{}", flag(v.lease_released, "released"), flag(v.dead_lettered, "dead"))
            }
            _ => v.error.unwrap_or("(no reason)").to_string(),
        }
    }

    fn at(seconds_from_now: i64) -> Micros {
        NOW + seconds_from_now * SEC
    }

    #[test]
    fn the_rules_of_an_ack() {
        use Names::*;
        let cases = [
            // completed: the cursor moves over the finished prefix; the whole batch finished
            // releases the lease.
            Case {
                acks: &[((1, 1), Completed, Held), ((1, 2), Completed, Held), ((1, 3), Completed, Held)],
                want: &["ok", "ok", "ok released"],
                done_after: (1, 3),
                holds: false,
                hint_in: Some(0),
                ..case("completed finishing the batch releases the lease")
            },
            Case {
                acks: &[((1, 1), Completed, Held)],
                want: &["ok"],
                done_after: (1, 1),
                ..case("completed of part of the batch keeps the lease")
            },
            Case {
                acks: &[((1, 2), Completed, Held)],
                want: &["ok"],
                ..case("completed out of order: the cursor waits for the gap")
            },
            Case {
                acks: &[((1, 3), Completed, Nothing), ((1, 2), Completed, Nothing), ((1, 1), Completed, Nothing)],
                want: &["ok released", "ok", "ok"],
                done_after: (1, 3),
                holds: false,
                hint_in: Some(0),
                ..case("without the lease named, the last of the batch releases it too")
            },
            // failed: charged; with retries left, the lease is released and the message comes
            // back after retryDelay, with the rest of the batch (superseded).
            Case {
                acks: &[((1, 1), Failed, Held), ((1, 2), Completed, Held)],
                want: &["ok released", "superseded"],
                holds: false,
                charged: Some(((1, 1), 1)),
                retry_in: Some(1),
                hint_in: Some(1),
                ..case("failed with retries left releases; the rest comes back after retryDelay")
            },
            Case {
                acks: &[((1, 1), Completed, Held), ((1, 2), Failed, Held), ((1, 3), Completed, Held)],
                retry_delay_ms: 0,
                want: &["ok", "ok released", "superseded"],
                done_after: (1, 1),
                holds: false,
                charged: Some(((1, 2), 1)),
                hint_in: Some(0),
                ..case("failed without a retry delay comes back at once")
            },
            // failed with retries spent: a dead letter, finished, and the lease released all
            // the same (semantics §5); the rest comes back uncharged.
            Case {
                acks: &[((1, 1), Failed, Held), ((1, 2), Completed, Held)],
                retry_limit: 0,
                want: &["ok released dead", "superseded"],
                done_after: (1, 1),
                holds: false,
                hint_in: Some(0),
                dead: &[((1, 1), 1)],
                ..case("failed with retries spent files a dead letter and releases the lease")
            },
            Case {
                acks: &[((1, 1), Failed, Held), ((1, 2), Completed, Held)],
                retry_limit: 0,
                dead_letter_queue: false,
                want: &["ok released", "superseded"],
                done_after: (1, 1),
                holds: false,
                hint_in: Some(0),
                dead: &[((1, 1), 1)],
                ..case("retries spent without a dead letter queue: finished, not reported filed")
            },
            // retry: the lease is released and the message comes back at once, uncharged.
            Case {
                acks: &[((1, 1), Completed, Held), ((1, 2), Retry, Held), ((1, 3), Completed, Held)],
                want: &["ok", "ok released", "superseded"],
                done_after: (1, 1),
                holds: false,
                hint_in: Some(0),
                ..case("retry releases without charging")
            },
            // dlq: filed now, and finished.
            Case {
                acks: &[((1, 1), Dlq, Held)],
                want: &["ok dead"],
                done_after: (1, 1),
                dead: &[((1, 1), 1)],
                ..case("dlq files and finishes")
            },
            Case {
                acks: &[((1, 1), Completed, Held), ((1, 2), Completed, Held), ((1, 3), Dlq, Held)],
                want: &["ok", "ok", "ok released dead"],
                done_after: (1, 3),
                holds: false,
                hint_in: Some(0),
                dead: &[((1, 3), 1)],
                ..case("dlq of the batch's last message releases the lease")
            },
            // Refusals change nothing, and stop nothing.
            Case {
                acks: &[((1, 1), Completed, Held), ((1, 1), Completed, Held)],
                want: &["ok", "already acknowledged"],
                done_after: (1, 1),
                ..case("already acknowledged (twice in one call)")
            },
            Case {
                done: (1, 5),
                batch: &[],
                acks: &[((1, 2), Failed, Nothing)],
                want: &["already acknowledged"],
                done_after: (1, 5),
                holds: false,
                ..case("already acknowledged (behind the cursor)")
            },
            Case {
                lease_ends: -1,
                acks: &[((1, 1), Completed, Held)],
                want: &["lease expired"],
                ..case("lease expired (the row's own)")
            },
            Case {
                lease_ends: 0,
                acks: &[((1, 1), Completed, Held)],
                want: &["lease expired"],
                ..case("lease expired (ending now)")
            },
            Case {
                acks: &[((1, 1), Completed, RanOut)],
                want: &["lease expired"],
                ..case("lease expired (one that ran out in the partition)")
            },
            Case {
                acks: &[((1, 1), Completed, Unknown)],
                want: &["lease not held"],
                ..case("lease not held (another lease)")
            },
            Case {
                acks: &[((1, 1), Completed, Released)],
                want: &["lease not held"],
                ..case("lease not held (a lease released)")
            },
            Case {
                acks: &[((2, 1), Completed, Held)],
                want: &["lease not held"],
                ..case("lease not held (a message not in the batch)")
            },
            Case {
                acks: &[((1, 1), Completed, Unknown), ((1, 2), Completed, Held)],
                want: &["lease not held", "ok"],
                ..case("a refused entry does not stop the next")
            },
            Case {
                batch: &[],
                acks: &[((1, 1), Completed, Nothing)],
                want: &["ok"],
                holds: false,
                ..case("an ack without a lease where the row holds none")
            },
            // Delivery order: entries given out of order are judged in the batch's order.
            Case {
                acks: &[((1, 3), Completed, Held), ((1, 1), Failed, Held), ((1, 2), Completed, Held)],
                want: &["superseded", "ok released", "superseded"],
                holds: false,
                charged: Some(((1, 1), 1)),
                retry_in: Some(1),
                hint_in: Some(1),
                ..case("entries out of order are judged in delivery order")
            },
            Case {
                // Delivered (7,2) before (5,1): transaction 5 was pending (committed late).
                done: (6, 0),
                pending: &[(5, 0)],
                batch: &[(7, 2), (5, 1), (7, 3)],
                acks: &[((7, 3), Completed, Held), ((5, 1), Failed, Held), ((7, 2), Completed, Held)],
                want: &["superseded", "ok released", "ok"],
                done_after: (7, 2),
                holds: false,
                charged: Some(((5, 1), 1)),
                retry_in: Some(1),
                hint_in: Some(1),
                ..case("the batch's order, not the keys'")
            },
        ];
        let mut failed = Vec::new();
        for c in &cases {
            let mut row = row_of(c);
            let opts = QueueOptions {
                retry_limit: c.retry_limit,
                retry_delay: c.retry_delay_ms,
                dead_letter_queue: c.dead_letter_queue,
                ..QueueOptions::default()
            };
            let entries: Vec<Entry> = c.acks.iter().map(entry_of).collect();
            let (verdicts, out) = judge(&mut row, NOW, &opts, &entries);
            let mut wrong = Vec::new();
            let got: Vec<String> = verdicts.iter().map(show).collect();
            if got != c.want {
                wrong.push(format!("verdicts {got:?}, want {:?}", c.want));
            }
            let applied = c.want.iter().any(|w| w.starts_with("ok"));
            if out.changed != applied {
                wrong.push(format!("changed {}, want {applied}", out.changed));
            }
            if row.cursor.done != c.done_after {
                wrong.push(format!("done {:?}, want {:?}", row.cursor.done, c.done_after));
            }
            let holds = (row.lease_id.is_some(), row.lease_expires_at.is_some(), row.cursor.lease.is_some());
            if holds != (c.holds, c.holds, c.holds) {
                wrong.push(format!("holds (id, expiry, batch) {holds:?}, want {}", c.holds));
            }
            let released = (!c.batch.is_empty() && !c.holds).then(held);
            if out.released != released {
                wrong.push(format!("released {:?}, want {released:?}", out.released));
            }
            if row.cursor.fail != c.charged {
                wrong.push(format!("charged {:?}, want {:?}", row.cursor.fail, c.charged));
            }
            if row.retry_at != c.retry_in.map(at) {
                wrong.push(format!("retry_at {:?}, want {:?}", row.retry_at, c.retry_in.map(at)));
            }
            if out.hint_at != c.hint_in.map(at) {
                wrong.push(format!("hint_at {:?}, want {:?}", out.hint_at, c.hint_in.map(at)));
            }
            let dead: Vec<(Key, Option<String>, i32)> =
                c.dead.iter().map(|&(k, attempt)| (k, Some(BOOM.to_string()), attempt)).collect();
            if out.dead_letters != dead {
                wrong.push(format!("dead letters {:?}, want {dead:?}", out.dead_letters));
            }
            if !wrong.is_empty() {
                failed.push(format!("{}: {}", c.name, wrong.join("; ")));
            }
        }
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }
}
