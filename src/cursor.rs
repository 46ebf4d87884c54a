//! The consumer state of one (partition, consumer group), and its rules, in plain Rust.
//!
//! Messages of a partition are ordered by their key `(txid, seq)`: the pushing transaction's
//! id and a per-backend counter. Keys are assigned when a message is written, not when it
//! becomes visible, so a transaction that started earlier may commit later than messages the
//! group has already passed (the commit-order hazard, semantics §6.1). The cursor therefore is:
//!
//! * a **frontier** `done`: every message with a key at or before it is finished, except
//! * the messages of the **pending** transactions: those that were still running when the
//!   frontier passed their position. For each, how far within it the group is (`seq`).
//!   When such a transaction commits its messages are delivered; if it aborted it is dropped.
//! * **ahead**: messages beyond the frontier (or beyond a pending transaction's position)
//!   that are finished already: completed out of order within a lease, or dead-lettered.
//!   They are never delivered again (a completion once applied is never undone, semantics §5).
//! * **fail**: the first unfinished message and the failures charged to it.
//! * the **lease** batch: the keys delivered to the lease holder, in delivery order, and the
//!   transactions the popping snapshot saw running inside the batch's range (they become
//!   pending when the frontier passes them).
//!
//! Everything here is pure: the SQL side (pop.rs, ack/) reads a row, calls these rules, and
//! writes the row back.

/// A message's position in its partition: (txid, seq).
pub type Key = (i64, i64);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    pub done: Key,
    /// (txid, finished up to seq), sorted by txid, txids unique.
    pub pending: Vec<(i64, i64)>,
    /// Finished keys past the frontier or a pending position; sorted, unique.
    pub ahead: Vec<Key>,
    /// The message failures are charged to, and how many.
    pub fail: Option<(Key, i32)>,
    pub lease: Option<Batch>,
}

#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// Keys in delivery order.
    pub keys: Vec<Key>,
    /// Transactions in progress, as the popping snapshot saw them, between the frontier and
    /// the batch's last key.
    pub xip: Vec<i64>,
    /// How many keys at the batch's start `settle` has passed already (not stored: a batch
    /// read from its row starts at 0). A passed key stays finished while the lease lasts, so
    /// the next `settle` starts after them: acking a batch of n one by one walks it once, not
    /// n times (the quadratic walk was 2% of a pop 100 + queen_ack_lease cycle).
    pub passed: usize,
}

impl Batch {
    pub fn new(keys: Vec<Key>, xip: Vec<i64>) -> Batch {
        Batch { keys, xip, passed: 0 }
    }
}

/// Batches are equal when they hold the same keys and running transactions: how far `settle`
/// got is bookkeeping.
impl PartialEq for Batch {
    fn eq(&self, other: &Batch) -> bool {
        self.keys == other.keys && self.xip == other.xip
    }
}

impl Eq for Batch {}

/// What charging a failure to a message did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    pub key: Key,
    /// The attempt that failed (1 = first delivery).
    pub attempt: i32,
    /// Its retries are spent: it is now finished (a dead letter, or skipped).
    pub spent: bool,
}

/// The transactions of `xip` (running, as a snapshot saw them) that a move from position
/// `from` to `to` passes: their messages may lie in between, and they become pending. A running
/// transaction can have the frontier's own xid: a 'new' subscription starts at (xmax, 0), and
/// the transaction that gets xid xmax afterwards pushes right after it, so the bound is
/// inclusive there (a position read from a message has a committed xid, never a running one).
pub fn running_between(xip: &[i64], from: Key, to: Key) -> impl Iterator<Item = i64> + '_ {
    xip.iter().copied().filter(move |&x| x >= from.0 && x < to.0)
}

