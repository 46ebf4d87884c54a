//! The maintenance background worker (semantics §8): with the library preloaded, one worker per
//! database of `queen.databases` runs a maintenance pass (maintain.rs) every
//! `queen.maintenance_interval` seconds. A database without the extension is skipped; a pass
//! that fails is logged and rolled back, and the next interval tries again; SIGTERM (server
//! shutdown) ends the worker between passes; SIGHUP reloads the settings.

use crate::gucs;
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, SignalWakeFlags};
use pgrx::lwlock::PgLwLock;
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What a worker could not write into its database's queen.maintenance_totals: passes that
/// failed when recording the failure failed too (a database made read-only, say), and passes
/// skipped because another pass held the maintenance lock. One slot per worker (its index in
/// queen.databases), named by its database's oid; read by queen.maintenance_stats.
#[derive(Clone, Copy, Default)]
pub struct Unrecorded {
    db: u32,
    failed_passes: i64,
    skipped_passes: i64,
}

/// Slots of the first workers; a worker past them counts nothing here (its failures are in the
/// server log).
const SLOTS: usize = crate::timer_wake::SLOTS;

#[derive(Clone, Copy)]
pub struct WorkerSlots([Unrecorded; SLOTS]);

impl Default for WorkerSlots {
    fn default() -> Self {
        WorkerSlots([Unrecorded::default(); SLOTS])
    }
}

// SAFETY: plain integers, no pointers: valid in any process that maps the segment.
unsafe impl PGRXSharedMemory for WorkerSlots {}

// SAFETY: the name is queen's own; no other shared memory of this library uses it.
static WORKER_SLOTS: PgLwLock<WorkerSlots> = unsafe { PgLwLock::new(c"queen_worker_slots") };

/// Whether the slots exist (the library was preloaded).
static READY: AtomicBool = AtomicBool::new(false);

/// Called from `_PG_init` when preloading.
pub fn init_shared() {
    pgrx::pg_shmem_init!(WORKER_SLOTS);
    crate::timer_wake::init_shared();
    READY.store(true, Ordering::Relaxed);
}

fn count(index: usize, f: impl FnOnce(&mut Unrecorded)) {
    if index < SLOTS && READY.load(Ordering::Relaxed) {
        let mut slots = WORKER_SLOTS.exclusive();
        let slot = &mut slots.0[index];
        // SAFETY: the worker is connected to its database: MyDatabaseId is set.
        slot.db = unsafe { pg_sys::MyDatabaseId }.to_u32();
        f(slot);
    }
}

/// This database's passes that failed without a record, and passes skipped, since the server
/// started: (failed, skipped). Zeros without preloading (there is no worker).
pub fn unrecorded() -> (i64, i64) {
    if !READY.load(Ordering::Relaxed) {
        return (0, 0);
    }
    // SAFETY: a backend connected to a database, as every SQL call is.
    let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let slots = WORKER_SLOTS.share();
    slots.0.iter().filter(|u| u.db == db).fold((0, 0), |(f, k), u| (f + u.failed_passes, k + u.skipped_passes))
}

/// How long the worker waits for a lock a client's transaction holds: then the unit (or the
/// timer) that needed it is rolled back and left to the next pass (firing), and the others go
/// on. No client — a pop in a long business transaction, a push of the transaction id a timer
/// will push, an open delete — holds the worker back longer.
pub const LOCK_WAIT: &str = "200ms";

/// The settings a pass depends on, whatever ALTER DATABASE / ALTER ROLE ... SET say (a
/// database owner may set them; semantics §11: the worker never runs user code, and must not be
/// stopped by a setting either): a fixed search_path (every query of queen names its schema,
/// and nothing on another path is called), read-write transactions in READ COMMITTED, no
/// timeout that would cut a pass short, and a short wait for a client's locks ([`LOCK_WAIT`]).
/// Set for the session, before the first pass.
const WORKER_SETTINGS: &[(&str, &str)] = &[
    ("search_path", "pg_catalog, pg_temp"),
    ("default_transaction_read_only", "off"),
    ("default_transaction_isolation", "read committed"),
    ("default_transaction_deferrable", "off"),
    ("statement_timeout", "0"),
    ("lock_timeout", LOCK_WAIT),
    ("idle_in_transaction_session_timeout", "0"),
    // From PostgreSQL 17 on; skipped where the server has no such setting.
    ("transaction_timeout", "0"),
];

