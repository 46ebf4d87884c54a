//! The extension as a whole, over real connections: it installs, configures queues from
//! several sessions at once, and can be dropped and created again.

use queen_integration_tests::{sqlstate, TestDb};
use serde_json::{json, Value};
use std::thread;

#[test]
fn drop_and_create_again() {
    let db = TestDb::new("dropcreate");
    let mut c = db.connect();
    let v: Value = c.query_one("SELECT queen_configure('orders', '{\"leaseTime\": 30}')", &[]).unwrap().get(0);
    assert_eq!(v["options"]["leaseTime"], json!(30));

    c.batch_execute("DROP EXTENSION queen").unwrap();
    // Everything went with it: the schema, the tables, the functions.
    let schemas: i64 = c.query_one("SELECT count(*) FROM pg_namespace WHERE nspname = 'queen'", &[]).unwrap().get(0);
    assert_eq!(schemas, 0);
    let err = c.query_one("SELECT queen_configure('orders')", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "42883", "queen_configure should be gone: {err}");

    c.batch_execute("CREATE EXTENSION queen").unwrap();
    // Same session: plans this backend kept from before the drop must not break anything.
    let v: Value = c.query_one("SELECT queen_configure('orders')", &[]).unwrap().get(0);
    assert_eq!(v["options"]["leaseTime"], json!(300), "a recreated extension starts empty");

    // And a new session works too.
    let mut c2 = db.connect();
    let v: Value = c2.query_one("SELECT queen_configure('orders', '{\"retryLimit\": 1}')", &[]).unwrap().get(0);
    assert_eq!(v["options"]["retryLimit"], json!(1));
    assert_eq!(v["options"]["leaseTime"], json!(300));
}

/// A backend keeps the oids of queen's schema and relations (src/oids.rs) until Postgres tells
/// it they changed: after the extension is dropped and created again — by another session, and
/// by the same one inside a transaction — every backend that had used it pushes, pops and acks
/// on the new tables.
#[test]
fn kept_oids_follow_the_extension_made_again() {
    let db = TestDb::new("oidsagain");
    let (mut a, mut b) = (db.connect(), db.connect());
    // Push n, pop them as group g, ack the lease: how many came back acked. (The group's
    // first pop subscribes it from then on: one before the pushes, which finds nothing.)
    let cycle = |c: &mut postgres::Client, n: i32| -> usize {
        assert!(c.query("SELECT * FROM queen_pop('q', 'g', auto_ack => true)", &[]).unwrap().is_empty());
        for i in 0..n {
            c.execute("SELECT queen_push('q', $1::text::jsonb, 'p')", &[&i.to_string()]).unwrap();
        }
        let rows = c.query("SELECT lease_id FROM queen_pop('q', 'g', batch => 10)", &[]).unwrap();
        let Some(lease) = rows.first().map(|r| r.get::<_, uuid::Uuid>(0)) else { return 0 };
        c.query("SELECT * FROM queen_ack_lease($1) WHERE success", &[&lease]).unwrap().len()
    };
    assert_eq!((cycle(&mut a, 3), cycle(&mut b, 2)), (3, 2));
    a.batch_execute("DROP EXTENSION queen; CREATE EXTENSION queen").unwrap();
    assert_eq!(cycle(&mut b, 2), 2, "the other backend, on the new tables");
    assert_eq!(cycle(&mut a, 3), 3, "the backend that made them");
    b.batch_execute("BEGIN; DROP EXTENSION queen; CREATE EXTENSION queen").unwrap();
    // (A pop does not return its own transaction's pushes: §3.1.)
    assert_eq!(cycle(&mut b, 4), 0, "in the transaction that made them again");
    let here: i64 = b.query_one("SELECT count(*) FROM queen.messages", &[]).unwrap().get(0);
    assert_eq!(here, 4, "pushed into the tables made in this transaction");
    b.batch_execute("ROLLBACK").unwrap();
    assert_eq!(cycle(&mut b, 1), 1, "after it rolled back: the tables of before");
    assert_eq!(cycle(&mut a, 2), 2);
    let left: i64 = a.query_one("SELECT count(*) FROM queen.messages", &[]).unwrap().get(0);
    assert_eq!(left, 8, "what was pushed since the extension was made again");
}

