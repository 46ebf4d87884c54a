//! Key/value state (queen_kv, issue 24) over real connections: the operations and their
//! answers, expiry decided by the clock and not by the row, conditions under concurrency (one
//! winner of putIfAbsent, increments that never exceed their maximum), the caller's
//! transaction (a rollback leaves nothing, a required condition rolls the push back too),
//! privileges per namespace, bounds, and maintenance.

use postgres::Client;
use queen_integration_tests::{sqlstate, TestDb};
use serde_json::{json, Value};
use std::time::Duration;

fn kv(c: &mut Client, ops: Value) -> Vec<Value> {
    c.query("SELECT r FROM queen_kv($1) AS r", &[&ops]).unwrap().iter().map(|r| r.get(0)).collect()
}

fn kv_err(c: &mut Client, ops: Value) -> (String, String) {
    let e = c.query("SELECT r FROM queen_kv($1) AS r", &[&ops]).unwrap_err();
    (sqlstate(&e), e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default())
}

fn one(c: &mut Client, op: Value) -> Value {
    kv(c, json!([op])).remove(0)
}

/// Wait until the server's clock has passed the expiry of `keys` (a condition, not a fixed
/// sleep; at most 10 s).
fn await_expired(c: &mut Client, keys: &[&str]) {
    let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    for _ in 0..200 {
        let gone: bool = c
            .query_one("SELECT bool_and(expires_at <= clock_timestamp()) FROM queen.kv WHERE key = ANY($1)", &[&keys])
            .unwrap()
            .get(0);
        if gone {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("keys {keys:?} did not expire within 10 s");
}

#[test]
fn operations_and_their_answers() {
    let db = TestDb::new("kv_ops");
    let mut c = db.connect();
    let put = one(&mut c, json!({"op": "put", "ns": "app", "key": "round:trip", "value": {"n": 1}, "ttlSeconds": 60}));
    assert_eq!(
        (put["applied"].clone(), put["index"].clone(), put["op"].clone()),
        (json!(true), json!(0), json!("put"))
    );
    let v1 = put["version"].as_i64().unwrap();
    assert!(v1 > 0 && put["expiresAt"].is_string(), "{put}");
    let got = one(&mut c, json!({"op": "get", "ns": "app", "key": "round:trip"}));
    assert_eq!(
        (got["found"].clone(), got["value"].clone(), got["version"].clone()),
        (json!(true), json!({"n": 1}), json!(v1))
    );
    assert!(got["updatedAt"].is_string());
    // null is a value; a missing key is found: false.
    one(&mut c, json!({"op": "put", "ns": "app", "key": "null", "value": null, "forever": true}));
    let n = one(&mut c, json!({"op": "get", "ns": "app", "key": "null"}));
    assert_eq!(
        (n["found"].clone(), n["value"].clone(), n["expiresAt"].clone()),
        (json!(true), Value::Null, Value::Null)
    );
    assert_eq!(one(&mut c, json!({"op": "get", "ns": "app", "key": "never"}))["found"], json!(false));

    // expect: a stale version is refused with the current one; an absent key is not created.
    let v2 =
        one(&mut c, json!({"op": "put", "ns": "app", "key": "round:trip", "value": 2, "ttlSeconds": 60, "expect": v1}));
    assert_eq!(v2["applied"], json!(true));
    let stale =
        one(&mut c, json!({"op": "put", "ns": "app", "key": "round:trip", "value": 3, "ttlSeconds": 60, "expect": v1}));
    assert_eq!((stale["applied"].clone(), stale["reason"].clone()), (json!(false), json!("version")));
    assert_eq!((stale["version"].clone(), stale["value"].clone()), (v2["version"].clone(), json!(2)));
    let absent =
        one(&mut c, json!({"op": "put", "ns": "app", "key": "fence", "value": 1, "ttlSeconds": 60, "expect": 42}));
    assert_eq!((absent["reason"].clone(), absent["version"].clone()), (json!("absent"), json!(0)));
    assert_eq!(one(&mut c, json!({"op": "get", "ns": "app", "key": "fence"}))["found"], json!(false));
    let exists =
        one(&mut c, json!({"op": "putIfAbsent", "ns": "app", "key": "round:trip", "value": 9, "ttlSeconds": 60}));
    assert_eq!((exists["reason"].clone(), exists["value"].clone()), (json!("exists"), json!(2)));

    // check writes nothing; delete is idempotent and says so.
    let v = v2["version"].as_i64().unwrap();
    assert_eq!(
        one(&mut c, json!({"op": "check", "ns": "app", "key": "round:trip", "expect": v}))["applied"],
        json!(true)
    );
    assert_eq!(
        one(&mut c, json!({"op": "check", "ns": "app", "key": "round:trip", "expect": 0}))["reason"],
        json!("exists")
    );
    assert_eq!(
        one(&mut c, json!({"op": "delete", "ns": "app", "key": "round:trip", "expect": v + 1}))["reason"],
        json!("version")
    );
    assert_eq!(one(&mut c, json!({"op": "delete", "ns": "app", "key": "round:trip"}))["applied"], json!(true));
    let again = one(&mut c, json!({"op": "delete", "ns": "app", "key": "round:trip"}));
    assert_eq!((again["applied"].clone(), again["reason"].clone()), (json!(false), json!("absent")));
    // A key written again after a delete never repeats a version.
    let reborn =
        one(&mut c, json!({"op": "putIfAbsent", "ns": "app", "key": "round:trip", "value": 1, "ttlSeconds": 60}));
    assert!(reborn["version"].as_i64().unwrap() > v, "{reborn}");

    // incr: refused past max (spending nothing), the first of a window too, and not of a string.
    for want in 1..=3 {
        let r = one(&mut c, json!({"op": "incr", "ns": "app", "key": "limit", "max": 3, "ttlSeconds": 60}));
        assert_eq!((r["applied"].clone(), r["value"].clone()), (json!(true), json!(want)));
    }
    let refused = one(&mut c, json!({"op": "incr", "ns": "app", "key": "limit", "max": 3, "ttlSeconds": 60}));
    assert_eq!(
        (refused["applied"].clone(), refused["reason"].clone(), refused["value"].clone()),
        (json!(false), json!("limit"), json!(3))
    );
    let first = one(&mut c, json!({"op": "incr", "ns": "app", "key": "shot", "delta": 10, "max": 5, "ttlSeconds": 60}));
    assert_eq!(first["reason"], json!("limit"));
    assert_eq!(one(&mut c, json!({"op": "get", "ns": "app", "key": "shot"}))["found"], json!(false));
    one(&mut c, json!({"op": "put", "ns": "app", "key": "word", "value": "x", "ttlSeconds": 60}));
    assert_eq!(
        one(&mut c, json!({"op": "incr", "ns": "app", "key": "word", "ttlSeconds": 60}))["reason"],
        json!("type")
    );

    // getMany answers rows in the order asked and names the missing; a batch is index-aligned.
    let many = one(&mut c, json!({"op": "getMany", "ns": "app", "keys": ["limit", "nope", "null"]}));
    let keys: Vec<&str> = many["rows"].as_array().unwrap().iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!((keys, many["missing"].clone()), (vec!["limit", "null"], json!(["nope"])));
    let batch = kv(
        &mut c,
        json!([{"op": "put", "ns": "b", "key": "1", "value": "one", "ttlSeconds": 60},
               {"op": "get", "ns": "b", "key": "absent"},
               {"op": "incr", "ns": "b", "key": "n", "delta": 2, "ttlSeconds": 60}]),
    );
    let idx: Vec<Value> = batch.iter().map(|r| r["index"].clone()).collect();
    assert_eq!(idx, vec![json!(0), json!(1), json!(2)]);
    assert_eq!((batch[1]["found"].clone(), batch[2]["value"].clone()), (json!(false), json!(2)));
}

#[test]
fn prefixes_page_in_key_order_and_take_metacharacters_as_data() {
    let db = TestDb::new("kv_prefix");
    let mut c = db.connect();
    let ops: Vec<Value> = (0..5)
        .map(|i| json!({"op": "put", "ns": "p", "key": format!("walk:{i}"), "value": i, "ttlSeconds": 60}))
        .collect();
    kv(&mut c, Value::Array(ops));
    for k in ["walk;", "walk", "walk%_:x", "wal"] {
        one(&mut c, json!({"op": "put", "ns": "p", "key": k, "value": 0, "ttlSeconds": 60}));
    }
    one(&mut c, json!({"op": "put", "ns": "other", "key": "walk:9", "value": 0, "ttlSeconds": 60}));
    let mut after: Option<String> = None;
    let mut seen = Vec::new();
    loop {
        let page = one(&mut c, json!({"op": "getPrefix", "ns": "p", "prefix": "walk:", "limit": 2, "after": after}));
        let rows = page["rows"].as_array().unwrap();
        seen.extend(rows.iter().map(|r| r["key"].as_str().unwrap().to_string()));
        if page["truncated"] != json!(true) {
            assert_eq!(page["nextAfter"], Value::Null);
            break;
        }
        assert_eq!(page["nextAfter"], rows.last().unwrap()["key"]);
        after = page["nextAfter"].as_str().map(str::to_string);
    }
    assert_eq!(seen, (0..5).map(|i| format!("walk:{i}")).collect::<Vec<_>>());
    let weird = one(&mut c, json!({"op": "getPrefix", "ns": "p", "prefix": "walk%_", "keysOnly": true}));
    assert_eq!(
        weird["rows"],
        json!([{"key": "walk%_:x", "version": weird["rows"][0]["version"], "expiresAt": weird["rows"][0]["expiresAt"], "updatedAt": weird["rows"][0]["updatedAt"]}])
    );
    // The page is a range of the primary key, both bounds in the index scan's condition, not a
    // scan of the rest of the namespace: the kept (generic) plan, planned as queen plans.
    queen_integration_tests::prepare_query(
        &mut c,
        "kv",
        "kv_prefix",
        &["text", "text", "timestamptz", "text", "bigint", "boolean"],
    );
    c.batch_execute("SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off").unwrap();
    let plan: String = c
        .query("EXPLAIN (COSTS OFF) EXECUTE kv_prefix ('p', 'walk:', now(), 'walk;', 3, false)", &[])
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n");
    let cond = plan.lines().find(|l| l.contains("Index Cond")).unwrap_or_else(|| panic!("{plan}"));
    assert!(plan.contains("kv_pkey") && cond.contains("key >= $2") && cond.contains("key < $4"), "{plan}");
}

#[test]
fn an_expired_key_is_gone_at_once_and_maintenance_deletes_it() {
    let db = TestDb::new("kv_expiry");
    let mut c = db.connect();
    one(&mut c, json!({"op": "put", "ns": "e", "key": "short", "value": {"count": 0}, "ttlSeconds": 1}));
    let window = one(&mut c, json!({"op": "incr", "ns": "e", "key": "window", "ttlSeconds": 1}));
    // incr keeps a live row's expiry, whatever ttl it is given.
    let later = one(&mut c, json!({"op": "incr", "ns": "e", "key": "window", "ttlSeconds": 3600}));
    assert_eq!(later["expiresAt"], window["expiresAt"]);
    assert_eq!(later["value"], json!(2));
    // Await the expiry by the server's clock (a condition, not a fixed sleep).
    await_expired(&mut c, &["short", "window"]);
    assert_eq!(one(&mut c, json!({"op": "get", "ns": "e", "key": "short"}))["found"], json!(false));
    assert_eq!(one(&mut c, json!({"op": "getMany", "ns": "e", "keys": ["short"]}))["missing"], json!(["short"]));
    // The row is still there, and counts as nothing: putIfAbsent wins over it, and an incr of
    // an expired object starts from zero with its own ttl.
    assert_eq!(
        one(&mut c, json!({"op": "putIfAbsent", "ns": "e", "key": "short", "value": 1, "ttlSeconds": 60}))["applied"],
        json!(true)
    );
    let restarted = one(&mut c, json!({"op": "incr", "ns": "e", "key": "window", "ttlSeconds": 60}));
    assert_eq!(restarted["value"], json!(1));
    assert_ne!(restarted["expiresAt"], window["expiresAt"]);
    one(&mut c, json!({"op": "put", "ns": "e", "key": "dead", "value": 1, "ttlSeconds": 1}));
    await_expired(&mut c, &["dead"]);
    let report: Value = c.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["kv_expired"], json!(1), "{report}");
    let left: i64 = c.query_one("SELECT count(*) FROM queen.kv WHERE namespace = 'e'", &[]).unwrap().get(0);
    assert_eq!(left, 2);
}

#[test]
fn one_winner_of_put_if_absent_and_increments_never_exceed_their_maximum() {
    let db = TestDb::new("kv_race");
    let threads: Vec<_> = (0..6)
        .map(|i| {
            let name = db.name.clone();
            std::thread::spawn(move || {
                let mut c = queen_integration_tests::connect(&name);
                let claim = c
                    .query_one(
                        "SELECT r FROM queen_kv($1) AS r",
                        &[&json!([{"op": "putIfAbsent", "ns": "r", "key": "claim", "value": {"by": i}, "ttlSeconds": 60}])],
                    )
                    .unwrap()
                    .get::<_, Value>(0);
                let admitted = (0..10)
                    .filter(|_| {
                        let r: Value = c
                            .query_one(
                                "SELECT r FROM queen_kv($1) AS r",
                                &[&json!([{"op": "incr", "ns": "r", "key": "quota", "max": 25, "ttlSeconds": 60}])],
                            )
                            .unwrap()
                            .get(0);
                        r["applied"] == json!(true)
                    })
                    .count();
                (claim, admitted)
            })
        })
        .collect();
    let results: Vec<(Value, usize)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let winners: Vec<&Value> = results.iter().map(|r| &r.0).filter(|r| r["applied"] == json!(true)).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    for (r, _) in &results {
        if r["applied"] == json!(false) {
            assert_eq!((r["reason"].clone(), r["value"].clone()), (json!("exists"), winners[0]["value"].clone()));
        }
    }
    assert_eq!(results.iter().map(|r| r.1).sum::<usize>(), 25);
    let mut c = db.connect();
    assert_eq!(one(&mut c, json!({"op": "get", "ns": "r", "key": "quota"}))["value"], json!(25));
}

#[test]
fn keys_commit_and_roll_back_with_the_callers_transaction() {
    let db = TestDb::new("kv_tx");
    let mut c = db.connect();
    // A rollback leaves nothing, not even a version used.
    let mut t = c.transaction().unwrap();
    t.query("SELECT queen_push('q', '{\"n\": 1}')", &[]).unwrap();
    t.query("SELECT * FROM queen_kv('[{\"op\": \"put\", \"ns\": \"t\", \"key\": \"k\", \"value\": 1, \"ttlSeconds\": 60}]')", &[])
        .unwrap();
    t.rollback().unwrap();
    assert_eq!(one(&mut c, json!({"op": "get", "ns": "t", "key": "k"}))["found"], json!(false));
    // A required condition that does not hold raises 23514, and the push before it goes too.
    one(&mut c, json!({"op": "putIfAbsent", "ns": "t", "key": "gate", "value": 1, "ttlSeconds": 60}));
    let mut t = c.transaction().unwrap();
    t.query("SELECT queen_push('q', '{\"n\": 2}')", &[]).unwrap();
    let e = t
        .query(
            "SELECT * FROM queen_kv('[{\"op\": \"put\", \"ns\": \"t\", \"key\": \"x\", \"value\": 1, \"ttlSeconds\": 60},
                                      {\"op\": \"putIfAbsent\", \"ns\": \"t\", \"key\": \"gate\", \"value\": 2, \"ttlSeconds\": 60, \"required\": true},
                                      {\"op\": \"put\", \"ns\": \"t\", \"key\": \"y\", \"value\": 1, \"ttlSeconds\": 60}]')",
            &[],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&e), "23514");
    assert!(e.as_db_error().unwrap().message().contains("operation 1 (putIfAbsent of key \"gate\")"), "{e}");
    drop(t);
    let n: i64 = c.query_one("SELECT coalesce(sum(messages), 0)::bigint FROM queen.queue_stats", &[]).unwrap().get(0);
    assert_eq!(n, 0);
    assert_eq!(one(&mut c, json!({"op": "getMany", "ns": "t", "keys": ["x", "y"]}))["missing"], json!(["x", "y"]));
    // Without raising (queen-gateway's form) the results stop at the failed required operation.
    let rows: Vec<Value> = c
        .query(
            "SELECT r FROM queen_kv('[{\"op\": \"check\", \"ns\": \"t\", \"key\": \"gate\", \"expect\": 0, \"required\": true},
                                     {\"op\": \"put\", \"ns\": \"t\", \"key\": \"z\", \"value\": 1, \"ttlSeconds\": 60}]', false) AS r",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0]["applied"].clone(), rows[0]["reason"].clone(), rows[0]["required"].clone()),
        (json!(false), json!("exists"), json!(true))
    );
}

#[test]
fn namespaces_are_granted_like_queues() {
    let db = TestDb::new("kv_grants");
    let mut admin = db.connect();
    let (reader, writer, stranger) = (db.role("reader"), db.role("writer"), db.role("stranger"));
    admin.query("SELECT queen_grant('orders', $1::text::regrole, ARRAY['kv_read'])", &[&reader]).unwrap();
    admin.query("SELECT queen_grant('orders', $1::text::regrole, ARRAY['kv_read', 'kv_write'])", &[&writer]).unwrap();
    let put = json!([{"op": "put", "ns": "orders", "key": "k", "value": 1, "ttlSeconds": 60}]);
    let get = json!([{"op": "get", "ns": "orders", "key": "k"}]);
    let mut w = db.connect_as(&writer);
    assert_eq!(kv(&mut w, put.clone())[0]["applied"], json!(true));
    let mut r = db.connect_as(&reader);
    assert_eq!(kv(&mut r, get.clone())[0]["value"], json!(1));
    let (code, msg) = kv_err(&mut r, put.clone());
    assert_eq!(code, "42501");
    assert!(msg.contains("namespace \"orders\"") && msg.contains("kv_write"), "{msg}");
    let mut s = db.connect_as(&stranger);
    assert_eq!(kv_err(&mut s, get.clone()).0, "42501");
    // A batch is checked whole before anything is done: the put of a granted namespace before
    // a refused one did not happen.
    let mixed = json!([{"op": "put", "ns": "orders", "key": "k2", "value": 1, "ttlSeconds": 60},
                       {"op": "put", "ns": "billing", "key": "k", "value": 1, "ttlSeconds": 60}]);
    assert_eq!(kv_err(&mut w, mixed).0, "42501");
    assert_eq!(kv(&mut admin, json!([{"op": "get", "ns": "orders", "key": "k2"}]))[0]["found"], json!(false));
    // Grants of a queue are not grants of a namespace of the same name.
    admin
        .query("SELECT queen_grant('billing', $1::text::regrole, ARRAY['push', 'pop', 'read'])", &[&stranger])
        .unwrap();
    assert_eq!(kv_err(&mut s, json!([{"op": "get", "ns": "billing", "key": "k"}])).0, "42501");
    // The table itself is closed.
    let e = s.query("SELECT * FROM queen.kv", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
}

#[test]
fn bad_input_is_22023_and_changes_nothing() {
    let db = TestDb::new("kv_input");
    let mut c = db.connect();
    let cases = [
        (json!([{"op": "put", "ns": "NOT A NAMESPACE", "key": "k", "value": 1, "ttlSeconds": 60}]), "operations[0].ns"),
        (json!([{"op": "put", "ns": "a", "key": "k", "value": 1}]), "ttlSeconds"),
        (json!([{"op": "get", "ns": "a", "key": "k"}, {"op": "explode", "ns": "a"}]), "operations[1].op"),
        (json!({"op": "get"}), "must be a JSON array"),
        (Value::Array((0..1001).map(|_| json!({"op": "get", "ns": "a", "key": "k"})).collect()), "limit is 1000"),
        (
            Value::Array(
                (0..20)
                    .map(|_| json!({"op": "put", "ns": "a", "key": "k", "value": "x".repeat(1 << 20), "forever": true}))
                    .collect(),
            ),
            "bytes as JSON",
        ),
    ];
    for (ops, why) in cases {
        let (code, msg) = kv_err(&mut c, ops);
        assert_eq!(code, "22023", "{msg}");
        assert!(msg.contains(why), "{msg} should name {why}");
    }
    // Deeper than serde's limit: refused with a message, not a crash.
    let deep = format!(
        "[{{\"op\": \"put\", \"ns\": \"a\", \"key\": \"k\", \"ttlSeconds\": 1, \"value\": {}{}}}]",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let e = c.query("SELECT * FROM queen_kv($1::text::jsonb)", &[&deep]).unwrap_err();
    assert_eq!(sqlstate(&e), "22023", "{e}");
    let e = c.query("SELECT * FROM queen_kv(NULL)", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "22004");
    let n: i64 = c.query_one("SELECT count(*) FROM queen.kv", &[]).unwrap().get(0);
    assert_eq!(n, 0);
}
