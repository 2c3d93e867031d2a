//! Transports: thin adapters between a connection and a session. The loop they
//! share is in `driver`; each adds only its framing.

pub(crate) mod body;
pub(crate) mod driver;
pub(crate) mod stream;
pub(crate) mod ws;
