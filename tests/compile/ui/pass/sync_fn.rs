//! A plain fn (run on the blocking pool) returning a std type.
#[haip::haip_tool]
fn length(text: String) -> usize {
    text.len()
}

fn main() {
    assert_eq!(length("four".into()), 4);
    let _ = length::tool();
}
