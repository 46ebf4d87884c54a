//! Running the extension's SQL: named queries from `sql/queries/*.sql`, prepared once per
//! backend as **generic** plans and kept (SPI_keepplan), then reused by every call.
//!
//! Why not pgrx's prepared statements: they are prepared with default cursor options, so
//! Postgres plans the first executions afresh for their parameter values and may keep doing
//! so, which made a push three times slower than with a generic plan (docs/benchmarks.md,
//! "Measurements behind the design"). Every queen query reads by key, so one generic plan is
//! right for all parameter values. Results are read in
//! place from SPI's tuple table, so a `jsonb` payload can be handed on as a datum without a
//! round trip through text.
//!
//! Every query names its tables with their schema (`queen.`), so neither `search_path` nor a
//! user's objects can change what a kept plan means, and every value is a bound parameter:
//! no SQL text is ever built from user input. Postgres revalidates kept plans itself when the
//! tables they use change (after `DROP EXTENSION queen; CREATE EXTENSION queen`, say).

use pgrx::datum::{DatumWithOid, FromDatum};
use pgrx::pg_sys::{self, PgOid};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;

/// Parameter types of the queries.
pub mod types {
    use pgrx::pg_sys::{PgBuiltInOids as T, PgOid};
    pub const UUID: PgOid = PgOid::BuiltIn(T::UUIDOID);
    pub const UUIDS: PgOid = PgOid::BuiltIn(T::UUIDARRAYOID);
    pub const TEXT: PgOid = PgOid::BuiltIn(T::TEXTOID);
    pub const TEXTS: PgOid = PgOid::BuiltIn(T::TEXTARRAYOID);
    pub const BOOL: PgOid = PgOid::BuiltIn(T::BOOLOID);
    pub const INT4: PgOid = PgOid::BuiltIn(T::INT4OID);
    pub const INT4S: PgOid = PgOid::BuiltIn(T::INT4ARRAYOID);
    pub const OID: PgOid = PgOid::BuiltIn(T::OIDOID);
    pub const INT8: PgOid = PgOid::BuiltIn(T::INT8OID);
    pub const INT8S: PgOid = PgOid::BuiltIn(T::INT8ARRAYOID);
    pub const FLOAT8: PgOid = PgOid::BuiltIn(T::FLOAT8OID);
    pub const TSTZ: PgOid = PgOid::BuiltIn(T::TIMESTAMPTZOID);
    pub const JSONB: PgOid = PgOid::BuiltIn(T::JSONBOID);
    pub const BYTEA: PgOid = PgOid::BuiltIn(T::BYTEAOID);
}

/// Array parameters built in one call. (pgrx builds an array an element at a time, each
/// through its error guard: 2.5% of a batch push of 100 for its five arrays.)
pub mod arrays {
    use pgrx::datum::DatumWithOid;
    use pgrx::pg_sys;

