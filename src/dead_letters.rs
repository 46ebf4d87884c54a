//! Replaying and purging dead letters (docs/semantics.md §3.4): `queen_replay_dead_letters`
//! and `queen_purge_dead_letters`.
//!
//! A dead letter belongs to one group; the message stays in its partition, finished for that
//! group. **Replay** makes it unfinished again for that group only — other groups, which may
//! have completed it, never see it again — by moving the group's cursor
//! ([`Cursor::owe_again`]): it is delivered next in its partition, before anything after it,
//! with a fresh attempt count, and the dead letter row goes. The group's lease on the
//! partition, if it holds one, is released first, as a seek releases it (a lease's batch moves
//! the frontier past everything it covers; its unfinished messages come back, uncharged). Max
//! wait counts afresh from the replay for that (partition, group). Replaying a message twice
//! delivers it once: the second call finds no dead letter. A dead letter whose message retention
//! deleted cannot come back and is left for a purge.
//!
//! A seek keeps the group's dead letters; one whose message it puts back before the group's
//! position is `reopened` (admin.sql seek): the group is owed the message again and decides
//! anew. Once it has finished it again, the dead letter no longer stands — the view leaves it
//! out, and a replay removes it delivering nothing (what the group finished stays finished).
//!
//! **Purge** deletes dead letter rows; the messages stay (retention removes them).

use crate::cursor::{Cursor, Key};
use crate::error::QueenResult;
use crate::names::{group_key, to_pg};
use crate::spi::types::{INT4, TEXT, TSTZ, UUID, UUIDS};
use crate::spi::Query;
use crate::state::{self, SaveAlso};
use pgrx::datum::{DatumWithOid, TimestampWithTimeZone};
use pgrx::Uuid;

const SQL: &str = include_str!("../sql/queries/dead_letters.sql");
const REPLAY_ROWS: Query = Query { file: SQL, name: "replay_rows", args: &[UUID, TEXT, UUID, INT4] };
const REPLAY_TAKE: Query = Query { file: SQL, name: "replay_take", args: &[UUID, TEXT, UUID, INT4, UUIDS] };
const REPLAY_MARK: Query = Query { file: SQL, name: "replay_mark", args: &[UUIDS, TEXT, TSTZ, INT4] };
const PURGE_LOCK: Query = Query { file: SQL, name: "purge_lock", args: &[UUID, TEXT, UUID, TSTZ, INT4] };
const PURGE: Query = Query { file: SQL, name: "purge", args: &[UUID, TEXT, UUID, TSTZ, INT4] };

/// Owe group `group`'s dead letters on `queue` (every one, or that of `message`) again; how many
/// were replayed.
pub fn replay(queue: &str, group: Option<&str>, message: Option<Uuid>) -> QueenResult<i64> {
    let queue_id = to_pg(crate::names::queue_id(queue));
    let key = group_key(group);
    // Rows of the group are written: a delete of the queue or the group waits, or is waited for.
    crate::locks::writing(queue_id, Some(queue), Some(key))?;
    let shard = crate::shards::current();
    crate::session::connect(|s| {
        let args: [DatumWithOid; 4] = [queue_id.into(), key.into(), message.into(), shard.into()];
        let mut rows: Vec<(Uuid, state::CursorRow, state::Micros)> = REPLAY_ROWS
            .run(s, &args)
            .map(|r| (r.req("partition_id"), state::parse(&r), state::micros(r.req("now"))))
            .collect();
        let Some(now) = rows.first().map(|r| r.2) else { return Ok(0) };
        // Every locked partition's dead letters at once, by (partition, transaction).
        let parts: Vec<Uuid> = rows.iter().map(|r| r.0).collect();
        let args: [DatumWithOid; 5] = [queue_id.into(), key.into(), message.into(), shard.into(), parts.into()];
        let taken: Vec<Letters> = REPLAY_TAKE
            .run(s, &args)
            .map(|r| Letters {
                partition: r.req("partition_id"),
                txid: r.req("txid"),
                seqs: r.req("seqs"),
                reopened: r.req("reopened"),
                later: r.req("later"),
            })
            .collect();
        let mut replayed = 0;
        let mut marked: Vec<Uuid> = Vec::new();
        for (partition, row, _) in rows.iter_mut() {
            let letters: Vec<&Letters> = taken.iter().filter(|t| t.partition == *partition).collect();
            let (owed, counted) = owed_again(&row.cursor, &letters);
            replayed += counted;
            if owed.is_empty() {
                continue; // (dead letters that no longer stood: gone, nothing else changes)
            }
            let ended = row.lease_id.filter(|_| row.cursor.lease.is_some());
            row.cursor.release();
            row.lease_id = None;
            row.lease_expires_at = None;
            for (k, later) in owed {
                // In seq order: the first moves the position back before all of them; the
                // others then leave `ahead` (owe_again).
                row.cursor.owe_again(k, &later);
            }
            // A hint due now: the next pop of the group finds the partition (and a late ack of
            // the released lease hears 'lease not held').
            let also = SaveAlso { queue_id, hint_at: Some(now), ended_lease: ended.map(|l| (l, false)) };
            state::save(s, *partition, key, row, also);
            marked.push(*partition);
        }
        if !marked.is_empty() {
            let args: [DatumWithOid; 4] = [marked.into(), key.into(), state::timestamp(now).into(), shard.into()];
            REPLAY_MARK.run(s, &args);
            // Waiting pops of the queue look again when this commits.
            crate::wait::touched(crate::wait::queue_key(&crate::names::queue_id(queue)));
        }
        Ok(replayed)
    })
}

