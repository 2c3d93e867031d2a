//! The front door's browser rules, checked before any route is served:
//!
//! - **`Host`** must be a name the server answers to (against DNS
//!   rebinding: a page on `evil.example`, its name pointed at 127.0.0.1,
//!   reaches a loopback server with `Host: evil.example`). Loopback names
//!   are always allowed; the names of [`ServerBuilder::allowed_hosts`]
//!   too; when none are given, a server bound to loopback answers to
//!   loopback names only, and a server bound to another address to any
//!   name. Refused: `403 HOST_NOT_ALLOWED`. `/health` is exempt from every
//!   rule here: it always answers (docs/protocol.md §16), whatever a probe's platform
//!   writes in `Host`, and holds nothing for a page.
//! - **`Origin`**, when a browser sends one, must be the server's own (the
//!   scheme, host and port of the request's `Host`), a loopback page on a
//!   loopback `Host` (local tools), or listed in `cors_allowed_origins`.
//!   Refused: `403 ORIGIN_NOT_ALLOWED`. Clients that are not browsers send
//!   no `Origin`. Exempt: what holds nothing for a page: CORS preflights
//!   (an origin not allowed gets no `Access-Control-Allow-Origin` and the
//!   browser stops there) and the protected resource metadata, which
//!   browser-based hosts read cross-origin.
//! - **Simple POSTs**: a `POST` that changes state must say
//!   `Content-Type: application/json` (or another type a page cannot send
//!   without asking first): the three a page may send cross-origin with no
//!   preflight (`text/plain`, `application/x-www-form-urlencoded`,
//!   `multipart/form-data`), and none at all, get `415
//!   UNSUPPORTED_MEDIA_TYPE`.
//!
//! [`ServerBuilder::allowed_hosts`]: crate::ServerBuilder::allowed_hosts

use hyper::header::{self, HeaderMap};
use hyper::{Method, Uri};

/// Which `Host` names the server answers to.
#[derive(Debug, Clone)]
pub(crate) struct Hosts {
    /// Names (`name` or `name:port`, `*.suffix`), lower case.
    names: Vec<String>,
    /// Any name at all (bound to a non-loopback address, no names given).
    any: bool,
}

impl Hosts {
    /// The rule for a server bound to a loopback address or not, given
    /// `names` (`ServerBuilder::allowed_hosts`).
    /// `"*"` among `names` allows any name.
    pub(crate) fn new(names: &[String], bound_to_loopback: bool) -> Hosts {
        let names: Vec<String> = names
            .iter()
            .map(|n| n.trim().to_ascii_lowercase())
            .collect();
        Hosts {
            any: names.iter().any(|n| n == "*") || (names.is_empty() && !bound_to_loopback),
            names,
        }
    }

    /// Only loopback names are allowed: only this machine can address the
    /// server by a name it answers to.
    pub(crate) fn only_loopback(&self) -> bool {
        !self.any
            && self
                .names
                .iter()
                .all(|name| is_loopback_host(authority_host(name)))
    }

    /// Whether `host` (a `Host` header's value, `name[:port]`) is allowed.
    pub(crate) fn allows(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let name = authority_host(&host);
        if self.any || is_loopback_host(name) {
            return true;
        }
        self.names.iter().any(|allowed| {
            if let Some(suffix) = allowed.strip_prefix("*.") {
                return name
                    .strip_suffix(suffix)
                    .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.'));
            }
            *allowed == host || allowed == name
        })
    }
}

/// Which browser origins may call the server cross-origin (default: none).
#[derive(Debug, Clone, Default)]
pub(crate) struct Cors {
    /// Allowed `Origin` values; `"*"` allows any.
    pub(crate) origins: Vec<String>,
}

