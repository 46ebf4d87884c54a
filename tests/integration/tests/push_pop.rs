//! queen_push and queen_pop over real, separate connections: the delivery guarantees of
//! semantics §6.1–§6.4 and the behaviour of semantics §3.1–§3.2.

use queen_integration_tests::{
    await_debug_sleep, connect, drain, lag, look_snapshot, open_tx, payloads, pop_auto, prepare_query, push, push_n,
    push_spread, sqlstate, TestDb,
};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

/// semantics §6.1, the commit-order hazard: A pushes and stays open, B pushes later and commits, a
/// consumer passes B, then A commits: A's message must still be delivered, to every group.
#[test]
fn a_late_commit_is_not_lost() {
    let db = TestDb::new("hazard");
    let mut a = open_tx(&db);
    let mut b = db.connect();
    let mut consumer = db.connect();
    // Both groups and queue mode subscribe before anything is pushed.
    for g in [Some("g1"), Some("g2"), None] {
        assert!(pop_auto(&mut consumer, "q", g, 10).is_empty());
    }
    push(&mut a, "q", "p", json!("A")); // A has the smaller xid
    push(&mut b, "q", "p", json!("B"));
    for g in [Some("g1"), Some("g2"), None] {
        assert_eq!(pop_auto(&mut consumer, "q", g, 10), vec![json!("B")], "group {g:?} passes B");
        assert!(pop_auto(&mut consumer, "q", g, 10).is_empty());
    }
    a.batch_execute("COMMIT").unwrap();
    for g in [Some("g1"), Some("g2"), None] {
        assert_eq!(pop_auto(&mut consumer, "q", g, 10), vec![json!("A")], "group {g:?} gets A after its late commit");
        assert!(pop_auto(&mut consumer, "q", g, 10).is_empty(), "and nothing twice");
    }
}

/// The same hazard through a leased pop in a named partition (no discovery involved), and a
/// late commit into a partition the group has never seen (discovery's own pending list).
#[test]
fn a_late_commit_is_found_in_a_new_partition_and_by_partition_pops() {
    let db = TestDb::new("hazard2");
    let mut consumer = db.connect();
    let mut b = db.connect();
    push(&mut b, "q", "seed", json!(0));
    assert_eq!(drain(&mut consumer, "q", Some("g")), vec![json!(0)]);

    let mut a = open_tx(&db);
    push(&mut a, "q", "fresh", json!("A-fresh"));
    push(&mut b, "q", "seed", json!("B"));
    assert_eq!(drain(&mut consumer, "q", Some("g")), vec![json!("B")]);
    a.batch_execute("COMMIT").unwrap();
    assert_eq!(drain(&mut consumer, "q", Some("g")), vec![json!("A-fresh")]);

    // Partition pops: the cursor's pending list alone.
    let mut a = open_tx(&db);
    push(&mut a, "q", "seed", json!("A2"));
    push(&mut b, "q", "seed", json!("B2"));
    let pop = |c: &mut postgres::Client| -> Vec<Value> {
        payloads(
            &c.query("SELECT * FROM queen_pop('q', 'h', batch => 10, partition => 'seed', auto_ack => true)", &[])
                .unwrap(),
        )
    };
    assert_eq!(pop(&mut consumer), vec![json!(0), json!("B"), json!("B2")]);
    a.batch_execute("COMMIT").unwrap();
    assert_eq!(pop(&mut consumer), vec![json!("A2")]);
    assert!(pop(&mut consumer).is_empty());
}

/// A rolled-back push leaves nothing, and the transaction it ran in no longer holds anything
/// back once it is gone.
#[test]
fn a_rolled_back_push_is_never_delivered() {
    let db = TestDb::new("rollback");
    let mut a = open_tx(&db);
    let mut b = db.connect();
    let mut consumer = db.connect();
    assert!(pop_auto(&mut consumer, "q", Some("g"), 10).is_empty());
    push(&mut a, "q", "p", json!("A"));
    let a_xid: i64 = a.query_one("SELECT pg_current_xact_id()::text::bigint", &[]).unwrap().get(0);
    push(&mut b, "q", "p", json!("B"));
    assert_eq!(drain(&mut consumer, "q", Some("g")), vec![json!("B")]);
    let pending_with_a = |c: &mut postgres::Client| -> i64 {
        c.query_one(
            "SELECT (SELECT count(*) FROM queen.cursors WHERE $1 = ANY (pending_txid))
                  + (SELECT count(*) FROM queen.discovery WHERE $1 = ANY (pending_txid))",
            &[&a_xid],
        )
        .unwrap()
        .get(0)
    };
    assert!(pending_with_a(&mut consumer) > 0, "A is pending while it runs");
    a.batch_execute("ROLLBACK").unwrap();
    push(&mut b, "q", "p", json!("C"));
    assert_eq!(drain(&mut consumer, "q", Some("g")), vec![json!("C")]);
    assert_eq!(pending_with_a(&mut consumer), 0, "the aborted transaction is dropped from the pending lists");
}

/// semantics §6.2: a transaction that stays open (one that pushed, one that wrote elsewhere) does
/// not hold back messages that others committed.
#[test]
fn an_open_transaction_does_not_stall_delivery() {
    let db = TestDb::new("nostall");
    let mut setup = db.connect();
    setup.batch_execute("CREATE TABLE unrelated (x int)").unwrap();
    let mut writer = open_tx(&db);
    writer.batch_execute("INSERT INTO unrelated VALUES (1)").unwrap();
    let mut pusher = open_tx(&db);
    push(&mut pusher, "q", "p", json!("held"));
    let mut b = db.connect();
    let mut consumer = db.connect();
    for i in 0..3 {
        push(&mut b, "q", "p", json!(i));
        push(&mut b, "q", "other", json!(i));
        let t0 = Instant::now();
        let mut got = drain(&mut consumer, "q", Some("g"));
        got.sort_by_key(|v| v.to_string());
        assert_eq!(got, vec![json!(i), json!(i)], "committed messages are poppable at once");
        assert!(t0.elapsed() < Duration::from_secs(2));
    }
    // Queue mode too, with a partition pop.
    let rows = consumer
        .query("SELECT payload FROM queen_pop('q', batch => 10, partition => 'p', auto_ack => true)", &[])
        .unwrap();
    assert_eq!(payloads(&rows), vec![json!(0), json!(1), json!(2)]);
    pusher.batch_execute("COMMIT").unwrap();
    writer.batch_execute("COMMIT").unwrap();
    assert_eq!(drain(&mut consumer, "q", Some("g")), vec![json!("held")]);
}

/// semantics §6.4: many concurrent poppers of one group never get overlapping messages, and
/// together they get every message exactly once (leases are not released: no acks).
#[test]
fn leases_are_exclusive() {
    let db = TestDb::new("exclusive");
    let mut c = db.connect();
    push_spread(&mut c, "q", 200, 20);
    let threads = 8;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let name = db.name.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut c = connect(&name);
                barrier.wait();
                let mut mine: Vec<(String, i64, uuid::Uuid)> = vec![];
                let mut empty = 0;
                while empty < 3 {
                    // Each pop in its own transaction, held open a moment while other pops run.
                    let mut tx = c.transaction().unwrap();
                    let rows = tx.query("SELECT * FROM queen_pop('q', 'workers', batch => 4)", &[]).unwrap();
                    thread::yield_now();
                    tx.commit().unwrap();
                    if rows.is_empty() {
                        empty += 1;
                    }
                    let lease: HashSet<uuid::Uuid> = rows.iter().map(|r| r.get::<_, uuid::Uuid>("lease_id")).collect();
                    assert!(lease.len() <= 1, "one pop, one lease");
                    for r in rows {
                        let p: String = r.get("partition");
                        let v: Value = r.get("payload");
                        mine.push((p, v.as_i64().unwrap(), r.get("lease_id")));
                    }
                }
                mine
            })
        })
        .collect();
    let mut seen: HashMap<i64, usize> = HashMap::new();
    let mut partition_owner: HashMap<String, uuid::Uuid> = HashMap::new();
    let mut per_partition: HashMap<String, Vec<i64>> = HashMap::new();
    for (t, h) in handles.into_iter().enumerate() {
        for (p, v, lease) in h.join().unwrap() {
            if let Some(prev) = seen.insert(v, t) {
                panic!("message {v} delivered to thread {prev} and thread {t}");
            }
            // A partition is leased once (leases last 300 s and are never released here).
            let owner = partition_owner.entry(p.clone()).or_insert(lease);
            assert_eq!(*owner, lease, "partition {p} was leased twice at once");
            per_partition.entry(p).or_default().push(v);
        }
    }
    // Every partition was claimed, and its first batch came in order. (Messages after the first
    // batch stay behind the unreleased lease.)
    assert_eq!(per_partition.len(), 20);
    for (p, vs) in per_partition {
        let i: i64 = p[1..].parse().unwrap();
        assert_eq!(vs, vec![i, i + 20, i + 40, i + 60], "partition {p}");
    }
}

/// semantics §6.3: a producer pushing one message per transaction into a partition gets strict
/// FIFO, while other producers push into other partitions and a consumer pops concurrently.
#[test]
fn per_partition_fifo_under_concurrent_producers() {
    let db = TestDb::new("fifo");
    let n = 150;
    let producers: Vec<_> = (0..4)
        .map(|t| {
            let name = db.name.clone();
            thread::spawn(move || {
                let mut c = connect(&name);
                for i in 0..n {
                    c.execute("SELECT queen_push('q', $1, $2)", &[&json!(i), &format!("p{t}")]).unwrap();
                }
            })
        })
        .collect();
    let name = db.name.clone();
    let consumer = thread::spawn(move || {
        let mut c = connect(&name);
        let mut got: HashMap<String, Vec<i64>> = HashMap::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while got.values().map(Vec::len).sum::<usize>() < 4 * n as usize {
            assert!(Instant::now() < deadline, "consumer timed out with {got:?}");
            let rows = c.query("SELECT * FROM queen_pop('q', 'g', batch => 7, auto_ack => true)", &[]).unwrap();
            for r in rows {
                let v: Value = r.get("payload");
                got.entry(r.get("partition")).or_default().push(v.as_i64().unwrap());
            }
        }
        got
    });
    for p in producers {
        p.join().unwrap();
    }
    let got = consumer.join().unwrap();
    for t in 0..4 {
        assert_eq!(got[&format!("p{t}")], (0..n as i64).collect::<Vec<_>>(), "partition p{t} out of order");
    }
}

/// Fan-out: two groups and queue mode each get every message, in partition order.
#[test]
fn every_group_gets_every_message() {
    let db = TestDb::new("fanout");
    let mut c = db.connect();
    push_spread(&mut c, "q", 50, 5);
    for g in [Some("a"), Some("b"), None] {
        let got = drain(&mut c, "q", g);
        assert_eq!(got.len(), 50, "group {g:?}");
        let mut by_partition: HashMap<i64, Vec<i64>> = HashMap::new();
        for v in got {
            let v = v.as_i64().unwrap();
            by_partition.entry(v % 5).or_default().push(v);
        }
        for (p, vs) in by_partition {
            assert_eq!(vs, (0..10).map(|k| p + 5 * k).collect::<Vec<_>>());
        }
    }
}