    /// A one-dimensional array of `elems` (None: NULL) of a fixed-length element type.
    fn build(
        elems: &[pg_sys::Datum],
        nulls: Option<&[bool]>,
        elem: pg_sys::Oid,
        array: pg_sys::Oid,
        len: i32,
        byval: bool,
        align: u8,
    ) -> DatumWithOid<'static> {
        let mut dims = [elems.len() as i32];
        let mut lbs = [1i32];
        // SAFETY: `elems` (and `nulls`, of the same length) hold `dims[0]` values of the element
        // type described by `elem`, `len`, `byval` and `align`: by value, or pointers to
        // `len` bytes that live until this call returns. construct_md_array copies them into
        // a new array palloc'd in the current memory context, which outlives the statement
        // it is a parameter of.
        unsafe {
            let a = pg_sys::construct_md_array(
                elems.as_ptr().cast_mut(),
                nulls.map_or(std::ptr::null_mut(), |n| n.as_ptr().cast_mut()),
                1,
                dims.as_mut_ptr(),
                lbs.as_mut_ptr(),
                elem,
                len,
                byval,
                align as std::os::raw::c_char,
            );
            DatumWithOid::new(pg_sys::Datum::from(a), array)
        }
    }

    pub fn uuids(v: &[pgrx::Uuid]) -> DatumWithOid<'static> {
        let elems: Vec<pg_sys::Datum> = v.iter().map(|u| pg_sys::Datum::from(u.as_bytes().as_ptr())).collect();
        build(&elems, None, pg_sys::UUIDOID, pg_sys::UUIDARRAYOID, 16, false, b'c')
    }

    pub fn opt_uuids(v: &[Option<pgrx::Uuid>]) -> DatumWithOid<'static> {
        let elems: Vec<pg_sys::Datum> = v
            .iter()
            .map(|u| u.as_ref().map_or(pg_sys::Datum::from(0), |u| pg_sys::Datum::from(u.as_bytes().as_ptr())))
            .collect();
        let nulls: Vec<bool> = v.iter().map(Option::is_none).collect();
        build(&elems, Some(&nulls), pg_sys::UUIDOID, pg_sys::UUIDARRAYOID, 16, false, b'c')
    }

    pub fn int8s(v: &[i64]) -> DatumWithOid<'static> {
        let elems: Vec<pg_sys::Datum> = v.iter().map(|&i| pg_sys::Datum::from(i)).collect();
        build(&elems, None, pg_sys::INT8OID, pg_sys::INT8ARRAYOID, 8, true, b'd')
    }

    pub fn int4s(v: &[i32]) -> DatumWithOid<'static> {
        let elems: Vec<pg_sys::Datum> = v.iter().map(|&i| pg_sys::Datum::from(i)).collect();
        build(&elems, None, pg_sys::INT4OID, pg_sys::INT4ARRAYOID, 4, true, b'i')
    }
}

/// A query of a `sql/queries/*.sql` file: the file's text, the name of its section, and the
/// types of its parameters ($1, $2, ...).
pub struct Query {
    pub file: &'static str,
    pub name: &'static str,
    pub args: &'static [PgOid],
}

thread_local! {
    static PLANS: RefCell<HashMap<&'static str, pg_sys::SPIPlanPtr>> = RefCell::new(HashMap::new());
    /// Plans made on one shard's local tables ([`with_local_shard`]), by query and shard.
    static LOCAL_PLANS: RefCell<HashMap<(&'static str, i64), pg_sys::SPIPlanPtr>> = RefCell::new(HashMap::new());
    /// The shard whose local tables queen's statements read and write now, if any.
    static LOCAL: RefCell<Option<std::rc::Rc<LocalShard>>> = const { RefCell::new(None) };
}

/// A shard of queen's tables on this node (Citus), as statements name it when they run on it
/// directly: each distributed table's name with its shard's (`queen.messages` →
/// `queen.messages_102008`). A statement that names any other table of Citus's (a reference
/// table) is left to Citus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalShard {
    /// The shard id of `queen.messages` for this key: plans are kept per it.
    pub anchor: i64,
    /// Its colocation group and its index among the table's shards (Citus's metadata lock).
    pub colocation: u32,
    pub index: u32,
    /// (`queen.<table>`, `queen.<table>_<shard id>`) for every table distributed by shard.
    pub tables: Vec<(String, String)>,
    /// `queen.<table>` of the tables Citus keeps that are not renamed (reference tables).
    pub elsewhere: Vec<String>,
}

/// Run `f` with queen's statements planned on `local`'s tables (plain tables of this node, as
/// on one server: kept generic plans, no distributed planning, nothing sent to another node),
/// when they name no other table of Citus's. The caller holds what keeps the shard here for
/// the transaction (shards.rs `enter_local`).
pub fn with_local_shard<R>(local: std::rc::Rc<LocalShard>, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<std::rc::Rc<LocalShard>>);
    impl Drop for Reset {
        fn drop(&mut self) {
            LOCAL.with(|l| *l.borrow_mut() = self.0.take());
        }
    }
    let _reset = Reset(LOCAL.with(|l| l.borrow_mut().replace(local)));
    f()
}

