//! Where a request's token comes from, and keeping it out of logs (docs/protocol.md §17).

use std::borrow::Cow;

use hyper::{HeaderMap, Uri, header};

/// The token presented with a request: the first present of
/// `Authorization: Bearer <token>`, the query parameter `token`
/// (percent-decoded), and a `Sec-WebSocket-Protocol` entry `token.<token>`
/// (docs/protocol.md §17). An empty value counts as absent.
pub(crate) fn token_from_parts(headers: &HeaderMap, uri: &Uri) -> Option<String> {
    bearer_token(headers)
        .or_else(|| query_token(uri))
        .or_else(|| subprotocol_token(headers))
}

/// The URI with the value of every `token` query parameter replaced by
/// `REDACTED`, for logging.
pub(crate) fn redact_uri(uri: &Uri) -> String {
    let full = uri.to_string();
    let Some(query) = uri.query() else {
        return full;
    };
    // Neither an authority nor a path holds a `?`: the first one opens the query.
    let Some((before, _)) = full.split_once('?') else {
        return full;
    };
    let pairs: Vec<Cow<'_, str>> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if form_decode(key) == "token" => Cow::Owned(format!("{key}=REDACTED")),
            _ => Cow::Borrowed(pair),
        })
        .collect();
    format!("{before}?{}", pairs.join("&"))
}

/// `Authorization: Bearer <token>` (scheme case-insensitive, RFC 7235).
fn bearer_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find_map(|value| {
            let (scheme, token) = value.trim().split_once(char::is_whitespace)?;
            let token = token.trim();
            (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
        })
}

/// The first non-empty query parameter `token`.
fn query_token(uri: &Uri) -> Option<String> {
    query_param(uri.query(), "token")
}

/// The first non-empty value of query parameter `name`, form-decoded (also
/// used to find the target session of upstream POSTs).
pub(crate) fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        if form_decode(key) != name {
            return None;
        }
        let value = form_decode(value);
        (!value.is_empty()).then(|| value.into_owned())
    })
}

/// The first `token.<token>` entry of the comma-separated
/// `Sec-WebSocket-Protocol` list(s).
fn subprotocol_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .find_map(|entry| {
            let token = entry.trim().strip_prefix("token.")?;
            (!token.is_empty()).then(|| token.to_owned())
        })
}

