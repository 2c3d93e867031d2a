//! `#[haip::data(crate = "...")]` for a renamed `haip`.
use haip as my_haip;

mod reexported {
    pub use haip::*;
}

#[my_haip::data(crate = "my_haip")]
struct Point {
    x: i32,
    y: i32,
}

#[haip::data(crate = "self::reexported")]
#[serde(rename_all = "UPPERCASE")]
enum Axis {
    X,
    Y,
}

#[haip::data(crate = "::haip")]
struct Plain {
    axis: Axis,
}

#[my_haip::haip_tool(crate = "my_haip")]
async fn flip(p: Point, axis: Axis) -> Point {
    match axis {
        Axis::X => Point { x: -p.x, y: p.y },
        Axis::Y => Point { x: p.x, y: -p.y },
    }
}

fn main() {
    let tool = flip::tool();
    assert_eq!(tool.input_schema()["properties"]["axis"]["enum"][0], "X");
    let _ = Plain { axis: Axis::Y };
}