/// `text` with each `queen.<table>` of `local.tables` replaced by its shard's name, outside
/// string literals and comments; None when it names a table of `local.elsewhere` (then Citus
/// is to plan it).
pub fn on_local_shard(text: &str, local: &LocalShard) -> Option<String> {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 64);
    let mut i = 0;
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        if b[i] == b'\'' {
            let end = text[i + 1..].find('\'').map_or(b.len(), |j| i + 1 + j + 1);
            out.push_str(&text[i..end]);
            i = end;
        } else if text[i..].starts_with("--") {
            let end = text[i..].find('\n').map_or(b.len(), |j| i + j);
            out.push_str(&text[i..end]);
            i = end;
        } else if text[i..].starts_with("queen.") && (i == 0 || !ident(b[i - 1])) {
            let start = i + "queen.".len();
            let mut end = start;
            while end < b.len() && ident(b[end]) {
                end += 1;
            }
            let name = &text[i..end];
            if local.elsewhere.iter().any(|e| e == name) {
                return None;
            }
            match local.tables.iter().find(|(t, _)| t == name) {
                Some((_, shard)) => out.push_str(shard),
                None => out.push_str(name),
            }
            i = end;
        } else {
            let c = text[i..].chars().next().expect("inside the text");
            out.push(c);
            i += c.len_utf8();
        }
    }
    Some(out)
}

