//! The names of the session store's keys and channels in Redis (the table
//! of the module's documentation).

/// The set of instance ids that took a lease (the dead ones are dropped when
/// `/stats` finds their lease gone).
pub(super) const INSTANCES: &str = "haip:instances";

pub(super) fn session_key(id: &str) -> String {
    format!("haip:s:{id}")
}

pub(super) fn window_key(id: &str) -> String {
    format!("haip:s:{id}:w")
}

pub(super) fn calls_key(id: &str) -> String {
    format!("haip:s:{id}:c")
}

pub(super) fn claim_key(id: &str) -> String {
    format!("haip:s:{id}:claim")
}

pub(super) fn lease_key(instance: &str) -> String {
    format!("haip:i:{instance}")
}

pub(super) fn open_key(subject: Option<&str>) -> String {
    format!("haip:open:{}", subject.unwrap_or(""))
}

pub(super) fn inbox_key(instance: &str) -> String {
    format!("haip:to:{instance}")
}
