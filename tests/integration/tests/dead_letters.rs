//! Dead letters replayed and purged (`queen_replay_dead_letters`, `queen_purge_dead_letters`;
//! docs/semantics.md §3.4), over real connections.

use postgres::Client;
use queen_integration_tests::{lag, push_n, queue_db, sqlstate};
use serde_json::Value;

/// Rows of a pop of group `g` (None: queue mode) from queue `q`, as JSON objects.
fn pop(c: &mut Client, group: Option<&str>, batch: i32) -> Vec<Value> {
    c.query("SELECT to_jsonb(m) FROM queen_pop('q', consumer_group => $1, batch => $2) m", &[&group, &batch])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn payloads(rows: &[Value]) -> Vec<i64> {
    rows.iter().map(|r| r["payload"].as_i64().unwrap()).collect()
}

/// Ack a pop's rows, one status each, in one call.
fn ack(c: &mut Client, rows: &[Value], statuses: &[&str]) {
    let acks: Vec<Value> = rows
        .iter()
        .zip(statuses)
        .map(|(r, s)| {
            let mut r = r.clone();
            r["_status"] = Value::from(*s);
            r
        })
        .collect();
    let ok: Vec<bool> = c
        .query("SELECT success FROM queen_ack($1) ORDER BY idx", &[&Value::Array(acks)])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(ok.iter().all(|s| *s), "acks {statuses:?}: {ok:?}");
}

/// The payloads of group `g`'s dead letters on queue q, in order.
fn dead(c: &mut Client, group: &str) -> Vec<i64> {
    c.query(
        "SELECT (payload #>> '{}')::bigint FROM queen.dead_letters_view WHERE queue = 'q' AND consumer_group = $1
          ORDER BY 1",
        &[&group],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn replay(c: &mut Client, group: Option<&str>, message: Option<uuid::Uuid>) -> i32 {
    c.query_one("SELECT queen_replay_dead_letters('q', $1, $2)", &[&group, &message]).unwrap().get(0)
}

fn id_of(rows: &[Value], payload: i64) -> uuid::Uuid {
    let r = rows.iter().find(|r| r["payload"] == payload).unwrap();
    r["message_id"].as_str().unwrap().parse().unwrap()
}

/// A seek keeps the group's dead letters: g files message 0 as a dead letter, seeks past
/// everything with 1 and 2 still under its lease, and a replay after the seek delivers 0 all the
/// same, ahead of what was pushed after the seek; what the seek passed (1, 2) never comes back.
/// (The explorer's seed 1796389430052 found the checker holding a replayed message to the seek.)
#[test]
fn a_dead_letter_replayed_after_a_seek_past_it_is_delivered() {
    let (_db, mut c) = queue_db("dl_replay_seek", "", 3);
    let got = pop(&mut c, Some("g"), 10);
    assert_eq!(payloads(&got), vec![0, 1, 2]);
    ack(&mut c, &got[..1], &["dlq"]);
    c.execute("SELECT queen_seek('q', 'g', NULL)", &[]).unwrap();
    c.execute(r#"SELECT count(*) FROM queen_push('[{"queue": "q", "partition": "p", "payload": 10}]')"#, &[]).unwrap();
    assert_eq!(dead(&mut c, "g"), vec![0], "the seek kept the dead letter");

    assert_eq!(replay(&mut c, Some("g"), None), 1);
    let back = pop(&mut c, Some("g"), 10);
    assert_eq!(payloads(&back), vec![0, 10], "the replayed message first, then what came after the seek");
    ack(&mut c, &back, &["completed", "completed"]);
    assert_eq!(payloads(&pop(&mut c, Some("g"), 10)), Vec::<i64>::new(), "1 and 2 stay passed");
}

/// Group g files message 1 of 0..3 as a dead letter, group h completes everything: a replay
/// gives message 1 back to g, with a fresh attempt count, and to no one else; replaying again
/// does nothing.
#[test]
fn a_replayed_dead_letter_comes_back_to_its_group_only() {
    let (_db, mut c) = queue_db("dl_replay", "", 3);
    let got = pop(&mut c, Some("g"), 10);
    ack(&mut c, &got, &["completed", "dlq", "completed"]);
    let got_h = pop(&mut c, Some("h"), 10);
    ack(&mut c, &got_h, &["completed", "completed", "completed"]);
    assert_eq!(dead(&mut c, "g"), vec![1]);
    assert_eq!(lag(&mut c, "q", Some("g")), 0);

    assert_eq!(replay(&mut c, Some("g"), None), 1);
    assert_eq!(dead(&mut c, "g"), Vec::<i64>::new(), "the dead letter is gone");
    assert_eq!(lag(&mut c, "q", Some("g")), 1, "group_lag counts it again");
    assert_eq!(replay(&mut c, Some("g"), None), 0, "a second replay finds nothing");

    assert!(pop(&mut c, Some("h"), 10).is_empty(), "another group never sees it again");
    let again = pop(&mut c, Some("g"), 10);
    assert_eq!(payloads(&again), vec![1], "only the replayed message, not those finished after it");
    assert_eq!(again[0]["attempt"], 1);
    ack(&mut c, &again, &["completed"]);
    assert!(pop(&mut c, Some("g"), 10).is_empty());
    assert_eq!(lag(&mut c, "q", Some("g")), 0);

    // The partition goes on as before.
    push_n(&mut c, "q", "p", 1);
    assert_eq!(payloads(&pop(&mut c, Some("g"), 10)), vec![0]);
}

/// One message by its id, then the rest of the group's; queue mode (NULL group) included. A
/// replayed message that fails again spends fresh retries and is filed again.
#[test]
fn replay_of_one_message_then_of_the_group() {
    let (_db, mut c) = queue_db("dl_replay_one", r#"{"retryLimit": 0}"#, 4);
    let got = pop(&mut c, None, 10);
    ack(&mut c, &got, &["dlq", "completed", "dlq", "dlq"]);
    assert_eq!(dead(&mut c, ""), Vec::<i64>::new(), "queue mode's dead letters have no group name");
    let n: i64 = c
        .query_one("SELECT count(*) FROM queen.dead_letters_view WHERE queue = 'q' AND consumer_group IS NULL", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 3);

    assert_eq!(replay(&mut c, None, Some(id_of(&got, 2))), 1);
    assert_eq!(replay(&mut c, None, Some(id_of(&got, 2))), 0, "idempotent");
    assert_eq!(replay(&mut c, Some("g"), Some(id_of(&got, 0))), 0, "another group has no such dead letter");
    let again = pop(&mut c, None, 10);
    assert_eq!(payloads(&again), vec![2]);
    // Failed once more with retryLimit 0: filed again.
    ack(&mut c, &again, &["failed"]);
    assert!(pop(&mut c, None, 10).is_empty());

    assert_eq!(replay(&mut c, None, None), 3);
    let again = pop(&mut c, None, 10);
    assert_eq!(payloads(&again), vec![0, 2, 3], "in partition order");
    ack(&mut c, &again, &["completed", "completed", "completed"]);
    assert_eq!(lag(&mut c, "q", None), 0);
}

/// Messages of one transaction: the frontier inside it moves back, and what it covered stays
/// finished; messages of an older transaction behind the frontier (it becomes pending again).
#[test]
fn replay_inside_a_transaction_and_behind_the_frontier() {
    let (_db, mut c) = queue_db("dl_replay_tx", "", 5);
    let got = pop(&mut c, Some("g"), 10);
    ack(&mut c, &got, &["completed", "dlq", "completed", "completed", "completed"]);
    assert_eq!(replay(&mut c, Some("g"), None), 1);
    let again = pop(&mut c, Some("g"), 10);
    assert_eq!(payloads(&again), vec![1]);
    ack(&mut c, &again, &["completed"]);
    assert!(pop(&mut c, Some("g"), 10).is_empty());

    // Now a dead letter in a transaction the frontier passed long ago.
    push_n(&mut c, "q", "p", 3); // 0, 1, 2
    let got = pop(&mut c, Some("g"), 10);
    ack(&mut c, &got, &["dlq", "completed", "completed"]);
    push_n(&mut c, "q", "p", 2); // 0, 1 (a later transaction)
    let got = pop(&mut c, Some("g"), 10);
    ack(&mut c, &got, &["completed", "completed"]);
    assert_eq!(replay(&mut c, Some("g"), None), 1);
    push_n(&mut c, "q", "p", 1); // 0
    let again = pop(&mut c, Some("g"), 10);
    assert_eq!(payloads(&again), vec![0, 0], "the replayed one first, then what is new");
    ack(&mut c, &again, &["completed", "completed"]);
    assert!(pop(&mut c, Some("g"), 10).is_empty());
    assert_eq!(lag(&mut c, "q", Some("g")), 0);
}

/// A replay releases the group's lease on the partition (as a seek does): the holder's acks are
/// refused, and the next pop gets the replayed message first, then the unfinished rest.
#[test]
fn a_replay_releases_the_groups_lease_there() {
    let (_db, mut c) = queue_db("dl_replay_lease", "", 2);
    let got = pop(&mut c, Some("g"), 10);
    ack(&mut c, &got, &["dlq", "completed"]);
    push_n(&mut c, "q", "p", 2); // 0, 1
    let held = pop(&mut c, Some("g"), 10);
    assert_eq!(payloads(&held), vec![0, 1]);
    ack(&mut c, &held[..1], &["completed"]);
    assert_eq!(replay(&mut c, Some("g"), None), 1);
    let late = c
        .query_one(
            "SELECT success, error FROM queen_ack($1::text::uuid, $2::text::uuid, 'completed', NULL, 'g')",
            &[&held[1]["message_id"].as_str(), &held[1]["lease_id"].as_str()],
        )
        .unwrap();
    assert_eq!((late.get::<_, bool>(0), late.get::<_, Option<String>>(1)), (false, Some("lease not held".into())));
    let again = pop(&mut c, Some("g"), 10);
    assert_eq!(payloads(&again), vec![0, 1], "the replayed message, then the one left unfinished");
    assert_eq!(again[0]["message_id"], Value::from(id_of(&got, 0).to_string()));
    assert_eq!(again[1]["message_id"], held[1]["message_id"]);
}

/// A replay or purge rolled back leaves no trace; a waiting pop is woken by a replay's commit.
#[test]
fn rolled_back_replays_and_purges_leave_no_trace_and_a_replay_wakes_a_waiting_pop() {
    let (db, mut c) = queue_db("dl_replay_rollback", "", 1);
    let got = pop(&mut c, Some("g"), 10);
    ack(&mut c, &got, &["dlq"]);
    let before: String = c.query_one("SELECT string_agg(c::text, ',') FROM queen.cursors c", &[]).unwrap().get(0);
    c.batch_execute("BEGIN").unwrap();
    assert_eq!(replay(&mut c, Some("g"), None), 1);
    let n: i32 = c.query_one("SELECT queen_purge_dead_letters('q', 'g')", &[]).unwrap().get(0);
    assert_eq!(n, 0, "replayed: nothing left to purge");
    c.batch_execute("ROLLBACK").unwrap();
    let after: String = c.query_one("SELECT string_agg(c::text, ',') FROM queen.cursors c", &[]).unwrap().get(0);
    assert_eq!(before, after);
    assert_eq!(dead(&mut c, "g"), vec![0]);
    assert!(pop(&mut c, Some("g"), 10).is_empty());

    let mut w = db.connect();
    let waiter = std::thread::spawn(move || {
        let started = std::time::Instant::now();
        let rows = w.query("SELECT payload FROM queen_pop('q', 'g', wait_ms => 20000)", &[]).unwrap();
        (rows.len(), started.elapsed())
    });
    let pid: i32 = loop {
        let r = c.query_opt("SELECT pid FROM queen.waiting_pops LIMIT 1", &[]).unwrap();
        if let Some(r) = r {
            break r.get(0);
        }
        std::thread::yield_now();
    };
    assert!(pid > 0);
    assert_eq!(replay(&mut c, Some("g"), None), 1);
    let (n, took) = waiter.join().unwrap();
    assert_eq!(n, 1);
    assert!(took < std::time::Duration::from_secs(10), "woken by the commit, not the timeout: {took:?}");
}

/// Purge: one message, by age, a whole group; the messages stay.
#[test]
fn purge_deletes_dead_letters_and_keeps_the_messages() {
    let (_db, mut c) = queue_db("dl_purge", "", 3);
    let got = pop(&mut c, Some("g"), 10);
    ack(&mut c, &got, &["dlq", "dlq", "dlq"]);
    let got_h = pop(&mut c, Some("h"), 10);
    ack(&mut c, &got_h, &["dlq", "completed", "completed"]);
    let purge = |c: &mut Client, sql: &str| -> i32 { c.query_one(sql, &[]).unwrap().get(0) };
    let id1 = id_of(&got, 1);
    assert_eq!(c.query_one("SELECT queen_purge_dead_letters('q', 'g', $1)", &[&id1]).unwrap().get::<_, i32>(0), 1);
    assert_eq!(dead(&mut c, "g"), vec![0, 2]);
    assert_eq!(
        purge(&mut c, "SELECT queen_purge_dead_letters('q', 'g', failed_before => now() - interval '1 hour')"),
        0
    );
    assert_eq!(purge(&mut c, "SELECT queen_purge_dead_letters('q', 'g', failed_before => clock_timestamp())"), 2);
    assert_eq!(purge(&mut c, "SELECT queen_purge_dead_letters('q', 'g')"), 0, "idempotent");
    assert_eq!(dead(&mut c, "h"), vec![0], "other groups keep theirs");
    assert_eq!(purge(&mut c, "SELECT queen_purge_dead_letters('nope', 'h')"), 0, "no such queue: nothing");
    let messages: i64 = c.query_one("SELECT messages FROM queen.queue_stats WHERE queue = 'q'", &[]).unwrap().get(0);
    assert_eq!(messages, 3);
    // A purged dead letter cannot be replayed; it stays finished for its group.
    assert_eq!(replay(&mut c, Some("g"), None), 0);
    assert!(pop(&mut c, Some("g"), 10).is_empty());
}

/// Both need `configure` on the queue; arguments are checked.
#[test]
fn replay_and_purge_need_configure_and_check_their_arguments() {
    let (db, mut c) = queue_db("dl_privileges", "", 1);
    let got = pop(&mut c, Some("g"), 10);
    ack(&mut c, &got, &["dlq"]);
    let role = db.role("app");
    c.execute(&format!("SELECT queen_grant('q', '{role}', ARRAY['push', 'pop', 'read'])"), &[]).unwrap();
    let mut app = db.connect_as(&role);
    for sql in ["SELECT queen_replay_dead_letters('q', 'g')", "SELECT queen_purge_dead_letters('q', 'g')"] {
        let e = app.query_one(sql, &[]).unwrap_err();
        assert_eq!(sqlstate(&e), "42501", "{sql}: {e}");
    }
    assert_eq!(dead(&mut c, "g"), vec![0]);
    c.execute(&format!("SELECT queen_grant('q', '{role}', ARRAY['configure'])"), &[]).unwrap();
    let n: i32 = app.query_one("SELECT queen_replay_dead_letters('q', 'g')", &[]).unwrap().get(0);
    assert_eq!(n, 1);
    for (sql, state) in [
        ("SELECT queen_replay_dead_letters(NULL, 'g')", "22004"),
        ("SELECT queen_purge_dead_letters('', 'g')", "22023"),
        ("SELECT queen_replay_dead_letters('q', repeat('x', 1000))", "22023"),
    ] {
        let e = c.query_one(sql, &[]).unwrap_err();
        assert_eq!(sqlstate(&e), state, "{sql}: {e}");
    }
}

/// A message max wait filed, replayed, waits afresh: the next maintenance pass leaves it.
#[test]
fn a_replayed_message_waits_afresh_for_max_wait() {
    let (_db, mut c) = queue_db("dl_max_wait", r#"{"maxWaitTimeSeconds": 1}"#, 0);
    // The group is subscribed (max wait counts for groups with a cursor on the partition).
    assert!(pop(&mut c, Some("g"), 10).is_empty());
    push_n(&mut c, "q", "p", 1);
    // Maintenance passes until one files it (points are taken a pass apart: max_wait.rs).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while dead(&mut c, "g").is_empty() {
        assert!(std::time::Instant::now() < deadline, "max wait never filed the message");
        c.execute("SELECT queen_maintain()", &[]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(replay(&mut c, Some("g"), None), 1);
    c.execute("SELECT queen_maintain()", &[]).unwrap();
    assert!(dead(&mut c, "g").is_empty(), "filed again at once");
    let again = pop(&mut c, Some("g"), 10);
    assert_eq!(payloads(&again), vec![0]);
}

/// A whole batch filed together (one transaction's 500 messages) is replayed in one call: each
/// comes back once, in push order, to its group alone (the dead letters of one transaction are
/// taken together: replay_take).
#[test]
fn a_transactions_batch_of_dead_letters_comes_back_in_order() {
    let (_db, mut c) = queue_db("dl_replay_batch", "", 500);
    let got = pop(&mut c, Some("g"), 500);
    assert_eq!(got.len(), 500);
    let lease = got[0]["lease_id"].as_str().unwrap().parse::<uuid::Uuid>().unwrap();
    let n: i64 = c.query_one("SELECT count(*) FROM queen_ack_lease($1, 'dlq')", &[&lease]).unwrap().get(0);
    assert_eq!(n, 500);
    assert_eq!(dead(&mut c, "g").len(), 500);
    assert_eq!(replay(&mut c, Some("g"), None), 500);
    let again = pop(&mut c, Some("g"), 1000);
    assert_eq!(payloads(&again), (0..500).collect::<Vec<i64>>());
    ack(&mut c, &again, &["completed"; 500]);
    assert!(pop(&mut c, Some("g"), 10).is_empty());
    assert_eq!(lag(&mut c, "q", Some("g")), 0);
}

/// A seek back before a dead letter's message owes the group the message again, and the group
/// completes it: the dead letter no longer stands — the view leaves it out, and a replay
/// delivers nothing (semantics §3.4: what a group finished stays finished). Filed again, it is
/// the new dead letter, and stands. (0.5.0 listed it, and its replay delivered the message a
/// third time.)
#[test]
fn a_dead_letter_the_group_finished_since_a_seek_back_no_longer_stands() {
    let (_db, mut c) = queue_db("dl_seek_back", "", 2);
    let got = pop(&mut c, Some("g"), 10);
    assert_eq!(payloads(&got), vec![0, 1]);
    ack(&mut c, &got, &["dlq", "completed"]);
    assert_eq!(dead(&mut c, "g"), vec![0]);
    c.execute("SELECT queen_seek('q', 'g', '2000-01-01')", &[]).unwrap();
    assert_eq!(dead(&mut c, "g"), vec![0], "a seek keeps the dead letter");
    let again = pop(&mut c, Some("g"), 10);
    assert_eq!(payloads(&again), vec![0, 1], "the seek owes both again");
    ack(&mut c, &again, &["completed", "completed"]);
    assert_eq!(dead(&mut c, "g"), Vec::<i64>::new(), "the view lists a dead letter the group completed since");
    assert_eq!(replay(&mut c, Some("g"), None), 0);
    assert_eq!(payloads(&pop(&mut c, Some("g"), 10)), Vec::<i64>::new(), "a finished message was delivered again");
    // Back once more, and filed again: the new dead letter stands, and comes back by a replay.
    c.execute("SELECT queen_seek('q', 'g', '2000-01-01')", &[]).unwrap();
    let third = pop(&mut c, Some("g"), 10);
    ack(&mut c, &third, &["dlq", "completed"]);
    assert_eq!(dead(&mut c, "g"), vec![0]);
    assert_eq!(replay(&mut c, Some("g"), None), 1);
    assert_eq!(payloads(&pop(&mut c, Some("g"), 10)), vec![0]);
}
