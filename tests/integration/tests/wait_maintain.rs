//! Waiting pops woken at commit, the fallback without preloading, and maintenance (through
//! queen_maintain() and through the background worker), over real connections.

use postgres::{Client, NoTls};
use queen_integration_tests::{
    await_waiting, connect, conninfo, conninfo_as, plant_spies, push, push_spread, spy_calls, sqlstate, waiter, TestDb,
};
use serde_json::{json, Value};
use std::thread;
use std::time::{Duration, Instant};

#[test]
fn a_waiting_pop_is_woken_by_a_commit_not_by_an_insert() {
    let db = TestDb::new("wake");
    let mut c = db.connect();
    let (pid, h) = waiter(&db.name, "SELECT payload FROM queen_pop('q', 'g', wait_ms => 20000, auto_ack => true)");
    await_waiting(&mut c, pid);
    let mut tx = c.transaction().unwrap();
    tx.execute("SELECT queen_push('q', '\"hello\"')", &[]).unwrap();
    // Pushed but not committed: the waiter is not woken.
    thread::sleep(Duration::from_millis(200));
    assert!(!h.is_finished(), "woken before the commit");
    let wakeups: i64 = tx.query_one("SELECT wakeups FROM queen.waiting_pops WHERE pid = $1", &[&pid]).unwrap().get(0);
    assert_eq!(wakeups, 0);
    let committed = Instant::now();
    tx.commit().unwrap();
    let (rows, _) = h.join().unwrap();
    let latency = committed.elapsed();
    assert_eq!(rows.unwrap(), vec![json!("hello")]);
    assert!(latency < Duration::from_secs(2), "took {latency:?} after the commit");
}

#[test]
fn a_rolled_back_push_wakes_nobody_with_a_message_and_the_deadline_holds() {
    let db = TestDb::new("wakerollback");
    let mut c = db.connect();
    let (pid, h) = waiter(&db.name, "SELECT payload FROM queen_pop('q', 'g', wait_ms => 1500, auto_ack => true)");
    await_waiting(&mut c, pid);
    let mut tx = c.transaction().unwrap();
    tx.execute("SELECT queen_push('q', '\"never\"')", &[]).unwrap();
    tx.rollback().unwrap();
    let (rows, took) = h.join().unwrap();
    assert!(rows.unwrap().is_empty());
    assert!(took >= Duration::from_millis(1450), "returned after {took:?}, before its deadline");
    assert!(took < Duration::from_secs(5));
}

#[test]
fn waiters_of_other_queues_are_not_woken_and_losers_sleep_again() {
    let db = TestDb::new("wakeothers");
    let mut c = db.connect();
    let (pid_b, hb) = waiter(&db.name, "SELECT payload FROM queen_pop('b', 'g', wait_ms => 1500, auto_ack => true)");
    let (pid_a1, ha1) = waiter(&db.name, "SELECT payload FROM queen_pop('a', 'g', wait_ms => 1500, auto_ack => true)");
    let (pid_a2, ha2) = waiter(&db.name, "SELECT payload FROM queen_pop('a', 'g', wait_ms => 1500, auto_ack => true)");
    for p in [pid_b, pid_a1, pid_a2] {
        await_waiting(&mut c, p);
    }
    push(&mut c, "a", "p", json!("one"));
    // Both waiters of 'a' were woken, 'b's was not.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let woken: i64 = c
            .query_one(
                "SELECT count(*) FROM queen.waiting_pops WHERE pid = ANY($1) AND wakeups > 0",
                &[&vec![pid_a1, pid_a2]],
            )
            .unwrap()
            .get(0);
        if woken > 0 || ha1.is_finished() || ha2.is_finished() {
            break;
        }
        assert!(Instant::now() < deadline);
        thread::sleep(Duration::from_millis(2));
    }
    let b_wakeups: i64 =
        c.query_one("SELECT wakeups FROM queen.waiting_pops WHERE pid = $1", &[&pid_b]).unwrap().get(0);
    assert_eq!(b_wakeups, 0, "a push to queue a woke a waiter of queue b");
    let (r1, t1) = ha1.join().unwrap();
    let (r2, t2) = ha2.join().unwrap();
    let (rb, tb) = hb.join().unwrap();
    let (r1, r2) = (r1.unwrap(), r2.unwrap());
    assert_eq!(r1.len() + r2.len(), 1, "one message, one winner");
    // The loser went back to sleep until its deadline.
    let loser = if r1.is_empty() { t1 } else { t2 };
    assert!(loser >= Duration::from_millis(1450), "the loser returned after {loser:?}");
    assert!(rb.unwrap().is_empty() && tb >= Duration::from_millis(1450));
}