/// Register one worker per configured database. Called from `_PG_init` when preloading.
pub fn register() {
    for (i, db) in gucs::databases().iter().enumerate() {
        BackgroundWorkerBuilder::new(&format!("queen maintenance {db}"))
            .set_type("queen maintenance")
            .set_library("queen")
            .set_function("queen_maintenance_worker_main")
            .set_argument((i as i32).into_datum())
            .enable_spi_access()
            .set_restart_time(Some(Duration::from_secs(5)))
            .load();
    }
}

#[pg_guard]
// SAFETY: the exported symbol is the name `register` gives the postmaster to look up in this
// library; no other symbol of the process has it.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn queen_maintenance_worker_main(arg: pg_sys::Datum) {
    // SAFETY: `arg` is the bgw_main_arg `register` set: an int4 datum (by value), not NULL.
    let index = unsafe { i32::from_datum(arg, false) }.unwrap_or(0) as usize;
    let Some(db) = gucs::databases().get(index).cloned() else {
        return;
    };
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let role = gucs::WORKER_ROLE.get().and_then(|r| r.into_string().ok()).filter(|r| !r.is_empty());
    BackgroundWorker::connect_worker_to_spi(Some(&db), role.as_deref());
    in_transaction(|| {
        for (name, value) in WORKER_SETTINGS {
            let name = std::ffi::CString::new(*name).expect("a setting's name has no NUL");
            // SAFETY: reads a setting by name (missing_ok: NULL when this server has none).
            if unsafe { pg_sys::GetConfigOption(name.as_ptr(), true, false) }.is_null() {
                continue;
            }
            Spi::run_with_args(
                "SELECT pg_catalog.set_config($1, $2, false)",
                &[name.to_str().expect("ASCII").into(), (*value).into()],
            )
            .expect("queen: setting the worker's settings");
        }
    });
    log!("queen: maintenance worker for database \"{db}\" started");
    // SAFETY: a worker's MyProc points to its PGPROC from InitProcess on; MyDatabaseId is set
    // since it connected.
    let (procno, db_oid) = unsafe { ((*pg_sys::MyProc).pgprocno + 1, pg_sys::MyDatabaseId.to_u32()) };
    crate::timer_wake::slot(index, |t| {
        *t = crate::timer_wake::TimerSlot { db: db_oid, procno, next_due: i64::MAX, reading: false }
    });
    let mut next_pass = std::time::Instant::now();
    loop {
        let interval = Duration::from_secs(gucs::MAINTENANCE_INTERVAL.get().max(1) as u64);
        // Sleep until the next pass or the earliest timer, whichever is first (a commit that
        // schedules an earlier timer sets the latch: at_end).
        let until_pass = next_pass.saturating_duration_since(std::time::Instant::now());
        let due = crate::timer_wake::slot(index, |t| t.next_due).unwrap_or(i64::MAX);
        // SAFETY: GetCurrentTimestamp only reads the clock.
        let until_due =
            Duration::from_micros((due.saturating_sub(unsafe { pg_sys::GetCurrentTimestamp() })).max(0) as u64);
        let sleep = until_pass.min(until_due);
        if !sleep.is_zero() && !BackgroundWorker::wait_latch(Some(sleep)) {
            break; // SIGTERM, or the postmaster died
        }
        if BackgroundWorker::sigterm_received() {
            break;
        }
        if BackgroundWorker::sighup_received() {
            // SAFETY: between passes the worker is in no transaction and holds no lock, which
            // is where a process's main loop re-reads the configuration files on SIGHUP.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        fire_timers(&db, index, interval);
        if std::time::Instant::now() < next_pass {
            continue;
        }
        next_pass = std::time::Instant::now() + interval;
        // SAFETY: between passes, as above. A background worker has no idle loop that reports
        // for it: without these, pg_stat_activity showed it idle during its passes and, worse,
        // the rows retention deleted never reached pg_stat_all_tables (n_dead_tup) until the
        // worker exited, so autovacuum did not know to vacuum after them.
        unsafe {
            pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_RUNNING, c"queen maintenance pass".as_ptr())
        };
        pass(&db, index);
        // SAFETY: the pass has ended, committed or rolled back: no transaction is open.
        unsafe {
            pg_sys::pgstat_report_stat(true);
            pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_IDLE, std::ptr::null());
        }
    }
    log!("queen: maintenance worker for database \"{db}\" stopped");
    // Exit code 1: the postmaster starts the worker again after its restart time. A worker
    // stopped by pg_terminate_backend or DROP DATABASE ... WITH (FORCE) comes back, instead
    // of leaving its database without maintenance until the server restarts (exit code 0
    // would unregister it). At shutdown nothing is restarted either way.
    // SAFETY: proc_exit runs the backend's exit callbacks and never returns; the worker holds
    // no lock and is in no transaction between passes.
    unsafe { pg_sys::proc_exit(1) };
}

