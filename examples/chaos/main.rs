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
//!           [--redis-server PATH] [--redis-cli PATH] [--seed S] [--drain SECS]
//!           [--same-id] [--topology single|cluster|sentinel]
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
//! short run sees them all.
//!
//! ## `--topology`
//!
//! `single` (the default) is the one `redis-server` above. The two others
//! replace it, and the Redis restart, with a replicated set-up whose
//! primary is killed:
//!
//! - `cluster`: a Redis Cluster of three primaries, each with one replica
//!   (six `redis-server`s in cluster mode, directories `DIR/redis-n1` …
//!   `DIR/redis-n6`, each with its `nodes.conf` and its append-only file,
//!   each with its own bus port), joined with `redis-cli --cluster create
//!   … --cluster-replicas 1` (`--redis-cli`, else the one beside
//!   `redis-server`, else `$HAIP_REDIS_CLI` or `PATH`). The instances get
//!   the six addresses as their seed list. The Redis chaos: a node that is
//!   a primary now (`INFO replication`) with its replica in sync is killed
//!   with SIGKILL (`redis_stop`); once its replica is a primary and every
//!   running node says `cluster_state:ok` (`redis_failover`, at most 30 s)
//!   it is started again on its port, directory and `nodes.conf`
//!   (`redis_start`), and rejoins as a replica (`redis_rejoined`, at most
//!   60 s).
//! - `sentinel`: a primary (`DIR/redis-d1`), its replica (`DIR/redis-d2`,
//!   `--replicaof`) and three Sentinels (`DIR/redis-s1` …, quorum 2,
//!   `down-after-milliseconds` 1000, `failover-timeout` 5000), the
//!   instances given `redis+sentinel://…/haip`. The Redis chaos: the
//!   primary the Sentinels name (`SENTINEL get-master-addr-by-name haip`)
//!   is killed with SIGKILL (`redis_stop`); once every Sentinel names the
//!   other server and it says it is a primary (`redis_failover`, at most
//!   30 s) the killed one is started again as it was first started
//!   (`redis_start`) and the Sentinels make it a replica (`redis_rejoined`,
//!   at most 60 s).
//!
//! With either, the Redis chaos comes among the first three events as
//! above, and after them one event in ten is another primary kill (the
//! rest kills and handovers, three to one, as with `single`). After `--seconds` the clients make no new calls
//! and drop no more connections; they wait up to `--drain` seconds (90) for
//! every outstanding call's `TOOL_DONE`, resuming as needed. Only 127.0.0.1
//! is used; every child process is killed on exit, error, panic, Ctrl-C or
//! SIGTERM.
//!
//! The history goes to `DIR`: `client-NN.jsonl` per client (connections,
//! envelopes received, calls sent, resumption outcomes) and `events.jsonl`
//! (kills, restarts, handovers, the Redis restart or failovers); the
//! instances' and Redis's logs beside them. The format is described in
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

use std::future::Future;
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
/// How long a Redis Cluster or a Sentinel set-up may take to agree once its
/// processes answer `PING`, and `redis-cli --cluster create` may run.
const SETUP: Duration = Duration::from_secs(60);
/// How long a replica may take to be promoted after its primary is killed.
const FAILOVER: Duration = Duration::from_secs(30);
/// How long a killed primary, started again, may take to be a replica in
/// sync.
const REJOIN: Duration = Duration::from_secs(60);
/// The pause between two looks while waiting for Redis servers to agree.
const POLL: Duration = Duration::from_millis(100);
/// The name the Sentinels monitor the primary by.
const SENTINEL_NAME: &str = "haip";
/// `cluster-node-timeout` of the cluster's nodes, in ms.
const CLUSTER_NODE_TIMEOUT_MS: u64 = 2000;

/// What the instances share their sessions through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Topology {
    /// One `redis-server`, stopped (SIGTERM) and started again.
    Single,
    /// A Redis Cluster of three primaries with one replica each; a primary
    /// is killed and its replica promoted.
    Cluster,
    /// A primary, its replica and three Sentinels; the primary is killed
    /// and the Sentinels promote the replica.
    Sentinel,
}

impl Topology {
    fn parse(value: &str) -> Result<Topology, String> {
        match value {
            "single" => Ok(Topology::Single),
            "cluster" => Ok(Topology::Cluster),
            "sentinel" => Ok(Topology::Sentinel),
            _ => Err(format!(
                "--topology {value}: one of single, cluster, sentinel"
            )),
        }
    }
}

