//! Data types inside data types, as people write them: nested, in `Vec`,
//! `Option` and maps, recursive and mutually recursive, generic, public,
//! with serde's and schemars' field attributes; no warnings.
#![deny(warnings)]

pub mod model {
    use std::collections::HashMap;

    #[haip::data]
    pub struct Address {
        pub street: String,
    }

    /// A folder holds files and folders.
    #[haip::data]
    pub struct Folder {
        pub files: Vec<File>,
        pub folders: Vec<Folder>,
        pub parent: Option<Box<Folder>>,
    }

    #[haip::data]
    pub struct File {
        pub name: String,
        pub owner: Option<Box<Folder>>,
    }

    #[haip::data]
    pub struct Page<T> {
        pub items: Vec<T>,
        pub next: Option<Address>,
    }

    #[haip::data]
    #[serde(tag = "kind", rename_all = "snake_case")]
    pub enum Delivery {
        Pickup,
        Courier {
            to: Address,
            notes: HashMap<String, Address>,
        },
    }

    #[haip::data]
    pub struct Order {
        pub id: u64,
        pub ship_to: Address,
        pub delivery: Delivery,
        pub page: Page<Address>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub gift: Option<Address>,
        #[serde(skip)]
        pub cache: Option<std::time::Instant>,
        pub pair: (Address, u8),
    }
}

use model::{Address, Delivery, Folder, Order};

#[haip::haip_tool]
async fn place(order: Order, root: Folder) -> Order {
    let _ = root;
    order
}

fn main() {
    let schema = place::tool().input_schema().clone();
    let order = &schema["properties"]["order"];
    let required: Vec<&str> = order["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(
        required.contains(&"ship_to") && !required.contains(&"gift"),
        "{required:?}"
    );
    assert_eq!(
        order["properties"]["ship_to"]["properties"]["street"]["type"],
        "string"
    );
    let o = Order {
        id: 1,
        ship_to: Address { street: "x".into() },
        delivery: Delivery::Pickup,
        page: model::Page {
            items: Vec::new(),
            next: None,
        },
        gift: None,
        cache: None,
        pair: (Address { street: "y".into() }, 2),
    };
    let _ = place(
        o,
        Folder {
            files: Vec::new(),
            folders: Vec::new(),
            parent: None,
        },
    );
}
