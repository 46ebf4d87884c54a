//! The randomized interleaving explorer (issues 9 and 20): a seeded generator of schedules over
//! K real connections, a recorder of what each committed transaction did, and a checker that
//! judges the outcome against the delivery guarantees — the way Jepsen and Elle check
//! databases.
//!
//! A schedule is a list of steps, each run on one connection inside that connection's open
//! transaction (or in autocommit), one step at a time, so that a schedule replays the same
//! interleaving — but for a slow commit (`commit_slow`), which another thread sends while the
//! next steps run, once it is visible and before the caches learn of it. Steps that would wait
//! for a lock fail after `lock_timeout`: a pop or a keyless push that does is a violation (pops
//! and producers never wait, but for an open delete of their group or queue); an ack or a push of a key another open transaction holds may
//! wait, and is rolled back. Rolled-back, failed and killed transactions count as never having
//! happened, and the executor checks that they left no trace: around every refused or failed
//! call and every rollback, a fingerprint of queen's tables must not change. At the end every
//! open transaction commits, every group is drained, and the checker runs (check.rs).
//!
//! The last connection (of four or more) is an application role with grants on the queue
//! (push and pop, revoked and granted again mid-schedule): what it may not do is refused, and
//! what it may do goes through. A restore step moves the run to a database of the other
//! cluster (pg_dump, then pg_restore --data-only under connections opened before the data
//! arrived), whose transaction counter is behind or ahead.
//!
//! Queen's own locks (docs/design.md, "Locks"): the run's database has `deadlock_timeout`
//! 100 ms, so that a circle of waits ends in 40P01 before `lock_timeout` ends a wait, and a
//! 40P01 is a violation (but for a circle through a transaction that holds a delete it
//! finished: `Run::judge`). Deletes are sent from another thread (`delete_slow`) and land at
//! their connection's next step — success or 55P03 within their bound — while acks then pops or
//! pushes, timers due on the queue being deleted with passes beside them, and the tenant role
//! (a connection beyond the run's, working its own queue under this queue's group names) run
//! on the other connections. `ties` pushes 128 messages over 64 partitions in one transaction
//! and pops them 32 at a time over 8 partitions: each delivered exactly once.
//!
//! On a failure, `shrink` removes steps while the same kind of violation remains, and the
//! report prints the seed and the shrunk schedule, one step per line, which
//! `QUEEN_EXPLORE_SCHEDULE` replays.

mod check;
mod schedule;

pub use check::Violation;
pub use schedule::{
    DeadOp, DelTarget, Grp, Item, KvOp, LeaseKind, Privilege, SeekTo, SideOp, Status, Step, TenantOp, SIDE_GROUPS,
    SIDE_PARTITIONS, SIDE_QUEUES,
};

pub use crate::Server;
use postgres::{Client, NoTls};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// How many partitions the explored queue has; in the second half of a schedule pushes reach
/// `NEW_PARTITIONS` more, which appear then (behind whatever stretch of the log is there).
pub const PARTITIONS: u8 = 3;
pub const NEW_PARTITIONS: u8 = 3;
/// Partitions of the liveness probes (item 4): one new one each, `p101`, `p102`, ...
const FIRST_PROBE_PARTITION: u8 = 100;
const QUEUE: &str = "eq";
/// The application role of the last connection (created in every cluster the run uses).
pub const APP_ROLE: &str = "queen_explore_app";
/// The tenant role, on a connection of its own beyond the run's `conns` (Step::Tenant): it
/// holds `configure` and `pop` on queue `TENANT_QUEUE` only, and works it under the explored
/// queue's group names.
pub const TENANT_ROLE: &str = "queen_explore_tenant";
pub const TENANT_QUEUE: &str = "tq";
/// The queue and group of the ties steps.
pub const TIES_QUEUE: &str = "ew";
pub const TIES_GROUP: &str = "gw";
/// `queen.lock_wait_seconds` of a delete sent from another thread (Step::DeleteSlow), and the
/// slack its duration is allowed past it (a debug build, two cores).
pub const DELETE_WAIT_SECONDS: u64 = 2;
const DELETE_SLACK: Duration = Duration::from_millis(1500);
/// `deadlock_timeout` in the run's databases: a circle of waits surfaces as 40P01 well before
/// the connections' `lock_timeout` (400 ms) ends a wait.
const DEADLOCK_TIMEOUT: &str = "100ms";

/// Where and how to explore.
#[derive(Clone)]
pub struct Config {
    /// The server each run starts on (its maintenance database `postgres`); each run creates a
    /// database of its own there.
    pub server: Server,
    /// A second server, whose transaction counter is not the first's: restore steps move the
    /// run there (and back). None: restore steps do nothing.
    pub other: Option<Server>,
    pub conns: usize,
    pub steps: usize,
    /// A cluster the explorer may kill -9 and restart (crash rounds), if any: the directory of
    /// `server`'s cluster.
    pub crash: Option<CrashCluster>,
    /// On Citus: `server` is the coordinator of scripts/citus-cluster's nodes, each run's
    /// database is made on every node with queen distributed, and crash and move rounds stop a
    /// worker or move a shard.
    pub citus: Option<CitusNodes>,
}

/// The nodes of scripts/citus-cluster at base port `base` (the coordinator; workers after).
#[derive(Clone)]
pub struct CitusNodes {
    pub scripts: std::path::PathBuf,
    pub base: u16,
}

impl CitusNodes {
    fn node(&self, n: u16) -> Server {
        Server { host: "127.0.0.1".into(), port: (self.base + n).to_string() }
    }

