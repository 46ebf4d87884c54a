//! Issue 20: no lost message after a seek, a late first pop, a restore or a rolled-back pop.
//! Each test replays, over real connections, an interleaving a review of 0.2.0 found losing,
//! stranding or delivering twice; each failed on 0.2.0.

use postgres::Client;
use queen_integration_tests::{await_debug_sleep, drain, lag, open_tx, pop_auto, push, Server, TestDb};
use serde_json::{json, Value};

fn pid(c: &mut Client) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0)
}

fn pop_new(c: &mut Client, queue: &str, group: &str) -> Vec<Value> {
    queen_integration_tests::payloads(
        &c.query(
            "SELECT * FROM queen_pop($1, $2, batch => 10, partitions => 10, auto_ack => true,
                                     subscription_mode => 'new')",
            &[&queue, &group],
        )
        .unwrap(),
    )
}

/// Item 1: a pop looks at a partition, and before its claim a seek to the end commits. The
/// claim fails, the pop looks again — with the subscription it read before the seek. On 0.2.0
/// that look took the seek's row "back" to the older point: the pop delivered m1, completed
/// before, and m2, and the row kept the pre-seek point (the seek undone). A row keeps what the
/// seek made of it.
#[test]
fn a_seek_between_a_pops_look_and_its_claim_is_not_undone() {
    let db = TestDb::new("seek_claim");
    let mut c = db.connect();
    push(&mut c, "q", "P", json!("seed"));
    assert!(pop_new(&mut c, "q", "g").is_empty(), "g subscribes 'new'");
    for m in ["m1", "m2", "m3"] {
        push(&mut c, "q", "P", json!(m));
    }
    let first = c.query_one("SELECT message_id, lease_id, payload FROM queen_pop('q', 'g')", &[]).unwrap();
    assert_eq!(first.get::<_, Value>(2), json!("m1"));
    let acked: bool = c
        .query_one(
            "SELECT success FROM queen_ack($1, $2)",
            &[&first.get::<_, uuid::Uuid>(0), &first.get::<_, uuid::Uuid>(1)],
        )
        .unwrap()
        .get(0);
    assert!(acked);

    let mut a = db.connect();
    let a_pid = pid(&mut a);
    a.batch_execute("SET queen.debug_claim_delay_ms = 1000").unwrap();
    let h = std::thread::spawn(move || {
        let got = queen_integration_tests::payloads(
            &a.query("SELECT * FROM queen_pop('q', 'g', batch => 5, auto_ack => true)", &[]).unwrap(),
        );
        (a, got)
    });
    await_debug_sleep(&mut c, a_pid);
    assert_eq!(c.query_one("SELECT queen_seek('q', 'g', NULL)", &[]).unwrap().get::<_, i32>(0), 1);
    let (_a, got) = h.join().unwrap();
    assert!(got.is_empty(), "the seek to the end committed before the claim; the pop delivered {got:?}");
    assert_eq!(lag(&mut c, "q", Some("g")), 0);
    push(&mut c, "q", "P", json!("m4"));
    assert_eq!(drain(&mut c, "q", Some("g")), vec![json!("m4")], "the group goes on from the seek's point");
}

/// Item 1, without a debug setting: a first pop of g ('new', empty) stays open while another
/// session seeks g to the end; when the first pop commits, its older point does not come back
/// (on 0.2.0 the next pop delivered m2, stored before the seek).
#[test]
fn a_first_pop_open_across_a_seek_does_not_bring_its_point_back() {
    let db = TestDb::new("seek_first_pop");
    let mut c = db.connect();
    push(&mut c, "q", "P", json!("m1"));
    let mut a = open_tx(&db);
    assert!(pop_new(&mut a, "q", "g").is_empty());
    push(&mut c, "q", "P", json!("m2"));
    push(&mut c, "q", "P", json!("m3"));
    push(&mut c, "q", "P2", json!("m3b"));
    c.execute("SELECT queen_seek('q', 'g', NULL)", &[]).unwrap();
    a.batch_execute("COMMIT").unwrap();
    assert_eq!(lag(&mut c, "q", Some("g")), 0, "nothing before the seek is owed");
    let got = drain(&mut c, "q", Some("g"));
    assert!(got.is_empty(), "messages stored before the seek came back: {got:?}");
    push(&mut c, "q", "P3", json!("m4"));
    assert_eq!(drain(&mut c, "q", Some("g")), vec![json!("m4")]);
    // The seek's row is the group's subscription, also after maintenance folds the rows.
    c.execute("SELECT queen_maintain()", &[]).unwrap();
    assert_eq!(
        c.query_one("SELECT count(*) FROM queen.subscriptions WHERE consumer_group = 'g'", &[])
            .unwrap()
            .get::<_, i64>(0),
        1
    );
    assert_eq!(lag(&mut c, "q", Some("g")), 0);
    assert!(drain(&mut c, "q", Some("g")).is_empty());
}

