//! queen's own locks over real connections (docs/design.md, "Locks"): every call takes them in
//! one order — the queue's, the group's, then rows — so no call waits for a delete that waits
//! for it (no 40P01 from a queen call); a delete takes all of its locks or none; a lock is keyed
//! by the queue and the group, never a name alone or a hash another tenant can collide with;
//! and a timer's firing never waits for a client.

use postgres::Client;
use queen_integration_tests::{await_lock_wait, await_lock_wait_or_pause, open_tx, push, sqlstate, TestDb};
use serde_json::{json, Value};
use std::thread;
use std::time::{Duration, Instant};

fn pid(c: &mut Client) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0)
}

/// What a call came to: its value, or the SQLSTATE and message of its error.
type Outcome<T> = Result<T, String>;

fn outcome<T>(r: Result<T, postgres::Error>) -> Outcome<T> {
    r.map_err(|e| format!("{} {}", sqlstate(&e), e.as_db_error().map(|d| d.message()).unwrap_or("")))
}

/// Pop one message of `queue` for `group` (a lease): its message and lease ids.
fn pop_one(c: &mut Client, queue: &str, group: &str) -> (uuid::Uuid, uuid::Uuid) {
    let r = c.query_one("SELECT message_id, lease_id FROM queen_pop($1, $2)", &[&queue, &group]).unwrap();
    (r.get(0), r.get(1))
}

/// The worker's loop, "ack the last batch, pop the next", in one transaction, with a delete of
/// the group arriving between the two: the delete waits for the transaction (the ack took the
/// group's lock before its row), the pop goes on, and once the transaction commits the delete
/// does too. 0.5.0: the delete held the group's lock and waited for the ack's row, the pop
/// waited for the delete: 40P01.
#[test]
fn an_ack_then_a_pop_never_deadlocks_with_a_delete_of_the_group() {
    let db = TestDb::new("ack_pop_delete_group");
    let mut admin = db.connect();
    for i in 0..2 {
        push(&mut admin, "q", "P", json!(i));
    }
    let (m, lease) = pop_one(&mut admin, "q", "g");
    let mut w = open_tx(&db);
    let acked: bool = w.query_one("SELECT success FROM queen_ack($1, $2)", &[&m, &lease]).unwrap().get(0);
    assert!(acked);
    let mut d = db.connect();
    let d_pid = pid(&mut d);
    let h = thread::spawn(move || {
        outcome(d.query_one("SELECT queen_delete_group('g', 'q')", &[])).map(|r| r.get::<_, i32>(0))
    });
    await_lock_wait(&mut admin, d_pid);
    let next = outcome(w.query("SELECT payload FROM queen_pop('q', 'g')", &[]));
    let popped: Vec<Value> = next.expect("the worker's next pop").iter().map(|r| r.get(0)).collect();
    assert_eq!(popped, vec![json!(1)]);
    w.batch_execute("COMMIT").unwrap();
    assert_eq!(h.join().unwrap(), Ok(1), "the delete");
    let left: i64 = admin.query_one("SELECT count(*) FROM queen.cursors", &[]).unwrap().get(0);
    assert_eq!(left, 0, "the delete saw what the transaction committed");
}

