//! The HAIP 1 wire model: envelopes, event types, channels and error codes.
//!
//! This module does no I/O. It decodes inbound text leniently (real clients send
//! loosely typed envelopes) and encodes outbound envelopes strictly: every
//! envelope the server writes carries all seven required fields, a UUID v4 `id`,
//! a decimal `seq` and a millisecond `ts`.
//!
//! ```
//! use haip::protocol::{decode, EventType};
//!
//! let inbound = decode(r#"{"type":"PING","payload":{"nonce":"n-1"}}"#).unwrap();
//! assert_eq!(inbound.event, EventType::Ping);
//! assert_eq!(inbound.channel, "SYSTEM"); // the type's default channel
//! ```
//!
//! Inside haip each event's payload is typed, read leniently and written
//! strictly (the rules are in [`payload`]); of those types, [`payload`] makes
//! public the ones the client shows: the server's [`payload::Hai`] (what
//! `haip::client::Client::hai` returns) and the `action` of an answer to a
//! question ([`payload::InputAction`]).

mod annotations;
mod code;
mod envelope;
mod event;
mod inbound;
pub(crate) mod jsonrpc;
pub mod payload;

pub use annotations::{Icon, IconTheme, ToolAnnotations};
pub use code::ErrorCode;
pub(crate) use envelope::{Outgoing, Prepared, json_len, to_json_within};
pub use event::{Channel, EventType};
pub use inbound::{DecodeError, Inbound, decode};
pub(crate) use inbound::{is_binary_envelope, strict_schema_error, u64_loose};

/// The protocol version this implementation speaks (`haip_version` in `HAI`).
pub const HAIP_VERSION: &str = "1.1.2";

/// The protocol major versions this implementation accepts.
pub(crate) const ACCEPT_MAJOR: [u64; 1] = [1];

/// Milliseconds since the Unix epoch, as used in `ts`.
pub(crate) fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Formats milliseconds since the Unix epoch as ISO-8601 UTC with milliseconds,
/// e.g. `2026-01-01T00:00:12.345Z`.
pub(crate) fn iso8601_millis(millis: u64) -> String {
    let secs = millis / 1000;
    let ms = millis % 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    // Civil-from-days (proleptic Gregorian), after Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{ms:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_formats_known_instants() {
        assert_eq!(iso8601_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            iso8601_millis(1_767_225_612_345),
            "2026-01-01T00:00:12.345Z"
        );
        assert_eq!(iso8601_millis(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(
            iso8601_millis(1_796_169_599_999),
            "2026-12-01T23:59:59.999Z"
        );
        assert_eq!(
            iso8601_millis(4_107_542_400_000),
            "2100-03-01T00:00:00.000Z"
        );
    }
}
