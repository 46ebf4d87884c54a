//! When a message has waited `maxWaitTimeSeconds` (semantics §4, docs/api.md "Max wait").
//!
//! A message waits from the moment its push commits: before that no group can see it, and a
//! push held open for an hour must not reach its consumers as an hour-old dead letter. The
//! push's clock (`created_at`) says nothing of that, and PostgreSQL keeps no commit times
//! unless `track_commit_timestamp` is on, so maintenance keeps its own: every pass records a
//! **visibility point** — its snapshot, in stored ids, and the time it was taken
//! (`queen.visibility_points`, sql/queries/maintain.sql `record_point`). A message the
//! snapshot sees committed before that time. A message of a queue with max wait `w` has waited
//! once the newest point older than `w` saw it: it is filed no earlier than `w` after its
//! commit, and no later than the pass after `w` plus the spacing of the points kept around that
//! age (points are thinned to about 32 per doubling of age: a few percent of `w`).
//!
//! Points are not dumped: a restored database (and one rebased onto this cluster's counter)
//! counts waits from its own first passes.

/// A pass's snapshot, in stored ids: transactions below `xmax` and not in `xip` had ended (a
/// message of one that rolled back does not exist).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Point {
    pub xmax: i64,
    pub xip: Vec<i64>,
}

impl Point {
    /// Whether the push of transaction `txid` had committed when the point was taken.
    pub fn saw(&self, txid: i64) -> bool {
        txid < self.xmax && !self.xip.contains(&txid)
    }
}

#[cfg(test)]
mod tests {
    use super::Point;

    #[test]
    fn a_point_sees_what_had_committed_when_it_was_taken() {
        let p = Point { xmax: 100, xip: vec![90, 95] };
        for (txid, seen) in [
            (1, true),   // long ago
            (89, true),  // committed below the running ones
            (90, false), // running when the point was taken: committed later
            (95, false),
            (96, true), // committed before the snapshot though above a running one
            (99, true),
            (100, false), // began after the snapshot
            (150, false),
        ] {
            assert_eq!(p.saw(txid), seen, "txid {txid}");
        }
        assert!(!Point::default().saw(0), "an empty point sees nothing");
    }
}
