//! Maintenance and deletes racing open transactions (issue 21, items 7–12 and 14), each
//! replayed step by step over real connections. Every test here fails on 0.2.0.

use postgres::Client;
use queen_integration_tests::{await_lock_wait, open_tx, pop_auto, push, sqlstate, TestDb};
use serde_json::{json, Value};
use std::thread;
use std::time::Duration;

fn count(c: &mut Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

fn pid(c: &mut Client) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0)
}

/// The id of a queue (names derive ids: the same after a delete and re-create).
fn queue_id(c: &mut Client, name: &str) -> uuid::Uuid {
    c.query_one("SELECT DISTINCT queue_id FROM queen.queues WHERE name = $1", &[&name]).unwrap().get(0)
}

/// Every row of queen's tables that belongs to queue `id`.
fn rows_of(c: &mut Client, id: uuid::Uuid) -> i64 {
    c.query_one(
        "SELECT (SELECT count(*) FROM queen.messages WHERE queue_id = $1)
              + (SELECT count(*) FROM queen.partitions WHERE queue_id = $1)
              + (SELECT count(*) FROM queen.queues WHERE queue_id = $1)
              + (SELECT count(*) FROM queen.cursors WHERE queue_id = $1)
              + (SELECT count(*) FROM queen.subscriptions WHERE queue_id = $1)
              + (SELECT count(*) FROM queen.dead_letters WHERE queue_id = $1)
              + (SELECT count(*) FROM queen.ready WHERE queue_id = $1)
              + (SELECT count(*) FROM queen.discovery WHERE queue_id = $1)
              + (SELECT count(*) FROM queen.queue_counts WHERE queue_id = $1)",
        &[&id],
    )
    .unwrap()
    .get(0)
}

/// Item 7: group A drains m0–m2; group B's first pop ('all', batch 1) is open holding m0 when
/// completed retention comes due. The pass leaves the queue alone while B's subscription is
/// not committed (semantics §4); B commits, acks m0 and gets m1, m2. Then, all finished, they go.
#[test]
fn completed_retention_keeps_what_an_open_first_pop_will_be_owed() {
    let db = TestDb::new("completed_open_first");
    let mut admin = db.connect();
    admin.execute("SELECT queen_configure('q', '{\"completedRetentionSeconds\": 1}')", &[]).unwrap();
    for i in 0..3 {
        push(&mut admin, "q", "p", json!(i));
    }
    assert_eq!(pop_auto(&mut admin, "q", Some("a"), 10).len(), 3);
    let mut b = open_tx(&db);
    let r = b.query_one("SELECT message_id, lease_id, payload FROM queen_pop('q', 'b', batch => 1)", &[]).unwrap();
    assert_eq!(r.get::<_, Value>(2), json!(0));
    thread::sleep(Duration::from_millis(1100)); // every message older than completedRetentionSeconds
    let report: Value = admin.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["completed_retention_deleted"], json!(0), "{report}");
    assert_eq!(report["completed_retention_deferred"], json!(1), "{report}");
    b.batch_execute("COMMIT").unwrap();
    let ok: bool = b
        .query_one("SELECT success FROM queen_ack($1, $2)", &[&r.get::<_, uuid::Uuid>(0), &r.get::<_, uuid::Uuid>(1)])
        .unwrap()
        .get(0);
    assert!(ok, "B's ack of m0 found its message");
    assert_eq!(pop_auto(&mut b, "q", Some("b"), 10), vec![json!(1), json!(2)]);
    let report: Value = admin.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["completed_retention_deleted"], json!(3), "{report}");
}