/// Decodes one query component as `application/x-www-form-urlencoded` does
/// (what a browser's `URLSearchParams` reads): `%XX` escapes and `+` for space.
/// A malformed escape stays as written; invalid UTF-8 becomes U+FFFD.
fn form_decode(component: &str) -> Cow<'_, str> {
    if !component.contains(['%', '+']) {
        return Cow::Borrowed(component);
    }
    let bytes = component.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => match (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
                (Some(high), Some(low)) => {
                    out.push(high << 4 | low);
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

fn hex(digit: Option<&u8>) -> Option<u8> {
    let digit = *digit?;
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn uri(s: &str) -> Uri {
        s.parse().unwrap()
    }

    #[test]
    fn bearer_header() {
        let h = headers(&[(header::AUTHORIZATION, "Bearer abc.def.ghi")]);
        assert_eq!(
            token_from_parts(&h, &uri("/haip")).as_deref(),
            Some("abc.def.ghi")
        );
        let h = headers(&[(header::AUTHORIZATION, "bearer   xyz  ")]);
        assert_eq!(token_from_parts(&h, &uri("/haip")).as_deref(), Some("xyz"));
    }

    #[test]
    fn other_authorization_schemes_and_empty_bearers_are_not_tokens() {
        for value in [
            "Basic dXNlcjpwYXNz",
            "Bearer",
            "Bearer   ",
            "Bearerabc",
            "abc",
        ] {
            let h = headers(&[(header::AUTHORIZATION, value)]);
            assert_eq!(token_from_parts(&h, &uri("/haip")), None, "{value}");
        }
        // A later source still counts.
        let h = headers(&[(header::AUTHORIZATION, "Basic dXNlcjpwYXNz")]);
        assert_eq!(
            token_from_parts(&h, &uri("/haip?token=q")).as_deref(),
            Some("q")
        );
    }

    #[test]
    fn query_parameter_is_percent_decoded() {
        let h = HeaderMap::new();
        assert_eq!(
            token_from_parts(&h, &uri("/haip?token=abc")).as_deref(),
            Some("abc")
        );
        assert_eq!(
            token_from_parts(&h, &uri("/haip?x=1&token=a%2Eb%2ec%3D&y=2")).as_deref(),
            Some("a.b.c=")
        );
        assert_eq!(
            token_from_parts(&h, &uri("/haip?tok%65n=k")).as_deref(),
            Some("k")
        );
        assert_eq!(
            token_from_parts(&h, &uri("/haip?token=a+b%2")).as_deref(),
            Some("a b%2")
        );
        assert_eq!(
            token_from_parts(&h, &uri("/haip?token=&token=second")).as_deref(),
            Some("second")
        );
        for absent in [
            "/haip",
            "/haip?",
            "/haip?token",
            "/haip?token=",
            "/haip?tokens=a",
            "/haip?Token=a",
        ] {
            assert_eq!(token_from_parts(&h, &uri(absent)), None, "{absent}");
        }
    }

    #[test]
    fn subprotocol_entry() {
        let h = headers(&[(header::SEC_WEBSOCKET_PROTOCOL, "haip, token.abc")]);
        assert_eq!(token_from_parts(&h, &uri("/haip")).as_deref(), Some("abc"));
        let h = headers(&[
            (header::SEC_WEBSOCKET_PROTOCOL, "haip"),
            (
                header::SEC_WEBSOCKET_PROTOCOL,
                " token. , token.x.y.z ,token.later",
            ),
        ]);
        assert_eq!(
            token_from_parts(&h, &uri("/haip")).as_deref(),
            Some("x.y.z")
        );
        let h = headers(&[(header::SEC_WEBSOCKET_PROTOCOL, "haip, tokenabc, token")]);
        assert_eq!(token_from_parts(&h, &uri("/haip")), None);
    }

    #[test]
    fn first_present_source_wins() {
        let all = headers(&[
            (header::AUTHORIZATION, "Bearer from-header"),
            (header::SEC_WEBSOCKET_PROTOCOL, "haip, token.from-protocol"),
        ]);
        let with_query = uri("/haip?token=from-query");
        assert_eq!(
            token_from_parts(&all, &with_query).as_deref(),
            Some("from-header")
        );

        let no_bearer = headers(&[(header::SEC_WEBSOCKET_PROTOCOL, "haip, token.from-protocol")]);
        assert_eq!(
            token_from_parts(&no_bearer, &with_query).as_deref(),
            Some("from-query")
        );
        assert_eq!(
            token_from_parts(&no_bearer, &uri("/haip?token=")).as_deref(),
            Some("from-protocol")
        );
        assert_eq!(token_from_parts(&HeaderMap::new(), &uri("/haip")), None);
    }

    #[test]
    fn redaction_replaces_every_token_value_and_nothing_else() {
        assert_eq!(redact_uri(&uri("/haip")), "/haip");
        assert_eq!(redact_uri(&uri("/haip?a=1")), "/haip?a=1");
        assert_eq!(
            redact_uri(&uri("/haip?token=secret.jwt")),
            "/haip?token=REDACTED"
        );
        assert_eq!(
            redact_uri(&uri("/haip/sse?a=1&token=s1&b=&tok%65n=s2&tokens=keep")),
            "/haip/sse?a=1&token=REDACTED&b=&tok%65n=REDACTED&tokens=keep"
        );
        assert_eq!(
            redact_uri(&uri("http://host:8080/haip?token=s&x=y")),
            "http://host:8080/haip?token=REDACTED&x=y"
        );
        let redacted = redact_uri(&uri("/haip?token=abc.def&token=ghi"));
        assert!(
            !redacted.contains("abc") && !redacted.contains("ghi"),
            "{redacted}"
        );
    }

    #[test]
    fn form_decoding() {
        assert_eq!(form_decode("plain"), "plain");
        assert_eq!(form_decode("a%20b+c"), "a b c");
        assert_eq!(form_decode("%zz%4"), "%zz%4");
        assert_eq!(form_decode("%E2%9C%93"), "\u{2713}");
        assert_eq!(form_decode("%FF"), "\u{FFFD}");
    }
}
