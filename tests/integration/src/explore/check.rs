//! The checker: what a finished run's history must satisfy, per consumer group (the delivery
//! guarantees of the broker):
//!
//! - **no loss**: every committed push a group must see is finished for it (completed, or filed
//!   as a dead letter) once the group is drained — `'all'`, `'from'` (from a time before every
//!   push) and queue mode see everything; a `'new'` group sees every transaction that began
//!   after a first pop of it (or a seek of it) committed, and none that committed before its
//!   first pop began (the ones in between may go either way; and all bets are off when an ack
//!   without a lease may have subscribed it first, from the start, as such an ack does); the
//!   group that is sought (`Seeker`) sees every transaction that began after its last seek
//!   committed;
//! - **what a seek skipped never comes back**: no pop that ran after a seek of `Seeker`
//!   committed delivers a message whose push committed before the seek ran;
//! - **exactly-once effect**: at most one committed completion (or dead letter) per message, and
//!   at most one business write;
//! - **order**: a message of a transaction that committed before another began is first
//!   delivered before that one's, and a transaction's messages in push order (per partition),
//!   for every checked group — 'new' groups with several first pops at once included;
//! - **exclusive lease**: no pop gets a partition while another lease of its group is active
//!   there (not released by a committed ack, not expired by the server's clock);
//! - `group_lag` at 0 after the drain (the drain reports a strand), its `oldest_pending` set
//!   exactly where `pending` > 0 at every step of the drain, dead letters accounted for
//!   (each belongs to a committed push and a checked group);
//! - a pop never returns its own transaction's pushes;
//! - **no trace of refused calls**: a subscription or cursor row exists only for a group (and
//!   partition) a committed pop, successful ack or seek acted on (and the executor checks, around
//!   every refused or failed call and every rollback, that queen's tables did not change);
//! - **privileges**: every call of the application role that needed a privilege went through
//!   exactly when the role held it (the grants and revokes committed before the call);
//! - and the executor's own findings: a pop or keyless push that waited on a lock (a pop may
//!   wait for an open delete of its own group on its own queue, never for the tenant's), a pass
//!   that waited for one of queen's locks, a 40P01 (`deadlock`), a delete sent from another
//!   thread that failed otherwise than with 55P03 or took longer than its bound, a timer of
//!   `eo` a pass left pending (`timer held back`), ties not delivered exactly once, an error no
//!   call should raise.
//!
//! On the side queues (issue 21; `side`): completed retention never deletes a message under a
//! committed lease of a group that has not finished it (`deleted under a lease`); a lease whose
//! every message was acked — found, or gone by retention — is released (`lease outlived its
//! batch`); and nothing committed before a delete of the queue or group survives it: no
//! message, no dead letter, no lease (`survived a delete`).

use super::{Event, Grp, Run, Status, SIDE_QUEUES};
use postgres::Client;
use std::collections::{BTreeMap, HashMap, HashSet};
use uuid::Uuid;

#[derive(Clone, Debug)]
pub struct Violation {
    pub kind: &'static str,
    pub detail: String,
}

struct Msg {
    partition: u8,
    begin: usize,
    commit: usize,
    order: u64,
}

/// The subscriptions and cursor rows a run left (read before the drain).
pub(super) struct Traces {
    groups: HashSet<String>,
    cursors: HashSet<(Uuid, String)>,
}

