//! Where the MCP implementations the bridge is tested against live, installed
//! on first use by `tests/mcp/setup.sh`, and the example binaries (the
//! quickstart, its MCP stdio variant) that tests run as real processes.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The workspace root.
pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `$HAIP_MCP_DEPS`, or `target/mcp-deps` where `tests/mcp/setup.sh` installs;
/// installed there first if they are not yet (see [`ensure_installed`]).
pub(crate) fn deps() -> PathBuf {
    let dir = std::env::var_os("HAIP_MCP_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target").join("mcp-deps"));
    ensure_installed(&dir);
    dir
}

/// Runs `tests/mcp/setup.sh` once per test process, holding a lock file so
/// test binaries running in parallel do not install at the same time (the
/// script is idempotent: a second run only checks the versions). Fails the
/// test, naming what is missing, when node, npm or python3 is not installed,
/// and shows the script's output when it fails.
fn ensure_installed(dir: &Path) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        for (program, package) in [
            ("node", "Node.js (Debian: `apt-get install nodejs npm`)"),
            ("npm", "npm (Debian: `apt-get install npm`)"),
            (
                "python3",
                "Python 3 with venv (Debian: `apt-get install python3 python3-venv`)",
            ),
        ] {
            let found = Command::new(program)
                .arg("--version")
                .output()
                .is_ok_and(|out| out.status.success());
            assert!(
                found,
                "the MCP interop tests need `{program}`, which is not on PATH: install {package}"
            );
        }
        std::fs::create_dir_all(dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let lock_path = dir.join(".setup.lock");
        let lock = std::fs::File::create(&lock_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", lock_path.display()));
        lock.lock()
            .unwrap_or_else(|e| panic!("cannot lock {}: {e}", lock_path.display()));
        let out = Command::new("bash")
            .arg(workspace().join("tests/mcp/setup.sh"))
            .env("HAIP_MCP_DEPS", dir)
            .current_dir(workspace())
            .output()
            .expect("bash runs tests/mcp/setup.sh");
        drop(lock);
        assert!(
            out.status.success(),
            "tests/mcp/setup.sh failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
    });
}

fn require(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is not at {} although tests/mcp/setup.sh succeeded",
        path.display()
    );
    path
}

/// The entry point of `@modelcontextprotocol/server-everything`; run it with
/// `node <path> [stdio|streamableHttp]`.
pub(crate) fn everything() -> PathBuf {
    require(
        deps().join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        "@modelcontextprotocol/server-everything",
    )
}

/// The Python interpreter of the virtualenv that has the `mcp` SDK.
pub(crate) fn python() -> PathBuf {
    require(deps().join("py/bin/python"), "the Python mcp SDK")
}

/// A script in `tests/mcp/`.
pub(crate) fn script(name: &str) -> PathBuf {
    let path = workspace().join("tests/mcp").join(name);
    assert!(path.exists(), "{} is missing", path.display());
    path
}

/// The `mcp_export` example (the quickstart's tools over MCP stdio).
pub(crate) fn mcp_export_binary() -> PathBuf {
    example_binary("mcp_export")
}

/// The binary of an example of `haip-examples`, built if `cargo test` has not
/// built it already.
pub(crate) fn example_binary(name: &str) -> PathBuf {
    // One cargo build at a time within this test binary.
    static BUILDING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    // Test binaries live in target/<profile>/deps; examples beside it.
    let exe = std::env::current_exe().expect("the test binary has a path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binaries live in target/<profile>/deps");
    let binary = profile_dir.join("examples").join(name);
    if !binary.exists() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "haip-examples", "--example", name])
            .current_dir(workspace())
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the {name} example failed");
    }
    assert!(
        binary.exists(),
        "the {name} example is not at {}",
        binary.display()
    );
    binary
}

/// A free loopback port (bound, then released) for a server we do not start.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a loopback port is free")
        .port()
}
