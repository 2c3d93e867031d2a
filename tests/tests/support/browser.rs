//! A real browser for tests: Debian's headless Chromium, driven over
//! WebDriver by `chromedriver` on a free loopback port. Include it with
//! `#[path = "support/browser.rs"] mod browser;`.
//!
//! `chromium` and `chromedriver` are taken from `$HAIP_CHROMIUM` and
//! `$HAIP_CHROMEDRIVER`, else from `PATH` (or `/usr/bin`); when either is
//! missing both are installed with `apt-get update && apt-get install -y
//! chromium chromium-driver`, once per machine under a lock file in
//! `target/`. When that is impossible the test fails saying how to install
//! them: a test that needs a browser never skips silently.
//!
//! One `chromedriver` serves every test of a test binary that runs at the
//! same time (each test gets its own browser session); the last [`Browser`]
//! to go kills it, with every Chromium it started.
#![allow(dead_code)]

use std::future::Future;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use futures_util::FutureExt;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

/// How long any wait for the page may take before the test fails.
pub(crate) const PAGE_WAIT: Duration = Duration::from_secs(15);

/// How long `chromedriver` may take to answer `/status` after it starts.
const DRIVER_READY: Duration = Duration::from_secs(10);

/// How often a condition on the page is checked while waiting for it.
const POLL: Duration = Duration::from_millis(50);

/// The default window: a laptop screen.
pub(crate) const WIDE: (u32, u32) = (1280, 900);

