//! Everything at once, over real connections: producers pushing in transactions that stay open
//! a while or roll back, and consumers of two groups and queue mode that complete, fail, give
//! back, let leases expire and roll back, popping one to three partitions at a time and acking
//! in batches or one by one, all concurrently. At the end every message a
//! producer committed is, for each group, either processed exactly once (the consumer's write
//! and its `completed` ack commit together, semantics §6.5) or a dead letter; nothing rolled back is
//! ever seen (§6.1, §6.4, §6.5 together) — while maintenance runs all along, deleting finished
//! messages after a second and removing partitions empty for a second.

use postgres::Client;
use queen_integration_tests::TestDb;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How long the producers push: 6 s, or QUEEN_SOAK_SECONDS (a longer run by hand:
/// `QUEEN_SOAK_SECONDS=120 scripts/integration-tests --test soak`).
fn push_for() -> Duration {
    Duration::from_secs(std::env::var("QUEEN_SOAK_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(6))
}
const PARTITIONS: u64 = 12;

fn produce(mut c: Client, n: u64, stop: Arc<AtomicBool>, committed: Arc<Mutex<HashSet<String>>>) {
    let mut rng = SmallRng::seed_from_u64(n);
    let mut k = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut tx = c.transaction().unwrap();
        let mut ids = Vec::new();
        for _ in 0..rng.random_range(1..=5) {
            k += 1;
            let id = format!("{n}-{k}");
            let partition = format!("p{}", rng.random_range(0..PARTITIONS));
            // The producer's own write, in the push's transaction: which message carries which id.
            tx.execute(
                "INSERT INTO pushed SELECT message_id, $3 FROM queen_push('soak', $1, $2)",
                &[&json!({ "id": id }), &partition, &id],
            )
            .unwrap();
            ids.push(id);
            if rng.random_bool(0.1) {
                // A transaction that stays open while others commit after it.
                thread::sleep(Duration::from_millis(rng.random_range(0..200u64)));
            }
        }
        if rng.random_bool(0.1) {
            tx.rollback().unwrap();
        } else {
            tx.commit().unwrap();
            committed.lock().unwrap().extend(ids);
        }
    }
}

fn consume(mut c: Client, group: Option<&'static str>, n: u64, stop: Arc<AtomicBool>) {
    let mut rng = SmallRng::seed_from_u64(100 + n);
    let grp = group.unwrap_or("");
    while !stop.load(Ordering::Relaxed) {
        let mut tx = c.transaction().unwrap();
        let batch: i32 = rng.random_range(1..=10);
        let partitions: i32 = rng.random_range(1..=3);
        let rows: Vec<Value> = tx
            .query(
                "SELECT to_jsonb(m) FROM queen_pop('soak', $1, batch => $2, partitions => $3, wait_ms => 200) m",
                &[&group, &batch, &partitions],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut acks = Vec::new();
        for mut m in rows {
            let status = match rng.random_range(0..20) {
                0..=15 => "completed",
                16 | 17 => "failed",
                18 => "retry",
                _ => continue, // never acked: its lease expires
            };
            m["_status"] = json!(status);
            m["_error"] = json!("soak");
            acks.push(m);
        }
        if !acks.is_empty() {
            // One batch ack, or one call per message.
            let results: Vec<(i32, bool)> = if rng.random_bool(0.5) {
                tx.query("SELECT idx, success FROM queen_ack($1)", &[&Value::Array(acks.clone())])
                    .unwrap()
                    .iter()
                    .map(|r| (r.get(0), r.get(1)))
                    .collect()
            } else {
                let mut results = Vec::new();
                for (i, a) in acks.iter().enumerate() {
                    let ok: bool = tx
                        .query_one(
                            "SELECT success FROM queen_ack($1::text::uuid, $2::text::uuid, $3, 'soak', $4)",
                            &[&a["message_id"].as_str(), &a["lease_id"].as_str(), &a["_status"].as_str(), &group],
                        )
                        .unwrap()
                        .get(0);
                    results.push((i as i32, ok));
                }
                results
            };
            // The business write of each completion that was applied, in the same transaction.
            for (idx, ok) in results {
                let a = &acks[idx as usize];
                if ok && a["_status"] == "completed" {
                    let id = a["payload"]["id"].as_str().unwrap();
                    tx.execute("INSERT INTO processed VALUES ($1, $2)", &[&grp, &id]).unwrap();
                }
            }
        }
        if rng.random_bool(0.1) {
            tx.rollback().unwrap();
        } else {
            tx.commit().unwrap();
        }
    }
}

/// Maintenance passes all along: counts, completed retention (finished messages go after a
/// second), and removal of partitions empty and untouched for a second.
/// Returns how many messages completed retention deleted.
fn maintain(mut c: Client, stop: Arc<AtomicBool>) -> i64 {
    c.batch_execute("SET queen.partition_idle_seconds = 1").unwrap();
    let mut deleted = 0;
    while !stop.load(Ordering::Relaxed) {
        let report: Value = c.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
        deleted += report["completed_retention_deleted"].as_i64().unwrap_or(0);
        thread::sleep(Duration::from_millis(100));
    }
    deleted
}

#[test]
fn concurrent_producers_and_consumers_lose_nothing_and_apply_each_message_once() {
    let db = TestDb::new("soak");
    let mut c = db.connect();
    c.batch_execute("CREATE TABLE processed (grp text, id text); CREATE TABLE pushed (message_id uuid, id text)")
        .unwrap();
    c.execute(
        "SELECT queen_configure('soak', '{\"leaseTime\": 1, \"retryLimit\": 2, \"retryDelay\": 0,
                                        \"completedRetentionSeconds\": 1}')",
        &[],
    )
    .unwrap();
    let groups: [Option<&'static str>; 3] = [Some("g1"), Some("g2"), None];
    // Subscribe every group before the first push (mode 'all' would cover it anyway).
    for g in groups {
        c.query("SELECT * FROM queen_pop('soak', $1)", &[&g]).unwrap();
    }
    let committed = Arc::new(Mutex::new(HashSet::new()));
    let stop_push = Arc::new(AtomicBool::new(false));
    let stop_pop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for n in 0..3 {
        let (cl, stop, com) = (db.connect(), stop_push.clone(), committed.clone());
        threads.push(thread::spawn(move || produce(cl, n, stop, com)));
    }
    for (i, g) in groups.into_iter().enumerate() {
        for n in 0..2 {
            let (cl, stop) = (db.connect(), stop_pop.clone());
            threads.push(thread::spawn(move || consume(cl, g, (i * 2 + n) as u64, stop)));
        }
    }
    let (cl, stop) = (db.connect(), stop_pop.clone());
    let maintenance = thread::spawn(move || maintain(cl, stop));
    thread::sleep(push_for());
    stop_push.store(true, Ordering::Relaxed);
    // Drain: until every committed message is processed or dead for every group (leases that
    // expire bring messages back), or 90 s; the checks below say what is missing.
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline {
        let outstanding: i64 = c
            .query_one(
                "SELECT count(*) FROM pushed p CROSS JOIN (VALUES ('g1'), ('g2'), ('')) AS g(grp)
                  WHERE NOT EXISTS (SELECT 1 FROM processed x WHERE x.grp = g.grp AND x.id = p.id)
                    AND NOT EXISTS (SELECT 1 FROM queen.dead_letters_view d
                                     WHERE d.message_id = p.message_id AND coalesce(d.consumer_group, '') = g.grp)",
                &[],
            )
            .unwrap()
            .get(0);
        if outstanding == 0 {
            break;
        }
        thread::sleep(Duration::from_millis(200));
    }
    stop_pop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let deleted = maintenance.join().unwrap();
    assert!(deleted > 0, "completed retention deleted finished messages while the test ran");
    let committed = committed.lock().unwrap().clone();
    assert!(committed.len() > 500, "the producers committed {} messages", committed.len());
    let recorded: HashSet<String> = c.query("SELECT id FROM pushed", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(recorded, committed, "the producers' own writes committed with their pushes");
    for g in groups {
        let grp = g.unwrap_or("");
        let mut processed: HashMap<String, i64> = HashMap::new();
        for r in c.query("SELECT id, count(*) FROM processed WHERE grp = $1 GROUP BY id", &[&grp]).unwrap() {
            processed.insert(r.get(0), r.get(1));
        }
        // By message id: completed retention deletes dead-lettered messages too (they are
        // finished), and the view then has no payload for them.
        let dead: HashSet<String> = c
            .query(
                "SELECT p.id FROM queen.dead_letters_view d JOIN pushed p USING (message_id)
                  WHERE d.queue = 'soak' AND d.consumer_group IS NOT DISTINCT FROM $1",
                &[&g],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let twice: Vec<&String> = processed.iter().filter(|(_, n)| **n > 1).map(|(id, _)| id).collect();
        let lost: Vec<&String> =
            committed.iter().filter(|id| !processed.contains_key(*id) && !dead.contains(*id)).collect();
        let unknown: Vec<&String> = processed.keys().chain(dead.iter()).filter(|id| !committed.contains(*id)).collect();
        let both: Vec<&String> = processed.keys().filter(|id| dead.contains(*id)).collect();
        assert!(twice.is_empty(), "{g:?}: applied twice: {twice:?}");
        assert!(
            lost.is_empty(),
            "{g:?}: {} committed messages neither processed nor dead: {:?}",
            lost.len(),
            &lost[..lost.len().min(10)]
        );
        assert!(unknown.is_empty(), "{g:?}: rolled-back pushes seen: {unknown:?}");
        assert!(both.is_empty(), "{g:?}: processed and dead-lettered: {both:?}");
        assert!(dead.len() < committed.len() / 10, "{g:?}: {} dead letters of {}", dead.len(), committed.len());
    }
}
