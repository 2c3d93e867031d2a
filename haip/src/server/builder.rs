//! [`ServerBuilder`]: settings, tools, state, authentication and CORS.

use std::sync::Arc;
use std::time::Duration;

use super::compose::{Given, Mount};
use super::guard::Cors;
use super::with_mcp::McpGiven;
use super::with_oauth::OAuthSetting;
use super::with_redis::Cluster;
use super::{Config, Limits, Server};
use crate::Error;
use crate::auth::Authenticator;
use crate::schema::{SchemaProfile, refusals};
use crate::session::Shared;
use crate::tool::{Registry, StateMap, TagFilter, Tool};

/// Configures a [`Server`]. Every limit, size and duration is a field of
/// [`Limits`], given with [`limits`](ServerBuilder::limits); the other
/// settings have a setter each. Unset ones keep their defaults.
/// [`build`](ServerBuilder::build) rejects nonsensical values, naming the
/// setting.
#[derive(Default)]
#[must_use = "a ServerBuilder does nothing until .build() is called"]
pub struct ServerBuilder {
    config: Config,
    /// Written into `config` by `build`.
    limits: Limits,
    builtins: bool,
    annotated: bool,
    /// Tools with where they came from, for duplicate-name errors.
    tools: Vec<(Tool, String)>,
    /// Mounted tool sets, each with the number of `tools` given before it.
    mounts: Vec<(usize, Mount)>,
    mount_separator: Option<char>,
    tag_filter: TagFilter,
    state: StateMap,
    auth: AuthSetting,
    cors_origins: Vec<String>,
    /// MCP servers to import (feature `mcp-import`), and how `/mcp` is
    /// served (feature `mcp`).
    mcp: McpGiven,
    /// `redis` / `HAIP_REDIS_URL`: sessions shared through this Redis server.
    redis_url: Option<String>,
    /// `redis_wait` / `HAIP_REDIS_WAIT`: replicas each batch of records
    /// waits for, and how long; or the environment's value that is not one.
    redis_wait: Option<Result<(u32, Duration), String>>,
    /// `instance_id` / `HAIP_INSTANCE_ID`.
    instance_id: Option<String>,
    /// `HAIP_SCHEMA_PROFILE` when it names no profile: refused by `build`.
    bad_schema_profile: Option<String>,
    /// Where spans of calls go (`otlp_endpoint`, `HAIP_OTLP_ENDPOINT`,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`), and how many.
    traces: TraceSettings,
    /// The layers around every call, outermost first.
    layers: Vec<Arc<dyn crate::layer::DynLayer>>,
}

/// What the builder was told about traces (feature `otel`).
#[derive(Debug, Clone, Default)]
struct TraceSettings {
    endpoint: Option<String>,
    sampling: Option<f64>,
    /// A sampling ratio from the environment that is not a number.
    bad_sampling: Option<(&'static str, String)>,
    service: Option<String>,
}

/// How clients are authenticated (docs/protocol.md §17).
#[derive(Default)]
enum AuthSetting {
    #[default]
    Off,
    /// `jwt_hs256`, `HAIP_JWT_SECRET` (a build without the `jwt` feature
    /// refuses it).
    Hs256(#[cfg_attr(not(feature = "jwt"), allow(dead_code))] String),
    #[cfg(feature = "jwt")]
    PublicKey(Vec<u8>),
    Custom(Arc<dyn Authenticator>),
    /// An OAuth resource server (`oauth`, `HAIP_OAUTH_ISSUER`; a build
    /// without the `oauth` feature refuses it).
    OAuth(OAuthSetting),
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            // The settings as `build` will see them: the limits in place.
            .field("config", &{
                let mut config = self.config.clone();
                self.limits.apply(&mut config);
                config
            })
            .field("builtins", &self.builtins)
            .field("annotated", &self.annotated)
            .field(
                "tools",
                &self.tools.iter().map(|(t, _)| t.name()).collect::<Vec<_>>(),
            )
            .field(
                "auth",
                &match &self.auth {
                    AuthSetting::Off => "off",
                    AuthSetting::Hs256(_) => "jwt hs256",
                    #[cfg(feature = "jwt")]
                    AuthSetting::PublicKey(_) => "jwt public key",
                    AuthSetting::Custom(_) => "custom",
                    AuthSetting::OAuth(oauth) => oauth.name(),
                },
            )
            .field("cors_origins", &self.cors_origins)
            .field("layers", &self.layers.len())
            .finish_non_exhaustive()
    }
}

// Builder methods that turn one behaviour on or off each (limits are fields of
// `Limits` instead): `setters! { session: ... }` for the fields of
// `SessionConfig`, `setters! { server: ... }` for the server's own.
macro_rules! setters {
    (session: $($(#[$doc:meta])* $name:ident: $ty:ty),* $(,)?) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, value: $ty) -> Self {
                self.config.session.$name = value;
                self
            }
        )*
    };
    (server: $($(#[$doc:meta])* $name:ident: $ty:ty),* $(,)?) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, value: $ty) -> Self {
                self.config.$name = value;
                self
            }
        )*
    };
}

impl ServerBuilder {
    /// The listen address (`host:port`; default `127.0.0.1:8080`). Port 0 picks a free port.
    pub fn addr(mut self, addr: impl Into<String>) -> Self {
        self.config.addr = addr.into();
        self
    }

