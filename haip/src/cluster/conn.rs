//! Where the store's Redis is, and the connection to it: one server
//! (`redis://host:port/db`), a Redis Cluster named by its seed nodes
//! (several URLs separated by commas, or a `redis+cluster://` URL), or a
//! primary watched by Redis Sentinel (`redis+sentinel://s1:26379,s2:26379/name`).
//! Each is a [`Conn`], which the rest of the store uses alike: what differs
//! is that a cluster takes no command that touches keys of two hash slots
//! (see the key table of [`super`]), so the writer sends each slot's
//! records apart; and that a Sentinel's primary may change, so the
//! connection asks the sentinels again after it fails.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};

use super::IO_TIMEOUT;

/// The Redis a store talks to, parsed from its URL.
pub(super) enum Target {
    /// One server.
    Single(redis::Client),
    /// A Redis Cluster: the client, and the seed nodes (for the
    /// connection that subscribes).
    Cluster {
        client: Box<ClusterClient>,
        seeds: Vec<redis::ConnectionInfo>,
    },
    /// A primary that Redis Sentinel watches, and fails over to a replica.
    Sentinel(Arc<Sentinels>),
}

/// The sentinels of one primary (its service name), asked where it is.
pub(super) struct Sentinels {
    client: tokio::sync::Mutex<redis::sentinel::SentinelClient>,
}

impl Sentinels {
    /// A client of the primary the sentinels name now (checked with `ROLE`).
    async fn primary(&self) -> redis::RedisResult<redis::Client> {
        let mut client = self.client.lock().await;
        tokio::time::timeout(IO_TIMEOUT, client.async_get_client())
            .await
            .unwrap_or_else(|_| Err(invalid_io("no sentinel named the primary in time")))
    }
}

impl Target {
    /// The target `url` names: a primary watched by Redis Sentinel when its
    /// scheme is `redis+sentinel` (see [`sentinel`]); a cluster when it lists
    /// several URLs separated by commas, or its scheme is `redis+cluster`
    /// (`rediss+cluster` with TLS); one server otherwise. A URL after the
    /// first may leave out its scheme (`redis+cluster://h1:7000,h2:7000`):
    /// it takes the first's.
    pub(super) fn parse(url: &str) -> Result<Target, redis::RedisError> {
        if let Some(rest) = url.trim().strip_prefix("redis+sentinel://") {
            return sentinel(rest);
        }
        let mut parts = url.split(',').map(str::trim);
        let first = parts.next().unwrap_or_default();
        let (scheme, first) = match first.split_once("://") {
            Some(("redis+cluster", rest)) => ("redis", rest),
            Some(("rediss+cluster", rest)) => ("rediss", rest),
            Some(("rediss+sentinel", _)) => {
                return Err(invalid(
                    "TLS to Redis Sentinel (rediss+sentinel) is not supported: use redis+sentinel",
                ));
            }
            Some((scheme, rest)) => (scheme, rest),
            None => {
                return Err(invalid(
                    "not a URL: it needs a scheme, as in redis://host:port",
                ));
            }
        };
        let rest: Vec<&str> = parts.collect();
        let cluster = url.contains("+cluster://") || !rest.is_empty();
        if !cluster {
            return Ok(Target::Single(redis::Client::open(url)?));
        }
        let mut urls = vec![format!("{scheme}://{first}")];
        for node in rest {
            if node.is_empty() {
                return Err(invalid("an empty node in the list of cluster nodes"));
            }
            urls.push(if node.contains("://") {
                node.to_owned()
            } else {
                format!("{scheme}://{node}")
            });
        }
        let infos = urls
            .iter()
            .map(|u| u.as_str().into_connection_info())
            .collect::<Result<Vec<_>, _>>()?;
        let client = Box::new(cluster_builder(infos.clone()).build()?);
        Ok(Target::Cluster {
            client,
            seeds: infos,
        })
    }

