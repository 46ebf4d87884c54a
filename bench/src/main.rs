//! queen's benchmarks. Each scenario runs queen and a raw-SQL baseline that does the same job
//! on the same server (a queue must at least write the message and move a cursor), and
//! prints throughput, latency percentiles and the ratio queen/raw.
//!
//! Usage: queen-bench [scenario ...]   (default: all). Connection from QUEEN_BENCH_HOST,
//! QUEEN_BENCH_PORT (scripts/bench starts a server).

mod clients;
mod gateway;

use postgres::{Client, NoTls};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn connect() -> Client {
    let host = std::env::var("QUEEN_BENCH_HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let port = std::env::var("QUEEN_BENCH_PORT").unwrap_or_else(|_| "28818".into());
    Client::connect(&format!("host={host} port={port} user=postgres dbname=bench"), NoTls)
        .expect("connect to the bench server")
}

/// Latencies of one run.
struct Run {
    ops: usize,
    units: usize,
    total: Duration,
    lat: Vec<Duration>,
}

impl Run {
    fn per_sec(&self) -> f64 {
        self.units as f64 / self.total.as_secs_f64()
    }
    /// Time one call, which returns how many units it handled.
    fn time(&mut self, call: impl FnOnce() -> usize) {
        let t = Instant::now();
        self.units += call();
        let d = t.elapsed();
        self.total += d;
        self.lat.push(d);
    }
    fn pct(&self, p: f64) -> f64 {
        let mut v = self.lat.clone();
        v.sort();
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        v[i].as_secs_f64() * 1000.0
    }
}

/// Time `ops` calls of raw SQL and of queen, alternating (raw, queen, raw, queen, ...) so
/// that both see the same server and disk conditions: a commit's fsync on this machine varies
/// by ±50% over minutes, which made back-to-back runs disagree by up to 0.3× in the ratio.
/// Each call returns how many units (messages) it handled; throughput is units over the sum
/// of the calls' latencies. Returns (queen, raw).
fn time_pair(
    c: &mut Client,
    ops: usize,
    mut raw: impl FnMut(&mut Client, usize) -> usize,
    mut queen: impl FnMut(&mut Client, usize) -> usize,
) -> (Run, Run) {
    let new_run = || Run { ops, units: 0, total: Duration::ZERO, lat: Vec::with_capacity(ops) };
    let (mut raw_run, mut queen_run) = (new_run(), new_run());
    for i in 0..ops {
        raw_run.time(|| raw(c, i));
        queen_run.time(|| queen(c, i));
    }
    (queen_run, raw_run)
}

fn report(name: &str, unit: &str, queen: &Run, raw: &Run, target: Option<f64>) {
    let ratio = queen.per_sec() / raw.per_sec();
    let verdict = match target {
        Some(t) if ratio >= t => format!("target ≥ {t}×: met"),
        Some(t) => format!("target ≥ {t}×: NOT met"),
        None => String::new(),
    };
    println!(
        "| {name} | {:.0} {unit}/s | {:.2} / {:.2} ms | {:.0} {unit}/s | {:.2} / {:.2} ms | **{ratio:.2}×** | {verdict} |",
        queen.per_sec(),
        queen.pct(0.5),
        queen.pct(0.99),
        raw.per_sec(),
        raw.pct(0.5),
        raw.pct(0.99),
    );
    let _ = (queen.ops, raw.ops);
}

fn header(title: &str) {
    println!("\n### {title}\n");
    println!("| scenario | queen | queen p50 / p99 per call | raw SQL | raw p50 / p99 per call | queen / raw | |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
}

fn setup_raw(c: &mut Client) {
    c.batch_execute(
        "DROP TABLE IF EXISTS raw_messages, raw_cursor;
         CREATE TABLE raw_messages (id bigserial PRIMARY KEY, partition text NOT NULL,
                                    payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
         CREATE INDEX ON raw_messages (partition, id);
         CREATE TABLE raw_cursor (partition text PRIMARY KEY, pos bigint NOT NULL) WITH (fillfactor = 50);",
    )
    .unwrap();
}

fn fresh(c: &mut Client) {
    c.batch_execute("DROP EXTENSION IF EXISTS queen CASCADE; CREATE EXTENSION queen;").unwrap();
    setup_raw(c);
}

fn payload(i: usize) -> Value {
    json!({"order": i, "customer": format!("c{}", i % 97), "amount": 12.5})
}

/// One push per transaction, vs a raw single-row INSERT.
fn push_single(c: &mut Client) {
    fresh(c);
    let n = 3000;
    let q = c.prepare("SELECT message_id FROM queen_push('bench', $1, $2)").unwrap();
    let r = c.prepare("INSERT INTO raw_messages (partition, payload) VALUES ($1, $2)").unwrap();
    // Warm up plans and caches.
    for i in 0..100 {
        c.query(&q, &[&payload(i), &format!("p{}", i % 10)]).unwrap();
        c.execute(&r, &[&format!("p{}", i % 10), &payload(i)]).unwrap();
    }
    let (queen, raw) = time_pair(
        c,
        n,
        |c, i| {
            c.execute(&r, &[&format!("p{}", i % 10), &payload(i)]).unwrap();
            1
        },
        |c, i| {
            c.query(&q, &[&payload(i), &format!("p{}", i % 10)]).unwrap();
            1
        },
    );
    report("push, 1 message per transaction", "msg", &queen, &raw, Some(0.9));
}

/// 100 messages per transaction, vs a raw 100-row INSERT.
fn push_batch(c: &mut Client) {
    fresh(c);
    let n = 300;
    let items = |k: usize| -> Value {
        Value::Array(
            (0..100)
                .map(
                    |j| json!({"queue": "bench", "partition": format!("p{}", j % 10), "payload": payload(k * 100 + j)}),
                )
                .collect(),
        )
    };
    let q = c.prepare("SELECT count(*) FROM queen_push($1::jsonb)").unwrap();
    let r = c
        .prepare(
            "INSERT INTO raw_messages (partition, payload)
             SELECT e->>'partition', e->'payload' FROM jsonb_array_elements($1::jsonb) e",
        )
        .unwrap();
    for k in 0..10 {
        c.query(&q, &[&items(k)]).unwrap();
        c.execute(&r, &[&items(k)]).unwrap();
    }
    let batches: Vec<Value> = (0..n).map(items).collect();
    let (queen, raw) = time_pair(
        c,
        n,
        |c, i| {
            c.execute(&r, &[&batches[i]]).unwrap();
            100
        },
        |c, i| {
            c.query(&q, &[&batches[i]]).unwrap();
            100
        },
    );
    report("push, batches of 100 messages", "msg", &queen, &raw, Some(0.7));
}

/// Pops from a queue with `partitions` partitions of which 10 hold messages, vs raw SQL that
/// reads the next messages after a cursor and moves the cursor (and is told which partition).
fn pop_partitions(c: &mut Client, partitions: usize, batch: i32) {
    fresh(c);
    // Every partition exists and once had a message.
    let mut k = 0;
    while k < partitions {
        let chunk: Vec<Value> = (k..(k + 1000).min(partitions))
            .map(|i| json!({"queue": "bench", "partition": format!("p{i}"), "payload": payload(i)}))
            .collect();
        c.query("SELECT count(*) FROM queen_push($1::jsonb)", &[&Value::Array(chunk)]).unwrap();
        k += 1000;
    }
    c.batch_execute(&format!(
        "INSERT INTO raw_messages (partition, payload) SELECT 'p' || i, '{{}}' FROM generate_series(0, {partitions} - 1) i;
         INSERT INTO raw_cursor SELECT 'p' || i, (SELECT max(id) FROM raw_messages) FROM generate_series(0, {partitions} - 1) i;"
    ))
    .unwrap();
    vacuum(c);
    // The group subscribes now: the old messages are behind it.
    c.query("SELECT * FROM queen_pop('bench', 'g', subscription_mode => 'new')", &[]).unwrap();
    // Then 10 partitions get messages.
    let per = 400 * batch as usize / 10;
    let mut pushed = 0;
    while pushed < per * 10 {
        let chunk: Vec<Value> = (0..1000.min(per * 10 - pushed))
            .map(|j| json!({"queue": "bench", "partition": format!("p{}", (pushed + j) % 10 * (partitions / 10)), "payload": payload(j)}))
            .collect();
        c.query("SELECT count(*) FROM queen_push($1::jsonb)", &[&Value::Array(chunk.clone())]).unwrap();
        c.execute(
            "INSERT INTO raw_messages (partition, payload) SELECT e->>'partition', e->'payload' FROM jsonb_array_elements($1::jsonb) e",
            &[&Value::Array(chunk)],
        )
        .unwrap();
        pushed += 1000.min(per * 10 - pushed);
    }
    vacuum(c);
    let ops = 400;
    let q = c.prepare("SELECT * FROM queen_pop('bench', 'g', batch => $1, auto_ack => true)").unwrap();
    let r = c
        .prepare(
            "WITH next AS (
                 SELECT id, payload FROM raw_messages
                  WHERE partition = $1 AND id > (SELECT pos FROM raw_cursor WHERE partition = $1)
                  ORDER BY id LIMIT $2),
             moved AS (
                 UPDATE raw_cursor SET pos = (SELECT max(id) FROM next)
                  WHERE partition = $1 AND EXISTS (SELECT 1 FROM next))
             SELECT * FROM next",
        )
        .unwrap();
    let limit = batch as i64;
    let (queen, raw) = time_pair(
        c,
        ops,
        |c, i| c.query(&r, &[&format!("p{}", i % 10 * (partitions / 10)), &limit]).unwrap().len(),
        |c, _| c.query(&q, &[&batch]).unwrap().len(),
    );
    assert!(queen.units > 0 && raw.units > 0);
    report(
        &format!("pop (auto_ack, batch {batch}), {partitions} partitions, 10 with messages"),
        "msg",
        &queen,
        &raw,
        None,
    );
}

/// `VACUUM ANALYZE`, then `VACUUM` again until the visibility map covers every page of queen's
/// messages and the raw table (at most 5 s): a pass that ran while another transaction (the
/// maintenance worker's, say) was open leaves pages unmarked, and reads of those check each
/// row's visibility on the heap (queen's index-only read of its log fetches every row): runs
/// differed by whether that pass had been lucky.
fn vacuum(c: &mut Client) {
    c.batch_execute("VACUUM ANALYZE").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let marked: bool = c
            .query_one(
                "SELECT bool_and(relallvisible >= relpages) FROM pg_class
                  WHERE oid IN ('queen.messages'::regclass, 'raw_messages'::regclass)",
                &[],
            )
            .unwrap()
            .get(0);
        if marked {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
        c.batch_execute("VACUUM queen.messages, raw_messages").unwrap();
    }
}

/// Fill a queue with `n` messages over `parts` partitions (and the raw table likewise).
fn fill(c: &mut Client, n: usize, parts: usize) {
    let mut k = 0;
    while k < n {
        let chunk: Vec<Value> = (k..(k + 1000).min(n))
            .map(|i| json!({"queue": "bench", "partition": format!("p{}", i % parts), "payload": payload(i)}))
            .collect();
        c.query("SELECT count(*) FROM queen_push($1::jsonb)", &[&Value::Array(chunk.clone())]).unwrap();
        c.execute(
            "INSERT INTO raw_messages (partition, payload) SELECT e->>'partition', e->'payload' FROM jsonb_array_elements($1::jsonb) e",
            &[&Value::Array(chunk)],
        )
        .unwrap();
        k += 1000;
    }
    vacuum(c);
}

/// The raw baseline of a consumer: next `limit` messages of a partition after its cursor, and
/// the cursor moved, in one statement.
const RAW_NEXT: &str = "WITH next AS (
         SELECT id, payload FROM raw_messages
          WHERE partition = $1 AND id > (SELECT pos FROM raw_cursor WHERE partition = $1 AND grp = $3)
          ORDER BY id LIMIT $2),
     moved AS (
         UPDATE raw_cursor SET pos = (SELECT max(id) FROM next)
          WHERE partition = $1 AND grp = $3 AND EXISTS (SELECT 1 FROM next))
     SELECT * FROM next";

fn raw_cursors(c: &mut Client, parts: usize, groups: usize) {
    c.batch_execute(&format!(
        "DROP TABLE raw_cursor;
         CREATE TABLE raw_cursor (partition text, grp int, pos bigint NOT NULL, PRIMARY KEY (partition, grp)) WITH (fillfactor = 50);
         INSERT INTO raw_cursor SELECT 'p' || i, g, 0 FROM generate_series(0, {parts} - 1) i, generate_series(0, {groups} - 1) g;"
    ))
    .unwrap();
}

/// How a pop + ack scenario acknowledges its 100 messages.
#[derive(Clone, Copy, PartialEq)]
enum AckBy {
    /// One batch ack of the popped rows as they came (`to_jsonb(m)`, payloads included).
    Rows,
    /// One batch ack naming each message by id and lease, as Queen's clients send it.
    Ids,
    /// One `queen_ack(message_id, lease_id)` call per message.
    Single,
}

/// Pop 100 + ack them, in one transaction, vs the raw next-100-and-move-the-cursor.
fn pop_ack(c: &mut Client, by: AckBy) {
    fresh(c);
    let parts = 10;
    let ops = if by == AckBy::Single { 150 } else { 300 };
    fill(c, ops * 100 + 2000, parts);
    raw_cursors(c, parts, 1);
    let q = c.prepare("SELECT to_jsonb(m) FROM queen_pop('bench', 'g', batch => 100) m").unwrap();
    let a = c.prepare("SELECT count(*) FILTER (WHERE success) FROM queen_ack($1::jsonb)").unwrap();
    let a1 =
        c.prepare("SELECT success FROM queen_ack($1::text::uuid, $2::text::uuid, 'completed', NULL, 'g')").unwrap();
    let r = c.prepare(RAW_NEXT).unwrap();
    let raw = |c: &mut Client, i: usize| c.query(&r, &[&format!("p{}", i % parts), &100i64, &0i32]).unwrap().len();
    let (queen, raw) = time_pair(c, ops, raw, |c, _| {
        let mut tx = c.transaction().unwrap();
        let rows: Vec<Value> = tx.query(&q, &[]).unwrap().iter().map(|r| r.get(0)).collect();
        let n = rows.len();
        let acked: usize = match by {
            AckBy::Single => rows
                .iter()
                .filter(|m| {
                    let ids = [m["message_id"].as_str(), m["lease_id"].as_str()];
                    tx.query_one(&a1, &[&ids[0], &ids[1]]).unwrap().get::<_, bool>(0)
                })
                .count(),
            AckBy::Ids => {
                let ids = rows
                    .iter()
                    .map(|m| json!({"messageId": m["message_id"], "leaseId": m["lease_id"], "consumerGroup": "g"}))
                    .collect();
                tx.query_one(&a, &[&Value::Array(ids)]).unwrap().get::<_, i64>(0) as usize
            }
            AckBy::Rows => tx.query_one(&a, &[&Value::Array(rows)]).unwrap().get::<_, i64>(0) as usize,
        };
        assert_eq!(acked, n, "every ack succeeded");
        tx.commit().unwrap();
        n
    });
    let name = match by {
        AckBy::Rows => "pop 100 + one batch ack of the popped rows, one transaction",
        AckBy::Ids => "pop 100 + one batch ack by ids, one transaction",
        AckBy::Single => "pop 100 + 100 single acks, one transaction",
    };
    report(name, "msg", &queen, &raw, Some(0.7));
}

/// Ten consumer groups each read every message (pop 100 + batch ack), vs ten raw cursors.
fn fan_out(c: &mut Client) {
    fresh(c);
    let parts = 10;
    let groups = 10;
    let n = 10_000;
    fill(c, n, parts);
    raw_cursors(c, parts, groups);
    let q = c.prepare("SELECT to_jsonb(m) FROM queen_pop('bench', $1, batch => 100) m").unwrap();
    let a = c.prepare("SELECT count(*) FILTER (WHERE success) FROM queen_ack($1::jsonb)").unwrap();
    let r = c.prepare(RAW_NEXT).unwrap();
    let ops = n / 100 * groups;
    let raw = |c: &mut Client, i: usize| {
        c.query(&r, &[&format!("p{}", (i / groups) % parts), &100i64, &((i % groups) as i32)]).unwrap().len()
    };
    let (queen, raw) = time_pair(c, ops, raw, |c, i| {
        let g = format!("g{}", i % groups);
        let mut tx = c.transaction().unwrap();
        let rows: Vec<Value> = tx.query(&q, &[&g]).unwrap().iter().map(|r| r.get(0)).collect();
        let n = rows.len();
        tx.query_one(&a, &[&Value::Array(rows)]).unwrap();
        tx.commit().unwrap();
        n
    });
    assert_eq!(queen.units, n * groups, "every group got every message");
    report("fan-out: 10 groups each read 10 000 messages (pop 100 + batch ack)", "msg", &queen, &raw, None);
}

/// Wake-up latency, on the server's clock (issue 23, item 6), over QUEEN_BENCH_WAKEUPS trials
/// (default 1 000) with the maintenance worker running (scripts/bench sets queen.databases):
/// one waiter in `queen_pop(wait_ms => 5000)`, one producer pushing one message per
/// transaction once the waiter sleeps (queen.waiting_pops shows it). Two figures per trial:
/// - alone: from the push's commit having finished — its backend idle again, the time
///   `pg_stat_activity.state_change` records after the commit is visible and queen's commit
///   callback has set the waiters' latches — to the pop's return (`clock_timestamp()` after
///   the function scan); what queen adds after the commit;
/// - end to end: from the message's `created_at` (its insert, inside the push) to the pop's
///   return; the push's own commit, its WAL flush included, is inside this one.
fn wake_up(c: &mut Client) {
    fresh(c);
    let trials: usize = std::env::var("QUEEN_BENCH_WAKEUPS").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let host = std::env::var("QUEEN_BENCH_HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let port = std::env::var("QUEEN_BENCH_PORT").unwrap_or_else(|_| "28818".into());
    let dsn = format!("host={host} port={port} user=postgres dbname=bench");
    let mut w = Client::connect(&dsn, NoTls).unwrap();
    let mut producer = Client::connect(&dsn, NoTls).unwrap();
    let ppid: i32 = producer.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let wpid: i32 = w.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    // The maintenance worker of the bench database: started again by the postmaster every 5 s
    // until the database exists (scripts/bench); waited for up to 30 s.
    let mut workers: i64 = 0;
    for _ in 0..300 {
        workers = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'queen maintenance' AND datname = 'bench'",
                &[],
            )
            .unwrap()
            .get(0);
        if workers > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (tx_go, rx_go) = std::sync::mpsc::channel::<()>();
    // (returned, created_at → return) on the server's clock, in microseconds since the epoch.
    let (tx_done, rx_done) = std::sync::mpsc::channel::<(f64, f64)>();
    let waiter = std::thread::spawn(move || {
        while rx_go.recv().is_ok() {
            let row = w
                .query_one(
                    "SELECT extract(epoch FROM clock_timestamp())::float8 * 1e6,
                            extract(epoch FROM clock_timestamp() - created_at)::float8 * 1e6
                       FROM queen_pop('wake', 'g', wait_ms => 5000, auto_ack => true)",
                    &[],
                )
                .unwrap();
            tx_done.send((row.get(0), row.get(1))).unwrap();
        }
    });
    let (mut alone, mut e2e) = (Vec::with_capacity(trials), Vec::with_capacity(trials));
    for _ in 0..trials {
        tx_go.send(()).unwrap();
        // Until the waiter sleeps: registered (queen.waiting_pops), its first look done, and
        // on its latch (wait event Extension).
        loop {
            let n: i64 = c
                .query_one(
                    "SELECT count(*) FROM queen.waiting_pops w JOIN pg_stat_activity a USING (pid)
                      WHERE pid = $1 AND a.wait_event_type = 'Extension'",
                    &[&wpid],
                )
                .unwrap()
                .get(0);
            if n > 0 {
                break;
            }
        }
        producer.batch_execute("BEGIN; SELECT queen_push('wake', '1'); COMMIT").unwrap();
        let (returned, end_to_end) = rx_done.recv().unwrap();
        let idle: f64 = c
            .query_one(
                "SELECT extract(epoch FROM state_change)::float8 * 1e6 FROM pg_stat_activity WHERE pid = $1",
                &[&ppid],
            )
            .unwrap()
            .get(0);
        alone.push(Duration::from_micros((returned - idle).max(0.0) as u64));
        e2e.push(Duration::from_micros(end_to_end.max(0.0) as u64));
    }
    drop(tx_go);
    waiter.join().unwrap();
    let run = |lat: Vec<Duration>| Run { ops: trials, units: trials, total: lat.iter().sum(), lat };
    let (alone, e2e) = (run(alone), run(e2e));
    let max = |r: &Run| r.lat.iter().max().copied().unwrap_or_default().as_secs_f64() * 1000.0;
    for (name, r) in
        [("alone: commit finished → waiting pop returns", &alone), ("end to end: insert → waiting pop returns", &e2e)]
    {
        println!(
            "| wake-up {name} | median {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} wake-ups, maintenance workers: {workers}) | | {} |",
            r.pct(0.5),
            r.pct(0.99),
            max(r),
            r.ops,
            if name.starts_with("alone") {
                format!("target < 2 ms median: {}", if r.pct(0.5) < 2.0 { "met" } else { "NOT met" })
            } else {
                String::new()
            }
        );
    }
    let queen = alone;

    // The baseline: a consumer polling raw SQL every 100 ms.
    let mut p = Client::connect(&dsn, NoTls).unwrap();
    let mut lat = Vec::with_capacity(50);
    let (tx_go, rx_go) = std::sync::mpsc::channel::<i64>();
    let (tx_done, rx_done) = std::sync::mpsc::channel::<Instant>();
    let poller = std::thread::spawn(move || {
        while let Ok(after) = rx_go.recv() {
            loop {
                let n: i64 = p.query_one("SELECT count(*) FROM raw_messages WHERE id > $1", &[&after]).unwrap().get(0);
                if n > 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            tx_done.send(Instant::now()).unwrap();
        }
    });
    for i in 0..50 {
        let max: i64 = c.query_one("SELECT coalesce(max(id), 0) FROM raw_messages", &[]).unwrap().get(0);
        tx_go.send(max).unwrap();
        // Push at a random point of the poller's cycle.
        std::thread::sleep(Duration::from_millis(10 + (i as u64 * 37) % 90));
        c.execute("INSERT INTO raw_messages (partition, payload) VALUES ('p', '1')", &[]).unwrap();
        let committed = Instant::now();
        lat.push(rx_done.recv().unwrap().saturating_duration_since(committed));
    }
    drop(tx_go);
    poller.join().unwrap();
    let raw = Run { ops: 50, units: 50, total: lat.iter().sum(), lat };
    println!(
        "| baseline: a consumer polling raw SQL every 100 ms (commit returned → poll sees it, client clock) | | median {:.1} ms, p99 {:.1} ms ({} trials) | |",
        raw.pct(0.5),
        raw.pct(0.99),
        raw.ops,
    );
    let _ = queen;
}

/// Retention under sustained load: messages pushed and consumed continuously, retention of a
/// few seconds, maintenance every second; the size of queen.messages and its indexes over time.
fn retention_size(c: &mut Client, seconds: u64) {
    fresh(c);
    c.execute("SELECT queen_configure('ret', '{\"retentionSeconds\": 5}')", &[]).unwrap();
    let size = |c: &mut Client| -> (i64, i64) {
        let r =
            c.query_one("SELECT pg_relation_size('queen.messages'), pg_indexes_size('queen.messages')", &[]).unwrap();
        (r.get(0), r.get(1))
    };
    let t0 = Instant::now();
    let mut samples = vec![];
    let mut pushed = 0usize;
    let mut last_maintain = Instant::now();
    let mut next_sample = Duration::from_secs(0);
    while t0.elapsed() < Duration::from_secs(seconds) {
        let items: Vec<Value> = (0..100)
            .map(|j| json!({"queue": "ret", "partition": format!("p{}", j % 10), "payload": payload(pushed + j)}))
            .collect();
        c.query("SELECT count(*) FROM queen_push($1::jsonb)", &[&Value::Array(items)]).unwrap();
        pushed += 100;
        c.query("SELECT count(*) FROM queen_pop('ret', 'g', batch => 100, partitions => 10, auto_ack => true)", &[])
            .unwrap();
        if last_maintain.elapsed() >= Duration::from_secs(1) {
            c.query_one("SELECT queen_maintain()", &[]).unwrap();
            last_maintain = Instant::now();
        }
        if t0.elapsed() >= next_sample {
            let (heap, idx) = size(c);
            let rows: i64 = c.query_one("SELECT count(*) FROM queen.messages", &[]).unwrap().get(0);
            samples.push((t0.elapsed().as_secs(), heap, idx, rows));
            next_sample += Duration::from_secs(seconds / 6);
        }
    }
    if samples.last().map(|s| s.0) != Some(t0.elapsed().as_secs()) {
        let (heap, idx) = size(c);
        let rows: i64 = c.query_one("SELECT count(*) FROM queen.messages", &[]).unwrap().get(0);
        samples.push((t0.elapsed().as_secs(), heap, idx, rows));
    }
    println!("\n{pushed} messages pushed in {seconds} s (retentionSeconds = 5, queen_maintain() every second):\n");
    println!("| after | messages stored | table | indexes |");
    println!("| --- | --- | --- | --- |");
    for (t, heap, idx, rows) in samples {
        println!("| {t} s | {rows} | {:.1} MB | {:.1} MB |", heap as f64 / 1e6, idx as f64 / 1e6);
    }
    let per_index: Vec<String> = c
        .query(
            "SELECT indexrelid::regclass::text || ' ' || round(pg_relation_size(indexrelid) / 1e6, 1) || ' MB'
               FROM pg_index WHERE indrelid = 'queen.messages'::regclass ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    println!("\nIndexes at the end: {}", per_index.join(", "));
}

/// The bookkeeping tables under sustained load (SPEC-independent, issue 10): messages pushed
/// over 1 000 partitions and consumed continuously by a leasing group (pop 100 over up to 10
/// partitions + one batch ack), an auto_ack group and queue mode, with a few acks failed and
/// some leases left to expire, retention of 5 s and maintenance every second. Hints, discovery
/// points, cursor rows (which carry the leases) and subscriptions must stay bounded by
/// partitions × groups, whatever the number of pops.
fn bookkeeping(c: &mut Client, seconds: u64) {
    fresh(c);
    c.execute("SELECT queen_configure('bk', '{\"retentionSeconds\": 5, \"retryDelay\": 0, \"leaseTime\": 1}')", &[])
        .unwrap();
    let tables = ["ready", "discovery", "cursors", "subscriptions", "dead_letters"];
    let sample = |c: &mut Client| -> Vec<(i64, i64)> {
        tables
            .iter()
            .map(|t| {
                let r = c
                    .query_one(&format!("SELECT count(*), pg_total_relation_size('queen.{t}') FROM queen.{t}"), &[])
                    .unwrap();
                (r.get(0), r.get(1))
            })
            .collect()
    };
    let t0 = Instant::now();
    let (mut pushed, mut pops, mut i) = (0usize, 0usize, 0usize);
    let mut samples = vec![];
    let mut last_maintain = Instant::now();
    let mut next_sample = Duration::from_secs(0);
    let ack = "SELECT count(*) FROM queen_ack(coalesce((SELECT jsonb_agg(jsonb_build_object(
                   'messageId', m.message_id, 'leaseId', m.lease_id, 'consumerGroup', 'g',
                   'status', CASE WHEN $1 AND m.attempt = 1 THEN 'failed' ELSE 'completed' END))
                 FROM queen_pop('bk', 'g', batch => 100, partitions => 10) m), '[]'))";
    while t0.elapsed() < Duration::from_secs(seconds) {
        i += 1;
        let items: Vec<Value> = (0..100)
            .map(|j| json!({"queue": "bk", "partition": format!("p{}", (i * 37 + j * 11) % 1000), "payload": payload(pushed + j)}))
            .collect();
        c.query("SELECT count(*) FROM queen_push($1::jsonb)", &[&Value::Array(items)]).unwrap();
        pushed += 100;
        if i % 50 == 0 {
            // A lease left to expire (leaseTime 1 s): the next pop after it settles it.
            c.query("SELECT count(*) FROM queen_pop('bk', 'g', batch => 100)", &[]).unwrap();
        } else {
            c.query(ack, &[&(i % 10 == 0)]).unwrap();
        }
        c.query("SELECT count(*) FROM queen_pop('bk', 'h', batch => 100, partitions => 10, auto_ack => true)", &[])
            .unwrap();
        c.query("SELECT count(*) FROM queen_pop('bk', batch => 100, partitions => 10, auto_ack => true)", &[]).unwrap();
        pops += 3;
        if last_maintain.elapsed() >= Duration::from_secs(1) {
            c.query_one("SELECT queen_maintain()", &[]).unwrap();
            last_maintain = Instant::now();
        }
        if t0.elapsed() >= next_sample {
            samples.push((t0.elapsed().as_secs(), pops, sample(c)));
            next_sample += Duration::from_secs(seconds / 6);
        }
    }
    if samples.last().map(|s| s.0) != Some(t0.elapsed().as_secs()) {
        samples.push((t0.elapsed().as_secs(), pops, sample(c)));
    }
    println!(
        "\n{pushed} messages pushed over 1 000 partitions in {seconds} s, {pops} pops by two groups and queue mode"
    );
    println!("(retentionSeconds = 5, leaseTime = 1, one ack in ten fails, one pop in fifty left to expire):\n");
    println!("| after | pops | {} |", tables.map(|t| format!("queen.{t} rows / size")).join(" | "));
    println!("| --- | ---: |{}", " ---: |".repeat(tables.len()));
    for (t, pops, v) in samples {
        let cells: Vec<String> = v.iter().map(|(n, b)| format!("{n} / {:.2} MB", *b as f64 / 1e6)).collect();
        println!("| {t} s | {pops} | {} |", cells.join(" | "));
    }
}