    /// Applies the environment: `HAIP_ADDR` sets the listen address,
    /// `HAIP_JWT_SECRET` turns on HS256 authentication with that secret (an
    /// empty one is a start-up error), `HAIP_ALLOW_UNAUTHENTICATED=1` allows
    /// a non-loopback address without authentication,
    /// `HAIP_TOOL_SCHEMA_LEGACY=1` turns on
    /// [`tool_schema_legacy_field`](Self::tool_schema_legacy_field) for
    /// clients that read `payload.schema` from `TOOL_SCHEMA`, and (feature
    /// `mcp`) `HAIP_MCP_SESSIONS=0` turns off `mcp_sessions` (every `/mcp`
    /// request served on its own; `1` turns them on again). `HAIP_SCHEMA_PROFILE` sets
    /// [`schema_profile`](Self::schema_profile) (`portable`, `openai-strict`,
    /// `anthropic-strict` or `full`; another name is a start-up error), and
    /// `HAIP_REQUEST_STATE_KEY` the
    /// [`request_state_key`](Self::request_state_key).
    /// `HAIP_CORS_ALLOWED_ORIGINS` and `HAIP_ALLOWED_HOSTS` (comma-separated)
    /// set [`cors_allowed_origins`](Self::cors_allowed_origins) and
    /// [`allowed_hosts`](Self::allowed_hosts). `HAIP_REDIS_URL`,
    /// `HAIP_INSTANCE_ID` and `HAIP_REDIS_WAIT` set [`redis`](Self::redis),
    /// [`instance_id`](Self::instance_id) and
    /// [`redis_wait`](Self::redis_wait) (`replicas[,timeout_ms]`; another
    /// value is a start-up error).
    pub fn from_env(mut self) -> Self {
        if let Ok(addr) = std::env::var("HAIP_ADDR")
            && !addr.trim().is_empty()
        {
            self.config.addr = addr.trim().to_owned();
        }
        if let Ok(secret) = std::env::var("HAIP_JWT_SECRET") {
            self.auth = AuthSetting::Hs256(secret);
        }
        let flag = |name| std::env::var(name).is_ok_and(|v| v.trim() == "1");
        if flag("HAIP_ALLOW_UNAUTHENTICATED") {
            self.config.allow_unauthenticated = true;
        }
        if flag("HAIP_TOOL_SCHEMA_LEGACY") {
            self.config.session.tool_schema_legacy_field = true;
        }
        self.mcp.read_env();
        if let Some(url) = env_value("HAIP_REDIS_URL") {
            self.redis_url = Some(url);
        }
        if let Some(wait) = env_value("HAIP_REDIS_WAIT") {
            self.redis_wait = Some(parse_redis_wait(&wait));
        }
        if let Some(id) = env_value("HAIP_INSTANCE_ID") {
            self.instance_id = Some(id);
        }
        if let Some(origins) = env_list("HAIP_CORS_ALLOWED_ORIGINS") {
            self.cors_origins = origins;
        }
        if let Some(hosts) = env_list("HAIP_ALLOWED_HOSTS") {
            self.config.allowed_hosts = hosts;
        }
        if let Some(key) = env_value("HAIP_REQUEST_STATE_KEY") {
            self.config.request_state_key = Some(key.into_bytes());
        }
        if let Some(addr) = env_value("HAIP_METRICS_ADDR") {
            self.config.metrics_addr.set_from_env(addr);
        }
        self.traces.read_env();
        if let Some(name) = env_value("HAIP_SCHEMA_PROFILE") {
            match name.parse() {
                Ok(profile) => self.config.session.schema_profile = profile,
                Err(_) => self.bad_schema_profile = Some(name),
            }
        }
        if let Some(issuer) = env_value("HAIP_OAUTH_ISSUER") {
            self.auth = AuthSetting::OAuth(OAuthSetting::from_env(issuer, env_value));
        }
        self
    }

    /// The key that signs the `requestState` of `/mcp` calls asking
    /// questions without sessions (MCP 2026-07-28; see
    /// [`Context::ask`](crate::Context::ask)): at least 32 bytes, secret.
    /// Instances behind one load balancer must share it, so that a retry
    /// may land on any of them (`HAIP_REQUEST_STATE_KEY` with
    /// [`from_env`](Self::from_env)). Default: a random key per process.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), haip::Error> {
    /// let key = std::env::var("MY_SHARED_SECRET").unwrap_or_default();
    /// let server = haip::Server::builder().request_state_key(key).build()?;
    /// # Ok(()) }
    /// ```
    pub fn request_state_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.config.request_state_key = Some(key.into());
        self
    }

