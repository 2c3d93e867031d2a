// The same mistake under `Vec<T>` and `Option<T>`, and in an enum's variant:
// each is one error at the type that lacks `#[haip::data]`.
struct Line {
    sku: String,
}

struct Note(String);

#[haip::data]
enum Delivery {
    Pickup,
    Courier { note: Note },
}

#[haip::data]
struct Cart {
    lines: Vec<Line>,
    gift: Option<Note>,
    delivery: Delivery,
}

#[haip::haip_tool]
async fn checkout(cart: Cart) -> u32 {
    let _ = cart;
    1
}

fn main() {}
