struct Service;

impl Service {
    #[haip::haip_tool]
    async fn call(&self, x: u8) -> u8 {
        x
    }
}

fn main() {}