    /// The schema profile tools are advertised in (docs/protocol.md §6.14; default
    /// [`SchemaProfile::Portable`]): in `TOOL_SCHEMA` and MCP `tools/list`,
    /// unless a client asks for another (`HAI.capabilities.schema_profile`,
    /// a `TOOL_SCHEMA` payload's `profile`, `?schema_profile=` on the `/mcp`
    /// URL). Params are validated against the schema as written whatever
    /// the profile, and calls shaped by any profile are accepted.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), haip::Error> {
    /// use haip::SchemaProfile;
    /// let server = haip::Server::builder()
    ///     .schema_profile(SchemaProfile::OpenAiStrict)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn schema_profile(mut self, profile: SchemaProfile) -> Self {
        self.config.session.schema_profile = profile;
        self.bad_schema_profile = None;
        self
    }

    /// Shares sessions with the other instances using the Redis server at
    /// `url` (`redis://host:port/db`; feature `redis`), the Redis Cluster
    /// its seed nodes name (`redis://h1:7000,redis://h2:7000`, or
    /// `redis+cluster://h1:7000,h2:7000`), or the primary Redis Sentinel
    /// watches (`redis+sentinel://s1:26379,s2:26379/name`; see the guide's
    /// [several instances](crate::guide::several_instances)): a client whose
    /// instance went away resumes its session on any other, its missed
    /// envelopes replayed and the calls that died with the instance ended
    /// with `TOOL_DONE ERROR INTERNAL_ERROR` "instance lost". The server
    /// fails to start, naming the URL, when Redis does not answer then;
    /// losing Redis later only stops resumption elsewhere until it is back.
    /// `HAIP_REDIS_URL` sets it too ([`from_env`](Self::from_env)).
    pub fn redis(mut self, url: impl Into<String>) -> Self {
        self.redis_url = Some(url.into());
        self
    }

    /// Waits, after each batch of session records it writes to Redis, until
    /// `replicas` replicas have them (Redis `WAIT`), at most `timeout` (1 ms
    /// to 2 s); `HAIP_REDIS_WAIT=replicas[,timeout_ms]` sets it too
    /// (default timeout 100 ms). A batch that fewer replicas acknowledged in
    /// time is counted as lost: its sessions are marked, and never restored
    /// on another instance from records a failover might have cut short
    /// (`/stats` counts them: `cluster.unreplicatedRecords`). Off by default:
    /// replication is then asynchronous, and a primary that dies may take
    /// its last records with it unseen. Each batch costs a round trip more;
    /// `BENCHMARKS.md` measures it (feature `redis`).
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), haip::Error> {
    /// use std::time::Duration;
    /// let server = haip::Server::builder()
    ///     .redis("redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/haip")
    ///     .redis_wait(1, Duration::from_millis(100))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn redis_wait(mut self, replicas: u32, timeout: Duration) -> Self {
        self.redis_wait = Some(Ok((replicas, timeout)));
        self
    }

    /// This instance's name, in `/health`, `/stats` and the shared session
    /// store (default: `HAIP_INSTANCE_ID`, else a generated one). Instances
    /// sharing a Redis server need distinct ids.
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// Requires an HS256-signed JWT from every client (docs/protocol.md §17).
    /// Feature `jwt`.
    #[cfg(feature = "jwt")]
    #[cfg_attr(docsrs, doc(cfg(feature = "jwt")))]
    pub fn jwt_hs256(mut self, secret: impl Into<String>) -> Self {
        self.auth = AuthSetting::Hs256(secret.into());
        self
    }

    /// Requires a JWT signed with the private half of this PEM public key: RS256
    /// for an RSA key, ES256 for a P-256 key. Feature `jwt`.
    #[cfg(feature = "jwt")]
    #[cfg_attr(docsrs, doc(cfg(feature = "jwt")))]
    pub fn jwt_public_key(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.auth = AuthSetting::PublicKey(pem.as_ref().to_vec());
        self
    }

    /// With JWT authentication: the `iss` every token must carry. Feature
    /// `jwt`.
    #[cfg(feature = "jwt")]
    #[cfg_attr(docsrs, doc(cfg(feature = "jwt")))]
    pub fn jwt_issuer(mut self, issuer: impl Into<String>) -> Self {
        self.config.jwt_issuer = Some(issuer.into());
        self
    }

    /// With JWT authentication: an `aud` every token must carry. Feature
    /// `jwt`.
    #[cfg(feature = "jwt")]
    #[cfg_attr(docsrs, doc(cfg(feature = "jwt")))]
    pub fn jwt_audience(mut self, audience: impl Into<String>) -> Self {
        self.config.jwt_audience = Some(audience.into());
        self
    }

    /// Makes the server an OAuth 2.1 resource server (feature `oauth`;
    /// docs/protocol.md §17.1): clients present access tokens an authorization server
    /// issued for this server, found through the metadata it serves. See
    /// [`OAuth`](crate::auth::OAuth) for every rule; with
    /// [`from_env`](Self::from_env), `HAIP_OAUTH_ISSUER`,
    /// `HAIP_OAUTH_RESOURCE`, `HAIP_OAUTH_AUDIENCE` (and, for token
    /// introspection, `HAIP_OAUTH_CLIENT_ID` with `HAIP_OAUTH_CLIENT_SECRET`)
    /// do the same. It replaces any other authentication.
    ///
    /// ```no_run
    /// use haip::auth::OAuth;
    ///
    /// # async fn demo() -> Result<(), haip::Error> {
    /// haip::Server::builder()
    ///     .annotated_tools()
    ///     .addr("0.0.0.0:8080")
    ///     .oauth(OAuth::issuer("https://idp.example.com").resource("https://tools.example.com/mcp"))
    ///     .build()?
    ///     .run()
    ///     .await
    /// # }
    /// ```
    #[cfg(feature = "oauth")]
    pub fn oauth(mut self, oauth: crate::auth::OAuth) -> Self {
        self.auth = AuthSetting::OAuth(OAuthSetting(oauth));
        self
    }

    /// OAuth scopes every tool requires, beside its own
    /// ([`ToolBuilder::scopes`](crate::ToolBuilder::scopes),
    /// `#[haip_tool(scopes = [..])]`). Enforced only with authentication on.
    pub fn require_scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config
            .session
            .required_scopes
            .extend(scopes.into_iter().map(Into::into));
        self
    }

    /// Whether a caller is shown only the tools its token's scopes allow
    /// (default `true`): in `TOOL_LIST`, `TOOL_SCHEMA` (a hidden tool is
    /// `TOOL_NOT_FOUND`) and MCP `tools/list`. With `false`, every tool is
    /// listed and a call without the scopes is refused when it is made.
    pub fn hide_forbidden_tools(mut self, hide: bool) -> Self {
        self.config.session.hide_forbidden_tools = hide;
        self
    }

    /// Authenticates clients with your own check instead of JWT.
    pub fn authenticator(mut self, authenticator: impl Authenticator) -> Self {
        self.auth = AuthSetting::Custom(Arc::new(authenticator));
        self
    }

    /// Browser origins allowed to call the server cross-origin (CORS, including
    /// pre-flight) and to open WebSockets from a page; `"*"` allows any.
    /// Default: none.
    ///
    /// Every route checks a browser's `Origin` (HAIP's WebSocket, SSE and
    /// HTTP streaming, upstream POSTs, `/mcp`, `/stats`, `/metrics`, the
    /// inspector's socket): a request that carries one is served only when
    /// it is the server's own (the same scheme, host and port as the
    /// request's `Host`), a loopback page calling a server on a loopback
    /// `Host`, or listed here; any other gets `403 ORIGIN_NOT_ALLOWED`.
    /// Clients that are not browsers send no `Origin` and are not affected.
    /// `HAIP_CORS_ALLOWED_ORIGINS` (comma-separated) sets it too.
    pub fn cors_allowed_origins<I, S>(mut self, origins: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.cors_origins = origins.into_iter().map(Into::into).collect();
        self
    }

    /// `Host` names the server answers to (`name` or `name:port`; a leading
    /// `*.` allows every subdomain), against DNS rebinding: a page on
    /// `evil.example` whose name an attacker points at 127.0.0.1 reaches the
    /// server with `Host: evil.example`, and is refused with `403
    /// HOST_NOT_ALLOWED`. Loopback names (`localhost`, `*.localhost`,
    /// `127.0.0.1` and the rest of 127.0.0.0/8, `[::1]`) are always allowed.
    ///
    /// Default: none beyond loopback when the server is bound to a loopback
    /// address (as `haip::serve()` is unless `HAIP_ADDR` says otherwise), or
    /// to a Unix socket, or serves a host application
    /// ([`Server::into_service`](crate::Server::into_service), which cannot
    /// know where its host listens); any host when it is bound to another
    /// address, unless names are given here. `"*"` allows any name.
    /// `HAIP_ALLOWED_HOSTS` (comma-separated) sets it too.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), haip::Error> {
    /// let server = haip::Server::builder()
    ///     .allowed_hosts(["tools.example.com", "*.internal.example"])
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn allowed_hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.allowed_hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// Where the server's routes are on its host: `"/agent"` when a host
    /// application nests its [`HaipService`](crate::HaipService) with
    /// axum's `Router::nest_service("/agent", …)`, or when a reverse proxy
    /// forwards `/agent/…` to haip's own listener unchanged. Every URL the
    /// server writes carries it: the OAuth resource (`…/agent/mcp`) and the
    /// metadata `WWW-Authenticate` names, the addresses printed at start-up;
    /// the inspector finds its routes beside its own page. haip's own
    /// listener serves the routes under the prefix only (and the OAuth
    /// metadata's well-known path at the root); a nested service is handed
    /// paths with the prefix already taken off, as `nest_service` does.
    ///
    /// Default: none (the root). A prefix starts with `/` and does not end
    /// with one; `build` says so otherwise.
    pub fn path_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.path_prefix = prefix.into();
        self
    }

    /// Serves the demo tools `echo`, `add` and `weather` (first, in that order).
    pub fn builtin_tools(mut self) -> Self {
        self.builtins = true;
        self
    }

    /// Serves `GET /metrics` on this address (`host:port`, port 0 for a free
    /// one) instead of the server's own, where it then answers `404`
    /// (feature `metrics`; `HAIP_METRICS_ADDR` with
    /// [`from_env`](Self::from_env)). That port serves nothing else and asks
    /// no token: bind it to an interface only your Prometheus reaches.
    /// [`ServerHandle::metrics_addr`](crate::ServerHandle::metrics_addr) says
    /// where it listens.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), haip::Error> {
    /// let server = haip::Server::builder()
    ///     .metrics_addr("127.0.0.1:9464")
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn metrics_addr(mut self, addr: impl Into<String>) -> Self {
        self.config.metrics_addr.addr = Some(addr.into());
        self
    }

    /// Adds a tool. Two tools with the same name make [`build`](Self::build) fail.
    ///
    /// For a `#[haip_tool]` function `add`, pass `add::tool()`.
    pub fn tool(mut self, tool: Tool) -> Self {
        let origin = format!("`{}` added with .tool()", tool.name());
        self.tools.push((tool, origin));
        self
    }

    /// Adds several tools.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Tool>) -> Self {
        for tool in tools {
            self = self.tool(tool);
        }
        self
    }

    /// Serves every `#[haip_tool]` function linked into the binary, ordered by
    /// source file and line. [`serve`](crate::serve) does this; use it with a builder to add
    /// settings or state.
    ///
    /// A function whose tool the builder is also given explicitly, with
    /// [`tool`](Self::tool) or [`mount`](Self::mount) (edited or not), is
    /// left out here: it is served where it was placed, under the name it
    /// was given there, and not again under its own name because it is
    /// linked in. Tools are matched by the function they were built from,
    /// not by name.
    pub fn annotated_tools(mut self) -> Self {
        self.annotated = true;
        self
    }

    /// Serves `tools` under `prefix`: each as `<prefix>_<name>`
    /// (`files_read`). The separator is `_` unless
    /// [`mount_separator`](Self::mount_separator) says otherwise; a name that
    /// clashes once prefixed makes [`build`](Self::build) fail, naming both
    /// tools' origins. [`mount_with`](Self::mount_with) takes a [`Mount`]
    /// with its own separator and edits of its tools.
    ///
    // Standalone: `annotated_tools` would see the other doctests' tools.
    /// ```standalone_crate
    /// use haip::{ToolSet, haip_tool};
    ///
    /// /// Read a file.
    /// #[haip_tool]
    /// async fn read(path: String) -> String {
    ///     path
    /// }
    ///
    /// /// Say whether the service is up.
    /// #[haip_tool]
    /// async fn health() -> bool {
    ///     true
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), haip::Error> {
    /// let handle = haip::Server::builder()
    ///     .addr("127.0.0.1:0")
    ///     .annotated_tools() // `health`; `read` is mounted, so not here too
    ///     .mount("files", ToolSet::new().tool(read::tool()))
    ///     .mount("backup", [read::tool()])
    ///     .build()?
    ///     .start()
    ///     .await?;
    /// let names: Vec<String> = handle.tools().iter().map(|t| t.name().to_owned()).collect();
    /// assert_eq!(names, ["health", "files_read", "backup_read"]);
    /// # handle.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn mount(self, prefix: impl Into<String>, tools: impl IntoIterator<Item = Tool>) -> Self {
        self.mount_with(Mount::new(prefix, tools))
    }

    /// Serves a [`Mount`]: tools under a prefix, with its separator and
    /// edits.
    pub fn mount_with(mut self, mount: Mount) -> Self {
        self.mounts.push((self.tools.len(), mount));
        self
    }

    /// What joins a mount's prefix to its tools' names, for mounts that do
    /// not choose (default `_`, which every MCP host accepts in tool names;
    /// `.` and `-` are the others MCP allows, and some hosts refuse `.`).
    /// A character a tool name cannot hold makes [`build`](Self::build) fail.
    pub fn mount_separator(mut self, separator: char) -> Self {
        self.mount_separator = Some(separator);
        self
    }

    /// Serves only the tools with at least one of these tags
    /// ([`ToolBuilder::tags`](crate::ToolBuilder::tags),
    /// `#[haip_tool(tags = [..])]`); calls add to the list. Applies to every
    /// tool given to the builder (built-in, annotated, added, mounted), once,
    /// in [`build`](Self::build): what is left out is not registered at all,
    /// so filtering costs nothing per call. Tools registered later
    /// ([`ServerHandle::register_tool`](crate::ServerHandle::register_tool),
    /// MCP imports) are not filtered.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), haip::Error> {
    /// let server = haip::Server::builder()
    ///     .annotated_tools()
    ///     .only_tags(["public"])
    ///     .exclude_tags(["experimental"])
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn only_tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tag_filter
            .only
            .extend(tags.into_iter().map(Into::into));
        self
    }

    /// Leaves out every tool with one of these tags, whatever
    /// [`only_tags`](Self::only_tags) says; calls add to the list. Applied
    /// as `only_tags` is.
    pub fn exclude_tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tag_filter
            .exclude
            .extend(tags.into_iter().map(Into::into));
        self
    }

    /// Adds a layer around every tool call, HAIP and MCP alike (see
    /// [`haip::layer`](crate::layer)): it may refuse a call, rewrite its
    /// params before they are checked, rewrite its result, or watch how it
    /// ended. The first layer added is the outermost: it sees the call first
    /// and the outcome last.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use haip::layer::{Cache, ConcurrencyLimit, MaskErrors, RateLimit};
    ///
    /// # fn demo() -> Result<(), haip::Error> {
    /// let server = haip::Server::builder()
    ///     .annotated_tools()
    ///     .layer(RateLimit::per_subject(60, Duration::from_secs(60)))
    ///     .layer(MaskErrors::new())
    ///     .layer(ConcurrencyLimit::per_tool(8))
    ///     .layer(Cache::new(8 << 20))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn layer(mut self, layer: impl crate::layer::Layer) -> Self {
        self.layers.push(Arc::new(layer));
        self
    }

    /// Serves the inspector at `GET /inspector` (default off; `404` there when
    /// off): one page, embedded in the binary, that lists the tools, builds a
    /// form from each input schema, calls tools with live progress, log lines
    /// and a Cancel button, answers their questions and shows their results.
    /// It speaks HAIP to this server over WebSocket (SSE when that fails).
    ///
    /// The page itself needs no token; with authentication on, it asks for
    /// one and sends it as a `token.<JWT>` WebSocket subprotocol entry (or an
    /// `Authorization` header on SSE), so nothing is reachable without it.
    /// Feature `inspector`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), haip::Error> {
    /// let handle = haip::Server::builder()
    ///     .builtin_tools()
    ///     .inspector(true)
    ///     .build()?
    ///     .start()
    ///     .await?;
    /// println!("open http://{}/inspector", handle.local_addr());
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "inspector")]
    #[cfg_attr(docsrs, doc(cfg(feature = "inspector")))]
    pub fn inspector(mut self, enabled: bool) -> Self {
        self.config.inspector = enabled;
        self
    }

    /// Registers application state, handed to tools that take a
    /// [`State<T>`](crate::State) parameter (or call [`Context::state`](crate::Context::state)).
    /// One value per type; a later one replaces an earlier one.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }

    /// Every limit, size and duration of the server at once: see [`Limits`]
    /// for each, its default and what happens at the bound. The value
    /// replaces the whole of any given before, so start from
    /// `Limits::default()` (or from the limits you had) and change fields:
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use haip::Limits;
    ///
    /// # fn demo() -> Result<(), haip::Error> {
    /// let server = haip::Server::builder()
    ///     .limits(Limits {
    ///         max_sessions: 100,
    ///         tool_timeout: Some(Duration::from_secs(30)),
    ///         ..Limits::default()
    ///     })
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    setters! {
        session:
        /// Send `TOOL_UPDATE RUNNING` when a call starts executing (default off).
        announce_running: bool,
        /// Add the legacy `schema` field to `TOOL_SCHEMA` replies (default off).
        tool_schema_legacy_field: bool,
        /// Push `TOOL_LIST` unsolicited to clients whose `HAI` listed it in
        /// `accept_events`: right after that `HAI`, and after every change of
        /// the registry (`register_tool`, an MCP server's tools coming, going or
        /// changing). Default off.
        advertise_tools: bool,
        /// Turn results that violate the output schema into errors (default off: logged and counted).
        strict_output_validation: bool,
        /// Put panic texts in `INTERNAL_ERROR` messages (default off; for development only).
        debug_errors: bool,
        /// Enforce credit: drop inbound envelopes beyond it with
        /// `FLOW_CONTROL_VIOLATION`, and hold outbound ones beyond the client's
        /// (default off: credit is tracked, never a reason to reject).
        strict_flow_control: bool,
        /// Require the full envelope schema of inbound envelopes (all seven
        /// fields, UUID `id` and `session`, decimal-string `seq` and `ts`; else
        /// `INVALID_MESSAGE` with reason `schema`), and silently drop an
        /// envelope whose `seq` is not above the highest seen (default off).
        strict_envelope: bool,
    }

    setters! {
        server:
        /// Apply [`max_connections_per_peer`](Limits::max_connections_per_peer),
        /// and the per-caller shares of unauthenticated callers
        /// ([`max_sessions_per_caller`](Limits::max_sessions_per_caller)), to
        /// loopback peers too (default off: a local reverse proxy speaks for
        /// many clients).
        limit_loopback_peers: bool,
        /// Serve a non-loopback address without authentication (default off: refused at start).
        allow_unauthenticated: bool,
    }

    /// Checks the settings and assembles the tool registry.
    pub fn build(mut self) -> Result<Server, Error> {
        self.limits.apply(&mut self.config);
        if let Some(name) = &self.bad_schema_profile {
            return Err(Error::InvalidConfig {
                setting: "HAIP_SCHEMA_PROFILE",
                reason: crate::UnknownProfile { name: name.clone() }.to_string(),
            });
        }
        self.config.validate()?;
        let redis_wait = self.redis_wait_checked()?;
        if let Some((setting, value)) = &self.traces.bad_sampling {
            return Err(Error::InvalidConfig {
                setting,
                reason: format!("a sampling ratio is a number from 0 to 1, not {value:?}"),
            });
        }
        self.mcp.validate()?;
        let auth = self.authenticator_for()?;
        let tools = Given {
            builtins: self.builtins,
            annotated: self.annotated,
            tools: self.tools,
            mounts: self.mounts,
            separator: self.mount_separator,
            filter: self.tag_filter,
        }
        .tools()?;
        let registry = register(tools, &self.state, self.config.session.schema_profile)?;
        let instance = self.instance_id.clone().unwrap_or_else(|| {
            format!("haip-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
        });
        let mut shared = Shared::new(self.config.session.clone(), registry, self.state);
        shared.tracer = self.traces.tracer()?;
        if !self.layers.is_empty() {
            let stack = crate::layer::Stack::new(self.layers, shared.runner.validators_handle());
            shared.runner.set_around(Arc::new(stack));
        }
        let cluster = Cluster::new(
            self.redis_url.as_deref(),
            redis_wait,
            &instance,
            &self.config.session,
            &mut shared,
        )?;
        super::with_mcp::keep_tasks(&instance, &self.config, &cluster, &mut shared);
        Ok(Server {
            shared: Arc::new(shared),
            instance: Arc::from(instance),
            cluster,
            config: Arc::new(self.config),
            auth,
            oauth: match &self.auth {
                AuthSetting::OAuth(oauth) => oauth.resource_server(),
                _ => Default::default(),
            },
            cors: Cors {
                origins: self.cors_origins,
            },
            mcp: self.mcp.settings(),
        })
    }

    fn authenticator_for(&self) -> Result<Option<Arc<dyn Authenticator>>, Error> {
        match &self.auth {
            AuthSetting::Off => Ok(None),
            AuthSetting::Custom(custom) => Ok(Some(Arc::clone(custom))),
            AuthSetting::OAuth(oauth) => oauth.authenticator().map(Some),
            #[cfg(feature = "jwt")]
            AuthSetting::PublicKey(_) => self.jwt(),
            AuthSetting::Hs256(_) => self.jwt(),
        }
    }

    /// The JWT authenticator `jwt_hs256`, `jwt_public_key` or
    /// `HAIP_JWT_SECRET` asked for.
    #[cfg(feature = "jwt")]
    fn jwt(&self) -> Result<Option<Arc<dyn Authenticator>>, Error> {
        use crate::auth::Jwt;
        let jwt = match &self.auth {
            AuthSetting::Hs256(secret) => Jwt::hs256(secret)?,
            AuthSetting::PublicKey(pem) => Jwt::public_key_pem(pem)?,
            _ => return Ok(None),
        };
        let jwt = match &self.config.jwt_issuer {
            Some(issuer) => jwt.issuer(issuer.clone()),
            None => jwt,
        };
        let jwt = match &self.config.jwt_audience {
            Some(audience) => jwt.audience(audience.clone()),
            None => jwt,
        };
        Ok(Some(Arc::new(jwt)))
    }

    /// Without the `jwt` feature a JWT secret (`HAIP_JWT_SECRET`) cannot be
    /// checked: the server refuses to start rather than run without the
    /// authentication it was told to require.
    #[cfg(not(feature = "jwt"))]
    fn jwt(&self) -> Result<Option<Arc<dyn Authenticator>>, Error> {
        Err(Error::InvalidConfig {
            setting: "HAIP_JWT_SECRET",
            reason: "JWT authentication needs haip's `jwt` feature; \
                     without it the server would run unauthenticated"
                .to_owned(),
        })
    }
}

