//! Parsing the options of `#[haip_tool(...)]` and `#[haip::data(...)]`: the
//! first phase, before the function is looked at.

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::{Expr, ExprCall, ExprLit, Ident, Lit, LitStr, Path};

use crate::errors::Errors;
use crate::hints::{
    Hints, IconOption, TaskSupport, parse_hint, parse_icon, parse_scopes, parse_task,
};
use crate::keys::{Keys, TOOL_OPTIONS, key_of, skip_value};
use crate::tags::parse_tags;

/// The options of one `#[haip_tool(...)]`.
#[derive(Default)]
pub(crate) struct Options {
    /// `name = "..."`, as written: its rule is checked with the function's
    /// name in `check`.
    pub(crate) name: Option<LitStr>,
    pub(crate) description: Option<LitStr>,
    /// `title = "..."`: the name people are shown (HAIP.md §6.13).
    pub(crate) title: Option<LitStr>,
    /// The timeout in milliseconds, and the literal it came from.
    pub(crate) timeout: Option<(u64, LitStr)>,
    /// `read_only`, `destructive`, `idempotent`, `open_world` (MCP's hints).
    pub(crate) hints: Hints,
    /// Every `icon = "..."` / `icon(...)`, in order.
    pub(crate) icons: Vec<IconOption>,
    /// `task` / `task = "..."`: whether MCP calls may run as tasks; absent
    /// when not written (the runtime's default, forbidden, applies).
    pub(crate) task: Option<TaskSupport>,
    /// `scopes = [...]`: the OAuth scopes a caller needs (the valid ones).
    pub(crate) scopes: Vec<LitStr>,
    /// `tags = [...]`: labels that choose which tools a server serves (the
    /// valid ones).
    pub(crate) tags: Vec<LitStr>,
    pub(crate) krate: Option<Path>,
}

/// Other names people write for an option.
const ALIASES: &[(&str, &str)] = &[
    ("desc", "description"),
    ("doc", "description"),
    ("rename", "name"),
    ("icons", "icon"),
];

/// Options that may be written more than once.
const REPEATABLE: &[&str] = &["icon"];

impl Options {
    /// Parses the attribute's arguments, recording every mistake in `errors`.
    pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> Options {
        let mut options = Options::default();
        let mut position = 0;
        parse_keys(
            args,
            TOOL_OPTIONS,
            ALIASES,
            REPEATABLE,
            errors,
            |key, meta, errors| {
                position += 1;
                let hint = |errors: &mut Errors| parse_hint(meta, key, position, errors);
                match key {
                    "name" => options.name = parse_string(meta, key, errors)?,
                    "description" => options.description = parse_string(meta, key, errors)?,
                    "title" => options.title = parse_string(meta, key, errors)?,
                    "read_only" => options.hints.read_only = hint(errors)?,
                    "destructive" => options.hints.destructive = hint(errors)?,
                    "idempotent" => options.hints.idempotent = hint(errors)?,
                    "open_world" => options.hints.open_world = hint(errors)?,
                    "icon" => options.icons.extend(parse_icon(meta, errors)?),
                    "task" => options.task = parse_task(meta, errors)?,
                    "scopes" => options.scopes = parse_scopes(meta, errors)?,
                    "tags" => options.tags = parse_tags(meta, errors)?,
                    "timeout" => match meta.value()?.parse::<Expr>()? {
                        Expr::Lit(ExprLit {
                            lit: Lit::Str(lit), ..
                        }) => match parse_duration(&lit.value()) {
                            Ok(ms) => options.timeout = Some((ms, lit)),
                            Err(message) => errors.push(syn::Error::new(lit.span(), message)),
                        },
                        other => errors.push(syn::Error::new_spanned(
                            &other,
                            timeout_not_a_string(&other),
                        )),
                    },
                    "crate" => options.krate = parse_crate(meta, errors)?,
                    _ => return Ok(false),
                }
                Ok(true)
            },
        );
        options
    }

    /// The crate root generated code names (`::haip` unless `crate = "..."`).
    pub(crate) fn crate_path(&self) -> Path {
        crate_path(self.krate.as_ref())
    }

