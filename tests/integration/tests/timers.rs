//! Timers (queen_schedule, queen_cancel_timer, queen_timers; issue 24) over real connections:
//! the answers, firing (by queen_maintain here; the worker's timing is in wait_maintain.rs),
//! the caller's transaction (a rollback leaves nothing; an open cancel or reschedule holds the
//! timer back from firing, and decides its fate when it ends), a push that fails (tried again
//! later, the others fire), duplicates, a queue's delete, privileges and bounds.

use postgres::Client;
use queen_integration_tests::{sqlstate, TestDb};
use serde_json::{json, Value};

fn schedule(
    c: &mut impl postgres::GenericClient,
    queue: &str,
    key: &str,
    payload: Value,
    secs: f64,
) -> (String, uuid::Uuid, String) {
    let r = c
        .query_one(
            "SELECT status, message_id, transaction_id FROM queen_schedule($1, $2, $3,
                    clock_timestamp() + make_interval(secs => $4))",
            &[&queue, &key, &payload, &secs],
        )
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

fn pending(c: &mut Client, queue: &str) -> Vec<(String, Value, i32)> {
    c.query("SELECT timer_key, payload, attempts FROM queen_timers($1)", &[&queue])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

fn maintain(c: &mut Client) -> Value {
    c.query_one("SELECT queen_maintain()", &[]).unwrap().get(0)
}

fn popped(c: &mut Client, queue: &str) -> Vec<(uuid::Uuid, String, Value)> {
    c.query("SELECT message_id, transaction_id, payload FROM queen_pop($1, batch => 100, auto_ack => true)", &[&queue])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

#[test]
fn schedule_reschedule_cancel_and_list() {
    let db = TestDb::new("timers_ops");
    let mut c = db.connect();
    let (status, id1, txn1) = schedule(&mut c, "q", "b", json!({"v": 1}), 3600.0);
    assert_eq!(status, "scheduled");
    // Without a transaction id the message's id is its key.
    assert_eq!(txn1, id1.to_string());
    let (status, id2, _) = schedule(&mut c, "q", "b", json!({"v": 2}), 3600.0);
    assert_eq!(status, "rescheduled");
    assert_ne!(id1, id2, "a rescheduled timer is a new timer under an old name");
    for k in ["a", "c", "d"] {
        schedule(&mut c, "q", k, json!(k), 3600.0);
    }
    schedule(&mut c, "other", "a", json!(0), 3600.0);
    let keys: Vec<String> = pending(&mut c, "q").into_iter().map(|p| p.0).collect();
    assert_eq!(keys, ["a", "b", "c", "d"]);
    assert_eq!(pending(&mut c, "q")[1].1, json!({"v": 2}));
    // Keyset pages, and one key.
    let page: Vec<String> = c
        .query("SELECT timer_key FROM queen_timers('q', after_key => 'b', page => 1)", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(page, ["c"]);
    let one: Vec<String> =
        c.query("SELECT transaction_id FROM queen_timers('q', 'b')", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(one, [id2.to_string()]);
    // Cancel: true once, then false (no timer of that key is pending).
    let cancel = "SELECT queen_cancel_timer('q', 'b')";
    assert!(c.query_one(cancel, &[]).unwrap().get::<_, bool>(0));
    assert!(!c.query_one(cancel, &[]).unwrap().get::<_, bool>(0));
    assert_eq!(pending(&mut c, "q").len(), 3);
    // Nothing was due: nothing fired.
    assert_eq!(maintain(&mut c)["timers_fired"], json!(0));
    assert!(popped(&mut c, "q").is_empty());
}

#[test]
fn a_due_timer_fires_as_the_message_it_promised() {
    let db = TestDb::new("timers_fire");
    let mut c = db.connect();
    let (_, id, txn) = schedule(&mut c, "q", "now", json!({"order": 7}), -1.0);
    let r = c
        .query_one(
            "SELECT * FROM queen_schedule('q', 'later', '\"x\"', clock_timestamp() + interval '1 hour',
                                          partition => 'p2', transaction_id => 'tx-later')",
            &[],
        )
        .unwrap();
    assert_eq!(r.get::<_, String>("transaction_id"), "tx-later");
    assert_eq!(r.get::<_, String>("partition"), "p2");
    let report = maintain(&mut c);
    assert_eq!(report["timers_fired"], json!(1), "{report}");
    assert_eq!(popped(&mut c, "q"), vec![(id, txn, json!({"order": 7}))]);
    assert_eq!(pending(&mut c, "q").len(), 1, "the later one waits");
    // A timer's transaction id already in its partition: a duplicate, nothing stored twice.
    c.query("SELECT queen_push('q', '1', transaction_id => 'dup')", &[]).unwrap();
    c.query("SELECT queen_schedule('q', 'dup', '2', clock_timestamp(), transaction_id => 'dup')", &[]).unwrap();
    assert_eq!(maintain(&mut c)["timers_fired"], json!(1));
    assert_eq!(popped(&mut c, "q").into_iter().map(|m| m.2).collect::<Vec<_>>(), vec![json!(1)]);
}

#[test]
fn timers_commit_and_roll_back_with_the_callers_transaction() {
    let db = TestDb::new("timers_tx");
    let mut c = db.connect();
    // A rollback leaves no timer.
    let mut t = c.transaction().unwrap();
    schedule(&mut t, "q", "gone", json!(1), -1.0);
    t.rollback().unwrap();
    assert!(pending(&mut c, "q").is_empty());
    // A timer scheduled in an open transaction is not there for a firing.
    let mut open = db.connect();
    let mut t = open.transaction().unwrap();
    schedule(&mut t, "q", "open", json!(1), -1.0);
    assert_eq!(maintain(&mut c)["timers_fired"], json!(0));
    t.commit().unwrap();
    assert_eq!(maintain(&mut c)["timers_fired"], json!(1));
    assert_eq!(popped(&mut c, "q").len(), 1);

    // An open cancel holds a due timer back: the firing leaves it; when the cancel commits it
    // is gone, nothing fired.
    schedule(&mut c, "q", "held", json!("held"), -1.0);
    let mut t = open.transaction().unwrap();
    assert!(t.query_one("SELECT queen_cancel_timer('q', 'held')", &[]).unwrap().get::<_, bool>(0));
    assert_eq!(maintain(&mut c)["timers_fired"], json!(0));
    t.commit().unwrap();
    assert_eq!(maintain(&mut c)["timers_fired"], json!(0));
    assert!(popped(&mut c, "q").is_empty());
    // A cancel that rolls back leaves it to fire.
    schedule(&mut c, "q", "kept", json!("kept"), -1.0);
    let mut t = open.transaction().unwrap();
    assert!(t.query_one("SELECT queen_cancel_timer('q', 'kept')", &[]).unwrap().get::<_, bool>(0));
    assert_eq!(maintain(&mut c)["timers_fired"], json!(0));
    t.rollback().unwrap();
    assert_eq!(maintain(&mut c)["timers_fired"], json!(1));
    assert_eq!(popped(&mut c, "q").into_iter().map(|m| m.2).collect::<Vec<_>>(), vec![json!("kept")]);
    // An open reschedule to later holds it back too, and wins when it commits.
    schedule(&mut c, "q", "moved", json!("early"), -1.0);
    let mut t = open.transaction().unwrap();
    schedule(&mut t, "q", "moved", json!("late"), 3600.0);
    assert_eq!(maintain(&mut c)["timers_fired"], json!(0));
    t.commit().unwrap();
    assert_eq!(maintain(&mut c)["timers_fired"], json!(0));
    assert_eq!(pending(&mut c, "q")[0].1, json!("late"));
}

#[test]
fn a_timer_whose_push_fails_is_tried_again_and_the_others_fire() {
    let db = TestDb::new("timers_full");
    let mut c = db.connect();
    c.query("SELECT queen_configure('full', '{\"maxSize\": 1}')", &[]).unwrap();
    c.query("SELECT queen_push('full', '0')", &[]).unwrap();
    let mut t = c.transaction().unwrap();
    schedule(&mut t, "full", "f", json!(1), -1.0);
    schedule(&mut t, "other", "o", json!(2), -1.0);
    t.commit().unwrap();
    let report = maintain(&mut c);
    assert_eq!((report["timers_fired"].clone(), report["timers_retried"].clone()), (json!(1), json!(1)), "{report}");
    assert_eq!(popped(&mut c, "other").len(), 1);
    let r = c
        .query_one("SELECT attempts, last_error, deliver_at > clock_timestamp() FROM queen_timers('full')", &[])
        .unwrap();
    assert_eq!(r.get::<_, i32>(0), 1);
    assert!(r.get::<_, String>(1).contains("is full (maxSize 1)"));
    assert!(r.get::<_, bool>(2), "tried again after a backoff, not at once");
    // Room again (a larger maxSize: acks keep messages), and due again: it fires.
    c.query("SELECT queen_configure('full', '{\"maxSize\": 10}')", &[]).unwrap();
    assert_eq!(popped(&mut c, "full").len(), 1);
    c.query("UPDATE queen.timers SET deliver_at = clock_timestamp()", &[]).unwrap();
    assert_eq!(maintain(&mut c)["timers_fired"], json!(1));
    assert_eq!(popped(&mut c, "full").into_iter().map(|m| m.2).collect::<Vec<_>>(), vec![json!(1)]);
}

#[test]
fn a_deleted_queue_takes_its_timers() {
    let db = TestDb::new("timers_delete");
    let mut c = db.connect();
    c.query("SELECT queen_push('q', '1')", &[]).unwrap();
    schedule(&mut c, "q", "k", json!(1), -1.0);
    schedule(&mut c, "keep", "k", json!(1), 3600.0);
    c.query("SELECT queen_delete_queue('q')", &[]).unwrap();
    assert!(pending(&mut c, "q").is_empty());
    assert_eq!(maintain(&mut c)["timers_fired"], json!(0));
    assert_eq!(pending(&mut c, "keep").len(), 1);
}

#[test]
fn timers_are_granted_with_their_queue() {
    let db = TestDb::new("timers_grants");
    let mut admin = db.connect();
    let (producer, reader, stranger) = (db.role("producer"), db.role("reader"), db.role("stranger"));
    admin.query("SELECT queen_grant('orders', $1::text::regrole, ARRAY['push', 'read'])", &[&producer]).unwrap();
    admin.query("SELECT queen_grant('orders', $1::text::regrole, ARRAY['read'])", &[&reader]).unwrap();
    let mut p = db.connect_as(&producer);
    schedule(&mut p, "orders", "k", json!(1), 3600.0);
    assert_eq!(pending(&mut p, "orders").len(), 1);
    let mut r = db.connect_as(&reader);
    assert_eq!(pending(&mut r, "orders").len(), 1);
    let e = r.query("SELECT queen_schedule('orders', 'x', '1', now())", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    assert!(e.as_db_error().unwrap().message().contains("\"push\""), "{e}");
    assert_eq!(sqlstate(&r.query("SELECT queen_cancel_timer('orders', 'k')", &[]).unwrap_err()), "42501");
    let mut s = db.connect_as(&stranger);
    assert_eq!(sqlstate(&s.query("SELECT * FROM queen_timers('orders')", &[]).unwrap_err()), "42501");
    // A producer of one queue schedules nothing into another.
    assert_eq!(sqlstate(&p.query("SELECT queen_schedule('billing', 'x', '1', now())", &[]).unwrap_err()), "42501");
    assert_eq!(pending(&mut admin, "orders").len(), 1);
    assert!(pending(&mut admin, "billing").is_empty());
}

#[test]
fn bad_arguments_are_refused_and_name_themselves() {
    let db = TestDb::new("timers_bad");
    let mut c = db.connect();
    let long_key = "k".repeat(1025);
    let big = json!("x".repeat(1 << 20));
    let table: Vec<(&str, Vec<Box<dyn postgres::types::ToSql + Sync>>, &str, &str)> = vec![
        ("SELECT queen_schedule(NULL, 'k', '1', now())", vec![], "22004", "queue"),
        ("SELECT queen_schedule('q', NULL, '1', now())", vec![], "22004", "timer_key"),
        ("SELECT queen_schedule('q', 'k', NULL, now())", vec![], "22004", "payload"),
        ("SELECT queen_schedule('q', 'k', '1', NULL)", vec![], "22004", "deliver_at"),
        ("SELECT queen_schedule('q', '', '1', now())", vec![], "22023", "timer_key"),
        ("SELECT queen_schedule('q', $1, '1', now())", vec![Box::new(long_key.clone())], "22023", "limit is 1024"),
        ("SELECT queen_schedule('q', 'k', $1, now())", vec![Box::new(big)], "22023", "limit for a timer"),
        ("SELECT queen_schedule('q', 'k', '1', now() + interval '200 years')", vec![], "22023", "deliver_at"),
        ("SELECT queen_schedule('q', 'k', '1', now(), partition => '')", vec![], "22023", "partition"),
        ("SELECT queen_schedule('q', 'k', '1', now(), transaction_id => '')", vec![], "22023", "transaction_id"),
        ("SELECT * FROM queen_timers('q', page => 0)", vec![], "22023", "page"),
        ("SELECT * FROM queen_timers('q', page => 1001)", vec![], "22023", "page"),
    ];
    for (sql, args, code, names) in table {
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = args.iter().map(|a| a.as_ref()).collect();
        let e = c.query(sql, &refs).unwrap_err();
        assert_eq!(sqlstate(&e), code, "{sql}: {e}");
        assert!(e.as_db_error().unwrap().message().contains(names), "{sql}: {e}");
    }
    assert!(pending(&mut c, "q").is_empty(), "a refused call leaves nothing");
}

/// A timer pushes what the role that scheduled it may push when it fires: one whose scheduler
/// lost `push` on the queue (revoked, or the role dropped) is removed unfired, counted in
/// queen.maintenance_stats and named in the server's log; one whose scheduler still may, and a
/// rescheduled one (now the rescheduling role's), fire. (0.5.0 fired them all.)
#[test]
fn a_timer_fires_only_while_its_scheduler_may_push() {
    let db = TestDb::new("timer_scheduler");
    let mut admin = db.connect();
    let (kept, revoked) = (db.role("kept"), db.role("revoked"));
    for r in [&kept, &revoked] {
        admin.query("SELECT queen_grant('q', $1::text::regrole, ARRAY['push'])", &[r]).unwrap();
    }
    let mut k = db.connect_as(&kept);
    let mut v = db.connect_as(&revoked);
    schedule(&mut k, "q", "a", json!("kept"), -1.0);
    schedule(&mut v, "q", "b", json!("revoked"), -1.0);
    schedule(&mut v, "q", "c", json!("taken over"), -1.0);
    // The kept role reschedules c: it is the kept role's now.
    schedule(&mut k, "q", "c", json!("taken over"), -1.0);
    admin.query("SELECT queen_revoke('q', $1::text::regrole, ARRAY['push'])", &[&revoked]).unwrap();
    let report = maintain(&mut admin);
    assert_eq!((report["timers_fired"].clone(), report["timers_cancelled"].clone()), (json!(2), json!(1)), "{report}");
    let mut got: Vec<Value> = popped(&mut admin, "q").into_iter().map(|(_, _, p)| p).collect();
    got.sort_by_key(|p| p.to_string());
    assert_eq!(got, vec![json!("kept"), json!("taken over")]);
    assert!(pending(&mut admin, "q").is_empty(), "the refused timer is gone");
    let counted: i64 = admin.query_one("SELECT timers_cancelled FROM queen.maintenance_stats", &[]).unwrap().get(0);
    assert_eq!(counted, 1);
    // A dropped role's timer likewise.
    let gone = db.role("gone");
    admin.query("SELECT queen_grant('q', $1::text::regrole, ARRAY['push'])", &[&gone]).unwrap();
    let mut g = db.connect_as(&gone);
    schedule(&mut g, "q", "d", json!("dropped"), -1.0);
    drop(g);
    admin.query("SELECT queen_revoke('q', $1::text::regrole, ARRAY['push'])", &[&gone]).unwrap();
    queen_integration_tests::connect("postgres").batch_execute(&format!("DROP ROLE {gone}")).unwrap();
    let report = maintain(&mut admin);
    assert_eq!((report["timers_fired"].clone(), report["timers_cancelled"].clone()), (json!(0), json!(1)), "{report}");
    assert!(popped(&mut admin, "q").is_empty());
}