/// Traces of calls (feature `otel`).
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
impl ServerBuilder {
    /// Sends a span of every tool call to this OpenTelemetry collector, over
    /// OTLP/HTTP (protobuf): its base URL, `/v1/traces` added (feature
    /// `otel`; [`from_env`](Self::from_env) reads `HAIP_OTLP_ENDPOINT`, else
    /// the standard `OTEL_EXPORTER_OTLP_ENDPOINT`). Off by default.
    ///
    /// Each call gets a `tool.call` span (attributes after the GenAI
    /// conventions: `gen_ai.tool.name`, `gen_ai.tool.call.id`, the outcome,
    /// `error.type`), with children for validation, the wait in the queue,
    /// each question and an MCP import's upstream call. A `traceparent` in
    /// the call's `_meta` (HAIP `TOOL_CALL` payload, MCP request) makes it a
    /// child of the caller's span. Spans are exported in batches by a task
    /// of the server's: a call never waits for the collector, and when it is
    /// slow or gone spans are dropped and counted
    /// (`haip_trace_spans_dropped_total`).
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), haip::Error> {
    /// let server = haip::Server::builder()
    ///     .otlp_endpoint("http://127.0.0.1:4318")
    ///     .trace_sampling(0.1)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn otlp_endpoint(mut self, url: impl Into<String>) -> Self {
        self.traces.endpoint = Some(url.into());
        self
    }

    /// The share of calls traced, 0 to 1 (default 1: every call), when the
    /// caller sent no `traceparent`; a caller's `traceparent` decides for its
    /// calls (its trace sampled: traced; not: not). A call left out makes no
    /// span at all. `HAIP_TRACE_SAMPLING`, else the standard
    /// `OTEL_TRACES_SAMPLER_ARG`, with [`from_env`](Self::from_env).
    pub fn trace_sampling(mut self, ratio: f64) -> Self {
        self.traces.sampling = Some(ratio);
        self.traces.bad_sampling = None;
        self
    }
}

