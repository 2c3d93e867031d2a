//! Without the `oauth` feature, in `with_oauth.rs`'s place: the same names,
//! holding nothing. `HAIP_OAUTH_ISSUER` set anyway makes `build` fail,
//! saying that the feature is missing.

use std::net::IpAddr;
use std::sync::Arc;

use hyper::Response;
use serde_json::Value;

use super::Bound;
use super::reply::{Body, not_found};
use crate::Error;
use crate::auth::{AuthError, Authenticator, Caller};
use crate::session::Shared;

/// `HAIP_OAUTH_ISSUER` in a build that cannot be a resource server.
#[derive(Clone)]
pub(crate) struct OAuthSetting;

impl OAuthSetting {
    /// Noted, to be refused by `build`.
    pub(super) fn from_env(_issuer: String, _var: fn(&str) -> Option<String>) -> OAuthSetting {
        OAuthSetting
    }

    /// What `ServerBuilder`'s `Debug` calls it.
    pub(super) fn name(&self) -> &'static str {
        "oauth (unavailable)"
    }

    /// Refused: the feature is missing.
    pub(super) fn authenticator(&self) -> Result<Arc<dyn Authenticator>, Error> {
        Err(Error::InvalidConfig {
            setting: "HAIP_OAUTH_ISSUER",
            reason: "haip was built without its `oauth` feature; enable it to be an \
                     OAuth resource server"
                .to_owned(),
        })
    }

    /// None (`build` has refused the setting already).
    pub(super) fn resource_server(&self) -> ResourceServer {
        ResourceServer
    }
}

/// No OAuth resource server.
#[derive(Clone, Default)]
pub(crate) struct ResourceServer;

impl ResourceServer {
    /// Nothing to prepare.
    pub(super) fn prepare(&self, _bound: &Bound, _prefix: &str) -> Result<(), Error> {
        Ok(())
    }

    /// No metadata.
    pub(super) fn metadata_url(&self, _prefix: &str) -> Option<String> {
        None
    }

    /// Who `token` names, as the server's authenticator `auth` says.
    pub(super) async fn identify(
        &self,
        auth: &dyn Authenticator,
        token: Option<&str>,
        _peer: Option<IpAddr>,
    ) -> Result<Caller, AuthError> {
        auth.identify(token).await
    }

    /// No metadata is served.
    pub(super) fn serves(&self, _path: &str) -> bool {
        false
    }

    /// Never asked for ([`serves`](Self::serves) is false).
    pub(super) fn metadata(&self, _shared: &Shared) -> Response<Body> {
        not_found()
    }

    /// Nothing to add to `/stats`.
    pub(super) fn stats(&self, _stats: &mut Value) {}

    /// No metadata.
    pub(super) fn well_known_path(&self) -> Option<String> {
        None
    }
}
