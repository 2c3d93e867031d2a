//! One call of a test: its events read with bounded waits, its questions
//! answered, its end checked.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::TestError;
use super::memory::Wire;
use crate::LogLevel;
use crate::client::{
    self, CallEvent, Client, ClientError, LogLine, Outcome, Question, Response, Update,
};

/// A call in flight, started with [`TestServer::start`](super::TestServer::start).
///
/// Read what it reports while it runs, each wait bounded by the test's
/// limit: [`progress`](TestCall::progress), [`log`](TestCall::log),
/// [`question`](TestCall::question) (then [`answer`](TestCall::answer) or
/// [`decline`](TestCall::decline) it), or every event in order with
/// [`next_event`](TestCall::next_event). An event one of them reads past
/// while looking for its own kind stays for the others. Then
/// [`done`](TestCall::done) waits for the call's one `TOOL_DONE`, or
/// [`cancel`](TestCall::cancel) stops it first.
///
/// ```
/// # use haip::{haip_tool, Context};
/// # use serde_json::json;
/// /// Counts to three, asking first how fast.
/// #[haip_tool]
/// async fn count(ctx: Context) -> Result<u32, haip::ToolError> {
///     ctx.info("counting");
///     for step in 1..=3 {
///         ctx.progress(f64::from(step) * 33.3);
///         tokio::task::yield_now().await;
///     }
///     Ok(3)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = haip::testing::TestServer::new(haip::Server::builder().tool(count::tool()))?;
/// let mut call = server.start("count", json!({})).await?;
/// assert_eq!(call.log().await?.message, "counting");
/// assert!(call.progress().await? > 0.0);
/// let done = call.done().await?;
/// done.assert_progress_rises();
/// assert_eq!(done.into_result()?, json!(3));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TestCall {
    call_id: String,
    /// The client's call, until its end was read.
    call: Option<client::Call>,
    client: Client,
    limit: Duration,
    wire: Arc<Wire>,
    /// Events read from the call and not yet handed out.
    unread: VecDeque<CallEvent>,
    /// Every event read, in order.
    seen: Vec<CallEvent>,
    /// How it ended, once read.
    outcome: Option<Outcome>,
    /// The message of a question handed out and not yet replied to.
    asked: Option<String>,
}

impl TestCall {
    pub(super) fn new(
        call: client::Call,
        client: Client,
        limit: Duration,
        wire: Arc<Wire>,
    ) -> TestCall {
        TestCall {
            call_id: call.call_id().to_owned(),
            call: Some(call),
            client,
            limit,
            wire,
            unread: VecDeque::new(),
            seen: Vec::new(),
            outcome: None,
            asked: None,
        }
    }

    /// The call's id.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// Every event read so far, in order (those handed out included).
    pub fn seen(&self) -> &[CallEvent] {
        &self.seen
    }

    /// The next event of the call (status or progress, a log line, a
    /// question) in the order the server sent them; `None` once the call has
    /// ended and every event was read.
    pub async fn next_event(&mut self) -> Result<Option<CallEvent>, TestError> {
        let deadline = Instant::now() + self.limit;
        loop {
            if let Some(event) = self.unread.pop_front() {
                return Ok(Some(self.hand_out(event)));
            }
            if !self.pull(deadline, "event").await? {
                return Ok(None);
            }
        }
    }

    /// The next status or progress update (`QUEUED`, `RUNNING`,
    /// `CANCELLING`, progress).
    pub async fn update(&mut self) -> Result<Update, TestError> {
        self.next_of("update", |e| match e {
            CallEvent::Update(update) => Some(update.clone()),
            _ => None,
        })
        .await
    }

    /// The percentage of the next progress report.
    ///
    /// Progress is never waited for on the wire: reports made in quick
    /// succession may reach the client as the latest one alone (docs/protocol.md
    /// §6.5), so a test asserts that progress rises
    /// ([`Finished::assert_progress_rises`]) or reaches a value, rather
    /// than on every step.
    pub async fn progress(&mut self) -> Result<f64, TestError> {
        self.next_of("progress report", |e| match e {
            CallEvent::Update(Update {
                progress: Some(p), ..
            }) => Some(*p),
            _ => None,
        })
        .await
    }

    /// The next log line of the tool (the test client takes every level,
    /// `debug` and up).
    pub async fn log(&mut self) -> Result<LogLine, TestError> {
        self.next_of("log line", |e| match e {
            CallEvent::Log(line) => Some(line.clone()),
            _ => None,
        })
        .await
    }

