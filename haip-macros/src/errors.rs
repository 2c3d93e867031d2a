//! The error collector every phase writes to: mistakes are gathered, not
//! returned one at a time, so one build reports all of them.

/// Collected errors, combined into one `compile_error!` stream at the end.
#[derive(Default)]
pub(crate) struct Errors {
    errors: Vec<syn::Error>,
}

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        self.errors.push(error);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub(crate) fn into_vec(self) -> Vec<syn::Error> {
        self.errors
    }

    pub(crate) fn to_compile_errors(&self) -> proc_macro2::TokenStream {
        self.errors
            .iter()
            .map(syn::Error::to_compile_error)
            .collect()
    }

    #[cfg(test)]
    pub(crate) fn messages(&self) -> Vec<String> {
        self.errors.iter().map(ToString::to_string).collect()
    }
}

/// The message for an option `key` that is none of `known` (each written
/// without backticks), in `what` ("argument", "icon option"): the option it
/// most likely stands for, or the list.
pub(crate) fn unknown(what: &str, key: &str, known: &[&str], aliases: &[(&str, &str)]) -> String {
    match did_you_mean(key, known, aliases) {
        Some(meant) => {
            let snake = snake_case(key);
            let mcp = if snake.ends_with("_hint") && known.contains(&meant) {
                format!(" (haip's name for MCP's `{}Hint`)", camel_case(meant))
            } else {
                String::new()
            };
            format!("unknown {what} `{key}`: did you mean `{meant}`?{mcp}")
        }
        None => format!("unknown {what} `{key}`; expected one of: {}", list(known)),
    }
}

/// "`a`, `b`, `c`".
pub(crate) fn list(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The name of `known` that `key` most likely stands for: an alias, the same
/// name in snake case and without MCP's `Hint` (`readOnlyHint`,
/// `destructive_hint`, `readonly`), or the one name a typo or two away.
pub(crate) fn did_you_mean<'a>(
    key: &str,
    known: &[&'a str],
    aliases: &[(&str, &'a str)],
) -> Option<&'a str> {
    let snake = snake_case(key);
    if let Some((_, meant)) = aliases.iter().find(|(alias, _)| *alias == snake) {
        return Some(meant);
    }
    let bare = snake.strip_suffix("_hint").unwrap_or(&snake);
    let squash = |s: &str| s.replace('_', "");
    if let Some(meant) = known
        .iter()
        .find(|k| **k == snake || **k == bare || squash(k) == squash(bare))
    {
        return Some(meant);
    }
    let limit = if bare.chars().count() <= 4 { 1 } else { 2 };
    let mut best: Option<(usize, &str)> = None;
    let mut tied = false;
    for k in known {
        let d = distance(bare, k);
        if d > limit {
            continue;
        }
        match best {
            Some((b, _)) if d > b => {}
            Some((b, _)) if d == b => tied = true,
            _ => {
                best = Some((d, k));
                tied = false;
            }
        }
    }
    best.filter(|_| !tied).map(|(_, k)| k)
}

/// `readOnlyHint` → `read_only_hint`.
fn snake_case(key: &str) -> String {
    let mut out = String::new();
    for (i, c) in key.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `read_only` → `readOnly`.
fn camel_case(name: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Edits (insert, delete, replace, swap two neighbours) from `a` to `b`.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::keys::TOOL_OPTIONS as KNOWN;

    #[test]
    fn mcps_names_and_typos_are_recognised() {
        let meant = |key| did_you_mean(key, KNOWN, &[("desc", "description")]);
        assert_eq!(meant("readOnlyHint"), Some("read_only"));
        assert_eq!(meant("destructive_hint"), Some("destructive"));
        assert_eq!(meant("idempotentHint"), Some("idempotent"));
        assert_eq!(meant("openWorldHint"), Some("open_world"));
        assert_eq!(meant("readonly"), Some("read_only"));
        assert_eq!(meant("nmae"), Some("name"));
        assert_eq!(meant("timout"), Some("timeout"));
        assert_eq!(meant("tag"), Some("tags"));
        assert_eq!(meant("scope"), Some("scopes"));
        assert_eq!(meant("desc"), Some("description"));
        assert_eq!(meant("colour"), None);
        assert_eq!(meant("x"), None);
    }

    #[test]
    fn messages_suggest_or_list() {
        assert_eq!(
            unknown("argument", "readOnlyHint", KNOWN, &[]),
            "unknown argument `readOnlyHint`: did you mean `read_only`? (haip's name for MCP's `readOnlyHint`)"
        );
        assert_eq!(
            unknown("argument", "destructive_hint", KNOWN, &[]),
            "unknown argument `destructive_hint`: did you mean `destructive`? (haip's name for MCP's `destructiveHint`)"
        );
        assert_eq!(
            unknown("argument", "timout", KNOWN, &[]),
            "unknown argument `timout`: did you mean `timeout`?"
        );
        assert_eq!(
            unknown("option", "zzz", &["a", "b"], &[]),
            "unknown option `zzz`; expected one of: `a`, `b`"
        );
    }
}
