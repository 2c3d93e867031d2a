//! The options of `#[haip_tool(...)]` that tell clients how a tool behaves
//! and what it looks like (HAIP.md §6.13): MCP's hints (`read_only`,
//! `destructive`, `idempotent`, `open_world`), icons, and whether its MCP
//! calls may run as tasks (`task`). Part of the `attr` phase: `attr` walks the
//! arguments and hands these keys here.

use proc_macro2::Span;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, LitStr};

use crate::errors::Errors;
use crate::keys::{Keys, key_of, skip_value};

/// The MCP annotation hints, each as written (`read_only` or
/// `read_only = true/false`); absent when not written.
#[derive(Default)]
pub(crate) struct Hints {
    pub(crate) read_only: Option<Flag>,
    pub(crate) destructive: Option<Flag>,
    pub(crate) idempotent: Option<Flag>,
    pub(crate) open_world: Option<Flag>,
}

/// One hint as written.
pub(crate) struct Flag {
    pub(crate) value: bool,
    /// The option's key (`destructive`), where errors about it point.
    pub(crate) span: Span,
    /// Its place among the attribute's arguments, to tell which of two
    /// options came later.
    pub(crate) position: usize,
}

/// One `icon = "src"` or `icon(src = "...", mime_type = "...", sizes = [...],
/// theme = "light" | "dark")`.
pub(crate) struct IconOption {
    pub(crate) src: LitStr,
    pub(crate) mime_type: Option<LitStr>,
    pub(crate) sizes: Vec<LitStr>,
    pub(crate) theme: Option<Theme>,
}

/// An icon's `theme`, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Theme {
    Light,
    Dark,
}

const ICON_KNOWN: &[&str] = &["src", "mime_type", "sizes", "theme"];

/// Other names people write for an icon's options.
const ICON_ALIASES: &[(&str, &str)] = &[("url", "src"), ("href", "src"), ("mime", "mime_type")];

/// `task` / `task = "..."`: whether a tool's MCP calls may run as tasks (the
/// runtime's `TaskSupport`, of the same name and variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskSupport {
    Forbidden,
    Optional,
    Required,
}

impl TaskSupport {
    /// The runtime's variant: `haip::TaskSupport::<variant>`.
    pub(crate) fn variant(self) -> &'static str {
        match self {
            TaskSupport::Forbidden => "Forbidden",
            TaskSupport::Optional => "Optional",
            TaskSupport::Required => "Required",
        }
    }
}

const TASK_VALUES: &str = "\"optional\", \"required\" or \"forbidden\"";

/// A hint as written at `position` among the attribute's arguments; `None`
/// (with the mistake in `errors`) when its value is not a boolean.
pub(crate) fn parse_hint(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    position: usize,
    errors: &mut Errors,
) -> syn::Result<Option<Flag>> {
    Ok(parse_flag(meta, key, errors)?.map(|value| Flag {
        value,
        span: meta.path.span(),
        position,
    }))
}

/// A hint: `key` alone is `true`; `key = true` or `key = false`. Anything
/// else is recorded in `errors` (and the hint left out).
fn parse_flag(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<bool>> {
    if !meta.input.peek(syn::Token![=]) {
        if meta.input.peek(syn::token::Paren) {
            errors.push(meta.error(format!(
                "`{key}` takes no arguments: write `{key}`, `{key} = true` or `{key} = false`"
            )));
            skip_value(meta)?;
            return Ok(None);
        }
        return Ok(Some(true));
    }
    match meta.value()?.parse::<Expr>()? {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(b), ..
        }) => Ok(Some(b.value)),
        other => {
            errors.push(syn::Error::new_spanned(
                other,
                format!("`{key}` is `true` or `false` (or `{key}` alone, for `true`)"),
            ));
            Ok(None)
        }
    }
}

