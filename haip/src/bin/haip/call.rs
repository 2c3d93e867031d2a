//! `haip call`: params from JSON or `key=value` pairs, a confirmation before
//! a tool that declares itself destructive (or `--yes`), a live progress bar,
//! the tool's log lines above it, its questions answered in the terminal (or
//! by `--answer` / `--decline`), Ctrl-C to cancel.

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal, Write};

use clap::Args;
use haip::client::{
    Call, CallEvent, Client, ClientError, ClientOptions, LogLevel, LogLine, Outcome, Question,
    Response, Update,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::prompt::{Form, Step, confirm_prompt, confirmed, violations_text};
use crate::{Common, Failure, connect_with, print_json};

#[derive(Args)]
#[command(after_help = QUESTIONS_HELP)]
pub(crate) struct CallArgs {
    #[command(flatten)]
    common: Common,
    /// The tool's name.
    tool: String,
    /// Params as a JSON object.
    #[arg(long, conflicts_with = "pairs")]
    params: Option<String>,
    /// Params as key=value pairs, typed by the tool's input schema
    /// (numbers, booleans, JSON for arrays and objects).
    pairs: Vec<String>,
    /// Answer the tool's questions with this JSON object instead of asking
    /// (for scripts). Repeat it to answer successive questions in turn; the
    /// last one answers any further questions.
    #[arg(long = "answer", value_name = "JSON", conflicts_with = "decline")]
    answers: Vec<String>,
    /// Decline every question the tool asks, without asking.
    #[arg(long)]
    decline: bool,
    /// Call a tool that declares itself destructive without asking first
    /// (needed when stdin is not a terminal).
    #[arg(long, short = 'y')]
    yes: bool,
    /// The least severe tool log line to show: debug, info, notice, warning
    /// or error.
    #[arg(long, value_name = "LEVEL", default_value = "info", value_parser = log_level)]
    log_level: LogLevel,
}

const QUESTIONS_HELP: &str = "\
Tools that talk:
  The tool's log lines are printed on stderr, above the progress bar, as
  `[level] message`. When the tool asks a question, its message is printed
  and each field is asked in turn on stderr (the required ones first, in
  the tool's order), with its type, its choices (numbered: type the
  number, the value or its title) and its default.
  Answers are read from stdin, a terminal or not, one line per field.
  Empty input takes the field's default; on a required field without a
  default it declines the question, and an answer with no value at all
  declines too. When stdin ends, questions are declined. If the tool
  refuses the answer, the reasons are shown and the question is asked
  again. --answer / --decline answer without asking.

Destructive tools:
  A tool whose annotations declare it destructive is called only once you
  answer y to \"Call it? [y/N]\" (anything else: not called, exit code 1).
  Without a terminal on stdin nobody can be asked: pass --yes, or the
  command refuses with exit code 2.";

/// `--log-level`: a level's wire name.
fn log_level(name: &str) -> Result<LogLevel, String> {
    LogLevel::parse(name)
        .ok_or_else(|| format!("`{name}` is not a log level (debug, info, notice, warning, error)"))
}

/// How the questions get answered.
enum Answers {
    /// Asked in the terminal.
    Ask,
    /// The `--answer` objects: the n-th question gets the n-th, then the last.
    Given(Vec<Value>),
    /// `--decline`.
    Decline,
}

pub(crate) async fn run(args: CallArgs) -> Result<(), Failure> {
    let answers = answers_of(&args)?;
    // `haip call` answers questions (in the terminal, or with `--answer`).
    let options = ClientOptions::new()
        .tool_input(true)
        .log_level(args.log_level);
    let client = connect_with(&args.common, options).await?;
    let params = params_of(&args, &client).await?;
    if !args.yes {
        confirm_destructive(&client, &args.tool).await?;
    }
    let call = client.call(&args.tool, params).await?;
    let mut dialogue = Dialogue::new(call, answers, Screen::new(args.common.json));
    loop {
        dialogue.ask_next().await?;
        tokio::select! {
            event = dialogue.call.next_event() => match event {
                None => break,
                Some(event) => dialogue.on_event(event).await?,
            },
            line = next_line(&mut dialogue.input), if dialogue.form.is_some() => {
                dialogue.on_line(line).await?;
            }
            _ = tokio::signal::ctrl_c(), if !dialogue.cancelled => dialogue.on_ctrl_c().await?,
        }
    }
    let Dialogue {
        call,
        mut screen,
        form,
        failure,
        ..
    } = dialogue;
    if form.is_some() {
        // The call ended while its question was being asked.
        eprintln!();
    }
    screen.finish();
    let outcome = call.outcome().await?;
    if let Some(failure) = failure {
        return Err(failure);
    }
    report(&outcome, args.common.json)
}

/// How the questions get answered: `--decline`, the `--answer` objects, or
/// else in the terminal.
fn answers_of(args: &CallArgs) -> Result<Answers, Failure> {
    if args.decline {
        return Ok(Answers::Decline);
    }
    if args.answers.is_empty() {
        return Ok(Answers::Ask);
    }
    let mut given = Vec::with_capacity(args.answers.len());
    for text in &args.answers {
        match serde_json::from_str::<Value>(text) {
            Ok(value @ Value::Object(_)) => given.push(value),
            Ok(_) => return Err(Failure::usage("--answer must be a JSON object")),
            Err(e) => return Err(Failure::usage(format!("--answer is not valid JSON: {e}"))),
        }
    }
    Ok(Answers::Given(given))
}

/// The call's params: `--params`, or the pairs typed by the tool's input
/// schema, or none.
async fn params_of(args: &CallArgs, client: &Client) -> Result<Value, Failure> {
    Ok(match &args.params {
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(value @ Value::Object(_)) => value,
            Ok(_) => return Err(Failure::usage("--params must be a JSON object")),
            Err(e) => return Err(Failure::usage(format!("--params is not valid JSON: {e}"))),
        },
        None if args.pairs.is_empty() => Value::Object(Map::new()),
        None => {
            let schema = client.schema(&args.tool).await?;
            Value::Object(coerce_pairs(&args.pairs, &schema.input_schema)?)
        }
    })
}