/// The same with an ack by lease (`queen_ack_lease`) and a batch ack, each followed by a pop,
/// and with an ack then a push against a delete of the queue.
#[test]
fn every_kind_of_ack_then_a_write_never_deadlocks_with_a_delete() {
    let db = TestDb::new("ack_write_delete");
    let mut admin = db.connect();
    type Ack = fn(&mut Client, uuid::Uuid, uuid::Uuid);
    let by_lease: Ack = |c, _, lease| {
        c.query("SELECT * FROM queen_ack_lease($1, 'completed')", &[&lease]).unwrap();
    };
    let by_batch: Ack = |c, m, lease| {
        let batch = json!([{"messageId": m.to_string(), "leaseId": lease.to_string(), "status": "completed"}]);
        c.query("SELECT * FROM queen_ack($1::jsonb)", &[&batch]).unwrap();
    };
    let by_id: Ack = |c, m, lease| {
        c.query("SELECT * FROM queen_ack($1, $2)", &[&m, &lease]).unwrap();
    };
    for (what, ack) in [("queen_ack_lease", by_lease), ("a batch ack", by_batch), ("an ack by id", by_id)] {
        for delete in ["queen_delete_group('g', 'q')", "queen_delete_queue('q')"] {
            for i in 0..2 {
                push(&mut admin, "q", "P", json!(i));
            }
            let (m, lease) = pop_one(&mut admin, "q", "g");
            let mut w = open_tx(&db);
            ack(&mut w, m, lease);
            let mut d = db.connect();
            let d_pid = pid(&mut d);
            let sql = format!("SELECT {delete}::text");
            let h = thread::spawn(move || outcome(d.query_one(sql.as_str(), &[])).map(|r| r.get::<_, String>(0)));
            await_lock_wait(&mut admin, d_pid);
            // The next write of the transaction: a pop, and a push.
            let popped = outcome(w.query("SELECT * FROM queen_pop('q', 'g')", &[]));
            assert!(popped.is_ok(), "{what}, then a pop, against {delete}: {popped:?}");
            let pushed = outcome(w.query("SELECT * FROM queen_push('q', '2'::jsonb)", &[]));
            assert!(pushed.is_ok(), "{what}, then a push, against {delete}: {pushed:?}");
            w.batch_execute("COMMIT").unwrap();
            let deleted = h.join().unwrap();
            assert!(deleted.is_ok(), "{what}: {delete} failed: {deleted:?}");
            admin.query("SELECT queen_delete_queue('q')", &[]).unwrap();
        }
    }
}

/// A delete waits for what it must, boundedly, and holds nothing of its own while it waits: a
/// delete of the group on every queue, open in one session, holds back the group's pops on
/// every queue; one that cannot have its locks within its bound fails with 55P03 and changes
/// nothing.
#[test]
fn a_delete_of_a_group_everywhere_waits_boundedly_and_changes_nothing_when_it_cannot() {
    let db = TestDb::new("delete_everywhere");
    let mut admin = db.connect();
    for q in ["a", "b"] {
        push(&mut admin, q, "P", json!(q));
    }
    let mut w = open_tx(&db);
    assert_eq!(w.query("SELECT * FROM queen_pop('b', 'g')", &[]).unwrap().len(), 1);
    let mut d = db.connect();
    d.batch_execute("SET queen.lock_wait_seconds = 1").unwrap();
    let t0 = Instant::now();
    let e = d.query_one("SELECT queen_delete_group('g')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "55P03", "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5), "the bound: {:?}", t0.elapsed());
    let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
    assert!(message.contains("group \"g\""), "{message}");
    w.batch_execute("COMMIT").unwrap();
    let subscribed: i64 = admin.query_one("SELECT count(*) FROM queen.subscriptions", &[]).unwrap().get(0);
    assert_eq!(subscribed, 1, "the failed delete changed something");
    // Now it goes through, on every queue.
    assert_eq!(d.query_one("SELECT queen_delete_group('g')", &[]).unwrap().get::<_, i32>(0), 1);
}

