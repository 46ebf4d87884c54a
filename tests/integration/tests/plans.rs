//! The plans queen keeps. Every query is prepared once per backend and its generic plan kept
//! (src/spi.rs), so a plan that reads the whole messages table costs that on every call, for
//! as long as the backend lives. These tests prepare each query that reads or deletes
//! messages the way queen does, on a table large enough for the planner to know it is large,
//! and fail on any sequential scan of it. (The retention queries once joined on ctid, which
//! the planner turned into a full scan per chunk of 10 000: 214 ms on 392 000 messages, and
//! growing with the table.)

use queen_integration_tests::{prepare_query, push_spread, query_file, query_section, TestDb, QUERY_FILES};
use serde_json::{json, Value};

/// Every query of sql/queries that touches queen.messages, with its parameter types; all but
/// delete_queue, which deletes a whole queue, and analyze_messages (maintenance's ANALYZE).
const QUERIES: &[(&str, &str, &[&str])] = &[
    ("ack", "ack_find", &["uuid[]", "uuid[]", "text[]", "uuid[]", "int"]),
    ("ack", "ack_find_ids", &["uuid[]", "int"]),
    ("ack", "ack_scope", &["uuid[]", "uuid[]", "int"]),
    ("ack", "ack_message_lock", &["uuid", "text", "uuid", "int", "text[]", "uuid[]"]),
    ("ack", "ack_batch_lock", &["uuid[]", "uuid", "text", "int"]),
    ("ack", "ack_lease_lock", &["uuid", "int"]),
    ("admin", "seek", &["uuid", "text", "timestamptz", "int", "timestamptz"]),
    ("maintain", "count_scan", &["uuid", "bigint", "int"]),
    ("maintain", "retention", &["uuid", "timestamptz", "bigint", "int", "timestamptz"]),
    (
        "maintain",
        "completed_retention",
        &["uuid", "timestamptz", "bigint", "int", "text[]", "text[]", "bigint[]", "int[]", "bigint[]"],
    ),
    ("maintain", "max_wait_candidates", &["uuid", "bigint", "bigint[]", "int", "timestamptz"]),
    ("maintain", "idle_partitions", &["float8", "uuid[]", "int", "timestamptz", "uuid[]"]),
    ("maintain", "idle_queues", &["float8", "int", "timestamptz"]),
    (
        "discovery",
        "discovery_scan",
        &["uuid", "text", "bigint", "bigint", "bigint[]", "bigint", "text", "bigint", "bigint", "bigint[]", "int"],
    ),
    ("state", "look", &["uuid", "text", "bigint", "bigint", "bigint[]", "bigint[]", "bigint", "float8", "int"]),
    ("subscription", "queue_from_position", &["uuid", "timestamptz", "int"]),
    ("subscription", "partition_from_position", &["uuid", "timestamptz", "int"]),
    ("state", "dead_letter", &["uuid", "text", "bigint", "bigint", "text", "int", "int"]),
    ("state", "missing", &["uuid", "bigint[]", "bigint[]", "int"]),
    (
        "state",
        "cursor_save",
        &[
            "uuid",
            "text",
            "bigint",
            "bigint",
            "bigint[]",
            "bigint[]",
            "bigint[]",
            "bigint[]",
            "bigint",
            "bigint",
            "int",
            "timestamptz",
            "uuid",
            "timestamptz",
            "bytea",
            "bigint[]",
            "uuid",
            "timestamptz",
            "uuid",
            "bool",
            "int",
            "timestamptz",
            "bigint",
            "bool",
        ],
    ),
    ("push", "count_queue", &["uuid", "bigint"]),
    ("push", "push_one", &["uuid", "bigint", "uuid", "uuid", "text", "text", "jsonb", "uuid"]),
    (
        "push",
        "insert_messages",
        &["uuid[]", "bigint[]", "uuid[]", "uuid[]", "text[]", "text[]", "jsonb", "int[]", "uuid[]", "bigint"],
    ),
    ("push", "push_one_keyless", &["uuid", "bigint", "uuid", "uuid", "text", "text", "jsonb", "uuid"]),
    ("push", "push_known", &["uuid", "bigint", "uuid", "uuid", "text", "text", "jsonb", "uuid"]),
    ("push", "push_known_keyless", &["uuid", "bigint", "uuid", "uuid", "text", "text", "jsonb", "uuid"]),
    (
        "push",
        "insert_messages_keyless",
        &["uuid[]", "bigint[]", "uuid[]", "uuid[]", "text[]", "text[]", "jsonb", "int[]", "uuid[]", "bigint"],
    ),
    ("push", "holders", &["uuid[]", "text[]"]),
    // On Citus, in a worker's call (src/push.rs): the same on one shard.
    ("push", "citus_push_one", &["uuid", "bigint", "uuid", "uuid", "text", "text", "jsonb", "uuid", "int"]),
    ("push", "citus_push_one_keyless", &["uuid", "bigint", "uuid", "uuid", "text", "text", "jsonb", "uuid", "int"]),
    (
        "push",
        "citus_insert_messages",
        &["uuid[]", "bigint[]", "uuid[]", "uuid[]", "text[]", "text[]", "jsonb", "int[]", "uuid[]", "int"],
    ),
    (
        "push",
        "citus_insert_messages_keyless",
        &["uuid[]", "bigint[]", "uuid[]", "uuid[]", "text[]", "text[]", "jsonb", "int[]", "uuid[]", "int"],
    ),
    ("push", "citus_holders", &["uuid[]", "text[]", "int"]),
    ("cluster", "cluster_hi", &["int"]),
    ("dead_letters", "replay_take", &["uuid", "text", "uuid", "int", "uuid[]"]),
];

