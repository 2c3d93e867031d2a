//! Procedural macros for `haip`. Use them through the `haip` crate.