/// Item 8: a push open across queen_delete_queue goes with the queue: the delete waits for it,
/// and nothing of the queue is left. A delete that waits longer than its bound fails (55P03)
/// and changes nothing.
#[test]
fn a_push_open_across_a_delete_goes_with_the_queue() {
    let db = TestDb::new("push_across_delete");
    let mut admin = db.connect();
    push(&mut admin, "q", "P", json!(1));
    let id = queue_id(&mut admin, "q");
    let mut t1 = open_tx(&db);
    push(&mut t1, "q", "P", json!(2));
    // Bounded: with the push still open, a delete that may wait 1 s fails, changing nothing.
    let mut d = db.connect();
    d.batch_execute("SET queen.lock_wait_seconds = 1").unwrap();
    let e = d.query_one("SELECT queen_delete_queue('q')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "55P03", "{e}");
    d.batch_execute("RESET queen.lock_wait_seconds").unwrap();
    let d_pid = pid(&mut d);
    let h = thread::spawn(move || d.query_one("SELECT queen_delete_queue('q')", &[]).unwrap().get::<_, bool>(0));
    await_lock_wait(&mut admin, d_pid);
    t1.batch_execute("COMMIT").unwrap();
    assert!(h.join().unwrap());
    assert_eq!(rows_of(&mut admin, id), 0, "rows of the deleted queue are left");
    // The queue comes back empty, and works.
    push(&mut admin, "q", "P", json!(3));
    assert_eq!(pop_auto(&mut admin, "q", Some("g"), 10), vec![json!(3)]);
}

/// Item 9: a first pop open across queen_delete_queue: the delete waits for it and removes its
/// subscription, cursor and lease with the rest; the next queue of that name starts clean (no
/// stale lease holding its partition, no old attempt count).
#[test]
fn a_first_pop_open_across_a_delete_does_not_haunt_the_new_queue() {
    let db = TestDb::new("first_pop_across_delete");
    let mut admin = db.connect();
    admin.execute("SELECT queen_configure('q', '{\"leaseTime\": 300}')", &[]).unwrap();
    push(&mut admin, "q", "P", json!(1));
    let id = queue_id(&mut admin, "q");
    let mut t1 = open_tx(&db);
    assert_eq!(t1.query("SELECT * FROM queen_pop('q', 'g')", &[]).unwrap().len(), 1);
    let mut d = db.connect();
    let d_pid = pid(&mut d);
    let h = thread::spawn(move || d.query_one("SELECT queen_delete_queue('q')", &[]).unwrap().get::<_, bool>(0));
    await_lock_wait(&mut admin, d_pid);
    t1.batch_execute("COMMIT").unwrap();
    assert!(h.join().unwrap());
    assert_eq!(rows_of(&mut admin, id), 0, "the first pop's rows outlived the delete");
    push(&mut admin, "q", "P", json!(2));
    let rows = admin.query("SELECT payload, attempt FROM queen_pop('q', 'g')", &[]).unwrap();
    assert_eq!(rows.len(), 1, "a stale lease holds the new queue's partition");
    assert_eq!(rows[0].get::<_, Value>(0), json!(2));
    assert_eq!(rows[0].get::<_, i32>(1), 1);
}

/// Item 10: the queue's count goes with it: queue_stats of the re-created queue counts what is
/// stored.
#[test]
fn queue_stats_counts_a_recreated_queue_afresh() {
    let db = TestDb::new("recreated_count");
    let mut admin = db.connect();
    for i in 0..5 {
        push(&mut admin, "q", "P", json!(i));
    }
    admin.query_one("SELECT queen_maintain()", &[]).unwrap();
    assert!(admin.query_one("SELECT queen_delete_queue('q')", &[]).unwrap().get::<_, bool>(0));
    push(&mut admin, "q", "P", json!(5));
    admin.query_one("SELECT queen_maintain()", &[]).unwrap();
    assert_eq!(count(&mut admin, "SELECT messages FROM queen.queue_stats WHERE queue = 'q'"), 1);
}

/// Item 11: queen_delete_group racing an open `dlq` ack: the delete waits for the ack's row and
/// removes the dead letter it filed; the group subscribed again inherits nothing.
#[test]
fn a_dead_letter_filed_by_an_open_ack_goes_with_its_group() {
    let db = TestDb::new("dlq_across_delete_group");
    let mut admin = db.connect();
    push(&mut admin, "q", "P", json!(1));
    let r = admin.query_one("SELECT message_id, lease_id FROM queen_pop('q', 'g')", &[]).unwrap();
    let mut t1 = open_tx(&db);
    let filed: bool = t1
        .query_one(
            "SELECT dead_lettered FROM queen_ack($1, $2, 'dlq')",
            &[&r.get::<_, uuid::Uuid>(0), &r.get::<_, uuid::Uuid>(1)],
        )
        .unwrap()
        .get(0);
    assert!(filed);
    let mut d = db.connect();
    let d_pid = pid(&mut d);
    let h = thread::spawn(move || d.query_one("SELECT queen_delete_group('g', 'q')", &[]).unwrap().get::<_, i32>(0));
    await_lock_wait(&mut admin, d_pid);
    t1.batch_execute("COMMIT").unwrap();
    assert_eq!(h.join().unwrap(), 1);
    assert_eq!(count(&mut admin, "SELECT count(*) FROM queen.dead_letters"), 0, "the dead letter outlived its group");
    assert_eq!(count(&mut admin, "SELECT count(*) FROM queen.ready WHERE consumer_group = 'g'"), 0);
    assert_eq!(count(&mut admin, "SELECT dead_letters FROM queen.queue_stats WHERE queue = 'q'"), 0);
}

/// Item 12: retention leaves the messages of an active lease to their holder: its acks find
/// them, the last one releases the lease, and the partition goes on. Retention takes them once
/// the lease has ended.
#[test]
fn retention_never_strands_an_active_lease() {
    let db = TestDb::new("retention_in_lease");
    let mut admin = db.connect();
    admin.execute("SELECT queen_configure('q', '{\"retentionSeconds\": 1}')", &[]).unwrap();
    push(&mut admin, "q", "P", json!(1));
    push(&mut admin, "q", "P", json!(2));
    let rows = admin.query("SELECT message_id, lease_id FROM queen_pop('q', 'g', batch => 2)", &[]).unwrap();
    assert_eq!(rows.len(), 2);
    thread::sleep(Duration::from_millis(1100)); // both older than retentionSeconds
    let report: Value = admin.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["retention_deleted"], json!(0), "retention deleted inside an active lease: {report}");
    let mut released = false;
    for r in &rows {
        let a = admin
            .query_one(
                "SELECT success, lease_released FROM queen_ack($1, $2)",
                &[&r.get::<_, uuid::Uuid>(0), &r.get::<_, uuid::Uuid>(1)],
            )
            .unwrap();
        assert!(a.get::<_, bool>(0), "an ack of the lease found nothing");
        released = a.get(1);
    }
    assert!(released, "the lease's last ack released it");
    push(&mut admin, "q", "P", json!(3));
    assert_eq!(pop_auto(&mut admin, "q", Some("g"), 10), vec![json!(3)], "the partition stalls");
    let report: Value = admin.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["retention_deleted"], json!(2), "{report}");
}