/// Importing MCP servers' tools (feature `mcp-import`).
#[cfg(feature = "mcp-import")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp-import")))]
impl ServerBuilder {
    /// Imports the tools of an MCP server run as a child process (see
    /// [`McpImport::stdio`](crate::mcp::McpImport::stdio)). Feature `mcp-import`.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), haip::Error> {
    /// let server = haip::Server::builder()
    ///     .mcp_stdio("npx", ["-y", "@modelcontextprotocol/server-everything"])
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn mcp_stdio<C, I, A>(self, command: C, args: I) -> Self
    where
        C: Into<std::ffi::OsString>,
        I: IntoIterator<Item = A>,
        A: Into<std::ffi::OsString>,
    {
        self.mcp(crate::mcp::McpImport::stdio(command, args))
    }

    /// Imports the tools of an MCP server reached over Streamable HTTP (see
    /// [`McpImport::http`](crate::mcp::McpImport::http)). Feature `mcp-import`.
    pub fn mcp_http(self, url: impl Into<String>) -> Self {
        self.mcp(crate::mcp::McpImport::http(url))
    }

    /// Imports the tools of an MCP server, with options (a name prefix, the
    /// restart back-off, ...). Feature `mcp-import`.
    pub fn mcp(mut self, import: crate::mcp::McpImport) -> Self {
        self.mcp.imports.push(import);
        self
    }
}

