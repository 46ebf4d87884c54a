//! semantics §12: pg_dump of a database with queen, restored with pg_restore into a fresh database —
//! of the same cluster, and of another cluster whose transaction counter is far lower — keeps
//! every queue, option, message, cursor, lease, subscription and dead letter: consumers go on
//! where they left off, and new pushes come after every restored message.

use postgres::{Client, NoTls};
use queen_integration_tests::{conninfo, TestDb};
use serde_json::{json, Value};
use std::process::Command;

const BIN: &str = "/usr/lib/postgresql/15/bin";

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(format!("{BIN}/{cmd}")).args(args).output().unwrap();
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn items(partition: &str, from: i64, to: i64) -> Value {
    Value::Array((from..to).map(|i| json!({"queue": "q", "partition": partition, "payload": i})).collect())
}

/// What a consumer sees of the queue: stats, lag per group and partition, dead letters,
/// options, the lease.
fn state(c: &mut Client) -> Vec<String> {
    let mut out = vec![];
    for sql in [
        "SELECT to_jsonb(s) - 'oldest_message' - 'newest_message' FROM queen.queue_stats s",
        "SELECT jsonb_agg(to_jsonb(l) - 'lease_expires_at' - 'oldest_pending' ORDER BY consumer_group, partition) FROM queen.group_lag l",
        "SELECT jsonb_agg(jsonb_build_object('p', payload, 'g', consumer_group, 'e', error, 'a', attempts) ORDER BY payload::text) FROM queen.dead_letters_view",
        "SELECT queen_configure('q')",
    ] {
        out.push(c.query_one(sql, &[]).unwrap().get::<_, Value>(0).to_string());
    }
    out
}

fn pop(c: &mut Client, group: &str, partition: &str, auto: bool) -> Vec<i64> {
    c.query(
        "SELECT payload FROM queen_pop('q', $1, batch => 100, partition => $2, auto_ack => $3)",
        &[&group, &partition, &auto],
    )
    .unwrap()
    .iter()
    .map(|r| r.get::<_, Value>(0).as_i64().unwrap())
    .collect()
}

