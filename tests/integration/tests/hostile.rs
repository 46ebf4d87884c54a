//! A role with no grant (or some grants) that tries to read, probe or block what it was not
//! granted (issue 21, items 1–4), over real connections as roles that are not superusers.

use postgres::Client;
use queen_integration_tests::{connect, open_tx, push, queen_lock_tag, sqlstate, TestDb};
use serde_json::json;

/// A queue "secret" with a pending message in partition p, a dead letter whose payload is a card
/// number, a second group's cursor, and a grant to someone else: a row in every view.
fn secret_queue(admin: &mut Client, db: &TestDb) -> String {
    admin.execute("SELECT queen_configure('secret', '{\"retryLimit\": 0}')", &[]).unwrap();
    push(admin, "secret", "p", json!({"card": "4111-1111-1111-1111"}));
    let r = admin.query_one("SELECT message_id, lease_id FROM queen_pop('secret', 'billing')", &[]).unwrap();
    admin
        .execute("SELECT queen_ack($1, $2, 'dlq')", &[&r.get::<_, uuid::Uuid>(0), &r.get::<_, uuid::Uuid>(1)])
        .unwrap();
    push(admin, "secret", "p", json!({"card": "5500-0000-0000-0004"}));
    let other = db.role("other");
    admin.execute("SELECT queen_grant('secret', $1::text::regrole, ARRAY['read'])", &[&other]).unwrap();
    other
}

/// Item 1: every view is a security barrier. A role with no grant runs predicates that would
/// fail — or print — on another queue's rows: none of them ever sees one. (On 0.2.0 the cast
/// fails with the card number in the message, and the NOTICE function prints every queue.)
#[test]
fn a_callers_predicate_never_sees_a_row_the_view_filters_out() {
    let db = TestDb::new("barrier");
    let mut admin = db.connect();
    secret_queue(&mut admin, &db);
    push(&mut admin, "mine", "mp", json!(1));
    let role = db.role("snoop");
    admin.execute("SELECT queen_grant('mine', $1::text::regrole, ARRAY['read'])", &[&role]).unwrap();
    // A cheap function of the role's own that raises on anything it is not allowed to see.
    admin.batch_execute(&format!("CREATE SCHEMA snoop AUTHORIZATION {role}")).unwrap();
    let mut c = db.connect_as(&role);
    c.batch_execute(
        "CREATE FUNCTION snoop.see(v text) RETURNS boolean LANGUAGE plpgsql COST 0.0001 STRICT AS $$
         BEGIN
           IF v NOT IN ('mine', 'mp') THEN RAISE EXCEPTION 'leaked: %', v; END IF;
           RETURN true;
         END $$",
    )
    .unwrap();
    let probes = [
        "SELECT 1 FROM queen.dead_letters_view WHERE (payload->>'card')::int = 0",
        "SELECT 1 FROM queen.dead_letters_view WHERE snoop.see(payload::text)",
        "SELECT 1 FROM queen.dead_letters_view WHERE snoop.see(queue)",
        "SELECT 1 FROM queen.queue_stats WHERE CASE WHEN queue = 'mine' THEN false ELSE queue::int = 0 END",
        "SELECT 1 FROM queen.queue_stats WHERE snoop.see(queue)",
        "SELECT 1 FROM queen.group_lag WHERE snoop.see(queue) AND snoop.see(partition)",
        "SELECT 1 FROM queen.group_lag WHERE consumer_group::int = 0",
        "SELECT 1 FROM queen.grants WHERE snoop.see(queue)",
        "SELECT 1 FROM queen.grants WHERE CASE WHEN queue = 'mine' THEN false ELSE role::text::int = 0 END",
    ];
    for sql in probes {
        c.query(sql, &[]).unwrap_or_else(|e| panic!("{sql}: the predicate saw a row it may not: {e}"));
    }
    // The rows it may read are still there, found through a leakproof comparison.
    let n: i64 = c.query_one("SELECT count(*) FROM queen.queue_stats WHERE queue = 'mine'", &[]).unwrap().get(0);
    assert_eq!(n, 1);
    let n: i64 = c.query_one("SELECT count(*) FROM queen.queue_stats WHERE snoop.see(queue)", &[]).unwrap().get(0);
    assert_eq!(n, 1, "the predicate runs on the rows the role may read");
    // Every view of queen is a security barrier, in a fresh install and after an upgrade
    // (scripts/upgrade-test compares the catalogs).
    let plain: Vec<String> = admin
        .query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = 'queen' AND c.relkind = 'v' AND c.relname <> 'effective_subscriptions'
                AND NOT coalesce('security_barrier=true' = ANY (c.reloptions), false)",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(plain, Vec::<String>::new(), "views that are not security barriers");
}

