// A question's form is a struct of named fields, not one value.
async fn rename(ctx: haip::Context) {
    let _ = ctx.ask::<String>("New name?").await;
}

fn main() {}
