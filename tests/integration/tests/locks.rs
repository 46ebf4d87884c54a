//! Locks and semaphores (queen_lock) over real connections: one holder, a call sent again by
//! its owner is the same permit, renew and release by token, an expired permit taken over with
//! a higher token while the old holder's guarded work commits nothing, a semaphore that never
//! grants more than its limit under concurrency, privileges; lock namespaces that keep
//! applications apart, permits that belong to the role that took them, rows queen_kv cannot
//! write, an acquire that never waits, a renew sent again; and queen_message.

use postgres::Client;
use queen_integration_tests::{sqlstate, TestDb};
use serde_json::{json, Value};
use std::time::Duration;

fn lock(c: &mut Client, op: Value) -> Value {
    c.query_one("SELECT r FROM queen_lock($1) AS r", &[&json!([op])]).unwrap().get(0)
}

#[test]
fn one_holder_and_its_token() {
    let db = TestDb::new("locks_one");
    let mut c = db.connect();
    let a = lock(&mut c, json!({"op": "acquire", "name": "job", "ttlSeconds": 30, "owner": "a"}));
    assert_eq!((a["acquired"].clone(), a["slot"].clone(), a["owner"].clone()), (json!(true), json!(0), json!("a")));
    let token = a["token"].as_i64().unwrap();
    assert_eq!(
        a["guard"],
        json!({"op": "check", "ns": "queen-locks", "key": "job#0", "expect": token, "required": true})
    );
    let b = lock(&mut c, json!({"op": "acquire", "name": "job", "ttlSeconds": 30, "owner": "b"}));
    assert_eq!((b["acquired"].clone(), b["reason"].clone()), (json!(false), json!("held")));
    assert_eq!(b["holders"][0]["owner"], json!("a"));
    // Sent again by its owner: the same permit.
    let again = lock(&mut c, json!({"op": "acquire", "name": "job", "ttlSeconds": 30, "owner": "a"}));
    assert_eq!((again["already"].clone(), again["token"].clone()), (json!(true), json!(token)));
    // The permit is a key/value row.
    let row: Value = c
        .query_one("SELECT r FROM queen_kv('[{\"op\": \"get\", \"ns\": \"queen-locks\", \"key\": \"job#0\"}]') r", &[])
        .unwrap()
        .get(0);
    assert_eq!((row["version"].clone(), row["value"]["owner"].clone()), (json!(token), json!("a")));
    // Renew: a new token; the old one sent again by its owner renews again; a stranger's is lost.
    let r1 = lock(&mut c, json!({"op": "renew", "name": "job", "token": token, "ttlSeconds": 30, "owner": "a"}));
    let t1 = r1["token"].as_i64().unwrap();
    assert!(r1["renewed"] == json!(true) && t1 > token, "{r1}");
    let r2 = lock(&mut c, json!({"op": "renew", "name": "job", "token": token, "ttlSeconds": 30, "owner": "a"}));
    assert!(r2["token"].as_i64().unwrap() > t1, "{r2}");
    let lost = lock(&mut c, json!({"op": "renew", "name": "job", "token": token, "ttlSeconds": 30, "owner": "b"}));
    assert_eq!((lost["renewed"].clone(), lost["reason"].clone()), (json!(false), json!("lost")));
    // Release by the current token only; then the next holder gets a higher token.
    let stale = lock(&mut c, json!({"op": "release", "name": "job", "token": t1}));
    assert_eq!(stale["released"], json!(false));
    assert_eq!(lock(&mut c, json!({"op": "release", "name": "job", "token": r2["token"]}))["released"], json!(true));
    let next = lock(&mut c, json!({"op": "acquire", "name": "job", "ttlSeconds": 30}));
    assert!(next["token"].as_i64().unwrap() > r2["token"].as_i64().unwrap(), "{next}");
    assert_eq!(lock(&mut c, json!({"op": "get", "name": "job"}))["holders"].as_array().unwrap().len(), 1);
}

