//! Tags: labels on tools ([`ToolBuilder::tags`](super::ToolBuilder::tags),
//! `#[haip_tool(tags = [..])]`) that choose which tools a server serves.
//! The rule for a tag is checked here at run time and by the macro at compile
//! time (`haip-macros/src/tags.rs`): keep the two alike.

use super::Tool;

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

/// Which tools a server serves by their tags
/// ([`ServerBuilder::only_tags`](crate::ServerBuilder::only_tags),
/// [`exclude_tags`](crate::ServerBuilder::exclude_tags)), applied once when
/// the server is built.
#[derive(Debug, Clone, Default)]
pub(crate) struct TagFilter {
    /// When not empty, a tool is served only if it has one of these.
    pub(crate) only: Vec<String>,
    /// A tool with one of these is never served (whatever `only` says).
    pub(crate) exclude: Vec<String>,
}

impl TagFilter {
    /// Whether it lets every tool through.
    pub(crate) fn is_empty(&self) -> bool {
        self.only.is_empty() && self.exclude.is_empty()
    }

    /// Whether `tool` is served.
    pub(crate) fn admits(&self, tool: &Tool) -> bool {
        let has = |set: &[String]| tool.tags().iter().any(|t| set.contains(t));
        !has(&self.exclude) && (self.only.is_empty() || has(&self.only))
    }

    /// The first tag of the filter that is not a tag at all (a typo no tool
    /// could match), with the setting that named it.
    pub(crate) fn invalid(&self) -> Option<(&'static str, &str)> {
        fn bad(set: &[String]) -> Option<&str> {
            set.iter().find(|t| !valid_tag(t)).map(String::as_str)
        }
        bad(&self.only)
            .map(|t| ("only_tags", t))
            .or_else(|| bad(&self.exclude).map(|t| ("exclude_tags", t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Context;
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

    #[test]
    fn only_needs_one_tag_and_exclude_wins() {
        let filter = |only: &[&str], exclude: &[&str]| TagFilter {
            only: only.iter().map(|t| t.to_string()).collect(),
            exclude: exclude.iter().map(|t| t.to_string()).collect(),
        };
        let (admin, files, both, none) = (
            tagged(&["admin"]),
            tagged(&["files"]),
            tagged(&["admin", "files"]),
            tagged(&[]),
        );
        let all = filter(&[], &[]);
        assert!(all.is_empty());
        assert!([&admin, &files, &both, &none].iter().all(|t| all.admits(t)));
        let only = filter(&["files", "x"], &[]);
        assert_eq!(
            [&admin, &files, &both, &none].map(|t| only.admits(t)),
            [false, true, true, false]
        );
        let exclude = filter(&[], &["admin"]);
        assert_eq!(
            [&admin, &files, &both, &none].map(|t| exclude.admits(t)),
            [false, true, false, true]
        );
        let mixed = filter(&["files"], &["admin"]);
        assert_eq!(
            [&admin, &files, &both, &none].map(|t| mixed.admits(t)),
            [false, true, false, false]
        );
        assert_eq!(mixed.invalid(), None);
        assert_eq!(
            filter(&["ok"], &["no good"]).invalid(),
            Some(("exclude_tags", "no good"))
        );
    }
}
