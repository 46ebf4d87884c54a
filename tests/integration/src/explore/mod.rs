//! The randomized interleaving explorer (issue 9): a seeded generator of schedules over K
//! real connections, a recorder of what each committed transaction did, and a checker that
//! judges the outcome against the delivery guarantees — the way Jepsen and Elle check
//! databases.
//!
//! A schedule is a list of steps, each run on one connection inside that connection's open
//! transaction (or in autocommit), one step at a time, so that a schedule replays the same
//! interleaving. Steps that would wait for a lock fail after `lock_timeout`: a pop or a keyless
//! push that does is a violation (pops and producers never wait); an ack or a push of a key
//! another open transaction holds may wait, and is rolled back. Rolled-back, failed and
//! killed transactions count as never having happened. At the end every open transaction
//! commits, every group is drained, and the checker runs (check.rs).
//!
//! On a failure, `shrink` removes steps while the same kind of violation remains, and the
//! report prints the seed and the shrunk schedule, one step per line, which
//! `QUEEN_EXPLORE_SCHEDULE` replays.

mod check;
mod schedule;

pub use check::Violation;
pub use schedule::{Grp, Item, LeaseKind, Status, Step};

use postgres::{Client, NoTls};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// How many partitions the explored queue has.
pub const PARTITIONS: u8 = 3;
const QUEUE: &str = "eq";

/// Where and how to explore.
#[derive(Clone)]
pub struct Config {
    /// Connection string of a server's maintenance database (`dbname=postgres`); each run
    /// creates a database of its own there.
    pub server: String,
    pub conns: usize,
    pub steps: usize,
    /// A cluster the explorer may kill -9 and restart (crash rounds), if any.
    pub crash: Option<CrashCluster>,
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
    /// Seek or delete_group of the scratch group: its leases are gone.
    ScratchReset {
        step: usize,
    },
    Applied {
        group: Grp,
        msg: Uuid,
    },
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

struct Tx {
    begin: usize,
    events: Vec<Event>,
    savepoint: Option<usize>,
}

struct Conn {
    client: Option<Client>,
    pid: i32,
    tx: Option<Tx>,
    deliveries: Vec<Delivery>,
}

/// The outcome of a run.
pub struct Outcome {
    pub violations: Vec<Violation>,
    pub steps: usize,
    pub crashes: usize,
}

/// One exploration run over a database of its own.
pub struct Run<'a> {
    cfg: &'a Config,
    db: String,
    conns: Vec<Conn>,
    step: usize,
    history: Vec<Committed>,
    violations: Vec<Violation>,
    pushes: u64,
    /// The group of each lease seen.
    lease_groups: HashMap<Uuid, Grp>,
    crashes: usize,
}

fn conninfo(server: &str, db: &str) -> String {
    format!("{server} dbname={db}")
}

