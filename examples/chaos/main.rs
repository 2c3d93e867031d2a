//! Chaos: several haip instances sharing sessions through Redis, clients
//! making calls of every kind through connection drops, instance kills, a
//! graceful handover and a Redis restart, and a checker that judges what
//! they saw.
//!
//! A measurement helper for `bench/chaos.sh` and the `cluster_chaos` test,
//! not an example of using `haip`.
//!
//! ```text
//! chaos run --dir DIR --seconds N --clients N [--quickstart PATH]
//!           [--redis-server PATH] [--seed S] [--drain SECS] [--same-id]
//! chaos check --dir DIR
//! ```
//!
//! `bash bench/chaos.sh` builds it and the quickstart in release mode, runs
//! both halves and writes the result into `RELIABILITY.md`. By hand (the
//! quickstart is found beside this binary):
//!
//! ```text
//! cargo build --release -p haip-examples --example quickstart --example chaos
//! target/release/examples/chaos run --dir target/chaos --seconds 60 --clients 6
//! target/release/examples/chaos check --dir target/chaos
//! ```
//!
//! # `run`
//!
//! Starts its own `redis-server` on a free 127.0.0.1 port (directory
//! `DIR/redis`; no snapshots, append-only file on with `appendfsync
//! everysec`, so a graceful restart keeps every record), three quickstart
//! instances `i1`, `i2`, `i3` (each on its own free loopback port, sharing
//! sessions through that Redis), and N clients, half WebSocket, half SSE.
//! Each client keeps one session and loops making calls, up to four at once:
//! quick (`echo`), slow with progress (`process_file`), cancelled
//! (`process_file`, `TOOL_CANCEL` after its first `TOOL_UPDATE`), and asking
//! (`book_table`, its question answered with `TOOL_INPUT`). See `client.rs`.
//!
//! The chaos, at seeded random times:
//!
//! - every client drops its connection abruptly every 3 to 10 s and resumes
//!   on a random instance;
//! - instances are killed with SIGKILL and restarted after a short delay on
//!   the same port under a new id (`i2-r1`, `i2-r2`, …: an id names one
//!   process's lease; `--same-id` restarts under the old id instead); the
//!   clients connected to a killed instance resume at once on another one;
//! - once (at least), a graceful handover: SIGTERM, the instance hands its
//!   sessions over and exits, its clients resume elsewhere, then it is
//!   restarted;
//! - once, Redis is stopped (SIGTERM) and started again on the same port.
//!
//! The first three events are one of each kind, in a random order, so a
//! short run sees them all. After `--seconds` the clients make no new calls
//! and drop no more connections; they wait up to `--drain` seconds (90) for
//! every outstanding call's `TOOL_DONE`, resuming as needed. Only 127.0.0.1
//! is used; every child process is killed on exit, error, panic, Ctrl-C or
//! SIGTERM.
//!
//! The history goes to `DIR`: `client-NN.jsonl` per client (connections,
//! envelopes received, calls sent, resumption outcomes) and `events.jsonl`
//! (kills, restarts, handovers, the Redis restart); the instances' and
//! Redis's logs beside them. The format is described in
//! `haip_examples::chaos_check`.
//!
//! # `check`
//!
//! Judges a history (see `haip_examples::chaos_check` for the rules and the
//! accepted causes of `RESUME_FAILED`), prints the report, writes it as JSON
//! to `DIR/report.json`, and exits with status 1 when there is any
//! violation (2 when the history cannot be read).

mod client;
mod wire;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use client::{Client, Instance, Shared};
use wire::{Recorder, Rng, Transport};

/// How long an instance or Redis may take to come up.
const READY: Duration = Duration::from_secs(30);
/// How long a process stopped with SIGTERM may take to exit.
const EXIT: Duration = Duration::from_secs(30);

struct RunArgs {
    dir: PathBuf,
    seconds: u64,
    clients: usize,
    quickstart: Option<PathBuf>,
    redis_server: Option<PathBuf>,
    seed: u64,
    drain: u64,
    same_id: bool,
}

