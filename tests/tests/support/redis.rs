//! A real Redis server for tests, on a free loopback port with its own
//! temporary directory, no persistence (`--save "" --appendonly no`), killed
//! when dropped. Include it with
//! `#[path = "support/redis.rs"] mod redis_support;`.
//!
//! `redis-server` is taken from `$HAIP_REDIS_SERVER`, else from `PATH`
//! (or `/usr/bin`, `/usr/sbin`); when there is none it is installed with
//! `apt-get update && apt-get install -y redis-server`, once per machine
//! under a lock file in `target/`. When that is impossible the test fails
//! saying how to install it: a test that needs Redis never skips silently.
//!
//! Everything here blocks (processes and a few milliseconds of loopback
//! TCP), which is fine in `#[test]`s and in multi-threaded `#[tokio::test]`s.
#![allow(dead_code)]

#[path = "system.rs"]
pub(crate) mod system;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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

/// A running `redis-server` child process. Dropping it kills the process and
/// removes its directory.
pub(crate) struct RedisServer {
    binary: PathBuf,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free loopback port and waits until it answers
    /// `PING`. Installs `redis-server` first if this machine has none.
    pub(crate) fn start() -> RedisServer {
        let binary = redis_server_binary();
        let dir = fresh_dir();
        let mut last_failure = String::new();
        for _ in 0..PORT_TRIES {
            let port = free_port();
            let mut server = RedisServer {
                binary: binary.clone(),
                port,
                dir: dir.clone(),
                child: None,
            };
            match server.spawn() {
                Ok(()) => return server,
                // Most likely the port was taken meanwhile: try another.
                Err(why) => {
                    // Nothing to remove yet: the directory is shared with
                    // the next try.
                    server.dir = PathBuf::new();
                    last_failure = why;
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        panic!("redis-server did not start on any of {PORT_TRIES} free ports: {last_failure}");
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
    pub(crate) fn restart(&mut self) {
        self.stop();
        if let Err(why) = self.spawn() {
            panic!("redis-server did not restart on port {}: {why}", self.port);
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
    /// string's length; see [`get`](Self::get)), `$-1` (nil), `:1`, `-ERR ...`.
    pub(crate) fn command(&self, args: &[&str]) -> Result<String, String> {
        let mut stream = self.connect()?;
        send(&mut stream, args)?;
        read_line(&mut stream)
    }

    /// `GET key`: the value, `None` for nil.
    pub(crate) fn get(&self, key: &str) -> Result<Option<String>, String> {
        let mut stream = self.connect()?;
        send(&mut stream, &["GET", key])?;
        let head = read_line(&mut stream)?;
        let len = head
            .strip_prefix('$')
            .and_then(|n| n.parse::<i64>().ok())
            .ok_or_else(|| format!("GET answered {head:?}"))?;
        if len < 0 {
            return Ok(None);
        }
        let value = read_line(&mut stream)?;
        Ok(Some(value))
    }

    fn connect(&self) -> Result<TcpStream, String> {
        let stream = TcpStream::connect_timeout(&self.addr(), PING_LIMIT)
            .map_err(|e| format!("cannot connect to {}: {e}", self.addr()))?;
        stream
            .set_read_timeout(Some(PING_LIMIT))
            .and_then(|()| stream.set_write_timeout(Some(PING_LIMIT)))
            .map_err(|e| format!("cannot set timeouts: {e}"))?;
        Ok(stream)
    }

    /// Starts the process on `self.port` and waits until it answers `PING`;
    /// on failure the process is gone and the error has its log.
    fn spawn(&mut self) -> Result<(), String> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        let log = self.dir.join(format!("redis-{}.log", self.port));
        let _ = std::fs::remove_file(&log);
        let child = Command::new(&self.binary)
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
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
                    "redis-server exited ({status}) before answering PING; its log:\n{}",
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
                    "redis-server on port {} did not answer PING within {READY_LIMIT:?} \
                     (last: {answer:?}); its log:\n{}",
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
fn read_line(stream: &mut TcpStream) -> Result<String, String> {
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

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("<no log at {}: {e}>", path.display()))
}

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("a loopback port is free")
        .port()
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
