//! JWT verification (docs/protocol.md §17).

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::crypto::CryptoProvider;
use jsonwebtoken::errors::{Error as JwtError, ErrorKind as JwtErrorKind};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use super::{AuthError, AuthFuture, Authenticator, Caller, IdentifyFuture, Subject};
use crate::Error;

/// Clock skew tolerated on `exp`, `nbf` and `iat`, in seconds.
const LEEWAY_SECS: f64 = 60.0;

type Claims = Map<String, Value>;

/// The shortest HS256 secret accepted, in bytes.
const MIN_HS256_SECRET: usize = 32;

/// JWT verification as docs/protocol.md §17 says.
///
/// One verification key, one algorithm: an HS256 secret
/// ([`Jwt::hs256`]), or an RS256 or ES256 public key
/// ([`Jwt::public_key_pem`]). A token verifies when
///
/// - its header `alg` is the key's algorithm (never `none`, never another one)
///   and its signature verifies with the key;
/// - `exp` is present and numeric, and `now ≤ exp + 60 s`
///   (else `TOKEN_EXPIRED`);
/// - `nbf` and `iat`, when present, are numeric and `≤ now + 60 s`;
/// - `iss` equals the configured [issuer](Jwt::issuer), if one is configured;
/// - `aud` (a string or an array of strings) contains the configured
///   [audience](Jwt::audience), if one is configured;
/// - `sub`, or else `userId`, is a non-empty string: the request's
///   [`Subject`].
///
/// No token is `MISSING_TOKEN`; an expired one `TOKEN_EXPIRED`; any other
/// failure `INVALID_TOKEN`.
///
/// ```
/// use haip::auth::Jwt;
///
/// let jwt = Jwt::hs256(b"a-random-secret-of-at-least-32-bytes")?.audience("haip");
/// let err = jwt.verify("not-a-jwt").unwrap_err();
/// assert_eq!(err.message(), "Invalid token");
///
/// assert!(Jwt::hs256("").is_err()); // an empty secret is a configuration error
/// assert!(Jwt::hs256("short").is_err()); // and so is one under 32 bytes
/// # Ok::<(), haip::Error>(())
/// ```
#[derive(Clone)]
pub struct Jwt {
    key: DecodingKey,
    algorithm: Algorithm,
    validation: Validation,
    issuer: Option<String>,
    audience: Option<String>,
}

impl Jwt {
    /// Verifies HS256 tokens with a shared secret (`HAIP_JWT_SECRET`).
    ///
    /// The secret must be at least 32 bytes (256 bits, HS256's own strength,
    /// RFC 7518 §3.2): a shorter one can be guessed offline from any token
    /// it signed. An empty or shorter secret is [`Error::InvalidConfig`] for
    /// `jwt_secret`, saying how long it was; `openssl rand -hex 32` makes one.
    pub fn hs256(secret: impl AsRef<[u8]>) -> Result<Jwt, Error> {
        let secret = secret.as_ref();
        let invalid = |reason: &str| Error::InvalidConfig {
            setting: "jwt_secret",
            reason: reason.to_owned(),
        };
        if secret.is_empty() {
            return Err(invalid(
                "the HS256 secret is empty; configure a secret of at least 32 bytes or leave authentication off",
            ));
        }
        if secret.len() < MIN_HS256_SECRET {
            return Err(invalid(&format!(
                "the HS256 secret is {} bytes; it must be at least {MIN_HS256_SECRET} (`openssl rand -hex 32` makes one)",
                secret.len()
            )));
        }
        crypto_provider();
        let key = DecodingKey::from_secret(secret)
            .map_err(|e| invalid(&format!("unusable HS256 secret: {e}")))?;
        Ok(Jwt::new(key, Algorithm::HS256))
    }