/// Serving the registry to MCP clients (feature `mcp`): `/mcp`, where MCP
/// clients reach the registry.
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
impl ServerBuilder {
    /// Serve the registry to MCP clients over Streamable HTTP at `/mcp`, with
    /// the server's authentication (default on with the `mcp` feature).
    pub fn mcp_endpoint(mut self, enabled: bool) -> Self {
        self.mcp.endpoint = Some(enabled);
        self
    }

    /// Serve clients of MCP revisions before 2026-07-28 at `/mcp` in MCP
    /// sessions held by this server (default `true`); `false` serves every
    /// request on its own (`HAIP_MCP_SESSIONS=0` with
    /// [`from_env`](Self::from_env)). Feature `mcp`.
    ///
    /// One endpoint serves each revision as it expects. A client that sends
    /// `initialize` (MCP 2025-11-25 and earlier: what most hosts speak) gets
    /// a **session** on this instance (`Mcp-Session-Id`), which serves every
    /// later request of that client: elicitation (`ctx.ask`,
    /// `ctx.confirm`), sampling, roots, `notifications/tools/list_changed`
    /// (on the client's `GET` stream) and `logging/setLevel` work, and a
    /// `DELETE` ends the session (`204`). `max_sessions` bounds the live
    /// sessions and `max_inflight_calls` the calls of each. A request of
    /// MCP 2026-07-28 or later (no `initialize`, the revision in its
    /// `_meta`) is served **on its own** whatever this setting says:
    /// questions go in rounds, registry changes on `subscriptions/listen`
    /// streams, and any instance answers it.
    ///
    /// **Several instances**: with Redis ([`redis`](Self::redis)), a
    /// session is kept there too, so any instance behind a load balancer
    /// serves any of its requests: a call runs on the instance its request
    /// reached, the client's answer to its question and its cancellation
    /// are passed to that instance wherever they arrive, and a `DELETE`
    /// ends the session on every instance. Without Redis a session lives on
    /// the instance that opened it, and a load balancer must keep each MCP
    /// client on one (sticky on the `Mcp-Session-Id` header); a request
    /// naming a session another instance holds is answered `404`, and the
    /// client starts a new session.
    ///
    /// **`false`** (every request stateless): the client sees no
    /// `Mcp-Session-Id`; any instance behind a load balancer answers any
    /// request, even one that never saw the client's `initialize`. A result
    /// with nothing before it comes back as `application/json`; progress
    /// (`ctx.progress`) and log lines (`ctx.log`) of a call come on that
    /// call's response stream (SSE) before its result. What needs the
    /// server to reach a pre-2026-07-28 client outside the request it is
    /// answering does not work: `ctx.ask` and `ctx.confirm` fail at once
    /// with [`AskError::Failed`](crate::AskError::Failed) and `ctx.sample`
    /// with [`SampleError::Failed`](crate::SampleError::Failed), saying that
    /// the client has no session and that `mcp_sessions(true)` gives it one
    /// (its answer would arrive as a new POST that no instance is waiting
    /// for); no `notifications/tools/list_changed` is sent (the `tools`
    /// capability does not claim `listChanged`), `logging/setLevel` lasts
    /// for its own request only (a level in a request's `_meta` is
    /// honoured), `notifications/cancelled` is not seen (a call is cancelled
    /// when its client closes the response stream), `GET` and `DELETE` are
    /// `405`. [`max_sessions`](Limits::max_sessions) bounds the MCP requests
    /// being served at once, and
    /// [`max_inflight_calls`](Limits::max_inflight_calls) has nothing to bound
    /// (one call per request).
    pub fn mcp_sessions(mut self, enabled: bool) -> Self {
        self.mcp.sessions = Some(enabled);
        self
    }
}

