//! [`McpImport`]: an MCP server whose tools are imported, what the import is
//! given (where the server is, a name prefix, back-off, timeouts), and the
//! check of those settings at build time.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::Error;

/// An MCP server whose tools a haip server serves as its own.
///
/// Added with [`ServerBuilder::mcp`](crate::ServerBuilder::mcp), or the
/// shorthands [`mcp_stdio`](crate::ServerBuilder::mcp_stdio) and
/// [`mcp_http`](crate::ServerBuilder::mcp_http).
///
/// ```no_run
/// use haip::mcp::McpImport;
/// use std::time::Duration;
///
/// # async fn demo() -> Result<(), haip::Error> {
/// let server = haip::Server::builder()
///     .mcp(
///         McpImport::stdio("npx", ["-y", "@modelcontextprotocol/server-everything"])
///             .prefix("everything.")
///             .restart_backoff(Duration::from_millis(500), Duration::from_secs(30)),
///     )
///     .mcp(McpImport::http("http://127.0.0.1:3001/mcp").prefix("remote."))
///     .build()?;
/// server.run().await
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct McpImport {
    pub(crate) source: Source,
    pub(crate) prefix: String,
    pub(crate) backoff: (Duration, Duration),
    pub(crate) connect_timeout: Duration,
    /// A setter that does not apply to this kind of import (reported by `build`).
    misapplied: Option<&'static str>,
}

#[derive(Clone)]
pub(crate) enum Source {
    Stdio {
        command: OsString,
        args: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
        cwd: Option<PathBuf>,
    },
    Http {
        url: String,
        bearer: Option<String>,
    },
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                // Environment values may be secrets: names only.
                .field("env", &env.iter().map(|(k, _)| k).collect::<Vec<_>>())
                .field("cwd", cwd)
                .finish(),
            Source::Http { url, bearer } => f
                .debug_struct("Http")
                .field("url", url)
                .field("bearer", &bearer.as_ref().map(|_| "<redacted>"))
                .finish(),
        }
    }
}

