//! The application's server: the text tools of `toolset-lib`, mounted under
//! `text` (`text_shout`, …), with a setting of its own. `main` would `.build()?.run().await` it.

use std::time::Duration;

/// The server the application runs, before it is built.
pub fn server() -> haip::ServerBuilder {
    haip::Server::builder()
        .limits(haip::Limits {
            tool_timeout: Some(Duration::from_secs(5)),
            ..haip::Limits::default()
        })
        .mount("text", toolset_lib::tools())
}