/// A role with `configure` on its own queue, holding `queen_delete_group` open there, blocks no
/// pop of that group name on another queue, nor (deleting queue mode) any queue-mode pop
/// elsewhere. 0.5.0: the group's lock was keyed by its name alone, and every such pop waited
/// 60 s and failed with 55P03.
#[test]
fn a_tenants_open_delete_of_a_group_blocks_no_other_queue() {
    let db = TestDb::new("tenant_delete_group");
    let mut admin = db.connect();
    let tenant = db.role("tenant");
    admin.query("SELECT queen_grant('its_queue', $1::text::regrole, ARRAY['configure', 'pop'])", &[&tenant]).unwrap();
    push(&mut admin, "its_queue", "P", json!(0));
    push(&mut admin, "other", "P", json!(1));
    push(&mut admin, "other", "P", json!(2));
    for group in [Some("billing"), None] {
        let mut t = db.connect_as(&tenant);
        t.batch_execute("BEGIN").unwrap();
        t.query("SELECT queen_delete_group($1, 'its_queue')", &[&group]).unwrap();
        let mut victim = db.connect();
        victim.batch_execute("SET lock_timeout = '2s'").unwrap();
        let t0 = Instant::now();
        let got = outcome(victim.query("SELECT payload FROM queen_pop('other', $1, auto_ack => true)", &[&group]));
        assert!(got.is_ok(), "a pop of {group:?} on another queue: {got:?}");
        assert!(t0.elapsed() < Duration::from_secs(1), "a pop of {group:?} waited {:?}", t0.elapsed());
        assert_eq!(got.unwrap().len(), 1);
        t.batch_execute("ROLLBACK").unwrap();
    }
}

/// 32-bit FNV-1a of a partition id and a group name, as 0.5.0 keyed a pop's visit of a pair.
fn fnv(h: u32, bytes: &[u8]) -> u32 {
    bytes.iter().fold(h, |h, b| (h ^ *b as u32).wrapping_mul(0x0100_0193))
}

/// A group name, `prefix` and six characters, whose 0.5.0 key for (`partition`, name) is
/// `target`: meet in the middle over FNV-1a, which steps back as easily as forward.
fn colliding_group(partition: uuid::Uuid, prefix: &str, target: u32) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let start = fnv(fnv(fnv(0x811c_9dc5, partition.as_bytes()), b"/"), prefix.as_bytes());
    let inverse: u32 = {
        // The inverse of FNV's prime mod 2^32 (Newton's iteration).
        let p: u32 = 0x0100_0193;
        let mut x: u32 = p;
        for _ in 0..5 {
            x = x.wrapping_mul(2u32.wrapping_sub(p.wrapping_mul(x)));
        }
        x
    };
    let triples =
        || ALPHABET.iter().flat_map(|a| ALPHABET.iter().flat_map(move |b| ALPHABET.iter().map(move |c| [*a, *b, *c])));
    let mut forward = std::collections::HashMap::new();
    for t in triples() {
        forward.insert(fnv(start, &t), t);
    }
    for t in triples() {
        // Back from the target over t (the last three bytes): the state before them.
        let before = t.iter().rev().fold(target, |h, b| h.wrapping_mul(inverse) ^ *b as u32);
        if let Some(f) = forward.get(&before) {
            let name = format!("{prefix}{}{}", String::from_utf8_lossy(f), String::from_utf8_lossy(&t));
            assert_eq!(fnv(fnv(fnv(0x811c_9dc5, partition.as_bytes()), b"/"), name.as_bytes()), target);
            return name;
        }
    }
    panic!("no colliding name found");
}