/// A call under way, and the dialogue with the person (or the script)
/// around it: its questions, asked one at a time, and Ctrl-C.
struct Dialogue {
    call: Call,
    answers: Answers,
    screen: Screen,
    /// Questions waiting for the one being asked.
    questions: VecDeque<Question>,
    /// The question being asked in the terminal.
    form: Option<Form>,
    /// Lines of stdin, once a question is asked there.
    input: Option<mpsc::Receiver<String>>,
    /// How many questions were answered (the next `--answer` to give).
    asked: usize,
    cancelled: bool,
    /// Piped answers are not echoed by a terminal: echo them, so the
    /// transcript on stderr reads as a dialogue.
    echo: bool,
    /// Why the call was cancelled by haip itself, reported instead of the outcome.
    failure: Option<Failure>,
}

impl Dialogue {
    fn new(call: Call, answers: Answers, screen: Screen) -> Dialogue {
        Dialogue {
            call,
            answers,
            screen,
            questions: VecDeque::new(),
            form: None,
            input: None,
            asked: 0,
            cancelled: false,
            echo: !std::io::stdin().is_terminal(),
            failure: None,
        }
    }

    /// The next questions, once the one being asked is answered: answered
    /// at once (`--answer`, `--decline`), or the next one asked.
    async fn ask_next(&mut self) -> Result<(), Failure> {
        while self.form.is_none()
            && !self.cancelled
            && let Some(question) = self.questions.pop_front()
        {
            let reply = match &self.answers {
                Answers::Ask => None,
                Answers::Decline => Some(Response::Decline),
                Answers::Given(given) => {
                    let content = given.get(self.asked).or(given.last()).cloned();
                    Some(Response::Accept(content.unwrap_or_default()))
                }
            };
            self.asked += 1;
            match reply {
                None => self.ask(&question).await?,
                Some(reply) => self.answer(&question, reply).await?,
            }
        }
        Ok(())
    }

    /// Starts asking `question` in the terminal (or dismisses one that
    /// cannot be shown).
    async fn ask(&mut self, question: &Question) -> Result<(), Failure> {
        match Form::new(question) {
            Ok(new) => {
                self.screen.pause();
                eprintln!("{}", new.intro());
                prompt(&new.ask());
                self.input.get_or_insert_with(read_stdin);
                self.form = Some(new);
                Ok(())
            }
            Err(e) => {
                self.screen.note(&format!(
                    "error: cannot show the tool's question ({e}); dismissing it"
                ));
                settle(
                    &self.call,
                    &question.request_id,
                    Response::Cancel,
                    &self.screen,
                )
                .await
            }
        }
    }

