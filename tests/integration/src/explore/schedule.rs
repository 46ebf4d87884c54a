//! Steps of a schedule: what one connection does next, as the generator draws it and as a
//! failure report prints it (one line per step, parsed back for a replay).

use std::fmt;
use std::str::FromStr;

/// The consumer groups of an exploration. Each has a fixed subscription, as workers of one
/// group configured alike have:
/// - `All`, `From` (from a time before every push) and `QueueMode` see everything;
/// - `New` subscribes 'new' at the start of the run (often with first pops at once), `Late`
///   ('new' too) only once a third of the schedule has run, first pops held open among the
///   others' pushes, pops and commits;
/// - `Seeker` ('new') is sought to the end and to the present time, concurrently with its pops
///   and acks: what a seek skipped never comes back, and what began after it is delivered;
/// - `Scratch` is the group seek (to the start too) and delete_group play with (checked for
///   exclusive leases and errors, not for loss, which seeking back and deleting are).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Grp {
    All,
    New,
    From,
    QueueMode,
    Scratch,
    Late,
    Seeker,
}

impl Grp {
    pub const ALL: [Grp; 7] = [Grp::All, Grp::New, Grp::From, Grp::QueueMode, Grp::Scratch, Grp::Late, Grp::Seeker];

    /// The consumer_group argument.
    pub fn name(self) -> Option<&'static str> {
        match self {
            Grp::QueueMode => None,
            g => Some(g.tag()),
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Grp::All => "ga",
            Grp::New => "gn",
            Grp::From => "gf",
            Grp::QueueMode => "qm",
            Grp::Scratch => "gs",
            Grp::Late => "gl",
            Grp::Seeker => "gk",
        }
    }

    /// The pop arguments of the group's subscription: `subscription_mode`, `subscription_from`
    /// (a time before every push: `'from'` reads as `'all'` does, through its own code).
    pub fn subscription(self) -> (Option<&'static str>, Option<&'static str>) {
        match self {
            Grp::New | Grp::Late | Grp::Seeker => (Some("new"), None),
            Grp::From => (None, Some("2000-01-01 00:00:00+00")),
            _ => (None, None),
        }
    }

    /// Subscribed 'new': what it must see starts at its first pops (or its last seek).
    pub fn is_new(self) -> bool {
        matches!(self, Grp::New | Grp::Late | Grp::Seeker)
    }

    /// Groups whose every committed message (that they must see) must be finished at the end.
    pub fn checked(self) -> bool {
        self != Grp::Scratch
    }
}

impl FromStr for Grp {
    type Err = String;
    fn from_str(s: &str) -> Result<Grp, String> {
        Grp::ALL.into_iter().find(|g| g.tag() == s).ok_or_else(|| format!("no group {s}"))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Completed,
    Failed,
    Retry,
    Dlq,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Retry => "retry",
            Status::Dlq => "dlq",
        }
    }
}

/// Which lease an ack presents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseKind {
    /// The delivery's own.
    Good,
    /// Another delivery's of the same group (often an earlier, released one).
    Stale,
    /// Another group's.
    Foreign,
    /// None (not checked).
    Missing,
}

/// Where a seek goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeekTo {
    /// NULL: after everything stored.
    End,
    /// A time before every push: everything again (the scratch group only).
    Start,
    /// `clock_timestamp()`: a time, skipping what was created before it.
    Now,
}

impl SeekTo {
    fn as_str(self) -> &'static str {
        match self {
            SeekTo::End => "end",
            SeekTo::Start => "start",
            SeekTo::Now => "now",
        }
    }
}

/// What a grant step changes: a privilege of the explorer's application role on the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Privilege {
    Push,
    Pop,
}

impl Privilege {
    pub fn as_str(self) -> &'static str {
        match self {
            Privilege::Push => "push",
            Privilege::Pop => "pop",
        }
    }
}