/// The rebase after a restore (cluster.rs): a dynamic background worker that a queen call
/// starts when it finds the mapping of stored transaction ids unsettled, and waits for. It
/// connects to the caller's database (`arg`: its oid) as the bootstrap superuser, settles the
/// mapping in a transaction of its own, commits, and exits. An error is logged; the caller
/// reads the mapping again and says what it found.
#[pg_guard]
// SAFETY: the exported symbol is the name cluster.rs gives the postmaster to look up in this
// library; no other symbol of the process has it.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn queen_rebase_worker_main(arg: pg_sys::Datum) {
    // SAFETY: `arg` is the bgw_main_arg cluster.rs set: an oid datum (by value), not NULL.
    let db = unsafe { pg_sys::Oid::from_datum(arg, false) }.unwrap_or(pg_sys::InvalidOid);
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(db), None);
    let offset = in_transaction(|| {
        // A fixed search_path (queen's queries name their schema anyway), and a bound on how long
        // it waits for commits that used the old mapping (a prepared transaction's may last).
        Spi::run("SET LOCAL search_path TO pg_catalog, pg_temp").expect("queen: setting search_path");
        Spi::run("SET LOCAL lock_timeout = '60s'").expect("queen: setting lock_timeout");
        crate::owner::connect(crate::cluster::rebase_now)
    });
    log!("queen: the stored transaction ids of database {} are settled: offset {offset}", db.to_u32());
}

/// Each unit of a pass in a transaction of its own: locks last milliseconds, and what a
/// unit did is committed before the next begins. A unit that waited [`LOCK_WAIT`] for a lock
/// is rolled back and counted, and the pass goes on with the next.
#[derive(Default)]
struct OwnTransactions {
    deferred: i64,
}

impl crate::maintain::Units for OwnTransactions {
    fn run(&mut self, unit: &mut dyn FnMut(&mut crate::spi::Spi)) -> bool {
        let done = PgTryBuilder::new(std::panic::AssertUnwindSafe(|| {
            in_transaction(|| crate::session::connect(|s| unit(s)));
            true
        }))
        .catch_when(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, |_| {
            // SAFETY: the error was caught and flushed by PgTryBuilder; this rolls the unit's
            // transaction back, as `pass` does after any other error.
            unsafe { pg_sys::AbortCurrentTransaction() };
            false
        })
        .execute();
        if !done {
            self.deferred += 1;
        }
        done
    }

    fn deferred(&self) -> i64 {
        self.deferred
    }
}

/// Run `f` in a transaction of its own, committed when it returns.
fn in_transaction<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: the worker is connected to its database (connect_worker_to_spi) and in no
    // transaction here: every in_transaction commits before it returns, and a failed one is
    // aborted by `pass` before the next starts. GetTransactionSnapshot is taken once the
    // transaction has started, as PushActiveSnapshot needs.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let out = f();
    // SAFETY: `f` returned normally, so the snapshot pushed above is still the top of the
    // active stack (SPI pops what it pushes), and the transaction started above is open.
    unsafe {
        pg_sys::PopActiveSnapshot();
        pg_sys::CommitTransactionCommand();
    }
    out
}

