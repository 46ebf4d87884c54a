//! The gateway (`make bench BENCH=gateway`): push and pop + ack through queen-gateway's HTTP
//! routes, next to the same queen calls made directly over SQL, at 1, 4 and 16 clients. The
//! ratio is what the HTTP hop costs (JSON both ways, the pool, one more process on the same two
//! cores), since both sides run the same SQL functions.
//!
//! scripts/bench builds the gateway (release) and passes its path in QUEEN_BENCH_GATEWAY; it is
//! started here against the bench database and stopped at the end.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use postgres::Client;
use serde_json::{json, Value};

use crate::clients::{client_counts, drive, Conn, Outcome};
use crate::fresh;

const QUEUE: &str = "gw";
const PARTS: usize = 16;
const GROUP: &str = "bench";

struct Gateway {
    child: Child,
    url: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

fn start() -> Gateway {
    let bin = std::env::var("QUEEN_BENCH_GATEWAY").expect("QUEEN_BENCH_GATEWAY: the queen-gateway binary");
    let port = std::env::var("QUEEN_BENCH_PORT").unwrap_or_else(|_| "28818".into());
    let listen = "127.0.0.1:28840";
    let child = Command::new(bin)
        .args(["--database-url", &format!("postgresql://postgres@127.0.0.1:{port}/bench")])
        .args(["--listen", listen, "--pool-size", "20", "--log-format", "text"])
        .env("QUEEN_GATEWAY_LOG", "warn")
        .stdout(Stdio::inherit())
        .spawn()
        .expect("start queen-gateway");
    let url = format!("http://{listen}");
    let agent = agent();
    let t = Instant::now();
    while agent.get(format!("{url}/health")).call().is_err() {
        assert!(t.elapsed() < Duration::from_secs(30), "queen-gateway did not answer /health");
        std::thread::sleep(Duration::from_millis(50));
    }
    Gateway { child, url }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

fn post(a: &ureq::Agent, url: &str, body: &Value) -> Value {
    let mut r = a.post(url).header("content-type", "application/json").send(body.to_string()).expect("POST");
    let status = r.status().as_u16();
    let text = r.body_mut().with_config().limit(64 << 20).read_to_string().expect("body");
    assert!((200..300).contains(&status), "POST {url}: {status} {text}");
    serde_json::from_str(&text).expect("JSON")
}

fn get(a: &ureq::Agent, url: &str) -> Option<Value> {
    let mut r = a.get(url).call().expect("GET");
    let status = r.status().as_u16();
    if status == 204 {
        return None;
    }
    let text = r.body_mut().with_config().limit(64 << 20).read_to_string().expect("body");
    assert_eq!(status, 200, "GET {url}: {text}");
    Some(serde_json::from_str(&text).expect("JSON"))
}

fn item(k: usize, i: usize, j: usize) -> Value {
    json!({"queue": QUEUE, "partition": format!("p{}", (k * 7919 + i) % PARTS),
           "payload": super::payload(i * 100 + j), "transactionId": format!("{k}-{i}-{j}")})
}

fn items(k: usize, i: usize, n: usize) -> Value {
    Value::Array((0..n).map(|j| item(k, i, j)).collect())
}

const DIRECT_PUSH: &str = "SELECT * FROM queen_push($1::jsonb)";
const DIRECT_POP: &str = "SELECT * FROM queen_pop($1, $2, 100)";
const DIRECT_ACK: &str = "SELECT * FROM queen_ack($1::jsonb)";

/// Acks of popped rows, addressed as the gateway's clients address them (transactionId +
/// partitionId + leaseId) or by message id.
fn acks(msgs: &[(String, String, Option<String>, String)], by_id: bool) -> Value {
    Value::Array(
        msgs.iter()
            .map(|(tid, pid, lease, mid)| {
                if by_id {
                    json!({"messageId": mid, "leaseId": lease, "consumerGroup": GROUP})
                } else {
                    json!({"transactionId": tid, "partitionId": pid, "leaseId": lease, "consumerGroup": GROUP})
                }
            })
            .collect(),
    )
}

fn row(name: &str, clients: usize, gw: &Outcome, direct: &Outcome) {
    println!(
        "| {name} | {clients} | {:.0} | {:.2} / {:.2} | {:.0} | {:.2} / {:.2} | **{:.2}×** |",
        gw.per_sec(),
        gw.pct(0.5),
        gw.pct(0.99),
        direct.per_sec(),
        direct.pct(0.5),
        direct.pct(0.99),
        gw.per_sec() / direct.per_sec()
    );
}

pub fn run(c: &mut Client) {
    // The gateway refuses to start in a database without queen.
    fresh(c);
    let gw = start();
    let url = gw.url.clone();
    println!("\n### Through queen-gateway (HTTP) vs the same queen calls over SQL\n");
    println!("Messages per second; p50 / p99 per call in ms (a pop + ack is two calls, timed together).\n");
    println!("| workload | clients | gateway msg/s | gateway p50 / p99 | direct SQL msg/s | direct p50 / p99 | gateway / direct |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let counts = client_counts();
    let agents: Vec<ureq::Agent> = (0..*counts.iter().max().unwrap()).map(|_| agent()).collect();
    for size in [1usize, 100] {
        let name = if size == 1 { "push, 1 per request" } else { "push, batches of 100" };
        for &n in &counts {
            fresh(c);
            let push_url = format!("{url}/api/v1/push");
            let via_gw = |_: &mut Conn, k: usize, i: usize| {
                let r = post(&agents[k], &push_url, &json!({"items": items(k, i, size)}));
                assert_eq!(r.as_array().map(Vec::len), Some(size));
                size
            };
            let direct = |c: &mut Conn, k: usize, i: usize| {
                // Other transaction ids than the gateway's run, so neither meets duplicates.
                let rows = c.query(DIRECT_PUSH, &[&items(k + 1000, i, size)]);
                assert_eq!(rows.len(), size);
                size
            };
            let g = drive(n, false, &via_gw);
            let d = drive(n, false, &direct);
            row(name, n, &g, &d);
        }
    }
    let fill = 200_000;
    for &n in &counts {
        fresh(c);
        let _ = c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset()");
        for k in 0..fill / 1000 {
            c.query(DIRECT_PUSH, &[&items(k, 0, 1000)]).unwrap();
        }
        c.batch_execute("VACUUM ANALYZE").unwrap();
        let pop_url = format!("{url}/api/v1/pop/queue/{QUEUE}?batch=100&consumerGroup={GROUP}");
        let ack_url = format!("{url}/api/v1/ack/batch");
        let via_gw = |_: &mut Conn, k: usize, _: usize| {
            let Some(body) = get(&agents[k], &pop_url) else { return 0 };
            let msgs = body["messages"].as_array().unwrap();
            let acks: Vec<Value> = msgs
                .iter()
                .map(|m| {
                    json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                                "leaseId": m["leaseId"], "status": "completed"})
                })
                .collect();
            let r = post(&agents[k], &ack_url, &json!({"acknowledgments": acks, "consumerGroup": GROUP}));
            assert!(r.as_array().unwrap().iter().all(|e| e["success"] == json!(true)), "{r}");
            msgs.len()
        };
        let rewind = |c: &mut Client| {
            c.query("SELECT queen_seek($1, $2, '-infinity')", &[&QUEUE, &GROUP]).unwrap();
        };
        let d = drive(n, true, &direct_consume(false));
        rewind(c);
        let g = drive(n, true, &via_gw);
        rewind(c);
        let by_id = drive(n, true, &direct_consume(true));
        row("pop 100 + ack batch", n, &g, &d);
        println!(
            "| (direct SQL acking by messageId instead) | {n} | | | {:.0} | {:.2} / {:.2} | {:.2}× of by transactionId |",
            by_id.per_sec(),
            by_id.pct(0.5),
            by_id.pct(0.99),
            by_id.per_sec() / d.per_sec()
        );
    }
    // The gateway's own view (its /metrics): the mean time it spent on each kind of request,
    // the rest of a call's time being the client's and the network's.
    let text = agents[0].get(format!("{url}/metrics")).call().unwrap().body_mut().read_to_string().unwrap();
    let series = |suffix: &str| -> Vec<(String, f64)> {
        text.lines()
            .filter_map(|l| l.strip_prefix(&format!("queen_gateway_request_duration_seconds_{suffix}{{")))
            .filter_map(|l| l.split_once("} ").map(|(labels, v)| (labels.to_string(), v.parse().unwrap_or(0.0))))
            .collect()
    };
    let counts: std::collections::HashMap<String, f64> = series("count").into_iter().collect();
    let means: Vec<String> = series("sum")
        .into_iter()
        .filter(|(l, _)| counts.get(l).copied().unwrap_or(0.0) > 100.0)
        .map(|(l, sum)| format!("{l}: {:.3} ms", 1000.0 * sum / counts[&l]))
        .collect();
    println!("\nInside the gateway (its /metrics), mean per request: {}", means.join("; "));
    if std::env::var("QUEEN_BENCH_PROFILE").is_ok() {
        crate::clients::print_top_statements(c);
    }
}

/// Pop 100 and ack them over SQL, the acks addressed by transactionId + partitionId (as the
/// gateway's are) or by messageId.
fn direct_consume(by_id: bool) -> impl Fn(&mut Conn, usize, usize) -> usize + Sync {
    move |c: &mut Conn, _: usize, _: usize| {
        let rows = c.query(DIRECT_POP, &[&QUEUE, &GROUP]);
        if rows.is_empty() {
            return 0;
        }
        let msgs: Vec<(String, String, Option<String>, String)> = rows
            .iter()
            .map(|r| {
                (
                    r.get::<_, String>("transaction_id"),
                    r.get::<_, uuid::Uuid>("partition_id").to_string(),
                    r.get::<_, Option<uuid::Uuid>>("lease_id").map(|l| l.to_string()),
                    r.get::<_, uuid::Uuid>("message_id").to_string(),
                )
            })
            .collect();
        let acked = c.query(DIRECT_ACK, &[&acks(&msgs, by_id)]);
        assert!(acked.iter().all(|r| r.get::<_, bool>("success")));
        rows.len()
    }
}
