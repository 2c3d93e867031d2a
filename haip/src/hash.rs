//! Hash maps for the per-call paths: foldhash instead of std's SipHash, which
//! showed up at about 6 % of a call's instructions. foldhash is seeded per
//! process; the maps keyed by client-chosen strings (call ids, channel names,
//! run ids) are bounded per session, so a crafted collision costs little.

pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub(crate) type FastSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;
