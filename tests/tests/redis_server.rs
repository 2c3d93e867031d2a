//! The test support for a real Redis server (`support/redis.rs`) does what
//! tests will lean on: it starts a server that answers, loses it on `stop`
//! (connections refused), and brings an empty one back on the same port with
//! `restart`.

use crate::redis_support;

use redis_support::RedisServer;

#[test]
fn a_real_redis_starts_stops_and_restarts_on_its_port() {
    let mut redis = RedisServer::start();
    let port = redis.port();
    assert_eq!(redis.url(), format!("redis://127.0.0.1:{port}"));
    redis.ping().expect("a started Redis answers PING");
    assert_eq!(redis.command(&["SET", "greeting", "hello"]).unwrap(), "+OK");
    assert_eq!(redis.get("greeting").unwrap().as_deref(), Some("hello"));

    redis.stop();
    assert!(!redis.is_running());
    let refused = redis.ping();
    assert!(refused.is_err(), "a stopped Redis answered: {refused:?}");

    redis.restart();
    assert_eq!(redis.port(), port, "restart keeps the port");
    redis.ping().expect("a restarted Redis answers PING");
    // Nothing is persisted: the restarted server starts empty.
    assert_eq!(redis.get("greeting").unwrap(), None);
}

#[test]
fn two_servers_run_side_by_side() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    assert_ne!(a.port(), b.port());
    a.command(&["SET", "k", "a"]).unwrap();
    b.command(&["SET", "k", "b"]).unwrap();
    assert_eq!(a.get("k").unwrap().as_deref(), Some("a"));
    assert_eq!(b.get("k").unwrap().as_deref(), Some("b"));
    let port = a.port();
    drop(a);
    // Dropping a server kills it.
    let gone = std::net::TcpStream::connect(("127.0.0.1", port));
    assert!(gone.is_err(), "a dropped Redis still accepts connections");
    b.ping().expect("the other one still answers");
}