/// `task` alone is `"optional"`; `task = "optional"`, `"required"` or
/// `"forbidden"` (MCP's names). Anything else is recorded in `errors`, at the
/// value (and the option left out).
pub(crate) fn parse_task(
    meta: &ParseNestedMeta<'_>,
    errors: &mut Errors,
) -> syn::Result<Option<TaskSupport>> {
    if !meta.input.peek(syn::Token![=]) {
        if meta.input.peek(syn::token::Paren) {
            errors.push(meta.error(format!(
                "`task` takes no arguments: write `task` (for \"optional\") or `task = \"...\"` with {TASK_VALUES}"
            )));
            // Whatever is inside, `task("required")` included, is passed over.
            let inside;
            syn::parenthesized!(inside in meta.input);
            inside.parse::<proc_macro2::TokenStream>()?;
            return Ok(None);
        }
        return Ok(Some(TaskSupport::Optional));
    }
    match meta.value()?.parse::<Expr>()? {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => match lit.value().as_str() {
            "optional" => Ok(Some(TaskSupport::Optional)),
            "required" => Ok(Some(TaskSupport::Required)),
            "forbidden" => Ok(Some(TaskSupport::Forbidden)),
            other => {
                errors.push(syn::Error::new(
                    lit.span(),
                    format!("unknown task support {other:?}: expected {TASK_VALUES}"),
                ));
                Ok(None)
            }
        },
        other => {
            errors.push(syn::Error::new_spanned(
                other,
                format!("`task` is a string: {TASK_VALUES} (or `task` alone, for \"optional\")"),
            ));
            Ok(None)
        }
    }
}

/// `icon = "src"` or `icon(src = "...", mime_type = "...", sizes = ["48x48"],
/// theme = "dark")`; `None` (with the mistakes in `errors`) when it cannot be
/// used.
pub(crate) fn parse_icon(
    meta: &ParseNestedMeta<'_>,
    errors: &mut Errors,
) -> syn::Result<Option<IconOption>> {
    if meta.input.peek(syn::Token![=]) {
        let src: LitStr = meta.value()?.parse()?;
        return Ok(check_src(src, errors).map(|src| IconOption {
            src,
            mime_type: None,
            sizes: Vec::new(),
            theme: None,
        }));
    }
    if !meta.input.peek(syn::token::Paren) {
        errors.push(meta.error(
            "`icon` needs a source: `icon = \"https://...\"` or `icon(src = \"...\", mime_type = \"...\", sizes = [\"48x48\"], theme = \"dark\")`",
        ));
        return Ok(None);
    }
    let mut src: Option<LitStr> = None;
    let mut mime_type = None;
    let mut sizes = Vec::new();
    let mut theme = None;
    let mut seen = Keys::inside("icon(...)");
    let mut valid = true;
    meta.parse_nested_meta(|inner| {
        let key = key_of(&inner.path);
        if let Some(twice) = seen.again(&key, &inner.path) {
            valid = false;
            errors.push(twice);
            return skip_value(&inner);
        }
        match key.as_str() {
            "src" => src = Some(inner.value()?.parse()?),
            "mime_type" => mime_type = Some(inner.value()?.parse()?),
            "sizes" => match inner.value()?.parse::<Expr>()? {
                Expr::Array(array) => {
                    for size in array.elems {
                        match size {
                            Expr::Lit(ExprLit {
                                lit: Lit::Str(size),
                                ..
                            }) if valid_size(&size.value()) => sizes.push(size),
                            Expr::Lit(ExprLit {
                                lit: Lit::Str(size),
                                ..
                            }) => {
                                valid = false;
                                errors.push(syn::Error::new(
                                    size.span(),
                                    format!(
                                        "invalid icon size \"{}\": expected \"WxH\" (e.g. \"48x48\") or \"any\"",
                                        size.value()
                                    ),
                                ));
                            }
                            other => {
                                valid = false;
                                errors.push(syn::Error::new_spanned(
                                    other,
                                    "an icon size is a string: \"48x48\" or \"any\"",
                                ));
                            }
                        }
                    }
                }
                other => {
                    valid = false;
                    errors.push(syn::Error::new_spanned(
                        other,
                        "`sizes` is a list of strings, e.g. `sizes = [\"48x48\", \"96x96\"]`",
                    ));
                }
            },
            "theme" => {
                let lit: LitStr = inner.value()?.parse()?;
                match lit.value().as_str() {
                    "light" => theme = Some(Theme::Light),
                    "dark" => theme = Some(Theme::Dark),
                    other => {
                        valid = false;
                        errors.push(syn::Error::new(
                            lit.span(),
                            format!(
                                "invalid icon theme \"{other}\": expected \"light\" or \"dark\""
                            ),
                        ));
                    }
                }
            }
            _ => {
                valid = false;
                errors.push(syn::Error::new_spanned(
                    &inner.path,
                    crate::errors::unknown("icon option", &key, ICON_KNOWN, ICON_ALIASES),
                ));
                skip_value(&inner)?;
            }
        }
        Ok(())
    })?;
    let Some(src) = src else {
        errors.push(syn::Error::new_spanned(
            &meta.path,
            "`icon(...)` needs `src = \"...\"`: the icon's URL",
        ));
        return Ok(None);
    };
    let src = check_src(src, errors);
    Ok(src.filter(|_| valid).map(|src| IconOption {
        src,
        mime_type,
        sizes,
        theme,
    }))
}