/// A popping transaction that rolls back never happened: the messages are available again,
/// as first deliveries.
#[test]
fn a_rolled_back_pop_leaves_the_messages_available() {
    let db = TestDb::new("poprollback");
    let mut c = db.connect();
    for i in 0..3 {
        push(&mut c, "q", "p", json!(i));
    }
    let mut tx = c.transaction().unwrap();
    let rows = tx.query("SELECT * FROM queen_pop('q', 'g', batch => 10)", &[]).unwrap();
    assert_eq!(payloads(&rows), vec![json!(0), json!(1), json!(2)]);
    tx.rollback().unwrap();
    let mut other = db.connect();
    let rows = other.query("SELECT * FROM queen_pop('q', 'g', batch => 10)", &[]).unwrap();
    assert_eq!(payloads(&rows), vec![json!(0), json!(1), json!(2)]);
    assert!(rows.iter().all(|r| r.get::<_, i32>("attempt") == 1));
    let leases: i64 = other.query_one("SELECT count(DISTINCT lease_id) FROM queen.cursors", &[]).unwrap().get(0);
    assert_eq!(leases, 1, "only the committed pop's lease exists");
}

/// Popped rows carry the lease and the attempt; auto_ack rows have no lease and are gone.
#[test]
fn rows_carry_lease_and_attempt_and_auto_ack_has_none() {
    let db = TestDb::new("rows");
    let mut c = db.connect();
    let id = push(&mut c, "q", "p", json!({"k": 1}));
    push(&mut c, "q", "p", json!({"k": 2}));
    let rows = c.query("SELECT * FROM queen_pop('q', 'g', lease_seconds => 30)", &[]).unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r.get::<_, uuid::Uuid>("message_id"), id);
    assert_eq!(r.get::<_, String>("queue"), "q");
    assert_eq!(r.get::<_, String>("partition"), "p");
    assert_eq!(r.get::<_, Option<String>>("consumer_group").as_deref(), Some("g"));
    assert_eq!(r.get::<_, i32>("attempt"), 1);
    let lease: Option<uuid::Uuid> = r.get("lease_id");
    assert!(lease.is_some());
    let secs: f64 = c
        .query_one(
            "SELECT extract(epoch FROM $1::timestamptz - now())::float8",
            &[&r.get::<_, std::time::SystemTime>("lease_expires_at")],
        )
        .unwrap()
        .get(0);
    assert!((25.0..=31.0).contains(&secs), "lease_seconds => 30 gives a 30 s lease, got {secs}");
    // The partition is leased: the group gets nothing more; another group is independent.
    assert!(c.query("SELECT * FROM queen_pop('q', 'g')", &[]).unwrap().is_empty());
    let rows = c.query("SELECT * FROM queen_pop('q', 'other', auto_ack => true, batch => 5)", &[]).unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.get::<_, Option<uuid::Uuid>>("lease_id").is_none()));
    assert!(rows.iter().all(|r| r.get::<_, Option<String>>("consumer_group").as_deref() == Some("other")));
    assert!(c.query("SELECT * FROM queen_pop('q', 'other', auto_ack => true)", &[]).unwrap().is_empty());
    // Queue mode rows have a NULL consumer_group, and to_jsonb gives the contract's column names (docs/semantics.md §3).
    let j: Value = c.query_one("SELECT to_jsonb(m) FROM queen_pop('q', batch => 1) m", &[]).unwrap().get(0);
    let keys: Vec<&String> = j.as_object().unwrap().keys().collect();
    for k in [
        "message_id",
        "transaction_id",
        "queue",
        "partition",
        "partition_id",
        "payload",
        "trace_id",
        "created_at",
        "consumer_group",
        "lease_id",
        "lease_expires_at",
        "attempt",
    ] {
        assert!(keys.iter().any(|x| x.as_str() == k), "column {k} missing from {keys:?}");
    }
    assert_eq!(j["consumer_group"], Value::Null);
}

/// Several partitions in one call share one lease; `batch` caps the total.
#[test]
fn a_pop_can_claim_several_partitions() {
    let db = TestDb::new("multi");
    let mut c = db.connect();
    for p in ["a", "b", "c"] {
        for i in 0..3 {
            push(&mut c, "q", p, json!(format!("{p}{i}")));
        }
    }
    let rows = c.query("SELECT * FROM queen_pop('q', 'g', batch => 100, partitions => 2)", &[]).unwrap();
    assert_eq!(rows.len(), 6);
    let leases: HashSet<uuid::Uuid> = rows.iter().map(|r| r.get("lease_id")).collect();
    assert_eq!(leases.len(), 1);
    let parts: HashSet<String> = rows.iter().map(|r| r.get("partition")).collect();
    assert_eq!(parts.len(), 2);
    let rows = c.query("SELECT * FROM queen_pop('q', 'g', batch => 2, partitions => 3)", &[]).unwrap();
    assert_eq!(rows.len(), 2, "batch is the total cap");
    let last: HashSet<String> = rows.iter().map(|r| r.get("partition")).collect();
    assert!(last.is_disjoint(&parts));
}

/// Subscription modes (semantics §3.2): 'all', 'new', 'from', fixed at the group's first pop and
/// applying to partitions created later.
#[test]
fn subscription_modes() {
    let db = TestDb::new("subs");
    let mut c = db.connect();
    push(&mut c, "q", "p", json!("old"));
    // Mark a time between the old and the new message.
    thread::sleep(Duration::from_millis(20));
    let mark: std::time::SystemTime = c.query_one("SELECT clock_timestamp()", &[]).unwrap().get(0);
    thread::sleep(Duration::from_millis(20));
    push(&mut c, "q", "p", json!("mid"));

    // 'new' subscribes now: neither old nor mid.
    let got = payloads(
        &c.query("SELECT * FROM queen_pop('q', 'n', subscription_mode => 'new', auto_ack => true)", &[]).unwrap(),
    );
    assert!(got.is_empty());
    // 'from' the mark: mid only.
    let from = |c: &mut postgres::Client, g: &str| -> Vec<Value> {
        payloads(
            &c.query(
                "SELECT * FROM queen_pop('q', $1, batch => 10, subscription_from => $2, auto_ack => true)",
                &[&g, &mark],
            )
            .unwrap(),
        )
    };
    assert_eq!(from(&mut c, "f"), vec![json!("mid")]);

    push(&mut c, "q", "p", json!("new1"));
    push(&mut c, "q", "later-partition", json!("new2"));
    let mut n = drain(&mut c, "q", Some("n"));
    n.sort_by_key(|v| v.to_string());
    assert_eq!(n, vec![json!("new1"), json!("new2")], "'new' covers partitions created later");
    let mut f = drain(&mut c, "q", Some("f"));
    f.sort_by_key(|v| v.to_string());
    assert_eq!(f, vec![json!("new1"), json!("new2")]);
    // 'all' (the default): everything.
    assert_eq!(drain(&mut c, "q", Some("a")).len(), 4);

    // The mode is fixed at the first pop: a later pop asking 'all' does not replay.
    push(&mut c, "q", "p", json!("new3"));
    let got = payloads(
        &c.query("SELECT * FROM queen_pop('q', 'n', batch => 10, subscription_mode => 'all', auto_ack => true)", &[])
            .unwrap(),
    );
    assert_eq!(got, vec![json!("new3")]);
    // Queue mode ignores the mode: it always starts at the oldest message.
    let got = payloads(&c.query("SELECT * FROM queen_pop('q', NULL, batch => 100, subscription_mode => 'new', auto_ack => true, partition => 'p')", &[]).unwrap());
    assert_eq!(got.len(), 4);
}

/// delayedProcessing: not delivered before the delay; a waiting pop gets it once it is due.
#[test]
fn delayed_processing_holds_messages_back() {
    let db = TestDb::new("delayed");
    let mut c = db.connect();
    c.execute("SELECT queen_configure('q', '{\"delayedProcessing\": 1}')", &[]).unwrap();
    let t0 = Instant::now();
    push(&mut c, "q", "p", json!(1));
    assert!(pop_auto(&mut c, "q", Some("g"), 10).is_empty(), "not before the delay");
    let rows = c.query("SELECT * FROM queen_pop('q', 'g', wait_ms => 5000, auto_ack => true)", &[]).unwrap();
    assert_eq!(payloads(&rows), vec![json!(1)]);
    assert!(t0.elapsed() >= Duration::from_millis(950), "delivered after {:?}", t0.elapsed());
}

/// windowBuffer: a partition must be quiet for the window before its messages go out.
#[test]
fn window_buffer_waits_for_a_quiet_partition() {
    let db = TestDb::new("window");
    let mut c = db.connect();
    c.execute("SELECT queen_configure('q', '{\"windowBuffer\": 1}')", &[]).unwrap();
    push(&mut c, "q", "p", json!(1));
    thread::sleep(Duration::from_millis(600));
    let last = Instant::now();
    push(&mut c, "q", "p", json!(2));
    assert!(pop_auto(&mut c, "q", Some("g"), 10).is_empty());
    let rows =
        c.query("SELECT * FROM queen_pop('q', 'g', batch => 10, wait_ms => 5000, auto_ack => true)", &[]).unwrap();
    assert_eq!(payloads(&rows), vec![json!(1), json!(2)]);
    assert!(last.elapsed() >= Duration::from_millis(950), "the window counts from the newest message");
}

/// Duplicates (semantics §3.1): within a batch, against an earlier push, and 8 concurrent pushes
/// of one key, of which exactly one is queued and all report the same message.
#[test]
fn duplicates_are_detected_and_report_the_holder() {
    let db = TestDb::new("dups");
    let mut c = db.connect();
    let first = c.query_one("SELECT message_id, status FROM queen_push('q', '1', 'p', 'key-1')", &[]).unwrap();
    let again = c.query_one("SELECT message_id, status FROM queen_push('q', '2', 'p', 'key-1')", &[]).unwrap();
    assert_eq!(again.get::<_, String>(1), "duplicate");
    assert_eq!(again.get::<_, uuid::Uuid>(0), first.get::<_, uuid::Uuid>(0));
    // The same key in another partition is another message.
    let other = c.query_one("SELECT status FROM queen_push('q', '3', 'p2', 'key-1')", &[]).unwrap();
    assert_eq!(other.get::<_, String>(0), "queued");
    let rows = c
        .query(
            "SELECT idx, message_id, status, transaction_id FROM queen_push('[{\"queue\":\"q\",\"partition\":\"b\",\"transactionId\":\"x\"},{\"queue\":\"q\",\"partition\":\"b\",\"transactionId\":\"x\"},{\"queue\":\"q\",\"partition\":\"b\"}]')",
            &[],
        )
        .unwrap();
    assert_eq!(rows.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(rows[0].get::<_, String>(2), "queued");
    assert_eq!(rows[1].get::<_, String>(2), "duplicate");
    assert_eq!(rows[1].get::<_, uuid::Uuid>(1), rows[0].get::<_, uuid::Uuid>(1));
    assert_eq!(
        rows[2].get::<_, String>(3),
        rows[2].get::<_, uuid::Uuid>(1).to_string(),
        "no key: the message id is the key"
    );

    // 8 concurrent transactions push the same key and commit together.
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let name = db.name.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut c = connect(&name);
                let mut tx = c.transaction().unwrap();
                barrier.wait();
                let r = tx
                    .query_one("SELECT message_id, status FROM queen_push('q', $1, 'race', 'the-key')", &[&json!(i)])
                    .unwrap();
                tx.commit().unwrap();
                (r.get::<_, uuid::Uuid>(0), r.get::<_, String>(1))
            })
        })
        .collect();
    let results: Vec<(uuid::Uuid, String)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(results.iter().filter(|r| r.1 == "queued").count(), 1, "{results:?}");
    let ids: HashSet<uuid::Uuid> = results.iter().map(|r| r.0).collect();
    assert_eq!(ids.len(), 1, "every push reports the one message: {results:?}");
    let stored: i64 =
        c.query_one("SELECT count(*) FROM queen.messages WHERE transaction_id = 'the-key'", &[]).unwrap().get(0);
    assert_eq!(stored, 1);
}