/// Item 14: a batch ack of a lease over two partitions, one released by a `failed` ack and one
/// run out, hears for each entry what a single ack of it hears: 'lease not held' and 'lease
/// expired' — by the batch's fast path (one lease) and by the general path alike.
#[test]
fn a_batch_ack_gives_each_entry_the_reason_a_single_ack_gives() {
    let db = TestDb::new("batch_reasons");
    let mut admin = db.connect();
    for p in ["A", "B"] {
        push(&mut admin, "q", p, json!(format!("{p}1")));
        push(&mut admin, "q", p, json!(format!("{p}2")));
    }
    let rows = admin
        .query(
            "SELECT message_id, lease_id, partition FROM queen_pop('q', 'g', batch => 4, partitions => 2, lease_seconds => 1)",
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), 4);
    let lease: uuid::Uuid = rows[0].get(1);
    let first = rows.iter().position(|r| r.get::<_, String>(2) == "A").unwrap();
    let a1: uuid::Uuid = rows[first].get(0);
    let a2: uuid::Uuid = rows[first + 1].get(0);
    let b2: uuid::Uuid = rows.iter().filter(|r| r.get::<_, String>(2) == "B").nth(1).unwrap().get(0);
    // A: released by a failed ack of its first message.
    let ok: bool = admin.query_one("SELECT success FROM queen_ack($1, $2, 'failed')", &[&a1, &lease]).unwrap().get(0);
    assert!(ok);
    // B: runs out.
    thread::sleep(Duration::from_millis(1100));
    let single = |c: &mut Client, m: uuid::Uuid| -> Option<String> {
        let mut tx = c.transaction().unwrap();
        let e = tx.query_one("SELECT error FROM queen_ack($1, $2)", &[&m, &lease]).unwrap().get(0);
        tx.rollback().unwrap();
        e
    };
    let (sa, sb) = (single(&mut admin, a2), single(&mut admin, b2));
    assert_eq!((sa.as_deref(), sb.as_deref()), (Some("lease not held"), Some("lease expired")));
    for group in [Value::Null, json!("g")] {
        // With and without the group named: the fast path (one lease, one group or none) and,
        // with a third entry of another shape, the general path.
        for general in [false, true] {
            let mut arr = vec![
                json!({"messageId": a2.to_string(), "leaseId": lease.to_string(), "consumerGroup": group}),
                json!({"messageId": b2.to_string(), "leaseId": lease.to_string(), "consumerGroup": group}),
            ];
            if general {
                arr.push(json!({"messageId": uuid::Uuid::nil().to_string(), "leaseId": null}));
            }
            let mut tx = admin.transaction().unwrap();
            let got: Vec<Option<String>> = tx
                .query("SELECT error FROM queen_ack($1::jsonb) ORDER BY idx", &[&Value::Array(arr)])
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            tx.rollback().unwrap();
            assert_eq!(got[0], sa, "group {group}, general {general}");
            assert_eq!(got[1], sb, "group {group}, general {general}");
        }
    }
}

