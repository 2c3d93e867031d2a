//! The keys of an attribute's arguments, read the same way in every attribute
//! the macros take (`#[haip_tool(...)]` and its `icon(...)`, `#[haip(...)]`
//! on a parameter, `#[haip::data(...)]`): a key's name, a key given twice,
//! and passing over a value that is not read. Part of the `attr` phase, below
//! `attr`, `hints` and `tags`; later phases use it too.

use syn::meta::ParseNestedMeta;

/// The arguments `#[haip_tool(...)]` takes, for "did you mean" when one is
/// misspelt (`attr`, and the tests of `errors`).
pub(crate) const TOOL_OPTIONS: &[&str] = &[
    "name",
    "description",
    "title",
    "timeout",
    "read_only",
    "destructive",
    "idempotent",
    "open_world",
    "icon",
    "task",
    "scopes",
    "tags",
    "crate",
];

/// A key as written: `name`, `r#type`, `a::b` (no spaces).
pub(crate) fn key_of(path: &syn::Path) -> String {
    quote::ToTokens::to_token_stream(path)
        .to_string()
        .replace(' ', "")
}

/// The keys given so far in one list of arguments, to tell a key given twice.
#[derive(Default)]
pub(crate) struct Keys {
    seen: Vec<String>,
    /// The list they are in, when it is inside another (`icon(...)`), named
    /// in the error.
    inside: Option<&'static str>,
}

impl Keys {
    /// The keys of a list inside another: `Keys::inside("icon(...)")`.
    pub(crate) fn inside(list: &'static str) -> Keys {
        Keys {
            seen: Vec::new(),
            inside: Some(list),
        }
    }

    /// Records `key`, written at `path`; when it was given before, the error
    /// to report there instead (the first one is the one kept).
    #[must_use]
    pub(crate) fn again(&mut self, key: &str, path: &syn::Path) -> Option<syn::Error> {
        if !self.seen.iter().any(|k| k == key) {
            self.seen.push(key.to_owned());
            return None;
        }
        let message = match self.inside {
            Some(list) => format!("`{key}` set more than once in `{list}`"),
            None => format!("`{key}` set more than once"),
        };
        Some(syn::Error::new_spanned(path, message))
    }
}

/// Consumes `= value` after a rejected key so parsing can go on.
pub(crate) fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        meta.value()?.parse::<syn::Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.parse_nested_meta(|inner| skip_value(&inner))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_given_again_is_an_error_at_it() {
        let path = |s: &str| syn::parse_str::<syn::Path>(s).unwrap();
        assert_eq!(key_of(&path("r#type")), "r#type");
        assert_eq!(key_of(&path("a :: b")), "a::b");
        let mut keys = Keys::default();
        assert!(keys.again("name", &path("name")).is_none());
        assert!(keys.again("title", &path("title")).is_none());
        let twice = keys.again("name", &path("name")).expect("given twice");
        assert_eq!(twice.to_string(), "`name` set more than once");
        let mut keys = Keys::inside("icon(...)");
        assert!(keys.again("src", &path("src")).is_none());
        let twice = keys.again("src", &path("src")).expect("given twice");
        assert_eq!(twice.to_string(), "`src` set more than once in `icon(...)`");
    }
}