    /// Whether it is a Redis Cluster.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Target::Cluster { .. })
    }

    /// Whether it is a primary watched by Redis Sentinel.
    #[cfg(test)]
    pub(super) fn is_sentinel(&self) -> bool {
        matches!(self, Target::Sentinel(_))
    }

    /// Connects: one connection that reconnects by itself (to the server,
    /// or to each node of the cluster as its slots move).
    pub(super) async fn connect(&self) -> Result<Conn, redis::RedisError> {
        match self {
            Target::Single(client) => {
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(IO_TIMEOUT))
                    .set_response_timeout(Some(IO_TIMEOUT))
                    .set_number_of_retries(2);
                let conn = client.get_connection_manager_with_config(config).await?;
                Ok(Conn::Single(conn))
            }
            Target::Cluster { client, .. } => Ok(Conn::Cluster(
                client.get_async_connection().await?,
                Arc::new(std::sync::Mutex::new(None)),
            )),
            Target::Sentinel(sentinels) => {
                let conn = Arc::new(FollowedPrimary {
                    sentinels: Arc::clone(sentinels),
                    current: std::sync::Mutex::new(None),
                });
                // Connected now, so that a wrong setting fails the start.
                conn.connection().await?;
                Ok(Conn::Sentinel(conn))
            }
        }
    }

    /// Subscribes to `channel`: a classic subscription on the one server
    /// (or the primary the sentinels name); in a Redis Cluster, a sharded
    /// one (`SSUBSCRIBE`), held by the node of the channel's slot. What
    /// arrives comes out of the [`Subscription`]; when it is lost (a node
    /// gone, the slot moved), the listener subscribes again.
    pub(super) async fn subscribe(&self, channel: &str) -> redis::RedisResult<Subscription> {
        match self {
            Target::Single(client) => {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(channel).await?;
                Ok(Subscription::Single(Box::new(pubsub)))
            }
            // On the primary the sentinels name now; when it fails, the
            // subscription ends, and the next one asks them again.
            Target::Sentinel(sentinels) => {
                let mut pubsub = sentinels.primary().await?.get_async_pubsub().await?;
                pubsub.subscribe(channel).await?;
                Ok(Subscription::Single(Box::new(pubsub)))
            }
            Target::Cluster { seeds, .. } => {
                let (tx, rx) = tokio::sync::mpsc::channel(PUSHED);
                let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
                let held = Arc::clone(&queued);
                let pushed = move |info: redis::PushInfo| -> Result<(), ()> {
                    let heard = match info.kind {
                        redis::PushKind::SMessage => match info.data.into_iter().last() {
                            Some(Value::BulkString(payload)) => Heard::Message(payload),
                            _ => return Ok(()),
                        },
                        redis::PushKind::Disconnection | redis::PushKind::SUnsubscribe => {
                            Heard::Lost
                        }
                        _ => return Ok(()),
                    };
                    // Bounded in messages and in bytes: a listener that falls
                    // this far behind loses messages, as its links would on
                    // a lost subscription (the other ends learn it from the
                    // silence).
                    let bytes = match &heard {
                        Heard::Message(payload) => payload.len(),
                        Heard::Lost => 0,
                    };
                    let before = held.fetch_add(bytes, Relaxed);
                    if before + bytes > PUSHED_BYTES || tx.try_send(heard).is_err() {
                        held.fetch_sub(bytes, Relaxed);
                        tracing::debug!("a message between instances dropped: too much waiting");
                    }
                    Ok(())
                };
                let client = cluster_builder(seeds.clone())
                    .use_protocol(redis::ProtocolVersion::RESP3)
                    .push_sender(pushed)
                    .build()?;
                let mut conn = client.get_async_connection().await?;
                conn.ssubscribe(channel).await?;
                Ok(Subscription::Cluster {
                    _conn: conn,
                    rx,
                    queued,
                })
            }
        }
    }

    /// `PUBLISH` on the one server; `SPUBLISH` in a Redis Cluster (the
    /// sharded channel's node, where its subscriber is). Either answers
    /// how many subscribers received the message.
    pub(super) fn publish(&self, channel: &str, message: Vec<u8>) -> Cmd {
        let mut cmd = redis::cmd(if self.is_cluster() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        });
        cmd.arg(channel).arg(message);
        cmd
    }
}

/// Messages of a cluster subscription waiting for their listener, at most.
const PUSHED: usize = 4096;
/// Bytes of those messages, at most (a message may carry a relayed
/// envelope as large as `max_message_bytes`).
const PUSHED_BYTES: usize = 64 << 20;

