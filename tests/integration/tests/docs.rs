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

/// A condition on `p` (pg_proc): the function belongs to the extension.
const EXTENSION_FUNCTION: &str =
    "p.oid IN (SELECT objid FROM pg_depend WHERE classid = 'pg_proc'::regclass AND deptype = 'e'
                         AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'queen'))";

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
    let catalog = rows(&mut c, EXTENSION_FUNCTION);
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

/// The test names the docs cite (a code span of five or more lowercase words joined by `_`)
/// exist: a `fn` of tests/integration or src/pg_tests.rs, or a `def` of tests/gateway. A
/// renamed test makes the docs point at nothing otherwise (issue 25, item 10). A few such
/// spans are not tests: listed.
#[test]
fn the_tests_the_docs_cite_exist() {
    const NOT_TESTS: &[&str] = &[
        "cstring_to_text_with_len",
        "hash_search_with_hash_value",
        "idle_in_transaction_session_timeout",
        "queen_gateway_messages_popped_total",
        "queen_gateway_messages_pushed_total",
    ];
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut docs = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        docs.push(e.unwrap().path());
    }
    let mut sources = std::fs::read_to_string(root.join("src/pg_tests.rs")).unwrap();
    for p in files_under(&root, &["tests/integration", "tests/gateway"]) {
        if p.extension().is_some_and(|x| x == "rs" || x == "py") {
            sources.push_str(&std::fs::read_to_string(&p).unwrap());
        }
    }
    let mut missing = Vec::new();
    let mut cited = 0;
    for doc in docs.iter().filter(|p| p.extension().is_some_and(|x| x == "md")) {
        let text = std::fs::read_to_string(doc).unwrap();
        for span in text.split('`').skip(1).step_by(2) {
            let words: Vec<&str> = span.split('_').collect();
            let a_name = words.len() >= 5
                && words
                    .iter()
                    .all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
            if !a_name || NOT_TESTS.contains(&span) {
                continue;
            }
            cited += 1;
            if !sources.contains(&format!("fn {span}(")) && !sources.contains(&format!("def {span}(")) {
                missing.push(format!("{}: {span}", doc.file_name().unwrap().to_string_lossy()));
            }
        }
    }
    assert!(cited >= 20, "too few test names found in the docs: {cited}");
    assert!(missing.is_empty(), "the docs cite tests that do not exist:\n  {}", missing.join("\n  "));
}

/// Every SQLSTATE queen's one error type raises (src/error.rs) is in docs/api.md's list of
/// errors and in the contract's (docs/semantics.md §7), and the list names no queen SQLSTATE the
/// code does not have.
#[test]
fn the_documented_sqlstates_are_those_queen_raises() {
    const CODES: &[(&str, &str)] = &[
        ("ERRCODE_CHECK_VIOLATION", "23514"),
        ("ERRCODE_CONFIGURATION_LIMIT_EXCEEDED", "53400"),
        ("ERRCODE_FEATURE_NOT_SUPPORTED", "0A000"),
        ("ERRCODE_INSUFFICIENT_PRIVILEGE", "42501"),
        ("ERRCODE_INVALID_PARAMETER_VALUE", "22023"),
        ("ERRCODE_INVALID_TEXT_REPRESENTATION", "22P02"),
        ("ERRCODE_LOCK_NOT_AVAILABLE", "55P03"),
        ("ERRCODE_NULL_VALUE_NOT_ALLOWED", "22004"),
        ("ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE", "55000"),
        ("ERRCODE_PROGRAM_LIMIT_EXCEEDED", "54000"),
        ("ERRCODE_T_R_SERIALIZATION_FAILURE", "40001"),
    ];
    let source = include_str!("../../../src/error.rs");
    let doc = include_str!("../../../docs/api.md");
    // The opening paragraph lists the errors (up to the first section).
    let list = &doc[..doc.find("\n## ").unwrap()];
    // So does the contract's §7, in its own words.
    let contract = include_str!("../../../docs/semantics.md");
    let errors = contract.split("\n## 7. Errors").nth(1).expect("docs/semantics.md has a §7");
    let errors = &errors[..errors.find("\n## ").unwrap_or(errors.len())];
    let mut raised: Vec<&str> = source
        .split("PgSqlErrorCode::")
        .skip(1)
        .map(|s| s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap())
        .collect();
    raised.sort_unstable();
    raised.dedup();
    for name in &raised {
        let code = CODES
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("src/error.rs raises {name}: add its SQLSTATE here"));
        assert!(list.contains(&format!("`{}`", code.1)), "docs/api.md does not list {} ({name})", code.1);
        assert!(errors.contains(code.1), "docs/semantics.md §7 does not list {} ({name})", code.1);
    }
    for (name, code) in CODES {
        assert!(raised.contains(name), "{code} ({name}) is listed here but src/error.rs no longer raises it");
    }
}