fn usage() -> &'static str {
    "usage: chaos run --dir DIR --seconds N --clients N [--quickstart PATH] \
     [--redis-server PATH] [--seed S] [--drain SECS] [--same-id]\n       chaos check --dir DIR"
}

fn parse_number(flag: &str, value: &str, lo: u64, hi: u64) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(format!("{flag} {value}: a whole number from {lo} to {hi}")),
    }
}

fn parse_run(args: &[String]) -> Result<RunArgs, String> {
    let mut run = RunArgs {
        dir: PathBuf::new(),
        seconds: 0,
        clients: 0,
        quickstart: None,
        redis_server: None,
        seed: 1,
        drain: 90,
        same_id: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--same-id" {
            run.same_id = true;
            continue;
        }
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--dir" => run.dir = PathBuf::from(value),
            "--seconds" => run.seconds = parse_number(flag, value, 5, 86_400)?,
            "--clients" => run.clients = parse_number(flag, value, 1, 64)? as usize,
            "--quickstart" => run.quickstart = Some(PathBuf::from(value)),
            "--redis-server" => run.redis_server = Some(PathBuf::from(value)),
            "--seed" => run.seed = parse_number(flag, value, 0, u64::MAX)?,
            "--drain" => run.drain = parse_number(flag, value, 1, 600)?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if run.dir.as_os_str().is_empty() || run.seconds == 0 || run.clients == 0 {
        return Err("--dir, --seconds and --clients are required".to_owned());
    }
    Ok(run)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => match parse_run(&args[1..]) {
            Ok(run) => {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build();
                match runtime {
                    Ok(runtime) => match runtime.block_on(run_chaos(run)) {
                        Ok(()) => ExitCode::SUCCESS,
                        Err(e) => {
                            eprintln!("chaos run: {e}");
                            ExitCode::from(2)
                        }
                    },
                    Err(e) => {
                        eprintln!("chaos run: no runtime: {e}");
                        ExitCode::from(2)
                    }
                }
            }
            Err(e) => {
                eprintln!("chaos run: {e}\n{}", usage());
                ExitCode::from(2)
            }
        },
        Some("check") => match args.get(1..) {
            Some([flag, dir]) if flag == "--dir" => check(Path::new(dir)),
            _ => {
                eprintln!("{}", usage());
                ExitCode::from(2)
            }
        },
        _ => {
            eprintln!("{}", usage());
            ExitCode::from(2)
        }
    }
}

fn check(dir: &Path) -> ExitCode {
    let report = match haip_examples::chaos_check::check_dir(dir) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("chaos check: {e}");
            return ExitCode::from(2);
        }
    };
    print!("{}", report.render());
    let path = dir.join("report.json");
    let text = serde_json::to_string_pretty(&report.to_json()).unwrap_or_default();
    if let Err(e) = std::fs::write(&path, text + "\n") {
        eprintln!("chaos check: cannot write {}: {e}", path.display());
        return ExitCode::from(2);
    }
    if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Every child process; all killed when this is dropped or [`Procs::kill_all`] runs.
#[derive(Default)]
struct Procs {
    redis: Option<Child>,
    instances: Vec<Option<Child>>,
}

