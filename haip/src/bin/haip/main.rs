//! `haip`: call HAIP tools from a terminal, and measure HAIP servers.
//!
//! ```text
//! haip tools ws://127.0.0.1:8080/haip
//! haip schema ws://127.0.0.1:8080/haip add
//! haip call ws://127.0.0.1:8080/haip add a=5 b=3
//! haip call ws://127.0.0.1:8080/haip process_file --params '{"filename":"a.txt","operation":"read"}'
//! haip call ws://127.0.0.1:8080/haip book_table restaurant=Luigi --answer '{"party_size":4,"time":"19:00"}'
//! haip health ws://127.0.0.1:8080/haip
//! haip bench ws://127.0.0.1:8080/haip --tool echo --params '{"message":"hi"}' --connections 4 --in-flight 8 --duration 10s
//! ```
//!
//! Exit codes: 0 success, 1 the tool failed (or was cancelled), 2 usage or
//! connection error. `--json` prints machine-readable output; `--token` (or
//! `HAIP_TOKEN`) authenticates.

mod bench;
mod call;
mod http;
mod prompt;

use std::process::ExitCode;
use std::time::Duration;

/// mimalloc gives freed memory back to the system, so `haip bench` stays
/// small however much it has sent.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Args, Parser, Subcommand};
use haip::client::{Client, ClientError, ClientOptions};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(
    name = "haip",
    version,
    about = "Call HAIP tools from a terminal, and measure HAIP servers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct Common {
    /// The server's WebSocket URL, e.g. ws://127.0.0.1:8080/haip.
    url: String,
    /// A bearer token for servers with authentication on.
    #[arg(long, env = "HAIP_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Machine-readable JSON output.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum Command {
    /// List the server's tools.
    Tools {
        #[command(flatten)]
        common: Common,
    },
    /// Show a tool's input and output schemas.
    Schema {
        #[command(flatten)]
        common: Common,
        /// The tool's name.
        tool: String,
    },
    /// Call a tool, showing its progress; Ctrl-C cancels it.
    Call(call::CallArgs),
    /// Check the server's /health endpoint.
    Health {
        #[command(flatten)]
        common: Common,
    },
    /// Load a server with calls and report throughput and latency.
    Bench(bench::BenchArgs),
}

/// A failure the command reports, with its exit code.
pub(crate) struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: message.into(),
        }
    }

    pub(crate) fn tool(message: impl Into<String>) -> Failure {
        Failure {
            code: 1,
            message: message.into(),
        }
    }
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Failure {
        Failure::usage(error.to_string())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if !failure.message.is_empty() {
                eprintln!("error: {}", failure.message);
            }
            ExitCode::from(failure.code)
        }
    }
}

async fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Tools { common } => {
            let client = connect(&common).await?;
            let tools = client.list_tools().await?;
            if common.json {
                let list: Vec<Value> = tools
                    .iter()
                    .map(|t| json!({"name": t.name, "description": t.description}))
                    .collect();
                println!("{}", Value::Array(list));
            } else {
                let width = tools.iter().map(|t| t.name.len()).max().unwrap_or(0);
                for tool in tools {
                    println!(
                        "{:width$}  {}",
                        tool.name,
                        tool.description.lines().next().unwrap_or("")
                    );
                }
            }
            Ok(())
        }
        Command::Schema { common, tool } => {
            let client = connect(&common).await?;
            let schema = client.schema(&tool).await?;
            let mut out = json!({"tool": schema.tool, "inputSchema": schema.input_schema});
            if let Some(output) = schema.output_schema {
                out["outputSchema"] = output;
            }
            print_json(&out, common.json);
            Ok(())
        }
        Command::Call(args) => call::run(args).await,
        Command::Health { common } => {
            let health = http::get_json(&common.url, "/health", common.token.as_deref()).await?;
            if common.json {
                println!("{health}");
            } else {
                println!(
                    "{} (uptime {} ms, {} active connections, HAIP {})",
                    health["status"].as_str().unwrap_or("?"),
                    health["uptime"],
                    health["activeConnections"],
                    health["version"].as_str().unwrap_or("?"),
                );
            }
            Ok(())
        }
        Command::Bench(args) => bench::run(args).await,
    }
}

pub(crate) async fn connect(common: &Common) -> Result<Client, Failure> {
    connect_with(common, ClientOptions::new()).await
}

/// [`connect`] with options; the token is `common`'s.
pub(crate) async fn connect_with(
    common: &Common,
    mut options: ClientOptions,
) -> Result<Client, Failure> {
    options.token = common.token.clone();
    match tokio::time::timeout(
        Duration::from_secs(10),
        Client::connect_with(&common.url, options),
    )
    .await
    {
        Ok(client) => Ok(client?),
        Err(_) => Err(Failure::usage(format!(
            "timed out connecting to {}",
            common.url
        ))),
    }
}

pub(crate) fn print_json(value: &Value, compact: bool) {
    if compact {
        println!("{value}");
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
        );
    }
}
