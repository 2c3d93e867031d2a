//! `#[haip(default = ...)]` takes a value of the parameter's type or one that
//! converts into it; an optional parameter takes its inner type's.
#[haip::haip_tool]
async fn page(
    #[haip(default = "OPS")] team: String,
    #[haip(default = 3)] limit: Option<u32>,
    #[haip(default = "all")] filter: Option<String>,
    #[haip(default = 20)] size: u64,
    #[haip(default = 1)] scale: f64,
    #[haip(default = Some(7))] offset: Option<u16>,
    #[haip(default = Vec::new())] tags: Vec<String>,
    #[haip(default = 'x')] mark: char,
) -> String {
    format!("{team} {limit:?} {filter:?} {size} {scale} {offset:?} {tags:?} {mark}")
}

fn main() {
    let schema = page::tool().input_schema().clone();
    let props = &schema["properties"];
    assert_eq!(props["team"]["default"], "OPS");
    assert_eq!(props["limit"]["default"], 3);
    assert_eq!(props["filter"]["default"], "all");
    assert_eq!(props["size"]["default"], 20);
    assert_eq!(props["scale"]["default"], 1.0);
    assert_eq!(props["offset"]["default"], 7);
    assert_eq!(props["mark"]["default"], "x");
}