/// Item 2 (a randomized schedule of 285 steps shrunk to 54): A's first 'new' pop of g stays
/// open; B pushes m13 and m15 into P0 (and m14 into P1), subscribes later with a first pop of
/// its own (empty), pushes m20 and m29, and a pop of g delivers them. When A commits, its
/// earlier point counts — but P0 keeps the start its cursor was made with: m13 and m15, which
/// committed before m20 was pushed, are never delivered after it (0.2.0 delivered them after
/// m20 and m29). P1, where g had no cursor yet, starts from the earliest point: m14 comes.
#[test]
fn a_first_pop_that_commits_late_never_breaks_a_partitions_order() {
    let db = TestDb::new("late_first_pop");
    let mut b = db.connect();
    push(&mut b, "q", "P0", json!("old"));
    let mut a = open_tx(&db);
    assert!(pop_new(&mut a, "q", "g").is_empty());
    push(&mut b, "q", "P0", json!("m13"));
    push(&mut b, "q", "P1", json!("m14"));
    push(&mut b, "q", "P0", json!("m15"));
    assert!(pop_new(&mut b, "q", "g").is_empty(), "B's own point: m13..m15 are not new to it");
    push(&mut b, "q", "P0", json!("m20"));
    push(&mut b, "q", "P0", json!("m29"));
    assert_eq!(pop_auto(&mut b, "q", Some("g"), 10), vec![json!("m20"), json!("m29")]);
    assert_eq!(lag(&mut b, "q", Some("g")), 0);
    a.batch_execute("COMMIT").unwrap();
    assert_eq!(lag(&mut b, "q", Some("g")), 1, "the earliest point counts where g had no cursor: m14");
    assert_eq!(drain(&mut b, "q", Some("g")), vec![json!("m14")], "and only there");
    assert_eq!(lag(&mut b, "q", Some("g")), 0);
}

/// Item 5: a commit is visible before the caches learn of it. A session that cached g's 'all'
/// subscription pops while queen_delete_group's commit is visible but the cache's generation
/// has not moved yet (queen.debug_commit_delay_ms holds that window open): it must read that
/// g has no subscription, and subscribe 'new' (0.2.0 used the cached 'all' and delivered the
/// old messages). The same for a revoke: the revoked role's push must be refused.
#[test]
fn a_commit_is_never_passed_by_a_cached_read() {
    let db = TestDb::new("cache_window");
    let mut a = db.connect();
    let mut c = db.connect();
    push(&mut c, "q", "P", json!("old1"));
    assert_eq!(pop_auto(&mut a, "q", Some("g"), 10), vec![json!("old1")], "g subscribes 'all'");
    assert!(pop_auto(&mut a, "q", Some("g"), 10).is_empty(), "a caches g's subscription");
    push(&mut c, "q", "P", json!("old2"));

    let mut w = db.connect();
    let w_pid = pid(&mut w);
    w.batch_execute("SET queen.debug_commit_delay_ms = 1500").unwrap();
    let h = std::thread::spawn(move || {
        w.execute("SELECT queen_delete_group('g', 'q')", &[]).unwrap();
        w
    });
    await_debug_sleep(&mut c, w_pid);
    assert_eq!(
        c.query_one("SELECT count(*) FROM queen.subscriptions WHERE consumer_group = 'g'", &[])
            .unwrap()
            .get::<_, i64>(0),
        0,
        "the delete is visible"
    );
    let got = pop_new(&mut a, "q", "g");
    assert!(got.is_empty(), "a pop used the deleted group's cached subscription: {got:?}");
    let mut w = h.join().unwrap();
    push(&mut c, "q", "P", json!("new"));
    assert_eq!(pop_auto(&mut a, "q", Some("g"), 10), vec![json!("new")]);

    // A revoke.
    let app = db.role("app");
    c.execute("SELECT queen_grant('q', $1::text::regrole, ARRAY['push'])", &[&app]).unwrap();
    let mut r = db.connect_as(&app);
    r.query_one("SELECT queen_push('q', '1')", &[]).unwrap(); // caches the grants
    let w_pid = pid(&mut w);
    let h = std::thread::spawn(move || {
        w.execute("SELECT queen_revoke('q', $1::text::regrole, ARRAY['push'])", &[&app]).unwrap();
    });
    await_debug_sleep(&mut c, w_pid);
    let pushed = r.query_one("SELECT queen_push('q', '2')", &[]);
    h.join().unwrap();
    let err = pushed.expect_err("the revoked role's push went through");
    assert_eq!(queen_integration_tests::sqlstate(&err), "42501");
}