/// semantics §3.1: creating a partition inside a long transaction blocks no other producer, and
/// transactions creating partitions in opposite orders do not deadlock.
#[test]
fn creating_partitions_never_blocks_other_producers() {
    let db = TestDb::new("noblock");
    let mut long = open_tx(&db);
    push(&mut long, "newq", "newp", json!("long"));
    let mut other = db.connect();
    other.batch_execute("SET statement_timeout = '3s'").unwrap();
    push(&mut other, "newq", "newp", json!("quick")); // would time out if it waited
    assert_eq!(drain(&mut other, "newq", Some("g")), vec![json!("quick")]);
    long.batch_execute("COMMIT").unwrap();
    assert_eq!(drain(&mut other, "newq", Some("g")), vec![json!("long")]);

    let mut t1 = open_tx(&db);
    let mut t2 = open_tx(&db);
    t1.batch_execute("SET statement_timeout = '3s'").unwrap();
    t2.batch_execute("SET statement_timeout = '3s'").unwrap();
    push(&mut t1, "dq", "x", json!(1));
    push(&mut t2, "dq", "y", json!(2));
    push(&mut t1, "dq", "y", json!(3));
    push(&mut t2, "dq", "x", json!(4));
    t1.batch_execute("COMMIT").unwrap();
    t2.batch_execute("COMMIT").unwrap();
    assert_eq!(drain(&mut other, "dq", Some("g")).len(), 4);
}

/// No claimable partition starves: while one partition keeps receiving messages, pops of one
/// partition at a time still serve every other partition.
#[test]
fn no_partition_starves() {
    let db = TestDb::new("starve");
    let mut c = db.connect();
    let items: Vec<Value> =
        (0..30).map(|i| json!({"queue": "q", "partition": format!("p{i}"), "payload": i})).collect();
    c.execute("SELECT count(*) FROM queen_push($1)", &[&Value::Array(items)]).unwrap();
    let mut served: HashSet<String> = HashSet::new();
    let mut producer = db.connect();
    for round in 0..200 {
        push(&mut producer, "q", "hot", json!(format!("hot{round}")));
        for r in c.query("SELECT partition FROM queen_pop('q', 'g', batch => 1, auto_ack => true)", &[]).unwrap() {
            served.insert(r.get(0));
        }
        if served.len() == 31 {
            break;
        }
    }
    assert_eq!(served.len(), 31, "served only {served:?}");
}

/// In a backlog the hints fill the pops, and discovery reads the log once a few pops, all it
/// owes at once (pace.rs): the same reading in fewer statements, while a partition that gets
/// its first message behind the backlog is still found and served long before the backlog
/// drains. (Read at every pop, 64 entries each, the point moved 16 times before x was found.)
#[test]
fn a_backlog_reads_the_log_once_a_few_pops_and_still_finds_a_new_partition() {
    let db = TestDb::new("paced");
    let mut c = db.connect();
    push_n(&mut c, "q", "y", 1000);
    push(&mut c, "q", "x", json!("x"));
    let point = |c: &mut postgres::Client| -> (i64, i64) {
        let r = c
            .query_one(
                "SELECT upto_txid, upto_seq FROM queen.discovery WHERE consumer_group = 'g'
                  ORDER BY upto_txid DESC, upto_seq DESC LIMIT 1",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    let mut consumer = db.connect();
    let (mut moves, mut last, mut served_at) = (0, None, None);
    for n in 1..=40 {
        let got = pop_auto(&mut consumer, "q", Some("g"), 10);
        assert!(!got.is_empty(), "pop {n} found nothing in a backlog");
        let now = Some(point(&mut c));
        if now != last {
            moves += 1;
            last = now;
        }
        if got.contains(&json!("x")) {
            served_at = Some(n);
            break;
        }
    }
    let served_at = served_at.expect("x was not served in 40 pops, with 60 more pops of y to go");
    assert!(served_at <= 20, "x served at pop {served_at}");
    assert!(moves <= 3, "the point moved {moves} times in {served_at} pops");
}

/// A queue that does not exist pops empty; wait_ms honours its deadline; a waiting pop gets a
/// message committed meanwhile by another connection.
#[test]
fn waiting_pops() {
    let db = TestDb::new("waiting");
    let mut c = db.connect();
    assert!(c.query("SELECT * FROM queen_pop('nosuchqueue')", &[]).unwrap().is_empty());
    let t0 = Instant::now();
    assert!(c.query("SELECT * FROM queen_pop('nosuchqueue', wait_ms => 300)", &[]).unwrap().is_empty());
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(3), "waited {waited:?}");

    let name = db.name.clone();
    let waiter = thread::spawn(move || {
        let mut c = connect(&name);
        let t0 = Instant::now();
        let rows = c.query("SELECT * FROM queen_pop('later', 'g', wait_ms => 10000, auto_ack => true)", &[]).unwrap();
        (payloads(&rows), t0.elapsed())
    });
    // Push once the waiter is waiting (its backend shows the pop running).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%queen_pop(''later''%' AND state = 'active'",
                &[],
            )
            .unwrap()
            .get(0);
        if n > 0 {
            break;
        }
        assert!(Instant::now() < deadline);
        thread::yield_now();
    }
    // queen.waiting_pops names the queue, which does not exist yet.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let queues: Vec<Option<String>> =
            c.query("SELECT queue FROM queen.waiting_pops", &[]).unwrap().iter().map(|r| r.get(0)).collect();
        if !queues.is_empty() {
            assert_eq!(queues, vec![Some("later".to_string())]);
            break;
        }
        assert!(Instant::now() < deadline, "the waiting pop never showed in queen.waiting_pops");
        thread::yield_now();
    }
    push(&mut c, "later", "p", json!("hello"));
    let (got, took) = waiter.join().unwrap();
    assert_eq!(got, vec![json!("hello")], "a waiting pop on a queue that did not exist gets its first message");
    assert!(took < Duration::from_secs(9));

    // Waiting needs READ COMMITTED.
    c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
    let err = c.query("SELECT * FROM queen_pop('q', wait_ms => 10)", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "0A000");
    let msg = err.as_db_error().unwrap().message().to_string();
    assert!(msg.contains("READ COMMITTED") && msg.contains("REPEATABLE READ"), "{msg}");
    c.batch_execute("ROLLBACK").unwrap();
}

/// Each bad input of semantics §3.1 and §3.2 raises its SQLSTATE, names the argument, and stores
/// nothing.
#[test]
fn bad_input_is_refused() {
    let db = TestDb::new("badinput");
    let mut c = db.connect();
    let long = "x".repeat(256);
    let cases: Vec<(String, &str, &str)> = vec![
        ("SELECT queen_push(NULL, '1')".into(), "22004", "\"queue\""),
        ("SELECT queen_push('', '1')".into(), "22023", "\"queue\""),
        (format!("SELECT queen_push('{long}', '1')"), "22023", "256 characters"),
        ("SELECT queen_push('q', NULL)".into(), "22004", "\"payload\""),
        ("SELECT queen_push('q', '1', NULL)".into(), "22004", "\"partition\""),
        ("SELECT queen_push('q', '1', '')".into(), "22023", "\"partition\""),
        (format!("SELECT queen_push('q', '1', '{long}')"), "22023", "256 characters"),
        ("SELECT queen_push('q', '1', 'p', '')".into(), "22023", "\"transaction_id\""),
        (format!("SELECT queen_push('q', '1', 'p', '{long}')"), "22023", "\"transaction_id\""),
        ("SELECT queen_push('q', '1', 'p', 't', 'not-a-uuid')".into(), "22P02", "uuid"),
        ("SELECT queen_push('{\"queue\": \"q\"}'::jsonb)".into(), "22023", "\"items\""),
        ("SELECT queen_push('[1]'::jsonb)".into(), "22023", "items[0]"),
        ("SELECT queen_push('[{\"queue\": \"q\"}, {\"partition\": \"p\"}]'::jsonb)".into(), "22023", "items[1].queue"),
        ("SELECT queen_push('[{\"queue\": \"q\", \"partition\": \"\"}]'::jsonb)".into(), "22023", "items[0].partition"),
        ("SELECT queen_push('[{\"queue\": \"q\", \"traceId\": \"zz\"}]'::jsonb)".into(), "22P02", "items[0].traceId"),
        ("SELECT queen_push(NULL::jsonb)".into(), "22004", "\"items\""),
        ("SELECT * FROM queen_pop(NULL)".into(), "22004", "\"queue\""),
        ("SELECT * FROM queen_pop('q', '')".into(), "22023", "\"consumer_group\""),
        ("SELECT * FROM queen_pop('q', '__QUEUE_MODE__')".into(), "22023", "reserved"),
        ("SELECT * FROM queen_pop('q', batch => 0)".into(), "22023", "\"batch\""),
        ("SELECT * FROM queen_pop('q', batch => NULL)".into(), "22004", "\"batch\""),
        ("SELECT * FROM queen_pop('q', partitions => 0)".into(), "22023", "\"partitions\""),
        ("SELECT * FROM queen_pop('q', wait_ms => -1)".into(), "22023", "\"wait_ms\""),
        ("SELECT * FROM queen_pop('q', lease_seconds => 0)".into(), "22023", "\"lease_seconds\""),
        ("SELECT * FROM queen_pop('q', 'g', subscription_mode => 'bogus')".into(), "22023", "\"subscription_mode\""),
        ("SELECT * FROM queen_pop('q', partition => '')".into(), "22023", "\"partition\""),
    ];
    for (sql, state, needle) in cases {
        let err = c.batch_execute(&sql).unwrap_err();
        assert_eq!(sqlstate(&err), state, "{sql}: {err}");
        let msg = err.as_db_error().map(|e| e.message().to_string()).unwrap_or_default();
        assert!(msg.contains(needle), "{sql}: {msg:?} should name {needle:?}");
    }
    let stored: i64 = c.query_one("SELECT count(*) FROM queen.messages", &[]).unwrap().get(0);
    assert_eq!(stored, 0, "nothing was stored");
    // A bad item in a batch stores none of the good ones either.
    assert!(c.batch_execute("SELECT queen_push('[{\"queue\": \"q\"}, {\"queue\": \"\"}]'::jsonb)").is_err());
    let stored: i64 = c.query_one("SELECT count(*) FROM queen.messages", &[]).unwrap().get(0);
    assert_eq!(stored, 0);
}

