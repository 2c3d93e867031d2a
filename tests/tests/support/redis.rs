//! Real Redis servers for tests, each on a free loopback port with its own
//! temporary directory, no persistence (`--save "" --appendonly no`), killed
//! when dropped. Include it with
//! `#[path = "support/redis.rs"] mod redis_support;`.
//!
//! - [`RedisServer`]: one standalone server.
//! - [`RedisCluster`]: three Redis Cluster primaries (no replicas) sharing
//!   the 16384 slots, made with `redis-cli --cluster create`; it knows which
//!   node owns a key ([`RedisCluster::node_for_key`]).
//! - [`RedisSentinels`]: a primary, its replica and three Sentinels
//!   monitoring them as [`SENTINEL_MASTER`] (`haip`), which fail over to the
//!   replica when the primary is killed.
//!
//! `redis-server` is taken from `$HAIP_REDIS_SERVER`, else from `PATH`
//! (or `/usr/bin`, `/usr/sbin`); when there is none it is installed with
//! `apt-get update && apt-get install -y redis-server`, once per machine
//! under a lock file in `target/`. When that is impossible the test fails
//! saying how to install it: a test that needs Redis never skips silently.
//! `redis-cli` (for the cluster) is the one beside `redis-server`, else
//! `$HAIP_REDIS_CLI`, `PATH` or Debian's `redis-tools` the same way; the
//! Sentinels are `redis-server --sentinel`, which needs nothing more.
//!
//! Everything here blocks (processes and a few milliseconds of loopback
//! TCP), which is fine in `#[test]`s and in multi-threaded `#[tokio::test]`s.
//! Every wait has a deadline; when one passes, the panic (or error) carries
//! the logs of the servers concerned.
#![allow(dead_code)]

#[path = "system.rs"]
pub(crate) mod system;

use std::io::{BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a started server may take to answer `PING`.
const READY_LIMIT: Duration = Duration::from_secs(10);

/// How long one `PING` (connect, send, read) may take.
const PING_LIMIT: Duration = Duration::from_secs(1);

/// Free ports tried before giving up (another process may take the one we
/// picked between our probe and Redis binding it).
const PORT_TRIES: usize = 5;

/// How long a cluster, or a primary with its replica and Sentinels, may take
/// to agree once its processes answer `PING`.
const SETUP_LIMIT: Duration = Duration::from_secs(20);

/// How long `redis-cli --cluster create` may run.
const CLI_LIMIT: Duration = Duration::from_secs(30);

/// The pause between two looks while waiting for servers to agree.
const POLL: Duration = Duration::from_millis(20);

/// The number of hash slots of a Redis Cluster.
pub(crate) const CLUSTER_SLOTS: usize = 16384;

/// The nodes of a [`RedisCluster`], all primaries.
const CLUSTER_SIZE: usize = 3;

/// `cluster-node-timeout` of the cluster's nodes, in milliseconds.
const CLUSTER_NODE_TIMEOUT_MS: u64 = 2000;

/// The name the Sentinels of [`RedisSentinels`] monitor the primary by.
pub(crate) const SENTINEL_MASTER: &str = "haip";

/// The Sentinels of [`RedisSentinels`].
const SENTINELS: usize = 3;

/// What a [`RedisServer`] process is started as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// A plain server.
    Standalone,
    /// A replica of the server on `127.0.0.1:primary` (`--replicaof`).
    Replica {
        /// The primary's port.
        primary: u16,
    },
    /// A Redis Cluster node (`--cluster-enabled yes`), its `nodes.conf` in
    /// its directory, named after its port.
    ClusterNode,
    /// A Sentinel (`redis-server <conf> --sentinel`) monitoring the server on
    /// `127.0.0.1:primary` as [`SENTINEL_MASTER`].
    Sentinel {
        /// The primary's port when the Sentinel is first started.
        primary: u16,
    },
}

impl Role {
    /// What the process is called in messages.
    fn name(self) -> &'static str {
        match self {
            Role::Standalone => "redis-server",
            Role::Replica { .. } => "redis-server (replica)",
            Role::ClusterNode => "redis-server (cluster node)",
            Role::Sentinel { .. } => "redis-server --sentinel",
        }
    }
}