/// What the privilege check costs (semantics §11, issue 11): the same calls, interleaved, by the
/// superuser (who is never checked) and by an ordinary role granted the queue (checked against
/// its cached grants on every call). Both run the functions with their fixed search_path and
/// as the extension's owner; only the check differs.
fn privilege_check(c: &mut Client) {
    fresh(c);
    c.batch_execute(
        "DROP ROLE IF EXISTS bench_app; CREATE ROLE bench_app LOGIN;
         SELECT queen_grant('bench', 'bench_app', ARRAY['push', 'pop']);",
    )
    .unwrap();
    let host = std::env::var("QUEEN_BENCH_HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let port = std::env::var("QUEEN_BENCH_PORT").unwrap_or_else(|_| "28818".into());
    let mut app = Client::connect(&format!("host={host} port={port} user=bench_app dbname=bench"), NoTls)
        .expect("connect as bench_app");
    let n = 3000;
    let new_run = || Run { ops: n, units: 0, total: Duration::ZERO, lat: Vec::with_capacity(n) };
    let push = "SELECT message_id FROM queen_push('bench', $1, 'p')";
    let pop = "SELECT count(*) FROM queen_pop('bench', 'g', auto_ack => true)";
    let mut rows = Vec::new();
    for (name, sql, with_payload) in [("push, 1 per transaction", push, true), ("pop 1, auto_ack", pop, false)] {
        let (qs, qa) = (c.prepare(sql).unwrap(), app.prepare(sql).unwrap());
        let call = |cl: &mut Client, st: &postgres::Statement, i: usize| {
            if with_payload {
                cl.query(st, &[&payload(i)]).unwrap();
            } else {
                cl.query(st, &[]).unwrap();
            }
            1
        };
        for i in 0..100 {
            call(c, &qs, i);
            call(&mut app, &qa, i);
        }
        let (mut su, mut role) = (new_run(), new_run());
        for i in 0..n {
            su.time(|| call(c, &qs, i));
            role.time(|| call(&mut app, &qa, i));
        }
        rows.push((name, su, role));
    }
    println!("\n### Privilege check (one client, the same calls interleaved)\n");
    println!("| call | superuser p50 / p99 ms | granted role p50 / p99 ms | role − superuser, median |");
    println!("| --- | --- | --- | --- |");
    for (name, su, role) in rows {
        println!(
            "| {name} | {:.3} / {:.3} | {:.3} / {:.3} | {:+.1} µs |",
            su.pct(0.5),
            su.pct(0.99),
            role.pct(0.5),
            role.pct(0.99),
            (role.pct(0.5) - su.pct(0.5)) * 1000.0
        );
    }
    drop(app);
    c.batch_execute("DROP EXTENSION queen CASCADE; DROP ROLE bench_app; CREATE EXTENSION queen;").unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let want = |s: &str| args.is_empty() || args.iter().any(|a| s.starts_with(a.as_str()));
    let mut c = connect();
    let version: String = c.query_one("SELECT version()", &[]).unwrap().get(0);
    println!("PostgreSQL: {version}");
    if want("push") {
        header("Push (one client, synchronous_commit on)");
        push_single(&mut c);
        push_batch(&mut c);
    }
    if want("pop") {
        header("Pop (one client; raw SQL is told which partition to read)");
        for n in [10usize, 10_000, 100_000] {
            pop_partitions(&mut c, n, 1);
        }
        pop_partitions(&mut c, 10_000, 100);
    }
    if want("wake") {
        println!("\n### Waiting pops (one waiter; latency from the push's commit returning to the pop returning)\n");
        println!("| scenario | queen | baseline | |");
        println!("| --- | --- | --- | --- |");
        wake_up(&mut c);
    }
    if want("retention") {
        println!("\n### Retention under sustained load");
        let secs = std::env::var("QUEEN_BENCH_RETENTION_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
        retention_size(&mut c, secs);
    }
    if want("privileges") {
        privilege_check(&mut c);
    }
    if want("bookkeeping") {
        println!("\n### Bookkeeping tables under sustained load");
        let secs = std::env::var("QUEEN_BENCH_BOOKKEEPING_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
        bookkeeping(&mut c, secs);
    }
    if args.is_empty() || args.iter().any(|a| a.starts_with("clients")) {
        clients::run(&mut c, &want);
    }
    if args.iter().any(|a| a == "gateway") {
        gateway::run(&mut c);
    }
    if want("ack") {
        header("Pop + ack (one client; raw SQL reads the next 100 after a cursor and moves it)");
        pop_ack(&mut c, AckBy::Rows);
        pop_ack(&mut c, AckBy::Ids);
        pop_ack(&mut c, AckBy::Single);
        fan_out(&mut c);
    }
}
