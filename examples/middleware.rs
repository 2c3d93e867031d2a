//! Layers around every call (`haip::layer`): a rate limit per caller, error
//! masking, a concurrency limit per tool, a cache for idempotent tools and an
//! audit line of our own, on three tools that do not know about any of it.
//! HAIP and MCP (`/mcp`) calls pass the same layers.
//!
//! ```text
//! cargo run -p haip-examples --example middleware
//! cargo test -p haip-examples --example middleware   # the layers, tested in memory
//! ```

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use haip::layer::{Cache, Call, ConcurrencyLimit, MaskErrors, Next, RateLimit, from_fn};
use haip::{Context, ServerBuilder, ToolError, haip_tool};

/// How many times `exchange_rate` really ran (the cache spares the others).
static RATE_LOOKUPS: AtomicUsize = AtomicUsize::new(0);

/// An exchange rate.
#[haip::data]
struct Rate {
    from: String,
    to: String,
    rate: f64,
}

/// The exchange rate between two currencies (EUR, USD, GBP).
#[haip_tool(read_only, idempotent)]
async fn exchange_rate(
    /// The currency to convert from.
    from: String,
    /// The currency to convert to.
    to: String,
) -> Result<Rate, ToolError> {
    RATE_LOOKUPS.fetch_add(1, Relaxed);
    let in_eur = |currency: &str| match currency {
        "EUR" => Some(1.0),
        "USD" => Some(0.92),
        "GBP" => Some(1.17),
        _ => None,
    };
    let (Some(a), Some(b)) = (in_eur(&from), in_eur(&to)) else {
        return Err(ToolError::new(
            "UNKNOWN_CURRENCY",
            format!("{from} or {to} is not known"),
        ));
    };
    Ok(Rate {
        from,
        to,
        rate: a / b,
    })
}

/// A payment receipt.
#[haip::data]
struct Receipt {
    charged_cents: u64,
}

/// Charge an amount to the caller's account.
#[haip_tool]
async fn charge(
    /// The amount, in cents.
    amount_cents: u64,
) -> Result<Receipt, ToolError> {
    if amount_cents > 1_000_000 {
        // What a payment gateway's client might say: not for the caller.
        return Err(ToolError::execution(
            "gateway 10.0.3.7:8443 timed out (merchant key mk_live_51H...)",
        ));
    }
    Ok(Receipt {
        charged_cents: amount_cents,
    })
}

/// A rendered report.
#[haip::data]
struct Report {
    pages: u32,
}

/// Render a report, page by page (heavy: two at once at most).
#[haip_tool]
async fn render_report(ctx: Context, pages: u32) -> Result<Report, ToolError> {
    for page in 0..pages {
        ctx.progress(f64::from(page) * 100.0 / f64::from(pages.max(1)));
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
            () = ctx.cancelled() => return Err(ToolError::cancelled()),
        }
    }
    Ok(Report { pages })
}

/// The tools, behind the layers: outermost first.
fn server() -> ServerBuilder {
    haip::Server::builder()
        .tools([exchange_rate::tool(), charge::tool(), render_report::tool()])
        // Refuse early: 30 calls a minute per caller, 10 of them at once.
        .layer(RateLimit::per_subject(30, Duration::from_secs(60)).burst(10))
        // One line per call, with what the caller saw.
        .layer(from_fn(|call: Call, next: Next| async move {
            let (tool, who) = (call.name().to_owned(), call.subject().map(str::to_owned));
            let started = Instant::now();
            let outcome = next.run(call).await;
            let code = outcome.as_ref().err().map(|e| e.code().to_string());
            tracing::info!(tool, who, ?code, took = ?started.elapsed(), "call");
            outcome
        }))
        // Internal error text stays in the log; the caller gets a reference.
        .layer(MaskErrors::new())
        // Reports are heavy: two at once, the others told to come back.
        .layer(ConcurrencyLimit::per_tool(2).max_waiting(0))
        // Idempotent tools answered again for a minute, within 8 MiB.
        .layer(Cache::new(8 << 20).ttl(Duration::from_secs(60)))
}

#[tokio::main]
async fn main() -> Result<(), haip::Error> {
    haip_examples::init_logging("info");
    server().from_env().build()?.run().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use haip::testing::{Caller, TestServer};
    use serde_json::json;

    fn as_ada() -> TestServer {
        TestServer::new(server())
            .expect("the tools build")
            .as_caller(Caller::new("ada"))
    }

    #[tokio::test]
    async fn the_rate_limit_refuses_with_a_retry_hint_per_caller() {
        let server = as_ada();
        let params = json!({"amount_cents": 100});
        for _ in 0..10 {
            server.call("charge", params.clone()).await.unwrap();
        }
        let refused = server.call("charge", params.clone()).await.unwrap_err();
        assert_eq!(refused.code(), Some("RATE_LIMITED"));
        // One call back every 2 s.
        let wait = refused.details().unwrap()["retry_after_ms"]
            .as_u64()
            .unwrap();
        assert!((1..=2000).contains(&wait), "{wait}");
        let bob = server.client_as(Caller::new("bob")).await.unwrap();
        bob.call("charge", params).await.unwrap();
    }

    #[tokio::test]
    async fn internal_errors_are_masked_with_a_reference() {
        let err = as_ada()
            .call("charge", json!({"amount_cents": 5_000_000}))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("TOOL_EXECUTION_ERROR"));
        assert!(!err.to_string().contains("mk_live"), "{err}");
        let reference = err.details().unwrap()["reference"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(err.to_string().contains(&reference), "{err}");
        // A tool's own error code is the caller's business: not masked.
        let err = as_ada()
            .call("exchange_rate", json!({"from": "EUR", "to": "XYZ"}))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("UNKNOWN_CURRENCY"));
        assert!(err.to_string().contains("XYZ"), "{err}");
    }

    #[tokio::test]
    async fn an_idempotent_tool_is_answered_from_the_cache() {
        let server = as_ada();
        let params = json!({"from": "GBP", "to": "EUR"});
        let first = server.call("exchange_rate", params.clone()).await.unwrap();
        let before = RATE_LOOKUPS.load(Relaxed);
        for _ in 0..3 {
            assert_eq!(
                server.call("exchange_rate", params.clone()).await.unwrap(),
                first
            );
        }
        // Keys in another order are the same call.
        let swapped = json!({"to": "EUR", "from": "GBP"});
        assert_eq!(server.call("exchange_rate", swapped).await.unwrap(), first);
        assert_eq!(RATE_LOOKUPS.load(Relaxed), before, "no lookup ran again");
    }

    #[tokio::test]
    async fn at_most_two_reports_render_at_once() {
        let server = as_ada();
        let mut running = Vec::new();
        for _ in 0..2 {
            let mut call = server
                .start("render_report", json!({"pages": 500}))
                .await
                .unwrap();
            call.progress().await.unwrap(); // past the layers, rendering
            running.push(call);
        }
        let refused = server
            .call("render_report", json!({"pages": 1}))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Some("RATE_LIMITED"));
        for call in running {
            call.cancel(None).await.unwrap();
            assert!(
                call.done()
                    .await
                    .unwrap()
                    .into_result()
                    .unwrap_err()
                    .is_cancelled()
            );
        }
        // Places are free again.
        let report = server
            .call("render_report", json!({"pages": 1}))
            .await
            .unwrap();
        assert_eq!(report, json!({"pages": 1}));
    }
}
