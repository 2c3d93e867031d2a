//! `haip`: call HAIP tools from a terminal, and measure HAIP servers.
//!
//! ```text
//! haip tools ws://127.0.0.1:8080/haip
//! haip schema ws://127.0.0.1:8080/haip add --profile openai-strict
//! haip lint ws://127.0.0.1:8080/haip
//! haip call ws://127.0.0.1:8080/haip add a=5 b=3
//! haip call ws://127.0.0.1:8080/haip process_file --params '{"filename":"a.txt","operation":"read"}'
//! haip call ws://127.0.0.1:8080/haip book_table restaurant=Luigi --answer '{"party_size":4,"time":"19:00"}'
//! haip health ws://127.0.0.1:8080/haip
//! haip bench ws://127.0.0.1:8080/haip --tool echo --params '{"message":"hi"}' --connections 4 --in-flight 8 --duration 10s
//! ```
//!
//! Exit codes: 0 success, 1 the tool failed (or was cancelled, or `lint`
//! found an error), 2 usage or connection error. `--json` prints machine-readable output; `--token` (or
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
use haip::lint::Severity;
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
        /// The schema profile: portable, openai-strict, anthropic-strict or
        /// full (the schema params are validated against). Default: the
        /// server's.
        #[arg(long)]
        profile: Option<String>,
    },
    /// Check every tool against the model providers' rules: each schema
    /// profile that cannot serve it and why, names OpenAI and Anthropic
    /// refuse, descriptions over 1024 characters (errors: exit code 1); and
    /// tools or parameters without a description (warnings: listed, exit
    /// code 0).
    Lint {
        #[command(flatten)]
        common: Common,
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
        Command::Schema {
            common,
            tool,
            profile,
        } => {
            let client = connect(&common).await?;
            let schema = client.schema_in(&tool, profile.as_deref()).await?;
            let mut out = json!({"tool": schema.tool, "inputSchema": schema.input_schema});
            if let Some(output) = schema.output_schema {
                out["outputSchema"] = output;
            }
            print_json(&out, common.json);
            Ok(())
        }
        Command::Lint { common } => lint(&common).await,
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

/// `haip lint`: each tool's schemas as validated (`full`), checked as
/// `haip::lint` does in a crate's own tests.
async fn lint(common: &Common) -> Result<(), Failure> {
    let client = connect(common).await?;
    let tools = client.list_tools().await?;
    let mut findings = Vec::new();
    for tool in &tools {
        let schema = client.schema_in(&tool.name, Some("full")).await?;
        findings.extend(haip::lint::check_schemas(
            &tool.name,
            &tool.description,
            &schema.input_schema,
            schema.output_schema.as_ref(),
        ));
    }
    let errors = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    let warnings = findings.len() - errors;
    if common.json {
        let list: Vec<Value> = findings
            .iter()
            .map(|f| {
                json!({
                    "tool": f.tool,
                    "severity": f.severity.name(),
                    "profile": f.profile.map(|p| p.name()),
                    "pointer": f.pointer,
                    "reason": f.reason,
                    "fix": f.fix,
                    "refused": f.refused,
                })
            })
            .collect();
        println!("{}", Value::Array(list));
    } else {
        for f in &findings {
            let profile = f.profile.map_or("every profile", |p| p.name());
            let pointer = if f.pointer.is_empty() {
                "/"
            } else {
                &f.pointer
            };
            let what = match (f.severity, f.refused) {
                (Severity::Warning, _) => "warning",
                (Severity::Error, true) => "not served",
                (Severity::Error, false) => "served",
            };
            println!("{}  {profile}  {pointer}  ({what})", f.tool);
            println!("    {}", f.reason);
            println!("    fix: {}", f.fix);
        }
        if errors == 0 {
            let also = match warnings {
                0 => String::new(),
                1 => " (1 warning above)".to_owned(),
                n => format!(" ({n} warnings above)"),
            };
            println!(
                "{} tools: every schema profile serves each of them, and every provider takes their names{also}",
                tools.len()
            );
        }
    }
    if errors == 0 {
        Ok(())
    } else {
        Err(Failure::tool(format!(
            "{errors} error(s) and {warnings} warning(s) in {} tools",
            tools.len()
        )))
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
