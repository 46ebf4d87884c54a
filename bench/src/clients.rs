//! The clients dimension (`make bench clients`): each workload at 1, 4 and 16 concurrent
//! clients, queen next to raw SQL doing the same job and next to PgQ (Debian's
//! `postgresql-15-pgq3`, installed by scripts/bench), on the same server, in the same run.
//!
//! Every client is a thread with its own connection and its own prepared statements; all
//! start together and run for QUEEN_BENCH_SECONDS (default 5). A consumer whose call returns
//! nothing has drained what the set-up filled and stops; throughput is the messages handled
//! over the time until the last client stopped. Between runs, consumer state is reset (queen:
//! the groups deleted, so that each run's first pop subscribes a group that has never read the
//! queue and finds the backlog through the queue log, as a consumer that falls behind does; raw:
//! cursors to 0; PgQ: consumers re-registered at the first tick), so every run reads the same
//! data, and queen's tables keep their history (dead tuples). (Until 2026-12-04 queen's reset
//! was `queen_seek(..., '-infinity')`; a seek now hints every partition and starts discovery
//! after what it saw, so a drain after it reads no log: not the backlog this bench means.)
//!
//! With QUEEN_BENCH_PROFILE=1, each queen run also samples `pg_stat_activity` every 5 ms
//! (what the clients' backends wait on) and prints the statements that took the most time
//! (`pg_stat_statements`, nested statements included).

use postgres::types::ToSql;
use postgres::{Client, Row, Statement};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

/// A connection that prepares each statement once.
pub struct Conn {
    c: Client,
    stmts: HashMap<&'static str, Statement>,
}