    /// Verifies tokens signed by the private half of a PEM public key: RS256
    /// for an RSA key (`-----BEGIN PUBLIC KEY-----` or
    /// `-----BEGIN RSA PUBLIC KEY-----`), ES256 for a P-256 EC key
    /// (`-----BEGIN PUBLIC KEY-----`).
    ///
    /// Anything else (a private key, a certificate, another curve, an Ed25519
    /// key, malformed PEM) is [`Error::InvalidConfig`] for `jwt_public_key`,
    /// saying what was found.
    pub fn public_key_pem(pem: impl AsRef<[u8]>) -> Result<Jwt, Error> {
        let pem = pem.as_ref();
        let invalid = |reason: String| Error::InvalidConfig {
            setting: "jwt_public_key",
            reason,
        };
        const EXPECTED: &str = "expected an RSA (RS256) or P-256 EC (ES256) public key in PEM \
                                form (`-----BEGIN PUBLIC KEY-----`)";
        let provider = crypto_provider();
        let Some(label) = pem_label(pem) else {
            return Err(invalid(format!("not PEM; {EXPECTED}")));
        };
        match label.as_str() {
            "PUBLIC KEY" => {
                if let Ok(key) = DecodingKey::from_ec_pem(pem) {
                    // Building a verifier parses the point as P-256: a point on
                    // another curve (P-384, secp256k1, ...) fails here.
                    return match jsonwebtoken::crypto::verify("", b"", &key, Algorithm::ES256) {
                        Ok(_) => Ok(Jwt::new(key, Algorithm::ES256)),
                        Err(_) => Err(invalid(format!(
                            "an EC public key that is not on curve P-256 (ES256 needs P-256); {EXPECTED}"
                        ))),
                    };
                }
                if let Ok(key) = DecodingKey::from_rsa_pem(pem) {
                    return check_rsa(provider, key)
                        .map_err(|e| invalid(format!("{e}; {EXPECTED}")));
                }
                if DecodingKey::from_ed_pem(pem).is_ok() {
                    return Err(invalid(format!(
                        "an Ed25519 public key (EdDSA is not supported); {EXPECTED}"
                    )));
                }
                Err(invalid(format!(
                    "a malformed or unsupported public key; {EXPECTED}"
                )))
            }
            "RSA PUBLIC KEY" => match DecodingKey::from_rsa_pem(pem) {
                Ok(key) => {
                    check_rsa(provider, key).map_err(|e| invalid(format!("{e}; {EXPECTED}")))
                }
                Err(_) => Err(invalid(format!("a malformed RSA public key; {EXPECTED}"))),
            },
            "CERTIFICATE" => Err(invalid(format!(
                "a certificate, not a public key; extract its key with \
                 `openssl x509 -in cert.pem -pubkey -noout`; {EXPECTED}"
            ))),
            private if private.ends_with("PRIVATE KEY") => Err(invalid(format!(
                "a private key (`{private}`); configure the public key instead \
                 (`openssl pkey -in key.pem -pubout`)"
            ))),
            other => Err(invalid(format!("a PEM `{other}` block; {EXPECTED}"))),
        }
    }

    /// Requires `iss` to equal `iss`.
    pub fn issuer(mut self, iss: impl Into<String>) -> Jwt {
        self.issuer = Some(iss.into());
        self
    }

    /// Requires `aud` (a string or an array of strings) to contain `aud`.
    pub fn audience(mut self, aud: impl Into<String>) -> Jwt {
        self.audience = Some(aud.into());
        self
    }