/// maxSize (semantics §4): a producer pushing one transaction after another never overshoots; the
/// error names the queue and its limit; a batch that would overshoot stores nothing.
#[test]
fn max_size_is_enforced() {
    let db = TestDb::new("maxsize");
    let mut c = db.connect();
    c.execute("SELECT queen_configure('capped', '{\"maxSize\": 3}')", &[]).unwrap();
    for i in 0..3 {
        push(&mut c, "capped", "p", json!(i));
    }
    let err = c.query("SELECT queen_push('capped', '4')", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "54000");
    let msg = err.as_db_error().unwrap().message().to_string();
    assert!(msg.contains("\"capped\"") && msg.contains('3'), "{msg}");
    let n: i64 = c.query_one("SELECT count(*) FROM queen.messages", &[]).unwrap().get(0);
    assert_eq!(n, 3);
    // A duplicate of a stored key is not a new message: no error.
    c.execute("SELECT queen_configure('capped2', '{\"maxSize\": 1}')", &[]).unwrap();
    c.query_one("SELECT status FROM queen_push('capped2', '1', 'p', 'k')", &[]).unwrap();
    let s: String = c.query_one("SELECT status FROM queen_push('capped2', '1', 'p', 'k')", &[]).unwrap().get(0);
    assert_eq!(s, "duplicate");
}

/// A pop that found a partition empty deletes its hints, but only those its look's snapshot
/// accounts for. Here a discovery has passed message M of partition x (a later pop read it in
/// the queue log, hinted x, and delivered from y instead), and a pop whose look began before M
/// committed now clears x's hints: the hint for M must survive, or M would wait for the next
/// push to x, however long that is.
#[test]
fn clearing_hints_keeps_those_a_look_could_not_account_for() {
    let db = TestDb::new("hints");
    let mut c = db.connect();
    push(&mut c, "q", "y", json!("y1"));
    push(&mut c, "q", "y", json!("y2"));
    assert_eq!(pop_auto(&mut c, "q", Some("g"), 1), vec![json!("y1")]);
    // The snapshot of a pop's look at x, taken before M commits.
    let look = look_snapshot(&mut c);
    push(&mut c, "q", "x", json!("M"));
    // This pop's discovery reads M in the log and hints x; it delivers from y, since x is
    // taken meanwhile by an open transaction's pop (which pop goes first among due partitions
    // is the implementation's choice; this one has no choice). A session of its own: one whose
    // last pop was filled takes the hints first, and reads the log a few pops later (pace.rs).
    let mut holder = db.connect();
    holder.batch_execute("BEGIN").unwrap();
    holder.query("SELECT * FROM queen_pop('q', 'g', partition => 'x')", &[]).unwrap();
    assert_eq!(pop_auto(&mut db.connect(), "q", Some("g"), 1), vec![json!("y2")]);
    holder.batch_execute("ROLLBACK").unwrap();
    let x: uuid::Uuid = c.query_one("SELECT partition_id FROM queen.partitions WHERE name = 'x'", &[]).unwrap().get(0);
    let hints = |c: &mut postgres::Client| -> i64 {
        c.query_one("SELECT count(*) FROM queen.ready WHERE partition_id = $1 AND consumer_group = 'g'", &[&x])
            .unwrap()
            .get(0)
    };
    assert_eq!(hints(&mut c), 1, "discovery hinted x");
    // The earlier pop's pass: x looked empty to it.
    prepare_query(&mut c, "pop", "hints_delete", &["uuid", "text", "bigint", "bigint", "bigint[]", "int", "bigint"]);
    c.batch_execute(&format!("EXECUTE hints_delete ('{x}', 'g', {look}, 0, NULL)")).unwrap();
    assert_eq!(hints(&mut c), 1, "the hint for M survives a look that could not see M");
    assert_eq!(pop_auto(&mut c, "q", Some("g"), 10), vec![json!("M")]);
    // A look that saw x empty after M was delivered clears the hints.
    let look = look_snapshot(&mut c);
    c.batch_execute(&format!("EXECUTE hints_delete ('{x}', 'g', {look}, 0, NULL)")).unwrap();
    assert_eq!(hints(&mut c), 0);
}

/// `rounds` batch pushes to queue q, each one message to every partition p0..p(parts-1) with
/// the round as payload: the partitions' messages interleave in the queue log.
fn push_rounds(c: &mut postgres::Client, parts: usize, rounds: i32) {
    for round in 0..rounds {
        let items: Vec<Value> =
            (0..parts).map(|p| json!({"queue": "q", "partition": format!("p{p}"), "payload": round})).collect();
        c.query("SELECT 1 FROM queen_push($1::jsonb)", &[&Value::Array(items)]).unwrap();
    }
}

/// An `auto_ack` pop that takes everything its look read, having read fewer than it asked for,
/// leaves the partition no hint: as of its look there is nothing left there, and a hint due now
/// would only send the next pop to look and delete it (each partition emptied in a drain cost
/// a look and a delete). A pop that leaves messages behind keeps the partition due now; a
/// message pushed after the drain is found as any other.
#[test]
fn an_auto_ack_pop_that_empties_a_partition_leaves_it_no_hint() {
    let db = TestDb::new("drained_hint");
    let mut c = db.connect();
    assert!(pop_auto(&mut c, "q", Some("g"), 10).is_empty(), "g subscribes");
    for i in 0..3 {
        push(&mut c, "q", "x", json!(i));
    }
    let hints = |c: &mut postgres::Client| -> i64 {
        c.query_one(
            "SELECT count(*) FROM queen.ready r JOIN queen.partitions p USING (partition_id)
              WHERE p.name = 'x' AND r.consumer_group = 'g'",
            &[],
        )
        .unwrap()
        .get(0)
    };
    assert_eq!(pop_auto(&mut c, "q", Some("g"), 10), vec![json!(0), json!(1), json!(2)]);
    assert_eq!(hints(&mut c), 0, "x emptied: no hint left for it");
    for i in 3..6 {
        push(&mut c, "q", "x", json!(i));
    }
    assert_eq!(pop_auto(&mut c, "q", Some("g"), 2), vec![json!(3), json!(4)]);
    assert_eq!(hints(&mut c), 1, "a message left in x: it stays due");
    // Exactly as many as are left: the look read all it asked for, so it cannot tell the
    // partition is empty; the cursor's write looks past the frontier and can (state.sql).
    let mut v = 5;
    settles(&mut c, "the write that took x's last message saw nothing after it", |c| {
        if v > 5 {
            push(c, "q", "x", json!(v));
        }
        assert_eq!(pop_auto(c, "q", Some("g"), 1), vec![json!(v)]);
        v += 1;
    });
    push(&mut c, "q", "x", json!(v));
    assert_eq!(pop_auto(&mut c, "q", Some("g"), 10), vec![json!(v)], "a later push to x is found");
    assert_eq!(hints(&mut c), 0);
}

fn hints_of(c: &mut postgres::Client, partition: &str, group: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM queen.ready r JOIN queen.partitions p USING (partition_id)
          WHERE p.name = $1 AND r.consumer_group = $2",
        &[&partition, &group],
    )
    .unwrap()
    .get(0)
}

fn pop_lease(c: &mut postgres::Client, batch: i32) -> (uuid::Uuid, Vec<Value>) {
    let rows = c.query("SELECT * FROM queen_pop('q', 'g', batch => $1)", &[&batch]).unwrap();
    let lease = rows.first().map(|r| r.get::<_, uuid::Uuid>("lease_id")).unwrap_or_default();
    (lease, payloads(&rows))
}

/// An ack that ends a lease and leaves the cursor with nothing behind its frontier writes no
/// hint when nothing after the frontier is visible: before, it left one due now, and the next
/// pop looked at the emptied partition only to delete it (a third of a look per pop when pops
/// of 100 drain partitions of 300). A message its snapshot cannot see is found by discovery
/// when it commits, and a lease it does not end, or a retry that puts a message back, keeps
/// the hint.
#[test]
fn an_ack_that_empties_a_partition_leaves_it_no_hint() {
    let db = TestDb::new("acked_hint");
    let mut c = db.connect();
    assert!(pop_auto(&mut c, "q", Some("g"), 10).is_empty(), "g subscribes");
    let ack = |c: &mut postgres::Client, lease: uuid::Uuid| {
        c.query("SELECT * FROM queen_ack_lease($1)", &[&lease]).unwrap();
    };
    let mut n = 0;
    let mut next = || {
        n += 1;
        json!(n)
    };
    settles(&mut c, "x emptied: no hint left for it", |c| {
        let m = (0..3).map(|_| next()).collect::<Vec<_>>();
        for v in &m {
            push(c, "q", "x", v.clone());
        }
        let (lease, got) = pop_lease(c, 10);
        assert_eq!(got, m);
        assert_eq!(hints_of(c, "x", "g"), 1, "the lease's hint, due when it runs out");
        ack(c, lease);
    });

    let m = (0..3).map(|_| next()).collect::<Vec<_>>();
    for v in &m {
        push(&mut c, "q", "x", v.clone());
    }
    let (lease, got) = pop_lease(&mut c, 2);
    assert_eq!(got, m[..2]);
    ack(&mut c, lease);
    assert_eq!(hints_of(&mut c, "x", "g"), 1, "a message left in x: it stays due");
    let (lease, got) = pop_lease(&mut c, 1);
    assert_eq!(got, m[2..]);
    c.query("SELECT * FROM queen_ack_lease($1, 'retry')", &[&lease]).unwrap();
    assert_eq!(hints_of(&mut c, "x", "g"), 1, "a retry puts it back: x stays due");
    let (lease, got) = pop_lease(&mut c, 10);
    assert_eq!(got, m[2..]);
    ack(&mut c, lease);

    // A message pushed by a transaction the ack's snapshot sees running: discovery hints it.
    let mut producer = db.connect();
    let mut late = json!(null);
    settles(&mut c, "nothing after the batch was visible to the ack", |c| {
        let m = next();
        push(c, "q", "x", m.clone());
        let (lease, got) = pop_lease(c, 10);
        assert_eq!(got, vec![m]);
        let mut tx = producer.transaction().unwrap();
        late = next();
        tx.query("SELECT queen_push('q', $1, 'x')", &[&late]).unwrap();
        ack(c, lease);
        tx.commit().unwrap();
    });
    assert_eq!(pop_auto(&mut c, "q", Some("g"), 10), vec![late], "the late message is found");

    // A message of the acking transaction itself is discovery's too, once it commits.
    let mut own = json!(null);
    settles(&mut c, "the acker's own message is not the ack's to hint", |c| {
        let m = next();
        push(c, "q", "x", m.clone());
        let (lease, got) = pop_lease(c, 10);
        assert_eq!(got, vec![m]);
        let mut tx = c.transaction().unwrap();
        own = next();
        tx.query("SELECT queen_push('q', $1, 'x')", &[&own]).unwrap();
        tx.query("SELECT * FROM queen_ack_lease($1)", &[&lease]).unwrap();
        tx.commit().unwrap();
    });
    assert_eq!(pop_auto(&mut c, "q", Some("g"), 10), vec![own], "the acker's own message is found");
}

