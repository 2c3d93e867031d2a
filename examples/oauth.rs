//! An OAuth 2.1 resource server in front of the quickstart tools: tokens of
//! any OpenID Connect / OAuth 2.1 issuer, scopes per tool, and each caller
//! shown only the tools its token may call.
//!
//! ```text
//! HAIP_OAUTH_ISSUER=https://idp.example.com cargo run --example oauth
//! ```
//!
//! Settings, from the environment:
//!
//! - `HAIP_OAUTH_ISSUER` (required): the issuer identifier, as its tokens'
//!   `iss` says it. Its keys are found through its metadata (RFC 8414, else
//!   OpenID discovery); `https`, or `http` on a loopback address.
//! - `HAIP_OAUTH_RESOURCE`: the URL clients reach this server's `/mcp` at;
//!   tokens must name it in `aud` (RFC 8707). Default on a loopback address:
//!   `http://<HAIP_ADDR>/mcp`.
//! - `HAIP_OAUTH_AUDIENCE`: another `aud` to accept (issuers that set their
//!   own audience names).
//! - `HAIP_OAUTH_CLIENT_ID`, `HAIP_OAUTH_CLIENT_SECRET`: a client of the
//!   issuer allowed to introspect tokens, for issuers that hand out opaque
//!   tokens (RFC 7662).
//! - `HAIP_ADDR` (default `127.0.0.1:8080`).
//!
//! Tools: the quickstart's (`create_user` needs the scope `users:write`),
//! plus `whoami`, which shows what the server knows of its caller, and
//! `close_ticket`, which needs `tickets:write`. An MCP host pointed at
//! `http://127.0.0.1:8080/mcp` gets a `401` naming
//! `/.well-known/oauth-protected-resource/mcp`, and from there finds the
//! issuer, signs the person in and comes back with a token.
//!
//! The guide's authentication chapter (`haip::guide::authentication`, "Try
//! OAuth locally") walks through it with the provider the tests use
//! (`tests/oauth/provider.mjs`).

use haip::{Context, ToolError, haip_tool};
use serde_json::{Value, json};

/// Who is calling: the subject, the scopes and the claims of the token.
#[haip_tool(read_only)]
async fn whoami(ctx: Context) -> Result<Value, ToolError> {
    let caller = ctx
        .caller()
        .ok_or_else(|| ToolError::execution("authentication is off"))?;
    Ok(json!({
        "subject": caller.subject(),
        "scopes": caller.scopes(),
        "claims": caller.claims(),
    }))
}

/// Close a support ticket.
#[haip_tool(destructive, scopes = ["tickets:write"])]
async fn close_ticket(
    /// The ticket's number.
    id: u64,
) -> Result<Value, ToolError> {
    Ok(json!({ "id": id, "closed": true }))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    haip_examples::init_logging("info");
    if std::env::var_os("HAIP_OAUTH_ISSUER").is_none() {
        eprintln!(
            "set HAIP_OAUTH_ISSUER to your issuer (e.g. https://idp.example.com); \
             see the top of examples/oauth.rs"
        );
        std::process::exit(2);
    }
    haip::Server::builder()
        .from_env() // HAIP_OAUTH_*, HAIP_ADDR
        .builtin_tools()
        .tools(haip_examples::demo::tools())
        .tool(whoami::tool())
        .tool(close_ticket::tool())
        .build()?
        .run()
        .await?;
    Ok(())
}