/// One message of a push: its partition (0..PARTITIONS) and, if any, its transaction id
/// (`k{n}`; a key drawn twice is a duplicate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub partition: u8,
    pub key: Option<u32>,
}

/// The side queues (issue 21): `rc` with completed retention, `rr` with retention (by age),
/// `rm` with max wait, all after 1 s and with long leases, deleted (and configured again) and
/// their groups deleted mid-schedule.
pub const SIDE_QUEUES: [&str; 3] = ["rc", "rr", "rm"];
/// Groups of the side queues (a deleted group's next pop is a first pop again).
pub const SIDE_GROUPS: u8 = 2;
/// Partitions of the side queues.
pub const SIDE_PARTITIONS: u8 = 2;

/// What a step does on a side queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SideOp {
    Push(u8),
    /// A pop of group `group`: auto_ack (batch 10 over both partitions: a group that drains) or
    /// under a lease (batch 2).
    Pop {
        group: u8,
        auto: bool,
    },
    /// Ack (completed, or dlq) a side delivery under a lease, whichever connection received it
    /// (`pick` counted back from the latest), with its lease.
    Ack {
        pick: u32,
        dlq: bool,
    },
    /// queen_delete_queue, and queen_configure of it again, in one transaction.
    DeleteQueue,
    DeleteGroup(u8),
    /// A group's first pop held open (connection in no transaction): the group deleted
    /// (committed), then a transaction opened with its pop, which later steps commit or not.
    FirstPop(u8),
}

/// A key/value operation (queen_kv) on namespace `ek`: an increment of counter `c{n}`, a
/// claim (putIfAbsent) or a release (delete) of key `k{n}`. And the states built on key/value
/// rows and kept the same way (issue 24): a timer of key `t{n}` on queue `et` scheduled due now
/// or in an hour (queen_schedule), or cancelled; a permit of lock `el` (two slots) acquired,
/// or the connection's oldest permit released by its token (queen_lock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvOp {
    Incr(u8),
    Claim(u8),
    Release(u8),
    Schedule {
        key: u8,
        now: bool,
    },
    Cancel(u8),
    Acquire,
    Unlock,
    /// A timer on queue `eo` (`TIMER_OTHER`), due now, of a key of its own: what a
    /// `queen_maintain()` must fire whatever else is being deleted.
    ScheduleOther,
}

/// What a dead-letter step does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadOp {
    /// Replay every dead letter of the group.
    Replay,
    /// Replay the group's oldest dead letter, by its message id.
    ReplayOne,
    /// Purge the group's oldest dead letter, by its message id.
    PurgeOne,
}

impl DeadOp {
    pub fn as_str(self) -> &'static str {
        match self {
            DeadOp::Replay => "replay",
            DeadOp::ReplayOne => "replay_one",
            DeadOp::PurgeOne => "purge_one",
        }
    }
}

/// What a delete sent from another thread (`Step::DeleteSlow`) deletes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelTarget {
    /// The scratch group `gs` of the explored queue (`queen_delete_group`).
    Scratch,
    /// Side queue `.0` (`queen_delete_queue`, configured again in the same transaction).
    Side(u8),
    /// The timer queue `et` (`queen_delete_queue`): its pending timers go with it.
    Timers,
}

impl DelTarget {
    pub fn tag(self) -> &'static str {
        match self {
            DelTarget::Scratch => "gs",
            DelTarget::Side(q) => SIDE_QUEUES[q as usize],
            DelTarget::Timers => "et",
        }
    }
}

impl FromStr for DelTarget {
    type Err = String;
    fn from_str(s: &str) -> Result<DelTarget, String> {
        match s {
            "gs" => Ok(DelTarget::Scratch),
            "et" => Ok(DelTarget::Timers),
            s => SIDE_QUEUES
                .iter()
                .position(|q| *q == s)
                .map(|q| DelTarget::Side(q as u8))
                .ok_or_else(|| format!("no delete target {s}")),
        }
    }
}