/// What a sharded subscription hears.
pub(super) enum Heard {
    /// A message's payload.
    Message(Vec<u8>),
    /// The subscription was lost (a disconnection, or its slot moved): it
    /// is made again, but what was published meanwhile is gone.
    Lost,
}

/// A subscription to one channel (see [`Target::subscribe`]).
pub(super) enum Subscription {
    /// A classic subscription on one server: when its messages end, it is
    /// lost.
    Single(Box<redis::aio::PubSub>),
    /// A sharded subscription of a cluster connection (kept open while it
    /// is), and what it hears.
    Cluster {
        _conn: ClusterConnection,
        rx: tokio::sync::mpsc::Receiver<Heard>,
        /// Bytes of the messages in `rx`: the listener takes each off as it
        /// takes the message.
        queued: Arc<std::sync::atomic::AtomicUsize>,
    },
}

/// A cluster client for `nodes`, with the store's timeouts.
fn cluster_builder(nodes: Vec<redis::ConnectionInfo>) -> redis::cluster::ClusterClientBuilder {
    redis::cluster::ClusterClientBuilder::new(nodes)
        .connection_timeout(IO_TIMEOUT)
        .response_timeout(IO_TIMEOUT)
        .retries(2)
}

fn invalid(why: &'static str) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, why))
}

fn invalid_io(why: &'static str) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, why))
}

