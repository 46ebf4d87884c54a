//! queen on Citus (issue 22), through the coordinator of scripts/citus-cluster: run by
//! `make citus-test` (scripts/citus-tests), which starts the cluster; ignored by the plain
//! integration run, which has no Citus.

use queen_integration_tests::citus::CitusDb;
use queen_integration_tests::sqlstate;
use std::collections::{BTreeMap, BTreeSet};

const PER_SHARD: [&str; 9] = [
    "messages",
    "partitions",
    "subscriptions",
    "cursors",
    "ready",
    "discovery",
    "dead_letters",
    "queue_counts",
    "retired_partitions",
];

/// A queue in use before Citus: 2 queues × 10 partitions × 2 messages, a group with a lease and
/// a group in 'new' mode; `queen_distribute(4)` moves it all. Every table a call writes is
/// distributed by `shard` in one colocation group, the registry, grants and keys are reference
/// tables, the 4 keys fall into the 4 shards one each, the shards sit on both workers, every row
/// is in its partition's shard, and a queue's subscriptions are in every shard.
#[test]
#[ignore = "needs the Citus cluster of make citus-test"]
fn distribute_places_every_row_in_its_partitions_shard() {
    let db = CitusDb::new("distribute_places");
    let mut c = db.coordinator();
    // One statement each: a simple query of several statements is one transaction, whose pops
    // would not see its pushes.
    for sql in [
        "CREATE EXTENSION queen",
        "SELECT queen_push(q, to_jsonb(i), 'p' || (i % 10)) FROM unnest(ARRAY['a', 'b']) AS q, generate_series(1, 20) AS i",
        "SELECT count(*) FROM queen_pop('a', 'g', batch => 3)",
        "SELECT count(*) FROM queen_pop('b', 'n', subscription_mode => 'new')",
    ] {
        c.batch_execute(sql).unwrap();
    }
    let leased: i64 = c.query_one("SELECT count(*) FROM queen.cursors WHERE lease_id IS NOT NULL", &[]).unwrap().get(0);
    assert!(leased > 0, "group g holds a lease before distribution");
    let report: serde_json::Value = c.query_one("SELECT queen_distribute(4)", &[]).unwrap().get(0);
    assert_eq!(report["shards"], 4, "{report}");
    assert_eq!(report["moved_rows"], true, "{report}");

    let tables: BTreeMap<String, (String, i32)> = c
        .query(
            "SELECT logicalrelid::text, partmethod::text, colocationid FROM pg_dist_partition
              WHERE logicalrelid::text LIKE 'queen.%'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    let colocation = tables["queen.messages"].1;
    for t in PER_SHARD {
        assert_eq!(tables[&format!("queen.{t}")], ("h".to_string(), colocation), "{t}: {tables:?}");
    }
    for t in ["queues", "privileges", "shard_keys"] {
        assert_eq!(tables[&format!("queen.{t}")].0, "n", "{t} is a reference table: {tables:?}");
    }
    assert_eq!(tables.len(), 12, "nothing else is distributed: {tables:?}");

    let keys: Vec<(i32, i64, i32)> = c
        .query(
            "SELECT k.shard, get_shard_id_for_distribution_column('queen.messages', k.shard),
                    (SELECT nodeport FROM pg_dist_shard_placement p
                      WHERE p.shardid = get_shard_id_for_distribution_column('queen.messages', k.shard))
               FROM queen.shard_keys k ORDER BY k.idx",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(keys.len(), 4);
    assert_eq!(keys.iter().map(|k| k.1).collect::<BTreeSet<_>>().len(), 4, "one key per shard: {keys:?}");
    assert_eq!(keys.iter().map(|k| k.2).collect::<BTreeSet<_>>().len(), 2, "shards on both workers: {keys:?}");

    let counts: (i64, i64) = c
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE m.shard = (SELECT k.shard FROM queen.shard_keys k
                                                                WHERE k.idx = queen.shard_index(m.partition_id, 4)))
               FROM queen.messages m",
            &[],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(counts, (40, 40), "every message, each in its partition's shard");
    for t in ["partitions", "cursors", "ready"] {
        let wrong: i64 = c
            .query_one(
                &format!(
                    "SELECT count(*) FROM queen.{t} x WHERE x.shard <> (SELECT k.shard FROM queen.shard_keys k
                                                                   WHERE k.idx = queen.shard_index(x.partition_id, 4))"
                ),
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(wrong, 0, "{t}: rows outside their partition's shard");
    }
    let cursors: i64 = c.query_one("SELECT count(*) FROM queen.cursors", &[]).unwrap().get(0);
    assert!(cursors > 0, "the lease's cursor rows moved");
    let subs: Vec<(String, i64)> = c
        .query(
            "SELECT consumer_group, count(DISTINCT shard) FROM queen.subscriptions GROUP BY 1 ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(subs, vec![("g".to_string(), 4), ("n".to_string(), 4)], "every group subscribed in every shard");
    // Each worker holds exactly the rows of its own shards.
    for w in 1..=2u16 {
        let mut wc = db.worker(w);
        let local: i64 = wc
            .query_one(
                "SELECT coalesce(sum(n), 0)::bigint FROM (
                   SELECT (xpath('/row/c/text()', query_to_xml(format('SELECT count(*) AS c FROM queen.messages_%s', s.shardid),
                                                                false, true, '')))[1]::text::bigint AS n
                     FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)
                    WHERE s.logicalrelid = 'queen.messages'::regclass
                      AND p.groupid = (SELECT groupid FROM pg_dist_local_group)) x",
                &[],
            )
            .unwrap()
            .get(0);
        assert!(local > 0 && local < 40, "worker {w} holds part of the messages: {local}");
    }
}

