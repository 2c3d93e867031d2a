//! The quickstart's application tools: `calculator`, `process_file`,
//! `create_user`, and `book_table`, which talks to the person using it.
//!
//! Each is an ordinary function; `#[haip_tool]` derives its schemas from the
//! signature and registers it for `haip::serve()`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use haip::{Answer, Context, ToolError, haip_tool};

/// An arithmetic operation.
#[haip::data]
#[serde(rename_all = "lowercase")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `a + b`
    Add,
    /// `a - b`
    Subtract,
    /// `a * b`
    Multiply,
    /// `a / b`
    Divide,
}

/// The result of a calculation.
#[haip::data]
#[derive(Debug, Clone, PartialEq)]
pub struct Calculation {
    /// The computed value.
    pub result: f64,
    /// The operation that produced it.
    pub operation: Operation,
}

/// Perform a basic arithmetic operation on two numbers.
///
/// It only computes, so it says so: hosts may call a read-only, idempotent
/// tool without asking the person first.
#[haip_tool(title = "Calculator", read_only, idempotent)]
pub async fn calculator(
    /// The operation to perform.
    operation: Operation,
    /// First operand.
    a: f64,
    /// Second operand.
    b: f64,
) -> Result<Calculation, ToolError> {
    let result = match operation {
        Operation::Add => a + b,
        Operation::Subtract => a - b,
        Operation::Multiply => a * b,
        Operation::Divide if b == 0.0 => return Err(ToolError::execution("Division by zero")),
        Operation::Divide => a / b,
    };
    if !result.is_finite() {
        return Err(ToolError::execution("The result is not a finite number"));
    }
    Ok(Calculation { result, operation })
}

/// What processing a file produced.
#[haip::data]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Processed {
    /// Always true once processing completes.
    pub processed: bool,
    /// Lines processed.
    pub lines: u64,
}

/// Process a file, reporting progress as it goes.
///
/// Works in five 200 ms steps, reporting 0, 20, ..., 100 percent, and stops
/// promptly when cancelled.
#[haip_tool(timeout = "60s")]
pub async fn process_file(
    /// The file to process.
    filename: String,
    /// What to do with it, for example `read`, `analyze`, `convert` or
    /// `count`; any text is accepted.
    operation: String,
    ctx: Context,
) -> Result<Processed, ToolError> {
    let _ = (filename, operation);
    for step in 0..=5u32 {
        ctx.progress(f64::from(step) * 20.0);
        if step == 5 {
            break;
        }
        tokio::select! {
            () = ctx.cancelled() => return Err(ToolError::cancelled()),
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
    Ok(Processed {
        processed: true,
        lines: 150,
    })
}

/// A newly created user.
#[haip::data]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedUser {
    /// The new user's id.
    pub user_id: String,
    /// Always true.
    pub created: bool,
}

/// Create a user account.
#[haip_tool(scopes = ["users:write"])]
pub async fn create_user(
    /// 3 to 20 letters, digits or underscores.
    #[schemars(length(min = 3, max = 20), regex(pattern = r"^[a-zA-Z0-9_]+$"))]
    username: String,
    /// Contact address.
    #[schemars(email)]
    email: String,
    /// Age in years, from 13 to 120. A fractional age (`30.5`) is accepted
    /// as it is; `30` and `30.0` are the same age.
    #[schemars(range(min = 13, max = 120))]
    age: f64,
) -> CreatedUser {
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    let _ = (username, email, age);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    CreatedUser {
        user_id: format!("user_{id}"),
        created: true,
    }
}

/// A dinner time `book_table` offers.
#[allow(missing_docs)] // the wire names say it; doc comments would become titles
#[haip::data]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DinnerTime {
    #[serde(rename = "18:00")]
    Six,
    #[serde(rename = "19:00")]
    Seven,
    #[serde(rename = "20:00")]
    Eight,
}

/// What `book_table` asks: how many, and when.
#[haip::data]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Booking {
    /// How many people.
    #[schemars(range(min = 1, max = 12))]
    pub party_size: u8,
    /// When.
    pub time: DinnerTime,
}

/// What `book_table` did.
#[haip::data]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Booked {
    /// Whether a table is booked.
    pub booked: bool,
    /// Where.
    pub restaurant: String,
    /// For how many (when booked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub party_size: Option<u8>,
    /// At what time (when booked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<DinnerTime>,
}

/// Book a table at a restaurant, asking how many people and when.
#[haip_tool]
pub async fn book_table(
    /// The restaurant.
    restaurant: String,
    ctx: Context,
) -> Result<Booked, ToolError> {
    ctx.info(format!("checking availability at {restaurant}"));
    let answer = ctx.ask::<Booking>("How many people, and when?").await?;
    Ok(match answer {
        Answer::Accepted(Booking { party_size, time }) => Booked {
            booked: true,
            restaurant,
            party_size: Some(party_size),
            time: Some(time),
        },
        Answer::Declined | Answer::Cancelled => Booked {
            booked: false,
            restaurant,
            party_size: None,
            time: None,
        },
    })
}

/// The quickstart tools, in the order they are served (after the built-ins).
pub fn tools() -> Vec<haip::Tool> {
    vec![
        calculator::tool(),
        process_file::tool(),
        create_user::tool(),
        book_table::tool(),
    ]
}