/// The text of section `name` of a query file. Sections start with a line `-- name: <name>`
/// and run to the next such line.
pub fn section(file: &'static str, name: &str) -> &'static str {
    let marker = format!("-- name: {name}\n");
    let start = file.find(&marker).unwrap_or_else(|| panic!("queen: query \"{name}\" is missing from its sql file"))
        + marker.len();
    let end = file[start..].find("-- name: ").map_or(file.len(), |i| start + i);
    file[start..end].trim()
}

/// The pieces queries share (sql/queries/fragments.sql).
const FRAGMENTS: &str = include_str!("../sql/queries/fragments.sql");

/// A query's text with its pieces written out: `{{name}}` is section `name` of
/// sql/queries/fragments.sql, `{{name key=value ...}}` the same with each `{key}` in it replaced
/// by `value`; pieces may name pieces. Expanded once, where the query is prepared: the kept plan
/// is that of the text written out.
pub fn expand(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("{{") {
        out.push_str(&rest[..i]);
        let end = rest[i..].find("}}").unwrap_or_else(|| panic!("queen: an unclosed {{{{ in a query")) + i;
        let mut words = rest[i + 2..end].split_whitespace();
        let name = words.next().expect("queen: {{}} names no piece");
        let mut piece = section(FRAGMENTS, name).to_string();
        for w in words {
            let (k, v) = w.split_once('=').unwrap_or_else(|| panic!("queen: {{{{{name}}}}}: {w} is not key=value"));
            piece = piece.replace(&format!("{{{k}}}"), v);
        }
        out.push_str(&expand(&piece));
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

/// A query's text on Citus: without its lines marked `-- [one server]` (a join with a reference
/// table, which no statement of a shard may make there; the caller reads that apart).
pub fn without_one_server_lines(text: &str) -> String {
    text.lines().filter(|l| !l.trim_end().ends_with("-- [one server]")).collect::<Vec<_>>().join("\n")
}

/// Run `f` connected to SPI, with the planner settings of queen's statements; the connection
/// ends when `f` returns (or raises). The mechanism only: every call of queen connects through
/// its session (session.rs), which enters the extension's owner and checks the mapping.
pub fn with_connection<R>(f: impl FnOnce(&mut Spi) -> R) -> R {
    pgrx::spi::Spi::connect_mut(|_| {
        let mut s = Spi { _private: () };
        let _plans = PlanSettings::enter();
        f(&mut s)
    })
}

thread_local! {
    /// Plans are made for Citus (shards.rs sets it once it knows queen is distributed).
    static FOR_CITUS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether plans are made for Citus.
pub fn planning_for_citus() -> bool {
    FOR_CITUS.get()
}

/// Make plans for Citus from now on, or for one server (shards.rs: the layout as read).
pub fn plan_for_citus(citus: bool) {
    FOR_CITUS.set(citus);
}

/// While queen's statements run, the planner does not read a table sequentially where an index
/// can serve (`enable_seqscan` off, as the planner reads it: plans are made inside
/// SPI_execute_plan, at a kept plan's first run and after an invalidation). A kept plan is
/// made once, for the tables as they are then: made while `queen.ready` or `queen.cursors`
/// was empty (a backend's first pops after a drain, a restore, a new queue), a plan that scans
/// them stays until the next ANALYZE, and a pop ran for seconds once they had grown. Every
/// queen statement reads by key, so an index plan is right at any size.
///
/// And no JIT: `enable_seqscan` off adds its penalty cost (10^10) to every plan that still
/// reads a table without an index (`queen.cluster`, a visibility point's read), far above
/// `jit_above_cost`, and such a plan was compiled by LLVM at every run, for up to seconds.
/// Queen's statements are short; compiling never pays. (Both measured: docs/benchmarks.md,
/// "Measurements behind the design".)
/// `jit` off is read both by the planner and by the executor before it compiles.
///
/// Set on the globals the planner and executor read rather than through a GUC nest level
/// (whose end costs a pass over every setting, at every call); the guard puts the caller's
/// values back, as owner.rs's AsOwner does the user, also when a statement raised (the error
/// unwinds through here before the transaction aborts).
struct PlanSettings {
    seqscan: bool,
    jit: bool,
}

impl PlanSettings {
    fn enter() -> PlanSettings {
        // SAFETY: the backend's planner and JIT settings, read and written on its only
        // thread; no user code runs inside queen's statements to see the change.
        unsafe {
            let was = PlanSettings { seqscan: pg_sys::enable_seqscan, jit: pg_sys::jit_enabled };
            pg_sys::enable_seqscan = false;
            pg_sys::jit_enabled = false;
            was
        }
    }
}

impl Drop for PlanSettings {
    fn drop(&mut self) {
        // SAFETY: puts back what `enter` read.
        unsafe {
            pg_sys::enable_seqscan = self.seqscan;
            pg_sys::jit_enabled = self.jit;
        }
    }
}

/// Prepare every query again at its next use (queen was distributed: shards.rs). The old plans
/// are left to the backend's memory rather than freed, in case one is running further up.
pub fn forget_plans() {
    PLANS.with(|p| p.borrow_mut().clear());
    LOCAL_PLANS.with(|p| p.borrow_mut().clear());
}

/// Run `f` with an active snapshot: the one there is, or the transaction's, pushed for `f`.
/// A statement that commits on its own (no BEGIN) reaches pre-commit after its portal and
/// snapshot are gone, and a query run there without one fails ("cannot execute SQL without an
/// outer snapshot or portal").
pub fn with_snapshot<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: reads this backend's snapshot stack.
    if unsafe { pg_sys::ActiveSnapshotSet() } {
        return f();
    }
    // SAFETY: inside a transaction (the callers run in one, before its commit), where
    // GetTransactionSnapshot returns a snapshot valid for it, which PushActiveSnapshot copies
    // if needed; PopSnapshot pops it after `f`.
    unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot()) };
    let _pop = PopSnapshot;
    f()
}

/// Pops the snapshot pushed just before it was made, when dropped — also when a query raised:
/// the unwinding passes here before the transaction aborts.
struct PopSnapshot;

impl Drop for PopSnapshot {
    fn drop(&mut self) {
        // SAFETY: made only right after a PushActiveSnapshot, and dropped at the end of the
        // scope that pushed it, so the snapshot popped is that one.
        unsafe { pg_sys::PopActiveSnapshot() };
    }
}

/// Proof of an SPI connection, handed to `connect`'s closure.
pub struct Spi {
    _private: (),
}

impl Query {
    /// The plan on the local shard's tables ([`with_local_shard`]), if there is one and the
    /// query can run there alone.
    fn local_plan(&self) -> Option<pg_sys::SPIPlanPtr> {
        let local = LOCAL.with(|l| l.borrow().clone())?;
        let key = (self.name, local.anchor);
        if let Some(p) = LOCAL_PLANS.with(|p| p.borrow().get(&key).copied()) {
            return (!p.is_null()).then_some(p);
        }
        let text = on_local_shard(&without_one_server_lines(&expand(section(self.file, self.name))), &local);
        let plan = match text {
            // (Remembered as null: this query is Citus's to plan.)
            None => std::ptr::null_mut(),
            Some(text) => self.prepare(&text, pg_sys::CURSOR_OPT_GENERIC_PLAN as i32),
        };
        LOCAL_PLANS.with(|p| p.borrow_mut().insert(key, plan));
        (!plan.is_null()).then_some(plan)
    }

    /// Prepare `text` with this query's argument types and keep the plan for the backend.
    fn prepare(&self, text: &str, options: i32) -> pg_sys::SPIPlanPtr {
        let sql = CString::new(text).expect("queen: query text has no NUL");
        let mut types: Vec<pg_sys::Oid> = self.args.iter().map(|t| t.value()).collect();
        // SAFETY: called inside an SPI connection (Query is only run with a `&mut Spi`);
        // `sql` is a NUL-terminated string and `types` holds one oid per parameter, both live
        // for the call. A null plan is reported before it is used, and SPI_keepplan moves the
        // plan out of the connection's memory so that it outlives it (kept for the backend).
        unsafe {
            let p = pg_sys::SPI_prepare_cursor(sql.as_ptr(), types.len() as i32, types.as_mut_ptr(), options);
            if p.is_null() {
                let code = pg_sys::SPI_result;
                panic!("queen: preparing query \"{}\" failed (SPI code {code})", self.name);
            }
            pg_sys::SPI_keepplan(p);
            p
        }
    }

    fn plan(&self) -> pg_sys::SPIPlanPtr {
        if let Some(p) = self.local_plan() {
            return p;
        }
        // Query names are unique across files (they say what the query does).
        if let Some(p) = PLANS.with(|p| p.borrow().get(self.name).copied()) {
            return p;
        }
        let text = expand(section(self.file, self.name));
        let text = if planning_for_citus() { without_one_server_lines(&text) } else { text };
        let options = if self.name.starts_with("delegate_") || self.name.starts_with("per_shard_") {
            // Citus delegates a call to a worker only when the plan has its shard key as a
            // constant (shards.rs), and routes a complex read of one shard (totals.rs) only so.
            pg_sys::CURSOR_OPT_CUSTOM_PLAN as i32
        } else if planning_for_citus() {
            // Citus gives a query it cannot route without its parameters' values a plan too
            // costly to keep, so PostgreSQL plans it per call; a forced generic plan fails.
            0
        } else {
            pg_sys::CURSOR_OPT_GENERIC_PLAN as i32
        };
        let plan = self.prepare(&text, options);
        PLANS.with(|p| p.borrow_mut().insert(self.name, plan));
        plan
    }

    /// Execute the query. The rows stay readable until the next query runs.
    pub fn run<'s>(&self, spi: &'s mut Spi, args: &[DatumWithOid<'_>]) -> Rows<'s> {
        self.execute(spi, args, false)
    }

    /// Execute a read-only query with the latest snapshot, whatever the transaction's isolation
    /// level (what was committed a moment ago, and this transaction's own changes).
    pub fn run_latest<'s>(&self, spi: &'s mut Spi, args: &[DatumWithOid<'_>]) -> Rows<'s> {
        // SAFETY: inside a transaction (an SPI connection proves it); GetLatestSnapshot returns
        // a snapshot valid for the transaction, which PushActiveSnapshot copies if needed, and
        // which is popped right after the read-only execution that uses it as is.
        unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot()) };
        let _pop = PopSnapshot;
        self.execute(spi, args, true)
    }

    /// Execute the query with `snapshot` (advanced to see this transaction's changes so far, as
    /// a statement's own is), instead of a new one: what it reads is what a read under that
    /// snapshot read (direct.rs checks itself against the statement so).
    pub fn run_at<'s>(&self, spi: &'s mut Spi, args: &[DatumWithOid<'_>], snapshot: pg_sys::Snapshot) -> Rows<'s> {
        self.execute_at(spi, args, false, snapshot)
    }

    fn execute<'s>(&self, spi: &'s mut Spi, args: &[DatumWithOid<'_>], read_only: bool) -> Rows<'s> {
        self.execute_at(spi, args, read_only, std::ptr::null_mut())
    }

    fn execute_at<'s>(
        &self,
        _spi: &'s mut Spi,
        args: &[DatumWithOid<'_>],
        read_only: bool,
        snapshot: pg_sys::Snapshot,
    ) -> Rows<'s> {
        assert_eq!(args.len(), self.args.len(), "queen: query \"{}\" takes {} arguments", self.name, self.args.len());
        // Prepared, analysed again or run: under queen's search_path (gucs.rs).
        crate::gucs::fix_search_path();
        let plan = self.plan();
        let mut values: Vec<pg_sys::Datum> = Vec::with_capacity(args.len());
        let mut nulls: Vec<std::os::raw::c_char> = Vec::with_capacity(args.len());
        for a in args {
            match a.datum() {
                Some(d) => {
                    values.push(d.sans_lifetime());
                    nulls.push(b' ' as std::os::raw::c_char);
                }
                None => {
                    values.push(pg_sys::Datum::from(0usize));
                    nulls.push(b'n' as std::os::raw::c_char);
                }
            }
        }
        // SAFETY: inside the SPI connection `_spi` proves; `plan` is a kept plan whose
        // parameter count and types are `self.args` (asserted above), and `values`/`nulls`
        // have one entry each, live for the call (pass-by-reference datums point into `args`,
        // which outlive it). SPI_tuptable is cleared first, so a statement that returns no
        // tuple table leaves it null rather than the previous query's; the returned Rows
        // borrows the connection mutably, so the next query cannot free a table still read.
        unsafe {
            pg_sys::SPI_tuptable = std::ptr::null_mut();
            let rc = if snapshot.is_null() {
                pg_sys::SPI_execute_plan(plan, values.as_mut_ptr(), nulls.as_mut_ptr(), read_only, 0)
            } else {
                // A registered snapshot of the caller's (spi.rs callers: direct.rs), which SPI
                // copies and advances to the current command.
                let none: pg_sys::Snapshot = std::ptr::null_mut();
                pg_sys::SPI_execute_snapshot(
                    plan,
                    values.as_mut_ptr(),
                    nulls.as_mut_ptr(),
                    snapshot,
                    none,
                    read_only,
                    true,
                    0,
                )
            };
            if rc < 0 {
                panic!("queen: query \"{}\" failed (SPI code {rc})", self.name);
            }
            let table = pg_sys::SPI_tuptable;
            let n = if table.is_null() { pg_sys::SPI_processed as usize } else { (*table).numvals as usize };
            Rows { table, n, next: 0, _spi: std::marker::PhantomData }
        }
    }
}

/// The result of a query: its rows, or for a statement without RETURNING only their count.
pub struct Rows<'s> {
    table: *mut pg_sys::SPITupleTable,
    n: usize,
    next: usize,
    _spi: std::marker::PhantomData<&'s mut Spi>,
}

/// One row of a result.
#[derive(Clone, Copy)]
pub struct Row<'s> {
    table: *mut pg_sys::SPITupleTable,
    i: usize,
    _spi: std::marker::PhantomData<&'s Spi>,
}