impl McpImport {
    /// An MCP server run as a child process, speaking MCP on its stdin and
    /// stdout (its stderr is passed through). The child is started when the
    /// haip server starts, restarted with back-off when it exits, and killed
    /// when the haip server shuts down.
    pub fn stdio<C, I, A>(command: C, args: I) -> McpImport
    where
        C: Into<OsString>,
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        McpImport::new(Source::Stdio {
            command: command.into(),
            args: args.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            cwd: None,
        })
    }

    /// An MCP server reached over Streamable HTTP at `url` (`http://`; `https://`
    /// needs the `mcp-tls` feature).
    pub fn http(url: impl Into<String>) -> McpImport {
        McpImport::new(Source::Http {
            url: url.into(),
            bearer: None,
        })
    }

    fn new(source: Source) -> McpImport {
        McpImport {
            source,
            prefix: String::new(),
            backoff: (Duration::from_millis(250), Duration::from_secs(30)),
            connect_timeout: Duration::from_secs(30),
            misapplied: None,
        }
    }

    /// Prepends `prefix` to every imported tool's name (`"fs."` turns
    /// `read_file` into `fs.read_file`), to keep apart tools of the same name.
    /// Calls still reach the MCP server under the original name.
    pub fn prefix(mut self, prefix: impl Into<String>) -> McpImport {
        self.prefix = prefix.into();
        self
    }

    /// Sets an environment variable for the child process (stdio only; on an
    /// HTTP import, `build` fails).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> McpImport {
        match &mut self.source {
            Source::Stdio { env, .. } => env.push((key.into(), value.into())),
            Source::Http { .. } => self.misapplied = Some("env"),
        }
        self
    }

    /// Sets the child's working directory (stdio only; on an HTTP import,
    /// `build` fails).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> McpImport {
        match &mut self.source {
            Source::Stdio { cwd, .. } => *cwd = Some(dir.into()),
            Source::Http { .. } => self.misapplied = Some("current_dir"),
        }
        self
    }

    /// Sends `Authorization: Bearer <token>` with every request (HTTP only; on
    /// a stdio import, `build` fails).
    pub fn bearer_token(mut self, token: impl Into<String>) -> McpImport {
        match &mut self.source {
            Source::Http { bearer, .. } => *bearer = Some(token.into()),
            Source::Stdio { .. } => self.misapplied = Some("bearer_token"),
        }
        self
    }

    /// The delay before reconnecting after the connection ends or fails:
    /// `initial`, doubling on each failure up to `max` (defaults 250 ms and 30 s).
    /// A connection that stayed up for a minute starts again from `initial`.
    pub fn restart_backoff(mut self, initial: Duration, max: Duration) -> McpImport {
        self.backoff = (initial, max.max(initial));
        self
    }

    /// How long connecting (spawning and the MCP `initialize` exchange, or the
    /// HTTP handshake) and each `tools/list` may take (default 30 s). The
    /// server's start waits for the first attempt at most this long.
    pub fn connect_timeout(mut self, timeout: Duration) -> McpImport {
        self.connect_timeout = timeout;
        self
    }

    /// A short name for logs and error messages: the command or the URL.
    pub(crate) fn label(&self) -> String {
        match &self.source {
            Source::Stdio { command, .. } => command.to_string_lossy().into_owned(),
            Source::Http { url, .. } => url.clone(),
        }
    }

    /// Rejects settings that can never work, at build time.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        let invalid = |reason: String| Error::InvalidConfig {
            setting: "mcp",
            reason,
        };
        if let Some(setter) = self.misapplied {
            let kind = match self.source {
                Source::Stdio { .. } => "a stdio",
                Source::Http { .. } => "an HTTP",
            };
            return Err(invalid(format!(
                "`{setter}` does not apply to {kind} import ({})",
                self.label()
            )));
        }
        if !self.prefix.is_empty() {
            crate::tool::validate_name(&self.prefix).map_err(|_| {
                invalid(format!(
                    "prefix `{}` may only contain ASCII letters, digits, `_`, `.` and `-`",
                    self.prefix
                ))
            })?;
        }
        if self.backoff.0.is_zero() {
            return Err(invalid(
                "the restart back-off must be longer than zero".into(),
            ));
        }
        if self.connect_timeout.is_zero() {
            return Err(invalid(
                "the connect timeout must be longer than zero".into(),
            ));
        }
        match &self.source {
            Source::Stdio { command, .. } if command.is_empty() => {
                Err(invalid("the MCP server command is empty".into()))
            }
            Source::Http { url, .. } => {
                if url.starts_with("http://") {
                    Ok(())
                } else if url.starts_with("https://") {
                    if cfg!(feature = "mcp-tls") {
                        Ok(())
                    } else {
                        Err(invalid(format!(
                            "`{url}` needs TLS: enable haip's `mcp-tls` feature"
                        )))
                    }
                } else {
                    Err(invalid(format!(
                        "`{url}` is not an http:// or https:// URL"
                    )))
                }
            }
            Source::Stdio { .. } => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_secrets() {
        let http = format!(
            "{:?}",
            McpImport::http("http://h/mcp").bearer_token("s3cret")
        );
        assert!(
            http.contains("<redacted>") && !http.contains("s3cret"),
            "{http}"
        );
        let stdio = format!(
            "{:?}",
            McpImport::stdio("srv", ["-v"]).env("API_KEY", "s3cret")
        );
        assert!(
            stdio.contains("API_KEY") && !stdio.contains("s3cret"),
            "{stdio}"
        );
    }

    #[test]
    fn settings_that_can_never_work_are_rejected() {
        let reason = |i: McpImport| match i.validate() {
            Err(Error::InvalidConfig { setting, reason }) => {
                assert_eq!(setting, "mcp");
                reason
            }
            other => panic!("expected InvalidConfig, got {other:?}"),
        };
        assert!(McpImport::stdio("node", ["x.js"]).validate().is_ok());
        assert!(McpImport::http("http://127.0.0.1:1/mcp").validate().is_ok());
        assert!(reason(McpImport::stdio("", Vec::<String>::new())).contains("empty"));
        assert!(reason(McpImport::stdio("x", ["y"]).prefix("a b")).contains("prefix"));
        assert!(reason(McpImport::http("ftp://h/mcp")).contains("not an http"));
        if !cfg!(feature = "mcp-tls") {
            assert!(reason(McpImport::http("https://h/mcp")).contains("mcp-tls"));
        }
        let zero = McpImport::stdio("x", ["y"]).restart_backoff(Duration::ZERO, Duration::ZERO);
        assert!(reason(zero).contains("back-off"));
        let zero = McpImport::http("http://h/").connect_timeout(Duration::ZERO);
        assert!(reason(zero).contains("timeout"));
        let misplaced = McpImport::http("http://h/").env("K", "v");
        assert!(reason(misplaced).contains("`env` does not apply to an HTTP import"));
        let misplaced = McpImport::http("http://h/").current_dir("/tmp");
        assert!(reason(misplaced).contains("`current_dir`"));
        let misplaced = McpImport::stdio("srv", ["-v"]).bearer_token("t");
        assert!(reason(misplaced).contains("`bearer_token` does not apply to a stdio import"));
    }
}
