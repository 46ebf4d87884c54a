//! queen behind PgBouncer in transaction pooling (issue 11): many clients over 3 server
//! connections, pushes, pops and acks in both forms, waiting pops, with the statements a
//! pooler in transaction mode can carry. scripts/integration-tests starts Debian's PgBouncer
//! (1.18) in front of the test cluster on QUEEN_TEST_BOUNCER_PORT.
//!
//! Statements go as *unnamed* prepared statements (`query_typed`: parse, bind and execute in
//! one round trip, the extended protocol that libpq's PQexecParams, psycopg and node-postgres
//! without a statement name use). Named prepared statements live on one server connection,
//! which transaction pooling hands to another client at the next transaction: they need
//! PgBouncer 1.21 or later with `max_prepared_statements` (docs/operations.md).

use postgres::types::Type;
use postgres::{Client, NoTls};
use queen_integration_tests::TestDb;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// A connection to `db` through PgBouncer.
fn bouncer(db: &str) -> Client {
    let port = std::env::var("QUEEN_TEST_BOUNCER_PORT").unwrap_or_else(|_| "28822".into());
    Client::connect(&format!("host=127.0.0.1 port={port} user=postgres dbname={db}"), NoTls)
        .unwrap_or_else(|e| panic!("cannot connect through PgBouncer on port {port}: {e}"))
}

fn count(c: &mut Client, sql: &str) -> i64 {
    c.query_typed(sql, &[]).unwrap()[0].get(0)
}

const PRODUCERS: usize = 6;
const ROUNDS: usize = 25;
/// Each round pushes one message alone and a batch of four.
const TOTAL: i64 = (PRODUCERS * ROUNDS * 5) as i64;