impl Conn {
    fn new() -> Conn {
        Conn { c: super::connect(), stmts: HashMap::new() }
    }
    pub fn query(&mut self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Vec<Row> {
        if !self.stmts.contains_key(sql) {
            let s = self.c.prepare(sql).unwrap_or_else(|e| panic!("prepare {sql}: {e}"));
            self.stmts.insert(sql, s);
        }
        let s = &self.stmts[sql];
        self.c.query(s, params).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
    /// The first column of the one row, as a count.
    fn count(&mut self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> usize {
        let rows = self.query(sql, params);
        rows[0].get::<_, Option<i64>>(0).unwrap_or(0) as usize
    }
    /// `query`, run again when PostgreSQL broke a deadlock by cancelling it: a statement that
    /// updates several rows takes their locks in its plan's order, and two that update the
    /// same rows can deadlock (the raw baseline of the ordered workload, once at 16 clients).
    fn query_retried(&mut self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Vec<Row> {
        loop {
            if !self.stmts.contains_key(sql) {
                let s = self.c.prepare(sql).unwrap_or_else(|e| panic!("prepare {sql}: {e}"));
                self.stmts.insert(sql, s);
            }
            match self.c.query(&self.stmts[sql], params) {
                Ok(rows) => return rows,
                Err(e) if e.code() == Some(&postgres::error::SqlState::T_R_DEADLOCK_DETECTED) => continue,
                Err(e) => panic!("{sql}: {e}"),
            }
        }
    }
}

/// One run: messages handled, the time it took, each call's latency.
pub struct Outcome {
    units: usize,
    secs: f64,
    lat: Vec<Duration>,
}

impl Outcome {
    pub fn per_sec(&self) -> f64 {
        self.units as f64 / self.secs
    }
    pub fn pct(&self, p: f64) -> f64 {
        if self.lat.is_empty() {
            return f64::NAN;
        }
        let mut v = self.lat.clone();
        v.sort();
        v[((v.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0
    }
}

pub type Op<'a> = &'a (dyn Fn(&mut Conn, usize, usize) -> usize + Sync);

/// How many messages the consume workloads fill (QUEEN_BENCH_FILL, default 300 000).
fn fill_size() -> usize {
    std::env::var("QUEEN_BENCH_FILL").ok().and_then(|s| s.parse().ok()).unwrap_or(300_000)
}

fn seconds() -> f64 {
    std::env::var("QUEEN_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5.0)
}

/// Run `op(conn, client, iteration)` on `clients` connections at once for the bench's
/// duration. `consume`: an op that returns 0 has drained its input, and its client stops.
pub fn drive(clients: usize, consume: bool, op: Op) -> Outcome {
    let secs = seconds();
    let barrier = Barrier::new(clients + 1);
    let results = Mutex::new(Vec::new());
    let start = Mutex::new(None::<Instant>);
    std::thread::scope(|s| {
        for k in 0..clients {
            let (barrier, results, start) = (&barrier, &results, &start);
            s.spawn(move || {
                let mut c = Conn::new();
                // Plans prepared and caches warm before the clock starts; the warm-up's
                // messages are not counted.
                op(&mut c, k, 0);
                barrier.wait();
                let t0 = start.lock().unwrap().unwrap();
                let (mut units, mut lat, mut i) = (0, Vec::new(), 1);
                while t0.elapsed().as_secs_f64() < secs {
                    let t = Instant::now();
                    let n = op(&mut c, k, i);
                    lat.push(t.elapsed());
                    units += n;
                    i += 1;
                    if consume && n == 0 {
                        break;
                    }
                }
                results.lock().unwrap().push((units, lat, t0.elapsed()));
            });
        }
        *start.lock().unwrap() = Some(Instant::now());
        barrier.wait();
    });
    let results = results.into_inner().unwrap();
    let secs = results.iter().map(|r| r.2).max().unwrap().as_secs_f64();
    Outcome { units: results.iter().map(|r| r.0).sum(), secs, lat: results.into_iter().flat_map(|r| r.1).collect() }
}

/// Samples of what the bench clients' backends wait on, while `f` runs.
fn with_profile<T>(admin: &mut Client, label: &str, f: impl FnOnce() -> T) -> T {
    if std::env::var("QUEEN_BENCH_PROFILE").is_err() {
        return f();
    }
    admin.batch_execute("SELECT pg_stat_statements_reset()").unwrap();
    // QUEEN_BENCH_PERF=<part of a label>: `perf record` of the whole machine during that run.
    let perf = std::env::var("QUEEN_BENCH_PERF").ok().filter(|p| label.contains(p.as_str())).map(|_| {
        let out = format!("/tmp/queen-perf-{}.data", label.replace([' ', ',', '/'], "_"));
        println!("\n  perf record of {label}: {out}");
        std::process::Command::new("perf")
            .args(["record", "-a", "-g", "-q", "-o", &out])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("perf")
    });
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (out, waits) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut c = super::connect();
            let me: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
            let q = c
                .prepare(
                    "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU')
                       FROM pg_stat_activity
                      WHERE datname = 'bench' AND backend_type = 'client backend' AND pid <> $1 AND state = 'active'",
                )
                .unwrap();
            let mut counts: HashMap<String, usize> = HashMap::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for r in c.query(&q, &[&me]).unwrap() {
                    *counts.entry(r.get::<_, Option<String>>(0).unwrap_or_default()).or_default() += 1;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            counts
        });
        let out = f();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (out, sampler.join().unwrap())
    });
    if let Some(mut p) = perf {
        // SIGINT makes perf write its data and exit.
        std::process::Command::new("kill").args(["-INT", &p.id().to_string()]).status().unwrap();
        p.wait().unwrap();
    }
    let total: usize = waits.values().sum();
    let mut w: Vec<_> = waits.into_iter().collect();
    w.sort_by(|a, b| b.1.cmp(&a.1));
    let shown: Vec<String> =
        w.iter().take(8).map(|(k, n)| format!("{k} {:.0}%", 100.0 * *n as f64 / total.max(1) as f64)).collect();
    println!("\n  profile of {label}: active backends sampled every 5 ms: {}", shown.join(", "));
    let sizes: Vec<String> = admin
        .query(
            "SELECT t || ' ' || (xpath('/row/n/text()', query_to_xml('SELECT count(*) AS n FROM queen.' || t, false, true, '')))[1]::text
                    || ' rows, ' || pg_size_pretty(pg_total_relation_size(('queen.' || t)::regclass))
               FROM unnest(ARRAY['cursors', 'ready', 'discovery', 'leases', 'subscriptions']) AS t
              WHERE to_regclass('queen.' || t) IS NOT NULL",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    println!("  bookkeeping after the run: {}", sizes.join(", "));
    print_top_statements(admin);
    println!();
    out
}

/// The 8 statements of database `bench` that took the most time since pg_stat_statements was
/// last reset.
pub fn print_top_statements(admin: &mut Client) {
    let top = admin
        .query(
            "SELECT round(total_exec_time::numeric, 0)::text || ' ms, ' || calls || ' calls, '
                    || round((total_exec_time / greatest(calls, 1))::numeric, 3) || ' ms each: '
                    || regexp_replace(left(query, 110), '\\s+', ' ', 'g')
               FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'bench')
              ORDER BY total_exec_time DESC LIMIT 8",
            &[],
        )
        .unwrap();
    for r in top {
        println!("  - {}", r.get::<_, String>(0));
    }
}

fn payload(i: usize) -> Value {
    super::payload(i)
}

/// One row of the table: the workload at `clients`, raw, queen and PgQ.
fn row(name: &str, clients: usize, raw: &Outcome, queen: &Outcome, pgq: Option<&Outcome>, target: f64) {
    let r = queen.per_sec() / raw.per_sec();
    let pgq = match pgq {
        Some(p) => format!("{:.0} ({:.2}×)", p.per_sec(), p.per_sec() / raw.per_sec()),
        None => "—".into(),
    };
    println!(
        "| {name} | {clients} | {:.0} | {:.0} | **{r:.2}×** | {:.2} / {:.2} | {pgq} | ≥ {target:.2}× {} |",
        raw.per_sec(),
        queen.per_sec(),
        queen.pct(0.5),
        queen.pct(0.99),
        if r >= target { "met" } else { "**not met**" }
    );
}

/// The client counts (QUEEN_BENCH_CLIENTS, e.g. "4" or "1,4,16", the default).
pub fn client_counts() -> Vec<usize> {
    std::env::var("QUEEN_BENCH_CLIENTS")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 4, 16])
}

fn setup(c: &mut Client) {
    // The extension dropped and made again. The server's maintenance worker may be in a pass
    // over queen's tables, whose locks the drop takes in another order: a deadlock, one of the
    // two chosen to fail (the drop, five times in a row once, after a fill of 300 000
    // messages). The worker is stopped first (the postmaster starts it again 5 s later), and
    // the drop is tried again after a deadlock all the same.
    for attempt in 1.. {
        c.batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'queen maintenance'",
        )
        .unwrap();
        match c.batch_execute("DROP EXTENSION IF EXISTS queen CASCADE; CREATE EXTENSION queen;") {
            Ok(()) => break,
            Err(e) if attempt < 5 && e.code() == Some(&postgres::error::SqlState::T_R_DEADLOCK_DETECTED) => continue,
            Err(e) => panic!("setup: {e:?}"),
        }
    }
    c.batch_execute(
        "DROP EXTENSION IF EXISTS pgq CASCADE; CREATE EXTENSION pgq;
         DROP TABLE IF EXISTS raw_messages, raw_cursor;
         CREATE TABLE raw_messages (id bigserial PRIMARY KEY, partition text NOT NULL,
                                    payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
         CREATE INDEX ON raw_messages (partition, id);
         CREATE TABLE raw_cursor (partition text, grp int, pos bigint NOT NULL, PRIMARY KEY (partition, grp))
           WITH (fillfactor = 50);
         SELECT pgq.create_queue('bench');
         SELECT pgq.set_queue_config('bench', 'ticker_max_count', '100');
         -- PgQ's consumer loop in one call, as raw and queen do theirs: the next batch, its
         -- events, the batch finished; empty batches (a tick with no events) are finished and
         -- passed over, as a PgQ consumer does.
         CREATE OR REPLACE FUNCTION pgq_consume(consumer text) RETURNS SETOF text LANGUAGE plpgsql AS $$
         DECLARE b bigint; n bigint;
         BEGIN
           LOOP
             b := pgq.next_batch('bench', consumer);
             IF b IS NULL THEN RETURN; END IF;
             RETURN QUERY SELECT ev_data FROM pgq.get_batch_events(b);
             GET DIAGNOSTICS n = ROW_COUNT;
             PERFORM pgq.finish_batch(b);
             EXIT WHEN n > 0;
           END LOOP;
         END $$;",
    )
    .unwrap();
    let _ = c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
}

// ---- push -----------------------------------------------------------------------------

const RAW_PUSH: &str = "INSERT INTO raw_messages (partition, payload) VALUES ($2, $1)";
const QUEEN_PUSH: &str = "SELECT message_id FROM queen_push('bench', $1, $2)";
const PGQ_PUSH: &str = "SELECT pgq.insert_event('bench', $2, $1::jsonb::text)";
const RAW_PUSH_BATCH: &str = "INSERT INTO raw_messages (partition, payload)
     SELECT e->>'partition', e->'payload' FROM jsonb_array_elements($1::jsonb) e";
const QUEEN_PUSH_BATCH: &str = "SELECT count(*) FROM queen_push($1::jsonb)";
const PGQ_PUSH_BATCH: &str =
    "SELECT count(pgq.insert_event('bench', e->>'partition', (e->'payload')::text)) FROM jsonb_array_elements($1::jsonb) e";

fn push_single(c: &mut Client) {
    for n in client_counts() {
        setup(c);
        let one = |sql: &'static str| {
            move |c: &mut Conn, k: usize, i: usize| {
                let p = format!("p{}", (k * 7919 + i) % 100);
                c.query(sql, &[&payload(i), &p]);
                1
            }
        };
        let raw = drive(n, false, &one(RAW_PUSH));
        let queen = with_profile(c, &format!("push 1/txn, {n} clients"), || drive(n, false, &one(QUEEN_PUSH)));
        let pgq = drive(n, false, &one(PGQ_PUSH));
        row("push, 1 per transaction", n, &raw, &queen, Some(&pgq), 0.95);
    }
}

/// A batch of 100 items: into one partition (`parts` = 1, one of 100 per call), or spread over
/// `parts` partitions (a different 100 of them at each call).
fn batch(k: usize, i: usize, parts: usize) -> Value {
    Value::Array(
        (0..100)
            .map(|j| {
                let p = if parts > 1 {
                    format!("p{}", (k * 7919 + i * 100 + j) % parts)
                } else {
                    format!("p{}", (k * 7919 + i) % 100)
                };
                json!({"queue": "bench", "partition": p, "payload": payload(i.wrapping_mul(100).wrapping_add(j))})
            })
            .collect(),
    )
}

fn push_batch(c: &mut Client, parts: usize) {
    let name = if parts > 1 {
        format!("push, batches of 100 over {parts} partitions")
    } else {
        "push, batches of 100 into one partition".to_string()
    };
    let name = name.as_str();
    for n in client_counts() {
        setup(c);
        let op = |sql: &'static str| {
            move |c: &mut Conn, k: usize, i: usize| {
                c.query(sql, &[&batch(k, i, parts)]);
                100
            }
        };
        let raw = drive(n, false, &op(RAW_PUSH_BATCH));
        let queen = with_profile(c, &format!("{name}, {n} clients"), || drive(n, false, &op(QUEEN_PUSH_BATCH)));
        let pgq = drive(n, false, &op(PGQ_PUSH_BATCH));
        row(name, n, &raw, &queen, Some(&pgq), 0.7);
    }
}

// ---- consume --------------------------------------------------------------------------

/// Fill queen, the raw table and PgQ with the same `n` messages over `parts` partitions
/// (PgQ: one tick per 100 events, so that its batches are of 100 as well).
fn fill(c: &mut Client, n: usize, parts: usize, groups: usize) {
    setup(c);
    let mut k = 0;
    while k < n {
        let chunk: Vec<Value> = (k..(k + 1000).min(n))
            .map(|i| json!({"queue": "bench", "partition": format!("p{}", i % parts), "payload": payload(i)}))
            .collect();
        let chunk = Value::Array(chunk);
        c.query(QUEEN_PUSH_BATCH, &[&chunk]).unwrap();
        c.execute(RAW_PUSH_BATCH, &[&chunk]).unwrap();
        k += 1000;
    }
    c.batch_execute(&format!(
        "INSERT INTO raw_cursor SELECT 'p' || i, g, 0 FROM generate_series(0, {parts} - 1) i, generate_series(0, {groups} - 1) g;
         SELECT pgq.ticker('bench');"
    ))
    .unwrap();
    // Alone in its query string: a DO block commits only outside a transaction block.
    c.batch_execute(&format!(
        "DO $$ BEGIN
           FOR b IN 0 .. {n} / 100 - 1 LOOP
             PERFORM pgq.insert_event('bench', partition, payload::text)
                FROM raw_messages WHERE id BETWEEN b * 100 + 1 AND b * 100 + 100;
             COMMIT;
             PERFORM pgq.ticker('bench');
             COMMIT;
           END LOOP;
         END $$"
    ))
    .unwrap();
    crate::vacuum(c);
}

/// Consumer state back to the start, before each run.
fn reset(c: &mut Client, groups: &[String], pgq_consumers: usize) {
    for g in groups {
        c.query("SELECT queen_delete_group($1, 'bench')", &[g]).unwrap();
    }
    c.batch_execute(&format!(
        "UPDATE raw_cursor SET pos = 0;
         SELECT pgq.unregister_consumer('bench', consumer_name) FROM pgq.get_consumer_info('bench');
         SELECT pgq.register_consumer_at('bench', 'c' || k,
                (SELECT min(tick_id) FROM pgq.tick WHERE tick_queue = (SELECT queue_id FROM pgq.queue WHERE queue_name = 'bench')))
           FROM generate_series(0, {pgq_consumers} - 1) k;"
    ))
    .unwrap();
}

/// The raw baseline of a consumer: next 100 of a partition after its cursor (told which
/// partition), cursor moved, in one statement.
const RAW_NEXT: &str = "WITH next AS (
         SELECT id, payload FROM raw_messages
          WHERE partition = $1 AND id > (SELECT pos FROM raw_cursor WHERE partition = $1 AND grp = $2)
          ORDER BY id LIMIT 100),
     moved AS (
         UPDATE raw_cursor SET pos = (SELECT max(id) FROM next)
          WHERE partition = $1 AND grp = $2 AND EXISTS (SELECT 1 FROM next))
     SELECT count(*) FROM next";
