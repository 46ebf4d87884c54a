//! semantics §3.2: what ends a wait. A waiting pop never sleeps out its `wait_ms` while a message is
//! deliverable: what another session causes ends the wait at once, what comes due by time
//! ends it within 100 ms of its due time. (Preloaded cluster; limits below are generous for a
//! loaded CI machine, and far below the 8 s the waits ask for.)

use postgres::Client;
use queen_integration_tests::{await_waiting, connect, waiter, TestDb};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn configure(c: &mut Client, queue: &str, options: Value) {
    c.execute("SELECT queen_configure($1, $2)", &[&queue, &options]).unwrap();
}

fn push(c: &mut Client, queue: &str, payload: Value) {
    c.execute("SELECT queen_push($1, $2)", &[&queue, &payload]).unwrap();
}

/// Start a waiting pop of group g on queue q and wait until it waits.
fn wait_on(db: &TestDb, c: &mut Client, sql: &'static str) -> std::thread::JoinHandle<(Vec<Value>, Duration)> {
    let (pid, h) = waiter(&db.name, sql);
    await_waiting(c, pid);
    std::thread::spawn(move || {
        let (rows, took) = h.join().unwrap();
        (rows.unwrap(), took)
    })
}

fn attempts(rows: &[Value]) -> Vec<i64> {
    rows.iter().map(|r| r["attempt"].as_i64().unwrap()).collect()
}

#[test]
fn a_retry_delay_ending_ends_the_wait() {
    let db = TestDb::new("wake_retry");
    let mut c = db.connect();
    configure(&mut c, "q", json!({"retryDelay": 1000}));
    push(&mut c, "q", json!(1));
    let m = c.query_one("SELECT message_id, lease_id FROM queen_pop('q', 'g')", &[]).unwrap();
    let failed_at = Instant::now();
    c.execute("SELECT queen_ack($1, $2, 'failed')", &[&m.get::<_, uuid::Uuid>(0), &m.get::<_, uuid::Uuid>(1)]).unwrap();
    let h = wait_on(&db, &mut c, "SELECT to_jsonb(m) FROM queen_pop('q', 'g', wait_ms => 8000) m");
    let (rows, _) = h.join().unwrap();
    let after = failed_at.elapsed();
    assert_eq!(attempts(&rows), vec![2]);
    assert!(
        after >= Duration::from_millis(990) && after < Duration::from_millis(2500),
        "returned {after:?} after the failure"
    );
}

#[test]
fn a_lease_expiring_ends_the_wait() {
    let db = TestDb::new("wake_lease");
    let mut c = db.connect();
    configure(&mut c, "q", json!({"leaseTime": 1}));
    push(&mut c, "q", json!(1));
    // (The clock starts before the pop: its lease runs from inside the call, which may take
    // tens of milliseconds in a fresh backend of a busy debug build.)
    let leased_at = Instant::now();
    c.execute("SELECT * FROM queen_pop('q', 'g')", &[]).unwrap();
    let h = wait_on(&db, &mut c, "SELECT to_jsonb(m) FROM queen_pop('q', 'g', wait_ms => 8000) m");
    let (rows, _) = h.join().unwrap();
    let after = leased_at.elapsed();
    assert_eq!(attempts(&rows), vec![2], "the expired lease counts as a failure");
    assert!(
        after >= Duration::from_millis(990) && after < Duration::from_millis(2500),
        "returned {after:?} after the pop"
    );
}

#[test]
fn delayed_processing_and_window_buffer_ending_end_the_wait() {
    for option in ["delayedProcessing", "windowBuffer"] {
        let db = TestDb::new("wake_delay");
        let mut c = db.connect();
        configure(&mut c, "q", json!({option: 1}));
        let h = wait_on(&db, &mut c, "SELECT to_jsonb(m) FROM queen_pop('q', 'g', wait_ms => 8000) m");
        let pushed_at = Instant::now();
        push(&mut c, "q", json!(1));
        let (rows, _) = h.join().unwrap();
        let after = pushed_at.elapsed();
        assert_eq!(rows.len(), 1, "{option}");
        assert!(after >= Duration::from_millis(990) && after < Duration::from_millis(2500), "{option}: {after:?}");
    }
}

