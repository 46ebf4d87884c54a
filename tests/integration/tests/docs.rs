//! docs/api.md against the catalog: every function the extension creates is documented with its
//! exact signature (argument names, types, defaults, result), and every signature the document
//! gives exists. PostgreSQL itself reads the documented signatures, so `int` and `integer`,
//! `DEFAULT NULL` and `DEFAULT NULL::text` compare equal, and nothing else does.

use queen_integration_tests::TestDb;

/// `(name, arguments, result)` of every `name(arguments) RETURNS result` in the text, where name
/// is `queen_…` or `queen.…`; the arguments may span lines, the result ends the line (or the
/// code span).
fn signatures(doc: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(pos) = doc[from..].find("queen") {
        let start = from + pos;
        let rest = &doc[start..];
        let name_len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')).unwrap_or(rest.len());
        from = start + name_len.max(1);
        let name = rest[..name_len].trim_end_matches('.');
        if !(name.starts_with("queen_") || name.starts_with("queen.")) || !rest[name_len..].starts_with('(') {
            continue;
        }
        let Some(close) = matching(&rest[name_len..]) else { continue };
        let args = &rest[name_len + 1..name_len + close];
        let after = rest[name_len + close + 1..].trim_start();
        let Some(result) = after.strip_prefix("RETURNS ") else { continue };
        let result = if result.starts_with("TABLE") {
            let open = result.find('(').expect("TABLE (");
            &result[..open + matching(&result[open..]).expect("TABLE's columns close") + 1]
        } else {
            result.split(['`', '\n']).next().unwrap()
        };
        let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        out.push((name.to_string(), flat(args), flat(result)));
    }
    out
}

/// The offset of the parenthesis that closes the one `s` starts with.
fn matching(s: &str) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

#[test]
fn the_signatures_in_the_docs_are_those_in_the_catalog() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api.md")).unwrap();
    let documented = signatures(&doc);
    assert!(documented.len() >= 10, "too few signatures found in docs/api.md: {documented:?}");

    let db = TestDb::new("docs_signatures");
    let mut c = db.connect();
    // Each documented signature becomes a function of a scratch schema (bodies are not checked),
    // named as the document names it, so that PostgreSQL normalizes both sides alike.
    c.batch_execute("CREATE SCHEMA doc_sig; SET check_function_bodies = off").unwrap();
    for (name, args, result) in &documented {
        // (A trigger function cannot be written in SQL.)
        let language = if result.as_str() == "trigger" { "plpgsql" } else { "sql" };
        let sql = format!(
            "CREATE OR REPLACE FUNCTION doc_sig.\"{name}\"({args}) RETURNS {result} LANGUAGE {language} AS 'SELECT 1'"
        );
        if let Err(e) = c.batch_execute(&sql) {
            panic!("docs/api.md: {name}({args}) RETURNS {result} is not a valid signature: {e}");
        }
    }
    let rows = |c: &mut postgres::Client, which: &str| -> Vec<String> {
        c.query(
            &format!(
                "SELECT label || '(' || pg_get_function_arguments(p.oid) || ') RETURNS ' || pg_get_function_result(p.oid)
                   FROM (SELECT p.oid, CASE WHEN n.nspname = 'queen' THEN 'queen.' || p.proname
                                            WHEN n.nspname = 'doc_sig' THEN p.proname ELSE p.proname END AS label
                           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                          WHERE {which}) p
                  ORDER BY 1"
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    let catalog = rows(
        &mut c,
        "p.oid IN (SELECT objid FROM pg_depend WHERE classid = 'pg_proc'::regclass AND deptype = 'e'
                     AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'queen'))",
    );
    let docs = rows(&mut c, "n.nspname = 'doc_sig'");
    let undocumented: Vec<&String> = catalog.iter().filter(|f| !docs.contains(f)).collect();
    let missing: Vec<&String> = docs.iter().filter(|f| !catalog.contains(f)).collect();
    assert!(
        undocumented.is_empty() && missing.is_empty(),
        "docs/api.md and the catalog differ.\nIn the catalog, not documented as such:\n  {}\nDocumented, not in the catalog:\n  {}",
        undocumented.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  "),
        missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  ")
    );
    assert!(catalog.len() >= 10, "{catalog:?}");
}

#[test]
fn signatures_are_read_across_lines_and_code_spans() {
    let doc = "## `queen_renew(lease_id uuid, seconds int DEFAULT NULL) RETURNS timestamptz`\n\
               ```\nqueen_push(queue text,\n           payload jsonb)\n    RETURNS queen.push_result\n```\n\
               call `queen_ack(m, l)` here; `queen.f() RETURNS TABLE (a int, b text)` too";
    assert_eq!(
        signatures(doc),
        vec![
            ("queen_renew".into(), "lease_id uuid, seconds int DEFAULT NULL".into(), "timestamptz".into()),
            ("queen_push".into(), "queue text, payload jsonb".into(), "queen.push_result".into()),
            ("queen.f".into(), "".into(), "TABLE (a int, b text)".into()),
        ]
    );
}
