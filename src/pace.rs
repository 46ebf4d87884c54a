//! When a pop reads the queue's log: discovery paced by what the hints already give.
//!
//! Discovery (discovery.rs) reads twice what a pop may deliver, so that it outpaces
//! consumption and no partition starves. In a backlog the hints alone fill the pops (a pop
//! leaves its partition hinted while it has more), and the scan at every pop found nothing
//! new: the same partitions probed again, at every pop, by a statement of its own — and in
//! fan-out, by every group. So a backend whose last pop of the group was filled takes the
//! hints first; when they fill this pop too, it does not read the log, and owes the entries
//! it would have read. The next scan reads what is owed with its own share, in one statement
//! of at most sixteen pops' shares (`discovery::owed_scan_limit`: 3 200 entries for pops of
//! 100, never less than one scan's worth nor more than four): the same reading over the same
//! pops, once every sixteen pops. A pop the hints do not fill reads the log as before (an idle
//! consumer, a queue that drains); so does one with more owed than a scan may read. A
//! partition that got its first message is found within sixteen pops of the backlog, as long
//! as the hints keep filling them — none starves.
//!
//! Why so many: a scan costs mostly a probe per partition it finds, and in a backlog the same
//! partitions come again and again in the log. Draining 300 000 messages over 1 000
//! partitions (pop 100 + `queen_ack_lease`, 4 clients), deferring to one scan's worth (1 000)
//! took 394 scans of 2.3 ms; to sixteen shares, 111 scans, and the pops went 144 476 → 176 001
//! messages/s (`auto_ack` 191 815 → 236 844). The price is one longer pop in sixteen: at worst,
//! when every entry is in another partition, a probe for each of 3 200 (~7 ms at the 2.3 µs a
//! probe measured there).
//!
//! Skipping a scan changes nothing stored: what is carried out of a rollback
//! (discovery.rs) is hinted at the next scan, which every backend comes to.
//!
//! The rule is plain Rust ([`decide`]), table-tested without a server; the state, per
//! backend and group, is in memory.

/// What a pop does about the log, given what the backend owes the group's log. `limit`: the
/// entries the first round of its scan reads, when it scans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Take the hints first; read the log only if they do not fill the pop.
    HintsFirst { limit: i64 },
    /// Read the log first.
    Scan { limit: i64 },
}

/// The backend's account of one group's log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Account {
    /// Entries not read by pops the hints filled since the last scan.
    pub owed: i64,
    /// The last pop was filled.
    pub filled: bool,
}

/// The plan for a pop whose own share of the log is `share` entries (discovery::scan_limit),
/// where a scan may read at most `max` in one round.
pub fn decide(account: Account, share: i64, max: i64) -> Plan {
    // What is owed and this pop's share (share is at most max: discovery::scan_limit).
    let limit = (account.owed + share).min(max);
    // Deferring adds `share`; what the scan after it reads is owed + share: within max.
    if account.filled && account.owed + 2 * share <= max {
        Plan::HintsFirst { limit }
    } else {
        Plan::Scan { limit }
    }
}

/// The account after a pop: `filled` whether the pop was, `scanned` whether it read the log,
/// `owe` the entries it adds to what is owed when it did not — its share when the hints
/// filled it while no other pop of the group was reading the log; nothing when one was
/// (that pop's scan reads on for the group, as a pop that finds the log taken leaves it to
/// it: visit.rs).
pub fn after(account: Account, owe: i64, filled: bool, scanned: bool) -> Account {
    let owed = if scanned { 0 } else { account.owed + owe };
    Account { owed, filled }
}

/// Which (schema, queue, group) an account is of.
type Group = (pgrx::pg_sys::Oid, [u8; 16], String);
pub struct Key(Group);

/// The most groups a backend keeps accounts for; past it, it starts again (each group then
/// scans at its next pop).
const MAX_GROUPS: usize = 1024;

