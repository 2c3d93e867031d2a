//! Without the `redis` feature, in `with_redis.rs`'s place: the same names,
//! holding nothing. Sessions stay on the instance that runs them; a Redis
//! URL given anyway (`redis`, `HAIP_REDIS_URL`) makes `build` fail, saying
//! that the feature is missing.

use std::sync::Arc;

use serde_json::Value;

use crate::Error;
use crate::session::link::Link;
use crate::session::{SessionConfig, Shared};

/// No shared session store.
#[derive(Clone, Default)]
pub(crate) struct Cluster;

impl Cluster {
    /// Refuses a Redis URL: this build cannot share sessions.
    pub(super) fn new(
        url: Option<&str>,
        _wait: Option<(u32, std::time::Duration)>,
        _instance: &str,
        _session: &SessionConfig,
        _shared: &mut Shared,
    ) -> Result<Cluster, Error> {
        match url {
            Some(url) => Err(Error::redis(
                url,
                "haip was built without its `redis` feature",
            )),
            None => Ok(Cluster),
        }
    }

    /// No shared store: MCP task records are kept in memory.
    #[cfg(feature = "mcp")]
    pub(super) fn task_store(
        &self,
        _limits: crate::session::tasks::TaskLimits,
        _clock: Arc<dyn crate::session::Clock>,
    ) -> Option<Arc<dyn crate::session::tasks::TaskStore>> {
        None
    }

    /// Nothing to connect to.
    pub(super) async fn connect(&self, _shared: &Arc<Shared>) -> Result<(), Error> {
        Ok(())
    }

    /// Nothing to say.
    pub(super) fn announce(&self) {}

    /// Nobody to tell.
    pub(super) fn publish(&self, _id: &str, _subject: Option<&str>) -> Published {
        Published
    }

    /// Nothing to add to `/stats`.
    pub(super) async fn stats(&self, _shared: &Shared, _stats: &mut Value) {}

    /// No round trips (`/metrics`).
    #[cfg(feature = "metrics")]
    pub(super) fn round_trips(&self) -> Option<(u64, u64)> {
        None
    }

    /// No other instance holds a session.
    pub(super) async fn elsewhere(
        &self,
        _subject: Option<&str>,
        _candidates: &[Option<&str>],
        _local: impl FnOnce() -> usize,
    ) -> Result<Option<Link>, crate::session::ResumeRefused> {
        Ok(None)
    }
}

/// A stream session nobody else was told of.
pub(crate) struct Published;

impl Published {
    /// Nobody to tell.
    pub(super) fn withdraw(&self, _id: &str) {}
}
