#[haip::haip_tool]
struct NotAFunction;

fn main() {}