/// A tenant that may pop only its own queue pops it under a group name whose 0.5.0 lock key
/// collides with another tenant's (partition, group), and keeps its transaction open: the
/// other tenant's pops still find their partition. 0.5.0: the visit mark of the tenant's
/// partition was the victim's too, and the victim's pops delivered nothing (6 -> 0).
#[test]
fn a_tenant_cannot_hide_another_tenants_partition_by_a_colliding_name() {
    let db = TestDb::new("colliding_marks");
    let mut admin = db.connect();
    let tenant = db.role("tenant");
    admin.query("SELECT queen_grant('mine', $1::text::regrole, ARRAY['pop'])", &[&tenant]).unwrap();
    for i in 0..6 {
        push(&mut admin, "theirs", "vp", json!(i));
    }
    push(&mut admin, "mine", "tp", json!("mine"));
    let partition = |c: &mut Client, q: &str, p: &str| -> uuid::Uuid {
        c.query_one("SELECT partition_id FROM queen.partitions p JOIN queen.queues q USING (queue_id) WHERE q.name = $1 AND p.name = $2", &[&q, &p])
            .unwrap()
            .get(0)
    };
    let (victim, own) = (partition(&mut admin, "theirs", "vp"), partition(&mut admin, "mine", "tp"));
    let target = fnv(fnv(fnv(0x811c_9dc5, victim.as_bytes()), b"/"), b"workers");
    let name = colliding_group(own, "w", target);
    let mut t = db.connect_as(&tenant);
    t.batch_execute("BEGIN").unwrap();
    assert_eq!(t.query("SELECT * FROM queen_pop('mine', $1)", &[&name]).unwrap().len(), 1);
    let got =
        admin.query("SELECT payload FROM queen_pop('theirs', 'workers', batch => 10, auto_ack => true)", &[]).unwrap();
    assert_eq!(got.len(), 6, "the victim's partition was hidden");
    t.batch_execute("ROLLBACK").unwrap();
}

/// A timer due on a queue whose delete waits for an open ack: the firing takes the queue's lock
/// without waiting, leaves that queue's timers for later and fires the others at once; the
/// delete, once the ack commits, removes the timer. 0.5.0: the firing held the timer's row
/// and waited for the queue's lock, the delete then waited for the row: 40P01, and no timer of
/// any queue fired meanwhile.
#[test]
fn a_timer_due_on_a_queue_being_deleted_holds_back_no_one() {
    let db = TestDb::new("timer_delete");
    let mut admin = db.connect();
    push(&mut admin, "q", "P", json!(0));
    let (m, lease) = pop_one(&mut admin, "q", "g");
    admin.query("SELECT * FROM queen_schedule('q', 'k', '1'::jsonb, clock_timestamp())", &[]).unwrap();
    admin.query("SELECT * FROM queen_schedule('other', 'k', '2'::jsonb, clock_timestamp())", &[]).unwrap();
    let mut w = open_tx(&db);
    w.query("SELECT * FROM queen_ack($1, $2)", &[&m, &lease]).unwrap();
    let mut d = db.connect();
    let d_pid = pid(&mut d);
    let h =
        thread::spawn(move || outcome(d.query_one("SELECT queen_delete_queue('q')", &[])).map(|r| r.get::<_, bool>(0)));
    await_lock_wait(&mut admin, d_pid);
    let mut f = db.connect();
    f.batch_execute("SET statement_timeout = '20s'").unwrap();
    let f_pid = pid(&mut f);
    let fire = thread::spawn(move || {
        let t0 = Instant::now();
        (outcome(f.query_one("SELECT queen_maintain()", &[])).map(|r| r.get::<_, Value>(0)), t0.elapsed())
    });
    // The firing is done, or waits (0.5.0): the ack commits either way.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fire.is_finished() {
        let waiting: i64 = admin
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", &[&f_pid])
            .unwrap()
            .get(0);
        if waiting > 0 || Instant::now() > deadline {
            break;
        }
        thread::sleep(Duration::from_millis(5));
    }
    w.batch_execute("COMMIT").unwrap();
    let (fired, took) = fire.join().unwrap();
    let deleted = h.join().unwrap();
    assert_eq!(deleted, Ok(true), "the delete");
    let report = fired.expect("the firing");
    assert!(took < Duration::from_secs(2), "the firing waited {took:?}");
    assert_eq!(
        (report["timers_fired"].clone(), report["timers_deferred_queues"].clone()),
        (json!(1), json!(1)),
        "{report}"
    );
    let other: Vec<Value> = admin
        .query("SELECT payload FROM queen_pop('other', auto_ack => true)", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(other, vec![json!(2)]);
    let timers: i64 = admin.query_one("SELECT count(*) FROM queen.timers", &[]).unwrap().get(0);
    assert_eq!(timers, 0, "the delete removed the queue's timer");
}