/// An icon's `src`, unless it is empty.
fn check_src(src: LitStr, errors: &mut Errors) -> Option<LitStr> {
    if src.value().trim().is_empty() {
        errors.push(syn::Error::new(
            src.span(),
            "an icon's `src` cannot be empty: give its URL (`https:` or `data:`)",
        ));
        return None;
    }
    Some(src)
}

/// `"any"` or `"<width>x<height>"` (MCP's icon sizes).
fn valid_size(size: &str) -> bool {
    let number = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    size == "any"
        || size
            .split_once(['x', 'X'])
            .is_some_and(|(w, h)| number(w) && number(h))
}

/// `scopes = ["a", "b"]`: the OAuth scopes a caller needs (HAIP.md §17.1),
/// each checked against RFC 6749's rule at its literal; the valid ones.
pub(crate) fn parse_scopes(
    meta: &ParseNestedMeta<'_>,
    errors: &mut Errors,
) -> syn::Result<Vec<LitStr>> {
    const FORM: &str = "`scopes` is a list of strings, e.g. `scopes = [\"tickets:write\"]`";
    if !meta.input.peek(syn::Token![=]) {
        errors.push(meta.error(FORM));
        return Ok(Vec::new());
    }
    let mut scopes = Vec::new();
    match meta.value()?.parse::<Expr>()? {
        Expr::Array(array) => {
            for scope in array.elems {
                match scope {
                    Expr::Lit(ExprLit {
                        lit: Lit::Str(scope),
                        ..
                    }) => match scope_problem(&scope.value()) {
                        None => scopes.push(scope),
                        Some(problem) => errors.push(syn::Error::new(
                            scope.span(),
                            format!(
                                "invalid OAuth scope {:?}: {problem} (RFC 6749 §3.3: 1 to 128 \
                                 printable ASCII characters other than space, `\"` and `\\`)",
                                scope.value()
                            ),
                        )),
                    },
                    other => errors.push(syn::Error::new_spanned(
                        other,
                        "a scope is a string, e.g. \"tickets:write\"",
                    )),
                }
            }
        }
        other => errors.push(syn::Error::new_spanned(other, FORM)),
    }
    Ok(scopes)
}

/// What is wrong with `scope` as an OAuth scope token, if anything.
fn scope_problem(scope: &str) -> Option<&'static str> {
    if scope.is_empty() {
        return Some("it is empty");
    }
    if scope.len() > 128 {
        return Some("it is over 128 characters");
    }
    if scope.contains(' ') {
        return Some("a space separates scopes; write each one as its own string");
    }
    let allowed = |b: u8| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b);
    (!scope.bytes().all(allowed)).then_some("it has a character scopes may not hold")
}

#[cfg(test)]
mod tests {
    use super::*;

    // How these options are read as part of `#[haip_tool(...)]`: the tests
    // of `Options::parse`, in `attr`.

    #[test]
    fn icon_sizes_are_width_x_height_or_any() {
        assert!(valid_size("16X16") && !valid_size("x16") && !valid_size("16x") && !valid_size(""));
    }
}
