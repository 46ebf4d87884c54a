//! What a pop does at one partition (semantics §3.2, §4, §5), in plain Rust.
//!
//! A pop visits a partition as **look → decide → apply**: pop.rs looks (state.rs reads the
//! group's cursor row and the next messages, locking nothing), hands what it saw to
//! [`decide`], applies the [`Action`] (claim the row, settle an expired lease, deliver, or
//! leave a hint for later), and asks again until an action ends the visit. Every rule about
//! *whether* the group may take messages from the partition now is here, with a table of
//! cases below; how the state changes when it does is cursor.rs.

use crate::clock::Micros;

const SEC: Micros = 1_000_000;

/// What a look at a partition saw, as the rules need it.
#[derive(Debug, Clone, Default)]
pub struct Seen<'a> {
    /// The clock when the look read.
    pub now: Micros,
    /// The group's lease on the partition, if it has one: when it ends (a lease without an
    /// end is given as `Micros::MIN`, already over).
    pub lease: Option<Micros>,
    /// When a retry delay (after a `failed` ack) ends, if one was set.
    pub retry_at: Option<Micros>,
    /// `created_at` of the messages read after the cursor, in partition order.
    pub created: &'a [Micros],
    /// `created_at` of the partition's newest message (for `windowBuffer`).
    pub newest_at: Option<Micros>,
    /// This pop holds the group's cursor row of the partition, in the version looked at.
    pub held: bool,
}

/// The queue options that hold messages back (semantics §4), in seconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timing {
    pub delayed_processing: i32,
    pub window_buffer: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing to take now; the partition is due again at this time (a lease's end, a retry
    /// delay's, a delayed message's): leave a hint for it.
    Later(Micros),
    /// Nothing to take, and nothing that comes due by time: the partition's hints go.
    Idle,
    /// Take the cursor row in the version looked at (never waiting), then decide again.
    Claim,
    /// The lease ran out: charge a failure to its first unfinished message (semantics §5, expired
    /// lease), then look again.
    Expire,
    /// Deliver the first `n` messages read: a prefix, so order holds.
    Deliver(usize),
}

/// What to do at a partition, given what a look saw.
pub fn decide(seen: &Seen, timing: Timing) -> Action {
    let now = seen.now;
    // An active lease is its holder's: no other pop of the group takes the partition
    // (§6.4), whatever the lease's batch left behind.
    if let Some(until) = seen.lease.filter(|&until| until > now) {
        return Action::Later(until);
    }
    // A `failed` ack holds the partition (its message and all after it) for `retryDelay`.
    if let Some(at) = seen.retry_at.filter(|&at| at > now) {
        return Action::Later(at);
    }
    // An expired lease is settled before anything else, by whoever holds the row: even
    // with nothing left to deliver, its failure must be charged (and may file a dead letter).
    if seen.lease.is_some() {
        return if seen.held { Action::Expire } else { Action::Claim };
    }
    match deliverable(seen, timing) {
        (0, Some(at)) => Action::Later(at),
        (0, None) => Action::Idle,
        (_, _) if !seen.held => Action::Claim,
        (n, _) => Action::Deliver(n),
    }
}

