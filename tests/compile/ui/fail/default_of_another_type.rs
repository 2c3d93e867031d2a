// A default that does not convert into the parameter's type: the error is at
// the default, in haip's words.
#[haip::haip_tool]
async fn f(#[haip(default = "three")] times: u32, #[haip(default = 1.5)] scale: Option<u8>) -> u32 {
    let _ = scale;
    times
}

fn main() {}