    /// The next question the tool asks; the call waits until it is replied
    /// to ([`answer`](TestCall::answer), [`decline`](TestCall::decline),
    /// [`cancel_question`](TestCall::cancel_question)).
    pub async fn question(&mut self) -> Result<Question, TestError> {
        self.next_of("question", |e| match e {
            CallEvent::Question(question) => Some(question.clone()),
            _ => None,
        })
        .await
    }

    /// Answers a question with `content`, and waits for the server's
    /// verdict: `Ok` once the call goes on; [`TestError::code`]
    /// `INVALID_PARAMS` when the answer does not fit (the question stays
    /// open); `REQUEST_NOT_FOUND` when it is not open.
    ///
    /// The question is the [`Question`] [`question`](TestCall::question)
    /// gave, or its `request_id`. The content is anything that serialises
    /// to an object matching its form: `json!({...})`, or a value of the
    /// struct the tool asks for with [`Context::ask`](crate::Context::ask).
    ///
    /// ```
    /// use haip::testing::TestServer;
    /// use haip::{Answer, Context, ToolError, haip_tool, json};
    ///
    /// /// What `book` asks.
    /// #[haip::data]
    /// struct Size {
    ///     /// How many people.
    ///     party_size: u8,
    /// }
    ///
    /// /// Book a table.
    /// #[haip_tool]
    /// async fn book(ctx: Context) -> Result<String, ToolError> {
    ///     match ctx.ask::<Size>("How many people?").await? {
    ///         Answer::Accepted(size) => Ok(format!("a table for {}", size.party_size)),
    ///         Answer::Declined | Answer::Cancelled => Ok("no table".to_owned()),
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = TestServer::new(haip::Server::builder().tool(book::tool()))?;
    /// let mut call = server.start("book", json!({})).await?;
    /// let question = call.question().await?;
    /// call.answer(&question, Size { party_size: 4 }).await?; // or json!({"party_size": 4})
    /// assert_eq!(call.result().await?, json!("a table for 4"));
    /// # Ok(()) }
    /// ```
    pub async fn answer(
        &mut self,
        question: impl QuestionId,
        content: impl Serialize,
    ) -> Result<(), TestError> {
        let content = serde_json::to_value(content).map_err(|e| {
            TestError::Client(ClientError::Protocol(format!(
                "the answer does not serialise: {e}"
            )))
        })?;
        self.respond(question, Response::Accept(content)).await
    }

    /// Answers the call's next question, which must be a
    /// [`Context::confirm`](crate::Context::confirm), with yes (`true`) or
    /// no (`false`), and gives the question (to check its message). A
    /// question that is not a confirmation is a [`TestError::Unexpected`],
    /// left unanswered: [`question`](TestCall::question) gives it next.
    ///
    /// ```
    /// use haip::testing::TestServer;
    /// use haip::{Context, ToolError, haip_tool, json};
    ///
    /// /// Delete a file, once the person says yes.
    /// #[haip_tool]
    /// async fn delete(path: String, ctx: Context) -> Result<String, ToolError> {
    ///     if !ctx.confirm(format!("Delete {path}?")).await? {
    ///         return Ok(format!("kept {path}"));
    ///     }
    ///     Ok(format!("deleted {path}"))
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = TestServer::new(haip::Server::builder().tool(delete::tool()))?;
    ///
    /// let mut call = server.start("delete", json!({"path": "a.txt"})).await?;
    /// assert_eq!(call.confirm(true).await?.message, "Delete a.txt?");
    /// assert_eq!(call.result().await?, json!("deleted a.txt"));
    ///
    /// let mut call = server.start("delete", json!({"path": "b.txt"})).await?;
    /// call.confirm(false).await?;
    /// assert_eq!(call.result().await?, json!("kept b.txt"));
    /// # Ok(()) }
    /// ```
    pub async fn confirm(&mut self, yes: bool) -> Result<Question, TestError> {
        let question = self.question().await?;
        let field = &question.schema["properties"]["confirm"];
        if field["type"] != "boolean" {
            let err = TestError::Unexpected(format!(
                "the question {:?} of call {} is not a ctx.confirm (its form: {})",
                question.message, self.call_id, question.schema
            ));
            // Still the next question, for `question` to give.
            self.unread.push_front(CallEvent::Question(question));
            return Err(err);
        }
        self.answer(&question, json!({ "confirm": yes })).await?;
        Ok(question)
    }

    /// Declines a question (the person chose not to answer).
    pub async fn decline(&mut self, question: impl QuestionId) -> Result<(), TestError> {
        self.respond(question, Response::Decline).await
    }