/// A statement that commits on its own (no BEGIN: its commit runs after its portal is gone,
/// with no snapshot) while another session's change of cached state is in flight: the commit's
/// check of the id mapping reads then, and found no snapshot to read with once an
/// invalidation (here the caller's own ANALYZE, in CI autovacuum's) had dropped the backend's
/// layout — "cannot execute SQL without an outer snapshot or portal" (CI of 082d1bb).
#[test]
fn a_statement_commits_while_another_change_is_in_flight() {
    let db = TestDb::new("commit_in_flight");
    let mut c = db.connect();
    push(&mut c, "q", "P", json!("m1"));
    let mut w = db.connect();
    let w_pid = pid(&mut w);
    w.batch_execute("SET queen.debug_commit_delay_ms = 1500").unwrap();
    let h = std::thread::spawn(move || {
        w.execute("SELECT queen_configure('q', '{\"leaseTime\": 20}')", &[]).unwrap();
    });
    await_debug_sleep(&mut c, w_pid);
    // One implicit transaction: a push, then an invalidation of queen.messages' relcache entry.
    c.batch_execute("SELECT queen_push('q', '\"m2\"'); ANALYZE queen.messages").unwrap();
    h.join().unwrap();
    // Both delivered; m1 (partition P) and m2 (Default) are in two partitions, whose hints come
    // due together: which a pop takes first is its own (pop.rs spread), not an order to check.
    let mut got = drain(&mut c, "q", None);
    got.sort_by_key(|v| v.to_string());
    assert_eq!(got, vec![json!("m1"), json!("m2")]);
}

/// A stretch of `n` messages of partition A, consumed by name (auto_ack), then one message in
/// partition B.
fn finished_stretch_then_b(c: &mut Client, n: i64) {
    let mut pushed = 0;
    while pushed < n {
        let k = (n - pushed).min(5000);
        c.query_one(
            "SELECT count(*) FROM queen_push((SELECT jsonb_agg(jsonb_build_object('queue', 'q', 'partition', 'A',
                                                                                   'payload', i))
                                                FROM generate_series(1, $1::bigint) i))",
            &[&k],
        )
        .unwrap();
        pushed += k;
    }
    let mut consumed = 0i64;
    while consumed < n {
        let got: i64 = c
            .query_one(
                "SELECT count(*) FROM queen_pop('q', 'g', partition => 'A', batch => 10000, auto_ack => true)",
                &[],
            )
            .unwrap()
            .get(0);
        assert!(got > 0, "A consumed {consumed} of {n}");
        consumed += got;
    }
    assert_eq!(consumed, n);
    push(c, "q", "B", json!("B"));
}

/// `BEGIN; pop; ROLLBACK` until a pop delivers (then committed), at most 5 pops, running
/// `between` after each rollback: what it delivered and how many pops it took.
fn pop_rolling_back_empty(w: &mut Client, between: &str) -> (Vec<Value>, usize) {
    let mut pops = 0;
    loop {
        pops += 1;
        assert!(pops <= 5, "5 rolled-back pops never reached partition B");
        w.batch_execute("BEGIN").unwrap();
        let rows = w.query("SELECT payload FROM queen_pop('q', 'g', auto_ack => true)", &[]).unwrap();
        if rows.is_empty() {
            w.batch_execute("ROLLBACK").unwrap();
            if !between.is_empty() {
                w.batch_execute(between).unwrap();
            }
            continue;
        }
        w.batch_execute("COMMIT").unwrap();
        return (rows.iter().map(|r| r.get::<_, Value>(0)).collect(), pops);
    }
}

