//! `requestState` as the client carries it: the state, when it expires,
//! and an HMAC-SHA-256 over both and over what it is bound to (the caller),
//! under the server's key.
//!
//! The form is `v1.<body>.<tag>`, each part URL-safe Base64 without
//! padding: `body` is the expiry (milliseconds since the Unix epoch, eight
//! bytes, big-endian) followed by the state; `tag` is the HMAC of a label,
//! the length of the bound data (eight bytes), the bound data and `body`.
//! The state is signed, not hidden: it holds the client's own answers and
//! digests, nothing of the server's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The form's version, its first part.
const VERSION: &str = "v1";
/// What the tag's input starts with: a tag is never valid for another use
/// of the same key.
const LABEL: &[u8] = b"haip requestState v1";
/// The shortest key: as long as the tag.
pub(super) const MIN_KEY_BYTES: usize = 32;
/// The expiry's bytes at the start of `body`.
const EXPIRY_BYTES: usize = 8;

type HmacSha256 = Hmac<Sha256>;

/// Seals and opens states with one key.
pub(super) struct Seal {
    key: Vec<u8>,
}

/// Why a sealed state does not open.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unsealed {
    /// Not this form, not this key's, or bound to other data.
    Invalid,
    /// Its time has passed.
    Expired,
}

impl Seal {
    /// With `key`, at least [`MIN_KEY_BYTES`] long.
    pub(super) fn new(key: &[u8]) -> Result<Seal, String> {
        if key.len() < MIN_KEY_BYTES {
            return Err(format!(
                "the key must be at least {MIN_KEY_BYTES} bytes (got {})",
                key.len()
            ));
        }
        Ok(Seal { key: key.to_vec() })
    }

    /// `payload`, bound to `bound`, good for `ttl`.
    pub(super) fn seal(&self, payload: &[u8], bound: &[u8], ttl: Duration) -> String {
        let expires = now_ms().saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let mut body = Vec::with_capacity(EXPIRY_BYTES + payload.len());
        body.extend_from_slice(&expires.to_be_bytes());
        body.extend_from_slice(payload);
        let tag = self.mac(bound, &body).finalize().into_bytes();
        format!(
            "{VERSION}.{}.{}",
            URL_SAFE_NO_PAD.encode(&body),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// The payload of `sealed`, when this key sealed it bound to `bound`
    /// and it has not expired.
    pub(super) fn open(&self, sealed: &str, bound: &[u8]) -> Result<Vec<u8>, Unsealed> {
        let mut parts = sealed.split('.');
        let (Some(VERSION), Some(body), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Unsealed::Invalid);
        };
        let body = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| Unsealed::Invalid)?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| Unsealed::Invalid)?;
        // Checked in constant time, before anything of the body is read.
        self.mac(bound, &body)
            .verify_slice(&tag)
            .map_err(|_| Unsealed::Invalid)?;
        let (expires, payload) = body
            .split_first_chunk::<EXPIRY_BYTES>()
            .ok_or(Unsealed::Invalid)?;
        if u64::from_be_bytes(*expires) <= now_ms() {
            return Err(Unsealed::Expired);
        }
        Ok(payload.to_vec())
    }

    /// The MAC over the label, `bound` (with its length) and `body`.
    fn mac(&self, bound: &[u8], body: &[u8]) -> HmacSha256 {
        // Any key length is a valid HMAC key.
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(LABEL);
        mac.update(&(bound.len() as u64).to_be_bytes());
        mac.update(bound);
        mac.update(body);
        mac
    }
}

impl Drop for Seal {
    fn drop(&mut self) {
        // The key does not outlive the server in freed memory it can name.
        self.key.iter_mut().for_each(|b| *b = 0);
    }
}

/// Now, in milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal() -> Seal {
        Seal::new(&[3u8; 32]).unwrap()
    }

    #[test]
    fn a_state_opens_with_its_key_and_bound_data_only() {
        let sealed = seal().seal(b"{\"a\":1}", b"ada", Duration::from_secs(60));
        assert!(sealed.starts_with("v1."));
        assert_eq!(seal().open(&sealed, b"ada").unwrap(), b"{\"a\":1}");
        assert_eq!(seal().open(&sealed, b"bob"), Err(Unsealed::Invalid));
        let other = Seal::new(&[4u8; 32]).unwrap();
        assert_eq!(other.open(&sealed, b"ada"), Err(Unsealed::Invalid));
    }

    #[test]
    fn anything_changed_fails() {
        let sealed = seal().seal(b"state", b"", Duration::from_secs(60));
        let mut parts: Vec<String> = sealed.split('.').map(str::to_owned).collect();
        // Another body under the same tag.
        let mut body = URL_SAFE_NO_PAD.decode(&parts[1]).unwrap();
        *body.last_mut().unwrap() ^= 1;
        parts[1] = URL_SAFE_NO_PAD.encode(&body);
        assert_eq!(seal().open(&parts.join("."), b""), Err(Unsealed::Invalid));
        for broken in [
            "",
            "v1",
            "v1..",
            "v2.AA.AA",
            "v1.!!.AA",
            &format!("{sealed}.x"),
        ] {
            assert_eq!(seal().open(broken, b""), Err(Unsealed::Invalid), "{broken}");
        }
    }

    #[test]
    fn an_expired_state_is_told_apart() {
        let sealed = seal().seal(b"state", b"", Duration::ZERO);
        assert_eq!(seal().open(&sealed, b""), Err(Unsealed::Expired));
    }

    #[test]
    fn short_keys_are_refused() {
        assert!(Seal::new(&[0u8; 31]).is_err());
    }
}
