use haip::__private::serde;

// `Deserialize` alone is not enough: the input schema needs `JsonSchema`.
#[derive(serde::Deserialize)]
#[serde(crate = "haip::__private::serde")]
struct Opaque {
    a: u32,
}

#[haip::haip_tool]
async fn f(value: Opaque) -> u32 {
    value.a
}

fn main() {}