impl<'s> Rows<'s> {
    /// How many rows the statement returned or affected.
    pub fn len(&self) -> usize {
        self.n
    }

    /// The first row; the query must return one.
    pub fn first(mut self) -> Row<'s> {
        self.next().expect("queen: query returned no row")
    }
}

impl<'s> Iterator for Rows<'s> {
    type Item = Row<'s>;
    fn next(&mut self) -> Option<Row<'s>> {
        if self.table.is_null() || self.next >= self.n {
            return None;
        }
        self.next += 1;
        Some(Row { table: self.table, i: self.next - 1, _spi: std::marker::PhantomData })
    }
}

/// A column of a result row: by name, as the query's select list names it (how queen reads
/// rows), or by 1-based position (for a query that returns one column).
pub trait Column: Copy + std::fmt::Display {
    /// The column's 1-based number in `desc`.
    fn number(self, desc: pg_sys::TupleDesc) -> i32;
}

impl Column for usize {
    fn number(self, _desc: pg_sys::TupleDesc) -> i32 {
        self as i32
    }
}

impl Column for &str {
    fn number(self, desc: pg_sys::TupleDesc) -> i32 {
        // SAFETY: `desc` is the descriptor of a live SPI tuple table (Row holds it only while
        // its SPI connection lasts), and it has `natts` attributes.
        let attrs = unsafe { (*desc).attrs.as_slice((*desc).natts as usize) };
        // A linear scan of at most 36 short names, comparing bytes in place: no allocation
        // (SPI_fnumber would want a C string), and under a microsecond for the widest row.
        attrs
            .iter()
            .position(|a| {
                // SAFETY: attname is a NUL-terminated NameData inside the attribute.
                !a.attisdropped
                    && unsafe { std::ffi::CStr::from_ptr(a.attname.data.as_ptr()) }.to_bytes() == self.as_bytes()
            })
            .map(|i| i as i32 + 1)
            .unwrap_or_else(|| panic!("queen: the query returns no column \"{self}\""))
    }
}