/// Item 4: after a long finished stretch of the queue log (15 000 messages of partition A,
/// consumed by name), one message in a new partition B. A consumer that rolls back its empty
/// pops (`BEGIN; pop; ROLLBACK`) took its discovery point back each time and re-read the same
/// first 12 000 entries for ever: it never got B (0.2.0). The backend carries its point out of
/// the rollback, and the next pop reads on from there.
#[test]
fn rolled_back_empty_pops_reach_a_new_partition() {
    let db = TestDb::new("rolled_back_pops");
    let mut c = db.connect();
    finished_stretch_then_b(&mut c, 15_000);
    let mut w = db.connect();
    let (got, pops) = pop_rolling_back_empty(&mut w, "");
    assert_eq!(got, vec![json!("B")]);
    assert!(pops <= 3, "it took {pops} pops");
    assert_eq!(lag(&mut c, "q", Some("g")), 0);
}

/// Item 4 again, with the application's own work committed between the rolled-back pops
/// (here a `SELECT 1` outside a transaction block; a driver's prepare does the same). Such a
/// commit ended what the backend carried: each pop read the log again from the stored point,
/// a stretch longer than one pop reads (`queen.debug_scan_limit`), and never reached B.
#[test]
fn rolled_back_empty_pops_reach_a_new_partition_across_other_commits() {
    let db = TestDb::new("rolled_back_commits");
    let mut c = db.connect();
    finished_stretch_then_b(&mut c, 5_000);
    let mut w = db.connect();
    // A pop of 1 reads 64, 128, 256 and then 400 entries a round: 2 448 in its eight rounds,
    // of a stretch of 5 000.
    w.batch_execute("SET queen.debug_scan_limit = 400").unwrap();
    // A simple query outside a transaction block: committed on its own, as a driver's
    // prepare is.
    let (got, pops) = pop_rolling_back_empty(&mut w, "SELECT 1");
    assert_eq!(got, vec![json!("B")]);
    assert_eq!(pops, 3, "each pop reads on from where the last got");
    assert_eq!(lag(&mut c, "q", Some("g")), 0);
}

/// A transaction leases partition P by name (its hint for P is written then, not by
/// discovery), then pops the group: that pop's discovery finds P's message in the log, and a
/// hint accounts for it — the transaction's own. A rollback takes that hint back while the
/// backend carries the discovery point past the message out of it; the point carries P with
/// it only if discovery counted P as found. Discovery passes over a partition whose hint
/// accounts for what it found only when another transaction committed that hint.
#[test]
fn a_partition_hinted_only_by_a_rolled_back_transaction_is_hinted_again() {
    let db = TestDb::new("rolled_back_hint");
    let mut c = db.connect();
    push(&mut c, "q", "S", json!("seed"));
    assert_eq!(pop_auto(&mut c, "q", Some("g"), 10), vec![json!("seed")], "g subscribed, its point stored");
    push(&mut c, "q", "P", json!("m1"));
    let mut w = db.connect();
    w.batch_execute("BEGIN").unwrap();
    let leased = w.query("SELECT payload FROM queen_pop('q', 'g', partition => 'P')", &[]).unwrap();
    assert_eq!(leased.len(), 1, "the pop by name leases m1");
    assert!(w.query("SELECT * FROM queen_pop('q', 'g')", &[]).unwrap().is_empty(), "P is leased");
    w.batch_execute("ROLLBACK").unwrap();
    // In a transaction block: the prepare of a statement outside one commits, and a commit
    // ends what the backend carries (the next pop reads the log again from the stored point).
    w.batch_execute("BEGIN").unwrap();
    let got = w.query("SELECT payload FROM queen_pop('q', 'g', auto_ack => true)", &[]).unwrap();
    w.batch_execute("COMMIT").unwrap();
    assert_eq!(got.iter().map(|r| r.get::<_, Value>(0)).collect::<Vec<_>>(), vec![json!("m1")]);
    assert_eq!(lag(&mut c, "q", Some("g")), 0);
}

// --- Item 3: restores into another cluster, and clones. -----------------------------------

