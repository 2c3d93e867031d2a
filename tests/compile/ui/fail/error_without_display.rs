#[derive(Debug)]
struct Oops;

#[haip::haip_tool]
async fn f() -> Result<u8, Oops> {
    Err(Oops)
}

fn main() {}