/// A running `redis-server` child process (standalone, or one of a
/// [`RedisCluster`] or of [`RedisSentinels`]). Dropping it kills the process
/// and removes its directory.
pub(crate) struct RedisServer {
    binary: PathBuf,
    role: Role,
    port: u16,
    /// The cluster bus port (`--cluster-port`) of a cluster node: a free
    /// port of its own, as `port + 10000` may be over 65535.
    bus_port: Option<u16>,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free loopback port and waits until it answers
    /// `PING`. Installs `redis-server` first if this machine has none.
    pub(crate) fn start() -> RedisServer {
        RedisServer::start_as(Role::Standalone)
    }

    /// Starts a process as `role` on a free loopback port (in a new
    /// directory), trying other ports when one turns out taken, and waits
    /// until it answers `PING`.
    fn start_as(role: Role) -> RedisServer {
        let binary = redis_server_binary();
        let dir = fresh_dir();
        let mut last_failure = String::new();
        for _ in 0..PORT_TRIES {
            let ports = free_ports(2);
            let mut server = RedisServer {
                binary: binary.clone(),
                role,
                port: ports[0],
                bus_port: (role == Role::ClusterNode).then_some(ports[1]),
                dir: dir.clone(),
                child: None,
            };
            match server.spawn() {
                Ok(()) => return server,
                // Most likely the port was taken meanwhile: try another.
                Err(why) => {
                    // Nothing to remove yet: the directory is shared with
                    // the next try (its files are named after the port).
                    server.dir = PathBuf::new();
                    last_failure = why;
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        panic!(
            "{} did not start on any of {PORT_TRIES} free ports: {last_failure}",
            role.name()
        );
    }

    /// `redis://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port it listens on (the same after [`restart`](Self::restart)).
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The address it listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// Whether the process is running (started, and not stopped).
    pub(crate) fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The process's log so far (since it was last started), or a note
    /// saying why there is none.
    pub(crate) fn log(&self) -> String {
        read_log(&self.log_path())
    }

    /// Kills the server (SIGKILL, as a crash would) and waits for it to exit:
    /// from now on connections to its port are refused. Stopping a stopped
    /// server does nothing.
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server if it runs, then starts a fresh one (empty: nothing
    /// is persisted) on the same port and waits until it answers `PING`.
    /// Panics if the port has been taken meanwhile.
    ///
    /// What it was started as is kept: a replica is again a replica of the
    /// first primary (until Sentinels reconfigure it); a cluster node keeps
    /// its `nodes.conf`, so it rejoins its cluster with the same id and
    /// slots (but no keys); a Sentinel keeps its configuration file, which
    /// it rewrites as it learns.
    pub(crate) fn restart(&mut self) {
        self.stop();
        if let Err(why) = self.spawn() {
            panic!(
                "{} did not restart on port {}: {why}",
                self.role.name(),
                self.port
            );
        }
    }

    /// Sends `PING`; `Ok` when the answer is `+PONG`.
    pub(crate) fn ping(&self) -> Result<(), String> {
        match self.command(&["PING"])? {
            reply if reply == "+PONG" => Ok(()),
            other => Err(format!("PING answered {other:?}")),
        }
    }

    /// Sends one command (RESP, over a fresh connection) and returns the
    /// first line of the reply without its `\r\n`: `+OK`, `$5` (a bulk
    /// string's length; see [`get`](Self::get) and [`bulk`](Self::bulk)),
    /// `$-1` (nil), `:1`, `-ERR ...`, `-MOVED 866 127.0.0.1:7001`.
    pub(crate) fn command(&self, args: &[&str]) -> Result<String, String> {
        let mut stream = self.connect()?;
        send(&mut stream, args)?;
        read_line(&mut stream)
    }

    /// Sends one command (RESP, over a fresh connection) and returns its
    /// whole reply, arrays and bulk strings read to their end.
    pub(crate) fn request(&self, args: &[&str]) -> Result<Reply, String> {
        let mut stream = self.connect()?;
        send(&mut stream, args)?;
        read_reply(&mut BufReader::new(stream))
    }

    /// `GET key`: the value, `None` for nil.
    pub(crate) fn get(&self, key: &str) -> Result<Option<String>, String> {
        match self.request(&["GET", key])? {
            Reply::Bulk(value) => Ok(value),
            other => Err(format!("GET answered {other:?}")),
        }
    }

    /// A command whose reply is a bulk string (`INFO`, `CLUSTER INFO`,
    /// `CLUSTER NODES`): the whole string; an error for anything else
    /// (nil included).
    pub(crate) fn bulk(&self, args: &[&str]) -> Result<String, String> {
        match self.request(args)? {
            Reply::Bulk(Some(value)) => Ok(value),
            other => Err(format!("{args:?} answered {other:?}")),
        }
    }

    /// A command whose reply is an integer (`DBSIZE`, `CLUSTER KEYSLOT`).
    pub(crate) fn integer(&self, args: &[&str]) -> Result<i64, String> {
        match self.request(args)? {
            Reply::Integer(n) => Ok(n),
            other => Err(format!("{args:?} answered {other:?}")),
        }
    }

    /// `INFO <section>` (`replication`, `sentinel`, ...): its `name:value`
    /// lines; see [`info_field`].
    pub(crate) fn info(&self, section: &str) -> Result<String, String> {
        self.bulk(&["INFO", section])
    }

    /// A fresh connection, with [`PING_LIMIT`] as its read and write timeouts.
    fn connect(&self) -> Result<TcpStream, String> {
        let stream = TcpStream::connect_timeout(&self.addr(), PING_LIMIT)
            .map_err(|e| format!("cannot connect to {}: {e}", self.addr()))?;
        stream
            .set_read_timeout(Some(PING_LIMIT))
            .and_then(|()| stream.set_write_timeout(Some(PING_LIMIT)))
            .map_err(|e| format!("cannot set timeouts: {e}"))?;
        Ok(stream)
    }

    /// Its log file, named after its port (the directory may be shared by
    /// tries on several ports).
    fn log_path(&self) -> PathBuf {
        self.dir.join(format!("redis-{}.log", self.port))
    }

    /// Starts the process on `self.port` and waits until it answers `PING`;
    /// on failure the process is gone and the error has its log.
    fn spawn(&mut self) -> Result<(), String> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        let log = self.log_path();
        let _ = std::fs::remove_file(&log);
        let mut command = Command::new(&self.binary);
        if let Role::Sentinel { primary } = self.role {
            // A Sentinel takes its settings from a file it rewrites as it
            // learns (so the file must be writable); a restarted Sentinel
            // reads what it had learnt.
            let conf = self.dir.join(format!("sentinel-{}.conf", self.port));
            if !conf.exists() {
                let text = format!(
                    "port {port}\n\
                     bind 127.0.0.1\n\
                     daemonize no\n\
                     dir \"{dir}\"\n\
                     logfile \"{log}\"\n\
                     sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds {SENTINEL_MASTER} 1000\n\
                     sentinel failover-timeout {SENTINEL_MASTER} 5000\n\
                     sentinel parallel-syncs {SENTINEL_MASTER} 1\n",
                    port = self.port,
                    dir = self.dir.display(),
                    log = log.display(),
                );
                std::fs::write(&conf, text)
                    .map_err(|e| format!("cannot write {}: {e}", conf.display()))?;
            }
            command.arg(&conf).arg("--sentinel");
        } else {
            command
                .arg("--port")
                .arg(self.port.to_string())
                .args(["--bind", "127.0.0.1"])
                .args(["--save", ""])
                .args(["--appendonly", "no"])
                // A replica's first sync starts at once, not after the 5 s
                // Redis 7 waits by default for more replicas to share it.
                .args(["--repl-diskless-sync-delay", "0"])
                .args(["--daemonize", "no"])
                .arg("--dir")
                .arg(&self.dir)
                .arg("--logfile")
                .arg(&log);
            if let Role::Replica { primary } = self.role {
                command.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
            }
            if let Some(bus_port) = self.bus_port {
                command
                    .args(["--cluster-enabled", "yes"])
                    .arg("--cluster-config-file")
                    .arg(self.dir.join(format!("nodes-{}.conf", self.port)))
                    .args(["--cluster-port", &bus_port.to_string()])
                    .args([
                        "--cluster-node-timeout",
                        &CLUSTER_NODE_TIMEOUT_MS.to_string(),
                    ]);
            }
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.binary.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + READY_LIMIT;
        loop {
            let exited = self
                .child
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.child = None;
                return Err(format!(
                    "{} exited ({status}) before answering PING; its log:\n{}",
                    self.role.name(),
                    read_log(&log)
                ));
            }
            let answer = self.ping();
            if answer.is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.stop();
                return Err(format!(
                    "{} on port {} did not answer PING within {READY_LIMIT:?} \
                     (last: {answer:?}); its log:\n{}",
                    self.role.name(),
                    self.port,
                    read_log(&log)
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A RESP reply, as [`RedisServer::request`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `+OK`: a simple string, without its `+`.
    Status(String),
    /// `-ERR ...`: an error, without its `-`.
    Error(String),
    /// `:1`: an integer.
    Integer(i64),
    /// `$5\r\nhello`: a bulk string; `None` for nil (`$-1`).
    Bulk(Option<String>),
    /// `*2\r\n...`: an array; `None` for a nil array (`*-1`).
    Array(Option<Vec<Reply>>),
}

/// Three Redis Cluster nodes on free loopback ports, all primaries, sharing
/// the 16384 hash slots (as `redis-cli --cluster create` splits them).
/// Dropping it kills the nodes and removes their directories.
///
/// With no replicas and Redis's default `cluster-require-full-coverage yes`,
/// a stopped node makes the whole cluster refuse commands once the others
/// notice (`cluster-node-timeout` of 2 s); [`RedisServer::restart`] brings
/// the node back with its slots (but none of its keys), and
/// [`wait_until_ok`](Self::wait_until_ok) waits for the cluster to agree
/// again.
pub(crate) struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// For each slot, the index in `nodes` of the node that owns it.
    slots: Vec<usize>,
}

impl RedisCluster {
    /// Starts three cluster nodes, joins them with `redis-cli --cluster
    /// create`, and waits until every node reports the cluster `ok` with
    /// all 16384 slots assigned and the same owner for each slot. Panics,
    /// with `redis-cli`'s output and the nodes' logs, when that fails.
    pub(crate) fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..CLUSTER_SIZE)
            .map(|_| RedisServer::start_as(Role::ClusterNode))
            .collect();
        let cli = redis_cli_binary();
        let mut create = Command::new(&cli);
        create.args(["--cluster", "create"]);
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create.args(["--cluster-replicas", "0", "--cluster-yes"]);
        let failure = match run_bounded(create, CLI_LIMIT) {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(format!(
                "exited ({})\n--- stdout\n{}\n--- stderr\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            )),
            Err(why) => Some(why),
        };
        if let Some(why) = failure {
            panic!(
                "`{} --cluster create` failed: {why}\n{}",
                cli.display(),
                logs(&nodes)
            );
        }
        let mut cluster = RedisCluster {
            nodes,
            slots: Vec::new(),
        };
        match cluster.converged(SETUP_LIMIT) {
            Ok(slots) => cluster.slots = slots,
            Err(why) => panic!("the Redis Cluster did not come up: {why}"),
        }
        cluster
    }

    /// Each node's `redis://127.0.0.1:PORT`.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes' URLs joined with `,`: the form of `HAIP_REDIS_URL` for a
    /// cluster (`redis://127.0.0.1:P1,redis://127.0.0.1:P2,...`).
    pub(crate) fn seed_list(&self) -> String {
        self.urls().join(",")
    }

    /// The nodes, in the order of [`urls`](Self::urls).
    pub(crate) fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes, to stop or restart one.
    pub(crate) fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// The index in [`nodes`](Self::nodes) of the node that owns `key`'s
    /// slot (as the cluster assigned them at start).
    pub(crate) fn node_for_key(&self, key: &str) -> usize {
        self.slots[usize::from(key_slot(key))]
    }

    /// Checks [`key_slot`] against the cluster's own `CLUSTER KEYSLOT key`
    /// (asked of the first running node).
    pub(crate) fn check_keyslot(&self, key: &str) -> Result<(), String> {
        let node = self
            .nodes
            .iter()
            .find(|node| node.is_running())
            .ok_or("no node runs")?;
        let theirs = node.integer(&["CLUSTER", "KEYSLOT", key])?;
        let ours = key_slot(key);
        if theirs == i64::from(ours) {
            Ok(())
        } else {
            Err(format!(
                "key {key:?}: CLUSTER KEYSLOT says {theirs}, key_slot {ours}"
            ))
        }
    }

    /// `DBSIZE` of each node, in the order of [`nodes`](Self::nodes).
    pub(crate) fn key_count(&self) -> Result<Vec<u64>, String> {
        self.nodes
            .iter()
            .map(|node| {
                let n = node.integer(&["DBSIZE"])?;
                u64::try_from(n).map_err(|_| format!("DBSIZE answered {n}"))
            })
            .collect()
    }

    /// Waits, at most `limit`, until every node (all must be running)
    /// reports `cluster_state:ok`, the 16384 slots assigned, the three nodes
    /// known, and each slot owned by the node that owned it at start. The
    /// error has the last thing amiss and the nodes' logs.
    pub(crate) fn wait_until_ok(&self, limit: Duration) -> Result<(), String> {
        let slots = self.converged(limit)?;
        if slots == self.slots {
            Ok(())
        } else {
            Err("the slots moved to other nodes since the cluster started".to_owned())
        }
    }

    /// Waits, at most `limit`, until every node reports the cluster `ok`,
    /// complete and the same slot owners; returns those owners.
    fn converged(&self, limit: Duration) -> Result<Vec<usize>, String> {
        let deadline = Instant::now() + limit;
        loop {
            let last = match self.agreed() {
                Ok(slots) => return Ok(slots),
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "the cluster's nodes did not agree within {limit:?}; last: {last}\n{}",
                    logs(&self.nodes)
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// The slot owners every node reports, when they all report the cluster
    /// `ok`, complete and the same owners.
    fn agreed(&self) -> Result<Vec<usize>, String> {
        let mut agreed: Option<Vec<usize>> = None;
        for node in &self.nodes {
            let port = node.port();
            let info = node.bulk(&["CLUSTER", "INFO"])?;
            for (field, wanted) in [
                ("cluster_state", "ok".to_owned()),
                ("cluster_slots_assigned", CLUSTER_SLOTS.to_string()),
                ("cluster_known_nodes", CLUSTER_SIZE.to_string()),
            ] {
                let value = info_field(&info, field);
                if value != Some(wanted.as_str()) {
                    return Err(format!(
                        "node {port}: CLUSTER INFO has {field}:{value:?}, not {wanted}"
                    ));
                }
            }
            let slots = self.slot_owners(&node.bulk(&["CLUSTER", "NODES"])?)?;
            match &agreed {
                Some(first) if *first != slots => {
                    return Err(format!(
                        "node {port} sees other slot owners than node {}",
                        self.nodes[0].port()
                    ));
                }
                Some(_) => {}
                None => agreed = Some(slots),
            }
        }
        agreed.ok_or_else(|| "the cluster has no nodes".to_owned())
    }

    /// Each slot's owner (an index in `nodes`) from a `CLUSTER NODES` reply:
    /// lines `<id> <ip:port@cport[,hostname]> <flags> <primary> <ping-sent>
    /// <pong-received> <epoch> <link-state> <slot>...`, a slot being `a-b`,
    /// `a`, or `[a->-id]`/`[a-<-id]` for one being migrated (skipped).
    fn slot_owners(&self, nodes: &str) -> Result<Vec<usize>, String> {
        const NONE: usize = usize::MAX;
        let mut owners = vec![NONE; CLUSTER_SLOTS];
        for line in nodes.lines().filter(|line| !line.trim().is_empty()) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else {
                return Err(format!("a CLUSTER NODES line without flags: {line:?}"));
            };
            if !flags.split(',').any(|flag| flag == "master") {
                continue;
            }
            let port = addr
                .split(['@', ','])
                .next()
                .and_then(|host_port| host_port.rsplit(':').next())
                .and_then(|port| port.parse::<u16>().ok())
                .ok_or_else(|| format!("a CLUSTER NODES line without a port: {line:?}"))?;
            let index = self
                .nodes
                .iter()
                .position(|node| node.port() == port)
                .ok_or_else(|| format!("CLUSTER NODES names a stranger: {line:?}"))?;
            for range in fields
                .iter()
                .skip(8)
                .filter(|range| !range.starts_with('['))
            {
                let (first, last) = range.split_once('-').unwrap_or((range, range));
                let (Ok(first), Ok(last)) = (first.parse::<usize>(), last.parse::<usize>()) else {
                    return Err(format!("a slot range {range:?} in {line:?}"));
                };
                if first > last || last >= CLUSTER_SLOTS {
                    return Err(format!("a slot range {range:?} in {line:?}"));
                }
                owners[first..=last].fill(index);
            }
        }
        match owners.iter().position(|&owner| owner == NONE) {
            Some(slot) => Err(format!("CLUSTER NODES leaves slot {slot} unowned")),
            None => Ok(owners),
        }
    }
}

/// A key's Redis Cluster hash slot: CRC16 (XMODEM: polynomial `0x1021`,
/// initial value 0) of the key, or of its hash tag (what is between the
/// first `{` and the first `}` after it, when that is not empty), modulo
/// 16384.
pub(crate) fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tag = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &bytes[open + 1..];
        let len = rest.iter().position(|&b| b == b'}')?;
        (len > 0).then(|| &rest[..len])
    });
    crc16_xmodem(tag.unwrap_or(bytes)) % CLUSTER_SLOTS as u16
}

/// CRC16/XMODEM, as Redis Cluster hashes keys (`"123456789"` gives `0x31C3`).
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A primary, its replica, and three Sentinels monitoring them as
/// [`SENTINEL_MASTER`] (quorum 2, `down-after-milliseconds` 1000,
/// `failover-timeout` 5000), all on free loopback ports. Dropping it kills
/// them all and removes their directories.
///
/// [`primary`](Self::primary) and [`replica`](Self::replica) name the
/// servers as they started: after a failover the replica is the primary
/// (see [`current_primary_port`](Self::current_primary_port)).
pub(crate) struct RedisSentinels {
    // Dropped first: Sentinels are gone before they could see the primary go.
    sentinels: Vec<RedisServer>,
    primary: RedisServer,
    replica: RedisServer,
}

impl RedisSentinels {
    /// Starts the primary, then its replica (waiting until its link to the
    /// primary is up), then the Sentinels, and waits until each Sentinel
    /// names the primary, knows the replica and the two other Sentinels.
    /// Panics, with the logs, when that fails.
    pub(crate) fn start() -> RedisSentinels {
        let primary = RedisServer::start_as(Role::Standalone);
        let replica = RedisServer::start_as(Role::Replica {
            primary: primary.port(),
        });
        if let Err(why) = wait_for(
            "the replica's link to its primary is up",
            SETUP_LIMIT,
            || {
                let info = replica.info("replication")?;
                match info_field(&info, "master_link_status") {
                    Some("up") => Ok(()),
                    other => Err(format!("master_link_status:{other:?}")),
                }
            },
        ) {
            panic!("{why}\n{}", logs([&primary, &replica]));
        }
        let sentinels = (0..SENTINELS)
            .map(|_| {
                RedisServer::start_as(Role::Sentinel {
                    primary: primary.port(),
                })
            })
            .collect();
        let setup = RedisSentinels {
            sentinels,
            primary,
            replica,
        };
        let wanted = setup.primary.port();
        let ready = wait_for("the Sentinels know each other", SETUP_LIMIT, || {
            for sentinel in &setup.sentinels {
                let port = sentinel.port();
                let named = sentinel_primary_port(sentinel)?;
                if named != wanted {
                    return Err(format!("Sentinel {port} names {named}, not {wanted}"));
                }
                let info = sentinel.info("sentinel")?;
                let master = info_field(&info, "master0").unwrap_or("");
                let known = |part: &str| master.split(',').any(|p| p == part);
                let replicas = "slaves=1";
                let sentinels = format!("sentinels={SENTINELS}");
                if !(known("status=ok") && known(replicas) && known(&sentinels)) {
                    return Err(format!(
                        "Sentinel {port}: master0:{master} (not status=ok, {replicas}, {sentinels})"
                    ));
                }
            }
            Ok(())
        });
        if let Err(why) = ready {
            panic!("{why}\n{}", setup.logs());
        }
        setup
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/haip`: the
    /// Sentinels and the name they monitor the primary by.
    pub(crate) fn url(&self) -> String {
        let addrs: Vec<String> = self
            .sentinels
            .iter()
            .map(|sentinel| format!("127.0.0.1:{}", sentinel.port()))
            .collect();
        format!("redis+sentinel://{}/{SENTINEL_MASTER}", addrs.join(","))
    }

    /// The server that started as the primary.
    pub(crate) fn primary(&mut self) -> &mut RedisServer {
        &mut self.primary
    }

    /// The server that started as the replica.
    pub(crate) fn replica(&mut self) -> &mut RedisServer {
        &mut self.replica
    }

    /// The Sentinels.
    pub(crate) fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The Sentinels, to stop or restart one.
    pub(crate) fn sentinels_mut(&mut self) -> &mut [RedisServer] {
        &mut self.sentinels
    }

    /// The primary's port as the running Sentinels name it
    /// (`SENTINEL get-master-addr-by-name haip`); an error when none
    /// answers or they disagree (as they may during a failover).
    pub(crate) fn current_primary_port(&self) -> Result<u16, String> {
        let mut named: Option<u16> = None;
        for sentinel in self.sentinels.iter().filter(|s| s.is_running()) {
            let port = sentinel_primary_port(sentinel)?;
            match named {
                Some(other) if other != port => {
                    return Err(format!(
                        "the Sentinels disagree: {other} and {port} (Sentinel {})",
                        sentinel.port()
                    ));
                }
                _ => named = Some(port),
            }
        }
        named.ok_or_else(|| "no Sentinel runs".to_owned())
    }

    /// Waits, at most `limit`, until the running Sentinels all name a
    /// primary other than `old_port`, and that server says it is a primary
    /// (`role:master`); returns its port. The error has the last answer and
    /// every log.
    pub(crate) fn wait_for_failover(&self, old_port: u16, limit: Duration) -> Result<u16, String> {
        let mut new_port = 0;
        wait_for("the Sentinels fail over", limit, || {
            let port = self.current_primary_port()?;
            if port == old_port {
                return Err(format!("the Sentinels still name {old_port}"));
            }
            let server = [&self.primary, &self.replica]
                .into_iter()
                .find(|server| server.port() == port)
                .ok_or_else(|| format!("the Sentinels name a stranger: {port}"))?;
            let info = server.info("replication")?;
            match info_field(&info, "role") {
                Some("master") => {
                    new_port = port;
                    Ok(())
                }
                role => Err(format!("the Sentinels name {port}, whose role is {role:?}")),
            }
        })
        .map_err(|why| format!("{why}\n{}", self.logs()))?;
        Ok(new_port)
    }

    /// The logs of the servers and the Sentinels.
    fn logs(&self) -> String {
        logs(
            [&self.primary, &self.replica]
                .into_iter()
                .chain(&self.sentinels),
        )
    }
}

/// The port a Sentinel names for [`SENTINEL_MASTER`]
/// (`SENTINEL get-master-addr-by-name`: an array of the ip and the port).
fn sentinel_primary_port(sentinel: &RedisServer) -> Result<u16, String> {
    let reply = sentinel.request(&["SENTINEL", "get-master-addr-by-name", SENTINEL_MASTER])?;
    if let Reply::Array(Some(items)) = &reply
        && let [Reply::Bulk(Some(_ip)), Reply::Bulk(Some(port))] = items.as_slice()
        && let Ok(port) = port.parse::<u16>()
    {
        return Ok(port);
    }
    Err(format!(
        "Sentinel {}: get-master-addr-by-name answered {reply:?}",
        sentinel.port()
    ))
}

/// Calls `ready` every [`POLL`] until it is `Ok`, at most `limit`; the error
/// says what was awaited and `ready`'s last error.
fn wait_for(
    what: &str,
    limit: Duration,
    mut ready: impl FnMut() -> Result<(), String>,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        let last = match ready() {
            Ok(()) => return Ok(()),
            Err(why) => why,
        };
        if Instant::now() >= deadline {
            return Err(format!("waited {limit:?} until {what}; last: {last}"));
        }
        std::thread::sleep(POLL);
    }
}

/// A `name:value` line's value in `INFO` or `CLUSTER INFO` output.
pub(crate) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim_end())
    })
}

/// The logs of `servers`, each under a heading.
fn logs<'a>(servers: impl IntoIterator<Item = &'a RedisServer>) -> String {
    servers
        .into_iter()
        .map(|server| {
            format!(
                "--- log of {} on port {}\n{}",
                server.role.name(),
                server.port,
                server.log()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `command` to its end, at most `limit` (then kills it), with its
/// output captured.
fn run_bounded(mut command: Command, limit: Duration) -> Result<Output, String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {command:?}: {e}"))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
            Ok(None) => break Err(format!("it did not finish within {limit:?}")),
            Err(e) => break Err(format!("cannot wait for it: {e}")),
        }
    };
    if status.is_err() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    match status {
        Ok(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        Err(why) => Err(format!(
            "{why}\n--- stdout\n{}\n--- stderr\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        )),
    }
}

/// Writes `args` as a RESP array of bulk strings.
fn send(stream: &mut TcpStream, args: &[&str]) -> Result<(), String> {
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("cannot send {args:?}: {e}"))
}

/// One reply line, without its `\r\n`.
fn read_line(stream: &mut impl Read) -> Result<String, String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        match stream.read(&mut byte) {
            Ok(0) => return Err(format!("connection closed after {line:?}")),
            Ok(_) => line.push(byte[0]),
            Err(e) => return Err(format!("no reply: {e}")),
        }
        if line.len() > 64 * 1024 {
            return Err("a reply line over 64 KiB".to_owned());
        }
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|e| format!("a reply that is not UTF-8: {e}"))
}

/// One whole reply (arrays and bulk strings read to their end).
fn read_reply(stream: &mut impl Read) -> Result<Reply, String> {
    let line = read_line(stream)?;
    let (kind, rest) = line.split_at_checked(1).ok_or("an empty reply line")?;
    let number = || {
        rest.parse::<i64>()
            .map_err(|_| format!("a reply line {line:?} without its number"))
    };
    match kind {
        "+" => Ok(Reply::Status(rest.to_owned())),
        "-" => Ok(Reply::Error(rest.to_owned())),
        ":" => Ok(Reply::Integer(number()?)),
        "$" => {
            let Ok(len) = usize::try_from(number()?) else {
                return Ok(Reply::Bulk(None));
            };
            if len > 64 * 1024 * 1024 {
                return Err(format!("a bulk string of {len} bytes"));
            }
            let mut bytes = vec![0; len + 2];
            stream
                .read_exact(&mut bytes)
                .map_err(|e| format!("a bulk string of {len} bytes cut short: {e}"))?;
            if !bytes.ends_with(b"\r\n") {
                return Err(format!("a bulk string of {len} bytes not ending in CRLF"));
            }
            bytes.truncate(len);
            let text = String::from_utf8(bytes)
                .map_err(|e| format!("a bulk string that is not UTF-8: {e}"))?;
            Ok(Reply::Bulk(Some(text)))
        }
        "*" => {
            let Ok(len) = usize::try_from(number()?) else {
                return Ok(Reply::Array(None));
            };
            let items = (0..len)
                .map(|_| read_reply(stream))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Reply::Array(Some(items)))
        }
        _ => Err(format!("an unknown reply {line:?}")),
    }
}

/// A log file's text, or a note saying why there is none.
fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("<no log at {}: {e}>", path.display()))
}

/// `n` distinct free loopback ports (bound together, then released).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a loopback port is free"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("a bound port").port())
        .collect()
}

/// A new directory for one server, under the system's temporary directory.
fn fresh_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("haip-redis-{}-{n}", std::process::id()))
}

/// `redis-server`: `$HAIP_REDIS_SERVER`, on `PATH`, or installed now (once
/// per test process; once per machine, under a lock).
fn redis_server_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            system::Program {
                binary: "redis-server",
                package: "redis-server",
                env: "HAIP_REDIS_SERVER",
            }
            .path()
        })
        .clone()
}

/// `redis-cli`: `$HAIP_REDIS_CLI`, else the one beside `redis-server` (they
/// come together), else on `PATH` or installed now (Debian's `redis-tools`).
fn redis_cli_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let program = system::Program {
                binary: "redis-cli",
                package: "redis-tools",
                env: "HAIP_REDIS_CLI",
            };
            if std::env::var_os(program.env).is_none()
                && let Some(dir) = redis_server_binary().parent()
            {
                let beside = dir.join(program.binary);
                if beside.is_file() && runs(&beside) {
                    return beside;
                }
            }
            program.path()
        })
        .clone()
}

/// Whether `binary --version` succeeds.
fn runs(binary: &Path) -> bool {
    Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|out| out.status.success())
}