/// What queen_distribute refuses, with its SQLSTATE: no Citus in the database, a shard count out
/// of range, a worker without queen, a second run, a caller who is not a superuser.
#[test]
#[ignore = "needs the Citus cluster of make citus-test"]
fn distribute_refuses_what_it_cannot_do() {
    // Citus preloaded but not created in this database.
    let mut plain = queen_integration_tests::citus::connect_node(0, "postgres");
    plain.batch_execute("DROP DATABASE IF EXISTS citus_plain WITH (FORCE)").unwrap();
    plain.batch_execute("CREATE DATABASE citus_plain").unwrap();
    let mut p = queen_integration_tests::citus::connect_node(0, "citus_plain");
    p.batch_execute("CREATE EXTENSION queen").unwrap();
    let e = p.query_one("SELECT queen_distribute()", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "55000", "{e:?}");
    assert!(format!("{e:?}").contains("Citus is not installed"), "{e:?}");

    let db = CitusDb::new("distribute_refuses");
    let mut c = db.coordinator();
    c.batch_execute("CREATE EXTENSION queen").unwrap();
    let e = c.query_one("SELECT queen_distribute(0)", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "22023", "{e:?}");
    assert!(format!("{e:?}").contains("shard_count"), "{e:?}");

    // (A worker refuses DDL on distributed objects unless propagation is off: this is a test.)
    db.worker(2).batch_execute("SET citus.enable_ddl_propagation = off; DROP EXTENSION queen CASCADE").unwrap();
    let e = c.query_one("SELECT queen_distribute(4)", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "55000", "{e:?}");
    assert!(format!("{e:?}").contains("does not have queen"), "{e:?}");
    let distributed: i64 = c
        .query_one("SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::text LIKE 'queen.%'", &[])
        .unwrap()
        .get(0);
    assert_eq!(distributed, 0, "a refused call leaves nothing distributed");
    db.worker(2)
        .batch_execute("SET citus.enable_ddl_propagation = off; SET client_min_messages = warning; CREATE EXTENSION queen")
        .unwrap();

    c.batch_execute("CREATE ROLE citus_app LOGIN").ok();
    let mut app = postgres::Client::connect(
        &format!("host=127.0.0.1 port={} user=citus_app dbname={}", queen_integration_tests::citus::base_port(), db.name),
        postgres::NoTls,
    )
    .unwrap();
    let e = app.query_one("SELECT queen_distribute(4)", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501", "{e:?}");

    c.query_one("SELECT queen_distribute(4)", &[]).unwrap();
    let e = c.query_one("SELECT queen_distribute(4)", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "55000", "{e:?}");
    assert!(format!("{e:?}").contains("already distributed"), "{e:?}");
}

/// A database with queen distributed over 4 shards.
fn distributed(test: &str) -> CitusDb {
    let db = CitusDb::new(test);
    let mut c = db.coordinator();
    c.batch_execute("CREATE EXTENSION queen").unwrap();
    c.query_one("SELECT queen_distribute(4)", &[]).unwrap();
    db
}

/// Pushes through the coordinator, one at a time and in batches, land in their partition's
/// shard on the worker that holds it, each with that worker's own transaction id (the id of the
/// worker's backend that ran it, seen from that worker while the push is open); duplicates of a
/// transaction id are found within a batch and across calls.
#[test]
#[ignore = "needs the Citus cluster of make citus-test"]
fn pushes_run_on_the_worker_of_their_shard_with_its_ids() {
    let db = distributed("pushes_run");
    let mut c = db.coordinator();
    for i in 0..10 {
        c.query("SELECT * FROM queen_push('q', to_jsonb($1::int), 'p' || $1::int)", &[&i]).unwrap();
    }
    let batch = serde_json::Value::Array(
        (0..30).map(|i| serde_json::json!({"queue": "q", "partition": format!("p{}", i % 10), "payload": 100 + i})).collect(),
    );
    let rows = c.query("SELECT status FROM queen_push($1)", &[&batch]).unwrap();
    assert_eq!(rows.len(), 30);
    let (all, placed): (i64, i64) = c
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE m.shard = (SELECT k.shard FROM queen.shard_keys k
                                                                WHERE k.idx = queen.shard_index(m.partition_id, 4)))
               FROM queen.messages m WHERE m.queue_id = (SELECT queue_id FROM queen.queues WHERE name = 'q')",
            &[],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!((all, placed), (40, 40));
    let pass: serde_json::Value = c.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert!(pass["skipped"].as_str().unwrap_or("").contains("Citus"), "maintenance says it does not run yet: {pass}");
    let registered: i64 = c.query_one("SELECT count(*) FROM queen.partitions", &[]).unwrap().get(0);
    assert_eq!(registered, 10, "one registry row per partition, in its shard");
    let queues: i64 = c.query_one("SELECT count(*) FROM queen.queues WHERE name = 'q'", &[]).unwrap().get(0);
    assert_eq!(queues, 1, "the coordinator registered the queue once");

    // The worker's own id: a push left open on the coordinator, seen from its worker.
    let mut open = db.coordinator();
    open.batch_execute("BEGIN").unwrap();
    let r = open.query_one("SELECT message_id, partition_id FROM queen_push('q', '\"open\"', 'p3', 'tx-open')", &[]).unwrap();
    let (message_id, partition_id): (uuid::Uuid, uuid::Uuid) = (r.get(0), r.get(1));
    let port: i32 = c
        .query_one(
            "SELECT p.nodeport FROM queen.shard_keys k
               JOIN pg_dist_shard_placement p ON p.shardid = get_shard_id_for_distribution_column('queen.messages', k.shard)
              WHERE k.idx = queen.shard_index($1, 4)",
            &[&partition_id],
        )
        .unwrap()
        .get(0);
    let node = (port - queen_integration_tests::citus::base_port() as i32) as u16;
    let mut w = db.worker(node);
    let xids: Vec<i64> = w
        .query(
            "SELECT backend_xid::text::bigint FROM pg_stat_activity
              WHERE datname = current_database() AND backend_xid IS NOT NULL AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    open.batch_execute("COMMIT").unwrap();
    let txid: i64 = c.query_one("SELECT txid FROM queen.messages WHERE message_id = $1", &[&message_id]).unwrap().get(0);
    let offset: i64 = w.query_one("SELECT xid_offset FROM queen.cluster", &[]).unwrap().get(0);
    assert_eq!(xids.len(), 1, "one transaction open on the shard's worker: {xids:?}");
    assert_eq!(txid, xids[0] + offset, "the message carries the worker's transaction id");

    let dup = serde_json::json!([
        {"queue": "q", "partition": "p3", "payload": 1, "transactionId": "tx-open"},
        {"queue": "q", "partition": "p4", "payload": 2, "transactionId": "k"},
        {"queue": "q", "partition": "p4", "payload": 3, "transactionId": "k"}
    ]);
    let statuses: Vec<(String, uuid::Uuid)> =
        c.query("SELECT status, message_id FROM queen_push($1)", &[&dup]).unwrap().iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(statuses[0], ("duplicate".to_string(), message_id), "a key pushed before is found on its shard");
    assert_eq!(statuses[1].0, "queued");
    assert_eq!(statuses[2], ("duplicate".to_string(), statuses[1].1), "and a key twice in one batch");
}

/// `BEGIN; INSERT INTO orders …; SELECT queen_push(…); COMMIT` with the order on one worker and
/// the message on the other commits both (two-phase); with ROLLBACK, neither — for a single
/// push and for a batch over every shard.
#[test]
#[ignore = "needs the Citus cluster of make citus-test"]
fn a_push_commits_and_rolls_back_with_the_business_transaction() {
    let db = distributed("business_tx");
    let mut c = db.coordinator();
    c.batch_execute("CREATE TABLE orders (id int PRIMARY KEY, note text)").unwrap();
    c.query_one("SELECT create_distributed_table('orders', 'id')", &[]).unwrap();
    let batch = serde_json::Value::Array(
        (0..20).map(|i| serde_json::json!({"queue": "biz", "partition": format!("p{i}"), "payload": i})).collect(),
    );
    for (id, end) in [(1, "COMMIT"), (2, "ROLLBACK"), (3, "COMMIT"), (4, "ROLLBACK")] {
        c.batch_execute("BEGIN").unwrap();
        c.execute("INSERT INTO orders VALUES ($1, 'order')", &[&id]).unwrap();
        if id <= 2 {
            c.query("SELECT * FROM queen_push('biz', to_jsonb($1::int), 'p1')", &[&id]).unwrap();
        } else {
            c.query("SELECT * FROM queen_push($1)", &[&batch]).unwrap();
        }
        c.batch_execute(end).unwrap();
    }
    let orders: Vec<i32> = c.query("SELECT id FROM orders ORDER BY id", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(orders, vec![1, 3]);
    let messages: i64 = c.query_one("SELECT count(*) FROM queen.messages", &[]).unwrap().get(0);
    assert_eq!(messages, 1 + 20, "the committed push and batch, not the rolled-back ones");
    let shards: i64 = c.query_one("SELECT count(DISTINCT shard) FROM queen.messages", &[]).unwrap().get(0);
    assert_eq!(shards, 4, "the batch spanned every shard");
}

/// A worker's call checks what `queen_push` checks: the caller's grant, and that every item
/// belongs to the shard it was sent to.
#[test]
#[ignore = "needs the Citus cluster of make citus-test"]
fn a_shards_call_refuses_other_shards_items_and_ungranted_roles() {
    let db = distributed("shard_refuses");
    let mut c = db.coordinator();
    let wrong: i32 = c
        .query_one(
            "SELECT k.shard FROM queen.shard_keys k
              WHERE k.idx <> queen.shard_index((SELECT partition_id FROM queen_push('q', '1', 'p1')), 4) LIMIT 1",
            &[],
        )
        .unwrap()
        .get(0);
    let e = c
        .query("SELECT * FROM queen.shard_push_one($1, 'q', '2', 'p1', NULL, NULL)", &[&wrong])
        .unwrap_err();
    assert_eq!(sqlstate(&e), "22023", "{e:?}");
    assert!(format!("{e:?}").contains("shard key"), "{e:?}");

    c.batch_execute("DROP ROLE IF EXISTS citus_pusher; CREATE ROLE citus_pusher LOGIN").unwrap();
    let mut app = postgres::Client::connect(
        &format!("host=127.0.0.1 port={} user=citus_pusher dbname={}", queen_integration_tests::citus::base_port(), db.name),
        postgres::NoTls,
    )
    .unwrap();
    let e = app.query("SELECT * FROM queen_push('q', '3', 'p1')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501", "{e:?}");
    c.query_one("SELECT queen_grant('q', 'citus_pusher', ARRAY['push'])", &[]).unwrap();
    app.query("SELECT * FROM queen_push('q', '3', 'p1')", &[]).unwrap();
    let right: i32 = c
        .query_one("SELECT shard FROM queen.messages WHERE payload = '3'", &[])
        .unwrap()
        .get(0);
    // By hand, to its own shard, still under the grant check.
    c.query_one("SELECT queen_revoke('q', 'citus_pusher', ARRAY['push'])", &[]).unwrap();
    let e = app.query("SELECT * FROM queen.shard_push_one($1, 'q', '4', 'p1', NULL, NULL)", &[&right]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501", "{e:?}");
}