/// A source database on `src`, its counter ahead of `dst`'s: queue q with m1..m3 in P, all
/// consumed by group g (its cursor at m3), and dumped (custom format) to the returned file.
fn source(src: &Server, dst: &Server, name: &str) -> String {
    src.run_ahead_of(dst);
    let mut c = src.create(name, true);
    for m in ["m1", "m2", "m3"] {
        push(&mut c, "q", "P", json!(m));
    }
    assert_eq!(pop_auto(&mut c, "q", Some("g"), 10).len(), 3);
    let file = std::env::temp_dir().join(format!("{name}.dump")).to_string_lossy().into_owned();
    src.tool("pg_dump", &["-Fc", "-d", name, "-f", &file]);
    src.drop_db(name);
    file
}

/// Item 3: the first call after a restore into a cluster whose counter is behind rolled back
/// (0.2.0 rebased inside it, and kept the offset in the backend though the table never got
/// it); a second backend then rebased to another offset, and a message it pushed after one of
/// the first backend's was stored behind that one: the group that consumed the first never got
/// it, and group_lag said 0. The rebase is committed on its own, once: both use it.
#[test]
fn a_rolled_back_first_call_after_a_restore_leaves_no_offset_behind() {
    let (src, dst) = (Server::not_preloaded(), Server::preloaded());
    let name = format!("rb_first_{}", std::process::id());
    let file = source(&src, &dst, &name);
    dst.create(&name, false);
    dst.tool("pg_restore", &["-d", &name, "--exit-on-error", &file]);
    let mut a = dst.connect(&name);
    a.batch_execute("BEGIN").unwrap();
    push(&mut a, "q", "P", json!("rolled back"));
    a.batch_execute("ROLLBACK").unwrap();
    push(&mut a, "q", "P", json!("a1"));
    let mut consumer = dst.connect(&name);
    assert_eq!(pop_auto(&mut consumer, "q", Some("g"), 10), vec![json!("a1")]);
    // Transactions in between: a second backend's first call comes well after a1.
    let mut burn = dst.connect(&name);
    burn.batch_execute("SET synchronous_commit = off").unwrap();
    burn.batch_execute("DO $$BEGIN FOR i IN 1..200 LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END$$")
        .unwrap();
    let mut b = dst.connect(&name);
    push(&mut b, "q", "P", json!("b1"));
    push(&mut a, "q", "P", json!("a2"));
    assert_eq!(pop_auto(&mut consumer, "q", Some("g"), 10), vec![json!("b1"), json!("a2")]);
    push(&mut b, "q", "P", json!("b2"));
    assert_eq!(lag(&mut consumer, "q", Some("g")), 1, "b2 is owed");
    assert_eq!(pop_auto(&mut consumer, "q", Some("g"), 10), vec![json!("b2")], "b2, pushed after a2, comes after it");
    let rows: i64 = consumer.query_one("SELECT count(*) FROM queen.cluster WHERE verified", &[]).unwrap().get(0);
    assert_eq!(rows, 1);
    let rows: i64 = consumer.query_one("SELECT count(*) FROM queen.cluster", &[]).unwrap().get(0);
    assert_eq!(rows, 1, "settled: one row, not the restored one beside CREATE EXTENSION's");
    drop((a, b, consumer));
    dst.drop_db(&name);
    let _ = std::fs::remove_file(file);
}

/// Item 3: while one backend's first call after a restore sits in an open transaction, other
/// sessions' pushes do not wait (0.2.0 held the rebase's table lock until that transaction
/// ended: semantics §3.1, a producer never waits).
#[test]
fn a_first_call_after_a_restore_never_makes_others_wait() {
    let (src, dst) = (Server::not_preloaded(), Server::preloaded());
    let name = format!("rb_wait_{}", std::process::id());
    let file = source(&src, &dst, &name);
    dst.create(&name, false);
    dst.tool("pg_restore", &["-d", &name, "--exit-on-error", &file]);
    let mut a = dst.connect(&name);
    a.batch_execute("BEGIN").unwrap();
    push(&mut a, "q", "P", json!("a"));
    let mut b = dst.connect(&name);
    b.batch_execute("SET lock_timeout = '2s'").unwrap();
    let pushed = b.query_one("SELECT status FROM queen_push('q', '\"b\"', 'P')", &[]);
    assert_eq!(pushed.map(|r| r.get::<_, String>(0)).map_err(|e| e.to_string()), Ok("queued".to_string()));
    a.batch_execute("COMMIT").unwrap();
    let mut got = drain(&mut b, "q", Some("g"));
    got.sort_by_key(|v| v.to_string());
    assert_eq!(got, vec![json!("a"), json!("b")]);
    drop((a, b));
    dst.drop_db(&name);
    let _ = std::fs::remove_file(file);
}