/// One pass, unit by unit; an error is logged, its transaction rolled back, and the next
/// interval tries again.
fn pass(db: &str, index: usize) {
    PgTryBuilder::new(|| {
        let installed = in_transaction(|| {
            Spi::get_one::<bool>("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'queen')")
                .ok()
                .flatten()
                .unwrap_or(false)
        });
        if installed {
            let report = crate::maintain::pass(&mut OwnTransactions::default(), gucs::PARTITION_IDLE_SECONDS.get());
            match report.get("skipped") {
                None => debug1!("queen: maintenance of \"{db}\": {report}"),
                Some(_) => count(index, |u| u.skipped_passes += 1),
            }
        }
    })
    .catch_others(|e| {
        warning!("queen: maintenance of database \"{db}\" failed, will retry: {e:?}");
        // Whatever unit failed, its transaction is rolled back (a no-op between units).
        // SAFETY: the error was caught (its state copied and flushed by PgTryBuilder), and
        // AbortCurrentTransaction is what Postgres runs after an error: it releases the locks,
        // snapshots and SPI state of the failed transaction, and does nothing outside one.
        unsafe { pg_sys::AbortCurrentTransaction() };
        note_failure(&e, index);
    })
    .execute();
}

/// How soon the worker looks again at a timer that was due but held by an open transaction.
const RECHECK_MICROS: i64 = 50_000;

/// Fire the database's due timers (timers.rs), a chunk a transaction, and read when the next
/// is due. An error is logged and rolled back, and the timers are looked at again after
/// `retry` (the next pass fires them too).
fn fire_timers(db: &str, index: usize, retry: Duration) {
    crate::timer_wake::slot(index, |t| t.reading = true);
    let next = PgTryBuilder::new(|| {
        let ready = in_transaction(|| {
            Spi::get_one::<bool>(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'queen') \
                 AND pg_catalog.to_regclass('queen.timers') IS NOT NULL",
            )
            .ok()
            .flatten()
            .unwrap_or(false)
        });
        if !ready {
            return None;
        }
        // Queues whose delete holds their lock: their timers wait for the next firing.
        let mut shut = Vec::new();
        loop {
            // SAFETY: GetCurrentTimestamp only reads the clock.
            let now = unsafe { pg_sys::GetCurrentTimestamp() };
            let fired = in_transaction(|| {
                let fired = crate::timers::fire_due(now, crate::timers::FIRE_CHUNK, &mut shut);
                if fired.cancelled > 0 {
                    crate::maintain::record_cancelled(fired.cancelled);
                }
                fired
            });
            if fired.fired + fired.retried > 0 {
                debug1!("queen: timers of \"{db}\": {fired:?}");
            }
            if !fired.more {
                break;
            }
        }
        // A due timer left behind (an open transaction that reschedules or cancels it holds
        // its row) is looked at again shortly, not in a loop: that transaction's commit wakes
        // the worker if it moved the timer earlier still.
        // SAFETY: GetCurrentTimestamp only reads the clock.
        let soon = unsafe { pg_sys::GetCurrentTimestamp() } + RECHECK_MICROS;
        in_transaction(crate::timers::next_due).map(|due| due.max(soon))
    })
    .catch_others(|e| {
        warning!("queen: firing timers of database \"{db}\" failed, will retry: {e:?}");
        // SAFETY: as in `pass`: the error was caught and flushed; this rolls its transaction back.
        unsafe { pg_sys::AbortCurrentTransaction() };
        // SAFETY: GetCurrentTimestamp only reads the clock.
        Some(unsafe { pg_sys::GetCurrentTimestamp() } + retry.as_micros() as i64)
    })
    .execute();
    crate::timer_wake::slot(index, |t| {
        t.next_due = next.unwrap_or(i64::MAX);
        t.reading = false;
    });
}

/// Count the failed pass in queen.maintenance_stats, in a transaction of its own. If that
/// fails too (a read-only database, say), it is counted in shared memory, which the view
/// adds.
fn note_failure(e: &CaughtError, index: usize) {
    let message = match e {
        CaughtError::PostgresError(r) | CaughtError::ErrorReport(r) | CaughtError::RustPanic { ereport: r, .. } => {
            r.message().to_string()
        }
    };
    PgTryBuilder::new(|| crate::maintain::record_failure(&mut OwnTransactions::default(), &message))
        .catch_others(|_| {
            // SAFETY: as above.
            unsafe { pg_sys::AbortCurrentTransaction() };
            count(index, |u| u.failed_passes += 1);
        })
        .execute();
}
