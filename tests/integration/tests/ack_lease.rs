//! queen_ack_lease (semantics §3.4): a worker that processed its whole batch acks it in one call —
//! every message of the lease not finished yet, with the batch rule of §5.

use postgres::Client;
use queen_integration_tests::{await_lock_wait, lag, open_tx, push_n, queue_db, sqlstate, TestDb};
use std::time::{Duration, Instant};

/// A pop's rows: (message id, lease, payload, attempt, partition).
type Popped = Vec<(uuid::Uuid, uuid::Uuid, i64, i32, String)>;

fn pop(c: &mut Client, args: &str) -> Popped {
    c.query(
        &format!(
            "SELECT message_id, lease_id, payload::text::bigint, attempt, partition FROM queen_pop('q', 'g', {args})"
        ),
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
    .collect()
}

/// One row of queen_ack_lease: (idx, message id, success, error, lease_released, dead_lettered).
type Row = (i32, Option<uuid::Uuid>, bool, Option<String>, bool, bool);

fn ack_lease(c: &mut Client, lease: uuid::Uuid, status: &str) -> Vec<Row> {
    c.query(
        "SELECT idx, message_id, success, error, lease_released, dead_lettered
           FROM queen_ack_lease($1, $2, 'worker gave up') ORDER BY idx",
        &[&lease, &status],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
    .collect()
}

fn ids(p: &Popped) -> Vec<Option<uuid::Uuid>> {
    p.iter().map(|r| Some(r.0)).collect()
}

fn payloads(p: &Popped) -> Vec<i64> {
    p.iter().map(|r| r.2).collect()
}

fn attempts(p: &Popped) -> Vec<i32> {
    p.iter().map(|r| r.3).collect()
}

fn queen_state(c: &mut Client) -> String {
    c.query_one(
        "SELECT string_agg(t::text, ';' ORDER BY t::text)
           FROM (SELECT partition_id, consumer_group, done_txid, done_seq, ahead_txid, failures, retry_at,
                        lease_id, lease_expires_at, last_lease_id FROM queen.cursors) t",
        &[],
    )
    .unwrap()
    .get(0)
}

/// The whole lease completed: one row per message in delivery order, `idx` from 0, the last
/// releasing the lease; the group has nothing left.
#[test]
fn a_whole_lease_completed() {
    let (_db, mut c) = queue_db("al_completed", "", 5);
    let got = pop(&mut c, "batch => 10");
    assert_eq!(payloads(&got), vec![0, 1, 2, 3, 4]);
    let res = ack_lease(&mut c, got[0].1, "completed");
    assert_eq!(res.iter().map(|r| r.0).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    assert_eq!(res.iter().map(|r| r.1).collect::<Vec<_>>(), ids(&got), "in delivery order");
    assert!(res.iter().all(|r| r.2 && r.3.is_none() && !r.5), "{res:?}");
    assert_eq!(res.iter().map(|r| r.4).collect::<Vec<_>>(), vec![false, false, false, false, true]);
    assert_eq!(lag(&mut c, "q", Some("g")), 0);
    assert!(pop(&mut c, "batch => 10").is_empty());
    // Once released, the lease no longer knows its batch: no rows, as for an unknown lease.
    assert!(ack_lease(&mut c, got[0].1, "completed").is_empty());
    assert!(ack_lease(&mut c, uuid::Uuid::from_u128(0x0193_0000_0000_7000_8000_0000_0000_0001), "completed").is_empty());
}

/// `failed`: the first message is charged and the lease released; the rest come back
/// uncharged (`superseded`). `retry`: the same, nothing charged. Spent retries: the first is a
/// dead letter, the lease is released all the same, the rest come back uncharged.
#[test]
fn failed_retry_and_spent_retries_follow_the_batch_rule() {
    let (_db, mut c) = queue_db("al_failed", r#"{"retryDelay": 0, "retryLimit": 1}"#, 4);
    let got = pop(&mut c, "batch => 10");
    let res = ack_lease(&mut c, got[0].1, "failed");
    assert_eq!(res[0], (0, Some(got[0].0), true, None, true, false));
    for (i, r) in res.iter().enumerate().skip(1) {
        assert_eq!(*r, (i as i32, Some(got[i].0), false, Some("superseded".into()), false, false));
    }
    let again = pop(&mut c, "batch => 10");
    assert_eq!(payloads(&again), vec![0, 1, 2, 3]);
    assert_eq!(attempts(&again), vec![2, 1, 1, 1], "only the first was charged");

    let res = ack_lease(&mut c, again[0].1, "retry");
    assert_eq!(res[0], (0, Some(again[0].0), true, None, true, false));
    assert!(res[1..].iter().all(|r| r.3.as_deref() == Some("superseded")));
    let third = pop(&mut c, "batch => 10");
    assert_eq!(attempts(&third), vec![2, 1, 1, 1], "retry charges nothing");

    // Its one retry spent: the first message is filed, the lease released at once.
    let res = ack_lease(&mut c, third[0].1, "failed");
    assert_eq!(res[0], (0, Some(third[0].0), true, None, true, true));
    assert!(res[1..].iter().all(|r| r.3.as_deref() == Some("superseded")));
    let errors: Vec<String> = c
        .query("SELECT error FROM queen.dead_letters_view WHERE consumer_group = 'g'", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(errors, vec!["worker gave up".to_string()]);
    let fourth = pop(&mut c, "batch => 10");
    assert_eq!(payloads(&fourth), vec![1, 2, 3]);
    assert_eq!(attempts(&fourth), vec![1, 1, 1], "the rest come back uncharged");
}

/// `dlq`: every message filed, the lease released by the last.
#[test]
fn dlq_files_every_message() {
    let (_db, mut c) = queue_db("al_dlq", "", 3);
    let got = pop(&mut c, "batch => 10");
    let res = ack_lease(&mut c, got[0].1, "dlq");
    assert!(res.iter().all(|r| r.2 && r.5), "{res:?}");
    assert!(res[2].4);
    let filed: i64 = c.query_one("SELECT count(*) FROM queen.dead_letters_view", &[]).unwrap().get(0);
    assert_eq!(filed, 3);
    assert_eq!(lag(&mut c, "q", Some("g")), 0);
}

/// Part of a lease acked message by message, then the rest with one call: only the rest get
/// rows (numbered from 0), and the lease is released.
#[test]
fn part_of_a_lease_then_the_rest() {
    let (_db, mut c) = queue_db("al_part", "", 5);
    let got = pop(&mut c, "batch => 10");
    for i in [0, 2] {
        let ok: bool = c.query_one("SELECT success FROM queen_ack($1, $2)", &[&got[i].0, &got[i].1]).unwrap().get(0);
        assert!(ok);
    }
    let res = ack_lease(&mut c, got[0].1, "completed");
    assert_eq!(res.iter().map(|r| r.1).collect::<Vec<_>>(), vec![Some(got[1].0), Some(got[3].0), Some(got[4].0)]);
    assert_eq!(res.iter().map(|r| r.0).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert!(res.iter().all(|r| r.2));
    assert!(res[2].4, "the last releases the lease");
    assert_eq!(lag(&mut c, "q", Some("g")), 0);
}

/// A batch with a gap: a message finished out of order under an earlier lease is not delivered
/// again, so the next batch is not one span of its partition. The ids come back for every key,
/// those past the span read (as many rows as the batch has keys) included.
#[test]
fn a_batch_with_a_gap_has_every_id() {
    let (_db, mut c) = queue_db("al_gap", "", 5);
    let first = pop(&mut c, "batch => 5");
    let ok: bool = c.query_one("SELECT success FROM queen_ack($1, $2)", &[&first[1].0, &first[1].1]).unwrap().get(0);
    assert!(ok);
    let ok: bool =
        c.query_one("SELECT success FROM queen_ack($1, $2, 'retry')", &[&first[0].0, &first[0].1]).unwrap().get(0);
    assert!(ok);
    let got = pop(&mut c, "batch => 10");
    assert_eq!(payloads(&got), vec![0, 2, 3, 4], "1 was finished");
    let res = ack_lease(&mut c, got[0].1, "completed");
    assert_eq!(res.iter().map(|r| r.1).collect::<Vec<_>>(), ids(&got));
    assert!(res.iter().all(|r| r.2 && r.3.is_none()), "{res:?}");
    assert_eq!(lag(&mut c, "q", Some("g")), 0);
}

/// A lease that ran out: one row per message, 'lease expired', nothing changed. Once a pop
/// took the partition again, the old lease is no one's: no rows.
#[test]
fn an_expired_lease_then_a_taken_one() {
    let (_db, mut c) = queue_db("al_expired", "", 3);
    let got = pop(&mut c, "batch => 10, lease_seconds => 1");
    let expires: std::time::SystemTime =
        c.query_one("SELECT lease_expires_at FROM queen.cursors WHERE lease_id = $1", &[&got[0].1]).unwrap().get(0);
    while std::time::SystemTime::now() <= expires + Duration::from_millis(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = queen_state(&mut c);
    let res = ack_lease(&mut c, got[0].1, "completed");
    assert_eq!(res.len(), 3);
    assert!(res.iter().all(|r| !r.2 && r.3.as_deref() == Some("lease expired")), "{res:?}");
    assert_eq!(queen_state(&mut c), before, "a refused ack leaves no trace");
    let again = pop(&mut c, "batch => 10");
    assert_eq!(attempts(&again), vec![2, 1, 1], "the expiry charged the first");
    assert!(ack_lease(&mut c, got[0].1, "completed").is_empty(), "the partition's lease is another's now");
    assert!(ack_lease(&mut c, again[0].1, "completed").iter().all(|r| r.2));
}

/// A lease over several partitions: each partition's messages in its delivery order, settled
/// partition by partition — a `failed` charges the first message of each.
#[test]
fn a_lease_over_several_partitions() {
    let (_db, mut c) = queue_db("al_partitions", r#"{"retryDelay": 0}"#, 0);
    for p in ["a", "b", "c"] {
        push_n(&mut c, "q", p, 2);
    }
    let got = pop(&mut c, "batch => 10, partitions => 3");
    assert_eq!(got.len(), 6);
    let res = ack_lease(&mut c, got[0].1, "failed");
    assert_eq!(res.len(), 6);
    let mut by_id = std::collections::HashMap::new();
    for r in &got {
        by_id.insert(r.0, (r.4.clone(), r.2));
    }
    for p in ["a", "b", "c"] {
        let mine: Vec<&Row> = res.iter().filter(|r| by_id[&r.1.unwrap()].0 == p).collect();
        assert_eq!(mine.iter().map(|r| by_id[&r.1.unwrap()].1).collect::<Vec<_>>(), vec![0, 1], "{p}: in order");
        assert!(mine[0].2 && mine[0].4, "{p}: the first is charged and releases the partition's lease");
        assert_eq!(mine[1].3.as_deref(), Some("superseded"));
    }
    let again = pop(&mut c, "batch => 10, partitions => 3");
    assert_eq!(again.len(), 6);
    assert_eq!(again.iter().filter(|r| r.3 == 2).count(), 3, "one charge per partition");
    let res = ack_lease(&mut c, again[0].1, "completed");
    assert!(res.iter().all(|r| r.2));
    assert_eq!(res.iter().filter(|r| r.4).count(), 3);
    assert_eq!(lag(&mut c, "q", Some("g")), 0);
}

/// In a business transaction: the ack and the application's write commit together, or
/// neither — rolled back, the lease is still held and acks again; the effect is applied once.
#[test]
fn in_a_business_transaction_that_rolls_back() {
    let (_db, mut c) = queue_db("al_tx", "", 0);
    c.batch_execute("CREATE TABLE applied (msg uuid PRIMARY KEY)").unwrap();
    push_n(&mut c, "q", "p", 3);
    let got = pop(&mut c, "batch => 10");
    let work = |c: &mut Client, end: &str| {
        let mut tx = c.transaction().unwrap();
        let rows =
            tx.query("SELECT message_id FROM queen_ack_lease($1) WHERE success ORDER BY idx", &[&got[0].1]).unwrap();
        for r in &rows {
            tx.execute("INSERT INTO applied VALUES ($1)", &[&r.get::<_, uuid::Uuid>(0)]).unwrap();
        }
        if end == "commit" {
            tx.commit().unwrap();
        } else {
            tx.rollback().unwrap();
        }
        rows.len()
    };
    assert_eq!(work(&mut c, "rollback"), 3);
    assert_eq!(lag(&mut c, "q", Some("g")), 3, "rolled back: nothing acked");
    let held: i64 = c.query_one("SELECT count(*) FROM queen.cursors WHERE lease_id = $1", &[&got[0].1]).unwrap().get(0);
    assert_eq!(held, 1, "the lease is still held");
    assert_eq!(work(&mut c, "commit"), 3);
    assert_eq!(work(&mut c, "commit"), 0, "and only once");
    let applied: i64 = c.query_one("SELECT count(*) FROM applied", &[]).unwrap().get(0);
    assert_eq!(applied, 3);
    assert_eq!(lag(&mut c, "q", Some("g")), 0);
}

/// Privileges: to a role with no grant on the queue the lease is unknown — no rows, and
/// nothing waited for (the open transaction holding the row is not waited on); a role that may
/// read but not pop is refused (42501); with `pop` it acks. Bad arguments: 22004, 22023.
#[test]
fn grants_and_bad_arguments() {
    let db = TestDb::new("al_grants");
    let mut admin = db.connect();
    push_n(&mut admin, "q", "p", 2);
    let got = pop(&mut admin, "batch => 10");
    let lease = got[0].1;
    let mut holder = open_tx(&db);
    holder.execute("SELECT queen_renew($1, 100)", &[&lease]).unwrap(); // locks the row

    let stranger = db.role("stranger");
    let mut s = db.connect_as(&stranger);
    s.batch_execute("SET statement_timeout = '3s'").unwrap();
    let t = Instant::now();
    assert!(ack_lease(&mut s, lease, "completed").is_empty());
    assert!(t.elapsed() < Duration::from_secs(2), "it waited for the holder");

    let reader = db.role("reader");
    admin.execute("SELECT queen_grant('q', $1::text::regrole, ARRAY['read'])", &[&reader]).unwrap();
    let mut r = db.connect_as(&reader);
    let e = r.query("SELECT * FROM queen_ack_lease($1)", &[&lease]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501", "{e}");

    let worker = db.role("worker");
    admin.execute("SELECT queen_grant('q', $1::text::regrole, ARRAY['pop'])", &[&worker]).unwrap();
    let mut w = db.connect_as(&worker);
    let w_pid: i32 = w.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let h = std::thread::spawn(move || ack_lease(&mut w, lease, "completed"));
    await_lock_wait(&mut admin, w_pid);
    holder.batch_execute("COMMIT").unwrap();
    let res = h.join().unwrap();
    assert_eq!(res.len(), 2);
    assert!(res.iter().all(|r| r.2), "{res:?}");

    let e = admin.query("SELECT * FROM queen_ack_lease(NULL)", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "22004");
    assert!(e.as_db_error().unwrap().message().contains("lease_id"), "{e}");
    let e = admin.query("SELECT * FROM queen_ack_lease($1, 'done')", &[&lease]).unwrap_err();
    assert_eq!(sqlstate(&e), "22023");
    assert!(e.as_db_error().unwrap().message().contains("\"done\""), "{e}");
}

/// Retention deleted the rest of a lease's batch under it: what is left is acked, the gone
/// ones count as finished, and the lease is released (the partition does not stall).
#[test]
fn messages_deleted_under_the_lease_count_as_finished() {
    let (_db, mut c) = queue_db("al_vanished", r#"{"retentionSeconds": 3600}"#, 3);
    let got = pop(&mut c, "batch => 10");
    // As retention would (its pass leaves leased messages alone; a delete stands in for a
    // pass that looked before the pop committed).
    c.execute("DELETE FROM queen.messages WHERE message_id = ANY($1)", &[&vec![got[1].0, got[2].0]]).unwrap();
    let res = ack_lease(&mut c, got[0].1, "completed");
    assert_eq!(res.len(), 1);
    assert_eq!(res[0].1, Some(got[0].0));
    assert!(res[0].2 && res[0].4, "{res:?}");
    push_n(&mut c, "q", "p", 1);
    assert_eq!(payloads(&pop(&mut c, "batch => 10")), vec![0], "the partition goes on");
}

/// A lease's batch is stored packed (src/packed_keys.rs): a batch of 100 takes a few bytes a
/// key in its cursor row, not the 1 600 of two bigint[]; queen's SQL reads it back through
/// queen.batch_keys, which no other role may call and which refuses bytes that are not a batch.
#[test]
fn a_lease_keeps_its_batch_packed() {
    let (db, mut c) = queue_db("al_packed", "", 100);
    let got = pop(&mut c, "batch => 100");
    assert_eq!(got.len(), 100);
    let row = c
        .query_one(
            "SELECT pg_column_size(c.lease_keys),
                    (SELECT count(*) FROM queen.batch_keys(c.lease_keys)),
                    (SELECT bool_and((m.txid, m.seq) = (k.txid, k.seq))
                       FROM queen.batch_keys(c.lease_keys) WITH ORDINALITY AS k(txid, seq, ord)
                       JOIN (SELECT m.txid, m.seq, row_number() OVER (ORDER BY m.txid, m.seq) AS ord
                               FROM queen.messages m WHERE m.partition_id = c.partition_id) m ON m.ord = k.ord)
               FROM queen.cursors c WHERE c.lease_id = $1",
            &[&got[0].1],
        )
        .unwrap();
    let (bytes, keys, in_order): (i32, i64, bool) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(keys, 100);
    assert!(in_order, "the keys read back are the batch's, in delivery order");
    // Pushed by one transaction, one after the other: the first key and one repeat of its
    // step (a varlena header of one byte, the version, then 5 + 6 bytes or so).
    assert!(bytes < 20, "{bytes} bytes for a batch of 100 of one pushed transaction");
    assert_eq!(ack_lease(&mut c, got[0].1, "completed").len(), 100);

    // Bytes that are not a packed batch: 22023, naming the argument.
    for bad in ["\\x", "\\x03", "\\x0180", "\\x0200000002"] {
        let e = c.query("SELECT * FROM queen.batch_keys($1::text::bytea)", &[&bad]).unwrap_err();
        assert_eq!(sqlstate(&e), "22023", "{bad}: {e}");
        assert!(e.as_db_error().unwrap().message().contains("\"packed\""), "{e:?}");
    }
    let e = c.query("SELECT queen.pack_keys('{1,2}', '{1}')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "22023", "{e}");
    let round: Vec<(i64, i64)> = c
        .query("SELECT * FROM queen.batch_keys(queen.pack_keys('{5,5,3}', '{7,9,-1}'))", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(round, vec![(5, 7), (5, 9), (3, -1)]);
    // A repeated step, and a batch packed by 0.4.0 (version 1: (730, 12), (730, 1012), (731, 5)).
    let read = |c: &mut postgres::Client, q: &str| -> Vec<(i64, i64)> {
        c.query(q, &[]).unwrap().iter().map(|r| (r.get(0), r.get(1))).collect()
    };
    let repeated = read(&mut c, "SELECT * FROM queen.batch_keys(queen.pack_keys('{5,5,5,5,6}', '{1,3,5,7,0}'))");
    assert_eq!(repeated, vec![(5, 1), (5, 3), (5, 5), (5, 7), (6, 0)]);
    let v1 = read(&mut c, "SELECT * FROM queen.batch_keys('\\x01b40b1800d00f020a')");
    assert_eq!(v1, vec![(730, 12), (730, 1012), (731, 5)]);

    // For queen's own queries only.
    let stranger = db.role("stranger");
    let mut s = db.connect_as(&stranger);
    for q in ["SELECT * FROM queen.batch_keys('\\x01')", "SELECT queen.pack_keys('{}', '{}')"] {
        let e = s.query(q, &[]).unwrap_err();
        assert_eq!(sqlstate(&e), "42501", "{q}: {e}");
    }
}

/// The rows of a lease are locked as `FOR UPDATE` locks them, waiting for a transaction that
/// holds one, and the version that transaction commits is judged again: a pop that took the
/// partition over after the lease ran out leaves the old lease no one's (no rows), and a
/// group deleted meanwhile leaves no row at all (no rows). What the pop took acks in full.
#[test]
fn an_ack_that_waited_judges_the_row_as_committed() {
    let db = TestDb::new("al_waited");
    let mut c = db.connect();
    push_n(&mut c, "q", "p", 3);
    let got = pop(&mut c, "batch => 10, lease_seconds => 1");
    let expires: std::time::SystemTime =
        c.query_one("SELECT lease_expires_at FROM queen.cursors WHERE lease_id = $1", &[&got[0].1]).unwrap().get(0);
    while std::time::SystemTime::now() <= expires + Duration::from_millis(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let acker = |lease: uuid::Uuid| {
        let mut a = db.connect();
        let pid: i32 = a.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        (pid, std::thread::spawn(move || ack_lease(&mut a, lease, "completed")))
    };

    let mut taker = open_tx(&db);
    let again = pop(&mut taker, "batch => 10");
    assert_eq!(again.len(), 3, "the pop takes the run-out batch over");
    let (pid, h) = acker(got[0].1);
    await_lock_wait(&mut c, pid);
    taker.batch_execute("COMMIT").unwrap();
    assert!(h.join().unwrap().is_empty(), "the partition's lease is the pop's now");

    let mut deleter = open_tx(&db);
    deleter.execute("SELECT queen_delete_group('g', 'q')", &[]).unwrap();
    let (pid, h) = acker(again[0].1);
    await_lock_wait(&mut c, pid);
    deleter.batch_execute("ROLLBACK").unwrap();
    let res = h.join().unwrap();
    assert_eq!(res.len(), 3, "rolled back: the row as it was");
    assert!(res.iter().all(|r| r.2), "{res:?}");
    assert_eq!(lag(&mut c, "q", Some("g")), 0);

    push_n(&mut c, "q", "p", 2);
    let third = pop(&mut c, "batch => 10");
    assert_eq!(third.len(), 2);
    let mut deleter = open_tx(&db);
    deleter.execute("SELECT queen_delete_group('g', 'q')", &[]).unwrap();
    let (pid, h) = acker(third[0].1);
    await_lock_wait(&mut c, pid);
    deleter.batch_execute("COMMIT").unwrap();
    assert!(h.join().unwrap().is_empty(), "the group's rows are gone");
}