/// Every query that touches queen.messages is in QUERIES (or is delete_queue, or reads Citus's
/// catalogs): a new one is checked too.
#[test]
fn every_query_on_messages_is_checked() {
    let mut missing = Vec::new();
    for file in QUERY_FILES {
        for line in query_file(file).lines() {
            let Some(name) = line.strip_prefix("-- name: ") else { continue };
            let section = query_section(file, name);
            let touches = section.contains("queen.messages");
            // (Queries of Citus's catalogs, pg_dist_*, name queen.messages as a relation, and
            // are prepared only on Citus.)
            let citus_catalogs = section.contains("pg_dist_");
            if touches
                && name != "delete_queue"
                && !name.starts_with("analyze_")
                && !citus_catalogs
                && !QUERIES.iter().any(|(f, n, _)| f == file && *n == name)
            {
                missing.push(format!("{file}.sql {name}"));
            }
        }
    }
    assert!(missing.is_empty(), "add these to QUERIES with their parameter types: {missing:?}");
}

/// 30 000 messages over 300 partitions, some consumed, with statistics; kept plans generic.
/// Pushed by 30 transactions, or all by one (`one_transaction`).
fn filled(c: &mut postgres::Client, one_transaction: bool) {
    if one_transaction {
        c.batch_execute("BEGIN").unwrap();
    }
    for k in 0..30 {
        let items: Vec<Value> = (0..1000)
            .map(|i| json!({"queue": "q", "partition": format!("p{}", (k * 1000 + i) % 300), "payload": i}))
            .collect();
        c.execute("SELECT count(*) FROM queen_push($1)", &[&Value::Array(items)]).unwrap();
    }
    if one_transaction {
        c.batch_execute("COMMIT").unwrap();
    }
    c.execute("SELECT count(*) FROM queen_pop('q', 'g', batch => 500, partitions => 50, auto_ack => true)", &[])
        .unwrap();
    c.batch_execute("ANALYZE; SET plan_cache_mode = force_generic_plan").unwrap();
}

/// The plan of a query of queen's, prepared in this session (its settings, its statistics).
fn generic_plan(c: &mut postgres::Client, file: &str, name: &str, types: &[&str]) -> Vec<String> {
    let nulls = vec!["NULL"; types.len()].join(", ");
    prepare_query(c, file, name, types);
    c.query(&format!("EXPLAIN (COSTS OFF) EXECUTE {name} ({nulls})"), &[]).unwrap().iter().map(|r| r.get(0)).collect()
}

/// The generic plans of every query in QUERIES on a table filled as `filled` does, by name.
fn kept_plans(one_transaction: bool) -> Vec<(String, Vec<String>)> {
    let db = TestDb::new(if one_transaction { "plans_one_txn" } else { "plans" });
    let mut c = db.connect();
    filled(&mut c, one_transaction);
    let mut plans = Vec::new();
    for (file, name, types) in QUERIES {
        let plan = generic_plan(&mut c, file, name, types);
        plans.push((format!("{file}.sql {name}"), plan));
    }
    plans
}