/// The (classid, objid) of every lock of queen's that `c`'s backend holds now, as pg_locks shows
/// them to anyone.
fn locks_of(admin: &mut Client, pid: i32) -> Vec<(i64, i64, i16)> {
    admin
        .query(
            "SELECT classid::bigint, objid::bigint, objsubid FROM pg_locks
              WHERE locktype = 'advisory' AND pid = $1",
            &[&pid],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// Item 2: no role can hold queen's locks. The role holds advisory locks on every key it can
/// compute or read from pg_locks while queen holds them — the maintenance key, a queue's
/// configuration key, the visit, discovery and pair keys of a pop — in both of the forms SQL
/// offers. Maintenance still runs, configure and seek do not wait, pops still deliver and a
/// new group still creates its cursor. (On 0.2.0 maintenance skips silently, configure waits
/// for ever, pops return nothing.)
#[test]
fn no_role_can_hold_queens_locks() {
    let db = TestDb::new("locks");
    let mut admin = db.connect();
    push(&mut admin, "q", "p", json!(1));
    push(&mut admin, "q", "p2", json!(2));
    // What queen holds while a pop of a new group is open: read as anyone reads pg_locks.
    let mut a = open_tx(&db);
    let a_pid: i32 = a.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    assert_eq!(a.query("SELECT * FROM queen_pop('q', 'g', batch => 10, partitions => 2)", &[]).unwrap().len(), 2);
    let held = locks_of(&mut admin, a_pid);
    assert!(!held.is_empty(), "the open pop holds its visit marks and pair locks");
    assert!(held.iter().all(|(_, _, sub)| *sub == 81), "queen's locks carry its own tag: {held:?}");
    a.batch_execute("ROLLBACK").unwrap();

    let role = db.role("blocker");
    let mut h = db.connect_as(&role);
    let queue_id: uuid::Uuid = admin.query_one("SELECT DISTINCT queue_id FROM queen.queues", &[]).unwrap().get(0);
    let db_oid: u32 =
        admin.query_one("SELECT oid FROM pg_database WHERE datname = current_database()", &[]).unwrap().get(0);
    let mut keys: Vec<(i64, i64)> = held.iter().map(|(k1, k2, _)| (*k1, *k2)).collect();
    // The keys anyone can compute (src/locks.rs is public): the maintenance lock's, the queue's
    // configuration lock's.
    for (kind, id) in [(10u8, None), (2u8, Some(queue_id))] {
        let (_, k1, k2) = queen_lock_tag(db_oid, kind, id, None);
        keys.push((k1 as i64, k2 as i64));
    }
    for (k1, k2) in &keys {
        // The two-int form and the bigint form.
        h.execute(
            "SELECT pg_advisory_lock(($1::bigint - CASE WHEN $1 > 2147483647 THEN 4294967296 ELSE 0 END)::int4,
                                     ($2::bigint - CASE WHEN $2 > 2147483647 THEN 4294967296 ELSE 0 END)::int4)",
            &[k1, k2],
        )
        .unwrap();
        h.execute("SELECT pg_advisory_lock(($1::bigint << 32) | $2::bigint)", &[k1, k2]).unwrap();
    }
    // Everything still works, and nothing waits (a wait would hit lock_timeout).
    admin.batch_execute("SET lock_timeout = '2s'").unwrap();
    let report: serde_json::Value = admin.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert!(report.get("skipped").is_none(), "maintenance skipped: {report}");
    admin.execute("SELECT queen_configure('q', '{\"leaseTime\": 30}')", &[]).unwrap();
    let rows = admin.query("SELECT * FROM queen_pop('q', 'g', batch => 10, partitions => 2)", &[]).unwrap();
    assert_eq!(rows.len(), 2, "the pop delivered from both partitions");
    admin.query("SELECT queen_seek('q', 'g2')", &[]).unwrap();
    push(&mut admin, "q", "p", json!(3));
    assert_eq!(admin.query("SELECT * FROM queen_pop('q', 'g2', auto_ack => true)", &[]).unwrap().len(), 1);
}

/// Item 2, the bound: a queen call that waits for one of queen's locks (here a configure
/// behind another's open transaction) waits no longer than queen.lock_wait_seconds, or the
/// caller's shorter lock_timeout, then fails with 55P03 naming what it waited for.
#[test]
fn a_wait_for_queens_own_lock_is_bounded() {
    let db = TestDb::new("lock_bound");
    let mut admin = db.connect();
    admin.execute("SELECT queen_configure('q', '{}')", &[]).unwrap();
    let mut a = open_tx(&db);
    a.execute("SELECT queen_configure('q', '{\"leaseTime\": 10}')", &[]).unwrap();
    admin.batch_execute("SET queen.lock_wait_seconds = 1").unwrap();
    let t = std::time::Instant::now();
    let e = admin.execute("SELECT queen_configure('q', '{\"leaseTime\": 20}')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "55P03", "{e}");
    assert!(e.as_db_error().unwrap().message().contains("queue \"q\""), "{e}");
    assert!(t.elapsed() >= std::time::Duration::from_millis(900) && t.elapsed() < std::time::Duration::from_secs(5));
    // A shorter lock_timeout of the caller's wins; the caller's setting is its own again after.
    admin.batch_execute("SET queen.lock_wait_seconds = 60; SET lock_timeout = '300ms'").unwrap();
    let t = std::time::Instant::now();
    let e = admin.execute("SELECT queen_configure('q', '{\"leaseTime\": 20}')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "55P03", "{e}");
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
    let lt: String = admin.query_one("SHOW lock_timeout", &[]).unwrap().get(0);
    assert_eq!(lt, "300ms");
    a.batch_execute("COMMIT").unwrap();
    admin.execute("SELECT queen_configure('q', '{\"leaseTime\": 20}')", &[]).unwrap();
}

/// Item 3: an ack is no oracle. To a role with no grant on queue "secret", acking one of its
/// messages — by id, or by transaction id and partition id — looks exactly like acking an id
/// that does not exist, and locks nothing (it does not wait for the open transaction that holds
/// the partition's row). A role that knows the queue (it may read it) but may not pop is told
/// so (42501). A renewal of the queue's lease is, to it, no lease (NULL).
#[test]
fn an_ack_of_another_queues_message_looks_like_an_unknown_one() {
    let db = TestDb::new("oracle");
    let mut admin = db.connect();
    let other = secret_queue(&mut admin, &db);
    let mut holder = open_tx(&db);
    let r = holder
        .query_one("SELECT message_id, lease_id, transaction_id, partition_id FROM queen_pop('secret', 'billing')", &[])
        .unwrap();
    let (mid, lease, tid, pid): (uuid::Uuid, uuid::Uuid, String, uuid::Uuid) = (r.get(0), r.get(1), r.get(2), r.get(3));

    let role = db.role("prober");
    let mut c = db.connect_as(&role);
    c.batch_execute("SET statement_timeout = '3s'").unwrap();
    let ack = |c: &mut Client, sql: &str, args: &[&(dyn postgres::types::ToSql + Sync)]| -> (bool, Option<String>) {
        let r = c.query_one(sql, args).unwrap_or_else(|e| panic!("{sql}: {e}"));
        (r.get("success"), r.get("error"))
    };
    let unknown = uuid::Uuid::from_u128(0x0193_0000_0000_7000_8000_0000_0000_0001);
    let single = "SELECT * FROM queen_ack($1::uuid, $2::uuid)";
    let batch = "SELECT * FROM queen_ack(jsonb_build_array(jsonb_build_object('transactionId', $1::text, 'partitionId', $2::uuid, 'leaseId', $3::uuid)))";
    let not_found = (false, Some("message not found".to_string()));
    assert_eq!(ack(&mut c, single, &[&unknown, &lease]), not_found);
    assert_eq!(ack(&mut c, single, &[&mid, &lease]), not_found, "the secret queue's message is told apart");
    assert_eq!(ack(&mut c, single, &[&mid, &None::<uuid::Uuid>]), not_found);
    assert_eq!(ack(&mut c, batch, &[&tid, &pid, &lease]), not_found);
    assert_eq!(ack(&mut c, batch, &[&"order-123", &pid, &lease]), not_found);
    let renewed: Option<std::time::SystemTime> = c.query_one("SELECT queen_renew($1)", &[&lease]).unwrap().get(0);
    assert_eq!(renewed, None);
    // A role that may read the queue knows of it: it is told it may not pop there.
    let mut o = db.connect_as(&other);
    o.batch_execute("SET statement_timeout = '3s'").unwrap();
    let e = o.query_one(single, &[&mid, &lease]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501", "{e}");
    assert!(e.as_db_error().unwrap().message().contains("\"secret\""));
    // The holder's lease is untouched; its ack applies.
    let r = holder.query_one(single, &[&mid, &lease]).unwrap();
    assert!(r.get::<_, bool>("success"));
    holder.batch_execute("COMMIT").unwrap();
}

/// Item 4: no lease longer than queen.max_lease_seconds (default 86 400) — not a pop's
/// lease_seconds, not a queue's leaseTime, not a renewal — and only a superuser moves the bound.
#[test]
fn no_lease_outlasts_queen_max_lease_seconds() {
    let db = TestDb::new("max_lease");
    let mut admin = db.connect();
    push(&mut admin, "q", "p", json!(1));
    let role = db.role("popper");
    admin.execute("SELECT queen_grant('q', $1::text::regrole, ARRAY['pop', 'configure'])", &[&role]).unwrap();
    let mut c = db.connect_as(&role);
    let refused = |c: &mut Client, sql: &str, name: &str| {
        let e = c.batch_execute(sql).expect_err(sql);
        assert_eq!(sqlstate(&e), "22023", "{sql}: {e}");
        let m = e.as_db_error().unwrap().message().to_string();
        assert!(m.contains(name) && m.contains("queen.max_lease_seconds"), "{sql}: {m}");
    };
    refused(&mut c, "SELECT * FROM queen_pop('q', 'g', lease_seconds => 2147483647)", "lease_seconds");
    refused(&mut c, "SELECT * FROM queen_pop('q', 'g', lease_seconds => 86401)", "lease_seconds");
    refused(&mut c, "SELECT queen_configure('q', '{\"leaseTime\": 86401}')", "leaseTime");
    let lease: uuid::Uuid =
        c.query_one("SELECT lease_id FROM queen_pop('q', 'g', lease_seconds => 86400)", &[]).unwrap().get(0);
    refused(&mut c, &format!("SELECT queen_renew('{lease}', 86401)"), "seconds");
    c.query_one("SELECT queen_renew($1, 86400)", &[&lease]).unwrap();
    let e = c.batch_execute("SET queen.max_lease_seconds = 1000000").unwrap_err();
    assert_eq!(sqlstate(&e), "42501", "{e}");
    // A superuser lowers it: a leaseTime set before is refused where it would be used.
    admin.execute("SELECT queen_configure('q', '{\"leaseTime\": 600}')", &[]).unwrap();
    push(&mut admin, "q", "p2", json!(2));
    admin.batch_execute("SET queen.max_lease_seconds = 60").unwrap();
    let e = admin.query("SELECT * FROM queen_pop('q', 'g2')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "22023", "{e}");
    assert!(e.as_db_error().unwrap().message().contains("leaseTime"), "{e}");
    let rows = admin.query("SELECT * FROM queen_pop('q', 'g2', lease_seconds => 60)", &[]).unwrap();
    assert_eq!(rows.len(), 1);
    let lease: uuid::Uuid = rows[0].get("lease_id");
    let e = admin.query("SELECT queen_renew($1)", &[&lease]).unwrap_err();
    assert_eq!(sqlstate(&e), "22023", "{e}");
    // Nothing changed by the refused renewal: the lease still ends within the minute.
    let left: f64 = admin
        .query_one(
            "SELECT extract(epoch FROM max(lease_expires_at) - clock_timestamp())::float8 FROM queen.cursors WHERE lease_id = $1",
            &[&lease],
        )
        .unwrap()
        .get(0);
    assert!(left <= 60.0, "{left}");
}

/// docs/security.md: where `public` is writable by others, queen installs into a schema of its
/// own, and works there called by its schema.
#[test]
fn queen_installs_into_a_schema_of_its_own() {
    let name = format!("t_own_schema_{}", std::process::id());
    let mut admin = connect("postgres");
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name}")).unwrap();
    admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
    let mut c = connect(&name);
    c.batch_execute("CREATE SCHEMA queen_api; CREATE EXTENSION queen SCHEMA queen_api; SET search_path = pg_catalog")
        .unwrap();
    c.query_one("SELECT queen_api.queen_push('q', '1'::jsonb)", &[]).unwrap();
    let n = c.query("SELECT * FROM queen_api.queen_pop('q', 'g', auto_ack => true)", &[]).unwrap().len();
    assert_eq!(n, 1);
    let m: i64 = c.query_one("SELECT partitions FROM queen.queue_stats WHERE queue = 'q'", &[]).unwrap().get(0);
    assert_eq!(m, 1);
    c.query("SELECT * FROM queen.maintenance_stats", &[]).unwrap();
    let in_public: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace AND proname LIKE 'queen%'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(in_public, 0, "functions landed in public");
    drop(c);
    admin.batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)")).unwrap();
}
