// The error type has no derives and no `Display`.
struct Oops;

#[haip::haip_tool]
fn f() -> Result<u8, Oops> {
    Err(Oops)
}

fn main() {}