    /// The tool's name: `name = "..."`, else the function's name without
    /// `r#`; with the token it comes from.
    pub(crate) fn tool_name(&self, func: &Ident) -> ToolName {
        match &self.name {
            Some(lit) => ToolName {
                value: lit.value(),
                span: lit.span(),
            },
            None => ToolName {
                value: func.to_string().trim_start_matches("r#").to_owned(),
                span: func.span(),
            },
        }
    }
}

/// The name a tool is served under, and the user's token it comes from (the
/// `name = "..."` literal or the function's identifier).
pub(crate) struct ToolName {
    pub(crate) value: String,
    pub(crate) span: Span,
}

/// The options of one `#[haip::data(...)]`: `crate = "..."` only.
#[derive(Default)]
pub(crate) struct DataOptions {
    pub(crate) krate: Option<Path>,
}

impl DataOptions {
    /// Parses the attribute's arguments, recording every mistake in `errors`.
    pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> DataOptions {
        let mut options = DataOptions::default();
        parse_keys(args, &["crate"], &[], &[], errors, |key, meta, errors| {
            if key != "crate" {
                return Ok(false);
            }
            options.krate = parse_crate(meta, errors)?;
            Ok(true)
        });
        options
    }

    /// The crate root generated code names (`::haip` unless `crate = "..."`).
    pub(crate) fn crate_path(&self) -> Path {
        crate_path(self.krate.as_ref())
    }
}

fn crate_path(krate: Option<&Path>) -> Path {
    krate.cloned().unwrap_or_else(|| syn::parse_quote!(::haip))
}

/// The `crate = "..."` values serde's and schemars' derives need:
/// `"<krate>::__private::serde"` and `"<krate>::__private::schemars"`.
pub(crate) fn derive_crates(krate: &Path) -> (LitStr, LitStr) {
    let root = path_text(krate);
    (
        LitStr::new(&format!("{root}::__private::serde"), Span::call_site()),
        LitStr::new(&format!("{root}::__private::schemars"), Span::call_site()),
    )
}

/// A path as written in a string attribute: `::haip`, `my_haip`.
pub(crate) fn path_text(path: &Path) -> String {
    quote::quote!(#path).to_string().replace(' ', "")
}

/// Walks `key = value` arguments: a repeated key is an error (unless it is
/// `repeatable`), `handle` takes the known ones (returning `false` for an
/// unknown key, reported with `known`).
fn parse_keys(
    args: TokenStream,
    known: &[&str],
    aliases: &[(&str, &str)],
    repeatable: &[&str],
    errors: &mut Errors,
    mut handle: impl FnMut(&str, &ParseNestedMeta<'_>, &mut Errors) -> syn::Result<bool>,
) {
    let mut seen = Keys::default();
    let mut found = Vec::new();
    let parser = syn::meta::parser(|meta| {
        let key = key_of(&meta.path);
        if !repeatable.contains(&key.as_str())
            && let Some(twice) = seen.again(&key, &meta.path)
        {
            found.push(twice);
            skip_value(&meta)?;
            return Ok(());
        }
        let mut inner = Errors::default();
        let handled = handle(&key, &meta, &mut inner)?;
        found.extend(inner.into_vec());
        if !handled {
            found.push(syn::Error::new_spanned(
                &meta.path,
                crate::errors::unknown("argument", &key, known, aliases),
            ));
            skip_value(&meta)?;
        }
        Ok(())
    });
    let result = syn::parse::Parser::parse2(parser, args);
    for error in found {
        errors.push(error);
    }
    if let Err(e) = result {
        errors.push(e);
    }
}

/// `key = "..."`; any other value is recorded in `errors`, at the value
/// (and the option left out), so the other options are still read.
fn parse_string(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<LitStr>> {
    match meta.value()?.parse::<Expr>()? {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(Some(lit)),
        other => {
            errors.push(syn::Error::new_spanned(
                other,
                format!("`{key}` is a string literal: `{key} = \"...\"`"),
            ));
            Ok(None)
        }
    }
}

/// What to write instead of a `timeout` that is not a string: the same
/// duration as one, when it can be read (`30` is taken as seconds).
fn timeout_not_a_string(value: &Expr) -> String {
    let int = |e: &Expr| match e {
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => i.base10_parse::<u64>().ok(),
        _ => None,
    };
    let same = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(_), ..
        }) => int(value).map(|n| format!("{n}s")),
        Expr::Lit(ExprLit {
            lit: Lit::Float(f), ..
        }) => f
            .base10_parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e12)
            .map(|s| format!("{}ms", (s * 1000.0).round() as u64)),
        Expr::Call(ExprCall { func, args, .. }) if args.len() == 1 => {
            let unit = match &**func {
                Expr::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
                _ => None,
            };
            let n = args.first().and_then(int);
            match (unit.as_deref(), n) {
                (Some("from_secs"), Some(n)) => Some(format!("{n}s")),
                (Some("from_millis"), Some(n)) => Some(format!("{n}ms")),
                (Some("from_mins"), Some(n)) => Some(format!("{n}min")),
                _ => None,
            }
        }
        _ => None,
    };
    match same {
        Some(text) => format!(
            "`timeout` is a string with its unit: write `timeout = \"{text}\"` (units: `ms`, `s`, `min`)"
        ),
        None => "`timeout` is a string: a whole number followed by `ms`, `s` or `min`, e.g. `timeout = \"30s\"`".to_owned(),
    }
}