/// What another session does ends the wait at once: an ack that gives the message back, a
/// popping transaction that rolls back, a prepared push committed.
#[test]
fn another_sessions_release_rollback_or_commit_prepared_ends_the_wait() {
    let db = TestDb::new("wake_session");
    let mut c = db.connect();
    configure(&mut c, "q", json!({"retryDelay": 0}));
    push(&mut c, "q", json!(1));

    // An ack releasing the lease ('retry').
    let m = c.query_one("SELECT message_id, lease_id FROM queen_pop('q', 'g')", &[]).unwrap();
    let h = wait_on(&db, &mut c, "SELECT to_jsonb(m) FROM queen_pop('q', 'g', wait_ms => 8000) m");
    let t0 = Instant::now();
    c.execute("SELECT queen_ack($1, $2, 'retry')", &[&m.get::<_, uuid::Uuid>(0), &m.get::<_, uuid::Uuid>(1)]).unwrap();
    let (rows, _) = h.join().unwrap();
    assert_eq!(rows.len(), 1);
    assert!(t0.elapsed() < Duration::from_millis(1000), "ack: {:?}", t0.elapsed());

    // A popping transaction rolling back (the waiter's group 'h' finds the partition held).
    let mut popper = connect(&db.name);
    popper.batch_execute("BEGIN").unwrap();
    assert_eq!(popper.query("SELECT * FROM queen_pop('q', 'h')", &[]).unwrap().len(), 1);
    let h = wait_on(&db, &mut c, "SELECT to_jsonb(m) FROM queen_pop('q', 'h', wait_ms => 8000) m");
    let t0 = Instant::now();
    popper.batch_execute("ROLLBACK").unwrap();
    let (rows, _) = h.join().unwrap();
    assert_eq!(rows.len(), 1);
    assert!(t0.elapsed() < Duration::from_millis(1000), "rollback: {:?}", t0.elapsed());

    // COMMIT PREPARED of a push, from a session other than the one that prepared it.
    let mut producer = connect(&db.name);
    producer.batch_execute("BEGIN").unwrap();
    producer.execute("SELECT queen_push('p', '\"prepared\"')", &[]).unwrap();
    producer.batch_execute(&format!("PREPARE TRANSACTION '{}_tx'", db.name)).unwrap();
    let h = wait_on(&db, &mut c, "SELECT to_jsonb(m) FROM queen_pop('p', 'g', wait_ms => 8000) m");
    let t0 = Instant::now();
    c.batch_execute(&format!("COMMIT PREPARED '{}_tx'", db.name)).unwrap();
    let (rows, _) = h.join().unwrap();
    assert_eq!(rows.len(), 1);
    assert!(t0.elapsed() < Duration::from_millis(1000), "commit prepared: {:?}", t0.elapsed());
}

/// Queues of the same name in two databases are two queues: a push in one wakes nobody in the
/// other, and queen.waiting_pops lists the waits of its own database.
#[test]
fn wakeups_and_waiting_pops_are_per_database() {
    let a = TestDb::new("wake_db_a");
    let b = TestDb::new("wake_db_b");
    let mut ca = a.connect();
    let mut cb = b.connect();
    let (pid, h) = waiter(&b.name, "SELECT to_jsonb(m) FROM queen_pop('q', 'g', wait_ms => 1500) m");
    await_waiting(&mut cb, pid);
    let seen_in_a: i64 = ca.query_one("SELECT count(*) FROM queen.waiting_pops", &[]).unwrap().get(0);
    assert_eq!(seen_in_a, 0, "database a lists b's waiter");
    push(&mut ca, "q", json!(1));
    std::thread::sleep(Duration::from_millis(300));
    let wakeups: i64 = cb.query_one("SELECT wakeups FROM queen.waiting_pops WHERE pid = $1", &[&pid]).unwrap().get(0);
    assert_eq!(wakeups, 0, "a push in database a woke a waiter in database b");
    let (rows, _) = h.join().unwrap();
    assert!(rows.unwrap().is_empty());
}

