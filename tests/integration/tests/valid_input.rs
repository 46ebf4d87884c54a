//! semantics §10: valid input is accepted whatever its shape. Any valid jsonb payload — nested
//! deeper than serde_json's recursion limit, numbers beyond f64, long strings, unicode
//! escapes — is pushed by the batch form as by the scalar form, and comes back unchanged.

use queen_integration_tests::TestDb;
use serde_json::Value;

/// Payloads as SQL jsonb literals.
fn payloads() -> Vec<String> {
    let deep = format!("{}1{}", "[".repeat(140), "]".repeat(140));
    let deep_obj = format!("{}1{}", "{\"a\": ".repeat(200), "}".repeat(200));
    vec![
        deep,
        deep_obj,
        r#"{"x": 1e400}"#.into(),
        r#"{"x": -1.0000000000000000000000000000000001}"#.into(),
        r#"{"s": "\u00e9\ud83d\ude00\u0000x"}"#.replace("\\u0000", "\\u0001"),
        format!("{{\"long\": \"{}\"}}", "y".repeat(1 << 20)),
        "null".into(),
        "\"just a string\"".into(),
        "-12.5e-3".into(),
        "true".into(),
        "[]".into(),
        r#"{"a": "odd", "n": 1.5, "o": {"p": [0.25]}}"#.into(),
    ]
}

#[test]
fn the_batch_form_takes_any_valid_jsonb_and_payloads_come_back_unchanged() {
    let db = TestDb::new("valid_input");
    let mut c = db.connect();
    for (i, p) in payloads().iter().enumerate() {
        // The scalar form and the batch form, one after the other, into partition i.
        c.execute("SELECT queen_push('q', $1::text::jsonb, $2)", &[p, &i.to_string()]).unwrap();
        c.execute(
            "SELECT * FROM queen_push(jsonb_build_array(jsonb_build_object('queue', 'q', 'partition', $2::text, 'payload', $1::text::jsonb)))",
            &[p, &i.to_string()],
        )
        .unwrap_or_else(|e| panic!("payload {i}: {e}"));
        let rows = c
            .query(
                "SELECT m.payload::text = $1::text::jsonb::text, m.message_id, m.lease_id
                   FROM queen_pop('q', 'g', batch => 2, partition => $2) m",
                &[p, &i.to_string()],
            )
            .unwrap();
        assert_eq!(rows.len(), 2, "payload {i}");
        for r in &rows {
            assert!(r.get::<_, bool>(0), "payload {i} came back changed");
        }
        // The popped rows, payload included, acked back in one batch.
        let acked: i64 = c
            .query_one(
                "SELECT count(*) FILTER (WHERE success) FROM queen_ack((
                    SELECT jsonb_agg(jsonb_build_object('messageId', x.message_id, 'leaseId', $1::uuid,
                                                        'consumerGroup', 'g', 'payload', x.payload))
                      FROM queen.messages x WHERE x.partition = $2))",
                &[&rows[0].get::<_, uuid::Uuid>(2), &i.to_string()],
            )
            .unwrap()
            .get(0);
        assert_eq!(acked, 2, "payload {i}");
    }
    let n: i64 = c.query_one("SELECT count(*) FROM queen.messages", &[]).unwrap().get(0);
    assert_eq!(n, 2 * payloads().len() as i64);
    // An item without a payload pushes JSON null (semantics §3.1), among items with one.
    c.execute(
        r#"SELECT * FROM queen_push('[{"queue": "q", "partition": "none"},
                                     {"queue": "q", "partition": "none", "payload": {"k": 1}},
                                     {"queue": "q", "partition": "none", "payload": null}]')"#,
        &[],
    )
    .unwrap();
    let popped: Vec<String> = c
        .query("SELECT payload::text FROM queen_pop('q', 'g', batch => 3, partition => 'none')", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(popped, ["null", r#"{"k": 1}"#, "null"]);
    // Options read from any valid jsonb too: a value beyond f64 is refused by name.
    let err = c.query_one("SELECT queen_configure('q', '{\"leaseTime\": 1e400}')", &[]).unwrap_err();
    assert!(err.as_db_error().unwrap().message().contains("option \"leaseTime\""), "{err}");
    let v: Value = c
        .query_one(
            &format!(
                "SELECT queen_configure('q', '{{\"leaseTime\": 5, \"x_nested\": {}}}'::jsonb - 'x_nested')",
                payloads()[0]
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(v["options"]["leaseTime"], 5);
}

/// Every payload a push or a schedule accepts is read back by every reader: `queen_timers` and
/// `queen_message` included, whatever its depth (0.5.0 parsed them into serde_json trees and
/// failed with XX000 past 128 levels, for every reader of the queue).
#[test]
fn timers_and_message_detail_read_back_any_payload() {
    let db = TestDb::new("valid_readers");
    let mut c = db.connect();
    for (i, p) in payloads().iter().enumerate() {
        let key = i.to_string();
        // (A timer keeps at most 1 MiB: the long string is for pushes only.)
        if p.len() < 1 << 20 {
            c.query(
                "SELECT * FROM queen_schedule('q', $2, $1::text::jsonb, clock_timestamp() + interval '1 hour')",
                &[p, &key],
            )
            .unwrap_or_else(|e| panic!("payload {i}: {e}"));
            let same: bool = c
                .query_one("SELECT payload::text = $1::text::jsonb::text FROM queen_timers('q', $2)", &[p, &key])
                .unwrap_or_else(|e| panic!("payload {i}: queen_timers: {e}"))
                .get(0);
            assert!(same, "payload {i}: queen_timers changed it");
        }
        c.query("SELECT * FROM queen_push('q', $1::text::jsonb, partition => 'p', transaction_id => $2)", &[p, &key])
            .unwrap();
        // Compared in SQL: the client's own JSON parser stops at 128 levels.
        let r = c
            .query_one(
                "SELECT d -> 'payload' = $1::text::jsonb, d ->> 'transactionId'
                   FROM (SELECT queen_message(partition_id, $2) AS d FROM queen.partitions WHERE name = 'p') x",
                &[p, &key],
            )
            .unwrap_or_else(|e| panic!("payload {i}: queen_message: {e}"));
        assert!(r.get::<_, bool>(0), "payload {i}: queen_message changed it");
        assert_eq!(r.get::<_, String>(1), key, "payload {i}");
    }
}
