//! `tags = ["admin", ...]`: labels that choose which tools a server serves
//! (`ServerBuilder::only_tags`, `exclude_tags`). Part of the `attr` phase.
//! The rule for a tag is the runtime's (`haip/src/tool/tags.rs`), checked
//! here where the tag is written.

use syn::meta::ParseNestedMeta;
use syn::{Expr, ExprLit, Lit, LitStr};

use crate::errors::Errors;

/// What a tag may hold, said in errors.
pub(crate) const TAG_RULE: &str =
    "1 to 64 characters, each an ASCII letter, digit, `_`, `-`, `.`, `:` or `/`";

/// `tags = ["a", "b"]`: the valid tags, each mistake recorded where it is.
pub(crate) fn parse_tags(
    meta: &ParseNestedMeta<'_>,
    errors: &mut Errors,
) -> syn::Result<Vec<LitStr>> {
    const FORM: &str = "`tags` is a list of strings, e.g. `tags = [\"admin\"]`";
    if !meta.input.peek(syn::Token![=]) {
        errors.push(meta.error(FORM));
        // `tags(...)`: its group skipped, so the options after it are read.
        if meta.input.peek(syn::token::Paren) {
            meta.input.parse::<proc_macro2::Group>()?;
        }
        return Ok(Vec::new());
    }
    let mut tags = Vec::new();
    match meta.value()?.parse::<Expr>()? {
        Expr::Array(array) => {
            for tag in array.elems {
                match tag {
                    Expr::Lit(ExprLit {
                        lit: Lit::Str(tag), ..
                    }) => match tag_problem(&tag.value()) {
                        None => tags.push(tag),
                        Some(problem) => errors.push(syn::Error::new(
                            tag.span(),
                            format!("invalid tag {:?}: {problem} ({TAG_RULE})", tag.value()),
                        )),
                    },
                    other => errors.push(syn::Error::new_spanned(
                        other,
                        "a tag is a string, e.g. \"admin\"",
                    )),
                }
            }
        }
        other => errors.push(syn::Error::new_spanned(other, FORM)),
    }
    Ok(tags)
}

/// What is wrong with `tag`, if anything.
fn tag_problem(tag: &str) -> Option<&'static str> {
    if tag.is_empty() {
        return Some("it is empty");
    }
    if tag.chars().count() > 64 {
        return Some("it is over 64 characters");
    }
    if tag.contains(char::is_whitespace) {
        return Some("a tag holds no spaces; write each tag as its own string");
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/');
    (!tag.chars().all(allowed)).then_some("it has a character tags may not hold")
}

#[cfg(test)]
mod tests {
    use super::*;

    // How `tags = [...]` is read as part of `#[haip_tool(...)]`: the tests of
    // `Options::parse`, in `attr`.

    #[test]
    fn the_tag_rule() {
        assert_eq!(tag_problem("team/ops:v1.2_b-3"), None);
        assert_eq!(tag_problem(""), Some("it is empty"));
        assert_eq!(tag_problem(&"t".repeat(64)), None);
        assert_eq!(
            tag_problem(&"t".repeat(65)),
            Some("it is over 64 characters")
        );
        assert!(tag_problem("a b").is_some_and(|p| p.contains("no spaces")));
        assert_eq!(
            tag_problem("a,b"),
            Some("it has a character tags may not hold")
        );
    }
}
