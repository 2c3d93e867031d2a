//! Tools a new user writes with the Rust types of every day: optional
//! fields, unit and data-carrying enums, nested and recursive structs, maps,
//! small and unsigned integers, `f32`, defaults, date strings, lists of
//! enums and optional lists. The schema profile tests check that every model
//! provider accepts what these tools advertise, and that calls shaped by each
//! profile behave like ordinary ones.

// Written as a new user writes: not every field has a doc comment.
#![allow(missing_docs)]

use std::collections::HashMap;

use haip::haip_tool;

/// How urgent a task is.
#[haip::data]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Priority {
    Low,
    Normal,
    High,
}

/// A display mode, each with its own meaning.
#[haip::data]
#[derive(Debug, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Light colours on a dark background.
    Dark,
    /// Dark colours on a light background.
    Light,
    /// Whatever the system says.
    System,
}

/// A shape to measure.
#[haip::data]
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// A circle of this radius.
    Circle { radius: f64 },
    /// A square of this side.
    Square(f64),
    /// A point: no area.
    Point,
}

/// Something a user did.
#[haip::data]
#[derive(Debug, Clone, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// A click at a position.
    Click { x: u32, y: u32 },
    /// A key press.
    Key { code: String },
}

/// A postal address.
#[haip::data]
#[derive(Debug, Clone, PartialEq)]
pub struct Address {
    pub street: String,
    pub city: String,
    /// The postal code, when known.
    pub zip: Option<String>,
}

/// Someone to register.
#[haip::data]
#[derive(Debug, Clone, PartialEq)]
pub struct Person {
    pub name: String,
    pub age: u8,
    pub address: Option<Address>,
    pub tags: Vec<String>,
}

/// A folder and the folders in it.
#[haip::data]
#[derive(Debug, Clone, PartialEq)]
pub struct Folder {
    pub name: String,
    /// Bytes in the folder's own files.
    pub bytes: u64,
    pub children: Vec<Folder>,
}

/// A meeting to put in the calendar.
#[haip::data]
#[derive(Debug, Clone, PartialEq)]
pub struct Meeting {
    pub title: String,
    /// The day, as `YYYY-MM-DD`.
    #[schemars(extend("format" = "date"))]
    pub day: String,
    /// The time of day, as `HH:MM:SS`, when it is not all day.
    #[schemars(extend("format" = "time"))]
    pub at: Option<String>,
    pub attendees: Option<Vec<Person>>,
}

/// What a tool echoes back about its call.
#[haip::data]
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// A one-line account of what the tool was given.
    pub summary: String,
}

fn summary(text: String) -> Summary {
    Summary { summary: text }
}

/// Create a task.
#[haip_tool]
pub async fn create_task(
    /// What to do.
    title: String,
    priority: Priority,
    /// When it is due (a date), if ever.
    due: Option<String>,
    /// Hours it should take.
    #[haip(default = 3)]
    estimate_hours: u32,
) -> Summary {
    summary(format!("{title} {priority:?} {due:?} {estimate_hours}h"))
}

/// The area of a shape.
#[haip_tool]
pub async fn area(shape: Shape) -> f64 {
    match shape {
        Shape::Circle { radius } => std::f64::consts::PI * radius * radius,
        Shape::Square(side) => side * side,
        Shape::Point => 0.0,
    }
}

/// Record what a user did.
#[haip_tool]
pub async fn record_event(event: Event) -> Summary {
    summary(format!("{event:?}"))
}

/// Register a person.
#[haip_tool]
pub async fn register_person(person: Person) -> Summary {
    summary(format!("{person:?}"))
}

/// The bytes in a folder tree.
#[haip_tool]
pub async fn folder_size(root: Folder) -> u64 {
    fn size(folder: &Folder) -> u64 {
        folder.bytes + folder.children.iter().map(size).sum::<u64>()
    }
    size(&root)
}

/// The average of named scores.
#[haip_tool]
pub async fn average(scores: HashMap<String, f64>) -> f32 {
    if scores.is_empty() {
        return 0.0;
    }
    (scores.values().sum::<f64>() / scores.len() as f64) as f32
}

/// Resize an image.
#[haip_tool]
pub async fn resize(
    width: u32,
    height: u32,
    /// JPEG quality, 1 to 100.
    quality: Option<u8>,
    scale: f32,
) -> Summary {
    summary(format!("{width}x{height} q{quality:?} x{scale}"))
}

/// Put a meeting in the calendar.
#[haip_tool]
pub async fn schedule(meeting: Meeting) -> Summary {
    summary(format!("{meeting:?}"))
}

/// Label something with priorities.
#[haip_tool]
pub async fn label(labels: Vec<Priority>) -> Summary {
    summary(format!("{labels:?}"))
}

/// Store addresses, if there are any.
#[haip_tool]
pub async fn store_addresses(addresses: Option<Vec<Address>>) -> Summary {
    summary(format!("{addresses:?}"))
}

/// Switch the display mode.
#[haip_tool]
pub async fn set_mode(mode: Mode) -> Summary {
    summary(format!("{mode:?}"))
}

/// Rename a document.
#[haip_tool]
pub async fn rename(
    /// The new name.
    #[haip(default = "untitled".to_owned())]
    name: String,
    /// A character to end it with.
    suffix: Option<char>,
    /// How many copies to keep.
    #[haip(default = 1)]
    copies: u16,
) -> Summary {
    summary(format!(
        "{name}{} x{copies}",
        suffix.map(String::from).unwrap_or_default()
    ))
}

/// Every tool of this crate, for a server or a test.
pub fn tools() -> Vec<haip::Tool> {
    vec![
        create_task::tool(),
        area::tool(),
        record_event::tool(),
        register_person::tool(),
        folder_size::tool(),
        average::tool(),
        resize::tool(),
        schedule::tool(),
        label::tool(),
        store_addresses::tool(),
        set_mode::tool(),
        rename::tool(),
    ]
}
