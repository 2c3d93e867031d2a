//! End-to-end tests for haip live in `tests/`.
