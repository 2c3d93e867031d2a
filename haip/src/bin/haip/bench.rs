//! `haip bench`: N connections × K calls in flight against any HAIP server,
//! bounded in count and time; calls/s, latency percentiles, errors, and (with
//! `--server-pid`) the server's CPU per call and peak RSS.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use haip::client::{Client, ClientOptions, Outcome};
use serde_json::{Value, json};

use crate::{Common, Failure, connect_with, http};

/// The longest run `haip bench` agrees to.
const MAX_DURATION: Duration = Duration::from_secs(600);
/// Latency samples kept per worker (beyond, calls are counted, not sampled).
const MAX_SAMPLES: usize = 1 << 20;

#[derive(Args)]
pub(crate) struct BenchArgs {
    #[command(flatten)]
    common: Common,
    /// The tool to call.
    #[arg(long)]
    tool: String,
    /// Its params, as a JSON object.
    #[arg(long, default_value = "{}")]
    params: String,
    /// Connections to open.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Calls in flight per connection.
    #[arg(long = "in-flight", default_value_t = 1)]
    in_flight: usize,
    /// How long to run (e.g. 10s, 500ms, 2min; at most 10 min).
    #[arg(long, conflicts_with = "calls", value_parser = parse_duration)]
    duration: Option<Duration>,
    /// How many calls to make in all, instead of a duration.
    #[arg(long)]
    calls: Option<u64>,
    /// The server's process id: report its CPU time per call and peak RSS.
    #[arg(long = "server-pid")]
    server_pid: Option<u32>,
    /// Allow a target that is not on this machine's loopback.
    #[arg(long = "allow-remote")]
    allow_remote: bool,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}`: expected e.g. 10s, 500ms, 2min"))?;
    let duration = match unit {
        "ms" => Duration::from_millis(value),
        "s" | "" => Duration::from_secs(value),
        "m" | "min" => Duration::from_secs(value * 60),
        _ => return Err(format!("`{text}`: unknown unit `{unit}` (ms, s, min)")),
    };
    if duration.is_zero() || duration > MAX_DURATION {
        return Err(format!("`{text}`: must be between 1 ms and 10 min"));
    }
    Ok(duration)
}

pub(crate) async fn run(args: BenchArgs) -> Result<(), Failure> {
    if args.connections == 0 || args.in_flight == 0 {
        return Err(Failure::usage(
            "--connections and --in-flight must be at least 1",
        ));
    }
    if args.calls == Some(0) {
        return Err(Failure::usage("--calls must be at least 1"));
    }
    check_target(&args.common.url, args.allow_remote).await?;
    let params: Value = match serde_json::from_str(&args.params) {
        Ok(value @ Value::Object(_)) => value,
        _ => return Err(Failure::usage("--params must be a JSON object")),
    };
    let duration = match (args.duration, args.calls) {
        (Some(d), _) => d,
        (None, Some(_)) => MAX_DURATION,
        (None, None) => Duration::from_secs(10),
    };

    let mut clients = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        // Nobody answers a benchmark's questions: a tool that asks is told
        // at once that it cannot, rather than waiting.
        let options = ClientOptions::new().tool_input(false);
        clients.push(connect_with(&args.common, options).await?);
    }
    let budget = Arc::new(AtomicU64::new(args.calls.unwrap_or(u64::MAX)));
    let stop = Arc::new(AtomicBool::new(false));
    let server_before = args.server_pid.map(cpu_seconds_of);
    let own_before = cpu_seconds("/proc/self/stat");
    let started = Instant::now();
    let deadline = started + duration;
    let mut workers = Vec::new();
    for client in &clients {
        for _ in 0..args.in_flight {
            let worker = Worker {
                client: client.clone(),
                tool: args.tool.clone(),
                params: params.clone(),
                budget: Arc::clone(&budget),
                stop: Arc::clone(&stop),
                deadline,
            };
            workers.push(tokio::spawn(worker.run()));
        }
    }
    let mut totals = Totals::default();
    for worker in workers {
        match worker.await {
            Ok(result) => totals.merge(result),
            Err(e) => return Err(Failure::usage(format!("a bench worker failed: {e}"))),
        }
    }
    let elapsed = started.elapsed();
    let own_cpu = cpu_seconds("/proc/self/stat")
        .zip(own_before)
        .map(|(a, b)| a - b);
    let server = args.server_pid.map(|pid| {
        let cpu = cpu_seconds_of(pid)
            .zip(server_before.flatten())
            .map(|(a, b)| a - b);
        (cpu, peak_rss_bytes(pid))
    });
    let connection_lost = totals.connection_lost;
    let report = totals.report(elapsed, own_cpu, server);
    if args.common.json {
        println!("{report}");
    } else {
        print_report(&report);
    }
    if connection_lost {
        return Err(Failure::usage("the connection was lost during the run"));
    }
    Ok(())
}

/// Refuses targets off this machine unless allowed: a benchmark is load.
async fn check_target(url: &str, allow_remote: bool) -> Result<(), Failure> {
    let authority = http::authority(url)?;
    let addrs: Vec<_> = tokio::net::lookup_host(&authority)
        .await
        .map_err(|e| Failure::usage(format!("cannot resolve {authority}: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(Failure::usage(format!("{authority} resolves to nothing")));
    }
    if !allow_remote && !addrs.iter().all(|a| a.ip().is_loopback()) {
        return Err(Failure::usage(format!(
            "{authority} is not a loopback address; benchmarking another machine needs --allow-remote"
        )));
    }
    Ok(())
}

struct Worker {
    client: Client,
    tool: String,
    params: Value,
    budget: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    deadline: Instant,
}

#[derive(Default)]
struct Totals {
    ok: u64,
    errors: u64,
    latencies_us: Vec<u32>,
    first_error: Option<String>,
    connection_lost: bool,
}

impl Worker {
    async fn run(self) -> Totals {
        let mut totals = Totals::default();
        while !self.stop.load(Ordering::Relaxed) && Instant::now() < self.deadline {
            // Take one call from the budget (calls mode); stop when it is spent.
            if self
                .budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_err()
            {
                break;
            }
            let started = Instant::now();
            let outcome = match self.client.call(&self.tool, self.params.clone()).await {
                Ok(call) => call.outcome().await,
                Err(e) => Err(e),
            };
            let latency = started.elapsed();
            match outcome {
                Ok(Outcome::Ok(_)) => totals.ok += 1,
                Ok(other) => {
                    totals.errors += 1;
                    totals.first_error.get_or_insert_with(|| other.to_string());
                }
                Err(e) => {
                    totals.errors += 1;
                    totals.first_error.get_or_insert_with(|| e.to_string());
                    totals.connection_lost = true;
                    self.stop.store(true, Ordering::Relaxed);
                    break;
                }
            }
            if totals.latencies_us.len() < MAX_SAMPLES {
                totals
                    .latencies_us
                    .push(latency.as_micros().min(u128::from(u32::MAX)) as u32);
            }
        }
        totals
    }
}

impl Totals {
    fn merge(&mut self, other: Totals) {
        self.ok += other.ok;
        self.errors += other.errors;
        self.latencies_us.extend(other.latencies_us);
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.connection_lost |= other.connection_lost;
    }

    fn report(
        mut self,
        elapsed: Duration,
        own_cpu: Option<f64>,
        server: Option<(Option<f64>, Option<u64>)>,
    ) -> Value {
        self.latencies_us.sort_unstable();
        let pct = |p: f64| -> f64 {
            if self.latencies_us.is_empty() {
                return 0.0;
            }
            let rank = ((p / 100.0) * self.latencies_us.len() as f64).ceil() as usize;
            f64::from(self.latencies_us[rank.clamp(1, self.latencies_us.len()) - 1]) / 1000.0
        };
        let calls = self.ok + self.errors;
        let per_call_us = |cpu: f64| {
            if calls == 0 {
                0.0
            } else {
                cpu * 1e6 / calls as f64
            }
        };
        let mut report = json!({
            "calls": calls,
            "ok": self.ok,
            "errors": self.errors,
            "seconds": elapsed.as_secs_f64(),
            "calls_per_second": calls as f64 / elapsed.as_secs_f64().max(1e-9),
            "latency_ms": {"p50": pct(50.0), "p90": pct(90.0), "p99": pct(99.0), "max": pct(100.0)},
        });
        if let Some(error) = self.first_error {
            report["first_error"] = Value::from(error);
        }
        if let Some(cpu) = own_cpu {
            report["bench_cpu_us_per_call"] = json!(per_call_us(cpu));
        }
        if let Some((cpu, rss)) = server {
            if let Some(cpu) = cpu {
                report["server_cpu_us_per_call"] = json!(per_call_us(cpu));
            }
            if let Some(rss) = rss {
                report["server_peak_rss_bytes"] = json!(rss);
            }
        }
        report
    }
}

fn print_report(report: &Value) {
    let l = &report["latency_ms"];
    println!(
        "{} calls ({} ok, {} errors) in {:.2} s: {:.0} calls/s",
        report["calls"],
        report["ok"],
        report["errors"],
        report["seconds"].as_f64().unwrap_or(0.0),
        report["calls_per_second"].as_f64().unwrap_or(0.0)
    );
    println!(
        "latency ms: p50 {:.3}  p90 {:.3}  p99 {:.3}  max {:.3}",
        l["p50"].as_f64().unwrap_or(0.0),
        l["p90"].as_f64().unwrap_or(0.0),
        l["p99"].as_f64().unwrap_or(0.0),
        l["max"].as_f64().unwrap_or(0.0)
    );
    if let Some(cpu) = report["server_cpu_us_per_call"].as_f64() {
        println!("server CPU: {cpu:.1} us/call");
    }
    if let Some(rss) = report["server_peak_rss_bytes"].as_u64() {
        println!("server peak RSS: {:.1} MiB", rss as f64 / 1048576.0);
    }
    if let Some(cpu) = report["bench_cpu_us_per_call"].as_f64() {
        println!("bench CPU: {cpu:.1} us/call");
    }
    if let Some(error) = report["first_error"].as_str() {
        println!("first error: {error}");
    }
}

/// User + system CPU seconds of a process, from `/proc/<pid>/stat`.
fn cpu_seconds_of(pid: u32) -> Option<f64> {
    cpu_seconds(&format!("/proc/{pid}/stat"))
}

fn cpu_seconds(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which may contain spaces) start at state.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / CLOCK_TICKS)
}

/// `sysconf(_SC_CLK_TCK)` is 100 on every Linux the project runs on.
const CLOCK_TICKS: f64 = 100.0;

/// Peak resident set size (`VmHWM`) of a process.
fn peak_rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
