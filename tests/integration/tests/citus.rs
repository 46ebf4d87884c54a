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