/// Runs `case`, which ends with a pop or an ack that finishes what g was delivered from x,
/// until that left g's cursor in x with no pending transaction, then checks that x has no hint.
/// (A transaction of a concurrent test that ran between x's frontier and the batch's end is
/// kept pending, and then x rightly stays due.)
fn settles(c: &mut postgres::Client, what: &str, mut case: impl FnMut(&mut postgres::Client)) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        case(c);
        let pending: i32 = c
            .query_one(
                "SELECT coalesce(cardinality(k.pending_txid), 0) FROM queen.cursors k
                   JOIN queen.partitions p USING (partition_id) WHERE p.name = 'x' AND k.consumer_group = 'g'",
                &[],
            )
            .unwrap()
            .get(0);
        if pending == 0 {
            assert_eq!(hints_of(c, "x", "g"), 0, "{what}");
            return;
        }
        assert!(Instant::now() < deadline, "{what}: a transaction stayed pending in x for 30 s");
        drain(c, "q", Some("g"));
    }
}

/// A seek hints every partition of the queue, and those hints account for every message the
/// seek saw (their `seen_xmin`), as discovery's do: the discovery that reads the log again from
/// the new position leaves them as they are. (With hints that accounted for nothing, the first
/// scans after a seek locked and rewrote the hint of every partition they met: 10 000 row
/// locks and updates after a seek over a backlog in 10 000 partitions.)
#[test]
fn discovery_after_a_seek_rewrites_none_of_its_hints() {
    let db = TestDb::new("seek_hints");
    let mut c = db.connect();
    let parts = 30;
    push_rounds(&mut c, parts, 2);
    // A hint accounts for the transactions below its seek's xmin, which a transaction of
    // another test that was running then holds back: seek again until it was not.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        c.query("SELECT queen_seek('q', 'g', '-infinity')", &[]).unwrap();
        let accounted: bool = c
            .query_one(
                "SELECT min(seen_xmin) > (SELECT max(txid) FROM queen.messages) FROM queen.ready WHERE consumer_group = 'g'",
                &[],
            )
            .unwrap()
            .get(0);
        if accounted {
            break;
        }
        assert!(Instant::now() < deadline, "the seek's hints never accounted for the messages it saw");
    }
    let hints = |c: &mut postgres::Client| -> HashMap<uuid::Uuid, String> {
        c.query("SELECT partition_id, xmin::text FROM queen.ready WHERE consumer_group = 'g'", &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    };
    // On one server discovery reads on from the seek's snapshot (the next test); on Citus it
    // reads the log again from the seek's position, as here once the seek's point is gone.
    c.execute("DELETE FROM queen.discovery WHERE consumer_group = 'g'", &[]).unwrap();
    let before = hints(&mut c);
    assert_eq!(before.len(), parts, "the seek hinted every partition");
    let mut consumer = db.connect();
    let got = consumer.query("SELECT partition_id FROM queen_pop('q', 'g', batch => 1)", &[]).unwrap();
    let delivered: uuid::Uuid = got[0].get(0);
    let points: i64 =
        c.query_one("SELECT count(*) FROM queen.discovery WHERE consumer_group = 'g'", &[]).unwrap().get(0);
    assert_eq!(points, 1, "the pop read the log after the seek's position");
    let after = hints(&mut c);
    let rewritten: Vec<_> = before.iter().filter(|(p, x)| **p != delivered && after.get(*p) != Some(*x)).collect();
    assert!(rewritten.is_empty(), "discovery rewrote {} of the seek's hints", rewritten.len());
}

/// After a seek, discovery reads the queue log on from the seek's snapshot, not from the seek's
/// position: every partition with a message the seek saw has a hint that accounts for it, so
/// the log below would find nothing to hint (after a seek to the start, the whole log). A
/// transaction open across the seek is pending in that point: what it pushed, in a partition
/// the seek could not see, is found when it commits, as is what is pushed after the seek.
#[test]
fn a_seek_starts_discovery_after_what_it_saw() {
    let db = TestDb::new("seek_point");
    let mut c = db.connect();
    let parts = 20;
    push_rounds(&mut c, parts, 2);
    let mut late = open_tx(&db);
    push(&mut late, "q", "late", json!("late"));
    c.query("SELECT queen_seek('q', 'g', '-infinity')", &[]).unwrap();
    let point: Option<i64> =
        c.query_one("SELECT max(upto_txid) FROM queen.discovery WHERE consumer_group = 'g'", &[]).unwrap().get(0);
    let point = point.expect("the seek recorded a discovery point");
    let newest: i64 = c.query_one("SELECT max(txid) FROM queen.messages", &[]).unwrap().get(0);
    assert!(point > newest, "the point ({point}) is past every message the seek saw ({newest})");
    late.batch_execute("COMMIT").unwrap();
    push(&mut c, "q", "after", json!("after"));
    let mut got = drain(&mut db.connect(), "q", Some("g"));
    got.sort_by_key(|v| v.to_string());
    let mut want: Vec<Value> = (0..2).flat_map(|r| std::iter::repeat_n(json!(r), parts)).collect();
    want.extend([json!("after"), json!("late")]);
    want.sort_by_key(|v| v.to_string());
    assert_eq!(got, want, "every message once: the replayed ones, the late commit's, the one pushed after");
}

/// A pop that finds no hint while another pop of its group is reading the queue log reads the log
/// too, instead of coming back empty: the other's hints are not visible before it commits, and
/// the messages are deliverable now. (A pop without a wait returned nothing — 54 of 2 400 pops
/// of 16 clients draining a backlog their group had never read — and a waiting one slept while
/// messages were deliverable, semantics §3.2.)
#[test]
fn a_pop_does_not_come_back_empty_while_another_reads_the_log() {
    let db = TestDb::new("discovering_elsewhere");
    let mut c = db.connect();
    for p in ["a", "b", "c"] {
        push(&mut c, "q", p, json!(p));
    }
    let mut a = db.connect();
    let a_pid: i32 = a.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    a.batch_execute("SET queen.debug_discovery_delay_ms = 3000").unwrap();
    let h = std::thread::spawn(move || pop_auto(&mut a, "q", Some("g"), 1));
    // A holds the group's discovery mark, its hints not written yet.
    await_debug_sleep(&mut c, a_pid);
    let t = Instant::now();
    let b = pop_auto(&mut db.connect(), "q", Some("g"), 1);
    assert_eq!(b.len(), 1, "B read the log itself and delivered");
    let waited = db
        .connect()
        .query("SELECT * FROM queen_pop('q', 'g', batch => 1, wait_ms => 10000, auto_ack => true)", &[])
        .unwrap();
    assert_eq!(waited.len(), 1, "a waiting pop too, at once");
    assert!(t.elapsed() < Duration::from_secs(2), "neither waited for A: {:?}", t.elapsed());
    let a = h.join().unwrap();
    let mut all: Vec<Value> = a.into_iter().chain(b).chain(payloads(&waited)).collect();
    all.extend(drain(&mut c, "q", Some("g")));
    all.sort_by_key(|v| v.to_string());
    assert_eq!(all, vec![json!("a"), json!("b"), json!("c")], "each message once");
}

/// The hints are bounded by partitions × groups, not by pops (issue 10): discovery reads the
/// queue log in stretches that name most partitions again and again; it writes nothing for a
/// partition whose hint already accounts for what it found, and updates a hint in place before
/// it adds one. (When every discovery inserted, 1 000 partitions held 188 355 hints after 560
/// pops.) Two groups drain 20 partitions whose messages are interleaved in the log.
#[test]
fn hints_stay_bounded_by_partitions_and_groups() {
    let db = TestDb::new("bounded");
    let mut c = db.connect();
    let parts = 20;
    push_rounds(&mut c, parts, 40);
    let pop_ack = "SELECT count(*) FILTER (WHERE success) FROM queen_ack(
                       coalesce((SELECT jsonb_agg(to_jsonb(m)) FROM queen_pop('q', $1, batch => 10) m), '[]'))";
    let (mut most, mut pops, mut acked) = (0i64, 0, 0i64);
    for g in ["g1", "g2"] {
        loop {
            let n: i64 = c.query_one(pop_ack, &[&g]).unwrap().get(0);
            if n == 0 {
                break;
            }
            acked += n;
            pops += 1;
            let hints: i64 = c.query_one("SELECT count(*) FROM queen.ready", &[]).unwrap().get(0);
            most = most.max(hints);
        }
    }
    assert_eq!(acked, 2 * 40 * parts as i64, "each group got every message");
    assert!(pops >= 160, "{pops} pops");
    assert!(most <= 2 * parts as i64, "at most one hint per partition and group, saw {most} after {pops} pops");
    let points: i64 = c.query_one("SELECT count(*) FROM queen.discovery", &[]).unwrap().get(0);
    assert!(points <= 2, "one discovery point per group, saw {points}");
}

/// The same rule when a pop moves a partition's hints to the end of the lease it saw: a lease
/// released since the look left a hint due now, and moving that one to the old lease's expiry
/// would hold the partition's next message back for the whole lease time.
#[test]
fn moving_hints_keeps_those_a_look_could_not_account_for() {
    let db = TestDb::new("hints_move");
    let mut c = db.connect();
    push(&mut c, "q", "x", json!(1));
    push(&mut c, "q", "x", json!(2));
    let row = c.query_one("SELECT message_id, lease_id FROM queen_pop('q', 'g')", &[]).unwrap();
    let (m, lease): (uuid::Uuid, uuid::Uuid) = (row.get(0), row.get(1));
    // The snapshot of another pop's look at x, which sees the lease active.
    let look = look_snapshot(&mut c);
    let ok: bool =
        c.query_one("SELECT success FROM queen_ack($1, $2, 'completed', NULL, 'g')", &[&m, &lease]).unwrap().get(0);
    assert!(ok, "the lease is released and x is due now");
    // That pop's pass: move x's hints to the end of the lease it saw.
    let (queue, x): (uuid::Uuid, uuid::Uuid) = {
        let r = c.query_one("SELECT queue_id, partition_id FROM queen.partitions WHERE name = 'x'", &[]).unwrap();
        (r.get(0), r.get(1))
    };
    prepare_query(
        &mut c,
        "pop",
        "hints_set",
        &["uuid", "uuid", "text", "timestamptz", "bigint", "bigint", "bigint[]", "int", "bigint", "bigint"],
    );
    c.batch_execute(&format!(
        "EXECUTE hints_set ('{queue}', '{x}', 'g', now() + interval '300 seconds', {look}, 0, queen.txid(), queen.txid())"
    ))
        .unwrap();
    assert_eq!(pop_auto(&mut c, "q", Some("g"), 10), vec![json!(2)], "x's next message is due now");
}

