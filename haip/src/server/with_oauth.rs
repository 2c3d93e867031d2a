//! The OAuth resource server, as the server holds it (feature `oauth`;
//! `without_oauth.rs` takes this file's place without it): what the
//! builder was told (`ServerBuilder::oauth`, `HAIP_OAUTH_*`), its
//! preparation at start (the resource URL, the issuer's keys), and what the
//! routes ask of it: who a request's token names, the protected resource
//! metadata and where it is (docs/protocol.md §17.1), and `/stats`.

use std::net::IpAddr;
use std::sync::Arc;

use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use serde_json::Value;

use super::Bound;
use super::reply::{Body, json_response, not_found};
use crate::Error;
use crate::auth::{AuthError, Authenticator, Caller, OAuth};
use crate::session::Shared;

/// Where the protected resource metadata is, under the server's prefix or
/// at the root (RFC 9728).
const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// OAuth as the builder was told of it: the resource server to be.
#[derive(Clone)]
pub(crate) struct OAuthSetting(pub(super) OAuth);

impl OAuthSetting {
    /// `HAIP_OAUTH_ISSUER`, with `HAIP_OAUTH_RESOURCE`, `HAIP_OAUTH_AUDIENCE`
    /// and, for token introspection, `HAIP_OAUTH_CLIENT_ID` with
    /// `HAIP_OAUTH_CLIENT_SECRET`, as `var` reads them.
    pub(super) fn from_env(issuer: String, var: fn(&str) -> Option<String>) -> OAuthSetting {
        let mut oauth = OAuth::issuer(issuer);
        if let Some(resource) = var("HAIP_OAUTH_RESOURCE") {
            oauth = oauth.resource(resource);
        }
        if let Some(audience) = var("HAIP_OAUTH_AUDIENCE") {
            oauth = oauth.audience(audience);
        }
        if let (Some(id), Some(secret)) =
            (var("HAIP_OAUTH_CLIENT_ID"), var("HAIP_OAUTH_CLIENT_SECRET"))
        {
            oauth = oauth.introspection(id, secret);
        }
        OAuthSetting(oauth)
    }

    /// What `ServerBuilder`'s `Debug` calls it.
    pub(super) fn name(&self) -> &'static str {
        "oauth"
    }

    /// How every request is authenticated.
    pub(super) fn authenticator(&self) -> Result<Arc<dyn Authenticator>, Error> {
        Ok(Arc::new(self.0.clone()))
    }

    /// The resource server the built server holds.
    pub(super) fn resource_server(&self) -> ResourceServer {
        ResourceServer(Some(self.0.clone()))
    }
}

/// The OAuth resource server, when it is how clients authenticate.
#[derive(Clone, Default)]
pub(crate) struct ResourceServer(Option<OAuth>);

impl ResourceServer {
    /// At start: the resource is this server's `/mcp` unless configured (on
    /// loopback only: elsewhere the server cannot know the URL clients
    /// reach it at), and the issuer's keys are fetched now.
    pub(super) fn prepare(&self, bound: &Bound, prefix: &str) -> Result<(), Error> {
        let Some(oauth) = &self.0 else {
            return Ok(());
        };
        let default = match bound {
            Bound::Tcp(addr) if addr.ip().is_loopback() => {
                Some(format!("http://{addr}{prefix}/mcp"))
            }
            Bound::Tcp(_) => None,
            Bound::Unix(_) | Bound::Embedded if oauth.resource_url().is_none() => {
                return Err(Error::InvalidConfig {
                    setting: "oauth_resource",
                    reason: format!(
                        "a server {} does not know the URL clients reach its /mcp at: \
                         tell it (OAuth::resource, HAIP_OAUTH_RESOURCE), e.g. \
                         https://tools.example.com{prefix}/mcp: tokens must name it",
                        describe(bound)
                    ),
                });
            }
            Bound::Unix(_) | Bound::Embedded => None,
        };
        oauth.prepare(default)?;
        let warm = oauth.clone();
        tokio::spawn(async move { warm.warm_up().await });
        tracing::info!(
            issuer = oauth.issuer_url(),
            resource = oauth.resource_url().unwrap_or_default(),
            "OAuth resource server"
        );
        Ok(())
    }

