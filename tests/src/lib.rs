//! End-to-end tests for haip live in `tests/`.

// The README's Rust snippets, compiled (and run, unless marked `no_run`) as
// this crate's doctests by `cargo test --workspace`: what the README shows
// keeps building.
#[doc = include_str!("../../README.md")]
mod readme {}
