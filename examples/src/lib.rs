//! The tools behind the examples, shared with the project's end-to-end tests.
//!
//! Run the quickstart with `cargo run --example quickstart`.

pub mod axum_app;
pub mod chaos_check;
pub mod demo;

/// Every example (and every binary that links this crate) allocates with
/// mimalloc, which gives freed memory back to the operating system: after a
/// spike of large messages the server's RSS comes down again, where the
/// system allocator tends to keep it. The `haip` library itself does not
/// choose an allocator; an application sets its own like this.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Logs to stderr, filtered by `HAIP_LOG` (e.g. `HAIP_LOG=debug`), else by
/// `default_filter`; one JSON object per line when `HAIP_LOG_FORMAT=json`.
/// stderr keeps stdout free for the MCP stdio example.
///
/// The default keeps the MCP library's own lines to errors: at `info` it
/// logs three lines for every request `/mcp` serves, and at `warn` one for
/// every request a client gets wrong (which haip answers, and counts). It
/// leaves out the access log (a line per call, target `haip::access`): ask
/// for it with `HAIP_LOG=info` or `HAIP_LOG=warn,haip::access=info`.
pub fn init_logging(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HAIP_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{default_filter},rmcp=error,haip::access=off"))
    });
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    if std::env::var("HAIP_LOG_FORMAT").is_ok_and(|f| f == "json") {
        logs.json().init();
    } else {
        logs.init();
    }
}