impl Cursor {
    /// The cursor a group starts with on a partition when it subscribed with mode `new`:
    /// everything visible at subscription is done (`start_xmax` and the snapshot's in-progress
    /// list `start_xip` describe that), everything else is to come.
    pub fn subscribed_new(start_xmax: i64, start_xip: &[i64]) -> Cursor {
        let mut pending: Vec<(i64, i64)> = start_xip.iter().map(|&x| (x, 0)).collect();
        pending.sort_unstable();
        pending.dedup();
        Cursor { done: (start_xmax, 0), pending, ..Cursor::default() }
    }

    fn pending_pos(&self, txid: i64) -> Option<usize> {
        self.pending.binary_search_by_key(&txid, |p| p.0).ok()
    }

    /// Is this message finished for the group?
    pub fn is_finished(&self, k: Key) -> bool {
        if self.ahead.binary_search(&k).is_ok() {
            return true;
        }
        match self.pending_pos(k.0) {
            Some(i) => k.1 <= self.pending[i].1,
            None => k <= self.done,
        }
    }

    /// The attempt number of the next delivery of `k`.
    pub fn attempt_of(&self, k: Key) -> i32 {
        match self.fail {
            Some((f, n)) if f == k => n + 1,
            _ => 1,
        }
    }

    /// The first message of the lease's batch that is not finished.
    pub fn first_unfinished(&self) -> Option<Key> {
        self.lease.as_ref()?.keys.iter().copied().find(|k| !self.is_finished(*k))
    }

    /// Mark `k` finished (completed or dead-lettered) and move the cursor over the finished
    /// prefix of the batch. Returns true when the whole batch is finished, which releases the
    /// lease.
    pub fn finish(&mut self, k: Key) -> bool {
        if !self.is_finished(k) {
            if let Err(i) = self.ahead.binary_search(&k) {
                self.ahead.insert(i, k);
            }
        }
        self.settle()
    }

    /// Count `k` finished without moving anything yet (a message of the lease's batch that
    /// no longer exists: retention deleted it): the next `finish` or `settle` passes it.
    pub fn vanished(&mut self, k: Key) {
        if !self.is_finished(k) {
            if let Err(i) = self.ahead.binary_search(&k) {
                self.ahead.insert(i, k);
            }
        }
    }

    /// The messages of the lease's batch not finished yet.
    pub fn unfinished(&self) -> Vec<Key> {
        self.lease
            .as_ref()
            .map(|b| b.keys.iter().copied().filter(|k| !self.is_finished(*k)).collect())
            .unwrap_or_default()
    }

    /// Move over the longest finished prefix of the batch; release the lease when all of it
    /// is finished. Returns whether the lease was released.
    pub fn settle(&mut self) -> bool {
        let Some(mut batch) = self.lease.take() else {
            return false;
        };
        debug_assert!(batch.keys[..batch.passed].iter().all(|k| self.is_finished(*k)), "a passed key unfinished");
        let mut all = true;
        for &k in &batch.keys[batch.passed..] {
            if !self.is_finished(k) {
                all = false;
                break;
            }
            self.pass(k, &batch.xip);
            batch.passed += 1;
        }
        if all {
            true
        } else {
            self.lease = Some(batch);
            false
        }
    }

    /// Move the cursor over finished message `k`, which is the next of the batch in delivery
    /// order. Transactions of `xip` that the frontier passes become pending.
    fn pass(&mut self, k: Key, xip: &[i64]) {
        if let Some(i) = self.pending_pos(k.0) {
            if k.1 <= self.pending[i].1 {
                return; // passed already
            }
            self.pending[i].1 = k.1;
        } else if k > self.done {
            for x in running_between(xip, self.done, k) {
                if self.pending_pos(x).is_none() {
                    let at = self.pending.partition_point(|p| p.0 < x);
                    self.pending.insert(at, (x, 0));
                }
            }
            self.done = k;
        } else {
            return; // passed already
        }
        // Only a move can cover more of `ahead` or the failed message. (Settling after each ack
        // of a batch walks the batch's finished prefix again: pruning on every step of it made
        // a batch ack of 100 spend 12% of its time here.)
        self.prune();
    }

