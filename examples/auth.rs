//! A server with JWT authentication on, and a token to try it with.
//!
//! ```text
//! cargo run --example auth
//! ```
//!
//! It uses `HAIP_JWT_SECRET` when set (else a fresh random secret), mints a
//! token for the subject `demo-user` with the scope `users:write` (which
//! `create_user` needs) valid for one hour, prints it with
//! commands to try, and serves the quickstart tools plus `whoami` (which
//! returns the caller's verified subject) on `HAIP_ADDR` or `127.0.0.1:8080`.

use std::time::{SystemTime, UNIX_EPOCH};

use haip::{Context, haip_tool};
use jsonwebtoken::{EncodingKey, Header, encode};
use serde_json::json;

/// Who is calling: the subject of the caller's verified token.
#[haip_tool]
async fn whoami(ctx: Context) -> String {
    ctx.subject().unwrap_or("anonymous").to_owned()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    haip_examples::init_logging("info");
    let secret = match std::env::var("HAIP_JWT_SECRET") {
        Ok(secret) if !secret.is_empty() => secret,
        _ => format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        ),
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let token = encode(
        &Header::default(), // HS256
        // `create_user` needs the scope `users:write`.
        &json!({ "sub": "demo-user", "scope": "users:write", "iat": now, "exp": now + 3600 }),
        &EncodingKey::from_secret(secret.as_bytes())?,
    )?;
    let addr = std::env::var("HAIP_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    println!("token (subject demo-user, valid 1 h):\n  {token}\n");
    println!("try:");
    println!("  curl -H 'Authorization: Bearer {token}' http://{addr}/stats");
    println!("  curl -N -H 'Authorization: Bearer {token}' http://{addr}/haip/sse");
    println!(
        "  curl -H 'Authorization: Bearer {token}' -d '{{\"type\":\"TOOL_CALL\",\"payload\":{{\"tool\":\"whoami\"}}}}' http://{addr}/haip/message"
    );
    println!("  ws://{addr}/haip?token={token}\n");

    haip::Server::builder()
        .from_env()
        .jwt_hs256(secret)
        .builtin_tools()
        .tools(haip_examples::demo::tools())
        .tool(whoami::tool())
        .build()?
        .run()
        .await?;
    Ok(())
}