/// `crate = "path"`.
fn parse_crate(meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<Option<Path>> {
    let lit: LitStr = meta.value()?.parse()?;
    match lit.parse::<Path>() {
        Ok(path) => Ok(Some(path)),
        Err(_) => {
            errors.push(syn::Error::new(
                lit.span(),
                format!(
                    "`crate` must be a path, e.g. \"::haip\"; got \"{}\"",
                    lit.value()
                ),
            ));
            Ok(None)
        }
    }
}

/// Parses `"30s"`, `"500ms"`, `"2min"` (also `m`, `h`) into milliseconds.
pub(crate) fn parse_duration(text: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "invalid timeout \"{text}\": expected a whole number followed by `ms`, `s` or `min`, e.g. \"30s\""
        )
    };
    let text_trim = text.trim();
    let split = text_trim
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(bad)?;
    let (digits, unit) = text_trim.split_at(split);
    let value: u64 = digits.parse().map_err(|_| bad())?;
    let factor = match unit.trim() {
        "ms" => 1,
        "s" => 1000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        _ => return Err(bad()),
    };
    let ms = value.checked_mul(factor).ok_or_else(bad)?;
    if ms == 0 {
        return Err(format!(
            "invalid timeout \"{text}\": must be greater than zero"
        ));
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hints::{Flag, Theme};
    use crate::tags::TAG_RULE;
    use quote::quote;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(30_000));
        assert_eq!(parse_duration("250ms"), Ok(250));
        assert_eq!(parse_duration("2min"), Ok(120_000));
        assert_eq!(parse_duration("1h"), Ok(3_600_000));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("1.5s").is_err());
        assert!(parse_duration("30x").is_err());
    }

    #[test]
    fn options_collect_every_mistake() {
        let mut errors = Errors::default();
        let o = Options::parse(
            quote!(
                name = "ok_name",
                nmae = "x",
                timeout = "5s",
                timeout = "6s",
                description = "d"
            ),
            &mut errors,
        );
        assert_eq!(o.name.unwrap().value(), "ok_name");
        assert_eq!(o.timeout.unwrap().0, 5000);
        assert_eq!(o.description.unwrap().value(), "d");
        let messages = errors.messages();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].starts_with("unknown argument `nmae`"));
        assert_eq!(messages[1], "`timeout` set more than once");
    }

    #[test]
    fn data_takes_only_a_crate() {
        let mut errors = Errors::default();
        let o = DataOptions::parse(quote!(crate = "my_haip"), &mut errors);
        assert!(errors.is_empty());
        let krate = o.krate.as_ref().unwrap();
        assert_eq!(quote!(#krate).to_string(), "my_haip");
        let (serde, schemars) = derive_crates(&o.crate_path());
        assert_eq!(serde.value(), "my_haip::__private::serde");
        assert_eq!(schemars.value(), "my_haip::__private::schemars");
        let o = DataOptions::parse(quote!(), &mut errors);
        assert_eq!(
            derive_crates(&o.crate_path()).0.value(),
            "::haip::__private::serde"
        );
        let mut errors = Errors::default();
        DataOptions::parse(quote!(crate = "a", crate = "b", name = "x"), &mut errors);
        let messages = errors.messages();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert_eq!(messages[0], "`crate` set more than once");
        assert_eq!(
            messages[1],
            "unknown argument `name`; expected one of: `crate`"
        );
    }

    #[test]
    fn bad_values_are_reported() {
        let mut errors = Errors::default();
        let o = Options::parse(
            quote!(name = "bad name", timeout = "forever", crate = "1x"),
            &mut errors,
        );
        assert!(o.timeout.is_none());
        assert!(o.krate.is_none());
        assert_eq!(errors.messages().len(), 2, "{:?}", errors.messages());
        // The name is kept as written: its rule is `check`'s.
        assert_eq!(o.name.unwrap().value(), "bad name");
    }

    #[test]
    fn values_of_the_wrong_kind_say_what_to_write() {
        let mut errors = Errors::default();
        let o = Options::parse(
            quote!(
                timeout = 30,
                name = add,
                title = "Add",
                description = 3,
                readOnlyHint
            ),
            &mut errors,
        );
        assert_eq!(
            o.title.unwrap().value(),
            "Add",
            "the other options are read"
        );
        assert!(o.name.is_none() && o.description.is_none() && o.timeout.is_none());
        assert_eq!(
            errors.messages(),
            [
                "`timeout` is a string with its unit: write `timeout = \"30s\"` (units: `ms`, `s`, `min`)",
                "`name` is a string literal: `name = \"...\"`",
                "`description` is a string literal: `description = \"...\"`",
                "unknown argument `readOnlyHint`: did you mean `read_only`? (haip's name for MCP's `readOnlyHint`)",
            ]
        );
        let timeout = |value: proc_macro2::TokenStream| {
            let mut errors = Errors::default();
            Options::parse(quote!(timeout = #value), &mut errors);
            errors.messages().remove(0)
        };
        assert!(timeout(quote!(1.5)).contains("`timeout = \"1500ms\"`"));
        assert!(timeout(quote!(Duration::from_secs(90))).contains("`timeout = \"90s\"`"));
        assert!(
            timeout(quote!(std::time::Duration::from_millis(250)))
                .contains("`timeout = \"250ms\"`")
        );
        assert_eq!(
            timeout(quote!(LIMIT)),
            "`timeout` is a string: a whole number followed by `ms`, `s` or `min`, e.g. `timeout = \"30s\"`"
        );
    }

    #[test]
    fn the_tool_name_comes_from_the_option_or_the_function() {
        let mut errors = Errors::default();
        let func: Ident = syn::parse_quote!(r#type);
        let name = Options::default().tool_name(&func);
        assert_eq!(name.value, "type");
        let o = Options::parse(quote!(name = "files.read"), &mut errors);
        assert_eq!(o.tool_name(&func).value, "files.read");
        assert!(errors.is_empty());
    }

    // The options parsed in `hints`: MCP's hints, icons, task support.

    #[test]
    fn title_hints_and_icons_are_parsed() {
        let mut errors = Errors::default();
        let o = Options::parse(
            quote!(
                title = "Delete a repository",
                read_only = false,
                destructive,
                idempotent = true,
                icon = "https://example.com/trash.svg",
                icon(
                    src = "data:image/png;base64,AAAA",
                    mime_type = "image/png",
                    sizes = ["48x48", "any"],
                    theme = "dark"
                )
            ),
            &mut errors,
        );
        assert!(errors.is_empty(), "{:?}", errors.messages());
        assert_eq!(o.title.unwrap().value(), "Delete a repository");
        let flag = |f: &Option<Flag>| f.as_ref().map(|f| (f.value, f.position));
        assert_eq!(flag(&o.hints.read_only), Some((false, 2)));
        assert_eq!(flag(&o.hints.destructive), Some((true, 3)));
        assert_eq!(flag(&o.hints.idempotent), Some((true, 4)));
        assert_eq!(flag(&o.hints.open_world), None);
        assert_eq!(o.icons.len(), 2);
        assert_eq!(o.icons[0].src.value(), "https://example.com/trash.svg");
        assert!(o.icons[0].mime_type.is_none() && o.icons[0].sizes.is_empty());
        assert_eq!(o.icons[0].theme, None);
        let full = &o.icons[1];
        assert_eq!(full.src.value(), "data:image/png;base64,AAAA");
        assert_eq!(full.mime_type.as_ref().unwrap().value(), "image/png");
        let sizes: Vec<String> = full.sizes.iter().map(LitStr::value).collect();
        assert_eq!(sizes, ["48x48", "any"]);
        assert_eq!(full.theme, Some(Theme::Dark));
    }

    #[test]
    fn bad_hints_and_icons_are_reported_together() {
        let mut errors = Errors::default();
        let o = Options::parse(
            quote!(
                read_only = "yes",
                open_world(true),
                destructive,
                destructive = false,
                icon,
                icon(mime_type = "image/png"),
                icon(
                    src = "a.png",
                    theme = "sepia",
                    sizes = ["big", 48],
                    colour = "red"
                ),
                icon(src = "b.png", src = "c.png"),
                icon = "",
                icon(src = "ok.png", sizes = "48x48"),
                nmae = "x"
            ),
            &mut errors,
        );
        assert!(o.hints.read_only.is_none() && o.hints.open_world.is_none());
        assert!(o.hints.destructive.unwrap().value, "the first is kept");
        assert!(o.icons.is_empty(), "no icon with a mistake is kept");
        let messages = errors.messages();
        let expected = [
            "`read_only` is `true` or `false` (or `read_only` alone, for `true`)",
            "`open_world` takes no arguments: write `open_world`, `open_world = true` or `open_world = false`",
            "`destructive` set more than once",
            "`icon` needs a source: `icon = \"https://...\"` or `icon(src = \"...\", mime_type = \"...\", sizes = [\"48x48\"], theme = \"dark\")`",
            "`icon(...)` needs `src = \"...\"`: the icon's URL",
            "invalid icon theme \"sepia\": expected \"light\" or \"dark\"",
            "invalid icon size \"big\": expected \"WxH\" (e.g. \"48x48\") or \"any\"",
            "an icon size is a string: \"48x48\" or \"any\"",
            "unknown icon option `colour`; expected one of: `src`, `mime_type`, `sizes`, `theme`",
            "`src` set more than once in `icon(...)`",
            "an icon's `src` cannot be empty: give its URL (`https:` or `data:`)",
            "`sizes` is a list of strings, e.g. `sizes = [\"48x48\", \"96x96\"]`",
        ];
        assert_eq!(messages[..expected.len()], expected, "{messages:#?}");
        assert_eq!(messages.len(), expected.len() + 1, "{messages:#?}");
        assert_eq!(
            messages[expected.len()],
            "unknown argument `nmae`: did you mean `name`?"
        );
    }

    fn task_of(args: proc_macro2::TokenStream) -> (Option<TaskSupport>, Vec<String>) {
        let mut errors = Errors::default();
        let o = Options::parse(args, &mut errors);
        (o.task, errors.messages())
    }

    #[test]
    fn task_support_is_parsed() {
        for (args, expected) in [
            (quote!(task), TaskSupport::Optional),
            (quote!(task = "optional"), TaskSupport::Optional),
            (quote!(task = "required"), TaskSupport::Required),
            (quote!(task = "forbidden"), TaskSupport::Forbidden),
            (
                quote!(title = "Build a report", task = "required", destructive),
                TaskSupport::Required,
            ),
        ] {
            let (task, errors) = task_of(args.clone());
            assert!(errors.is_empty(), "{args}: {errors:?}");
            assert_eq!(task, Some(expected), "{args}");
        }
        assert_eq!(task_of(quote!(title = "t")), (None, Vec::new()));
        assert_eq!(TaskSupport::Optional.variant(), "Optional");
        assert_eq!(TaskSupport::Required.variant(), "Required");
        assert_eq!(TaskSupport::Forbidden.variant(), "Forbidden");
    }

    #[test]
    fn bad_task_support_is_reported() {
        let values = "\"optional\", \"required\" or \"forbidden\"";
        let not_a_string =
            format!("`task` is a string: {values} (or `task` alone, for \"optional\")");
        for (args, message) in [
            (
                quote!(task = "always"),
                format!("unknown task support \"always\": expected {values}"),
            ),
            (
                quote!(task = "Required"),
                format!("unknown task support \"Required\": expected {values}"),
            ),
            (quote!(task = true), not_a_string.clone()),
            (quote!(task = 3), not_a_string.clone()),
            (quote!(task = optional), not_a_string),
            (
                quote!(task("required")),
                format!(
                    "`task` takes no arguments: write `task` (for \"optional\") or \
                     `task = \"...\"` with {values}"
                ),
            ),
        ] {
            let (task, errors) = task_of(args.clone());
            assert_eq!(task, None, "{args}");
            assert_eq!(errors, [message], "{args}");
        }
        // Given twice: an error at the second, the first kept; parsing goes on.
        let (task, errors) = task_of(quote!(task, task = "required", nmae = "x"));
        assert_eq!(task, Some(TaskSupport::Optional));
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert_eq!(errors[0], "`task` set more than once");
        assert!(
            errors[1].starts_with("unknown argument `nmae`"),
            "{errors:?}"
        );
    }

    // The options parsed in `tags`.

    fn tags_of(args: proc_macro2::TokenStream) -> (Vec<String>, Vec<String>) {
        let mut errors = Errors::default();
        let o = Options::parse(args, &mut errors);
        (
            o.tags.iter().map(LitStr::value).collect(),
            errors.messages(),
        )
    }

    #[test]
    fn tags_are_parsed() {
        let (tags, errors) = tags_of(quote!(
            tags = ["admin", "files:write", "team/ops", "v1.2_b-3"]
        ));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(tags, ["admin", "files:write", "team/ops", "v1.2_b-3"]);
        let (tags, errors) = tags_of(quote!(tags = [], title = "t"));
        assert!(tags.is_empty() && errors.is_empty(), "{errors:?}");
    }

    #[test]
    fn every_bad_tag_is_reported_and_the_good_ones_kept() {
        let long = "t".repeat(65);
        let (tags, errors) = tags_of(quote!(tags = ["ok", "two words", "", "a,b", #long, 7]));
        assert_eq!(tags, ["ok"]);
        let rule = format!("({TAG_RULE})");
        assert_eq!(
            errors,
            [
                format!(
                    "invalid tag \"two words\": a tag holds no spaces; write each tag as its own \
                     string {rule}"
                ),
                format!("invalid tag \"\": it is empty {rule}"),
                format!("invalid tag \"a,b\": it has a character tags may not hold {rule}"),
                format!("invalid tag \"{long}\": it is over 64 characters {rule}"),
                "a tag is a string, e.g. \"admin\"".to_owned(),
            ]
        );
        let (_, errors) = tags_of(quote!(tags = "admin"));
        assert_eq!(
            errors,
            ["`tags` is a list of strings, e.g. `tags = [\"admin\"]`"]
        );
        let (_, errors) = tags_of(quote!(tags("admin"), nmae = "x"));
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert_eq!(
            errors[0],
            "`tags` is a list of strings, e.g. `tags = [\"admin\"]`"
        );
        assert!(
            errors[1].starts_with("unknown argument `nmae`"),
            "{errors:?}"
        );
    }
}