    /// Answers `question` with what the command line gave.
    async fn answer(&mut self, question: &Question, reply: Response) -> Result<(), Failure> {
        match self.call.respond(&question.request_id, reply).await {
            Ok(()) => Ok(()),
            Err(ClientError::InvalidAnswer {
                message,
                violations,
            }) => {
                // A script's answer that does not fit: asking again
                // would give the same answer.
                self.screen.note(&violations_text(&message, &violations));
                self.failure = Some(Failure::usage(
                    "--answer does not fit the tool's question; the call was cancelled",
                ));
                self.cancelled = true;
                self.call
                    .cancel(Some("the answer given does not fit the question"))
                    .await?;
                Ok(())
            }
            Err(e) => settled_badly(e, &self.screen),
        }
    }

    /// An event of the call.
    async fn on_event(&mut self, event: CallEvent) -> Result<(), Failure> {
        match event {
            CallEvent::Update(update) => self.screen.update(&update),
            CallEvent::Log(line) => {
                self.screen.log(&line);
                if let Some(form) = &self.form {
                    prompt(&form.prompt());
                }
            }
            CallEvent::Question(question) => self.questions.push_back(question),
            CallEvent::UnreadableQuestion(why) => {
                self.screen.note(&format!(
                    "error: the tool asked a question that cannot be answered ({why}); cancelling the call"
                ));
                if !self.cancelled {
                    self.cancelled = true;
                    self.call.cancel(Some("unreadable question")).await?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A line typed (or piped) for the question being asked; `None` once
    /// stdin ended.
    async fn on_line(&mut self, line: Option<String>) -> Result<(), Failure> {
        let Some(current) = self.form.as_mut() else {
            return Ok(());
        };
        if self.echo
            && let Some(line) = &line
        {
            // What a terminal would have shown as it was typed.
            eprintln!("{line}");
        }
        match current.feed(line.as_deref()) {
            Step::Next => prompt(&current.ask()),
            Step::Again(why) => {
                eprintln!("    ! {why}");
                prompt(&current.prompt());
            }
            Step::Done(reply) => {
                if line.is_none() {
                    eprintln!();
                }
                return self.reply(reply).await;
            }
        }
        Ok(())
    }

    /// Sends the answer the person gave to the question being asked; asks
    /// it again if the tool refuses the answer.
    async fn reply(&mut self, reply: Response) -> Result<(), Failure> {
        let Some(current) = self.form.as_mut() else {
            return Ok(());
        };
        let declined = reply == Response::Decline;
        match self.call.respond(current.request_id(), reply).await {
            Ok(()) => {
                if declined {
                    eprintln!("  (declined)");
                }
                self.form = None;
                self.screen.resume();
                Ok(())
            }
            Err(ClientError::InvalidAnswer {
                message,
                violations,
            }) => {
                eprintln!("{}", violations_text(&message, &violations));
                current.restart();
                prompt(&current.ask());
                Ok(())
            }
            Err(e) => {
                self.form = None;
                self.screen.resume();
                settled_badly(e, &self.screen)
            }
        }
    }

    /// Ctrl-C: the question being asked is dropped, and the call cancelled.
    async fn on_ctrl_c(&mut self) -> Result<(), Failure> {
        self.cancelled = true;
        if self.form.take().is_some() {
            eprintln!();
            self.screen.resume();
        }
        self.screen.status("cancelling");
        self.call
            .cancel(Some("cancelled from the command line"))
            .await?;
        Ok(())
    }
}

/// Asks a person before a tool that declares itself destructive is called
/// (its `TOOL_LIST` annotations, docs/protocol.md §6.13): `y` calls it, anything else
/// does not. Without a terminal on stdin nobody can be asked, so it refuses
/// (`--yes` skips this). A tool the list does not name is called: the call
/// reports it.
async fn confirm_destructive(client: &Client, tool: &str) -> Result<(), Failure> {
    let tools = client.list_tools().await?;
    let Some(info) = tools.iter().find(|t| t.name == tool) else {
        return Ok(());
    };
    if !info.annotations.declares_destructive() {
        return Ok(());
    }
    let shown = info.title.as_deref().unwrap_or(&info.name);
    if !std::io::stdin().is_terminal() {
        return Err(Failure::usage(format!(
            "{tool} is destructive ({shown}) and stdin is not a terminal to ask on; \
             pass --yes to call it anyway"
        )));
    }
    prompt(&confirm_prompt(shown));
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        }
    })
    .await
    .unwrap_or(None);
    if line.is_none() {
        eprintln!();
    }
    if confirmed(line.as_deref()) {
        Ok(())
    } else {
        Err(Failure::tool(format!("{tool} was not called")))
    }
}

/// Replies to a question whatever happens to it.
async fn settle(
    call: &Call,
    request_id: &str,
    reply: Response,
    screen: &Screen,
) -> Result<(), Failure> {
    match call.respond(request_id, reply).await {
        Ok(()) => Ok(()),
        Err(e) => settled_badly(e, screen),
    }
}

/// A reply that failed: a question already gone is a note, anything else
/// ends the command.
fn settled_badly(error: ClientError, screen: &Screen) -> Result<(), Failure> {
    match error {
        ClientError::QuestionNotFound { .. } => {
            screen.note("note: the question is no longer open");
            Ok(())
        }
        other => Err(other.into()),
    }
}

/// Prints a prompt on stderr, without a line break.
fn prompt(text: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(text.as_bytes());
    let _ = stderr.flush();
}

/// Lines of stdin, read on a thread of their own (a terminal or a pipe
/// alike); the channel closes when stdin ends. A plain thread rather than a
/// blocking task: the runtime would wait for it at exit.
fn read_stdin() -> mpsc::Receiver<String> {
    let (lines, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The next line of stdin; `None` once it ended.
async fn next_line(input: &mut Option<mpsc::Receiver<String>>) -> Option<String> {
    match input {
        Some(lines) => lines.recv().await,
        None => std::future::pending().await,
    }
}

/// The progress bar, and the lines printed above it, on stderr. The bar
/// is drawn once the tool reports progress: a tool that reports none gets
/// no bar stuck at 0 %.
struct Screen {
    bar: Option<ProgressBar>,
    json: bool,
    position: u64,
    message: String,
    /// Whether the tool has reported progress (and so has a bar).
    progressed: bool,
    /// Whether a question is being asked (the bar is off the screen).
    paused: bool,
}

impl Screen {
    fn new(json: bool) -> Screen {
        Screen {
            bar: None,
            json,
            position: 0,
            message: String::new(),
            progressed: false,
            paused: false,
        }
    }

    fn update(&mut self, update: &Update) {
        if let Some(progress) = update.progress {
            self.position = progress.clamp(0.0, 100.0).round() as u64;
            if !self.progressed {
                self.progressed = true;
                if !self.paused {
                    self.show();
                }
            }
        }
        self.set_message(&update.status);
    }

    fn set_message(&mut self, message: &str) {
        self.message = message.to_owned();
        if let Some(bar) = &self.bar {
            bar.set_position(self.position);
            bar.set_message(self.message.clone());
        }
    }

    /// A status of haip's own (`cancelling`): beside the bar, or on a line
    /// of its own without one.
    fn status(&mut self, message: &str) {
        if self.bar.as_ref().is_some_and(|bar| !bar.is_hidden()) {
            self.set_message(message);
        } else {
            self.message = message.to_owned();
            eprintln!("{message}");
        }
    }

    /// A tool's log line: `[level] message`, with its data as JSON.
    fn log(&self, line: &LogLine) {
        let mut text = format!("[{}] {}", line.level, line.message);
        if let Some(data) = &line.data {
            text.push_str(&format!(" {data}"));
        }
        self.note(&text);
    }

    /// A line above the bar (or on its own when there is no bar drawn: not a
    /// terminal, `--json`, a question being asked).
    fn note(&self, text: &str) {
        match &self.bar {
            Some(bar) if !bar.is_hidden() => bar.println(text),
            _ => eprintln!("{text}"),
        }
    }

    /// Takes the bar off the screen while a question is asked.
    fn pause(&mut self) {
        self.paused = true;
        self.hide();
    }

    /// Puts the bar back, where it was (when the tool has reported progress).
    fn resume(&mut self) {
        self.paused = false;
        if self.progressed {
            self.show();
        }
    }

    fn show(&mut self) {
        if self.bar.is_none() {
            let bar = progress_bar(self.json);
            bar.set_position(self.position);
            bar.set_message(self.message.clone());
            self.bar = Some(bar);
        }
    }

    fn hide(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }

    fn finish(&mut self) {
        self.hide();
    }
}

fn progress_bar(json: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(100), ProgressDrawTarget::stderr());
    if json {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos:>3}% {msg}") {
        bar.set_style(style);
    }
    bar
}

fn report(outcome: &Outcome, json: bool) -> Result<(), Failure> {
    match outcome {
        Outcome::Ok(result) => {
            let result = result.clone().unwrap_or(Value::Null);
            if json {
                println!("{}", serde_json::json!({"status": "OK", "result": result}));
            } else if !result.is_null() {
                print_json(&shown(result), false);
            }
            Ok(())
        }
        Outcome::Error {
            code,
            message,
            details,
        } => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"status": "ERROR", "code": code, "error": message, "details": details})
                );
                return Err(Failure::tool(""));
            }
            let mut text = format!("{code}: {message}");
            for detail in details
                .iter()
                .flat_map(|d| d.as_array().into_iter().flatten())
            {
                let path = detail["path"].as_str().unwrap_or("");
                let path = if path.is_empty() { "(params)" } else { path };
                text.push_str(&format!(
                    "\n  {path}: {}",
                    detail["message"].as_str().unwrap_or("")
                ));
            }
            if let Some(other) = details.as_ref().filter(|d| !d.is_array()) {
                text.push_str(&format!("\n  {other}"));
            }
            Err(Failure::tool(text))
        }
        Outcome::Cancelled(reason) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"status": "CANCELLED", "reason": reason})
                );
                return Err(Failure::tool(""));
            }
            Err(Failure::tool(match reason {
                Some(reason) => format!("cancelled: {reason}"),
                None => "cancelled".to_owned(),
            }))
        }
    }
}

