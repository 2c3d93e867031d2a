//! The real binary: `haip::serve()` logs where it listens, serves, and on
//! SIGTERM shuts down gracefully and exits 0.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn serve_logs_its_url_serves_and_exits_zero_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_haip-example-standalone"))
        .env("HAIP_ADDR", "127.0.0.1:0")
        .stderr(Stdio::piped())
        .spawn()
        .expect("the example binary starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (url_tx, url_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.split("listening on ").nth(1) {
                let _ = url_tx.send(url.trim().to_owned());
            }
        }
    });
    let url = url_rx
        .recv_timeout(WAIT)
        .expect("the server logs the URL it listens on");
    let addr = url
        .strip_prefix("ws://")
        .and_then(|rest| rest.strip_suffix("/haip"))
        .unwrap_or_else(|| panic!("unexpected URL {url}"));

    let mut stream = TcpStream::connect(addr).expect("the server accepts connections");
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("\"status\":\"ok\""), "{response}");

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(child.wait());
    });
    let exit = done_rx
        .recv_timeout(WAIT)
        .expect("the server exits after SIGTERM")
        .expect("wait succeeds");
    assert!(exit.success(), "graceful shutdown exits 0, got {exit}");
}