#[test]
fn an_expired_permit_is_taken_over_and_the_old_holders_guarded_work_commits_nothing() {
    let db = TestDb::new("locks_expiry");
    let mut c = db.connect();
    let old = lock(&mut c, json!({"op": "acquire", "name": "j", "ttlSeconds": 1, "owner": "old"}));
    // Await the expiry by the server's clock.
    for _ in 0..100 {
        if !lock(&mut c, json!({"op": "get", "name": "j"}))["held"].as_bool().unwrap() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let new = lock(&mut c, json!({"op": "acquire", "name": "j", "ttlSeconds": 30, "owner": "new"}));
    assert!(new["acquired"] == json!(true) && new["token"].as_i64() > old["token"].as_i64(), "{new}");
    // The old holder's step, guarded: refused whole (23514), its push gone with it.
    let mut t = c.transaction().unwrap();
    t.query("SELECT queen_push('work', '\"old\"')", &[]).unwrap();
    let e = t.query("SELECT * FROM queen_kv($1)", &[&json!([old["guard"]])]).unwrap_err();
    assert_eq!(sqlstate(&e), "23514");
    drop(t);
    let mut t = c.transaction().unwrap();
    t.query("SELECT queen_push('work', '\"new\"')", &[]).unwrap();
    t.query("SELECT * FROM queen_kv($1)", &[&json!([new["guard"]])]).unwrap();
    t.commit().unwrap();
    let got: Vec<Value> = c
        .query("SELECT payload FROM queen_pop('work', batch => 10, auto_ack => true)", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(got, vec![json!("new")]);
    // The old holder's renew and release are lost.
    let renew = lock(&mut c, json!({"op": "renew", "name": "j", "token": old["token"], "ttlSeconds": 30}));
    assert_eq!(renew["reason"], json!("lost"));
    assert_eq!(lock(&mut c, json!({"op": "release", "name": "j", "token": old["token"]}))["released"], json!(false));
}

#[test]
fn a_semaphore_never_grants_more_than_its_limit() {
    let db = TestDb::new("locks_sem");
    let threads: Vec<_> = (0..12)
        .map(|i| {
            let name = db.name.clone();
            std::thread::spawn(move || {
                let mut c = queen_integration_tests::connect(&name);
                lock(
                    &mut c,
                    json!({"op": "acquire", "name": "crowd", "ttlSeconds": 30, "limit": 3, "owner": format!("w{i}")}),
                )
            })
        })
        .collect();
    let got: Vec<Value> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let mut slots: Vec<i64> =
        got.iter().filter(|r| r["acquired"] == json!(true)).map(|r| r["slot"].as_i64().unwrap()).collect();
    slots.sort();
    assert!(!slots.is_empty() && slots.len() <= 3, "{got:?}");
    slots.dedup();
    assert_eq!(slots.len(), got.iter().filter(|r| r["acquired"] == json!(true)).count(), "one holder per slot");
    let mut c = db.connect();
    // One at a time the semaphore fills, then refuses; a slot freed is the one taken next.
    let mut n = 0;
    while lock(&mut c, json!({"op": "get", "name": "crowd"}))["holders"].as_array().unwrap().len() < 3 {
        lock(&mut c, json!({"op": "acquire", "name": "crowd", "ttlSeconds": 30, "limit": 3, "owner": format!("x{n}")}));
        n += 1;
    }
    let holders = lock(&mut c, json!({"op": "get", "name": "crowd"}))["holders"].clone();
    let slots: Vec<i64> = holders.as_array().unwrap().iter().map(|h| h["slot"].as_i64().unwrap()).collect();
    assert_eq!(slots, [0, 1, 2]);
    let extra = lock(&mut c, json!({"op": "acquire", "name": "crowd", "ttlSeconds": 30, "limit": 3, "owner": "extra"}));
    assert_eq!(extra["acquired"], json!(false));
    let freed = &holders[1];
    lock(&mut c, json!({"op": "release", "name": "crowd", "token": freed["token"], "slot": 1}));
    let extra = lock(&mut c, json!({"op": "acquire", "name": "crowd", "ttlSeconds": 30, "limit": 3, "owner": "extra"}));
    assert_eq!((extra["acquired"].clone(), extra["slot"].clone()), (json!(true), json!(1)));
}

#[test]
fn locks_are_granted_on_their_namespace_and_bad_calls_refused() {
    let db = TestDb::new("locks_grants");
    let mut admin = db.connect();
    let (holder, watcher) = (db.role("holder"), db.role("watcher"));
    admin
        .query("SELECT queen_grant('queen-locks', $1::text::regrole, ARRAY['kv_read', 'kv_write'])", &[&holder])
        .unwrap();
    admin.query("SELECT queen_grant('queen-locks', $1::text::regrole, ARRAY['kv_read'])", &[&watcher]).unwrap();
    let mut h = db.connect_as(&holder);
    assert_eq!(lock(&mut h, json!({"op": "acquire", "name": "n", "ttlSeconds": 30}))["acquired"], json!(true));
    let mut w = db.connect_as(&watcher);
    assert_eq!(lock(&mut w, json!({"op": "get", "name": "n"}))["held"], json!(true));
    let e =
        w.query("SELECT queen_lock('[{\"op\": \"acquire\", \"name\": \"n\", \"ttlSeconds\": 5}]')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    assert!(e.as_db_error().unwrap().message().contains("queen-locks"), "{e}");
    for (ops, want) in [
        (json!([{"op": "acquire", "name": "a#1", "ttlSeconds": 5}]), "without '#'"),
        (json!([{"op": "acquire", "name": "a"}]), "lifetime"),
        (json!({"op": "get"}), "must be a JSON array"),
    ] {
        let e = admin.query("SELECT queen_lock($1)", &[&ops]).unwrap_err();
        assert_eq!(sqlstate(&e), "22023", "{ops}");
        assert!(e.as_db_error().unwrap().message().contains(want), "{ops}: {e}");
    }
}

#[test]
fn a_message_and_what_each_group_made_of_it() {
    let db = TestDb::new("message_detail");
    let mut c = db.connect();
    let r = c
        .query_one("SELECT partition_id, message_id FROM queen_push('q', '{\"n\": 1}', transaction_id => 'tx1')", &[])
        .unwrap();
    let (pid, mid): (uuid::Uuid, uuid::Uuid) = (r.get(0), r.get(1));
    c.query("SELECT * FROM queen_pop('q', 'done', auto_ack => true)", &[]).unwrap();
    let lease: uuid::Uuid =
        c.query_one("SELECT lease_id FROM queen_pop('q', 'busy', lease_seconds => 60)", &[]).unwrap().get(0);
    let d: Value = c.query_one("SELECT queen_message($1, 'tx1')", &[&pid]).unwrap().get(0);
    assert_eq!(
        (d["messageId"].clone(), d["payload"].clone(), d["queue"].clone()),
        (json!(mid.to_string()), json!({"n": 1}), json!("q"))
    );
    let groups = d["consumerGroups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{d}");
    assert_eq!((groups[0]["name"].clone(), groups[0]["consumed"].clone()), (json!("busy"), json!(false)));
    assert_eq!(groups[0]["leaseId"], json!(lease.to_string()));
    assert!(groups[0]["leaseExpiresAt"].is_string());
    assert_eq!(
        (groups[1]["name"].clone(), groups[1]["consumed"].clone(), groups[1]["leaseExpiresAt"].clone()),
        (json!("done"), json!(true), Value::Null)
    );
    // A message pushed without a transaction id is known by its message id; none is NULL.
    let r = c.query_one("SELECT partition_id, message_id FROM queen_push('q', '2')", &[]).unwrap();
    let (pid2, mid2): (uuid::Uuid, uuid::Uuid) = (r.get(0), r.get(1));
    let d2: Value = c.query_one("SELECT queen_message($1, $2)", &[&pid2, &mid2.to_string()]).unwrap().get(0);
    assert_eq!(d2["messageId"], json!(mid2.to_string()));
    assert!(c.query_one("SELECT queen_message($1, 'nope')", &[&pid]).unwrap().get::<_, Option<Value>>(0).is_none());
    // A transaction id past its bound is refused, not looked up.
    let e = c.query("SELECT queen_message($1, repeat('x', 256))", &[&pid]).unwrap_err();
    assert_eq!(sqlstate(&e), "22023");
    // A role without read on the queue learns nothing, not even that it exists.
    let stranger = db.role("stranger");
    let mut s = db.connect_as(&stranger);
    assert!(s.query_one("SELECT queen_message($1, 'tx1')", &[&pid]).unwrap().get::<_, Option<Value>>(0).is_none());
}

fn try_lock(c: &mut Client, op: Value) -> Result<Value, postgres::Error> {
    c.query_one("SELECT r FROM queen_lock($1) AS r", &[&json!([op])]).map(|r| r.get(0))
}

fn kv(c: &mut Client, op: Value) -> Result<Value, postgres::Error> {
    c.query_one("SELECT r FROM queen_kv($1) AS r", &[&json!([op])]).map(|r| r.get(0))
}

fn grant(admin: &mut Client, ns: &str, role: &str, privileges: &[&str]) {
    admin.query("SELECT queen_grant($1, $2::text::regrole, $3)", &[&ns, &role, &privileges]).unwrap();
}

/// Every statement of `c` fails after a few seconds rather than hanging the test when a call
/// waits that must not.
fn impatient(c: &mut Client) {
    c.batch_execute("SET statement_timeout = '8s'").unwrap();
}

#[test]
fn lock_namespaces_keep_applications_apart() {
    let db = TestDb::new("locks_apart");
    let mut admin = db.connect();
    let (a, b) = (db.role("a"), db.role("b"));
    grant(&mut admin, "app-a", &a, &["kv_read", "kv_write"]);
    grant(&mut admin, "app-b", &b, &["kv_read", "kv_write"]);
    let (mut ca, mut cb) = (db.connect_as(&a), db.connect_as(&b));
    let held = lock(&mut ca, json!({"op": "acquire", "ns": "app-a", "name": "job", "ttlSeconds": 60, "owner": "w"}));
    assert_eq!(held["acquired"], json!(true), "{held}");
    let token = held["token"].clone();
    assert_eq!(held["guard"]["ns"], json!("queen-locks/app-a"));
    // B cannot look at, take, renew or release A's lock, nor read its permit's row.
    for op in [
        json!({"op": "get", "ns": "app-a", "name": "job"}),
        json!({"op": "acquire", "ns": "app-a", "name": "job", "ttlSeconds": 60, "owner": "w"}),
        json!({"op": "renew", "ns": "app-a", "name": "job", "token": token, "ttlSeconds": 60, "owner": "w"}),
        json!({"op": "release", "ns": "app-a", "name": "job", "token": token}),
    ] {
        let e = try_lock(&mut cb, op.clone()).unwrap_err();
        assert_eq!(sqlstate(&e), "42501", "{op}");
        assert!(e.as_db_error().unwrap().message().contains("app-a"), "{e}");
    }
    for op in [
        json!({"op": "get", "ns": "queen-locks/app-a", "key": "job#0"}),
        json!({"op": "getPrefix", "ns": "queen-locks/app-a", "prefix": "j"}),
        held["guard"].clone(),
    ] {
        assert_eq!(sqlstate(&kv(&mut cb, op.clone()).unwrap_err()), "42501", "{op}");
    }
    // Nor the default namespace, where it has no grant: a lock of one name in each namespace is
    // a lock of its own.
    let e = try_lock(&mut cb, json!({"op": "get", "name": "job"})).unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    let own = lock(&mut cb, json!({"op": "acquire", "ns": "app-b", "name": "job", "ttlSeconds": 60, "owner": "w"}));
    assert_eq!((own["acquired"].clone(), own["slot"].clone()), (json!(true), json!(0)), "{own}");
    // A still holds its permit, unchanged, and reads it through queen_kv under its grant.
    let row = kv(&mut ca, json!({"op": "get", "ns": "queen-locks/app-a", "key": "job#0"})).unwrap();
    assert_eq!((row["version"].clone(), row["value"]["owner"].clone()), (token.clone(), json!("w")));
    assert_eq!(row["value"]["role"], json!(a));
    assert_eq!(lock(&mut ca, json!({"op": "get", "ns": "app-a", "name": "job"}))["holders"][0]["token"], token);
}

#[test]
fn an_owner_string_is_not_a_credential() {
    let db = TestDb::new("locks_owner");
    let mut admin = db.connect();
    let (a, b, member) = (db.role("a"), db.role("b"), db.role("member"));
    for r in [&a, &b] {
        grant(&mut admin, "shared", r, &["kv_read", "kv_write"]);
    }
    admin.batch_execute(&format!("GRANT {a} TO {member}")).unwrap();
    let (mut ca, mut cb) = (db.connect_as(&a), db.connect_as(&b));
    let op = json!({"op": "acquire", "ns": "shared", "name": "job", "ttlSeconds": 60, "owner": "worker-1"});
    let first = lock(&mut ca, op.clone());
    let token = first["token"].as_i64().unwrap();
    // Sent again by A: its permit. Sent by B with the same owner: held, not A's permit.
    assert_eq!(lock(&mut ca, op.clone())["already"], json!(true));
    let other = lock(&mut cb, op.clone());
    assert_eq!((other["acquired"].clone(), other["reason"].clone()), (json!(false), json!("held")), "{other}");
    assert!(other.get("guard").is_none() && other.get("token").is_none(), "{other}");
    // B can neither renew (by token, by an owner named, by slot) nor release it.
    for op in [
        json!({"op": "renew", "ns": "shared", "name": "job", "token": token, "ttlSeconds": 60}),
        json!({"op": "renew", "ns": "shared", "name": "job", "token": token, "ttlSeconds": 60, "owner": "worker-1"}),
        json!({"op": "renew", "ns": "shared", "name": "job", "token": token, "ttlSeconds": 60, "slot": 0}),
    ] {
        let r = lock(&mut cb, op.clone());
        assert_eq!((r["renewed"].clone(), r["reason"].clone()), (json!(false), json!("lost")), "{op}: {r}");
    }
    let r = lock(&mut cb, json!({"op": "release", "ns": "shared", "name": "job", "token": token, "slot": 0}));
    assert_eq!(r["released"], json!(false), "{r}");
    let now = lock(&mut ca, json!({"op": "get", "ns": "shared", "name": "job"}));
    assert_eq!(now["holders"][0]["token"], json!(token), "untouched: {now}");
    // A role with A's privileges acts for A, as grants are held.
    let mut cm = db.connect_as(&member);
    let renewed =
        lock(&mut cm, json!({"op": "renew", "ns": "shared", "name": "job", "token": token, "ttlSeconds": 60}));
    assert_eq!(renewed["renewed"], json!(true), "{renewed}");
    // So does an admin; A's own release of its current token applies.
    let t = renewed["token"].as_i64().unwrap();
    let again = lock(&mut admin, json!({"op": "renew", "ns": "shared", "name": "job", "token": t, "ttlSeconds": 60}));
    assert_eq!(again["renewed"], json!(true), "{again}");
    let r = lock(&mut ca, json!({"op": "release", "ns": "shared", "name": "job", "token": again["token"]}));
    assert_eq!(r["released"], json!(true), "{r}");
    // Free now: B takes it under the owner A used, and holds it as its own.
    let taken = lock(&mut cb, op.clone());
    assert!(taken["acquired"] == json!(true) && taken.get("already").is_none(), "{taken}");
    assert_eq!(lock(&mut ca, op)["reason"], json!("held"));
}

#[test]
fn queen_kv_never_writes_a_permit() {
    let db = TestDb::new("locks_kv");
    let mut admin = db.connect();
    let (all, reader) = (db.role("all"), db.role("reader"));
    grant(&mut admin, "*", &all, &["kv_read", "kv_write"]);
    grant(&mut admin, "jobs", &reader, &["kv_read"]);
    let held = lock(&mut admin, json!({"op": "acquire", "ns": "jobs", "name": "j", "ttlSeconds": 60}));
    let token = held["token"].as_i64().unwrap();
    let mut c = db.connect_as(&all);
    for ns in ["queen-locks", "queen-locks/jobs", "queen-locks/other"] {
        for op in [
            // A permit forged for ever, one taken over, one deleted, one counted.
            json!({"op": "put", "ns": ns, "key": "j#0", "value": {"owner": "me"}, "forever": true}),
            json!({"op": "put", "ns": ns, "key": "j#0", "value": {"owner": "me"}, "forever": true, "expect": token}),
            json!({"op": "putIfAbsent", "ns": ns, "key": "j#1", "value": {"owner": "me"}, "forever": true}),
            json!({"op": "delete", "ns": ns, "key": "j#0"}),
            json!({"op": "incr", "ns": ns, "key": "j#2", "forever": true}),
        ] {
            for client in [&mut c, &mut admin] {
                let e = kv(client, op.clone()).unwrap_err();
                assert_eq!(sqlstate(&e), "22023", "{op}");
                let m = e.as_db_error().unwrap().message().to_string();
                assert!(m.contains(ns) && m.contains("queen_lock"), "{m}");
            }
        }
    }
    // The permit is as the acquire wrote it, and read under the lock namespace's grant.
    let mut r = db.connect_as(&reader);
    let row = kv(&mut r, json!({"op": "get", "ns": "queen-locks/jobs", "key": "j#0"})).unwrap();
    assert_eq!(row["version"], json!(token), "{row}");
    let page = kv(&mut r, json!({"op": "getPrefix", "ns": "queen-locks/jobs", "prefix": "j#"})).unwrap();
    assert_eq!(page["rows"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(kv(&mut r, held["guard"].clone()).unwrap()["applied"], json!(true));
    let e = kv(&mut r, json!({"op": "get", "ns": "queen-locks", "key": "j#0"})).unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    assert!(e.as_db_error().unwrap().message().contains("\"queen-locks\""), "{e}");
}

#[test]
fn an_acquire_never_waits_for_another_transaction() {
    let db = TestDb::new("locks_nowait");
    let mut admin = db.connect();
    let mut other = db.connect();
    impatient(&mut other);
    let acquire = |name: &str| json!({"op": "acquire", "name": name, "ttlSeconds": 1});
    let contended = |r: &Value| r["acquired"] == json!(false) && r["reason"] == json!("contended");
    // 1. An acquire not committed yet.
    let mut t = db.connect();
    t.batch_execute("BEGIN").unwrap();
    assert_eq!(lock(&mut t, acquire("new"))["acquired"], json!(true));
    let started = std::time::Instant::now();
    let r = lock(&mut other, acquire("new"));
    assert!(contended(&r), "{r}");
    assert!(started.elapsed() < Duration::from_secs(3), "waited {:?}", started.elapsed());
    t.batch_execute("COMMIT").unwrap();
    // 2. The holder's guarded work, open while its permit expires.
    let held = lock(&mut admin, acquire("guarded"));
    let mut work = db.connect();
    work.batch_execute("BEGIN").unwrap();
    kv(&mut work, held["guard"].clone()).unwrap();
    std::thread::sleep(Duration::from_millis(1300));
    let r = lock(&mut other, acquire("guarded"));
    assert!(contended(&r), "{r}");
    work.batch_execute("COMMIT").unwrap();
    assert_eq!(lock(&mut other, acquire("guarded"))["acquired"], json!(true));
    // 3. A renew of a live permit whose holder's guarded work is open waits only as long as
    // queen waits.
    let live = lock(&mut admin, json!({"op": "acquire", "name": "live", "ttlSeconds": 60}));
    work.batch_execute("BEGIN").unwrap();
    kv(&mut work, live["guard"].clone()).unwrap();
    other.batch_execute("SET queen.lock_wait_seconds = 1").unwrap();
    let renew = json!({"op": "renew", "name": "live", "token": live["token"], "ttlSeconds": 30});
    let started = std::time::Instant::now();
    let e = try_lock(&mut other, renew.clone()).unwrap_err();
    assert_eq!(sqlstate(&e), "55P03", "{e}");
    assert!(e.as_db_error().unwrap().message().contains("\"live\""), "{e}");
    assert!(started.elapsed() < Duration::from_secs(3), "waited {:?}", started.elapsed());
    work.batch_execute("COMMIT").unwrap();
    assert_eq!(lock(&mut other, renew)["renewed"], json!(true));
    // 4. An expired permit's row held by another transaction (as maintenance holds the rows it
    // deletes).
    lock(&mut admin, acquire("expired"));
    std::thread::sleep(Duration::from_millis(1300));
    let mut holder = db.connect();
    holder.batch_execute("BEGIN").unwrap();
    let n = holder
        .execute("SELECT FROM queen.kv WHERE namespace = 'queen-locks' AND key = 'expired#0' FOR UPDATE", &[])
        .unwrap();
    assert_eq!(n, 1);
    let r = lock(&mut other, acquire("expired"));
    assert!(contended(&r), "{r}");
    holder.batch_execute("ROLLBACK").unwrap();
    assert_eq!(lock(&mut other, acquire("expired"))["acquired"], json!(true));
}

#[test]
fn guards_of_one_holder_do_not_wait_for_each_other() {
    let db = TestDb::new("locks_guards");
    let mut admin = db.connect();
    let held = lock(&mut admin, json!({"op": "acquire", "ns": "jobs", "name": "j", "ttlSeconds": 60}));
    let mut one = db.connect();
    one.batch_execute("BEGIN").unwrap();
    kv(&mut one, held["guard"].clone()).unwrap();
    let mut two = db.connect();
    impatient(&mut two);
    two.batch_execute("BEGIN").unwrap();
    assert_eq!(kv(&mut two, held["guard"].clone()).unwrap()["applied"], json!(true));
    two.batch_execute("COMMIT").unwrap();
    one.batch_execute("COMMIT").unwrap();
}

#[test]
fn a_renew_sent_again_after_its_answer_was_lost_renews_the_same_permit() {
    let db = TestDb::new("locks_resend");
    let mut admin = db.connect();
    let (a, b) = (db.role("a"), db.role("b"));
    for r in [&a, &b] {
        grant(&mut admin, "jobs", r, &["kv_read", "kv_write"]);
    }
    let (mut ca, mut cb) = (db.connect_as(&a), db.connect_as(&b));
    let t0 = lock(&mut ca, json!({"op": "acquire", "ns": "jobs", "name": "j", "ttlSeconds": 60}))["token"].clone();
    let renew = |token: &Value| json!({"op": "renew", "ns": "jobs", "name": "j", "token": token, "ttlSeconds": 60});
    // The first renew's answer is lost: the holder still has t0, and sends it again.
    let lost = lock(&mut ca, renew(&t0));
    let t1 = lost["token"].as_i64().unwrap();
    let resent = lock(&mut ca, renew(&t0));
    assert_eq!((resent["renewed"].clone(), resent["slot"].clone()), (json!(true), json!(0)), "{resent}");
    let t2 = resent["token"].as_i64().unwrap();
    assert!(t2 > t1 && t1 > t0.as_i64().unwrap(), "tokens rise: {t0} {t1} {t2}");
    // Had the lost answer arrived after all, its token renews too; another role's never.
    assert_eq!(lock(&mut cb, renew(&t0))["renewed"], json!(false));
    assert_eq!(lock(&mut cb, renew(&json!(t1)))["renewed"], json!(false));
    let from_t1 = lock(&mut ca, renew(&json!(t1)));
    assert_eq!(from_t1["renewed"], json!(true), "{from_t1}");
    // One permit all along, at the last token.
    let now = lock(&mut ca, json!({"op": "get", "ns": "jobs", "name": "j"}));
    assert_eq!(now["holders"].as_array().unwrap().len(), 1);
    assert_eq!(now["holders"][0]["token"], from_t1["token"]);
    // A release takes the current token only.
    let stale = lock(&mut ca, json!({"op": "release", "ns": "jobs", "name": "j", "token": t2}));
    assert_eq!(stale["released"], json!(false));
    let done = lock(&mut ca, json!({"op": "release", "ns": "jobs", "name": "j", "token": from_t1["token"]}));
    assert_eq!(done["released"], json!(true));
}

#[test]
fn a_guard_commits_the_holders_work_only_while_it_holds_the_permit() {
    let db = TestDb::new("locks_guard_role");
    let mut admin = db.connect();
    let (a, b) = (db.role("a"), db.role("b"));
    for r in [&a, &b] {
        grant(&mut admin, "jobs", r, &["kv_read", "kv_write"]);
        admin.query("SELECT queen_grant('work', $1::text::regrole, ARRAY['push'])", &[r]).unwrap();
    }
    let (mut ca, mut cb) = (db.connect_as(&a), db.connect_as(&b));
    let held = lock(&mut ca, json!({"op": "acquire", "ns": "jobs", "name": "j", "ttlSeconds": 60}));
    let step = |c: &mut Client, payload: &str, guard: &Value| -> Result<(), postgres::Error> {
        let mut t = c.transaction()?;
        t.query("SELECT queen_push('work', $1::text::jsonb)", &[&payload])?;
        t.query("SELECT * FROM queen_kv($1)", &[&json!([guard])])?;
        t.commit()
    };
    step(&mut ca, "1", &held["guard"]).unwrap();
    // B's acquire is held; its work guarded by A's guard commits nothing once A released.
    assert_eq!(
        lock(&mut cb, json!({"op": "acquire", "ns": "jobs", "name": "j", "ttlSeconds": 60}))["reason"],
        json!("held")
    );
    let r = lock(&mut ca, json!({"op": "release", "ns": "jobs", "name": "j", "token": held["token"]}));
    assert_eq!(r["released"], json!(true));
    assert_eq!(sqlstate(&step(&mut ca, "2", &held["guard"]).unwrap_err()), "23514");
    let next = lock(&mut cb, json!({"op": "acquire", "ns": "jobs", "name": "j", "ttlSeconds": 60}));
    assert!(next["token"].as_i64() > held["token"].as_i64(), "{next}");
    assert_eq!(sqlstate(&step(&mut ca, "3", &held["guard"]).unwrap_err()), "23514");
    step(&mut cb, "4", &next["guard"]).unwrap();
    let got: Vec<Value> = admin
        .query("SELECT payload FROM queen_pop('work', batch => 10, auto_ack => true)", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(got, vec![json!(1), json!(4)]);
}