pub(super) fn traces(k: &mut Client) -> Traces {
    Traces {
        groups: k
            .query(
                "SELECT DISTINCT consumer_group FROM queen.subscriptions
                  WHERE queue_id IN (SELECT queue_id FROM queen.queues WHERE name = 'eq')",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect(),
        cursors: k
            .query(
                "SELECT partition_id, consumer_group FROM queen.cursors
                  WHERE queue_id IN (SELECT queue_id FROM queen.queues WHERE name = 'eq')",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect(),
    }
}

pub(super) fn check(run: &Run<'_>, k: &mut Client, traces: &Traces) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut v = |kind: &'static str, detail: String| out.push(Violation { kind, detail });

    // Committed pushes.
    let mut msgs: HashMap<Uuid, Msg> = HashMap::new();
    for t in &run.history {
        for e in &t.events {
            if let Event::Pushed { msg, partition, queued: true, order } = e {
                msgs.insert(*msg, Msg { partition: *partition, begin: t.begin, commit: t.commit, order: *order });
            }
        }
    }

    // What each group got and finished, from committed transactions.
    let mut first: HashMap<(Grp, Uuid), (usize, usize)> = HashMap::new();
    let mut finished: HashMap<(Grp, Uuid), u32> = HashMap::new();
    // The earliest committed ack of each (group, message) that took effect, and the steps of
    // each group's committed replays (recorded as resets that are not seeks), with their
    // transactions' commits.
    let mut acked: HashMap<(Grp, Uuid), usize> = HashMap::new();
    let mut replays: HashMap<Grp, Vec<(usize, usize)>> = HashMap::new();
    // For each 'new' group: the earliest pop statement, and the earliest commit of a
    // transaction that popped it (or sought it: a seek subscribes a group).
    let mut first_pop: HashMap<Grp, usize> = HashMap::new();
    let mut first_commit: HashMap<Grp, usize> = HashMap::new();
    // Committed seeks of each group: (the seek's step, its commit).
    let mut seeks: HashMap<Grp, Vec<(usize, usize)>> = HashMap::new();
    for t in &run.history {
        for e in &t.events {
            match e {
                Event::Popped { group, step } if group.is_new() => {
                    let p = first_pop.entry(*group).or_insert(usize::MAX);
                    *p = (*p).min(*step);
                    let c = first_commit.entry(*group).or_insert(usize::MAX);
                    *c = (*c).min(t.commit);
                }
                Event::Reset { group, step, seek: false } => {
                    replays.entry(*group).or_default().push((*step, t.commit));
                }
                Event::Reset { group, step, seek: true } => {
                    seeks.entry(*group).or_default().push((*step, t.commit));
                    let p = first_pop.entry(*group).or_insert(usize::MAX);
                    *p = (*p).min(*step);
                    let c = first_commit.entry(*group).or_insert(usize::MAX);
                    *c = (*c).min(t.commit);
                }
                Event::Delivered(d) => {
                    let f = first.entry((d.group, d.msg)).or_insert((d.step, d.pos));
                    *f = (*f).min((d.step, d.pos));
                    if d.lease.is_none() {
                        *finished.entry((d.group, d.msg)).or_default() += 1;
                    }
                }
                Event::Acked { group, msg, status, success: true, step, .. } => {
                    let a = acked.entry((*group, *msg)).or_insert(*step);
                    *a = (*a).min(*step);
                    if *status == Status::Completed {
                        *finished.entry((*group, *msg)).or_default() += 1;
                    }
                }
                // A purged dead letter's message stays finished (its dead letter is gone).
                Event::Purged { group, msg } => {
                    *finished.entry((*group, *msg)).or_default() += 1;
                }
                _ => {}
            }
        }
    }
    let first_pop_of = |g: Grp| first_pop.get(&g).copied().unwrap_or(usize::MAX);
    let first_commit_of = |g: Grp| first_commit.get(&g).copied().unwrap_or(usize::MAX);
    // The last committed seek of a group, by commit.
    let last_seek = |g: Grp| seeks.get(&g).and_then(|v| v.iter().max_by_key(|(_, c)| *c).copied());
    // A dead letter brings its message back by the operator's hand: whether a committed ack
    // of (g, msg) took effect, then a committed replay of g ran, after step `from` (and
    // committed no earlier than step `committed`) and before step `to`. What comes back so is
    // not held to the delivery order or to a seek that ran before the replay (semantics §3.4:
    // a replay owes the message again) — also a seek of the same transaction (found by the
    // explorer's seed 1796450916036: `seek gk end` then `dead gn replay` in one transaction).
    let replayed_between = |g: Grp, msg: &Uuid, from: usize, committed: usize, to: usize| {
        acked.get(&(g, *msg)).is_some_and(|a| {
            replays.get(&g).is_some_and(|r| r.iter().any(|&(s, c)| *a < s && from < s && committed <= c && s < to))
        })
    };
    // An ack without a lease subscribes a group that has no subscription, from the start
    // ('all'); if one may have come first for a 'new' group, what it must and must not see is
    // open (until a seek subscribes it anew).
    let subscribed_by_ack = |g: Grp| {
        run.history.iter().any(|t| {
            t.events.iter().any(|e| {
                matches!(e, Event::Acked { group, success: true, step, .. } if *group == g && *step <= first_commit_of(g))
            })
        })
    };

    let dead: HashSet<(String, Uuid)> = k
        .query(
            "SELECT consumer_group, message_id FROM queen.dead_letters
              WHERE queue_id IN (SELECT queue_id FROM queen.queues WHERE name = 'eq')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let key = |g: Grp| g.name().unwrap_or("__QUEUE_MODE__").to_string();
    for (g, m) in &dead {
        if !msgs.contains_key(m) {
            v("dead letter unaccounted for", format!("group {g}: message {m} is no committed push"));
        }
    }

    for g in Grp::ALL.into_iter().filter(|g| g.checked()) {
        let by_ack = g.is_new() && subscribed_by_ack(g);
        for (id, m) in &msgs {
            let done = finished.get(&(g, *id)).copied().unwrap_or(0) + dead.contains(&(key(g), *id)) as u32;
            let must = match (g, last_seek(g)) {
                (_, Some((_, commit))) => m.begin > commit,
                (g, None) if g.is_new() => m.begin > first_commit_of(g) && !by_ack,
                _ => true,
            };
            if must && done == 0 {
                v(
                    "lost",
                    format!(
                        "group {g:?}: message {id} (partition p{}, pushed by the transaction of steps {}..{}) was never finished",
                        m.partition, m.begin, m.commit
                    ),
                );
            }
            if done > 1 {
                v("applied twice", format!("group {g:?}: message {id} finished {done} times"));
            }
            if g.is_new() && !by_ack && m.commit < first_pop_of(g) && first.contains_key(&(g, *id)) {
                v(
                    "delivered before subscription",
                    format!(
                        "group {g:?} got message {id}, committed at step {} before its first pop (step {})",
                        m.commit,
                        first_pop_of(g)
                    ),
                );
            }
        }
    }

    // What a seek skipped never comes back: a delivery by a pop that ran after the seek
    // committed, of a message whose push committed before the seek ran.
    for (g, list) in &seeks {
        if !g.checked() {
            continue; // the scratch group seeks back to the start too
        }
        for t in &run.history {
            for e in &t.events {
                let Event::Delivered(d) = e else { continue };
                let Some(m) = msgs.get(&d.msg) else { continue };
                if d.group != *g {
                    continue;
                }
                if let Some((seek, commit)) = list.iter().find(|(seek, commit)| {
                    d.step > *commit && m.commit < *seek && !replayed_between(*g, &d.msg, *seek, *commit, d.step)
                }) {
                    v(
                        "came back after a seek",
                        format!(
                            "group {g:?}: step {} delivered {} (pushed by the transaction of steps {}..{}), which the seek at step {seek} (committed at {commit}) skipped",
                            d.step, d.msg, m.begin, m.commit
                        ),
                    );
                }
            }
        }
    }

    // A transaction never receives its own pushes (they are not committed when it pops).
    for t in &run.history {
        let own: HashSet<Uuid> = t
            .events
            .iter()
            .filter_map(|e| match e {
                // (A duplicate reports the message that holds its key, someone else's.)
                Event::Pushed { msg, queued: true, .. } => Some(*msg),
                _ => None,
            })
            .collect();
        for e in &t.events {
            if let Event::Delivered(d) = e {
                if own.contains(&d.msg) {
                    v(
                        "delivered its own push",
                        format!("group {:?}: step {} got {} its own transaction pushed", d.group, d.step, d.msg),
                    );
                }
            }
        }
    }

    // The business writes: one per (group, message).
    // (The scratch group replays what it seeks back to.)
    for r in k
        .query("SELECT grp, msg, count(*) FROM applied WHERE grp <> 'gs' GROUP BY 1, 2 HAVING count(*) > 1", &[])
        .unwrap()
    {
        v(
            "applied twice",
            format!(
                "business write of {} for group {} done {} times",
                r.get::<_, Uuid>(1),
                r.get::<_, String>(0),
                r.get::<_, i64>(2)
            ),
        );
    }

    // Order, per group and partition, on pairs whose real-time order the history proves.
    // A message the application acked before any pop delivered it, and a replay brought back
    // afterwards, is delivered where the operator's hand put it (`replayed_between`; found by
    // the explorer's seed 1796362278119), so it is not compared. Without a replay in between,
    // an early ack leaves it compared: a delivery after its ack is still an order finding.
    for g in Grp::ALL.into_iter().filter(|g| g.checked()) {
        let mut by_part: BTreeMap<u8, Vec<(&Uuid, &Msg, (usize, usize))>> = BTreeMap::new();
        for (id, m) in &msgs {
            if let Some(f) = first.get(&(g, *id)) {
                if replayed_between(g, id, 0, 0, f.0) {
                    continue;
                }
                by_part.entry(m.partition).or_default().push((id, m, *f));
            }
        }
        for list in by_part.values() {
            for (ia, a, fa) in list {
                for (ib, b, fb) in list {
                    let a_before_b =
                        a.commit < b.begin || (a.begin == b.begin && a.commit == b.commit && a.order < b.order);
                    if a_before_b && fa > fb {
                        v(
                            "order",
                            format!(
                                "group {g:?}, partition p{}: {ia} (steps {}..{}) first delivered at step {} after {ib} (steps {}..{}) at step {}",
                                a.partition, a.begin, a.commit, fa.0, b.begin, b.commit, fb.0
                            ),
                        );
                    }
                }
            }
        }
    }

    // No trace of refused calls: what acted on a group (and partition) in a committed
    // transaction, and what the scratch group's seeks may have touched.
    let key_of = |g: Grp| g.name().unwrap_or("__QUEUE_MODE__").to_string();
    let mut acted: HashSet<String> = HashSet::from(["gs".to_string()]);
    for g in seeks.keys() {
        acted.insert(key_of(*g));
    }
    let mut touched: HashSet<(Uuid, String)> = HashSet::new();
    for t in &run.history {
        for e in &t.events {
            match e {
                Event::Popped { group, .. } => {
                    acted.insert(key_of(*group));
                }
                Event::Delivered(d) => {
                    touched.insert((d.partition, key_of(d.group)));
                }
                Event::Acked { group, success: true, partition, .. } => {
                    acted.insert(key_of(*group));
                    touched.insert((*partition, key_of(*group)));
                }
                _ => {}
            }
        }
    }
    for g in traces.groups.difference(&acted) {
        v("trace of a refused call", format!("group {g} is subscribed, but no committed pop or ack acted for it"));
    }
    for (p, g) in &traces.cursors {
        let sought = seeks.keys().any(|s| key_of(*s) == *g);
        if g != "gs" && !sought && !touched.contains(&(*p, g.clone())) {
            v(
                "trace of a refused call",
                format!("group {g} has a cursor row on partition {p} that no committed pop or ack made"),
            );
        }
    }

    // Exclusive lease: a pop of (group, partition) while another lease of the group is active
    // there. A lease ends with an ack that released it, a scratch reset, or expiry; an ack or
    // reset counts once committed, or at once for the transaction that made it.
    struct End {
        tx: usize,
        step: usize,
        commit: usize,
    }
    // (In the same transaction, a reset at the grant's own step came first: a delete sent
    // from another thread is recorded at the step that lands it, before that step runs.)
    let ended_before =
        |ends: &[End], tx: usize, step: usize| ends.iter().any(|e| e.commit < step || (e.tx == tx && e.step <= step));
    let mut released: HashMap<Uuid, Vec<End>> = HashMap::new();
    let mut expiry: HashMap<Uuid, f64> = HashMap::new();
    let mut resets: Vec<(Grp, End)> = Vec::new();
    let mut grants: Vec<(usize, &super::Delivered)> = Vec::new();
    for (ti, t) in run.history.iter().enumerate() {
        for e in &t.events {
            match e {
                Event::Acked { released: Some(l), success: true, step, .. } => {
                    released.entry(*l).or_default().push(End { tx: ti, step: *step, commit: t.commit });
                }
                Event::Renewed { lease, expires } => {
                    let x = expiry.entry(*lease).or_insert(*expires);
                    *x = x.max(*expires);
                }
                Event::Reset { group, step, .. } => {
                    resets.push((*group, End { tx: ti, step: *step, commit: t.commit }))
                }
                Event::Delivered(d) => grants.push((ti, d)),
                _ => {}
            }
        }
    }
    for (_, d) in &grants {
        if let (Some(l), Some(e)) = (d.lease, d.expires) {
            let x = expiry.entry(l).or_insert(e);
            *x = x.max(e);
        }
    }
    let mut seen: HashSet<(Uuid, Uuid)> = HashSet::new();
    for (tb, b) in &grants {
        for (_, a) in &grants {
            let Some(la) = a.lease else { continue };
            if a.group != b.group || a.partition != b.partition || a.step >= b.step || b.lease == Some(la) {
                continue;
            }
            let by_ack = released.get(&la).is_some_and(|ends| ended_before(ends, *tb, b.step));
            let by_reset = resets
                .iter()
                .any(|(g, r)| *g == a.group && r.step > a.step && ended_before(std::slice::from_ref(r), *tb, b.step));
            let expired = expiry.get(&la).is_some_and(|&e| e <= b.at);
            if !by_ack && !by_reset && !expired && seen.insert((la, b.partition)) {
                v(
                    "exclusive lease",
                    format!(
                        "group {:?}: step {} got partition {} while lease {la} (step {}, until {:.3}) was active at {:.3}; {}",
                        b.group,
                        b.step,
                        b.partition,
                        a.step,
                        expiry[&la],
                        b.at,
                        lease_trace(run, a.group, b.partition, a.step, b.step)
                    ),
                );
            }
        }
    }

    // Privileges of the application role: granted push and pop at the start; each call needing
    // one went through exactly when the grants and revokes committed before it left it held.
    let mut changes: Vec<(usize, super::Privilege, bool)> = Vec::new();
    for t in &run.history {
        for e in &t.events {
            if let Event::Privileged { privilege, grant } = e {
                changes.push((t.commit, *privilege, *grant));
            }
        }
    }
    changes.sort_by_key(|c| c.0);
    for call in &run.app_calls {
        let held = changes
            .iter()
            .rfind(|(commit, p, _)| *p == call.privilege && *commit < call.step)
            .is_none_or(|(_, _, grant)| *grant);
        if held != call.allowed {
            v(
                if call.allowed { "permitted after revoke" } else { "refused with the privilege" },
                format!(
                    "step {}: the application role's call needing {} was {} while it {} the privilege",
                    call.step,
                    call.privilege.as_str(),
                    if call.allowed { "let through" } else { "refused" },
                    if held { "held" } else { "did not hold" }
                ),
            );
        }
    }
    out
}

/// The side queues' checks (issue 21, items 7, 8, 9, 11, 12), at the end of a run, every
/// transaction committed or gone.
pub(super) fn side(run: &Run<'_>, k: &mut Client) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut v = |kind: &'static str, detail: String| out.push(Violation { kind, detail });
    // Committed deletes: (queue, group or None for the queue, commit step).
    let mut deletes: Vec<(u8, Option<u8>, usize)> = Vec::new();
    // Committed deliveries under a lease: lease -> (queue, group, commit, messages).
    let mut leases: HashMap<Uuid, (u8, u8, usize, Vec<Uuid>)> = HashMap::new();
    let mut acked: HashSet<(Uuid, Uuid)> = HashSet::new();
    // Every committed side ack: (lease, message, commit, released, the step it ran at if it
    // found no message).
    let mut acks: Vec<(Uuid, Uuid, usize, bool, Option<usize>)> = Vec::new();
    let mut pushed: Vec<(u8, Uuid, usize)> = Vec::new();
    let mut dead: Vec<(u8, u8, Uuid, usize)> = Vec::new();
    // Leases a delete in their own transaction took, after their pop.
    let mut own_deleted: HashSet<Uuid> = HashSet::new();
    for t in &run.history {
        for (i, e) in t.events.iter().enumerate() {
            if let Event::SideDelivered { q, group, lease: Some(l), .. } = e {
                let later = t.events[i + 1..].iter().any(
                    |x| matches!(x, Event::SideDeleted { q: dq, group: dg } if dq == q && dg.is_none_or(|dg| dg == *group)),
                );
                if later {
                    own_deleted.insert(*l);
                }
            }
        }
        for e in &t.events {
            match e {
                Event::SideDeleted { q, group } => deletes.push((*q, *group, t.commit)),
                Event::SideDelivered { q, group, msg, lease: Some(l) } => {
                    leases.entry(*l).or_insert((*q, *group, t.commit, Vec::new())).3.push(*msg);
                }
                Event::SideAcked { q, group, msg, lease, dlq, released, gone, ran } => {
                    acked.insert((*lease, *msg));
                    acks.push((*lease, *msg, t.commit, *released, gone.then_some(*ran)));
                    if *dlq {
                        dead.push((*q, *group, *msg, t.commit));
                    }
                }
                Event::SidePushed { q, msg } => pushed.push((*q, *msg, t.commit)),
                _ => {}
            }
        }
    }
    let deleted_between = |q: u8, g: u8, from: usize, to: usize| {
        deletes.iter().any(|&(dq, dg, at)| dq == q && dg.is_none_or(|dg| dg == g) && at > from && at <= to)
    };
    // Deleted under a lease (rc: completed retention only; nothing but a delete may take a
    // message a group holds under an active lease).
    for g in &run.side_gone {
        if g.q != 0 {
            continue;
        }
        // The lease the ack named: another lease of the group on the same message (the message
        // delivered again after this one's pop rolled back or died in a crash) says nothing of it.
        let Some((lease, commit)) =
            leases.get(&g.lease).filter(|l| l.3.contains(&g.msg) && l.1 == g.group).map(|x| (g.lease, x.2))
        else {
            continue; // its pop never committed
        };
        if commit < g.step && !deleted_between(g.q, g.group, g.delivered, g.step) {
            v(
                "deleted under a lease",
                format!(
                    "step {}: side queue {} group r{}: message {} delivered at step {} (committed at {}) under lease {lease} was gone",
                    g.step, SIDE_QUEUES[g.q as usize], g.group, g.msg, g.delivered, commit
                ),
            );
        }
    }
    // Leases and what survives: read once.
    let all_leases: Vec<Uuid> = leases.keys().copied().collect();
    let active: HashSet<Uuid> = k
        .query(
            "SELECT DISTINCT lease_id FROM queen.cursors WHERE lease_id = ANY($1) AND lease_expires_at > clock_timestamp()",
            &[&all_leases],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // A lease whose every message was acked is released by one of those acks (rr: retention
    // may take its messages), unless a delete took the lease first.
    // (Only acks that committed with the lease or after it count: an ack on another connection
    // before the pop committed cannot see the lease. An ack that found its message waited for
    // the pop that holds the message's partition; one that found no message — retention took
    // it — waited for nothing, and counts only if it ran after the pop committed:
    // schedules/gone-ack-before-lease-commit.schedule.)
    for (lease, (q, g, commit, msgs)) in &leases {
        let after: Vec<_> =
            acks.iter().filter(|a| a.0 == *lease && a.2 >= *commit && a.4.is_none_or(|ran| ran > *commit)).collect();
        let Some(last) = after.iter().map(|a| a.2).max() else { continue };
        let released = after.iter().any(|a| a.3);
        if *q != 1 || released || own_deleted.contains(lease) || !msgs.iter().all(|m| after.iter().any(|a| a.1 == *m)) {
            continue;
        }
        if !deleted_between(*q, *g, *commit, last) {
            v(
                "lease outlived its batch",
                format!(
                    "side queue {} group r{g}: lease {lease} (committed at step {commit}): each of its {} messages was acked (the last at step {last}), and none of the acks released it",
                    SIDE_QUEUES[*q as usize],
                    msgs.len()
                ),
            );
        }
    }
    // Nothing committed before a delete survives it.
    let ids: Vec<Uuid> = pushed.iter().map(|p| p.1).chain(dead.iter().map(|d| d.2)).collect();
    let messages: HashSet<Uuid> = k
        .query("SELECT message_id FROM queen.messages WHERE message_id = ANY($1)", &[&ids])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let letters: HashSet<(String, Uuid)> = k
        .query("SELECT consumer_group, message_id FROM queen.dead_letters WHERE message_id = ANY($1)", &[&ids])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for &(q, msg, commit) in &pushed {
        if messages.contains(&msg) && deletes.iter().any(|&(dq, dg, at)| dq == q && dg.is_none() && at > commit) {
            v(
                "survived a delete",
                format!("side queue {}: message {msg} (pushed, committed at step {commit}) outlived a later delete of its queue", SIDE_QUEUES[q as usize]),
            );
        }
    }
    for &(q, g, msg, commit) in &dead {
        if letters.contains(&(format!("r{g}"), msg))
            && deletes.iter().any(|&(dq, dg, at)| dq == q && dg.is_none_or(|dg| dg == g) && at > commit)
        {
            v(
                "survived a delete",
                format!("side queue {} group r{g}: the dead letter of {msg} (committed at step {commit}) outlived a later delete", SIDE_QUEUES[q as usize]),
            );
        }
    }
    // rc and rm: the messages of a lease still active at the end and not acked are there
    // (completed retention never takes what a group has yet to finish, nor max wait) unless a
    // delete came after the lease — also when the pop was open while maintenance ran (issue 21,
    // item 7: a group whose first pop is open counts).
    for (lease, (q, g, commit, msgs)) in &leases {
        if *q == 1
            || !active.contains(lease)
            || own_deleted.contains(lease)
            || deleted_between(*q, *g, *commit, usize::MAX)
        {
            continue;
        }
        for m in msgs.iter().filter(|m| !acked.contains(&(*lease, **m)) && !messages.contains(m)) {
            v(
                "deleted under a lease",
                format!(
                    "side queue {} group r{g}: message {m} of lease {lease} (committed at step {commit}, active at the end, not acked) is gone",
                    SIDE_QUEUES[*q as usize]
                ),
            );
        }
    }
    // rm: no message is filed by max wait before it has waited 1 s since its push committed
    // (issue 21, item 13; the commit came no earlier than its step began).
    let rm: Vec<Uuid> = pushed.iter().filter(|p| p.0 == 2).map(|p| p.1).collect();
    let filed: HashMap<Uuid, f64> = k
        .query(
            "SELECT message_id, min(extract(epoch FROM failed_at))::float8 FROM queen.dead_letters
              WHERE message_id = ANY($1) AND error = 'max wait time exceeded' GROUP BY message_id",
            &[&rm],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for &(q, msg, commit) in pushed.iter().filter(|p| p.0 == 2) {
        if let Some(&at) = filed.get(&msg) {
            let waited = at - run.began(commit);
            if waited < 0.995 {
                v(
                    "filed before max wait",
                    format!(
                        "side queue {}: message {msg} (pushed, committed at step {commit}) was filed by max wait {waited:.3} s after that step began",
                        SIDE_QUEUES[q as usize]
                    ),
                );
            }
        }
    }
    for (lease, (q, g, commit, _)) in &leases {
        if active.contains(lease)
            && deletes.iter().any(|&(dq, dg, at)| dq == *q && dg.is_none_or(|dg| dg == *g) && at > *commit)
        {
            v(
                "survived a delete",
                format!(
                    "side queue {} group r{g}: lease {lease} (committed at step {commit}) outlived a later delete",
                    SIDE_QUEUES[*q as usize]
                ),
            );
        }
    }
    out
}

/// Key/value (issue 24, `kv` steps): in commit order, the committed increments of a counter
/// answer 1, 2, 3, ... (no increment lost or counted twice), and the committed claims and
/// releases of a key alternate, starting with a claim (no two holders); the table ends as they
/// say: each counter at its number of committed increments, each key held or not.
pub(super) fn kv(run: &Run<'_>, k: &mut Client) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut incrs: BTreeMap<u8, Vec<(usize, usize, i64)>> = BTreeMap::new();
    let mut claims: BTreeMap<u8, Vec<(usize, usize, bool)>> = BTreeMap::new();
    for t in &run.history {
        for (i, e) in t.events.iter().enumerate() {
            match e {
                Event::KvIncr { key, value } => incrs.entry(*key).or_default().push((t.commit, i, *value)),
                Event::KvClaimed { key } => claims.entry(*key).or_default().push((t.commit, i, true)),
                Event::KvReleased { key } => claims.entry(*key).or_default().push((t.commit, i, false)),
                _ => {}
            }
        }
    }
    let stored: HashMap<String, serde_json::Value> = k
        .query("SELECT key, value FROM queen.kv WHERE namespace = $1", &[&super::KV_NAMESPACE])
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, serde_json::Value>(1)))
        .collect();
    for key in 0..super::KV_KEYS {
        let mut seq = incrs.remove(&key).unwrap_or_default();
        seq.sort();
        let values: Vec<i64> = seq.iter().map(|x| x.2).collect();
        let want: Vec<i64> = (1..=values.len() as i64).collect();
        if values != want {
            out.push(Violation {
                kind: "kv increment lost",
                detail: format!("counter c{key}: committed increments answered {values:?} in commit order"),
            });
        }
        let stored_count = stored.get(&format!("c{key}")).and_then(|v| v.as_i64()).unwrap_or(0);
        if stored_count != values.len() as i64 {
            out.push(Violation {
                kind: "kv increment lost",
                detail: format!("counter c{key} holds {stored_count} after {} committed increments", values.len()),
            });
        }
        let mut seq = claims.remove(&key).unwrap_or_default();
        seq.sort();
        let mut held = false;
        for &(commit, _, claim) in &seq {
            if claim == held {
                out.push(Violation {
                    kind: "kv two holders",
                    detail: format!(
                        "key k{key}: a {} committed at step {commit} while the key was {}",
                        if claim { "claim" } else { "release" },
                        if held { "held" } else { "free" }
                    ),
                });
            }
            held = claim;
        }
        if stored.contains_key(&format!("k{key}")) != held {
            out.push(Violation {
                kind: "kv two holders",
                detail: format!("key k{key}: the table says {}, the committed history {held}", !held),
            });
        }
    }
    out
}

/// Timers (issue 24, `kv schedule` / `kv cancel` steps), by key in commit order: no message
/// of queue `et` but of a committed schedule; a schedule that a later committed reschedule
/// replaced, or a committed cancel removed, never fired; one that was gone when the next
/// schedule of its key committed (answered 'scheduled') fired; and the last schedule of a key
/// not cancelled after it is pending or fired, the pending row of a key being that one. A
/// committed delete of the queue (`delete_slow et`) ends every key's story: what it took was
/// pending or fired, the checker cannot tell which.
pub(super) fn timers(run: &Run<'_>, k: &mut Client) -> Vec<Violation> {
    #[derive(Debug)]
    enum Op {
        Schedule {
            txn: String,
            replaced: bool,
        },
        Cancel,
        /// The queue deleted: its pending timers and fired messages with it.
        Deleted,
    }
    let mut by_key: BTreeMap<u8, Vec<(usize, usize, Op)>> = BTreeMap::new();
    for t in &run.history {
        for (i, e) in t.events.iter().enumerate() {
            match e {
                Event::TimerScheduled { key, txn, replaced } => by_key.entry(*key).or_default().push((
                    t.commit,
                    i,
                    Op::Schedule { txn: txn.clone(), replaced: *replaced },
                )),
                Event::TimerCancelled { key } => by_key.entry(*key).or_default().push((t.commit, i, Op::Cancel)),
                Event::TimersDeleted => {
                    for key in 0..super::KV_KEYS {
                        by_key.entry(key).or_default().push((t.commit, i, Op::Deleted));
                    }
                }
                _ => {}
            }
        }
    }
    let fired: std::collections::HashSet<String> = k
        .query(
            "SELECT DISTINCT m.transaction_id FROM queen.messages m JOIN queen.queues q USING (queue_id)
              WHERE q.name = $1",
            &[&super::TIMER_QUEUE],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let pending: HashMap<String, String> = k
        .query("SELECT timer_key, transaction_id FROM queen.timers WHERE queue = $1", &[&super::TIMER_QUEUE])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut out = Vec::new();
    let committed: std::collections::HashSet<&str> = by_key
        .values()
        .flatten()
        .filter_map(|(_, _, op)| match op {
            Op::Schedule { txn, .. } => Some(txn.as_str()),
            Op::Cancel | Op::Deleted => None,
        })
        .collect();
    for txn in fired.iter().filter(|t| !committed.contains(t.as_str())) {
        out.push(Violation {
            kind: "timer fired uncommitted",
            detail: format!("message {txn} of a schedule that never committed"),
        });
    }
    for key in 0..super::KV_KEYS {
        let mut ops = by_key.remove(&key).unwrap_or_default();
        ops.sort_by_key(|o| (o.0, o.1));
        for (j, (commit, _, op)) in ops.iter().enumerate() {
            let Op::Schedule { txn, .. } = op else { continue };
            let was_fired = fired.contains(txn);
            // A delete of the queue after it took its message, had it fired: whether it fired
            // is not known.
            if !was_fired && ops[j + 1..].iter().any(|o| matches!(o.2, Op::Deleted)) {
                continue;
            }
            match ops.get(j + 1).map(|o| &o.2) {
                Some(Op::Schedule { replaced: true, .. }) | Some(Op::Cancel) if was_fired => out.push(Violation {
                    kind: "timer fired after it was replaced",
                    detail: format!("timer t{key}: {txn} (committed at step {commit}) fired, though the next committed operation of its key found it pending and removed it"),
                }),
                Some(Op::Schedule { replaced: false, .. }) if !was_fired => out.push(Violation {
                    kind: "timer lost",
                    detail: format!("timer t{key}: {txn} (committed at step {commit}) was gone when the next schedule of its key committed, and never fired"),
                }),
                None if !was_fired && pending.get(&format!("t{key}")) != Some(txn) => out.push(Violation {
                    kind: "timer lost",
                    detail: format!("timer t{key}: {txn}, its last schedule (step {commit}), neither fired nor pending (pending: {:?})", pending.get(&format!("t{key}"))),
                }),
                _ => {}
            }
        }
        let last_live = match ops.last().map(|o| &o.2) {
            Some(Op::Schedule { txn, .. }) if !fired.contains(txn) => Some(txn),
            _ => None,
        };
        if let Some(p) = pending.get(&format!("t{key}")) {
            if Some(p) != last_live {
                out.push(Violation {
                    kind: "timer pending wrong",
                    detail: format!("timer t{key}: {p} is pending; the committed history leaves {last_live:?}"),
                });
            }
        }
    }
    out
}

/// Locks (issue 24, `kv acquire` / `kv unlock` steps), by slot in commit order: acquires and
/// releases alternate, starting with an acquire (never two holders of a slot); a release gives
/// back the token the last acquire took; tokens only rise; and the table ends as they say.
pub(super) fn locks(run: &Run<'_>, k: &mut Client) -> Vec<Violation> {
    let mut by_slot: BTreeMap<i64, Vec<(usize, usize, bool, i64)>> = BTreeMap::new();
    for t in &run.history {
        for (i, e) in t.events.iter().enumerate() {
            match e {
                Event::LockAcquired { slot, token } => {
                    by_slot.entry(*slot).or_default().push((t.commit, i, true, *token))
                }
                Event::LockReleased { slot, token } => {
                    by_slot.entry(*slot).or_default().push((t.commit, i, false, *token))
                }
                _ => {}
            }
        }
    }
    let stored: HashMap<String, i64> = k
        .query(
            "SELECT key, version FROM queen.kv WHERE namespace = 'queen-locks' AND key LIKE $1",
            &[&format!("{}#%", super::LOCK_NAME)],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut out = Vec::new();
    if let Some(bad) = by_slot.keys().find(|s| !(0..super::LOCK_LIMIT).contains(*s)) {
        out.push(Violation {
            kind: "lock over its limit",
            detail: format!("a permit of slot {bad} of a lock of {}", super::LOCK_LIMIT),
        });
    }
    for slot in 0..super::LOCK_LIMIT {
        let mut ops = by_slot.remove(&slot).unwrap_or_default();
        ops.sort_by_key(|o| (o.0, o.1));
        let mut held: Option<i64> = None;
        let mut last_token = 0;
        for &(commit, _, acquire, token) in &ops {
            match (acquire, held) {
                (true, None) if token > last_token => held = Some(token),
                (false, Some(h)) if h == token => held = None,
                _ => out.push(Violation {
                    kind: "lock two holders",
                    detail: format!(
                        "slot {slot}: a {} with token {token} committed at step {commit} while the slot was {held:?} (last token {last_token})",
                        if acquire { "acquire" } else { "release" }
                    ),
                }),
            }
            if acquire {
                last_token = last_token.max(token);
            }
        }
        let row = stored.get(&format!("{}#{slot}", super::LOCK_NAME)).copied();
        if row != held {
            out.push(Violation {
                kind: "lock two holders",
                detail: format!("slot {slot}: the table holds token {row:?}, the committed history {held:?}"),
            });
        }
    }
    out
}

/// What the history holds of (group, partition) between two steps, for an exclusive-lease
/// violation's report: every grant, ack and reset there, with its transaction's first and
/// commit steps (a finding the schedule does not replay is then read from its report).
fn lease_trace(run: &Run<'_>, group: Grp, partition: Uuid, from: usize, to: usize) -> String {
    let leases: HashSet<Uuid> = run
        .history
        .iter()
        .flat_map(|t| t.events.iter())
        .filter_map(|e| match e {
            Event::Delivered(d) if d.group == group && d.partition == partition => d.lease,
            _ => None,
        })
        .collect();
    let mut lines = Vec::new();
    for t in &run.history {
        for e in &t.events {
            let line = match e {
                Event::Delivered(d)
                    if d.group == group && d.partition == partition && (from..=to).contains(&d.step) =>
                {
                    format!("step {} grant lease {:?} until {:?} at {:.3}", d.step, d.lease, d.expires, d.at)
                }
                Event::Acked { group: g, partition: p, step, status, success, released, .. }
                    if *g == group && *p == partition && (from..=to).contains(step) =>
                {
                    format!("step {step} ack {status:?} success {success} released {released:?}")
                }
                Event::Reset { group: g, step, seek } if *g == group && (from..=to).contains(step) => {
                    format!("step {step} reset (seek {seek})")
                }
                Event::Renewed { lease, expires } if leases.contains(lease) => format!("renew {lease} to {expires:.3}"),
                _ => continue,
            };
            lines.push(format!("[tx {}..{}] {line}", t.begin, t.commit));
        }
    }
    format!("trace: {}", lines.join("; "))
}
