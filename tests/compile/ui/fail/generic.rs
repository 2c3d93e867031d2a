use haip::haip_tool;

#[haip_tool]
async fn identity<T: Clone>(value: String) -> String {
    value
}

fn main() {
    // The function is still emitted: this call adds no error.
    let _ = identity::<u8>(String::new());
}
