//! queen_ack and the functions on consumer state, over real connections: every rule of
//! semantics §5, the exactly-once effect of §6.5, and the views of §9.

use postgres::Client;
use queen_integration_tests::{await_lock_wait, connect, open_tx, push_n, push_spread, queue_db, sqlstate};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

/// Rows of a pop, as JSON objects (what `to_jsonb(m)` gives).
fn pop(c: &mut Client, sql: &str) -> Vec<Value> {
    c.query(&format!("SELECT to_jsonb(m) FROM ({sql}) m"), &[]).unwrap().iter().map(|r| r.get(0)).collect()
}

/// A pop of group `g` from queue `q`, with further arguments (`"batch => 10"`; "" for none).
fn pop_g(c: &mut Client, args: &str) -> Vec<Value> {
    let sep = if args.is_empty() { "" } else { ", " };
    pop(c, &format!("SELECT * FROM queen_pop('q', 'g'{sep}{args})"))
}

fn payloads(rows: &[Value]) -> Vec<i64> {
    rows.iter().map(|r| r["payload"].as_i64().unwrap()).collect()
}

/// Ack rows of a pop with a status each; returns (success, error, lease_released, dead_lettered).
fn ack_batch(c: &mut Client, rows: &[Value], statuses: &[&str]) -> Vec<(bool, Option<String>, bool, bool)> {
    let acks: Vec<Value> = rows
        .iter()
        .zip(statuses)
        .map(|(r, s)| {
            let mut r = r.clone();
            r["_status"] = json!(s);
            r["_error"] = json!(format!("error {}", r["payload"]));
            r
        })
        .collect();
    c.query(
        "SELECT success, error, lease_released, dead_lettered FROM queen_ack($1) ORDER BY idx",
        &[&Value::Array(acks)],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

fn ack_one(c: &mut Client, row: &Value, status: &str) -> (bool, Option<String>, bool, bool) {
    let r = c
        .query_one(
            "SELECT success, error, lease_released, dead_lettered FROM queen_ack($1::text::uuid, $2::text::uuid, $3, 'boom', $4)",
            &[&row["message_id"].as_str(), &row["lease_id"].as_str(), &status, &row["consumer_group"].as_str()],
        )
        .unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3))
}