impl Row<'_> {
    /// The tuple and its descriptor.
    fn tuple(&self) -> (pg_sys::HeapTuple, pg_sys::TupleDesc) {
        // SAFETY: `table` is the SPI tuple table this row came from, still current (a Row
        // borrows the Spi connection, and a new query needs it mutably), and `i < numvals`.
        unsafe {
            let t = &*self.table;
            (*t.vals.add(self.i), t.tupdesc)
        }
    }

    /// The raw datum of column `col`; None for NULL. Valid until SPI disconnects.
    pub fn datum(&self, col: impl Column) -> Option<pg_sys::Datum> {
        let (tuple, desc) = self.tuple();
        let mut is_null = false;
        // SAFETY: a live tuple and its descriptor; SPI_getbinval checks the column number.
        let d = unsafe { pg_sys::SPI_getbinval(tuple, desc, col.number(desc), &mut is_null) };
        (!is_null).then_some(d)
    }

    /// Column `col` as `T`; None for NULL.
    pub fn get<T: FromDatum>(&self, col: impl Column) -> Option<T> {
        let (tuple, desc) = self.tuple();
        let mut is_null = false;
        // SAFETY: as in `datum`; the kept plans fix each column's type, and every caller
        // reads a column as the Rust type of the SQL type its query gives it.
        unsafe {
            let d = pg_sys::SPI_getbinval(tuple, desc, col.number(desc), &mut is_null);
            T::from_datum(d, is_null)
        }
    }

    /// Column `col`, which must not be NULL.
    pub fn req<T: FromDatum>(&self, col: impl Column) -> T {
        self.get(col).unwrap_or_else(|| panic!("queen: column {col} is NULL"))
    }

    /// Column `col` copied out of SPI's memory into the caller's (the memory current before
    /// `connect`), so it outlives the connection. For pass-by-reference types such as jsonb.
    pub fn transfer(&self, col: impl Column, typlen: i32) -> Option<pg_sys::Datum> {
        // SAFETY: a datum of this row's live tuple, of a type of length `typlen`.
        self.datum(col).map(|d| unsafe { pg_sys::SPI_datumTransfer(d, false, typlen) })
    }
}