/// Item 12, the window the pass cannot see: retention deletes messages of a lease whose pop had
/// not committed yet. An ack under the lease counts them finished: the lease is released when
/// the rest is acked — or at once, when nothing of it is left — and the partition goes on.
#[test]
fn a_lease_whose_messages_retention_took_is_released_by_its_acks() {
    let db = TestDb::new("retention_uncommitted_lease");
    let mut admin = db.connect();
    admin.execute("SELECT queen_configure('q', '{\"retentionSeconds\": 1, \"leaseTime\": 300}')", &[]).unwrap();
    // Part of the batch gone: m1 old enough, m2 not.
    push(&mut admin, "q", "P", json!(1));
    thread::sleep(Duration::from_millis(1100));
    push(&mut admin, "q", "P", json!(2));
    let mut t1 = open_tx(&db);
    let rows = t1.query("SELECT message_id, lease_id FROM queen_pop('q', 'g', batch => 2)", &[]).unwrap();
    assert_eq!(rows.len(), 2);
    let report: Value = admin.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["retention_deleted"], json!(1), "{report}");
    t1.batch_execute("COMMIT").unwrap();
    let (m2, lease): (uuid::Uuid, uuid::Uuid) = (rows[1].get(0), rows[1].get(1));
    let r = admin.query_one("SELECT success, lease_released FROM queen_ack($1, $2)", &[&m2, &lease]).unwrap();
    assert!(r.get::<_, bool>(0));
    assert!(r.get::<_, bool>(1), "the lease outlived its batch");
    // All of the batch gone.
    push(&mut admin, "q", "P", json!(3));
    thread::sleep(Duration::from_millis(1100));
    let mut t1 = open_tx(&db);
    let rows = t1.query("SELECT message_id, lease_id FROM queen_pop('q', 'g', batch => 2)", &[]).unwrap();
    assert_eq!(rows.len(), 1);
    let report: Value = admin.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["retention_deleted"], json!(2), "m2 (acked) and m3 (leased, not committed): {report}");
    t1.batch_execute("COMMIT").unwrap();
    let (m3, lease): (uuid::Uuid, uuid::Uuid) = (rows[0].get(0), rows[0].get(1));
    let r = admin.query_one("SELECT error, lease_released FROM queen_ack($1, $2)", &[&m3, &lease]).unwrap();
    assert_eq!(r.get::<_, Option<String>>(0).as_deref(), Some("message not found"));
    assert!(r.get::<_, bool>(1), "a lease with nothing left stalls its partition");
    push(&mut admin, "q", "P", json!(4));
    assert_eq!(pop_auto(&mut admin, "q", Some("g"), 10), vec![json!(4)]);
}

