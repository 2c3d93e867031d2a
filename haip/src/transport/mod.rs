//! Transports: framing only. Each turns a connection into inbound units and a
//! writer for outbound frames (`frame`); the server's driver runs the session
//! over them.

pub(crate) mod body;
pub(crate) mod frame;
pub(crate) mod queue;
pub(crate) mod stream;
pub(crate) mod ws;
