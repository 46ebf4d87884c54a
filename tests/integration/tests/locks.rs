//! Locks and semaphores (queen_lock, issue 24) over real connections: one holder, a call sent
//! again by its owner is the same permit, renew and release by token, an expired permit taken
//! over with a higher token while the old holder's guarded work commits nothing, a semaphore
//! that never grants more than its limit under concurrency, privileges, and queen_message.

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