/// Pops read the group's subscription and the queue's options from a per-backend cache
/// (src/cache.rs). What another session commits — a configure, a prepared configure committed
/// from a third session, a deleted and re-created queue — is what the next pop uses; what the
/// pop's own transaction changes is used at once, and forgotten if it rolls back.
#[test]
fn a_pop_uses_what_other_sessions_committed_not_what_it_cached() {
    let db = TestDb::new("cache");
    let mut a = db.connect();
    let mut b = db.connect();
    let mut c = db.connect();
    let mut n = 0;
    // A message in a partition of its own, popped with a lease: how long the lease runs says
    // which leaseTime the pop used.
    let mut lease_seconds = |a: &mut postgres::Client, b: &mut postgres::Client| -> i32 {
        n += 1;
        let p = format!("p{n}");
        push(b, "q", &p, json!(n));
        let row = a
            .query_one(
                "SELECT extract(epoch FROM lease_expires_at - clock_timestamp())::int \
                   FROM queen_pop('q', 'g', partition => $1)",
                &[&p],
            )
            .unwrap();
        row.get::<_, i32>(0)
    };
    let configure = |c: &mut postgres::Client, seconds: i32| {
        c.execute("SELECT queen_configure('q', jsonb_build_object('leaseTime', $1::int))", &[&seconds]).unwrap();
    };
    configure(&mut b, 100);
    assert!((95..=100).contains(&lease_seconds(&mut a, &mut b)), "the first pop reads leaseTime 100");
    assert!((95..=100).contains(&lease_seconds(&mut a, &mut b)), "and keeps it");

    configure(&mut b, 500);
    assert!((495..=500).contains(&lease_seconds(&mut a, &mut b)), "another session's configure is seen");

    // Prepared in one session, committed by another: not before COMMIT PREPARED, at once after.
    b.batch_execute("BEGIN").unwrap();
    configure(&mut b, 900);
    b.batch_execute(&format!("PREPARE TRANSACTION '{}_cfg'", db.name)).unwrap();
    assert!((495..=500).contains(&lease_seconds(&mut a, &mut c)), "a prepared configure is not committed");
    c.batch_execute(&format!("COMMIT PREPARED '{}_cfg'", db.name)).unwrap();
    assert!((895..=900).contains(&lease_seconds(&mut a, &mut c)), "COMMIT PREPARED elsewhere is seen");

    // The pop's own transaction: its change at once, and nothing of it after a rollback.
    a.batch_execute("BEGIN").unwrap();
    configure(&mut a, 50);
    assert!((45..=50).contains(&lease_seconds(&mut a, &mut b)), "its own configure, uncommitted");
    a.batch_execute("ROLLBACK").unwrap();
    assert!((895..=900).contains(&lease_seconds(&mut a, &mut b)), "rolled back: forgotten");

    // A deleted queue takes the group's subscription with it: a pop with mode 'new' after the
    // queue is pushed to again subscribes anew, and the message pushed before is not new.
    a.query("SELECT * FROM queen_pop('q', 'h', batch => 10, auto_ack => true)", &[]).unwrap();
    b.execute("SELECT queen_delete_queue('q')", &[]).unwrap();
    push(&mut b, "q", "p", json!("before"));
    let got = payloads(
        &a.query("SELECT * FROM queen_pop('q', 'h', batch => 10, auto_ack => true, subscription_mode => 'new')", &[])
            .unwrap(),
    );
    assert!(got.is_empty(), "a subscription of the deleted queue was used: {got:?}");
    push(&mut b, "q", "p", json!("after"));
    assert_eq!(pop_auto(&mut a, "q", Some("h"), 10), vec![json!("after")]);
}

/// As push_rounds, rounds `from`..`to` over p0 .. p(`partitions` - 1), each message with a
/// payload of its own (round * 1000 + partition); the payloads, sorted.
fn push_numbered_rounds(admin: &mut postgres::Client, partitions: i64, from: i64, to: i64) -> Vec<i64> {
    for r in from..to {
        let items: Vec<Value> = (0..partitions)
            .map(|p| json!({"queue": "q", "partition": format!("p{p}"), "payload": r * 1000 + p}))
            .collect();
        admin.execute("SELECT count(*) FROM queen_push($1)", &[&Value::Array(items)]).unwrap();
    }
    let mut all: Vec<i64> = (from..to).flat_map(|r| (0..partitions).map(move |p| r * 1000 + p)).collect();
    all.sort();
    all
}

/// Group g's pops of 10 (auto_ack) until one returns nothing: the payloads, sorted.
fn drain_in_tens(c: &mut postgres::Client) -> Vec<i64> {
    let mut all = Vec::new();
    loop {
        let got = pop_auto(c, "q", Some("g"), 10);
        if got.is_empty() {
            all.sort();
            return all;
        }
        all.extend(got.iter().map(|v| v.as_i64().unwrap()));
    }
}

/// A backend's book of hints (accounted.rs) spares its scans the probes of partitions that a
/// hint of another transaction accounts for; it never hides a message. One consumer session
/// reads a backlog of 20 partitions that come again and again in the log (50 transactions of
/// one message each), in pops of 10 that leave each partition hinted until its last pop: its
/// scans meet partitions hinted by its own earlier, committed pops. Then, in the same session:
/// what comes after in the same partitions; everything again after a seek back; everything
/// again after the group is deleted; and a message found by a transaction that wrote first
/// and rolled back, found again.
#[test]
fn a_backend_that_remembers_hints_loses_nothing() {
    let db = TestDb::new("accounted");
    let mut admin = db.connect();
    let mut c = db.connect();
    assert!(pop_auto(&mut c, "q", Some("g"), 10).is_empty(), "g subscribes");
    let first = push_numbered_rounds(&mut admin, 20, 0, 50);
    assert_eq!(drain_in_tens(&mut c), first, "the backlog, each message once");
    let after = push_numbered_rounds(&mut admin, 20, 50, 60);
    assert_eq!(drain_in_tens(&mut c), after, "what came after, in the partitions met before");
    let mut all: Vec<i64> = first.iter().chain(&after).copied().collect();
    all.sort();
    admin.execute("SELECT queen_seek('q', 'g', '-infinity')", &[]).unwrap();
    assert_eq!(drain_in_tens(&mut c), all, "everything again after a seek back");
    admin.execute("SELECT queen_delete_group('g', 'q')", &[]).unwrap();
    assert_eq!(
        pop_auto(&mut c, "q", Some("g"), 10).len(),
        10,
        "deleted, the group subscribes afresh at its first pop and reads from the start"
    );
    assert_eq!(drain_in_tens(&mut c).len(), all.len() - 10, "and the rest of everything");
    // A transaction that wrote first (its own xid: the book is not read) and rolls back.
    let last = push_numbered_rounds(&mut admin, 20, 60, 61);
    c.batch_execute("BEGIN; SELECT pg_current_xact_id()").unwrap();
    assert_eq!(pop_auto(&mut c, "q", Some("g"), 100).len(), 1);
    c.batch_execute("ROLLBACK").unwrap();
    let got = drain_in_tens(&mut c);
    assert_eq!(got, last, "the rolled-back transaction's messages, found again");
    assert_eq!(lag(&mut admin, "q", Some("g")), 0);
}

/// A backend's book of hints is kept under the cache's ticket (accounted.rs): rows restored
/// under it set the group back (its subscription unchanged), and its scans probe again. One
/// consumer session pops once (its first scan hints 64 of 100 partitions), the group's
/// rows are saved, the session drains the queue (its book now holds every partition), and the
/// saved rows are put back as a restore writes them: the session reads everything it had not
/// read at the save again, the partitions its first scan had not reached included.
#[test]
fn a_backend_forgets_its_hints_when_rows_are_restored_under_it() {
    let db = TestDb::new("accounted_restore");
    let mut admin = db.connect();
    let mut c = db.connect();
    assert!(pop_auto(&mut c, "q", Some("g"), 10).is_empty(), "g subscribes");
    push_numbered_rounds(&mut admin, 100, 0, 30);
    let first = pop_auto(&mut c, "q", Some("g"), 10).len();
    assert_eq!(first, 10);
    let hinted: i64 = admin.query_one("SELECT count(DISTINCT partition_id) FROM queen.ready", &[]).unwrap().get(0);
    assert!(hinted < 100, "the first scan hinted only part of the partitions ({hinted})");
    admin
        .batch_execute(
            "CREATE TABLE saved_cursors AS SELECT * FROM queen.cursors;
             CREATE TABLE saved_ready AS SELECT * FROM queen.ready;
             CREATE TABLE saved_discovery AS SELECT * FROM queen.discovery;",
        )
        .unwrap();
    assert_eq!(drain_in_tens(&mut c).len(), 3000 - first, "the rest, once");
    admin
        .batch_execute(
            "BEGIN;
             DELETE FROM queen.cursors; DELETE FROM queen.ready; DELETE FROM queen.discovery;
             INSERT INTO queen.cursors SELECT * FROM saved_cursors;
             INSERT INTO queen.ready SELECT * FROM saved_ready;
             INSERT INTO queen.discovery SELECT * FROM saved_discovery;
             COMMIT;",
        )
        .unwrap();
    assert_eq!(drain_in_tens(&mut c).len(), 3000 - first, "restored: the rest again, every partition");
    assert_eq!(lag(&mut admin, "q", Some("g")), 0);
}

/// A group's discovery point can lag far behind what it consumed: one pop of 10 000 takes every
/// message of the partitions its first scan found, and the log after the point then holds only
/// finished messages. A pop must read on past that stretch to a partition with messages, not
/// return nothing (20 empty pops in a row, before), and a waiting pop must not sleep meanwhile.
#[test]
fn a_pop_reads_on_past_a_finished_stretch_of_the_log() {
    let db = TestDb::new("lagging_point");
    let mut c = db.connect();
    let fill = |c: &mut postgres::Client, n: i32| {
        c.query(
            "SELECT count(*) FROM queen_push((SELECT jsonb_agg(jsonb_build_object(
                 'queue', 'q', 'partition', 'p' || (i % 10), 'payload', i)) FROM generate_series(1, $1) i))",
            &[&n],
        )
        .unwrap();
    };
    let take_all = |c: &mut postgres::Client, group: &str| -> i64 {
        c.query_one(
            "SELECT count(*) FROM queen_pop('q', $1, batch => 10000, partitions => 10, auto_ack => true)",
            &[&group],
        )
        .unwrap()
        .get(0)
    };
    fill(&mut c, 5000);
    push(&mut c, "q", "z", json!("z"));
    assert_eq!(take_all(&mut c, "g"), 5000, "the first scan finds all ten partitions");
    assert_eq!(pop_auto(&mut c, "q", Some("g"), 100), vec![json!("z")], "4 000 finished entries, then z");

    // More finished entries than one pop reads (18 000): a waiting pop goes on reading at once.
    let db = TestDb::new("lagging_point_wait");
    let mut c = db.connect();
    fill(&mut c, 20000);
    push(&mut c, "q", "z", json!("z"));
    assert_eq!(take_all(&mut c, "g") + take_all(&mut c, "g"), 20000);
    let started = Instant::now();
    let rows = c.query("SELECT payload FROM queen_pop('q', 'g', wait_ms => 60000, auto_ack => true)", &[]).unwrap();
    assert_eq!(payloads(&rows), vec![json!("z")]);
    assert!(started.elapsed() < Duration::from_secs(30), "the waiting pop slept: {:?}", started.elapsed());
}