/// What the tenant role does on its own queue `tq` (it holds `configure` and `pop` there and
/// nothing on the explored queue), under the explored queue's group names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TenantOp {
    Begin,
    Commit,
    Rollback,
    /// `queen_delete_group(<the group's name, NULL for queue mode>, 'tq')`.
    DeleteGroup(Grp),
    /// A message pushed into `tq` (by the run's observer, committed), then a pop of `tq` for
    /// the group under a lease.
    Pop(Grp),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Begin(usize),
    Commit(usize),
    /// COMMIT with `queen.debug_commit_delay_ms` set, sent from another thread: a commit that
    /// changed cached state sleeps once it is visible, before the caches learn of it, while the
    /// next steps run on other connections.
    CommitSlow(usize),
    Rollback(usize),
    Savepoint(usize),
    RollbackToSavepoint(usize),
    /// `SELECT pg_current_xact_id()`: the transaction takes its xid early.
    TakeXid(usize),
    Push {
        c: usize,
        items: Vec<Item>,
        batch: bool,
    },
    /// `n` keyless messages into one partition in one batch: a stretch of the queue log that
    /// pops by name (`partition =>`) consume, and other pops must read past; `consume`: then
    /// (the connection being in no transaction) a pop of that partition by name takes them all
    /// for that group, as a consumer of one partition does (issue 20, item 4).
    Fill {
        c: usize,
        partition: u8,
        n: u32,
        consume: Option<Grp>,
    },
    /// A pop; `rollback_empty`: in a transaction of its own (the connection being in none),
    /// rolled back when it returned nothing and committed otherwise — a common worker loop.
    Pop {
        c: usize,
        group: Grp,
        batch: i32,
        partitions: i32,
        partition: Option<u8>,
        auto_ack: bool,
        wait_ms: i32,
        rollback_empty: bool,
    },
    /// Ack deliveries this connection received (`pick`: positions counted back from its
    /// latest delivery), each with its lease or another, with or without `consumer_group`;
    /// `effect`: the business write of each completion, in the same transaction.
    Ack {
        c: usize,
        pick: Vec<u32>,
        status: Status,
        lease: LeaseKind,
        batch: bool,
        group_arg: bool,
        effect: bool,
        /// A batch's entries name their messages by partition and transaction id (Queen's
        /// clients' shape, which the gateway passes on), not by message id.
        by_transaction: bool,
    },
    /// `queen_ack_lease` of the lease of a delivery this connection received (`pick`, as
    /// Renew's); `effect`: the business write of each completion, in the same transaction.
    AckLease {
        c: usize,
        pick: u32,
        status: Status,
        effect: bool,
    },
    Renew {
        c: usize,
        pick: u32,
    },
    Seek {
        c: usize,
        group: Grp,
        to: SeekTo,
    },
    DeleteGroup(usize),
    /// `queen_replay_dead_letters` or `queen_purge_dead_letters` of a group's dead letters on
    /// the queue: all of them, or the oldest one's by its message id.
    DeadLetters {
        c: usize,
        group: Grp,
        op: DeadOp,
    },
    Maintain(usize),
    /// `queen_grant` (or `queen_revoke`) of a privilege on the queue to the application role.
    Grant {
        c: usize,
        privilege: Privilege,
        grant: bool,
    },
    /// Let time pass (past a 1 s lease, a retry delay).
    Sleep(u32),
    /// pg_terminate_backend of a connection, mid-transaction or not.
    Terminate(usize),
    /// kill -9 of the postmaster, restart (long mode only). On Citus: a worker stopped at once
    /// (`-m immediate`) and started again, Citus's recovery of prepared transactions run.
    Crash,
    /// On Citus: a shard of queen's tables moved to the other worker (by logical replication or
    /// blocking writes, in turn), the worker it leaves made to run ahead. Open transactions
    /// never happened (their connections are closed first), as in a crash.
    Move,
    /// pg_dump of the database (what is committed), restored with pg_restore --data-only into
    /// a database of the other cluster — its transaction counter behind this one's, or ahead —
    /// where the run's connections were opened (and had called queen) before the data arrived;
    /// the schedule goes on there. Open transactions never happened.
    Restore {
        ahead: bool,
    },
    /// A step on side queue `q` (`SIDE_QUEUES`).
    Kv {
        c: usize,
        op: KvOp,
    },
    Side {
        c: usize,
        q: u8,
        op: SideOp,
    },
    /// A delete sent from another thread in the connection's transaction (opened if there is
    /// none), with `queen.lock_wait_seconds` low, while the next steps run on other
    /// connections; it lands at the connection's next step (and stays open until its commit):
    /// success or 55P03, never 40P01, within its bound.
    DeleteSlow {
        c: usize,
        target: DelTarget,
    },
    /// A step of the tenant role's connection (one beyond the run's `conns`).
    Tenant(TenantOp),
    /// Ties at scale on queue `ew`, in autocommit: 128 messages over 64 partitions pushed in
    /// one transaction (equal due times), then pops of group `gw` with `partitions => 8,
    /// batch => 32`, each lease acked by `queen_ack_lease`: every message delivered once.
    Ties(usize),
}

