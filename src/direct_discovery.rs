//! A group's scan of its queue's log (`discovery_scan` of discovery.sql, which see, part by
//! part), read straight through the indexes on one server, as direct.rs reads a look.
//!
//! A scan reads up to a few thousand log entries and probes a hint and a cursor row for every
//! partition it meets. In a backlog the statement's CTEs (the log materialized, sorted for its
//! last entry and counted, grouped by partition with an array per entry, a subplan per
//! partition) cost more than the reads: a fifth of a pop 100 + `queen_ack_lease` cycle went to
//! the scans (issue 23, docs/benchmarks.md). The statement stays the scan on Citus and is the
//! reference: debug builds run it under the same snapshot and panic when the two differ
//! (discovery.rs).

use crate::direct;
use crate::index_read::{Entry, Index, Key as ScanKey, Scan, Snapshot, Table};
use pgrx::{pg_sys, IntoDatum, Uuid};
use std::cell::RefCell;
use std::collections::HashMap;

/// A point: the position read up to, and the transactions pending behind it.
pub(crate) type Point = ((i64, i64), Vec<i64>);

/// What `discovery_scan` returns, as its columns say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogRead {
    pub xip: Vec<i64>,
    pub pending_visible: Vec<bool>,
    pub last: Option<(i64, i64)>,
    pub found_partitions: Vec<Uuid>,
    pub found_txids: Vec<i64>,
    pub point: Point,
    pub stored: bool,
    pub own: bool,
    pub carried: bool,
    pub xmin: i64,
    pub log_read: i64,
}

/// The relations a scan reads beyond direct.rs's, and where their columns are.
#[derive(Clone)]
struct Layout {
    discovery: pg_sys::Oid,
    discovery_point: pg_sys::Oid,
    queue_log: pg_sys::Oid,
    /// The collation discovery_point orders consumer_group by.
    point_group_collation: pg_sys::Oid,
    /// queue_id, consumer_group, upto_txid, upto_seq, pending_txid, sub_key, shard.
    d: [i16; 7],
    /// messages: partition_id, txid, seq, shard.
    m: [i16; 4],
    /// ready: seen_xmin, shard.
    r: [i16; 2],
}

thread_local! {
    static LAYOUT: RefCell<Option<(pg_sys::Oid, [pg_sys::Oid; 3], Layout)>> = const { RefCell::new(None) };
}

fn layout() -> Option<Layout> {
    let schema = crate::names::schema_oid();
    let relid = |name| direct::relid(name, schema);
    let oids = [relid(c"discovery"), relid(c"discovery_point"), relid(c"messages_queue_log")];
    if let Some(l) =
        LAYOUT.with(|l| l.borrow().as_ref().filter(|(s, o, _)| *s == schema && *o == oids).map(|x| x.2.clone()))
    {
        return Some(l);
    }
    if oids.contains(&pg_sys::InvalidOid) {
        return None;
    }
    let dl = direct::layout()?;
    let (dt, mt, rt) = (Table::open(oids[0])?, Table::open(dl.messages)?, Table::open(dl.ready)?);
    let (di, mi) = (Index::open(oids[1])?, Index::open(oids[2])?);
    let d = ["queue_id", "consumer_group", "upto_txid", "upto_seq", "pending_txid", "sub_key", "shard"]
        .map(|c| dt.attnum(c).unwrap_or(0));
    let m = ["partition_id", "txid", "seq", "shard"].map(|c| mt.attnum(c).unwrap_or(0));
    let r = ["seen_xmin", "shard"].map(|c| rt.attnum(c).unwrap_or(0));
    let queue_id = mt.attnum("queue_id").unwrap_or(0);
    // discovery_point (queue_id, consumer_group, upto_txid DESC, upto_seq DESC);
    // messages_queue_log (queue_id, txid, seq) INCLUDE (partition_id), read index-only.
    let as_read = d.iter().chain(&m).chain(&r).all(|&a| a > 0)
        && di.columns() == [d[0], d[1], d[2], d[3]]
        && di.descending(2)
        && di.descending(3)
        && mi.columns() == [queue_id, m[1], m[2]]
        && mi.included() == [m[0]];
    if !as_read {
        return None;
    }
    let l = Layout {
        discovery: oids[0],
        discovery_point: oids[1],
        queue_log: oids[2],
        point_group_collation: di.collation(1),
        d,
        m,
        r,
    };
    LAYOUT.with(|c| *c.borrow_mut() = Some((schema, oids, l.clone())));
    Some(l)
}

/// The arguments of `discovery_scan`: the queue, the group, the point to start from when none
/// is stored (`initial`, $3/$4/$5), the subscription ($7), the entries to read at most ($6) and
/// the point carried out of a rollback ($8/$9/$10).
pub(crate) struct Args<'a> {
    pub queue_id: Uuid,
    pub group: &'a str,
    pub initial: (&'a (i64, i64), &'a [i64]),
    pub sub_key: &'a str,
    pub limit: i64,
    pub carried: Option<(&'a (i64, i64), &'a [i64])>,
}

