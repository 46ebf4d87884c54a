//! Privileges and the fixed search_path (semantics §11), over real connections as roles that are not
//! superusers: what a role without grants, with some grants, or with hostile objects on its
//! search_path can and cannot do.

use postgres::Client;
use queen_integration_tests::{plant_spies, spy_calls, sqlstate, TestDb};

/// Everything a call could have changed, as the superuser sees it.
fn state(c: &mut Client) -> String {
    c.query_one(
        "SELECT concat_ws(' | ',
            (SELECT count(*) FROM queen.messages), (SELECT count(*) FROM queen.queues),
            (SELECT count(*) FROM queen.subscriptions), (SELECT count(*) FROM queen.ready),
            (SELECT count(*) FROM queen.discovery), (SELECT count(*) FROM queen.dead_letters),
            (SELECT count(*) FROM queen.privileges),
            (SELECT md5(coalesce(string_agg(c::text, ',' ORDER BY partition_id, consumer_group), ''))
               FROM queen.cursors c))",
        &[],
    )
    .unwrap()
    .get(0)
}

/// Run `sql` as `c` and expect 42501 with a message that names what is missing and carries no
/// backtrace.
fn refused(c: &mut Client, sql: &str, names: &[&str]) {
    let e = c.batch_execute(sql).expect_err(&format!("{sql} was allowed"));
    assert_eq!(sqlstate(&e), "42501", "{sql}: {e}");
    let db = e.as_db_error().expect("a server error");
    for n in names {
        assert!(db.message().contains(n), "{sql}: the message does not name {n}: {}", db.message());
    }
    let detail = db.detail().unwrap_or("");
    assert!(!detail.contains("backtrace") && !detail.contains(".rs:"), "{sql}: a backtrace: {detail}");
}

/// A message of `queue` leased by the superuser to group g: (message id, lease id).
fn leased(admin: &mut Client, queue: &str) -> (uuid::Uuid, uuid::Uuid) {
    admin.execute("SELECT queen_push($1, '1')", &[&queue]).unwrap();
    let r = admin.query_one("SELECT message_id, lease_id FROM queen_pop($1, 'g')", &[&queue]).unwrap();
    (r.get(0), r.get(1))
}