/// A pop that finds a partition another pop is visiting moves on to the next, and tells its
/// client nothing: its try at the other's mark built a guard for a lock it had not taken, whose
/// release drew a WARNING ("you don't own a lock of type ExclusiveLock") to the application at
/// every such pop — 200 in 400 pops at 4 clients.
#[test]
fn a_pop_passing_a_partition_in_use_sends_no_warning() {
    let db = TestDb::new("pass_quiet");
    let mut c = db.connect();
    push(&mut c, "q", "x", json!("x"));
    push(&mut c, "q", "y", json!("y"));
    // A delivers from one partition and holds its mark until it ends (visit.rs).
    let mut a = open_tx(&db);
    let first = payloads(&a.query("SELECT * FROM queen_pop('q', 'g', batch => 1)", &[]).unwrap());
    assert_eq!(first.len(), 1);
    // B finds both partitions and looks at each: the one A holds is passed by.
    let (mut b, heard) = db.connect_hearing();
    let second = payloads(&b.query("SELECT * FROM queen_pop('q', 'g', batch => 10, partitions => 2)", &[]).unwrap());
    let other = if first[0] == json!("x") { json!("y") } else { json!("x") };
    assert_eq!(second, vec![other]);
    assert_eq!(*heard.lock().unwrap(), Vec::<String>::new());
    a.batch_execute("COMMIT").unwrap();
}

