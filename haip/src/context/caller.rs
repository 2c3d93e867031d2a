//! Who made a request: the subject, the scopes and the claims of its token.

use serde_json::{Map, Value};

/// The verified caller of a request: its subject, the OAuth scopes its
/// token grants, and the token's claims.
///
/// [`Authenticator::identify`](crate::auth::Authenticator::identify) answers with
/// one; tools read it from [`Context::caller`](crate::Context::caller) to
/// decide for themselves (a claim naming a tenant, a scope a tool checks by
/// hand). A tool that needs scopes to be called at all says so with
/// `#[haip_tool(scopes = [..])]` instead: the server refuses the call.
///
/// ```
/// use haip::auth::Caller;
/// use serde_json::json;
///
/// let caller = Caller::new("alice")
///     .with_scopes(["tickets:write", "tickets:read"])
///     .with_claims(json!({"sub": "alice", "tenant": "acme"}).as_object().unwrap().clone());
/// assert_eq!(caller.subject(), "alice");
/// assert!(caller.has_scope("tickets:read"));
/// assert_eq!(caller.scopes(), ["tickets:read", "tickets:write"]);
/// assert_eq!(caller.claim("tenant"), Some(&json!("acme")));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    subject: String,
    /// Sorted, without duplicates.
    scopes: Vec<String>,
    claims: Map<String, Value>,
}

impl Caller {
    /// A caller with no scopes and no claims (what an
    /// [`Authenticator`](crate::auth::Authenticator) that only names subjects
    /// gives).
    pub fn new(subject: impl Into<String>) -> Caller {
        Caller {
            subject: subject.into(),
            scopes: Vec::new(),
            claims: Map::new(),
        }
    }

    /// The caller, granted `scopes` (in any order; duplicates and empty
    /// strings are dropped).
    pub fn with_scopes<I, S>(mut self, scopes: I) -> Caller
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes = scopes
            .into_iter()
            .map(Into::into)
            .filter(|s| !s.is_empty())
            .collect();
        self.scopes.sort_unstable();
        self.scopes.dedup();
        self
    }

    /// The caller, with its token's claims.
    pub fn with_claims(mut self, claims: Map<String, Value>) -> Caller {
        self.claims = claims;
        self
    }

    /// The caller's token's claims, with its scopes read from them: `scope`
    /// (space-separated, RFC 8693 / RFC 9068) or else `scp` (an array of
    /// strings, or one space-separated string).
    pub fn from_claims(subject: impl Into<String>, claims: Map<String, Value>) -> Caller {
        let scopes = scopes_of(&claims);
        Caller::new(subject).with_scopes(scopes).with_claims(claims)
    }

    /// Who the caller is.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The scopes the caller's token grants, sorted.
    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }

    /// Whether the caller's token grants `scope`.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes
            .binary_search_by(|s| s.as_str().cmp(scope))
            .is_ok()
    }

    /// Every claim of the caller's token (empty when the authenticator
    /// gives none).
    pub fn claims(&self) -> &Map<String, Value> {
        &self.claims
    }

    /// One claim of the caller's token.
    pub fn claim(&self, name: &str) -> Option<&Value> {
        self.claims.get(name)
    }

    /// Of `required`, the scopes the caller lacks, in `required`'s order.
    pub(crate) fn missing<'a>(&self, required: &'a [String]) -> Vec<&'a str> {
        required
            .iter()
            .filter(|s| !self.has_scope(s))
            .map(String::as_str)
            .collect()
    }
}

/// The scopes of a token's claims: `scope` (space-separated), else `scp`
/// (an array of strings or a space-separated string).
fn scopes_of(claims: &Map<String, Value>) -> Vec<String> {
    let split = |s: &str| {
        s.split(' ')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    match (claims.get("scope"), claims.get("scp")) {
        (Some(Value::String(scope)), _) => split(scope),
        (_, Some(Value::String(scp))) => split(scp),
        (_, Some(Value::Array(scp))) => scp
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn scopes_come_from_scope_else_scp() {
        let c = Caller::from_claims("a", claims(json!({"scope": "b  a b"})));
        assert_eq!(c.scopes(), ["a", "b"]);
        let c = Caller::from_claims("a", claims(json!({"scp": ["x", "y", 3]})));
        assert_eq!(c.scopes(), ["x", "y"]);
        let c = Caller::from_claims("a", claims(json!({"scp": "p q"})));
        assert_eq!(c.scopes(), ["p", "q"]);
        // `scope` wins when both are there.
        let c = Caller::from_claims("a", claims(json!({"scope": "s", "scp": ["t"]})));
        assert_eq!(c.scopes(), ["s"]);
        let c = Caller::from_claims("a", claims(json!({"scope": 7})));
        assert!(c.scopes().is_empty());
    }

    #[test]
    fn missing_scopes_keep_the_required_order() {
        let c = Caller::new("a").with_scopes(["b"]);
        let required = ["c".to_owned(), "b".to_owned(), "a".to_owned()];
        assert_eq!(c.missing(&required), ["c", "a"]);
        assert!(c.has_scope("b"));
        assert!(!c.has_scope("c"));
    }
}