/// `redis+sentinel://[user:password@]host:port[,host:port…]/service[/db]`
/// (what follows the scheme, in `rest`): the sentinels' addresses, the
/// service name they watch the primary under, and the primary's database
/// and credentials (the sentinels themselves are asked without).
fn sentinel(rest: &str) -> Result<Target, redis::RedisError> {
    let (auth, rest) = match rest.rsplit_once('@') {
        Some((auth, rest)) => (Some(auth), rest),
        None => (None, rest),
    };
    let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut path = path.split('/').filter(|p| !p.is_empty());
    let service = path.next().ok_or_else(|| {
        invalid("a Sentinel URL names the primary's service: redis+sentinel://host:26379/name")
    })?;
    let db = match path.next() {
        Some(db) => db
            .parse::<i64>()
            .map_err(|_| invalid("the database after the service name is a number"))?,
        None => 0,
    };
    if path.next().is_some() {
        return Err(invalid("a Sentinel URL's path is /service or /service/db"));
    }
    let nodes = hosts
        .split(',')
        .map(str::trim)
        .map(|host| {
            if host.is_empty() {
                return Err(invalid("an empty host in the list of sentinels"));
            }
            format!("redis://{host}").as_str().into_connection_info()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut primary = redis::RedisConnectionInfo::default().set_db(db);
    if let Some(auth) = auth {
        let (user, password) = auth.split_once(':').unwrap_or((auth, ""));
        if !user.is_empty() {
            primary = primary.set_username(user);
        }
        if !password.is_empty() {
            primary = primary.set_password(password);
        }
    }
    let node =
        redis::sentinel::SentinelNodeConnectionInfo::default().set_redis_connection_info(primary);
    let client = redis::sentinel::SentinelClient::build(
        nodes,
        service.to_owned(),
        Some(node),
        redis::sentinel::SentinelServerType::Master,
    )?;
    Ok(Target::Sentinel(Arc::new(Sentinels {
        client: tokio::sync::Mutex::new(client),
    })))
}

/// A connection to the primary the sentinels name: made when first needed,
/// and dropped when a command fails as a failover makes it fail (the
/// primary unreachable, or now a read-only replica), so that the next
/// command asks the sentinels again. The command that failed fails: the
/// store's writer counts its records lost, as when Redis is away.
pub(super) struct FollowedPrimary {
    sentinels: Arc<Sentinels>,
    current: std::sync::Mutex<Option<MultiplexedConnection>>,
}

impl FollowedPrimary {
    async fn connection(&self) -> redis::RedisResult<MultiplexedConnection> {
        if let Some(conn) = self.lock().clone() {
            return Ok(conn);
        }
        let client = self.sentinels.primary().await?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(IO_TIMEOUT))
            .set_response_timeout(Some(IO_TIMEOUT));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        *self.lock() = Some(conn.clone());
        Ok(conn)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<MultiplexedConnection>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A command failed with `e`: if a failover may be why, the next one
    /// connects to whichever primary the sentinels name then.
    fn failed(&self, e: &redis::RedisError) {
        let moved = e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_timeout()
            || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly);
        if moved {
            *self.lock() = None;
        }
    }
}

/// A connection to the store's Redis: cheap to clone (clones share it).
#[derive(Clone)]
pub(super) enum Conn {
    /// To one server.
    Single(ConnectionManager),
    /// To a Redis Cluster: each command goes to the node that holds its
    /// keys' slot (`MOVED` and `ASK` followed); and which node holds which
    /// slots, as the cluster said last (see [`Conn::slot_nodes`]).
    Cluster(
        ClusterConnection,
        Arc<std::sync::Mutex<Option<Arc<SlotNodes>>>>,
    ),
    /// To the primary Redis Sentinel names, followed across failovers.
    Sentinel(Arc<FollowedPrimary>),
}

impl Conn {
    /// Whether it is a Redis Cluster's.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(..))
    }

    /// Which node holds which slots (`CLUSTER SLOTS`), asked once and kept
    /// until [`forget_slots`](Self::forget_slots); `None` when not a cluster.
    pub(super) async fn slot_nodes(&mut self) -> redis::RedisResult<Option<Arc<SlotNodes>>> {
        let Conn::Cluster(conn, known) = self else {
            return Ok(None);
        };
        if let Some(nodes) = lock(known).clone() {
            return Ok(Some(nodes));
        }
        let reply: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await?;
        let nodes = Arc::new(SlotNodes::parse(&reply).ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Parse, "an unexpected CLUSTER SLOTS reply"))
        })?);
        *lock(known) = Some(Arc::clone(&nodes));
        Ok(Some(nodes))
    }

    /// Slots may have moved: the next [`slot_nodes`](Self::slot_nodes) asks.
    pub(super) fn forget_slots(&self) {
        if let Conn::Cluster(_, known) = self {
            *lock(known) = None;
        }
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which node of a Redis Cluster holds which slots: ranges of slots, each
/// with the index of its primary among the nodes.
#[derive(Debug)]
pub(super) struct SlotNodes {
    ranges: Vec<(u16, u16, usize)>,
}

impl SlotNodes {
    /// From a `CLUSTER SLOTS` reply: `[[start, end, [ip, port, …], …], …]`.
    fn parse(reply: &Value) -> Option<SlotNodes> {
        let Value::Array(entries) = reply else {
            return None;
        };
        let mut names: Vec<(Vec<u8>, i64)> = Vec::new();
        let mut ranges = Vec::with_capacity(entries.len());
        for entry in entries {
            let Value::Array(fields) = entry else {
                return None;
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(primary))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return None;
            };
            let (Some(Value::BulkString(ip)), Some(Value::Int(port))) =
                (primary.first(), primary.get(1))
            else {
                return None;
            };
            let name = (ip.clone(), *port);
            let node = match names.iter().position(|n| *n == name) {
                Some(node) => node,
                None => {
                    names.push(name);
                    names.len() - 1
                }
            };
            ranges.push((u16::try_from(*start).ok()?, u16::try_from(*end).ok()?, node));
        }
        Some(SlotNodes { ranges })
    }

    /// The node that holds `slot`, if the cluster said.
    pub(super) fn node(&self, slot: u16) -> Option<usize> {
        self.ranges
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, node)| *node)
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn, _) => conn.req_packed_command(cmd),
            Conn::Sentinel(primary) => Box::pin(async move {
                let mut conn = primary.connection().await?;
                let answer = conn.req_packed_command(cmd).await;
                if let Err(e) = &answer {
                    primary.failed(e);
                }
                answer
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            Conn::Cluster(conn, _) => conn.req_packed_commands(cmd, offset, count),
            Conn::Sentinel(primary) => Box::pin(async move {
                let mut conn = primary.connection().await?;
                let answer = conn.req_packed_commands(cmd, offset, count).await;
                if let Err(e) = &answer {
                    primary.failed(e);
                }
                answer
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn, _) => conn.get_db(),
            Conn::Sentinel(primary) => primary.lock().as_ref().map_or(0, |c| c.get_db()),
        }
    }
}

