//! Per-caller shares of shared pools: who a request is counted against, and
//! a counter that gives each caller at most its share of a pool.
//!
//! Every pool the server holds for all its callers (sessions, MCP requests in
//! flight, listen streams, task records) has a per-caller share, so that one
//! caller exhausts only its own: an authenticated caller is its subject; an
//! unauthenticated one is its peer address (an IPv6 peer is its /64, which one
//! host is usually given whole). An unauthenticated loopback peer is not
//! limited unless the server says so (`limit_loopback_peers`): with
//! authentication off, a local reverse proxy or the developer's own tools
//! speak for everyone, and no share could tell them apart.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use super::Caller;

/// Who a shared pool counts a request against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum CallerKey {
    /// An authenticated caller: its subject.
    Subject(Arc<str>),
    /// An unauthenticated caller: its peer address (IPv6: the /64).
    Peer(IpAddr),
    /// Not limited per caller (an unauthenticated loopback peer, or a caller
    /// whose peer is not known, such as an in-memory test connection).
    Unlimited,
    /// An unauthenticated caller whose address the host application did not
    /// give (`haip::PeerAddr`): all such callers share one share.
    Unknown,
}

impl CallerKey {
    /// The key of a request from `peer` by `caller` (`None`: authentication
    /// is off). `limit_loopback`: count unauthenticated loopback peers too.
    pub(crate) fn of(
        caller: Option<&Caller>,
        peer: Option<IpAddr>,
        limit_loopback: bool,
    ) -> CallerKey {
        if let Some(caller) = caller {
            return CallerKey::Subject(Arc::from(caller.subject()));
        }
        match peer.map(|ip| ip.to_canonical()) {
            Some(ip) if ip.is_loopback() && !limit_loopback => CallerKey::Unlimited,
            Some(IpAddr::V6(v6)) => {
                let mut octets = v6.octets();
                octets[8..].fill(0);
                CallerKey::Peer(IpAddr::from(octets))
            }
            Some(ip) => CallerKey::Peer(ip),
            None => CallerKey::Unlimited,
        }
    }

    /// How the key is named in a refusal: "subject \"alice\"", "peer
    /// 203.0.113.7".
    pub(crate) fn describe(&self) -> String {
        match self {
            CallerKey::Subject(s) => format!("subject {s:?}"),
            CallerKey::Peer(IpAddr::V6(v6)) => format!("peer {v6}/64"),
            CallerKey::Peer(ip) => format!("peer {ip}"),
            CallerKey::Unlimited => "this caller".to_owned(),
            CallerKey::Unknown => {
                "callers of unknown address (the host application gives no haip::PeerAddr)"
                    .to_owned()
            }
        }
    }
}

/// A pool's per-caller counts: each caller may hold at most `per_caller` of
/// it at once. Entries exist only while their caller holds something, so the
/// table is never larger than what the pool itself holds.
#[derive(Debug)]
pub(crate) struct Shares {
    per_caller: usize,
    held: Mutex<HashMap<CallerKey, usize>>,
}

/// A caller already holds its whole share of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OverShare {
    /// The caller's share.
    pub(crate) share: usize,
}