#[test]
fn a_role_without_grants_is_refused_everywhere_sees_nothing_and_changes_nothing() {
    let db = TestDb::new("no_grants");
    let mut admin = db.connect();
    admin.execute("SELECT queen_configure('q', '{\"retryLimit\": 0}')", &[]).unwrap();
    let (mid, lease) = leased(&mut admin, "q");
    // A dead letter, so that every view has a row.
    admin.execute("SELECT queen_push('q', '2', 'p2')", &[]).unwrap();
    let r = admin.query_one("SELECT message_id, lease_id FROM queen_pop('q', 'g', partition => 'p2')", &[]).unwrap();
    admin
        .execute("SELECT queen_ack($1, $2, 'dlq')", &[&r.get::<_, uuid::Uuid>(0), &r.get::<_, uuid::Uuid>(1)])
        .unwrap();
    let before = state(&mut admin);

    let role = db.role("nobody");
    let mut c = db.connect_as(&role);
    let calls: Vec<(String, Vec<&str>)> = vec![
        ("SELECT queen_push('q', '1')".to_string(), vec!["\"q\"", "push"]),
        ("SELECT * FROM queen_push('[{\"queue\": \"q\", \"payload\": 1}]')".to_string(), vec!["\"q\"", "push"]),
        ("SELECT * FROM queen_pop('q')".to_string(), vec!["\"q\"", "pop"]),
        ("SELECT * FROM queen_pop('q', 'g', wait_ms => 10)".to_string(), vec!["\"q\"", "pop"]),
        ("SELECT queen_configure('q', '{\"leaseTime\": 1}')".to_string(), vec!["\"q\"", "configure"]),
        ("SELECT queen_seek('q', 'g')".to_string(), vec!["\"q\"", "configure"]),
        ("SELECT queen_delete_group('g', 'q')".to_string(), vec!["\"q\"", "configure"]),
        ("SELECT queen_delete_group('g')".to_string(), vec!["'*'", "configure"]),
        ("SELECT queen_delete_queue('q')".to_string(), vec!["\"q\"", "configure"]),
        ("SELECT queen_maintain()".to_string(), vec!["queen_maintain"]),
        ("SELECT * FROM queen_waiting_pops()".to_string(), vec!["queen_waiting_pops"]),
        (format!("SELECT queen_grant('q', '{role}', ARRAY['push'])"), vec!["queen_grant"]),
        (format!("SELECT queen_revoke('q', '{role}', ARRAY['push'])"), vec!["queen_revoke"]),
    ];
    for (sql, names) in &calls {
        refused(&mut c, sql, names);
    }
    // An ack or a renewal names a message or a lease, not a queue: to a role that holds no
    // privilege on the queue they look like unknown ones (issue 21, item 3; hostile.rs).
    for sql in [
        format!("SELECT error FROM queen_ack('{mid}', '{lease}')"),
        format!("SELECT error FROM queen_ack('[{{\"messageId\": \"{mid}\", \"leaseId\": \"{lease}\"}}]')"),
    ] {
        let error: Option<String> = c.query_one(&sql, &[]).unwrap().get(0);
        assert_eq!(error.as_deref(), Some("message not found"), "{sql}");
    }
    let renewed: Option<std::time::SystemTime> =
        c.query_one(&format!("SELECT queen_renew('{lease}', 600)"), &[]).unwrap().get(0);
    assert_eq!(renewed, None);
    // The tables are closed; the views show nothing of a queue the role may not read.
    for t in
        ["messages", "cursors", "queues", "subscriptions", "ready", "dead_letters", "privileges", "maintenance_totals"]
    {
        let e = c.batch_execute(&format!("SELECT * FROM queen.{t}")).expect_err(t);
        assert_eq!(sqlstate(&e), "42501", "queen.{t}: {e}");
        let e = c.batch_execute(&format!("DELETE FROM queen.{t}")).expect_err(t);
        assert_eq!(sqlstate(&e), "42501", "queen.{t}: {e}");
    }
    for v in ["queue_stats", "group_lag", "dead_letters_view", "grants"] {
        let n: i64 = c.query_one(&format!("SELECT count(*) FROM queen.{v}"), &[]).unwrap().get(0);
        assert_eq!(n, 0, "queen.{v} shows the role rows of a queue it may not read");
        let n: i64 = admin.query_one(&format!("SELECT count(*) FROM queen.{v}"), &[]).unwrap().get(0);
        assert!(n > 0 || v == "grants", "queen.{v} is empty for the superuser too");
    }
    assert_eq!(state(&mut admin), before, "a refused call changed something");
    // The lease is still the superuser's.
    let held: bool =
        admin.query_one("SELECT EXISTS (SELECT 1 FROM queen.cursors WHERE lease_id = $1)", &[&lease]).unwrap().get(0);
    assert!(held);
}