#[test]
fn many_clients_over_three_server_connections_push_pop_and_ack_exactly_once() {
    let db = TestDb::new("bouncer");
    let mut admin = db.connect();
    admin
        .batch_execute(
            "CREATE TABLE processed (message_id uuid PRIMARY KEY, worker int NOT NULL);
             SELECT queen_configure('jobs', '{\"leaseTime\": 60}');",
        )
        .unwrap();
    let name = db.name.clone();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let name = name.clone();
            thread::spawn(move || {
                let mut c = bouncer(&name);
                for r in 0..ROUNDS {
                    let one = json!({"producer": p, "round": r});
                    let partition = format!("p{}", (p + r) % 7);
                    c.query_typed(
                        "SELECT message_id FROM queen_push('jobs', $1, $2)",
                        &[(&one, Type::JSONB), (&partition, Type::TEXT)],
                    )
                    .unwrap();
                    let batch: Value = (0..4)
                        .map(|i| json!({"queue": "jobs", "partition": format!("p{}", (p + i) % 7), "payload": [p, r, i]}))
                        .collect();
                    let n = c.query_typed("SELECT count(*) FROM queen_push($1)", &[(&batch, Type::JSONB)]).unwrap();
                    assert_eq!(n[0].get::<_, i64>(0), 4);
                }
            })
        })
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = (0..6)
        .map(|w| {
            let (name, done) = (name.clone(), done.clone());
            thread::spawn(move || {
                let mut c = bouncer(&name);
                while !done.load(Ordering::Relaxed) {
                    // The business write and the ack in one transaction (one server connection
                    // for the transaction: what transaction pooling guarantees).
                    let mut tx = c.transaction().unwrap();
                    let rows = tx
                        .query_typed(
                            "SELECT message_id, lease_id FROM queen_pop('jobs', 'workers', batch => 10, partitions => 2)",
                            &[],
                        )
                        .unwrap();
                    if rows.is_empty() {
                        tx.commit().unwrap();
                        thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    let worker = w as i32;
                    for r in &rows {
                        let id: uuid::Uuid = r.get(0);
                        tx.query_typed(
                            "INSERT INTO processed VALUES ($1, $2)",
                            &[(&id, Type::UUID), (&worker, Type::INT4)],
                        )
                        .unwrap();
                    }
                    let ids: Vec<uuid::Uuid> = rows.iter().map(|r| r.get(0)).collect();
                    let lease: uuid::Uuid = rows[0].get(1);
                    let acked: i64 = if w % 2 == 0 {
                        // The batch form.
                        tx.query_typed(
                            "SELECT count(*) FILTER (WHERE success) FROM queen_ack((SELECT jsonb_agg(
                                 jsonb_build_object('messageId', id, 'leaseId', $2::uuid)) FROM unnest($1::uuid[]) AS id))",
                            &[(&ids, Type::UUID_ARRAY), (&lease, Type::UUID)],
                        )
                        .unwrap()[0]
                            .get(0)
                    } else {
                        // One by one.
                        let mut n = 0;
                        for id in &ids {
                            let ok: bool = tx
                                .query_typed(
                                    "SELECT success FROM queen_ack($1, $2)",
                                    &[(id, Type::UUID), (&lease, Type::UUID)],
                                )
                                .unwrap()[0]
                                .get(0);
                            n += ok as i64;
                        }
                        n
                    };
                    assert_eq!(acked, ids.len() as i64, "worker {w}: every ack of its own lease applies");
                    tx.commit().unwrap();
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    let mut c = bouncer(&name);
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(&mut c, "SELECT count(*) FROM processed") < TOTAL {
        assert!(Instant::now() < deadline, "consumers did not finish through the pooler");
        thread::sleep(Duration::from_millis(20));
    }
    done.store(true, Ordering::Relaxed);
    for w in consumers {
        w.join().unwrap();
    }
    // Exactly once (the primary key refuses a second processing), nothing left behind.
    assert_eq!(count(&mut admin, "SELECT count(*) FROM processed"), TOTAL);
    assert_eq!(count(&mut admin, "SELECT count(*) FROM queen.messages"), TOTAL);
    assert_eq!(
        count(
            &mut admin,
            "SELECT coalesce(sum(pending), 0)::bigint FROM queen.group_lag WHERE consumer_group = 'workers'"
        ),
        0
    );
    // The pooler's server connections: client backends of the database but this one (an
    // autovacuum worker busy with the table the test filled counts as a backend too).
    let servers = count(
        &mut admin,
        &format!(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = '{name}' AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ),
    );
    assert!(servers <= 3, "more server connections than the pool allows: {servers}");
}

/// A waiting pop holds its server connection while it waits: the other clients share what is
/// left of the pool, and a push through the pooler wakes it at once.
#[test]
fn a_waiting_pop_through_the_pooler_is_woken_by_a_push_through_it() {
    let db = TestDb::new("bouncer_wait");
    let mut admin = db.connect();
    let name = db.name.clone();
    let waiter = thread::spawn(move || {
        let mut c = bouncer(&name);
        let t0 = Instant::now();
        let rows =
            c.query_typed("SELECT payload FROM queen_pop('q', 'g', wait_ms => 30000, auto_ack => true)", &[]).unwrap();
        (rows.iter().map(|r| r.get::<_, Value>(0)).collect::<Vec<_>>(), t0.elapsed())
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while count(&mut admin, "SELECT count(*) FROM queen.waiting_pops") == 0 {
        assert!(Instant::now() < deadline, "the pop never started waiting");
        thread::sleep(Duration::from_millis(2));
    }
    // Other clients go on over the two server connections left.
    let mut others: Vec<Client> = (0..4).map(|_| bouncer(&db.name)).collect();
    for (i, c) in others.iter_mut().enumerate() {
        let other = json!({"other": i});
        c.query_typed("SELECT message_id FROM queen_push('other', $1)", &[(&other, Type::JSONB)]).unwrap();
    }
    let pushed = Instant::now();
    let woke = json!("wake");
    others[0].query_typed("SELECT message_id FROM queen_push('q', $1)", &[(&woke, Type::JSONB)]).unwrap();
    let (rows, waited) = waiter.join().unwrap();
    assert_eq!(rows, vec![json!("wake")]);
    assert!(
        pushed.elapsed() < Duration::from_secs(5) && waited < Duration::from_secs(25),
        "the waiting pop slept on: {waited:?}"
    );
}
