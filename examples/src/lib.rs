//! The tools behind the examples, shared with the project's end-to-end tests.
//!
//! Run the quickstart with `cargo run --example quickstart`.

pub mod demo;