#[cfg(test)]
mod tests {

    fn local() -> super::LocalShard {
        super::LocalShard {
            anchor: 102008,
            colocation: 1,
            index: 0,
            tables: vec![
                ("queen.messages".into(), "queen.messages_102008".into()),
                ("queen.cursors".into(), "queen.cursors_102020".into()),
            ],
            elsewhere: vec!["queen.queues".into()],
        }
    }

    #[test]
    fn a_statement_on_a_local_shard_names_its_tables() {
        // (statement, what it becomes on the local shard; None: left to Citus)
        let cases: [(&str, Option<&str>); 7] = [
            ("SELECT 1 FROM queen.messages m", Some("SELECT 1 FROM queen.messages_102008 m")),
            (
                "DELETE FROM queen.cursors c USING queen.messages m",
                Some("DELETE FROM queen.cursors_102020 c USING queen.messages_102008 m"),
            ),
            // Another table of queen's that is no table of Citus's stays as it is.
            (
                "SELECT * FROM queen.cluster, queen.messages_view",
                Some("SELECT * FROM queen.cluster, queen.messages_view"),
            ),
            // Inside a literal or a comment: not a table.
            (
                "SELECT 'queen.messages'::regclass -- queen.messages\nFROM queen.messages",
                Some("SELECT 'queen.messages'::regclass -- queen.messages\nFROM queen.messages_102008"),
            ),
            // A reference table: Citus's statement.
            ("SELECT 1 FROM queen.messages m JOIN queen.queues q USING (queue_id)", None),
            // A longer name that starts like one.
            ("SELECT queen.messages_count()", Some("SELECT queen.messages_count()")),
            ("SELECT xqueen.messages", Some("SELECT xqueen.messages")),
        ];
        for (text, want) in cases {
            assert_eq!(super::on_local_shard(text, &local()).as_deref(), want, "{text}");
        }
    }

