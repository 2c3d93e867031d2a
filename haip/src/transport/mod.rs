//! Transports: thin adapters between a connection and a session.

pub(crate) mod ws;
