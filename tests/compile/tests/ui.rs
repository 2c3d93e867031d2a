//! Compile-time behaviour of `#[haip_tool]`: accepted forms compile, each
//! mistake is a compile error at the offending token (`ui/fail/*.stderr`,
//! pinned to the toolchain CI runs).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    t.compile_fail("ui/fail/*.rs");
}