/// A running `chromedriver`, shared by the tests running at the same time.
struct Driver {
    child: Child,
    port: u16,
    /// The driver's `TMPDIR`, where each Chromium makes its profile: killed,
    /// they leave them behind, so it goes with the driver.
    tmp: std::path::PathBuf,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // chromedriver runs in its own process group with the browsers it
        // started: end them all, not only the driver.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}

/// The shared driver, started now if no test holds one.
fn driver() -> Arc<Driver> {
    static SHARED: Mutex<Weak<Driver>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(driver) = shared.upgrade() {
        return driver;
    }
    let driver = Arc::new(start_driver());
    *shared = Arc::downgrade(&driver);
    driver
}

fn start_driver() -> Driver {
    let (_, chromedriver) = binaries();
    let mut last_failure = String::new();
    for _ in 0..3 {
        let port = free_port();
        let tmp =
            std::env::temp_dir().join(format!("haip-chromedriver-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&tmp).expect("a temporary directory for chromedriver");
        let child = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", chromedriver.display()));
        let mut driver = Driver { child, port, tmp };
        let deadline = Instant::now() + DRIVER_READY;
        loop {
            if let Ok(Some(status)) = driver.child.try_wait() {
                last_failure = format!("chromedriver exited ({status}) on port {port}");
                break;
            }
            match driver_status(port) {
                Ok(true) => return driver,
                Ok(false) | Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => {
                    last_failure = format!(
                        "chromedriver on port {port} not ready within {DRIVER_READY:?}: {other:?}"
                    );
                    break;
                }
            }
        }
        drop(driver);
    }
    panic!("chromedriver did not start: {last_failure}");
}

/// `GET /status` over a fresh loopback connection: whether it says ready.
/// (chromedriver keeps the connection open: read only as far as the answer.)
fn driver_status(port: u16) -> Result<bool, String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&raw).replace(' ', "");
        if text.contains("\"ready\":true") {
            return Ok(true);
        }
        if text.contains("\"ready\":false") {
            return Ok(false);
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(false),
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
        if raw.len() > 64 * 1024 {
            return Err("an answer over 64 KiB".to_owned());
        }
    }
}

/// Browsers open at once in one test binary: each Chromium wants a core.
const BROWSERS_AT_ONCE: usize = 2;

/// A place among the [`BROWSERS_AT_ONCE`] browsers; given back when dropped.
struct Slot;

static SLOTS: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

impl Slot {
    /// Waits (blocking) for a free place.
    fn take() -> Slot {
        let (taken, freed) = &SLOTS;
        let mut taken = taken.lock().unwrap_or_else(|e| e.into_inner());
        while *taken >= BROWSERS_AT_ONCE {
            taken = freed.wait(taken).unwrap_or_else(|e| e.into_inner());
        }
        *taken += 1;
        Slot
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let (taken, freed) = &SLOTS;
        *taken.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        freed.notify_one();
    }
}

/// One browser window in its own WebDriver session, on the shared driver.
pub(crate) struct Browser {
    client: Client,
    // Dropped in this order: the session's place, then (maybe) the driver.
    _slot: Slot,
    _driver: Arc<Driver>,
}

impl Browser {
    /// Opens headless Chromium with a window of `width` x `height` CSS pixels.
    pub(crate) async fn open((width, height): (u32, u32)) -> Browser {
        let (slot, driver) = tokio::task::spawn_blocking(|| (Slot::take(), driver()))
            .await
            .expect("starting chromedriver does not panic");
        let (chromium, _) = binaries();
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-dev-shm-usage",
                    "--disable-gpu",
                    "--no-first-run",
                    "--hide-scrollbars",
                    format!("--window-size={width},{height}"),
                ],
            },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("a JSON object literal")
        };
        let url = format!("http://127.0.0.1:{}", driver.port);
        let client = tokio::time::timeout(
            PAGE_WAIT,
            ClientBuilder::new(HttpConnector::new())
                .capabilities(capabilities)
                .connect(&url),
        )
        .await
        .unwrap_or_else(|_| panic!("no browser session within {PAGE_WAIT:?}"))
        .unwrap_or_else(|e| panic!("chromedriver refused a session: {e}"));
        let browser = Browser {
            client,
            _slot: slot,
            _driver: driver,
        };
        browser.resize((width, height)).await;
        browser
    }

    /// Runs `test` with a fresh browser and closes it however `test` ends;
    /// when it fails, the page is saved as `FAILED-<name>.png` and its
    /// envelope log printed, to see what the page saw.
    pub(crate) async fn run<F, Fut>(name: &str, size: (u32, u32), test: F)
    where
        F: FnOnce(Arc<Browser>) -> Fut,
        Fut: Future<Output = ()>,
    {
        let browser = Arc::new(Browser::open(size).await);
        let outcome = AssertUnwindSafe(test(Arc::clone(&browser)))
            .catch_unwind()
            .await;
        let client = &browser.client;
        if outcome.is_err() {
            if let Ok(png) = client.screenshot().await {
                let path = screenshot_dir().join(format!("FAILED-{name}.png"));
                let _ = std::fs::write(&path, png);
                eprintln!("the page when {name} failed: {}", path.display());
            }
            let wire = client
                .execute(
                    "const l = document.getElementById('wire-log'); \
                     return l ? l.innerText : document.body.innerText;",
                    vec![],
                )
                .await;
            eprintln!("the page's envelope log: {wire:?}");
        }
        let _ = client.clone().close().await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }

    /// The WebDriver client, for anything the helpers below lack.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Sets the window so that the page is `width` x `height` CSS pixels.
    pub(crate) async fn resize(&self, (width, height): (u32, u32)) {
        self.client
            .set_window_size(width, height)
            .await
            .unwrap_or_else(|e| panic!("cannot resize the window: {e}"));
        // The outer window includes the browser's frame, if any: grow it by
        // the difference so the page itself gets the asked-for size.
        let inner = self
            .eval("return [window.innerWidth, window.innerHeight];")
            .await;
        let dx = width.saturating_sub(inner[0].as_u64().unwrap_or(0) as u32);
        let dy = height.saturating_sub(inner[1].as_u64().unwrap_or(0) as u32);
        if dx > 0 || dy > 0 {
            let _ = self.client.set_window_size(width + dx, height + dy).await;
        }
    }

    /// Loads `url` and waits until the document is complete.
    pub(crate) async fn goto(&self, url: &str) {
        tokio::time::timeout(PAGE_WAIT, self.client.goto(url))
            .await
            .unwrap_or_else(|_| panic!("{url} did not load within {PAGE_WAIT:?}"))
            .unwrap_or_else(|e| panic!("cannot load {url}: {e}"));
    }

    /// Runs `script` (a function body: `return ...;`) in the page.
    pub(crate) async fn eval(&self, script: &str) -> Value {
        self.client
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("script failed ({e}): {script}"))
    }

    /// Waits until `expression` (JavaScript) is truthy in the page; returns
    /// its value. Fails after [`PAGE_WAIT`] saying `what` was awaited.
    pub(crate) async fn wait_until(&self, what: &str, expression: &str) -> Value {
        let script = format!("return ({expression});");
        let deadline = tokio::time::Instant::now() + PAGE_WAIT;
        loop {
            let value = self.eval(&script).await;
            let truthy = match &value {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                Value::Array(_) | Value::Object(_) => true,
            };
            if truthy {
                return value;
            }
            if tokio::time::Instant::now() >= deadline {
                let status = self
                    .eval("return document.getElementById('status')?.innerText ?? '';")
                    .await;
                panic!(
                    "timed out after {PAGE_WAIT:?} waiting for {what} ({expression}); \
                     the page's status: {status}"
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until an element matches `css` and is displayed; returns it.
    pub(crate) async fn find(&self, css: &str) -> Element {
        let selector = serde_json::to_string(css).expect("a string encodes");
        self.wait_until(
            &format!("`{css}` to be shown"),
            &format!(
                "(() => {{ const e = document.querySelector({selector}); \
                 return !!e && e.getClientRects().length > 0; }})()"
            ),
        )
        .await;
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("`{css}` is shown yet cannot be found: {e}"))
    }

    /// The text of the first element matching `css` (waiting for it).
    pub(crate) async fn text(&self, css: &str) -> String {
        self.find(css)
            .await
            .text()
            .await
            .unwrap_or_else(|e| panic!("cannot read the text of `{css}`: {e}"))
    }

    /// Waits until the element matching `css` shows text containing `needle`.
    pub(crate) async fn wait_text(&self, css: &str, needle: &str) -> String {
        let selector = serde_json::to_string(css).expect("a string encodes");
        let needle_js = serde_json::to_string(needle).expect("a string encodes");
        let found = self
            .wait_until(
                &format!("`{css}` to show {needle:?}"),
                &format!(
                    "(() => {{ const e = document.querySelector({selector}); \
                     return e && e.getClientRects().length > 0 && \
                     e.innerText.includes({needle_js}) ? e.innerText : ''; }})()"
                ),
            )
            .await;
        found.as_str().unwrap_or_default().to_owned()
    }

    /// Clicks the element matching `css` (waiting for it).
    pub(crate) async fn click(&self, css: &str) {
        self.find(css)
            .await
            .click()
            .await
            .unwrap_or_else(|e| panic!("cannot click `{css}`: {e}"));
    }

    /// Replaces the text of the input matching `css` with `text`.
    pub(crate) async fn fill(&self, css: &str, text: &str) {
        let input = self.find(css).await;
        input
            .clear()
            .await
            .unwrap_or_else(|e| panic!("cannot clear `{css}`: {e}"));
        input
            .send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("cannot type into `{css}`: {e}"));
    }

    /// Chooses the option with this `value` in the select matching `css`.
    pub(crate) async fn select(&self, css: &str, value: &str) {
        self.find(css)
            .await
            .select_by_value(value)
            .await
            .unwrap_or_else(|e| panic!("cannot choose {value:?} in `{css}`: {e}"));
    }

    /// Saves a screenshot of the window as
    /// `target/inspector-screenshots/<name>.png`; returns its path.
    pub(crate) async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self
            .client
            .screenshot()
            .await
            .unwrap_or_else(|e| panic!("cannot take a screenshot: {e}"));
        let path = screenshot_dir().join(format!("{name}.png"));
        std::fs::write(&path, png)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        path
    }
}