    /// Forget what the frontier and pending positions already cover.
    fn prune(&mut self) {
        let mut ahead = std::mem::take(&mut self.ahead);
        ahead.retain(|k| match self.pending_pos(k.0) {
            Some(i) => k.1 > self.pending[i].1,
            None => *k > self.done,
        });
        self.ahead = ahead;
        if let Some((f, _)) = self.fail {
            let covered = match self.pending_pos(f.0) {
                Some(i) => f.1 <= self.pending[i].1,
                None => f <= self.done,
            };
            if covered {
                self.fail = None;
            }
        }
    }

    /// Charge one failure to `k` (a `failed` ack, or an expired lease whose first unfinished
    /// message it was). With `retry_limit` spent, `k` becomes finished.
    pub fn charge(&mut self, k: Key, retry_limit: i32) -> Charge {
        let failures = match self.fail {
            Some((f, n)) if f == k => n + 1,
            _ => 1,
        };
        self.fail = Some((k, failures));
        let spent = failures > retry_limit;
        Charge { key: k, attempt: failures, spent }
    }

    /// Finish the whole lease batch at once, in order (an auto_ack pop): the same as
    /// finishing each message, without re-walking the batch after each.
    pub fn finish_all(&mut self) {
        if let Some(batch) = self.lease.take() {
            for &k in &batch.keys {
                self.pass(k, &batch.xip);
            }
        }
    }

    /// Give the batch back: unfinished messages of it will be delivered again; finished ones
    /// stay finished.
    pub fn release(&mut self) {
        self.settle();
        self.lease = None;
    }

    /// An expired lease counts as a failure of the first unfinished message of its batch
    /// (semantics §5). Returns the charge, if there was an unfinished message. The lease is gone
    /// afterwards.
    pub fn expire(&mut self, retry_limit: i32) -> Option<Charge> {
        let first = self.first_unfinished();
        let charge = first.map(|k| self.charge(k, retry_limit));
        if let Some(c) = charge {
            if c.spent {
                self.finish(c.key);
            }
        }
        self.release();
        charge
    }

    /// Resolve pending transactions after a read: `visible[i]` says whether `pending[i]` had
    /// ended for the reading snapshot (committed, or rolled back), `left[i]` whether it still
    /// has unfinished messages in this partition. Ended ones with nothing left are dropped.
    /// Returns whether anything changed.
    pub fn resolve_pending(&mut self, visible: &[bool], left: &[bool]) -> bool {
        let before = self.pending.len();
        let mut i = 0;
        self.pending.retain(|_| {
            let keep = !visible[i] || left[i];
            i += 1;
            keep
        });
        let changed = self.pending.len() != before;
        if changed {
            self.prune();
        }
        changed
    }