/// Item 13: a message waits from its push's commit (docs/api.md, "Max wait"). A push held open
/// longer than maxWaitTimeSeconds — seen running by a pass of another connection and by a pass
/// inside its own transaction — is not a dead letter when it commits; it is one once a pass
/// that saw it committed is maxWaitTimeSeconds old.
#[test]
fn max_wait_counts_from_the_commit_of_the_push() {
    let db = TestDb::new("max_wait_commit");
    let mut admin = db.connect();
    admin.execute("SELECT queen_configure('q', '{\"maxWaitTimeSeconds\": 1}')", &[]).unwrap();
    assert!(admin.query("SELECT * FROM queen_pop('q', 'g')", &[]).unwrap().is_empty(), "g subscribes");
    let mut t = open_tx(&db);
    push(&mut t, "q", "P", json!("long"));
    admin.query_one("SELECT queen_maintain()", &[]).unwrap();
    let report: Value = t.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["max_wait_dead_lettered"], json!(0), "{report}");
    thread::sleep(Duration::from_millis(1100)); // the push is older than max wait ...
    t.batch_execute("COMMIT").unwrap(); // ... when it commits
    let report: Value = admin.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["max_wait_dead_lettered"], json!(0), "filed the moment it committed: {report}");
    assert_eq!(count(&mut admin, "SELECT count(*) FROM queen.dead_letters_view"), 0);
    thread::sleep(Duration::from_millis(1100)); // committed for longer than max wait
    let report: Value = admin.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["max_wait_dead_lettered"], json!(1), "{report}");
    let dl: (Value, String, i32) = admin
        .query_one("SELECT payload, error, attempts FROM queen.dead_letters_view", &[])
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .unwrap();
    assert_eq!(dl, (json!("long"), "max wait time exceeded".to_string(), 1));
    // The points passes keep stay few: one per second of age here (src/max_wait.rs).
    for _ in 0..50 {
        admin.query_one("SELECT queen_maintain()", &[]).unwrap();
    }
    let points = count(&mut admin, "SELECT count(*) FROM queen.visibility_points");
    assert!((1..=4).contains(&points), "{points} visibility points kept");
}

/// Suspected in issue 21: the max-wait pass replacing an expired lease charged nothing. What
/// 0.2.0 did is worse: it left every row with a lease, expired or not, alone — with no consumer
/// popping, the message waited past max wait for ever. The pass now ends the expired lease as
/// a pop would (semantics §5) and files the message, its attempts counting the expiry.
#[test]
fn max_wait_files_a_message_under_an_expired_lease_and_charges_the_expiry() {
    let db = TestDb::new("max_wait_expired");
    let mut admin = db.connect();
    admin.execute("SELECT queen_configure('q', '{\"maxWaitTimeSeconds\": 1, \"leaseTime\": 1}')", &[]).unwrap();
    push(&mut admin, "q", "P", json!("m"));
    admin.query_one("SELECT queen_maintain()", &[]).unwrap(); // a pass sees it committed
    let got = admin.query("SELECT attempt FROM queen_pop('q', 'g')", &[]).unwrap();
    assert_eq!(got.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>(), vec![1]);
    thread::sleep(Duration::from_millis(1100)); // the lease expires; the message waited
    let report: Value = admin.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["max_wait_dead_lettered"], json!(1), "{report}");
    let dl: (String, i32) = admin
        .query_one("SELECT error, attempts FROM queen.dead_letters_view", &[])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(dl, ("max wait time exceeded".to_string(), 2), "delivered once, its lease expired once");
}

/// Suspected in issue 21: `retired_partitions` forgotten after a day while a push into the
/// retired partition is still open. The push saw the registry row before maintenance removed
/// it; the retired entry is what brings the partition back when the push commits. It is kept
/// while any push of the queue is open (a day passes here by moving the entry's time back).
#[test]
fn a_retired_partition_is_remembered_while_a_push_into_it_is_open() {
    let db = TestDb::new("retired_open_push");
    let mut admin = db.connect();
    admin.batch_execute("SET queen.partition_idle_seconds = 0").unwrap();
    push(&mut admin, "q", "stays", json!(0));
    push(&mut admin, "q", "gone", json!(1));
    assert_eq!(pop_auto(&mut admin, "q", Some("g"), 10).len() + pop_auto(&mut admin, "q", Some("g"), 10).len(), 2);
    admin.execute("DELETE FROM queen.messages WHERE partition = 'gone'", &[]).unwrap();
    let mut t = open_tx(&db);
    push(&mut t, "q", "gone", json!("late")); // the registry row is still there
    thread::sleep(Duration::from_millis(10));
    let report: Value = admin.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["partitions_removed"], json!(1), "{report}");
    admin.execute("UPDATE queen.retired_partitions SET retired_at = retired_at - interval '2 days'", &[]).unwrap();
    admin.query_one("SELECT queen_maintain()", &[]).unwrap();
    assert_eq!(count(&mut admin, "SELECT count(*) FROM queen.retired_partitions"), 1, "forgotten under an open push");
    t.batch_execute("COMMIT").unwrap();
    let report: Value = admin.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["partitions_restored"], json!(1), "{report}");
    assert_eq!(count(&mut admin, "SELECT count(*) FROM queen.retired_partitions"), 0);
    assert_eq!(pop_auto(&mut admin, "q", Some("g"), 10), vec![json!("late")]);
    // With no push open, a day-old entry goes.
    admin.execute("DELETE FROM queen.messages WHERE partition = 'gone'", &[]).unwrap();
    admin.query_one("SELECT queen_maintain()", &[]).unwrap();
    admin.execute("UPDATE queen.retired_partitions SET retired_at = retired_at - interval '2 days'", &[]).unwrap();
    admin.query_one("SELECT queen_maintain()", &[]).unwrap();
    assert_eq!(count(&mut admin, "SELECT count(*) FROM queen.retired_partitions"), 0);
}

