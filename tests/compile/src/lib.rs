//! Compile-time tests of `#[haip_tool]`; the cases are in `ui/`, run by `tests/ui.rs`.