/// Every section of the contract the code, tests and docs cite ("semantics §3.2", or "§3.2"
/// alone) exists in docs/semantics.md as a heading `## 3.` / `### 3.2` (issue 25, item 1).
#[test]
fn every_cited_section_of_the_contract_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let contract = std::fs::read_to_string(root.join("docs/semantics.md")).unwrap();
    let headings: Vec<String> = contract
        .lines()
        .filter_map(|l| l.strip_prefix("### ").or_else(|| l.strip_prefix("## ")))
        .filter_map(|h| h.split_whitespace().next())
        .map(|n| n.trim_end_matches('.').to_string())
        .collect();
    assert!(headings.iter().any(|h| h == "6.4"), "docs/semantics.md lost its numbered sections: {headings:?}");
    // Released upgrade scripts are history, and keep their words.
    let released = ["queen--0.1.0--0.2.0.sql", "queen--0.2.0--0.3.0.sql"];
    let mut files = vec![root.join("README.md")];
    files.extend(
        files_under(&root, &["src", "sql", "docs", "tests/integration", "tests/gateway", "gateway/src", "scripts"])
            .into_iter()
            .filter(|p| !released.iter().any(|r| p.ends_with(r))),
    );
    let (mut cited, mut missing) = (0, Vec::new());
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else { continue };
        for (i, _) in text.match_indices('§') {
            let num: String =
                text[i + '§'.len_utf8()..].chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
            let num = num.trim_end_matches('.');
            if num.is_empty() {
                continue;
            }
            cited += 1;
            if !headings.iter().any(|h| h == num) {
                missing.push(format!("{}: §{num}", f.strip_prefix(&root).unwrap_or(f).display()));
            }
        }
        // A section is cited by its number, not by a title the page may not have.
        for (i, _) in text.match_indices("semantics.md \"") {
            let quoted: String = text[i..].chars().take(40).collect();
            missing.push(format!("{}: {quoted}… (cite a § number)", f.strip_prefix(&root).unwrap_or(f).display()));
        }
    }
    assert!(cited >= 100, "too few citations found: {cited}");
    assert!(missing.is_empty(), "cited sections docs/semantics.md does not have:\n  {}", missing.join("\n  "));
}

/// The contract names every SQL function the extension gives applications (those outside
/// schema `queen`) and every view of schema `queen` granted to anyone (issue 25, item 1: the
/// contract is the whole surface, not part of it).
#[test]
fn the_contract_names_every_function_and_view() {
    let contract = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/semantics.md")).unwrap();
    let db = TestDb::new("docs_contract_names");
    let mut c = db.connect();
    let names: Vec<String> = c
        .query(
            &format!(
                "SELECT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                  WHERE n.nspname <> 'queen' AND {EXTENSION_FUNCTION}
                 UNION
                 SELECT 'queen.' || r.relname FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace
                  WHERE n.nspname = 'queen' AND r.relkind = 'v'
                    AND EXISTS (SELECT 1 FROM aclexplode(r.relacl) a WHERE a.grantee <> r.relowner)
                 ORDER BY 1"
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(names.len() >= 20, "{names:?}");
    let unnamed: Vec<&String> = names
        .iter()
        // Named as a whole: `queen_ack(` or `queen_ack`, not a prefix of `queen_ack_lease`.
        .filter(|n| !(contract.contains(&format!("`{n}(")) || contract.contains(&format!("`{n}`"))))
        .collect();
    assert!(unnamed.is_empty(), "docs/semantics.md does not name: {unnamed:?}");
}

/// The files under `dirs` of the repository at `root`, build output (`target/`) left out.
fn files_under(root: &std::path::Path, dirs: &[&str]) -> Vec<std::path::PathBuf> {
    let mut todo: Vec<_> = dirs.iter().map(|d| root.join(d)).collect();
    let mut out = Vec::new();
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if !p.ends_with("target") {
                    todo.push(p);
                }
            } else {
                out.push(p);
            }
        }
    }
    out
}