/// The plans that read every message: a sequential scan of the table, or discovery reading
/// the queue's log otherwise than in the order of its index (it stops after a few hundred
/// entries; a sort reads them all first).
fn whole_table_reads(plans: &[(String, Vec<String>)]) -> Vec<String> {
    plans
        .iter()
        .filter(|(name, plan)| {
            plan.iter().any(|l| l.contains("Seq Scan on messages"))
                || (name.ends_with(" discovery_scan")
                    && !plan.iter().any(|l| l.contains("Scan using messages_queue_log on messages")))
        })
        .map(|(name, plan)| format!("{name}:\n{}", plan.join("\n")))
        .collect()
}

#[test]
fn no_kept_plan_reads_the_whole_messages_table() {
    let scans = whole_table_reads(&kept_plans(false));
    assert!(scans.is_empty(), "kept plans that read all messages:\n{}", scans.join("\n\n"));
}

/// queen_ack_lease finds its batch's messages without reading the partition's messages whole:
/// the batch's span in key order, no more rows than the batch has keys (one index descent, not
/// one a key), and a primary-key probe for a key the span did not reach. (The batch's keys come
/// from a function, queen.batch_keys, which the planner took for 1 000 rows until it was told
/// otherwise, views.sql: a plan of 0.4.0 then hashed every message of the partition against
/// them. Whichever side a plan hashes now, the span is bounded.)
#[test]
fn an_ack_of_a_whole_lease_reads_its_span_and_probes_the_rest() {
    let plans = kept_plans(false);
    let (_, plan) = plans.iter().find(|(name, _)| name.ends_with(" ack_lease_lock")).unwrap();
    let text = plan.join("\n");
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let span = (1..lines.len().saturating_sub(1))
        .find(|&i| {
            lines[i].starts_with("->  Index Scan using messages_pkey on messages")
                && lines[i + 1].contains("ROW(txid, seq) >= ROW(")
        })
        .unwrap_or_else(|| panic!("no read of the batch's span:\n{text}"));
    assert!(lines[span - 1] == "->  Limit", "the span's read is not bounded:\n{text}");
    assert!(
        text.contains("(txid = k_1.txid) AND (seq = k_1.seq)") || text.contains("(txid = k.txid) AND (seq = k.seq)"),
        "{text}"
    );
    assert!(!text.contains("Seq Scan on messages") && !text.contains("Bitmap Heap Scan on messages"), "{text}");
}

/// A queue filled by one transaction has one txid in the statistics, if any are kept: then
/// every lookup by txid looked like the whole table, and `txid IS DISTINCT FROM` (the caller's
/// own messages left out) like none of it, and discovery sorted the whole log at every pop
/// (1.6–2 s a call over 300 000 messages). queen keeps no statistics on txid (schema.sql).
#[test]
fn a_queue_filled_by_one_transaction_is_read_by_its_indexes() {
    let scans = whole_table_reads(&kept_plans(true));
    assert!(scans.is_empty(), "kept plans that read all messages:\n{}", scans.join("\n\n"));
}

/// A plan made while a table was empty stays until the table's statistics change; for ready,
/// cursors and discovery it joins by scanning, and a pop took seconds once the table had
/// grown. A maintenance pass analyzes queen's tables that have outgrown their statistics,
/// and only those.
#[test]
fn maintenance_analyzes_the_tables_that_outgrew_their_statistics() {
    let db = TestDb::new("plans_stale");
    let mut c = db.connect();
    // (Autovacuum kept away: it may analyze them first.)
    for sql in [
        "ALTER TABLE queen.messages SET (autovacuum_enabled = off)",
        "ALTER TABLE queen.ready SET (autovacuum_enabled = off)",
        "VACUUM ANALYZE queen.messages, queen.ready",
    ] {
        c.batch_execute(sql).unwrap();
    }
    let analyzed = |c: &mut postgres::Client, table: &str| -> i64 {
        c.query_one(
            "SELECT analyze_count FROM pg_stat_user_tables WHERE schemaname = 'queen' AND relname = $1",
            &[&table],
        )
        .unwrap()
        .get(0)
    };
    let before = analyzed(&mut c, "messages");
    push_spread(&mut c, "q", 3000, 300);
    let report: Value = c.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    let refreshed = report["statistics_refreshed"].as_array().cloned().unwrap_or_default();
    assert!(refreshed.contains(&json!("messages")), "{report}");
    assert!(!refreshed.contains(&json!("ready")), "ready did not grow: {report}");
    c.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
    assert_eq!(analyzed(&mut c, "messages"), before + 1);
    let pages: i32 =
        c.query_one("SELECT relpages FROM pg_class WHERE oid = 'queen.messages'::regclass", &[]).unwrap().get(0);
    assert!(pages > 2, "relpages {pages}");
    // Up to date now: the next pass leaves it.
    let report: Value = c.query_one("SELECT queen_maintain()", &[]).unwrap().get(0);
    assert_eq!(report["statistics_refreshed"], json!([]), "{report}");
}