/// The popped rows acknowledged as Queen's clients acknowledge them, in one jsonb batch: each
/// message by its transaction id and partition, with its lease and group (what the gateway
/// passes on).
const QUEEN_POP_ACK: &str = "SELECT count(*) FILTER (WHERE success) FROM queen_ack(
         coalesce((SELECT jsonb_agg(jsonb_build_object('transactionId', m.transaction_id, 'partitionId', m.partition_id,
                                                       'leaseId', m.lease_id, 'consumerGroup', $1::text))
                     FROM queen_pop('bench', $1::text, batch => 100) m), '[]'))";
/// The popped rows acknowledged as they came (`to_jsonb(m)`, payloads included), which the
/// batch form accepts as is (semantics §3.3): the caller's SQL builds the heaviest argument.
const QUEEN_POP_ACK_ROWS: &str = "SELECT count(*) FILTER (WHERE success) FROM queen_ack(
         coalesce((SELECT jsonb_agg(to_jsonb(m)) FROM queen_pop('bench', $1, batch => 100) m), '[]'))";
/// A worker's whole batch acknowledged in one call (semantics §3.4); an empty pop acks the nil lease,
/// which no row holds: no rows.
const QUEEN_POP_ACK_LEASE: &str = "SELECT count(*) FILTER (WHERE success) FROM queen_ack_lease(
         coalesce((SELECT lease_id FROM queen_pop('bench', $1, batch => 100) LIMIT 1),
                  '00000000-0000-0000-0000-000000000000'))";