/// A push's commit tells the waiters it wakes which partition it pushed to (wait.rs): the woken
/// pop looks there first and, having delivered, returns without reading the queue's log — its
/// group's discovery point stays where it was. The next pop reads the log and delivers what
/// the same push put elsewhere; nothing is delivered twice.
#[test]
fn a_woken_pop_looks_first_where_the_push_went() {
    let db = TestDb::new("wake_hint");
    let mut c = db.connect();
    c.execute("SELECT queen_push('q', '\"old\"', 'a')", &[]).unwrap();
    let point = |c: &mut Client| -> Vec<(i64, i64)> {
        c.query("SELECT upto_txid, upto_seq FROM queen.discovery WHERE consumer_group = 'w' ORDER BY 1, 2", &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    };
    // Group w subscribes at 'new': its first look (before it sleeps) reads the log and finds
    // nothing for it.
    let (pid, h) = waiter(
        &db.name,
        "SELECT to_jsonb(m) FROM queen_pop('q', 'w', wait_ms => 8000, batch => 10, partitions => 5,
                                          auto_ack => true, subscription_mode => 'new') m",
    );
    await_waiting(&mut c, pid);
    // Registered before its first look: wait until it sleeps on its latch.
    let deadline = Instant::now() + Duration::from_secs(10);
    while c
        .query_one("SELECT wait_event_type IS DISTINCT FROM 'Extension' FROM pg_stat_activity WHERE pid = $1", &[&pid])
        .unwrap()
        .get::<_, bool>(0)
    {
        assert!(Instant::now() < deadline, "the pop never slept");
        std::thread::sleep(Duration::from_millis(2));
    }
    // One transaction: a message in partition b, then one in partition e (the last: the hint).
    c.query(
        "SELECT * FROM queen_push('[{\"queue\": \"q\", \"partition\": \"b\", \"payload\": \"b\"},
                                   {\"queue\": \"q\", \"partition\": \"e\", \"payload\": \"e\"}]')",
        &[],
    )
    .unwrap();
    let (rows, took) = h.join().unwrap();
    let rows = rows.unwrap();
    assert!(took < Duration::from_secs(4), "{took:?}");
    let got: Vec<&str> = rows.iter().map(|r| r["payload"].as_str().unwrap()).collect();
    assert_eq!(got, vec!["e"], "the woken pop returns what the push put where it points");
    // Its transaction's points (the look before the sleep wrote one) are all before the push.
    let pushed: (i64, i64) = c
        .query_one("SELECT txid, seq FROM queen.messages WHERE partition = 'b'", &[])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    let points = point(&mut c);
    assert!(!points.is_empty() && points.iter().all(|p| *p < pushed), "the woken pop read the log: {points:?}");
    // The next pops read it: b, once; e is not delivered again.
    let mut rest: Vec<String> = Vec::new();
    for _ in 0..3 {
        let more = c
            .query(
                "SELECT payload #>> '{}' FROM queen_pop('q', 'w', batch => 10, partitions => 5, auto_ack => true)",
                &[],
            )
            .unwrap();
        rest.extend(more.iter().map(|r| r.get::<_, String>(0)));
    }
    assert_eq!(rest, vec!["b"]);
}

/// How many times the queue log's index has been read in this database (statistics flushed
/// by `reader`'s last transaction, which called pg_stat_force_next_flush()).
fn log_reads(c: &mut Client) -> i64 {
    c.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
    c.query_one(
        "SELECT idx_scan FROM pg_stat_user_indexes WHERE schemaname = 'queen' AND indexrelname = 'messages_queue_log'",
        &[],
    )
    .unwrap()
    .get(0)
}

/// A pop of group g for `reader` (auto_ack), committed, its statistics flushed; how many rows.
fn empty_pop(reader: &mut Client) -> usize {
    let n = reader.query("SELECT * FROM queen_pop('q', 'g', auto_ack => true)", &[]).unwrap().len();
    reader.batch_execute("SELECT pg_stat_force_next_flush()").unwrap();
    n
}

/// Discovery (src/discovery.rs, "No scan when nothing was pushed"): once a committed pop read
/// the log to its end, the backend's next pops read no log until a push commits (here, also
/// by COMMIT PREPARED) or the subscription changes, and every push is still found by the next
/// pop. A pop that read the log in a transaction that rolled back leaves nothing to skip by.
#[test]
fn pops_read_no_log_while_nothing_is_pushed() {
    let db = TestDb::new("wake_idle_scan");
    let mut c = db.connect();
    let mut reader = db.connect();
    push(&mut c, "q", json!(1));
    assert_eq!(empty_pop(&mut reader), 1);
    assert_eq!(empty_pop(&mut reader), 0); // reads the log to its end
                                           // (What changes cached state anywhere in the cluster — other tests' configure, seeks —
                                           // makes the next pop read the log once more: a few tries.)
    let quiet = (0..5).any(|_| {
        let before = log_reads(&mut c);
        for _ in 0..10 {
            assert_eq!(empty_pop(&mut reader), 0);
        }
        log_reads(&mut c) == before
    });
    assert!(quiet, "ten pops with nothing pushed read the log, five times over");
    let before = log_reads(&mut c);
    // A push commits: the next pop reads the log, and finds it.
    push(&mut c, "q", json!(2));
    assert_eq!(empty_pop(&mut reader), 1);
    assert!(log_reads(&mut c) > before);
    // A push prepared and committed by another session.
    assert_eq!(empty_pop(&mut reader), 0);
    let mut producer = db.connect();
    producer.batch_execute("BEGIN").unwrap();
    push(&mut producer, "q", json!(3));
    producer.batch_execute(&format!("PREPARE TRANSACTION '{}_tx'", db.name)).unwrap();
    assert_eq!(empty_pop(&mut reader), 0);
    c.batch_execute(&format!("COMMIT PREPARED '{}_tx'", db.name)).unwrap();
    assert_eq!(empty_pop(&mut reader), 1);
    // A scan to the end in a transaction that rolled back: the next pop reads the log again.
    let held = (0..5).any(|_| {
        assert_eq!(empty_pop(&mut reader), 0);
        reader.batch_execute("BEGIN").unwrap();
        reader.query("SELECT * FROM queen_pop('q', 'g', auto_ack => true)", &[]).unwrap();
        reader.batch_execute("ROLLBACK").unwrap();
        let before = log_reads(&mut c);
        assert_eq!(empty_pop(&mut reader), 0);
        log_reads(&mut c) == before
    });
    assert!(held, "after a rollback, the committed scan no longer held");
    // A seek changes the subscription: its first pop reads the log from the new start.
    c.execute("SELECT queen_seek('q', 'g', '-infinity')", &[]).unwrap();
    assert_eq!(reader.query("SELECT * FROM queen_pop('q', 'g', batch => 10, auto_ack => true)", &[]).unwrap().len(), 3);
}