#[test]
fn a_cancel_interrupts_a_waiting_pop() {
    let db = TestDb::new("cancel");
    let mut c = db.connect();
    let (pid, h) = waiter(&db.name, "SELECT payload FROM queen_pop('q', 'g', wait_ms => 60000)");
    await_waiting(&mut c, pid);
    let t0 = Instant::now();
    c.execute("SELECT pg_cancel_backend($1)", &[&pid]).unwrap();
    let (r, _) = h.join().unwrap();
    assert_eq!(sqlstate(&r.unwrap_err()), "57014");
    assert!(t0.elapsed() < Duration::from_secs(2));
    // The slot was freed.
    let n: i64 = c.query_one("SELECT count(*) FROM queen.waiting_pops WHERE pid = $1", &[&pid]).unwrap().get(0);
    assert_eq!(n, 0);
    // statement_timeout too.
    c.batch_execute("SET statement_timeout = '300ms'").unwrap();
    let err = c.query("SELECT * FROM queen_pop('q', 'g', wait_ms => 60000)", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "57014");
}

/// Without shared_preload_libraries: waiting polls, and still returns a committed message
/// within about 100 ms; maintenance runs through queen_maintain().
#[test]
fn without_preloading_waiting_falls_back_to_polling() {
    let host = std::env::var("QUEEN_TEST_NOPRELOAD_HOST").expect("run through scripts/integration-tests");
    let port = std::env::var("QUEEN_TEST_NOPRELOAD_PORT").unwrap();
    let conn =
        |db: &str| Client::connect(&format!("host={host} port={port} user=postgres dbname={db}"), NoTls).unwrap();
    let mut admin = conn("postgres");
    let name = format!("nopreload_{}", std::process::id());
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name}")).unwrap();
    admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
    let mut c = conn(&name);
    c.batch_execute("CREATE EXTENSION queen").unwrap();
    let preloaded: String = c.query_one("SHOW shared_preload_libraries", &[]).unwrap().get(0);
    assert!(!preloaded.contains("queen"));
    let mut w = conn(&name);
    let h = thread::spawn(move || {
        let rows = w.query("SELECT payload FROM queen_pop('q', 'g', wait_ms => 10000, auto_ack => true)", &[]).unwrap();
        rows.iter().map(|r| r.get::<_, Value>(0)).collect::<Vec<_>>()
    });
    thread::sleep(Duration::from_millis(300));
    let committed = Instant::now();
    push(&mut c, "q", "p", json!("polled"));
    assert_eq!(h.join().unwrap(), vec![json!("polled")]);
    assert!(committed.elapsed() < Duration::from_millis(1000), "{:?}", committed.elapsed());
    let empty: i64 = c.query_one("SELECT count(*) FROM queen.waiting_pops", &[]).unwrap().get(0);
    assert_eq!(empty, 0);
    c.execute("SELECT queen_configure('q', '{\"retentionSeconds\": 1}')", &[]).unwrap();
    push(&mut c, "q", "p", json!("old"));
    thread::sleep(Duration::from_millis(1100));
    let r: Value = c.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(r["retention_deleted"], json!(2));
    drop(c);
    admin.batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)")).unwrap();
}

fn maintain(c: &mut Client) -> Value {
    c.query_one("SELECT queen_maintain()", &[]).unwrap().get(0)
}

