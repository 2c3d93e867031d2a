//! The names of the session store's keys and channels in Redis (the table
//! of the module's documentation). A session's keys carry its id as their
//! hash tag (`{…}`), so that a Redis Cluster keeps them in one slot, where
//! one script may change them together. The rest (leases, the set of
//! instances, the open streams, and the task store's keys) share the tag
//! `{haip}`: one slot, where a task's script may read a lease, and a lease
//! and the set of instances are written in one pipeline.

/// The set of instance ids that took a lease (the dead ones are dropped when
/// `/stats` finds their lease gone).
pub(super) const INSTANCES: &str = "{haip}:instances";

pub(super) fn session_key(id: &str) -> String {
    format!("haip:s:{{{id}}}")
}

pub(super) fn window_key(id: &str) -> String {
    format!("haip:s:{{{id}}}:w")
}

pub(super) fn calls_key(id: &str) -> String {
    format!("haip:s:{{{id}}}:c")
}

pub(super) fn claim_key(id: &str) -> String {
    format!("haip:s:{{{id}}}:claim")
}

pub(super) fn lease_key(instance: &str) -> String {
    format!("{{haip}}:i:{instance}")
}

pub(super) fn open_key(subject: Option<&str>) -> String {
    format!("{{haip}}:open:{}", subject.unwrap_or(""))
}

pub(super) fn inbox_key(instance: &str) -> String {
    format!("haip:to:{instance}")
}

#[cfg(test)]
mod tests {
    use super::super::conn::slot;
    use super::*;

    #[test]
    fn a_sessions_keys_share_its_slot() {
        let id = "0f0e-session";
        let keys = [
            session_key(id),
            window_key(id),
            calls_key(id),
            claim_key(id),
        ];
        assert_eq!(keys[0], "haip:s:{0f0e-session}");
        for key in &keys {
            assert_eq!(slot(key.as_bytes()), slot(id.as_bytes()), "{key}");
        }
    }
}
