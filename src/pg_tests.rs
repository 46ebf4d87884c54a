//! In-backend tests (`#[pg_test]`): logic that one session can check. Everything about
//! concurrency, transactions and waiting is in tests/integration, over real connections.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};

    fn configure(sql_args: &str) -> Value {
        Spi::get_one::<pgrx::JsonB>(&format!("SELECT queen_configure({sql_args})"))
            .expect("queen_configure ran")
            .expect("queen_configure returned a value")
            .0
    }

    /// The SQLSTATE and message of an SQL statement that must fail, caught in a subtransaction
    /// by PL/pgSQL so that the test's own transaction goes on.
    fn error_of(sql: &str) -> (String, String) {
        let block = format!(
            "DO $$ BEGIN {sql}; RAISE EXCEPTION 'no error'; EXCEPTION WHEN OTHERS THEN \
             PERFORM set_config('queen_test.err', SQLSTATE || ' ' || SQLERRM, true); END $$"
        );
        Spi::run(&block).expect("the DO block runs");
        let got = Spi::get_one::<String>("SELECT current_setting('queen_test.err')").unwrap().unwrap();
        let (state, msg) = got.split_once(' ').unwrap();
        (state.to_string(), msg.to_string())
    }

    #[pg_test]
    fn configure_returns_defaults_for_a_new_queue() {
        let v = configure("'orders'");
        assert_eq!(v["queue"], json!("orders"));
        assert_eq!(
            v["options"],
            json!({"leaseTime": 300, "retryLimit": 3, "retryDelay": 1000, "deadLetterQueue": true,
                   "delayedProcessing": 0, "windowBuffer": 0, "maxSize": 0, "retentionSeconds": 0,
                   "completedRetentionSeconds": 0, "maxWaitTimeSeconds": 0})
        );
        // The queue exists now.
        let n = Spi::get_one::<i64>("SELECT count(*) FROM queen.queues WHERE name = 'orders'");
        assert_eq!(n, Ok(Some(1)));
    }

    #[pg_test]
    fn configure_keeps_options_not_given() {
        configure("'q', '{\"leaseTime\": 60, \"retryLimit\": 0}'");
        let v = configure("'q', '{\"deadLetterQueue\": false}'");
        assert_eq!(v["options"]["leaseTime"], json!(60));
        assert_eq!(v["options"]["retryLimit"], json!(0));
        assert_eq!(v["options"]["deadLetterQueue"], json!(false));
        assert_eq!(v["options"]["retryDelay"], json!(1000));
        // NULL options and named notation change nothing.
        let again = configure("queue => 'q', options => NULL");
        assert_eq!(again, v);
        // Still one row for the queue.
        assert_eq!(Spi::get_one::<i64>("SELECT count(*) FROM queen.queues WHERE name = 'q'"), Ok(Some(1)));
    }

    #[pg_test]
    fn configure_refuses_bad_input_and_changes_nothing() {
        configure("'q', '{\"leaseTime\": 60}'");
        let cases = [
            ("SELECT queen_configure('q', '{\"leaseTme\": 5}')", "22023", "option \"leaseTme\""),
            ("SELECT queen_configure('q', '{\"leaseTime\": \"300\"}')", "22023", "option \"leaseTime\""),
            ("SELECT queen_configure('q', '{\"leaseTime\": 0}')", "22023", "option \"leaseTime\""),
            ("SELECT queen_configure('q', '{\"retryDelay\": -1}')", "22023", "option \"retryDelay\""),
            ("SELECT queen_configure('q', '{\"deadLetterQueue\": \"yes\"}')", "22023", "option \"deadLetterQueue\""),
            ("SELECT queen_configure('q', '[1]')", "22023", "argument \"options\""),
            ("SELECT queen_configure('q', '{\"leaseTime\": 10, \"maxSize\": 1.5}')", "22023", "option \"maxSize\""),
            ("SELECT queen_configure(NULL, '{}')", "22004", "argument \"queue\""),
            ("SELECT queen_configure('', '{}')", "22023", "argument \"queue\""),
            ("SELECT queen_configure(repeat('x', 256), '{}')", "22023", "256 characters"),
            ("SELECT queen_configure('q', '{bad json')", "22P02", "json"),
        ];
        for (sql, state, needle) in cases {
            let (got_state, msg) = error_of(sql);
            assert_eq!(got_state, state, "{sql}: {msg}");
            assert!(msg.contains(needle), "{sql}: message {msg:?} should name {needle:?}");
        }
        // None of them changed the queue, not even the valid leaseTime next to a bad maxSize.
        assert_eq!(configure("'q'")["options"]["leaseTime"], json!(60));
        // A refused configure of a new queue did not create it.
        assert_eq!(Spi::get_one::<i64>("SELECT count(*) FROM queen.queues WHERE name = ''"), Ok(Some(0)));
    }

    #[pg_test]
    fn configure_is_callable_with_untyped_literals_and_from_plpgsql() {
        let v = Spi::get_one::<pgrx::JsonB>("SELECT queen_configure('p', options => '{\"maxSize\": 5000000000}')")
            .unwrap()
            .unwrap()
            .0;
        assert_eq!(v["options"]["maxSize"], json!(5_000_000_000i64));
    }

    #[pg_test]
    fn batch_fields_are_read_from_binary_jsonb() {
        Spi::connect(|c| {
            let t = c
                .select(
                    r#"SELECT '[{"message_id": "x", "payload": {"deep": [1, 2]}, "consumerGroup": 5,
                                "_status": false, "error": null, "leaseId": "ü"}, 7, [1]]'::jsonb"#,
                    None,
                    &[],
                )
                .unwrap();
            let j = t.first().get_one::<crate::jsonb::Jsonb>().unwrap().unwrap();
            let keys = ["message_id", "consumerGroup", "_status", "error", "leaseId", "absent"];
            let elements = j.elements(&keys).unwrap();
            let expected =
                json!({"message_id": "x", "consumerGroup": 5, "_status": false, "error": null, "leaseId": "ü"});
            assert_eq!(
                elements,
                vec![
                    crate::jsonb::Element::of(&expected, &keys),
                    crate::jsonb::Element::Other("number"),
                    crate::jsonb::Element::Other("array"),
                ]
            );
            // Fields in the object's order (keys by length, then bytes), strings borrowed.
            match &elements[0] {
                crate::jsonb::Element::Object(f) => {
                    let names: Vec<&str> = f.0.iter().map(|(k, _)| *k).collect();
                    assert_eq!(names, ["error", "_status", "leaseId", "message_id", "consumerGroup"]);
                    assert_eq!(f.get("leaseId"), Some(&crate::jsonb::Field::Str("ü".into())));
                    assert!(matches!(
                        f.get("message_id"),
                        Some(crate::jsonb::Field::Str(std::borrow::Cow::Borrowed(_)))
                    ));
                    assert_eq!(f.get("consumerGroup"), Some(&crate::jsonb::Field::Number("5".into())));
                }
                other => panic!("{other:?}"),
            }
            // Past JB_OFFSET_STRIDE (32) children, where JEntries hold end offsets: an array of
            // 70 elements, objects of 40 keys, the wanted ones among the last; numerics and
            // containers (INTALIGNed) between strings of odd lengths.
            let mut obj = serde_json::Map::new();
            for k in 0..40 {
                obj.insert(format!("k{k:02}{}", "x".repeat(k % 3)), json!(k));
            }
            obj.insert("zz_num".into(), json!(1.5));
            obj.insert("zz_str".into(), json!("ü日🙂 odd"));
            obj.insert("zz_obj".into(), json!({"a": [1, 2]}));
            obj.insert("zz_arr".into(), json!([{"b": 1}]));
            obj.insert("zz_t".into(), json!(true));
            obj.insert("zz_null".into(), json!(null));
            let mut batch: Vec<serde_json::Value> = (0..35).map(|i| json!(i)).collect();
            batch.extend((0..35).map(|i| {
                let mut o = obj.clone();
                o.insert("i".into(), json!(i));
                o.insert("odd".into(), json!("y".repeat(i)));
                serde_json::Value::Object(o)
            }));
            let text = serde_json::Value::Array(batch).to_string();
            let t = c.select("SELECT $1::text::jsonb", None, &[text.as_str().into()]).unwrap();
            let j = t.first().get_one::<crate::jsonb::Jsonb>().unwrap().unwrap();
            let keys = ["zz_num", "zz_str", "zz_obj", "zz_arr", "zz_t", "zz_null", "k38xx", "k00", "i", "odd", "nope"];
            let elements = j.elements(&keys).unwrap();
            assert_eq!(elements.len(), 70);
            assert!(elements[..35].iter().all(|e| *e == crate::jsonb::Element::Other("number")));
            for (i, e) in elements[35..].iter().enumerate() {
                let expected = json!({"zz_num": 1.5, "zz_str": "ü日🙂 odd", "zz_obj": {}, "zz_arr": [], "zz_t": true,
                                      "zz_null": null, "k38xx": 38, "k00": 0, "i": i, "odd": "y".repeat(i)});
                assert_eq!(*e, crate::jsonb::Element::of(&expected, &keys), "element {}", 35 + i);
            }
            let t = c.select(r#"SELECT '[{"a": 1e400, "b": "x"}, "s", null, true, {}]'::jsonb"#, None, &[]).unwrap();
            let j = t.first().get_one::<crate::jsonb::Jsonb>().unwrap().unwrap();
            let elements = j.elements(&["a", "b"]).unwrap();
            match &elements[0] {
                crate::jsonb::Element::Object(m) => {
                    assert_eq!(m.get("a").unwrap().json().len(), 401, "a number beyond f64 stays a number");
                    assert_eq!(m.get("b"), Some(&crate::jsonb::Field::Str("x".into())));
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(
                elements[1..],
                [
                    crate::jsonb::Element::Other("string"),
                    crate::jsonb::Element::Other("null"),
                    crate::jsonb::Element::Other("boolean"),
                    crate::jsonb::Element::Object(crate::jsonb::Fields::default()),
                ]
            );
            let t = c.select("SELECT '5'::jsonb", None, &[]).unwrap();
            assert_eq!(t.first().get_one::<crate::jsonb::Jsonb>().unwrap().unwrap().elements(&keys), Err("scalar"));
            let t = c.select("SELECT '{\"a\": 1}'::jsonb", None, &[]).unwrap();
            let j = t.first().get_one::<crate::jsonb::Jsonb>().unwrap().unwrap();
            assert_eq!(j.elements(&keys), Err("object"));
            let t = c
                .select(r#"SELECT '{"a": 1e400, "b": {"c": [1]}, "d": "x", "e": [2, {}]}'::jsonb"#, None, &[])
                .unwrap();
            let j = t.first().get_one::<crate::jsonb::Jsonb>().unwrap().unwrap();
            let v = j.shallow();
            assert_eq!(v["a"].to_string().len(), 401, "a number beyond f64 stays a number: {}", v["a"]);
            assert_eq!((v["b"].clone(), v["d"].clone(), v["e"].clone()), (json!({}), json!("x"), json!([])));
            let t = c.select("SELECT '5'::jsonb", None, &[]).unwrap();
            assert_eq!(t.first().get_one::<crate::jsonb::Jsonb>().unwrap().unwrap().shallow(), json!(5));
        })
    }

    #[pg_test]
    fn payloads_are_copied_out_of_a_batch_as_the_arrow_operator_copies_them() {
        // Every JSON type as a payload, among other keys, odd lengths before them (numerics
        // and containers start INTALIGNed), and past JB_OFFSET_STRIDE elements (end offsets).
        let kinds = [
            json!({"deep": [1, {"b": "x"}], "n": 2.5}),
            json!([1, "two", null]),
            json!("a string ü"),
            json!(12.5),
            json!(-0.000001),
            json!(true),
            json!(false),
            json!(null),
            json!({}),
            json!([]),
        ];
        let mut batch = Vec::new();
        for i in 0..40 {
            let mut o = serde_json::Map::new();
            o.insert("queue".into(), json!("y".repeat(i % 5)));
            if i % 11 != 10 {
                o.insert("payload".into(), kinds[i % kinds.len()].clone());
            }
            o.insert("zzz".into(), json!(i));
            batch.push(serde_json::Value::Object(o));
        }
        batch.push(json!(7));
        let text = serde_json::Value::Array(batch).to_string();
        Spi::connect(|c| {
            let t = c.select("SELECT $1::text::jsonb", None, &[text.as_str().into()]).unwrap();
            let j = t.first().get_one::<crate::jsonb::Jsonb>().unwrap().unwrap();
            // (Debug builds also compare each with `->`'s bytes inside values_of.)
            let payloads = j.values_of("payload");
            assert_eq!(payloads.len(), 41);
            for (i, m) in payloads.iter().enumerate() {
                let same: Option<bool> = match m {
                    None => {
                        let absent = c
                            .select(
                                "SELECT ($1::text::jsonb -> $2 -> 'payload') IS NULL",
                                None,
                                &[text.as_str().into(), (i as i32).into()],
                            )
                            .unwrap()
                            .first()
                            .get_one::<bool>()
                            .unwrap();
                        absent
                    }
                    Some(m) => c
                        .select(
                            "SELECT $1 = ($2::text::jsonb -> $3 -> 'payload')
                                AND $1::text = ($2::text::jsonb -> $3 -> 'payload')::text",
                            None,
                            &[m.to_jsonb().into(), text.as_str().into(), (i as i32).into()],
                        )
                        .unwrap()
                        .first()
                        .get_one::<bool>()
                        .unwrap(),
                };
                assert_eq!(same, Some(true), "element {i}: {m:?}");
            }
            assert_eq!(payloads.iter().filter(|m| m.is_none()).count(), 4, "three without a payload, and 7");
            let null = c.select("SELECT $1 = 'null'::jsonb", None, &[crate::jsonb::Jsonb::null().into()]).unwrap();
            assert_eq!(null.first().get_one::<bool>().unwrap(), Some(true));
            let t = c.select("SELECT '{\"payload\": 1}'::jsonb", None, &[]).unwrap();
            let j = t.first().get_one::<crate::jsonb::Jsonb>().unwrap().unwrap();
            assert!(j.values_of("payload").is_empty(), "not an array: nothing");
        })
    }
    /// The search_path a scope of gucs::with_fixed_search_path leaves alone until something
    /// fixes it (spi.rs, before every statement), then fixed until the scope ends, inner
    /// scopes and GUC levels included; the caller's comes back after.
    #[pg_test]
    fn the_search_path_is_fixed_once_needed_and_given_back() {
        use crate::gucs::{fix_search_path, with_fixed_search_path, with_settings};
        let path = || Spi::get_one::<String>("SELECT current_setting('search_path')").unwrap().unwrap();
        Spi::run("SET search_path = public, pg_catalog").unwrap();
        let (caller, fixed) = ("public, pg_catalog", "pg_catalog, pg_temp");
        with_fixed_search_path(|| {
            assert_eq!(path(), caller, "nothing needed it yet");
            with_fixed_search_path(|| {
                fix_search_path();
                assert_eq!(path(), fixed);
            });
            assert_eq!(path(), caller, "an inner scope ends its own level");
            with_settings(&[(c"lock_timeout", c"1s")], || assert_eq!(path(), fixed, "fixed before a level"));
            assert_eq!(path(), fixed, "and still after it");
            with_fixed_search_path(|| {
                fix_search_path();
                assert_eq!(path(), fixed, "fixed by the outer scope");
            });
            assert_eq!(path(), fixed);
        });
        assert_eq!(path(), caller);
        // A statement of queen's fixes it: the push's first into a partition runs some.
        with_fixed_search_path(|| {
            Spi::run("SELECT queen_push('q', '1', 'p')").unwrap();
            assert_eq!(path(), caller, "queen_push's own scope ended");
            assert_eq!(crate::session::connect(|s| crate::kv::expire(s, 0, 1)), 0);
            assert_eq!(path(), fixed, "a statement of queen's fixed it");
        });
        assert_eq!(path(), caller);
    }
}