/// A pop reads on through pages of due partitions that are all in use until it finds a free
/// one: partitions hinted by one discovery (one due time for all: ties across pages), all but
/// one of them leased by an open transaction (their marks held, their hints still due to
/// others), and the one left is delivered by a pop of one message. Each page reads on from where the one
/// before ended (pop.rs `take_candidates`), ties at its end read again.
#[test]
fn a_pop_reads_on_through_pages_of_partitions_in_use() {
    let db = TestDb::new("pages_in_use");
    let mut c = db.connect();
    let items: Vec<serde_json::Value> =
        (0..100).map(|i| json!({"queue": "q", "partition": format!("p{i}"), "payload": i})).collect();
    c.execute("SELECT count(*) FROM queen_push($1)", &[&serde_json::Value::Array(items)]).unwrap();
    // One discovery hints all 100 at one due time; this pop takes one of them.
    let taken = payloads(&c.query("SELECT * FROM queen_pop('q', 'g', batch => 1, auto_ack => true)", &[]).unwrap());
    let taken = taken[0].as_i64().unwrap();
    // The partitions hinted at the most common due time, and the one left free among them.
    let tied: Vec<i64> = c
        .query(
            "SELECT substr(p.name, 2)::bigint FROM queen.ready r JOIN queen.partitions p USING (partition_id)
              WHERE r.ready_at = (SELECT ready_at FROM queen.ready GROUP BY ready_at ORDER BY count(*) DESC LIMIT 1)
              ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(tied.len() > 3 * 16, "{} partitions hinted at one due time: pages of 16", tied.len());
    let free = tied[tied.len() - 1];
    let mut a = open_tx(&db);
    for i in (0..100).filter(|i| *i != free && *i != taken) {
        let got = a.query(&format!("SELECT * FROM queen_pop('q', 'g', batch => 1, partition => 'p{i}')"), &[]).unwrap();
        assert_eq!(got.len(), 1, "p{i}");
    }
    let mut b = db.connect();
    let got = payloads(&b.query("SELECT * FROM queen_pop('q', 'g', batch => 1)", &[]).unwrap());
    assert_eq!(got, vec![json!(free)]);
    a.batch_execute("COMMIT").unwrap();
}

/// On one server a pop reads a partition's rows straight through queen's indexes
/// (src/direct.rs), by the oids it looked them up by. An index rebuilt under a backend that read
/// through it before (REINDEX CONCURRENTLY gives it a new oid, and drops the old one) is found
/// again: the backend pops and acks on, and nothing is lost.
#[test]
fn pops_and_acks_read_through_indexes_rebuilt_under_them() {
    let db = TestDb::new("reindex");
    let mut c = db.connect();
    let mut admin = db.connect();
    assert!(pop_auto(&mut c, "q", Some("g"), 1).is_empty(), "subscribed before the pushes");
    push_n(&mut c, "q", "p", 30);
    let pop_and_ack = |c: &mut postgres::Client| -> (usize, usize) {
        let rows = c.query("SELECT lease_id FROM queen_pop('q', 'g', batch => 10)", &[]).unwrap();
        let lease: Option<uuid::Uuid> = rows.first().map(|r| r.get(0));
        let acked = c.query("SELECT * FROM queen_ack_lease($1) WHERE success", &[&lease]).unwrap();
        (rows.len(), acked.len())
    };
    assert_eq!(pop_and_ack(&mut c), (10, 10));
    for index in ["messages_pkey", "cursors_pkey", "ready_next"] {
        admin.batch_execute(&format!("REINDEX INDEX CONCURRENTLY queen.{index}")).unwrap();
    }
    assert_eq!(pop_and_ack(&mut c), (10, 10), "the same backend, through the rebuilt indexes");
    assert_eq!(drain(&mut c, "q", Some("g")).len(), 10, "the rest, once");
}

/// queen_pop, queen_push and queen_ack return their rows all at once (materialize mode,
/// api/rows.rs): every form a caller may use them in gets them — a FROM item, a select list,
/// PL/pgSQL's RETURN QUERY and PERFORM.
#[test]
fn result_sets_reach_every_calling_form() {
    let db = TestDb::new("setforms");
    let mut c = db.connect();
    let pushed: i64 = c
        .query_one(
            "SELECT count(*) FROM (SELECT queen_push('[{\"queue\": \"q\", \"payload\": 1}, \
             {\"queue\": \"q\", \"payload\": 2}, {\"queue\": \"q\", \"payload\": 3}]'::jsonb)) x",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(pushed, 3, "a push batch in a select list");
    let in_list: i64 = c
        .query_one(
            "SELECT count(*) FROM (SELECT (queen_pop('q', 'a', batch => 3, auto_ack => true)).message_id) x",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(in_list, 3, "a pop in a select list");
    c.batch_execute(
        "CREATE FUNCTION pop_b() RETURNS SETOF queen.message LANGUAGE plpgsql AS
           $$ BEGIN RETURN QUERY SELECT * FROM queen_pop('q', 'b', batch => 3, auto_ack => true); END $$;
         DO $$ BEGIN PERFORM queen_pop('q', 'c', batch => 3, auto_ack => true); END $$;",
    )
    .unwrap();
    let returned: i64 = c.query_one("SELECT count(*) FROM pop_b()", &[]).unwrap().get(0);
    assert_eq!(returned, 3, "RETURN QUERY");
    assert!(pop_auto(&mut c, "q", Some("c"), 10).is_empty(), "PERFORM popped (and acked) all three");
    let acks: i64 = c.query_one("SELECT count(*) FROM (SELECT queen_ack('[]'::jsonb)) x", &[]).unwrap().get(0);
    assert_eq!(acks, 0, "an empty ack in a select list");
}

/// On one server a pop and an ack save the cursor row, and move the partition's hints, by hand
/// (direct_save.rs, index_write.rs), not with a statement: every index of the rows written
/// holds every row (amcheck's heapallindexed), the lease is found through `cursors_lease` and
/// the hints through both of theirs; and a table with a row trigger (a superuser's: queen makes
/// none) is written with the statement again, so that the trigger fires.
#[test]
fn rows_saved_by_hand_keep_their_indexes_and_give_way_to_row_triggers() {
    let db = TestDb::new("savedbyhand");
    let mut c = db.connect();
    let mut admin = db.connect();
    push_n(&mut c, "q", "p", 30);
    let indexes_hold = |admin: &mut postgres::Client| {
        for index in [
            "cursors_pkey",
            "cursors_lease",
            "ready_next",
            "ready_partition",
            "messages_pkey",
            "messages_message_id",
            "messages_queue_log",
        ] {
            admin.query_one(&format!("SELECT bt_index_check('queen.{index}', true)"), &[]).unwrap();
        }
    };
    admin.batch_execute("CREATE EXTENSION amcheck; SET enable_seqscan = off; SET enable_bitmapscan = off").unwrap();
    // Single pushes into the registered partition: written by hand (direct_save::insert_message).
    let ids: Vec<uuid::Uuid> = (0..5).map(|i| push(&mut c, "q", "p", json!(100 + i))).collect();
    indexes_hold(&mut admin);
    let found: i64 = admin
        .query_one("SELECT count(*) FROM queen.messages WHERE message_id = ANY ($1) AND txid > 0", &[&ids])
        .unwrap()
        .get(0);
    assert_eq!(found, 5, "each single push's row, through messages_message_id");
    let rows = c.query("SELECT lease_id FROM queen_pop('q', 'g', batch => 10)", &[]).unwrap();
    assert_eq!(rows.len(), 10);
    let lease: uuid::Uuid = rows[0].get(0);
    indexes_hold(&mut admin);
    let leased: i64 =
        admin.query_one("SELECT count(*) FROM queen.cursors WHERE lease_id = $1", &[&lease]).unwrap().get(0);
    assert_eq!(leased, 1, "the leased row, through cursors_lease");
    let hint = "SELECT count(*), bool_and(ready_at > clock_timestamp()) FROM queen.ready
                 WHERE partition_id IN (SELECT partition_id FROM queen.partitions WHERE name = 'p')
                   AND consumer_group = 'g'";
    let (hints, later): (i64, bool) = admin.query_one(hint, &[]).map(|r| (r.get(0), r.get(1))).unwrap();
    assert_eq!((hints, later), (1, true), "one hint, moved to the lease's end");
    let renewed: bool = c.query_one("SELECT queen_renew($1) IS NOT NULL", &[&lease]).unwrap().get(0);
    assert!(renewed, "queen_renew finds the lease");
    let acked = c.query("SELECT * FROM queen_ack_lease($1) WHERE success", &[&lease]).unwrap();
    assert_eq!(acked.len(), 10);
    indexes_hold(&mut admin);
    let (hints, later): (i64, bool) = admin.query_one(hint, &[]).map(|r| (r.get(0), r.get(1))).unwrap();
    assert_eq!((hints, later), (1, false), "one hint, due now: 20 messages are left");

    // A column added to queen.ready under the same oid (as an upgrade may add one): the saves that move a hint write it with the statement.
    admin.batch_execute("ALTER TABLE queen.ready ADD COLUMN extra int DEFAULT 7").unwrap();
    for _ in 0..2 {
        let rows = c.query("SELECT lease_id FROM queen_pop('q', 'g', batch => 1)", &[]).unwrap();
        let lease: uuid::Uuid = rows[0].get(0);
        assert_eq!(c.query("SELECT * FROM queen_ack_lease($1) WHERE success", &[&lease]).unwrap().len(), 1);
    }
    let defaults: bool = admin
        .query_one("SELECT count(*) > 0 AND bool_and(extra = 7) FROM queen.ready WHERE consumer_group = 'g'", &[])
        .unwrap()
        .get(0);
    assert!(defaults, "the hints written after the column was added carry its default");
    admin.batch_execute("ALTER TABLE queen.ready DROP COLUMN extra").unwrap();
    admin
        .batch_execute(
            "CREATE TABLE public.cursor_writes (n int);
             CREATE FUNCTION public.count_write() RETURNS trigger LANGUAGE plpgsql AS
               $$BEGIN INSERT INTO public.cursor_writes VALUES (1); RETURN NEW; END$$;
             CREATE TRIGGER count_write AFTER UPDATE ON queen.cursors FOR EACH ROW EXECUTE FUNCTION public.count_write();
             GRANT INSERT ON public.cursor_writes TO PUBLIC;",
        )
        .unwrap();
    let rows = c.query("SELECT lease_id FROM queen_pop('q', 'g', batch => 10)", &[]).unwrap();
    let lease: uuid::Uuid = rows[0].get(0);
    let acked = c.query("SELECT * FROM queen_ack_lease($1) WHERE success", &[&lease]).unwrap();
    assert_eq!((rows.len(), acked.len()), (10, 10));
    let writes: i64 = admin.query_one("SELECT count(*) FROM public.cursor_writes", &[]).unwrap().get(0);
    assert_eq!(writes, 2, "the pop's and the ack's updates, through the statement and its trigger");
    // A column added under the same oid (as an upgrade may add one), seen by a backend that
    // pushed by hand already: its next push is the statement's, and the column gets its default.
    admin.batch_execute("ALTER TABLE queen.messages ADD COLUMN extra int DEFAULT 7").unwrap();
    // (Twice: the first push after the change may find the partition no longer known.)
    for _ in 0..2 {
        let id = push(&mut c, "q", "p", json!("after a column was added"));
        let extra: i32 =
            admin.query_one("SELECT extra FROM queen.messages WHERE message_id = $1", &[&id]).unwrap().get(0);
        assert_eq!(extra, 7);
    }
    // A keyless batch too (direct_save.rs `Messages`): through its statement, the default set.
    let batch = r#"SELECT message_id FROM queen_push('[{"queue": "q", "partition": "p", "payload": 1},
                                                       {"queue": "q", "partition": "p"}]')"#;
    let ids: Vec<uuid::Uuid> = c.query(batch, &[]).unwrap().iter().map(|r| r.get(0)).collect();
    let extras: i64 = admin
        .query_one("SELECT count(*) FROM queen.messages WHERE message_id = ANY ($1) AND extra = 7", &[&ids])
        .unwrap()
        .get(0);
    assert_eq!(extras, 2, "the batch written by its statement");
    admin.batch_execute("ALTER TABLE queen.messages DROP COLUMN extra").unwrap();
    admin
        .batch_execute(
            "CREATE TRIGGER count_push AFTER INSERT ON queen.messages FOR EACH ROW EXECUTE FUNCTION public.count_write();",
        )
        .unwrap();
    push(&mut c, "q", "p", json!("after the trigger"));
    let writes: i64 = admin.query_one("SELECT count(*) FROM public.cursor_writes", &[]).unwrap().get(0);
    assert_eq!(writes, 3, "the single push, through the statement and its trigger");
    c.query(batch, &[]).unwrap();
    let writes: i64 = admin.query_one("SELECT count(*) FROM public.cursor_writes", &[]).unwrap().get(0);
    assert_eq!(writes, 5, "a keyless batch, through the statement and its trigger");
    indexes_hold(&mut admin);
    assert_eq!(drain(&mut c, "q", Some("g")).len(), 20, "the rest, once");
}

/// In REPEATABLE READ a pop whose partition's row another transaction changed and committed
/// after the pop's snapshot fails as a statement's `FOR UPDATE` fails there (40001), also now
/// that the claim locks the row by hand (direct_save.rs `lock`, index_write.rs `lock_skip`); and
/// nothing of it stays once it rolls back.
#[test]
fn a_repeatable_read_pop_of_a_row_changed_since_its_snapshot_is_a_serialization_failure() {
    let db = TestDb::new("rrclaim");
    let mut c = db.connect();
    push_n(&mut c, "q", "p", 20);
    assert_eq!(pop_auto(&mut c, "q", Some("g"), 5).len(), 5, "the group's row made");
    let mut rr = db.connect();
    rr.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").unwrap();
    assert_eq!(pop_auto(&mut c, "q", Some("g"), 5).len(), 5, "the row changed and committed since");
    let err = rr.query("SELECT * FROM queen_pop('q', 'g', batch => 5)", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "40001", "{err}");
    rr.batch_execute("ROLLBACK").unwrap();
    assert_eq!(drain(&mut c, "q", Some("g")).len(), 10, "the rest, once");
}

/// Discovery reads the queue log index-only where the visibility map says a heap page's rows
/// are visible to all (direct_discovery.rs, `index_read::Scan::index_only`): a backlog
/// vacuumed until every page is, then messages pushed after the vacuum (pages the map does not
/// cover) and a transaction that commits late, all drained by a group: every message once, in
/// its partition's order. Debug builds also run each scan's statement under the same snapshot
/// and panic when the two read otherwise.
#[test]
fn a_vacuumed_backlog_is_discovered_through_the_log_index_alone() {
    let db = TestDb::new("index_only_log");
    let mut c = db.connect();
    c.batch_execute("ALTER TABLE queen.messages SET (autovacuum_enabled = off)").unwrap();
    assert!(pop_auto(&mut c, "q", Some("g"), 1).is_empty(), "the group subscribes before the pushes");
    for _ in 0..5 {
        push_spread(&mut c, "q", 400, 40);
    }
    // A snapshot another session holds keeps VACUUM from marking pages: again until it has.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        c.batch_execute("VACUUM queen.messages").unwrap();
        let r = c
            .query_one("SELECT relpages, relallvisible FROM pg_class WHERE oid = 'queen.messages'::regclass", &[])
            .unwrap();
        let (pages, visible): (i32, i32) = (r.get(0), r.get(1));
        if pages > 0 && visible == pages {
            break;
        }
        assert!(Instant::now() < deadline, "VACUUM marked {visible} of {pages} pages all visible in a minute");
        thread::sleep(Duration::from_millis(50));
    }
    let mut late = open_tx(&db);
    push(&mut late, "q", "p1", json!("late"));
    push_spread(&mut c, "q", 200, 40);

    let pop = |c: &mut postgres::Client| -> Vec<(String, Value)> {
        c.query("SELECT partition, payload FROM queen_pop('q', 'g', batch => 100, auto_ack => true)", &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    };
    let mut got: HashMap<String, Vec<Value>> = HashMap::new();
    loop {
        let rows = pop(&mut c);
        if rows.is_empty() {
            break;
        }
        for (p, v) in rows {
            got.entry(p).or_default().push(v);
        }
    }
    late.batch_execute("COMMIT").unwrap();
    let rows = pop(&mut c);
    assert_eq!(rows, vec![("p1".to_string(), json!("late"))], "the late commit, once, after it commits");
    assert!(pop(&mut c).is_empty());
    assert_eq!(got.len(), 40, "every partition found");
    for k in 0..40i64 {
        let expected: Vec<Value> = (0..5)
            .flat_map(|_| (0..10).map(move |j| json!(k + 40 * j)))
            .chain((0..5).map(|j| json!(k + 40 * j)))
            .collect();
        assert_eq!(got[&format!("p{k}")], expected, "partition p{k}: each message once, in order");
    }
}

/// Result rows carry their texts and uuids as made by hand (api/rows.rs, `Scratch`): names of
/// every length up to the bound, multi-byte ones among them, come back from a push and a pop
/// as they went in, equal in SQL to the same text (`=`, `length`), and so do the ids.
#[test]
fn result_texts_and_ids_of_every_length_come_back_as_they_went_in() {
    let db = TestDb::new("result_texts");
    let mut c = db.connect();
    let mut names: Vec<String> = [1usize, 2, 3, 4, 5, 7, 8, 9, 126, 127, 128, 200, 255]
        .iter()
        .map(|&n| "abcdefghij".chars().cycle().take(n).collect())
        .collect();
    names.push("ü日🙂".repeat(40));
    for name in &names {
        let tx = format!("t-{name}");
        let tx = &tx[..tx.char_indices().nth(255).map_or(tx.len(), |(i, _)| i)];
        let pushed = c
            .query_one(
                "SELECT partition = $1, transaction_id = $2, message_id, partition_id FROM queen_push('q', '1', $1, $2)",
                &[&name, &tx],
            )
            .unwrap();
        assert!(pushed.get::<_, bool>(0) && pushed.get::<_, bool>(1), "the push's result names {name:?} and {tx:?}");
        let (id, pid): (uuid::Uuid, uuid::Uuid) = (pushed.get(2), pushed.get(3));
        let r = c
            .query_one(
                "SELECT partition, partition = $1, length(partition), transaction_id = $2, message_id = $3,
                        partition_id = $4, payload
                   FROM queen_pop('q', partition => $1, auto_ack => true)",
                &[&name, &tx, &id, &pid],
            )
            .unwrap();
        assert_eq!(r.get::<_, String>(0), *name);
        assert!(r.get::<_, bool>(1), "the popped partition is {name:?} in SQL");
        assert_eq!(r.get::<_, i32>(2) as usize, name.chars().count());
        assert!(r.get::<_, bool>(3) && r.get::<_, bool>(4) && r.get::<_, bool>(5), "{name:?}: ids as pushed");
        assert_eq!(r.get::<_, Value>(6), json!(1));
    }
}

/// Batched pushes give many partitions hints of the same due time (one discovery writes them
/// at one clock): pops of several partitions at a time, from two connections, read pages of
/// candidates that end inside such a group of equal due times, and deliver every message
/// exactly once — in debug builds, with every page read by hand checked against the statement
/// (0.5.0 ordered ties otherwise in the two reads, and most such pops failed with XX000).
#[test]
fn pages_of_candidates_with_equal_due_times_lose_and_repeat_nothing() {
    let db = TestDb::new("tied_candidates");
    let mut c = db.connect();
    for round in 0..2 {
        let items: Vec<Value> = (0..128)
            .map(|i| json!({"queue": "q", "partition": format!("p{}", i % 64), "payload": round * 1000 + i}))
            .collect();
        c.execute("SELECT count(*) FROM queen_push($1)", &[&Value::Array(items)]).unwrap();
    }
    let mut workers = [db.connect(), db.connect()];
    // One worker plans with index scans off, as a session may: its statement then sorts each
    // page, and ties come out in the sort's order rather than the index's.
    workers[1].batch_execute("SET enable_indexscan = off").unwrap();
    let mut seen: HashMap<i64, usize> = HashMap::new();
    let mut idle = 0;
    while idle < 2 {
        idle = 0;
        for w in workers.iter_mut() {
            let rows = w
                .query("SELECT payload, lease_id FROM queen_pop('q', 'g', batch => 32, partitions => 8)", &[])
                .unwrap();
            if rows.is_empty() {
                idle += 1;
                continue;
            }
            let mut leases: Vec<uuid::Uuid> = rows.iter().map(|r| r.get(1)).collect();
            leases.dedup();
            for r in &rows {
                *seen.entry(r.get::<_, Value>(0).as_i64().unwrap()).or_default() += 1;
            }
            for l in leases {
                w.query("SELECT * FROM queen_ack_lease($1)", &[&l]).unwrap();
            }
        }
    }
    assert_eq!(seen.len(), 256, "every message delivered");
    assert!(seen.values().all(|n| *n == 1), "a message delivered twice: {seen:?}");
}