/// The hash slot of `key` in a Redis Cluster: CRC16 (XMODEM) of its hash
/// tag (the text between its first `{` and the next `}`, when not empty)
/// or of the whole key, modulo 16384.
pub(super) fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % 16384
}

/// CRC16/XMODEM (polynomial 0x1021, initial value 0), as Redis Cluster
/// computes it.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_clusters() {
        // Redis Cluster's specification: "123456789" has CRC16 0x31C3.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"123456789"), 12739);
        // Hash tags: only what is inside the first `{…}` counts.
        assert_eq!(slot(b"haip:s:{abc}"), slot(b"abc"));
        assert_eq!(slot(b"haip:s:{abc}:w"), slot(b"haip:s:{abc}:c"));
        assert_eq!(slot(b"x{}y"), crc16(b"x{}y") % 16384);
        assert_ne!(slot(b"{}abc"), slot(b"abc"), "an empty tag is no tag");
        assert_eq!(slot(b"a{b}{c}"), slot(b"b"));
        assert_eq!(slot(b"a{b"), crc16(b"a{b") % 16384);
    }

    #[test]
    fn cluster_slots_replies_say_which_node_holds_a_slot() {
        let node = |ip: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(ip.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range =
            |start, end, primary| Value::Array(vec![Value::Int(start), Value::Int(end), primary]);
        let reply = Value::Array(vec![
            range(0, 5460, node("127.0.0.1", 7000)),
            range(5461, 10922, node("127.0.0.1", 7001)),
            range(10923, 16000, node("127.0.0.1", 7002)),
            range(16001, 16383, node("127.0.0.1", 7000)),
        ]);
        let nodes = SlotNodes::parse(&reply).unwrap();
        assert_eq!(nodes.node(0), Some(0));
        assert_eq!(nodes.node(5461), Some(1));
        assert_eq!(nodes.node(16000), Some(2));
        assert_eq!(nodes.node(16383), Some(0));
        assert!(SlotNodes::parse(&Value::Array(vec![Value::Int(1)])).is_none());
        assert!(SlotNodes::parse(&Value::Nil).is_none());
    }

    #[test]
    fn urls_name_one_server_a_cluster_or_sentinels() {
        assert!(
            !Target::parse("redis://127.0.0.1:6379")
                .unwrap()
                .is_cluster()
        );
        assert!(
            !Target::parse("redis://127.0.0.1:6379/2")
                .unwrap()
                .is_cluster()
        );
        for cluster in [
            "redis://127.0.0.1:7000,redis://127.0.0.1:7001",
            "redis://127.0.0.1:7000, 127.0.0.1:7001",
            "redis+cluster://127.0.0.1:7000",
            "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002",
        ] {
            let target = Target::parse(cluster).unwrap();
            assert!(target.is_cluster(), "{cluster}");
        }
        let Target::Cluster { seeds, .. } =
            Target::parse("redis+cluster://127.0.0.1:7000,127.0.0.1:7001").unwrap()
        else {
            unreachable!()
        };
        assert_eq!(seeds.len(), 2);
        for sentinel in [
            "redis+sentinel://127.0.0.1:26379/haip",
            "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381/haip",
            "redis+sentinel://:secret@127.0.0.1:26379/haip/2",
        ] {
            let target = Target::parse(sentinel).unwrap();
            assert!(target.is_sentinel() && !target.is_cluster(), "{sentinel}");
        }
        for bad in [
            "not a url",
            "redis://127.0.0.1:7000,",
            "redis://127.0.0.1:7000,nonsense://x",
            "redis+sentinel://127.0.0.1:26379",
            "redis+sentinel://127.0.0.1:26379/",
            "redis+sentinel://127.0.0.1:26379,/haip",
            "redis+sentinel://127.0.0.1:26379/haip/zero",
            "redis+sentinel://127.0.0.1:26379/haip/0/more",
            "rediss+sentinel://127.0.0.1:26379/haip",
        ] {
            let err = Target::parse(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad} refused"));
            assert!(!err.to_string().is_empty(), "{bad}");
        }
    }
}
