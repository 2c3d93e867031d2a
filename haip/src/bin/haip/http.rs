//! A minimal HTTP/1.1 GET for the side endpoints (`/health`, `/stats`).

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::Failure;

/// Host and port of a `ws://` URL.
pub(crate) fn authority(url: &str) -> Result<String, Failure> {
    let rest = url
        .strip_prefix("ws://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| {
            Failure::usage(format!(
                "`{url}`: expected ws://host:port/... (plain, no TLS)"
            ))
        })?;
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    if authority.is_empty() {
        return Err(Failure::usage(format!("`{url}` has no host")));
    }
    Ok(authority.to_owned())
}

/// GETs `path` from the server of `url` and parses the JSON body.
pub(crate) async fn get_json(url: &str, path: &str, token: Option<&str>) -> Result<Value, Failure> {
    let authority = authority(url)?;
    let fetch = async {
        let mut stream = TcpStream::connect(&authority)
            .await
            .map_err(|e| Failure::usage(format!("cannot connect to {authority}: {e}")))?;
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\n{auth}Connection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| Failure::usage(e.to_string()))?;
        let mut raw = Vec::new();
        // Side endpoints answer a few hundred bytes; cap what is read.
        (&mut stream)
            .take(1 << 20)
            .read_to_end(&mut raw)
            .await
            .map_err(|e| Failure::usage(e.to_string()))?;
        Ok::<_, Failure>(raw)
    };
    let raw = tokio::time::timeout(Duration::from_secs(10), fetch)
        .await
        .map_err(|_| Failure::usage(format!("timed out waiting for {authority}{path}")))??;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| Failure::usage("malformed HTTP response"))?;
    let status = head.split(' ').nth(1).unwrap_or("?");
    if status != "200" {
        return Err(Failure::usage(format!(
            "{path} answered {status}: {}",
            body.trim()
        )));
    }
    serde_json::from_str(body.trim())
        .map_err(|e| Failure::usage(format!("{path} is not JSON: {e}")))
}