#[test]
fn functions_live_in_the_extension_schema_and_tables_in_queen() {
    let db = TestDb::new("schemas");
    let mut c = db.connect();
    let schema: String = c
        .query_one(
            "SELECT n.nspname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.proname = 'queen_configure'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(schema, "public");
    let tables: Vec<String> = c
        .query("SELECT tablename::text FROM pg_tables WHERE schemaname = 'queen' ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for t in ["cursors", "dead_letters", "messages", "partitions", "queues"] {
        assert!(tables.iter().any(|x| x == t), "table queen.{t} is missing from {tables:?}");
    }
}

/// Eight sessions each set a different option of the same new queue at once. Every patch
/// must be applied (none lost to a concurrent read-modify-write) and the queue must end with
/// one row.
#[test]
fn concurrent_configures_all_apply() {
    let db = TestDb::new("concurrentcfg");
    let patches = [
        json!({"leaseTime": 11}),
        json!({"retryLimit": 12}),
        json!({"retryDelay": 13}),
        json!({"deadLetterQueue": false}),
        json!({"delayedProcessing": 15}),
        json!({"windowBuffer": 16}),
        json!({"maxSize": 17}),
        json!({"retentionSeconds": 18}),
    ];
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(patches.len()));
    let handles: Vec<_> = patches
        .iter()
        .cloned()
        .map(|p| {
            let name = db.name.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut c = queen_integration_tests::connect(&name);
                barrier.wait();
                c.execute("SELECT queen_configure('shared', $1)", &[&p]).unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut c = db.connect();
    let v: Value = c.query_one("SELECT queen_configure('shared')", &[]).unwrap().get(0);
    let o = &v["options"];
    assert_eq!(
        (o["leaseTime"].clone(), o["retryLimit"].clone(), o["retryDelay"].clone(), o["deadLetterQueue"].clone()),
        (json!(11), json!(12), json!(13), json!(false))
    );
    assert_eq!(
        (
            o["delayedProcessing"].clone(),
            o["windowBuffer"].clone(),
            o["maxSize"].clone(),
            o["retentionSeconds"].clone()
        ),
        (json!(15), json!(16), json!(17), json!(18))
    );
    let rows: i64 = c.query_one("SELECT count(*) FROM queen.queues WHERE name = 'shared'", &[]).unwrap().get(0);
    assert_eq!(rows, 1);
}

/// A failed configure inside a transaction leaves the transaction's other work to the
/// caller, and a configure rolled back did not happen.
#[test]
fn configure_is_transactional() {
    let db = TestDb::new("cfgtx");
    let mut c = db.connect();
    c.batch_execute("CREATE TABLE app_log (note text)").unwrap();
    let mut tx = c.transaction().unwrap();
    tx.execute("INSERT INTO app_log VALUES ('configured')", &[]).unwrap();
    tx.execute("SELECT queen_configure('rolled', '{\"leaseTime\": 5}')", &[]).unwrap();
    tx.rollback().unwrap();
    let n: i64 = c.query_one("SELECT count(*) FROM queen.queues WHERE name = 'rolled'", &[]).unwrap().get(0);
    assert_eq!(n, 0, "a rolled-back configure must leave no queue");
    let n: i64 = c.query_one("SELECT count(*) FROM app_log", &[]).unwrap().get(0);
    assert_eq!(n, 0);

    let err = c.execute("SELECT queen_configure('q', '{\"nope\": 1}')", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "22023");
    assert!(err.as_db_error().unwrap().message().contains("\"nope\""), "{err}");
}

/// semantics §3: the result types as docs/semantics.md writes them, read from pg_proc (scalar forms return
/// one composite row, batch forms and pop a set of it).
#[test]
fn functions_return_the_spec_result_types() {
    let db = TestDb::new("result_types");
    let mut c = db.connect();
    let rows = c
        .query(
            "SELECT p.proname::text, pg_get_function_identity_arguments(p.oid), p.proretset, p.prorettype::regtype::text
               FROM pg_proc p WHERE p.proname IN ('queen_push', 'queen_pop', 'queen_ack') ORDER BY 1, 2",
            &[],
        )
        .unwrap();
    let got: Vec<(String, bool, String)> = rows
        .iter()
        .map(|r| (format!("{}({})", r.get::<_, String>(0), r.get::<_, String>(1)), r.get(2), r.get(3)))
        .collect();
    let want = [
        ("queen_ack(acks jsonb)", true, "queen.ack_result"),
        (
            "queen_ack(message_id uuid, lease_id uuid, status text, error text, consumer_group text)",
            false,
            "queen.ack_result",
        ),
        ("queen_pop", true, "queen.message"),
        ("queen_push(items jsonb)", true, "queen.push_result"),
        (
            "queen_push(queue text, payload jsonb, partition text, transaction_id text, trace_id uuid)",
            false,
            "queen.push_result",
        ),
    ];
    assert_eq!(got.len(), want.len(), "{got:?}");
    for ((sig, set, ty), (wsig, wset, wty)) in got.iter().zip(want) {
        assert!(sig.starts_with(wsig), "{sig} vs {wsig}");
        assert_eq!((*set, ty.as_str()), (wset, wty), "{sig}");
    }
    // Columns by name, as to_jsonb(row) and SELECT * give them.
    let r = c.query_one("SELECT to_jsonb(queen_push('q', '{\"a\": 1}'))", &[]).unwrap();
    let v: Value = r.get(0);
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 7, "{v}");
    assert_eq!(v["status"], json!("queued"));
    let m = c.query_one("SELECT m.payload, m.attempt FROM queen_pop('q', 'g') m", &[]).unwrap();
    assert_eq!((m.get::<_, Value>(0), m.get::<_, i32>(1)), (json!({"a": 1}), 1));
    let a =
        c.query_one("SELECT (queen_ack(m.message_id, m.lease_id)).success FROM queen_pop('q', 'h') m", &[]).unwrap();
    assert!(a.get::<_, bool>(0));
}

/// semantics §11: errors reach users with a clear message and SQLSTATE, never a Rust backtrace
/// (the test cluster runs with RUST_BACKTRACE=1, as a developer's shell often has it).
#[test]
fn errors_carry_no_backtrace() {
    let db = TestDb::new("no_backtrace");
    let mut c = db.connect();
    c.batch_execute("DO $$ BEGIN CREATE ROLE queen_nobody; EXCEPTION WHEN duplicate_object THEN NULL; END $$").unwrap();
    let cases = [
        ("SELECT queen_push('q', NULL)", "22004"),
        ("SELECT * FROM queen_push('[{\"queue\": 5}]')", "22023"),
        ("SELECT queen_configure('q', '{\"leaseTime\": 1e400}')", "22023"),
        ("SET ROLE queen_nobody; SELECT * FROM queen_push('q', '1')", "42501"),
    ];
    for (sql, state) in cases {
        let err = c.batch_execute(sql).unwrap_err();
        let db_err = err.as_db_error().unwrap_or_else(|| panic!("{sql}: {err}"));
        assert_eq!(db_err.code().code(), state, "{sql}: {}", db_err.message());
        let detail = db_err.detail().unwrap_or("");
        assert!(
            !detail.contains("pgrx") && !detail.contains("backtrace") && !detail.contains(".rs:"),
            "{sql}: {detail}"
        );
        c.batch_execute("RESET ROLE").unwrap();
    }
}

/// The SQL of a Markdown file's ```sql blocks.
fn sql_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = vec![];
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l.starts_with("```sql") => current = Some(String::new()),
            (Some(_), l) if l.starts_with("```") => blocks.push(current.take().unwrap()),
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

/// The README's quickstart, the examples of docs/api.md and docs/concepts.md, and
/// examples/quickstart.sql work as a
/// new user pastes them — twice in a row, as a user trying them again would.
#[test]
fn the_documented_examples_run_as_pasted_twice() {
    let db = TestDb::new("doc_examples");
    let mut c = db.connect();
    let docs = [
        ("README.md", sql_blocks(include_str!("../../../README.md"))),
        ("docs/api.md", sql_blocks(include_str!("../../../docs/api.md"))),
        ("docs/concepts.md", sql_blocks(include_str!("../../../docs/concepts.md"))),
        ("examples/quickstart.sql", vec![include_str!("../../../examples/quickstart.sql").to_string()]),
    ];
    assert!(docs.iter().all(|(_, blocks)| !blocks.is_empty()));
    for round in 0..2 {
        for (file, blocks) in &docs {
            for block in blocks {
                c.batch_execute(block).unwrap_or_else(|e| {
                    let why = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_else(|| e.to_string());
                    panic!("{file}, round {round}: {why}\n{block}")
                });
            }
        }
    }
    let sent: i64 = c.query_one("SELECT count(*) FROM sent_emails", &[]).unwrap().get(0);
    assert!(sent > 0, "the quickstart's consumer wrote its invoices");
}
