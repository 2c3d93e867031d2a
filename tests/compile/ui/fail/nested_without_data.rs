// A type inside a `#[haip::data]` type, without `#[haip::data]` itself: one
// error at the field, naming the type and the fix; none where `Order` is used.
struct Address {
    street: String,
}

#[haip::data]
struct Order {
    id: u64,
    ship_to: Address,
}

#[haip::haip_tool]
async fn place(order: Order) -> Order {
    order
}

fn main() {}