/// The registry of `tools`: each name once (else an error naming both
/// origins), each tool given the state it needs. A tool the default schema
/// `profile` cannot describe is said once, at start: its clients will not
/// see it (`haip lint` says the same before deploy).
fn register(
    tools: Vec<(Tool, String)>,
    state: &StateMap,
    profile: SchemaProfile,
) -> Result<Registry, Error> {
    let registry = Registry::default();
    let mut seen: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for (tool, origin) in tools {
        if let Some(first) = seen.get(tool.name()) {
            return Err(Error::DuplicateTool {
                name: tool.name().to_owned(),
                first: first.clone(),
                second: origin,
            });
        }
        check_state(&tool, state)?;
        if tool.advertised_input_schema(profile).is_none() {
            let why = refusals(tool.schema_problems(profile));
            tracing::warn!(
                tool = tool.name(),
                %profile,
                why = %why.join("; "),
                "the default schema profile cannot describe this tool; its clients will not see it"
            );
        }
        seen.insert(tool.name().to_owned(), origin);
        registry.register(tool);
    }
    Ok(registry)
}

impl ServerBuilder {
    /// The `redis_wait` setting, checked: a number of replicas (at least
    /// one) and a timeout (1 ms to 2 s), for a server with a Redis.
    fn redis_wait_checked(&self) -> Result<Option<(u32, Duration)>, Error> {
        let invalid = |reason: String| Error::InvalidConfig {
            setting: "redis_wait",
            reason,
        };
        let (replicas, timeout) = match &self.redis_wait {
            None => return Ok(None),
            Some(Err(value)) => {
                return Err(Error::InvalidConfig {
                    setting: "HAIP_REDIS_WAIT",
                    reason: format!(
                        "{value:?} is not `replicas` or `replicas,timeout_ms` (e.g. \"1\" or \"1,100\")"
                    ),
                });
            }
            Some(Ok(wait)) => *wait,
        };
        if self.redis_url.is_none() {
            return Err(invalid(
                "waits for Redis replicas, and no Redis is set (redis, HAIP_REDIS_URL)".into(),
            ));
        }
        if replicas == 0 {
            return Err(invalid("waits for at least one replica".into()));
        }
        if timeout < Duration::from_millis(1) || timeout > MAX_REDIS_WAIT {
            return Err(invalid(format!(
                "waits 1 ms to {} ms, not {timeout:?}",
                MAX_REDIS_WAIT.as_millis()
            )));
        }
        Ok(Some((replicas, timeout)))
    }
}