fn connect_retrying(info: &str) -> Client {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match Client::connect(info, NoTls) {
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
    /// The statement waited for a lock past lock_timeout.
    LockWait,
    /// A deadlock or serialization failure (acks that lock in different orders across calls).
    Conflict,
    /// The connection is gone (terminated, crashed).
    Gone,
    Other(String),
}

fn classify(e: &postgres::Error) -> Failure {
    if e.is_closed() {
        return Failure::Gone;
    }
    match e.code().map(|c| c.code()) {
        Some("55P03") => Failure::LockWait,
        Some("40P01") | Some("40001") => Failure::Conflict,
        Some("57P01") | Some("57P02") | Some("57P03") => Failure::Gone,
        None => Failure::Gone, // an I/O error: the server went away
        _ => Failure::Other(
            e.as_db_error().map(|d| format!("{}: {}", d.code().code(), d.message())).unwrap_or_else(|| e.to_string()),
        ),
    }
}

impl<'a> Run<'a> {
    /// A fresh database with the extension, the queue configured for short leases and retries,
    /// and the table the business writes go to.
    pub fn new(cfg: &'a Config, name: &str) -> Run<'a> {
        let mut admin = connect_retrying(&conninfo(&cfg.server, "postgres"));
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        let mut c = connect_retrying(&conninfo(&cfg.server, name));
        c.batch_execute(&format!(
            "CREATE EXTENSION queen;
             SELECT queen_configure('{QUEUE}', '{{\"leaseTime\": 1, \"retryLimit\": 2, \"retryDelay\": 100}}');
             CREATE TABLE applied (grp text, msg uuid);"
        ))
        .unwrap();
        let mut run = Run {
            cfg,
            db: name.to_string(),
            conns: Vec::new(),
            step: 0,
            history: Vec::new(),
            violations: Vec::new(),
            pushes: 0,
            lease_groups: HashMap::new(),
            crashes: 0,
        };
        for _ in 0..cfg.conns {
            let conn = run.open();
            run.conns.push(conn);
        }
        run
    }

    fn open(&self) -> Conn {
        let mut client = connect_retrying(&conninfo(&self.cfg.server, &self.db));
        client.batch_execute("SET lock_timeout = '400ms'; SET statement_timeout = '20s'").unwrap();
        let pid = client.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        Conn { client: Some(client), pid, tx: None, deliveries: Vec::new() }
    }

    /// Drop the database (when the run passed).
    pub fn drop_db(self) {
        let name = self.db.clone();
        drop(self.conns);
        let mut admin = connect_retrying(&conninfo(&self.cfg.server, "postgres"));
        let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
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

    /// Run one statement on connection `c`; on failure, its transaction is rolled back (and a
    /// gone connection reopened), and the failure returned.
    fn exec<T>(&mut self, c: usize, f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>) -> Result<T, Failure> {
        if self.conns[c].client.is_none() {
            self.conns[c] = self.open();
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
                let failure = classify(&e);
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
        match f {
            Failure::LockWait if !may_wait => self.violation("waited on a lock", format!("step {}: {step}", self.step)),
            Failure::LockWait | Failure::Conflict | Failure::Gone => {}
            Failure::Other(e) => self.violation("unexpected error", format!("step {}: {step}: {e}", self.step)),
        }
    }

    /// Run one step.
    pub fn run_step(&mut self, step: &Step) {
        match step {
            Step::Begin(c) => {
                if self.conns[*c].tx.is_none() && self.exec(*c, |k| k.batch_execute("BEGIN")).is_ok() {
                    self.conns[*c].tx = Some(Tx { begin: usize::MAX, events: Vec::new(), savepoint: None });
                }
            }
            Step::Commit(c) => self.commit(*c),
            Step::Rollback(c) => {
                if self.conns[*c].tx.is_some() {
                    let _ = self.exec(*c, |k| k.batch_execute("ROLLBACK"));
                    self.conns[*c].tx = None;
                }
            }
            Step::Savepoint(c) => {
                if self.conns[*c].tx.is_some() && self.exec(*c, |k| k.batch_execute("SAVEPOINT s")).is_ok() {
                    let tx = self.conns[*c].tx.as_mut().unwrap();
                    tx.savepoint = Some(tx.events.len());
                }
            }
            Step::RollbackToSavepoint(c) => {
                let mark = self.conns[*c].tx.as_ref().and_then(|t| t.savepoint);
                if let Some(mark) = mark {
                    if self.exec(*c, |k| k.batch_execute("ROLLBACK TO SAVEPOINT s")).is_ok() {
                        self.conns[*c].tx.as_mut().unwrap().events.truncate(mark);
                    }
                }
            }
            Step::TakeXid(c) => {
                if self.conns[*c].tx.is_some() {
                    if let Err(f) = self.exec(*c, |k| k.batch_execute("SELECT pg_current_xact_id()")) {
                        self.failed(step, f, false);
                    }
                }
            }
            Step::Push { c, items, batch } => self.push(step, *c, items, *batch),
            Step::Pop { .. } => self.pop(step),
            Step::Ack { .. } => self.ack(step),
            Step::Renew { c, pick } => self.renew(step, *c, *pick),
            Step::Seek { c, to_end } => {
                let to_end = *to_end;
                let r = self.exec(*c, |k| {
                    k.execute(
                        "SELECT queen_seek($1, 'gs', CASE WHEN $2 THEN NULL ELSE '2000-01-01'::timestamptz END)",
                        &[&QUEUE, &to_end],
                    )
                });
                match r {
                    Ok(_) => self.record(*c, vec![Event::ScratchReset { step: self.step }]),
                    Err(f) => self.failed(step, f, true),
                }
            }
            Step::DeleteGroup(c) => {
                match self.exec(*c, |k| k.execute("SELECT queen_delete_group('gs', $1)", &[&QUEUE])) {
                    Ok(_) => self.record(*c, vec![Event::ScratchReset { step: self.step }]),
                    Err(f) => self.failed(step, f, true),
                }
            }
            Step::Maintain(c) => {
                if let Err(f) = self.exec(*c, |k| k.execute("SELECT queen_maintain()", &[])) {
                    self.failed(step, f, true);
                }
            }
            Step::Sleep(ms) => std::thread::sleep(Duration::from_millis(*ms as u64)),
            Step::Terminate(c) => {
                let pid = self.conns[*c].pid;
                if self.conns[*c].client.is_some() {
                    let mut admin = connect_retrying(&conninfo(&self.cfg.server, "postgres"));
                    admin.execute("SELECT pg_terminate_backend($1, 5000)", &[&pid]).unwrap();
                    self.conns[*c].client = None;
                    self.conns[*c].tx = None;
                }
            }
            Step::Crash => self.crash(),
        }
        self.step += 1;
    }

    fn commit(&mut self, c: usize) {
        if self.conns[c].tx.is_none() {
            return;
        }
        match self.exec(c, |k| k.batch_execute("COMMIT")) {
            Ok(()) => {
                let tx = self.conns[c].tx.take().unwrap();
                let begin = if tx.begin == usize::MAX { self.step } else { tx.begin };
                self.history.push(Committed { begin, commit: self.step, events: tx.events });
            }
            Err(f) => {
                let step = Step::Commit(c);
                self.failed(&step, f, true)
            }
        }
    }

    fn push(&mut self, step: &Step, c: usize, items: &[Item], batch: bool) {
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
        match rows {
            Ok(rows) => {
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
            }
            Err(f) => self.failed(step, f, keyed),
        }
    }

    fn pop(&mut self, step: &Step) {
        let &Step::Pop { c, group, batch, partitions, partition, auto_ack, wait_ms } = step else { unreachable!() };
        let (mode, from) = group.subscription();
        let pname = partition.map(|p| format!("p{p}"));
        let rows = self.exec(c, |k| {
            k.query(
                "SELECT m.message_id, m.partition_id, m.lease_id,
                        extract(epoch FROM m.lease_expires_at)::float8, extract(epoch FROM clock_timestamp())::float8
                   FROM queen_pop($1, $2, batch => $3, partition => $4, partitions => $5, wait_ms => $6,
                                  auto_ack => $7, subscription_mode => $8,
                                  subscription_from => $9::text::timestamptz) m",
                &[&QUEUE, &group.name(), &batch, &pname, &partitions, &wait_ms, &auto_ack, &mode, &from],
            )
        });
        match rows {
            Ok(rows) => {
                let mut events = vec![Event::Popped { group, step: self.step }];
                for (pos, r) in rows.iter().enumerate() {
                    let d = Delivered {
                        group,
                        msg: r.get(0),
                        partition: r.get(1),
                        lease: r.get(2),
                        expires: r.get(3),
                        at: r.get(4),
                        step: self.step,
                        pos,
                    };
                    if let Some(l) = d.lease {
                        self.lease_groups.insert(l, group);
                    }
                    self.conns[c].deliveries.push(Delivery {
                        group,
                        msg: d.msg,
                        lease: d.lease,
                        partition: d.partition,
                    });
                    events.push(Event::Delivered(d));
                }
                self.record(c, events);
            }
            Err(f) => self.failed(step, f, false),
        }
    }

    /// The delivery `pick` positions back from connection `c`'s latest.
    fn picked(&self, c: usize, pick: u32) -> Option<Delivery> {
        let ds = &self.conns[c].deliveries;
        ds.len().checked_sub(1 + pick as usize).map(|i| ds[i].clone())
    }

    fn ack(&mut self, step: &Step) {
        let Step::Ack { c, pick, status, lease: kind, batch, group_arg, effect } = step else { unreachable!() };
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
            return;
        }
        // Subscriptions and cursor rows this transaction sees before the ack: a refused ack
        // must leave them as they are (nothing else runs between the two counts).
        const ROWS: &str = "SELECT (SELECT count(*) FROM queen.subscriptions) + (SELECT count(*) FROM queen.cursors)";
        let before: i64 = match self.exec(c, |k| k.query_one(ROWS, &[]).map(|r| r.get(0))) {
            Ok(n) => n,
            Err(f) => return self.failed(step, f, true),
        };
        let rows = if batch {
            let arr: Vec<Value> = entries
                .iter()
                .map(|(d, lease, group)| {
                    json!({"messageId": d.msg.to_string(), "leaseId": lease.map(|l| l.to_string()),
                           "consumerGroup": group, "_status": status.as_str(), "_error": "explorer"})
                })
                .collect();
            self.exec(c, |k| {
                k.query("SELECT success, lease_released FROM queen_ack($1::jsonb) ORDER BY idx", &[&Value::Array(arr)])
            })
            .map(|rows| rows.iter().map(|r| (r.get::<_, bool>(0), r.get::<_, bool>(1))).collect::<Vec<_>>())
        } else {
            let (d, lease, group) = entries[0].clone();
            entries.truncate(1);
            self.exec(c, |k| {
                k.query(
                    "SELECT success, lease_released FROM queen_ack($1, $2, $3, 'explorer', $4)",
                    &[&d.msg, &lease, &status.as_str(), &group],
                )
            })
            .map(|rows| rows.iter().map(|r| (r.get::<_, bool>(0), r.get::<_, bool>(1))).collect::<Vec<_>>())
        };
        let results = match rows {
            Ok(r) => r,
            Err(f) => return self.failed(step, f, true),
        };
        if results.iter().all(|(success, _)| !success) {
            match self.exec(c, |k| k.query_one(ROWS, &[]).map(|r| r.get::<_, i64>(0))) {
                Ok(after) if after != before => self.violation(
                    "trace of a refused call",
                    format!(
                        "step {}: {step}: refused, it left {} subscription or cursor rows",
                        self.step,
                        after - before
                    ),
                ),
                Ok(_) => {}
                Err(f) => return self.failed(step, f, true),
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
        for (g, msg) in applied {
            let name = g.name().unwrap_or("__QUEUE_MODE__");
            match self.exec(c, |k| k.execute("INSERT INTO applied (grp, msg) VALUES ($1, $2)", &[&name, &msg])) {
                Ok(_) => self.record(c, vec![Event::Applied { group: g, msg }]),
                Err(f) => return self.failed(step, f, false),
            }
        }
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

    fn renew(&mut self, step: &Step, c: usize, pick: u32) {
        let Some(lease) = self.picked(c, pick).and_then(|d| d.lease) else { return };
        match self.exec(c, |k| {
            k.query_one("SELECT extract(epoch FROM queen_renew($1, 2))::float8", &[&lease])
                .map(|r| r.get::<_, Option<f64>>(0))
        }) {
            Ok(Some(expires)) => self.record(c, vec![Event::Renewed { lease, expires }]),
            Ok(None) => {}
            Err(f) => self.failed(step, f, true),
        }
    }

    /// kill -9 of the postmaster, restart, reconnect: open transactions never happened.
    fn crash(&mut self) {
        let Some(cc) = &self.cfg.crash else { return };
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
        for i in 0..self.conns.len() {
            self.conns[i] = self.open();
        }
        self.crashes += 1;
    }

    /// Commit every open transaction, drain every checked group, and check the history.
    pub fn finish(mut self) -> (Outcome, Run<'a>) {
        for c in 0..self.conns.len() {
            self.commit(c);
            self.step += 1;
        }
        let mut drainer = connect_retrying(&conninfo(&self.cfg.server, &self.db));
        // What the run left behind, before the drain adds its own.
        let traces = check::traces(&mut drainer);
        for g in Grp::ALL.into_iter().filter(|g| g.checked()) {
            self.drain(&mut drainer, g);
        }
        let violations = check::check(&self, &mut drainer, &traces);
        self.violations.extend(violations);
        let outcome =
            Outcome { violations: std::mem::take(&mut self.violations), steps: self.step, crashes: self.crashes };
        (outcome, self)
    }

    /// Pop a group until nothing is left (group_lag at 0), past leases and retry delays.
    fn drain(&mut self, k: &mut Client, g: Grp) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let (mode, from) = g.subscription();
        loop {
            let rows = k
                .query(
                    "SELECT m.message_id, m.partition_id, extract(epoch FROM clock_timestamp())::float8
                       FROM queen_pop($1, $2, batch => 100, partitions => 4, auto_ack => true,
                                      subscription_mode => $3, subscription_from => $4::text::timestamptz) m",
                    &[&QUEUE, &g.name(), &mode, &from],
                )
                .unwrap();
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

/// Draw the next step for `run`'s state.
pub fn draw(rng: &mut SmallRng, run: &Run<'_>, cfg: &Config, keys: u32) -> Step {
    let c = rng.random_range(0..cfg.conns);
    let in_tx = run.conns[c].tx.is_some();
    let roll = rng.random_range(0..1000);
    if !in_tx && roll < 350 {
        return Step::Begin(c);
    }
    if in_tx {
        let fresh = run.conns[c].tx.as_ref().is_some_and(|t| t.events.is_empty() && t.begin == usize::MAX);
        match roll {
            // Xids taken early: the case where a transaction's own xid sorts before others.
            _ if fresh && rng.random_bool(0.3) => return Step::TakeXid(c),
            0..=119 => return Step::Commit(c),
            120..=159 => return Step::Rollback(c),
            160..=179 => return Step::Savepoint(c),
            180..=194 => return Step::RollbackToSavepoint(c),
            _ => {}
        }
    }
    let op = rng.random_range(0..1000);
    match op {
        0..=299 => {
            let n = if rng.random_bool(0.6) { 1 } else { rng.random_range(2..=4) };
            let items = (0..n)
                .map(|_| Item {
                    partition: rng.random_range(0..PARTITIONS),
                    key: rng.random_bool(0.25).then(|| rng.random_range(0..keys)),
                })
                .collect();
            Step::Push { c, items, batch: n > 1 || rng.random_bool(0.3) }
        }
        300..=629 => {
            let group = match rng.random_range(0..100) {
                0..=29 => Grp::All,
                30..=54 => Grp::New,
                55..=69 => Grp::From,
                70..=89 => Grp::QueueMode,
                _ => Grp::Scratch,
            };
            Step::Pop {
                c,
                group,
                batch: if rng.random_bool(0.6) { rng.random_range(1..=3) } else { rng.random_range(1..=10) },
                partitions: rng.random_range(1..=3),
                partition: rng.random_bool(0.2).then(|| rng.random_range(0..PARTITIONS)),
                auto_ack: rng.random_bool(0.4),
                wait_ms: if rng.random_bool(0.1) { 30 } else { 0 },
            }
        }
        630..=869 => {
            let n = rng.random_range(1..=3);
            Step::Ack {
                c,
                pick: (0..n).map(|_| rng.random_range(0..5)).collect(),
                status: match rng.random_range(0..100) {
                    0..=69 => Status::Completed,
                    70..=81 => Status::Failed,
                    82..=91 => Status::Retry,
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
            }
        }
        870..=889 => Step::Renew { c, pick: rng.random_range(0..3) },
        890..=904 => Step::Seek { c, to_end: rng.random_bool(0.5) },
        905..=909 => Step::DeleteGroup(c),
        910..=949 => Step::Maintain(c),
        950..=964 => Step::Sleep(if rng.random_bool(0.5) { 1100 } else { 150 }),
        965..=979 => Step::Terminate(c),
        980..=989 if cfg.crash.is_some() => Step::Crash,
        _ => Step::Pop { c, group: Grp::All, batch: 2, partitions: 2, partition: None, auto_ack: false, wait_ms: 0 },
    }
}

/// First pops of one group on several connections at once, around commits: the opening of
/// half the schedules (a group is subscribed once, at the start, so random steps rarely race
/// there). Connection 0 subscribes in a transaction it keeps open; others push and subscribe
/// after it, some in transactions of their own.
fn first_pops(rng: &mut SmallRng, cfg: &Config) -> Vec<Step> {
    let group = [Grp::New, Grp::New, Grp::All, Grp::From, Grp::QueueMode][rng.random_range(0..5)];
    let pop = |c: usize, rng: &mut SmallRng| Step::Pop {
        c,
        group,
        batch: rng.random_range(1..=3),
        partitions: rng.random_range(1..=2),
        partition: None,
        auto_ack: rng.random_bool(0.5),
        wait_ms: 0,
    };
    let push = |c: usize, rng: &mut SmallRng| Step::Push {
        c,
        items: vec![Item { partition: rng.random_range(0..PARTITIONS), key: None }],
        batch: false,
    };
    let mut steps = vec![push(1 % cfg.conns, rng), Step::Begin(0), pop(0, rng)];
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
    let keys = (cfg.steps as u32 / 4).max(4);
    let mut schedule = Vec::with_capacity(cfg.steps);
    if rng.random_bool(0.5) {
        for step in first_pops(&mut rng, cfg) {
            run.run_step(&step);
            schedule.push(step);
        }
    }
    while schedule.len() < cfg.steps {
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

/// Run a given schedule on a fresh database.
pub fn replay(cfg: &Config, schedule: &[Step], name: &str) -> Outcome {
    let mut run = Run::new(cfg, name);
    for step in schedule {
        run.run_step(step);
    }
    let (outcome, run) = run.finish();
    run.drop_db();
    outcome
}

/// Remove steps while a violation of the same kind remains (delta debugging), for at most
/// `budget`. Returns the smallest schedule found.
pub fn shrink(cfg: &Config, schedule: Vec<Step>, kind: &str, budget: Duration) -> Vec<Step> {
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
            let outcome = replay(cfg, &candidate, &format!("shrink_{}_{n}", std::process::id()));
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

/// The schedule as lines, for a report (and `QUEEN_EXPLORE_SCHEDULE`).
pub fn print(schedule: &[Step]) -> String {
    schedule.iter().map(|s| s.to_string()).collect::<Vec<_>>().join("\n")
}

/// A schedule printed by `print` (lines starting with `#` are comments).
pub fn parse(text: &str) -> Vec<Step> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.parse().unwrap_or_else(|e| panic!("schedule line {l:?}: {e}")))
        .collect()
}