/// The batch rule's example (semantics §5): a batch of four acked completed, failed, completed, completed
/// in one call leaves the cursor after the first; the other three come back, in order.
#[test]
fn the_cursor_stops_at_the_first_message_that_comes_back() {
    let (_db, mut c) = queue_db("figure", r#"{"retryDelay": 0}"#, 4);
    let rows = pop_g(&mut c, "batch => 10");
    assert_eq!(payloads(&rows), vec![0, 1, 2, 3]);
    let res = ack_batch(&mut c, &rows, &["completed", "failed", "completed", "completed"]);
    assert_eq!(res[0], (true, None, false, false));
    assert_eq!(res[1], (true, None, true, false), "the failed one releases the lease");
    assert_eq!(res[2], (false, Some("superseded".into()), false, false));
    assert_eq!(res[3], (false, Some("superseded".into()), false, false));
    let again = pop_g(&mut c, "batch => 10");
    assert_eq!(payloads(&again), vec![1, 2, 3], "completed ones after the failure come back too");
    let attempts: Vec<i64> = again.iter().map(|r| r["attempt"].as_i64().unwrap()).collect();
    assert_eq!(attempts, vec![2, 1, 1], "only the failed message was charged");
    // Late acks on the released lease are refused.
    assert_eq!(ack_one(&mut c, &rows[2], "completed"), (false, Some("lease not held".into()), false, false));
}

/// Completions may arrive out of order within a lease; the cursor jumps the gap once it is
/// filled, the lease is released with the last, and a completion once applied is never undone.
#[test]
fn out_of_order_completions() {
    let (_db, mut c) = queue_db("outoforder", r#"{"retryDelay": 0}"#, 4);
    let rows = pop_g(&mut c, "batch => 3");
    assert_eq!(ack_one(&mut c, &rows[2], "completed"), (true, None, false, false));
    assert_eq!(ack_one(&mut c, &rows[2], "completed"), (false, Some("already acknowledged".into()), false, false));
    assert_eq!(ack_one(&mut c, &rows[0], "completed"), (true, None, false, false));
    // The second fails: it comes back with what follows it, except the completed third.
    assert_eq!(ack_one(&mut c, &rows[1], "failed").2, true);
    let again = pop_g(&mut c, "batch => 10");
    assert_eq!(payloads(&again), vec![1, 3]);
    let res = ack_batch(&mut c, &again, &["completed", "completed"]);
    assert!(res[1].2, "the last completion releases the lease");
    assert!(pop_g(&mut c, "batch => 10").is_empty());
}

/// retryDelay: a failed message is not delivered before the delay, and is after it.
#[test]
fn retry_delay_is_honoured() {
    let (_db, mut c) = queue_db("retrydelay", r#"{"retryDelay": 800}"#, 2);
    let rows = pop_g(&mut c, "");
    let t0 = Instant::now();
    assert!(ack_one(&mut c, &rows[0], "failed").0);
    assert!(pop_g(&mut c, "batch => 10").is_empty(), "not before the delay");
    let again = pop_g(&mut c, "batch => 10, wait_ms => 5000");
    let waited = t0.elapsed();
    assert_eq!(payloads(&again), vec![0, 1]);
    assert_eq!(again[0]["attempt"], json!(2));
    assert!(waited >= Duration::from_millis(790), "delivered after {waited:?}");
    // retry: back at once, nothing charged.
    assert!(ack_one(&mut c, &again[0], "retry").2);
    let back = pop_g(&mut c, "batch => 10");
    assert_eq!(payloads(&back), vec![0, 1]);
    assert_eq!(back[0]["attempt"], json!(2), "retry spends no retry");
}

/// retryLimit = 1: a message failed twice is a dead letter with the last error; the next
/// message's first failure is not (the count starts afresh).
#[test]
fn spent_retries_file_a_dead_letter_and_the_count_starts_afresh() {
    let (_db, mut c) = queue_db("retrylimit", r#"{"retryLimit": 1, "retryDelay": 0}"#, 2);
    let first = pop_g(&mut c, "");
    assert_eq!(ack_one(&mut c, &first[0], "failed"), (true, None, true, false));
    let second = pop_g(&mut c, "");
    assert_eq!(payloads(&second), vec![0]);
    let r = c
        .query_one(
            "SELECT success, dead_lettered FROM queen_ack($1::text::uuid, $2::text::uuid, 'failed', 'second failure', 'g')",
            &[&second[0]["message_id"].as_str(), &second[0]["lease_id"].as_str()],
        )
        .unwrap();
    assert_eq!((r.get::<_, bool>(0), r.get::<_, bool>(1)), (true, true));
    let dl = c.query("SELECT payload, error, attempts, consumer_group FROM queen.dead_letters_view", &[]).unwrap();
    assert_eq!(dl.len(), 1);
    assert_eq!(dl[0].get::<_, Value>(0), json!(0));
    assert_eq!(dl[0].get::<_, String>(1), "second failure");
    assert_eq!(dl[0].get::<_, i32>(2), 2);
    assert_eq!(dl[0].get::<_, Option<String>>(3).as_deref(), Some("g"));
    // The next message: its first failure brings it back.
    let next = pop_g(&mut c, "");
    assert_eq!(payloads(&next), vec![1]);
    assert_eq!(next[0]["attempt"], json!(1));
    assert_eq!(ack_one(&mut c, &next[0], "failed"), (true, None, true, false));
    let n: i64 = c.query_one("SELECT count(*) FROM queen.dead_letters", &[]).unwrap().get(0);
    assert_eq!(n, 1);
    // The dead letter is another group's business: group h still gets message 0.
    assert_eq!(payloads(&pop(&mut c, "SELECT * FROM queen_pop('q', 'h', auto_ack => true)")), vec![0]);
}

/// semantics §5 (2026-12-01): a `failed` ack whose retries are spent files its dead letter and
/// releases the lease all the same: the rest of the batch comes back at once, uncharged (it
/// stayed leased until expiry before, and the expiry then charged the next message). In a batch,
/// the entries after it are superseded.
#[test]
fn a_spent_failure_releases_the_lease() {
    let (_db, mut c) = queue_db("spent_release", r#"{"retryLimit": 0, "retryDelay": 60000}"#, 3);
    let rows = pop_g(&mut c, "batch => 10");
    assert_eq!(ack_one(&mut c, &rows[0], "failed"), (true, None, true, true));
    let again = pop_g(&mut c, "batch => 10");
    assert_eq!(payloads(&again), vec![1, 2], "back at once: the retry delay is the dead letter's");
    assert!(again.iter().all(|r| r["attempt"] == json!(1)), "uncharged");
    let res = ack_batch(&mut c, &again, &["failed", "completed"]);
    assert_eq!(res[0], (true, None, true, true));
    assert_eq!(res[1], (false, Some("superseded".into()), false, false));
    assert_eq!(payloads(&pop_g(&mut c, "batch => 10")), vec![2]);
}

/// dlq files now; with deadLetterQueue = false a spent message is skipped with no row.
#[test]
fn dlq_and_skipping_without_a_dead_letter_queue() {
    let (_db, mut c) = queue_db("dlq", "", 2);
    let rows = pop_g(&mut c, "batch => 2");
    let res = ack_batch(&mut c, &rows, &["dlq", "completed"]);
    assert_eq!(res[0], (true, None, false, true));
    assert_eq!(res[1], (true, None, true, false));
    let err: String = c.query_one("SELECT error FROM queen.dead_letters_view", &[]).unwrap().get(0);
    assert_eq!(err, "error 0");
    assert!(pop_g(&mut c, "").is_empty());

    c.execute("SELECT queen_configure('nodlq', '{\"deadLetterQueue\": false, \"retryLimit\": 0}')", &[]).unwrap();
    push_n(&mut c, "nodlq", "p", 2);
    let rows = pop(&mut c, "SELECT * FROM queen_pop('nodlq', 'g')");
    assert_eq!(ack_one(&mut c, &rows[0], "failed"), (true, None, true, false), "skipped, not filed");
    let n: i64 = c.query_one("SELECT count(*) FROM queen.dead_letters WHERE consumer_group = 'g'", &[]).unwrap().get(0);
    assert_eq!(n, 1, "only the first queue's dead letter");
    assert_eq!(payloads(&pop(&mut c, "SELECT * FROM queen_pop('nodlq', 'g')")), vec![1]);
}

/// A consumer that never acks: each expired lease is a failure of the first unfinished
/// message, which ends as a dead letter with reason 'lease expired'; the partition goes on.
#[test]
fn a_poison_message_cannot_block_its_partition() {
    let (_db, mut c) = queue_db("poison", r#"{"retryLimit": 1, "leaseTime": 1}"#, 2);
    let a1 = pop_g(&mut c, "");
    assert_eq!((payloads(&a1), a1[0]["attempt"].clone()), (vec![0], json!(1)));
    // Wait for the lease to run out: a waiting pop gets the message again after expiry.
    let a2 = pop_g(&mut c, "wait_ms => 5000");
    assert_eq!((payloads(&a2), a2[0]["attempt"].clone()), (vec![0], json!(2)));
    // A late ack on the expired lease is refused.
    assert_eq!(ack_one(&mut c, &a1[0], "completed"), (false, Some("lease expired".into()), false, false));
    let a3 = pop_g(&mut c, "wait_ms => 5000");
    assert_eq!(payloads(&a3), vec![1], "the poison message is gone from the partition");
    let (error, attempts): (String, i32) = {
        let r = c.query_one("SELECT error, attempts FROM queen.dead_letters_view", &[]).unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((error.as_str(), attempts), ("lease expired", 2));
}

/// Refusals are results, never errors, and change nothing; malformed input is an error that
/// changes nothing.
#[test]
fn refusals_and_bad_input() {
    let (_db, mut c) = queue_db("refusals", "", 2);
    let rows = pop_g(&mut c, "");
    let r = c.query_one("SELECT success, error FROM queen_ack(gen_random_uuid(), NULL)", &[]).unwrap();
    assert_eq!((r.get::<_, bool>(0), r.get::<_, Option<String>>(1).as_deref()), (false, Some("message not found")));
    let r = c
        .query_one(
            "SELECT success, error FROM queen_ack($1::text::uuid, gen_random_uuid(), 'completed', NULL, 'g')",
            &[&rows[0]["message_id"].as_str()],
        )
        .unwrap();
    assert_eq!(r.get::<_, Option<String>>(1).as_deref(), Some("lease not held"), "a lease that is not the message's");
    // A message of the partition beyond the batch, acked with the batch's lease.
    let other: String =
        c.query_one("SELECT message_id::text FROM queen.messages WHERE payload = '1'", &[]).unwrap().get(0);
    let r = c
        .query_one(
            "SELECT error FROM queen_ack($1::text::uuid, $2::text::uuid, 'completed', NULL, 'g')",
            &[&other, &rows[0]["lease_id"].as_str()],
        )
        .unwrap();
    assert_eq!(r.get::<_, Option<String>>(0).as_deref(), Some("lease not held"));
    // Untyped literals resolve to the scalar form.
    let r = c
        .query_one(
            &format!(
                "SELECT error FROM queen_ack('{}', '{}')",
                rows[0]["message_id"].as_str().unwrap(),
                uuid::Uuid::nil()
            ),
            &[],
        )
        .unwrap();
    assert_eq!(r.get::<_, Option<String>>(0).as_deref(), Some("lease not held"));

    let cases = [
        ("SELECT queen_ack(gen_random_uuid(), NULL, 'done')", "22023", "\"status\""),
        ("SELECT queen_ack(NULL::uuid, NULL)", "22004", "\"message_id\""),
        ("SELECT queen_ack(gen_random_uuid(), NULL, 'completed', NULL, '')", "22023", "\"consumer_group\""),
        ("SELECT queen_ack('[{\"messageId\": \"zz\"}]'::jsonb)", "22P02", "acks[0].messageId"),
        ("SELECT queen_ack('{\"messageId\": 1}'::jsonb)", "22023", "\"acks\""),
        ("SELECT queen_ack('[{\"leaseId\": null}]'::jsonb)", "22023", "names no message"),
        ("SELECT queen_ack('[{\"messageId\": \"00000000-0000-0000-0000-000000000000\", \"consumerGroup\": 3}]'::jsonb)", "22023", "consumerGroup"),
        ("SELECT queen_ack('[{\"messageId\": \"00000000-0000-0000-0000-000000000000\", \"_status\": \"meh\"}]'::jsonb)", "22023", "_status"),
        ("SELECT queen_renew(NULL)", "22004", "\"lease_id\""),
        ("SELECT queen_renew(gen_random_uuid(), 0)", "22023", "\"seconds\""),
    ];
    for (sql, state, needle) in cases {
        let err = c.batch_execute(sql).unwrap_err();
        assert_eq!(sqlstate(&err), state, "{sql}: {err:?}");
        let msg = err.as_db_error().unwrap().message().to_string();
        assert!(msg.contains(needle), "{sql}: {msg:?} should name {needle:?}");
    }
    // A bad entry in a batch applies none of the good ones.
    let mut good = rows[0].clone();
    good["_status"] = json!("completed");
    let bad = json!({"messageId": "nope"});
    assert!(c.execute("SELECT * FROM queen_ack($1)", &[&json!([good, bad])]).is_err());
    let res = ack_batch(&mut c, &rows, &["completed"]);
    assert_eq!(res[0], (true, None, true, false), "the good entry was not applied before");
}

/// An ack without a lease is not checked and applies to its group; finishing the last
/// unfinished message of another worker's batch releases that worker's lease.
#[test]
fn an_ack_without_a_lease_can_finish_another_workers_batch() {
    let (_db, mut c) = queue_db("nolease", "", 3);
    let rows = pop_g(&mut c, "batch => 2");
    for r in &rows {
        let res = c
            .query_one(
                "SELECT success, lease_released FROM queen_ack($1::text::uuid, NULL, 'completed', NULL, 'g')",
                &[&r["message_id"].as_str()],
            )
            .unwrap();
        assert!(res.get::<_, bool>(0));
    }
    let leases: i64 = c.query_one("SELECT count(*) FROM queen.cursors WHERE lease_id IS NOT NULL", &[]).unwrap().get(0);
    assert_eq!(leases, 0, "the worker's lease was released");
    assert_eq!(payloads(&pop_g(&mut c, "batch => 5")), vec![2]);
    // Queue mode by a NULL group; the batch form by transactionId + partitionId.
    let qm = pop(&mut c, "SELECT * FROM queen_pop('q', batch => 1)");
    let entry = json!([{"transactionId": qm[0]["transaction_id"], "partitionId": qm[0]["partition_id"], "leaseId": qm[0]["lease_id"]}]);
    let r = c.query_one("SELECT success, message_id::text FROM queen_ack($1)", &[&entry]).unwrap();
    assert!(r.get::<_, bool>(0));
    assert_eq!(r.get::<_, String>(1).as_str(), qm[0]["message_id"].as_str().unwrap());
}

/// A lease over several partitions is settled partition by partition.
#[test]
fn a_multi_partition_lease_is_settled_per_partition() {
    let (_db, mut c) = queue_db("multilease", r#"{"retryDelay": 0}"#, 0);
    push_n(&mut c, "q", "a", 2);
    push_n(&mut c, "q", "b", 2);
    let rows = pop_g(&mut c, "batch => 10, partitions => 2");
    assert_eq!(rows.len(), 4);
    let statuses: Vec<&str> = rows.iter().map(|r| if r["partition"] == "a" { "failed" } else { "completed" }).collect();
    let res = ack_batch(&mut c, &rows, &statuses);
    for (r, row) in res.iter().zip(&rows) {
        if row["partition"] == "b" {
            assert!(r.0, "partition b is settled on its own: {r:?}");
        }
    }
    let back = pop_g(&mut c, "batch => 10, partitions => 2");
    assert!(back.iter().all(|r| r["partition"] == "a"));
    assert_eq!(payloads(&back), vec![0, 1]);
}

/// A lease lives in the cursor rows it covers, and nowhere else (issue 10: a table of leases grew
/// with pops): renew extends every partition of a multi-partition lease, the acks that finish
/// them clear it, and nothing about it is left afterwards.
#[test]
fn a_lease_over_several_partitions_lives_in_their_rows() {
    let (_db, mut c) = queue_db("leaserows", "", 0);
    push_n(&mut c, "q", "p1", 2);
    push_n(&mut c, "q", "p2", 2);
    let rows = pop_g(&mut c, "batch => 4, partitions => 2, lease_seconds => 100");
    assert_eq!(rows.len(), 4);
    let lease = rows[0]["lease_id"].as_str().unwrap().to_string();
    assert!(rows.iter().all(|r| r["lease_id"].as_str() == Some(lease.as_str())), "one lease for both partitions");
    c.query_one("SELECT queen_renew($1::text::uuid, 1000)", &[&lease]).unwrap();
    let extended: i64 = c
        .query_one(
            "SELECT count(*) FROM queen.group_lag WHERE lease_id = $1::text::uuid AND lease_expires_at > now() + interval '900 seconds'",
            &[&lease],
        )
        .unwrap()
        .get(0);
    assert_eq!(extended, 2, "renew extends the lease in both partitions");
    let res = ack_batch(&mut c, &rows, &["completed"; 4]);
    assert!(res.iter().all(|r| r.0), "{res:?}");
    assert_eq!(res.iter().filter(|r| r.2).count(), 2, "each partition's last ack releases its part of the lease");
    let held: i64 = c.query_one("SELECT count(*) FROM queen.cursors WHERE lease_id IS NOT NULL", &[]).unwrap().get(0);
    assert_eq!(held, 0);
    let gone: Option<std::time::SystemTime> =
        c.query_one("SELECT queen_renew($1::text::uuid)", &[&lease]).unwrap().get(0);
    assert!(gone.is_none(), "a released lease cannot be renewed");
    let tables: i64 = c
        .query_one("SELECT count(*) FROM pg_tables WHERE schemaname = 'queen' AND tablename = 'leases'", &[])
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "no table of leases");
}

/// renew never shortens a lease and returns NULL for one that is gone; seek replays and skips.
#[test]
fn renew_and_seek() {
    let (_db, mut c) = queue_db("renewseek", "", 3);
    let rows = pop_g(&mut c, "lease_seconds => 100");
    let lease = rows[0]["lease_id"].as_str().unwrap().to_string();
    let longer: f64 = c
        .query_one("SELECT extract(epoch FROM queen_renew($1::text::uuid, 1000) - now())::float8", &[&lease])
        .unwrap()
        .get(0);
    assert!(longer > 900.0, "{longer}");
    let shorter: f64 = c
        .query_one("SELECT extract(epoch FROM queen_renew($1::text::uuid, 5) - now())::float8", &[&lease])
        .unwrap()
        .get(0);
    assert!(shorter > 900.0, "renew never shortens: {shorter}");
    let view: f64 = c
        .query_one("SELECT extract(epoch FROM lease_expires_at - now())::float8 FROM queen.group_lag WHERE lease_id IS NOT NULL", &[])
        .unwrap()
        .get(0);
    assert!(view > 900.0);
    ack_batch(&mut c, &rows, &["completed"]);
    let gone: Option<std::time::SystemTime> =
        c.query_one("SELECT queen_renew($1::text::uuid)", &[&lease]).unwrap().get(0);
    assert!(gone.is_none(), "a released lease cannot be renewed");

    // Seek to the end skips everything stored; seek back replays.
    assert_eq!(c.query_one("SELECT queen_seek('q', 'g')", &[]).unwrap().get::<_, i32>(0), 1);
    assert!(pop_g(&mut c, "batch => 10").is_empty());
    push_n(&mut c, "q", "p", 1);
    assert_eq!(payloads(&pop_g(&mut c, "batch => 10, auto_ack => true")), vec![0]);
    c.query_one("SELECT queen_seek('q', 'g', now() - interval '1 hour')", &[]).unwrap();
    assert_eq!(payloads(&pop_g(&mut c, "batch => 10, auto_ack => true")), vec![0, 1, 2, 0]);
    // A group that never popped is subscribed by seek.
    c.query_one("SELECT queen_seek('q', 'fresh')", &[]).unwrap();
    push_n(&mut c, "q", "later", 1);
    assert_eq!(
        payloads(&pop(&mut c, "SELECT * FROM queen_pop('q', 'fresh', batch => 10, partitions => 5, auto_ack => true)")),
        vec![0]
    );
}

/// delete_group forgets a group; delete_queue drops everything; the views agree.
#[test]
fn deleting_groups_and_queues_and_the_views() {
    let (_db, mut c) = queue_db("deletes", "", 0);
    push_n(&mut c, "q", "a", 3);
    push_n(&mut c, "q", "b", 2);
    let rows = pop_g(&mut c, "batch => 3, partition => 'a'");
    ack_batch(&mut c, &rows[..1], &["completed"]);
    pop(&mut c, "SELECT * FROM queen_pop('q', NULL, batch => 1, partition => 'b', auto_ack => true)");
    let stats = c
        .query_one(
            "SELECT partitions, messages, consumer_groups, dead_letters FROM queen.queue_stats WHERE queue = 'q'",
            &[],
        )
        .unwrap();
    assert_eq!(
        (stats.get::<_, i64>(0), stats.get::<_, i64>(1), stats.get::<_, i64>(2), stats.get::<_, i64>(3)),
        (2, 5, 2, 0)
    );
    let lag: HashMap<(Option<String>, String), (i64, bool)> = c
        .query(
            "SELECT consumer_group, partition, pending, lease_id IS NOT NULL FROM queen.group_lag WHERE queue = 'q'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| ((r.get(0), r.get(1)), (r.get(2), r.get(3))))
        .collect();
    assert_eq!(lag.len(), 4, "two groups × two partitions: {lag:?}");
    assert_eq!(lag[&(Some("g".into()), "a".into())], (2, true));
    assert_eq!(lag[&(Some("g".into()), "b".into())], (2, false), "a partition the group never popped");
    assert_eq!(lag[&(None, "a".into())], (3, false));
    assert_eq!(lag[&(None, "b".into())], (1, false));

    assert_eq!(c.query_one("SELECT queen_delete_group('g', 'q')", &[]).unwrap().get::<_, i32>(0), 2);
    let left: i64 = c.query_one("SELECT count(*) FROM queen.group_lag WHERE consumer_group = 'g'", &[]).unwrap().get(0);
    assert_eq!(left, 0);
    // A later pop subscribes it afresh, from the oldest message.
    assert_eq!(payloads(&pop_g(&mut c, "batch => 5, partition => 'a', auto_ack => true")), vec![0, 1, 2]);
    assert_eq!(
        c.query_one("SELECT queen_delete_group(NULL)", &[]).unwrap().get::<_, i32>(0),
        2,
        "queue mode, every queue"
    );

    assert!(c.query_one("SELECT queen_delete_queue('q')", &[]).unwrap().get::<_, bool>(0));
    assert!(!c.query_one("SELECT queen_delete_queue('q')", &[]).unwrap().get::<_, bool>(0));
    for t in ["messages", "partitions", "queues", "cursors", "subscriptions", "ready", "discovery"] {
        let n: i64 = c.query_one(&format!("SELECT count(*) FROM queen.{t}"), &[]).unwrap().get(0);
        assert_eq!(n, 0, "queen.{t} still has rows");
    }
}

/// group_lag's `oldest_pending` is the head of the line: the `created_at` of the first message
/// the group has yet to finish in the partition, past completions made out of order, through a
/// transaction the cursor left pending, and NULL once nothing is pending.
#[test]
fn oldest_pending_is_the_first_unfinished_message() {
    let (db, mut c) = queue_db("oldestpending", "", 0);
    let push = |c: &mut Client, payload: Value| {
        c.query_one("SELECT message_id FROM queen_push('q', $1, 'p')", &[&payload]).unwrap();
    };
    // (pending, the payload of the message whose created_at oldest_pending is)
    let lag = |c: &mut Client| -> (i64, Option<Value>) {
        let r = c
            .query_one(
                "SELECT l.pending,
                        (SELECT m.payload FROM queen.messages m
                          WHERE m.partition = l.partition AND m.created_at = l.oldest_pending)
                   FROM queen.group_lag l WHERE l.queue = 'q' AND l.consumer_group = 'g'",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    for i in 0..4 {
        push(&mut c, json!(i));
    }
    assert!(pop_g(&mut c, "batch => 1, auto_ack => true").len() == 1);
    assert_eq!(lag(&mut c), (3, Some(json!(1))));
    let rows = pop_g(&mut c, "batch => 2");
    assert_eq!(ack_one(&mut c, &rows[1], "completed"), (true, None, false, false));
    assert_eq!(lag(&mut c), (2, Some(json!(1))), "a completion ahead of the frontier leaves the head");
    assert_eq!(ack_one(&mut c, &rows[0], "completed"), (true, None, true, false));
    assert_eq!(lag(&mut c), (1, Some(json!(3))));

    // A transaction that took its xid before the next push commits after the group passed it:
    // the cursor keeps it pending, and its message becomes the head once it commits.
    let mut t = db.connect();
    t.batch_execute("BEGIN").unwrap();
    push(&mut t, json!("late"));
    push(&mut c, json!(4));
    let rows = pop_g(&mut c, "batch => 10");
    assert_eq!(payloads(&rows), vec![3, 4]);
    assert!(ack_batch(&mut c, &rows, &["completed", "completed"])[1].2);
    assert_eq!(lag(&mut c), (0, None), "the running transaction's message is not visible yet");
    t.batch_execute("COMMIT").unwrap();
    assert_eq!(lag(&mut c), (1, Some(json!("late"))));
    let rows = pop_g(&mut c, "batch => 10, auto_ack => true");
    assert_eq!(rows.len(), 1);
    assert_eq!(lag(&mut c), (0, None));
}

/// semantics §6.5: consumers that do their writes and their `completed` ack in one transaction see
/// each message's effect applied exactly once per group, through rollbacks and lease expiries.
#[test]
fn exactly_once_effect_with_a_transactional_ack() {
    let (db, mut c) = queue_db("exactlyonce", "", 0);
    c.batch_execute("CREATE TABLE effects (grp text, message_id uuid, payload jsonb)").unwrap();
    c.execute("SELECT queen_configure('q', '{\"retryLimit\": 1000, \"retryDelay\": 0, \"leaseTime\": 1}')", &[])
        .unwrap();
    let total: usize = 300;
    push_spread(&mut c, "q", total as i64, 6);
    let groups = ["billing", "audit"];
    for g in groups {
        // Subscribe both groups at the start of the queue before any consumer runs.
        c.execute("SELECT queen_seek('q', $1, '-infinity')", &[&g]).unwrap();
    }
    let handles: Vec<_> = (0..6)
        .map(|t| {
            let name = db.name.clone();
            let group = groups[t % 2];
            thread::spawn(move || {
                let mut c = connect(&name);
                let mut seed: u64 = 0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1);
                let mut rnd = move || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed
                };
                let deadline = Instant::now() + Duration::from_secs(90);
                loop {
                    assert!(Instant::now() < deadline, "consumers did not finish");
                    let left: i64 = c
                        .query_one(
                            "SELECT coalesce(sum(pending), 0)::bigint FROM queen.group_lag WHERE consumer_group = $1",
                            &[&group],
                        )
                        .unwrap()
                        .get(0);
                    if left == 0 {
                        break;
                    }
                    let split = rnd() % 4 == 0; // pop in its own transaction, work later
                    let mut rows: Vec<Value> = vec![];
                    if split {
                        rows = pop(&mut c, &format!("SELECT * FROM queen_pop('q', '{group}', batch => 5)"));
                        if rnd() % 5 == 0 && !rows.is_empty() {
                            // Let the lease run out before working: the ack will be refused.
                            thread::sleep(Duration::from_millis(1100));
                        }
                    }
                    let mut tx = c.transaction().unwrap();
                    if !split {
                        rows = tx
                            .query(&format!("SELECT to_jsonb(m) FROM queen_pop('q', '{group}', batch => 5) m"), &[])
                            .unwrap()
                            .iter()
                            .map(|r| r.get(0))
                            .collect();
                    }
                    if rows.is_empty() {
                        // Leased elsewhere, or a lease yet to expire: look again shortly.
                        tx.rollback().unwrap();
                        thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                    for r in &rows {
                        tx.execute(
                            "INSERT INTO effects VALUES ($1, $2::text::uuid, $3)",
                            &[&group, &r["message_id"].as_str(), &r["payload"]],
                        )
                        .unwrap();
                    }
                    let acks: Vec<Value> = rows.clone();
                    let ok: Vec<bool> = tx
                        .query("SELECT success FROM queen_ack($1)", &[&Value::Array(acks)])
                        .unwrap()
                        .iter()
                        .map(|r| r.get(0))
                        .collect();
                    if ok.iter().all(|x| *x) && rnd() % 3 != 0 {
                        tx.commit().unwrap();
                    } else {
                        tx.rollback().unwrap(); // refused ack, or a random failure
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for g in groups {
        let rows = c.query("SELECT payload, count(*) FROM effects WHERE grp = $1 GROUP BY payload", &[&g]).unwrap();
        assert_eq!(rows.len(), total, "group {g}: every message has an effect");
        for r in &rows {
            assert_eq!(r.get::<_, i64>(1), 1, "group {g}: message {} applied more than once", r.get::<_, Value>(0));
        }
        let pending: i64 = c
            .query_one("SELECT coalesce(sum(pending), 0)::bigint FROM queen.group_lag WHERE consumer_group = $1", &[&g])
            .unwrap()
            .get(0);
        assert_eq!(pending, 0, "group {g}: the view agrees that nothing is pending");
    }
}

/// A batch that names every message by id takes one lookup by ids; a batch that also names
/// one by transaction id takes the general lookup. Both answer unknown ids, repeated entries
/// and the entries' order the same way.
#[test]
fn batch_lookup_by_ids_and_mixed() {
    let (_db, mut c) = queue_db("lookup", "", 4);
    let rows = pop_g(&mut c, "batch => 2");
    assert_eq!(payloads(&rows), vec![0, 1]);
    let by_id = |r: &Value| json!({"messageId": r["message_id"], "leaseId": r["lease_id"], "consumerGroup": "g"});
    let unknown = json!({"messageId": uuid::Uuid::nil().to_string(), "consumerGroup": "g"});
    let acks = json!([unknown, by_id(&rows[1]), by_id(&rows[0]), by_id(&rows[0])]);
    let got: Vec<(i32, bool, Option<String>)> = c
        .query("SELECT idx, success, error FROM queen_ack($1)", &[&acks])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, false, Some("message not found".into())),
            (1, true, None),
            (2, true, None),
            (3, false, Some("already acknowledged".into())),
        ]
    );
    // Mixed: by transaction id + partition id (a keyless message's id), and by id.
    let rows = pop_g(&mut c, "batch => 2");
    assert_eq!(payloads(&rows), vec![2, 3], "the first two are finished");
    let by_tid = json!({"transactionId": rows[0]["transaction_id"], "partitionId": rows[0]["partition_id"],
                        "leaseId": rows[0]["lease_id"], "consumerGroup": "g"});
    let acks = json!([by_id(&rows[1]), unknown, by_tid]);
    let got: Vec<(bool, Option<String>, bool)> = c
        .query("SELECT success, error, lease_released FROM queen_ack($1) ORDER BY idx", &[&acks])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    // Applied in delivery order: the by-transaction-id entry (message 2) first, then message 3,
    // whose entry releases the lease.
    assert_eq!(got, vec![(true, None, true), (false, Some("message not found".into()), false), (true, None, false)]);
    assert!(pop_g(&mut c, "").is_empty(), "all four are finished");
}

/// A jsonb batch ack of `entries`; (success, error, lease_released) for each, in order.
fn ack_entries(c: &mut Client, entries: Vec<Value>) -> Vec<(bool, Option<String>, bool)> {
    c.query("SELECT success, error, lease_released FROM queen_ack($1) ORDER BY idx", &[&Value::Array(entries)])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// A batch of one lease is found by key (the lease's rows, their batches' ids), and an entry
/// that is not in the lease's batches, another group, or a row the lease left while the ack
/// waited for it sends the batch the way it went before: every answer is the one the statement
/// gives (debug builds also compare each batch found by key with it).
#[test]
fn a_batch_of_one_lease_is_found_by_key_and_otherwise_as_before() {
    let (db, mut c) = queue_db("bykey", "", 0);
    push_n(&mut c, "q", "a", 3);
    push_n(&mut c, "q", "b", 3);
    let entry =
        |r: &Value, g: &str| json!({"messageId": r["message_id"], "leaseId": r["lease_id"], "consumerGroup": g});
    let rows = pop_g(&mut c, "batch => 4, partitions => 2");
    assert_eq!(rows.len(), 4, "two of each partition, one lease");
    // Another group: no row of that group holds the lease.
    let other = ack_entries(&mut c, rows.iter().map(|r| entry(r, "h")).collect());
    assert!(other.iter().all(|r| !r.0), "{other:?}");
    // Found by key, in both partitions; one entry twice.
    let got = ack_entries(&mut c, vec![entry(&rows[1], "g"), entry(&rows[2], "g"), entry(&rows[1], "g")]);
    assert_eq!(
        got,
        vec![(true, None, false), (true, None, false), (false, Some("already acknowledged".into()), false)]
    );
    // A message of another lease among them: the batch goes the general way, and every entry
    // is answered as there.
    push_n(&mut c, "q", "c", 1);
    let later = pop_g(&mut c, "batch => 1, partitions => 1");
    assert_eq!(later.len(), 1, "c's message: a and b are leased");
    let mut stray = entry(&later[0], "g");
    stray["leaseId"] = rows[0]["lease_id"].clone();
    let got = ack_entries(&mut c, vec![entry(&rows[0], "g"), stray, entry(&rows[3], "g")]);
    assert_eq!(got[0], (true, None, true), "{got:?}");
    assert!(!got[1].0, "not this lease's message: {got:?}");
    assert_eq!(got[2], (true, None, true), "{got:?}");
    // The lease is over: the batch goes the statement's way.
    let again = ack_entries(&mut c, vec![entry(&rows[0], "g"), entry(&rows[3], "g")]);
    assert!(again.iter().all(|r| !r.0), "{again:?}");
    assert_eq!(ack_entries(&mut c, vec![entry(&later[0], "g"), entry(&later[0], "g")])[0], (true, None, true));

    // An ack that waits for a transaction holding one of the rows: judged as that transaction
    // left the row — part of the batch acked, the whole lease acked, or rolled back.
    let waited = |holder_sql: &str, end: &str| -> Vec<(bool, Option<String>, bool)> {
        let mut c = db.connect();
        push_n(&mut c, "q", "w", 3);
        let rows = pop_g(&mut c, "batch => 3, partition => 'w'");
        assert_eq!(rows.len(), 3);
        let mut holder = open_tx(&db);
        let lease: uuid::Uuid = rows[0]["lease_id"].as_str().unwrap().parse().unwrap();
        let first: uuid::Uuid = rows[0]["message_id"].as_str().unwrap().parse().unwrap();
        holder.execute(holder_sql, &[&lease, &first]).unwrap();
        let mut a = db.connect();
        let pid: i32 = a.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        let entries: Vec<Value> = rows.iter().map(|r| entry(r, "g")).collect();
        let h = thread::spawn(move || ack_entries(&mut a, entries));
        await_lock_wait(&mut c, pid);
        holder.batch_execute(end).unwrap();
        let got = h.join().unwrap();
        assert!(pop_g(&mut c, "partition => 'w'").is_empty(), "nothing left of w: {got:?}");
        got
    };
    let part = "SELECT count(*) FROM queen_ack($2::uuid, $1::uuid, 'completed', NULL, 'g')";
    let whole = "SELECT count(*) FROM queen_ack_lease($1::uuid) WHERE $2::uuid IS NOT NULL";
    let already = Some("already acknowledged".to_string());
    assert_eq!(waited(part, "COMMIT"), vec![(false, already.clone(), false), (true, None, false), (true, None, true)]);
    let got = waited(whole, "COMMIT");
    assert!(got.iter().all(|r| !r.0), "the lease was acked whole meanwhile: {got:?}");
    assert_eq!(waited(whole, "ROLLBACK"), vec![(true, None, false), (true, None, false), (true, None, true)]);
}

/// Entries in Queen's clients' shape — transactionId, partitionId, leaseId, consumerGroup, as
/// the gateway passes them on — are found in the lease's batches too (issue 23), and answered
/// as ack_find finds them: a keyed message by its transaction id, a keyless one by its id read
/// as a uuid (in any spelling a uuid reads in), unless a message of the partition holds that
/// text as its transaction id — then that message is the one named, in the batch or not.
#[test]
fn entries_by_transaction_id_are_found_in_the_lease_batches() {
    let (_db, mut c) = queue_db("bytid", "", 0);
    for (partition, tid) in [("a", "a-1"), ("a", "a-2"), ("b", "b-1")] {
        c.execute("SELECT queen_push('q', '1', $1, $2)", &[&partition, &tid]).unwrap();
    }
    push_n(&mut c, "q", "k", 2);
    let entry = |r: &Value, tid: &str| json!({"transactionId": tid, "partitionId": r["partition_id"], "leaseId": r["lease_id"], "consumerGroup": "g"});
    let rows = pop_g(&mut c, "batch => 5, partitions => 3");
    assert_eq!(rows.len(), 5, "one lease over a, b and k");
    let tid = |r: &Value| r["transaction_id"].as_str().unwrap().to_string();
    // Keyed ones by their transaction ids, a keyless one by its id in capitals, one by message
    // id among them.
    let keyless: Vec<&Value> = rows.iter().filter(|r| r["partition"] == "k").collect();
    assert_eq!(tid(keyless[0]), keyless[0]["message_id"].as_str().unwrap(), "a keyless message's key is its id");
    let keyed: Vec<Value> = rows.iter().filter(|r| r["partition"] != "k").map(|r| entry(r, &tid(r))).collect();
    let mut entries = keyed.clone();
    entries.push(entry(keyless[0], &tid(keyless[0]).to_uppercase()));
    entries
        .push(json!({"messageId": keyless[1]["message_id"], "leaseId": keyless[1]["lease_id"], "consumerGroup": "g"}));
    // Each partition's row of the lease is released by the last ack there.
    let parts: Vec<&Value> = rows
        .iter()
        .filter(|r| r["partition"] != "k")
        .chain(keyless.iter().copied())
        .map(|r| &r["partition_id"])
        .collect();
    let want: Vec<(bool, Option<String>, bool)> =
        (0..5).map(|i| (true, None, !parts[i + 1..].contains(&parts[i]))).collect();
    assert_eq!(ack_entries(&mut c, entries), want);
    assert!(pop_g(&mut c, "").is_empty(), "every message acked");
    // A keyless message named in another partition: not found there.
    let mut wrong = entry(keyless[0], &tid(keyless[0]));
    wrong["partitionId"] = rows.iter().find(|r| r["partition"] == "a").unwrap()["partition_id"].clone();
    let got = ack_entries(&mut c, vec![wrong.clone(), wrong]);
    assert_eq!(got[0], (false, Some("message not found".into()), false), "{got:?}");

    // A keyed message named by its id as transaction id: not found (only a keyless message's
    // id is its key).
    push_n(&mut c, "q", "x", 2);
    c.execute("SELECT queen_push('q', '2', 'x', 'x-1')", &[]).unwrap();
    let rows = pop_g(&mut c, "batch => 3, partition => 'x'");
    assert_eq!(rows.len(), 3);
    let keyed_id = rows[2]["message_id"].as_str().unwrap();
    let got = ack_entries(&mut c, vec![entry(&rows[2], keyed_id), entry(&rows[1], &tid(&rows[1]))]);
    assert_eq!(got, vec![(false, Some("message not found".into()), false), (true, None, false)]);
    // A keyless message whose id another message of its partition holds as transaction id: an
    // entry with that transaction id names the other one, which is not in the lease's batch.
    let taken = tid(&rows[0]);
    c.execute("SELECT queen_push('q', '3', 'x', $1)", &[&taken]).unwrap();
    let got = ack_entries(&mut c, vec![entry(&rows[0], &taken), entry(&rows[2], "x-1")]);
    assert!(!got[0].0, "the message holding the transaction id is not the lease's: {got:?}");
    assert_eq!(got[1], (true, None, false), "{got:?}");
    // The keyless message is acked by its id, the other message is popped after it.
    let by_id = json!([{"messageId": rows[0]["message_id"], "leaseId": rows[0]["lease_id"], "consumerGroup": "g"}]);
    assert_eq!(ack_entries(&mut c, by_id.as_array().unwrap().clone())[0], (true, None, true));
    let next = pop_g(&mut c, "partition => 'x'");
    assert_eq!(next.iter().map(tid).collect::<Vec<_>>(), vec![taken]);
}