/// `target/inspector-screenshots`, created if needed.
pub(crate) fn screenshot_dir() -> PathBuf {
    let dir = target_dir().join("inspector-screenshots");
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// The target directory this test binary was built in (`target/`, or
/// `$CARGO_TARGET_DIR`): test binaries live in `<target>/<profile>/deps`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary has a path");
    exe.parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("test binaries live in <target>/<profile>/deps")
        .to_path_buf()
}

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("a loopback port is free")
        .port()
}

// ----- finding or installing the browser ------------------------------------------

const HOW: &str = "install Chromium and its WebDriver (Debian: `apt-get install chromium \
                   chromium-driver`), put `chromium` and `chromedriver` on PATH, or point \
                   HAIP_CHROMIUM and HAIP_CHROMEDRIVER at them";

/// `chromium` and `chromedriver`: from the environment, on `PATH`, or
/// installed now (once per test process; once per machine, under a lock).
fn binaries() -> &'static (PathBuf, PathBuf) {
    static BINARIES: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BINARIES.get_or_init(|| {
        let from_env = |var: &str| {
            std::env::var_os(var).map(|path| {
                let path = PathBuf::from(path);
                assert!(
                    runs(&path),
                    "{var}={} does not run (`--version` failed)",
                    path.display()
                );
                path
            })
        };
        let chromium = from_env("HAIP_CHROMIUM").or_else(|| find("chromium"));
        let driver = from_env("HAIP_CHROMEDRIVER").or_else(|| find("chromedriver"));
        match (chromium, driver) {
            (Some(chromium), Some(driver)) => (chromium, driver),
            _ => install(),
        }
    })
}

/// `name` on `PATH` or in `/usr/bin`, if it runs.
fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file() && runs(candidate))
}

fn runs(binary: &Path) -> bool {
    Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|out| out.status.success())
}

/// Installs Debian's `chromium` and `chromium-driver` with apt-get, holding
/// `target/chromium-install.lock` so that test binaries running at once
/// install them once; panics, with apt-get's output, when that fails.
fn install() -> (PathBuf, PathBuf) {
    let target = target_dir();
    let lock_path = target.join("chromium-install.lock");
    let lock = std::fs::File::create(&lock_path)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", lock_path.display()));
    lock.lock()
        .unwrap_or_else(|e| panic!("cannot lock {}: {e}", lock_path.display()));
    // Another test binary may have installed them while we waited.
    if let (Some(chromium), Some(driver)) = (find("chromium"), find("chromedriver")) {
        return (chromium, driver);
    }
    let started = Instant::now();
    eprintln!(
        "chromium or chromedriver is missing: installing them with apt-get (once per machine)"
    );
    for args in [
        &["update"][..],
        &[
            "install",
            "-y",
            "--no-install-recommends",
            "chromium",
            "chromium-driver",
        ][..],
    ] {
        let out = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| {
                panic!("this test needs a browser and cannot run apt-get ({e}): {HOW}")
            });
        assert!(
            out.status.success(),
            "this test needs a browser, and `apt-get {}` failed ({}): {HOW}\n\
             --- stdout\n{}\n--- stderr\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
    }
    drop(lock);
    let (Some(chromium), Some(driver)) = (find("chromium"), find("chromedriver")) else {
        panic!("apt-get installed chromium and chromium-driver, yet they do not run: {HOW}");
    };
    eprintln!(
        "installed {} and {} in {:.1?}",
        chromium.display(),
        driver.display(),
        started.elapsed()
    );
    (chromium, driver)
}
