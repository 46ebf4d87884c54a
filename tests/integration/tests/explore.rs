//! The randomized interleaving explorer (src/explore): seeded schedules over several real
//! connections, judged against the delivery guarantees.
//!
//! - In `make test`: a fixed set of seeds, on the preloaded cluster and on the one without
//!   preloading (a minute or two).
//! - `make explore`: fresh seeds for `QUEEN_EXPLORE_MINUTES` (default 10) on a cluster of its
//!   own, with crash rounds (kill -9 of the postmaster mid-schedule).
//!   `QUEEN_EXPLORE_SEED=n` replays one seed (`QUEEN_EXPLORE_STEPS`, `QUEEN_EXPLORE_CONNS` as
//!   printed), `QUEEN_EXPLORE_SCHEDULE=file` replays a schedule a failure printed.
//!
//! A failure prints the seed, the violations, and the schedule shrunk to the steps that still
//! show the violation (docs/development.md: reading and replaying a failure).

use queen_integration_tests::explore::{self, CitusNodes, Config, CrashCluster, Server};
use std::time::{Duration, Instant};

fn preloaded() -> Server {
    Server::preloaded()
}

fn not_preloaded() -> Server {
    Server::not_preloaded()
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Run one seed; on a violation, shrink the schedule and panic with the report.
fn check_seed(cfg: &Config, seed: u64, shrink_budget: Duration) -> (usize, usize) {
    let (outcome, schedule) = explore::explore_seed(cfg, seed);
    if outcome.violations.is_empty() {
        println!(
            "explorer: seed {seed}: {} steps, {} crash rounds, {} moves, {} restores, application role {} let through and {} refused, {} no-trace checks, side queues {} deletes and {} maintenance passes, {} lease acks of {} messages, {} dead letters filed, {} replayed and {} purged; deletes from another thread {} done and {} timed out with {} steps beside them, {} passes beside a delete of the timer queue, {} tenant steps, {} ties rounds ({} delivered), {} deadlocks through a transaction holding a finished delete",
            outcome.steps, outcome.crashes, outcome.moves, outcome.restores, outcome.app_allowed, outcome.app_refused, outcome.no_trace_checks,
            outcome.side_deletes, outcome.passes, outcome.lease_acks, outcome.lease_acked,
            outcome.dead_filed, outcome.replayed, outcome.purged,
            outcome.slow_deletes, outcome.slow_deletes_timed_out, outcome.steps_beside_deletes,
            outcome.passes_beside_timer_deletes, outcome.tenant_steps, outcome.ties, outcome.ties_delivered,
            outcome.deadlocks_across_deletes.len()
        );
        for d in &outcome.deadlocks_across_deletes {
            println!(
                "explorer: seed {seed}: a deadlock through a transaction holding a finished delete: {}",
                d.replace('\n', " ")
            );
        }
        return (outcome.steps, outcome.crashes);
    }
    fail(cfg, Some(seed), schedule, outcome.violations, shrink_budget, explore::scan_limit_of(seed))
}

fn fail(
    cfg: &Config,
    seed: Option<u64>,
    schedule: Vec<explore::Step>,
    violations: Vec<explore::Violation>,
    budget: Duration,
    scan_limit: i32,
) -> ! {
    let kind = violations[0].kind;
    let shrunk = explore::shrink(cfg, schedule.clone(), kind, budget, scan_limit);
    let file = std::env::temp_dir().join(format!("queen-explore-{}.schedule", seed.unwrap_or(0)));
    std::fs::write(&file, explore::print(&shrunk, scan_limit)).unwrap();
    let found: Vec<String> = violations.iter().map(|v| format!("  {}: {}", v.kind, v.detail)).collect();
    panic!(
        "explorer: {} violation(s){}:\n{}\n\nschedule shrunk from {} to {} steps ({}):\n{}\n\nreplay: QUEEN_EXPLORE_SCHEDULE={} make explore{}",
        violations.len(),
        seed.map(|s| format!(" with seed {s}")).unwrap_or_default(),
        found.join("\n"),
        schedule.len(),
        shrunk.len(),
        file.display(),
        explore::print(&shrunk, scan_limit),
        file.display(),
        seed.map(|s| format!("   (the whole run: QUEEN_EXPLORE_SEED={s} QUEEN_EXPLORE_STEPS={} QUEEN_EXPLORE_CONNS={} make explore)", cfg.steps, cfg.conns))
            .unwrap_or_default(),
    )
}

/// The seeds `make test` runs with preloading: (seed, connections, steps). Seed 1796080707008
/// (5 connections, 250 steps) opens with concurrent first pops of the 'new' group: it found
/// the strand that concurrent subscriptions caused (issue 8, item 3) when put back.
const SEEDS: [(u64, usize, usize); 5] = [(1, 4, 180), (2, 4, 180), (3, 4, 180), (4, 4, 180), (1796080707008, 5, 250)];

#[test]
fn fixed_seeds_with_preloading() {
    for (seed, conns, steps) in SEEDS {
        let cfg = Config { server: preloaded(), other: Some(not_preloaded()), conns, steps, crash: None, citus: None };
        check_seed(&cfg, seed, Duration::from_secs(120));
    }
}

#[test]
fn fixed_seeds_without_preloading() {
    let cfg =
        Config { server: not_preloaded(), other: Some(preloaded()), conns: 4, steps: 150, crash: None, citus: None };
    for seed in [11, 12] {
        check_seed(&cfg, seed, Duration::from_secs(120));
    }
}

/// Every schedule the explorer found a violation with on main, shrunk and kept in
/// tests/integration/schedules/, replays without one.
#[test]
fn schedules_that_found_bugs_pass() {
    let cfg =
        Config { server: preloaded(), other: Some(not_preloaded()), conns: 6, steps: 0, crash: None, citus: None };
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schedules");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty());
    for file in files {
        let (schedule, scan_limit) = explore::parse(&std::fs::read_to_string(&file).unwrap());
        let name =
            format!("regress_{}_{}", std::process::id(), file.file_stem().unwrap().to_string_lossy().replace('-', "_"));
        let outcome = explore::replay(&cfg, &schedule, &name, scan_limit);
        assert!(outcome.violations.is_empty(), "{}: {:?}", file.display(), outcome.violations);
    }
}

/// `make explore`: fresh seeds on a cluster of the explorer's own, with crash rounds.
#[test]
#[ignore]
fn explore() {
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    let scripts = repo.join("scripts");
    let port: u16 = env("QUEEN_TEST_PORT", 28816u16) + 7;
    let out = std::process::Command::new(scripts.join("state-dir")).arg("itest-explore-cluster").output().unwrap();
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let _ = std::process::Command::new(scripts.join("cluster")).args(["stop", &dir]).output();
    let _ = std::fs::remove_dir_all(format!("{dir}/data"));
    let started = std::process::Command::new(scripts.join("cluster"))
        .args(["start", &dir, &port.to_string(), "preload"])
        .output()
        .unwrap();
    assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
    // A second cluster of the explorer's own, without preloading: restore steps move runs there
    // and back (its transaction counter is not the first's).
    let out = std::process::Command::new(scripts.join("state-dir")).arg("itest-explore-other").output().unwrap();
    let other_dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let _ = std::process::Command::new(scripts.join("cluster")).args(["stop", &other_dir]).output();
    let _ = std::fs::remove_dir_all(format!("{other_dir}/data"));
    let started = std::process::Command::new(scripts.join("cluster"))
        .args(["start", &other_dir, &(port + 1).to_string(), "nopreload"])
        .output()
        .unwrap();
    assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
    let cfg = Config {
        server: Server { host: dir.clone(), port: port.to_string() },
        other: Some(Server { host: other_dir.clone(), port: (port + 1).to_string() }),
        conns: env("QUEEN_EXPLORE_CONNS", 5),
        steps: env("QUEEN_EXPLORE_STEPS", 250),
        crash: Some(CrashCluster { scripts: scripts.clone(), dir: dir.clone() }),
        citus: None,
    };
    explore_with(&cfg);
    let _ = std::process::Command::new(scripts.join("cluster")).args(["stop", &dir]).output();
    let _ = std::process::Command::new(scripts.join("cluster")).args(["stop", &other_dir]).output();
}

/// `make explore-citus`: fresh seeds through the coordinator of a Citus cluster of the
/// explorer's own (scripts/citus-cluster at QUEEN_CITUS_PORT, default 29240: a coordinator and
/// two workers), queen distributed over 4 shards in each run's database, with crash rounds that
/// stop a worker at once and move rounds that move a shard to the other worker.
#[test]
#[ignore]
fn explore_citus() {
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    let scripts = repo.join("scripts");
    let base: u16 = env("QUEEN_CITUS_PORT", 29240u16);
    let cluster = |args: &[&str]| {
        let out = std::process::Command::new(scripts.join("citus-cluster"))
            .args(args)
            .env("QUEEN_CITUS_PORT", base.to_string())
            .output()
            .unwrap();
        assert!(out.status.success(), "citus-cluster {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    cluster(&["start"]);
    let cfg = Config {
        server: Server { host: "127.0.0.1".into(), port: base.to_string() },
        other: None,
        conns: env("QUEEN_EXPLORE_CONNS", 5),
        steps: env("QUEEN_EXPLORE_STEPS", 250),
        crash: Some(CrashCluster { scripts: scripts.clone(), dir: String::new() }),
        citus: Some(CitusNodes { scripts: scripts.clone(), base }),
    };
    explore_with(&cfg);
    cluster(&["stop"]);
}

/// Replay `QUEEN_EXPLORE_SCHEDULE` or `QUEEN_EXPLORE_SEED`, or run fresh seeds for
/// `QUEEN_EXPLORE_MINUTES`.
fn explore_with(cfg: &Config) {
    let cfg = cfg.clone();
    let shrink = Duration::from_secs(env("QUEEN_EXPLORE_SHRINK_SECONDS", 600));
    if let Ok(file) = std::env::var("QUEEN_EXPLORE_SCHEDULE") {
        let (schedule, scan_limit) = explore::parse(&std::fs::read_to_string(&file).unwrap());
        let outcome = explore::replay(&cfg, &schedule, &format!("replay_{}", std::process::id()), scan_limit);
        if !outcome.violations.is_empty() {
            fail(&cfg, None, schedule, outcome.violations, shrink, scan_limit);
        }
        println!("explorer: the schedule of {file} ({} steps) passes", schedule.len());
        return;
    }
    if let Ok(seed) = std::env::var("QUEEN_EXPLORE_SEED") {
        let seed: u64 = seed.parse().unwrap();
        let (steps, crashes) = check_seed(&cfg, seed, shrink);
        println!("explorer: seed {seed} passes ({steps} steps, {crashes} crash rounds)");
        return;
    }
    let minutes: f64 = env("QUEEN_EXPLORE_MINUTES", 10.0);
    let deadline = Instant::now() + Duration::from_secs_f64(minutes * 60.0);
    let first: u64 = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() * 1000;
    let (mut seeds, mut steps, mut crashes) = (0u64, 0usize, 0usize);
    let t0 = Instant::now();
    if std::env::var("QUEEN_EXPLORE_KEEP_GOING").is_ok() {
        // For mutation runs (docs/development.md): every seed, failing or not, and per kind of
        // violation the first seed and time it showed, and how many seeds showed it.
        let mut found: std::collections::BTreeMap<&'static str, (u64, f64, u64, String)> = Default::default();
        while Instant::now() < deadline {
            let seed = first + seeds;
            let (outcome, _) = explore::explore_seed(&cfg, seed);
            seeds += 1;
            steps += outcome.steps;
            let mut kinds: Vec<&'static str> = outcome.violations.iter().map(|v| v.kind).collect();
            kinds.sort();
            kinds.dedup();
            for k in &kinds {
                let detail = outcome.violations.iter().find(|v| v.kind == *k).unwrap().detail.clone();
                let e = found.entry(k).or_insert((seeds, t0.elapsed().as_secs_f64(), 0, detail));
                e.2 += 1;
            }
            println!(
                "explorer: seed {seed} ({} steps, {} restores, {} deadlocks through a finished delete): {kinds:?}",
                outcome.steps,
                outcome.restores,
                outcome.deadlocks_across_deletes.len()
            );
        }
        println!(
            "explorer: keep-going run of {seeds} seeds, {steps} steps in {:.1} minutes",
            t0.elapsed().as_secs_f64() / 60.0
        );
        for (kind, (first_seed, at, n, detail)) in &found {
            println!("explorer:   {kind}: first in seed #{first_seed} after {at:.0} s, in {n} seeds; e.g. {detail}");
        }
        return;
    }
    while Instant::now() < deadline {
        let seed = first + seeds;
        let (s, c) = check_seed(&cfg, seed, shrink);
        seeds += 1;
        steps += s;
        crashes += c;
        println!("explorer: seed {seed} passes ({s} steps, {c} crash rounds; {seeds} seeds, {steps} steps, {crashes} crash rounds in {:.0} s)", t0.elapsed().as_secs_f64());
    }
    println!(
        "explorer: {seeds} seeds, {steps} steps, {crashes} crash rounds, 0 failures in {:.1} minutes",
        t0.elapsed().as_secs_f64() / 60.0
    );
}
