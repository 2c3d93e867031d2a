#[haip::haip_tool]
async fn sum((a, b): (u8, u8)) -> u8 {
    a + b
}

fn main() {}
