//! Shared harness of the integration tests: connections to the test cluster that
//! scripts/integration-tests started, and a fresh database per test so that tests run in
//! parallel without seeing each other's queues.

pub mod citus;
pub mod explore;

use postgres::{Client, NoTls};
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// Where the cluster listens: QUEEN_TEST_HOST (a socket directory or address) and
/// QUEEN_TEST_PORT, set by scripts/integration-tests.
pub fn conninfo(dbname: &str) -> String {
    conninfo_as(dbname, "postgres")
}

/// The same, connecting as `user`.
pub fn conninfo_as(dbname: &str, user: &str) -> String {
    let host = std::env::var("QUEEN_TEST_HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let port = std::env::var("QUEEN_TEST_PORT").unwrap_or_else(|_| "28816".into());
    format!("host={host} port={port} user={user} dbname={dbname}")
}

pub fn connect(dbname: &str) -> Client {
    Client::connect(&conninfo(dbname), NoTls)
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e} (run the tests through `make test`)", conninfo(dbname)))
}

/// A test cluster, as the explorer and the restore tests address it: its socket directory (or
/// address) and port. The integration tests have two (scripts/integration-tests): one with queen
/// preloaded, one without; their transaction counters are their own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    pub host: String,
    pub port: String,
}

/// Where PostgreSQL's client programs are.
const BIN: &str = "/usr/lib/postgresql/15/bin";

impl Server {
    /// The cluster with queen preloaded.
    pub fn preloaded() -> Server {
        Server {
            host: std::env::var("QUEEN_TEST_HOST").expect("run through scripts/integration-tests"),
            port: std::env::var("QUEEN_TEST_PORT").unwrap(),
        }
    }

    /// The cluster without preloading.
    pub fn not_preloaded() -> Server {
        Server {
            host: std::env::var("QUEEN_TEST_NOPRELOAD_HOST").expect("run through scripts/integration-tests"),
            port: std::env::var("QUEEN_TEST_NOPRELOAD_PORT").unwrap(),
        }
    }

    pub fn conninfo(&self, db: &str, user: &str) -> String {
        format!("host={} port={} user={user} dbname={db}", self.host, self.port)
    }

    pub fn connect(&self, db: &str) -> Client {
        Client::connect(&self.conninfo(db, "postgres"), NoTls).unwrap_or_else(|e| panic!("cannot connect to {db}: {e}"))
    }

    /// A fresh database (with the extension, if asked).
    pub fn create(&self, db: &str, extension: bool) -> Client {
        let mut admin = self.connect("postgres");
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
        let mut c = self.connect(db);
        if extension {
            c.batch_execute("CREATE EXTENSION queen").unwrap();
        }
        c
    }

    pub fn drop_db(&self, db: &str) {
        let _ = self.connect("postgres").batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
    }

    /// The cluster's transaction counter (it takes one).
    pub fn counter(&self) -> i64 {
        self.connect("postgres").query_one("SELECT pg_current_xact_id()::text::bigint", &[]).unwrap().get(0)
    }

    /// Move this cluster's transaction counter past `other`'s by 2 000 at least.
    pub fn run_ahead_of(&self, other: &Server) {
        let target = other.counter() + 2000;
        let mut c = self.connect("postgres");
        c.batch_execute("SET synchronous_commit = off").unwrap();
        while self.counter() < target {
            c.batch_execute("DO $$BEGIN FOR i IN 1..1000 LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END$$")
                .unwrap();
        }
    }

