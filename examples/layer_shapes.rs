//! What a layer around calls costs, for `bench/layers.sh`.
//!
//! `layer_shapes micro` times calls of a trivial tool in one thread, with no
//! layers, through haip's own `Layer` stack (1 and 4 layers that pass the
//! call on), and through a tower stack of the same layers (`Service` +
//! `Layer`, cloned per call as a shared tower service is) behind one haip
//! layer, and prints JSON. The shapes alternate, and each figure is the
//! median of several rounds.
//!
//! `layer_shapes serve none|pass|tower|rate` serves the built-in `echo` on
//! `HAIP_ADDR` with no layers, one pass-through layer, the same as a tower
//! stack, or the rate limit (a limit so high that no call is refused: what
//! is measured is checking it). Every mode authenticates `?token=user-X`
//! as subject `X`, so the rate limit counts per subject as it would.
//!
//! ```text
//! cargo run --release -p haip-examples --example layer_shapes -- micro
//! bash bench/layers.sh
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

// The examples' allocator, as the quickstart has it.
use haip_examples as _;

use haip::__private::LayerBench;
use haip::auth::{AuthError, AuthFuture, Authenticator};
use haip::layer::{Call, Layer, Next, RateLimit};
use haip::{Context, Tool, ToolError};
use serde_json::{Value, json};
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceExt};

/// A haip layer that only passes the call on.
struct Pass;

impl Layer for Pass {
    async fn call(&self, call: Call, next: Next) -> Result<Value, ToolError> {
        next.run(call).await
    }
}

type Request = (Call, Next);
type BoxFuture = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send>>;

/// A tower middleware that only passes the request on, in the usual shape:
/// its own future boxed, so that it could do something after.
#[derive(Clone)]
struct TowerPass<S>(S);

impl<S> Service<Request> for TowerPass<S>
where
    S: Service<Request, Response = Value, Error = ToolError> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Value;
    type Error = ToolError;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), ToolError>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> BoxFuture {
        let inner = self.0.call(request);
        Box::pin(async move {
            let outcome = inner.await;
            // Where a real middleware would look at the outcome.
            std::hint::black_box(&outcome);
            outcome
        })
    }
}

/// `depth` tower pass-through layers over "the rest of the call", as one
/// haip layer: how a tower `Layer` API would be served.
struct Tower(BoxCloneSyncService<Request, Value, ToolError>);

impl Tower {
    fn new(depth: usize) -> Tower {
        let end = tower::service_fn(|(call, next): Request| next.run(call));
        let mut service = BoxCloneSyncService::new(end);
        for _ in 0..depth {
            service = BoxCloneSyncService::new(TowerPass(service));
        }
        Tower(service)
    }
}

impl Layer for Tower {
    async fn call(&self, call: Call, next: Next) -> Result<Value, ToolError> {
        // A shared tower service is cloned for each call (`call` takes
        // `&mut self`), then polled ready.
        let mut service = self.0.clone();
        service.ready().await?.call((call, next)).await
    }
}

fn echo() -> Tool {
    Tool::builder("echo")
        .handler(|params: Value, _: Context| async move { Ok(params) })
        .build()
        .expect("echo builds")
}

fn micro() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let tool = echo();
    let shapes: Vec<(&str, LayerBench)> = vec![
        ("none", LayerBench::default()),
        ("haip_1", LayerBench::default().layer(Pass)),
        ("tower_1", LayerBench::default().layer(Tower::new(1))),
        (
            "haip_4",
            LayerBench::default()
                .layer(Pass)
                .layer(Pass)
                .layer(Pass)
                .layer(Pass),
        ),
        ("tower_4", LayerBench::default().layer(Tower::new(4))),
        (
            "rate_limit",
            LayerBench::default().layer(RateLimit::per_subject(u32::MAX, Duration::from_secs(1))),
        ),
    ];
    const CALLS: u32 = 300_000;
    const ROUNDS: usize = 7;
    let params = json!({"message": "hello"});
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); shapes.len()];
    for _ in 0..ROUNDS {
        for (i, (_, bench)) in shapes.iter().enumerate() {
            let took = runtime.block_on(async {
                let started = Instant::now();
                for _ in 0..CALLS {
                    let out = bench.call(&tool, params.clone()).await;
                    std::hint::black_box(out.expect("echo answers"));
                }
                started.elapsed()
            });
            times[i].push(took.as_nanos() as f64 / f64::from(CALLS));
        }
    }
    let mut out = serde_json::Map::new();
    for ((name, _), mut ns) in shapes.iter().zip(times) {
        ns.sort_by(f64::total_cmp);
        out.insert((*name).to_owned(), json!(ns[ROUNDS / 2]));
    }
    println!("{}", Value::Object(out));
}

/// Token `user-X` is subject `X`.
struct Users;

impl Authenticator for Users {
    fn authenticate<'a>(&'a self, token: Option<&'a str>) -> AuthFuture<'a> {
        Box::pin(async move {
            match token.and_then(|t| t.strip_prefix("user-")) {
                Some(subject) => Ok(subject.to_owned()),
                None => Err(AuthError::invalid_token("not user-")),
            }
        })
    }
}

fn serve(mode: &str) -> Result<(), haip::Error> {
    let builder = haip::Server::builder()
        .from_env()
        .builtin_tools()
        .authenticator(Users);
    let builder = match mode {
        "none" => builder,
        "pass" => builder.layer(Pass),
        "tower" => builder.layer(Tower::new(1)),
        "rate" => builder.layer(RateLimit::per_subject(u32::MAX, Duration::from_secs(1))),
        other => {
            eprintln!("unknown mode {other}: none, pass, tower or rate");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async { builder.build()?.run().await })
}

fn main() -> Result<(), haip::Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["micro"] => {
            micro();
            Ok(())
        }
        ["serve", mode] => serve(mode),
        _ => {
            eprintln!("usage: layer_shapes micro | layer_shapes serve none|pass|tower|rate");
            std::process::exit(2);
        }
    }
}