#[test]
fn push_only_cannot_pop_pop_only_cannot_configure_and_read_shows_only_its_queues() {
    let db = TestDb::new("some_grants");
    let mut admin = db.connect();
    let producer = db.role("producer");
    let consumer = db.role("consumer");
    admin.execute("SELECT queen_grant('q', $1::text::regrole, ARRAY['push'])", &[&producer]).unwrap();
    admin.execute("SELECT queen_grant('q', $1::text::regrole, ARRAY['pop', 'read'])", &[&consumer]).unwrap();
    let mut p = db.connect_as(&producer);
    let mut c = db.connect_as(&consumer);

    p.execute("SELECT queen_push('q', '1')", &[]).unwrap();
    p.query("SELECT * FROM queen_push('[{\"queue\": \"q\", \"payload\": 2}]')", &[]).unwrap();
    refused(
        &mut p,
        "SELECT * FROM queen_push('[{\"queue\": \"q\", \"payload\": 3}, {\"queue\": \"other\", \"payload\": 4}]')",
        &["\"other\"", "push"],
    );
    refused(&mut p, "SELECT * FROM queen_pop('q')", &["pop"]);

    let rows = c.query("SELECT message_id, lease_id FROM queen_pop('q', 'g', batch => 10)", &[]).unwrap();
    assert_eq!(rows.len(), 2, "the two pushes of the producer, nothing of the refused batch");
    let lease: uuid::Uuid = rows[0].get(1);
    c.query_one("SELECT queen_renew($1, 60)", &[&lease]).unwrap();
    let ids: Vec<uuid::Uuid> = rows.iter().map(|r| r.get(0)).collect();
    let acked: i64 = c
        .query_one(
            "SELECT count(*) FILTER (WHERE success) FROM queen_ack((SELECT jsonb_agg(jsonb_build_object(
                 'messageId', id, 'leaseId', $2::uuid)) FROM unnest($1::uuid[]) AS id))",
            &[&ids, &lease],
        )
        .unwrap()
        .get(0);
    assert_eq!(acked, 2);
    refused(&mut c, "SELECT queen_push('q', '1')", &["push"]);
    refused(&mut c, "SELECT queen_configure('q')", &["configure"]);
    refused(&mut c, "SELECT queen_seek('q', 'g')", &["configure"]);

    // `read` on q shows q, and nothing of another queue.
    admin.execute("SELECT queen_push('secret', '1')", &[]).unwrap();
    let queues: Vec<String> =
        c.query("SELECT queue FROM queen.queue_stats ORDER BY 1", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(queues, vec!["q".to_string()]);
    let lag: i64 = c.query_one("SELECT count(*) FROM queen.group_lag WHERE queue <> 'q'", &[]).unwrap().get(0);
    assert_eq!(lag, 0);
    // Its own grants, not the producer's.
    let grants: Vec<String> =
        c.query("SELECT privilege FROM queen.grants ORDER BY 1", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(grants, vec!["pop".to_string(), "read".to_string()]);
    // A role that holds the consumer role has its privileges.
    let member = db.role("member");
    admin.batch_execute(&format!("GRANT {consumer} TO {member}")).unwrap();
    let mut m = db.connect_as(&member);
    m.query("SELECT * FROM queen_pop('q', 'g2')", &[]).unwrap();
    refused(&mut m, "SELECT queen_push('q', '1')", &["push"]);
}

#[test]
fn star_grants_cover_future_queues_and_a_revoke_takes_effect_in_every_session() {
    let db = TestDb::new("star_grants");
    let mut admin = db.connect();
    let role = db.role("star");
    admin.execute("SELECT queen_grant('*', $1::text::regrole, ARRAY['push', 'pop'])", &[&role]).unwrap();
    let mut c = db.connect_as(&role);
    // Queues that did not exist when the grant was made.
    for q in ["a", "b", "later"] {
        c.execute("SELECT queen_push($1, '1')", &[&q]).unwrap();
        assert_eq!(c.query("SELECT * FROM queen_pop($1, auto_ack => true)", &[&q]).unwrap().len(), 1);
    }
    refused(&mut c, "SELECT queen_configure('a')", &["configure"]);
    // The grant on '*' is revoked on '*', from another session: the role's session, which has
    // the grants cached, is refused at its next call.
    let n: i64 =
        admin.query_one("SELECT queen_revoke('*', $1::text::regrole, ARRAY['push'])", &[&role]).unwrap().get(0);
    assert_eq!(n, 1);
    refused(&mut c, "SELECT queen_push('a', '2')", &["\"a\"", "push"]);
    c.query("SELECT * FROM queen_pop('a')", &[]).unwrap();
    // A revoke rolled back changes nothing; a grant is seen at once too.
    admin.batch_execute(&format!("BEGIN; SELECT queen_revoke('*', '{role}', ARRAY['pop']); ROLLBACK")).unwrap();
    c.query("SELECT * FROM queen_pop('a')", &[]).unwrap();
    admin.execute("SELECT queen_grant('a', $1::text::regrole, ARRAY['push'])", &[&role]).unwrap();
    c.execute("SELECT queen_push('a', '3')", &[]).unwrap();
    refused(&mut c, "SELECT queen_push('b', '3')", &["\"b\"", "push"]);
    // Bad privilege names are refused with 22023, NULLs with 22004.
    let e = admin.execute("SELECT queen_grant('a', $1::text::regrole, ARRAY['write'])", &[&role]).unwrap_err();
    assert_eq!(sqlstate(&e), "22023");
    let e = admin.execute("SELECT queen_grant('a', NULL, ARRAY['push'])", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "22004");
}

/// A hostile role plants look-alikes of what queen's SQL calls, in a schema of its own, and
/// puts that schema first on its search_path (ALTER ROLE, and SET in the session): queen never
/// calls them. The spies work: called directly, they record it.
#[test]
fn a_hostile_search_path_is_never_followed() {
    let db = TestDb::new("hostile");
    let mut admin = db.connect();
    let evil = db.role("evil");
    admin.batch_execute(&format!("GRANT CREATE ON DATABASE {} TO {evil}", db.name)).unwrap();
    admin
        .execute("SELECT queen_grant('*', $1::text::regrole, ARRAY['push', 'pop', 'configure', 'read'])", &[&evil])
        .unwrap();
    let mut c = db.connect_as(&evil);
    plant_spies(&mut c, "trap");
    admin.batch_execute(&format!("ALTER ROLE {evil} SET search_path = trap, pg_catalog, public")).unwrap();
    let mut c = db.connect_as(&evil);
    let path: String = c.query_one("SHOW search_path", &[]).unwrap().get(0);
    assert_eq!(path, "trap, pg_catalog, public");
    c.batch_execute("SELECT clock_timestamp()").unwrap();
    assert_eq!(spy_calls(&mut c, "trap"), vec!["clock_timestamp"], "the trap is armed");
    c.batch_execute("TRUNCATE trap.calls").unwrap();

    for _ in 0..2 {
        c.execute("SELECT queen_configure('q', '{\"retryDelay\": 0}')", &[]).unwrap();
        c.query("SELECT * FROM queen_push('[{\"queue\": \"q\", \"payload\": 1}, {\"queue\": \"q\", \"partition\": \"x\", \"payload\": 2, \"transactionId\": \"t1\"}]')", &[]).unwrap();
        c.execute("SELECT queen_push('q', '3', 'y')", &[]).unwrap();
        let rows =
            c.query("SELECT message_id, lease_id FROM queen_pop('q', 'g', batch => 10, partitions => 3)", &[]).unwrap();
        assert!(!rows.is_empty());
        let lease: uuid::Uuid = rows[0].get(1);
        c.query_one("SELECT queen_renew($1)", &[&lease]).unwrap();
        let first: uuid::Uuid = rows[0].get(0);
        c.query_one("SELECT queen_ack($1, $2, 'failed')", &[&first, &lease]).unwrap();
        c.query("SELECT * FROM queen_pop('q', 'g', batch => 10, partitions => 3, wait_ms => 50)", &[]).unwrap();
        c.query("SELECT * FROM queen_pop('q', auto_ack => true, subscription_mode => 'new')", &[]).unwrap();
        // The set-returning functions fix the path themselves, without a SET clause
        // (gucs::with_fixed_search_path): the batch ack and the lease ack too.
        let rows = c
            .query("SELECT message_id, lease_id FROM queen_pop('q', 'g2', batch => 10, partitions => 3)", &[])
            .unwrap();
        let acks = serde_json::Value::Array(
            rows.iter()
                .map(|r| serde_json::json!({"messageId": r.get::<_, uuid::Uuid>(0).to_string(), "leaseId": r.get::<_, uuid::Uuid>(1).to_string(), "status": "retry"}))
                .collect(),
        );
        c.query("SELECT * FROM queen_ack($1::jsonb)", &[&acks]).unwrap();
        let rows = c.query("SELECT lease_id FROM queen_pop('q', 'g2', batch => 10, partitions => 3)", &[]).unwrap();
        c.query("SELECT * FROM queen_ack_lease($1, 'retry')", &[&rows[0].get::<_, uuid::Uuid>(0)]).unwrap();
        // ... and give the caller's path back: after they return, and after an error that a
        // subtransaction caught.
        let path: String = c.query_one("SHOW search_path", &[]).unwrap().get(0);
        assert_eq!(path, "trap, pg_catalog, public");
        c.batch_execute(
            "DO $$ BEGIN PERFORM * FROM queen_push('[{\"queue\": \"\"}]'::jsonb); EXCEPTION WHEN OTHERS THEN NULL; END $$",
        )
        .unwrap();
        let path: String = c.query_one("SHOW search_path", &[]).unwrap().get(0);
        assert_eq!(path, "trap, pg_catalog, public");
        c.query("SELECT * FROM queen.group_lag", &[]).unwrap();
        c.query("SELECT * FROM queen.queue_stats", &[]).unwrap();
        c.query("SELECT queen_seek('q', 'g')", &[]).unwrap();
        // The same with the path set in the session, which a function's own SET overrides.
        c.batch_execute("SET search_path = trap, pg_catalog, public").unwrap();
    }
    assert_eq!(spy_calls(&mut c, "trap"), Vec::<String>::new(), "queen called the hostile role's objects");
}

#[test]
fn waiting_pops_and_maintenance_stats_are_for_superusers_the_owner_and_pg_monitor() {
    let db = TestDb::new("monitor");
    let mut admin = db.connect();
    admin.query_one("SELECT queen_maintain()", &[]).unwrap();
    let role = db.role("watcher");
    let mut c = db.connect_as(&role);
    refused(&mut c, "SELECT * FROM queen_waiting_pops()", &["queen_waiting_pops", "pg_monitor"]);
    for v in ["waiting_pops", "maintenance_stats"] {
        let e = c.batch_execute(&format!("SELECT * FROM queen.{v}")).unwrap_err();
        assert_eq!(sqlstate(&e), "42501", "queen.{v}");
    }
    admin.batch_execute(&format!("GRANT pg_monitor TO {role}")).unwrap();
    c.query("SELECT * FROM queen_waiting_pops()", &[]).unwrap();
    c.query("SELECT * FROM queen.waiting_pops", &[]).unwrap();
    let passes: i64 = c.query_one("SELECT passes FROM queen.maintenance_stats", &[]).unwrap().get(0);
    assert_eq!(passes, 1);
    refused(&mut c, "SELECT queen_maintain()", &["queen_maintain"]);
}

/// Found by the explorer (issue 20's run, seed 1796142032051, shrunk to 7 steps): a grant of a
/// privilege the role already held changed nothing, a revoke committed while the grant's
/// transaction was open, and when the grant committed — last — the role did not hold the
/// privilege. The grant locks the grant it finds, as PostgreSQL's GRANT locks the catalog row:
/// the revoke waits for it, and whichever commits last decides.
#[test]
fn a_grant_committed_after_a_revoke_holds() {
    let db = TestDb::new("grant_race");
    let app = db.role("app");
    let mut admin = db.connect();
    admin.execute("SELECT queen_grant('q', $1::text::regrole, ARRAY['pop'])", &[&app]).unwrap();
    let mut granting = db.connect();
    granting.batch_execute("BEGIN").unwrap();
    let n: i64 =
        granting.query_one("SELECT queen_grant('q', $1::text::regrole, ARRAY['pop', 'pop'])", &[&app]).unwrap().get(0);
    assert_eq!(n, 0, "held already: nothing added");
    admin.batch_execute("SET lock_timeout = '300ms'").unwrap();
    let revoked = admin.query_one("SELECT queen_revoke('q', $1::text::regrole, ARRAY['pop'])", &[&app]);
    assert_eq!(
        revoked.map(|_| ()).map_err(|e| sqlstate(&e)),
        Err("55P03".to_string()),
        "the revoke waits for the grant"
    );
    granting.batch_execute("COMMIT").unwrap();
    let mut r = db.connect_as(&app);
    assert!(r.query("SELECT * FROM queen_pop('q', 'g')", &[]).is_ok(), "the grant committed last holds");
    // And the other way round: a revoke open, a grant waits for it, then adds the privilege.
    let mut revoking = db.connect();
    revoking.batch_execute("BEGIN").unwrap();
    revoking.execute("SELECT queen_revoke('q', $1::text::regrole, ARRAY['pop'])", &[&app]).unwrap();
    let granted = admin.query_one("SELECT queen_grant('q', $1::text::regrole, ARRAY['pop'])", &[&app]);
    assert_eq!(granted.map(|_| ()).map_err(|e| sqlstate(&e)), Err("55P03".to_string()));
    revoking.batch_execute("COMMIT").unwrap();
    let e = r.query("SELECT * FROM queen_pop('q', 'g')", &[]).expect_err("revoked");
    assert_eq!(sqlstate(&e), "42501");
}
