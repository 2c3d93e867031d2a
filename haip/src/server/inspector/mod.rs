//! The browser inspector served at `GET /inspector` when
//! [`ServerBuilder::inspector`](crate::ServerBuilder::inspector) is on: one
//! page compiled into the binary, which speaks HAIP back to the server that
//! served it. It loads nothing from anywhere else, so it works offline and
//! needs no build step.
//!
//! The page is kept in parts that are easier to read apart: `page.html` (the
//! markup), `inspector.css`, and one script in three files run in order
//! inside one function (`wire.js`: the connection and the envelopes;
//! `forms.js`: forms from JSON Schema; `calls.js`: tools, calls, questions,
//! results, start-up). [`page`] puts them together once.

use std::sync::OnceLock;

/// Where `page.html` takes the style and the script.
const CSS_SLOT: &str = "/* INSPECTOR_CSS */";
const JS_SLOT: &str = "/* INSPECTOR_JS */";

/// The script: its three parts in one strict-mode function, so that nothing
/// leaks into the page's global scope.
const SCRIPT: &str = concat!(
    "'use strict';\n(() => {\n",
    include_str!("wire.js"),
    include_str!("forms.js"),
    include_str!("calls.js"),
    "})();"
);

/// The whole page, assembled on first use.
pub(super) fn page() -> &'static str {
    static PAGE: OnceLock<String> = OnceLock::new();
    PAGE.get_or_init(|| {
        include_str!("page.html")
            .replacen(JS_SLOT, SCRIPT, 1)
            .replacen(CSS_SLOT, include_str!("inspector.css"), 1)
    })
}

/// What the page may do: its own inline script and style, images and audio
/// from `data:` URLs (content blocks, docs/protocol.md §6.12), images over `https:`
/// too (tools' icons, docs/protocol.md §6.13, are URLs their authors chose),
/// connections to its own origin only (WebSocket included), and nothing
/// else; no framing, so no other site can dress it up and click its buttons.
pub(super) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; \
     script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
     img-src data: https:; media-src data:; connect-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_assembled_from_its_parts() {
        let page = page();
        assert!(!page.contains(CSS_SLOT) && !page.contains(JS_SLOT));
        assert!(page.contains("#wire-log {"), "the style is in");
        assert!(page.contains("function buildForm("), "forms.js is in");
        assert!(page.contains("function onDone("), "calls.js is in");
        // One script element: the parts share one scope.
        assert_eq!(page.matches("<script>").count(), 1);
        assert!(page.trim_end().ends_with("</html>"));
    }
}