/// What one partition's entries say (`found`'s grouping).
struct Seen {
    newest: i64,
    oldest: i64,
    last: (i64, i64),
    ord: i32,
}

/// `discovery_scan`, read by hand under a snapshot taken as a statement takes its own, which is
/// returned with it (for the caller's check). None when a relation is not as this code reads
/// it: the statement reads it.
pub(crate) fn scan(a: &Args<'_>) -> Option<(LogRead, Snapshot)> {
    let dl = direct::layout()?;
    let l = layout()?;
    // The book of what hints of other transactions account for (accounted.rs), under a
    // ticket of cache.rs that held both before and after the snapshot was taken.
    let before = crate::cache::ticket();
    let snap = Snapshot::take();
    let shard = crate::shards::current();
    let ticket = before.filter(|t| crate::cache::ticket() == Some(*t));
    let book_key: crate::accounted::GroupKey =
        (*a.queue_id.as_bytes(), a.group.to_string(), a.sub_key.to_string(), shard);
    let mut book = ticket.map(|t| crate::accounted::take(&book_key, t));
    let q = *a.queue_id.as_bytes();
    let group = a.group.into_datum()?;

    // snap ({{stored_snapshot}}): the statement's snapshot in stored ids, the caller's own
    // transaction counted as running.
    let offset = crate::cluster::offset();
    let own = crate::cluster::own_txid();
    let (xmin, xmax, running) = snap.full_ids();
    let (xmin, xmax) = (own.map_or(xmin + offset, |o| (xmin + offset).min(o)), xmax + offset);
    let mut xip: Vec<i64> = running.into_iter().map(|x| x + offset).collect();
    xip.extend(own);

    // stored: the group's newest point of this subscription, through discovery_point.
    let stored = {
        let (table, index) = (Table::open(l.discovery)?, Index::open(l.discovery_point)?);
        let mut scan = Scan::new(
            &table,
            &index,
            snap.snap,
            &[
                ScanKey::eq(1, pg_sys::F_UUID_EQ, pg_sys::Datum::from(q.as_ptr())),
                ScanKey::eq(2, pg_sys::F_TEXTEQ, group).collated(l.point_group_collation),
            ],
            false,
        );
        let mut found = None;
        while let Some(t) = scan.next() {
            if t.get::<i32>(l.d[6]) == Some(shard) && t.get::<String>(l.d[5]).as_deref() == Some(a.sub_key) {
                let upto = (t.get(l.d[2]).expect("upto_txid"), t.get(l.d[3]).expect("upto_seq"));
                found = Some(((upto, t.get::<Vec<i64>>(l.d[4]).unwrap_or_default()), t.written_here()));
                break;
            }
        }
        found
    };
    // base, point: the stored point, or the initial one; the carried one when it is ahead.
    let (base, base_stored, base_own) = match stored {
        Some((p, own)) => (p, true, own),
        None => ((*a.initial.0, a.initial.1.to_vec()), false, false),
    };
    let (point, stored, own_point, carried) = match a.carried {
        Some((upto, pending)) if *upto > base.0 => ((*upto, pending.to_vec()), false, false, true),
        _ => (base, base_stored, base_own, false),
    };

    // log: the queue's entries after the point, but the caller's own, at most `limit`.
    let (messages, queue_log) = (Table::open(dl.messages)?, Index::open(l.queue_log)?);
    // An entry's partition, key and shard. Index-only where the heap page is all visible:
    // the log's index carries the partition, and every message on one server (where this
    // code reads) is of its one shard, 0 (shards.rs); from the heap row otherwise.
    #[inline(always)]
    fn entry(l: &Layout, e: &Entry<'_>) -> (Uuid, (i64, i64), Option<i32>) {
        const NOT_NULL: &str = "queen: a log entry's columns are not NULL";
        match e {
            Entry::Index(c) => {
                (c.get(4).expect(NOT_NULL), (c.get(2).expect(NOT_NULL), c.get(3).expect(NOT_NULL)), Some(0))
            }
            Entry::Heap(t) => (
                t.get::<Uuid>(l.m[0]).expect(NOT_NULL),
                (t.get(l.m[1]).expect(NOT_NULL), t.get(l.m[2]).expect(NOT_NULL)),
                t.get::<i32>(l.m[3]),
            ),
        }
    }
    let mut seen: HashMap<Uuid, Seen> = HashMap::new();
    let mut note = |p: Uuid, k: (i64, i64), ord: i32| {
        let s = seen.entry(p).or_insert(Seen { newest: k.0, oldest: k.0, last: k, ord });
        s.newest = s.newest.max(k.0);
        s.oldest = s.oldest.min(k.0);
        s.last = s.last.max(k);
        s.ord = s.ord.min(ord);
    };
    let (mut log_read, mut last) = (0i64, None);
    // In key order from just after the point: the rest of its transaction, then the
    // transactions after it (as the statement's row comparison bounds its index scan).
    let (upto_txid, upto_seq) = point.0;
    for rest_of_point in [true, false] {
        let mut keys = vec![ScanKey::eq(1, pg_sys::F_UUID_EQ, pg_sys::Datum::from(q.as_ptr()))];
        if rest_of_point {
            keys.push(ScanKey::eq(2, pg_sys::F_INT8EQ, upto_txid.into()));
            keys.push(ScanKey::gt(3, pg_sys::F_INT8GT, upto_seq.into()));
        } else if upto_txid < i64::MAX {
            keys.push(ScanKey::gt(2, pg_sys::F_INT8GT, upto_txid.into()));
        } else {
            break;
        }
        let mut scan = Scan::index_only(&messages, &queue_log, snap.snap, &keys);
        while log_read < a.limit {
            let Some(e) = scan.next_entry() else { break };
            let (p, k, entry_shard) = entry(&l, &e);
            if entry_shard != Some(shard) || Some(k.0) == own {
                continue;
            }
            note(p, k, 0);
            log_read += 1;
            last = Some(k);
        }
    }
    // pend: which pending transactions the snapshot sees committed now.
    let pending_visible: Vec<bool> = point.1.iter().map(|&x| x < xmin || (x < xmax && !xip.contains(&x))).collect();
    // entries: the messages of those transactions.
    for (&x, _) in point.1.iter().zip(&pending_visible).filter(|(_, &v)| v) {
        let mut scan = Scan::index_only(
            &messages,
            &queue_log,
            snap.snap,
            &[
                ScanKey::eq(1, pg_sys::F_UUID_EQ, pg_sys::Datum::from(q.as_ptr())),
                ScanKey::eq(2, pg_sys::F_INT8EQ, x.into()),
            ],
        );
        while let Some(e) = scan.next_entry() {
            let (p, k, entry_shard) = entry(&l, &e);
            if entry_shard == Some(shard) {
                note(p, k, 1);
            }
        }
    }

    // found: the partitions less those whose hint accounts for what was found there, or whose
    // cursor row is past all of it; neither counting rows this transaction wrote.
    let (ready, ready_partition) = (Table::open(dl.ready)?, Index::open(dl.ready_partition)?);
    let (cursors, cursors_pkey) = (Table::open(dl.cursors)?, Index::open(dl.cursors_pkey)?);
    let mut found: Vec<(i32, i64, Uuid)> = Vec::new();
    // One scan of each index, started again for each partition.
    let (mut hints, mut rows): (Option<Scan>, Option<Scan>) = (None, None);
    // Read only by a transaction that has written nothing: one that has may have deleted or
    // moved the hint it saw (its own pop claimed the partition), and the statement, the
    // reference, reads its writes (with the same answer once they commit or roll back).
    let read_book = own.is_none();
    for (p, s) in &seen {
        if read_book && book.as_ref().is_some_and(|b| b.accounts(p, s.newest)) {
            continue;
        }
        let pid = *p.as_bytes();
        let keys = [
            ScanKey::eq(1, pg_sys::F_UUID_EQ, pg_sys::Datum::from(pid.as_ptr())),
            ScanKey::eq(2, pg_sys::F_TEXTEQ, group).collated(dl.hint_group_collation),
        ];
        let scan = Scan::again(&mut hints, (&ready, &ready_partition), snap.snap, &keys);
        let mut hinted = false;
        while let Some(t) = scan.next() {
            let seen_xmin = t.get::<i64>(l.r[0]).filter(|&x| x > s.newest);
            if t.get::<i32>(l.r[1]) == Some(shard) && seen_xmin.is_some() && !t.written_here() {
                // Committed by another transaction: the snapshot sees it.
                if let (Some(b), Some(x)) = (book.as_mut(), seen_xmin) {
                    b.note(*p, x);
                }
                hinted = true;
                break;
            }
        }
        if hinted {
            continue;
        }
        let keys = direct::cursor_keys(&dl, &pid, group, shard);
        let scan = Scan::again(&mut rows, (&cursors, &cursors_pkey), snap.snap, &keys);
        let finished = match scan.next() {
            Some(t) => {
                let done: (i64, i64) = (t.get(dl.c[0]).expect("done_txid"), t.get(dl.c[1]).expect("done_seq"));
                let pending = t.get::<Vec<i64>>(dl.c[2]).unwrap_or_default();
                done >= s.last && !pending.iter().any(|&x| x >= s.oldest && x <= s.newest) && !t.written_here()
            }
            None => false,
        };
        if !finished {
            found.push((s.ord, s.newest, *p));
        }
    }
    drop((hints, rows));
    if let (Some(t), Some(b)) = (ticket, book) {
        crate::accounted::put(book_key, t, b);
    }
    // ORDER BY ord, txid, partition_id (a uuid orders as its bytes).
    found.sort_by(|a, b| (a.0, a.1, a.2.as_bytes()).cmp(&(b.0, b.1, b.2.as_bytes())));
    let read = LogRead {
        xip,
        pending_visible,
        last,
        found_partitions: found.iter().map(|f| f.2).collect(),
        found_txids: found.iter().map(|f| f.1).collect(),
        point,
        stored,
        own: own_point,
        carried,
        xmin,
        log_read,
    };
    Some((read, snap))
}
