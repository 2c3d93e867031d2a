//! # Several instances
//!
//! With the `redis` feature (on in the examples), instances that share a
//! Redis server share their sessions: a client can come back to any of
//! them. Set `HAIP_REDIS_URL` (or [`ServerBuilder::redis`]) and give each
//! instance its own `HAIP_INSTANCE_ID` ([`ServerBuilder::instance_id`];
//! generated when unset).
//!
//! ```no_run
//! # async fn run() -> Result<(), haip::Error> {
//! haip::Server::builder()
//!     .annotated_tools()
//!     .redis("redis://127.0.0.1:6379")
//!     .instance_id("a")
//!     .build()?
//!     .run()
//!     .await
//! # }
//! ```
//!
//! ```sh
//! redis-server --port 6379 &
//! HAIP_REDIS_URL=redis://127.0.0.1:6379 HAIP_INSTANCE_ID=a HAIP_ADDR=127.0.0.1:8081 cargo run --example quickstart &
//! HAIP_REDIS_URL=redis://127.0.0.1:6379 HAIP_INSTANCE_ID=b HAIP_ADDR=127.0.0.1:8082 cargo run --example quickstart &
//! curl -s http://127.0.0.1:8081/health     # "instance": "a"
//! curl -s http://127.0.0.1:8082/stats      # "cluster": {"reachable": true, "instances": ["a","b"], "totals": {...}}
//! ```
//!
//! `examples/chaos` kills, restarts and hands over such instances while
//! clients call tools, then checks that every call still ended exactly once
//! (`bash bench/chaos.sh`; the results are in `RELIABILITY.md`).
//!
//! ## What is shared
//!
//! Every instance records what resuming a session takes (its replay window,
//! subject, inbound `seq` and the calls it owes a `TOOL_DONE`) in Redis, and
//! holds a lease it refreshes every 2 s. MCP task records live there too
//! ([MCP both ways](super::mcp_both_ways#tasks)).
//!
//! **A client comes back to another instance.** If the instance that runs
//! its session is alive, the one it reached relays it there (through Redis
//! pub/sub): the calls go on where they run, their updates and `TOOL_DONE`
//! reach the client through the instance it is on, and a `TOOL_CANCEL` sent
//! there stops them. A resumption refused where the session runs leaves the
//! client on the fresh session it was greeted with, as on one instance. A
//! relayed connection counts once in `/stats`' `cluster.totals`, where its
//! client is (the instance running its session shows it as
//! `cluster.relayedConnections`).
//!
//! **An instance dies.** Its clients resume on any other with the usual
//! `HAI {session, last_rx_seq}`, at once: the resumption is held (the
//! connection kept alive with pings) until the dead instance's lease
//! expires (within 6 s), then the missed envelopes are replayed, and each
//! call that died with it ends with `TOOL_DONE ERROR INTERNAL_ERROR`
//! "instance lost", so every call still ends exactly once.
//!
//! **An instance is cut off from Redis for longer than its lease** (6 s)
//! and lives on. Another instance may then restore one of its sessions for
//! a client that came back there. Restoring makes that instance the
//! session's owner in Redis, which from then on refuses whatever the first
//! instance still records of it. Since a client sees an envelope only once
//! it is recorded, nothing the stale copy makes reaches anyone: it ends
//! (its calls cancelled, its connection closed with 1011 `session moved to
//! another instance`), and its client, resuming anywhere, reaches the one
//! copy that runs. An instance whose lease refresh failed tries again every
//! 250 ms, so a short Redis outage does not let the lease lapse.
//!
//! **Upstream POSTs** (SSE and HTTP streaming) that reach an instance
//! without the stream they are for are forwarded to the one that has it,
//! with the same targeting (the named session, else the subject's only open
//! stream, across the instances).
//!
//! ## Routing
//!
//! Sticky routing is still the cheaper path, since nothing is relayed. With
//! nginx in front (WebSocket, SSE and HTTP streaming need buffering off and
//! long timeouts):
//!
//! ```nginx
//! upstream haip { ip_hash; server 127.0.0.1:8081; server 127.0.0.1:8082; }
//! server {
//!     listen 8080;
//!     location / {
//!         proxy_pass http://haip;
//!         proxy_http_version 1.1;
//!         proxy_set_header Upgrade $http_upgrade;
//!         proxy_set_header Connection $http_connection;
//!         proxy_buffering off;
//!         proxy_read_timeout 1h;
//!     }
//! }
//! ```
//!
//! **MCP sessions stay on their instance.** By default a `/mcp` client that
//! sends `initialize` (MCP 2025-11-25 and before) gets an MCP session held
//! by the instance that answered it; Redis does not share MCP sessions (it
//! shares HAIP sessions and MCP tasks). The load balancer must keep such a
//! client on one instance: route on the `Mcp-Session-Id` header (or the
//! client's address, as above); a request that reaches another instance is
//! answered `404` and the client opens a new session. MCP 2026-07-28
//! requests have no sessions and need no stickiness, nor does `/mcp` with
//! [`mcp_sessions(false)`](crate::ServerBuilder::mcp_sessions) (older
//! clients then cannot be asked questions). Instances answering the same
//! MCP clients share the
//! [`request_state_key`](crate::ServerBuilder::request_state_key).
//!
//! ## When Redis goes away
//!
//! Redis unavailable at start stops the server with an error naming the
//! URL. Lost while running, it costs only what crosses instances: sessions
//! keep working on their instance, resuming on another answers
//! `RESUME_FAILED` (`session store unavailable`), a forwarded upstream POST
//! answers `503` with the reason, relayed connections close (1011,
//! `instance lost`) so their clients resume again, `/stats` shows
//! `cluster.reachable: false`, and everything recovers when Redis is back.
//! Records made meanwhile are lost: a session that lost some is marked once
//! Redis is back, and while its instance lives it is relayed there as
//! before, but it is never restored elsewhere from what is missing
//! (`RESUME_FAILED` `records lost while the session store was away`).
//!
//! ## A Redis Cluster
//!
//! Name a Redis Cluster by its seed nodes, several URLs separated by commas
//! (or one `redis+cluster://` URL whose hosts are separated by commas):
//!
//! ```sh
//! HAIP_REDIS_URL=redis://10.0.0.1:7000,redis://10.0.0.2:7000,redis://10.0.0.3:7000
//! HAIP_REDIS_URL=redis+cluster://10.0.0.1:7000,10.0.0.2:7000
//! ```
//!
//! haip finds the other nodes itself, and follows slots as they move
//! (`MOVED` and `ASK`). Each session's keys carry its id as their hash tag
//! (`haip:s:{session}`, `haip:s:{session}:w`, …), so one node holds all of
//! them, and each batch of records goes out split by slot: one script per
//! slot, all at once, one round trip per node. Instances reach each other
//! through sharded pub/sub (`SSUBSCRIBE`, Redis 7 or later): each
//! instance's channel lives on the node of its slot, and a message costs
//! that node alone, not the whole cluster. What a session needs survives a
//! node's loss only if the node has a replica that takes over; a primary
//! lost before it replicated what it acknowledged is the "records lost"
//! case above.
//!
//! The keys that are not one session's (leases, the set of instances, the
//! open streams, MCP task records and their callers' shares) share the hash
//! tag `{haip}`, so one node holds them all: a task's script reads its
//! owner's lease and its caller's share in the same atomic step, as on one
//! server. Sessions, which carry most of the traffic, spread over the
//! nodes; tasks do not, yet.
//!
//! ## Redis Sentinel
//!
//! Name a primary that Redis Sentinel watches by its sentinels and the
//! name they watch it under (and, if it needs them, its credentials and
//! database):
//!
//! ```sh
//! HAIP_REDIS_URL=redis+sentinel://10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/haip
//! HAIP_REDIS_URL=redis+sentinel://:password@10.0.0.1:26379,10.0.0.2:26379/haip/2
//! ```
//!
//! haip asks the sentinels for the primary (and checks its `ROLE`). When a
//! command fails as a failover makes it fail (the primary unreachable, or
//! demoted to a read-only replica), the next one asks them again and
//! connects to the primary they name then; the subscription to the other
//! instances' messages moves with it. While there is no primary, it is as
//! when Redis is away (above): sessions go on, records made meanwhile are
//! lost and their sessions marked. What the old primary acknowledged but
//! had not replicated when it died is lost with it, unseen: replication is
//! asynchronous.
//!
//! Unless you ask haip to wait for it: with
//! [`ServerBuilder::redis_wait`] (or `HAIP_REDIS_WAIT=1` for one replica,
//! `HAIP_REDIS_WAIT=1,250` to wait up to 250 ms rather than 100), each
//! batch of records is followed by Redis `WAIT`, and a batch that fewer
//! replicas acknowledged in time counts as lost: its sessions are marked,
//! and never restored on another instance from records a failover might
//! have cut short (`/stats` counts them, `cluster.unreplicatedRecords`). On
//! a Redis Cluster, `WAIT` asks every primary's replicas, and the least of
//! them counts. It costs each batch a round trip to the replica and back;
//! `BENCHMARKS.md` measures it (the **wait** rows).
//!
//! ## Tasks that outlive their instance
//!
//! An MCP task runs on the instance that started it. When that instance
//! dies, a task of any tool fails with "instance lost", once; a task of a
//! tool marked idempotent (`#[haip_tool(idempotent)]`, or
//! `ToolAnnotations::idempotent`), which does no harm when it runs twice,
//! runs again instead:
//!
//! - Every instance looks, each second, for such tasks whose instance's
//!   lease is gone, and takes each over in one atomic script, so exactly one
//!   instance does; it runs the tool again from the start, with the same
//!   arguments, for the same caller.
//! - The answers its client gave to the first run's questions are kept
//!   with the task (64 at most): a run again that asks the same question,
//!   under the same key, gets its answer at once, as an MRTR retry does.
//! - `tasks/get` shows it `working`, its status message saying which
//!   attempt it is on ("running again (attempt 2 of 3)"), and the listen
//!   streams on the instance that took it over hear of it. It ends once,
//!   with that run's end.
//! - [`Limits::task_attempts`] (default 3) bounds the runs: once that many
//!   instances died running it, it fails as lost, saying it was the last of
//!   its attempts. 1 turns running again off.
//!
//! An instance that was only cut off from Redis for longer than its lease
//! may still be running the task when another takes it over: both runs go
//! on until it next refreshes its tasks (within 10 s) and stops its own,
//! whose end Redis then refuses. The tool being idempotent is what makes
//! that harmless.
//!
//! What sharing costs (resumption across instances, Redis memory per
//! detached session) is measured in `BENCHMARKS.md` (`bash bench/cluster.sh`).
//!
//! [`ServerBuilder::redis`]: crate::ServerBuilder::redis
//! [`ServerBuilder::redis_wait`]: crate::ServerBuilder::redis_wait
//! [`Limits::task_attempts`]: crate::Limits::task_attempts
//! [`ServerBuilder::instance_id`]: crate::ServerBuilder::instance_id
//!
//! ---
//!
//! Previous: [Authentication](super::authentication) · Next: [Settings, limits and budgets](super::limits)
