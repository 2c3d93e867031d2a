//! The browser inspector served at `GET /inspector` when
//! [`ServerBuilder::inspector`](crate::ServerBuilder::inspector) is on: one
//! page (HTML, CSS and JavaScript in `inspector.html`) compiled into the
//! binary, which speaks HAIP back to the server that served it. It loads
//! nothing from anywhere else, so it works offline and needs no build step.

/// The page.
pub(crate) const PAGE: &str = include_str!("inspector.html");

/// What the page may do: its own inline script and style, images and audio
/// from `data:` URLs (content blocks, HAIP.md §6.12), connections to its own
/// origin only (WebSocket included), and nothing else; no framing, so no
/// other site can dress it up and click its buttons.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; \
     script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
     img-src data:; media-src data:; connect-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