/// A partition's dead letters of one transaction, as `replay_take` took them: their seqs, those
/// of them a seek reopened, and the seqs of the transaction's messages after the first.
struct Letters {
    partition: Uuid,
    txid: i64,
    seqs: Vec<i64>,
    reopened: Vec<i64>,
    later: Vec<i64>,
}

/// What a replay of `letters` (one partition's) owes the group again, in order — each message
/// with the later ones of its transaction — and how many dead letters it replays. A dead
/// letter a seek reopened is owed already (the seek put the message back), or no longer stands
/// (the group finished the message again since): nothing to owe for it, and it counts only in
/// the first case (semantics §3.4: what the group finished stays finished).
fn owed_again(cursor: &Cursor, letters: &[&Letters]) -> (Vec<(Key, Vec<Key>)>, i64) {
    let mut owed = Vec::new();
    let mut counted = 0;
    for l in letters {
        let later: Vec<Key> = l.later.iter().map(|&q| (l.txid, q)).collect();
        for &seq in &l.seqs {
            let k = (l.txid, seq);
            if l.reopened.contains(&seq) {
                counted += i64::from(!cursor.is_finished(k));
                continue;
            }
            owed.push((k, later.clone()));
            counted += 1;
        }
    }
    (owed, counted)
}

/// Delete group `group`'s dead letters on `queue` (every one, that of `message`, those filed
/// before `before`); how many.
pub fn purge(
    queue: &str,
    group: Option<&str>,
    message: Option<Uuid>,
    before: Option<TimestampWithTimeZone>,
) -> QueenResult<i64> {
    let queue_id = to_pg(crate::names::queue_id(queue));
    let key = group_key(group);
    // Rows of the group are deleted: as a replay, a delete of the queue or the group waits, or
    // is waited for.
    crate::locks::writing(queue_id, Some(queue), Some(key))?;
    let shard = crate::shards::current();
    crate::session::connect(|s| {
        let args: [DatumWithOid; 5] = [queue_id.into(), key.into(), message.into(), before.into(), shard.into()];
        PURGE_LOCK.run(s, &args);
        Ok(PURGE.run(s, &args).first().req::<i64>("purged"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reopened_dead_letter_is_owed_only_while_unfinished() {
        let p = Uuid::from_bytes([1; 16]);
        let cursor = Cursor { done: (5, 2), ..Cursor::default() };
        let letters =
            Letters { partition: p, txid: 5, seqs: vec![1, 3, 4], reopened: vec![1, 3], later: vec![2, 3, 4] };
        let (owed, counted) = owed_again(&cursor, &[&letters]);
        // (5, 1): reopened and finished again (at or before the frontier): nothing, not counted.
        // (5, 3): reopened, not finished: owed already, counted. (5, 4): owed again, counted.
        assert_eq!(owed.iter().map(|(k, _)| *k).collect::<Vec<_>>(), vec![(5, 4)]);
        assert_eq!(owed[0].1, vec![(5, 2), (5, 3), (5, 4)]);
        assert_eq!(counted, 2);
        let plain = Letters { partition: p, txid: 7, seqs: vec![1], reopened: vec![], later: vec![] };
        assert_eq!(owed_again(&cursor, &[&plain]).1, 1);
    }
}