/// Suspected in issue 21: a renew and a batch ack of one lease over two partitions locking its
/// cursor rows in different orders. Reproduced on 0.3.0: the ack waits for partition b's row
/// (held by a third transaction) holding nothing; the renew locked a first (the table's order)
/// and queues behind it for b; when b is free the ack takes it and waits for a: 40P01 rolls
/// one back. Both now lock in partition order, and both go through.
#[test]
fn a_renew_and_a_batch_ack_of_one_lease_never_deadlock() {
    let db = TestDb::new("renew_ack_order");
    let mut admin = db.connect();
    push(&mut admin, "q", "a", json!(1));
    push(&mut admin, "q", "b", json!(2));
    let rows = admin
        .query("SELECT message_id, lease_id, partition_id FROM queen_pop('q', 'g', batch => 10, partitions => 2)", &[])
        .unwrap();
    assert_eq!(rows.len(), 2);
    let lease: uuid::Uuid = rows[0].get(1);
    let mut ids: Vec<(uuid::Uuid, uuid::Uuid)> = rows.iter().map(|r| (r.get(2), r.get(0))).collect();
    ids.sort();
    // The precondition that made 0.3.0 deadlock: the rows' physical order is not partition order
    // (the first partition's row written again after the other's, in the heap and its indexes).
    admin
        .execute(
            "WITH d AS (DELETE FROM queen.cursors WHERE partition_id = $1 RETURNING *) INSERT INTO queen.cursors SELECT * FROM d",
            &[&ids[0].0],
        )
        .unwrap();
    let physical: Vec<uuid::Uuid> = admin
        .query("SELECT partition_id FROM queen.cursors ORDER BY ctid", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(physical, vec![ids[1].0, ids[0].0], "the table's order is not partition order");
    let mut holder = open_tx(&db);
    holder.execute("SELECT 1 FROM queen.cursors WHERE partition_id = $1 FOR UPDATE", &[&ids[0].0]).unwrap();
    let mut acker = open_tx(&db);
    let acker_pid = pid(&mut acker);
    let (m0, m1, l) = (ids[0].1.to_string(), ids[1].1.to_string(), lease.to_string());
    let entries = json!([{"messageId": m0, "leaseId": l, "status": "completed"},
                         {"messageId": m1, "leaseId": l, "status": "completed"}]);
    let ack = thread::spawn(move || {
        let n = acker.query("SELECT * FROM queen_ack($1) WHERE success", &[&entries]).map(|r| r.len());
        n.and_then(|n| acker.batch_execute("COMMIT").map(|_| n)).map_err(|e| sqlstate(&e))
    });
    await_lock_wait(&mut admin, acker_pid);
    let mut renewer = open_tx(&db);
    let renewer_pid = pid(&mut renewer);
    let renew = thread::spawn(move || {
        let r = renewer.query_one("SELECT queen_renew($1) IS NOT NULL", &[&lease]).map(|r| r.get::<_, bool>(0));
        r.and_then(|r| renewer.batch_execute("COMMIT").map(|_| r)).map_err(|e| sqlstate(&e))
    });
    await_lock_wait(&mut admin, renewer_pid);
    holder.batch_execute("COMMIT").unwrap();
    assert_eq!(ack.join().unwrap(), Ok(2), "the batch ack");
    assert!(renew.join().unwrap().is_ok(), "the renew (after the ack: the lease is gone, NULL)");
}