const QUEEN_POP_AUTO: &str = "SELECT count(*) FROM queen_pop('bench', $1, batch => 100, auto_ack => true)";
const PGQ_CONSUME: &str = "SELECT count(*) FROM pgq_consume($1)";

/// A raw consumer: told a random partition of `parts`. It never runs dry: a partition it
/// has read to the end is read again from the start (raw SQL outruns any fill this bench can
/// afford, and a consumer searching for the last undrained partitions would measure the
/// search).
fn raw_consume(parts: usize, groups: usize) -> impl Fn(&mut Conn, usize, usize) -> usize + Sync {
    move |c: &mut Conn, k: usize, i: usize| {
        let g = ((k + i) % groups) as i32;
        let p = format!("p{}", (k * 7919 + i * 104729) % parts);
        let n = c.count(RAW_NEXT, &[&p, &g]);
        if n > 0 {
            return n;
        }
        c.query(RAW_REWIND, &[&p, &g]);
        c.count(RAW_NEXT, &[&p, &g])
    }
}
const RAW_REWIND: &str = "UPDATE raw_cursor SET pos = 0 WHERE partition = $1 AND grp = $2";

/// How the consume workloads acknowledge what they pop.
#[derive(Clone, Copy)]
enum AckWith {
    /// `queen_ack(jsonb)` of the popped rows, as Queen's clients and the gateway ack.
    Jsonb,
    /// `queen_ack(jsonb)` of the popped rows turned into JSON whole (`to_jsonb(m)`).
    Rows,
    /// `queen_ack_lease` of the pop's lease.
    Lease,
    /// `auto_ack => true`: nothing to ack.
    Auto,
}