/// A push-only role's open transaction that pushed the transaction id a due timer will push:
/// the firing waits for it only briefly (queen_maintain() here; the worker is tested in
/// wait_maintain.rs), leaves that timer for later with the reason, and fires the others.
/// 0.5.0: the firing waited for that transaction without bound.
#[test]
fn a_firing_waits_for_a_clients_push_only_briefly() {
    let db = TestDb::new("timer_stall");
    let mut admin = db.connect();
    let pusher = db.role("pusher");
    admin.query("SELECT queen_grant('q', $1::text::regrole, ARRAY['push'])", &[&pusher]).unwrap();
    let mut p = db.connect_as(&pusher);
    p.batch_execute("BEGIN").unwrap();
    p.query("SELECT * FROM queen_push('q', '1'::jsonb, partition => 'p', transaction_id => 'x')", &[]).unwrap();
    admin
        .query(
            "SELECT * FROM queen_schedule('q', 'k', '2'::jsonb, clock_timestamp(), partition => 'p', transaction_id => 'x')",
            &[],
        )
        .unwrap();
    admin.query("SELECT * FROM queen_schedule('other', 'k', '3'::jsonb, clock_timestamp())", &[]).unwrap();
    admin.batch_execute("SET statement_timeout = '20s'").unwrap();
    let t0 = Instant::now();
    let report: Value = admin.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert!(t0.elapsed() < Duration::from_secs(2), "the firing waited {:?}", t0.elapsed());
    assert_eq!((report["timers_fired"].clone(), report["timers_retried"].clone()), (json!(1), json!(1)), "{report}");
    let held = admin.query_one("SELECT attempts, last_error FROM queen_timers('q')", &[]).unwrap();
    assert_eq!(held.get::<_, i32>(0), 1);
    let why: String = held.get(1);
    assert!(why.contains("open transaction"), "{why}");
    // Once the client commits, the timer's message is a duplicate of its own: nothing more.
    p.batch_execute("COMMIT").unwrap();
    admin.query("UPDATE queen.timers SET deliver_at = clock_timestamp()", &[]).unwrap();
    let report: Value = admin.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["timers_fired"], json!(1), "{report}");
    let got: Vec<Value> = admin
        .query("SELECT payload FROM queen_pop('q', batch => 10, auto_ack => true)", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(got, vec![json!(1)]);
}

/// queen_maintain() in a client's transaction takes the shared locks of what it changes, as
/// every call does: its fold of a group's duplicate subscription rows, then a pop of the group
/// in the same transaction, against a delete of the group arriving between the two — the delete
/// waits for the transaction, never the transaction for the delete. (Before, the fold held the
/// rows without the group's lock: 40P01. Found by the explorer.)
#[test]
fn maintenance_in_a_transaction_then_a_pop_never_deadlocks_with_a_delete() {
    let db = TestDb::new("maintain_pop_delete");
    let mut admin = db.connect();
    push(&mut admin, "q", "P", json!(0));
    push(&mut admin, "q", "P", json!(1));
    // Two first pops at once: two subscription rows of the group, which a pass folds.
    let mut a = open_tx(&db);
    assert_eq!(a.query("SELECT * FROM queen_pop('q', 'g', auto_ack => true)", &[]).unwrap().len(), 1);
    let mut b = db.connect();
    b.query("SELECT * FROM queen_pop('q', 'g', auto_ack => true)", &[]).unwrap();
    a.batch_execute("COMMIT").unwrap();
    let subs: i64 = admin.query_one("SELECT count(*) FROM queen.subscriptions", &[]).unwrap().get(0);
    assert_eq!(subs, 2, "two first pops at once");
    let mut m = open_tx(&db);
    let report: Value = m.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["registry_rows_folded"], json!(1), "{report}");
    let mut d = db.connect();
    let d_pid = pid(&mut d);
    let h = thread::spawn(move || {
        outcome(d.query_one("SELECT queen_delete_group('g', 'q')", &[])).map(|r| r.get::<_, i32>(0))
    });
    await_lock_wait(&mut admin, d_pid);
    let popped = outcome(m.query("SELECT * FROM queen_pop('q', 'g', auto_ack => true)", &[]));
    assert!(popped.is_ok(), "the pop after the pass: {popped:?}");
    m.batch_execute("COMMIT").unwrap();
    assert!(h.join().unwrap().is_ok(), "the delete");
}