#[test]
fn a_dump_restored_here_or_in_another_cluster_goes_on_where_it_left_off() {
    let src = TestDb::new("backup_src");
    let mut c = src.connect();
    c.execute("SELECT queen_configure('q', '{\"retryLimit\": 0, \"leaseTime\": 3600}')", &[]).unwrap();
    // Make this cluster's transaction counter run well ahead of the other cluster's.
    for _ in 0..3000 {
        c.batch_execute("SELECT pg_current_xact_id()").unwrap();
    }
    c.execute("SELECT count(*) FROM queen_push($1)", &[&items("P1", 0, 10)]).unwrap();
    c.execute("SELECT count(*) FROM queen_push($1)", &[&items("P2", 100, 105)]).unwrap();
    // g: three done, one dead-lettered (retryLimit 0); h: subscribes 'new', then sees 105.
    assert_eq!(pop(&mut c, "g", "P1", false).len(), 10);
    let acks = c
        .query_one(
            "SELECT count(*) FILTER (WHERE success) FROM queen_ack((
               SELECT jsonb_agg(jsonb_build_object('messageId', message_id, 'leaseId', l.lease_id,
                                                   '_status', CASE WHEN (payload)::int < 3 THEN 'completed'
                                                                   WHEN (payload)::int = 3 THEN 'failed'
                                                                   ELSE 'retry' END,
                                                   '_error', 'boom'))
                 FROM queen.messages m, (SELECT DISTINCT lease_id FROM queen.cursors WHERE lease_id IS NOT NULL) l
                WHERE m.partition = 'P1' AND (payload)::int < 5))",
            &[],
        )
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(acks, 4, "0-2 completed, 3 dead-lettered, which releases the lease: 4 superseded, given back");
    c.execute("SELECT * FROM queen_pop('q', 'h', subscription_mode => 'new')", &[]).unwrap();
    c.execute("SELECT count(*) FROM queen_push($1)", &[&items("P2", 105, 106)]).unwrap();
    // A lease held across the dump: g leases P2.
    assert_eq!(pop(&mut c, "g", "P2", false), vec![100, 101, 102, 103, 104, 105]);
    let before = state(&mut c);
    let src_max: i64 = c.query_one("SELECT max(txid) FROM queen.messages", &[]).unwrap().get(0);

    let file = std::env::temp_dir().join(format!("{}.dump", src.name));
    let file = file.to_str().unwrap();
    let (host, port) = (std::env::var("QUEEN_TEST_HOST").unwrap(), std::env::var("QUEEN_TEST_PORT").unwrap());
    run("pg_dump", &["-Fc", "-h", &host, "-p", &port, "-U", "postgres", "-d", &src.name, "-f", file]);

    let other_host = std::env::var("QUEEN_TEST_NOPRELOAD_HOST").expect("run through scripts/integration-tests");
    let other_port = std::env::var("QUEEN_TEST_NOPRELOAD_PORT").unwrap();
    for (host, port, label) in
        [(host.as_str(), port.as_str(), "same cluster"), (&other_host, &other_port, "other cluster")]
    {
        let name = format!("{}_restored", src.name);
        let mut admin =
            Client::connect(&format!("host={host} port={port} user=postgres dbname=postgres"), NoTls).unwrap();
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name}")).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        run("pg_restore", &["-h", host, "-p", port, "-U", "postgres", "-d", &name, "--exit-on-error", file]);
        let mut r = Client::connect(&format!("host={host} port={port} user=postgres dbname={name}"), NoTls).unwrap();
        if label == "other cluster" {
            let here: i64 = r.query_one("SELECT pg_current_xact_id()::text::bigint", &[]).unwrap().get(0);
            assert!(here < src_max, "the test needs a target cluster behind the source ({here} vs {src_max})");
        }
        assert_eq!(state(&mut r), before, "{label}: the restored queue looks as it did");
        // New pushes come after every restored message, on both partitions.
        r.execute("SELECT count(*) FROM queen_push($1)", &[&items("P1", 10, 12)]).unwrap();
        r.execute("SELECT count(*) FROM queen_push($1)", &[&items("P2", 106, 107)]).unwrap();
        // g goes on: 4 (given back) to 9, then the new ones; P2 is still leased.
        assert_eq!(pop(&mut r, "g", "P1", true), vec![4, 5, 6, 7, 8, 9, 10, 11], "{label}");
        assert!(pop(&mut r, "g", "P2", true).is_empty(), "{label}: the lease survived");
        // h subscribed 'new' before 105 was pushed.
        assert_eq!(pop(&mut r, "h", "P2", true), vec![105, 106], "{label}");
        assert_eq!(pop(&mut r, "h", "P1", true), vec![10, 11], "{label}: what came after h subscribed");
        // A group new to the restored queue reads it all, in order.
        assert_eq!(pop(&mut r, "k", "P1", true), (0..12).collect::<Vec<_>>(), "{label}");
        assert_eq!(pop(&mut r, "k", "P2", true), (100..107).collect::<Vec<_>>(), "{label}");
        let lag: i64 = r
            .query_one("SELECT sum(pending)::bigint FROM queen.group_lag WHERE consumer_group IN ('h', 'k')", &[])
            .unwrap()
            .get(0);
        assert_eq!(lag, 0, "{label}");
        // Settled: one row of the mapping (the restore brought a second, identical to
        // CREATE EXTENSION's in the same cluster).
        let rows: i64 = r.query_one("SELECT count(*) FROM queen.cluster WHERE verified", &[]).unwrap().get(0);
        assert_eq!(rows, 1, "{label}");
        let rows: i64 = r.query_one("SELECT count(*) FROM queen.cluster", &[]).unwrap().get(0);
        assert_eq!(rows, 1, "{label}");
        drop(r);
        admin.batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)")).unwrap();
    }
    let _ = std::fs::remove_file(file);
    let _ = conninfo;
}