fn consume(c: &mut Client, fill_first: bool, ack: AckWith) {
    let (parts, n) = (1000, fill_size());
    if fill_first {
        fill(c, n, parts, 1);
    }
    let (name, sql, target) = match ack {
        AckWith::Jsonb => ("pop 100 + jsonb batch ack (Queen's clients' entries), one group", QUEEN_POP_ACK, 0.7),
        AckWith::Rows => ("pop 100 + jsonb batch ack of to_jsonb(m) rows, one group", QUEEN_POP_ACK_ROWS, 0.7),
        AckWith::Lease => ("pop 100 + queen_ack_lease, one group", QUEEN_POP_ACK_LEASE, 0.7),
        AckWith::Auto => ("pop 100, auto_ack, one group", QUEEN_POP_AUTO, 0.8),
    };
    let g = vec!["g".to_string()];
    for clients in client_counts() {
        reset(c, &g, 1);
        let raw = drive(clients, true, &raw_consume(parts, 1));
        reset(c, &g, 1);
        let queen = with_profile(c, &format!("{name}, {clients} clients"), || {
            drive(clients, true, &|c: &mut Conn, _k, _i| c.count(sql, &[&"g"]))
        });
        row(name, clients, &raw, &queen, None, target);
    }
}

/// Four groups each read everything; clients take the groups in turn. PgQ cannot share a
/// consumer between clients, so it gets one consumer per client (four at least, taken in
/// turn by a single client). Queen's consumers ack with the jsonb batch of the popped rows (as
/// Queen's clients and the gateway do), then, in a row of their own, with `queen_ack_lease`:
/// a whole batch acknowledged in one call, as PgQ's `finish_batch` does.
fn fan_out(c: &mut Client) {
    let (parts, n, groups) = (100, fill_size() / 3, 4);
    fill(c, n, parts, groups);
    let gs: Vec<String> = (0..groups).map(|g| format!("g{g}")).collect();
    for clients in client_counts() {
        let consumers = clients.max(groups);
        reset(c, &gs, consumers);
        let raw = drive(clients, true, &raw_consume(parts, groups));
        reset(c, &gs, consumers);
        let queen = with_profile(c, &format!("fan-out, {clients} clients"), || {
            drive(clients, true, &|c: &mut Conn, k, i| c.count(QUEEN_POP_ACK, &[&format!("g{}", (k + i) % groups)]))
        });
        reset(c, &gs, consumers);
        let lease = with_profile(c, &format!("fan-out with queen_ack_lease, {clients} clients"), || {
            drive(clients, true, &|c: &mut Conn, k, i| {
                c.count(QUEEN_POP_ACK_LEASE, &[&format!("g{}", (k + i) % groups)])
            })
        });
        reset(c, &gs, consumers);
        let pgq = drive(clients, true, &|c: &mut Conn, k, i| {
            let consumer = if clients >= groups { format!("c{k}") } else { format!("c{}", (k + i) % groups) };
            c.count(PGQ_CONSUME, &[&consumer])
        });
        // The target is PgQ's ratio in the same run.
        let target = pgq.per_sec() / raw.per_sec();
        row("fan-out: 4 groups each read everything (pop 100 + batch ack)", clients, &raw, &queen, Some(&pgq), target);
        let name = "fan-out: 4 groups each read everything (pop 100 + queen_ack_lease)";
        row(name, clients, &raw, &lease, Some(&pgq), target);
    }
}