    /// The one algorithm accepted: `"HS256"`, `"RS256"` or `"ES256"`.
    pub fn algorithm_name(&self) -> &'static str {
        match self.algorithm {
            Algorithm::RS256 => "RS256",
            Algorithm::ES256 => "ES256",
            _ => "HS256",
        }
    }

    /// Verifies `token` now, answering with its subject.
    ///
    /// The synchronous form of [`Authenticator::authenticate`] for a token
    /// that was presented.
    pub fn verify(&self, token: &str) -> Result<Subject, AuthError> {
        self.verify_caller(token)
            .map(|caller| caller.subject().to_owned())
    }

    /// Verifies `token` now, answering with its [`Caller`]: the subject,
    /// the scopes (`scope` or `scp`) and the claims.
    pub fn verify_caller(&self, token: &str) -> Result<Caller, AuthError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.caller_at(token, now)
    }

    fn new(key: DecodingKey, algorithm: Algorithm) -> Jwt {
        // Signature and header only: every claim is checked by `check_claims`,
        // so the order and the codes are exactly those of §17.
        let mut validation = Validation::new(algorithm);
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        Jwt {
            key,
            algorithm,
            validation,
            issuer: None,
            audience: None,
        }
    }

    #[cfg(test)]
    fn verify_at(&self, token: &str, now: u64) -> Result<Subject, AuthError> {
        self.caller_at(token, now)
            .map(|caller| caller.subject().to_owned())
    }

    fn caller_at(&self, token: &str, now: u64) -> Result<Caller, AuthError> {
        let claims = match jsonwebtoken::decode::<Value>(token, &self.key, &self.validation) {
            Ok(data) => data.claims,
            // jsonwebtoken pre-reads `exp`, `nbf` and `sub` even with its checks
            // off, and fails on an object or array there. With a good header and
            // signature the claims are read here, so §17's order still decides
            // (an expired token with an odd `sub` is TOKEN_EXPIRED).
            Err(e) if matches!(e.kind(), JwtErrorKind::Json(_)) => self
                .claims_if_signed(token)
                .ok_or_else(|| self.decode_error(token, &e))?,
            Err(e) => return Err(self.decode_error(token, &e)),
        };
        let Value::Object(claims) = claims else {
            return Err(AuthError::invalid_token("the claims are not a JSON object"));
        };
        self.check_claims(&claims, now)?;
        let subject = subject(&claims)?;
        Ok(Caller::from_claims(subject, claims))
    }

    /// The claims of a token whose header and signature pass, read without
    /// jsonwebtoken's claim pre-checks. (`decode` verifies the signature before
    /// it reads claims, so a JSON failure after a good header already means a
    /// good signature; it is verified again here rather than relied upon.)
    fn claims_if_signed(&self, token: &str) -> Option<Value> {
        let (message, signature) = token.rsplit_once('.')?;
        if message.matches('.').count() != 1 {
            return None;
        }
        let header = jsonwebtoken::decode_header(token).ok()?;
        // What `decode` checks of the header beyond `alg`: no `crit` (none is
        // understood) and no `b64: false`.
        let b64 = header.extras.get::<bool>("b64").ok()?;
        if header.alg != self.algorithm || header.crit.is_some() || b64 == Some(false) {
            return None;
        }
        jsonwebtoken::crypto::verify(signature, message.as_bytes(), &self.key, self.algorithm)
            .ok()
            .filter(|&verified| verified)?;
        jsonwebtoken::dangerous::insecure_decode_claims(token).ok()
    }

    fn decode_error(&self, token: &str, err: &JwtError) -> AuthError {
        let reason = match err.kind() {
            JwtErrorKind::InvalidSignature => format!(
                "the signature does not verify with the configured {} key",
                self.algorithm_name()
            ),
            JwtErrorKind::InvalidAlgorithm => match jsonwebtoken::decode_header(token) {
                Ok(header) => format!(
                    "the token's alg is {:?}, but only {} is accepted",
                    header.alg,
                    self.algorithm_name()
                ),
                Err(_) => format!("only {} is accepted", self.algorithm_name()),
            },
            JwtErrorKind::InvalidToken => "not a well-formed JWS compact token".to_owned(),
            _ => format!("malformed token ({err})"),
        };
        AuthError::invalid_token(reason)
    }

    /// §17's claims, in §17's order.
    fn check_claims(&self, claims: &Claims, now: u64) -> Result<(), AuthError> {
        check_times(claims, now)?;
        if let Some(issuer) = &self.issuer
            && claims.get("iss").and_then(Value::as_str) != Some(issuer.as_str())
        {
            return Err(AuthError::invalid_token(
                "`iss` is not the configured issuer",
            ));
        }
        if let Some(audience) = &self.audience {
            let contains = match claims.get("aud") {
                Some(Value::String(aud)) => aud == audience,
                Some(Value::Array(auds)) => {
                    auds.iter().all(Value::is_string)
                        && auds
                            .iter()
                            .any(|aud| aud.as_str() == Some(audience.as_str()))
                }
                _ => false,
            };
            if !contains {
                return Err(AuthError::invalid_token(
                    "`aud` does not contain the configured audience",
                ));
            }
        }
        Ok(())
    }
}

/// `exp` (required), `nbf` and `iat` against `now`, with the leeway of §17.
pub(super) fn check_times(claims: &Claims, now: u64) -> Result<(), AuthError> {
    #[allow(clippy::cast_precision_loss)] // seconds since 1970 fit in f64 exactly
    let now = now as f64;
    let exp = match claims.get("exp") {
        None => return Err(AuthError::invalid_token("no `exp` claim")),
        Some(exp) => exp
            .as_f64()
            .ok_or_else(|| AuthError::invalid_token("`exp` is not a number"))?,
    };
    if now > exp + LEEWAY_SECS {
        return Err(AuthError::token_expired_because(format!(
            "`exp` was {} s ago (leeway {LEEWAY_SECS} s)",
            now - exp
        )));
    }
    for name in ["nbf", "iat"] {
        if let Some(value) = claims.get(name) {
            let time = value
                .as_f64()
                .ok_or_else(|| AuthError::invalid_token(format!("`{name}` is not a number")))?;
            if time > now + LEEWAY_SECS {
                return Err(AuthError::invalid_token(format!(
                    "`{name}` is {} s in the future (leeway {LEEWAY_SECS} s)",
                    time - now
                )));
            }
        }
    }
    Ok(())
}

/// `sub`, else `userId`: the first that is a non-empty string.
fn subject(claims: &Claims) -> Result<Subject, AuthError> {
    ["sub", "userId"]
        .iter()
        .find_map(|name| claims.get(*name)?.as_str().filter(|s| !s.is_empty()))
        .map(str::to_owned)
        .ok_or_else(|| AuthError::invalid_token("neither `sub` nor `userId` is a non-empty string"))
}

