//! `task` (optional), `task = "required" | "optional" | "forbidden"`, alone and
//! beside the other options, reached through `haip::__private` only.
use haip::{Context, TaskSupport, haip_tool};

/// Build a report; may take minutes.
#[haip_tool(task)]
async fn build_report(year: u16) -> String {
    format!("report {year}")
}

/// Re-index everything; always takes minutes.
#[haip_tool(title = "Re-index", destructive, task = "required", timeout = "10min")]
async fn reindex(ctx: Context) -> u32 {
    ctx.progress(100.0);
    0
}

/// Fetch a page.
#[haip_tool(name = "fetch_page", task = "optional", read_only, open_world)]
fn fetch(url: String) -> String {
    url
}

/// Answers at once.
#[haip_tool(task = "forbidden", idempotent)]
async fn ping() -> bool {
    true
}

/// Declares nothing.
#[haip_tool]
async fn plain() {}

fn main() {
    assert_eq!(build_report::tool().task_support(), TaskSupport::Optional);

    let tool = reindex::tool();
    assert_eq!(tool.task_support(), TaskSupport::Required);
    assert_eq!(tool.title(), Some("Re-index"));
    assert_eq!(tool.annotations().destructive_hint, Some(true));

    let tool = fetch::tool();
    assert_eq!(tool.name(), "fetch_page");
    assert_eq!(tool.task_support(), TaskSupport::Optional);
    assert_eq!(tool.annotations().read_only_hint, Some(true));

    let tool = ping::tool();
    assert_eq!(tool.task_support(), TaskSupport::Forbidden);
    assert_eq!(tool.annotations().idempotent_hint, Some(true));

    assert_eq!(plain::tool().task_support(), TaskSupport::Forbidden);
}