impl Step {
    /// The connection the step runs on, if one.
    pub fn conn(&self) -> Option<usize> {
        match self {
            Step::Begin(c)
            | Step::Commit(c)
            | Step::CommitSlow(c)
            | Step::Rollback(c)
            | Step::Savepoint(c)
            | Step::RollbackToSavepoint(c)
            | Step::TakeXid(c)
            | Step::DeleteGroup(c)
            | Step::Ties(c)
            | Step::Maintain(c) => Some(*c),
            Step::Push { c, .. }
            | Step::Fill { c, .. }
            | Step::Pop { c, .. }
            | Step::Ack { c, .. }
            | Step::Renew { c, .. }
            | Step::AckLease { c, .. }
            | Step::Seek { c, .. }
            | Step::DeadLetters { c, .. }
            | Step::Grant { c, .. }
            | Step::Side { c, .. }
            | Step::DeleteSlow { c, .. }
            | Step::Kv { c, .. } => Some(*c),
            // (The tenant's connection is the run's last: Run::tenant.)
            Step::Sleep(_) | Step::Terminate(_) | Step::Crash | Step::Move | Step::Restore { .. } | Step::Tenant(_) => {
                None
            }
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Begin(c) => write!(f, "{c} begin"),
            Step::Commit(c) => write!(f, "{c} commit"),
            Step::CommitSlow(c) => write!(f, "{c} commit_slow"),
            Step::Rollback(c) => write!(f, "{c} rollback"),
            Step::Savepoint(c) => write!(f, "{c} savepoint"),
            Step::RollbackToSavepoint(c) => write!(f, "{c} rollback_to_savepoint"),
            Step::TakeXid(c) => write!(f, "{c} take_xid"),
            Step::Push { c, items, batch } => {
                let items: Vec<String> = items
                    .iter()
                    .map(|i| match i.key {
                        Some(k) => format!("p{}+k{k}", i.partition),
                        None => format!("p{}", i.partition),
                    })
                    .collect();
                write!(f, "{c} push {} {}", if *batch { "batch" } else { "one" }, items.join(","))
            }
            Step::Fill { c, partition, n, consume } => {
                write!(f, "{c} fill p{partition} {n}")?;
                if let Some(g) = consume {
                    write!(f, " {}", g.tag())?;
                }
                Ok(())
            }
            Step::Pop { c, group, batch, partitions, partition, auto_ack, wait_ms, rollback_empty } => {
                write!(f, "{c} pop {} b{batch} n{partitions} w{wait_ms}", group.tag())?;
                if let Some(p) = partition {
                    write!(f, " p{p}")?;
                }
                if *auto_ack {
                    write!(f, " auto")?;
                }
                if *rollback_empty {
                    write!(f, " rbe")?;
                }
                Ok(())
            }
            Step::Ack { c, pick, status, lease, batch, group_arg, effect, by_transaction } => {
                let pick: Vec<String> = pick.iter().map(u32::to_string).collect();
                write!(
                    f,
                    "{c} ack {} {} {:?} {}{}{}{}",
                    pick.join(","),
                    status.as_str(),
                    lease,
                    if *batch { "batch" } else { "one" },
                    if *group_arg { " group" } else { "" },
                    if *effect { " effect" } else { "" },
                    if *by_transaction { " tid" } else { "" }
                )
            }
            Step::Renew { c, pick } => write!(f, "{c} renew {pick}"),
            Step::AckLease { c, pick, status, effect } => {
                write!(f, "{c} ack_lease {pick} {}{}", status.as_str(), if *effect { " effect" } else { "" })
            }
            Step::Seek { c, group, to } => write!(f, "{c} seek {} {}", group.tag(), to.as_str()),
            Step::DeleteGroup(c) => write!(f, "{c} delete_group"),
            Step::DeadLetters { c, group, op } => write!(f, "{c} dead {} {}", group.tag(), op.as_str()),
            Step::Maintain(c) => write!(f, "{c} maintain"),
            Step::Grant { c, privilege, grant } => {
                write!(f, "{c} {} {}", if *grant { "grant" } else { "revoke" }, privilege.as_str())
            }
            Step::Sleep(ms) => write!(f, "sleep {ms}"),
            Step::Terminate(c) => write!(f, "terminate {c}"),
            Step::Crash => write!(f, "crash"),
            Step::Move => write!(f, "move"),
            Step::Restore { ahead } => write!(f, "restore {}", if *ahead { "ahead" } else { "behind" }),
            Step::Kv { c, op } => match op {
                KvOp::Incr(n) => write!(f, "{c} kv incr {n}"),
                KvOp::Claim(n) => write!(f, "{c} kv claim {n}"),
                KvOp::Release(n) => write!(f, "{c} kv release {n}"),
                KvOp::Schedule { key, now } => {
                    write!(f, "{c} kv schedule {key} {}", if *now { "now" } else { "later" })
                }
                KvOp::Cancel(n) => write!(f, "{c} kv cancel {n}"),
                KvOp::Acquire => write!(f, "{c} kv acquire 0"),
                KvOp::Unlock => write!(f, "{c} kv unlock 0"),
                KvOp::ScheduleOther => write!(f, "{c} kv schedule_other 0"),
            },
            Step::DeleteSlow { c, target } => write!(f, "{c} delete_slow {}", target.tag()),
            Step::Ties(c) => write!(f, "{c} ties"),
            Step::Tenant(op) => match op {
                TenantOp::Begin => write!(f, "tenant begin"),
                TenantOp::Commit => write!(f, "tenant commit"),
                TenantOp::Rollback => write!(f, "tenant rollback"),
                TenantOp::DeleteGroup(g) => write!(f, "tenant delete_group {}", g.tag()),
                TenantOp::Pop(g) => write!(f, "tenant pop {}", g.tag()),
            },
            Step::Side { c, q, op } => {
                write!(f, "{c} side {} ", SIDE_QUEUES[*q as usize])?;
                match op {
                    SideOp::Push(p) => write!(f, "push p{p}"),
                    SideOp::Pop { group, auto } => write!(f, "pop g{group}{}", if *auto { " auto" } else { "" }),
                    SideOp::Ack { pick, dlq } => write!(f, "ack {pick}{}", if *dlq { " dlq" } else { "" }),
                    SideOp::DeleteQueue => write!(f, "delete_queue"),
                    SideOp::DeleteGroup(g) => write!(f, "delete_group g{g}"),
                    SideOp::FirstPop(g) => write!(f, "first_pop g{g}"),
                }
            }
        }
    }
}