/// How many of the messages read may be delivered now (a prefix: order holds), and when the
/// first one held back becomes deliverable.
fn deliverable(seen: &Seen, timing: Timing) -> (usize, Option<Micros>) {
    if timing.window_buffer > 0 && !seen.created.is_empty() {
        if let Some(newest) = seen.newest_at {
            let quiet_at = newest + timing.window_buffer as Micros * SEC;
            if quiet_at > seen.now {
                return (0, Some(quiet_at));
            }
        }
    }
    if timing.delayed_processing > 0 {
        let delay = timing.delayed_processing as Micros * SEC;
        // The first message too young stops the batch, even if later ones are older (their
        // transactions committed in another order than they began).
        if let Some(i) = seen.created.iter().position(|&c| c + delay > seen.now) {
            return (i, Some(seen.created[i] + delay));
        }
    }
    (seen.created.len(), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Action::*;

    const NOW: Micros = 1_000 * SEC;

    struct Case {
        name: &'static str,
        lease: Option<Micros>,
        retry_at: Option<Micros>,
        /// created_at of the messages read, as seconds before NOW.
        ages: &'static [i64],
        /// The newest message's age, in seconds (defaults to the youngest read).
        newest_age: Option<i64>,
        held: bool,
        timing: Timing,
        want: Action,
    }

    const fn case(name: &'static str, ages: &'static [i64], held: bool, want: Action) -> Case {
        Case {
            name,
            lease: None,
            retry_at: None,
            ages,
            newest_age: None,
            held,
            timing: Timing { delayed_processing: 0, window_buffer: 0 },
            want,
        }
    }

    fn at(seconds_from_now: i64) -> Micros {
        NOW + seconds_from_now * SEC
    }

    #[test]
    fn the_rules_of_a_partition_visit() {
        let delayed = |s| Timing { delayed_processing: s, window_buffer: 0 };
        let window = |s| Timing { delayed_processing: 0, window_buffer: s };
        let cases = [
            // §3.2 claimable: messages after the cursor, no active lease, no retry delay.
            case("nothing after the cursor", &[], false, Idle),
            case("nothing after the cursor, row held", &[], true, Idle),
            case("messages: take the row first", &[5, 4, 3], false, Claim),
            case("messages, row held: deliver all read", &[5, 4, 3], true, Deliver(3)),
            // §6.4 exclusive lease.
            Case { lease: Some(at(30)), ..case("an active lease is its holder's", &[5, 4], false, Later(at(30))) },
            Case { lease: Some(at(30)), ..case("an active lease, nothing read", &[], false, Later(at(30))) },
            Case {
                lease: Some(at(30)),
                retry_at: Some(at(60)),
                ..case("the lease decides before a retry delay", &[5], false, Later(at(30)))
            },
            // §5 expired lease: a failure of its first unfinished message, settled by the pop
            // that takes the row, even when nothing is left to deliver.
            Case { lease: Some(at(-1)), ..case("an expired lease: take the row", &[5], false, Claim) },
            Case { lease: Some(at(-1)), ..case("an expired lease, row held: settle it", &[5], true, Expire) },
            Case { lease: Some(at(-1)), ..case("an expired lease with nothing read", &[], false, Claim) },
            Case { lease: Some(NOW), ..case("a lease ending now has ended", &[5], true, Expire) },
            Case { lease: Some(Micros::MIN), ..case("a lease without an end has ended", &[5], true, Expire) },
            // §5 failed: the message and everything after it come back after retryDelay.
            Case { retry_at: Some(at(2)), ..case("a retry delay holds the partition", &[5], false, Later(at(2))) },
            Case {
                retry_at: Some(at(2)),
                ..case("a retry delay holds it from its holder too", &[5], true, Later(at(2)))
            },
            Case { retry_at: Some(at(-2)), ..case("a retry delay over", &[5], true, Deliver(1)) },
            Case { retry_at: Some(NOW), ..case("a retry delay ending now is over", &[5], true, Deliver(1)) },
            // §4 delayedProcessing: a prefix of the messages old enough, in order.
            Case { timing: delayed(10), ..case("all old enough", &[30, 20, 11], true, Deliver(3)) },
            Case { timing: delayed(10), ..case("none old enough", &[4, 3], true, Later(at(6))) },
            Case { timing: delayed(10), ..case("none old enough, not held", &[4, 3], false, Later(at(6))) },
            Case { timing: delayed(10), ..case("a prefix old enough", &[30, 20, 5, 1], true, Deliver(2)) },
            Case {
                timing: delayed(10),
                ..case("a young one stops older ones after it", &[30, 5, 40], true, Deliver(1))
            },
            Case { timing: delayed(10), ..case("a message exactly old enough", &[10], true, Deliver(1)) },
            Case { timing: delayed(10), ..case("delayed, nothing read", &[], true, Idle) },
            // §4 windowBuffer: the partition must be quiet for that long.
            Case { timing: window(10), ..case("quiet long enough", &[30, 20], true, Deliver(2)) },
            Case { timing: window(10), ..case("not quiet yet", &[30, 3], true, Later(at(7))) },
            Case {
                timing: window(10),
                newest_age: Some(1),
                ..case("a newer message not read yet keeps it busy", &[30, 20], true, Later(at(9)))
            },
            Case { timing: window(10), ..case("window, nothing read", &[], false, Idle) },
            Case {
                timing: Timing { delayed_processing: 10, window_buffer: 5 },
                ..case("both: quiet, then a prefix old enough", &[30, 8], true, Deliver(1))
            },
        ];
        let mut failed = Vec::new();
        for c in &cases {
            let created: Vec<Micros> = c.ages.iter().map(|a| at(-a)).collect();
            let newest = c.newest_age.map(|a| at(-a)).or_else(|| created.iter().copied().max());
            let seen = Seen {
                now: NOW,
                lease: c.lease,
                retry_at: c.retry_at,
                created: &created,
                newest_at: newest,
                held: c.held,
            };
            let got = decide(&seen, c.timing);
            if got != c.want {
                failed.push(format!("{}: want {:?}, got {:?}", c.name, c.want, got));
            }
        }
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }

    /// A pop that applies each action and decides again ends in one of the final actions
    /// within a bounded number of steps (claim once, settle once).
    #[test]
    fn a_visit_ends() {
        let created = [at(-5)];
        let mut seen = Seen { now: NOW, lease: Some(at(-1)), created: &created, ..Seen::default() };
        let mut steps = Vec::new();
        loop {
            let a = decide(&seen, Timing::default());
            steps.push(a);
            match a {
                Claim => seen.held = true,
                Expire => seen.lease = None,
                _ => break,
            }
            assert!(steps.len() < 5, "{steps:?}");
        }
        assert_eq!(steps, [Claim, Expire, Deliver(1)]);
    }
}