impl Cors {
    /// The `Access-Control-Allow-Origin` value for a request's `Origin`, if allowed.
    pub(crate) fn allow(&self, origin: Option<&str>) -> Option<String> {
        if self.origins.iter().any(|o| o == "*") {
            return Some(origin.map_or_else(|| "*".to_owned(), str::to_owned));
        }
        let origin = origin?;
        self.origins
            .iter()
            .any(|o| o == origin)
            .then(|| origin.to_owned())
    }
}

/// Why the front door refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The `Host` is not a name the server answers to.
    Host(String),
    /// A browser `Origin` that is neither the server's own nor allowed.
    Origin(String),
    /// A state-changing POST a page could send without a preflight.
    SimpleContentType(Option<String>),
}

impl Refusal {
    /// What the client is told, naming the setting that would allow it.
    pub(crate) fn message(&self) -> String {
        match self {
            Refusal::Host(host) => format!(
                "Host {} is not a name this server answers to (allow it with allowed_hosts / HAIP_ALLOWED_HOSTS)",
                quote(host)
            ),
            Refusal::Origin(origin) => format!(
                "Origin {} is not allowed (a browser origin must be the server's own or listed in cors_allowed_origins / HAIP_CORS_ALLOWED_ORIGINS)",
                quote(origin)
            ),
            Refusal::SimpleContentType(Some(ty)) => format!(
                "Content-Type {} is not accepted here: send Content-Type: application/json",
                quote(ty)
            ),
            Refusal::SimpleContentType(None) => {
                "A POST needs a Content-Type: send Content-Type: application/json".to_owned()
            }
        }
    }

    /// The error code of the refusal.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Refusal::Host(_) => "HOST_NOT_ALLOWED",
            Refusal::Origin(_) => "ORIGIN_NOT_ALLOWED",
            Refusal::SimpleContentType(_) => "UNSUPPORTED_MEDIA_TYPE",
        }
    }

    /// The HTTP status of the refusal.
    pub(crate) fn status(&self) -> hyper::StatusCode {
        match self {
            Refusal::Host(_) => hyper::StatusCode::FORBIDDEN,
            Refusal::Origin(_) => hyper::StatusCode::FORBIDDEN,
            Refusal::SimpleContentType(_) => hyper::StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }
}

/// A request's `Host`: the header, else the URI's authority (HTTP/1.1's
/// absolute form).
pub(crate) fn host_of<'a>(headers: &'a HeaderMap, uri: &'a Uri) -> Option<&'a str> {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()))
}