impl Authenticator for Jwt {
    /// [`Jwt::verify`]; no token (or an empty one) is `MISSING_TOKEN`.
    fn authenticate<'a>(&'a self, token: Option<&'a str>) -> AuthFuture<'a> {
        let result = match token {
            Some(token) if !token.is_empty() => self.verify(token),
            _ => Err(AuthError::missing_token()),
        };
        Box::pin(std::future::ready(result))
    }

    /// [`Jwt::verify_caller`]: the subject, the scopes and the claims.
    fn identify<'a>(&'a self, token: Option<&'a str>) -> IdentifyFuture<'a> {
        let result = match token {
            Some(token) if !token.is_empty() => self.verify_caller(token),
            _ => Err(AuthError::missing_token()),
        };
        Box::pin(std::future::ready(result))
    }
}

impl fmt::Debug for Jwt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jwt")
            .field("algorithm", &self.algorithm_name())
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

/// An RS256 key, once its DER parses as an RSA public key.
fn check_rsa(provider: &CryptoProvider, key: DecodingKey) -> Result<Jwt, &'static str> {
    let der = key
        .try_get_as_bytes()
        .map_err(|_| "an unreadable RSA public key")?;
    (provider.key_utils.rsa_pub_components_from_public_key)(der)
        .map_err(|_| "a malformed RSA public key")?;
    Ok(Jwt::new(key, Algorithm::RS256))
}

/// The label of the first PEM block (`PUBLIC KEY` in
/// `-----BEGIN PUBLIC KEY-----`), if any.
fn pem_label(pem: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(pem);
    let start = text.find("-----BEGIN ")? + "-----BEGIN ".len();
    let rest = &text[start..];
    let end = rest.find("-----")?;
    let label = rest[..end].trim();
    (!label.is_empty() && !label.contains('\n')).then(|| label.to_owned())
}

