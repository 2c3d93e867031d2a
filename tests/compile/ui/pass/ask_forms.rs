// What a question may ask for: a `#[haip::data]` struct, generic too (a
// struct deriving its traits itself, with an empty `QuestionForm` impl, is
// `QuestionForm`'s doctest).
use haip::{Answer, AskError, Context};

#[haip::data]
struct Rename {
    /// The new name.
    name: String,
}

#[haip::data]
struct Pick<T> {
    choice: T,
}

async fn ask(ctx: Context) -> Result<(), AskError> {
    if let Answer::Accepted(rename) = ctx.ask::<Rename>("New name?").await? {
        let _: String = rename.name;
    }
    if let Answer::Accepted(pick) = ctx.ask::<Pick<u8>>("Which?").await? {
        let _: u8 = pick.choice;
    }
    Ok(())
}

fn main() {
    let _ = ask;
}