/// A delete in a transaction that has written queen's rows does not wait: it would hold those
/// rows while waiting, and a transaction it waits for could be waiting for them. Here a
/// transaction acks on queue q (holding the cursor row) and then deletes queue r, which another
/// transaction has written and which then acks the same message (waiting for that row): the
/// delete fails at once with 55P03, and the other transaction's ack goes on once the first
/// rolls back; nothing ends in 40P01 (the explorer found the circle: the delete waited for r's
/// writer, which waited for the row). A delete in a transaction of its own still waits for r's
/// writer, and then deletes r.
#[test]
fn a_delete_after_writes_in_its_transaction_never_waits() {
    let db = TestDb::new("delete_after_writes");
    let mut admin = db.connect();
    push(&mut admin, "q", "P", json!(0));
    push(&mut admin, "r", "P", json!("r"));
    let (m, lease) = pop_one(&mut admin, "q", "g");
    let mut t1 = open_tx(&db);
    let acked: bool = t1.query_one("SELECT success FROM queen_ack($1, $2)", &[&m, &lease]).unwrap().get(0);
    assert!(acked);
    let mut t2 = open_tx(&db);
    t2.query("SELECT * FROM queen_push('r', '1', 'P')", &[]).unwrap();
    t2.batch_execute("SET lock_timeout = '10s'").unwrap();
    let t2_pid = pid(&mut t2);
    let h = thread::spawn(move || {
        let acked =
            outcome(t2.query_one("SELECT success FROM queen_ack($1, $2)", &[&m, &lease])).map(|r| r.get::<_, bool>(0));
        let _ = t2.batch_execute("COMMIT");
        acked
    });
    await_lock_wait(&mut admin, t2_pid);
    let started = Instant::now();
    let e = t1.query_one("SELECT queen_delete_queue('r')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "55P03", "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(2), "refused at once: {:?}", started.elapsed());
    assert!(e.as_db_error().unwrap().message().contains("transaction of its own"), "{e:?}");
    t1.batch_execute("ROLLBACK").unwrap();
    assert_eq!(h.join().unwrap(), Ok(true), "the other transaction's ack, once the first rolled back");

    // A delete of its own waits for r's writer, then deletes r.
    let mut t3 = open_tx(&db);
    t3.query("SELECT * FROM queen_push('r', '2', 'P')", &[]).unwrap();
    let mut d = db.connect();
    let d_pid = pid(&mut d);
    let h =
        thread::spawn(move || outcome(d.query_one("SELECT queen_delete_queue('r')", &[])).map(|r| r.get::<_, bool>(0)));
    await_lock_wait(&mut admin, d_pid);
    t3.batch_execute("COMMIT").unwrap();
    assert_eq!(h.join().unwrap(), Ok(true));
}