/// Ordered consumption spread thin: 10 000 partitions, each pop takes up to 10 partitions
/// (`partitions => 10`, auto_ack); raw reads the next 10 of 10 partitions it is told and
/// moves their 10 cursors, in one statement.
fn ordered(c: &mut Client) {
    let (parts, n) = (10_000, fill_size());
    fill(c, n, parts, 1);
    const RAW: &str = "WITH ps AS (SELECT 'p' || (($1::int + k) % 10000) AS p FROM generate_series(0, 9) k),
         next AS (SELECT ps.p, m.id FROM ps CROSS JOIN LATERAL (
                      SELECT id FROM raw_messages
                       WHERE partition = ps.p AND id > (SELECT pos FROM raw_cursor WHERE partition = ps.p AND grp = 0)
                       ORDER BY id LIMIT 10) m),
         moved AS (UPDATE raw_cursor r SET pos = x.mx FROM (SELECT p, max(id) AS mx FROM next GROUP BY p) x
                    WHERE r.partition = x.p AND r.grp = 0)
         SELECT count(*) FROM next";
    const RAW_REWIND10: &str = "UPDATE raw_cursor SET pos = 0
         WHERE grp = 0 AND partition IN (SELECT 'p' || (($1::int + k) % 10000) FROM generate_series(0, 9) k)";
    const QUEEN: &str =
        "SELECT count(*) FROM queen_pop('bench', 'g', batch => 100, partitions => 10, auto_ack => true)";
    let g = vec!["g".to_string()];
    for clients in client_counts() {
        reset(c, &g, 1);
        let raw = drive(clients, true, &|c: &mut Conn, k, i| {
            let start = ((k * 7919 + i * 104729) % 1000 * 10) as i32;
            let count = |rows: Vec<Row>| rows[0].get::<_, Option<i64>>(0).unwrap_or(0) as usize;
            let n = count(c.query_retried(RAW, &[&start]));
            if n > 0 {
                return n;
            }
            // Read to the end: from the start again (see raw_consume).
            c.query_retried(RAW_REWIND10, &[&start]);
            count(c.query_retried(RAW, &[&start]))
        });
        reset(c, &g, 1);
        let queen = with_profile(c, &format!("ordered, {clients} clients"), || {
            drive(clients, true, &|c: &mut Conn, _k, _i| c.count(QUEEN, &[]))
        });
        row("ordered: `partitions => 10` over 10 000 partitions", clients, &raw, &queen, None, 0.5);
    }
}

pub fn run(c: &mut Client, want: &dyn Fn(&str) -> bool) {
    println!("\n### Concurrent clients ({} s per run; messages/s)\n", seconds());
    println!("| workload | clients | raw SQL | queen | queen / raw | queen p50 / p99 ms | PgQ (/ raw) | target |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    if want("clients-push") {
        push_single(c);
        push_batch(c, 1);
        push_batch(c, 1000);
    }
    if want("clients-consume") {
        consume(c, true, AckWith::Jsonb);
        consume(c, false, AckWith::Rows);
        consume(c, false, AckWith::Lease);
        consume(c, false, AckWith::Auto);
    }
    if want("clients-fanout") {
        fan_out(c);
    }
    if want("clients-ordered") {
        ordered(c);
    }
}