struct RunArgs {
    dir: PathBuf,
    seconds: u64,
    clients: usize,
    quickstart: Option<PathBuf>,
    redis_server: Option<PathBuf>,
    redis_cli: Option<PathBuf>,
    seed: u64,
    drain: u64,
    same_id: bool,
    topology: Topology,
}

fn usage() -> &'static str {
    "usage: chaos run --dir DIR --seconds N --clients N [--quickstart PATH] \
     [--redis-server PATH] [--redis-cli PATH] [--seed S] [--drain SECS] [--same-id] \
     [--topology single|cluster|sentinel]\n       chaos check --dir DIR"
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
        redis_cli: None,
        seed: 1,
        drain: 90,
        same_id: false,
        topology: Topology::Single,
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
            "--redis-cli" => run.redis_cli = Some(PathBuf::from(value)),
            "--topology" => run.topology = Topology::parse(value)?,
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
    /// The Redis Cluster's nodes, or the Sentinel set-up's servers and
    /// Sentinels, as in [`Orchestra::nodes`].
    redis_nodes: Vec<Option<Child>>,
}

impl Procs {
    fn kill_all(&mut self) {
        for child in self
            .instances
            .iter_mut()
            .chain([&mut self.redis])
            .chain(self.redis_nodes.iter_mut())
        {
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

/// `--redis-cli`, else the `redis-cli` beside `redis_server`, else
/// `$HAIP_REDIS_CLI`, on `PATH`, or in `/usr/bin`.
fn find_redis_cli(given: Option<PathBuf>, redis_server: &Path) -> Result<PathBuf, String> {
    if let Some(path) = given {
        return if runs(&path) {
            Ok(path)
        } else {
            Err(format!(
                "{} does not run (`--version` failed)",
                path.display()
            ))
        };
    }
    let beside = redis_server.with_file_name("redis-cli");
    let from_env = std::env::var_os("HAIP_REDIS_CLI").map(PathBuf::from);
    let path = std::env::var_os("PATH").unwrap_or_default();
    [beside]
        .into_iter()
        .chain(from_env)
        .chain(std::env::split_paths(&path).map(|dir| dir.join("redis-cli")))
        .chain([PathBuf::from("/usr/bin/redis-cli")])
        .find(|candidate| candidate.is_file() && runs(candidate))
        .ok_or_else(|| {
            "redis-cli is needed for a Redis Cluster (Debian: apt-get install redis-tools), \
             beside redis-server, on PATH or given with --redis-cli"
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

/// What one process of a Redis Cluster or of a Sentinel set-up is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeKind {
    /// A Redis Cluster node, with its cluster bus port.
    Cluster { bus_port: u16 },
    /// A data server watched by the Sentinels; `replica_of` is the port of
    /// the primary it was first started as a replica of.
    Data { replica_of: Option<u16> },
    /// A Sentinel, first told to monitor the server on `primary`.
    Sentinel { primary: u16 },
}

/// One process of a Redis Cluster or of a Sentinel set-up: started again
/// on the same port, in the same directory, with the same arguments.
#[derive(Debug, Clone)]
struct Node {
    /// `n1` … `n6` (cluster), `d1`, `d2` (data servers), `s1` … `s3`
    /// (Sentinels).
    name: String,
    port: u16,
    kind: NodeKind,
    dir: PathBuf,
    log: PathBuf,
}

impl Node {
    /// `n3 (127.0.0.1:PORT)`.
    fn label(&self) -> String {
        format!("{} (127.0.0.1:{})", self.name, self.port)
    }
}

/// The orchestrator: starts and stops processes, writes `events.jsonl`.
struct Orchestra {
    dir: PathBuf,
    quickstart: PathBuf,
    redis_server: PathBuf,
    /// The one Redis of [`Topology::Single`] (0 otherwise).
    redis_port: u16,
    procs: Arc<Mutex<Procs>>,
    shared: Arc<Shared>,
    events: Recorder,
    /// Per slot: its port and how many times it was restarted.
    slots: Vec<(u16, u32)>,
    same_id: bool,
    topology: Topology,
    /// `redis-cli`, for [`Topology::Cluster`].
    redis_cli: Option<PathBuf>,
    /// The Redis Cluster's nodes, or the Sentinel set-up's data servers
    /// then Sentinels (their processes in [`Procs::redis_nodes`], same
    /// order).
    nodes: Vec<Node>,
    /// Ports handed out to Redis processes, never handed out twice.
    taken_ports: Vec<u16>,
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

    /// `HAIP_REDIS_URL`: the one server, the cluster's six nodes as its
    /// seed list, or the Sentinels and the name they watch.
    fn redis_url(&self) -> String {
        match self.topology {
            Topology::Single => format!("redis://127.0.0.1:{}", self.redis_port),
            Topology::Cluster => self
                .nodes
                .iter()
                .map(|n| format!("redis://127.0.0.1:{}", n.port))
                .collect::<Vec<_>>()
                .join(","),
            Topology::Sentinel => {
                let sentinels: Vec<String> = self
                    .nodes
                    .iter()
                    .filter(|n| matches!(n.kind, NodeKind::Sentinel { .. }))
                    .map(|n| format!("127.0.0.1:{}", n.port))
                    .collect();
                format!("redis+sentinel://{}/{SENTINEL_NAME}", sentinels.join(","))
            }
        }
    }

    /// An event with how long what it reports took (`took_ms`).
    fn timed_event(&mut self, what: &str, detail: &str, took: Duration) {
        let at = self.shared.ms();
        let took_ms = took.as_secs_f64() * 1000.0;
        self.events
            .write(&json!({"t": "event", "at_ms": at, "what": what,
            "instance": null, "detail": detail, "took_ms": took_ms}));
        self.events.flush();
        eprintln!("chaos: {:>7.1} s {what} {detail}", at / 1000.0);
    }

    /// A free loopback port not yet given to a Redis process of this run.
    fn take_port(&mut self) -> Result<u16, String> {
        for _ in 0..50 {
            let port = free_port()?;
            if !self.taken_ports.contains(&port) {
                self.taken_ports.push(port);
                return Ok(port);
            }
        }
        Err("no free loopback port that was not already taken".to_owned())
    }

    /// Starts the process of `nodes[i]` (its configuration file first, for
    /// a Sentinel started for the first time).
    fn spawn_node(&mut self, i: usize) -> Result<(), String> {
        let node = self.nodes[i].clone();
        std::fs::create_dir_all(&node.dir)
            .map_err(|e| format!("cannot create {}: {e}", node.dir.display()))?;
        let mut command = Command::new(&self.redis_server);
        match node.kind {
            NodeKind::Sentinel { primary } => {
                // A Sentinel rewrites its file as it learns: it must be
                // writable, and it is kept if the Sentinel starts again.
                let conf = node.dir.join("sentinel.conf");
                if !conf.exists() {
                    let text = format!(
                        "port {port}\n\
                         bind 127.0.0.1\n\
                         daemonize no\n\
                         dir \"{dir}\"\n\
                         logfile \"{log}\"\n\
                         sentinel monitor {SENTINEL_NAME} 127.0.0.1 {primary} 2\n\
                         sentinel down-after-milliseconds {SENTINEL_NAME} 1000\n\
                         sentinel failover-timeout {SENTINEL_NAME} 5000\n\
                         sentinel parallel-syncs {SENTINEL_NAME} 1\n",
                        port = node.port,
                        dir = node.dir.display(),
                        log = node.log.display(),
                    );
                    std::fs::write(&conf, text)
                        .map_err(|e| format!("cannot write {}: {e}", conf.display()))?;
                }
                command.arg(&conf).arg("--sentinel");
            }
            NodeKind::Cluster { .. } | NodeKind::Data { .. } => {
                command
                    .arg("--port")
                    .arg(node.port.to_string())
                    .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "yes"])
                    .args(["--appendfsync", "everysec", "--daemonize", "no"])
                    // A replica's sync starts at once, not after 5 s.
                    .args(["--repl-diskless-sync-delay", "0"])
                    .arg("--dir")
                    .arg(&node.dir)
                    .arg("--logfile")
                    .arg(&node.log);
                if let NodeKind::Data {
                    replica_of: Some(primary),
                } = node.kind
                {
                    command.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
                }
                if let NodeKind::Cluster { bus_port } = node.kind {
                    command
                        .args(["--cluster-enabled", "yes", "--cluster-config-file"])
                        .arg(node.dir.join("nodes.conf"))
                        .arg("--cluster-node-timeout")
                        .arg(CLUSTER_NODE_TIMEOUT_MS.to_string())
                        .arg("--cluster-port")
                        .arg(bus_port.to_string());
                }
            }
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.redis_server.display()))?;
        let mut procs = lock(&self.procs);
        if procs.redis_nodes.len() <= i {
            procs.redis_nodes.resize_with(i + 1, || None);
        }
        procs.redis_nodes[i] = Some(child);
        Ok(())
    }

    /// Starts `nodes[i]` and waits until it answers `PING`.
    async fn start_node(&mut self, i: usize) -> Result<(), String> {
        self.spawn_node(i)?;
        let node = &self.nodes[i];
        let deadline = Instant::now() + READY;
        loop {
            if redis_ping(node.port).await {
                return Ok(());
            }
            let exited = lock(&self.procs).redis_nodes[i]
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                return Err(format!(
                    "redis-server {} exited ({status}); see {}",
                    node.label(),
                    node.log.display()
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "redis-server {} did not answer PING within {READY:?}; see {}",
                    node.label(),
                    node.log.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL to `nodes[i]`, waiting until it is gone.
    fn kill_node(&mut self, i: usize) {
        let child = lock(&self.procs).redis_nodes[i].take();
        if let Some(mut child) = child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The ports of the data nodes (not Sentinels) now running, with their
    /// index in `nodes`.
    fn running_data(&self) -> Vec<(usize, u16)> {
        let procs = lock(&self.procs);
        self.nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| {
                !matches!(n.kind, NodeKind::Sentinel { .. })
                    && procs.redis_nodes.get(*i).is_some_and(Option::is_some)
            })
            .map(|(i, n)| (i, n.port))
            .collect()
    }

    /// The node listening on `port`, described.
    fn label_of(&self, port: u16) -> String {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .map(Node::label)
            .unwrap_or_else(|| format!("a stranger (127.0.0.1:{port})"))
    }

    /// Where the Redis logs are, for errors.
    fn redis_logs(&self) -> String {
        let names: Vec<String> = self
            .nodes
            .iter()
            .map(|n| n.log.display().to_string())
            .collect();
        format!("see {}", names.join(", "))
    }

    /// Six cluster nodes, joined by `redis-cli --cluster create` as three
    /// primaries with one replica each; waits until they agree.
    async fn start_cluster(&mut self) -> Result<(), String> {
        for k in 1..=6 {
            let port = self.take_port()?;
            let bus_port = self.take_port()?;
            self.nodes.push(Node {
                name: format!("n{k}"),
                port,
                kind: NodeKind::Cluster { bus_port },
                dir: self.dir.join(format!("redis-n{k}")),
                log: self.dir.join(format!("redis-n{k}.log")),
            });
        }
        for i in 0..self.nodes.len() {
            self.start_node(i).await?;
        }
        let cli = self
            .redis_cli
            .clone()
            .ok_or("a Redis Cluster needs redis-cli")?;
        let log_path = self.dir.join("redis-cluster-create.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        let log_err = log
            .try_clone()
            .map_err(|e| format!("cannot share {}: {e}", log_path.display()))?;
        let mut create = Command::new(&cli)
            .args(["--cluster", "create"])
            .args(self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", cli.display()))?;
        let deadline = Instant::now() + SETUP;
        let status = loop {
            if let Ok(Some(status)) = create.try_wait() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = create.kill();
                let _ = create.wait();
                return Err(format!(
                    "`redis-cli --cluster create` did not finish within {SETUP:?}; see {}",
                    log_path.display()
                ));
            }
            tokio::time::sleep(POLL).await;
        };
        if !status.success() {
            return Err(format!(
                "`redis-cli --cluster create` failed ({status}); see {}",
                log_path.display()
            ));
        }
        let ports: Vec<u16> = self.nodes.iter().map(|n| n.port).collect();
        let primaries = wait_for(
            "every node says cluster_state:ok and every primary has its replica in sync",
            SETUP,
            || async {
                cluster_ok(&ports).await?;
                let mut primaries = Vec::new();
                for &port in &ports {
                    let r = replication(port).await?;
                    if r.primary {
                        if r.replica_online.is_none() {
                            return Err(format!("primary {port} has no replica in sync"));
                        }
                        primaries.push(port);
                    } else if !r.link_up {
                        return Err(format!("replica {port}: its link to its primary is not up"));
                    }
                }
                if primaries.len() == 3 {
                    Ok(primaries)
                } else {
                    Err(format!("{} primaries, not 3", primaries.len()))
                }
            },
        )
        .await
        .map_err(|e| {
            format!(
                "the Redis Cluster did not come up: {e}; {}",
                self.redis_logs()
            )
        })?;
        let names: Vec<String> = primaries.iter().map(|&p| self.label_of(p)).collect();
        let detail = format!(
            "redis cluster of six nodes (ports {}), primaries {}",
            ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            names.join(", ")
        );
        self.event("start", None, &detail);
        Ok(())
    }

    /// A primary, its replica and three Sentinels; waits until the replica
    /// is in sync and the Sentinels know each other.
    async fn start_sentinels(&mut self) -> Result<(), String> {
        let primary = self.take_port()?;
        let replica = self.take_port()?;
        for (k, port, replica_of) in [(1, primary, None), (2, replica, Some(primary))] {
            self.nodes.push(Node {
                name: format!("d{k}"),
                port,
                kind: NodeKind::Data { replica_of },
                dir: self.dir.join(format!("redis-d{k}")),
                log: self.dir.join(format!("redis-d{k}.log")),
            });
        }
        self.start_node(0).await?;
        self.start_node(1).await?;
        wait_for("the replica's link to its primary is up", SETUP, || async {
            match replication(replica).await? {
                r if r.link_up => Ok(()),
                _ => Err("master_link_status is not up".to_owned()),
            }
        })
        .await
        .map_err(|e| format!("the replica did not sync: {e}; {}", self.redis_logs()))?;
        for k in 1..=3 {
            let port = self.take_port()?;
            self.nodes.push(Node {
                name: format!("s{k}"),
                port,
                kind: NodeKind::Sentinel { primary },
                dir: self.dir.join(format!("redis-s{k}")),
                log: self.dir.join(format!("redis-s{k}.log")),
            });
            self.start_node(self.nodes.len() - 1).await?;
        }
        let sentinels = self.sentinel_ports();
        wait_for(
            "every Sentinel names the primary and knows the replica and the other Sentinels",
            SETUP,
            || async {
                let named = sentinels_primary(&sentinels).await?;
                if named != primary {
                    return Err(format!("the Sentinels name {named}, not {primary}"));
                }
                for &port in &sentinels {
                    let info = redis_text(port, &["INFO", "sentinel"]).await?;
                    let master = info_field(&info, "master0").unwrap_or("");
                    let has = |part: &str| master.split(',').any(|p| p == part);
                    if !(has("status=ok") && has("slaves=1") && has("sentinels=3")) {
                        return Err(format!("Sentinel {port}: master0:{master}"));
                    }
                }
                Ok(())
            },
        )
        .await
        .map_err(|e| format!("the Sentinels did not agree: {e}; {}", self.redis_logs()))?;
        let detail = format!(
            "redis primary {}, replica {}, sentinels on ports {}",
            self.nodes[0].label(),
            self.nodes[1].label(),
            sentinels
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        self.event("start", None, &detail);
        Ok(())
    }

    fn sentinel_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| matches!(n.kind, NodeKind::Sentinel { .. }))
            .map(|n| n.port)
            .collect()
    }

    fn node_at(&self, port: u16) -> Result<usize, String> {
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .ok_or_else(|| format!("no Redis server of this run on port {port}"))
    }

    /// The cluster's Redis chaos: a primary with its replica in sync is
    /// killed, its replica promoted, then it is started again and rejoins
    /// as a replica.
    async fn fail_over_cluster(&mut self, rng: &mut Rng) -> Result<(), String> {
        let all: Vec<u16> = self.nodes.iter().map(|n| n.port).collect();
        let data = self.running_data();
        let candidates = wait_for(
            "the cluster is ok and a primary has its replica in sync",
            FAILOVER,
            || async {
                cluster_ok(&all).await?;
                let mut found = Vec::new();
                for &(_, port) in &data {
                    let r = replication(port).await?;
                    if let (true, Some(replica)) = (r.primary, r.replica_online) {
                        found.push((port, replica));
                    }
                }
                if found.is_empty() {
                    Err("no primary has a replica in sync".to_owned())
                } else {
                    Ok(found)
                }
            },
        )
        .await
        .map_err(|e| format!("no primary to kill: {e}; {}", self.redis_logs()))?;
        let (port, replica) = candidates[rng.below(candidates.len() as u64) as usize];
        let victim = self.node_at(port)?;
        let (name, replica_name) = (self.label_of(port), self.label_of(replica));
        let killed = Instant::now();
        self.kill_node(victim);
        self.event(
            "redis_stop",
            None,
            &format!("{name} SIGKILL primary (its replica {replica_name})"),
        );
        let others: Vec<u16> = all.iter().copied().filter(|&p| p != port).collect();
        wait_for(
            "the replica is a primary and every running node says cluster_state:ok",
            FAILOVER,
            || async {
                if !replication(replica).await?.primary {
                    return Err(format!("{replica} is still a replica"));
                }
                cluster_ok(&others).await
            },
        )
        .await
        .map_err(|e| {
            format!(
                "the cluster did not fail over after {name} was killed: {e}; {}",
                self.redis_logs()
            )
        })?;
        self.timed_event(
            "redis_failover",
            &format!(
                "{replica_name} promoted, cluster_state:ok on the {} running nodes, {:.1} s after the kill",
                others.len(),
                killed.elapsed().as_secs_f64()
            ),
            killed.elapsed(),
        );
        self.start_node(victim).await?;
        self.event(
            "redis_start",
            None,
            &format!("{name} started again (same port, directory and nodes.conf)"),
        );
        let restarted = Instant::now();
        let primary = wait_for(
            "it is a replica in sync and every node says cluster_state:ok",
            REJOIN,
            || async {
                let r = replication(port).await?;
                if r.primary {
                    return Err(format!("{port} says it is a primary"));
                }
                if !r.link_up {
                    return Err(format!("{port}: its link to its primary is not up"));
                }
                cluster_ok(&all).await?;
                Ok(r.primary_port.unwrap_or(0))
            },
        )
        .await
        .map_err(|e| {
            format!(
                "{name} did not rejoin the cluster: {e}; {}",
                self.redis_logs()
            )
        })?;
        self.timed_event(
            "redis_rejoined",
            &format!(
                "{name} replica of {}, in sync, {:.1} s after it started again",
                self.label_of(primary),
                restarted.elapsed().as_secs_f64()
            ),
            restarted.elapsed(),
        );
        Ok(())
    }

    /// The Sentinel set-up's Redis chaos: the primary the Sentinels name is
    /// killed, they promote its replica, then it is started again and they
    /// make it a replica.
    async fn fail_over_sentinel(&mut self) -> Result<(), String> {
        let sentinels = self.sentinel_ports();
        let (port, replica) = wait_for(
            "the Sentinels agree on a primary that has its replica in sync",
            FAILOVER,
            || async {
                let primary = sentinels_primary(&sentinels).await?;
                let r = replication(primary).await?;
                match (r.primary, r.replica_online) {
                    (true, Some(replica)) => Ok((primary, replica)),
                    (false, _) => Err(format!("the Sentinels name {primary}, not a primary")),
                    (true, None) => Err(format!("primary {primary} has no replica in sync")),
                }
            },
        )
        .await
        .map_err(|e| format!("no primary to kill: {e}; {}", self.redis_logs()))?;
        let victim = self.node_at(port)?;
        let (name, replica_name) = (self.label_of(port), self.label_of(replica));
        let killed = Instant::now();
        self.kill_node(victim);
        self.event(
            "redis_stop",
            None,
            &format!(
                "{name} SIGKILL primary (as the Sentinels named it; its replica {replica_name})"
            ),
        );
        let promoted = wait_for(
            "every Sentinel names another server, and it is a primary",
            FAILOVER,
            || async {
                let named = sentinels_primary(&sentinels).await?;
                if named == port {
                    return Err(format!("the Sentinels still name {port}"));
                }
                if !replication(named).await?.primary {
                    return Err(format!("the Sentinels name {named}, not yet a primary"));
                }
                Ok(named)
            },
        )
        .await
        .map_err(|e| {
            format!(
                "the Sentinels did not fail over after {name} was killed: {e}; {}",
                self.redis_logs()
            )
        })?;
        let promoted_name = self.label_of(promoted);
        self.timed_event(
            "redis_failover",
            &format!(
                "the Sentinels name {promoted_name}, a primary, {:.1} s after the kill",
                killed.elapsed().as_secs_f64()
            ),
            killed.elapsed(),
        );
        self.start_node(victim).await?;
        self.event(
            "redis_start",
            None,
            &format!("{name} started again (same port, directory and arguments)"),
        );
        let restarted = Instant::now();
        wait_for(
            "the Sentinels make it a replica of the new primary, in sync",
            REJOIN,
            || async {
                let r = replication(port).await?;
                if r.primary {
                    return Err(format!("{port} still says it is a primary"));
                }
                if r.primary_port != Some(promoted) {
                    return Err(format!(
                        "{port} is a replica of {:?}, not {promoted}",
                        r.primary_port
                    ));
                }
                if !r.link_up {
                    return Err(format!("{port}: its link to its primary is not up"));
                }
                Ok(())
            },
        )
        .await
        .map_err(|e| {
            format!(
                "{name} did not rejoin as a replica: {e}; {}",
                self.redis_logs()
            )
        })?;
        self.timed_event(
            "redis_rejoined",
            &format!(
                "{name} replica of {promoted_name}, in sync, {:.1} s after it started again",
                restarted.elapsed().as_secs_f64()
            ),
            restarted.elapsed(),
        );
        Ok(())
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
            let single = self.topology == Topology::Single;
            let chaos = plan.get(n).copied().unwrap_or_else(|| {
                if !single && rng.chance(10) {
                    Chaos::Redis
                } else if rng.chance(75) {
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
                Chaos::Redis => match self.topology {
                    Topology::Single => self.restart_redis(&mut rng).await?,
                    Topology::Cluster => self.fail_over_cluster(&mut rng).await?,
                    Topology::Sentinel => self.fail_over_sentinel().await?,
                },
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

/// A RESP reply, as [`redis_request`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Status(String),
    Error(String),
    Integer(i64),
    /// `None` for nil.
    Bulk(Option<String>),
    /// `None` for a nil array.
    Array(Option<Vec<Reply>>),
}

/// One reply from the start of `buf` and the bytes it took; `None` when
/// more bytes are needed.
fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line = std::str::from_utf8(&buf[..end])
        .map_err(|e| format!("a reply line that is not UTF-8: {e}"))?;
    let after = end + 2;
    let (kind, body) = line.split_at_checked(1).ok_or("an empty reply line")?;
    let number = || {
        body.parse::<i64>()
            .map_err(|_| format!("a reply line {line:?}"))
    };
    let reply = match kind {
        "+" => (Reply::Status(body.to_owned()), after),
        "-" => (Reply::Error(body.to_owned()), after),
        ":" => (Reply::Integer(number()?), after),
        "$" => match usize::try_from(number()?) {
            Err(_) => (Reply::Bulk(None), after),
            Ok(len) if buf.len() < after + len + 2 => return Ok(None),
            Ok(len) => {
                let text = String::from_utf8_lossy(&buf[after..after + len]).into_owned();
                (Reply::Bulk(Some(text)), after + len + 2)
            }
        },
        "*" => match usize::try_from(number()?) {
            Err(_) => (Reply::Array(None), after),
            Ok(len) => {
                let mut items = Vec::with_capacity(len.min(1024));
                let mut at = after;
                for _ in 0..len {
                    let Some((item, used)) = parse_reply(&buf[at..])? else {
                        return Ok(None);
                    };
                    items.push(item);
                    at += used;
                }
                (Reply::Array(Some(items)), at)
            }
        },
        _ => return Err(format!("a reply line {line:?}")),
    };
    Ok(Some(reply))
}

/// Sends one command to the Redis server or Sentinel on `port` (over a
/// fresh connection) and reads its whole reply, within 2 s.
async fn redis_request(port: u16, args: &[&str]) -> Result<Reply, String> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        s.write_all(request.as_bytes())
            .await
            .map_err(|e| format!("cannot send: {e}"))?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some((reply, _)) = parse_reply(&buf)? {
                return Ok(reply);
            }
            let n = s
                .read(&mut chunk)
                .await
                .map_err(|e| format!("no reply: {e}"))?;
            if n == 0 {
                return Err("the connection closed before the reply's end".to_owned());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    let result = tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .unwrap_or_else(|_| Err("no reply within 2 s".to_owned()));
    result.map_err(|e| format!("127.0.0.1:{port} {}: {e}", args.join(" ")))
}

/// A command whose reply is a bulk string (`INFO`, `CLUSTER INFO`).
async fn redis_text(port: u16, args: &[&str]) -> Result<String, String> {
    match redis_request(port, args).await? {
        Reply::Bulk(Some(text)) => Ok(text),
        other => Err(format!(
            "127.0.0.1:{port} {}: answered {other:?}",
            args.join(" ")
        )),
    }
}

/// A `name:value` line's value in `INFO` or `CLUSTER INFO` output.
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim_end())
    })
}

/// What `INFO replication` says of a server.
struct Replication {
    /// `role:master`.
    primary: bool,
    /// A primary's first replica whose state is `online`: its port.
    replica_online: Option<u16>,
    /// A replica's primary: its port.
    primary_port: Option<u16>,
    /// A replica's `master_link_status:up`.
    link_up: bool,
}

async fn replication(port: u16) -> Result<Replication, String> {
    let info = redis_text(port, &["INFO", "replication"]).await?;
    let primary = match info_field(&info, "role") {
        Some("master") => true,
        Some("slave") => false,
        other => {
            return Err(format!(
                "127.0.0.1:{port}: INFO replication has role {other:?}"
            ));
        }
    };
    // slave0:ip=127.0.0.1,port=7001,state=online,offset=42,lag=0
    let replica_online = (0..16)
        .map_while(|k| info_field(&info, &format!("slave{k}")))
        .find_map(|line| {
            let field = |name: &str| {
                line.split(',')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            };
            (field("state") == Some("online"))
                .then(|| field("port")?.parse::<u16>().ok())
                .flatten()
        });
    Ok(Replication {
        primary,
        replica_online,
        primary_port: info_field(&info, "master_port").and_then(|p| p.parse().ok()),
        link_up: info_field(&info, "master_link_status") == Some("up"),
    })
}

/// Every cluster node of `ports` says `cluster_state:ok`, with the 16384
/// slots assigned and six nodes known.
async fn cluster_ok(ports: &[u16]) -> Result<(), String> {
    for &port in ports {
        let info = redis_text(port, &["CLUSTER", "INFO"]).await?;
        for (field, wanted) in [
            ("cluster_state", "ok"),
            ("cluster_slots_assigned", "16384"),
            ("cluster_known_nodes", "6"),
        ] {
            let value = info_field(&info, field);
            if value != Some(wanted) {
                return Err(format!("node {port}: {field}:{}", value.unwrap_or("?")));
            }
        }
    }
    Ok(())
}

/// The primary's port as every Sentinel of `ports` names it
/// (`SENTINEL get-master-addr-by-name haip`); an error when one does not
/// answer or they disagree.
async fn sentinels_primary(ports: &[u16]) -> Result<u16, String> {
    let mut named: Option<u16> = None;
    for &port in ports {
        let reply = redis_request(
            port,
            &["SENTINEL", "get-master-addr-by-name", SENTINEL_NAME],
        )
        .await?;
        let primary = match &reply {
            Reply::Array(Some(items)) => match items.as_slice() {
                [Reply::Bulk(Some(_)), Reply::Bulk(Some(p))] => p.parse::<u16>().ok(),
                _ => None,
            },
            _ => None,
        }
        .ok_or_else(|| format!("Sentinel {port}: get-master-addr-by-name answered {reply:?}"))?;
        match named {
            Some(other) if other != primary => {
                return Err(format!("the Sentinels disagree: {other} and {primary}"));
            }
            _ => named = Some(primary),
        }
    }
    named.ok_or_else(|| "no Sentinel".to_owned())
}

/// Calls `check` every [`POLL`] until it is `Ok`, at most `limit`; the
/// error says what was awaited and `check`'s last error.
async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        let last = match check().await {
            Ok(value) => return Ok(value),
            Err(why) => why,
        };
        if Instant::now() >= deadline {
            return Err(format!("waited {limit:?} until {what}; last: {last}"));
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn run_chaos(args: RunArgs) -> Result<(), String> {
    let quickstart = find_quickstart(args.quickstart.clone())?;
    let redis_server = find_redis(args.redis_server.clone())?;
    let redis_cli = match args.topology {
        Topology::Cluster => Some(find_redis_cli(args.redis_cli.clone(), &redis_server)?),
        Topology::Single | Topology::Sentinel => None,
    };
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
        redis_port: if args.topology == Topology::Single {
            free_port()?
        } else {
            0
        },
        procs: Arc::clone(&procs),
        shared: Arc::clone(&shared),
        events: Recorder::create(&args.dir.join("events.jsonl"))?,
        slots: Vec::new(),
        same_id: args.same_id,
        topology: args.topology,
        redis_cli,
        nodes: Vec::new(),
        taken_ports: Vec::new(),
    };
    match args.topology {
        Topology::Single => {
            orchestra.start_redis().await?;
            orchestra.event(
                "start",
                None,
                &format!("redis on port {}", orchestra.redis_port),
            );
        }
        Topology::Cluster => orchestra.start_cluster().await?,
        Topology::Sentinel => orchestra.start_sentinels().await?,
    }
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