    /// Owe `k` again: a dead letter replayed (dead_letters.rs). `k` becomes unfinished, with a
    /// fresh attempt count, and is delivered before anything after it in the partition;
    /// everything else keeps its state: what was finished stays finished. `later` lists the
    /// keys of `k`'s transaction after `k` in this partition (sorted): those the frontier or a
    /// pending position covered are finished, and stay so as `ahead` keys once the position
    /// moves back before `k`. The cursor holds no lease (the caller released it: a batch's
    /// frontier moves would pass over `k`). Returns false when `k` was not finished (nothing
    /// owed it: a seek back made it unfinished already).
    pub fn owe_again(&mut self, k: Key, later: &[Key]) -> bool {
        debug_assert!(self.lease.is_none(), "owe_again under a lease");
        if self.fail.is_some_and(|(f, _)| f == k) {
            self.fail = None;
        }
        if let Ok(i) = self.ahead.binary_search(&k) {
            self.ahead.remove(i);
            return true;
        }
        if !self.is_finished(k) {
            return false;
        }
        let (x, s) = k;
        // Up to where `later` is finished by a position that now moves back before `k`.
        let covered_to = match self.pending_pos(x) {
            Some(i) => std::mem::replace(&mut self.pending[i].1, s - 1),
            // The frontier is inside `k`'s transaction: it moves back (a pending entry beside it
            // would have the transaction's messages after the frontier read twice, by look's
            // pending branch and its frontier branch).
            None if x == self.done.0 => std::mem::replace(&mut self.done, (x, s - 1)).1,
            None => {
                let at = self.pending.partition_point(|p| p.0 < x);
                self.pending.insert(at, (x, s - 1));
                i64::MAX
            }
        };
        // Merged, not inserted one by one: a transaction of thousands replayed from its first
        // message adds thousands of keys.
        let before = self.ahead.len();
        self.ahead.extend(later.iter().filter(|l| l.0 == x && l.1 > s && l.1 <= covered_to));
        if self.ahead.len() > before {
            self.ahead.sort_unstable();
            self.ahead.dedup();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leased(keys: &[Key], xip: &[i64]) -> Cursor {
        Cursor { lease: Some(Batch::new(keys.to_vec(), xip.to_vec())), ..Cursor::default() }
    }

    #[test]
    fn completing_in_order_moves_the_frontier_and_releases() {
        let mut c = leased(&[(10, 1), (10, 2), (12, 3)], &[]);
        assert!(!c.finish((10, 1)));
        assert_eq!(c.done, (10, 1));
        assert!(!c.finish((10, 2)));
        assert!(c.finish((12, 3)), "the last one releases the lease");
        assert_eq!(c.done, (12, 3));
        assert!(c.lease.is_none() && c.ahead.is_empty());
    }

    #[test]
    fn finishing_all_at_once_is_finishing_each() {
        let keys = [(10, 1), (14, 1), (14, 2)];
        let mut one_by_one = leased(&keys, &[12, 13]);
        for k in keys {
            one_by_one.finish(k);
        }
        let mut all = leased(&keys, &[12, 13]);
        all.finish_all();
        assert_eq!(all, one_by_one);
        assert_eq!(all.pending, vec![(12, 0), (13, 0)]);
    }

    #[test]
    fn settling_starts_after_what_it_passed() {
        let mut c = leased(&[(10, 1), (10, 2), (11, 1), (12, 1)], &[]);
        assert!(!c.finish((10, 2)));
        assert_eq!(c.lease.as_ref().unwrap().passed, 0, "nothing passed before the gap");
        assert!(!c.finish((10, 1)));
        assert_eq!(c.lease.as_ref().unwrap().passed, 2);
        assert_eq!(c.done, (10, 2));
        assert!(!c.finish((11, 1)));
        assert_eq!(c.lease.as_ref().unwrap().passed, 3);
        assert!(c.finish((12, 1)), "the last one releases the lease");
        assert_eq!(c.done, (12, 1));
    }

    #[test]
    fn out_of_order_completions_wait_for_the_gap() {
        let mut c = leased(&[(10, 1), (10, 2), (10, 3)], &[]);
        assert!(!c.finish((10, 3)));
        assert_eq!(c.done, (0, 0), "the cursor moves only over a finished prefix");
        assert!(c.is_finished((10, 3)));
        assert!(!c.finish((10, 2)));
        assert_eq!(c.done, (0, 0));
        assert!(c.finish((10, 1)), "the gap is filled: all finished");
        assert_eq!(c.done, (10, 3));
        assert!(c.ahead.is_empty());
    }

    #[test]
    fn the_frontier_passing_a_running_transaction_makes_it_pending() {
        // Popped (10,1) and (14,1) while 12 and 13 were running; 20 is beyond the batch.
        let mut c = leased(&[(10, 1), (14, 1)], &[12, 13, 20]);
        c.finish((10, 1));
        assert!(c.pending.is_empty(), "12 and 13 are not passed yet");
        c.finish((14, 1));
        assert_eq!(c.pending, vec![(12, 0), (13, 0)]);
        assert!(!c.is_finished((12, 5)), "a late commit is still to be delivered");
        assert!(c.is_finished((11, 9)));
    }

    #[test]
    fn release_keeps_completions_and_returns_the_rest() {
        // The figure of semantics §5 for separate acks: m3 completed, then m2 fails.
        let mut c = leased(&[(1, 1), (1, 2), (1, 3), (1, 4)], &[]);
        c.finish((1, 1));
        c.finish((1, 3));
        let charge = c.charge((1, 2), 3);
        assert_eq!(charge, Charge { key: (1, 2), attempt: 1, spent: false });
        c.release();
        assert!(c.lease.is_none());
        assert_eq!(c.done, (1, 1));
        assert!(c.is_finished((1, 3)), "a completion once applied is never undone");
        assert!(!c.is_finished((1, 2)) && !c.is_finished((1, 4)));
        assert_eq!(c.attempt_of((1, 2)), 2);
        assert_eq!(c.attempt_of((1, 4)), 1);
    }

    #[test]
    fn retries_are_counted_per_message_and_start_afresh() {
        let mut c = Cursor::default();
        assert!(!c.charge((1, 1), 1).spent);
        let second = c.charge((1, 1), 1);
        assert_eq!((second.attempt, second.spent), (2, true), "retryLimit 1: the second failure is final");
        // The next message starts with a clean count.
        assert_eq!(c.charge((1, 2), 1), Charge { key: (1, 2), attempt: 1, spent: false });
    }

    #[test]
    fn an_expired_lease_charges_the_first_unfinished_message() {
        let mut c = leased(&[(5, 1), (5, 2), (5, 3)], &[]);
        c.finish((5, 1));
        let charge = c.expire(0).unwrap();
        assert_eq!(charge.key, (5, 2));
        assert!(charge.spent, "retryLimit 0: the first failure files it");
        // (5,2) is finished as a dead letter; (5,3) comes back.
        assert!(c.is_finished((5, 2)));
        assert!(!c.is_finished((5, 3)));
        assert_eq!(c.done, (5, 2), "the dead letter was the gap: the frontier moved over it");
        assert!(c.lease.is_none());
    }

    #[test]
    fn pending_transactions_are_resolved() {
        let mut c = Cursor { done: (20, 1), pending: vec![(12, 0), (13, 0), (15, 2)], ..Cursor::default() };
        // 12 committed but has more to deliver; 13 rolled back (nothing left); 15 committed,
        // nothing left.
        assert!(c.resolve_pending(&[true, true, true], &[true, false, false]));
        assert_eq!(c.pending, vec![(12, 0)]);
        // Still running (or committed after the snapshot): kept.
        assert!(!c.resolve_pending(&[false], &[false]));
        assert_eq!(c.pending, vec![(12, 0)]);
    }

    #[test]
    fn messages_of_a_pending_transaction_are_delivered_in_seq_order() {
        let mut c = Cursor { done: (20, 1), pending: vec![(12, 0)], ..Cursor::default() };
        c.lease = Some(Batch::new(vec![(12, 4), (12, 7), (21, 1)], vec![]));
        c.finish((12, 7));
        assert_eq!(c.pending, vec![(12, 0)], "(12,4) is not finished yet");
        c.finish((12, 4));
        assert_eq!(c.pending, vec![(12, 7)]);
        assert!(c.finish((21, 1)));
        assert_eq!(c.done, (21, 1));
        assert!(c.is_finished((12, 7)) && !c.is_finished((12, 8)));
    }

    #[test]
    fn a_transaction_with_the_new_starts_xid_is_kept_pending() {
        // Subscribed 'new' at xmax 1749; the transaction that then got xid 1749 is running
        // when the frontier passes its position to a later message.
        let mut c = Cursor::subscribed_new(1749, &[]);
        c.lease = Some(Batch::new(vec![(1750, 1)], vec![1749]));
        c.finish((1750, 1));
        assert_eq!(c.pending, vec![(1749, 0)]);
        assert!(!c.is_finished((1749, 1)), "its messages are still to come");
    }

    #[test]
    fn subscribing_new_skips_what_was_visible() {
        let c = Cursor::subscribed_new(100, &[97, 95]);
        assert!(c.is_finished((99, 3)), "committed before the subscription");
        assert!(!c.is_finished((97, 1)), "running at subscription: delivered once it commits");
        assert!(!c.is_finished((100, 1)) && !c.is_finished((101, 1)));
        assert_eq!(c.pending, vec![(95, 0), (97, 0)]);
    }

    #[test]
    fn a_replayed_dead_letter_is_owed_again_and_nothing_else_is() {
        // (state before, key replayed, later keys of its transaction, state after, changed)
        let cur = |done: Key, pending: &[(i64, i64)], ahead: &[Key]| Cursor {
            done,
            pending: pending.to_vec(),
            ahead: ahead.to_vec(),
            ..Cursor::default()
        };
        let cases: Vec<(Cursor, Key, Vec<Key>, Cursor, bool)> = vec![
            // Filed out of order, past the frontier: it leaves `ahead`.
            (cur((10, 1), &[], &[(12, 2)]), (12, 2), vec![(12, 3)], cur((10, 1), &[], &[]), true),
            // Behind the frontier, in an older transaction: that transaction becomes pending
            // just before it, and its later messages stay finished.
            (
                cur((20, 5), &[], &[]),
                (12, 2),
                vec![(12, 3), (12, 4)],
                cur((20, 5), &[(12, 1)], &[(12, 3), (12, 4)]),
                true,
            ),
            // The frontier inside its transaction moves back; what it covered stays finished,
            // what lies after it is untouched.
            (
                cur((12, 4), &[], &[]),
                (12, 2),
                vec![(12, 3), (12, 4), (12, 6)],
                cur((12, 1), &[], &[(12, 3), (12, 4)]),
                true,
            ),
            // A pending transaction's position moves back the same way.
            (
                cur((20, 5), &[(12, 4)], &[(12, 6)]),
                (12, 2),
                vec![(12, 3), (12, 4), (12, 6)],
                cur((20, 5), &[(12, 1)], &[(12, 3), (12, 4), (12, 6)]),
                true,
            ),
            // First message of a transaction: the position is just before it.
            (cur((20, 5), &[(9, 0)], &[]), (12, 1), vec![], cur((20, 5), &[(9, 0), (12, 0)], &[]), true),
            // Not finished (a seek went back before it): nothing to do.
            (cur((10, 1), &[], &[]), (12, 2), vec![], cur((10, 1), &[], &[]), false),
            (cur((20, 5), &[(12, 1)], &[]), (12, 2), vec![], cur((20, 5), &[(12, 1)], &[]), false),
        ];
        for (i, (mut before, k, later, after, changed)) in cases.into_iter().enumerate() {
            assert_eq!(before.owe_again(k, &later), changed, "case {i}");
            assert_eq!(before, after, "case {i}");
            assert!(!before.is_finished(k), "case {i}: {k:?} is owed");
            for l in &later {
                assert!(before.is_finished(*l) || !after.is_finished(*l), "case {i}: {l:?}");
            }
        }
    }

    #[test]
    fn a_replayed_message_starts_its_attempts_afresh_and_is_passed_once_delivered() {
        let mut c = Cursor { done: (20, 5), fail: Some(((12, 2), 4)), ..Cursor::default() };
        assert!(c.owe_again((12, 2), &[(12, 3)]));
        assert_eq!(c.attempt_of((12, 2)), 1);
        // Delivered and completed: the pending position passes it, and once the reading
        // snapshot says nothing of the transaction is left, the cursor is as before.
        c.lease = Some(Batch::new(vec![(12, 2)], vec![]));
        assert!(c.finish((12, 2)));
        assert!(c.is_finished((12, 2)) && c.is_finished((12, 3)));
        assert!(c.resolve_pending(&[true], &[false]));
        assert_eq!(c, Cursor { done: (20, 5), ..Cursor::default() });
    }
}
