//! The check a crate of tools runs in its own `cargo test`: every model
//! provider accepts what its tools advertise (see `haip::lint`).

#[test]
fn every_tool_is_served_in_every_profile() {
    haip::lint::assert_annotated_clean();
}