/// Checks a request's `Host` and `Origin` (every route but the protected
/// resource metadata's `Origin`), and whether a POST to `path` needs a
/// non-simple content type.
pub(crate) fn check(
    method: &Method,
    path: &str,
    uri: &Uri,
    headers: &HeaderMap,
    hosts: &Hosts,
    cors: &Cors,
) -> Result<(), Refusal> {
    // `/health` always answers (docs/protocol.md §16): a probe's `Host` is whatever
    // its platform writes, and it holds nothing for a page.
    if path == "/health" {
        return Ok(());
    }
    // Several `Host`s (no browser sends them): which one a proxy in front
    // believed is anyone's guess.
    if headers.get_all(header::HOST).iter().nth(1).is_some() {
        return Err(Refusal::Host("several Host headers".to_owned()));
    }
    let host = host_of(headers, uri);
    // HTTP/1.0 clients may send no `Host`; browsers always do.
    if let Some(host) = host
        && !hosts.allows(host)
    {
        return Err(Refusal::Host(host.to_owned()));
    }
    // Public: what holds nothing for a page to read or change. A preflight
    // from an origin not allowed gets no `Access-Control-Allow-Origin`, so
    // the browser sends nothing after it.
    let public =
        *method == Method::OPTIONS || path.starts_with("/.well-known/oauth-protected-resource");
    if !public && let Some(origin) = refused_origin(headers, host, cors) {
        return Err(Refusal::Origin(origin));
    }
    if *method == Method::POST && changes_state(path) {
        let content_type = headers.get(header::CONTENT_TYPE).map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        });
        match content_type.as_deref() {
            None | Some("") => return Err(Refusal::SimpleContentType(None)),
            Some("text/plain" | "application/x-www-form-urlencoded" | "multipart/form-data") => {
                return Err(Refusal::SimpleContentType(content_type));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// POSTs that run something or reach a session: every POST route the
/// server has (`/mcp` checks its own, more strictly).
fn changes_state(path: &str) -> bool {
    matches!(
        path,
        "/haip/sse" | "/haip/message" | "/haip/handshake" | "/haip/stream"
    )
}

/// The `Origin` of a browser request that may not call the server, if any.
pub(crate) fn refused_origin(
    headers: &HeaderMap,
    host: Option<&str>,
    cors: &Cors,
) -> Option<String> {
    let origin = headers.get(header::ORIGIN)?;
    let Ok(origin) = origin.to_str() else {
        return Some(String::from_utf8_lossy(origin.as_bytes()).into_owned());
    };
    if cors.allow(Some(origin)).is_some() {
        return None;
    }
    let Some(host) = host else {
        return Some(origin.to_owned());
    };
    // The server's own pages (the inspector, say): the same host and port.
    if origin_authority(origin)
        .is_some_and(|(scheme, authority)| same_authority(scheme, authority, host))
    {
        return None;
    }
    let local = is_loopback_host(authority_host(host))
        && origin_authority(origin).is_some_and(|(_, a)| is_loopback_host(authority_host(a)));
    (!local).then(|| origin.to_owned())
}

/// The scheme and authority of an `Origin` (`scheme://host[:port]`), for
/// `http` and `https`.
fn origin_authority(origin: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = origin.split_once("://")?;
    let scheme_ok = scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https");
    (scheme_ok && !rest.contains('/')).then_some((scheme, rest))
}

/// Whether an origin's authority names the same host and port as `host`,
/// the scheme's default port written or not.
fn same_authority(scheme: &str, authority: &str, host: &str) -> bool {
    let default = if scheme.eq_ignore_ascii_case("https") {
        "443"
    } else {
        "80"
    };
    let split = |a: &str| -> (String, String) {
        let name = authority_host(a).to_ascii_lowercase();
        let port = port_of(a).unwrap_or(default).to_owned();
        (name, port)
    };
    split(authority) == split(host)
}

/// The port of `host[:port]` (an IPv6 literal in brackets).
fn port_of(authority: &str) -> Option<&str> {
    let after_host = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']')?.1,
        None => authority.find(':').map_or("", |i| &authority[i..]),
    };
    after_host.strip_prefix(':').filter(|p| !p.is_empty())
}

/// The host of `host[:port]` (an IPv6 literal keeps its brackets off).
pub(crate) fn authority_host(authority: &str) -> &str {
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or_default();
    }
    authority.split(':').next().unwrap_or_default()
}