/// Two messages in each of partitions "a" and "b" of queue q, group g subscribed before them,
/// the first of each filed as g's dead letter: the second ones' ids, the one in the partition
/// whose cursor row comes first in partition order first.
fn two_partitions_with_dead_letters(c: &mut Client) -> (uuid::Uuid, uuid::Uuid) {
    c.query("SELECT * FROM queen_pop('q', 'g')", &[]).unwrap();
    let mut later = Vec::new();
    for p in ["a", "b"] {
        let first = push(c, "q", p, json!([p, 1]));
        later.push((p, push(c, "q", p, json!([p, 2]))));
        let filed: bool =
            c.query_one("SELECT success FROM queen_ack($1, NULL, 'dlq', 'bad', 'g')", &[&first]).unwrap().get(0);
        assert!(filed);
    }
    let order: Vec<String> = c
        .query("SELECT name FROM queen.partitions WHERE name IN ('a', 'b') ORDER BY partition_id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let id = |p: &str| later.iter().find(|(n, _)| *n == p).unwrap().1;
    (id(&order[0]), id(&order[1]))
}

/// A seek, a replay and a purge lock the group's cursor rows in several partitions: all or
/// none, never holding some while they wait for others. A transaction acks the message of the
/// later partition (holding its row) while the call runs; the call takes nothing and tries
/// again; the transaction then acks the earlier partition's message — at once, not waiting for
/// the call — and commits; the call then succeeds. 0.5.0: the call locked the earlier row and
/// waited for the later one, the transaction's second ack waited for the call: 40P01. In a
/// transaction that has written queen's rows, the call does not try again: 55P03 at once.
#[test]
fn a_call_that_locks_a_groups_rows_takes_them_all_or_none() {
    let calls = [
        ("seek", "SELECT queen_seek('q', 'g')"),
        ("replay", "SELECT queen_replay_dead_letters('q', 'g')"),
        ("purge", "SELECT queen_purge_dead_letters('q', 'g')"),
    ];
    for (name, call) in calls {
        let db = TestDb::new(&format!("all_or_none_{name}"));
        let mut admin = db.connect();
        let (earlier, later) = two_partitions_with_dead_letters(&mut admin);
        let mut t = open_tx(&db);
        let ack = "SELECT success FROM queen_ack($1, NULL, 'completed', NULL, 'g')";
        assert!(t.query_one(ack, &[&later]).unwrap().get::<_, bool>(0));
        let mut r = db.connect();
        r.batch_execute("SET queen.lock_wait_seconds = 30").unwrap();
        let r_pid = pid(&mut r);
        let h = thread::spawn(move || outcome(r.query_one(call, &[])).map(|row| row.get::<_, i32>(0)));
        await_lock_wait_or_pause(&mut admin, r_pid);
        let started = Instant::now();
        let acked = outcome(t.query_one(ack, &[&earlier])).map(|row| row.get::<_, bool>(0));
        assert_eq!(acked, Ok(true), "{name}: the transaction's second ack");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{name}: not waiting for the call: {:?}",
            started.elapsed()
        );
        t.batch_execute("COMMIT").unwrap();
        let done = h.join().unwrap();
        assert!(done.is_ok(), "{name}: the call once the transaction committed: {done:?}");

        // In a transaction that wrote queen's rows: 55P03 at once while a row is held.
        let third = push(&mut admin, "q", "a", json!(["a", 3]));
        let dlq = "SELECT success FROM queen_ack($1, NULL, 'dlq', 'bad', 'g')";
        assert!(admin.query_one(dlq, &[&third]).unwrap().get::<_, bool>(0));
        let fourth = push(&mut admin, "q", "a", json!(["a", 4]));
        let mut t = open_tx(&db);
        assert!(t.query_one(ack, &[&fourth]).unwrap().get::<_, bool>(0));
        let mut w = open_tx(&db);
        w.query("SELECT * FROM queen_push('q', '1', 'c')", &[]).unwrap();
        let started = Instant::now();
        let e = w.query_one(call, &[]).unwrap_err();
        assert_eq!(sqlstate(&e), "55P03", "{name}: {e:?}");
        assert!(started.elapsed() < Duration::from_secs(2), "{name}: refused at once: {:?}", started.elapsed());
        assert!(e.as_db_error().unwrap().message().contains("transaction of its own"), "{name}: {e:?}");
    }
}
