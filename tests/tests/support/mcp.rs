//! Where the MCP implementations the bridge is tested against live (installed
//! by `tests/mcp/setup.sh`), and the quickstart's MCP stdio binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root.
pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `$HAIP_MCP_DEPS`, or `target/mcp-deps` where `tests/mcp/setup.sh` installs.
pub(crate) fn deps() -> PathBuf {
    std::env::var_os("HAIP_MCP_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target").join("mcp-deps"))
}

fn require(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is not installed at {}: run `bash tests/mcp/setup.sh` (needs node/npm and python3)",
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
    require(workspace().join("tests/mcp").join(name), name)
}

/// The `mcp_export` example (the quickstart's tools over MCP stdio), built
/// if `cargo test` has not built it already.
pub(crate) fn mcp_export_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            // Test binaries live in target/<profile>/deps; examples beside it.
            let exe = std::env::current_exe().expect("the test binary has a path");
            let profile_dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("test binaries live in target/<profile>/deps");
            let binary = profile_dir.join("examples").join("mcp_export");
            if !binary.exists() {
                let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
                let status = Command::new(cargo)
                    .args(["build", "-p", "haip-examples", "--example", "mcp_export"])
                    .current_dir(workspace())
                    .status()
                    .expect("cargo runs");
                assert!(status.success(), "building the mcp_export example failed");
            }
            require(binary, "the mcp_export example")
        })
        .clone()
}

/// A free loopback port (bound, then released) for a server we do not start.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a loopback port is free")
        .port()
}