/// A result as a person reads it: the base64 data of its content blocks
/// (images, audio, binary resources) shown as their type and size, the rest
/// as it came. `--json` prints the result untouched.
fn shown(mut result: Value) -> Value {
    let Some(blocks) = result.get_mut("content").and_then(Value::as_array_mut) else {
        return result;
    };
    for block in blocks {
        let kind = block["type"].as_str().unwrap_or_default().to_owned();
        let (holder, key) = match kind.as_str() {
            "image" | "audio" => (block, "data"),
            "resource" => (&mut block["resource"], "blob"),
            _ => continue,
        };
        let Some(data) = holder.get(key).and_then(Value::as_str) else {
            continue;
        };
        let mime = holder["mimeType"].as_str().unwrap_or(match kind.as_str() {
            "resource" => "binary",
            other => other,
        });
        let text = format!("<{mime}, {}>", size_text(decoded_len(data)));
        holder[key] = Value::String(text);
    }
    result
}

/// How many bytes base64 text decodes to.
fn decoded_len(base64: &str) -> usize {
    let text = base64.trim_end();
    let padding = text.bytes().rev().take_while(|b| *b == b'=').count().min(2);
    (text.len() / 4 * 3 + (text.len() % 4).saturating_sub(1)).saturating_sub(padding)
}