    fn script(&self, args: &[&str]) {
        let out = std::process::Command::new(self.scripts.join("citus-cluster"))
            .args(args)
            .env("QUEEN_CITUS_PORT", self.base.to_string())
            .output()
            .unwrap();
        assert!(out.status.success(), "citus-cluster {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// A cluster of the explorer's own: its directory and port (scripts/cluster).
#[derive(Clone)]
pub struct CrashCluster {
    pub scripts: std::path::PathBuf,
    pub dir: String,
}

/// A delivery a connection received (committed or not): what acks pick from.
#[derive(Clone, Debug)]
struct Delivery {
    group: Grp,
    msg: Uuid,
    lease: Option<Uuid>,
    partition: Uuid,
    /// The message's transaction id as the pop returned it (a keyless message's id).
    key: String,
}

/// What a transaction did, as recorded.
#[derive(Clone, Debug)]
pub enum Event {
    Pushed {
        msg: Uuid,
        partition: u8,
        queued: bool,
        order: u64,
    },
    /// A pop of the group ran (empty or not: a group's first pop subscribes it).
    Popped {
        group: Grp,
        step: usize,
    },
    Delivered(Delivered),
    Acked {
        group: Grp,
        msg: Uuid,
        status: Status,
        success: bool,
        released: Option<Uuid>,
        step: usize,
        partition: Uuid,
    },
    Renewed {
        lease: Uuid,
        expires: f64,
    },
    /// A seek, or a delete_group, of the group: its leases are gone, and (a seek) it is
    /// subscribed anew at the seek's point.
    Reset {
        group: Grp,
        step: usize,
        seek: bool,
    },
    Applied {
        group: Grp,
        msg: Uuid,
    },
    /// A dead letter of the group purged (by its message id): the message stays finished.
    Purged {
        group: Grp,
        msg: Uuid,
    },
    /// queen_grant or queen_revoke of the application role's privilege.
    Privileged {
        privilege: Privilege,
        grant: bool,
    },
    /// Side queues (issue 21): a push, a delivery, an ack that finished its message (or found
    /// it gone), a delete of the queue (group None) or of one group.
    SidePushed {
        q: u8,
        msg: Uuid,
    },
    SideDelivered {
        q: u8,
        group: u8,
        msg: Uuid,
        lease: Option<Uuid>,
    },
    SideAcked {
        q: u8,
        group: u8,
        msg: Uuid,
        lease: Uuid,
        dlq: bool,
        released: bool,
        /// The ack found no message (retention or a delete took it): it waited for no pop.
        gone: bool,
        /// The step its statement ran at.
        ran: usize,
    },
    SideDeleted {
        q: u8,
        group: Option<u8>,
    },
    /// Key/value (issue 24): an increment of counter `key` that applied, with the value it
    /// answered; a claim (putIfAbsent) and a release (delete) of claim key `key` that applied.
    KvIncr {
        key: u8,
        value: i64,
    },
    KvClaimed {
        key: u8,
    },
    KvReleased {
        key: u8,
    },
    /// A timer of key `t{key}` scheduled (committed with its transaction id; `replaced`: the
    /// answer was 'rescheduled', a pending timer of the key was replaced), and a cancel that
    /// found one pending.
    TimerScheduled {
        key: u8,
        txn: String,
        replaced: bool,
    },
    TimerCancelled {
        key: u8,
    },
    /// The timer queue `et` deleted (its pending timers and fired messages with it).
    TimersDeleted,
    /// A permit of lock `el` taken (slot, token), and one given back by its token.
    LockAcquired {
        slot: i64,
        token: i64,
    },
    LockReleased {
        slot: i64,
        token: i64,
    },
}

/// A side queue's delivery a connection received: what side acks pick from.
#[derive(Clone, Debug)]
struct SideDelivery {
    q: u8,
    group: u8,
    msg: Uuid,
    lease: Uuid,
    /// The lease's expiry and the server's clock at the pop (seconds).
    expires: f64,
    step: usize,
}

/// An ack of a side delivery under its lease, still active by the clock, that found the message
/// gone: step, queue, group, message, the delivery's step.
#[derive(Clone, Debug)]
pub struct SideGone {
    pub step: usize,
    pub q: u8,
    pub group: u8,
    pub msg: Uuid,
    /// The lease the ack named (the delivery's, which may never have committed).
    pub lease: Uuid,
    pub delivered: usize,
}

#[derive(Clone, Debug)]
pub struct Delivered {
    pub group: Grp,
    pub msg: Uuid,
    pub partition: Uuid,
    pub lease: Option<Uuid>,
    pub expires: Option<f64>,
    /// The server's clock at the pop (seconds).
    pub at: f64,
    pub step: usize,
    pub pos: usize,
}

/// A committed transaction: the step of its first statement, of its commit, and what it did.
#[derive(Clone, Debug)]
pub struct Committed {
    pub begin: usize,
    pub commit: usize,
    pub events: Vec<Event>,
}

/// A call of the application role that needed a privilege: whether it was let through.
#[derive(Clone, Debug)]
pub struct AppCall {
    pub step: usize,
    pub privilege: Privilege,
    pub allowed: bool,
}

struct Tx {
    begin: usize,
    events: Vec<Event>,
    savepoint: Option<usize>,
    /// What deletes in this transaction deleted (their exclusive locks held until it ends),
    /// each with the number of events before it (a rollback to a savepoint takes back those
    /// after its mark).
    deleting: Vec<(DelTarget, usize)>,
    /// Deletes (of any queue or group: the tenant's, a side queue's group's too) this
    /// transaction finished: it holds their exclusive locks until it ends (Run::judge).
    finished_deletes: usize,
}

impl Tx {
    fn new(begin: usize) -> Tx {
        Tx { begin, events: Vec::new(), savepoint: None, deleting: Vec::new(), finished_deletes: 0 }
    }
}

/// A commit sent from another thread (`commit_slow`): the connection comes back with it, and
/// the warnings that thread heard.
type Pending = std::thread::JoinHandle<(Client, Result<(), postgres::Error>, Vec<String>)>;
/// A delete sent from another thread (`delete_slow`): the connection, the outcome, how long
/// the delete's statement took, and the warnings that thread heard.
type PendingDelete = std::thread::JoinHandle<(Client, Result<(), postgres::Error>, Duration, Vec<String>)>;

/// What a connection has in flight on another thread.
enum Slow {
    /// A slow commit: its thread, the transaction, the step.
    Commit(Pending, Tx, usize),
    /// A delete in the connection's transaction (which stays in `Conn::tx`): its thread, what
    /// it deletes, the step.
    Delete(PendingDelete, DelTarget, usize),
}

struct Conn {
    client: Option<Client>,
    pid: i32,
    tx: Option<Tx>,
    deliveries: Vec<Delivery>,
    /// The application role's connection (the others are superusers, but the tenant's).
    app: bool,
    /// The tenant role's connection (the run's last).
    tenant: bool,
    /// A slow commit or delete in flight.
    slow: Option<Slow>,
}

impl Conn {
    /// Whether the connection's open transaction (or a delete in flight on it) deletes
    /// `target`: what holds back the writers of that group or queue.
    fn deleting(&self, target: DelTarget) -> bool {
        self.tx.as_ref().is_some_and(|t| t.deleting.iter().any(|(d, _)| *d == target))
            || matches!(&self.slow, Some(Slow::Delete(_, t, _)) if *t == target)
    }
}

/// The outcome of a run.
pub struct Outcome {
    pub violations: Vec<Violation>,
    pub steps: usize,
    pub crashes: usize,
    /// Restores into the other cluster, calls of the application role refused (and let
    /// through), refused or failed calls and rollbacks whose fingerprints were compared.
    pub restores: usize,
    pub app_refused: usize,
    pub app_allowed: usize,
    pub no_trace_checks: usize,
    /// Side queue deletes (of a queue or a group) and maintenance passes that committed.
    pub side_deletes: usize,
    pub passes: usize,
    /// Shard moves (Citus).
    pub moves: usize,
    /// queen_ack_lease calls that answered rows, and the messages they acked.
    pub lease_acks: usize,
    pub lease_acked: usize,
    /// Dead letters replayed and purged by committed or uncommitted calls that answered.
    pub replayed: usize,
    pub purged: usize,
    /// Acks that filed a dead letter and committed (`dlq`, or `failed` past the retry limit).
    pub dead_filed: usize,
    /// Deletes sent from another thread: landed with success, with 55P03 (their bound), and
    /// how many other steps ran while one was out.
    pub slow_deletes: usize,
    pub slow_deletes_timed_out: usize,
    pub steps_beside_deletes: usize,
    /// Maintenance passes that ran while a delete of the timer queue was open.
    pub passes_beside_timer_deletes: usize,
    /// Steps of the tenant role, and ties steps (their messages delivered).
    pub tenant_steps: usize,
    pub ties: usize,
    pub ties_delivered: usize,
    /// 40P01s of circles through a transaction holding a delete it finished (Run::judge).
    pub deadlocks_across_deletes: Vec<String>,
}

/// One exploration run over a database of its own.
pub struct Run<'a> {
    cfg: &'a Config,
    /// The server the run is on now (a restore moves it).
    server: Server,
    db: String,
    conns: Vec<Conn>,
    /// An admin connection that reads what is committed (fingerprints).
    observer: Client,
    step: usize,
    history: Vec<Committed>,
    app_calls: Vec<AppCall>,
    violations: Vec<Violation>,
    pushes: u64,
    /// The group of each lease seen.
    lease_groups: HashMap<Uuid, Grp>,
    crashes: usize,
    moves: usize,
    restores: usize,
    no_trace_checks: usize,
    /// Messages delivered so far in this step (a step may pop more than once): the positions
    /// of the next pop's deliveries count on from here, so that the order of deliveries within
    /// a step is the order of (step, position).
    delivered_in_step: usize,
    /// Liveness probes run (each pushes into a partition of its own).
    probes: usize,
    /// `queen.debug_scan_limit` of the superuser connections (0: the built-in bounds).
    scan_limit: i32,
    /// Acks of side deliveries that found their message gone under an active lease.
    side_gone: Vec<SideGone>,
    /// Side deliveries under a lease not acked yet, whichever connection popped them: any
    /// connection acks them (a lease id is all an ack needs).
    side_deliveries: Vec<SideDelivery>,
    /// queen_maintain() calls that returned.
    passes: usize,
    /// queen_ack_lease calls that answered rows, and the messages they acked.
    lease_acks: usize,
    lease_acked: usize,
    replayed: usize,
    purged: usize,
    /// The connection whose transaction a side FirstPop opened (while it is open, draw() lets
    /// time pass and maintenance run more often: issue 21, item 7's shape).
    first_pop: Option<usize>,
    /// When steps began (step, seconds since the epoch by this machine's clock, which the
    /// server shares): a lower bound of when what a step committed became visible.
    step_times: Vec<(usize, f64)>,
    /// Permits of the lock steps taken (slot, token), oldest first, not given back yet.
    permits: Vec<(i64, i64)>,
    /// The counters of Outcome's fields of the same names.
    slow_deletes: usize,
    slow_deletes_timed_out: usize,
    steps_beside_deletes: usize,
    passes_beside_timer_deletes: usize,
    tenant_steps: usize,
    ties: usize,
    ties_delivered: usize,
    deadlocks_across_deletes: Vec<String>,
}

thread_local! {
    /// The WARNINGs the server sent this thread's connections since the last step took them
    /// (a slow commit's thread hands its own back with the connection):
    /// no call of queen's warns its client, whatever the interleaving (a pop that passed a
    /// partition another pop was visiting warned "you don't own a lock" at every pass). Left
    /// out: the notice a crash sends every other backend (class 57), and those of the
    /// executor's own COMMIT or ROLLBACK outside a transaction (25P01) or BEGIN inside one
    /// (25001).
    static HEARD: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// What the server warned this thread's connections of since the last call.
fn heard() -> Vec<String> {
    HEARD.with(|h| std::mem::take(&mut *h.borrow_mut()))
}

fn connect_retrying(info: &str) -> Client {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut config: postgres::Config = info.parse().unwrap_or_else(|e| panic!("explorer: bad conninfo {info}: {e}"));
    // The synchronous client drives its connection on the calling thread: notices arrive here.
    config.notice_callback(|n| {
        let code = n.code().code();
        if n.severity() == "WARNING" && !code.starts_with("57") && code != "25P01" && code != "25001" {
            let heard = format!("{}: {}", n.code().code(), n.message());
            HEARD.with(|h| h.borrow_mut().push(heard));
        }
    });
    loop {
        match config.connect(NoTls) {
            Ok(c) => return c,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("explorer: cannot connect to {info}: {e}"),
        }
    }
}

/// The error classes the executor tells apart.
enum Failure {
    /// The statement waited for a lock past lock_timeout (the server's message and context).
    LockWait(String),
    /// 40P01, with the server's message and DETAIL (the circle of waits): a violation
    /// whatever the call (queen takes its locks in one order, and its deletes all at once).
    Deadlock(String),
    /// 40P01 of a circle through a transaction that holds the locks of a delete it finished
    /// earlier (Run::judge): the order of the client's calls, not queen's; counted.
    DeadlockAcrossDeletes(String),
    /// A serialization failure (a transaction that used the id mapping a restore replaced).
    Conflict,
    /// The connection is gone (terminated, crashed).
    Gone,
    /// 42501: the role lacks the privilege.
    Refused,
    Other(String),
}

fn classify(e: &postgres::Error) -> Failure {
    if e.is_closed() {
        return Failure::Gone;
    }
    match e.code().map(|c| c.code()) {
        Some("55P03") => Failure::LockWait(
            e.as_db_error()
                .map(|d| format!("{} ({})", d.message(), d.where_().unwrap_or("").replace('\n', "; ")))
                .unwrap_or_default(),
        ),
        Some("40P01") => Failure::Deadlock(
            e.as_db_error()
                .map(|d| format!("{}; DETAIL: {}", d.message(), d.detail().unwrap_or("")))
                .unwrap_or_else(|| e.to_string()),
        ),
        Some("40001") => Failure::Conflict,
        Some("57P01") | Some("57P02") | Some("57P03") => Failure::Gone,
        Some("42501") => Failure::Refused,
        None => Failure::Gone, // an I/O error: the server went away
        _ => Failure::Other(
            e.as_db_error().map(|d| format!("{}: {}", d.code().code(), d.message())).unwrap_or_else(|| e.to_string()),
        ),
    }
}

/// What queen's tables hold, as `c` sees them (its own transaction's changes included): every
/// row but the cursors' `updated_at`, and the business writes. (queen.cluster is left out: the
/// rebase after a restore commits on its own, by design.)
/// The key/value namespace of the explorer's kv steps, and how many keys of each kind.
pub const KV_NAMESPACE: &str = "ek";
pub const KV_KEYS: u8 = 3;
/// The queue of the timer steps, and the lock (of LOCK_LIMIT slots) of the lock steps.
pub const TIMER_QUEUE: &str = "et";
/// The queue of the timers a pass must fire whatever is being deleted (`kv schedule_other`).
pub const TIMER_OTHER: &str = "eo";
pub const LOCK_NAME: &str = "el";
pub const LOCK_LIMIT: i64 = 2;

const FINGERPRINT: &str = "
    SELECT md5(coalesce(string_agg(x, '|' ORDER BY x), '')) FROM (
        SELECT 'm' || m::text FROM queen.messages m
        UNION ALL SELECT 'c' || (to_jsonb(c) - 'updated_at')::text FROM queen.cursors c
        UNION ALL SELECT 's' || s::text FROM queen.subscriptions s
        UNION ALL SELECT 'r' || r::text FROM queen.ready r
        UNION ALL SELECT 'd' || d::text FROM queen.discovery d
        UNION ALL SELECT 'l' || l::text FROM queen.dead_letters l
        UNION ALL SELECT 'p' || p::text FROM queen.privileges p
        UNION ALL SELECT 'q' || q::text FROM queen.queues q
        UNION ALL SELECT 't' || t::text FROM queen.partitions t
        UNION ALL SELECT 'k' || k::text FROM queen.kv k
        UNION ALL SELECT 'x' || x::text FROM queen.timers x
        UNION ALL SELECT 'a' || a::text FROM applied a) AS u(x)";

fn fingerprint(c: &mut Client) -> Option<String> {
    c.query_one(FINGERPRINT, &[]).ok().map(|r| r.get(0))
}

/// The options of side queue `q`: `rc` completed retention, `rr` retention by age, `rm` max
/// wait, all after 1 s (Sleep steps let that pass), with leases that outlast a run.
fn side_configure(q: u8) -> String {
    let opts = match q {
        0 => r#"{"completedRetentionSeconds": 1, "leaseTime": 120}"#,
        1 => r#"{"retentionSeconds": 1, "leaseTime": 120}"#,
        _ => r#"{"maxWaitTimeSeconds": 1, "leaseTime": 120}"#,
    };
    format!("SELECT queen_configure('{}', '{opts}')", SIDE_QUEUES[q as usize])
}

/// Create the application and tenant roles in a cluster (once; runs at once may race to
/// create them).
fn ensure_app_role(admin: &mut Client) {
    for role in [APP_ROLE, TENANT_ROLE] {
        let _ = admin.batch_execute(&format!(
            "DO $$BEGIN CREATE ROLE {role} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END$$"
        ));
    }
}

impl<'a> Run<'a> {
    /// A fresh database with the extension, the queue configured for short leases and retries,
    /// the table the business writes go to, and the application role's grants.
    pub fn new(cfg: &'a Config, name: &str) -> Run<'a> {
        // An earlier run's leftovers are not this run's.
        heard();
        let server = cfg.server.clone();
        match &cfg.citus {
            Some(nodes) => Self::create_citus_db(nodes, name),
            None => Self::create_db(&server, name),
        }
        let mut c = connect_retrying(&server.conninfo(name, "postgres"));
        c.batch_execute(&format!(
            "SELECT queen_configure('{QUEUE}', '{{\"leaseTime\": 1, \"retryLimit\": 2, \"retryDelay\": 100}}');
             SELECT queen_grant('{QUEUE}', '{APP_ROLE}', ARRAY['push', 'pop']);
             SELECT queen_grant('{KV_NAMESPACE}', '{APP_ROLE}', ARRAY['kv_read', 'kv_write']);
             SELECT queen_grant('{TIMER_QUEUE}', '{APP_ROLE}', ARRAY['push', 'pop', 'read']);
             SELECT queen_grant('queen-locks', '{APP_ROLE}', ARRAY['kv_read', 'kv_write']);
             SELECT queen_configure('{TENANT_QUEUE}', '{{\"leaseTime\": 1}}');
             -- (Registered here: on Citus a push that registers its queue writes a reference
             -- table, whose writes Citus serializes, so the first ties round would wait for a
             -- delete open from another thread: docs/scale-out.md.)
             SELECT queen_configure('{TIES_QUEUE}', '{{}}');
             SELECT queen_grant('{TENANT_QUEUE}', '{TENANT_ROLE}', ARRAY['configure', 'pop']);"
        ))
        .unwrap();
        for (q, _) in SIDE_QUEUES.iter().enumerate() {
            c.batch_execute(&side_configure(q as u8)).unwrap();
            c.batch_execute(&format!(
                "SELECT queen_grant('{}', '{APP_ROLE}', ARRAY['push', 'pop', 'configure'])",
                SIDE_QUEUES[q]
            ))
            .unwrap();
        }
        let observer = connect_retrying(&server.conninfo(name, "postgres"));
        let mut run = Run {
            cfg,
            server,
            db: name.to_string(),
            conns: Vec::new(),
            observer,
            step: 0,
            history: Vec::new(),
            app_calls: Vec::new(),
            violations: Vec::new(),
            pushes: 0,
            lease_groups: HashMap::new(),
            crashes: 0,
            moves: 0,
            restores: 0,
            no_trace_checks: 0,
            delivered_in_step: 0,
            probes: 0,
            scan_limit: 0,
            side_gone: Vec::new(),
            step_times: Vec::new(),
            permits: Vec::new(),
            slow_deletes: 0,
            slow_deletes_timed_out: 0,
            steps_beside_deletes: 0,
            passes_beside_timer_deletes: 0,
            tenant_steps: 0,
            ties: 0,
            ties_delivered: 0,
            deadlocks_across_deletes: Vec::new(),
            first_pop: None,
            side_deliveries: Vec::new(),
            passes: 0,
            lease_acks: 0,
            lease_acked: 0,
            replayed: 0,
            purged: 0,
        };
        // The run's connections, and the tenant's after them.
        for i in 0..=cfg.conns {
            let conn = run.open(i);
            run.conns.push(conn);
        }
        run
    }

    /// The tenant role's connection.
    fn tenant(&self) -> usize {
        self.conns.len() - 1
    }

    /// A database `name` on `server`, afresh, with the extension and the business table.
    fn create_db(server: &Server, name: &str) {
        let mut admin = connect_retrying(&server.conninfo("postgres", "postgres"));
        ensure_app_role(&mut admin);
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        admin.batch_execute(&format!("ALTER DATABASE {name} SET deadlock_timeout = '{DEADLOCK_TIMEOUT}'")).unwrap();
        let mut c = connect_retrying(&server.conninfo(name, "postgres"));
        c.batch_execute(&format!(
            "CREATE EXTENSION queen;
             CREATE TABLE applied (grp text, msg uuid);
             GRANT INSERT ON applied TO {APP_ROLE};"
        ))
        .unwrap();
    }

    /// A database `name` on every node of a Citus cluster, with Citus, the workers added, queen
    /// distributed over 4 shards, and the business table distributed too.
    fn create_citus_db(nodes: &CitusNodes, name: &str) {
        for n in 0..3 {
            let mut admin = connect_retrying(&nodes.node(n).conninfo("postgres", "postgres"));
            ensure_app_role(&mut admin);
            admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).unwrap();
            admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
            admin.batch_execute(&format!("ALTER DATABASE {name} SET deadlock_timeout = '{DEADLOCK_TIMEOUT}'")).unwrap();
            connect_retrying(&nodes.node(n).conninfo(name, "postgres"))
                .batch_execute("SET client_min_messages = warning; CREATE EXTENSION citus")
                .unwrap();
            if n > 0 {
                // The connections' lock_timeout, which Citus does not carry to the workers, where
                // queen's calls run (docs/scale-out.md): set there for the database.
                admin.batch_execute(&format!("ALTER DATABASE {name} SET lock_timeout = '400ms'")).unwrap();
            }
        }
        let mut c = connect_retrying(&nodes.node(0).conninfo(name, "postgres"));
        // (Each statement a transaction of its own: queen_distribute() checks that the workers
        // have the extension, which CREATE EXTENSION makes there when it commits.)
        for sql in [
            "SET client_min_messages = warning".to_string(),
            format!("SELECT citus_set_coordinator_host('127.0.0.1', {})", nodes.base),
            format!("SELECT citus_add_node('127.0.0.1', {})", nodes.base + 1),
            format!("SELECT citus_add_node('127.0.0.1', {})", nodes.base + 2),
            "CREATE EXTENSION queen".to_string(),
            "SELECT queen_distribute(4)".to_string(),
            "CREATE TABLE applied (grp text, msg uuid)".to_string(),
            "SELECT create_distributed_table('applied', 'msg')".to_string(),
            format!("GRANT INSERT ON applied TO {APP_ROLE}"),
        ] {
            c.batch_execute(&sql).unwrap_or_else(|e| panic!("explorer: {sql}: {e:?}"));
        }
    }

    /// Use `queen.debug_scan_limit` on the superuser connections: stretches of the log longer
    /// than one pop reads, out of a few dozen messages. (On Citus, where the engine runs on the
    /// workers, for every connection of the database there.)
    pub fn set_scan_limit(&mut self, limit: i32) {
        self.scan_limit = limit;
        if let Some(nodes) = &self.cfg.citus {
            for n in 1..3 {
                let mut admin = connect_retrying(&nodes.node(n).conninfo("postgres", "postgres"));
                admin
                    .batch_execute(&format!("ALTER DATABASE {} SET queen.debug_scan_limit = {limit}", self.db))
                    .unwrap();
            }
        }
        for i in 0..self.conns.len() {
            self.configure(i);
        }
    }

    fn configure(&mut self, i: usize) {
        let limit = self.scan_limit;
        let conn = &mut self.conns[i];
        if let (Some(client), false) = (conn.client.as_mut(), conn.app || conn.tenant) {
            let _ = client.batch_execute(&format!("SET queen.debug_scan_limit = {limit}"));
        }
    }

    /// Connection `i`: the last of four or more is the application role; the one after the
    /// run's connections the tenant role.
    fn open(&self, i: usize) -> Conn {
        let app = self.cfg.conns >= 4 && i == self.cfg.conns - 1;
        let tenant = i == self.cfg.conns;
        let user = if app {
            APP_ROLE
        } else if tenant {
            TENANT_ROLE
        } else {
            "postgres"
        };
        let mut client = connect_retrying(&self.server.conninfo(&self.db, user));
        client.batch_execute("SET lock_timeout = '400ms'; SET statement_timeout = '20s'").unwrap();
        if !app && !tenant && self.scan_limit > 0 {
            client.batch_execute(&format!("SET queen.debug_scan_limit = {}", self.scan_limit)).unwrap();
        }
        let pid = client.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        Conn { client: Some(client), pid, tx: None, deliveries: Vec::new(), app, tenant, slow: None }
    }

    /// Drop the database (when the run passed).
    pub fn drop_db(mut self) {
        for c in 0..self.conns.len() {
            self.land(c);
        }
        let name = self.db.clone();
        let server = self.server.clone();
        drop(self.conns);
        drop(self.observer);
        let servers = match &self.cfg.citus {
            Some(nodes) => (0..3).map(|n| nodes.node(n)).collect(),
            None => vec![server],
        };
        for server in servers {
            let mut admin = connect_retrying(&server.conninfo("postgres", "postgres"));
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        }
    }

    fn violation(&mut self, kind: &'static str, detail: String) {
        self.violations.push(Violation { kind, detail });
    }

    /// Record events of a statement: into the open transaction, or committed at once.
    fn record(&mut self, c: usize, events: Vec<Event>) {
        let step = self.step;
        match &mut self.conns[c].tx {
            Some(tx) => tx.events.extend(events),
            None => self.history.push(Committed { begin: step, commit: step, events }),
        }
    }

    /// Wait for connection `c`'s slow commit, if one is in flight, and take its connection
    /// back: the transaction committed at the slow commit's step, or never happened.
    fn land(&mut self, c: usize) {
        let (handle, tx, step) = match self.conns[c].slow.take() {
            None => return,
            Some(Slow::Delete(handle, target, step)) => return self.land_delete(c, handle, target, step),
            Some(Slow::Commit(handle, tx, step)) => (handle, tx, step),
        };
        let (client, result, warned) = handle.join().expect("the slow commit's thread");
        self.conns[c].client = Some(client);
        // (The transaction being landed is out of conns[c].tx: put back while it is judged.)
        let result = result.map_err(|e| {
            self.conns[c].tx = Some(Tx { finished_deletes: tx.finished_deletes, ..Tx::new(tx.begin) });
            let f = self.judge(&e);
            self.conns[c].tx = None;
            (e, f)
        });
        for w in warned {
            self.violation("a warning to a client", format!("step {step}: {c} commit_slow: {w}"));
        }
        match result {
            Ok(()) => {
                let begin = if tx.begin == usize::MAX { step } else { tx.begin };
                self.history.push(Committed { begin, commit: step, events: tx.events });
            }
            Err((e, f)) => match f {
                Failure::Gone => self.conns[c].client = None,
                Failure::Conflict | Failure::LockWait(_) => {}
                Failure::DeadlockAcrossDeletes(d) => {
                    self.deadlocks_across_deletes.push(format!("step {step}: {c} commit_slow: {d}"))
                }
                Failure::Deadlock(d) => self.violation("deadlock", format!("step {step}: {c} commit_slow: {d}")),
                Failure::Refused | Failure::Other(_) => {
                    self.violation("unexpected error", format!("step {step}: {c} commit_slow: {e}"))
                }
            },
        }
    }

    /// Wait for connection `c`'s delete sent at step `step`, take its connection back, and
    /// judge it: success (recorded in the connection's transaction, which goes on) or 55P03
    /// (the transaction rolled back), never 40P01, and within `queen.lock_wait_seconds` (plus
    /// slack) either way.
    fn land_delete(&mut self, c: usize, handle: PendingDelete, target: DelTarget, step: usize) {
        let (client, result, took, warned) = handle.join().expect("the slow delete's thread");
        self.conns[c].client = Some(client);
        let what = format!("step {step}: {}", Step::DeleteSlow { c, target });
        for w in warned {
            self.violation("a warning to a client", format!("{what}: {w}"));
        }
        let bound = Duration::from_secs(DELETE_WAIT_SECONDS) + DELETE_SLACK;
        if took > bound {
            self.violation(
                "waited past its bound",
                format!(
                    "{what} took {took:?} (queen.lock_wait_seconds = {DELETE_WAIT_SECONDS}), landed at step {}",
                    self.step
                ),
            );
        }
        match result {
            Ok(()) => {
                self.slow_deletes += 1;
                // (The delete acted between its step and this one, once it had its locks; no
                // grant of the group can come between (it holds them until its transaction
                // ends), so it is recorded at this step, after every grant before it.)
                let event = match target {
                    DelTarget::Scratch => Event::Reset { group: Grp::Scratch, step: self.step, seek: false },
                    DelTarget::Side(q) => Event::SideDeleted { q, group: None },
                    DelTarget::Timers => Event::TimersDeleted,
                };
                let tx = self.conns[c].tx.as_mut().expect("a delete sent in a transaction");
                tx.deleting.push((target, tx.events.len()));
                tx.finished_deletes += 1;
                tx.events.push(event);
            }
            Err(e) => {
                // (The thread rolled the transaction back.)
                let failure = self.judge(&e);
                self.conns[c].tx = None;
                let app = self.conns[c].app;
                match failure {
                    Failure::Gone => self.conns[c].client = None,
                    Failure::LockWait(_) => self.slow_deletes_timed_out += 1,
                    Failure::Conflict => {}
                    Failure::DeadlockAcrossDeletes(d) => {
                        self.deadlocks_across_deletes.push(format!("{what}: {d} (landed at step {})", self.step))
                    }
                    Failure::Refused if app => {}
                    Failure::Deadlock(d) => {
                        self.violation("deadlock", format!("{what}: {d} (landed at step {})", self.step))
                    }
                    Failure::Refused | Failure::Other(_) => self.violation("unexpected error", format!("{what}: {e}")),
                }
            }
        }
    }

    /// `classify`, and a 40P01 told apart: queen's deletes take all their locks at once or
    /// none, and hold none while they wait — within one call. A transaction that finished a
    /// delete and goes on (to another delete, or to write what another transaction's delete
    /// holds) keeps that delete's exclusive locks while it waits: a circle through it is the
    /// order of the client's calls (as two transactions that lock two rows in opposite
    /// orders), not queen's. Such a circle names (in its DETAIL) the backend of a connection
    /// whose open transaction holds a finished delete; it is counted, not a violation. Every
    /// other 40P01 is a violation.
    fn judge(&self, e: &postgres::Error) -> Failure {
        match classify(e) {
            Failure::Deadlock(d) => {
                let pids: Vec<i32> = d
                    .split("Process ")
                    .skip(1)
                    .filter_map(|x| x.split(|ch: char| !ch.is_ascii_digit()).next()?.parse().ok())
                    .collect();
                let across = self
                    .conns
                    .iter()
                    .any(|k| pids.contains(&k.pid) && k.tx.as_ref().is_some_and(|t| t.finished_deletes > 0));
                if across {
                    Failure::DeadlockAcrossDeletes(d)
                } else {
                    Failure::Deadlock(d)
                }
            }
            f => f,
        }
    }

    /// Whether a connection other than `c` has a delete of `target` open (in its transaction,
    /// or in flight): what a write of that group or queue may wait for.
    fn deleting_elsewhere(&self, c: usize, target: DelTarget) -> bool {
        self.conns.iter().enumerate().any(|(i, k)| i != c && k.deleting(target))
    }

    /// Run one statement on connection `c`; on failure, its transaction is rolled back (and a
    /// gone connection reopened), and the failure returned.
    fn exec<T>(&mut self, c: usize, f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>) -> Result<T, Failure> {
        self.land(c);
        if self.conns[c].client.is_none() {
            self.conns[c] = self.open(c);
        }
        if let Some(tx) = &mut self.conns[c].tx {
            if tx.events.is_empty() && tx.begin == usize::MAX {
                tx.begin = self.step;
            }
        }
        let client = self.conns[c].client.as_mut().unwrap();
        match f(client) {
            Ok(v) => Ok(v),
            Err(e) => {
                let failure = self.judge(&e);
                let conn = &mut self.conns[c];
                conn.tx = None;
                match failure {
                    Failure::Gone => conn.client = None,
                    _ => {
                        if conn.client.as_mut().unwrap().batch_execute("ROLLBACK").is_err() {
                            conn.client = None;
                        }
                    }
                }
                Err(failure)
            }
        }
    }

    /// Report a failure of a step that must not fail that way.
    fn failed(&mut self, step: &Step, f: Failure, may_wait: bool) {
        let app = step.conn().is_some_and(|c| self.conns[c].app);
        match f {
            Failure::LockWait(m) if !may_wait => {
                self.violation("waited on a lock", format!("step {}: {step}: {m}", self.step))
            }
            Failure::Refused if !app => {
                self.violation("unexpected error", format!("step {}: {step}: refused a superuser", self.step))
            }
            Failure::Deadlock(d) => self.violation("deadlock", format!("step {}: {step}: {d}", self.step)),
            Failure::DeadlockAcrossDeletes(d) => {
                self.deadlocks_across_deletes.push(format!("step {}: {step}: {d}", self.step))
            }
            Failure::LockWait(_) | Failure::Conflict | Failure::Gone | Failure::Refused => {}
            Failure::Other(e) => self.violation("unexpected error", format!("step {}: {step}: {e}", self.step)),
        }
    }

    /// The committed fingerprint now (None when it cannot be read: a crash, a restore).
    fn committed_state(&mut self) -> Option<String> {
        fingerprint(&mut self.observer)
    }

    /// A refused or failed call, or a rollback, changed what is committed.
    fn check_no_trace(&mut self, step: &Step, before: Option<String>) {
        if let (Some(b), Some(a)) = (before, self.committed_state()) {
            self.no_trace_checks += 1;
            if a != b {
                self.violation(
                    "trace of a refused call",
                    format!("step {}: {step}: failed, refused or rolled back, it changed what is committed", self.step),
                );
            }
        }
    }

    fn note_time(&mut self) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        self.step_times.push((self.step, now));
    }

    /// When step `step` began, or the last step before it that noted its time.
    pub(super) fn began(&self, step: usize) -> f64 {
        let i = self.step_times.partition_point(|(s, _)| *s <= step);
        if i == 0 {
            0.0
        } else {
            self.step_times[i - 1].1
        }
    }

    /// Run one step.
    pub fn run_step(&mut self, step: &Step) {
        // A delete out on the step's connection lands first: the step runs in what it left
        // (its transaction, or none if it failed).
        if let Some(c) = step.conn().filter(|c| matches!(self.conns[*c].slow, Some(Slow::Delete(..)))) {
            self.land(c);
        }
        // Around a call that may be refused or fail outside a transaction, the committed state
        // must not change unless it succeeded.
        let watch = match step {
            Step::Rollback(_)
            | Step::Sleep(_)
            | Step::Terminate(_)
            | Step::Crash
            | Step::Move
            | Step::Restore { .. } => false,
            s => s.conn().is_some_and(|c| self.conns[c].tx.is_none() && self.conns[c].slow.is_none()),
        };
        let before = if watch || matches!(step, Step::Rollback(_)) { self.committed_state() } else { None };
        if self
            .conns
            .iter()
            .enumerate()
            .any(|(i, k)| matches!(k.slow, Some(Slow::Delete(..))) && step.conn() != Some(i))
        {
            self.steps_beside_deletes += 1;
        }
        self.delivered_in_step = 0;
        self.note_time();
        let ok = self.execute(step);
        if !ok && before.is_some() {
            self.check_no_trace(step, before);
        }
        for w in heard() {
            self.violation("a warning to a client", format!("step {} ({step:?}): {w}", self.step));
        }
        self.step += 1;
    }

    /// Execute a step; false when it failed or was refused (or rolled back), which must leave
    /// no trace.
    fn execute(&mut self, step: &Step) -> bool {
        match step {
            Step::Begin(c) => {
                if self.conns[*c].tx.is_none() && self.exec(*c, |k| k.batch_execute("BEGIN")).is_ok() {
                    self.conns[*c].tx = Some(Tx::new(usize::MAX));
                }
                true
            }
            Step::Commit(c) => self.commit(*c),
            Step::CommitSlow(c) => {
                self.commit_slow(*c);
                true
            }
            Step::Rollback(c) => {
                if self.conns[*c].tx.is_some() {
                    let _ = self.exec(*c, |k| k.batch_execute("ROLLBACK"));
                    self.conns[*c].tx = None;
                }
                false
            }
            Step::Savepoint(c) => {
                if self.conns[*c].tx.is_some() && self.exec(*c, |k| k.batch_execute("SAVEPOINT s")).is_ok() {
                    let tx = self.conns[*c].tx.as_mut().unwrap();
                    tx.savepoint = Some(tx.events.len());
                }
                true
            }
            Step::RollbackToSavepoint(c) => {
                let mark = self.conns[*c].tx.as_ref().and_then(|t| t.savepoint);
                if let Some(mark) = mark {
                    if self.exec(*c, |k| k.batch_execute("ROLLBACK TO SAVEPOINT s")).is_ok() {
                        let tx = self.conns[*c].tx.as_mut().unwrap();
                        tx.events.truncate(mark);
                        tx.deleting.retain(|(_, at)| *at < mark);
                    }
                }
                true
            }
            Step::TakeXid(c) => {
                if self.conns[*c].tx.is_some() {
                    if let Err(f) = self.exec(*c, |k| k.batch_execute("SELECT pg_current_xact_id()")) {
                        self.failed(step, f, false);
                        return false;
                    }
                }
                true
            }
            Step::Push { c, items, batch } => self.push(step, *c, items, *batch),
            Step::Side { c, q, op } => self.side(step, *c, *q, op),
            Step::Kv { c, op } => self.kv(step, *c, *op),
            Step::Fill { c, partition, n, consume } => {
                let items: Vec<Item> = (0..*n).map(|_| Item { partition: *partition, key: None }).collect();
                let pushed = self.push(step, *c, &items, true);
                match consume {
                    Some(group) if pushed && self.conns[*c].tx.is_none() && !self.conns[*c].app => {
                        self.stretch(*c, *group, *partition)
                    }
                    _ => pushed,
                }
            }
            Step::Pop { .. } => self.pop(step),
            Step::Ack { .. } => self.ack(step),
            Step::Renew { c, pick } => self.renew(step, *c, *pick),
            Step::AckLease { .. } => self.ack_lease(step),
            Step::Seek { c, group, to } => {
                let (group, to) = (*group, *to);
                let r = self.exec(*c, |k| {
                    k.execute(
                        "SELECT queen_seek($1, $2, CASE $3 WHEN 'end' THEN NULL
                                                       WHEN 'start' THEN '2000-01-01'::timestamptz
                                                       ELSE clock_timestamp() END)",
                        &[&QUEUE, &group.name(), &to_str(to)],
                    )
                });
                match r {
                    Ok(_) => {
                        self.record(*c, vec![Event::Reset { group, step: self.step, seek: true }]);
                        true
                    }
                    Err(f) => {
                        self.failed(step, f, true);
                        false
                    }
                }
            }
            Step::DeadLetters { c, group, op } => self.dead_letters(step, *c, *group, *op),
            Step::DeleteGroup(c) => {
                match self.exec(*c, |k| k.execute("SELECT queen_delete_group('gs', $1)", &[&QUEUE])) {
                    Ok(_) => {
                        self.note_delete(*c, Some(DelTarget::Scratch));
                        self.record(*c, vec![Event::Reset { group: Grp::Scratch, step: self.step, seek: false }]);
                        true
                    }
                    Err(f) => {
                        self.failed(step, f, true);
                        false
                    }
                }
            }
            Step::Maintain(c) => match self.maintain(*c) {
                Ok(()) => {
                    self.passes += 1;
                    // On Citus a pass works in the shards of the node it runs on: the workers'
                    // passes, each in a transaction of its own, as their maintenance workers run.
                    if let Some(nodes) = self.cfg.citus.clone() {
                        for n in 1..3 {
                            let mut w = connect_retrying(&nodes.node(n).conninfo(&self.db, "postgres"));
                            if let Err(e) = w.execute("SELECT queen_maintain()", &[]) {
                                // A pass may wait past lock_timeout (set for the database on the
                                // workers) or meet a conflict, as queen_maintain() on one
                                // server may: rolled back, the next pass comes back.
                                match classify(&e) {
                                    Failure::Other(detail) => {
                                        self.violation("maintenance failed", format!("worker {n}: {detail}"))
                                    }
                                    Failure::Deadlock(d) => {
                                        self.violation("deadlock", format!("worker {n}'s maintenance: {d}"))
                                    }
                                    _ => {}
                                }
                            }
                        }
                    }
                    true
                }
                Err(f) => {
                    // A pass never waits for one of queen's own locks (locks.rs: it only tries
                    // them, and leaves what a delete holds to the next pass). Rows: the worker
                    // waits 200 ms for a row a client holds and defers the unit, and
                    // queen_maintain() runs the units in the caller's transaction, under its
                    // lock_timeout (docs/operations.md) — a wait for a row is no violation.
                    let own = matches!(&f, Failure::LockWait(m) if m.starts_with("queen:"));
                    self.failed(step, f, !own);
                    false
                }
            },
            Step::DeleteSlow { c, target } => {
                self.delete_slow(*c, *target);
                true
            }
            Step::Tenant(op) => self.tenant_step(step, *op),
            Step::Ties(c) => self.ties(step, *c),
            Step::Grant { c, privilege, grant } => {
                let (privilege, grant) = (*privilege, *grant);
                let sql = if grant {
                    "SELECT queen_grant($1, $2::text::regrole, ARRAY[$3])"
                } else {
                    "SELECT queen_revoke($1, $2::text::regrole, ARRAY[$3])"
                };
                match self.exec(*c, |k| k.execute(sql, &[&QUEUE, &APP_ROLE, &privilege.as_str()])) {
                    Ok(_) => {
                        self.record(*c, vec![Event::Privileged { privilege, grant }]);
                        true
                    }
                    Err(f) => {
                        self.failed(step, f, true);
                        false
                    }
                }
            }
            Step::Sleep(ms) => {
                std::thread::sleep(Duration::from_millis(*ms as u64));
                true
            }
            Step::Terminate(c) => {
                self.land(*c);
                let pid = self.conns[*c].pid;
                if self.conns[*c].client.is_some() {
                    let before = heard();
                    let mut admin = connect_retrying(&self.server.conninfo("postgres", "postgres"));
                    admin.execute("SELECT pg_terminate_backend($1, 5000)", &[&pid]).unwrap();
                    self.conns[*c].client = None;
                    self.conns[*c].tx = None;
                    // What the terminated backend warned its client of while it died is not a
                    // call's: on Citus, its abort cannot reach the workers any more (08006,
                    // "connection to the remote node ... failed"; the workers roll back when
                    // its connections close). Every other warning stays.
                    let dying = heard();
                    HEARD.with(|h| {
                        let mut h = h.borrow_mut();
                        h.extend(before);
                        h.extend(dying.into_iter().filter(|w| !w.starts_with("08")));
                    });
                }
                true
            }
            Step::Crash => {
                self.crash();
                true
            }
            Step::Move => {
                self.move_shard();
                true
            }
            Step::Restore { ahead } => {
                self.restore(*ahead);
                true
            }
        }
    }

    /// After a fill of `partition`: `group` takes it all by name (a long finished stretch of
    /// the log for it), a message arrives in a new partition (one of the probe's own), and a
    /// consumer that rolls back its empty pops must reach it (issue 20, item 4): as many
    /// such pops as it takes to read the whole log a scan's reach at a time, each carrying on
    /// from where the last got to. Starved, if none returned anything while the message was
    /// there for the group.
    fn stretch(&mut self, c: usize, group: Grp, partition: u8) -> bool {
        let take = Step::Pop {
            c,
            group,
            batch: 100,
            partitions: 1,
            partition: Some(partition),
            auto_ack: true,
            wait_ms: 0,
            rollback_empty: false,
        };
        if !self.pop(&take) {
            return false;
        }
        // A partition of its own, which no other transaction can hold (an open one may have
        // leased any partition this run used, which the committed state does not show).
        self.probes += 1;
        let fresh = FIRST_PROBE_PARTITION.saturating_add(self.probes as u8);
        if !self.push(&take, c, &[Item { partition: fresh, key: None }], false) {
            return false;
        }
        let total: i64 =
            self.observer.query_one("SELECT count(*) FROM queen.messages", &[]).map(|r| r.get(0)).unwrap_or(0);
        let reach = if self.scan_limit > 0 { 8 * self.scan_limit as i64 } else { 12_000 };
        let pops = total / reach + 3;
        let pop = Step::Pop {
            c,
            group,
            batch: 1,
            partitions: 4,
            partition: None,
            auto_ack: true,
            wait_ms: 0,
            rollback_empty: true,
        };
        for _ in 0..pops {
            if self.pop(&pop) {
                return true;
            }
            if self.conns[c].client.is_none() {
                return false;
            }
        }
        let waiting: i64 = self
            .observer
            .query_one(
                "SELECT coalesce(sum(pending), 0)::bigint FROM queen.group_lag
                  WHERE queue = $1 AND consumer_group IS NOT DISTINCT FROM $2 AND partition = $3 AND lease_id IS NULL",
                &[&QUEUE, &group.name(), &format!("p{fresh}")],
            )
            .map(|r| r.get(0))
            .unwrap_or(0);
        if waiting > 0 {
            self.violation(
                "starved",
                format!(
                    "step {}: group {group:?}: {pops} pops that roll back when empty never reached partition p{fresh}, past a finished stretch of p{partition}",
                    self.step
                ),
            );
        }
        true
    }

    fn commit(&mut self, c: usize) -> bool {
        if self.conns[c].tx.is_none() {
            return true;
        }
        match self.exec(c, |k| k.batch_execute("COMMIT")) {
            Ok(()) => {
                let tx = self.conns[c].tx.take().unwrap();
                let begin = if tx.begin == usize::MAX { self.step } else { tx.begin };
                self.history.push(Committed { begin, commit: self.step, events: tx.events });
                true
            }
            Err(f) => {
                let step = Step::Commit(c);
                self.failed(&step, f, true);
                false
            }
        }
    }

    /// COMMIT with `queen.debug_commit_delay_ms` from another thread; go on once the commit is
    /// visible (the committing backend sleeps in the delay, or has finished).
    fn commit_slow(&mut self, c: usize) {
        self.land(c);
        if self.conns[c].tx.is_none() || self.conns[c].client.is_none() {
            return;
        }
        if self.conns[c].app || self.cfg.citus.is_some() {
            // (The application role may not set the delay: a plain commit. On Citus a commit
            // reaches the workers, where queen's rows are, only with its COMMIT PREPARED, which
            // Citus sends after queen's commit hooks on the coordinator: the window a slow
            // commit opens — visible, the caches not told yet — is not there, nor are the
            // caches; a commit is visible once it returns.)
            self.commit(c);
            return;
        }
        if let Some(tx) = &mut self.conns[c].tx {
            if tx.begin == usize::MAX {
                tx.begin = self.step;
            }
        }
        let mut client = self.conns[c].client.take().unwrap();
        let tx = self.conns[c].tx.take().unwrap();
        let pid = self.conns[c].pid;
        let handle = std::thread::spawn(move || {
            let r = client.batch_execute("SET LOCAL queen.debug_commit_delay_ms = 250; COMMIT");
            (client, r, heard())
        });
        self.await_backend(pid, "wait_event = 'PgSleep'", Duration::from_secs(5), || handle.is_finished());
        self.conns[c].slow = Some(Slow::Commit(handle, tx, self.step));
    }

    /// A delete of `target` in connection `c`'s transaction is recorded: until it ends, the
    /// writers of that group or queue may wait for it.
    fn note_delete(&mut self, c: usize, target: Option<DelTarget>) {
        if let Some(tx) = self.conns[c].tx.as_mut() {
            if let Some(target) = target {
                tx.deleting.push((target, tx.events.len()));
            }
            tx.finished_deletes += 1;
        }
    }

    /// Until backend `pid` shows `condition` (a fixed SQL condition on pg_stat_activity), or
    /// `done()`, for at most `within`: a step sent from another thread has got where it waits.
    fn await_backend(&mut self, pid: i32, condition: &str, within: Duration, done: impl Fn() -> bool) {
        let sql = format!("SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND {condition})");
        let deadline = Instant::now() + within;
        while !done() && Instant::now() < deadline {
            if self.observer.query_one(&sql, &[&pid]).map(|r| r.get::<_, bool>(0)).unwrap_or(false) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A delete of `target` sent from another thread in connection `c`'s transaction (begun
    /// here if there is none), with `queen.lock_wait_seconds` = `DELETE_WAIT_SECONDS` and a
    /// `lock_timeout` past it (row locks); go on once it waits for a lock or is done. It lands
    /// at the connection's next step (`land_delete`), and its transaction stays open until a
    /// commit.
    fn delete_slow(&mut self, c: usize, target: DelTarget) {
        self.land(c);
        if self.conns[c].tx.is_none() {
            if self.exec(c, |k| k.batch_execute("BEGIN")).is_err() {
                return;
            }
            self.conns[c].tx = Some(Tx::new(self.step));
        } else if let Some(tx) = self.conns[c].tx.as_mut() {
            if tx.begin == usize::MAX {
                tx.begin = self.step;
            }
        }
        let Some(mut client) = self.conns[c].client.take() else { return };
        let sql = match target {
            DelTarget::Scratch => format!("SELECT queen_delete_group('gs', '{QUEUE}')"),
            DelTarget::Side(q) => {
                format!("SELECT queen_delete_queue('{}'); {}", SIDE_QUEUES[q as usize], side_configure(q))
            }
            DelTarget::Timers => format!("SELECT queen_delete_queue('{TIMER_QUEUE}')"),
        };
        let pid = self.conns[c].pid;
        let handle = std::thread::spawn(move || {
            let set = format!(
                "SET queen.lock_wait_seconds = {DELETE_WAIT_SECONDS}; SET lock_timeout = '{}s'",
                DELETE_WAIT_SECONDS + 1
            );
            let mut took = Duration::ZERO;
            let r = client.batch_execute(&set).and_then(|()| {
                let t0 = Instant::now();
                let r = client.batch_execute(&sql);
                took = t0.elapsed();
                r
            });
            if r.is_err() {
                let _ = client.batch_execute("ROLLBACK");
            }
            // (In the transaction: kept if it commits, and back to these if it rolls back.)
            let _ = client.batch_execute("SET lock_timeout = '400ms'; RESET queen.lock_wait_seconds");
            (client, r, took, heard())
        });
        self.await_backend(pid, "wait_event_type = 'Lock'", Duration::from_secs(1), || handle.is_finished());
        self.conns[c].slow = Some(Slow::Delete(handle, target, self.step));
    }

    /// `queen_maintain()` on connection `c`. A pass never waits for a client (a lock wait is the
    /// step's failure, a violation), and fires every due timer it may whatever else is being
    /// deleted: each timer of queue `eo` due before it (as `c` sees them) is gone after it,
    /// unless the pass was skipped (another pass's transaction is open).
    fn maintain(&mut self, c: usize) -> Result<(), Failure> {
        let check = !self.conns[c].app && !self.conns[c].tenant;
        let due: Vec<String> = if check {
            self.exec(c, |k| {
                k.query(
                    "SELECT timer_key FROM queen.timers WHERE queue = $1 AND deliver_at <= clock_timestamp()",
                    &[&TIMER_OTHER],
                )
                .map(|rows| rows.iter().map(|r| r.get(0)).collect())
            })?
        } else {
            Vec::new()
        };
        let beside = self.conns.iter().any(|k| k.deleting(DelTarget::Timers));
        let t0 = Instant::now();
        let report: Value = self.exec(c, |k| k.query_one("SELECT queen_maintain()", &[]).map(|r| r.get(0)))?;
        let took = t0.elapsed();
        if report.get("skipped").is_some() {
            return Ok(());
        }
        if beside {
            self.passes_beside_timer_deletes += 1;
            // A wait the pass gave up on quietly (a queue left to the next pass after waiting
            // for it) shows as time: a pass takes milliseconds here, and any wait at least the
            // connection's lock_timeout.
            if took >= Duration::from_millis(400) {
                self.violation(
                    "waited on a lock",
                    format!(
                        "step {}: {c} maintain took {took:?} beside an open delete of {TIMER_QUEUE}: {report}",
                        self.step
                    ),
                );
            }
        }
        if !due.is_empty() {
            let left: Vec<String> = self.exec(c, |k| {
                k.query(
                    "SELECT timer_key FROM queen.timers WHERE queue = $1 AND timer_key = ANY($2)",
                    &[&TIMER_OTHER, &due],
                )
                .map(|rows| rows.iter().map(|r| r.get(0)).collect())
            })?;
            if !left.is_empty() {
                self.violation(
                    "timer held back",
                    format!(
                        "step {}: {c} maintain: timers {left:?} of queue {TIMER_OTHER}, due before the pass, are still pending after it: {report}",
                        self.step
                    ),
                );
            }
        }
        Ok(())
    }

    /// A step of the tenant role: never refused, never waiting (it touches nothing of the
    /// explored queue's, nor does anyone else touch its queue), never 40P01.
    fn tenant_step(&mut self, step: &Step, op: TenantOp) -> bool {
        let t = self.tenant();
        self.tenant_steps += 1;
        let r = match op {
            TenantOp::Begin => {
                if self.conns[t].tx.is_none() && self.exec(t, |k| k.batch_execute("BEGIN")).is_ok() {
                    self.conns[t].tx = Some(Tx::new(usize::MAX));
                }
                return true;
            }
            TenantOp::Commit => return self.commit(t),
            TenantOp::Rollback => {
                if self.conns[t].tx.is_some() {
                    let _ = self.exec(t, |k| k.batch_execute("ROLLBACK"));
                    self.conns[t].tx = None;
                }
                return true;
            }
            TenantOp::DeleteGroup(g) => {
                let r = self.exec(t, |k| {
                    k.query_one("SELECT queen_delete_group($1, $2)", &[&g.name(), &TENANT_QUEUE]).map(|_| ())
                });
                if r.is_ok() {
                    self.note_delete(t, None);
                }
                r
            }
            TenantOp::Pop(g) => {
                let partition = format!("p{}", self.step % 3);
                let _ =
                    self.observer.query("SELECT 1 FROM queen_push($1, '1'::jsonb, $2)", &[&TENANT_QUEUE, &partition]);
                self.exec(t, |k| {
                    k.query("SELECT message_id FROM queen_pop($1, $2, batch => 2)", &[&TENANT_QUEUE, &g.name()])
                        .map(|_| ())
                })
            }
        };
        match r {
            Ok(()) => true,
            Err(f) => {
                match f {
                    Failure::Gone | Failure::Conflict => {}
                    Failure::DeadlockAcrossDeletes(d) => {
                        self.deadlocks_across_deletes.push(format!("step {}: {step}: {d}", self.step))
                    }
                    Failure::LockWait(m) => {
                        self.violation("waited on a lock", format!("step {}: {step}: {m}", self.step))
                    }
                    Failure::Deadlock(d) => self.violation("deadlock", format!("step {}: {step}: {d}", self.step)),
                    Failure::Refused => {
                        self.violation("unexpected error", format!("step {}: {step}: refused the tenant", self.step))
                    }
                    Failure::Other(e) => self.violation("unexpected error", format!("step {}: {step}: {e}", self.step)),
                }
                false
            }
        }
    }

    /// Ties at scale (Step::Ties) on connection `c` in no transaction: 128 messages over 64
    /// partitions pushed in one transaction — one due time for all, so that the candidates
    /// pops order tie everywhere — then pops of `gw` with `partitions => 8, batch => 32`, each
    /// lease acked at once by `queen_ack_lease`, until every message came: each exactly once.
    fn ties(&mut self, step: &Step, c: usize) -> bool {
        self.land(c);
        if self.conns[c].tx.is_some() || self.conns[c].app {
            return true;
        }
        const MESSAGES: usize = 128;
        const PARTITIONS: usize = 64;
        let items: Vec<Value> = (0..MESSAGES)
            .map(|i| json!({"queue": TIES_QUEUE, "partition": format!("t{}", i % PARTITIONS), "payload": {"n": i}}))
            .collect();
        let pushed = self.exec(c, |k| {
            k.batch_execute("BEGIN")?;
            let rows = k.query("SELECT message_id FROM queen_push($1::jsonb) ORDER BY idx", &[&Value::Array(items)])?;
            k.batch_execute("COMMIT")?;
            Ok(rows.iter().map(|r| r.get::<_, Uuid>(0)).collect::<Vec<_>>())
        });
        let pushed = match pushed {
            Ok(p) => p,
            Err(f) => {
                self.failed(step, f, false);
                return false;
            }
        };
        let mut got: HashMap<Uuid, usize> = HashMap::new();
        let (mut pops, mut empty) = (0, 0);
        while pushed.iter().any(|m| !got.contains_key(m)) && pops < 64 && empty < 4 {
            pops += 1;
            let rows = self.exec(c, |k| {
                k.query(
                    "SELECT message_id, lease_id FROM queen_pop($1, $2, batch => 32, partitions => 8)",
                    &[&TIES_QUEUE, &TIES_GROUP],
                )
                .map(|rows| rows.iter().map(|r| (r.get::<_, Uuid>(0), r.get::<_, Option<Uuid>>(1))).collect::<Vec<_>>())
            });
            let rows = match rows {
                Ok(r) => r,
                Err(f) => {
                    self.failed(step, f, false);
                    return false;
                }
            };
            empty = if rows.is_empty() { empty + 1 } else { 0 };
            let mut leases: Vec<Uuid> = Vec::new();
            for (m, l) in &rows {
                *got.entry(*m).or_default() += 1;
                if let Some(l) = l.filter(|l| !leases.contains(l)) {
                    leases.push(l);
                }
            }
            for lease in leases {
                let acked = self.exec(c, |k| {
                    k.query("SELECT message_id, success FROM queen_ack_lease($1, 'completed')", &[&lease])
                        .map(|rows| rows.iter().map(|r| (r.get::<_, Uuid>(0), r.get::<_, bool>(1))).collect::<Vec<_>>())
                });
                match acked {
                    Ok(rows) => {
                        let refused: Vec<Uuid> = rows.iter().filter(|r| !r.1).map(|r| r.0).collect();
                        if !refused.is_empty() {
                            self.violation(
                                "ties",
                                format!(
                                    "step {}: {step}: queen_ack_lease of lease {lease} refused {refused:?}",
                                    self.step
                                ),
                            );
                        }
                    }
                    Err(f) => {
                        self.failed(step, f, false);
                        return false;
                    }
                }
            }
        }
        self.ties += 1;
        self.ties_delivered += pushed.iter().filter(|m| got.contains_key(m)).count();
        let twice = pushed.iter().filter(|m| got.get(m).is_some_and(|n| *n > 1)).count();
        let missing = pushed.iter().filter(|m| !got.contains_key(m)).count();
        if twice > 0 || missing > 0 {
            self.violation(
                "ties",
                format!(
                    "step {}: {step}: of {MESSAGES} messages pushed over {PARTITIONS} partitions in one transaction, {pops} pops delivered {twice} twice and left {missing} undelivered",
                    self.step
                ),
            );
        }
        true
    }

    fn push(&mut self, step: &Step, c: usize, items: &[Item], batch: bool) -> bool {
        let ids: Vec<u64> = items
            .iter()
            .map(|_| {
                self.pushes += 1;
                self.pushes
            })
            .collect();
        let keyed = items.iter().any(|i| i.key.is_some());
        let rows = self.exec(c, |k| {
            if batch {
                let arr: Vec<Value> = items
                    .iter()
                    .zip(&ids)
                    .map(|(i, id)| {
                        let mut o =
                            json!({"queue": QUEUE, "partition": format!("p{}", i.partition), "payload": {"id": id}});
                        if let Some(key) = i.key {
                            o["transactionId"] = json!(format!("k{key}"));
                        }
                        o
                    })
                    .collect();
                k.query("SELECT message_id, status FROM queen_push($1::jsonb) ORDER BY idx", &[&Value::Array(arr)])
            } else {
                let i = &items[0];
                let key = i.key.map(|k| format!("k{k}"));
                k.query(
                    "SELECT message_id, status FROM queen_push($1, $2::jsonb, $3, $4)",
                    &[&QUEUE, &json!({"id": ids[0]}), &format!("p{}", i.partition), &key],
                )
            }
        });
        let app = self.conns[c].app;
        match rows {
            Ok(rows) => {
                if app {
                    self.app_calls.push(AppCall { step: self.step, privilege: Privilege::Push, allowed: true });
                }
                let events = rows
                    .iter()
                    .zip(items)
                    .zip(&ids)
                    .map(|((r, i), id)| Event::Pushed {
                        msg: r.get(0),
                        partition: i.partition,
                        queued: r.get::<_, String>(1) == "queued",
                        order: *id,
                    })
                    .collect();
                self.record(c, events);
                true
            }
            Err(f) => {
                if matches!(f, Failure::Refused) && app {
                    self.app_calls.push(AppCall { step: self.step, privilege: Privilege::Push, allowed: false });
                }
                self.failed(step, f, keyed);
                false
            }
        }
    }

    /// A step on a side queue. Any of them may wait for a delete of the queue or group that
    /// another transaction holds open (and a delete for them): a wait is rolled back.
    /// A key/value operation: recorded when it applied. A write waits for a transaction that
    /// holds the key (row lock): such a wait is no violation.
    fn kv(&mut self, step: &Step, c: usize, op: KvOp) -> bool {
        match op {
            KvOp::Schedule { .. } | KvOp::Cancel(_) | KvOp::ScheduleOther => return self.timer(step, c, op),
            KvOp::Acquire | KvOp::Unlock => return self.lock(step, c, op),
            _ => {}
        }
        let one = match op {
            KvOp::Incr(n) => json!({"op": "incr", "ns": KV_NAMESPACE, "key": format!("c{n}"), "forever": true}),
            KvOp::Claim(n) => {
                json!({"op": "putIfAbsent", "ns": KV_NAMESPACE, "key": format!("k{n}"), "value": c, "forever": true})
            }
            KvOp::Release(n) => json!({"op": "delete", "ns": KV_NAMESPACE, "key": format!("k{n}")}),
            _ => unreachable!("timer and lock steps are run apart"),
        };
        let r = self.exec(c, |k| {
            k.query_one("SELECT r FROM queen_kv($1) AS r", &[&Value::Array(vec![one])]).map(|r| r.get::<_, Value>(0))
        });
        match r {
            Ok(r) => {
                if r["applied"] == json!(true) {
                    let event = match op {
                        KvOp::Incr(key) => Event::KvIncr { key, value: r["value"].as_i64().unwrap_or(-1) },
                        KvOp::Claim(key) => Event::KvClaimed { key },
                        KvOp::Release(key) => Event::KvReleased { key },
                        _ => unreachable!("timer and lock steps are run apart"),
                    };
                    self.record(c, vec![event]);
                }
                true
            }
            Err(f) => {
                self.failed(step, f, true);
                false
            }
        }
    }

    /// A timer step: recorded when it committed as answered. A schedule or cancel waits for a
    /// transaction that holds the timer (a reschedule, a cancel, a firing maintenance pass).
    fn timer(&mut self, step: &Step, c: usize, op: KvOp) -> bool {
        let txn = format!("x{}", self.step);
        let r = self.exec(c, |k| match op {
            KvOp::Schedule { key, now } => k
                .query_one(
                    "SELECT status FROM queen_schedule($1, $2, '1'::jsonb,
                            clock_timestamp() + CASE WHEN $4 THEN interval '0' ELSE interval '1 hour' END,
                            transaction_id => $3)",
                    &[&TIMER_QUEUE, &format!("t{key}"), &txn, &now],
                )
                .map(|r| Some(r.get::<_, String>(0) == "rescheduled")),
            KvOp::Cancel(key) => k
                .query_one("SELECT queen_cancel_timer($1, $2)", &[&TIMER_QUEUE, &format!("t{key}")])
                .map(|r| r.get::<_, bool>(0).then_some(true)),
            KvOp::ScheduleOther => k
                .query_one(
                    "SELECT status FROM queen_schedule($1, $2, '1'::jsonb, clock_timestamp(), transaction_id => $2)",
                    &[&TIMER_OTHER, &format!("o{}", txn)],
                )
                .map(|_| None),
            _ => unreachable!(),
        });
        match r {
            Ok(answer) => {
                match (op, answer) {
                    (KvOp::Schedule { key, .. }, Some(replaced)) => {
                        self.record(c, vec![Event::TimerScheduled { key, txn, replaced }])
                    }
                    (KvOp::Cancel(key), Some(_)) => self.record(c, vec![Event::TimerCancelled { key }]),
                    _ => {}
                }
                true
            }
            Err(f) => {
                self.failed(step, f, true);
                false
            }
        }
    }

    /// A lock step: acquire a permit of `el`, or give back the oldest permit any connection
    /// took (by its token; a permit whose acquire rolled back is answered lost). Recorded when
    /// it applied.
    fn lock(&mut self, step: &Step, c: usize, op: KvOp) -> bool {
        let call = match op {
            KvOp::Acquire => json!({"op": "acquire", "name": LOCK_NAME, "ttlSeconds": 3600, "limit": LOCK_LIMIT}),
            _ => match self.permits.first() {
                Some(&(slot, token)) => json!({"op": "release", "name": LOCK_NAME, "token": token, "slot": slot}),
                None => return true,
            },
        };
        let r = self.exec(c, |k| {
            k.query_one("SELECT r FROM queen_lock($1) AS r", &[&Value::Array(vec![call.clone()])])
                .map(|r| r.get::<_, Value>(0))
        });
        match r {
            Ok(r) => {
                let (slot, token) = (r["slot"].as_i64().unwrap_or(-1), r["token"].as_i64().unwrap_or(-1));
                if r["acquired"] == json!(true) {
                    self.permits.push((slot, token));
                    self.record(c, vec![Event::LockAcquired { slot, token }]);
                } else if op == KvOp::Unlock {
                    let (slot, token) = self.permits.remove(0);
                    if r["released"] == json!(true) {
                        self.record(c, vec![Event::LockReleased { slot, token }]);
                    }
                }
                true
            }
            Err(f) => {
                // An acquire never waits (a permit being written is contended); a release may,
                // for a transaction that writes or guards the permit.
                self.failed(step, f, op != KvOp::Acquire);
                false
            }
        }
    }

    fn side(&mut self, step: &Step, c: usize, q: u8, op: &SideOp) -> bool {
        let queue = SIDE_QUEUES[q as usize];
        let group_name = |g: u8| format!("r{g}");
        match op {
            SideOp::Push(p) => {
                let r = self.exec(c, |k| {
                    k.query_one("SELECT message_id FROM queen_push($1, '1'::jsonb, $2)", &[&queue, &format!("p{p}")])
                });
                match r {
                    Ok(row) => {
                        self.record(c, vec![Event::SidePushed { q, msg: row.get(0) }]);
                        true
                    }
                    Err(f) => {
                        self.failed(step, f, true);
                        false
                    }
                }
            }
            SideOp::Pop { group, auto } => {
                let g = group_name(*group);
                let r = self.exec(c, |k| {
                    k.query(
                        "SELECT message_id, lease_id, coalesce(extract(epoch FROM lease_expires_at)::float8, 0)
                           FROM queen_pop($1, $2, batch => CASE WHEN $3 THEN 10 ELSE 2 END,
                                         partitions => CASE WHEN $3 THEN 2 ELSE 1 END, auto_ack => $3)",
                        &[&queue, &g, auto],
                    )
                });
                match r {
                    Ok(rows) => {
                        let mut events = Vec::new();
                        for row in &rows {
                            let (msg, lease): (Uuid, Option<Uuid>) = (row.get(0), row.get(1));
                            events.push(Event::SideDelivered { q, group: *group, msg, lease });
                            if let Some(lease) = lease {
                                let expires = row.get(2);
                                self.side_deliveries.push(SideDelivery {
                                    q,
                                    group: *group,
                                    msg,
                                    lease,
                                    expires,
                                    step: self.step,
                                });
                            }
                        }
                        self.record(c, events);
                        true
                    }
                    Err(f) => {
                        self.failed(step, f, true);
                        false
                    }
                }
            }
            SideOp::Ack { pick, dlq } => {
                let n = self.side_deliveries.len();
                if n == 0 {
                    return true;
                }
                let d = self.side_deliveries[n - 1 - (*pick as usize % n)].clone();
                let status = if *dlq { "dlq" } else { "completed" };
                let r = self.exec(c, |k| {
                    k.query_one(
                        "SELECT success, error, extract(epoch FROM clock_timestamp())::float8, lease_released
                           FROM queen_ack($1, $2, $3)",
                        &[&d.msg, &d.lease, &status],
                    )
                });
                match r {
                    Ok(row) => {
                        let (success, error, now, released): (bool, Option<String>, f64, bool) =
                            (row.get(0), row.get(1), row.get(2), row.get(3));
                        let gone = error.as_deref() == Some("message not found");
                        // (A delete of the queue or group in this transaction, not committed
                        // yet, took it: the check counts committed deletes only.)
                        let own_delete = self.conns[c].tx.as_ref().is_some_and(|t| {
                            t.events.iter().any(|e| {
                                matches!(e, Event::SideDeleted { q, group }
                                    if *q == d.q && group.is_none_or(|g| g == d.group))
                            })
                        });
                        if gone && !own_delete && d.expires > now + 1.0 {
                            self.side_gone.push(SideGone {
                                step: self.step,
                                q: d.q,
                                group: d.group,
                                msg: d.msg,
                                lease: d.lease,
                                delivered: d.step,
                            });
                        }
                        if success || gone {
                            self.side_deliveries.retain(|x| !(x.msg == d.msg && x.lease == d.lease));
                            self.record(
                                c,
                                vec![Event::SideAcked {
                                    q: d.q,
                                    group: d.group,
                                    msg: d.msg,
                                    lease: d.lease,
                                    dlq: *dlq,
                                    released,
                                    gone,
                                    ran: self.step,
                                }],
                            );
                        }
                        true
                    }
                    Err(f) => {
                        self.failed(step, f, true);
                        false
                    }
                }
            }
            SideOp::DeleteQueue => {
                let configure = side_configure(q);
                let r = self.exec(c, |k| {
                    k.query_one("SELECT queen_delete_queue($1)", &[&queue])?;
                    k.batch_execute(&configure)
                });
                match r {
                    Ok(()) => {
                        self.note_delete(c, Some(DelTarget::Side(q)));
                        self.record(c, vec![Event::SideDeleted { q, group: None }]);
                        true
                    }
                    Err(f) => {
                        self.failed(step, f, true);
                        false
                    }
                }
            }
            SideOp::FirstPop(g) => {
                if self.conns[c].tx.is_some() {
                    return true;
                }
                if !self.side(step, c, q, &SideOp::DeleteGroup(*g)) {
                    return false;
                }
                // The delete committed: the step changed what is committed whatever its pop
                // does (a pop that fails rolls back its own transaction, checked as any pop's).
                if self.exec(c, |k| k.batch_execute("BEGIN")).is_ok() {
                    self.conns[c].tx = Some(Tx::new(usize::MAX));
                    self.first_pop = Some(c);
                    self.side(step, c, q, &SideOp::Pop { group: *g, auto: false });
                }
                true
            }
            SideOp::DeleteGroup(g) => {
                let name = group_name(*g);
                match self.exec(c, |k| k.query_one("SELECT queen_delete_group($1, $2)", &[&name, &queue])) {
                    Ok(_) => {
                        self.note_delete(c, None);
                        self.record(c, vec![Event::SideDeleted { q, group: Some(*g) }]);
                        true
                    }
                    Err(f) => {
                        self.failed(step, f, true);
                        false
                    }
                }
            }
        }
    }

    fn pop(&mut self, step: &Step) -> bool {
        let &Step::Pop { c, group, batch, partitions, partition, auto_ack, wait_ms, rollback_empty } = step else {
            unreachable!()
        };
        let (mode, from) = group.subscription();
        let pname = partition.map(|p| format!("p{p}"));
        // A consumer that rolls back its empty pops: the pop in a transaction of its own.
        let own_tx = rollback_empty && self.conns[c].tx.is_none();
        if own_tx {
            if self.exec(c, |k| k.batch_execute("BEGIN")).is_err() {
                return false;
            }
            self.conns[c].tx = Some(Tx::new(self.step));
        }
        let rows = self.exec(c, |k| {
            k.query(
                "SELECT m.message_id, m.partition_id, m.lease_id,
                        extract(epoch FROM m.lease_expires_at)::float8, extract(epoch FROM clock_timestamp())::float8,
                        m.transaction_id
                   FROM queen_pop($1, $2, batch => $3, partition => $4, partitions => $5, wait_ms => $6,
                                  auto_ack => $7, subscription_mode => $8,
                                  subscription_from => $9::text::timestamptz) m",
                &[&QUEUE, &group.name(), &batch, &pname, &partitions, &wait_ms, &auto_ack, &mode, &from],
            )
        });
        let app = self.conns[c].app;
        match rows {
            Ok(rows) => {
                if app {
                    self.app_calls.push(AppCall { step: self.step, privilege: Privilege::Pop, allowed: true });
                }
                let mut events = vec![Event::Popped { group, step: self.step }];
                let base = self.delivered_in_step;
                self.delivered_in_step += rows.len();
                for (pos, r) in rows.iter().enumerate() {
                    let d = Delivered {
                        group,
                        msg: r.get(0),
                        partition: r.get(1),
                        lease: r.get(2),
                        expires: r.get(3),
                        at: r.get(4),
                        step: self.step,
                        pos: base + pos,
                    };
                    if let Some(l) = d.lease {
                        self.lease_groups.insert(l, group);
                    }
                    self.conns[c].deliveries.push(Delivery {
                        group,
                        msg: d.msg,
                        lease: d.lease,
                        partition: d.partition,
                        key: r.get(5),
                    });
                    events.push(Event::Delivered(d));
                }
                let empty = rows.is_empty();
                self.record(c, events);
                if own_tx {
                    if empty {
                        let _ = self.exec(c, |k| k.batch_execute("ROLLBACK"));
                        self.conns[c].tx = None;
                        return false;
                    }
                    return self.commit(c);
                }
                true
            }
            Err(f) => {
                if matches!(f, Failure::Refused) && app {
                    self.app_calls.push(AppCall { step: self.step, privilege: Privilege::Pop, allowed: false });
                }
                // A pop never waits, but for a delete of its group (or queue) that another
                // transaction holds open (issue 21: nothing the pop writes may outlive it) —
                // on this queue: a tenant's delete of the same name on its own queue holds
                // back no one here.
                let may_wait = group == Grp::Scratch && self.deleting_elsewhere(c, DelTarget::Scratch);
                self.failed(step, f, may_wait);
                false
            }
        }
    }

    /// The delivery `pick` positions back from connection `c`'s latest.
    fn picked(&self, c: usize, pick: u32) -> Option<Delivery> {
        let ds = &self.conns[c].deliveries;
        ds.len().checked_sub(1 + pick as usize).map(|i| ds[i].clone())
    }

    fn ack(&mut self, step: &Step) -> bool {
        let Step::Ack { c, pick, status, lease: kind, batch, group_arg, effect, by_transaction } = step else {
            unreachable!()
        };
        let by_transaction = *by_transaction;
        let (c, status, kind, batch, group_arg, effect) = (*c, *status, *kind, *batch, *group_arg, *effect);
        let mut entries: Vec<(Delivery, Option<Uuid>, Option<&'static str>)> = Vec::new();
        for &p in pick {
            let Some(d) = self.picked(c, p) else { continue };
            if entries.iter().any(|(e, _, _)| e.msg == d.msg && e.group == d.group) {
                continue;
            }
            let all = &self.conns[c].deliveries;
            let lease = match kind {
                LeaseKind::Good => d.lease,
                LeaseKind::Stale => all
                    .iter()
                    .find(|x| x.group == d.group && x.lease.is_some() && x.lease != d.lease)
                    .and_then(|x| x.lease),
                LeaseKind::Foreign => {
                    all.iter().find(|x| x.group != d.group && x.lease.is_some()).and_then(|x| x.lease)
                }
                LeaseKind::Missing => None,
            };
            // Without a lease the ack is for the group named (queue mode if none).
            let group = if group_arg || lease.is_none() { d.group.name() } else { None };
            entries.push((d, lease, group));
        }
        if entries.is_empty() {
            return true;
        }
        // What this transaction sees of queen's tables before the ack: a refused ack must leave
        // it as it is (nothing else runs between the two reads). The application role cannot
        // read the tables: its refused acks are checked outside transactions only (run_step).
        let app = self.conns[c].app;
        let before = if app {
            None
        } else {
            match self.exec(c, |k| k.query_one(FINGERPRINT, &[]).map(|r| r.get::<_, String>(0))) {
                Ok(n) => Some(n),
                Err(f) => {
                    self.failed(step, f, true);
                    return false;
                }
            }
        };
        let rows = if batch {
            let arr: Vec<Value> = entries
                .iter()
                .map(|(d, lease, group)| {
                    let mut e = json!({"leaseId": lease.map(|l| l.to_string()), "consumerGroup": group,
                                       "_status": status.as_str(), "_error": "explorer"});
                    if by_transaction {
                        e["transactionId"] = json!(d.key);
                        e["partitionId"] = json!(d.partition.to_string());
                    } else {
                        e["messageId"] = json!(d.msg.to_string());
                    }
                    e
                })
                .collect();
            self.exec(c, |k| {
                k.query(
                    "SELECT success, lease_released, error = 'message not found' FROM queen_ack($1::jsonb) ORDER BY idx",
                    &[&Value::Array(arr)],
                )
            })
            .map(|rows| rows.iter().map(|r| (r.get::<_, bool>(0), r.get::<_, bool>(1), r.get::<_, Option<bool>>(2) == Some(true))).collect::<Vec<_>>())
        } else {
            let (d, lease, group) = entries[0].clone();
            entries.truncate(1);
            self.exec(c, |k| {
                k.query(
                    "SELECT success, lease_released, error = 'message not found' FROM queen_ack($1, $2, $3, 'explorer', $4)",
                    &[&d.msg, &lease, &status.as_str(), &group],
                )
            })
            .map(|rows| rows.iter().map(|r| (r.get::<_, bool>(0), r.get::<_, bool>(1), r.get::<_, Option<bool>>(2) == Some(true))).collect::<Vec<_>>())
        };
        let results = match rows {
            Ok(r) => {
                // An ack answered 'message not found' throughout is what a role with no
                // privilege on the queue hears (issue 21, item 3): neither let through nor
                // refused, so not counted either way.
                if app && !r.iter().all(|(_, _, unknown)| *unknown) {
                    self.app_calls.push(AppCall { step: self.step, privilege: Privilege::Pop, allowed: true });
                }
                r.into_iter().map(|(success, released, _)| (success, released)).collect::<Vec<_>>()
            }
            Err(f) => {
                if matches!(f, Failure::Refused) && app {
                    self.app_calls.push(AppCall { step: self.step, privilege: Privilege::Pop, allowed: false });
                }
                self.failed(step, f, true);
                return false;
            }
        };
        let refused = results.iter().all(|(success, _)| !success);
        if refused {
            if let Some(before) = before {
                match self.exec(c, |k| k.query_one(FINGERPRINT, &[]).map(|r| r.get::<_, String>(0))) {
                    Ok(after) if after != before => self.violation(
                        "trace of a refused call",
                        format!("step {}: {step}: refused, it changed queen's tables", self.step),
                    ),
                    Ok(_) => {}
                    Err(f) => {
                        self.failed(step, f, true);
                        return false;
                    }
                }
            }
        }
        let mut events = Vec::new();
        let mut applied = Vec::new();
        for ((d, lease, group), (success, released)) in entries.iter().zip(results) {
            // The group the ack applied to: the lease's, if it named one, else the one named.
            let g = match lease {
                Some(l) => self.lease_groups.get(l).copied().unwrap_or(d.group),
                None => Grp::ALL.into_iter().find(|g| g.name() == *group).unwrap_or(Grp::QueueMode),
            };
            let released_lease = if released {
                match lease {
                    Some(l) => Some(*l),
                    // An ack without a lease released whatever lease held the partition: the
                    // latest this run saw there for the group.
                    None => self.latest_lease(g, d.partition),
                }
            } else {
                None
            };
            events.push(Event::Acked {
                group: g,
                msg: d.msg,
                status,
                success,
                released: released_lease,
                step: self.step,
                partition: d.partition,
            });
            if success && status == Status::Completed && effect {
                applied.push((g, d.msg));
            }
        }
        self.record(c, events);
        self.apply_effects(step, c, applied) && !refused
    }

    /// The business writes of completions (`applied`), in the ack's transaction: false when
    /// one failed (recorded as the step's failure).
    fn apply_effects(&mut self, step: &Step, c: usize, applied: Vec<(Grp, Uuid)>) -> bool {
        for (g, msg) in applied {
            let name = g.name().unwrap_or("__QUEUE_MODE__");
            match self.exec(c, |k| k.execute("INSERT INTO applied (grp, msg) VALUES ($1, $2)", &[&name, &msg])) {
                Ok(_) => self.record(c, vec![Event::Applied { group: g, msg }]),
                Err(f) => {
                    self.failed(step, f, false);
                    return false;
                }
            }
        }
        true
    }

    /// `queen_ack_lease` of the lease of a delivery this connection received: each row is an
    /// ack of its message under that lease (what the checker judges as any other), a refusal
    /// throughout leaves queen's tables as they were, and the rows come in the order the
    /// messages were delivered.
    fn ack_lease(&mut self, step: &Step) -> bool {
        let Step::AckLease { c, pick, status, effect } = step else { unreachable!() };
        let (c, status, effect) = (*c, *status, *effect);
        let Some(lease) = self.picked(c, *pick).and_then(|d| d.lease) else { return true };
        let app = self.conns[c].app;
        let fingerprint = |me: &mut Self| me.exec(c, |k| k.query_one(FINGERPRINT, &[]).map(|r| r.get::<_, String>(0)));
        let before = if app {
            None
        } else {
            match fingerprint(self) {
                Ok(n) => Some(n),
                Err(f) => {
                    self.failed(step, f, true);
                    return false;
                }
            }
        };
        let rows = self.exec(c, |k| {
            k.query(
                "SELECT message_id, success, lease_released FROM queen_ack_lease($1, $2, 'explorer') ORDER BY idx",
                &[&lease, &status.as_str()],
            )
            .map(|rows| {
                rows.iter().map(|r| (r.get::<_, Uuid>(0), r.get::<_, bool>(1), r.get::<_, bool>(2))).collect::<Vec<_>>()
            })
        });
        let rows = match rows {
            Ok(r) => {
                // A role with no privilege on the queue hears of no lease (no rows).
                if app && !r.is_empty() {
                    self.app_calls.push(AppCall { step: self.step, privilege: Privilege::Pop, allowed: true });
                }
                r
            }
            Err(f) => {
                if matches!(f, Failure::Refused) && app {
                    self.app_calls.push(AppCall { step: self.step, privilege: Privilege::Pop, allowed: false });
                }
                self.failed(step, f, true);
                return false;
            }
        };
        let refused = rows.iter().all(|(_, success, _)| !success);
        if !rows.is_empty() {
            self.lease_acks += 1;
            self.lease_acked += rows.iter().filter(|(_, success, _)| *success).count();
        }
        if let (true, Some(before)) = (refused, before) {
            match fingerprint(self) {
                Ok(after) if after != before => self.violation(
                    "trace of a refused call",
                    format!("step {}: {step}: refused, it changed queen's tables", self.step),
                ),
                Ok(_) => {}
                Err(f) => {
                    self.failed(step, f, true);
                    return false;
                }
            }
        }
        // The lease's deliveries, in the order they were delivered: as the pops recorded them
        // (committed, or in this connection's open transaction), not as connections remember
        // them — a connection that was terminated and opened again forgot its deliveries.
        let mut delivered: Vec<Delivered> = self
            .history
            .iter()
            .flat_map(|t| t.events.iter())
            .chain(self.conns[c].tx.iter().flat_map(|t| t.events.iter()))
            .filter_map(|e| match e {
                Event::Delivered(d) if d.lease == Some(lease) => Some(d.clone()),
                _ => None,
            })
            .collect();
        delivered.sort_by_key(|d| (d.step, d.pos));
        let mut events = Vec::new();
        let mut applied = Vec::new();
        let mut last_pos: HashMap<Uuid, usize> = HashMap::new();
        for (msg, success, released) in rows {
            let Some(pos) = delivered.iter().position(|d| d.msg == msg) else {
                self.violation(
                    "ack_lease beyond its lease",
                    format!("step {}: {step}: answered for {msg}, which the lease never delivered", self.step),
                );
                continue;
            };
            let d = &delivered[pos];
            // Within a partition the rows follow the delivery order.
            if last_pos.insert(d.partition, pos).is_some_and(|p| p > pos) {
                self.violation(
                    "ack_lease out of order",
                    format!("step {}: {step}: {msg} answered after a message delivered later", self.step),
                );
            }
            let g = self.lease_groups.get(&lease).copied().unwrap_or(d.group);
            events.push(Event::Acked {
                group: g,
                msg,
                status,
                success,
                released: released.then_some(lease),
                step: self.step,
                partition: d.partition,
            });
            if success && status == Status::Completed && effect {
                applied.push((g, msg));
            }
        }
        self.record(c, events);
        self.apply_effects(step, c, applied) && !refused
    }

    /// The latest lease any connection saw on (group, partition).
    fn latest_lease(&self, g: Grp, partition: Uuid) -> Option<Uuid> {
        self.history
            .iter()
            .flat_map(|t| t.events.iter())
            .chain(self.conns.iter().filter_map(|c| c.tx.as_ref()).flat_map(|t| t.events.iter()))
            .filter_map(|e| match e {
                Event::Delivered(d) if d.group == g && d.partition == partition && d.lease.is_some() => {
                    Some((d.step, d.lease))
                }
                _ => None,
            })
            .max_by_key(|(s, _)| *s)
            .and_then(|(_, l)| l)
    }

    fn renew(&mut self, step: &Step, c: usize, pick: u32) -> bool {
        let Some(lease) = self.picked(c, pick).and_then(|d| d.lease) else { return true };
        let app = self.conns[c].app;
        match self.exec(c, |k| {
            k.query_one("SELECT extract(epoch FROM queen_renew($1, 2))::float8", &[&lease])
                .map(|r| r.get::<_, Option<f64>>(0))
        }) {
            Ok(Some(expires)) => {
                self.record(c, vec![Event::Renewed { lease, expires }]);
                true
            }
            Ok(None) => true,
            Err(f) => {
                if matches!(f, Failure::Refused) && app {
                    self.app_calls.push(AppCall { step: self.step, privilege: Privilege::Pop, allowed: false });
                }
                self.failed(step, f, true);
                false
            }
        }
    }

    /// Replay or purge dead letters of `group` (dead_letters.rs). A replay ends the group's
    /// leases where it replays (recorded as a reset of the group: the lease check then allows
    /// the next pop there); a purge by id is recorded with its message, which stays finished.
    fn dead_letters(&mut self, step: &Step, c: usize, group: Grp, op: DeadOp) -> bool {
        // The group of the newest committed dead letter, when there is one (else the step's):
        // dead letters are few, and a step on a group without any would test nothing.
        let newest: Option<String> = self
            .observer
            .query_opt(
                "SELECT consumer_group FROM queen.dead_letters
                  WHERE queue_id IN (SELECT queue_id FROM queen.queues WHERE name = $1)
                  ORDER BY failed_at DESC LIMIT 1",
                &[&QUEUE],
            )
            .ok()
            .flatten()
            .map(|r| r.get(0));
        let group = newest
            .and_then(|n| Grp::ALL.into_iter().find(|g| g.name().unwrap_or("__QUEUE_MODE__") == n))
            .unwrap_or(group);
        let g = group.name();
        // The oldest dead letter of the group, picked by the call's own statement.
        const OLDEST: &str = "(SELECT message_id FROM queen.dead_letters_view
                                WHERE queue = $1 AND consumer_group IS NOT DISTINCT FROM $2
                                ORDER BY failed_at, message_id LIMIT 1)";
        let r = self.exec(c, |k| match op {
            DeadOp::Replay => k
                .query_one("SELECT queen_replay_dead_letters($1, $2), NULL::uuid", &[&QUEUE, &g])
                .map(|r| (r.get::<_, i32>(0), r.get::<_, Option<Uuid>>(1))),
            DeadOp::ReplayOne | DeadOp::PurgeOne => {
                let f = if op == DeadOp::ReplayOne { "queen_replay_dead_letters" } else { "queen_purge_dead_letters" };
                k.query_opt(
                    &format!("SELECT {f}($1, $2, x.m), x.m FROM (SELECT {OLDEST} AS m) x WHERE x.m IS NOT NULL"),
                    &[&QUEUE, &g],
                )
                .map(|r| r.map_or((0, None), |r| (r.get::<_, i32>(0), r.get::<_, Option<Uuid>>(1))))
            }
        });
        match r {
            Ok((0, _)) => true,
            Ok((n, msg)) => {
                if op == DeadOp::PurgeOne {
                    self.purged += n as usize;
                } else {
                    self.replayed += n as usize;
                }
                let event = match (op, msg) {
                    (DeadOp::PurgeOne, Some(msg)) => Event::Purged { group, msg },
                    _ => Event::Reset { group, step: self.step, seek: false },
                };
                self.record(c, vec![event]);
                true
            }
            Err(f) => {
                self.failed(step, f, true);
                false
            }
        }
    }

    /// kill -9 of the postmaster, restart, reconnect: open transactions never happened. (On
    /// Citus: a worker.)
    fn crash(&mut self) {
        if let Some(nodes) = self.cfg.citus.clone() {
            return self.crash_worker(&nodes);
        }
        let Some(cc) = &self.cfg.crash else { return };
        if self.server != self.cfg.server {
            return; // the run moved to the other cluster, which is not the explorer's to kill
        }
        for c in 0..self.conns.len() {
            self.land(c);
        }
        let pidfile = format!("{}/data/postmaster.pid", cc.dir);
        let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().lines().next().unwrap().trim().parse().unwrap();
        for c in &mut self.conns {
            c.client = None;
            c.tx = None;
        }
        let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::path::Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let out =
            std::process::Command::new(cc.scripts.join("cluster")).args(["start", &cc.dir, "0"]).output().unwrap();
        assert!(out.status.success(), "restart after crash: {}", String::from_utf8_lossy(&out.stderr));
        self.observer = connect_retrying(&self.server.conninfo(&self.db, "postgres"));
        for i in 0..self.conns.len() {
            self.conns[i] = self.open(i);
        }
        self.crashes += 1;
    }

    /// Close every connection (open transactions never happened), then `f`, then open them
    /// again.
    fn between_connections(&mut self, f: impl FnOnce(&mut Self)) {
        for c in 0..self.conns.len() {
            self.land(c);
        }
        for c in &mut self.conns {
            c.client = None;
            c.tx = None;
        }
        // The coordinator's backends end their transactions (aborted) as their clients go.
        let deadline = Instant::now() + Duration::from_secs(20);
        let pids: Vec<i32> = self.conns.iter().map(|c| c.pid).collect();
        while Instant::now() < deadline {
            let left: i64 = self
                .observer
                .query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)", &[&pids])
                .map(|r| r.get(0))
                .unwrap_or(0);
            if left == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        f(self);
        self.observer = connect_retrying(&self.server.conninfo(&self.db, "postgres"));
        for i in 0..self.conns.len() {
            self.conns[i] = self.open(i);
        }
    }

    /// A Citus worker stopped at once and started again (in turn the first and the second),
    /// then Citus's recovery of the prepared transactions it held.
    fn crash_worker(&mut self, nodes: &CitusNodes) {
        let worker = 1 + (self.crashes % 2) as u16;
        self.between_connections(|run| {
            nodes.script(&["kill", &worker.to_string()]);
            nodes.script(&["restart", &worker.to_string()]);
            let mut c = connect_retrying(&run.server.conninfo(&run.db, "postgres"));
            let deadline = Instant::now() + Duration::from_secs(30);
            // (The coordinator may still hold a connection to the worker that went: the first
            // tries fail.)
            while c.query_one("SELECT recover_prepared_transactions()", &[]).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        self.crashes += 1;
    }

    /// A shard of queen's tables moved to the other worker, after the worker it leaves ran
    /// ahead by 300 transactions: each shard in turn, away and then back (a node a shard comes
    /// back to has seen it before, and its counter is behind), by logical replication and by
    /// blocking writes in turn.
    fn move_shard(&mut self) {
        let Some(nodes) = self.cfg.citus.clone() else { return };
        let moves = self.moves;
        self.between_connections(|run| {
            let mut c = connect_retrying(&run.server.conninfo(&run.db, "postgres"));
            let r = c
                .query_one(
                    "SELECT pl.shardid, pl.nodeport FROM queen.shard_keys k
                       JOIN pg_dist_shard_placement pl
                         ON pl.shardid = get_shard_id_for_distribution_column('queen.messages', k.shard)
                      WHERE k.idx = $1",
                    &[&(((moves / 2) % 4) as i32)],
                )
                .unwrap();
            let (shard, from): (i64, i32) = (r.get(0), r.get(1));
            let to = if from == i32::from(nodes.base) + 1 { from + 1 } else { from - 1 };
            let mut source =
                connect_retrying(&nodes.node((from - i32::from(nodes.base)) as u16).conninfo(&run.db, "postgres"));
            for _ in 0..300 {
                source.simple_query("SELECT txid_current()").unwrap();
            }
            let mode = if (moves + moves / 2) % 2 == 0 { "force_logical" } else { "block_writes" };
            c.query_one(
                "SELECT citus_move_shard_placement($1, '127.0.0.1', $2, '127.0.0.1', $3,
                                                   shard_transfer_mode => $4::text::citus.shard_transfer_mode)",
                &[&shard, &from, &to, &mode],
            )
            .unwrap_or_else(|e| panic!("explorer: moving shard {shard} ({mode}): {e:?}"));
        });
        self.moves += 1;
    }

    /// Move the run to a database of the other cluster: dump what is committed here, create
    /// the database there, open the run's connections there (each calls queen, as long-lived
    /// connections have, before the data arrives), restore the data under them, and go on
    /// there. Its transaction counter is made to run behind this one's (`ahead`: ahead of it).
    fn restore(&mut self, ahead: bool) {
        let Some(other) = self.cfg.other.clone() else { return };
        let to = if self.server == other { self.cfg.server.clone() } else { other };
        for c in 0..self.conns.len() {
            self.land(c);
        }
        for c in &mut self.conns {
            c.client = None;
            c.tx = None;
        }
        let from = self.server.clone();
        if ahead {
            to.run_ahead_of(&from);
        } else {
            from.run_ahead_of(&to);
        }
        let file = std::env::temp_dir().join(format!("{}-{}.dump", self.db, self.restores));
        let file = file.to_string_lossy().into_owned();
        from.tool("pg_dump", &["-Fc", "-d", &self.db, "-f", &file]);
        Self::create_db(&to, &self.db);
        self.server = to.clone();
        for i in 0..self.conns.len() {
            self.conns[i] = self.open(i);
            // Each takes the mapping of the empty database (a refusal of the application role,
            // which has no grant there yet, takes it too).
            let client = self.conns[i].client.as_mut().unwrap();
            let _ = client.query("SELECT * FROM queen_pop('eq_before_restore', 'x')", &[]);
        }
        to.tool("pg_restore", &["-d", &self.db, "--data-only", "--exit-on-error", &file]);
        let _ = std::fs::remove_file(&file);
        self.observer = connect_retrying(&to.conninfo(&self.db, "postgres"));
        let mut admin = connect_retrying(&from.conninfo("postgres", "postgres"));
        let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.db));
        self.restores += 1;
    }

    /// Commit every open transaction, drain every checked group, and check the history.
    pub fn finish(mut self) -> (Outcome, Run<'a>) {
        for c in 0..self.conns.len() {
            self.note_time();
            self.land(c);
            self.commit(c);
            self.step += 1;
        }
        let mut drainer = connect_retrying(&self.server.conninfo(&self.db, "postgres"));
        // What the run left behind, before the drain adds its own.
        let traces = check::traces(&mut drainer);
        // The rolling-back drain pops from the run's first session: a backend that popped
        // before keeps what its last scan of the log read (discovery.rs, "No scan when nothing
        // was pushed"), and must still find everything pushed since.
        let mut first = if self.conns[0].app { None } else { self.conns[0].client.take() };
        if let Some(k) = first.as_mut() {
            k.batch_execute("RESET lock_timeout; RESET statement_timeout").unwrap();
        }
        for g in Grp::ALL.into_iter().filter(|g| g.checked()) {
            match first.as_mut() {
                Some(k) => self.drain(k, g, true),
                None => self.drain(&mut drainer, g, true),
            }
            self.drain(&mut drainer, g, false);
        }
        if first.is_some() {
            self.conns[0].client = first;
        }
        for w in heard() {
            self.violation(
                "a warning to a client",
                format!("while the run's transactions ended and groups drained: {w}"),
            );
        }
        let violations = check::check(&self, &mut drainer, &traces);
        self.violations.extend(violations);
        let side = check::side(&self, &mut drainer);
        self.violations.extend(side);
        let kv = check::kv(&self, &mut drainer);
        self.violations.extend(kv);
        let timers = check::timers(&self, &mut drainer);
        self.violations.extend(timers);
        let locks = check::locks(&self, &mut drainer);
        self.violations.extend(locks);
        let outcome = Outcome {
            violations: std::mem::take(&mut self.violations),
            steps: self.step,
            crashes: self.crashes,
            moves: self.moves,
            restores: self.restores,
            app_refused: self.app_calls.iter().filter(|c| !c.allowed).count(),
            app_allowed: self.app_calls.iter().filter(|c| c.allowed).count(),
            no_trace_checks: self.no_trace_checks,
            side_deletes: self
                .history
                .iter()
                .flat_map(|t| &t.events)
                .filter(|e| matches!(e, Event::SideDeleted { .. }))
                .count(),
            passes: self.passes,
            lease_acks: self.lease_acks,
            lease_acked: self.lease_acked,
            replayed: self.replayed,
            purged: self.purged,
            dead_filed: drainer
                .query_one(
                    "SELECT count(*)::int8 FROM queen.dead_letters
                      WHERE queue_id IN (SELECT queue_id FROM queen.queues WHERE name = $1)",
                    &[&QUEUE],
                )
                .map_or(0, |r| r.get::<_, i64>(0) as usize)
                + self.replayed
                + self.purged,
            slow_deletes: self.slow_deletes,
            slow_deletes_timed_out: self.slow_deletes_timed_out,
            steps_beside_deletes: self.steps_beside_deletes,
            passes_beside_timer_deletes: self.passes_beside_timer_deletes,
            tenant_steps: self.tenant_steps,
            ties: self.ties,
            ties_delivered: self.ties_delivered,
            deadlocks_across_deletes: std::mem::take(&mut self.deadlocks_across_deletes),
        };
        (outcome, self)
    }

    /// Pop a group until nothing is left (group_lag at 0), past leases and retry delays.
    /// `rolling_back`: as a consumer that rolls back its empty pops does (each pop in a
    /// transaction of its own, rolled back when it returned nothing, batch 1): it must get there
    /// too — a rollback takes back what an empty pop learnt, and a long finished stretch of the
    /// log left it re-reading the same entries for ever (issue 20, item 4). A group left behind
    /// that way is `starved`; the plain drain after it then finishes the group.
    fn drain(&mut self, k: &mut Client, g: Grp, rolling_back: bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let (mode, from) = g.subscription();
        let batch: i32 = if rolling_back { 1 } else { 100 };
        loop {
            if rolling_back {
                k.batch_execute("BEGIN").unwrap();
            }
            let rows = k
                .query(
                    "SELECT m.message_id, m.partition_id, extract(epoch FROM clock_timestamp())::float8
                       FROM queen_pop($1, $2, batch => $5, partitions => 4, auto_ack => true,
                                      subscription_mode => $3, subscription_from => $4::text::timestamptz) m",
                    &[&QUEUE, &g.name(), &mode, &from, &batch],
                )
                .unwrap();
            if rolling_back {
                k.batch_execute(if rows.is_empty() { "ROLLBACK" } else { "COMMIT" }).unwrap();
                if rows.is_empty() {
                    let lag: i64 = k
                        .query_one(
                            "SELECT coalesce(sum(pending), 0)::bigint FROM queen.group_lag
                              WHERE queue = $1 AND consumer_group IS NOT DISTINCT FROM $2",
                            &[&QUEUE, &g.name()],
                        )
                        .unwrap()
                        .get(0);
                    if lag == 0 {
                        return;
                    }
                    if Instant::now() > deadline {
                        self.violation(
                            "starved",
                            format!("group {g:?}: pops that roll back when empty never reached {lag} pending (10 s)"),
                        );
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
            }
            let popped = Event::Popped { group: g, step: self.step };
            let events: Vec<Event> = std::iter::once(popped)
                .chain(rows.iter().enumerate().map(|(pos, r)| {
                    Event::Delivered(Delivered {
                        group: g,
                        msg: r.get(0),
                        partition: r.get(1),
                        lease: None,
                        expires: None,
                        at: r.get(2),
                        step: self.step,
                        pos,
                    })
                }))
                .collect();
            let empty = rows.is_empty();
            self.history.push(Committed { begin: self.step, commit: self.step, events });
            self.step += 1;
            if !empty {
                continue;
            }
            let row = k
                .query_one(
                    "SELECT coalesce(sum(pending), 0)::bigint,
                            count(*) FILTER (WHERE (pending > 0) <> (oldest_pending IS NOT NULL))
                       FROM queen.group_lag
                      WHERE queue = $1 AND consumer_group IS NOT DISTINCT FROM $2",
                    &[&QUEUE, &g.name()],
                )
                .unwrap();
            let (lag, headless): (i64, i64) = (row.get(0), row.get(1));
            if headless > 0 {
                self.violation(
                    "lag head",
                    format!("group {:?}: {headless} partitions where pending > 0 and oldest_pending disagree", g),
                );
            }
            if lag == 0 {
                return;
            }
            if Instant::now() > deadline {
                self.violation(
                    "stranded",
                    format!("group {:?}: group_lag counts {lag} pending that no pop delivers (10 s of draining)", g),
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn to_str(to: SeekTo) -> &'static str {
    match to {
        SeekTo::End => "end",
        SeekTo::Start => "start",
        SeekTo::Now => "now",
    }
}

/// Draw the next step for `run`'s state.
pub fn draw(rng: &mut SmallRng, run: &Run<'_>, cfg: &Config, keys: u32) -> Step {
    let mut c = rng.random_range(0..cfg.conns);
    // A connection with a delete out on another thread is mostly left alone: its next step
    // lands the delete, and the steps between are what the delete is tested against.
    if matches!(run.conns[c].slow, Some(Slow::Delete(..))) && rng.random_bool(0.85) {
        c = rng.random_range(0..cfg.conns);
    }
    // The tenant's transaction, while open, goes on: pops and deletes of its queue's groups
    // (named as the explored queue's are), then an end.
    let tenant = run.tenant();
    if run.conns[tenant].tx.is_some() && rng.random_bool(0.04) {
        let g = Grp::ALL[rng.random_range(0..Grp::ALL.len())];
        return Step::Tenant(match rng.random_range(0..100) {
            0..=39 => TenantOp::Pop(g),
            40..=69 => TenantOp::DeleteGroup(g),
            70..=84 => TenantOp::Commit,
            _ => TenantOp::Rollback,
        });
    }
    // A delete from another thread, left waiting while the next steps run.
    if rng.random_bool(0.006) {
        let target = match rng.random_range(0..100) {
            0..=39 => DelTarget::Scratch,
            40..=74 => DelTarget::Side(rng.random_range(0..SIDE_QUEUES.len() as u8)),
            _ => DelTarget::Timers,
        };
        return Step::DeleteSlow { c, target };
    }
    let in_tx = run.conns[c].tx.is_some();
    let roll = rng.random_range(0..1000);
    if !in_tx && roll < 330 {
        return Step::Begin(c);
    }
    if in_tx {
        let fresh = run.conns[c].tx.as_ref().is_some_and(|t| t.events.is_empty() && t.begin == usize::MAX);
        match roll {
            // Xids taken early: the case where a transaction's own xid sorts before others.
            _ if fresh && rng.random_bool(0.3) => return Step::TakeXid(c),
            0..=99 => return Step::Commit(c),
            100..=124 => return Step::CommitSlow(c),
            125..=164 => return Step::Rollback(c),
            165..=184 => return Step::Savepoint(c),
            185..=199 => return Step::RollbackToSavepoint(c),
            _ => {}
        }
    }
    // The sought group is popped from a quarter in (its first pops held open there), and sought
    // often right after: a seek while a first pop is open is the shape of issue 20, item 1.
    let late = run.step >= cfg.steps / 3;
    let sought = run.step >= cfg.steps / 4;
    let partitions = if run.step >= cfg.steps / 2 { PARTITIONS + NEW_PARTITIONS } else { PARTITIONS };
    if sought && run.step < cfg.steps / 4 + 40 && rng.random_bool(0.06) {
        return Step::Seek { c, group: Grp::Seeker, to: if rng.random_bool(0.5) { SeekTo::End } else { SeekTo::Now } };
    }
    // A side first pop held open: time passes and maintenance runs (on another connection)
    // more often while it is.
    if let Some(f) = run.first_pop.filter(|f| run.conns[*f].tx.is_some()) {
        match rng.random_range(0..100) {
            0..=7 => return Step::Sleep(1100),
            8..=19 if c != f => return Step::Maintain(c),
            _ => {}
        }
    }
    let op = rng.random_range(0..1000);
    match op {
        0..=279 => {
            let n = if rng.random_bool(0.6) { 1 } else { rng.random_range(2..=4) };
            let items = (0..n)
                .map(|_| Item {
                    partition: rng.random_range(0..partitions),
                    key: rng.random_bool(0.25).then(|| rng.random_range(0..keys)),
                })
                .collect();
            Step::Push { c, items, batch: n > 1 || rng.random_bool(0.3) }
        }
        280..=294 => Step::Fill {
            c,
            partition: rng.random_range(0..PARTITIONS),
            n: rng.random_range(20..=60),
            consume: (!in_tx && rng.random_bool(0.6))
                .then(|| [Grp::All, Grp::From, Grp::QueueMode, Grp::New][rng.random_range(0..4)]),
        },
        295..=489 => {
            let group = match rng.random_range(0..100) {
                0..=24 => Grp::All,
                25..=42 => Grp::New,
                43..=54 => Grp::From,
                55..=71 => Grp::QueueMode,
                72..=79 => Grp::Scratch,
                80..=89 if late => Grp::Late,
                90..=99 if sought => Grp::Seeker,
                _ => Grp::All,
            };
            let partition = rng.random_bool(0.2).then(|| rng.random_range(0..partitions));
            Step::Pop {
                c,
                group,
                batch: if partition.is_some() && rng.random_bool(0.3) {
                    100
                } else if rng.random_bool(0.6) {
                    rng.random_range(1..=3)
                } else {
                    rng.random_range(1..=10)
                },
                partitions: rng.random_range(1..=3),
                partition,
                auto_ack: rng.random_bool(0.4),
                wait_ms: if rng.random_bool(0.1) { 30 } else { 0 },
                rollback_empty: !in_tx && rng.random_bool(0.3),
            }
        }
        820..=849 => Step::AckLease {
            c,
            pick: rng.random_range(0..3),
            status: match rng.random_range(0..100) {
                0..=59 => Status::Completed,
                60..=71 => Status::Failed,
                72..=81 => Status::Retry,
                _ => Status::Dlq,
            },
            effect: rng.random_bool(0.6),
        },
        620..=819 => {
            let n = rng.random_range(1..=3);
            Step::Ack {
                c,
                pick: (0..n).map(|_| rng.random_range(0..5)).collect(),
                status: match rng.random_range(0..100) {
                    0..=59 => Status::Completed,
                    60..=71 => Status::Failed,
                    72..=81 => Status::Retry,
                    _ => Status::Dlq,
                },
                lease: match rng.random_range(0..100) {
                    0..=79 => LeaseKind::Good,
                    80..=87 => LeaseKind::Stale,
                    88..=93 => LeaseKind::Foreign,
                    _ => LeaseKind::Missing,
                },
                batch: n > 1 || rng.random_bool(0.3),
                group_arg: rng.random_bool(0.5),
                effect: rng.random_bool(0.6),
                by_transaction: rng.random_bool(0.3),
            }
        }
        850..=869 => Step::Renew { c, pick: rng.random_range(0..3) },
        870..=884 => {
            let (group, to) = if rng.random_bool(0.5) || !sought {
                (Grp::Scratch, if rng.random_bool(0.5) { SeekTo::End } else { SeekTo::Start })
            } else {
                (Grp::Seeker, if rng.random_bool(0.5) { SeekTo::End } else { SeekTo::Now })
            };
            Step::Seek { c, group, to }
        }
        885..=889 => Step::DeleteGroup(c),
        965..=979 => Step::DeadLetters {
            c,
            group: match rng.random_range(0..7) {
                0 => Grp::All,
                1 => Grp::New,
                2 => Grp::From,
                3 => Grp::QueueMode,
                4 if late => Grp::Late,
                5 if sought => Grp::Seeker,
                _ => Grp::Scratch,
            },
            op: match rng.random_range(0..10) {
                0..=3 => DeadOp::Replay,
                4..=7 => DeadOp::ReplayOne,
                _ => DeadOp::PurgeOne,
            },
        },
        890..=919 => Step::Maintain(c),
        920..=929 => Step::Grant {
            c,
            privilege: if rng.random_bool(0.5) { Privilege::Push } else { Privilege::Pop },
            grant: rng.random_bool(0.5),
        },
        930..=944 => Step::Sleep(if rng.random_bool(0.5) { 1100 } else { 150 }),
        945..=959 => Step::Terminate(c),
        960..=964 if cfg.other.is_some() => Step::Restore { ahead: rng.random_bool(0.3) },
        490..=559 => {
            let n = rng.random_range(0..KV_KEYS);
            let op = match rng.random_range(0..100) {
                0..=24 => KvOp::Incr(n),
                25..=39 => KvOp::Claim(n),
                40..=49 => KvOp::Release(n),
                50..=64 => KvOp::Schedule { key: n, now: rng.random_bool(0.7) },
                65..=69 => KvOp::ScheduleOther,
                70..=79 => KvOp::Cancel(n),
                80..=89 => KvOp::Acquire,
                _ => KvOp::Unlock,
            };
            Step::Kv { c, op }
        }
        560..=619 | 990..=999 => {
            let q = rng.random_range(0..SIDE_QUEUES.len() as u8);
            let op = match rng.random_range(0..100) {
                0..=34 => SideOp::Push(rng.random_range(0..SIDE_PARTITIONS)),
                35..=64 => SideOp::Pop { group: rng.random_range(0..SIDE_GROUPS), auto: rng.random_bool(0.25) },
                65..=89 => SideOp::Ack {
                    pick: if rng.random_bool(0.7) { 0 } else { rng.random_range(1..3) },
                    dlq: rng.random_bool(0.15),
                },
                90..=94 => SideOp::DeleteQueue,
                95..=98 if !in_tx => SideOp::FirstPop(rng.random_range(0..SIDE_GROUPS)),
                _ => SideOp::DeleteGroup(rng.random_range(0..SIDE_GROUPS)),
            };
            Step::Side { c, q, op }
        }
        980..=984 if cfg.crash.is_some() => Step::Crash,
        985..=989 if cfg.citus.is_some() => Step::Move,
        985..=989 if cfg.crash.is_some() => Step::Crash,
        _ => Step::Pop {
            c,
            group: Grp::All,
            batch: 2,
            partitions: 2,
            partition: None,
            auto_ack: false,
            wait_ms: 0,
            rollback_empty: false,
        },
    }
}

/// How many of the run's connections are superusers: the first ones (the last of four or more
/// is the application role's).
fn superusers(cfg: &Config) -> usize {
    if cfg.conns >= 4 {
        cfg.conns - 1
    } else {
        cfg.conns
    }
}

/// The shapes in which queen's own locks once made circles of waits, with the deletes waiting
/// on other threads (`delete_slow`): a transaction that acks and then pops (or pushes) while a
/// delete of that group (or queue) starts in between; a timer due on a queue whose delete waits
/// for an open transaction, while a pass fires timers (of `eo` too, which it must fire at
/// once); and the tenant role holding open a delete and pops of its own queue's groups under
/// the explored queue's group names, while that queue is worked. Empty with fewer than three
/// connections.
fn lock_burst(rng: &mut SmallRng, run: &Run<'_>, cfg: &Config, shape: Option<usize>) -> Vec<Step> {
    let su = superusers(cfg);
    if cfg.conns < 3 || su < 2 {
        return Vec::new();
    }
    let free = |c: usize| run.conns[c].slow.is_none();
    // A: the transaction that acks, then writes; B: the delete (a superuser); C: the others.
    let a = rng.random_range(0..cfg.conns);
    let others: Vec<usize> = (0..su).filter(|&c| c != a && free(c)).collect();
    if others.is_empty() {
        return Vec::new();
    }
    let b = others[rng.random_range(0..others.len())];
    let rest: Vec<usize> = (0..su).filter(|&c| c != a && c != b).collect();
    let c = if rest.is_empty() { b } else { rest[rng.random_range(0..rest.len())] };
    let status = |rng: &mut SmallRng| match rng.random_range(0..100) {
        0..=69 => Status::Completed,
        70..=79 => Status::Failed,
        80..=89 => Status::Retry,
        _ => Status::Dlq,
    };
    let push = |c: usize, rng: &mut SmallRng| Step::Push {
        c,
        items: vec![Item { partition: rng.random_range(0..PARTITIONS), key: None }],
        batch: false,
    };
    let pop = |c: usize, group: Grp, rng: &mut SmallRng| Step::Pop {
        c,
        group,
        batch: rng.random_range(1..=3),
        partitions: rng.random_range(1..=2),
        partition: None,
        auto_ack: false,
        wait_ms: 0,
        rollback_empty: false,
    };
    let end = |c: usize, rng: &mut SmallRng| match rng.random_range(0..10) {
        0..=5 => Step::Commit(c),
        6..=7 => Step::CommitSlow(c),
        _ => Step::Rollback(c),
    };
    let mut v = Vec::new();
    let roll = match shape {
        Some(k) => [0, 35, 60, 80][k % 4],
        None => rng.random_range(0..100),
    };
    match roll {
        // Ack, then pop (or push), against a delete of the group.
        0..=34 => {
            if rng.random_bool(0.7) {
                v.push(push(a, rng));
            }
            v.push(pop(a, Grp::Scratch, rng));
            v.push(Step::Begin(a));
            v.push(match rng.random_range(0..3) {
                0 => Step::AckLease { c: a, pick: 0, status: status(rng), effect: rng.random_bool(0.5) },
                n => Step::Ack {
                    c: a,
                    pick: if n == 1 { vec![0] } else { vec![0, 1] },
                    status: status(rng),
                    lease: match rng.random_range(0..10) {
                        0..=6 => LeaseKind::Good,
                        7 => LeaseKind::Stale,
                        _ => LeaseKind::Missing,
                    },
                    batch: n == 2 || rng.random_bool(0.3),
                    group_arg: rng.random_bool(0.5),
                    effect: rng.random_bool(0.5),
                    by_transaction: rng.random_bool(0.2),
                },
            });
            v.push(Step::DeleteSlow { c: b, target: DelTarget::Scratch });
            v.push(if rng.random_bool(0.7) { pop(a, Grp::Scratch, rng) } else { push(a, rng) });
            if rng.random_bool(0.5) {
                let g = [Grp::All, Grp::New, Grp::QueueMode, Grp::Scratch][rng.random_range(0..4)];
                v.push(pop(c, g, rng));
                v.push(push(c, rng));
            }
            v.push(end(a, rng));
            if rng.random_bool(0.6) {
                v.push(Step::Commit(b));
            }
        }
        // Ack, then push (or pop), against a delete of the queue (a side queue, which the
        // application role may delete too).
        35..=59 => {
            let q = rng.random_range(0..SIDE_QUEUES.len() as u8);
            let g = rng.random_range(0..SIDE_GROUPS);
            let b = if a != cfg.conns - 1 && cfg.conns >= 4 && rng.random_bool(0.3) { cfg.conns - 1 } else { b };
            v.push(Step::Side { c: a, q, op: SideOp::Push(rng.random_range(0..SIDE_PARTITIONS)) });
            v.push(Step::Side { c: a, q, op: SideOp::Pop { group: g, auto: false } });
            v.push(Step::Begin(a));
            v.push(Step::Side { c: a, q, op: SideOp::Ack { pick: 0, dlq: rng.random_bool(0.15) } });
            v.push(Step::DeleteSlow { c: b, target: DelTarget::Side(q) });
            v.push(if rng.random_bool(0.6) {
                Step::Side { c: a, q, op: SideOp::Push(rng.random_range(0..SIDE_PARTITIONS)) }
            } else {
                Step::Side { c: a, q, op: SideOp::Pop { group: g, auto: false } }
            });
            if rng.random_bool(0.5) {
                v.push(pop(c, Grp::All, rng));
                v.push(push(c, rng));
            }
            v.push(end(a, rng));
            if rng.random_bool(0.6) {
                v.push(Step::Commit(b));
            }
        }
        // A timer due on a queue whose delete waits for an open transaction; passes fire
        // the other queue's timers meanwhile, waiting for no one.
        60..=79 => {
            let (k1, k2) = (rng.random_range(0..KV_KEYS), rng.random_range(0..KV_KEYS));
            let a = if a == b { c } else { a };
            v.push(Step::Kv { c, op: KvOp::Schedule { key: k1, now: true } });
            v.push(Step::Kv { c, op: KvOp::ScheduleOther });
            v.push(Step::Begin(a));
            v.push(Step::Kv {
                c: a,
                op: if rng.random_bool(0.7) {
                    KvOp::Schedule { key: k2, now: rng.random_bool(0.5) }
                } else {
                    KvOp::Cancel(k2)
                },
            });
            v.push(Step::DeleteSlow { c: b, target: DelTarget::Timers });
            v.push(Step::Maintain(c));
            if rng.random_bool(0.5) {
                v.push(Step::Kv { c, op: KvOp::ScheduleOther });
                v.push(Step::Maintain(c));
            }
            v.push(end(a, rng));
            if rng.random_bool(0.5) {
                v.push(Step::Kv { c, op: KvOp::ScheduleOther });
                v.push(Step::Maintain(c));
            }
            if rng.random_bool(0.6) {
                v.push(Step::Commit(b));
            }
        }
        // The tenant: a delete and a pop of its own queue's groups, named as this queue's are,
        // held open while this queue's pops and pushes go on.
        _ => {
            let any = |rng: &mut SmallRng| Grp::ALL[rng.random_range(0..Grp::ALL.len())];
            let mine = |rng: &mut SmallRng| {
                [Grp::All, Grp::New, Grp::From, Grp::QueueMode, Grp::Scratch][rng.random_range(0..5)]
            };
            let (g1, g2) = (mine(rng), mine(rng));
            v.push(Step::Tenant(TenantOp::Begin));
            v.push(Step::Tenant(TenantOp::DeleteGroup(if rng.random_bool(0.7) { g1 } else { any(rng) })));
            v.push(Step::Tenant(TenantOp::Pop(if rng.random_bool(0.7) { g2 } else { any(rng) })));
            v.push(pop(a, g1, rng));
            v.push(push(c, rng));
            v.push(pop(b, g2, rng));
            if rng.random_bool(0.4) {
                v.push(Step::Tenant(TenantOp::Pop(g1)));
                v.push(pop(c, g1, rng));
            }
            match rng.random_range(0..10) {
                0..=2 => v.push(Step::Tenant(TenantOp::Commit)),
                3..=4 => v.push(Step::Tenant(TenantOp::Rollback)),
                _ => {}
            }
        }
    }
    v
}

/// Dead letters filed on purpose: a pop of a checked group and a `dlq` ack of its whole lease on
/// the same connection, then (often) a replay or purge of the group's dead letters from
/// another. Left to chance, acks file a dead letter or two per run (a lease of one second runs
/// out between most pops and their acks), and replay would rarely meet one.
fn dead_letter_burst(rng: &mut SmallRng, cfg: &Config) -> Vec<Step> {
    let c = rng.random_range(0..cfg.conns);
    let group = [Grp::All, Grp::New, Grp::From, Grp::QueueMode][rng.random_range(0..4)];
    let mut steps = vec![
        Step::Pop {
            c,
            group,
            batch: rng.random_range(1..=3),
            partitions: rng.random_range(1..=2),
            partition: None,
            auto_ack: false,
            wait_ms: 0,
            rollback_empty: false,
        },
        Step::AckLease { c, pick: 0, status: Status::Dlq, effect: false },
    ];
    if rng.random_bool(0.7) {
        let op = match rng.random_range(0..10) {
            0..=3 => DeadOp::Replay,
            4..=7 => DeadOp::ReplayOne,
            _ => DeadOp::PurgeOne,
        };
        steps.push(Step::DeadLetters { c: rng.random_range(0..cfg.conns), group, op });
    }
    steps
}

/// First pops of one group on several connections at once, around commits: connection 0
/// subscribes in a transaction it keeps open; others push and subscribe after it, some in
/// transactions of their own. The opening of half the schedules (for `New`, ...), and for
/// `Seeker` a quarter and `Late` a third into every schedule, so that their first pops stay
/// open across what the others push, pop, seek and commit.
fn first_pops(rng: &mut SmallRng, cfg: &Config, group: Grp) -> Vec<Step> {
    let pop = |c: usize, rng: &mut SmallRng| Step::Pop {
        c,
        group,
        batch: rng.random_range(1..=3),
        partitions: rng.random_range(1..=2),
        partition: None,
        auto_ack: rng.random_bool(0.5),
        wait_ms: 0,
        rollback_empty: false,
    };
    let push = |c: usize, rng: &mut SmallRng| Step::Push {
        c,
        items: vec![Item { partition: rng.random_range(0..PARTITIONS), key: None }],
        batch: false,
    };
    let mut steps = vec![push(1 % cfg.conns, rng), Step::Commit(0), Step::Begin(0), pop(0, rng)];
    for c in 1..cfg.conns.min(4) {
        steps.push(push(c, rng));
        if rng.random_bool(0.5) {
            steps.push(Step::Begin(c));
        }
        steps.push(pop(c, rng));
        if rng.random_bool(0.5) {
            steps.push(Step::Commit(c));
        }
    }
    steps
}

/// Explore one seed: draw and run `cfg.steps` steps. Returns the outcome and the schedule run.
pub fn explore_seed(cfg: &Config, seed: u64) -> (Outcome, Vec<Step>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let name = format!("explore_{}_{seed}", std::process::id());
    let mut run = Run::new(cfg, &name);
    let scan_limit = scan_limit_of(seed);
    let _ = rng.random_bool(0.5); // (drawn by scan_limit_of)
    if scan_limit > 0 {
        run.set_scan_limit(scan_limit);
    }
    let keys = (cfg.steps as u32 / 4).max(4);
    let mut schedule = Vec::with_capacity(cfg.steps);
    if rng.random_bool(0.5) {
        let group = [Grp::New, Grp::New, Grp::All, Grp::From, Grp::QueueMode][rng.random_range(0..5)];
        for step in first_pops(&mut rng, cfg, group) {
            run.run_step(&step);
            schedule.push(step);
        }
    }
    // The sought group's first pops a quarter in, the late group's a third in.
    let mut openings = vec![(cfg.steps / 3, Grp::Late), (cfg.steps / 4, Grp::Seeker)];
    // Once each, somewhere: every shape of lock_burst (0: ack then pop against a delete of the
    // group, 1: against a delete of the queue, 2: a timer due on a queue being deleted, 3: the
    // tenant), and ties at scale (4); more lock bursts come at random.
    let mut agenda: Vec<(usize, usize)> =
        (0..5).map(|k| (rng.random_range(cfg.steps / 10..=cfg.steps * 9 / 10), k)).collect();
    agenda.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
    while schedule.len() < cfg.steps {
        if openings.last().is_some_and(|(at, _)| schedule.len() >= *at) {
            let (_, group) = openings.pop().unwrap();
            for step in first_pops(&mut rng, cfg, group) {
                run.run_step(&step);
                schedule.push(step);
            }
            continue;
        }
        if rng.random_bool(0.03) {
            for step in dead_letter_burst(&mut rng, cfg) {
                run.run_step(&step);
                schedule.push(step);
            }
            continue;
        }
        let due = agenda.last().is_some_and(|(at, _)| schedule.len() >= *at);
        if due || rng.random_bool(0.02) {
            let shape = if due { agenda.pop().map(|(_, k)| k) } else { None };
            let steps = match shape {
                // Ties on a superuser's connection in no transaction (later if there is none).
                Some(4) => {
                    let free: Vec<usize> = (0..superusers(cfg))
                        .filter(|&c| run.conns[c].tx.is_none() && run.conns[c].slow.is_none())
                        .collect();
                    if free.is_empty() {
                        agenda.push((schedule.len() + 5, 4));
                        agenda.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
                        Vec::new()
                    } else {
                        vec![Step::Ties(free[rng.random_range(0..free.len())])]
                    }
                }
                shape => lock_burst(&mut rng, &run, cfg, shape),
            };
            for step in steps {
                run.run_step(&step);
                schedule.push(step);
            }
            continue;
        }
        let step = draw(&mut rng, &run, cfg, keys);
        run.run_step(&step);
        schedule.push(step);
    }
    let (outcome, run) = run.finish();
    if outcome.violations.is_empty() {
        run.drop_db();
    }
    (outcome, schedule)
}

/// Run a given schedule on a fresh database (`scan_limit`: queen.debug_scan_limit, 0 for none).
pub fn replay(cfg: &Config, schedule: &[Step], name: &str, scan_limit: i32) -> Outcome {
    let mut run = Run::new(cfg, name);
    if scan_limit > 0 {
        run.set_scan_limit(scan_limit);
    }
    for step in schedule {
        run.run_step(step);
    }
    let (outcome, run) = run.finish();
    if std::env::var("QUEEN_EXPLORE_KEEP_DB").is_err() {
        run.drop_db();
    }
    outcome
}

/// Remove steps while a violation of the same kind remains (delta debugging), for at most
/// `budget`. Returns the smallest schedule found.
pub fn shrink(cfg: &Config, schedule: Vec<Step>, kind: &str, budget: Duration, scan_limit: i32) -> Vec<Step> {
    let deadline = Instant::now() + budget;
    let mut best = schedule;
    let mut chunk = best.len() / 2;
    let mut n = 0;
    while chunk >= 1 && Instant::now() < deadline {
        let mut i = 0;
        let mut removed_any = false;
        while i < best.len() && Instant::now() < deadline {
            let mut candidate = best.clone();
            candidate.drain(i..(i + chunk).min(candidate.len()));
            n += 1;
            let outcome = replay(cfg, &candidate, &format!("shrink_{}_{n}", std::process::id()), scan_limit);
            if outcome.violations.iter().any(|v| v.kind == kind) {
                best = candidate;
                removed_any = true;
            } else {
                i += chunk;
            }
        }
        if !removed_any {
            chunk /= 2;
        }
    }
    best
}

/// The schedule as lines, for a report (and `QUEEN_EXPLORE_SCHEDULE`); a run with a scan limit
/// says so in its first line (`# scan_limit N`), which `parse` reads back.
pub fn print(schedule: &[Step], scan_limit: i32) -> String {
    let mut lines: Vec<String> = Vec::new();
    if scan_limit > 0 {
        lines.push(format!("# scan_limit {scan_limit}"));
    }
    lines.extend(schedule.iter().map(|s| s.to_string()));
    lines.join("\n")
}

/// A schedule printed by `print` (lines starting with `#` are comments, but `# scan_limit N`),
/// and its scan limit.
pub fn parse(text: &str) -> (Vec<Step>, i32) {
    let scan_limit = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("# scan_limit "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    let steps = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.parse().unwrap_or_else(|e| panic!("schedule line {l:?}: {e}")))
        .collect();
    (steps, scan_limit)
}

/// The scan limit seed `seed` runs with (explore_seed draws it first).
pub fn scan_limit_of(seed: u64) -> i32 {
    let mut rng = SmallRng::seed_from_u64(seed);
    if rng.random_bool(0.5) {
        4
    } else {
        0
    }
}
