//! haip's end-to-end suites, one module per file, in one test binary: each
//! binary links all of haip and its peers again (84 MB each, a few seconds of
//! linking), so the suites share one. Run one with
//! `cargo test -p haip-tests --test suite cluster::`.
//!
//! Some stay binaries of their own (see `Cargo.toml`): `annotated`,
//! `annotated_order` and `compose` serve every `#[haip_tool]` the binary
//! links, `oauth`
//! measures its own process's memory, and `cluster_chaos` and `external`
//! load both cores alone for a while.

#[path = "support/browser.rs"]
mod browser;
#[path = "support/conformance.rs"]
mod conformance_support;
#[path = "support/transports.rs"]
mod conn;
#[path = "support/embedded.rs"]
mod embedded_support;
#[path = "support/mcp_http.rs"]
mod mcp_http;
#[path = "support/mcp.rs"]
mod mcp_support;
#[path = "support/redis.rs"]
mod redis_support;
mod support;

mod admission;
mod ask;
mod auth;
mod calls;
mod client;
mod cluster;
mod cluster_tasks;
mod cors;
mod discovery;
mod embedded;
mod errors;
mod errors_messages;
mod first_hour_confirm;
mod first_hour_names;
mod first_hour_startup;
mod first_hour_testing;
mod guide;
mod handshake;
mod hostile;
mod hostile_mcp;
mod http;
mod inspector;
mod lifecycle;
mod limits;
mod macro_tools;
mod macro_types;
mod mcp_conformance;
mod mcp_conformance_2026;
mod mcp_export;
mod mcp_first_hour;
mod mcp_import;
mod mcp_python;
mod mcp_rounds;
mod mcp_sessions;
mod mcp_sessions_redis;
mod mcp_stateless;
mod mcp_tasks;
mod metrics;
mod middleware;
mod profiles;
mod redis_ha;
mod redis_server;
mod reliability;
mod reliability_flow;
mod reliability_prop;
mod reliability_replay;
mod schemas;
mod security_layers;
mod security_mcp;
mod security_oauth;
mod security_origin;
mod security_tasks;
mod seed;
mod talk;
mod traces;
mod transports;
mod wire;