/// `512 bytes`, `12.3 KiB`, `4.0 MiB`.
fn size_text(bytes: usize) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if bytes < 1024 {
        format!("{bytes} bytes")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else {
        format!("{:.1} MiB", b / (KIB * KIB))
    }
}

/// `key=value` pairs into params, each value typed by its property's schema.
fn coerce_pairs(pairs: &[String], schema: &Value) -> Result<Map<String, Value>, Failure> {
    let mut params = Map::new();
    for pair in pairs {
        let Some((key, raw)) = pair.split_once('=') else {
            return Err(Failure::usage(format!("`{pair}` is not key=value")));
        };
        let property = &schema["properties"][key];
        params.insert(
            key.to_owned(),
            coerce(raw, property).map_err(|e| Failure::usage(format!("{key}: {e}")))?,
        );
    }
    Ok(params)
}

fn coerce(raw: &str, property: &Value) -> Result<Value, String> {
    let types: Vec<&str> = match &property["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let has = |t: &str| types.contains(&t);
    // Whole numbers stay integers, for "number" too (`5`, not `5.0`).
    if (has("integer") || has("number"))
        && let Ok(n) = raw.parse::<i64>()
    {
        return Ok(Value::from(n));
    }
    if has("number")
        && let Ok(n) = raw.parse::<f64>()
    {
        return serde_json::Number::from_f64(n)
            .map(Value::Number)
            .ok_or_else(|| format!("`{raw}` is not finite"));
    }
    if has("boolean") {
        match raw {
            "true" => return Ok(Value::Bool(true)),
            "false" => return Ok(Value::Bool(false)),
            _ => {}
        }
    }
    if has("string") || (types.is_empty() && property.get("enum").is_some()) {
        return Ok(Value::String(raw.to_owned()));
    }
    if has("array") || has("object") || types.is_empty() {
        // JSON when it parses, else the text itself (the server validates).
        return Ok(serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned())));
    }
    // A type the value does not fit: send it as text and let validation say so.
    Ok(Value::String(raw.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn images_and_binary_data_are_shown_as_type_and_size() {
        let png = vec![0u8; 3000];
        let result = json!({
            "content": [
                {"type": "text", "text": "a chart"},
                {"type": "image", "data": base64(&png), "mimeType": "image/png"},
                {"type": "audio", "data": base64(b"abcd"), "mimeType": "audio/wav"},
                {"type": "resource", "resource": {"uri": "file:///a.bin", "blob": base64(b"ab")}},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "hello"}}
            ],
            "structured": {"points": 3}
        });
        assert_eq!(
            shown(result),
            json!({
                "content": [
                    {"type": "text", "text": "a chart"},
                    {"type": "image", "data": "<image/png, 2.9 KiB>", "mimeType": "image/png"},
                    {"type": "audio", "data": "<audio/wav, 4 bytes>", "mimeType": "audio/wav"},
                    {"type": "resource", "resource": {"uri": "file:///a.bin", "blob": "<binary, 2 bytes>"}},
                    {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "hello"}}
                ],
                "structured": {"points": 3}
            })
        );
        // Results without content blocks are shown as they are.
        assert_eq!(shown(json!({"data": "x"})), json!({"data": "x"}));
        for n in 0..10 {
            assert_eq!(decoded_len(&base64(&vec![7; n])), n);
        }
        assert_eq!(size_text(5 << 20), "5.0 MiB");
    }

    fn base64(bytes: &[u8]) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn no_bar_until_the_tool_reports_progress() {
        let running = |progress| Update {
            status: "RUNNING".into(),
            progress,
            partial: None,
        };
        let mut screen = Screen::new(true);
        assert!(screen.bar.is_none(), "no bar at the start");
        screen.update(&running(None));
        assert!(screen.bar.is_none(), "a status without progress draws none");
        screen.pause();
        screen.resume();
        assert!(
            screen.bar.is_none(),
            "nor does a question asked and answered"
        );
        screen.pause();
        screen.update(&running(Some(40.0)));
        assert!(screen.bar.is_none(), "not while a question is asked");
        screen.resume();
        assert_eq!(screen.bar.as_ref().map(ProgressBar::position), Some(40));
        screen.update(&running(None));
        assert_eq!(screen.bar.as_ref().map(ProgressBar::position), Some(40));
        screen.finish();
        assert!(screen.bar.is_none());
    }

    #[test]
    fn pairs_are_typed_by_the_schema() {
        let schema = json!({"properties": {
            "a": {"type": "number"}, "n": {"type": "integer"}, "ok": {"type": "boolean"},
            "s": {"type": "string"}, "tags": {"type": "array"}, "opt": {"type": ["integer", "null"]}
        }});
        let pairs: Vec<String> = [
            "a=1.5",
            "n=7",
            "ok=true",
            "s=42",
            "tags=[1,2]",
            "opt=3",
            "free={\"x\":1}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let params = coerce_pairs(&pairs, &schema).ok().unwrap();
        assert_eq!(
            Value::Object(params),
            json!({"a": 1.5, "n": 7, "ok": true, "s": "42", "tags": [1, 2], "opt": 3, "free": {"x": 1}})
        );
        assert_eq!(coerce("5", &json!({"type": "number"})).unwrap(), json!(5));
        // A value that does not fit is sent as text: the server's validation reports it.
        assert_eq!(
            coerce("five", &json!({"type": "number"})).unwrap(),
            json!("five")
        );
        assert!(coerce_pairs(&["novalue".to_string()], &schema).is_err());
    }
}
