//! semantics §6.6: a crash of the server (kill -9 of the postmaster) loses no committed push, ack,
//! cursor move or dead letter. This test runs a cluster of its own (scripts/cluster), since it
//! kills it.

use postgres::{Client, NoTls};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn script(args: &[&str]) -> String {
    let out = Command::new(repo().join("scripts").join(args[0])).args(&args[1..]).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn connect(dir: &str, port: u16) -> Client {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match Client::connect(&format!("host={dir} port={port} user=postgres dbname=postgres"), NoTls) {
            Ok(c) => return c,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("cannot connect after restart: {e}"),
        }
    }
}

#[test]
fn a_crash_loses_nothing_committed() {
    let port: u16 = std::env::var("QUEEN_TEST_PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(28816) + 5;
    let dir = script(&["state-dir", "itest-crash-cluster"]);
    let _ = Command::new(repo().join("scripts/cluster")).args(["stop", &dir]).output();
    let _ = std::fs::remove_dir_all(format!("{dir}/data"));
    script(&["cluster", "start", &dir, &port.to_string(), "preload"]);

    let mut c = connect(&dir, port);
    c.batch_execute("CREATE EXTENSION queen").unwrap();
    c.execute("SELECT queen_configure('q', '{\"retryLimit\": 0, \"retryDelay\": 0}')", &[]).unwrap();
    for i in 0..10 {
        c.execute("SELECT queen_push('q', $1, 'p')", &[&json!(i)]).unwrap();
    }
    // Committed: 3 completed, then 1 dead letter (retryLimit 0: the first failure files it).
    let rows: Vec<Value> = c
        .query("SELECT to_jsonb(m) FROM queen_pop('q', 'g', batch => 4) m", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut acks: Vec<Value> = rows.clone();
    for (i, a) in acks.iter_mut().enumerate() {
        a["_status"] = json!(if i == 3 { "failed" } else { "completed" });
        a["_error"] = json!("broken");
    }
    let ok: Vec<bool> = c
        .query("SELECT success FROM queen_ack($1)", &[&Value::Array(acks)])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ok, vec![true; 4]);
    // Uncommitted work at the moment of the crash: must not survive.
    let mut open = connect(&dir, port);
    open.batch_execute("BEGIN").unwrap();
    open.execute("SELECT queen_push('q', '\"uncommitted\"', 'p')", &[]).unwrap();
    open.query("SELECT * FROM queen_pop('q', 'g', batch => 2, auto_ack => true)", &[]).unwrap();

    // kill -9 the postmaster (and with it every backend), then start again: crash recovery.
    let pid: i32 =
        std::fs::read_to_string(format!("{dir}/data/postmaster.pid")).unwrap().lines().next().unwrap().parse().unwrap();
    let status = Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
    assert!(status.success());
    drop(open);
    drop(c);
    // The backends die with the postmaster; until they are gone the server cannot start
    // again (its shared memory is still attached), so try until it does.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = Command::new(repo().join("scripts/cluster"))
            .args(["start", &dir, &port.to_string(), "preload"])
            .output()
            .unwrap();
        if out.status.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not start after the crash: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut c = connect(&dir, port);

    let stored: i64 = c.query_one("SELECT count(*) FROM queen.messages", &[]).unwrap().get(0);
    assert_eq!(stored, 10, "every committed push survived, the uncommitted one did not");
    let dead: Vec<(Value, String)> = c
        .query("SELECT payload, error FROM queen.dead_letters_view", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(dead, vec![(json!(3), "broken".to_string())], "the dead letter survived");
    // The cursor moved over the four finished messages: the group gets the fifth next.
    let next: Vec<Value> = c
        .query("SELECT payload FROM queen_pop('q', 'g', batch => 10, auto_ack => true)", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(next, (4..10).map(|i| json!(i)).collect::<Vec<_>>());
    drop(c);
    script(&["cluster", "stop", &dir]);
}