    use super::section;

    #[test]
    fn one_server_lines_are_left_out_on_citus() {
        let text =
            "SELECT a,\n       o.x, -- [one server]\n       b\n  FROM t\n  JOIN o ON true  -- [one server]\n WHERE c";
        assert_eq!(super::without_one_server_lines(text), "SELECT a,\n       b\n  FROM t\n WHERE c");
    }

    #[test]
    fn pieces_are_written_out_with_their_keys() {
        let q = "WITH snap AS MATERIALIZED ({{stored_snapshot}}) SELECT 1";
        let x = super::expand(q);
        assert!(x.starts_with("WITH snap AS MATERIALIZED (-- The calling"), "{x}");
        assert!(x.contains("pg_current_snapshot()") && x.ends_with(") SELECT 1") && !x.contains("{{"), "{x}");
        let x = super::expand("{{from_position key=partition_id}}");
        assert!(x.contains("m.partition_id = $1") && !x.contains("{key}") && !x.contains("{{"), "{x}");
        assert_eq!(super::expand("SELECT '{}'::int[]"), "SELECT '{}'::int[]");
    }

    #[test]
    fn every_section_marker_names_one_query() {
        // A comment line that starts like a marker ("-- name: its ...") would end the section
        // before it, and the query run would be comments only.
        let files = [
            include_str!("../sql/queries/ack.sql"),
            include_str!("../sql/queries/admin.sql"),
            include_str!("../sql/queries/cluster.sql"),
            include_str!("../sql/queries/configure.sql"),
            include_str!("../sql/queries/dead_letters.sql"),
            include_str!("../sql/queries/discovery.sql"),
            include_str!("../sql/queries/fragments.sql"),
            include_str!("../sql/queries/kv.sql"),
            include_str!("../sql/queries/maintain.sql"),
            include_str!("../sql/queries/message.sql"),
            include_str!("../sql/queries/owner.sql"),
            include_str!("../sql/queries/permits.sql"),
            include_str!("../sql/queries/pop.sql"),
            include_str!("../sql/queries/privilege.sql"),
            include_str!("../sql/queries/push.sql"),
            include_str!("../sql/queries/shards.sql"),
            include_str!("../sql/queries/state.sql"),
            include_str!("../sql/queries/subscription.sql"),
            include_str!("../sql/queries/timers.sql"),
            include_str!("../sql/queries/totals.sql"),
        ];
        for file in files {
            for line in file.lines().filter(|l| l.starts_with("-- name: ")) {
                let name = &line["-- name: ".len()..];
                let one =
                    !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
                assert!(one, "not a query's name: {line:?}");
            }
        }
    }

    #[test]
    fn sections_are_found_by_name() {
        const FILE: &str = "-- header\n-- name: one\nSELECT 1;\n\n-- name: two\nSELECT\n  2;\n";
        assert_eq!(section(FILE, "one"), "SELECT 1;");
        assert_eq!(section(FILE, "two"), "SELECT\n  2;");
    }
}
