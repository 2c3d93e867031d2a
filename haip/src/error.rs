use std::io;

/// Errors from building or running a haip server.
///
/// Tool failures are not this type: tools return [`ToolError`](crate::ToolError).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tool name outside `^[A-Za-z0-9_.-]{1,128}$` (MCP's rule).
    #[error(
        "invalid tool name `{name}`: expected 1 to 128 characters from A-Z, a-z, 0-9, `_`, `.` and `-`"
    )]
    InvalidToolName {
        /// The rejected name.
        name: String,
    },
    /// A tool definition that cannot be served (bad schema, no handler, ...).
    #[error("invalid tool `{tool}`: {reason}")]
    InvalidTool {
        /// The tool's name.
        tool: String,
        /// What is wrong.
        reason: String,
    },
    /// Two tools with the same name were given to one server.
    #[error("two tools are named `{name}` ({first}; {second}); tool names must be unique")]
    DuplicateTool {
        /// The shared name.
        name: String,
        /// Where the first one came from.
        first: String,
        /// Where the second one came from.
        second: String,
    },
    /// A tool takes `State<T>` but the server was given no `T`.
    #[error(
        "tool `{tool}` needs state `{state}`, but the server has none: add it with `Server::builder().state(...)`"
    )]
    MissingState {
        /// The tool's name.
        tool: String,
        /// The state's type name.
        state: &'static str,
    },
    /// The MCP bridge failed (feature `mcp`).
    #[error("MCP: {reason}")]
    Mcp {
        /// What went wrong.
        reason: String,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A nonsensical setting.
    #[error("invalid setting `{setting}`: {reason}")]
    InvalidConfig {
        /// The setting's name.
        setting: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// A non-loopback address without authentication (docs/protocol.md §17).
    #[error(
        "refusing to serve `{addr}` without authentication: anyone who can reach it could call every tool. \
         Configure authentication (e.g. `jwt_hs256`, or HAIP_JWT_SECRET), bind a loopback address, or allow it \
         explicitly with `allow_unauthenticated(true)` / HAIP_ALLOW_UNAUTHENTICATED=1"
    )]
    UnauthenticatedBind {
        /// The address as configured.
        addr: String,
    },
    /// The Redis server of [`ServerBuilder::redis`](crate::ServerBuilder::redis)
    /// (or `HAIP_REDIS_URL`) is not usable.
    #[error("Redis at `{url}`: {reason}")]
    Redis {
        /// The URL, as configured.
        url: String,
        /// What went wrong: the text of `source`.
        reason: String,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The listen address could not be bound.
    #[error("cannot listen on `{addr}`: {source}")]
    Bind {
        /// The address as configured.
        addr: String,
        /// The underlying error.
        source: io::Error,
    },
    /// Another I/O failure.
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl Error {
    /// [`Error::Redis`] for `url`: its reason is the cause's text (a cause
    /// known only as text becomes an error holding that text).
    pub(crate) fn redis(
        url: impl Into<String>,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Error {
        let source = cause.into();
        Error::Redis {
            url: url.into(),
            reason: source.to_string(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Error;
    use std::error::Error as _;

    #[test]
    fn a_redis_error_says_what_it_said_and_keeps_its_cause() {
        let error = Error::redis("redis://127.0.0.1:1/", "no answer");
        assert_eq!(
            error.to_string(),
            "Redis at `redis://127.0.0.1:1/`: no answer"
        );
        let source = error.source().expect("the cause is kept");
        assert_eq!(source.to_string(), "no answer");
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let error = Error::redis("redis://h/", io);
        assert_eq!(error.to_string(), "Redis at `redis://h/`: refused");
        let source = error.source().expect("the cause is kept");
        assert!(source.downcast_ref::<std::io::Error>().is_some());
    }
}