impl Procs {
    fn kill_all(&mut self) {
        for child in self.instances.iter_mut().chain([&mut self.redis]) {
            if let Some(mut child) = child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// Kills every child when the run ends, however it ends.
struct Guard(Arc<Mutex<Procs>>);

impl Drop for Guard {
    fn drop(&mut self) {
        lock(&self.0).kill_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A free loopback port (bound, then released).
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

fn runs(binary: &Path) -> bool {
    Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `--redis-server`, `$HAIP_REDIS_SERVER`, on `PATH`, or in `/usr/bin` or
/// `/usr/sbin`.
fn find_redis(given: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(path) = given.or_else(|| std::env::var_os("HAIP_REDIS_SERVER").map(PathBuf::from)) {
        return if runs(&path) {
            Ok(path)
        } else {
            Err(format!(
                "{} does not run (`--version` failed)",
                path.display()
            ))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file() && runs(candidate))
        .ok_or_else(|| {
            "redis-server is needed (Debian: apt-get install redis-server), on PATH or given \
             with --redis-server"
                .to_owned()
        })
}

/// `--quickstart`, else the `quickstart` example beside this binary.
fn find_quickstart(given: Option<PathBuf>) -> Result<PathBuf, String> {
    let path = match given {
        Some(path) => path,
        None => std::env::current_exe()
            .map_err(|e| format!("no path for this binary: {e}"))?
            .with_file_name("quickstart"),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "no quickstart at {} (build it: cargo build -p haip-examples --example quickstart, \
             or give --quickstart)",
            path.display()
        ))
    }
}

/// The orchestrator: starts and stops processes, writes `events.jsonl`.
struct Orchestra {
    dir: PathBuf,
    quickstart: PathBuf,
    redis_server: PathBuf,
    redis_port: u16,
    procs: Arc<Mutex<Procs>>,
    shared: Arc<Shared>,
    events: Recorder,
    /// Per slot: its port and how many times it was restarted.
    slots: Vec<(u16, u32)>,
    same_id: bool,
}

impl Orchestra {
    fn event(&mut self, what: &str, instance: Option<&str>, detail: &str) {
        let at = self.shared.ms();
        self.events
            .write(&json!({"t": "event", "at_ms": at, "what": what,
            "instance": instance, "detail": detail}));
        self.events.flush();
        eprintln!(
            "chaos: {:>7.1} s {what} {} {detail}",
            at / 1000.0,
            instance.unwrap_or("")
        );
    }

    fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.redis_port)
    }

    async fn start_redis(&mut self) -> Result<(), String> {
        let dir = self.dir.join("redis");
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let child = Command::new(&self.redis_server)
            .arg("--port")
            .arg(self.redis_port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "yes"])
            .args(["--appendfsync", "everysec", "--daemonize", "no"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.redis_server.display()))?;
        lock(&self.procs).redis = Some(child);
        let deadline = Instant::now() + READY;
        loop {
            if redis_ping(self.redis_port).await {
                return Ok(());
            }
            let exited = lock(&self.procs)
                .redis
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                return Err(format!(
                    "redis-server exited ({status}); see {}",
                    self.dir.join("redis.log").display()
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!("redis-server did not answer PING within {READY:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn instance_id(&self, slot: usize) -> String {
        let (_, restarts) = self.slots[slot];
        if restarts == 0 || self.same_id {
            format!("i{}", slot + 1)
        } else {
            format!("i{}-r{restarts}", slot + 1)
        }
    }

    /// Starts the instance of `slot` and waits until `/health` names it.
    async fn start_instance(&mut self, slot: usize) -> Result<(), String> {
        let id = self.instance_id(slot);
        let port = self.slots[slot].0;
        let addr = format!("127.0.0.1:{port}");
        let log_path = self.dir.join(format!("{id}.log"));
        let log = std::fs::File::create(&log_path)
            .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        let child = Command::new(&self.quickstart)
            .env("HAIP_ADDR", &addr)
            .env("HAIP_REDIS_URL", self.redis_url())
            .env("HAIP_INSTANCE_ID", &id)
            .env(
                "HAIP_LOG",
                std::env::var("CHAOS_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env_remove("HAIP_JWT_SECRET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.quickstart.display()))?;
        {
            let mut procs = lock(&self.procs);
            if procs.instances.len() <= slot {
                procs.instances.resize_with(slot + 1, || None);
            }
            procs.instances[slot] = Some(child);
        }
        let deadline = Instant::now() + READY;
        while !wire::healthy(&addr, &id).await {
            let exited = lock(&self.procs).instances[slot]
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                return Err(format!(
                    "instance {id} exited ({status}); see {}",
                    log_path.display()
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!("instance {id} did not come up within {READY:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut instances = lock(&self.shared.instances);
        let entry = Instance { id, addr, up: true };
        if instances.len() <= slot {
            instances.push(entry);
        } else {
            instances[slot] = entry;
        }
        Ok(())
    }

    fn mark_down(&self, slot: usize) -> String {
        let mut instances = lock(&self.shared.instances);
        instances[slot].up = false;
        instances[slot].id.clone()
    }

    /// Waits (bounded) for a child to exit after SIGTERM; kills it if it
    /// does not. True when it exited by itself.
    async fn wait_exit(&self, child: &mut Child) -> bool {
        let deadline = Instant::now() + EXIT;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                return true;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn kill(&mut self, slot: usize, rng: &mut Rng, down_max: u64) -> Result<(), String> {
        let id = self.mark_down(slot);
        let child = lock(&self.procs).instances[slot].take();
        if let Some(mut child) = child {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.event("kill", Some(&id), "SIGKILL");
        tokio::time::sleep(rng.ms(1000, down_max)).await;
        self.restart(slot).await
    }

    async fn restart(&mut self, slot: usize) -> Result<(), String> {
        self.slots[slot].1 += 1;
        self.start_instance(slot).await?;
        let id = self.instance_id(slot);
        let port = self.slots[slot].0;
        self.event("restart", Some(&id), &format!("port {port}"));
        Ok(())
    }

    async fn handover(&mut self, slot: usize, rng: &mut Rng) -> Result<(), String> {
        let id = self.mark_down(slot);
        let child = lock(&self.procs).instances[slot].take();
        self.event("handover", Some(&id), "SIGTERM");
        if let Some(mut child) = child {
            terminate(&child);
            let by_itself = self.wait_exit(&mut child).await;
            let detail = if by_itself {
                "exited"
            } else {
                "did not exit; killed"
            };
            self.event("handover_done", Some(&id), detail);
        }
        tokio::time::sleep(rng.ms(500, 2000)).await;
        self.restart(slot).await
    }

    async fn restart_redis(&mut self, rng: &mut Rng) -> Result<(), String> {
        let child = lock(&self.procs).redis.take();
        self.event("redis_stop", None, "SIGTERM");
        if let Some(mut child) = child {
            terminate(&child);
            self.wait_exit(&mut child).await;
        }
        tokio::time::sleep(rng.ms(1000, 3000)).await;
        self.start_redis().await?;
        self.event("redis_start", None, &format!("port {}", self.redis_port));
        Ok(())
    }

    /// Runs the chaos until the calls stop.
    async fn play(&mut self, seed: u64, seconds: u64) -> Result<(), String> {
        #[derive(Clone, Copy)]
        enum Chaos {
            Kill,
            Handover,
            Redis,
        }
        let mut rng = Rng::new(seed ^ 0x00c4_a05e);
        let mut plan = [Chaos::Kill, Chaos::Handover, Chaos::Redis];
        for i in (1..plan.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            plan.swap(i, j);
        }
        let gap_hi = (2000 + seconds * 1000 / 20).min(20_000);
        let down_max = (1000 + seconds * 1000 / 30).min(5000);
        let stop = self
            .shared
            .calls_until
            .checked_sub(Duration::from_secs(3))
            .unwrap_or(self.shared.calls_until);
        tokio::time::sleep(rng.ms(2000, 4000)).await;
        let mut n = 0;
        while Instant::now() < stop {
            let chaos = plan.get(n).copied().unwrap_or_else(|| {
                if rng.chance(75) {
                    Chaos::Kill
                } else {
                    Chaos::Handover
                }
            });
            n += 1;
            let slot = rng.below(self.slots.len() as u64) as usize;
            match chaos {
                Chaos::Kill => self.kill(slot, &mut rng, down_max).await?,
                Chaos::Handover => self.handover(slot, &mut rng).await?,
                Chaos::Redis => self.restart_redis(&mut rng).await?,
            }
            tokio::time::sleep(rng.ms(1500, gap_hi)).await;
        }
        Ok(())
    }
}

/// SIGTERM to a child this run started.
fn terminate(child: &Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Ctrl-C or SIGTERM (as `timeout` sends): the run stops, killing its
/// children first.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Whether Redis on `port` answers `PING` with `+PONG`.
async fn redis_ping(port: u16) -> bool {
    let ping = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(b"*1\r\n$4\r\nPING\r\n").await.ok()?;
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).await.ok()?;
        Some(buf[..n].starts_with(b"+PONG"))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), ping).await,
        Ok(Some(true))
    )
}

async fn run_chaos(args: RunArgs) -> Result<(), String> {
    let quickstart = find_quickstart(args.quickstart.clone())?;
    let redis_server = find_redis(args.redis_server.clone())?;
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| format!("cannot create {}: {e}", args.dir.display()))?;
    let taken = std::fs::read_dir(&args.dir)
        .map_err(|e| format!("cannot read {}: {e}", args.dir.display()))?
        .filter_map(Result::ok)
        .any(|e| e.path().extension().is_some_and(|x| x == "jsonl"));
    if taken {
        return Err(format!(
            "{} already holds a history; give a fresh directory",
            args.dir.display()
        ));
    }
    let procs = Arc::new(Mutex::new(Procs::default()));
    let _guard = Guard(Arc::clone(&procs));
    let start = Instant::now();
    let calls_until = start + Duration::from_secs(args.seconds);
    let shared = Arc::new(Shared {
        start,
        instances: Mutex::new(Vec::new()),
        calls_until,
        drain_until: calls_until + Duration::from_secs(args.drain),
    });
    let mut orchestra = Orchestra {
        dir: args.dir.clone(),
        quickstart,
        redis_server,
        redis_port: free_port()?,
        procs: Arc::clone(&procs),
        shared: Arc::clone(&shared),
        events: Recorder::create(&args.dir.join("events.jsonl"))?,
        slots: Vec::new(),
        same_id: args.same_id,
    };
    orchestra.start_redis().await?;
    orchestra.event(
        "start",
        None,
        &format!("redis on port {}", orchestra.redis_port),
    );
    for slot in 0..3 {
        orchestra.slots.push((free_port()?, 0));
        orchestra.start_instance(slot).await?;
        let id = orchestra.instance_id(slot);
        let port = orchestra.slots[slot].0;
        orchestra.event("start", Some(&id), &format!("port {port}"));
    }

    let mut clients = tokio::task::JoinSet::new();
    for i in 0..args.clients {
        let transport = if i % 2 == 0 {
            Transport::Ws
        } else {
            Transport::Sse
        };
        let rec = Recorder::create(&args.dir.join(format!("client-{i:02}.jsonl")))?;
        let seed = args.seed.wrapping_mul(1000).wrapping_add(i as u64);
        let client = Client::new(i, transport, seed, rec, Arc::clone(&shared));
        clients.spawn(client.run());
    }

    let seed = args.seed;
    let seconds = args.seconds;
    let chaos = async move {
        let played = orchestra.play(seed, seconds).await;
        (orchestra, played)
    };
    let all_clients = async {
        let limit = shared.drain_until + Duration::from_secs(30);
        let joined = tokio::time::timeout_at(limit.into(), async {
            while let Some(joined) = clients.join_next().await {
                if let Err(e) = joined {
                    eprintln!("chaos: a client failed: {e}");
                }
            }
        })
        .await;
        if joined.is_err() {
            clients.abort_all();
            eprintln!("chaos: clients still running after the drain; stopped");
        }
    };
    let interrupted = tokio::select! {
        ((mut orchestra, played), ()) = async { tokio::join!(chaos, all_clients) } => {
            orchestra.event("end", None, "");
            played?;
            false
        }
        () = stop_signal() => true,
    };
    lock(&procs).kill_all();
    if interrupted {
        return Err("interrupted".to_owned());
    }
    eprintln!(
        "chaos: history in {}; judge it with `chaos check --dir {}`",
        args.dir.display(),
        args.dir.display()
    );
    Ok(())
}