/// The crypto backend jsonwebtoken verifies with. It picks RustCrypto by
/// itself unless another crate in the build also enables its `aws_lc_rs`
/// feature, when it would panic at the first verification instead; RustCrypto
/// is installed here then.
pub(super) fn crypto_provider() -> &'static CryptoProvider {
    use jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER;
    if let Some(provider) = CryptoProvider::try_get_default() {
        return provider;
    }
    let _ = DEFAULT_PROVIDER.install_default(); // a concurrent install wins the same way
    CryptoProvider::try_get_default().unwrap_or(&DEFAULT_PROVIDER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::AuthErrorKind;
    use jsonwebtoken::{EncodingKey, Header, encode};
    use serde_json::json;

    const NOW: u64 = 1_700_000_000;
    const SECRET: &[u8] = b"test-secret-of-reasonable-length";

    const RSA_PRIVATE: &[u8] = include_bytes!("../../tests/fixtures/rsa_private.pem");
    const RSA_PUBLIC: &[u8] = include_bytes!("../../tests/fixtures/rsa_public.pem");
    const RSA_PUBLIC_PKCS1: &[u8] = include_bytes!("../../tests/fixtures/rsa_public_pkcs1.pem");
    const EC_PRIVATE: &[u8] = include_bytes!("../../tests/fixtures/ec_p256_private.pem");
    const EC_PUBLIC: &[u8] = include_bytes!("../../tests/fixtures/ec_p256_public.pem");
    const EC_P384_PUBLIC: &[u8] = include_bytes!("../../tests/fixtures/ec_p384_public.pem");
    const ED25519_PUBLIC: &[u8] = include_bytes!("../../tests/fixtures/ed25519_public.pem");

    fn now_offset(secs: i64) -> i64 {
        NOW as i64 + secs
    }

    fn mint(alg: Algorithm, key: &EncodingKey, claims: &Value) -> String {
        encode(&Header::new(alg), claims, key).unwrap()
    }

    fn hs(claims: Value) -> String {
        mint(
            Algorithm::HS256,
            &EncodingKey::from_secret(SECRET).unwrap(),
            &claims,
        )
    }

    fn jwt() -> Jwt {
        Jwt::hs256(SECRET).unwrap()
    }

    fn kind(result: Result<Subject, AuthError>) -> AuthErrorKind {
        result.unwrap_err().kind()
    }

    fn b64url(bytes: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
            for i in 0..=chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    }

    fn valid_claims() -> Value {
        json!({"sub": "alice", "exp": now_offset(3600), "iat": now_offset(0)})
    }

    #[test]
    fn hs256_subject_from_sub_or_user_id() {
        let jwt = jwt();
        assert_eq!(jwt.verify_at(&hs(valid_claims()), NOW).unwrap(), "alice");
        let token = hs(json!({"userId": "u-42", "exp": now_offset(60)}));
        assert_eq!(jwt.verify_at(&token, NOW).unwrap(), "u-42");
        let token = hs(json!({"sub": "alice", "userId": "u-42", "exp": now_offset(60)}));
        assert_eq!(jwt.verify_at(&token, NOW).unwrap(), "alice");
        let token = hs(json!({"sub": "", "userId": "u-42", "exp": now_offset(60)}));
        assert_eq!(jwt.verify_at(&token, NOW).unwrap(), "u-42");
        // Float times are numbers too.
        let token = hs(json!({"sub": "alice", "exp": NOW as f64 + 0.5}));
        assert_eq!(jwt.verify_at(&token, NOW).unwrap(), "alice");
    }

    #[test]
    fn real_clock_accepts_a_fresh_token() {
        let now = jsonwebtoken::get_current_timestamp();
        let token = hs(json!({"sub": "alice", "exp": now + 600}));
        assert_eq!(jwt().verify(&token).unwrap(), "alice");
    }

    #[test]
    fn wrong_secret_is_invalid() {
        let token = mint(
            Algorithm::HS256,
            &EncodingKey::from_secret(b"another-secret").unwrap(),
            &valid_claims(),
        );
        let err = jwt().verify_at(&token, NOW).unwrap_err();
        assert_eq!(err.kind(), AuthErrorKind::InvalidToken);
        assert!(err.reason().contains("signature"), "{err}");
    }

    #[test]
    fn tampered_claims_are_invalid() {
        let token = hs(valid_claims());
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = b64url(
            json!({"sub": "mallory", "exp": now_offset(3600)})
                .to_string()
                .as_bytes(),
        );
        parts[1] = &forged;
        assert_eq!(
            kind(jwt().verify_at(&parts.join("."), NOW)),
            AuthErrorKind::InvalidToken
        );
    }

    #[test]
    fn alg_none_is_never_accepted() {
        let claims = b64url(valid_claims().to_string().as_bytes());
        for header in [
            r#"{"alg":"none","typ":"JWT"}"#,
            r#"{"alg":"None","typ":"JWT"}"#,
            r#"{"alg":"NONE"}"#,
            r#"{"typ":"JWT"}"#,
        ] {
            let unsigned = format!("{}.{claims}.", b64url(header.as_bytes()));
            let err = jwt().verify_at(&unsigned, NOW).unwrap_err();
            assert_eq!(err.kind(), AuthErrorKind::InvalidToken, "{header}");
            // Not even with a (meaningless) signature attached.
            let signed = format!("{unsigned}c2ln");
            assert_eq!(
                kind(jwt().verify_at(&signed, NOW)),
                AuthErrorKind::InvalidToken
            );
        }
    }

    #[test]
    fn other_algorithms_are_refused_even_with_the_right_secret() {
        let key = EncodingKey::from_secret(SECRET).unwrap();
        for alg in [Algorithm::HS384, Algorithm::HS512] {
            let token = mint(alg, &key, &valid_claims());
            let err = jwt().verify_at(&token, NOW).unwrap_err();
            assert_eq!(err.kind(), AuthErrorKind::InvalidToken);
            assert!(err.reason().contains("only HS256"), "{err}");
        }
    }

    #[test]
    fn unsupported_crit_header_is_invalid() {
        let mut header = Header::new(Algorithm::HS256);
        header.crit = Some(vec!["exp-ext".to_owned()]);
        let token = encode(
            &header,
            &valid_claims(),
            &EncodingKey::from_secret(SECRET).unwrap(),
        )
        .unwrap();
        assert_eq!(
            kind(jwt().verify_at(&token, NOW)),
            AuthErrorKind::InvalidToken
        );
    }

    #[test]
    fn malformed_tokens_are_invalid() {
        let good = hs(valid_claims());
        let (header, rest) = good.split_once('.').unwrap();
        for token in [
            "abc".to_owned(),
            "a.b".to_owned(),
            "a.b.c".to_owned(),
            "a.b.c.d".to_owned(),
            format!("{good}.extra"),
            format!("{header}.!!!.{}", rest.split_once('.').unwrap().1),
            format!("{header}.{}.", b64url(b"[1,2]")),
            " ".to_owned(),
        ] {
            assert_eq!(
                kind(jwt().verify_at(&token, NOW)),
                AuthErrorKind::InvalidToken,
                "{token}"
            );
        }
        for claims in [json!([1, 2]), json!("alice"), json!(null)] {
            assert_eq!(
                kind(jwt().verify_at(&hs(claims.clone()), NOW)),
                AuthErrorKind::InvalidToken,
                "{claims}"
            );
        }
    }

    #[test]
    fn expiry_with_leeway() {
        let jwt = jwt();
        let at = |exp: Value| jwt.verify_at(&hs(json!({"sub": "alice", "exp": exp})), NOW);
        assert_eq!(
            kind(at(json!(now_offset(-120)))),
            AuthErrorKind::TokenExpired
        );
        assert_eq!(
            kind(at(json!(now_offset(-61)))),
            AuthErrorKind::TokenExpired
        );
        assert_eq!(at(json!(now_offset(-60))).unwrap(), "alice");
        assert_eq!(at(json!(now_offset(-30))).unwrap(), "alice");
        assert_eq!(kind(at(json!(-1))), AuthErrorKind::TokenExpired);
        let expired = at(json!(now_offset(-120))).unwrap_err();
        assert_eq!(expired.code().as_str(), "TOKEN_EXPIRED");
        assert_eq!(expired.message(), "Token expired");
    }

    #[test]
    fn exp_must_be_present_and_numeric() {
        let jwt = jwt();
        for claims in [
            json!({"sub": "alice"}),
            json!({"sub": "alice", "exp": null}),
            json!({"sub": "alice", "exp": "1700003600"}),
            json!({"sub": "alice", "exp": true}),
            json!({"sub": "alice", "exp": [now_offset(3600)]}),
            json!({"sub": "alice", "exp": {"at": now_offset(3600)}}),
        ] {
            let err = jwt.verify_at(&hs(claims.clone()), NOW).unwrap_err();
            assert_eq!(err.kind(), AuthErrorKind::InvalidToken, "{claims}");
            assert!(err.reason().contains("exp"), "{claims}: {err}");
        }
    }

    #[test]
    fn nbf_and_iat_must_not_be_in_the_future() {
        let jwt = jwt();
        for name in ["nbf", "iat"] {
            let at = |value: Value| {
                let mut claims = valid_claims();
                claims[name] = value;
                jwt.verify_at(&hs(claims), NOW)
            };
            assert_eq!(
                kind(at(json!(now_offset(120)))),
                AuthErrorKind::InvalidToken
            );
            assert_eq!(kind(at(json!(now_offset(61)))), AuthErrorKind::InvalidToken);
            assert_eq!(at(json!(now_offset(60))).unwrap(), "alice");
            assert_eq!(at(json!(now_offset(30))).unwrap(), "alice");
            assert_eq!(at(json!(now_offset(-1000))).unwrap(), "alice");
            assert_eq!(kind(at(json!("soon"))), AuthErrorKind::InvalidToken);
            assert_eq!(kind(at(json!(null))), AuthErrorKind::InvalidToken);
        }
    }

    #[test]
    fn claims_are_checked_in_order() {
        let jwt = jwt().issuer("https://issuer").audience("haip");
        // Expired beats every later failure, even claims jsonwebtoken cannot pre-read.
        for claims in [
            json!({"exp": now_offset(-120), "nbf": now_offset(999), "iss": "x", "aud": "y"}),
            json!({"exp": now_offset(-120), "nbf": "bad", "iat": "bad"}),
            json!({"exp": now_offset(-120), "nbf": {"odd": true}, "sub": ["odd"]}),
            json!({"exp": now_offset(-120), "sub": {"odd": true}}),
        ] {
            assert_eq!(
                kind(jwt.verify_at(&hs(claims.clone()), NOW)),
                AuthErrorKind::TokenExpired,
                "{claims}"
            );
        }
        // ... but never when the signature is wrong.
        let forged = mint(
            Algorithm::HS256,
            &EncodingKey::from_secret(b"another-secret").unwrap(),
            &json!({"exp": now_offset(-120), "sub": {"odd": true}}),
        );
        assert_eq!(
            kind(jwt.verify_at(&forged, NOW)),
            AuthErrorKind::InvalidToken
        );
        // Not expired: an object `sub` is just not a subject.
        let token = hs(
            json!({"exp": now_offset(60), "sub": {"odd": true}, "iss": "https://issuer", "aud": "haip"}),
        );
        let err = jwt.verify_at(&token, NOW).unwrap_err();
        assert!(err.reason().contains("sub"), "{err}");
    }

    #[test]
    fn issuer_when_configured() {
        let jwt = jwt().issuer("https://issuer");
        let with_iss = |iss: Value| {
            let mut claims = valid_claims();
            claims["iss"] = iss;
            jwt.verify_at(&hs(claims), NOW)
        };
        assert_eq!(with_iss(json!("https://issuer")).unwrap(), "alice");
        assert_eq!(
            kind(with_iss(json!("https://evil"))),
            AuthErrorKind::InvalidToken
        );
        assert_eq!(
            kind(with_iss(json!(["https://issuer"]))),
            AuthErrorKind::InvalidToken
        );
        assert_eq!(
            kind(jwt.verify_at(&hs(valid_claims()), NOW)),
            AuthErrorKind::InvalidToken
        );
        // Not configured: any issuer.
        let mut claims = valid_claims();
        claims["iss"] = json!("whoever");
        assert_eq!(self::jwt().verify_at(&hs(claims), NOW).unwrap(), "alice");
    }

    #[test]
    fn audience_when_configured() {
        let jwt = jwt().audience("haip");
        let with_aud = |aud: Value| {
            let mut claims = valid_claims();
            claims["aud"] = aud;
            jwt.verify_at(&hs(claims), NOW)
        };
        assert_eq!(with_aud(json!("haip")).unwrap(), "alice");
        assert_eq!(with_aud(json!(["other", "haip"])).unwrap(), "alice");
        assert_eq!(kind(with_aud(json!("other"))), AuthErrorKind::InvalidToken);
        assert_eq!(
            kind(with_aud(json!(["other", "more"]))),
            AuthErrorKind::InvalidToken
        );
        assert_eq!(kind(with_aud(json!([]))), AuthErrorKind::InvalidToken);
        assert_eq!(
            kind(with_aud(json!(["haip", 7]))),
            AuthErrorKind::InvalidToken
        );
        assert_eq!(
            kind(with_aud(json!({"haip": true}))),
            AuthErrorKind::InvalidToken
        );
        assert_eq!(
            kind(jwt.verify_at(&hs(valid_claims()), NOW)),
            AuthErrorKind::InvalidToken
        );
        // Not configured: any audience.
        let mut claims = valid_claims();
        claims["aud"] = json!("whatever");
        assert_eq!(self::jwt().verify_at(&hs(claims), NOW).unwrap(), "alice");
    }

    #[test]
    fn subject_is_required() {
        for claims in [
            json!({"exp": now_offset(60)}),
            json!({"exp": now_offset(60), "sub": ""}),
            json!({"exp": now_offset(60), "sub": 42}),
            json!({"exp": now_offset(60), "sub": null, "userId": ""}),
            json!({"exp": now_offset(60), "userId": 42}),
        ] {
            let err = jwt().verify_at(&hs(claims.clone()), NOW).unwrap_err();
            assert_eq!(err.kind(), AuthErrorKind::InvalidToken, "{claims}");
        }
    }

    #[test]
    fn rs256_with_a_public_key() {
        let private = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
        let token = mint(Algorithm::RS256, &private, &valid_claims());
        for public in [RSA_PUBLIC, RSA_PUBLIC_PKCS1] {
            let jwt = Jwt::public_key_pem(public).unwrap();
            assert_eq!(jwt.algorithm_name(), "RS256");
            assert_eq!(jwt.verify_at(&token, NOW).unwrap(), "alice");
        }
        let jwt = Jwt::public_key_pem(RSA_PUBLIC).unwrap();
        // Same key, another RSA algorithm: refused.
        let ps256 = mint(Algorithm::PS256, &private, &valid_claims());
        assert_eq!(
            kind(jwt.verify_at(&ps256, NOW)),
            AuthErrorKind::InvalidToken
        );
        // Claims still apply.
        let expired = mint(
            Algorithm::RS256,
            &private,
            &json!({"sub": "alice", "exp": now_offset(-120)}),
        );
        assert_eq!(
            kind(jwt.verify_at(&expired, NOW)),
            AuthErrorKind::TokenExpired
        );
        // An ES256 token is not an RS256 one.
        let es = mint(
            Algorithm::ES256,
            &EncodingKey::from_ec_pem(EC_PRIVATE).unwrap(),
            &valid_claims(),
        );
        assert_eq!(kind(jwt.verify_at(&es, NOW)), AuthErrorKind::InvalidToken);
    }

    #[test]
    fn es256_with_a_public_key() {
        let private = EncodingKey::from_ec_pem(EC_PRIVATE).unwrap();
        let token = mint(Algorithm::ES256, &private, &valid_claims());
        let jwt = Jwt::public_key_pem(EC_PUBLIC).unwrap();
        assert_eq!(jwt.algorithm_name(), "ES256");
        assert_eq!(jwt.verify_at(&token, NOW).unwrap(), "alice");
        let rs = mint(
            Algorithm::RS256,
            &EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap(),
            &valid_claims(),
        );
        assert_eq!(kind(jwt.verify_at(&rs, NOW)), AuthErrorKind::InvalidToken);
        // A signature from another token does not carry over.
        let other = mint(
            Algorithm::ES256,
            &private,
            &json!({"sub": "mallory", "exp": now_offset(60)}),
        );
        let (message, _) = other.rsplit_once('.').unwrap();
        let (_, signature) = token.rsplit_once('.').unwrap();
        assert_eq!(
            kind(jwt.verify_at(&format!("{message}.{signature}"), NOW)),
            AuthErrorKind::InvalidToken
        );
    }

    #[test]
    fn algorithm_confusion_is_refused() {
        // The classic attack: HS256 with the public key's PEM bytes as the secret.
        for (pem, configured) in [(RSA_PUBLIC, "RS256"), (EC_PUBLIC, "ES256")] {
            let jwt = Jwt::public_key_pem(pem).unwrap();
            assert_eq!(jwt.algorithm_name(), configured);
            let token = mint(
                Algorithm::HS256,
                &EncodingKey::from_secret(pem).unwrap(),
                &valid_claims(),
            );
            let err = jwt.verify_at(&token, NOW).unwrap_err();
            assert_eq!(err.kind(), AuthErrorKind::InvalidToken);
            assert!(err.reason().contains(configured), "{err}");
            // With an odd `sub`, which goes around jsonwebtoken's claim reading, too.
            let odd = mint(
                Algorithm::HS256,
                &EncodingKey::from_secret(pem).unwrap(),
                &json!({"exp": now_offset(-120), "sub": {"odd": true}}),
            );
            assert_eq!(kind(jwt.verify_at(&odd, NOW)), AuthErrorKind::InvalidToken);
        }
    }

    #[test]
    fn bad_public_keys_are_refused_at_construction() {
        let cert = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let garbled = b"-----BEGIN PUBLIC KEY-----\nnot base64 at all\n-----END PUBLIC KEY-----\n";
        let cases: [(&[u8], &str); 9] = [
            (b"", "not PEM"),
            (b"ssh-rsa AAAAB3NzaC1yc2E", "not PEM"),
            (RSA_PRIVATE, "private key"),
            (EC_PRIVATE, "private key"),
            (cert, "certificate"),
            (EC_P384_PUBLIC, "P-256"),
            (ED25519_PUBLIC, "Ed25519"),
            (garbled, "malformed"),
            (
                b"-----BEGIN RSA PUBLIC KEY-----\nAAAA\n-----END RSA PUBLIC KEY-----\n",
                "malformed",
            ),
        ];
        for (pem, expected) in cases {
            match Jwt::public_key_pem(pem) {
                Err(Error::InvalidConfig { setting, reason }) => {
                    assert_eq!(setting, "jwt_public_key");
                    assert!(reason.contains(expected), "{expected}: {reason}");
                }
                other => panic!("{expected}: {other:?}"),
            }
        }
    }

    #[test]
    fn empty_and_short_secrets_are_refused_at_construction() {
        match Jwt::hs256("") {
            Err(Error::InvalidConfig { setting, reason }) => {
                assert_eq!(setting, "jwt_secret");
                assert!(reason.contains("empty"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // Guessable offline from any token it signed: refused, saying why.
        match Jwt::hs256("x".repeat(31)) {
            Err(Error::InvalidConfig { setting, reason }) => {
                assert_eq!(setting, "jwt_secret");
                assert!(
                    reason.contains("31 bytes") && reason.contains("at least 32"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(Jwt::hs256("x".repeat(32)).is_ok());
    }

    #[test]
    fn debug_does_not_print_the_secret() {
        let jwt = Jwt::hs256("super-secret-value-of-32-bytes-at-least")
            .unwrap()
            .issuer("iss")
            .audience("aud");
        let debug = format!("{jwt:?}");
        assert!(!debug.contains("super-secret-value"), "{debug}");
        assert!(debug.contains("HS256") && debug.contains("iss") && debug.contains("aud"));
    }

    #[test]
    fn pem_labels() {
        assert_eq!(pem_label(RSA_PUBLIC).as_deref(), Some("PUBLIC KEY"));
        assert_eq!(
            pem_label(RSA_PUBLIC_PKCS1).as_deref(),
            Some("RSA PUBLIC KEY")
        );
        assert_eq!(
            pem_label(b"junk\n-----BEGIN X Y-----\n").as_deref(),
            Some("X Y")
        );
        assert_eq!(pem_label(b"-----BEGIN -----"), None);
        assert_eq!(pem_label(b"-----BEGIN PUBLIC KEY\n"), None);
    }

    #[tokio::test]
    async fn authenticator_maps_absent_tokens_to_missing_token() {
        let auth: Box<dyn Authenticator> = Box::new(jwt());
        assert_eq!(
            kind(auth.authenticate(None).await),
            AuthErrorKind::MissingToken
        );
        assert_eq!(
            kind(auth.authenticate(Some("")).await),
            AuthErrorKind::MissingToken
        );
        assert_eq!(
            kind(auth.authenticate(Some("x")).await),
            AuthErrorKind::InvalidToken
        );
        let now = jsonwebtoken::get_current_timestamp();
        let token = hs(json!({"sub": "alice", "exp": now + 600}));
        assert_eq!(auth.authenticate(Some(&token)).await.unwrap(), "alice");
        let expired = hs(json!({"sub": "alice", "exp": now - 120}));
        assert_eq!(
            kind(auth.authenticate(Some(&expired)).await),
            AuthErrorKind::TokenExpired
        );
    }
}
