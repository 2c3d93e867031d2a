//! A tool defined inside a function body (as tests often do).
fn main() {
    /// Double it.
    #[haip::haip_tool]
    async fn double(x: i64) -> i64 {
        x * 2
    }
    assert_eq!(double::tool().name(), "double");
}