thread_local! {
    static ACCOUNTS: std::cell::RefCell<std::collections::HashMap<Group, Account>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// The key of the group's account, made once per pop.
pub fn key(queue_id: pgrx::Uuid, group: &str) -> Key {
    Key((crate::names::schema_oid(), *queue_id.as_bytes(), group.to_string()))
}

/// This backend's account of the group's log.
pub fn account(key: &Key) -> Account {
    ACCOUNTS.with(|a| a.borrow().get(&key.0).copied().unwrap_or_default())
}

/// Keep the group's account (the key is the pop's last use of it).
pub fn keep(key: Key, account: Account) {
    ACCOUNTS.with(|a| {
        let mut a = a.borrow_mut();
        if a.len() >= MAX_GROUPS {
            a.clear();
        }
        a.insert(key.0, account);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: i64 = 1000;

    #[test]
    fn the_rule_over_a_table_of_accounts() {
        let a = |owed, filled| Account { owed, filled };
        // (account, share, plan)
        let table = [
            // A first pop, or one after a pop the hints did not fill: the log first.
            (a(0, false), 200, Plan::Scan { limit: 200 }),
            (a(600, false), 200, Plan::Scan { limit: 800 }),
            // In a backlog: the hints first while what is owed and two shares fit in a scan.
            (a(0, true), 200, Plan::HintsFirst { limit: 200 }),
            (a(600, true), 200, Plan::HintsFirst { limit: 800 }),
            (a(800, true), 200, Plan::Scan { limit: 1000 }),
            // A share of half a scan or more: never deferred.
            (a(0, true), 500, Plan::HintsFirst { limit: 500 }),
            (a(500, true), 500, Plan::Scan { limit: 1000 }),
            (a(0, true), 1000, Plan::Scan { limit: 1000 }),
            // Small batches defer longer, and read what they owe at once.
            (a(832, true), 64, Plan::HintsFirst { limit: 896 }),
            (a(896, true), 64, Plan::Scan { limit: 960 }),
        ];
        for (account, share, plan) in table {
            assert_eq!(decide(account, share, MAX), plan, "{account:?}, share {share}");
        }
    }

    /// Pops of 100 that the hints always fill, 100 of them, where a scan may read `max`: how
    /// many scans they make, and that they read what they would have read (200 each).
    fn scans_of_a_backlog(max: i64) -> i64 {
        let (share, mut account, mut read, mut scans) = (200, Account { owed: 0, filled: true }, 0, 0);
        for _ in 0..100 {
            let plan = decide(account, share, max);
            let scanned = matches!(plan, Plan::Scan { .. });
            if let Plan::Scan { limit } = plan {
                assert!(limit <= max);
                read += limit;
                scans += 1;
            }
            account = after(account, if scanned { 0 } else { share }, true, scanned);
        }
        assert_eq!(read + account.owed, 100 * share);
        scans
    }

    #[test]
    fn a_backlog_reads_the_same_log_in_fewer_scans() {
        // Scans of 1 000, one every five pops.
        assert_eq!(scans_of_a_backlog(MAX), 20);
        // What pops of 100 use: scans of 3 200, one every sixteen pops.
        assert_eq!(crate::discovery::owed_scan_limit(200), 3200);
        assert_eq!(scans_of_a_backlog(3200), 6);
    }

    #[test]
    fn a_scan_of_what_is_owed_reads_sixteen_shares_within_bounds() {
        use crate::discovery::{owed_scan_limit, scan_limit};
        // (batch, the most a scan of what is owed reads)
        for (batch, max) in [(1, 1024), (10, 1024), (50, 1600), (100, 3200), (200, 4000), (10_000, 4000)] {
            assert_eq!(owed_scan_limit(scan_limit(batch)), max, "batch {batch}");
        }
    }

    #[test]
    fn what_is_owed_is_kept_until_a_scan_and_cleared_by_it() {
        let filled = Account { owed: 400, filled: true };
        assert_eq!(after(filled, 200, true, false), Account { owed: 600, filled: true });
        // Another pop of the group was reading the log: nothing more owed.
        assert_eq!(after(filled, 0, true, false), Account { owed: 400, filled: true });
        assert_eq!(after(filled, 0, false, false), Account { owed: 400, filled: false });
        assert_eq!(after(filled, 0, true, true), Account { owed: 0, filled: true });
        assert_eq!(after(filled, 0, false, true), Account { owed: 0, filled: false });
    }
}
