//! Doc comments → descriptions.
//!
//! Rules: each line loses one leading space (the one after `///`); lines of a
//! paragraph are joined with a space; paragraphs are separated by a blank line;
//! surrounding whitespace is trimmed. A `#[doc = include_str!(...)]` (or any
//! other non-literal doc) is kept as an expression and concatenated as is.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Attribute, Expr, ExprLit, Lit, Meta};

/// One `#[doc = ...]` attribute's value.
pub(crate) enum DocPiece {
    Line(String),
    Expr(Expr),
}

/// Collects the doc attributes of an item or parameter, in order.
pub(crate) fn collect(attrs: &[Attribute]) -> Vec<DocPiece> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            Meta::NameValue(nv) => Some(match &nv.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(s), ..
                }) => DocPiece::Line(s.value()),
                other => DocPiece::Expr(other.clone()),
            }),
            _ => None,
        })
        .collect()
}

/// Joins literal doc lines into a description, by the rules above.
pub(crate) fn join_lines<'a>(lines: impl IntoIterator<Item = &'a str>) -> String {
    let mut paragraphs: Vec<String> = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for raw in lines {
        for line in raw.split('\n') {
            let line = line.strip_prefix(' ').unwrap_or(line).trim_end();
            if line.trim().is_empty() {
                if !current.is_empty() {
                    paragraphs.push(current.join(" "));
                    current.clear();
                }
            } else {
                current.push(line.trim_start());
            }
        }
    }
    if !current.is_empty() {
        paragraphs.push(current.join(" "));
    }
    paragraphs.join("\n\n")
}

/// The description as a string-valued expression, `None` when there are no docs.
pub(crate) fn description(pieces: &[DocPiece]) -> Option<TokenStream> {
    if pieces.is_empty() {
        return None;
    }
    if pieces.iter().all(|p| matches!(p, DocPiece::Line(_))) {
        let text = join_lines(pieces.iter().map(|p| match p {
            DocPiece::Line(l) => l.as_str(),
            DocPiece::Expr(_) => "",
        }));
        return (!text.is_empty()).then(|| quote!(#text));
    }
    // Mixed with expressions: keep every piece, one per line, as rustdoc would.
    let parts = pieces.iter().map(|p| match p {
        DocPiece::Line(l) => {
            let l = l.strip_prefix(' ').unwrap_or(l);
            quote!(#l, "\n")
        }
        DocPiece::Expr(e) => quote!(#e, "\n"),
    });
    Some(quote!(::core::concat!(#(#parts),*).trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paragraphs_and_lines() {
        let text = join_lines([
            " Add two numbers.",
            "",
            " Both are",
            " finite.",
            "   ",
            " Last.",
        ]);
        assert_eq!(text, "Add two numbers.\n\nBoth are finite.\n\nLast.");
        assert_eq!(join_lines([" one line"]), "one line");
        assert_eq!(join_lines(["", "  "]), "");
    }

    #[test]
    fn block_comments_split_into_lines() {
        assert_eq!(join_lines(["\n First.\n Second.\n "]), "First. Second.");
    }
}