    /// Run a PostgreSQL client program (pg_dump, pg_restore, psql) against this cluster; its
    /// output.
    pub fn tool(&self, cmd: &str, args: &[&str]) -> String {
        let out = std::process::Command::new(format!("{BIN}/{cmd}"))
            .args(["-h", &self.host, "-p", &self.port, "-U", "postgres"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// A database of its own for one test, with the extension created in it.
pub struct TestDb {
    pub name: String,
    /// Roles the test created (`role`), dropped with the database.
    roles: std::cell::RefCell<Vec<String>>,
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl TestDb {
    pub fn new(test: &str) -> TestDb {
        let name = format!("t_{}_{}_{}", test, std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
        let mut admin = connect("postgres");
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name}")).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        let mut c = connect(&name);
        c.batch_execute("CREATE EXTENSION queen").unwrap();
        TestDb { name, roles: Default::default() }
    }

    pub fn connect(&self) -> Client {
        connect(&self.name)
    }

    /// A connection that keeps every notice and warning the server sends it (messages as the
    /// client shows them: severity and text).
    pub fn connect_hearing(&self) -> (Client, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = heard.clone();
        let mut config: postgres::Config = conninfo(&self.name).parse().unwrap();
        config.notice_callback(move |n| keep.lock().unwrap().push(format!("{}: {}", n.severity(), n.message())));
        let c = config.connect(NoTls).unwrap_or_else(|e| panic!("cannot connect to {}: {e}", self.name));
        (c, heard)
    }

    /// A new login role of this test (not a superuser), named after the database: roles are
    /// the cluster's, and tests run in parallel.
    pub fn role(&self, suffix: &str) -> String {
        let name = format!("{}_{suffix}", self.name);
        let mut admin = connect("postgres");
        admin.batch_execute(&format!("DROP ROLE IF EXISTS {name}; CREATE ROLE {name} LOGIN")).unwrap();
        self.roles.borrow_mut().push(name.clone());
        name
    }

    /// A connection as `role`.
    pub fn connect_as(&self, role: &str) -> Client {
        Client::connect(&conninfo_as(&self.name, role), NoTls)
            .unwrap_or_else(|e| panic!("cannot connect as {role}: {e}"))
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Leave the database behind when the test failed: it is the evidence.
        if !std::thread::panicking() {
            let mut admin = connect("postgres");
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
            for r in self.roles.borrow().iter() {
                let _ = admin.batch_execute(&format!("DROP ROLE IF EXISTS {r}"));
            }
        }
    }
}

/// The SQLSTATE of a failed statement, e.g. "22023".
pub fn sqlstate(e: &postgres::Error) -> String {
    e.code().map(|c| c.code().to_string()).unwrap_or_else(|| format!("no SQLSTATE: {e}"))
}

/// The payloads of a pop's rows, as JSON.
pub fn payloads(rows: &[postgres::Row]) -> Vec<serde_json::Value> {
    rows.iter().map(|r| r.get::<_, serde_json::Value>("payload")).collect()
}

/// Push one message into a partition, committed unless `c` is in a transaction; its id.
/// `n` messages, payloads 0, 1, ..., into one partition, in one call.
pub fn push_n(c: &mut Client, queue: &str, partition: &str, n: i64) {
    let items: Vec<Value> =
        (0..n).map(|i| serde_json::json!({"queue": queue, "partition": partition, "payload": i})).collect();
    c.execute("SELECT count(*) FROM queen_push($1)", &[&Value::Array(items)]).unwrap();
}

/// Push `n` messages (payloads 0, 1, ...) to `queue` in one call, spread in turn over the
/// partitions p0 .. p(`partitions` - 1).
pub fn push_spread(c: &mut Client, queue: &str, n: i64, partitions: i64) {
    let items: Vec<Value> = (0..n)
        .map(|i| serde_json::json!({"queue": queue, "partition": format!("p{}", i % partitions), "payload": i}))
        .collect();
    c.execute("SELECT count(*) FROM queen_push($1)", &[&Value::Array(items)]).unwrap();
}

/// A test database with queue `q` configured with `options` (JSON; "" for none) and `pushed`
/// messages (payloads 0, 1, ...) in its partition `p`; and a connection to it: the set-up of
/// the ack tests.
pub fn queue_db(name: &str, options: &str, pushed: i64) -> (TestDb, Client) {
    let db = TestDb::new(name);
    let mut c = db.connect();
    if !options.is_empty() {
        c.execute("SELECT queen_configure('q', $1::text::jsonb)", &[&options]).unwrap();
    }
    if pushed > 0 {
        push_n(&mut c, "q", "p", pushed);
    }
    (db, c)
}

pub fn push(c: &mut Client, queue: &str, partition: &str, payload: Value) -> uuid::Uuid {
    c.query_one("SELECT message_id FROM queen_push($1, $2, $3)", &[&queue, &payload, &partition]).unwrap().get(0)
}

/// What `queen.group_lag` counts pending for a group (None: queue mode) over the queue.
pub fn lag(c: &mut Client, queue: &str, group: Option<&str>) -> i64 {
    c.query_one(
        "SELECT coalesce(sum(pending), 0)::bigint FROM queen.group_lag
          WHERE queue = $1 AND consumer_group IS NOT DISTINCT FROM $2",
        &[&queue, &group],
    )
    .unwrap()
    .get(0)
}

/// Pop with auto_ack (at-most-once) from a queue, returning the payloads.
pub fn pop_auto(c: &mut Client, queue: &str, group: Option<&str>, batch: i32) -> Vec<serde_json::Value> {
    let rows = c
        .query(
            "SELECT * FROM queen_pop($1, consumer_group => $2, batch => $3, auto_ack => true)",
            &[&queue, &group, &batch],
        )
        .unwrap();
    payloads(&rows)
}

/// Drain a queue with auto_ack pops until one returns nothing.
pub fn drain(c: &mut Client, queue: &str, group: Option<&str>) -> Vec<serde_json::Value> {
    let mut all = vec![];
    loop {
        let got = pop_auto(c, queue, group, 100);
        if got.is_empty() {
            return all;
        }
        all.extend(got);
    }
}

/// What pg_locks shows of queen's lock of kind `kind` (src/locks.rs `Lock`: 8 a visit of a
/// (partition, group)) for `id` and `name`, in the database of oid `db`: (database, classid,
/// objid), with objsubid 81. The same digest as locks.rs's.
pub fn queen_lock_tag(db: u32, kind: u8, id: Option<uuid::Uuid>, name: Option<&str>) -> (u32, u32, u32) {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"queen lock\0");
    h.update(db.to_le_bytes());
    h.update([kind]);
    if let Some(id) = id {
        h.update(id.as_bytes());
    }
    if let Some(name) = name {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
    }
    let d = h.finalize();
    let word = |i: usize| u32::from_le_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
    (word(0), word(4), word(8))
}

/// A session that has an xid and stays in an open transaction until dropped or committed.
pub fn open_tx(db: &TestDb) -> Client {
    let mut c = db.connect();
    c.batch_execute("BEGIN").unwrap();
    c
}

/// The query files of sql/queries, by name.
pub const QUERY_FILES: &[&str] = &[
    "ack",
    "admin",
    "cluster",
    "configure",
    "dead_letters",
    "discovery",
    "maintain",
    "pop",
    "privilege",
    "push",
    "state",
    "subscription",
];

/// The text of sql/queries/`file`.sql.
pub fn query_file(file: &str) -> &'static str {
    match file {
        "ack" => include_str!("../../../sql/queries/ack.sql"),
        "admin" => include_str!("../../../sql/queries/admin.sql"),
        "cluster" => include_str!("../../../sql/queries/cluster.sql"),
        "configure" => include_str!("../../../sql/queries/configure.sql"),
        "dead_letters" => include_str!("../../../sql/queries/dead_letters.sql"),
        "discovery" => include_str!("../../../sql/queries/discovery.sql"),
        "fragments" => include_str!("../../../sql/queries/fragments.sql"),
        "kv" => include_str!("../../../sql/queries/kv.sql"),
        "maintain" => include_str!("../../../sql/queries/maintain.sql"),
        "pop" => include_str!("../../../sql/queries/pop.sql"),
        "push" => include_str!("../../../sql/queries/push.sql"),
        "state" => include_str!("../../../sql/queries/state.sql"),
        "privilege" => include_str!("../../../sql/queries/privilege.sql"),
        "subscription" => include_str!("../../../sql/queries/subscription.sql"),
        other => panic!("no query file {other}.sql"),
    }
}

/// The text of section `name` of sql/queries/`file`.sql, as queen's SPI layer reads it: from
/// its `-- name:` line to the next one, with the pieces it names written out (`{{piece}}`,
/// `{{piece key=value}}`: sql/queries/fragments.sql, as src/spi.rs `expand` writes them).
pub fn query_section(file: &str, name: &str) -> String {
    let text = query_file(file);
    let marker = format!("-- name: {name}\n");
    let start = text.find(&marker).unwrap_or_else(|| panic!("{name} is missing from {file}.sql")) + marker.len();
    let end = text[start..].find("-- name: ").map_or(text.len(), |i| start + i);
    expand(text[start..end].trim().trim_end_matches(';'))
}

fn expand(text: &str) -> String {
    let Some(i) = text.find("{{") else { return text.to_string() };
    let end = text[i..].find("}}").expect("an unclosed {{") + i;
    let mut words = text[i + 2..end].split_whitespace();
    let mut piece = query_section("fragments", words.next().expect("a piece's name"));
    for w in words {
        let (k, v) = w.split_once('=').expect("key=value");
        piece = piece.replace(&format!("{{{k}}}"), v);
    }
    format!("{}{}{}", &text[..i], piece, expand(&text[end + 2..]))
}

/// PREPARE queen's query `name` of sql/queries/`file`.sql under its own name, with these
/// parameter types: for tests that replay one step of an interleaving, or look at its plan.
pub fn prepare_query(c: &mut Client, file: &str, name: &str, types: &[&str]) {
    c.batch_execute(&format!("PREPARE {name} ({}) AS {}", types.join(", "), query_section(file, name)))
        .unwrap_or_else(|e| panic!("preparing {file}.sql {name}: {e}"));
}

/// The snapshot of a new statement, as queen's queries read one (the caller's own transaction
/// among the running ones): "xmin, xmax, '{xip}'", the arguments of hints_set and hints_delete.
pub fn look_snapshot(c: &mut Client) -> String {
    c.query_one(
        "SELECT format('%s, %s, %L', least(pg_snapshot_xmin(s)::text::bigint, own), pg_snapshot_xmax(s)::text::bigint,
                       ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(s) AS x)
                         || ARRAY(SELECT own WHERE own IS NOT NULL))
           FROM (SELECT pg_current_snapshot() AS s, pg_current_xact_id_if_assigned()::text::bigint AS own) z",
        &[],
    )
    .unwrap()
    .get(0)
}

/// Wait until backend `pid` sleeps in one of queen's debug delays (`queen.debug_claim_delay_ms`,
/// `queen.debug_commit_delay_ms`: wait event PgSleep), or panic.
pub fn await_debug_sleep(c: &mut Client, pid: i32) {
    await_activity(c, pid, "wait_event = 'PgSleep'", "reached its debug delay");
}

/// Wait until backend `pid` waits for a lock or pauses before trying again (queen's calls that
/// take rows all or none: wait event PgSleep), or panic.
pub fn await_lock_wait_or_pause(c: &mut Client, pid: i32) {
    await_activity(c, pid, "(wait_event_type = 'Lock' OR wait_event = 'PgSleep')", "waited or paused");
}

/// Wait until backend `pid` waits for a lock (a row's, or one of queen's own), or panic.
pub fn await_lock_wait(c: &mut Client, pid: i32) {
    await_activity(c, pid, "wait_event_type = 'Lock'", "waited for a lock");
}

/// Wait until pg_stat_activity shows backend `pid` with `condition` (a fixed SQL condition),
/// or panic after 10 s saying it never `what`.
fn await_activity(c: &mut Client, pid: i32, condition: &str, what: &str) {
    let sql = format!("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND {condition}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.query_one(&sql, &[&pid]).unwrap().get::<_, i64>(0) == 0 {
        assert!(Instant::now() < deadline, "backend {pid} never {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// Wait until `pid` is a waiting pop (it shows in queen.waiting_pops), or panic.
pub fn await_waiting(c: &mut Client, pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: i64 = c.query_one("SELECT count(*) FROM queen.waiting_pops WHERE pid = $1", &[&pid]).unwrap().get(0);
        if n > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "backend {pid} never started waiting");
        thread::sleep(Duration::from_millis(2));
    }
}

/// A pop waiting in another session: (its pid, the handle giving its rows and how long it took).
pub fn waiter(
    db: &str,
    sql: &'static str,
) -> (i32, thread::JoinHandle<(Result<Vec<Value>, postgres::Error>, Duration)>) {
    let mut c = connect(db);
    let pid: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let h = thread::spawn(move || {
        let t0 = Instant::now();
        let r = c.query(sql, &[]).map(|rows| rows.iter().map(|r| r.get::<_, Value>(0)).collect());
        (r, t0.elapsed())
    });
    (pid, h)
}

/// Plant, in a new schema `schema`, look-alikes of functions and operators queen's SQL uses
/// (clock_timestamp(), now(), pg_current_snapshot(), hashtext(), `=` on bigint and uuid, `||`
/// on text), each recording its call in `schema.calls` and then doing what the original does:
/// with `schema` before pg_catalog on a search_path, they would be called instead of the
/// originals (semantics §11). `spy_calls` counts what they recorded.
pub fn plant_spies(c: &mut Client, schema: &str) {
    let spy = |name: &str, args: &str, ret: &str, body: &str| {
        format!(
            "CREATE FUNCTION {schema}.{name}({args}) RETURNS {ret} LANGUAGE plpgsql VOLATILE AS $$
             BEGIN INSERT INTO {schema}.calls VALUES ('{name}'); RETURN {body}; END $$;"
        )
    };
    let sql = [
        format!("CREATE SCHEMA {schema}; CREATE TABLE {schema}.calls (what text);"),
        format!("GRANT USAGE ON SCHEMA {schema} TO PUBLIC; GRANT INSERT, SELECT ON {schema}.calls TO PUBLIC;"),
        spy("clock_timestamp", "", "timestamptz", "pg_catalog.clock_timestamp()"),
        spy("now", "", "timestamptz", "pg_catalog.now()"),
        spy("pg_current_snapshot", "", "pg_snapshot", "pg_catalog.pg_current_snapshot()"),
        spy("hashtext", "text", "int", "pg_catalog.hashtext($1)"),
        spy("spy_int8eq", "bigint, bigint", "boolean", "pg_catalog.int8eq($1, $2)"),
        spy("spy_uuid_eq", "uuid, uuid", "boolean", "pg_catalog.uuid_eq($1, $2)"),
        spy("spy_textcat", "text, text", "text", "pg_catalog.textcat($1, $2)"),
        format!("CREATE OPERATOR {schema}.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = {schema}.spy_int8eq);"),
        format!("CREATE OPERATOR {schema}.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = {schema}.spy_uuid_eq);"),
        format!("CREATE OPERATOR {schema}.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = {schema}.spy_textcat);"),
    ];
    c.batch_execute(&sql.join("\n")).unwrap_or_else(|e| panic!("planting spies: {e}"));
}

/// How many calls the spies of `schema` recorded.
pub fn spy_calls(c: &mut Client, schema: &str) -> Vec<String> {
    c.query(&format!("SELECT what FROM {schema}.calls"), &[]).unwrap().iter().map(|r| r.get(0)).collect()
}
