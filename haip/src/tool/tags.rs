//! Tags: labels on tools ([`ToolBuilder::tags`](super::ToolBuilder::tags),
//! `#[haip_tool(tags = [..])]`) that choose which tools a server serves.
//! The rule for a tag is checked here at run time and by the macro at compile
//! time (`haip-macros/src/tags.rs`): keep the two alike.

/// The longest tag, in characters.
const MAX_TAG_CHARS: usize = 64;

/// What a tag may hold, said in errors.
pub(crate) const TAG_RULE: &str =
    "1 to 64 characters, each an ASCII letter, digit, `_`, `-`, `.`, `:` or `/`";

/// Whether `tag` follows the rule ([`TAG_RULE`]).
pub(crate) fn valid_tag(tag: &str) -> bool {
    (1..=MAX_TAG_CHARS).contains(&tag.len())
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':' | b'/'))
}

/// `tags` sorted without duplicates, or why one of them is not a tag.
pub(crate) fn checked(mut tags: Vec<String>) -> Result<Vec<String>, String> {
    if let Some(bad) = tags.iter().find(|t| !valid_tag(t)) {
        return Err(format!("tag {bad:?} is not valid: {TAG_RULE}"));
    }
    tags.sort_unstable();
    tags.dedup();
    Ok(tags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Context, Tool};
    use serde_json::Value;

    fn tagged(tags: &[&str]) -> Tool {
        Tool::builder("t")
            .tags(tags.iter().copied())
            .handler(|_: Value, _: Context| async { Ok(Value::Null) })
            .build()
            .unwrap()
    }

    #[test]
    fn tags_are_checked_sorted_and_deduplicated() {
        assert_eq!(
            tagged(&["b", "a:x", "b", "team/ops"]).tags(),
            ["a:x", "b", "team/ops"]
        );
        for good in ["admin", "files.read", "v2_beta-1", &"t".repeat(64)] {
            assert!(valid_tag(good), "{good}");
        }
        for bad in ["", "two words", "ümlaut", "a,b", &"t".repeat(65)] {
            assert!(!valid_tag(bad), "{bad}");
            let err = Tool::builder("t")
                .tags([bad])
                .handler(|_: Value, _: Context| async { Ok(Value::Null) })
                .build()
                .unwrap_err();
            assert!(err.to_string().contains("is not valid: 1 to 64"), "{err}");
        }
    }
}