fn status(s: &str) -> Result<Status, String> {
    match s {
        "completed" => Ok(Status::Completed),
        "failed" => Ok(Status::Failed),
        "retry" => Ok(Status::Retry),
        "dlq" => Ok(Status::Dlq),
        s => Err(format!("no status {s}")),
    }
}

fn num<T: FromStr>(s: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("not a number: {s}"))
}

impl FromStr for Step {
    type Err = String;
    fn from_str(line: &str) -> Result<Step, String> {
        let w: Vec<&str> = line.split_whitespace().collect();
        let at = |i: usize| w.get(i).copied().ok_or_else(|| format!("short step: {line}"));
        match w.first().copied() {
            Some("sleep") => return Ok(Step::Sleep(num(at(1)?)?)),
            Some("terminate") => return Ok(Step::Terminate(num(at(1)?)?)),
            Some("crash") => return Ok(Step::Crash),
            Some("move") => return Ok(Step::Move),
            Some("restore") => return Ok(Step::Restore { ahead: at(1)? == "ahead" }),
            Some("tenant") => {
                return Ok(Step::Tenant(match at(1)? {
                    "begin" => TenantOp::Begin,
                    "commit" => TenantOp::Commit,
                    "rollback" => TenantOp::Rollback,
                    "delete_group" => TenantOp::DeleteGroup(at(2)?.parse()?),
                    "pop" => TenantOp::Pop(at(2)?.parse()?),
                    s => return Err(format!("no tenant step {s}")),
                }))
            }
            _ => {}
        }
        let c: usize = num(at(0)?)?;
        let has = |flag: &str| w.iter().skip(2).any(|x| *x == flag);
        let privilege = |s: &str| match s {
            "push" => Ok(Privilege::Push),
            "pop" => Ok(Privilege::Pop),
            s => Err(format!("no privilege {s}")),
        };
        Ok(match at(1)? {
            "begin" => Step::Begin(c),
            "commit" => Step::Commit(c),
            "commit_slow" => Step::CommitSlow(c),
            "rollback" => Step::Rollback(c),
            "savepoint" => Step::Savepoint(c),
            "rollback_to_savepoint" => Step::RollbackToSavepoint(c),
            "take_xid" => Step::TakeXid(c),
            "push" => {
                let items = at(3)?
                    .split(',')
                    .map(|i| {
                        let (p, k) = match i.split_once('+') {
                            Some((p, k)) => (p, Some(num::<u32>(k.trim_start_matches('k'))?)),
                            None => (i, None),
                        };
                        Ok(Item { partition: num(p.trim_start_matches('p'))?, key: k })
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                Step::Push { c, items, batch: at(2)? == "batch" }
            }
            "fill" => Step::Fill {
                c,
                partition: num(at(2)?.trim_start_matches('p'))?,
                n: num(at(3)?)?,
                consume: w.get(4).map(|g| g.parse()).transpose()?,
            },
            "pop" => {
                let field = |prefix: char| w.iter().skip(3).find(|x| x.starts_with(prefix)).map(|x| &x[1..]);
                Step::Pop {
                    c,
                    group: at(2)?.parse()?,
                    batch: num(field('b').ok_or("no batch")?)?,
                    partitions: num(field('n').ok_or("no partitions")?)?,
                    wait_ms: num(field('w').ok_or("no wait")?)?,
                    partition: field('p').map(num).transpose()?,
                    auto_ack: has("auto"),
                    rollback_empty: has("rbe"),
                }
            }
            "ack" => Step::Ack {
                c,
                pick: at(2)?.split(',').map(num).collect::<Result<_, _>>()?,
                status: status(at(3)?)?,
                lease: match at(4)? {
                    "Good" => LeaseKind::Good,
                    "Stale" => LeaseKind::Stale,
                    "Foreign" => LeaseKind::Foreign,
                    "Missing" => LeaseKind::Missing,
                    s => return Err(format!("no lease kind {s}")),
                },
                batch: at(5)? == "batch",
                group_arg: has("group"),
                effect: has("effect"),
                by_transaction: has("tid"),
            },
            "renew" => Step::Renew { c, pick: num(at(2)?)? },
            "ack_lease" => Step::AckLease { c, pick: num(at(2)?)?, status: status(at(3)?)?, effect: has("effect") },
            "seek" => match at(2)? {
                // (Schedules before issue 20: the scratch group, to the end or the start.)
                "end" => Step::Seek { c, group: Grp::Scratch, to: SeekTo::End },
                "start" => Step::Seek { c, group: Grp::Scratch, to: SeekTo::Start },
                g => Step::Seek {
                    c,
                    group: g.parse()?,
                    to: match at(3)? {
                        "end" => SeekTo::End,
                        "start" => SeekTo::Start,
                        "now" => SeekTo::Now,
                        s => return Err(format!("no seek target {s}")),
                    },
                },
            },
            "delete_group" => Step::DeleteGroup(c),
            "delete_slow" => Step::DeleteSlow { c, target: at(2)?.parse()? },
            "ties" => Step::Ties(c),
            "dead" => Step::DeadLetters {
                c,
                group: at(2)?.parse()?,
                op: match at(3)? {
                    "replay" => DeadOp::Replay,
                    "replay_one" => DeadOp::ReplayOne,
                    "purge_one" => DeadOp::PurgeOne,
                    s => return Err(format!("no dead-letter operation {s}")),
                },
            },
            "kv" => {
                let n = num(at(3)?)?;
                let op = match at(2)? {
                    "incr" => KvOp::Incr(n),
                    "claim" => KvOp::Claim(n),
                    "release" => KvOp::Release(n),
                    "schedule" => KvOp::Schedule { key: n, now: at(4)? == "now" },
                    "cancel" => KvOp::Cancel(n),
                    "acquire" => KvOp::Acquire,
                    "unlock" => KvOp::Unlock,
                    "schedule_other" => KvOp::ScheduleOther,
                    other => return Err(format!("no kv operation {other}: {line}")),
                };
                Step::Kv { c, op }
            }
            "side" => {
                let name = at(2)?;
                let q =
                    SIDE_QUEUES.iter().position(|n| *n == name).ok_or_else(|| format!("no side queue: {line}"))? as u8;
                let g = |s: &str| num::<u8>(s.trim_start_matches('g'));
                let op = match at(3)? {
                    "push" => SideOp::Push(num(at(4)?.trim_start_matches('p'))?),
                    "pop" => SideOp::Pop { group: g(at(4)?)?, auto: w.get(5) == Some(&"auto") },
                    "ack" => SideOp::Ack { pick: num(at(4)?)?, dlq: w.get(5) == Some(&"dlq") },
                    "delete_queue" => SideOp::DeleteQueue,
                    "delete_group" => SideOp::DeleteGroup(g(at(4)?)?),
                    "first_pop" => SideOp::FirstPop(g(at(4)?)?),
                    s => return Err(format!("no side step {s}")),
                };
                Step::Side { c, q, op }
            }
            "maintain" => Step::Maintain(c),
            "grant" => Step::Grant { c, privilege: privilege(at(2)?)?, grant: true },
            "revoke" => Step::Grant { c, privilege: privilege(at(2)?)?, grant: false },
            other => return Err(format!("no step {other}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_print_and_parse_back() {
        let steps = [
            Step::Side { c: 1, q: 0, op: SideOp::Push(1) },
            Step::Kv { c: 2, op: KvOp::Incr(1) },
            Step::Kv { c: 0, op: KvOp::Claim(0) },
            Step::Kv { c: 1, op: KvOp::Release(2) },
            Step::Kv { c: 1, op: KvOp::Schedule { key: 2, now: true } },
            Step::Kv { c: 3, op: KvOp::Schedule { key: 0, now: false } },
            Step::Kv { c: 0, op: KvOp::Cancel(1) },
            Step::Kv { c: 2, op: KvOp::Acquire },
            Step::Kv { c: 2, op: KvOp::Unlock },
            Step::Kv { c: 1, op: KvOp::ScheduleOther },
            Step::DeleteSlow { c: 1, target: DelTarget::Scratch },
            Step::DeleteSlow { c: 2, target: DelTarget::Side(2) },
            Step::DeleteSlow { c: 0, target: DelTarget::Timers },
            Step::Tenant(TenantOp::Begin),
            Step::Tenant(TenantOp::Commit),
            Step::Tenant(TenantOp::Rollback),
            Step::Tenant(TenantOp::DeleteGroup(Grp::QueueMode)),
            Step::Tenant(TenantOp::DeleteGroup(Grp::New)),
            Step::Tenant(TenantOp::Pop(Grp::Scratch)),
            Step::Ties(3),
            Step::Side { c: 2, q: 1, op: SideOp::Pop { group: 2, auto: true } },
            Step::Side { c: 2, q: 1, op: SideOp::Pop { group: 0, auto: false } },
            Step::Side { c: 0, q: 0, op: SideOp::Ack { pick: 1, dlq: true } },
            Step::Side { c: 0, q: 1, op: SideOp::DeleteQueue },
            Step::Side { c: 3, q: 0, op: SideOp::DeleteGroup(1) },
            Step::Side { c: 1, q: 2, op: SideOp::FirstPop(2) },
            Step::Begin(2),
            Step::TakeXid(1),
            Step::Push {
                c: 0,
                items: vec![Item { partition: 1, key: Some(7) }, Item { partition: 2, key: None }],
                batch: true,
            },
            Step::Fill { c: 1, partition: 2, n: 40, consume: None },
            Step::Fill { c: 1, partition: 0, n: 25, consume: Some(Grp::From) },
            Step::Pop {
                c: 1,
                group: Grp::New,
                batch: 3,
                partitions: 2,
                partition: Some(1),
                auto_ack: true,
                wait_ms: 50,
                rollback_empty: false,
            },
            Step::Pop {
                c: 1,
                group: Grp::QueueMode,
                batch: 1,
                partitions: 1,
                partition: None,
                auto_ack: false,
                wait_ms: 0,
                rollback_empty: true,
            },
            Step::Ack {
                c: 0,
                pick: vec![0, 2],
                status: Status::Retry,
                lease: LeaseKind::Foreign,
                batch: true,
                group_arg: true,
                effect: false,
                by_transaction: true,
            },
            Step::Renew { c: 3, pick: 1 },
            Step::AckLease { c: 2, pick: 0, status: Status::Failed, effect: true },
            Step::AckLease { c: 1, pick: 2, status: Status::Dlq, effect: false },
            Step::Seek { c: 0, group: Grp::Scratch, to: SeekTo::Start },
            Step::DeadLetters { c: 1, group: Grp::QueueMode, op: DeadOp::Replay },
            Step::DeadLetters { c: 2, group: Grp::All, op: DeadOp::ReplayOne },
            Step::DeadLetters { c: 0, group: Grp::Scratch, op: DeadOp::PurgeOne },
            Step::Seek { c: 2, group: Grp::Seeker, to: SeekTo::Now },
            Step::CommitSlow(3),
            Step::Grant { c: 1, privilege: Privilege::Push, grant: false },
            Step::Grant { c: 1, privilege: Privilege::Pop, grant: true },
            Step::Sleep(1100),
            Step::Terminate(2),
            Step::Crash,
            Step::Move,
            Step::Restore { ahead: true },
            Step::Restore { ahead: false },
        ];
        for s in steps {
            assert_eq!(s.to_string().parse::<Step>().unwrap(), s, "{s}");
        }
        // Schedules written before issue 20.
        assert_eq!("1 seek end".parse::<Step>().unwrap(), Step::Seek { c: 1, group: Grp::Scratch, to: SeekTo::End });
    }
}