    /// Dismisses a question (closed without choosing); the call goes on.
    pub async fn cancel_question(&mut self, question: impl QuestionId) -> Result<(), TestError> {
        self.respond(question, Response::Cancel).await
    }

    /// Replies to a question, as [`answer`](TestCall::answer) does.
    pub async fn respond(
        &mut self,
        question: impl QuestionId,
        response: Response,
    ) -> Result<(), TestError> {
        match self
            .client
            .respond(&self.call_id, question.request_id(), response)
            .await
        {
            Ok(()) => {
                self.asked = None;
                Ok(())
            }
            Err(ClientError::Timeout { what, after }) => Err(TestError::Timeout {
                what,
                after,
                waiting: None,
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// Asks the server to cancel the call (`TOOL_CANCEL`); its end follows
    /// as on the wire: [`done`](TestCall::done) gives `CANCELLED`, or the
    /// tool's own end when it finished first.
    pub async fn cancel(&self, reason: Option<&str>) -> Result<(), TestError> {
        let sent = self.client.cancel(&self.call_id, reason);
        match tokio::time::timeout(self.limit, sent).await {
            Ok(sent) => Ok(sent?),
            Err(_) => Err(self.timeout("TOOL_CANCEL sent")),
        }
    }

    /// Waits for the call's end (reading every event left on the way) and
    /// checks that it came once: a second `TOOL_DONE` already seen for the
    /// call is a [`TestError::Protocol`]. The [`Finished`] call holds its
    /// outcome and every event.
    pub async fn done(mut self) -> Result<Finished, TestError> {
        let deadline = Instant::now() + self.limit;
        while self.pull(deadline, "TOOL_DONE").await? {}
        let completions = self.wire.completions(&self.call_id);
        if completions != 1 {
            return Err(TestError::Protocol(vec![format!(
                "call {} has {completions} TOOL_DONEs",
                self.call_id
            )]));
        }
        // Read before the call was let go: always there.
        let outcome = self.outcome.take().unwrap_or(Outcome::Cancelled(None));
        Ok(Finished {
            call_id: self.call_id,
            outcome,
            events: self.seen,
        })
    }

    /// Waits for the call's end and gives its result ([`Value::Null`] when
    /// the tool returned nothing), or its error.
    pub async fn result(self) -> Result<Value, TestError> {
        self.done().await?.into_result()
    }

    /// The first unread event `pick` takes, reading more as needed.
    async fn next_of<T>(
        &mut self,
        what: &str,
        pick: impl Fn(&CallEvent) -> Option<T>,
    ) -> Result<T, TestError> {
        let deadline = Instant::now() + self.limit;
        let mut from = 0;
        loop {
            if let Some(at) = self
                .unread
                .iter()
                .skip(from)
                .position(|e| pick(e).is_some())
            {
                let event = self.unread.remove(from + at).expect("found just now");
                let event = self.hand_out(event);
                return Ok(pick(&event).expect("picked just now"));
            }
            from = self.unread.len();
            if !self.pull(deadline, what).await? {
                let outcome = self.outcome.clone().unwrap_or(Outcome::Cancelled(None));
                return Err(TestError::Ended {
                    what: format!("a {what}"),
                    outcome: Box::new(outcome),
                });
            }
        }
    }

    fn hand_out(&mut self, event: CallEvent) -> CallEvent {
        if let CallEvent::Question(question) = &event {
            self.asked = Some(question.message.clone());
        }
        event
    }

    /// Reads one more event into `unread`; `false` once the call has ended
    /// (its outcome then read).
    async fn pull(&mut self, deadline: Instant, what: &str) -> Result<bool, TestError> {
        let Some(call) = self.call.as_mut() else {
            return Ok(false);
        };
        match tokio::time::timeout_at(deadline, call.next_event()).await {
            Err(_) => Err(self.timeout(what)),
            Ok(Some(event)) => {
                self.seen.push(event.clone());
                self.unread.push_back(event);
                Ok(true)
            }
            Ok(None) => {
                let call = self.call.take().expect("checked above");
                // Sent as its events ended: this takes no time.
                let outcome = tokio::time::timeout_at(deadline, call.outcome())
                    .await
                    .map_err(|_| self.timeout(what))??;
                self.outcome = Some(outcome);
                Ok(false)
            }
        }
    }

    fn timeout(&self, what: &str) -> TestError {
        let unread_question = self.unread.iter().find_map(|e| match e {
            CallEvent::Question(q) => Some(q.message.clone()),
            _ => None,
        });
        let waiting = self
            .asked
            .clone()
            .or(unread_question)
            .map(|message| format!("the tool waits for an answer to {message:?}"));
        TestError::Timeout {
            what: format!("{what} of call {}", self.call_id),
            after: self.limit,
            waiting,
        }
    }
}

/// What names a question to [`TestCall::answer`], [`decline`](TestCall::decline),
/// [`cancel_question`](TestCall::cancel_question) and
/// [`respond`](TestCall::respond): the [`Question`] itself, or its
/// `request_id` (`&str`, `&String`).
pub trait QuestionId {
    /// The question's `request_id`.
    fn request_id(&self) -> &str;
}

impl QuestionId for Question {
    fn request_id(&self) -> &str {
        &self.request_id
    }
}

impl QuestionId for str {
    fn request_id(&self) -> &str {
        self
    }
}

impl QuestionId for String {
    fn request_id(&self) -> &str {
        self
    }
}

impl<T: QuestionId + ?Sized> QuestionId for &T {
    fn request_id(&self) -> &str {
        (**self).request_id()
    }
}

/// A call that has ended: how ([`Finished::outcome`]), and everything it
/// reported on the way ([`Finished::events`]), with helpers to assert on
/// its progress and log lines.
///
/// ```
/// use haip::testing::{CallEvent, Finished, LogLine, Outcome, Update};
/// use haip::LogLevel;
/// use serde_json::json;
///
/// let done = Finished::new(
///     "c1",
///     Outcome::Ok(Some(json!({"lines": 150}))),
///     vec![
///         CallEvent::Update(Update { status: "RUNNING".into(), progress: Some(50.0), partial: None }),
///         CallEvent::Log(LogLine { level: "info".into(), message: "read 150 lines".into(), data: None }),
///         CallEvent::Update(Update { status: "RUNNING".into(), progress: Some(100.0), partial: None }),
///     ],
/// );
/// assert_eq!(done.progress(), [50.0, 100.0]);
/// done.assert_progress_rises()
///     .assert_logged(LogLevel::Info, "150 lines");
/// assert_eq!(done.into_result().unwrap(), json!({"lines": 150}));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// The call's id.
    pub call_id: String,
    /// How it ended (its `TOOL_DONE`).
    pub outcome: Outcome,
    /// Every event it reported, in order.
    pub events: Vec<CallEvent>,
}

impl Finished {
    /// A finished call (for tests of code that reads one).
    pub fn new(call_id: impl Into<String>, outcome: Outcome, events: Vec<CallEvent>) -> Finished {
        Finished {
            call_id: call_id.into(),
            outcome,
            events,
        }
    }

    /// The result ([`Value::Null`] when the tool returned nothing), or the
    /// error the call ended with.
    pub fn into_result(self) -> Result<Value, TestError> {
        TestError::from_outcome(self.outcome).map(Option::unwrap_or_default)
    }

    /// The percentages of its progress reports, in order.
    pub fn progress(&self) -> Vec<f64> {
        self.events
            .iter()
            .filter_map(|e| match e {
                CallEvent::Update(Update {
                    progress: Some(p), ..
                }) => Some(*p),
                _ => None,
            })
            .collect()
    }

    /// Its log lines, in order.
    pub fn logs(&self) -> Vec<&LogLine> {
        self.events
            .iter()
            .filter_map(|e| match e {
                CallEvent::Log(line) => Some(line),
                _ => None,
            })
            .collect()
    }

    /// The questions it asked, in order.
    pub fn questions(&self) -> Vec<&Question> {
        self.events
            .iter()
            .filter_map(|e| match e {
                CallEvent::Question(q) => Some(q),
                _ => None,
            })
            .collect()
    }

    /// Whether a log line at `level` contains `text`.
    pub fn logged(&self, level: LogLevel, text: &str) -> bool {
        self.logs()
            .iter()
            .any(|l| l.severity() == Some(level) && l.message.contains(text))
    }

    /// Panics, listing what it reported, unless it reported progress at
    /// least once and never went back.
    #[track_caller]
    pub fn assert_progress_rises(&self) -> &Finished {
        let progress = self.progress();
        assert!(
            !progress.is_empty(),
            "call {} reported no progress; its events: {:?}",
            self.call_id,
            self.events
        );
        assert!(
            progress.windows(2).all(|w| w[0] <= w[1]),
            "the progress of call {} went back: {progress:?}",
            self.call_id
        );
        self
    }

    /// Panics, listing its log lines, unless one at `level` contains `text`.
    #[track_caller]
    pub fn assert_logged(&self, level: LogLevel, text: &str) -> &Finished {
        assert!(
            self.logged(level, text),
            "call {} logged no {level} line containing {text:?}; its lines: {:?}",
            self.call_id,
            self.logs()
        );
        self
    }
}