/// Item 3: a clone with the same system identifier and an older counter (a base backup, PITR
/// or promoted standby), later loaded with a newer dump: 0.2.0 trusted a row that named this
/// cluster and never rebased, so new pushes were stored behind the restored cursors and never
/// delivered. Replayed here by giving the dumped row this cluster's system identifier: the
/// mapping is decided by the counter.
#[test]
fn a_clone_whose_rows_name_this_cluster_is_rebased_by_the_counter() {
    let (src, dst) = (Server::preloaded(), Server::not_preloaded());
    let name = format!("rb_clone_{}", std::process::id());
    src.run_ahead_of(&dst);
    let mut c = src.create(&name, true);
    for m in ["m1", "m2", "m3"] {
        push(&mut c, "q", "P", json!(m));
    }
    assert_eq!(pop_auto(&mut c, "q", Some("g"), 10).len(), 3);
    let src_id: i64 = c.query_one("SELECT system_identifier FROM pg_control_system()", &[]).unwrap().get(0);
    let dst_id: i64 =
        dst.connect("postgres").query_one("SELECT system_identifier FROM pg_control_system()", &[]).unwrap().get(0);
    let sql = src.tool("pg_dump", &["-Fp", "-d", &name]);
    drop(c);
    src.drop_db(&name);
    let row = format!("{src_id}\t0\t");
    assert!(sql.contains(&row), "the dump holds queen.cluster's row");
    let sql = sql.replace(&row, &format!("{dst_id}\t0\t"));
    let file = std::env::temp_dir().join(format!("{name}.sql")).to_string_lossy().into_owned();
    std::fs::write(&file, sql).unwrap();
    dst.create(&name, false);
    dst.tool("psql", &["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &name, "-f", &file]);
    let mut r = dst.connect(&name);
    push(&mut r, "q", "P", json!("after"));
    assert_eq!(lag(&mut r, "q", Some("g")), 1);
    assert_eq!(pop_auto(&mut r, "q", Some("g"), 10), vec![json!("after")]);
    drop(r);
    dst.drop_db(&name);
    let _ = std::fs::remove_file(file);
}

/// Item 3: backends open across a restore — any application connection, as the maintenance
/// worker is — used the offset they read before the data arrived (0.2.0: a push of such a
/// backend was stored behind the restored cursors, and never delivered). They use the settled
/// mapping; and a transaction that used the old one across the restore does not commit (40001,
/// retry), on both clusters (with and without shared memory).
#[test]
fn backends_open_across_a_restore_use_the_settled_mapping() {
    for (src, dst, label) in [
        (Server::not_preloaded(), Server::preloaded(), "preloaded"),
        (Server::preloaded(), Server::not_preloaded(), "not preloaded"),
    ] {
        let name = format!("rb_open_{}_{}", label.replace(' ', "_"), std::process::id());
        let file = source(&src, &dst, &name);
        let _ = dst.create(&name, true);
        // Long-lived connections that used queen before the data arrived.
        let mut idle = dst.connect(&name);
        assert!(pop_auto(&mut idle, "other", Some("x"), 1).is_empty());
        let mut straddling = dst.connect(&name);
        straddling.batch_execute("BEGIN").unwrap();
        push(&mut straddling, "other", "P", json!("straddling"));
        dst.tool("pg_restore", &["-d", &name, "--data-only", "--exit-on-error", &file]);
        push(&mut idle, "q", "P", json!("after"));
        let mut r = dst.connect(&name);
        assert_eq!(lag(&mut r, "q", Some("g")), 1, "{label}");
        assert_eq!(pop_auto(&mut r, "q", Some("g"), 10), vec![json!("after")], "{label}");
        let committed = straddling.batch_execute("COMMIT");
        let err = committed.expect_err("a transaction that used the old mapping committed across the restore");
        assert_eq!(queen_integration_tests::sqlstate(&err), "40001", "{label}: {err}");
        assert!(drain(&mut r, "other", Some("y")).is_empty(), "{label}: nothing of it was stored");
        drop((idle, straddling, r));
        dst.drop_db(&name);
        let _ = std::fs::remove_file(file);
    }
}
