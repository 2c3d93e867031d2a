//! # The haip guide
//!
//! How to write tools with haip, serve them, and run them in production:
//! one chapter per concern, in the order most people need them. Every Rust
//! snippet here is compiled by `cargo test` (axum's, which haip does not
//! depend on, in the example they come from); each chapter names the
//! runnable example (`examples/` in the repository, listed in reading order
//! in `examples/README.md`) that shows it at work.
//!
//! 1. [Writing tools](writing_tools): `#[haip_tool]`, parameters, results,
//!    errors, state, sync functions, hand-written tools, choosing what to serve.
//! 2. [Schemas and profiles](schemas): what clients are shown, the profiles
//!    model providers accept, and `haip lint`.
//! 3. [Talking to people](talking_to_people): log lines, questions, rich
//!    results, sampling.
//! 4. [Transports and the wire](the_wire): WebSocket, SSE and HTTP
//!    streaming, and every HAIP rule the server keeps.
//! 5. [MCP both ways](mcp_both_ways): MCP servers' tools over HAIP, haip
//!    tools to MCP clients.
//! 6. [Authentication](authentication): JWT, your own check, OAuth 2.1 and
//!    scopes, CORS.
//! 7. [Several instances](several_instances): sessions shared through Redis.
//! 8. [Settings, limits and budgets](limits): every setting, its default,
//!    and what happens at each bound.
//! 9. [Operating haip](operating): `/metrics`, the access log, `/health`
//!    and `/stats`, shutdown.
//! 10. [Testing your tools](testing): the function alone, the schemas, in
//!     memory with `haip::testing`, and a
//!     real server on `127.0.0.1:0`.
//! 11. [The CLI and the inspector](cli_and_inspector): `haip call` and
//!     friends, and the browser page at `/inspector`.
//! 12. [Middleware](middleware): layers around every call: rate limits,
//!     concurrency limits, caching, error masking, your own.
//! 13. [Composing tools](compose): a crate's tools as a `ToolSet`, mounted
//!     under a prefix, chosen by tag, edited.
//! 14. [Inside your service](inside_your_service): the server as a tower
//!     `Service` nested in your axum router, `Server::serve` on your own
//!     listener (a Unix socket, systemd's), and what stays the host's.
//!
//! # Cargo features
//!
//! `haip`'s one default feature is `mcp`: `haip::serve()` serves every
//! tool over HAIP and over MCP with no feature named. `default-features =
//! false` leaves HAIP alone (the runtime, `#[haip_tool]`, WebSocket, SSE and
//! HTTP streaming, your own `Authenticator`), which needs no feature.
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `mcp` | on | `haip::mcp`: the registry served to MCP clients, at `/mcp` and over stdio |
//! | `mcp-import` | | MCP servers' tools imported into the registry (`ServerBuilder::mcp_stdio`, `mcp_http`); implies `mcp` |
//! | `mcp-tls` | | `https://` URLs for imported MCP servers; implies `mcp-import` |
//! | `jwt` | | JWT authentication (`auth::Jwt`, `jwt_hs256`, `jwt_public_key`, `HAIP_JWT_SECRET`) |
//! | `client` | | `haip::client`, a Rust HAIP client (WebSocket) |
//! | `cli` | | the `haip` command (`tools`, `schema`, `lint`, `call`, `health`, `bench`); implies `client` |
//! | `redis` | | sessions and MCP tasks shared by several instances through Redis (one server, a Redis Cluster, or Sentinel) |
//! | `oauth` | | an OAuth 2.1 resource server (`auth::OAuth`); implies `jwt` |
//! | `metrics` | | Prometheus metrics at `GET /metrics` |
//! | `otel` | | OpenTelemetry traces of calls, exported over OTLP/HTTP |
//! | `testing` | | `haip::testing`: a server's tools called in memory, for tests; implies `client` |
//! | `inspector` | | the browser inspector at `/inspector` |
//!
//! The examples turn on `jwt`, `mcp-import`, `redis`, `inspector`, `oauth`, `metrics` and
//! `otel`;
//! `cargo doc --open -p haip --features client,cli,jwt,mcp-import,redis,inspector,oauth,metrics,otel,testing`
//! builds these pages with every link in place.

// The guide names items of every feature. Built without some of them, those
// names are shown as plain text rather than warned about.
#![cfg_attr(
    not(all(
        feature = "client",
        feature = "jwt",
        feature = "mcp-import",
        feature = "redis",
        feature = "oauth",
        feature = "metrics",
        feature = "otel",
        feature = "inspector",
        feature = "testing"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]

pub mod authentication;
pub mod cli_and_inspector;
pub mod compose;
pub mod inside_your_service;
pub mod limits;
pub mod mcp_both_ways;
pub mod middleware;
pub mod operating;
pub mod schemas;
pub mod several_instances;
pub mod talking_to_people;
pub mod testing;
pub mod the_wire;
pub mod writing_tools;
