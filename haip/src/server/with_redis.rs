//! Sessions shared through Redis, as the server holds them (feature
//! `redis`; `without_redis.rs` takes this file's place without it): the
//! store `build` makes from the URL (sessions and MCP task records are kept
//! there from then on), connecting to it at start, the stream sessions
//! published for the other instances, `/stats`, the store's round trips in
//! `/metrics`, and the session on another instance an upstream POST goes to.
//! The links other instances open here are served by `links.rs`.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::Error;
use crate::cluster::RedisSessionStore;
use crate::session::link::{IncomingLink, Link, LinkOpen, LinkPurpose};
use crate::session::{ResumeRefused, SessionConfig, Shared};

/// The shared session store, when sessions are shared through Redis.
#[derive(Clone, Default)]
pub(crate) struct Cluster(pub(super) Option<Arc<RedisSessionStore>>);

impl Cluster {
    /// The store at `url` (`redis`, `HAIP_REDIS_URL`), when one is given:
    /// `shared` keeps its sessions there from now on, on the store's
    /// connection once it is connected. `session`: the sessions' settings.
    pub(super) fn new(
        url: Option<&str>,
        wait: Option<(u32, std::time::Duration)>,
        instance: &str,
        session: &SessionConfig,
        shared: &mut Shared,
    ) -> Result<Cluster, Error> {
        let Some(url) = url else {
            return Ok(Cluster(None));
        };
        let store = RedisSessionStore::new(
            url,
            instance,
            session.replay_window_time,
            session
                .replay_window_messages
                .saturating_mul(crate::session::REPLAY_HARD_CAP_FACTOR),
        )
        .map_err(|reason| Error::redis(url, reason))?
        .waiting_for(wait);
        let store = Arc::new(store);
        shared.store = Arc::new(crate::cluster::SharedRedisStore(Arc::clone(&store)));
        Ok(Cluster(Some(store)))
    }

    /// Where MCP task records are kept when sessions are shared: in the
    /// same store, on its connection once it is connected; `None` when
    /// they are not.
    #[cfg(feature = "mcp")]
    pub(super) fn task_store(
        &self,
        limits: crate::session::tasks::TaskLimits,
        clock: Arc<dyn crate::session::Clock>,
    ) -> Option<Arc<dyn crate::session::tasks::TaskStore>> {
        let store = self.0.as_ref()?;
        Some(crate::cluster::tasks::RedisTaskStore::attach(
            store, limits, clock,
        ))
    }

    /// Connects to Redis, failing, with the URL and the reason, when it
    /// does not answer.
    pub(super) async fn connect(&self, shared: &Arc<Shared>) -> Result<(), Error> {
        let Some(store) = &self.0 else {
            return Ok(());
        };
        store
            .connect(shared, shared.shutdown.child_token())
            .await
            .map_err(|reason| Error::redis(store.url(), reason))
    }

    /// Says, once connected, that sessions are shared, and where.
    pub(super) fn announce(&self) {
        if let Some(store) = &self.0 {
            tracing::info!(
                instance = store.instance(),
                url = %store.redacted_url(),
                cluster = store.is_cluster(),
                "sessions shared through Redis"
            );
        }
    }

    /// The links other instances open to this one (taken once, to be
    /// served by `links.rs`).
    pub(super) fn take_incoming(&self) -> Option<mpsc::Receiver<IncomingLink>> {
        self.0.as_ref()?.take_incoming()
    }

    /// A stream session opened here, published for the other instances
    /// until [`Published::withdraw`].
    pub(super) fn publish(&self, id: &str, subject: Option<&str>) -> Published {
        Published(self.0.as_ref().map(|store| {
            store.stream_opened(id, subject);
            (Arc::clone(store), subject.map(str::to_owned))
        }))
    }

    /// `/stats` `cluster`: the store's state, and the connections other
    /// instances relay here (counted in `activeConnections` too, and in the
    /// totals where their clients are).
    pub(super) async fn stats(&self, shared: &Shared, stats: &mut Value) {
        let Some(store) = &self.0 else {
            return;
        };
        stats["cluster"] = store.stats().await;
        stats["cluster"]["relayedConnections"] = Value::from(shared.stats.relayed_now());
    }

    /// The store's round trips so far, and those that failed (`/metrics`).
    #[cfg(feature = "metrics")]
    pub(super) fn round_trips(&self) -> Option<(u64, u64)> {
        self.0.as_ref().map(|store| store.round_trips())
    }

    /// The session on another instance an upstream POST of `subject` goes
    /// to, when this one has none for it (docs/protocol.md §15.4 across the
    /// cluster): `candidates` as the POST named them, `local` the number of
    /// open stream sessions `subject` has here. `Err` says why the other
    /// instances cannot be asked.
    pub(super) async fn elsewhere(
        &self,
        subject: Option<&str>,
        candidates: &[Option<&str>],
        local: impl FnOnce() -> usize,
    ) -> Result<Option<Link>, ResumeRefused> {
        let Some(store) = &self.0 else {
            return Ok(None);
        };
        let named: Vec<&str> = candidates.iter().flatten().copied().collect();
        let located = store.locate(subject, &named, local()).await;
        let Some((session, instance)) = located? else {
            return Ok(None);
        };
        let open = LinkOpen {
            subject: subject.map(str::to_owned),
            caller: None,
            purpose: LinkPurpose::Post { session },
            greeted: None,
        };
        Arc::clone(store).open_link(instance, open).await.map(Some)
    }
}

/// A stream session published for the other instances, with the subject
/// that opened it.
pub(crate) struct Published(Option<(Arc<RedisSessionStore>, Option<String>)>);

impl Published {
    /// The session `id` is gone from this instance: the others are told.
    pub(super) fn withdraw(&self, id: &str) {
        if let Some((store, subject)) = &self.0 {
            store.stream_closed(id, subject.as_deref());
        }
    }
}