/// How long a batch of records may wait for replicas, at most: well within
/// a round trip's budget.
const MAX_REDIS_WAIT: Duration = Duration::from_secs(2);

/// `HAIP_REDIS_WAIT`: `replicas`, or `replicas,timeout_ms` (default 100 ms);
/// `Err` holds the value when it is neither.
fn parse_redis_wait(value: &str) -> Result<(u32, Duration), String> {
    let (replicas, ms) = match value.split_once(',') {
        Some((replicas, ms)) => (replicas.trim(), ms.trim()),
        None => (value.trim(), "100"),
    };
    match (replicas.parse::<u32>(), ms.parse::<u64>()) {
        (Ok(replicas), Ok(ms)) => Ok((replicas, Duration::from_millis(ms))),
        _ => Err(value.to_owned()),
    }
}

/// The value of the environment variable `name`, trimmed; `None` when it
/// is unset or empty.
fn env_value(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// The comma-separated list in the environment variable `name`.
fn env_list(name: &str) -> Option<Vec<String>> {
    env_value(name).map(|v| {
        v.split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    })
}

/// A tool that needs state the server lacks is refused.
pub(super) fn check_state(tool: &Tool, state: &StateMap) -> Result<(), Error> {
    match tool.required_state().iter().find(|r| !state.contains(r.id)) {
        Some(missing) => Err(Error::MissingState {
            tool: tool.name().to_owned(),
            state: missing.name,
        }),
        None => Ok(()),
    }
}

impl TraceSettings {
    /// `HAIP_OTLP_ENDPOINT` (else `OTEL_EXPORTER_OTLP_ENDPOINT`),
    /// `HAIP_TRACE_SAMPLING` (else `OTEL_TRACES_SAMPLER_ARG`) and
    /// `OTEL_SERVICE_NAME`.
    fn read_env(&mut self) {
        if let Some(endpoint) =
            env_value("HAIP_OTLP_ENDPOINT").or_else(|| env_value("OTEL_EXPORTER_OTLP_ENDPOINT"))
        {
            self.endpoint = Some(endpoint);
        }
        for name in ["HAIP_TRACE_SAMPLING", "OTEL_TRACES_SAMPLER_ARG"] {
            if let Some(ratio) = env_value(name) {
                match ratio.parse::<f64>() {
                    Ok(ratio) => self.sampling = Some(ratio),
                    Err(_) => self.bad_sampling = Some((name, ratio)),
                }
                break;
            }
        }
        if let Some(service) = env_value("OTEL_SERVICE_NAME") {
            self.service = Some(service);
        }
    }

    /// The server's tracer: off without an endpoint.
    fn tracer(&self) -> Result<crate::otel::Tracer, Error> {
        let Some(endpoint) = &self.endpoint else {
            return Ok(crate::otel::Tracer::default());
        };
        #[cfg(feature = "otel")]
        {
            let settings = crate::otel::Settings {
                endpoint: endpoint.clone(),
                sampling: self.sampling.unwrap_or(1.0),
                service: self.service.clone().unwrap_or_else(|| "haip".to_owned()),
            };
            crate::otel::Tracing::new(&settings)
                .map(crate::otel::Tracer::new)
                .map_err(|reason| Error::InvalidConfig {
                    setting: "otlp_endpoint",
                    reason,
                })
        }
        #[cfg(not(feature = "otel"))]
        {
            tracing::warn!(
                %endpoint,
                "an OTLP endpoint is set, but haip was built without its `otel` feature: no traces"
            );
            Ok(crate::otel::Tracer::default())
        }
    }
}

#[cfg(all(test, not(feature = "jwt")))]
mod tests {
    use super::*;

    #[test]
    fn a_jwt_secret_without_the_jwt_feature_is_refused() {
        let mut builder = crate::Server::builder();
        // What `HAIP_JWT_SECRET` sets (the environment is the process's,
        // shared by every test: set here directly).
        builder.auth = AuthSetting::Hs256("s".repeat(32));
        match builder.build() {
            Err(Error::InvalidConfig { setting, reason }) => {
                assert_eq!(setting, "HAIP_JWT_SECRET");
                assert!(reason.contains("`jwt` feature"), "{reason}");
            }
            Err(other) => panic!("refused for another reason: {other}"),
            Ok(_) => panic!("a server built without `jwt` ran without the authentication asked"),
        }
    }
}

#[cfg(test)]
mod env_tests {
    use super::*;

    #[test]
    fn haip_redis_wait_is_replicas_and_an_optional_timeout() {
        assert_eq!(parse_redis_wait("1"), Ok((1, Duration::from_millis(100))));
        assert_eq!(
            parse_redis_wait(" 2 , 250 "),
            Ok((2, Duration::from_millis(250)))
        );
        for bad in ["", "one", "1,", "1,fast", "-1", "1,2,3"] {
            assert_eq!(parse_redis_wait(bad), Err(bad.to_owned()), "{bad:?}");
        }
    }
}
