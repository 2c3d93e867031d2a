//! Two `#[haip_tool]` functions with one name in a binary are a start-up
//! error of `haip::serve()` that names both.

use haip::{Error, Server, haip_tool};

/// Defined first.
#[haip_tool]
async fn zebra() {}

/// Defined second.
#[haip_tool(name = "dup")]
async fn first_dup() {}

/// Defined third.
#[haip_tool]
async fn aardvark() {}

/// Defined last, same name as `first_dup`.
#[haip_tool(name = "dup")]
async fn second_dup() {}

#[test]
fn two_tools_with_one_name_are_a_start_up_error_naming_both() {
    let err = Server::builder().annotated_tools().build().unwrap_err();
    let Error::DuplicateTool {
        name,
        first,
        second,
    } = &err
    else {
        panic!("expected DuplicateTool, got {err}");
    };
    assert_eq!(name, "dup");
    assert!(first.contains("annotated.rs:11"), "{first}");
    assert!(second.contains("annotated.rs:19"), "{second}");
    let text = err.to_string();
    assert!(
        text.contains("annotated.rs:11") && text.contains("annotated.rs:19"),
        "{text}"
    );
}