    /// The URL `WWW-Authenticate` names for the protected resource
    /// metadata: the well-known location of RFC 9728, or under `prefix`
    /// when the resource's path is (the copy a nested service always
    /// serves). `None` without OAuth.
    pub(super) fn metadata_url(&self, prefix: &str) -> Option<String> {
        let oauth = self.0.as_ref()?;
        let rfc = oauth.metadata_url()?;
        if prefix.is_empty() {
            return Some(rfc);
        }
        let resource = oauth.resource_url()?;
        let scheme_end = resource.find("://")? + 3;
        let path_start = resource[scheme_end..]
            .find('/')
            .map_or(resource.len(), |i| scheme_end + i);
        let (origin, path) = resource.split_at(path_start);
        match path.strip_prefix(prefix) {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => Some(format!(
                "{origin}{prefix}{WELL_KNOWN}{}",
                rest.trim_end_matches('/')
            )),
            _ => Some(rfc),
        }
    }

    /// Who `token` names, with `auth` (the server's authenticator). The
    /// resource server counts what a token it does not know yet costs
    /// against the request's `peer`, which the `Authenticator` trait does
    /// not carry.
    pub(super) async fn identify(
        &self,
        auth: &dyn Authenticator,
        token: Option<&str>,
        peer: Option<IpAddr>,
    ) -> Result<Caller, AuthError> {
        match &self.0 {
            Some(oauth) => oauth.identify_from(token, peer).await,
            None => auth.identify(token).await,
        }
    }

    /// Whether `path` is the protected resource metadata's, which is
    /// public like `/health`: how to get a token.
    pub(super) fn serves(&self, path: &str) -> bool {
        self.0.is_some() && path.starts_with(WELL_KNOWN)
    }

    /// The protected resource metadata (RFC 9728): the resource, its
    /// issuer, and every scope a tool here requires.
    pub(super) fn metadata(&self, shared: &Shared) -> Response<Body> {
        let Some(oauth) = &self.0 else {
            return not_found();
        };
        let mut scopes: Vec<String> = shared.config.required_scopes.clone();
        for tool in shared.registry.snapshot().tools() {
            scopes.extend(tool.scopes().iter().cloned());
        }
        scopes.sort_unstable();
        scopes.dedup();
        let mut response = json_response(StatusCode::OK, &oauth.metadata(&scopes));
        // Browser-based hosts read it cross-origin; it holds nothing secret.
        response.headers_mut().insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
        response
    }

    /// `/stats` `oauth`: the resource server's counts.
    pub(super) fn stats(&self, stats: &mut Value) {
        if let Some(oauth) = &self.0 {
            stats["oauth"] = oauth.stats();
        }
    }

    /// The metadata's path at the root of the host
    /// (`HaipService::well_known_path`).
    pub(super) fn well_known_path(&self) -> Option<String> {
        let url = self.0.as_ref()?.metadata_url()?;
        let start = url.find("/.well-known/")?;
        Some(url[start..].to_owned())
    }
}

/// Where a server is, as an error names it.
fn describe(bound: &Bound) -> String {
    match bound {
        Bound::Tcp(addr) => format!("on {addr}"),
        Bound::Unix(path) => format!("on the Unix socket {path}"),
        Bound::Embedded => "embedded as a service".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn www_authenticate_names_the_metadata_under_the_prefix_when_the_resource_is() {
        let oauth = ResourceServer(Some(
            OAuth::issuer("https://idp.example.com")
                .resource("https://tools.example.com/agent/mcp"),
        ));
        assert_eq!(
            oauth.metadata_url("").as_deref(),
            Some("https://tools.example.com/.well-known/oauth-protected-resource/agent/mcp")
        );
        assert_eq!(
            oauth.metadata_url("/agent").as_deref(),
            Some("https://tools.example.com/agent/.well-known/oauth-protected-resource/mcp")
        );
        // A resource elsewhere than under the prefix: the RFC 9728 location.
        assert_eq!(
            oauth.metadata_url("/other").as_deref(),
            Some("https://tools.example.com/.well-known/oauth-protected-resource/agent/mcp")
        );
        assert_eq!(
            oauth.metadata_url("/ag").as_deref(),
            Some("https://tools.example.com/.well-known/oauth-protected-resource/agent/mcp")
        );
        assert_eq!(ResourceServer::default().metadata_url(""), None);
    }
}
