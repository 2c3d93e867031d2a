//! Two-frame binary on WebSocket (docs/protocol.md §13): an envelope with `bin_len`
//! and no `payload.data` is handled once the binary message that follows it
//! has arrived with exactly that many bytes.

use serde_json::json;

use super::{Control, Session};
use crate::protocol::{ErrorCode, Inbound, is_binary_envelope};

/// An envelope waiting for its binary frame.
pub(super) struct Awaited {
    inbound: Inbound,
    text_len: usize,
    expected: u64,
    first: bool,
}

impl Session {
    /// An envelope announced a binary frame of `bin_len` bytes: wait for it,
    /// unless it is larger than any message may be (`MESSAGE_TOO_LARGE`, 1009).
    pub(super) fn await_binary(
        &mut self,
        inbound: Inbound,
        text_len: usize,
        bin_len: u64,
        first: bool,
    ) -> Control {
        if bin_len > self.config().max_message_bytes as u64 {
            return self.handle_oversized_message();
        }
        self.awaited = Some(Box::new(Awaited {
            inbound,
            text_len,
            expected: bin_len,
            first,
        }));
        let now = self.shared.clock.now();
        self.arm_binary(now);
        Control::Continue
    }

    /// Whether an envelope is waiting for its binary frame (for 10 s of
    /// connected time: then [`Session::handle_timeout`] reports it missing).
    #[cfg(test)]
    pub(crate) fn is_awaiting_binary(&self) -> bool {
        self.awaited.is_some()
    }

    /// A binary WebSocket message: the body an envelope waits for, else an
    /// envelope sent as binary (a JSON object with a string `type`), else
    /// data with no consumer (no application hook), ignored.
    pub(crate) fn handle_binary(&mut self, bytes: &[u8]) -> Control {
        let Some(awaited) = self.awaited.take() else {
            if is_binary_envelope(bytes)
                && let Ok(text) = std::str::from_utf8(bytes)
            {
                return self.handle_text(text);
            }
            return Control::Continue;
        };
        let actual = bytes.len() as u64;
        if actual == awaited.expected {
            // The body has no consumer yet: the envelope is handled without it.
            let Awaited {
                inbound,
                text_len,
                first,
                ..
            } = *awaited;
            return self.accept(inbound, (text_len as u64).saturating_add(actual), first);
        }
        self.error(
            ErrorCode::BINARY_FRAME_ERROR,
            "Binary frame does not match its envelope",
            awaited.inbound.id.as_deref(),
            Some(json!({ "expected": awaited.expected, "actual": actual })),
        );
        Control::Continue
    }

    /// The binary frame an envelope waits for did not come (a text message
    /// came first, or the wait ran out): `BINARY_FRAME_ERROR`, and the
    /// envelope is discarded. Nothing happens when none is waiting.
    pub(crate) fn handle_missing_binary(&mut self) {
        if let Some(awaited) = self.awaited.take() {
            self.error(
                ErrorCode::BINARY_FRAME_ERROR,
                "Binary frame does not match its envelope",
                awaited.inbound.id.as_deref(),
                Some(json!({ "reason": "missing binary frame" })),
            );
        }
    }
}