/// An ack that names its message as Queen's clients do, by (transactionId, partitionId), costs
/// one probe of the unique index on (partition_id, transaction_id), and a keyless message (its
/// transaction id is its message id) one probe of the message id's: docs/api.md, "Addressing".
#[test]
fn an_ack_by_transaction_id_is_one_index_probe() {
    let db = TestDb::new("plans_ack");
    let mut c = db.connect();
    filled(&mut c, false);
    prepare_query(&mut c, "ack", "ack_find", &["uuid[]", "uuid[]", "text[]", "uuid[]", "int"]);
    let plan: Vec<String> = c
        .query("EXPLAIN (COSTS OFF) EXECUTE ack_find (NULL, NULL, NULL, NULL, NULL)", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("Index Scan using messages_transaction_id on messages"), "{plan}");
    assert!(plan.contains("Index Scan using messages_message_id on messages"), "{plan}");
    assert!(!plan.contains("Seq Scan"), "{plan}");
    // And it finds them: every message of a partition by its transaction id.
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM queen_ack((SELECT jsonb_agg(jsonb_build_object('transactionId', transaction_id,
                 'partitionId', partition_id, 'consumerGroup', 'h')) FROM queen_pop('q', 'h', batch => 100)))
              WHERE success",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 100);
}

/// A pop of 10 of group g of queue q acked with `queen_ack_lease`, and another acked with the
/// jsonb batch form built from its rows: how many each acked.
fn pop_and_ack_both_ways(w: &mut postgres::Client) -> (i64, i64) {
    let n: i64 = w
        .query_one(
            "SELECT count(*) FROM queen_ack_lease((SELECT lease_id FROM queen_pop('q', 'g', batch => 10) LIMIT 1))",
            &[],
        )
        .unwrap()
        .get(0);
    let m: i64 = w
        .query_one(
            "SELECT count(*) FROM queen_ack((SELECT jsonb_agg(to_jsonb(m)) FROM queen_pop('q', 'g', batch => 10) m))
              WHERE success",
            &[],
        )
        .unwrap()
        .get(0);
    (n, m)
}