fn count(c: &mut Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

#[test]
fn retention_and_queue_stats() {
    let db = TestDb::new("retention");
    let mut c = db.connect();
    c.execute("SELECT queen_configure('q', '{\"retentionSeconds\": 1}')", &[]).unwrap();
    for i in 0..5 {
        push(&mut c, "q", "p", json!(i));
    }
    assert_eq!(maintain(&mut c)["retention_deleted"], json!(0), "nothing is old yet");
    assert_eq!(count(&mut c, "SELECT messages FROM queen.queue_stats WHERE queue = 'q'"), 5);
    thread::sleep(Duration::from_millis(1100));
    push(&mut c, "q", "p", json!("young"));
    let r = maintain(&mut c);
    assert_eq!(r["retention_deleted"], json!(5), "{r}");
    assert_eq!(count(&mut c, "SELECT count(*) FROM queen.messages"), 1);
    assert_eq!(count(&mut c, "SELECT messages FROM queen.queue_stats WHERE queue = 'q'"), 1);
    push(&mut c, "q", "p", json!("after"));
    assert_eq!(
        count(&mut c, "SELECT messages FROM queen.queue_stats WHERE queue = 'q'"),
        2,
        "pushes after the pass count too"
    );
    // A queue without retention keeps everything.
    push(&mut c, "keep", "p", json!(1));
    thread::sleep(Duration::from_millis(1100));
    let third = maintain(&mut c)["retention_deleted"].as_i64().unwrap();
    assert_eq!(count(&mut c, "SELECT messages FROM queen.queue_stats WHERE queue = 'keep'"), 1);
    // Each pass adds its report to queen.maintenance_stats.
    let r = c
        .query_one(
            "SELECT passes, failed_passes, retention_deleted, last_report, last_pass_seconds >= 0,
                    last_pass_at <= clock_timestamp(), last_error IS NULL
               FROM queen.maintenance_stats",
            &[],
        )
        .unwrap();
    assert_eq!((r.get::<_, i64>(0), r.get::<_, i64>(1), r.get::<_, i64>(2)), (3, 0, 5 + third));
    assert_eq!(r.get::<_, Value>(3)["queues"], json!(2), "the last pass's report");
    assert!(r.get::<_, bool>(4) && r.get::<_, bool>(5) && r.get::<_, bool>(6));
    // A pass rolled back with its caller's transaction leaves no count.
    c.batch_execute("BEGIN; SELECT queen_maintain(); ROLLBACK").unwrap();
    assert_eq!(count(&mut c, "SELECT passes FROM queen.maintenance_stats"), 3);
}

#[test]
fn completed_retention_waits_for_every_subscribed_group() {
    let db = TestDb::new("completedret");
    let mut c = db.connect();
    c.execute("SELECT queen_configure('q', '{\"completedRetentionSeconds\": 1}')", &[]).unwrap();
    for i in 0..4 {
        push(&mut c, "q", "p", json!(i));
    }
    push(&mut c, "q", "nobody", json!("x"));
    // Group a finishes 3, group b finishes 1; nobody reads partition "nobody" ... but the
    // groups are subscribed to the queue, so they have a cursor there too (at the start).
    c.query("SELECT * FROM queen_pop('q', 'a', batch => 3, partition => 'p', auto_ack => true)", &[]).unwrap();
    c.query("SELECT * FROM queen_pop('q', 'b', batch => 1, partition => 'p', auto_ack => true)", &[]).unwrap();
    thread::sleep(Duration::from_millis(1100));
    let r = maintain(&mut c);
    assert_eq!(r["completed_retention_deleted"], json!(1), "only what both groups finished: {r}");
    let left: Vec<Value> = c
        .query("SELECT payload FROM queen.messages ORDER BY txid, seq", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, vec![json!(1), json!(2), json!(3), json!("x")]);
    // A queue no group subscribed to keeps its messages.
    c.execute("SELECT queen_configure('lonely', '{\"completedRetentionSeconds\": 1}')", &[]).unwrap();
    push(&mut c, "lonely", "p", json!(1));
    thread::sleep(Duration::from_millis(1100));
    maintain(&mut c);
    assert_eq!(count(&mut c, "SELECT count(*) FROM queen.messages WHERE partition = 'p' AND payload = '1'"), 2);
}

/// Completed retention deletes in chunks of 10 000, over partitions, in one pass; messages
/// pushed after the cutoff stay, and the queue's count follows.
#[test]
fn completed_retention_deletes_in_chunks() {
    let db = TestDb::new("completedchunks");
    let mut c = db.connect();
    c.execute("SELECT queen_configure('q', '{\"completedRetentionSeconds\": 1}')", &[]).unwrap();
    push_spread(&mut c, "q", 25_000, 7);
    let popped: i64 = (0..3)
        .map(|_| {
            c.query_one(
                "SELECT count(*) FROM queen_pop('q', 'g', batch => 10000, partitions => 7, auto_ack => true)",
                &[],
            )
            .unwrap()
            .get::<_, i64>(0)
        })
        .sum();
    assert_eq!(popped, 25_000);
    thread::sleep(Duration::from_millis(1100));
    push(&mut c, "q", "p0", json!("young"));
    let r = maintain(&mut c);
    assert_eq!(r["completed_retention_deleted"], json!(25_000), "{r}");
    let left: Vec<Value> =
        c.query("SELECT payload FROM queen.messages", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(left, vec![json!("young")]);
    assert_eq!(count(&mut c, "SELECT messages FROM queen.queue_stats"), 1);
}

#[test]
fn max_wait_files_dead_letters_but_leaves_leased_messages_to_their_holder() {
    let db = TestDb::new("maxwait");
    let mut c = db.connect();
    c.execute("SELECT queen_configure('q', '{\"maxWaitTimeSeconds\": 1}')", &[]).unwrap();
    push(&mut c, "q", "free", json!("f"));
    push(&mut c, "q", "held", json!("h"));
    // Subscribe g; lease partition "held" for a long time.
    let held = c.query("SELECT * FROM queen_pop('q', 'g', partition => 'held', lease_seconds => 300)", &[]).unwrap();
    assert_eq!(held.len(), 1);
    maintain(&mut c); // a pass sees both committed (max wait counts from there)
    thread::sleep(Duration::from_millis(1100));
    let r = maintain(&mut c);
    assert_eq!(r["max_wait_dead_lettered"], json!(1), "{r}");
    let dl: Vec<(String, String)> = c
        .query("SELECT partition, error FROM queen.dead_letters_view", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(dl, vec![("free".to_string(), "max wait time exceeded".to_string())]);
    assert!(c.query("SELECT * FROM queen_pop('q', 'g', partition => 'free')", &[]).unwrap().is_empty());
}

#[test]
fn idle_empty_partitions_are_removed_and_come_back_with_a_message() {
    let db = TestDb::new("idle");
    let mut c = db.connect();
    push(&mut c, "q", "gone", json!(1));
    push(&mut c, "q", "stays", json!(2));
    c.query("SELECT * FROM queen_pop('q', 'g', partition => 'gone', auto_ack => true)", &[]).unwrap();
    // A second push into the partition from this backend (after the group's first pop, which
    // retired cached state as it subscribed): it sees the registry row committed and keeps
    // that (push.rs SETTLED), which the removal below must retire.
    push(&mut c, "q", "gone", json!(1));
    c.execute("DELETE FROM queen.messages WHERE partition = 'gone'", &[]).unwrap();
    c.batch_execute("SET queen.partition_idle_seconds = 0").unwrap();
    thread::sleep(Duration::from_millis(10));
    let r = maintain(&mut c);
    assert_eq!(r["partitions_removed"], json!(1), "{r}");
    let parts: Vec<String> =
        c.query("SELECT name FROM queen.partitions", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(parts, vec!["stays".to_string()]);
    assert_eq!(count(&mut c, "SELECT partitions FROM queen.queue_stats"), 1);
    // A push registers it again.
    push(&mut c, "q", "gone", json!(3));
    let parts: Vec<String> =
        c.query("SELECT name FROM queen.partitions ORDER BY name", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(parts, vec!["gone".to_string(), "stays".to_string()]);
    assert_eq!(count(&mut c, "SELECT partitions FROM queen.queue_stats"), 2);
    assert_eq!(
        c.query("SELECT payload FROM queen_pop('q', 'g', partition => 'gone', auto_ack => true)", &[]).unwrap().len(),
        1
    );
}

/// The background worker runs the same pass by itself (the test cluster maintains database
/// queen_worker_test every second).
#[test]
fn the_background_worker_maintains_its_database() {
    let mut admin = connect("postgres");
    admin.batch_execute("DROP DATABASE IF EXISTS queen_worker_test WITH (FORCE)").unwrap();
    admin.batch_execute("CREATE DATABASE queen_worker_test").unwrap();
    // The worker restarts every few seconds while its database does not exist.
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&mut admin, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'queen maintenance'") != 1 {
        assert!(Instant::now() < deadline, "no maintenance worker for the configured database");
        thread::sleep(Duration::from_millis(100));
    }
    let mut c = connect("queen_worker_test");
    c.batch_execute("CREATE EXTENSION queen").unwrap();
    c.execute("SELECT queen_configure('q', '{\"retentionSeconds\": 1}')", &[]).unwrap();
    push(&mut c, "q", "p", json!(1));
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&mut c, "SELECT count(*) FROM queen.messages") > 0 {
        assert!(Instant::now() < deadline, "the worker never applied retention");
        thread::sleep(Duration::from_millis(100));
    }
    // ... and reports it to the statistics autovacuum reads (a background worker has to: its
    // deletes were invisible there until it exited).
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&mut c, "SELECT n_tup_del FROM pg_stat_all_tables WHERE relid = 'queen.messages'::regclass") < 1 {
        assert!(Instant::now() < deadline, "the worker's deletes never reached pg_stat_all_tables");
        thread::sleep(Duration::from_millis(100));
    }
    // It fires timers at their time, not at its next pass (every second here): a waiting pop
    // gets the message within 100 ms of the due time (semantics §3.2), with the id promised when it
    // was scheduled; and a commit that schedules one already due wakes it at once.
    for (label, delay_ms) in [("due in 300 ms", 300.0), ("due already", -1000.0)] {
        let r = c
            .query_one(
                "SELECT message_id, deliver_at FROM queen_schedule('timed', 'k', '{\"t\": 1}',
                        clock_timestamp() + make_interval(secs => $1::float8 / 1000))",
                &[&delay_ms],
            )
            .unwrap();
        let (promised, due): (uuid::Uuid, std::time::SystemTime) = (r.get(0), r.get(1));
        // Autocommit: the schedule has committed by now.
        let committed: std::time::SystemTime = c.query_one("SELECT clock_timestamp()", &[]).unwrap().get(0);
        // The message's created_at is when it fired (the push's clock).
        let rows = c
            .query(
                "SELECT message_id, extract(epoch FROM created_at - greatest($1::timestamptz, $2::timestamptz))::float8 * 1000
                   FROM queen_pop('timed', wait_ms => 5000, auto_ack => true)",
                &[&due, &committed],
            )
            .unwrap();
        assert_eq!(rows.len(), 1, "{label}: the timer never fired");
        assert_eq!(rows[0].get::<_, uuid::Uuid>(0), promised, "{label}");
        let late_ms: f64 = rows[0].get(1);
        assert!(late_ms < 100.0, "{label}: fired {late_ms:.1} ms after it was due (or committed)");
    }
    c.execute("SELECT queen_delete_queue('timed')", &[]).unwrap();
    // A client never stalls it (semantics §8): a push-only role's open transaction that pushed
    // the transaction id a due timer will push holds back that timer alone — the firing waits
    // for it briefly and tries again after a backoff, with the reason kept — while another
    // queue's timer fires and the passes go on. (0.5.0 waited for that transaction without
    // bound: no timer fired and no pass ran.)
    let pusher = "queen_worker_test_pusher";
    admin.batch_execute(&format!("DROP ROLE IF EXISTS {pusher}; CREATE ROLE {pusher} LOGIN")).unwrap();
    c.query("SELECT queen_grant('stall', $1::text::regrole, ARRAY['push'])", &[&pusher]).unwrap();
    let mut p = postgres::Client::connect(&conninfo_as("queen_worker_test", pusher), postgres::NoTls).unwrap();
    p.batch_execute("BEGIN").unwrap();
    p.query("SELECT * FROM queen_push('stall', '1'::jsonb, partition => 'p', transaction_id => 'x')", &[]).unwrap();
    let passes = "SELECT coalesce(max(passes), 0)::bigint FROM queen.maintenance_stats";
    let before = count(&mut c, passes);
    c.query(
        "SELECT * FROM queen_schedule('stall', 'k', '2'::jsonb, clock_timestamp(), partition => 'p', transaction_id => 'x')",
        &[],
    )
    .unwrap();
    c.query("SELECT * FROM queen_schedule('free', 'k', '3'::jsonb, clock_timestamp())", &[]).unwrap();
    let rows = c.query("SELECT payload FROM queen_pop('free', wait_ms => 5000, auto_ack => true)", &[]).unwrap();
    assert_eq!(rows.len(), 1, "a client's open transaction held back another queue's timer");
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&mut c, passes) < before + 2
        || count(&mut c, "SELECT count(*) FROM queen_timers('stall') WHERE last_error LIKE '%open transaction%'") == 0
    {
        assert!(Instant::now() < deadline, "the worker's passes stopped behind a client's open transaction");
        thread::sleep(Duration::from_millis(100));
    }
    p.batch_execute("COMMIT").unwrap();
    drop(p);
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&mut c, "SELECT count(*) FROM queen.timers") > 0 {
        assert!(Instant::now() < deadline, "the held timer was never tried again");
        thread::sleep(Duration::from_millis(100));
    }
    let rows = c.query("SELECT payload FROM queen_pop('stall', batch => 10, auto_ack => true)", &[]).unwrap();
    assert_eq!(rows.len(), 1, "the timer's message is a duplicate of the client's");
    c.execute("SELECT queen_delete_queue('stall')", &[]).unwrap();
    c.execute("SELECT queen_delete_queue('free')", &[]).unwrap();
    c.query("SELECT queen_revoke('stall', $1::text::regrole, ARRAY['push'])", &[&pusher]).unwrap();
    admin.batch_execute(&format!("DROP ROLE {pusher}")).unwrap();
    // It survives errors in its passes: make every pass fail (the count it saves breaks a
    // constraint), see that nothing happens, then mend it.
    c.batch_execute("ALTER TABLE queen.queue_counts ADD CONSTRAINT broken CHECK (counted < 0) NOT VALID").unwrap();
    push(&mut c, "q", "p", json!(2));
    // The failures are counted in queen.maintenance_stats, with the error.
    let stats = "SELECT coalesce(max(passes), 0)::bigint, coalesce(max(failed_passes), 0)::bigint, max(last_error)
                   FROM queen.maintenance_stats";
    let passed = c.query_one(stats, &[]).unwrap().get::<_, i64>(0);
    assert!(passed > 0, "the worker's passes are counted");
    let deadline = Instant::now() + Duration::from_secs(30);
    let error: String = loop {
        let r = c.query_one(stats, &[]).unwrap();
        if r.get::<_, i64>(1) >= 2 {
            assert_eq!(r.get::<_, i64>(0), passed, "a failed pass was counted as a pass");
            break r.get(2);
        }
        assert!(Instant::now() < deadline, "the worker's failed passes are not counted");
        thread::sleep(Duration::from_millis(100));
    };
    assert!(error.contains("broken"), "last_error: {error}");
    assert_eq!(count(&mut c, "SELECT count(*) FROM queen.messages"), 1, "failed passes changed nothing");
    c.batch_execute("ALTER TABLE queen.queue_counts DROP CONSTRAINT broken").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&mut c, "SELECT count(*) FROM queen.messages") > 0 {
        assert!(Instant::now() < deadline, "the worker did not recover after a failed pass");
        thread::sleep(Duration::from_millis(100));
    }
    // Max wait, by the worker too.
    c.execute("SELECT queen_configure('mw', '{\"maxWaitTimeSeconds\": 1}')", &[]).unwrap();
    c.query("SELECT * FROM queen_pop('mw', 'slow')", &[]).unwrap();
    push(&mut c, "mw", "p", json!("stale"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&mut c, "SELECT count(*) FROM queen.dead_letters_view WHERE error = 'max wait time exceeded'") == 0 {
        assert!(Instant::now() < deadline, "the worker never applied max wait");
        thread::sleep(Duration::from_millis(100));
    }
    // Each unit of a pass commits on its own (issue 8, item 9): max-wait's dead letters, and the
    // cursor rows it locked, are committed before a later queue's retention is through. Both
    // become due in the same pass (configured in one transaction, the messages old enough);
    // one snapshot then sees the dead letter while the other queue still has messages, which
    // a pass in one transaction never shows.
    for q in ["w1", "w2"] {
        push(&mut c, q, "p", json!(0));
    }
    let order: Vec<String> = c
        .query(
            "SELECT name FROM (SELECT DISTINCT ON (queue_id) queue_id, name FROM queen.queues) q
              WHERE name IN ('w1', 'w2') ORDER BY queue_id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let (mw, big) = (order[0].as_str(), order[1].as_str());
    c.query("SELECT * FROM queen_pop($1, 'slow', partition => 'none')", &[&mw]).unwrap();
    for k in 0..50 {
        let items: Vec<Value> = (0..1000).map(|i| json!({"queue": big, "payload": k * 1000 + i})).collect();
        c.execute("SELECT count(*) FROM queen_push($1)", &[&Value::Array(items)]).unwrap();
    }
    thread::sleep(Duration::from_millis(1100)); // every message older than the 1 s below
    let mut tx = c.transaction().unwrap();
    tx.execute("SELECT queen_configure($1, '{\"maxWaitTimeSeconds\": 1}')", &[&mw]).unwrap();
    tx.execute("SELECT queen_configure($1, '{\"retentionSeconds\": 1}')", &[&big]).unwrap();
    tx.commit().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen_between = false;
    loop {
        let r = c
            .query_one(
                "SELECT (SELECT count(*) FROM queen.dead_letters_view WHERE queue = $1),
                        (SELECT count(*) FROM queen.messages m JOIN queen.queues q USING (queue_id) WHERE q.name = $2)",
                &[&mw, &big],
            )
            .unwrap();
        let (filed, left): (i64, i64) = (r.get(0), r.get(1));
        seen_between |= filed > 0 && left > 0;
        if filed > 0 && left == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the worker never applied max wait and retention ({filed}, {left})");
        thread::sleep(Duration::from_millis(1));
    }
    assert!(seen_between, "max wait's dead letter was not committed before the later queue's retention");
    assert_eq!(count(&mut admin, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'queen maintenance'"), 1);

    // A hostile search_path for the database (semantics §11): spies first on it. The worker,
    // restarted so that it connects under the setting, maintains the database as before and
    // never calls them.
    plant_spies(&mut c, "trap");
    c.batch_execute("ALTER DATABASE queen_worker_test SET search_path = trap, pg_catalog").unwrap();
    restart_worker(&mut admin);
    let mut c = connect("queen_worker_test");
    let path: String = c.query_one("SHOW search_path", &[]).unwrap().get(0);
    assert_eq!(path, "trap, pg_catalog", "the database's setting reaches new sessions");
    c.batch_execute("SET search_path = pg_catalog, public").unwrap();
    let filed = count(&mut c, "SELECT count(*) FROM queen.dead_letters_view WHERE error = 'max wait time exceeded'");
    push(&mut c, "q", "p", json!(3));
    c.query("SELECT * FROM queen_pop('mw', 'slow')", &[]).unwrap();
    push(&mut c, "mw", "p", json!("stale again"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&mut c, "SELECT count(*) FROM queen.messages m JOIN queen.queues q USING (queue_id) WHERE q.name = 'q'")
        > 0
        || count(&mut c, "SELECT count(*) FROM queen.dead_letters_view WHERE error = 'max wait time exceeded'") <= filed
    {
        assert!(Instant::now() < deadline, "the restarted worker did not maintain the database");
        thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(spy_calls(&mut c, "trap"), Vec::<String>::new(), "the worker called the database's hostile objects");

    // Settings a database's owner may set (issue 21, item 5): read-only transactions and
    // timeouts that would cut every pass short. The worker, restarted under them, sets what it
    // depends on itself: its passes go on, none fails.
    c.batch_execute(
        "ALTER DATABASE queen_worker_test SET default_transaction_read_only = on;
         ALTER DATABASE queen_worker_test SET statement_timeout = '1ms';
         ALTER DATABASE queen_worker_test SET lock_timeout = '1ms';
         ALTER DATABASE queen_worker_test SET idle_in_transaction_session_timeout = '1ms'",
    )
    .unwrap();
    restart_worker(&mut admin);
    let mut c = connect_overriding_the_database("queen_worker_test");
    let stats = "SELECT passes, failed_passes FROM queen.maintenance_stats";
    let (passes, failed): (i64, i64) = c.query_one(stats, &[]).map(|r| (r.get(0), r.get(1))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (p, f): (i64, i64) = c.query_one(stats, &[]).map(|r| (r.get(0), r.get(1))).unwrap();
        assert_eq!(f, failed, "a pass failed under the database's settings");
        if p >= passes + 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the worker's passes stopped under the database's settings");
        thread::sleep(Duration::from_millis(100));
    }
    // A pass held open by queen_maintain() in a transaction: the worker's passes meanwhile are
    // skipped, and counted as such.
    let mut h = connect_overriding_the_database("queen_worker_test");
    h.batch_execute("BEGIN; SELECT queen_maintain()").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&mut c, "SELECT skipped_passes FROM queen.maintenance_stats") < 1 {
        assert!(Instant::now() < deadline, "the worker's skipped passes are not counted");
        thread::sleep(Duration::from_millis(100));
    }
    h.batch_execute("COMMIT").unwrap();
    // A failure it cannot record in the table (the row cannot be written) is counted in shared
    // memory, and the view shows it.
    c.batch_execute("ALTER TABLE queen.maintenance_totals ADD CONSTRAINT unwritable CHECK (passes < 0) NOT VALID")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = c.query_one("SELECT failed_passes, (SELECT failed_passes FROM queen.maintenance_totals) FROM queen.maintenance_stats", &[]).unwrap();
        let (shown, stored): (i64, i64) = (r.get(0), r.get(1));
        assert_eq!(stored, failed, "the table took a write it cannot");
        if shown >= failed + 2 {
            break;
        }
        assert!(Instant::now() < deadline, "failures the worker could not record are not shown");
        thread::sleep(Duration::from_millis(100));
    }
    c.batch_execute("ALTER TABLE queen.maintenance_totals DROP CONSTRAINT unwritable").unwrap();
    drop(c);
    admin.batch_execute("DROP DATABASE queen_worker_test WITH (FORCE)").unwrap();
}

/// A session whose settings override the database's hostile ones from its start: the
/// connection's options outrank ALTER DATABASE ... SET, so no statement of the test ever runs
/// under the 1 ms timeouts (a SET sent after connecting did, and a slow machine cancelled it).
fn connect_overriding_the_database(db: &str) -> Client {
    let options = "-c default_transaction_read_only=off -c statement_timeout=0 -c lock_timeout=0 \
                   -c idle_in_transaction_session_timeout=0 -c search_path=pg_catalog,public";
    let mut config: postgres::Config = conninfo(db).parse().unwrap();
    config.options(options);
    let mut c = config.connect(postgres::NoTls).unwrap();
    let timeout: String = c.query_one("SHOW statement_timeout", &[]).unwrap().get(0);
    assert_eq!(timeout, "0", "the connection's options did not override the database's");
    c
}

/// Terminate the maintenance worker and wait until it is back (a new pid).
fn restart_worker(admin: &mut Client) {
    let old_pid = count(
        admin,
        "SELECT coalesce(max(pid), 0)::bigint FROM pg_stat_activity WHERE backend_type = 'queen maintenance'",
    );
    admin
        .batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'queen maintenance'",
        )
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pid = count(
            admin,
            "SELECT coalesce(max(pid), 0)::bigint FROM pg_stat_activity WHERE backend_type = 'queen maintenance'",
        );
        if pid != 0 && pid != old_pid {
            return;
        }
        assert!(Instant::now() < deadline, "the worker did not restart");
        thread::sleep(Duration::from_millis(100));
    }
}

/// A partition maintenance finds idle while a pop holds its cursor row (the message the pop
/// delivers committed after maintenance looked): the pop's progress survives. Maintenance
/// leaves the partition to a later pass without waiting for the row (a client's transaction
/// never holds it back: the worker would wait for no one's); deleting the row once the pop
/// changed it would put the group back at the partition's start and deliver the message a
/// second time.
#[test]
fn removing_an_idle_partition_keeps_a_cursor_a_pop_just_moved() {
    let db = TestDb::new("idle_race");
    let mut c = db.connect();
    push(&mut c, "q", "x", json!(1));
    assert_eq!(c.query("SELECT * FROM queen_pop('q', 'g', auto_ack => true)", &[]).unwrap().len(), 1);
    c.execute("DELETE FROM queen.messages WHERE partition = 'x'", &[]).unwrap(); // as retention would
    thread::sleep(Duration::from_millis(10));
    // A consumer's transaction holds the (x, g) cursor row, as a pop that claimed it does.
    let mut consumer = db.connect();
    consumer.batch_execute("BEGIN").unwrap();
    consumer.query("SELECT 1 FROM queen.cursors WHERE consumer_group = 'g' FOR UPDATE", &[]).unwrap();
    // Maintenance finds x empty and idle, and leaves it: its row is held.
    let mut m = db.connect();
    m.batch_execute("SET queen.partition_idle_seconds = 0; SET lock_timeout = '5s'").unwrap();
    let t0 = Instant::now();
    let report: Value = m.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert!(t0.elapsed() < Duration::from_secs(2), "maintenance waited for the row: {:?}", t0.elapsed());
    assert_eq!(report["partitions_removed"], json!(0), "{report}");
    // A message arrives and the consumer's pop delivers it, moving the cursor; it commits.
    push(&mut c, "q", "x", json!(2));
    let got = consumer.query("SELECT payload FROM queen_pop('q', 'g', auto_ack => true)", &[]).unwrap();
    assert_eq!(got.len(), 1);
    consumer.batch_execute("COMMIT").unwrap();
    let report: Value = m.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(
        c.query("SELECT payload FROM queen_pop('q', 'g', auto_ack => true)", &[]).unwrap().len(),
        0,
        "message 2 was delivered once already (maintenance: {report})"
    );
}