/// `localhost`, a name under `.localhost` (RFC 6761: always loopback), or
/// a loopback address.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    host.eq_ignore_ascii_case("localhost")
        || host
            .rsplit_once('.')
            .is_some_and(|(_, tld)| tld.eq_ignore_ascii_case("localhost"))
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// At most 64 characters of what a client sent, for an error message.
fn quote(s: &str) -> String {
    let mut quoted: String = s.chars().take(64).collect();
    if s.chars().count() > 64 {
        quoted.push('…');
    }
    format!("{quoted:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cors_allows_listed_origins_only() {
        let none = Cors::default();
        assert_eq!(none.allow(Some("https://app.example")), None);
        let some = Cors {
            origins: vec!["https://app.example".into()],
        };
        assert_eq!(
            some.allow(Some("https://app.example")).as_deref(),
            Some("https://app.example")
        );
        assert_eq!(some.allow(Some("https://evil.example")), None);
        let any = Cors {
            origins: vec!["*".into()],
        };
        assert_eq!(any.allow(None).as_deref(), Some("*"));
        assert_eq!(
            any.allow(Some("https://x.example")).as_deref(),
            Some("https://x.example")
        );
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, value.parse().unwrap());
        }
        h
    }

    fn cors(origins: &[&str]) -> Cors {
        Cors {
            origins: origins.iter().map(|o| (*o).to_owned()).collect(),
        }
    }

    fn run(
        method: Method,
        path: &str,
        pairs: &[(&'static str, &str)],
        hosts: &Hosts,
    ) -> Result<(), Refusal> {
        let uri: Uri = path.parse().unwrap();
        check(
            &method,
            path,
            &uri,
            &headers(pairs),
            hosts,
            &cors(&["https://app.example"]),
        )
    }

    #[test]
    fn loopback_servers_answer_to_loopback_names_only_unless_told() {
        let local = Hosts::new(&[], true);
        for ok in [
            "127.0.0.1:8080",
            "localhost",
            "LOCALHOST:1",
            "[::1]:80",
            "127.1.2.3",
            "app.localhost:3000",
        ] {
            assert!(local.allows(ok), "{ok}");
        }
        for no in [
            "evil.example",
            "evil.example:8080",
            "10.0.0.1:8080",
            "localhost.evil.example",
            "",
        ] {
            assert!(!local.allows(no), "{no}");
        }
        let open = Hosts::new(&[], false);
        assert!(
            open.allows("evil.example"),
            "bound elsewhere, no names: any"
        );
        let named = Hosts::new(
            &[
                "tools.example.com".into(),
                "*.internal.example".into(),
                "api.example:8443".into(),
            ],
            false,
        );
        assert!(named.allows("tools.example.com:8080"));
        assert!(named.allows("a.internal.example"));
        assert!(
            !named.allows("internal.example"),
            "the wildcard needs a subdomain"
        );
        assert!(!named.allows("xinternal.example"));
        assert!(named.allows("api.example:8443"));
        assert!(
            !named.allows("api.example:9000"),
            "a name with a port allows that port"
        );
        assert!(!named.allows("evil.example"));
        assert!(named.allows("localhost:8080"), "loopback names always");
        assert!(!named.only_loopback());
    }

    #[test]
    fn a_star_allows_any_host_and_only_loopback_names_keep_a_server_local() {
        let star = Hosts::new(&["*".into()], true);
        assert!(star.allows("evil.example"));
        assert!(!star.only_loopback());
        assert!(Hosts::new(&[], true).only_loopback());
        assert!(!Hosts::new(&[], false).only_loopback());
        assert!(Hosts::new(&["localhost:8080".into(), "127.0.0.2".into()], true).only_loopback());
        assert!(!Hosts::new(&["tools.example.com".into()], true).only_loopback());
    }

    #[test]
    fn origins_must_be_the_servers_own_local_or_listed() {
        let hosts = Hosts::new(&[], true);
        let get = |pairs: &[(&'static str, &str)]| run(Method::GET, "/stats", pairs, &hosts);
        assert_eq!(
            get(&[("host", "127.0.0.1:8080")]),
            Ok(()),
            "no Origin: not a browser"
        );
        assert_eq!(
            get(&[
                ("host", "127.0.0.1:8080"),
                ("origin", "https://evil.example")
            ]),
            Err(Refusal::Origin("https://evil.example".into()))
        );
        assert_eq!(
            get(&[
                ("host", "127.0.0.1:8080"),
                ("origin", "http://127.0.0.1:8080")
            ]),
            Ok(())
        );
        assert_eq!(
            get(&[
                ("host", "localhost:8080"),
                ("origin", "http://localhost:5173")
            ]),
            Ok(()),
            "a local page"
        );
        assert_eq!(
            get(&[
                ("host", "127.0.0.1:8080"),
                ("origin", "https://app.example")
            ]),
            Ok(()),
            "listed"
        );
        assert!(
            get(&[("host", "127.0.0.1:8080"), ("origin", "null")]).is_err(),
            "opaque origins"
        );
        // Bound elsewhere: the server's own origin is its Host.
        let open = Hosts::new(&[], false);
        let own = |origin: &str, host: &str| {
            let h = headers(&[("host", host), ("origin", origin)]);
            check(
                &Method::GET,
                "/stats",
                &"/stats".parse().unwrap(),
                &h,
                &open,
                &cors(&[]),
            )
        };
        assert_eq!(
            own("https://tools.example.com", "tools.example.com"),
            Ok(())
        );
        assert_eq!(
            own("https://tools.example.com", "tools.example.com:443"),
            Ok(())
        );
        assert_eq!(
            own("http://tools.example.com:8080", "tools.example.com:8080"),
            Ok(())
        );
        assert!(own("http://tools.example.com:8081", "tools.example.com:8080").is_err());
        assert!(
            own("http://localhost:3000", "tools.example.com").is_err(),
            "a local page, a far host"
        );
        // Rebinding: both Host and Origin are the attacker's.
        assert_eq!(
            get(&[
                ("host", "evil.example:8080"),
                ("origin", "http://evil.example:8080")
            ]),
            Err(Refusal::Host("evil.example:8080".into()))
        );
        // The metadata is public.
        assert_eq!(
            run(
                Method::GET,
                "/.well-known/oauth-protected-resource/mcp",
                &[("host", "127.0.0.1"), ("origin", "https://evil.example")],
                &hosts
            ),
            Ok(())
        );
    }

    #[test]
    fn state_changing_posts_need_a_type_no_page_sends_unasked() {
        let hosts = Hosts::new(&[], true);
        let post = |path: &str, ty: Option<&str>| {
            let mut pairs = vec![("host", "127.0.0.1")];
            if let Some(ty) = ty {
                pairs.push(("content-type", ty));
            }
            run(Method::POST, path, &pairs, &hosts)
        };
        assert_eq!(post("/haip/stream", Some("application/json")), Ok(()));
        assert_eq!(post("/haip/stream", Some("application/x-ndjson")), Ok(()));
        assert_eq!(
            post("/haip/message", Some("application/octet-stream")),
            Ok(())
        );
        assert_eq!(
            post("/haip/stream", Some("text/plain;charset=UTF-8")),
            Err(Refusal::SimpleContentType(Some("text/plain".into())))
        );
        assert!(post("/haip/message", Some("application/x-www-form-urlencoded")).is_err());
        assert!(post("/haip/sse", Some("Multipart/Form-Data; boundary=x")).is_err());
        assert_eq!(
            post("/haip/handshake", None),
            Err(Refusal::SimpleContentType(None))
        );
        assert_eq!(post("/nowhere", None), Ok(()), "not a route: 404 later");
    }

    #[test]
    fn loopback_origins_and_hosts_are_recognised() {
        assert_eq!(
            origin_authority("http://localhost:6274"),
            Some(("http", "localhost:6274"))
        );
        assert_eq!(
            origin_authority("https://[::1]:8443"),
            Some(("https", "[::1]:8443"))
        );
        assert_eq!(origin_authority("null"), None);
        assert_eq!(origin_authority("file://x"), None);
        assert!(is_loopback_host(authority_host("127.0.0.1:8080")));
        assert!(is_loopback_host(authority_host("[::1]:8080")));
        assert!(is_loopback_host(authority_host("LOCALHOST")));
        assert!(!is_loopback_host(authority_host("evil.example:8080")));
        assert!(!is_loopback_host(authority_host("127.0.0.1.evil.example")));
    }

    #[test]
    fn ports_are_read_from_names_and_literals() {
        assert_eq!(port_of("a.example:80"), Some("80"));
        assert_eq!(port_of("a.example"), None);
        assert_eq!(port_of("[::1]:8080"), Some("8080"));
        assert_eq!(port_of("[::1]"), None);
        assert_eq!(authority_host("[::1]:8080"), "::1");
    }
}