impl Shares {
    /// A pool whose callers may each hold at most `per_caller` of it.
    pub(crate) fn new(per_caller: usize) -> Arc<Shares> {
        Arc::new(Shares {
            per_caller,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// Counts one more for `key`, if its share has room; the guard gives it
    /// back. [`CallerKey::Unlimited`] always has room.
    pub(crate) fn take(self: &Arc<Self>, key: &CallerKey) -> Result<ShareGuard, OverShare> {
        self.take_n(key, 1)
    }

    /// Counts `n` more for `key` (bytes, say), if its share has room.
    pub(crate) fn take_n(
        self: &Arc<Self>,
        key: &CallerKey,
        n: usize,
    ) -> Result<ShareGuard, OverShare> {
        if *key == CallerKey::Unlimited || n == 0 {
            return Ok(ShareGuard { entry: None });
        }
        let mut held = self.lock();
        let count = held.entry(key.clone()).or_insert(0);
        match count.checked_add(n) {
            Some(total) if total <= self.per_caller => {
                *count = total;
                Ok(ShareGuard {
                    entry: Some((Arc::clone(self), key.clone(), n)),
                })
            }
            _ => {
                if *count == 0 {
                    held.remove(key);
                }
                Err(OverShare {
                    share: self.per_caller,
                })
            }
        }
    }

    /// What `key` holds now.
    #[cfg(test)]
    pub(crate) fn held_by(&self, key: &CallerKey) -> usize {
        self.lock().get(key).copied().unwrap_or(0)
    }

    fn give_back(&self, key: &CallerKey, n: usize) {
        let mut held = self.lock();
        if let Some(count) = held.get_mut(key) {
            *count = count.saturating_sub(n);
            if *count == 0 {
                held.remove(key);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CallerKey, usize>> {
        // Counts are whole values; a panic elsewhere cannot leave one half-written.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What one caller holds of a pool, given back when dropped.
#[derive(Debug)]
#[must_use = "the share is given back when the guard drops"]
pub(crate) struct ShareGuard {
    entry: Option<(Arc<Shares>, CallerKey, usize)>,
}

impl Drop for ShareGuard {
    fn drop(&mut self) {
        if let Some((shares, key, n)) = self.entry.take() {
            shares.give_back(&key, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_subjects_or_peers_and_ipv6_peers_are_their_64() {
        let alice = Caller::new("alice");
        let far: IpAddr = "203.0.113.7".parse().unwrap();
        assert_eq!(
            CallerKey::of(Some(&alice), Some(far), false),
            CallerKey::Subject(Arc::from("alice"))
        );
        assert_eq!(CallerKey::of(None, Some(far), false), CallerKey::Peer(far));
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(
            CallerKey::of(None, Some(a), false),
            CallerKey::of(None, Some(b), false)
        );
        assert_ne!(
            CallerKey::of(None, Some(a), false),
            CallerKey::of(None, Some(c), false)
        );
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(
            CallerKey::of(None, Some(local), false),
            CallerKey::Unlimited
        );
        assert_eq!(
            CallerKey::of(None, Some(mapped), false),
            CallerKey::Unlimited
        );
        assert_eq!(
            CallerKey::of(None, Some(local), true),
            CallerKey::Peer(local)
        );
        assert_eq!(CallerKey::of(None, None, true), CallerKey::Unlimited);
    }

    #[test]
    fn each_caller_holds_at_most_its_share_and_entries_go_with_the_last_guard() {
        let shares = Shares::new(2);
        let alice = CallerKey::Subject(Arc::from("alice"));
        let bob = CallerKey::Subject(Arc::from("bob"));
        let a1 = shares.take(&alice).unwrap();
        let a2 = shares.take(&alice).unwrap();
        assert_eq!(shares.take(&alice).unwrap_err(), OverShare { share: 2 });
        let b1 = shares.take(&bob).expect("bob has his own share");
        drop(a1);
        let a3 = shares.take(&alice).expect("room again");
        assert_eq!(shares.held_by(&alice), 2);
        let free: Vec<_> = (0..10)
            .map(|_| shares.take(&CallerKey::Unlimited).unwrap())
            .collect();
        drop((a2, a3, b1, free));
        assert!(shares.lock().is_empty());
        assert!(
            shares.take_n(&alice, 3).is_err(),
            "more than the share at once"
        );
        assert!(shares.lock().is_empty(), "a refusal leaves no entry");
        let bytes = shares.take_n(&alice, 2).unwrap();
        assert_eq!(shares.held_by(&alice), 2);
        drop(bytes);
        assert_eq!(shares.held_by(&alice), 0);
    }
}