/// Sequential scans of queen's tables that grow with the queue, so far in this database (the
/// callers flushed their statistics: pg_stat_force_next_flush()).
fn table_scans(c: &mut postgres::Client) -> Vec<(String, i64)> {
    c.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
    c.query(
        "SELECT relname::text, seq_scan FROM pg_stat_user_tables WHERE schemaname = 'queen'
            AND relname IN ('messages', 'partitions', 'ready', 'cursors', 'discovery') ORDER BY relname",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// A kept plan is made once, for the tables as they are then (src/spi.rs, PlanSettings). Made
/// after a `VACUUM ANALYZE` found the hints, cursor rows and discovery points empty (a bulk
/// load, then the first pops), plans that scan those tables stayed until the next ANALYZE, and
/// every pop scanned them once per partition found: 1.3 s a call over 1 000 partitions. queen
/// plans its statements with sequential scans off: the pops that follow, over tables grown to
/// a thousand rows, scan none of them.
#[test]
fn plans_made_while_the_tables_were_empty_read_them_by_index() {
    let db = TestDb::new("plans_empty");
    let mut c = db.connect();
    for t in ["messages", "partitions", "ready", "cursors", "discovery"] {
        c.batch_execute(&format!("ALTER TABLE queen.{t} SET (autovacuum_enabled = off)")).unwrap();
    }
    push_spread(&mut c, "q", 3000, 1000);
    c.batch_execute("VACUUM ANALYZE queen.messages, queen.partitions, queen.ready, queen.cursors, queen.discovery")
        .unwrap();
    let mut w = db.connect();
    let round = |w: &mut postgres::Client| {
        let acked = pop_and_ack_both_ways(w);
        w.batch_execute("SELECT pg_stat_force_next_flush()").unwrap();
        acked
    };
    // The first pops make the plans, while ready, cursors and discovery are empty.
    assert_eq!(round(&mut w), (3, 3));
    let before = table_scans(&mut c);
    let mut delivered = 0;
    for _ in 0..20 {
        let (n, m) = round(&mut w);
        delivered += n + m;
    }
    assert_eq!(delivered, 20 * 6, "every pop delivered its partition's three messages");
    let rows: i64 = c.query_one("SELECT count(*) FROM queen.cursors", &[]).unwrap().get(0);
    assert!(rows >= 40, "cursor rows: {rows}");
    let after = table_scans(&mut c);
    let scanned: Vec<String> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| a.1 > b.1)
        .map(|(b, a)| format!("{} ({} scans)", b.0, a.1 - b.1))
        .collect();
    assert!(scanned.is_empty(), "pops scanned: {scanned:?}");
}

/// Queries over the hints and cursor rows that are not in QUERIES (they read no message).
const HINT_QUERIES: &[(&str, &str, &[&str])] = &[
    (
        "discovery",
        "discovery_record",
        &[
            "uuid",
            "text",
            "uuid[]",
            "bool",
            "bigint",
            "bigint",
            "bigint[]",
            "text",
            "bigint[]",
            "bigint",
            "int",
            "bigint",
            "timestamptz",
        ],
    ),
    ("pop", "candidates", &["uuid", "text", "uuid[]", "bigint", "int", "timestamptz"]),
    (
        "pop",
        "hints_set",
        &["uuid", "uuid", "text", "timestamptz", "bigint", "bigint", "bigint[]", "int", "bigint", "bigint"],
    ),
    ("pop", "hints_delete", &["uuid", "text", "bigint", "bigint", "bigint[]", "int", "bigint"]),
];

/// The hints and cursor rows a statement reads for some partitions (discovery's: up to 1 000
/// at once) are found by their partition, whatever the statistics and the indexes' sizes said
/// when the plan was made. Two plans the bench's drain ran with:
/// - made while `ready` was analyzed empty, discovery_record read the group's hints once and
///   compared each with each partition found (a nested loop joining by a filter: 160 000
///   comparisons, 28 ms, for 800 partitions and 200 hints);
/// - made once hint churn had grown `ready_partition` (random uuids) past the dense
///   `ready_next`, discovery_scan probed each partition through `ready_next` without its first
///   column, reading every hint of the group (72 ms a scan over 1 000 partitions).
/// queen_ack_lease's lock, sorted by partition, read the whole primary key of cursors in its
/// order rather than sort the few rows of its lease.
#[test]
fn hints_and_cursor_rows_are_found_by_partition_whatever_the_statistics() {
    let db = TestDb::new("plans_hints_empty");
    let mut c = db.connect();
    push_spread(&mut c, "q", 3000, 1000);
    c.batch_execute("VACUUM ANALYZE queen.messages, queen.partitions, queen.ready, queen.cursors, queen.discovery")
        .unwrap();
    // Hints come and go: their index by partition (random uuids) grows, and the one by due
    // time stays dense; the statistics then said nothing about which to use.
    c.batch_execute(
        "INSERT INTO queen.ready (queue_id, consumer_group, partition_id, ready_at, txid)
         SELECT (SELECT queue_id FROM queen.queues LIMIT 1), 'g', gen_random_uuid(),
                now() + i * interval '1 microsecond', 1
           FROM generate_series(1, 50000) i;
         DELETE FROM queen.ready",
    )
    .unwrap();
    c.batch_execute("ANALYZE queen.ready").unwrap();
    // As queen plans its statements (src/spi.rs, PlanSettings).
    c.batch_execute("SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off; SET jit = off").unwrap();
    let (mut joined, mut groups) = (Vec::new(), Vec::new());
    for (file, name, types) in QUERIES.iter().chain(HINT_QUERIES) {
        let plan = generic_plan(&mut c, file, name, types);
        // (Maintenance and the mapping check read every cursor row of the shard on purpose.)
        let whole = ["retention", "max_wait_candidates", "cluster_hi"].contains(name);
        if joins_by_filter(&plan) || (!whole && reads_an_index_whole(&plan)) {
            joined.push(format!("{file}.sql {name}:\n{}", plan.join("\n")));
        }
        if reads_other_groups_hints(&plan) {
            groups.push(format!("{file}.sql {name}:\n{}", plan.join("\n")));
        }
    }
    assert!(joined.is_empty(), "plans that read hints or cursor rows whole:\n{}", joined.join("\n\n"));
    assert!(groups.is_empty(), "probes of a partition's hints that read every group's:\n{}", groups.join("\n\n"));
}

/// Whether a plan probes a partition's hints (ready_partition, by one partition) without its
/// group in the index's bounds: each probe then reads every group's hints of the partition (8
/// where 8 groups read a queue: discovery's scan of 3 200 log entries took 5.4 ms, 3.6 with the
/// group in the bounds). A list of partitions (`= ANY`) is read whole, for the few partitions
/// a discovery hints.
fn reads_other_groups_hints(plan: &[String]) -> bool {
    plan.iter().enumerate().any(|(i, l)| {
        let Some(cond) =
            plan[i + 1..].iter().take(2).find(|c| c.contains("Index Cond:") || c.contains("Recheck Cond:"))
        else {
            return false;
        };
        l.contains("Scan")
            && l.contains(" ready_partition")
            && !cond.contains("ANY")
            && !cond.contains("consumer_group")
    })
}

/// Whether a plan joins on the partition by a filter over a scan of hints or cursor rows that
/// its partition does not bound: every row of the scan compared with every row of the other
/// side. (A join filter over a scan bounded by the partitions, `partition_id = ANY (...)`, is
/// not: it compares the few rows the index found.)
fn joins_by_filter(plan: &[String]) -> bool {
    plan.iter().enumerate().any(|(i, l)| {
        l.contains("Join Filter:")
            && l.contains("partition_id")
            && plan[i + 1..].iter().take(8).enumerate().any(|(j, scan)| {
                let on_hints = scan.contains(" on ready") || scan.contains(" on cursors");
                let bounded = plan[i + 1 + j + 1..]
                    .iter()
                    .take(2)
                    .any(|cond| cond.contains("Index Cond:") && cond.contains("partition_id"));
                scan.contains("Scan") && on_hints && !bounded
            })
    })
}

/// Whether a plan reads an index of the hints or cursor rows without its first column (the
/// whole index, every hint of the group, say, for each partition probed).
fn reads_an_index_whole(plan: &[String]) -> bool {
    plan.iter().enumerate().any(|(i, l)| {
        let first = [("ready_next", "queue_id"), ("ready_partition", "partition_id"), ("cursors_pkey", "partition_id")]
            .iter()
            .find(|(index, _)| l.contains(&format!(" {index} ")) || l.ends_with(&format!(" {index}")));
        let Some((_, column)) = first.filter(|_| l.contains("Scan")) else { return false };
        let cond = plan[i + 1..].iter().take(2).find(|c| c.contains("Index Cond:") || c.contains("Recheck Cond:"));
        !cond.is_some_and(|c| c.contains(&format!("({column} ")))
    })
}

/// Whether this connection's backend has loaded the JIT provider (LLVM): it does at the first
/// statement it compiles.
fn jit_loaded(c: &mut postgres::Client) -> bool {
    let maps: String = c.query_one("SELECT pg_read_file('/proc/self/maps')", &[]).unwrap().get(0);
    maps.contains("llvmjit")
}

/// No statement of queen is compiled by JIT, whatever the session's JIT settings: with
/// sequential scans off (src/spi.rs) a plan that reads a table without an index costs 10^10,
/// and the mapping check every backend runs first (`queen.cluster`) and the maintenance pass's
/// visibility point were compiled by LLVM at every run (0.65–2.2 s each). The user's own
/// statements here cost less than `jit_above_cost`; queen's (discovery's scan, the look) more.
#[test]
fn no_statement_of_queen_is_jit_compiled() {
    let db = TestDb::new("plans_no_jit");
    let mut c = db.connect();
    // The check can fail: a statement above jit_above_cost loads the provider.
    c.batch_execute("SET jit = on; SET jit_above_cost = 0; SELECT count(*) FROM pg_class").unwrap();
    assert!(jit_loaded(&mut c), "this server compiles with JIT");
    let mut w = db.connect();
    w.batch_execute(
        "SET jit = on; SET jit_above_cost = 1000; SET jit_inline_above_cost = 1000; SET jit_optimize_above_cost = 1000",
    )
    .unwrap();
    push_spread(&mut w, "q", 300, 30);
    assert_eq!(pop_and_ack_both_ways(&mut w), (10, 10));
    w.batch_execute(
        "SELECT queen_maintain(); SELECT queen_seek('q', 'g', NULL); SELECT count(*) FROM queen_pop('q', 'h', auto_ack => true)",
    )
    .unwrap();
    assert!(!jit_loaded(&mut w), "a statement of queen was compiled by JIT");
}
